//! Workflows across restarts and processes (docs/behaviour.md#workflows): a restart in the middle of a
//! DELAY resumes each execution once; two herald processes on one database run each step once.

use std::collections::HashMap;
use std::sync::Arc;

use herald_host::config::Config;
use herald_host::infra::clock::ManualClock;
use serde_json::{Value, json};

use crate::harness::*;
use crate::smtp_sink::SmtpSink;

const T0: i64 = 1_800_000_000_000;

fn config(sink: &SmtpSink) -> Config {
    let mut c = Config::for_tests();
    c.smtp_url = Some(sink.url());
    c.run_jobs = false;
    c.send_rate_per_second = 0;
    c
}

/// A second process on the same database: its own caches, engine and worker (stepped by the test).
async fn sibling(s: &Server, sink: &SmtpSink, clock: &ManualClock) -> Server {
    let app = herald_host::App::from_store(
        config(sink),
        s.state.store.sibling(),
        Arc::new(clock.clone()),
        herald_host::infra::jobs::builtin_registry(),
    )
    .await
    .unwrap();
    Server::serve(app, Some(clock.clone())).await
}

/// A project with a verified sender and an enabled workflow SEND_EMAIL → DELAY 10 min → SEND_EMAIL →
/// EXIT; answers the project and the workflow.
async fn setup(s: &Server) -> (Proj, String) {
    let p = proj(s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let t = p
        .secret
        .post("/templates", json!({ "name": "T", "type": "TRANSACTIONAL", "subject": "Hi {{email}}", "body": "<p>Hi</p>", "from": "news@shop.test" }))
        .await;
    let t = t.json["id"].as_str().unwrap().to_string();
    let r = p.secret.post("/workflows", json!({ "name": "Drip", "eventName": "signup" })).await;
    let wf = r.json["id"].as_str().unwrap().to_string();
    for body in [
        json!({ "type": "SEND_EMAIL", "name": "first", "templateId": t }),
        json!({ "type": "DELAY", "name": "wait", "config": { "amount": 10, "unit": "minutes" } }),
        json!({ "type": "SEND_EMAIL", "name": "second", "templateId": t }),
        json!({ "type": "EXIT", "name": "done" }),
    ] {
        assert_eq!(p.secret.post(&format!("/workflows/{wf}/steps"), body).await.status, 201);
    }
    p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await;
    (p, wf)
}

async fn start_for(c: &Client, wf: &str, n: usize, tag: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let k = c.post("/contacts", json!({ "email": format!("{tag}{i}@example.com") })).await;
        let k = k.json["id"].as_str().unwrap().to_string();
        let r = c.post(&format!("/workflows/{wf}/executions"), json!({ "contactId": k })).await;
        assert_eq!(r.status, 201, "{}", r.json);
        ids.push(r.json["id"].as_str().unwrap().to_string());
    }
    ids
}

/// Runs the queues of these servers side by side, a few jobs at a time, until none has work.
async fn drain_all(servers: &[&Server]) {
    for _ in 0..500 {
        let runs = futures_util::future::join_all(servers.iter().map(|s| s.worker.run_once(3))).await;
        if runs.into_iter().all(|r| r.unwrap().is_empty()) {
            return;
        }
    }
    panic!("the queues did not drain");
}

fn per_recipient(sink: &SmtpSink) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for r in sink.received() {
        for to in r.to {
            *m.entry(to).or_default() += 1;
        }
    }
    m
}

async fn check_done(c: &Client, wf: &str, ids: &[String]) {
    for id in ids {
        let e: Value = c.get(&format!("/workflows/{wf}/executions/{id}")).await.json;
        assert_eq!(e["status"], "EXITED", "{e}");
        let kinds: Vec<&str> =
            e["stepExecutions"].as_array().unwrap().iter().map(|r| r["stepType"].as_str().unwrap()).collect();
        assert_eq!(kinds, vec!["TRIGGER", "SEND_EMAIL", "DELAY", "SEND_EMAIL", "EXIT"], "each step once: {e}");
    }
}

