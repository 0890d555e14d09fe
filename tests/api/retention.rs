//! Retention (docs/behaviour.md#retention) with a manual clock: what each period keeps and what the
//! `retention.purge` job deletes once the clock passes it, seen through the API where the API shows it
//! (events, webhook deliveries) and through the store where it does not (email bodies, received
//! messages and their spool files, finished jobs, idempotency keys).

use std::sync::Arc;

use herald_host::config::Config;
use herald_host::infra::clock::{Clock, ManualClock};
use herald_host::infra::jobs::Outcome;
use lettre::address::Envelope;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde_json::json;

use crate::harness::*;
use crate::http_sink;

const DAY: i64 = 86_400_000;
const RP: &str = "bounces.herald.test";

/// A stepped server (manual clock, the test runs the jobs) that receives mail and may call webhooks on
/// loopback, with `configure` applied.
async fn server(configure: impl FnOnce(&mut Config)) -> Server {
    let mut config = Config::for_tests();
    config.run_jobs = false;
    config.webhooks_allow_private = true;
    config.return_path_host = Some(RP.into());
    config.smtp.listen = Some("127.0.0.1:0".parse().unwrap());
    configure(&mut config);
    Server::start_with(config, Some(ManualClock::new(1_800_000_000_000))).await
}

/// A project with the trusted sender domain `domain`.
async fn sender(s: &Server, owner: &str, domain: &str) -> Proj {
    let p = proj(s, owner).await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, domain, true, st.clock.now_ms()).await.unwrap();
    p
}

/// Runs every due job until none is left; answers whether the retention purge ran (and completed).
async fn run_jobs(s: &Server) -> bool {
    let mut purged = false;
    for _ in 0..50 {
        let ran = s.worker.run_once(50).await.unwrap();
        if ran.is_empty() {
            return purged;
        }
        for (job, outcome) in &ran {
            if job.kind == "retention.purge" {
                assert_eq!(*outcome, Outcome::Completed, "the purge completes");
                purged = true;
            }
        }
    }
    panic!("the queue did not drain");
}

/// Moves the clock to `at` (ms after the start) and runs what is due, the purge among it.
async fn at(s: &Server, t0: i64, at: i64) {
    let now = s.clock().now_ms();
    assert!(t0 + at >= now, "the clock only moves forward");
    s.clock().advance(t0 + at - now);
    assert!(run_jobs(s).await, "the purge ran at day {}", at / DAY);
}

/// Sends one email through `/v1/send`; answers its id.
async fn send(p: &Proj, domain: &str, to: &str) -> String {
    let body = json!({ "to": to, "from": format!("hi@{domain}"), "subject": "s", "body": "<p>the body</p>", "subscribed": true });
    let r = p.secret.post("/v1/send", body).await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string()
}

/// The stored HTML of an email, and its status; None when the email record is gone.
async fn email(s: &Server, project: &str, id: &str) -> Option<(String, String)> {
    s.state.store.email(project, id).await.unwrap().map(|e| (e.html, e.status.to_string()))
}

async fn track(p: &Proj, email: &str, event: &str) {
    let r = p.secret.post("/v1/track", json!({ "email": email, "event": event })).await;
    assert_eq!(r.status, 200, "{}", r.json);
}

/// The names of the project's tracked events (those of its emails left out), through the API.
async fn event_names(p: &Proj) -> Vec<String> {
    let r = p.secret.get("/events?limit=100").await;
    assert_eq!(r.status, 200, "{}", r.json);
    let mut names: Vec<String> = r.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .filter(|n| ["signup", "renewal", "keyed"].contains(&n.as_str()))
        .collect();
    names.sort();
    names
}

/// The event types of an endpoint's deliveries, through the API.
async fn deliveries(p: &Proj, webhook: &str) -> Vec<String> {
    let r = p.secret.get(&format!("/webhooks/{webhook}/deliveries")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let mut types: Vec<String> = r.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["eventType"].as_str().unwrap_or_default().to_string())
        .collect();
    types.sort();
    types
}

