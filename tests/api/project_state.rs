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

#[tokio::test]
async fn a_reset_wipes_the_projects_data_and_keeps_the_project_its_keys_domains_and_members() {
    let s = Server::start_stepped().await;
    let (p, q) = (proj(&s, "o@example.com").await, proj(&s, "q@example.com").await);
    let st = Arc::clone(&s.state);
    for (x, domain) in [(&p, "shop.test"), (&q, "other.test")] {
        st.domains.add(&st.store, &x.id, domain, true, st.clock.now_ms()).await.unwrap();
        assert_eq!(
            x.secret
                .post("/v1/track", json!({ "email": "a@example.org", "event": "visit", "subscribed": true }))
                .await
                .status,
            200
        );
        let from = format!("n@{domain}");
        assert_eq!(
            x.secret.post("/templates", json!({ "name": "T", "subject": "S", "body": "b", "from": from })).await.status,
            201
        );
        let seg = json!({ "name": "all", "condition": { "logic": "AND", "groups": [] } });
        assert_eq!(x.secret.post("/segments", seg).await.status, 201);
        assert_eq!(x.secret.post("/workflows", json!({ "name": "W", "eventName": "signup" })).await.status, 201);
    }
    let send = json!({ "to": "a@example.org", "from": "n@shop.test", "subject": "s", "body": "b" });
    assert_eq!(p.secret.post("/v1/send", send).await.status, 200);
    let c = p
        .secret
        .post(
            "/campaigns",
            json!({ "name": "C", "subject": "s", "body": "<p>b</p>", "from": "n@shop.test", "audienceType": "ALL" }),
        )
        .await;
    let campaign = c.json["data"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        p.secret.post(&format!("/campaigns/{campaign}/send"), json!({})).await.json["data"]["status"],
        "SENDING"
    );
    let reset = format!("/users/@me/projects/{}/reset", p.id);
    // Only with the project's name, only by an OWNER, never while a campaign sends.
    let r = p.session.post(&reset, json!({ "confirm": "not the name" })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "confirm");
    assert_envelope(&p.session.post(&reset, json!({})).await, 422, "VALIDATION_ERROR");
    let member = signup(&s, "m@example.com").await;
    join(&s, &p.id, "m@example.com", "ADMIN").await;
    assert_envelope(&member.post(&reset, json!({ "confirm": "P" })).await, 403, "FORBIDDEN");
    assert_envelope(&q.session.post(&reset, json!({ "confirm": "P" })).await, 404, "PROJECT_NOT_FOUND");
    let r = p.session.post(&reset, json!({ "confirm": "P" })).await;
    assert_envelope(&r, 409, "CONFLICT");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("1 campaign"), "{}", r.json);
    assert_eq!(p.secret.post(&format!("/campaigns/{campaign}/cancel"), json!({})).await.status, 200);

    let r = p.session.post(&reset, json!({ "confirm": "P" })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    assert!(r.json["jobId"].as_str().is_some_and(|j| !j.is_empty()));
    crate::workflow_kit::drain(&s).await;
    // The data is gone; the key, the domain and the members are not.
    for path in ["/contacts", "/templates", "/segments", "/campaigns", "/workflows", "/events"] {
        let r = p.secret.get(path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.json);
        assert_eq!(items(&r.json), json!([]), "{path}: {}", r.json);
    }
    assert_eq!(p.secret.get(&format!("/domains/project/{}", p.id)).await.json.as_array().map(Vec::len), Some(1));
    assert_eq!(p.session.get(&format!("/projects/{}/members", p.id)).await.json.as_array().map(Vec::len), Some(2));
    // A reset does not give the month's billing allowance back.
    let usage = p.session.get(&format!("/users/@me/projects/{}/billing-consumption", p.id)).await.json;
    assert_eq!(usage["usage"]["transactional"]["used"], 1, "{usage}");
    // The other project keeps everything.
    for path in ["/contacts", "/templates", "/segments", "/workflows"] {
        let r = q.secret.get(path).await;
        assert_eq!(items(&r.json).as_array().map(Vec::len), Some(1), "{path}: {}", r.json);
    }
    s.stop().await;
}

/// The items of a list answer: a bare array, or its `data` (cursor lists) or `items` (offset lists).
fn items(v: &Value) -> Value {
    if v.is_array() {
        return v.clone();
    }
    if v["data"].is_array() { v["data"].clone() } else { v["items"].clone() }
}
