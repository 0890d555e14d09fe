//! Event triggers and waits resumed by their event (docs/behaviour.md#workflows): a stored event starts
//! each enabled EVENT workflow on its name once, even when the stream hands it over twice; waits resume
//! on their EVENT link with the event's data; workflows that trigger each other stop.

use serde_json::{Value, json};

use herald_host::infra::clock::Clock as _;

use crate::harness::*;
use crate::workflow_kit::enabled_workflow as workflow;

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

#[tokio::test]
async fn a_schedule_enrolls_its_audience_once_per_tick_across_two_processes() {
    // 2027-01-15 08:00 UTC.
    let clock = herald_host::infra::clock::ManualClock::new(1_800_000_000_000);
    let mut config = herald_host::config::Config::for_tests();
    config.run_jobs = false;
    let a = Server::start_with(config, Some(clock.clone())).await;
    let mut config = herald_host::config::Config::for_tests();
    config.run_jobs = false;
    let app = herald_host::App::from_store(
        config,
        a.state.store.sibling(),
        std::sync::Arc::new(clock.clone()),
        herald_host::infra::jobs::builtin_registry(),
    )
    .await
    .unwrap();
    let b = Server::serve(app, Some(clock.clone())).await;
    let p = proj(&a, "o@example.com").await;
    for (email, sub, plan) in
        [("p1@x.io", true, "pro"), ("p2@x.io", true, "pro"), ("p3@x.io", false, "pro"), ("f1@x.io", true, "free")]
    {
        p.secret.post("/contacts", json!({ "email": email, "subscribed": sub, "data": { "plan": plan } })).await;
    }
    let (wf, _) = workflow(&p, "unused", true, &[("EXIT", json!({}))]).await;
    let pro = json!({ "groups": [{ "filters": [{ "field": "data.plan", "operator": "equals", "value": "pro" }] }] });
    // Refused configs name their field.
    for (config, field) in [
        (json!({ "cron": "every day", "audience": { "condition": pro } }), "triggerConfig.cron"),
        (
            json!({ "cron": "0 9 * * *", "timezone": "Nowhere/Land", "audience": { "condition": pro } }),
            "triggerConfig.timezone",
        ),
        (json!({ "cron": "0 9 * * *", "audience": { "segmentId": "nope" } }), "triggerConfig.audience.segmentId"),
        (
            json!({ "cron": "0 9 * * *", "audience": { "condition": { "groups": [{ "filters": [{ "field": "data.x", "operator": "nope" }] }] } } }),
            "triggerConfig.audience.condition",
        ),
    ] {
        let r = p
            .secret
            .patch(&format!("/workflows/{wf}"), json!({ "triggerType": "SCHEDULE", "triggerConfig": config }))
            .await;
        assert_envelope(&r, 422, "VALIDATION_ERROR");
        assert_eq!(r.json["error"]["errors"][0]["field"], field, "{}", r.json);
    }
    let schedule = json!({ "cron": "0 9 * * *", "timezone": "UTC", "audience": { "condition": pro } });
    let r = p
        .secret
        .patch(&format!("/workflows/{wf}"), json!({ "triggerType": "SCHEDULE", "triggerConfig": schedule }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["triggerConfig"], schedule);
    assert_eq!(r.json["steps"][0]["config"], schedule, "the TRIGGER step follows");

    let fire_both = async || {
        let now = clock.now_ms();
        let (x, y) = tokio::join!(a.state.workflows.fire_due(now), b.state.workflows.fire_due(now));
        x.unwrap() + y.unwrap()
    };
    let drain_both = async || {
        for _ in 0..50 {
            let (x, y) = tokio::join!(a.worker.run_once(10), b.worker.run_once(10));
            if x.unwrap().is_empty() && y.unwrap().is_empty() {
                return;
            }
        }
    };
    assert_eq!(fire_both().await, 0, "not due before 09:00");
    clock.advance(3_600_000);
    assert_eq!(fire_both().await, 1, "one tick, fired by one of the two processes");
    drain_both().await;
    let runs = executions(&p, &wf).await;
    assert_eq!(runs.len(), 2, "the subscribed contacts of the audience: {runs:?}");
    assert!(runs.iter().all(|e| e["status"] == "EXITED"));
    assert_eq!(fire_both().await, 0, "the same tick never fires twice");
    // Down for three days: the missed ticks fire once.
    clock.advance(3 * 86_400_000);
    assert_eq!(fire_both().await, 1);
    assert_eq!(fire_both().await, 0);
    drain_both().await;
    assert_eq!(executions(&p, &wf).await.len(), 4, "one more round for the two (allowReentry true)");
    a.stop().await;
    b.stop().await;
}