async fn count(s: &Server, sql: &str) -> i64 {
    let v = s.state.store.query(sql, json!({})).await.unwrap().value(0).unwrap();
    v[0]["n"].as_i64().unwrap_or(0)
}

/// Receives a message over SMTP to the return path; its job is then dead-lettered (the message could not
/// be applied), so it stays unapplied. Answers the message's id.
async fn unapplied_message(s: &Server, subject: &str) -> String {
    let port = s.running.as_ref().and_then(|r| r.smtp_addr).expect("the SMTP server listens").port();
    let t = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1").port(port).build();
    let envelope = Envelope::new(None, vec![format!("b@{RP}").parse().unwrap()]).unwrap();
    let raw = format!("From: x@example.org\r\nTo: b@{RP}\r\nSubject: {subject}\r\n\r\nhello\r\n");
    t.send_raw(&envelope, raw.as_bytes()).await.expect("the message is taken");
    let now = s.clock().now_ms();
    let v = s
        .state
        .store
        .query(
            "UPDATE job SET status = 'dead', finished_at = $now, updated_at = $now, last_error = 'test'
                WHERE kind = 'inbound.process' AND status = 'queued';
             SELECT VALUE record::id(id) FROM inbound_message WHERE received_at = $now;",
            json!({ "now": now }),
        )
        .await
        .unwrap()
        .value(1)
        .unwrap();
    v[0].as_str().expect("the message is stored").to_string()
}

