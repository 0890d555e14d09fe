//! Workflow executions (docs/behaviour.md#workflows): manual starts, the steps that run at once, timers
//! on a controlled clock, re-entry rules, cancel and cancel-all with their timers inert, the 409s of
//! structural edits while executions are active, and project isolation.

use serde_json::{Value, json};

use crate::harness::*;
use crate::workflow_kit::{contact, drain, enabled_workflow};

async fn start(p: &Proj, wf: &str, contact: &str, context: Value) -> Resp {
    p.secret.post(&format!("/workflows/{wf}/executions"), json!({ "contactId": contact, "context": context })).await
}

async fn execution(p: &Proj, wf: &str, id: &str) -> Value {
    let r = p.secret.get(&format!("/workflows/{wf}/executions/{id}")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json
}

fn runs(e: &Value) -> Vec<(String, String)> {
    e["stepExecutions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["stepType"].as_str().unwrap().to_string(), r["status"].as_str().unwrap().to_string()))
        .collect()
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_string(), b.to_string())
}

#[tokio::test]
async fn instant_steps_run_back_to_back_and_a_condition_picks_its_branch() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    let (wf, ids) = enabled_workflow(
        &p,
        "signup",
        false,
        &[
            ("CONDITION", json!({ "field": "data.plan", "operator": "equals", "value": "pro" })),
            ("EXIT", json!({ "reason": "pro plan" })),
        ],
    )
    .await;
    // The `no` branch: a DELAY of one hour.
    let d = p.secret.post(&format!("/workflows/{wf}/steps"), json!({ "type": "DELAY", "name": "wait", "config": { "amount": 1, "unit": "hours" }, "autoConnect": false })).await;
    let delay = d.json["id"].as_str().unwrap().to_string();
    // Enabled with no executions yet: structure stays editable.
    let l = p
        .secret
        .post(
            &format!("/workflows/{wf}/transitions"),
            json!({ "fromStepId": ids[1], "toStepId": delay, "condition": { "branch": "no" } }),
        )
        .await;
    assert_eq!(l.status, 201, "{}", l.json);
    let pro = contact(&p, "pro@example.com", true, json!({ "plan": "pro" })).await;
    let free = contact(&p, "free@example.com", true, json!({ "plan": "free" })).await;

    let r = start(&p, &wf, &pro, json!({ "source": "ads" })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(r.json["status"], "RUNNING");
    assert_eq!(r.json["currentStepId"], ids[1].as_str());
    let a = r.json["id"].as_str().unwrap().to_string();
    drain(&s).await;
    let e = execution(&p, &wf, &a).await;
    assert_eq!(e["status"], "EXITED");
    assert_eq!(e["exitReason"], "pro plan");
    assert_eq!(e["context"], json!({ "source": "ads" }));
    assert_eq!(runs(&e), vec![pair("TRIGGER", "COMPLETED"), pair("CONDITION", "COMPLETED"), pair("EXIT", "COMPLETED")]);
    assert_eq!(e["stepExecutions"][1]["output"], json!({ "result": true, "branch": "yes" }));
    assert!(e["completedAt"].is_string());

    let b = start(&p, &wf, &free, json!({})).await.json["id"].as_str().unwrap().to_string();
    drain(&s).await;
    let e = execution(&p, &wf, &b).await;
    assert_eq!(e["status"], "WAITING");
    assert_eq!(e["currentStepId"], delay.as_str());
    assert_eq!(runs(&e).last().unwrap(), &pair("DELAY", "WAITING"));
    s.clock().advance(3_600_000 - 1);
    drain(&s).await;
    assert_eq!(execution(&p, &wf, &b).await["status"], "WAITING", "not before the hour");
    s.clock().advance(1);
    drain(&s).await;
    let e = execution(&p, &wf, &b).await;
    assert_eq!(e["status"], "COMPLETED", "nothing follows the DELAY");
    assert_eq!(
        runs(&e),
        vec![pair("TRIGGER", "COMPLETED"), pair("CONDITION", "COMPLETED"), pair("DELAY", "COMPLETED")]
    );

    // The emitted events are stored like any other.
    let names: Vec<String> = p.secret.get(&format!("/events/contact/{pro}")).await.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        names.contains(&"workflow.started".to_string()) && names.contains(&"workflow.exited".to_string()),
        "{names:?}"
    );
    let list = p.secret.get(&format!("/workflows/{wf}/executions?status=COMPLETED")).await;
    assert_eq!(list.json["total"], 1);
    assert_eq!(list.json["data"][0]["id"], b.as_str());
    assert_eq!(p.secret.get(&format!("/workflows/{wf}/executions")).await.json["total"], 2);
    assert_envelope(&p.secret.get(&format!("/workflows/{wf}/executions?status=DONE")).await, 400, "BAD_REQUEST");
    s.stop().await;
}

