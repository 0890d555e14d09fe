//! Event triggers and waits resumed by their event (docs/behaviour.md#workflows): a stored event starts
//! each enabled EVENT workflow on its name once, even when the stream hands it over twice; waits resume
//! on their EVENT link with the event's data; workflows that trigger each other stop.

use serde_json::{Value, json};

use crate::harness::*;

/// Lets the event stream's dispatch job come due, then runs the queue until nothing is due.
async fn settle(s: &Server) {
    for _ in 0..6 {
        s.clock().advance(1_000);
        for _ in 0..50 {
            if s.worker.run_once(50).await.unwrap().is_empty() {
                break;
            }
        }
    }
}

async fn workflow(p: &Proj, event: &str, reentry: bool, steps: &[(&str, Value)]) -> (String, Vec<String>) {
    let r = p.secret.post("/workflows", json!({ "name": event, "eventName": event, "allowReentry": reentry })).await;
    let wf = r.json["id"].as_str().unwrap().to_string();
    let mut ids = vec![r.json["steps"][0]["id"].as_str().unwrap().to_string()];
    for (i, (kind, config)) in steps.iter().enumerate() {
        let r = p
            .secret
            .post(&format!("/workflows/{wf}/steps"), json!({ "type": kind, "name": format!("s{i}"), "config": config }))
            .await;
        assert_eq!(r.status, 201, "{}", r.json);
        ids.push(r.json["id"].as_str().unwrap().to_string());
    }
    assert_eq!(p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await.status, 200);
    (wf, ids)
}