fn spooled(s: &Server) -> Vec<String> {
    let dir = &s.state.config.smtp.spool_dir;
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().to_string()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Each kind is kept for its period and purged by the job once the clock passes it: unapplied received
/// messages (7 days) with their spool files, finished jobs (7 days), expired idempotency keys, webhook
/// deliveries (30 days) with their payloads, events (here 60 days) and email bodies (90 days, the
/// emails staying); what is younger stays, in every project.
#[tokio::test]
async fn retention_purges_each_kind_once_its_period_has_passed_and_keeps_what_is_younger() {
    let s = server(|c| c.retention.event_ms = Some(60 * DAY)).await;
    let t0 = s.clock().now_ms();
    let p = sender(&s, "p@example.com", "shop.test").await;
    let q = sender(&s, "q@example.com", "other.test").await;
    let sink = http_sink::start(200, "ok").await;
    let r = p.secret.post("/webhooks", json!({ "url": sink.url("/hook"), "events": ["signup", "renewal"] })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let hook = r.json["id"].as_str().unwrap().to_string();

    // Day 0: an email in each project, events (one delivered to the endpoint), a keyed request, and a
    // message that cannot be applied.
    let old_p = send(&p, "shop.test", "a@example.org").await;
    let old_q = send(&q, "other.test", "b@example.org").await;
    track(&p, "a@example.org", "signup").await;
    track(&q, "b@example.org", "signup").await;
    let keyed = p
        .secret
        .http
        .post(format!("{}/v1/track", p.secret.base))
        .bearer_auth(p.secret.bearer.as_deref().unwrap())
        .header("Idempotency-Key", "k-1")
        .json(&json!({ "email": "c@example.org", "event": "keyed" }))
        .send()
        .await
        .unwrap();
    assert_eq!(keyed.status().as_u16(), 200);
    let first = unapplied_message(&s, "first").await;
    assert!(run_jobs(&s).await);
    s.clock().advance(1_000);
    run_jobs(&s).await;
    assert_eq!(deliveries(&p, &hook).await, vec!["signup"]);
    assert_eq!(email(&s, &p.id, &old_p).await.unwrap(), ("<p>the body</p>".to_string(), "SENT".to_string()));
    assert_eq!(count(&s, "SELECT count() AS n FROM idempotency GROUP ALL").await, 1);
    let dead = count(&s, "SELECT count() AS n FROM job WHERE status = 'dead' GROUP ALL").await;
    assert!(dead >= 1, "the message's job is dead-lettered");
    assert_eq!(spooled(&s), vec![format!("{first}.eml")]);

    // Day 2: a second message that cannot be applied.
    s.clock().advance(2 * DAY);
    let second = unapplied_message(&s, "second").await;
    assert!(run_jobs(&s).await);
    assert_eq!(count(&s, "SELECT count() AS n FROM inbound_message GROUP ALL").await, 2, "both kept within 7 days");

    // Day 8: the first message is past 7 days, with the day-0 jobs; the idempotency key expired after a
    // day. The rest stays.
    at(&s, t0, 8 * DAY).await;
    assert_eq!(count(&s, "SELECT count() AS n FROM inbound_message GROUP ALL").await, 1);
    assert!(s.state.store.inbound_exists(&second).await.unwrap(), "the younger message stays");
    assert_eq!(spooled(&s), vec![format!("{second}.eml")], "the purged message's spool file went with it");
    assert_eq!(count(&s, "SELECT count() AS n FROM idempotency GROUP ALL").await, 0);
    assert_eq!(
        count(&s, "SELECT count() AS n FROM job WHERE status = 'dead' AND kind = 'inbound.process' GROUP ALL").await,
        1,
        "the day-0 dead job is gone, the day-2 one stays"
    );
    assert_eq!(deliveries(&p, &hook).await, vec!["signup"]);
    assert_eq!(event_names(&p).await, vec!["keyed", "signup"]);

    // Day 25: newer rows of every kind.
    at(&s, t0, 25 * DAY).await;
    let young_p = send(&p, "shop.test", "a@example.org").await;
    track(&p, "a@example.org", "renewal").await;
    s.clock().advance(1_000);
    run_jobs(&s).await;
    assert_eq!(deliveries(&p, &hook).await, vec!["renewal", "signup"]);

    // Day 31: the day-0 delivery (and its payload) is past 30 days; the day-25 one stays. The second
    // message is past 7 days.
    let payloads = count(&s, "SELECT count() AS n FROM webhook_payload GROUP ALL").await;
    assert_eq!(payloads, 2);
    at(&s, t0, 31 * DAY).await;
    assert_eq!(deliveries(&p, &hook).await, vec!["renewal"]);
    assert_eq!(count(&s, "SELECT count() AS n FROM webhook_payload GROUP ALL").await, 1, "its payload went with it");
    assert_eq!(count(&s, "SELECT count() AS n FROM inbound_message GROUP ALL").await, 0);
    assert_eq!(spooled(&s), Vec::<String>::new());
    assert_eq!(event_names(&p).await, vec!["keyed", "renewal", "signup"], "events are kept for 60 days");

    // Day 61: the day-0 events are past 60 days, in both projects; the day-25 one stays.
    at(&s, t0, 61 * DAY).await;
    assert_eq!(event_names(&p).await, vec!["renewal"]);
    assert_eq!(event_names(&q).await, Vec::<String>::new());
    assert_eq!(email(&s, &p.id, &old_p).await.unwrap().0, "<p>the body</p>", "bodies are kept 90 days");

    // Day 91: the day-0 bodies are past 90 days, in both projects; the emails stay, with their status.
    at(&s, t0, 91 * DAY).await;
    assert_eq!(email(&s, &p.id, &old_p).await.unwrap(), (String::new(), "SENT".to_string()));
    assert_eq!(email(&s, &q.id, &old_q).await.unwrap(), (String::new(), "SENT".to_string()));
    assert_eq!(email(&s, &p.id, &young_p).await.unwrap().0, "<p>the body</p>", "the day-25 body stays");
    s.stop().await;
}

/// By default events are kept for ever while email bodies go after 90 days.
#[tokio::test]
async fn retention_keeps_events_for_ever_by_default() {
    let s = server(|_| {}).await;
    assert_eq!(s.state.config.retention.event_ms, None);
    let p = sender(&s, "p@example.com", "shop.test").await;
    let id = send(&p, "shop.test", "a@example.org").await;
    track(&p, "a@example.org", "signup").await;
    run_jobs(&s).await;
    let t0 = s.clock().now_ms();
    at(&s, t0, 400 * DAY).await;
    assert_eq!(event_names(&p).await, vec!["signup"]);
    assert_eq!(email(&s, &p.id, &id).await.unwrap(), (String::new(), "SENT".to_string()));
    s.stop().await;
}
