//! The suppression list (docs/behaviour.md#suppressions): its endpoints with their errors, one
//! project's list never reaching another, every send path (transactional, campaign, workflow)
//! recording a suppressed recipient's email as SUPPRESSED without delivering it, and hard bounces and
//! complaints adding to the list.

use std::sync::Arc;

use herald_host::config::Config;
use herald_host::infra::clock::ManualClock;
use serde_json::json;

use crate::harness::*;
use crate::smtp_sink::SmtpSink;
use crate::workflow_kit::{contact, drain};

struct Env {
    s: Server,
    p: Proj,
    sink: SmtpSink,
}

/// A server with the sender domain `shop.test`, an SMTP sink, and no job workers: each test runs the
/// queue itself.
async fn env() -> Env {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.run_jobs = false;
    config.send_rate_per_second = 0;
    let s = Server::start_with(config, Some(ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "owner@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    drain(&s).await;
    Env { s, p, sink }
}

async fn status_of(e: &Env, id: &str) -> (String, Option<String>) {
    let row = e.s.state.store.email(&e.p.id, id).await.unwrap().unwrap();
    (row.status.to_string(), row.error)
}

fn delivered_to(sink: &SmtpSink) -> Vec<String> {
    let mut to: Vec<String> = sink.received().iter().flat_map(|m| m.to.clone()).collect();
    to.sort();
    to
}

#[tokio::test]
async fn the_list_takes_addresses_and_domains_pages_them_and_refuses_bad_input_by_field() {
    let e = env().await;
    let c = &e.p.secret;
    let r = c.post("/suppressions", json!({ "email": " Ann@Example.com ", "detail": "asked by phone" })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(r.json["value"], "ann@example.com");
    assert_eq!(r.json["type"], "address");
    assert_eq!(r.json["reason"], "manual");
    assert_eq!(r.json["detail"], "asked by phone");
    assert!(r.json["createdAt"].as_str().is_some());
    // Added again: the entry there stands, with its first reason.
    let r = c.post("/suppressions", json!({ "email": "ann@example.com", "reason": "complaint" })).await;
    assert_eq!((r.status, r.json["reason"].clone()), (200, json!("manual")), "{}", r.json);
    let r = c.post("/suppressions", json!({ "domain": "@Spam.Test", "reason": "complaint" })).await;
    assert_eq!((r.status, r.json["type"].clone(), r.json["value"].clone()), (201, json!("domain"), json!("spam.test")));
    assert_eq!(c.post("/suppressions", json!({ "email": "zed@example.com" })).await.status, 201);

    for (body, field) in [
        (json!({}), "email"),
        // Found by the schema fuzzer: a null was a 500.
        (json!({ "email": null }), "email"),
        (json!({ "domain": null }), "email"),
        (json!({ "email": "not an address" }), "email"),
        (json!({ "domain": "not a domain" }), "domain"),
        (json!({ "domain": "x@example.com" }), "domain"),
        (json!({ "email": "a@example.com", "domain": "example.com" }), "domain"),
        (json!({ "email": "a@example.com", "reason": "angry" }), "reason"),
        (json!({ "email": "a@example.com", "detail": "x".repeat(501) }), "detail"),
    ] {
        let r = c.post("/suppressions", body.clone()).await;
        assert_envelope(&r, 422, "VALIDATION_ERROR");
        let fields: Vec<&str> =
            r.json["error"]["errors"].as_array().unwrap().iter().filter_map(|f| f["field"].as_str()).collect();
        assert!(fields.contains(&field), "{body}: {}", r.json);
    }

    // Pages in value order, each once; a reason filters; the total is the whole list.
    let mut seen = Vec::new();
    let mut cursor = String::new();
    for _ in 0..10 {
        let r = c.get(&format!("/suppressions?limit=2&cursor={cursor}")).await;
        assert_eq!(r.status, 200, "{}", r.json);
        assert_eq!(r.json["total"], 3);
        seen.extend(r.json["data"].as_array().unwrap().iter().map(|s| s["value"].as_str().unwrap().to_string()));
        if r.json["hasMore"] != true {
            break;
        }
        cursor = r.json["cursor"].as_str().unwrap().to_string();
    }
    assert_eq!(seen, vec!["ann@example.com", "spam.test", "zed@example.com"]);
    let r = c.get("/suppressions?reason=complaint").await;
    assert_eq!(r.json["data"].as_array().unwrap().len(), 1, "{}", r.json);
    assert_envelope(&c.get("/suppressions?reason=angry").await, 400, "BAD_REQUEST");
    assert_envelope(&c.get("/suppressions?cursor=garbage").await, 400, "BAD_REQUEST");

    // One entry by its value; removed once.
    assert_eq!(c.get("/suppressions/spam.test").await.json["reason"], "complaint");
    assert_eq!(c.get("/suppressions/ANN@example.com").await.json["value"], "ann@example.com");
    assert_eq!(c.delete("/suppressions/ann@example.com").await.status, 204);
    assert_envelope(&c.delete("/suppressions/ann@example.com").await, 404, "SUPPRESSION_NOT_FOUND");
    assert_envelope(&c.get("/suppressions/ann@example.com").await, 404, "SUPPRESSION_NOT_FOUND");
    assert_envelope(&c.get("/suppressions/no%20such%20thing").await, 400, "BAD_REQUEST");
    // The public key cannot read or change it.
    assert_eq!(e.p.public.get("/suppressions").await.status, 401);
    assert_eq!(e.p.public.post("/suppressions", json!({ "email": "b@example.com" })).await.status, 401);
}

#[tokio::test]
async fn one_projects_list_never_reaches_or_stops_another_projects_mail() {
    let e = env().await;
    let other = proj(&e.s, "other@example.com").await;
    let st = Arc::clone(&e.s.state);
    st.domains.add(&st.store, &other.id, "other.test", true, st.clock.now_ms()).await.unwrap();
    assert_eq!(e.p.secret.post("/suppressions", json!({ "email": "ann@example.com" })).await.status, 201);
    let r = other.secret.get("/suppressions").await;
    assert_eq!((r.json["total"].clone(), r.json["data"].clone()), (json!(0), json!([])), "{}", r.json);
    assert_envelope(&other.secret.get("/suppressions/ann@example.com").await, 404, "SUPPRESSION_NOT_FOUND");
    assert_envelope(&other.secret.delete("/suppressions/ann@example.com").await, 404, "SUPPRESSION_NOT_FOUND");
    assert_eq!(e.p.secret.get("/suppressions/ann@example.com").await.status, 200, "another key removed it");

    let r = other
        .secret
        .post("/v1/send", json!({ "to": "ann@example.com", "from": "hi@other.test", "subject": "s", "body": "b" }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert!(r.json["data"]["emails"][0].get("suppressed").is_none(), "{}", r.json);
    drain(&e.s).await;
    assert_eq!(delivered_to(&e.sink), vec!["ann@example.com"]);
}

#[tokio::test]
async fn a_suppressed_recipient_is_recorded_and_not_sent_on_every_send_path() {
    let e = env().await;
    let c = &e.p.secret;
    assert_eq!(c.post("/suppressions", json!({ "email": "ann@example.com" })).await.status, 201);
    assert_eq!(c.post("/suppressions", json!({ "domain": "spam.test", "reason": "complaint" })).await.status, 201);

    // Transactional: the answer names the suppressed recipients; only the other one is delivered.
    let r = c
        .post(
            "/v1/send",
            json!({ "to": ["ann@example.com", "bob@example.com", "eve@spam.test"], "from": "hi@shop.test", "subject": "s", "body": "b" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let emails = r.json["data"]["emails"].as_array().unwrap().clone();
    assert!(emails[0]["suppressed"].as_str().unwrap().contains("ann@example.com"), "{}", r.json);
    assert!(emails[1].get("suppressed").is_none(), "{}", r.json);
    let why = emails[2]["suppressed"].as_str().unwrap();
    assert!(why.contains("spam.test is on") && why.ends_with("(complaint)"), "{}", r.json);
    drain(&e.s).await;
    assert_eq!(delivered_to(&e.sink), vec!["bob@example.com"]);
    let (status, error) = status_of(&e, emails[0]["email"].as_str().unwrap()).await;
    assert_eq!(status, "SUPPRESSED");
    assert!(error.unwrap().contains("suppression list"));
    assert_eq!(status_of(&e, emails[1]["email"].as_str().unwrap()).await.0, "SENT");

    // A campaign to everyone: the suppressed contacts' emails are recorded, the others delivered.
    let r = c
        .post(
            "/campaigns",
            json!({ "name": "News", "subject": "News", "body": "<p>News</p>", "from": "news@shop.test", "audienceType": "ALL" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    let campaign = r.json["data"]["id"].as_str().or(r.json["id"].as_str()).unwrap().to_string();
    for email in ["ann@example.com", "bob@example.com", "eve@spam.test", "cat@example.com"] {
        contact(&e.p, email, true, json!({})).await;
    }
    assert_eq!(c.post(&format!("/campaigns/{campaign}/send"), json!({})).await.status, 200);
    drain(&e.s).await;
    assert_eq!(
        delivered_to(&e.sink),
        vec!["bob@example.com", "bob@example.com", "cat@example.com"],
        "the campaign reached the suppressed"
    );
    let rows = e
        .s
        .state
        .store
        .query("SELECT recipient, status FROM email WHERE campaign = $c ORDER BY recipient", json!({ "c": campaign }))
        .await
        .unwrap()
        .value(0)
        .unwrap();
    let statuses: Vec<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r["recipient"].as_str().unwrap(), r["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        statuses,
        vec!["ann@example.com SUPPRESSED", "bob@example.com SENT", "cat@example.com SENT", "eve@spam.test SUPPRESSED",]
    );
    for _ in 0..5 {
        if c.get(&format!("/campaigns/{campaign}")).await.json["status"] == "SENT" {
            break;
        }
        e.s.clock().advance(60_000); // the progress job's next turn
        drain(&e.s).await;
    }
    assert_eq!(c.get(&format!("/campaigns/{campaign}")).await.json["status"], "SENT", "suppressed emails are final");

    // A workflow's SEND_EMAIL step: the step completes, its email is recorded, nothing is delivered.
    let t = c
        .post(
            "/templates",
            json!({ "name": "Hi", "type": "TRANSACTIONAL", "subject": "Hi", "body": "<p>Hi</p>", "from": "hi@shop.test" }),
        )
        .await;
    let template = t.json["id"].as_str().unwrap().to_string();
    let r = c.post("/workflows", json!({ "name": "Hello", "eventName": "hello" })).await;
    let wf = r.json["id"].as_str().unwrap().to_string();
    let step = json!({ "type": "SEND_EMAIL", "name": "hi", "templateId": template });
    assert_eq!(c.post(&format!("/workflows/{wf}/steps"), step).await.status, 201);
    assert_eq!(c.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await.status, 200);
    let before = e.sink.received().len();
    let ann = c.get("/contacts?search=ann@example.com").await.json["data"][0]["id"].as_str().unwrap().to_string();
    let r = c.post(&format!("/workflows/{wf}/executions"), json!({ "contactId": ann })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let run = r.json["id"].as_str().unwrap().to_string();
    drain(&e.s).await;
    let x = c.get(&format!("/workflows/{wf}/executions/{run}")).await.json;
    assert_eq!(x["status"], "COMPLETED", "{x}");
    let email = x["stepExecutions"][1]["output"]["emailId"].as_str().unwrap_or_else(|| panic!("{x}")).to_string();
    assert_eq!(status_of(&e, &email).await.0, "SUPPRESSED");
    assert_eq!(e.sink.received().len(), before, "the workflow mailed a suppressed address");
}

#[tokio::test]
async fn hard_bounces_and_complaints_put_the_address_on_the_list() {
    let e = env().await;
    let c = &e.p.secret;
    // The sink refuses `bounce...` recipients with 550 5.1.1.
    let r = c
        .post("/v1/send", json!({ "to": "bounce@example.org", "from": "hi@shop.test", "subject": "s", "body": "b" }))
        .await;
    let first = r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string();
    drain(&e.s).await;
    assert_eq!(status_of(&e, &first).await.0, "BOUNCED");
    let entry = c.get("/suppressions/bounce@example.org").await;
    assert_eq!(entry.status, 200, "{}", entry.json);
    assert_eq!(entry.json["reason"], "bounce");
    assert_eq!(entry.json["emailId"], first);
    assert!(entry.json["detail"].as_str().unwrap().contains("5.1.1"), "{}", entry.json);
    let r = c
        .post("/v1/send", json!({ "to": "bounce@example.org", "from": "hi@shop.test", "subject": "s", "body": "b" }))
        .await;
    assert!(r.json["data"]["emails"][0]["suppressed"].is_string(), "{}", r.json);

    // A complaint notification about a delivered email.
    let r = c
        .post("/v1/send", json!({ "to": "carl@example.org", "from": "hi@shop.test", "subject": "s", "body": "b" }))
        .await;
    let id = r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string();
    drain(&e.s).await;
    let row = e.s.state.store.email(&e.p.id, &id).await.unwrap().unwrap();
    let ts = e.s.state.clock.now_ms() / 1000;
    let body = json!({ "type": "complaint", "messageId": row.message_id, "reason": "abuse" });
    assert_eq!(notification(&e.s, &body, ts, None).await.status, 200);
    let entry = c.get("/suppressions/carl@example.org").await;
    assert_eq!((entry.json["reason"].clone(), entry.json["emailId"].clone()), (json!("complaint"), json!(id)));
}

#[tokio::test]
async fn an_address_suppressed_after_its_email_was_queued_is_sent_nothing() {
    let e = env().await;
    let c = &e.p.secret;
    let r = c
        .post("/v1/send", json!({ "to": ["ann@example.com", "bob@example.com"], "from": "hi@shop.test", "subject": "s", "body": "b" }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let emails = r.json["data"]["emails"].as_array().unwrap().clone();
    assert!(emails.iter().all(|m| m.get("suppressed").is_none()), "{}", r.json);
    // Queued, not yet delivered: then the address goes on the list.
    assert_eq!(c.post("/suppressions", json!({ "email": "Ann@Example.com" })).await.status, 201);
    drain(&e.s).await;
    assert_eq!(delivered_to(&e.sink), vec!["bob@example.com"]);
    let (status, error) = status_of(&e, emails[0]["email"].as_str().unwrap()).await;
    assert_eq!(status, "SUPPRESSED");
    assert!(error.unwrap_or_default().contains("ann@example.com"));
    assert_eq!(status_of(&e, emails[1]["email"].as_str().unwrap()).await.0, "SENT");
}
