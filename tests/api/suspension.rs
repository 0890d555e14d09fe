//! Automatic suspension (docs/behaviour.md#project-setup-and-security): bounces injected through a
//! real SMTP sink on loopback pass the bounce threshold; the project is suspended, its sending refused
//! with the reason, its deliveries held; lifting the suspension sends them, none lost, none twice.

use std::sync::Arc;

use herald_host::config::Config;
use herald_host::infra::clock::ManualClock;
use serde_json::{Value, json};

use crate::harness::*;
use crate::smtp_sink::SmtpSink;
use crate::workflow_kit::drain;

const T0: i64 = 1_800_000_000_000; // 2027-01-15T08:00:00Z

async fn security(p: &Proj) -> Value {
    p.session.get(&format!("/users/@me/projects/{}/security", p.id)).await.json
}

fn send(to: &[String], from: &str) -> Value {
    json!({ "to": to, "from": from, "subject": "Hi", "body": "<p>Hi</p>" })
}

/// Moves the clock a minute at a time, running the queue, until `done` holds (30 minutes at most).
async fn step_until(s: &Server, p: &Proj, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..30 {
        drain(s).await;
        let sec = security(p).await;
        if done(&sec) {
            return sec;
        }
        s.clock().advance(61_000);
    }
    panic!("never got there: {}", security(p).await);
}

fn to_campaign(sink: &SmtpSink) -> usize {
    sink.received().iter().filter(|m| m.to[0].starts_with("fan")).count()
}

#[tokio::test]
async fn bounces_past_the_threshold_suspend_the_project_and_lifting_it_sends_what_was_held() {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.run_jobs = false;
    config.send_rate_per_second = 0;
    config.suspend_min_sent = 4;
    // The OWNER may lift a suspension an hour after it began (by default only the operator can).
    config.self_unsuspend_after_hours = Some(1);
    let s = Server::start_with(config, Some(ManualClock::new(T0))).await;
    let (p, q) = (proj(&s, "owner@example.com").await, proj(&s, "q@example.com").await);
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, T0).await.unwrap();
    st.domains.add(&st.store, &q.id, "other.test", true, T0).await.unwrap();
    drain(&s).await;

    // A campaign scheduled for two hours from now, to three fans.
    for i in 1..=3 {
        p.secret.post("/contacts", json!({ "email": format!("fan{i}@example.org"), "subscribed": true })).await;
    }
    let c = p.secret.post("/campaigns", crate::campaigns::campaign("Later")).await;
    let campaign = c.json["data"]["id"].as_str().unwrap().to_string();
    let r =
        p.secret.post(&format!("/campaigns/{campaign}/send"), json!({ "scheduledFor": "2027-01-15 10:00:00" })).await;
    assert_eq!(r.json["data"]["status"], "SCHEDULED", "{}", r.json);

    // Four accepted, four refused with 550 by the relay: a 100% bounce rate over 4 sent (the minimum).
    let to: Vec<String> =
        (1..=4).flat_map(|i| [format!("ok{i}@example.org"), format!("bounce{i}@example.org")]).collect();
    assert_eq!(p.secret.post("/v1/send", send(&to, "hi@shop.test")).await.status, 200);
    let sec = step_until(&s, &p, |sec| sec["status"] == "SUSPENDED").await;
    let reason = sec["suspensionReason"].as_str().unwrap().to_string();
    assert!(reason.contains("bounce rate") && reason.contains("4 of 4 sent"), "{sec}");
    assert_eq!(sec["suspensions"][0]["reason"], reason.as_str());
    assert!(sec["suspensions"][0]["liftedAt"].is_null());
    let feed = p.secret.get("/activity?type=project.suspended").await.json;
    assert_eq!(feed["data"][0]["data"]["reason"], reason.as_str(), "{feed}");

    // Sending is refused with the reason; the other project sends on.
    let r = p.secret.post("/v1/send", send(&["x@example.org".into()], "hi@shop.test")).await;
    assert_envelope(&r, 403, "PROJECT_DISABLED");
    assert!(r.json["error"]["message"].as_str().unwrap().contains(&reason), "{}", r.json);
    let r = p.secret.post(&format!("/campaigns/{campaign}/test"), json!({ "email": "owner@example.com" })).await;
    assert_envelope(&r, 403, "PROJECT_DISABLED");
    assert_eq!(q.secret.post("/v1/send", send(&["y@example.org".into()], "hi@other.test")).await.status, 200);

    // The scheduled campaign comes due while suspended: its emails are written and held, not sent.
    s.clock().advance(2 * 3_600_000);
    drain(&s).await;
    s.clock().advance(61_000);
    drain(&s).await;
    assert_eq!(to_campaign(&sink), 0, "nothing goes out while suspended");
    let stats = p.secret.get(&format!("/campaigns/{campaign}/stats")).await.json;
    assert_eq!(stats["pendingCount"], 3, "{stats}");
    let held = st
        .store
        .query(
            "SELECT count() AS n FROM job WHERE status = 'held' AND held_project = $p GROUP ALL",
            json!({ "p": p.id }),
        )
        .await
        .unwrap()
        .value(0)
        .unwrap();
    assert!(held[0]["n"].as_i64().unwrap() >= 1, "{held}");

    // Only the project's OWNER lifts it (more than the hour's cool-down later); then the held emails
    // go out, each once.
    let unsuspend = format!("/users/@me/projects/{}/unsuspend", p.id);
    assert_envelope(&q.session.post(&unsuspend, json!({})).await, 404, "PROJECT_NOT_FOUND");
    let r = p.session.post(&unsuspend, json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert!(r.json["releasedJobs"].as_u64().unwrap() >= 1, "{}", r.json);
    assert_envelope(&p.session.post(&unsuspend, json!({})).await, 409, "CONFLICT");
    for _ in 0..5 {
        drain(&s).await;
        s.clock().advance(61_000);
    }
    let mut fans: Vec<String> =
        sink.received().iter().filter(|m| m.to[0].starts_with("fan")).map(|m| m.to[0].clone()).collect();
    fans.sort();
    assert_eq!(fans, ["fan1@example.org", "fan2@example.org", "fan3@example.org"]);
    let c = p.secret.get(&format!("/campaigns/{campaign}")).await.json;
    assert_eq!((c["status"].as_str(), c["sentCount"].as_i64()), (Some("SENT"), Some(3)), "{c}");

    // Sending works again, and what was counted before the lift does not suspend it again.
    assert_eq!(p.secret.post("/v1/send", send(&["x@example.org".into()], "hi@shop.test")).await.status, 200);
    for _ in 0..3 {
        drain(&s).await;
        s.clock().advance(61_000);
    }
    let sec = security(&p).await;
    assert_ne!(sec["status"], "SUSPENDED", "{sec}");
    assert_eq!(sec["suspensions"][0]["liftedBy"], "owner@example.com");
    assert!(sec["suspensions"][0]["liftedAt"].is_string());
    let feed = p.secret.get("/activity?type=project.unsuspended").await.json;
    assert_eq!(feed["data"].as_array().unwrap().len(), 1, "{feed}");
    assert_eq!(security(&q).await["status"], "ACTIVE", "the other project was never touched");
}