async fn executions(p: &Proj, wf: &str) -> Vec<Value> {
    let r = p.secret.get(&format!("/workflows/{wf}/executions?pageSize=100")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["data"].as_array().unwrap().clone()
}

async fn track(p: &Proj, email: &str, event: &str, data: Value) -> String {
    let r = p.secret.post("/v1/track", json!({ "email": email, "event": event, "data": data })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["data"]["contact"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn a_tracked_event_starts_each_enabled_workflow_on_its_name_once() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    let (a, _) = workflow(
        &p,
        "signup",
        true,
        &[
            ("CONDITION", json!({ "field": "event.plan", "operator": "equals", "value": "pro" })),
            ("EXIT", json!({ "reason": "pro" })),
        ],
    )
    .await;
    let (b, _) = workflow(&p, "signup", true, &[("EXIT", json!({}))]).await;
    let (other, _) = workflow(&p, "purchase", true, &[("EXIT", json!({}))]).await;
    let (off, _) = workflow(&p, "signup", true, &[("EXIT", json!({}))]).await;
    p.secret.patch(&format!("/workflows/{off}"), json!({ "enabled": false })).await;

    let contact = track(&p, "ann@example.com", "signup", json!({ "plan": "pro" })).await;
    settle(&s).await;
    let runs = executions(&p, &a).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["contactId"], contact.as_str());
    assert_eq!(runs[0]["status"], "EXITED", "the event's data is the context: {}", runs[0]);
    assert_eq!(runs[0]["context"], json!({ "plan": "pro" }));
    assert_eq!(executions(&p, &b).await.len(), 1);
    assert!(executions(&p, &other).await.is_empty(), "another event name");
    assert!(executions(&p, &off).await.is_empty(), "a disabled workflow");

    // The same event handed over again starts nothing new: dispatch it a second time by hand.
    let events = s
        .state
        .store
        .list_events(
            &p.id,
            &herald_host::store::events::EventQuery { name: Some("signup".into()), limit: 10, ..Default::default() },
        )
        .await
        .unwrap();
    assert_eq!(events.len(), 1);
    s.state.workflows.on_event(&events[0]).await.unwrap();
    settle(&s).await;
    assert_eq!(executions(&p, &a).await.len(), 1, "at most once per (workflow, event)");

    // A new event is a new start (allowReentry true, the last one ended).
    track(&p, "ann@example.com", "signup", json!({ "plan": "free" })).await;
    settle(&s).await;
    let runs = executions(&p, &a).await;
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["status"], "COMPLETED", "the `no` branch has no link: {}", runs[0]);
    s.stop().await;
}

#[tokio::test]
async fn a_wait_resumes_on_its_event_with_the_events_data_and_its_timeout_then_does_nothing() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    let (wf, ids) = workflow(
        &p,
        "cart",
        false,
        &[
            ("WAIT_FOR_EVENT", json!({ "eventName": "purchase", "timeout": 3600 })),
            ("CONDITION", json!({ "field": "event.total", "operator": "greaterThan", "value": 100 })),
        ],
    )
    .await;
    // The timeout leads to an EXIT of its own.
    let x = p
        .secret
        .post(&format!("/workflows/{wf}/steps"), json!({ "type": "EXIT", "name": "gave up", "autoConnect": false }))
        .await;
    p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": false })).await;
    let l = p
        .secret
        .post(
            &format!("/workflows/{wf}/transitions"),
            json!({ "fromStepId": ids[1], "toStepId": x.json["id"], "waitOutcome": "TIMEOUT" }),
        )
        .await;
    assert_eq!(l.status, 201, "{}", l.json);
    p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await;

    track(&p, "bob@example.com", "cart", json!({ "items": 2 })).await;
    track(&p, "eve@example.com", "cart", json!({})).await;
    settle(&s).await;
    let runs = executions(&p, &wf).await;
    assert!(runs.iter().all(|e| e["status"] == "WAITING" && e["waitingFor"] == "purchase"), "{runs:?}");
    // Bob buys: his wait resumes on its EVENT link, the purchase's data merged into the context.
    track(&p, "bob@example.com", "purchase", json!({ "total": 250 })).await;
    settle(&s).await;
    let runs = executions(&p, &wf).await;
    let bob = runs.iter().find(|e| e["context"]["items"] == 2).unwrap();
    assert_eq!(bob["status"], "COMPLETED", "{bob}");
    assert_eq!(bob["context"], json!({ "items": 2, "total": 250 }));
    let detail = p.secret.get(&format!("/workflows/{wf}/executions/{}", bob["id"].as_str().unwrap())).await.json;
    assert_eq!(detail["stepExecutions"][1]["output"]["outcome"], "EVENT");
    assert_eq!(detail["stepExecutions"][2]["output"]["branch"], "yes");
    // An hour later: Eve's wait times out into its EXIT; Bob's timer does nothing.
    s.clock().advance(3_600_000);
    settle(&s).await;
    let runs = executions(&p, &wf).await;
    let eve = runs.iter().find(|e| e["context"] == json!({})).unwrap();
    assert_eq!(eve["status"], "EXITED", "{eve}");
    let bob = runs.iter().find(|e| e["context"]["items"] == 2).unwrap();
    assert_eq!(bob["status"], "COMPLETED");
    let detail = p.secret.get(&format!("/workflows/{wf}/executions/{}", bob["id"].as_str().unwrap())).await.json;
    assert_eq!(detail["stepExecutions"].as_array().unwrap().len(), 3, "nothing ran after the timer: {detail}");
    s.stop().await;
}

#[tokio::test]
async fn workflows_that_trigger_each_other_stop() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    // A starts on B's completion and B on A's: each round is a new execution, until the chain's limit.
    let (a, _) = workflow(&p, "kick", true, &[("EXIT", json!({}))]).await;
    let (b, _) = workflow(&p, "workflow.exited", true, &[("DELAY", json!({ "amount": 1, "unit": "minutes" }))]).await;
    let (c, _) = workflow(&p, "workflow.completed", true, &[("EXIT", json!({}))]).await;
    track(&p, "loop@example.com", "kick", json!({})).await;
    for _ in 0..30 {
        s.clock().advance(60_000);
        settle(&s).await;
    }
    let total = executions(&p, &a).await.len() + executions(&p, &b).await.len() + executions(&p, &c).await.len();
    assert!(total <= 12, "the chain stopped: {total} executions");
    assert!(total >= 3, "it did run: {total}");
    // A workflow never starts from its own workflow.* events: C's completions do not start C.
    let c_runs = executions(&p, &c).await;
    assert!(c_runs.iter().all(|e| e["status"] != "RUNNING"));
    s.stop().await;
}
