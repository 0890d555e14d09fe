//! Workflows run many executions at a time (docs/behaviour.md#workflows): a burst of events starts
//! each execution under the re-entry rules once, the steps after a contact change see it before it is
//! written (and a contact condition after it reads it from the database), and stored events reach the
//! engine without waiting for the dispatch interval.

use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_host::config::Config;
use herald_host::infra::clock::ManualClock;
use serde_json::{Value, json};

use crate::harness::*;
use crate::smtp_sink::SmtpSink;
use crate::workflow_kit::enabled_workflow;

async fn executions(p: &Proj, wf: &str) -> Vec<Value> {
    let r = p.secret.get(&format!("/workflows/{wf}/executions?pageSize=100")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["data"].as_array().unwrap().clone()
}

async fn track(p: &Proj, email: &str, event: &str) {
    let r = p.secret.post("/v1/track", json!({ "email": email, "event": event })).await;
    assert_eq!(r.status, 200, "{}", r.json);
}

#[tokio::test]
async fn a_burst_of_events_starts_each_execution_once_and_later_steps_see_the_contact_change() {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.run_jobs = false;
    config.send_rate_per_second = 0;
    crate::plugin_kit::install(&config.plugins_dir, crate::plugin_kit::UPDATE_CONTACT);
    let s = Server::start_with(config, Some(ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let t = p
        .secret
        .post(
            "/templates",
            json!({ "name": "T", "type": "TRANSACTIONAL", "from": "news@shop.test",
                    "subject": "Plan {{plan}} tier {{tier}}", "body": "<p>Hi</p>" }),
        )
        .await;
    let t = t.json["id"].as_str().unwrap().to_string();
    let (wf, ids) = enabled_workflow(
        &p,
        "signup",
        false,
        &[
            ("UPDATE_CONTACT", json!({ "updates": { "plan": "gold" } })),
            ("UPDATE_CONTACT", json!({ "updates": { "tier": 2 } })),
            ("CONDITION", json!({ "field": "data.plan", "operator": "equals", "value": "gold" })),
            ("EXIT", json!({ "reason": "gold" })),
        ],
    )
    .await;
    // The email goes between the second change and the condition (ids: TRIGGER, the changes, CONDITION, EXIT).
    let r = p
        .secret
        .post(
            &format!("/workflows/{wf}/steps"),
            json!({ "type": "SEND_EMAIL", "name": "mail", "templateId": t, "autoConnect": false }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    let mail = r.json["id"].as_str().unwrap().to_string();
    let links = p.secret.get(&format!("/workflows/{wf}")).await.json["transitions"].clone();
    let second_to_condition = links
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["fromStepId"] == ids[2].as_str())
        .and_then(|l| l["id"].as_str())
        .unwrap()
        .to_string();
    let r = p.secret.delete(&format!("/workflows/{wf}/transitions/{second_to_condition}")).await;
    assert!(r.status == 200 || r.status == 204, "{}", r.json);
    for (from, to) in [(&ids[2], &mail), (&mail, &ids[3])] {
        let r =
            p.secret.post(&format!("/workflows/{wf}/transitions"), json!({ "fromStepId": from, "toStepId": to })).await;
        assert_eq!(r.status, 201, "{}", r.json);
    }

    // A burst: ann twice, bob and cat once, handed to the engine in one dispatch.
    for email in ["ann@example.com", "bob@example.com", "ann@example.com", "cat@example.com"] {
        track(&p, email, "signup").await;
    }
    for _ in 0..6 {
        s.clock().advance(1_000);
        for _ in 0..50 {
            if s.worker.run_once(50).await.unwrap().is_empty() {
                break;
            }
        }
    }
    let runs = executions(&p, &wf).await;
    assert_eq!(runs.len(), 3, "one execution per contact (allowReentry false): {runs:?}");
    for e in &runs {
        assert_eq!((e["status"].as_str(), e["exitReason"].as_str()), (Some("EXITED"), Some("gold")), "{e}");
        let contact = p.secret.get(&format!("/contacts/{}", e["contactId"].as_str().unwrap())).await.json;
        assert_eq!(contact["data"], json!({ "plan": "gold", "tier": 2 }), "both changes: {contact}");
    }
    sink.wait_for(3).await;
    let subjects: Vec<String> =
        sink.received().iter().map(|m| crate::smtp_sink::header(&m.data, "Subject").unwrap_or_default()).collect();
    assert_eq!(subjects, vec!["Plan gold tier 2"; 3], "the email sees both changes");
    s.stop().await;
}

#[tokio::test]
async fn stored_events_reach_workflows_without_waiting_for_the_dispatch_interval() {
    let mut config = Config::for_tests();
    config.event_dispatch_ms = 600_000;
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let (wf, _) = enabled_workflow(&p, "signup", false, &[("EXIT", json!({}))]).await;
    // Let the dispatch that runs at start-up pass: the next regular one is ten minutes away.
    tokio::time::sleep(Duration::from_millis(300)).await;
    track(&p, "ann@example.com", "signup").await;
    let t = Instant::now();
    while executions(&p, &wf).await.is_empty() {
        assert!(t.elapsed() < Duration::from_secs(10), "the event never reached the workflow");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    s.stop().await;
}

async fn job_rows(s: &Server, kind: &str) -> Vec<Value> {
    let q = "SELECT status, payload FROM job WHERE kind = $k";
    let v = s.state.store.query(q, json!({ "k": kind })).await.unwrap().value(0).unwrap();
    v.as_array().unwrap().clone()
}

/// The executions one batch moves into a DELAY at one moment share one timer job (and its emails one
/// delivery job): one row to write and claim instead of one per execution. A cancelled execution among
/// them stays cancelled when the shared timer fires; the others go on.
#[tokio::test]
async fn a_batch_shares_its_timer_job_and_delivery_job_and_each_execution_resumes_once() {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.run_jobs = false;
    config.send_rate_per_second = 0;
    let s = Server::start_with(config, Some(ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let t = p
        .secret
        .post("/templates", json!({ "name": "T", "type": "TRANSACTIONAL", "from": "news@shop.test", "subject": "Hi", "body": "<p>Hi</p>" }))
        .await;
    let r = p.secret.post("/workflows", json!({ "name": "w", "eventName": "signup" })).await;
    let wf = r.json["id"].as_str().unwrap().to_string();
    for step in [
        json!({ "type": "SEND_EMAIL", "name": "mail", "templateId": t.json["id"] }),
        json!({ "type": "DELAY", "name": "wait", "config": { "amount": 1, "unit": "minutes" } }),
        json!({ "type": "EXIT", "name": "done" }),
    ] {
        let r = p.secret.post(&format!("/workflows/{wf}/steps"), step).await;
        assert_eq!(r.status, 201, "{}", r.json);
    }
    assert_eq!(p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await.status, 200);
    crate::workflow_kit::drain(&s).await;
    let people = ["a@example.com", "b@example.com", "c@example.com", "d@example.com", "e@example.com"];
    for email in people {
        track(&p, email, "signup").await;
    }
    // The dispatch hands the five events over together: one start batch.
    s.clock().advance(1_000);
    s.worker.run_once(50).await.unwrap();
    let runs = executions(&p, &wf).await;
    assert_eq!(runs.len(), 5, "{runs:?}");
    assert!(runs.iter().all(|e| e["status"] == "WAITING"), "{runs:?}");
    let timers = job_rows(&s, "workflow.timer").await;
    assert_eq!(timers.len(), 1, "one timer job for the batch: {timers:?}");
    let payload: Value = serde_json::from_str(timers[0]["payload"].as_str().unwrap()).unwrap();
    assert_eq!(payload["timers"].as_array().map(Vec::len), Some(5), "{payload}");
    let deliveries = job_rows(&s, "email.deliver").await;
    assert_eq!(deliveries.len(), 1, "one delivery job for the batch's five emails: {deliveries:?}");

    let cancelled = runs[0]["id"].as_str().unwrap().to_string();
    let r = p.secret.delete(&format!("/workflows/{wf}/executions/{cancelled}")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    s.clock().advance(61_000);
    crate::workflow_kit::drain(&s).await;
    let runs = executions(&p, &wf).await;
    for e in &runs {
        let want = if e["id"] == cancelled.as_str() { "CANCELLED" } else { "EXITED" };
        assert_eq!(e["status"], want, "{e}");
    }
    let timers = job_rows(&s, "workflow.timer").await;
    assert!(timers.iter().all(|j| j["status"] == "completed"), "{timers:?}");
    // `/metrics` counts executions written by status (in this process, where other tests run too).
    let text = reqwest::get(format!("{}/metrics", s.base)).await.unwrap().text().await.unwrap();
    let exited = text
        .lines()
        .find_map(|l| l.strip_prefix("herald_workflow_executions_written_total{status=\"EXITED\"} "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(exited.is_some_and(|n| n >= 4), "{text}");
    sink.wait_for(5).await;
    assert_eq!(sink.received().len(), 5, "each email once");
    s.stop().await;
}

/// A batch's contact changes are written only over the versions they were planned from: one stale
/// contact, or one contact changed by two executions of the batch, refuses the whole batch (it is then
/// written one execution at a time), and nothing of it is written.
#[tokio::test]
async fn a_batch_with_a_stale_or_doubly_changed_contact_writes_nothing() {
    use herald_host::domain::status::ExecutionStatus;
    use herald_host::store::workflow_runs::{BatchRefused, ContactChange, Effects, ExecutionRow, Start};
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let a = crate::workflow_kit::contact(&p, "a@example.com", true, json!({ "n": 1 })).await;
    let b = crate::workflow_kit::contact(&p, "b@example.com", true, json!({ "n": 1 })).await;
    let store = &s.state.store;
    let va = store.contact(&p.id, &a).await.unwrap().unwrap().version;
    let vb = store.contact(&p.id, &b).await.unwrap().unwrap().version;
    let exec = |id: &str, contact: &str| ExecutionRow {
        id: id.into(),
        workflow: "w1".into(),
        contact: contact.into(),
        status: ExecutionStatus::Completed,
        context: json!({}),
        step: None,
        timer: None,
        run: None,
        waiting_event: None,
        trigger_event: None,
        error: None,
        exit_reason: None,
        created_at: 1,
        updated_at: 1,
        completed_at: Some(1),
        depth: Some(0),
        runs: vec![],
    };
    let change = |id: &str, email: &str, version: i64, n: i64| Effects {
        contact: Some(ContactChange {
            id: id.into(),
            version,
            email: email.into(),
            subscribed: true,
            data: json!({ "n": n }).as_object().unwrap().clone(),
            events: vec![],
        }),
        ..Effects::default()
    };
    let (e1, e2, e3) = (exec("x1", &a), exec("x2", &b), exec("x3", &a));
    async fn write(
        store: &herald_host::store::Store,
        project: &str,
        items: Vec<(&ExecutionRow, Effects)>,
    ) -> Result<(), BatchRefused> {
        let starts: Vec<Start> = items.iter().map(|(e, fx)| Start { e, allow_reentry: true, fx }).collect();
        store.write_executions(project, &starts, &[], 2).await.unwrap()
    }
    // b's change planned from an older version: nothing of the batch is written.
    let r = write(
        store,
        &p.id,
        vec![(&e1, change(&a, "a@example.com", va, 2)), (&e2, change(&b, "b@example.com", vb - 1, 2))],
    )
    .await;
    assert_eq!(r, Err(BatchRefused::StaleContact));
    // a changed by two executions of one batch: refused too.
    let r =
        write(store, &p.id, vec![(&e1, change(&a, "a@example.com", va, 3)), (&e3, change(&a, "a@example.com", va, 4))])
            .await;
    assert_eq!(r, Err(BatchRefused::StaleContact));
    for id in [&a, &b] {
        let c = store.contact(&p.id, id).await.unwrap().unwrap();
        assert_eq!(c.data["n"], 1, "nothing written: {c:?}");
    }
    assert!(store.execution(&p.id, "x1").await.unwrap().is_none(), "no execution written");
    // Both current: both written, each one version on.
    let r =
        write(store, &p.id, vec![(&e1, change(&a, "a@example.com", va, 5)), (&e2, change(&b, "b@example.com", vb, 6))])
            .await;
    assert_eq!(r, Ok(()));
    let (ca, cb) = (store.contact(&p.id, &a).await.unwrap().unwrap(), store.contact(&p.id, &b).await.unwrap().unwrap());
    assert_eq!((ca.data["n"].as_i64(), ca.version), (Some(5), va + 1));
    assert_eq!((cb.data["n"].as_i64(), cb.version), (Some(6), vb + 1));
    s.stop().await;
}
