//! Delivery control (docs/delivery.md): a relay in a process of its own (`relay_process`), killed and
//! restarted, while Herald keeps what it accepted. A relay down for a minute loses nothing and gets
//! everything once as soon as it is back; a destination that refuses for now holds up no other; the
//! give-up window ends in FAILED with the relay's words; a `kill -9` of Herald while mail waits loses
//! none and sends none twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_host::config::Config;
use serde_json::{Value, json};

use crate::binary::{Killable, signal};
use crate::harness::*;
use crate::relay_process::{Relay, Rules};

struct Env {
    s: Server,
    p: Proj,
}

/// A server with its job worker running, delivering through `relay` (sessions open within 2 s), and
/// `extra` settings.
async fn env(relay: &Relay, extra: impl FnOnce(&mut Config)) -> Env {
    let mut config = Config::for_tests();
    config.smtp_url = Some(format!("{}?timeout_secs=2&send_timeout_secs=10", relay.url()));
    extra(&mut config);
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    Env { s, p }
}

async fn send_to(e: &Env, to: &str) -> String {
    let r =
        e.p.secret
            .post("/v1/send", json!({ "to": to, "from": "hi@shop.test", "subject": "s", "body": "<p>b</p>" }))
            .await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string()
}

async fn status(e: &Env, id: &str) -> String {
    e.s.state.store.email(&e.p.id, id).await.unwrap().unwrap().status.to_string()
}

/// Waits (up to `secs`) until `done` holds.
async fn until<F: std::future::Future<Output = bool>>(secs: u64, what: &str, mut done: impl FnMut() -> F) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < Duration::from_secs(secs), "{what} within {secs} s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn metric(e: &Env, line_start: &str) -> Option<String> {
    let text = reqwest::get(format!("{}/metrics", e.s.base)).await.unwrap().text().await.unwrap();
    text.lines().find_map(|l| l.strip_prefix(line_start)).map(|v| v.trim().to_string())
}

