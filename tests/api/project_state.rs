//! A project's setup state and security figures (docs/behaviour.md#project-setup-and-security): what the
//! onboarding checklist reads, and the bounce and complaint rates the dashboard shows.

use std::sync::Arc;
use std::time::Duration;

use herald_host::config::Config;
use serde_json::{Value, json};

use crate::harness::*;
use crate::smtp_sink::SmtpSink;

async fn setup_state(p: &Proj) -> Value {
    let r = p.session.get(&format!("/projects/{}/setup-state", p.id)).await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json
}

#[tokio::test]
async fn the_setup_state_moves_as_a_project_is_set_up() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let none = json!({
        "hasVerifiedDomain": false, "hasTemplate": false, "hasContacts": false, "hasSentEmail": false,
        "hasCampaign": false, "hasWorkflow": false, "completed": false,
    });
    assert_eq!(setup_state(&p).await, none);
    // An unverified domain is not enough.
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "pending.test", false, st.clock.now_ms()).await.unwrap();
    assert_eq!(setup_state(&p).await["hasVerifiedDomain"], false);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let t = p
        .secret
        .post("/templates", json!({ "name": "T", "subject": "S", "body": "<p>b</p>", "from": "a@shop.test" }))
        .await;
    assert_eq!(t.status, 201, "{}", t.json);
    crate::workflow_kit::contact(&p, "c@example.org", true, json!({})).await;
    let got = setup_state(&p).await;
    assert_eq!(
        [&got["hasVerifiedDomain"], &got["hasTemplate"], &got["hasContacts"], &got["hasSentEmail"]],
        [&json!(true), &json!(true), &json!(true), &json!(false)]
    );
    let r = p
        .secret
        .post("/v1/send", json!({ "to": "c@example.org", "from": "a@shop.test", "subject": "s", "body": "b" }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    for _ in 0..200 {
        if setup_state(&p).await["hasSentEmail"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(setup_state(&p).await["hasSentEmail"], true, "once the email went out");
    let c = p
        .secret
        .post(
            "/campaigns",
            json!({ "name": "C", "subject": "s", "body": "<p>b</p>", "from": "a@shop.test", "audienceType": "ALL" }),
        )
        .await;
    assert_eq!(c.status, 201, "{}", c.json);
    assert_eq!(setup_state(&p).await["completed"], false);
    let w = p.secret.post("/workflows", json!({ "name": "W", "eventName": "signup" })).await;
    assert_eq!(w.status, 201, "{}", w.json);
    let all = setup_state(&p).await;
    assert!(all.as_object().unwrap().values().all(|v| *v == json!(true)), "{all}");

    // Another user's session sees nothing of it; another project's state is its own.
    let q = proj(&s, "q@example.com").await;
    assert_envelope(&q.session.get(&format!("/projects/{}/setup-state", p.id)).await, 404, "PROJECT_NOT_FOUND");
    assert_eq!(setup_state(&q).await, none);
    assert_envelope(&s.client().get(&format!("/projects/{}/setup-state", p.id)).await, 401, "UNAUTHORIZED");
    s.stop().await;
}

#[tokio::test]
async fn security_shows_bounce_and_complaint_rates_over_7_and_30_days_against_the_thresholds() {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let security = |path: String| {
        let c = p.session.clone();
        async move {
            let r = c.get(&path).await;
            assert_eq!(r.status, 200, "{}", r.json);
            r.json
        }
    };
    let path = format!("/projects/{}/security", p.id);
    let fresh = security(path.clone()).await;
    assert_eq!(fresh["status"], "ACTIVE");
    assert_eq!(fresh["thresholds"], json!({ "bounceRate": 5.0, "complaintRate": 0.1, "minimumSent": 500 }));
    assert_eq!(
        fresh["last7Days"],
        json!({ "sent": 0, "bounced": 0, "complained": 0, "bounceRate": 0.0, "complaintRate": 0.0 })
    );
    // Three sent, one refused at hand-over: a 33% bounce rate on a volume below the minimum.
    for to in ["a@example.org", "b@example.org", "c@example.org", "bounce@example.org"] {
        let r =
            p.secret.post("/v1/send", json!({ "to": to, "from": "n@shop.test", "subject": "s", "body": "b" })).await;
        assert_eq!(r.status, 200, "{}", r.json);
    }
    sink.wait_for(3).await;
    let mut got = Value::Null;
    for _ in 0..200 {
        got = security(path.clone()).await;
        if got["last7Days"]["bounced"] == 1 && got["last7Days"]["sent"] == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        got["last7Days"],
        json!({ "sent": 3, "bounced": 1, "complained": 0, "bounceRate": 33.33, "complaintRate": 0.0 })
    );
    assert_eq!(got["last30Days"], got["last7Days"]);
    assert_eq!(got["status"], "WARNING", "above a threshold, below the volume that suspends");
    // The same through the account path; not for another user.
    assert_eq!(security(format!("/users/@me/projects/{}/security", p.id)).await, got);
    let q = proj(&s, "q@example.com").await;
    assert_envelope(&q.session.get(&path).await, 404, "PROJECT_NOT_FOUND");
    assert_eq!(q.session.get(&format!("/projects/{}/security", q.id)).await.json["last30Days"]["sent"], 0);
    s.stop().await;
}