#[tokio::test]
async fn a_context_condition_and_a_wait_that_times_out() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    let (wf, ids) = enabled_workflow(
        &p,
        "signup",
        true,
        &[
            ("CONDITION", json!({ "field": "workflow.source", "operator": "equals", "value": "ads" })),
            ("WAIT_FOR_EVENT", json!({ "eventName": "purchase", "timeout": 60 })),
        ],
    )
    .await;
    let c = contact(&p, "c@example.com", true, json!({})).await;
    let r = start(&p, &wf, &c, json!({ "source": "ads" })).await;
    let id = r.json["id"].as_str().unwrap().to_string();
    drain(&s).await;
    let e = execution(&p, &wf, &id).await;
    assert_eq!((e["status"].clone(), e["waitingFor"].clone()), (json!("WAITING"), json!("purchase")));
    assert_eq!(e["currentStepId"], ids[2].as_str());
    // While it waits, the contact cannot enter again (allowReentry true: not while RUNNING or WAITING).
    assert_envelope(&start(&p, &wf, &c, json!({})).await, 409, "CONFLICT");
    s.clock().advance(60_000);
    drain(&s).await;
    let e = execution(&p, &wf, &id).await;
    assert_eq!(e["status"], "COMPLETED", "a timeout without a TIMEOUT link completes the execution");
    assert_eq!(e["stepExecutions"][2]["output"], json!({ "outcome": "TIMEOUT" }));
    // Ended: with allowReentry it may enter again; the `no` branch has no link and completes at once.
    let again = start(&p, &wf, &c, json!({ "source": "mail" })).await;
    assert_eq!(again.status, 201, "{}", again.json);
    drain(&s).await;
    let e = execution(&p, &wf, again.json["id"].as_str().unwrap()).await;
    assert_eq!(e["status"], "COMPLETED");
    assert_eq!(e["stepExecutions"][1]["output"]["branch"], "no");
    s.stop().await;
}

#[tokio::test]
async fn starts_are_refused_clearly() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    let (wf, _) = enabled_workflow(&p, "signup", false, &[("EXIT", json!({}))]).await;
    let c = contact(&p, "c@example.com", true, json!({})).await;
    assert_eq!(start(&p, &wf, &c, json!({})).await.status, 201);
    drain(&s).await;
    let r = start(&p, &wf, &c, json!({})).await;
    assert_envelope(&r, 409, "CONFLICT");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("allowReentry is false"));
    assert_envelope(&start(&p, &wf, "nobody", json!({})).await, 404, "CONTACT_NOT_FOUND");
    assert_envelope(&start(&p, "nope", &c, json!({})).await, 404, "WORKFLOW_NOT_FOUND");
    let r = start(&p, &wf, &c, json!([1])).await;
    assert_eq!(r.json["error"]["errors"][0]["field"], "context");
    let r = start(&p, &wf, &c, json!({ "big": "x".repeat(70_000) })).await;
    assert_eq!(r.json["error"]["errors"][0]["code"], "too_big");
    let r = p.secret.post(&format!("/workflows/{wf}/executions"), json!({})).await;
    assert_eq!(r.json["error"]["errors"][0]["field"], "contactId");
    p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": false })).await;
    let other = contact(&p, "d@example.com", true, json!({})).await;
    assert_envelope(&start(&p, &wf, &other, json!({})).await, 400, "BAD_REQUEST");
    s.stop().await;
}

#[tokio::test]
async fn cancel_and_cancel_all_leave_their_timers_inert() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    let (wf, _) = enabled_workflow(
        &p,
        "signup",
        false,
        &[("DELAY", json!({ "amount": 5, "unit": "minutes" })), ("EXIT", json!({}))],
    )
    .await;
    let mut ids = Vec::new();
    for n in 0..3 {
        let c = contact(&p, &format!("c{n}@example.com"), true, json!({})).await;
        ids.push(start(&p, &wf, &c, json!({})).await.json["id"].as_str().unwrap().to_string());
    }
    drain(&s).await;
    let r = p.secret.delete(&format!("/workflows/{wf}/executions/{}", ids[0])).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["status"], "CANCELLED");
    assert_envelope(&p.secret.delete(&format!("/workflows/{wf}/executions/{}", ids[0])).await, 409, "CONFLICT");
    let r = p.secret.post(&format!("/workflows/{wf}/executions/cancel-all"), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json, json!({ "cancelled": 2 }));
    s.clock().advance(10 * 60_000);
    drain(&s).await;
    for id in &ids {
        let e = execution(&p, &wf, id).await;
        assert_eq!(e["status"], "CANCELLED", "the DELAY's timer did nothing");
        assert_eq!(runs(&e), vec![pair("TRIGGER", "COMPLETED"), pair("DELAY", "CANCELLED")]);
    }
    assert_eq!(p.secret.post(&format!("/workflows/{wf}/executions/cancel-all"), json!({})).await.json["cancelled"], 0);
    assert_envelope(&p.secret.delete(&format!("/workflows/{wf}/executions/nope")).await, 404, "EXECUTION_NOT_FOUND");
    s.stop().await;
}

