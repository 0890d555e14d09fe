//! Workflow steps that act (docs/behaviour.md#workflows): SEND_EMAIL through the delivery pipeline to a
//! real SMTP sink on loopback, with bulk headers on marketing mail, skipped for an unsubscribed contact,
//! failed for an unverified sender.

use std::sync::Arc;

use herald_host::config::Config;
use herald_host::infra::clock::ManualClock;
use herald_host::store::templates::TemplateRow;
use serde_json::{Value, json};

use crate::harness::*;
use crate::smtp_sink::{SmtpSink, header, html_of};
use crate::workflow_kit::{contact, drain};

async fn template(p: &Proj, name: &str, kind: &str, subject: &str, body: &str) -> String {
    let r = p
        .secret
        .post(
            "/templates",
            json!({ "name": name, "type": kind, "subject": subject, "body": body, "from": "news@shop.test" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    r.json["id"].as_str().unwrap().to_string()
}

async fn run_of(p: &Proj, wf: &str, id: &str) -> Value {
    p.secret.get(&format!("/workflows/{wf}/executions/{id}")).await.json
}

fn statuses(e: &Value) -> Vec<String> {
    e["stepExecutions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r["stepType"].as_str().unwrap(), r["status"].as_str().unwrap()))
        .collect()
}

#[tokio::test]
async fn send_email_delivers_once_marks_marketing_as_bulk_and_skips_the_unsubscribed() {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.run_jobs = false;
    config.send_rate_per_second = 0;
    let s = Server::start_with(config, Some(ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let news = template(&p, "News", "MARKETING", "Hi {{name}} from {{event.source}}", "<p>Hello {{name}}</p>").await;
    let note = template(&p, "Note", "TRANSACTIONAL", "{{name}} joined", "<p>{{name}} joined via {{source}}</p>").await;

    let r = p.secret.post("/workflows", json!({ "name": "Welcome", "eventName": "signup" })).await;
    let wf = r.json["id"].as_str().unwrap().to_string();
    for body in [
        json!({ "type": "SEND_EMAIL", "name": "news", "templateId": news }),
        json!({ "type": "SEND_EMAIL", "name": "tell the boss", "templateId": note, "config": { "recipient": { "type": "CUSTOM", "customEmail": "{{boss}}" } } }),
    ] {
        assert_eq!(p.secret.post(&format!("/workflows/{wf}/steps"), body).await.status, 201);
    }
    p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await;
    let ann = contact(&p, "ann@example.com", true, json!({ "name": "Ann", "boss": "Boss@Corp.test" })).await;
    let ben = contact(&p, "ben@example.com", false, json!({ "name": "Ben", "boss": "chief@corp.test" })).await;
    let mut runs = Vec::new();
    for c in [&ann, &ben] {
        let r = p
            .secret
            .post(&format!("/workflows/{wf}/executions"), json!({ "contactId": c, "context": { "source": "ads" } }))
            .await;
        assert_eq!(r.status, 201, "{}", r.json);
        runs.push(r.json["id"].as_str().unwrap().to_string());
    }
    drain(&s).await;
    let got = sink.wait_for(3).await;
    drain(&s).await;
    assert_eq!(
        sink.received().len(),
        3,
        "each email once: {:?}",
        sink.received().iter().map(|m| &m.to).collect::<Vec<_>>()
    );

    let to_ann: Vec<_> = got.iter().filter(|m| m.to == vec!["ann@example.com".to_string()]).collect();
    assert_eq!(to_ann.len(), 1);
    let m = &to_ann[0].data;
    assert_eq!(header(m, "Subject").as_deref(), Some("Hi Ann from ads"), "the context renders as {{{{event.x}}}}");
    assert_eq!(header(m, "Precedence").as_deref(), Some("bulk"));
    assert_eq!(header(m, "Auto-Submitted").as_deref(), Some("auto-generated"));
    assert!(header(m, "List-Unsubscribe").is_some());
    let bosses: Vec<_> = got.iter().filter(|m| m.to[0].ends_with("@corp.test")).collect();
    assert_eq!(bosses.len(), 2, "the custom recipient, rendered and lowercased");
    assert!(bosses.iter().any(|m| m.to == vec!["boss@corp.test".to_string()]));
    assert!(header(&bosses[0].data, "Precedence").is_none(), "transactional mail is not bulk");
    assert!(html_of(bosses[0]).contains("joined via ads"), "top-level context keys render too");

    let a = run_of(&p, &wf, &runs[0]).await;
    assert_eq!(a["status"], "COMPLETED");
    assert_eq!(statuses(&a), vec!["TRIGGER COMPLETED", "SEND_EMAIL COMPLETED", "SEND_EMAIL COMPLETED"]);
    assert_eq!(a["stepExecutions"][1]["output"]["to"], "ann@example.com");
    let b = run_of(&p, &wf, &runs[1]).await;
    assert_eq!(statuses(&b), vec!["TRIGGER COMPLETED", "SEND_EMAIL SKIPPED", "SEND_EMAIL COMPLETED"]);
    assert!(b["stepExecutions"][1]["output"]["reason"].as_str().unwrap().contains("unsubscribed"));
    s.stop().await;
}

#[tokio::test]
async fn an_unverified_sender_fails_the_step_with_its_reason() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    // A template whose sender domain was never verified (written past the API's own check).
    let now = st.clock.now_ms();
    let t = TemplateRow {
        id: "t-unverified".into(),
        name: "x".into(),
        description: None,
        subject: "s".into(),
        body: "<p>b</p>".into(),
        from: "news@nowhere.test".into(),
        from_name: None,
        reply_to: None,
        kind: "TRANSACTIONAL".into(),
        created_at: now,
        updated_at: now,
    };
    st.store.save_template(&p.id, &t).await.unwrap();
    let r = p.secret.post("/workflows", json!({ "name": "W", "eventName": "e" })).await;
    let wf = r.json["id"].as_str().unwrap().to_string();
    let step = p
        .secret
        .post(
            &format!("/workflows/{wf}/steps"),
            json!({ "type": "SEND_EMAIL", "name": "s", "templateId": "t-unverified" }),
        )
        .await;
    assert_eq!(step.status, 201, "{}", step.json);
    p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await;
    let c = contact(&p, "c@example.com", true, json!({})).await;
    let id = p.secret.post(&format!("/workflows/{wf}/executions"), json!({ "contactId": c })).await.json["id"]
        .as_str()
        .unwrap()
        .to_string();
    drain(&s).await;
    let e = run_of(&p, &wf, &id).await;
    assert_eq!(e["status"], "FAILED", "{e}");
    assert!(e["error"].as_str().unwrap().contains("nowhere.test"), "{e}");
    assert_eq!(statuses(&e), vec!["TRIGGER COMPLETED", "SEND_EMAIL FAILED"]);
    s.stop().await;
}

/// A stepped server with the first-party step plugins and the misbehaving fixture; `private`: the
/// webhook may call loopback (the operator's consent).
async fn with_plugins(private: bool) -> Server {
    use herald_host::config::PluginGrant;
    let mut config = Config::for_tests();
    config.run_jobs = false;
    for a in [crate::plugin_kit::WEBHOOK, crate::plugin_kit::UPDATE_CONTACT, crate::plugin_kit::BAD_STEP] {
        crate::plugin_kit::install(&config.plugins_dir, a);
    }
    config.plugin_grants.insert("misbehaving-step".into(), PluginGrant { timeout_ms: Some(200), ..Default::default() });
    if private {
        config.plugin_grants.insert("webhook".into(), PluginGrant { allow_private: true, ..Default::default() });
    }
    Server::start_with(config, Some(ManualClock::new(1_800_000_000_000))).await
}

async fn chain(p: &Proj, steps: Vec<Value>) -> String {
    let r = p.secret.post("/workflows", json!({ "name": "W", "eventName": "e" })).await;
    let wf = r.json["id"].as_str().unwrap().to_string();
    for body in steps {
        let r = p.secret.post(&format!("/workflows/{wf}/steps"), body.clone()).await;
        assert_eq!(r.status, 201, "{body}: {}", r.json);
    }
    p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await;
    wf
}

#[tokio::test]
async fn plugin_steps_change_the_contact_with_the_step_and_call_the_webhook_with_a_stable_key() {
    let sink = crate::http_sink::start(500, "{\"down\": true}").await;
    let s = with_plugins(true).await;
    let p = proj(&s, "o@example.com").await;
    let wf = chain(
        &p,
        vec![
            json!({ "type": "UPDATE_CONTACT", "name": "tag", "config": { "updates": { "onboarded": true }, "subscriptionAction": "unsubscribe" } }),
            json!({ "type": "WEBHOOK", "name": "tell", "config": { "url": sink.url("/hook"), "method": "POST",
                "body": { "email": "{{contact.email}}", "onboarded": "{{contact.data.onboarded}}" } } }),
            json!({ "type": "EXIT", "name": "done" }),
        ],
    )
    .await;
    let c = contact(&p, "ann@example.com", true, json!({ "plan": "pro" })).await;
    let id = p.secret.post(&format!("/workflows/{wf}/executions"), json!({ "contactId": c })).await.json["id"]
        .as_str()
        .unwrap()
        .to_string();
    drain(&s).await;
    let e = run_of(&p, &wf, &id).await;
    assert_eq!(e["status"], "EXITED", "a non-2xx answer is recorded and the flow goes on: {e}");
    assert_eq!(
        statuses(&e),
        vec!["TRIGGER COMPLETED", "UPDATE_CONTACT COMPLETED", "WEBHOOK COMPLETED", "EXIT COMPLETED"]
    );
    assert_eq!(e["stepExecutions"][2]["output"]["status"], 500);
    // The change went through the API's data rules, with its subscription event.
    let k = p.secret.get(&format!("/contacts/{c}")).await.json;
    assert_eq!(
        (k["subscribed"].clone(), k["data"].clone()),
        (json!(false), json!({ "plan": "pro", "onboarded": true })),
        "{k}"
    );
    let events = p.secret.get(&format!("/events/contact/{c}")).await.json;
    assert!(events["data"].as_array().unwrap().iter().any(|e| e["name"] == "contact.unsubscribed"), "{events}");
    // One call, after the change, with the key of this step of this execution.
    let got = sink.requests();
    assert_eq!(got.len(), 1);
    let hook = &e["stepExecutions"][2]["stepId"];
    assert_eq!(got[0].header("idempotency-key"), Some(format!("{id}:{}", hook.as_str().unwrap()).as_str()));
    let body: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body, json!({ "email": "ann@example.com", "onboarded": true }));
    s.stop().await;
}

#[tokio::test]
async fn a_trapping_plugin_or_a_refused_address_fails_the_execution_and_the_host_keeps_serving() {
    let sink = crate::http_sink::start(200, "{}").await;
    let s = with_plugins(false).await;
    let p = proj(&s, "o@example.com").await;
    let trap = chain(&p, vec![json!({ "type": "TRAP", "name": "boom" }), json!({ "type": "EXIT", "name": "x" })]).await;
    let hook =
        chain(&p, vec![json!({ "type": "WEBHOOK", "name": "ssrf", "config": { "url": sink.url("/internal") } })]).await;
    let c = contact(&p, "c@example.com", true, json!({})).await;
    let a = p.secret.post(&format!("/workflows/{trap}/executions"), json!({ "contactId": c })).await.json["id"]
        .as_str()
        .unwrap()
        .to_string();
    let b = p.secret.post(&format!("/workflows/{hook}/executions"), json!({ "contactId": c })).await.json["id"]
        .as_str()
        .unwrap()
        .to_string();
    drain(&s).await;
    let e = run_of(&p, &trap, &a).await;
    assert_eq!(e["status"], "FAILED", "{e}");
    assert!(e["error"].as_str().unwrap().contains("trapped"), "{e}");
    assert_eq!(statuses(&e), vec!["TRIGGER COMPLETED", "TRAP FAILED"]);
    let e = run_of(&p, &hook, &b).await;
    assert_eq!(e["status"], "FAILED", "{e}");
    assert!(e["error"].as_str().unwrap().contains("denied") || e["error"].as_str().unwrap().contains("private"), "{e}");
    assert!(sink.requests().is_empty(), "nothing reached the loopback receiver");
    assert_eq!(p.secret.get("/workflows").await.status, 200, "the host keeps serving");
    s.stop().await;
}

#[tokio::test]
async fn a_plugin_that_keeps_timing_out_is_retried_with_backoff_then_fails_its_execution() {
    let s = with_plugins(false).await;
    let p = proj(&s, "o@example.com").await;
    let wf = chain(&p, vec![json!({ "type": "SPIN", "name": "slow" }), json!({ "type": "EXIT", "name": "x" })]).await;
    let c = contact(&p, "c@example.com", true, json!({})).await;
    let id = p.secret.post(&format!("/workflows/{wf}/executions"), json!({ "contactId": c })).await.json["id"]
        .as_str()
        .unwrap()
        .to_string();
    drain(&s).await;
    let e = run_of(&p, &wf, &id).await;
    assert_eq!(e["status"], "RUNNING", "a timeout is worth another attempt: {e}");
    // The job's backoff: 1 s, 2 s, 4 s, 8 s; the fifth attempt fails the execution.
    for _ in 0..5 {
        s.clock().advance(60_000);
        drain(&s).await;
    }
    let e = run_of(&p, &wf, &id).await;
    assert_eq!(e["status"], "FAILED", "{e}");
    assert!(e["error"].as_str().unwrap().contains("timed out"), "{e}");
    assert_eq!(statuses(&e), vec!["TRIGGER COMPLETED", "SPIN FAILED"]);
    s.stop().await;
}