async fn stepped(sink: &SmtpSink) -> Server {
    stepped_with(sink, None).await
}

async fn stepped_with(sink: &SmtpSink, self_unsuspend_after_hours: Option<u64>) -> Server {
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.run_jobs = false;
    config.send_rate_per_second = 0;
    config.self_unsuspend_after_hours = self_unsuspend_after_hours;
    Server::start_with(config, Some(ManualClock::new(T0))).await
}

#[tokio::test]
async fn an_owner_cannot_lift_an_automatic_suspension_the_operator_can() {
    let sink = SmtpSink::start(0).await;
    let s = stepped(&sink).await;
    let p = proj(&s, "owner@example.com").await;
    let st = Arc::clone(&s.state);
    assert!(st.store.suspend_project(&p.id, "the bounce rate of the last 7 days is too high", T0).await.unwrap());

    // Lifting is the operator's: the OWNER is told so, and the project stays suspended.
    let unsuspend = format!("/users/@me/projects/{}/unsuspend", p.id);
    let r = p.session.post(&unsuspend, json!({})).await;
    assert_envelope(&r, 403, "UNSUSPEND_NOT_ALLOWED");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("herald project unsuspend"), "{}", r.json);
    s.clock().advance(6 * 24 * 3_600_000);
    assert_envelope(&p.session.post(&unsuspend, json!({})).await, 403, "UNSUSPEND_NOT_ALLOWED");
    assert_eq!(security(&p).await["status"], "SUSPENDED");

    // `herald project unsuspend` lifts it.
    let released = herald_host::services::suspension::operator_unsuspend(&st, &p.id).await.unwrap();
    assert_eq!(released, 0);
    let sec = security(&p).await;
    assert_eq!(sec["status"], "ACTIVE", "{sec}");
    assert_eq!(sec["suspensions"][0]["liftedBy"], "operator");
}