/// The Message-ID Herald gives an email: `<email id@sender domain>`.
fn message_id(id: &str) -> String {
    format!("<{id}@shop.test>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_down_for_a_minute_loses_nothing_and_gets_everything_once_within_30_s_of_its_return() {
    let mut relay = Relay::start(Rules::default()).await;
    let e = env(&relay, |_| {}).await;
    for i in 0..30 {
        let r = e.p.secret.post("/contacts", json!({ "email": format!("c{i}@example.org"), "subscribed": true })).await;
        assert!(r.status == 200 || r.status == 201, "{}", r.json);
    }
    let campaign =
        e.p.secret
            .post(
                "/campaigns",
                json!({ "name": "Outage", "subject": "Hello", "body": "<p>Hi</p>", "from": "news@shop.test",
                "audienceType": "ALL" }),
            )
            .await;
    let cid = campaign.json["data"]["id"].as_str().unwrap().to_string();

    // The relay goes down; 20 emails and the campaign are accepted meanwhile.
    relay.kill();
    let down = Instant::now();
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(send_to(&e, &format!("t{i}@example.org")).await);
    }
    assert_eq!(e.p.secret.post(&format!("/campaigns/{cid}/send"), json!({})).await.status, 200);
    until(30, "every email deferred", || async {
        let stats = e.p.secret.get(&format!("/campaigns/{cid}/stats")).await.json.clone();
        let mut all = stats["deferredCount"] == 30;
        for id in &ids {
            all &= status(&e, id).await == "DEFERRED";
        }
        all
    })
    .await;
    until(5, "the deferred gauge at 50", || async {
        metric(&e, "herald_emails_deferred ").await.as_deref() == Some("50")
    })
    .await;
    let stats = e.p.secret.get(&format!("/campaigns/{cid}/stats")).await.json.clone();
    assert_eq!((stats["failedCount"].clone(), stats["status"].clone()), (json!(0), json!("SENDING")), "{stats}");

    // Back after a minute: everything goes at once, whatever each email's own schedule says.
    tokio::time::sleep(Duration::from_secs(60).saturating_sub(down.elapsed())).await;
    relay.up().await;
    let back = Instant::now();
    until(30, "all 50 emails at the relay within 30 s of its return", || async { relay.accepted().len() >= 50 }).await;
    eprintln!("the relay had all 50 emails {:?} after its return", back.elapsed());
    let counts = relay.counts();
    for id in &ids {
        assert_eq!(counts.get(&message_id(id)), Some(&1), "{id} delivered once: {counts:?}");
    }
    let rcpts: Vec<String> = relay.accepted().into_iter().map(|a| a.rcpt).collect();
    for i in 0..30 {
        let to = format!("c{i}@example.org");
        assert_eq!(rcpts.iter().filter(|r| **r == to).count(), 1, "{to} got the campaign once");
    }
    for id in &ids {
        until(10, "SENT", || async { status(&e, id).await == "SENT" }).await;
    }
    until(20, "the campaign SENT", || async {
        let stats = e.p.secret.get(&format!("/campaigns/{cid}/stats")).await.json.clone();
        stats["status"] == "SENT" && stats["sentCount"] == 30 && stats["deferredCount"] == 0
    })
    .await;
    let stats = e.p.secret.get(&format!("/campaigns/{cid}/stats")).await.json.clone();
    assert_eq!(stats["failedCount"], 0, "{stats}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(relay.accepted().len(), 50, "nothing twice");
    e.s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_that_refuses_for_now_is_slowed_then_paused_and_holds_up_no_other() {
    let relay = Relay::start(Rules { tempfail_domains: vec!["slow.test".into()], ..Default::default() }).await;
    let e = env(&relay, |_| {}).await;
    let mut slow = Vec::new();
    for i in 0..30 {
        slow.push(send_to(&e, &format!("s{i}@slow.test")).await);
    }
    let started = Instant::now();
    let tos: Vec<String> = (0..100).map(|i| format!("f{i}@fast.test")).collect();
    let fast: Vec<String> = futures_util::future::join_all(tos.iter().map(|to| send_to(&e, to))).await;
    let accepted = started.elapsed();
    until(20, "every fast.test email at the relay", || async { relay.accepted().len() >= 100 }).await;
    eprintln!("100 fast.test emails accepted in {accepted:?}, all delivered {:?} after the first", started.elapsed());
    for id in &fast {
        until(5, "SENT", || async { status(&e, id).await == "SENT" }).await;
    }
    for id in &slow {
        until(10, "deferred", || async { status(&e, id).await == "DEFERRED" }).await;
        let row = e.s.state.store.email(&e.p.id, id).await.unwrap().unwrap();
        let why = row.error.as_deref().unwrap_or("");
        assert!(why.contains("Greylisted") || why.contains("slow.test is paused"), "{why}");
        assert!(row.next_attempt_at.is_some(), "a refused email is tried again on its schedule");
    }
    assert!(relay.accepted().iter().all(|a| a.rcpt.ends_with("@fast.test")));
    // Each refusal halved what slow.test may have at once, and five in a row paused it: the rest of its
    // thirty emails were deferred to the pause's end without being offered.
    let refused = relay.refused();
    eprintln!("slow.test refused {} of its 30 emails before its pause", refused.len());
    assert!((5..30).contains(&refused.len()), "{} refusals", refused.len());
    let paused = e.s.state.store.email(&e.p.id, slow.last().unwrap()).await.unwrap().unwrap();
    assert!(paused.error.as_deref().unwrap_or("").contains("paused"), "{:?}", paused.error);
    // The transport itself is up: the refusals were the destination's.
    assert_eq!(e.s.state.delivery.breakers.down("smtp"), None);
    e.s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn herald_killed_while_mail_waits_for_its_relay_loses_none_and_sends_none_twice() {
    let mut relay = Relay::start(Rules::default()).await;
    relay.kill();
    let k = Killable::new("deferral-crash").env("HERALD_SMTP_URL", format!("{}?timeout_secs=2", relay.url()));
    let (project, secret) = k.project(Some("shop.test"));
    let mut server = k.serve().await;
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for i in 0..20 {
        let r = http
            .post(format!("{}/v1/send", k.base))
            .bearer_auth(&secret)
            .json(&json!({ "to": format!("k{i}@example.org"), "from": "hi@shop.test", "subject": "s", "body": "b" }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        ids.push(v["data"]["emails"][0]["email"].as_str().unwrap().to_string());
    }
    // Every one waits for the relay, deferred, and the relay is known down.
    let metrics = || async { reqwest::get(format!("{}/metrics", k.base)).await.unwrap().text().await.unwrap() };
    until(30, "20 emails deferred", || async { metrics().await.lines().any(|l| l == "herald_emails_deferred 20") })
        .await;
    assert!(metrics().await.lines().any(|l| l == "herald_transport_up{transport=\"smtp\"} 0"));
    signal(&mut server, "-KILL");
    drop(server);

    // Restarted first, then the relay comes back: the restarted process finds what waits and sends it.
    let _server = k.serve().await;
    relay.up().await;
    let back = Instant::now();
    until(45, "all 20 at the relay", || async { relay.accepted().len() >= 20 }).await;
    eprintln!("after the restart, the relay had all 20 emails {:?} after its return", back.elapsed());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let counts: HashMap<String, usize> = relay.counts();
    for id in &ids {
        assert_eq!(counts.get(&message_id(id)), Some(&1), "{id} once: {counts:?}");
    }
    assert_eq!(relay.accepted().len(), 20);
    until(10, "the relay up again", || async {
        metrics().await.lines().any(|l| l == "herald_transport_up{transport=\"smtp\"} 1")
    })
    .await;
    let _ = project;
}