#[tokio::test]
async fn structural_edits_wait_until_no_execution_is_active() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    let (wf, ids) = enabled_workflow(&p, "signup", false, &[("DELAY", json!({ "amount": 1, "unit": "days" }))]).await;
    let c = contact(&p, "c@example.com", true, json!({})).await;
    start(&p, &wf, &c, json!({})).await;
    drain(&s).await;
    let add = json!({ "type": "EXIT", "name": "x" });
    let r = p.secret.post(&format!("/workflows/{wf}/steps"), add.clone()).await;
    assert_envelope(&r, 409, "CONFLICT");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("1 active execution"), "{}", r.json);
    assert_envelope(&p.secret.delete(&format!("/workflows/{wf}/steps/{}", ids[1])).await, 409, "CONFLICT");
    assert_envelope(
        &p.secret
            .patch(&format!("/workflows/{wf}/steps/{}", ids[1]), json!({ "config": { "amount": 2, "unit": "days" } }))
            .await,
        409,
        "CONFLICT",
    );
    assert_envelope(
        &p.secret.patch(&format!("/workflows/{wf}"), json!({ "triggerType": "MANUAL" })).await,
        409,
        "CONFLICT",
    );
    assert_envelope(&p.secret.delete(&format!("/workflows/{wf}")).await, 409, "CONFLICT");
    // Layout and metadata stay editable.
    assert_eq!(
        p.secret
            .patch(&format!("/workflows/{wf}/steps/{}", ids[1]), json!({ "position": { "x": 5, "y": 5 } }))
            .await
            .status,
        200
    );
    assert_eq!(
        p.secret.patch(&format!("/workflows/{wf}"), json!({ "name": "Renamed", "allowReentry": true })).await.status,
        200
    );
    // Disabled, the structure may change again (its executions go on with the new graph).
    p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": false })).await;
    assert_eq!(p.secret.post(&format!("/workflows/{wf}/steps"), add).await.status, 201);
    p.secret.post(&format!("/workflows/{wf}/executions/cancel-all"), json!({})).await;
    assert_eq!(p.secret.delete(&format!("/workflows/{wf}")).await.status, 204);
    s.stop().await;
}

#[tokio::test]
async fn one_projects_key_never_reaches_anothers_executions() {
    let s = Server::start_stepped().await;
    let a = proj(&s, "a@example.com").await;
    let b = proj(&s, "b@example.com").await;
    let (wf, _) = enabled_workflow(&a, "signup", false, &[("DELAY", json!({ "amount": 1, "unit": "days" }))]).await;
    let c = contact(&a, "c@example.com", true, json!({})).await;
    let id = start(&a, &wf, &c, json!({})).await.json["id"].as_str().unwrap().to_string();
    drain(&s).await;
    assert_envelope(&b.secret.get(&format!("/workflows/{wf}/executions")).await, 404, "WORKFLOW_NOT_FOUND");
    assert_envelope(&b.secret.get(&format!("/workflows/{wf}/executions/{id}")).await, 404, "WORKFLOW_NOT_FOUND");
    assert_envelope(&b.secret.delete(&format!("/workflows/{wf}/executions/{id}")).await, 404, "WORKFLOW_NOT_FOUND");
    assert_envelope(
        &b.secret.post(&format!("/workflows/{wf}/executions/cancel-all"), json!({})).await,
        404,
        "WORKFLOW_NOT_FOUND",
    );
    // B's own workflow cannot start A's contact, nor read A's execution through it.
    let (mine, _) = enabled_workflow(&b, "signup", false, &[("EXIT", json!({}))]).await;
    assert_envelope(&start(&b, &mine, &c, json!({})).await, 404, "CONTACT_NOT_FOUND");
    assert_envelope(&b.secret.get(&format!("/workflows/{mine}/executions/{id}")).await, 404, "EXECUTION_NOT_FOUND");
    assert_eq!(execution(&a, &wf, &id).await["status"], "WAITING");
    s.stop().await;
}