#[tokio::test]
async fn a_restart_in_the_middle_of_a_delay_resumes_each_execution_once() {
    let sink = SmtpSink::start(0).await;
    let clock = ManualClock::new(T0);
    let s = Server::start_with(config(&sink), Some(clock.clone())).await;
    let (p, wf) = setup(&s).await;
    let ids = start_for(&p.secret, &wf, 3, "r").await;
    drain_all(&[&s]).await;
    sink.wait_for(3).await;
    // The process goes away while every execution waits in its DELAY; a new one takes the database over.
    let key = p.json["secret"].as_str().unwrap().to_string();
    let next = sibling(&s, &sink, &clock).await;
    drop(s);
    let c2 = next.with_key(&key);
    clock.advance(10 * 60_000);
    drain_all(&[&next]).await;
    drain_all(&[&next]).await;
    sink.wait_for(6).await;
    assert!(per_recipient(&sink).values().all(|n| *n == 2), "{:?}", per_recipient(&sink));
    assert_eq!(sink.received().len(), 6);
    check_done(&c2, &wf, &ids).await;
    next.stop().await;
}

#[tokio::test]
async fn two_processes_on_one_database_run_each_step_once() {
    let sink = SmtpSink::start(0).await;
    let clock = ManualClock::new(T0);
    let a = Server::start_with(config(&sink), Some(clock.clone())).await;
    let b = sibling(&a, &sink, &clock).await;
    let (p, wf) = setup(&a).await;
    let key = p.json["secret"].as_str().unwrap().to_string();
    let mut ids = start_for(&p.secret, &wf, 15, "a").await;
    // Half of the starts go through the other process.
    ids.extend(start_for(&b.with_key(&key), &wf, 15, "b").await);
    drain_all(&[&a, &b]).await;
    clock.advance(10 * 60_000);
    drain_all(&[&a, &b]).await;
    sink.wait_for(60).await;
    drain_all(&[&a, &b]).await;
    let got = per_recipient(&sink);
    assert_eq!(got.len(), 30);
    assert!(got.values().all(|n| *n == 2), "each contact got each email once: {got:?}");
    assert_eq!(sink.received().len(), 60);
    check_done(&p.secret, &wf, &ids).await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_workflow_enabled_through_another_process_starts_on_the_next_event_here() {
    let sink = SmtpSink::start(0).await;
    let clock = ManualClock::new(T0);
    let a = Server::start_with(config(&sink), Some(clock.clone())).await;
    let b = sibling(&a, &sink, &clock).await;
    let p = proj(&a, "o@example.com").await;
    let key = p.json["secret"].as_str().unwrap().to_string();
    let track = |email: &str| {
        let body = json!({ "email": email, "event": "signup" });
        let c = &p.secret;
        async move { assert_eq!(c.post("/v1/track", body).await.status, 200) }
    };
    let r = p.secret.post("/workflows", json!({ "name": "Welcome", "eventName": "signup" })).await;
    let wf = r.json["id"].as_str().unwrap().to_string();
    let r = p.secret.post(&format!("/workflows/{wf}/steps"), json!({ "type": "EXIT", "name": "done" })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    // Process a hands out an event while nothing listens (and keeps that answer for a moment).
    track("before@example.com").await;
    clock.advance(1_000);
    drain_all(&[&a]).await;
    // The workflow is enabled through process b; the next event a hands out starts it, although a read
    // what its workflows listen for a moment ago (the shared workflows epoch moved).
    let r = b.with_key(&key).patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    track("after@example.com").await;
    clock.advance(1_000);
    drain_all(&[&a]).await;
    let list = p.secret.get(&format!("/workflows/{wf}/executions")).await.json;
    let started: Vec<&str> = list["data"].as_array().unwrap().iter().map(|e| e["status"].as_str().unwrap()).collect();
    assert_eq!(started, vec!["EXITED"], "one execution, for the event after the change: {list}");
    a.stop().await;
    b.stop().await;
}