#[tokio::test]
async fn a_reset_keeps_the_figures_the_suspension_check_reads() {
    let sink = SmtpSink::start(0).await;
    let s = stepped(&sink).await;
    let p = proj(&s, "owner@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, T0).await.unwrap();
    drain(&s).await;
    let to: Vec<String> =
        (1..=4).flat_map(|i| [format!("ok{i}@example.org"), format!("bounce{i}@example.org")]).collect();
    assert_eq!(p.secret.post("/v1/send", send(&to, "hi@shop.test")).await.status, 200);
    let before = step_until(&s, &p, |sec| sec["last7Days"]["bounced"] == 4).await;
    assert_eq!(before["last7Days"]["sent"], 4, "{before}");

    let r = p.session.post(&format!("/users/@me/projects/{}/reset", p.id), json!({ "confirm": "P" })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    drain(&s).await;
    assert_eq!(p.secret.get("/contacts").await.json["data"], json!([]), "the data is gone");
    // The figures are not: a reset does not wipe a sender's record.
    let after = security(&p).await;
    assert_eq!(after["last7Days"], before["last7Days"], "{after}");
    assert_eq!(after["last30Days"], before["last30Days"], "{after}");
}

#[tokio::test]
async fn deleting_a_project_purges_its_suspensions() {
    let sink = SmtpSink::start(0).await;
    let s = stepped(&sink).await;
    let (p, q) = (proj(&s, "owner@example.com").await, proj(&s, "q@example.com").await);
    let st = Arc::clone(&s.state);
    for x in [&p, &q] {
        assert!(st.store.suspend_project(&x.id, "too many bounces", T0).await.unwrap());
    }
    let r = p.session.delete(&format!("/users/@me/projects/{}", p.id)).await;
    assert!(r.status == 200 || r.status == 204, "{}", r.json);
    drain(&s).await;
    let count = |id: String| {
        let st = Arc::clone(&st);
        async move {
            let v = st
                .store
                .query("SELECT count() AS n FROM suspension WHERE project = $p GROUP ALL", json!({ "p": id }))
                .await
                .unwrap()
                .value(0)
                .unwrap();
            v[0]["n"].as_i64().unwrap_or(0)
        }
    };
    assert_eq!(count(p.id.clone()).await, 0);
    assert_eq!(count(q.id.clone()).await, 1, "another project's are kept");
}

#[tokio::test]
async fn where_the_operator_allows_it_an_owner_lifts_a_suspension_after_the_cool_down() {
    let sink = SmtpSink::start(0).await;
    let s = stepped_with(&sink, Some(24)).await;
    let p = proj(&s, "owner@example.com").await;
    let st = Arc::clone(&s.state);
    assert!(st.store.suspend_project(&p.id, "the complaint rate is too high", T0).await.unwrap());
    let unsuspend = format!("/users/@me/projects/{}/unsuspend", p.id);

    // Before the cool-down the OWNER is told from when; an ADMIN never.
    s.clock().advance(23 * 3_600_000);
    let r = p.session.post(&unsuspend, json!({})).await;
    assert_envelope(&r, 403, "UNSUSPEND_NOT_ALLOWED");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("2027-01-16T08:00:00.000Z"), "{}", r.json);
    let admin = signup(&s, "admin@example.com").await;
    join(&s, &p.id, "admin@example.com", "ADMIN").await;
    s.clock().advance(3_600_000);
    assert_envelope(&admin.post(&unsuspend, json!({})).await, 403, "FORBIDDEN");

    // After it, the OWNER may.
    let r = p.session.post(&unsuspend, json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let sec = security(&p).await;
    assert_eq!(sec["status"], "ACTIVE", "{sec}");
    assert_eq!(sec["suspensions"][0]["liftedBy"], "owner@example.com");
    assert_envelope(&p.session.post(&unsuspend, json!({})).await, 409, "CONFLICT");

    // A new suspension starts its own cool-down.
    assert!(st.store.suspend_project(&p.id, "the bounce rate is too high", T0 + 24 * 3_600_000).await.unwrap());
    assert_envelope(&p.session.post(&unsuspend, json!({})).await, 403, "UNSUSPEND_NOT_ALLOWED");
}
