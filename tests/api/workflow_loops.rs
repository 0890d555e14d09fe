//! Workflows that trigger each other through what their steps cause stop (docs/security.md#workflows):
//! every event a step causes carries its execution's depth, whatever its name, and past depth 8 starts
//! nothing; per contact and hour, events start at most so many executions and SEND_EMAIL steps write at
//! most so many emails. Deliveries go to a real SMTP server on loopback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_host::config::Config;
use herald_host::infra::clock::ManualClock;
use serde_json::{Value, json};

use crate::harness::*;
use crate::smtp_sink::SmtpSink;
use crate::workflow_kit::{contact, enabled_workflow};

/// Lets the event stream's dispatch come due and runs the queue until nothing is due, `rounds` times (a
/// loop that did not stop would still be going after them).
async fn settle(s: &Server, rounds: usize) {
    for _ in 0..rounds {
        s.clock().advance(1_000);
        for _ in 0..50 {
            if s.worker.run_once(50).await.unwrap().is_empty() {
                break;
            }
        }
    }
}

async fn template(p: &Proj) -> String {
    let r = p
        .secret
        .post(
            "/templates",
            json!({ "name": "Again", "type": "TRANSACTIONAL", "from": "news@shop.test", "subject": "Again",
                    "body": "<p>Hello again</p>" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    r.json["id"].as_str().unwrap().to_string()
}

/// An enabled workflow on `event` (re-entry allowed) whose one step sends `template` to the contact.
async fn sending_workflow(p: &Proj, event: &str, template: &str) -> String {
    let r = p.secret.post("/workflows", json!({ "name": event, "eventName": event, "allowReentry": true })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let wf = r.json["id"].as_str().unwrap().to_string();
    let r = p
        .secret
        .post(
            &format!("/workflows/{wf}/steps"),
            json!({ "type": "SEND_EMAIL", "name": "again", "templateId": template }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await.status, 200);
    wf
}

async fn executions(p: &Proj, wf: &str) -> Vec<Value> {
    let r = p.secret.get(&format!("/workflows/{wf}/executions?pageSize=100")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["data"].as_array().unwrap().clone()
}

fn exit_reasons(list: &[Value]) -> Vec<String> {
    list.iter()
        .filter(|e| e["status"] == "EXITED")
        .map(|e| e["exitReason"].as_str().unwrap_or("").to_string())
        .collect()
}

async fn send(p: &Proj, to: &str) {
    let r = p
        .secret
        .post("/v1/send", json!({ "to": to, "from": "news@shop.test", "subject": "Hi", "body": "<p>Hi</p>" }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
}

#[tokio::test]
async fn one_send_with_two_looping_workflows_sends_a_bounded_number_of_emails_and_the_server_keeps_serving() {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.send_rate_per_second = 0;
    config.event_dispatch_ms = 20;
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let t = template(&p).await;
    // Two workflows on email.sent that send again, re-entry allowed: each email starts both again.
    let a = sending_workflow(&p, "email.sent", &t).await;
    let b = sending_workflow(&p, "email.sent", &t).await;
    contact(&p, "ann@example.com", true, json!({})).await;
    send(&p, "ann@example.com").await;

    // Wait until nothing more arrives for two seconds (at most 60 s), asking /health all along.
    let started = Instant::now();
    let (mut last, mut quiet_since, mut slowest) = (0, Instant::now(), Duration::ZERO);
    while started.elapsed() < Duration::from_secs(60) {
        let asked = Instant::now();
        let r = s.client().get("/health").await;
        assert_eq!(r.status, 200, "{}", r.json);
        slowest = slowest.max(asked.elapsed());
        let n = sink.received().len();
        if n != last {
            (last, quiet_since) = (n, Instant::now());
        } else if quiet_since.elapsed() > Duration::from_secs(2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let n = sink.received().len();
    assert!(n > 10, "the workflows did send ({n} emails)");
    // The send, and at most the contact's 20 workflow emails an hour.
    assert!(n <= 21, "{n} emails reached the contact");
    assert!(slowest < Duration::from_secs(5), "/health took {slowest:?}");
    // What was held back is visible: skipped steps and stopped starts name the limit.
    let mut reasons = Vec::new();
    for wf in [&a, &b] {
        let list = executions(&p, wf).await;
        reasons.extend(exit_reasons(&list));
        for e in &list {
            let id = e["id"].as_str().unwrap();
            let one = p.secret.get(&format!("/workflows/{wf}/executions/{id}")).await.json;
            for step in one["stepExecutions"].as_array().unwrap() {
                if step["status"] == "SKIPPED" {
                    reasons.push(step["output"].to_string());
                }
            }
        }
    }
    assert!(reasons.iter().any(|r| r.contains("LOOP_LIMIT")), "{reasons:?}");
    let metrics = s.client().get("/metrics").await.json;
    assert!(metrics.as_str().unwrap().contains("herald_workflow_limited_total"), "{metrics}");
}

#[tokio::test]
async fn depth_alone_stops_a_workflow_that_its_own_emails_start_again() {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.run_jobs = false;
    config.send_rate_per_second = 0;
    // The budgets off: the depth limit is what stops it.
    config.workflow_starts_per_contact_hour = 0;
    config.workflow_emails_per_contact_hour = 0;
    let s = Server::start_with(config, Some(ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let t = template(&p).await;
    let wf = sending_workflow(&p, "email.sent", &t).await;
    contact(&p, "ann@example.com", true, json!({})).await;
    send(&p, "ann@example.com").await;
    settle(&s, 30).await;
    // The send's email.sent starts depth 0; the email of depth d starts depth d + 1, up to 8: nine
    // workflow emails; the ninth's email.sent would start depth 9, which is stopped.
    assert_eq!(sink.received().len(), 1 + 9);
    let list = executions(&p, &wf).await;
    assert_eq!(list.iter().filter(|e| e["status"] == "COMPLETED").count(), 9, "{list:?}");
    let stopped = exit_reasons(&list);
    assert_eq!(stopped.len(), 1, "{list:?}");
    assert!(stopped[0].starts_with("LOOP_LIMIT") && stopped[0].contains("chain of 8"), "{}", stopped[0]);
    // Nothing more comes of it.
    settle(&s, 5).await;
    assert_eq!(sink.received().len(), 1 + 9);
    assert_eq!(exit_reasons(&executions(&p, &wf).await).len(), 1);
}

/// A server with the update-contact plugin, jobs run by hand, and the per-contact budgets off: the depth
/// limit is what stops a loop.
async fn loop_server() -> Server {
    let mut config = Config::for_tests();
    config.run_jobs = false;
    config.workflow_starts_per_contact_hour = 0;
    crate::plugin_kit::install(&config.plugins_dir, crate::plugin_kit::UPDATE_CONTACT);
    Server::start_with(config, Some(ManualClock::new(1_800_000_000_000))).await
}

#[tokio::test]
async fn two_workflows_flipping_a_subscription_stop_at_the_depth_limit() {
    let s = loop_server().await;
    let p = proj(&s, "o@example.com").await;
    let (on, _) = enabled_workflow(
        &p,
        "contact.unsubscribed",
        true,
        &[("UPDATE_CONTACT", json!({ "subscriptionAction": "subscribe" }))],
    )
    .await;
    let (off, _) = enabled_workflow(
        &p,
        "contact.subscribed",
        true,
        &[("UPDATE_CONTACT", json!({ "subscriptionAction": "unsubscribe" }))],
    )
    .await;
    let id = contact(&p, "ann@example.com", true, json!({})).await;
    let r = p.secret.patch(&format!("/contacts/{id}"), json!({ "subscribed": false })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    settle(&s, 30).await;
    // The API's unsubscribe starts depth 0; each flip's event starts the other workflow one deeper.
    let (ons, offs) = (executions(&p, &on).await, executions(&p, &off).await);
    let done = |l: &[Value]| l.iter().filter(|e| e["status"] == "COMPLETED").count();
    assert_eq!(done(&ons) + done(&offs), 9, "{ons:?} {offs:?}");
    assert_eq!(exit_reasons(&ons).len() + exit_reasons(&offs).len(), 1);
    let events = p.secret.get(&format!("/events/contact/{id}?limit=100")).await.json;
    let flips = events["data"]
        .as_array()
        .or(events.as_array())
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "contact.subscribed" || e["name"] == "contact.unsubscribed");
    assert_eq!(flips.count(), 1 + 9, "{events}");
}

#[tokio::test]
async fn a_contact_starts_at_most_so_many_executions_an_hour_and_the_rest_are_stopped_visibly() {
    let mut config = Config::for_tests();
    config.run_jobs = false;
    config.workflow_starts_per_contact_hour = 3;
    let s = Server::start_with(config, Some(ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "o@example.com").await;
    let (wf, _) = enabled_workflow(&p, "ping", true, &[]).await;
    contact(&p, "ann@example.com", true, json!({})).await;
    contact(&p, "bob@example.com", true, json!({})).await;
    let track = |email: &'static str| {
        let c = p.secret.clone();
        async move {
            let r = c.post("/v1/track", json!({ "email": email, "event": "ping" })).await;
            assert_eq!(r.status, 200, "{}", r.json);
        }
    };
    for _ in 0..5 {
        track("ann@example.com").await;
        settle(&s, 2).await;
    }
    track("bob@example.com").await;
    settle(&s, 2).await;
    let list = executions(&p, &wf).await;
    assert_eq!(list.iter().filter(|e| e["status"] == "COMPLETED").count(), 3 + 1, "{list:?}");
    let stopped = exit_reasons(&list);
    assert_eq!(stopped.len(), 2, "{list:?}");
    assert!(stopped.iter().all(|r| r.contains("HERALD_WORKFLOW_STARTS_PER_CONTACT_HOUR")), "{stopped:?}");
    // The next hour the contact starts again.
    s.clock().advance(3_600_000);
    track("ann@example.com").await;
    settle(&s, 2).await;
    assert_eq!(executions(&p, &wf).await.iter().filter(|e| e["status"] == "COMPLETED").count(), 5);
}

#[tokio::test]
async fn two_workflows_moving_a_contact_in_and_out_of_a_tracked_segment_stop_at_the_depth_limit() {
    let s = loop_server().await;
    let p = proj(&s, "o@example.com").await;
    let condition = json!({ "logic": "AND", "groups": [{ "filters": [
        { "field": "data.plan", "operator": "equals", "value": "vip" }] }] });
    let r = p.secret.post("/segments", json!({ "name": "VIP", "trackMembership": true, "condition": condition })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    // Entering the segment takes the contact out of it; leaving it puts the contact back.
    let (out, _) = enabled_workflow(
        &p,
        "segment.vip.entry",
        true,
        &[("UPDATE_CONTACT", json!({ "updates": { "plan": "free" } }))],
    )
    .await;
    let (back, _) =
        enabled_workflow(&p, "segment.vip.exit", true, &[("UPDATE_CONTACT", json!({ "updates": { "plan": "vip" } }))])
            .await;
    let id = contact(&p, "ann@example.com", true, json!({ "plan": "vip" })).await;
    settle(&s, 80).await;
    // The API's change enters the contact, which starts depth 0; each move the workflows make enters or
    // exits it again, one deeper: nine executions run, the tenth is stopped.
    let (outs, backs) = (executions(&p, &out).await, executions(&p, &back).await);
    let done = |l: &[Value]| l.iter().filter(|e| e["status"] == "COMPLETED").count();
    assert_eq!(done(&outs) + done(&backs), 9, "{} and {} completed", done(&outs), done(&backs));
    let stopped: Vec<String> = exit_reasons(&outs).into_iter().chain(exit_reasons(&backs)).collect();
    assert_eq!(stopped.len(), 1, "{stopped:?}");
    assert!(stopped[0].starts_with("LOOP_LIMIT") && stopped[0].contains("chain of 8"), "{}", stopped[0]);
    // Nothing more comes of it.
    settle(&s, 10).await;
    let events = p.secret.get(&format!("/events/contact/{id}?limit=100")).await.json;
    let moves = events["data"]
        .as_array()
        .or(events.as_array())
        .unwrap()
        .iter()
        .filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with("segment.vip.")));
    assert_eq!(moves.count(), 1 + 9, "{events}");
}
