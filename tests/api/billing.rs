//! Billing (docs/behaviour.md#billing): limits and consumption per calendar month and category,
//! enforced on `/v1/send` (402), on campaign emails (recorded as not sent, with the reason) and on
//! workflow emails (the step skipped with the reason); the payment endpoints without a provider.

use std::sync::Arc;

use herald_host::config::Config;
use serde_json::{Value, json};

use crate::harness::*;
use crate::smtp_sink::SmtpSink;

async fn env() -> (Server, SmtpSink, Proj) {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "owner@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    (s, sink, p)
}

fn send(to: &[&str]) -> Value {
    json!({ "to": to, "from": "hello@shop.test", "subject": "Hi", "body": "<p>Hi</p>" })
}

/// Polls `path` until `done` holds (ten seconds at most).
async fn until(c: &Client, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..200 {
        let r = c.get(path).await;
        if done(&r.json) {
            return r.json;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{path} never got there: {}", c.get(path).await.json);
}

#[tokio::test]
async fn limits_cap_each_category_and_consumption_counts_what_was_accepted() {
    let (s, sink, p) = env().await;
    let (owner, id) = (&p.session, p.id.clone());
    let limits = format!("/users/@me/projects/{id}/billing-limits");
    let usage = format!("/users/@me/projects/{id}/billing-consumption");

    // Nothing set: unlimited, nothing used, this calendar month.
    let r = owner.get(&limits).await;
    assert_eq!(r.json, json!({ "transactional": null, "campaigns": null, "workflows": null, "inbound": null }));
    let c = owner.get(&usage).await.json;
    assert_eq!(c["usage"]["transactional"], json!({ "used": 0, "limit": null, "percent": null }));
    let (start, end) = (c["period"]["start"].as_str().unwrap(), c["period"]["end"].as_str().unwrap());
    assert!(start.ends_with("-01T00:00:00.000Z") && end.ends_with("-01T00:00:00.000Z"), "{c}");
    assert!(start < end);

    // Bad limits are refused, naming the field.
    for (body, field) in [
        (json!({ "sms": 5 }), "sms"),
        (json!({ "transactional": -1 }), "transactional"),
        (json!({ "campaigns": "5" }), "campaigns"),
        (json!({ "workflows": 1.5 }), "workflows"),
    ] {
        let r = owner.put(&limits, body).await;
        assert_envelope(&r, 422, "VALIDATION_ERROR");
        assert_eq!(r.json["error"]["errors"][0]["field"], field);
    }
    let r = owner.put(&limits, json!({ "transactional": 3, "campaigns": 2, "workflows": 1 })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json, json!({ "transactional": 3, "campaigns": 2, "workflows": 1, "inbound": null }));
    // Categories left out keep their limit.
    let r = owner.put(&limits, json!({ "inbound": 0 })).await;
    assert_eq!(r.json, json!({ "transactional": 3, "campaigns": 2, "workflows": 1, "inbound": 0 }));

    // Transactional: the send that would pass the limit is refused whole, before anything is written.
    let api = &p.secret;
    assert_eq!(api.post("/v1/send", send(&["a@example.org", "b@example.org"])).await.status, 200);
    let c = owner.get(&usage).await.json;
    assert_eq!(c["usage"]["transactional"], json!({ "used": 2, "limit": 3, "percent": 66.67 }));
    let r = api.post("/v1/send", send(&["c@example.org", "d@example.org"])).await;
    assert_envelope(&r, 402, "BILLING_LIMIT_EXCEEDED");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("transactional"), "{}", r.json);
    assert_eq!(api.get("/contacts?limit=100").await.json["data"].as_array().unwrap().len(), 2, "nothing written");
    assert_eq!(api.post("/v1/send", send(&["c@example.org"])).await.status, 200);
    assert_envelope(&api.post("/v1/send", send(&["d@example.org"])).await, 402, "BILLING_LIMIT_EXCEEDED");
    sink.wait_for(3).await;

    // Campaigns: to four contacts with room for two, two go out and two are recorded as not sent.
    let mut ks = Vec::new();
    for e in ["k1@example.org", "k2@example.org", "k3@example.org", "k4@example.org"] {
        let r = api.post("/contacts", json!({ "email": e, "subscribed": true, "data": { "group": "k" } })).await;
        ks.push(r.json["id"].as_str().unwrap().to_string());
    }
    let mut body = crate::campaigns::campaign("Capped");
    body["audienceType"] = json!("FILTERED");
    body["audienceCondition"] = json!({ "logic": "AND", "groups": [{ "filters": [{ "field": "data.group", "operator": "equals", "value": "k" }] }] });
    let r = api.post("/campaigns", body).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let cid = r.json["data"]["id"].as_str().unwrap().to_string();
    assert_eq!(api.post(&format!("/campaigns/{cid}/send"), json!({})).await.status, 200);
    let done = until(api, &format!("/campaigns/{cid}"), |c| c["status"] == "SENT").await;
    assert_eq!(done["totalRecipients"], 4, "{done}");
    let stats = api.get(&format!("/campaigns/{cid}/stats")).await.json;
    assert_eq!((stats["sentCount"].clone(), stats["cancelledCount"].clone()), (json!(2), json!(2)), "{stats}");
    let skipped = s
        .state
        .store
        .query("SELECT VALUE error FROM email WHERE campaign = $c AND status = 'CANCELLED'", json!({ "c": cid }))
        .await
        .unwrap()
        .value(0)
        .unwrap();
    let reasons = skipped.as_array().unwrap();
    assert_eq!(reasons.len(), 2);
    assert!(reasons.iter().all(|r| r.as_str().unwrap().starts_with("BILLING_LIMIT_EXCEEDED")), "{skipped}");
    sink.wait_for(5).await;

    // Workflows: one email a month; the second contact's SEND_EMAIL step is skipped with the reason.
    let t = api
        .post("/templates", json!({ "name": "W", "type": "TRANSACTIONAL", "subject": "W", "body": "<p>W</p>", "from": "news@shop.test" }))
        .await;
    let tid = t.json["id"].as_str().unwrap().to_string();
    let wf = api.post("/workflows", json!({ "name": "Welcome", "eventName": "joined" })).await.json["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = api
        .post(&format!("/workflows/{wf}/steps"), json!({ "type": "SEND_EMAIL", "name": "hi", "templateId": tid }))
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(api.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await.status, 200);
    let mut runs = Vec::new();
    for contact in &ks[..2] {
        let r = api.post(&format!("/workflows/{wf}/executions"), json!({ "contactId": contact })).await;
        assert_eq!(r.status, 201, "{}", r.json);
        runs.push(r.json["id"].as_str().unwrap().to_string());
        // One after the other, so the first is counted before the second is planned.
        let path = format!("/workflows/{wf}/executions/{}", runs.last().unwrap());
        until(api, &path, |x| x["status"] == "COMPLETED").await;
    }
    let second = api.get(&format!("/workflows/{wf}/executions/{}", runs[1])).await.json;
    assert_eq!(second["stepExecutions"][1]["status"], "SKIPPED", "{second}");
    let reason = second["stepExecutions"][1]["output"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("BILLING_LIMIT_EXCEEDED") && reason.contains("workflows"), "{reason}");
    let first = api.get(&format!("/workflows/{wf}/executions/{}", runs[0])).await.json;
    assert_eq!(first["stepExecutions"][1]["status"], "COMPLETED", "{first}");
    sink.wait_for(6).await;

    let c = owner.get(&usage).await.json;
    assert_eq!(c["usage"]["transactional"]["used"], 3);
    assert_eq!(c["usage"]["campaigns"], json!({ "used": 2, "limit": 2, "percent": 100.0 }));
    assert_eq!(c["usage"]["workflows"], json!({ "used": 1, "limit": 1, "percent": 100.0 }));
    assert_eq!(c["usage"]["inbound"], json!({ "used": 0, "limit": 0, "percent": 100.0 }));

    // Lifting the limit lets sending go on.
    assert_eq!(owner.put(&limits, json!({ "transactional": null })).await.status, 200);
    assert_eq!(api.post("/v1/send", send(&["d@example.org"])).await.status, 200);

    // Another project is untouched: its own (unlimited) limits and nothing consumed.
    let other = proj(&s, "other@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &other.id, "other.test", true, st.clock.now_ms()).await.unwrap();
    let oc = other.session.get(&format!("/users/@me/projects/{}/billing-consumption", other.id)).await.json;
    assert_eq!(oc["usage"]["transactional"], json!({ "used": 0, "limit": null, "percent": null }));
    let mut b = send(&["x@example.org"]);
    b["from"] = json!("hi@other.test");
    assert_eq!(other.secret.post("/v1/send", b).await.status, 200);
    // And it cannot see or change this project's billing.
    assert_envelope(&other.session.get(&limits).await, 404, "PROJECT_NOT_FOUND");
    assert_envelope(&other.session.put(&limits, json!({ "campaigns": 1 })).await, 404, "PROJECT_NOT_FOUND");
}

#[tokio::test]
async fn roles_govern_billing_and_payments_need_a_provider() {
    let s = Server::start().await;
    let (owner, p) = project(&s, "boss@example.com", "Shop").await;
    let id = p["id"].as_str().unwrap();
    let admin = signup(&s, "admin@example.com").await;
    let member = signup(&s, "member@example.com").await;
    for (email, role) in [("admin@example.com", "ADMIN"), ("member@example.com", "MEMBER")] {
        join(&s, id, email, role).await;
    }
    let limits = format!("/users/@me/projects/{id}/billing-limits");
    let usage = format!("/users/@me/projects/{id}/billing-consumption");
    // ADMINs read billing; only OWNERs change it; MEMBERs see none of it.
    assert_eq!(admin.get(&limits).await.status, 200);
    assert_eq!(admin.get(&usage).await.status, 200);
    assert_envelope(&admin.put(&limits, json!({ "campaigns": 1 })).await, 403, "FORBIDDEN");
    assert_envelope(&member.get(&limits).await, 403, "FORBIDDEN");
    assert_envelope(&member.get(&usage).await, 403, "FORBIDDEN");
    assert_eq!(owner.put(&limits, json!({ "campaigns": 1 })).await.status, 200);

    // No payment provider on this server: the payment endpoints say so (to an OWNER), and /config too.
    for (method, path) in [("POST", "checkout"), ("POST", "billing-portal"), ("GET", "billing-invoices")] {
        let url = format!("/users/@me/projects/{id}/{path}");
        let body = (method == "POST").then(|| json!({}));
        assert_envelope(&owner.send(method, &url, body.clone()).await, 400, "BILLING_DISABLED");
        assert_envelope(&admin.send(method, &url, body).await, 403, "FORBIDDEN");
    }
    assert_eq!(s.client().get("/config").await.json["features"]["billing"], false);
    let r = s.client().post("/webhooks/incoming/payments", json!({ "type": "checkout.session.completed" })).await;
    assert_envelope(&r, 400, "BILLING_DISABLED");
}

/// How many emails of the project are in the database.
async fn emails_of(s: &Server, project: &str) -> i64 {
    let v = s
        .state
        .store
        .query("SELECT count() AS n FROM email WHERE project = $p GROUP ALL", json!({ "p": project }))
        .await
        .unwrap()
        .value(0)
        .unwrap();
    v[0]["n"].as_i64().unwrap_or(0)
}

#[tokio::test]
async fn a_limit_holds_against_concurrent_sends() {
    let (s, _sink, p) = env().await;
    let limits = format!("/users/@me/projects/{}/billing-limits", p.id);
    assert_eq!(p.session.put(&limits, json!({ "transactional": 10 })).await.status, 200);

    // Forty sends at once, one recipient each, against a limit of ten: exactly ten are accepted.
    let sends = (0..40).map(|i| {
        let api = p.secret.clone();
        async move { api.post("/v1/send", send(&[&format!("c{i}@example.org")])).await }
    });
    let out = futures_util::future::join_all(sends).await;
    let accepted = out.iter().filter(|r| r.status == 200).count();
    for r in out.iter().filter(|r| r.status != 200) {
        assert_envelope(r, 402, "BILLING_LIMIT_EXCEEDED");
    }
    assert_eq!(accepted, 10, "{:?}", out.iter().map(|r| r.status).collect::<Vec<_>>());
    let c = p.session.get(&format!("/users/@me/projects/{}/billing-consumption", p.id)).await.json;
    assert_eq!(c["usage"]["transactional"]["used"], 10, "{c}");
    assert_eq!(emails_of(&s, &p.id).await, 10);
    // And nothing more fits afterwards.
    assert_envelope(&p.secret.post("/v1/send", send(&["late@example.org"])).await, 402, "BILLING_LIMIT_EXCEEDED");
}

#[tokio::test]
async fn campaign_batches_written_at_once_do_not_pass_the_limit() {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.run_jobs = false;
    config.campaign_batch_size = 1;
    let s = Server::start_with(config, Some(herald_host::infra::clock::ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "owner@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let limits = format!("/users/@me/projects/{}/billing-limits", p.id);
    assert_eq!(p.session.put(&limits, json!({ "campaigns": 3 })).await.status, 200);
    for i in 0..12 {
        let r = p.secret.post("/contacts", json!({ "email": format!("k{i}@example.org"), "subscribed": true })).await;
        assert!(r.status == 200 || r.status == 201, "{}", r.json);
    }
    let cid = p.secret.post("/campaigns", crate::campaigns::campaign("Capped")).await.json["data"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(p.secret.post(&format!("/campaigns/{cid}/send"), json!({})).await.status, 200);
    // The worker claims the twelve batch jobs together and runs them at the same time.
    crate::workflow_kit::drain(&s).await;
    let counts = st
        .store
        .query("SELECT status, count() AS n FROM email WHERE campaign = $c GROUP BY status", json!({ "c": cid }))
        .await
        .unwrap()
        .value(0)
        .unwrap();
    let of = |status: &str| {
        counts.as_array().unwrap().iter().find(|r| r["status"] == status).map_or(0, |r| r["n"].as_i64().unwrap())
    };
    assert_eq!(of("CANCELLED"), 9, "{counts}");
    assert_eq!(12 - of("CANCELLED"), 3, "{counts}");
    let c = p.session.get(&format!("/users/@me/projects/{}/billing-consumption", p.id)).await.json;
    assert_eq!(c["usage"]["campaigns"]["used"], 3, "{c}");
}

#[tokio::test]
async fn workflow_emails_of_one_round_do_not_pass_the_limit() {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.run_jobs = false;
    let s = Server::start_with(config, Some(herald_host::infra::clock::ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "owner@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let limits = format!("/users/@me/projects/{}/billing-limits", p.id);
    assert_eq!(p.session.put(&limits, json!({ "workflows": 3 })).await.status, 200);
    let t = p
        .secret
        .post("/templates", json!({ "name": "W", "type": "TRANSACTIONAL", "subject": "W", "body": "<p>W</p>", "from": "news@shop.test" }))
        .await;
    let tid = t.json["id"].as_str().unwrap().to_string();
    let wf = p.secret.post("/workflows", json!({ "name": "Welcome", "eventName": "joined" })).await.json["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = p
        .secret
        .post(&format!("/workflows/{wf}/steps"), json!({ "type": "SEND_EMAIL", "name": "hi", "templateId": tid }))
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await.status, 200);
    crate::workflow_kit::drain(&s).await;
    // Ten contacts join before the queue runs: their executions start, and send, in one round.
    for i in 0..10 {
        let r = p.secret.post("/v1/track", json!({ "email": format!("j{i}@example.org"), "event": "joined" })).await;
        assert_eq!(r.status, 200, "{}", r.json);
    }
    for _ in 0..6 {
        s.clock().advance(1_000);
        crate::workflow_kit::drain(&s).await;
    }
    let c = p.session.get(&format!("/users/@me/projects/{}/billing-consumption", p.id)).await.json;
    assert_eq!(c["usage"]["workflows"]["used"], 3, "{c}");
    assert_eq!(emails_of(&s, &p.id).await, 3);
    let runs = p.secret.get(&format!("/workflows/{wf}/executions?pageSize=100")).await.json;
    assert_eq!(runs["total"], 10, "every contact's execution ran: {runs}");
}

/// Marks a user's address as verified (as its verification link would).
#[tokio::test]
async fn campaign_test_sends_count_obey_the_limit_and_go_only_to_members_who_proved_their_address() {
    let (s, sink, p) = env().await;
    let api = &p.secret;
    let cid = api.post("/campaigns", crate::campaigns::campaign("Preview")).await.json["data"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let test = format!("/campaigns/{cid}/test");

    // A member whose address was never verified (accounts from before sign-ups waited for their
    // address can be) is no way to mail that address, nor is an address only invited.
    unverified_user(&s, "victim@example.org", None).await;
    join(&s, &p.id, "victim@example.org", "MEMBER").await;
    let r = p
        .session
        .post(&format!("/projects/{}/members", p.id), json!({ "email": "invited@example.org", "role": "MEMBER" }))
        .await;
    assert_eq!(r.status, 202, "{}", r.json);
    for to in ["victim@example.org", "invited@example.org", "stranger@example.org"] {
        let r = api.post(&test, json!({ "email": to })).await;
        assert_envelope(&r, 422, "VALIDATION_ERROR");
        assert_eq!(r.json["error"]["errors"][0]["field"], "email", "{to}");
    }

    // To the owner, whose address is verified, the test goes out, and counts in the campaigns category.
    let limits = format!("/users/@me/projects/{}/billing-limits", p.id);
    assert_eq!(p.session.put(&limits, json!({ "campaigns": 2 })).await.status, 200);
    for _ in 0..2 {
        let r = api.post(&test, json!({ "email": "owner@example.com" })).await;
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let c = p.session.get(&format!("/users/@me/projects/{}/billing-consumption", p.id)).await.json;
    assert_eq!(c["usage"]["campaigns"]["used"], 2, "{c}");
    // The limit holds for test sends too.
    let r = api.post(&test, json!({ "email": "owner@example.com" })).await;
    assert_envelope(&r, 402, "BILLING_LIMIT_EXCEEDED");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("campaigns"), "{}", r.json);
    sink.wait_for(2).await;
    assert_eq!(emails_of(&s, &p.id).await, 2);
}
