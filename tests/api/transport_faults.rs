//! Delivery through an SMTP server that misbehaves (docs/delivery.md): connection refused, a storm of
//! temporary refusals, a server that accepts the message and then hangs, one that drops the connection
//! after DATA. Nothing is lost: each email is DEFERRED (one `email.deferred`), tried again on its schedule
//! (or when its transport is back), and FAILED with the reason only when its give-up window ends, visible
//! in the activity feed; a hang holds a delivery no longer than its timeout.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herald_host::config::Config;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::harness::*;

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// 451 to every RCPT.
    TempStorm,
    /// Reads the whole message, then never answers.
    HangAfterData,
    /// Reads the whole message, then closes the connection without answering, `n` times; then accepts.
    DropAfterData(usize),
}

/// A misbehaving SMTP server on loopback; `messages` is what it read in full (each message's
/// Message-ID header), `accepted` what it answered 250 to.
struct Faulty {
    port: u16,
    messages: Arc<Mutex<Vec<String>>>,
    accepted: Arc<AtomicUsize>,
}

async fn faulty(fault: Fault) -> Faulty {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let messages = Arc::new(Mutex::new(Vec::new()));
    let accepted = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    let (m, a) = (messages.clone(), accepted.clone());
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let (m, a, drops) = (m.clone(), a.clone(), drops.clone());
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                let mut lines = BufReader::new(r).lines();
                let _ = w.write_all(b"220 faulty.test ESMTP\r\n").await;
                while let Ok(Some(line)) = lines.next_line().await {
                    let upper = line.to_uppercase();
                    let reply: &[u8] = if upper.starts_with("EHLO") || upper.starts_with("HELO") {
                        b"250-faulty.test\r\n250 8BITMIME\r\n"
                    } else if upper.starts_with("RCPT") && fault == Fault::TempStorm {
                        b"451 4.3.0 Try again later\r\n"
                    } else if upper == "DATA" {
                        let _ = w.write_all(b"354 Go ahead\r\n").await;
                        let mut id = String::new();
                        while let Ok(Some(l)) = lines.next_line().await {
                            if l == "." {
                                break;
                            }
                            if l.to_ascii_lowercase().starts_with("message-id:") {
                                id = l[11..].trim().to_string();
                            }
                        }
                        m.lock().unwrap().push(id);
                        match fault {
                            Fault::HangAfterData => {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                                return;
                            }
                            Fault::DropAfterData(n) if drops.fetch_add(1, Ordering::SeqCst) < n => return,
                            _ => {}
                        }
                        a.fetch_add(1, Ordering::SeqCst);
                        b"250 2.0.0 OK\r\n"
                    } else if upper == "QUIT" {
                        let _ = w.write_all(b"221 Bye\r\n").await;
                        return;
                    } else {
                        b"250 OK\r\n"
                    };
                    if w.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Faulty { port, messages, accepted }
}

struct Env {
    s: Server,
    p: Proj,
}

/// A stepped server (jobs run when the test says, a manual clock) delivering to `url` with timeouts of a
/// second.
async fn env(url: String) -> Env {
    let mut config = Config::for_tests();
    config.smtp_url = Some(format!("{url}?timeout_secs=1&send_timeout_secs=1"));
    config.run_jobs = false;
    let s = Server::start_with(config, Some(herald_host::infra::clock::ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    Env { s, p }
}

async fn send(e: &Env) -> String {
    let r =
        e.p.secret
            .post("/v1/send", json!({ "to": "a@example.org", "from": "news@shop.test", "subject": "s", "body": "b" }))
            .await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string()
}

async fn status(e: &Env, id: &str) -> (String, Option<String>) {
    let row = e.s.state.store.email(&e.p.id, id).await.unwrap().unwrap();
    (row.status.to_string(), row.error)
}

/// The 72-hour give-up window of the default settings.
const WINDOW_MS: i64 = 259_200_000;

/// Runs the queue attempt by attempt, moving the clock to each deferred email's next attempt (or its
/// window's end when it waits for its transport), until the email settles; answers the moments (ms
/// after it was written) at which its job ran. No attempt may take much longer than the timeouts.
async fn settle(e: &Env, id: &str) -> Vec<i64> {
    let written = e.s.state.store.email(&e.p.id, id).await.unwrap().unwrap().created_at;
    let mut ran = Vec::new();
    for attempt in 1..=200 {
        let t = Instant::now();
        ran.push(herald_host::infra::clock::Clock::now_ms(e.s.clock()) - written);
        e.s.worker.run_once(50).await.unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "attempt {attempt} held its worker {:?}", t.elapsed());
        let row = e.s.state.store.email(&e.p.id, id).await.unwrap().unwrap();
        if row.status.to_string() != "DEFERRED" {
            return ran;
        }
        let next = row.next_attempt_at.unwrap_or(written + WINDOW_MS);
        assert!(next <= written + WINDOW_MS, "no attempt is planned past the window: {next}");
        e.s.clock().advance((next - herald_host::infra::clock::Clock::now_ms(e.s.clock())).max(0));
    }
    panic!("the email never settled: {:?}", status(e, id).await);
}

async fn in_the_feed(e: &Env, kind: &str, id: &str) -> Vec<serde_json::Value> {
    let feed = e.p.secret.get(&format!("/activity?type={kind}")).await;
    assert_eq!(feed.status, 200, "{}", feed.json);
    feed.json["data"].as_array().unwrap().iter().filter(|i| i.to_string().contains(id)).cloned().collect()
}

async fn failed_in_the_feed(e: &Env, id: &str) -> String {
    let items = in_the_feed(e, "email.failed", id).await;
    assert_eq!(items.len(), 1, "one failure in the activity feed: {items:?}");
    items[0].to_string()
}

#[tokio::test]
async fn a_refused_connection_defers_the_email_until_its_window_ends_then_fails_it_with_the_reason() {
    let port = crate::binary::free_port();
    let e = env(format!("smtp://127.0.0.1:{port}")).await;
    let id = send(&e).await;
    e.s.worker.run_once(50).await.unwrap();
    // The relay is down: the email waits for it (no time of its own, no attempt counted).
    let row = e.s.state.store.email(&e.p.id, &id).await.unwrap().unwrap();
    assert_eq!((row.status.to_string().as_str(), row.next_attempt_at, row.attempts), ("DEFERRED", None, Some(0)));
    assert!(row.error.as_deref().unwrap_or("").contains("cannot connect"), "{:?}", row.error);
    let deferred = in_the_feed(&e, "email.deferred", &id).await;
    assert_eq!(deferred.len(), 1, "{deferred:?}");
    assert_eq!(e.s.state.store.deferred_emails().await.unwrap(), 1, "counted for herald_emails_deferred");
    // Its job waits until the window's end, not a moment before: nothing runs an hour short of it.
    e.s.clock().advance(WINDOW_MS - 3_600_000);
    e.s.worker.run_once(50).await.unwrap();
    assert_eq!(status(&e, &id).await.0, "DEFERRED");
    let ran = settle(&e, &id).await;
    assert_eq!(ran.last(), Some(&WINDOW_MS), "given up when the window ended: {ran:?}");
    let (s, why) = status(&e, &id).await;
    assert_eq!(s, "FAILED");
    assert!(why.as_deref().unwrap_or("").contains("cannot connect"), "{why:?}");
    failed_in_the_feed(&e, &id).await;
    assert_eq!(in_the_feed(&e, "email.deferred", &id).await.len(), 1, "one email.deferred, not one per attempt");
    e.s.stop().await;
}

#[tokio::test]
async fn a_storm_of_temporary_refusals_follows_the_schedule_and_fails_at_the_windows_end_with_the_servers_words() {
    let f = faulty(Fault::TempStorm).await;
    let e = env(format!("smtp://127.0.0.1:{}", f.port)).await;
    let id = send(&e).await;
    let ran = settle(&e, &id).await;
    // Tried at once, then after 1, 2, 5, 10, 20 and 30 minutes, then hourly, until the window's end.
    let gaps: Vec<i64> = ran.windows(2).map(|w| (w[1] - w[0]) / 1000).collect();
    assert_eq!(&gaps[..7], &[60, 120, 300, 600, 1200, 1800, 3600], "{gaps:?}");
    assert!(gaps[6..gaps.len() - 1].iter().all(|g| *g == 3600), "{gaps:?}");
    assert_eq!(ran.last(), Some(&WINDOW_MS), "failed when the window ended, not at a later attempt");
    let (s, why) = status(&e, &id).await;
    assert_eq!(s, "FAILED");
    assert!(why.as_deref().unwrap_or("").contains("Try again later"), "{why:?}");
    assert!(failed_in_the_feed(&e, &id).await.contains("Try again later"));
    // One email.deferred, with the reason, the attempts so far and the next attempt.
    let deferred = in_the_feed(&e, "email.deferred", &id).await;
    assert_eq!(deferred.len(), 1, "{deferred:?}");
    let text = deferred[0].to_string();
    assert!(text.contains("Try again later") && text.contains("nextAttemptAt"), "{text}");
    assert!(f.messages.lock().unwrap().is_empty());
    e.s.stop().await;
}

#[tokio::test]
async fn a_server_that_hangs_after_data_holds_each_attempt_only_until_its_timeout() {
    let f = faulty(Fault::HangAfterData).await;
    let e = env(format!("smtp://127.0.0.1:{}", f.port)).await;
    let id = send(&e).await;
    // Each attempt is held only until the send timeout; the email is deferred (a transactional email is
    // sent at least once, again with its Message-ID) until its window ends.
    for _ in 0..2 {
        let t = Instant::now();
        e.s.worker.run_once(50).await.unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "an attempt held its worker {:?}", t.elapsed());
        assert_eq!(status(&e, &id).await.0, "DEFERRED");
        e.s.clock().advance(60_000);
    }
    e.s.clock().advance(WINDOW_MS);
    e.s.worker.run_once(50).await.unwrap();
    let (s, why) = status(&e, &id).await;
    assert_eq!(s, "FAILED", "{why:?}");
    assert!(why.as_deref().unwrap_or("").contains("did not answer"), "{why:?}");
    assert_eq!(f.accepted.load(Ordering::SeqCst), 0);
    e.s.stop().await;
}

#[tokio::test]
async fn a_connection_dropped_after_data_is_retried_with_the_same_message_id() {
    let f = faulty(Fault::DropAfterData(2)).await;
    let e = env(format!("smtp://127.0.0.1:{}", f.port)).await;
    let id = send(&e).await;
    settle(&e, &id).await;
    assert_eq!(status(&e, &id).await.0, "SENT");
    assert_eq!(f.accepted.load(Ordering::SeqCst), 1, "answered once");
    let seen = f.messages.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "two dropped hand-overs and the accepted one: {seen:?}");
    assert!(
        seen.iter().all(|m| m == &seen[0] && !m.is_empty()),
        "one Message-ID, so the receiver drops repeats: {seen:?}"
    );
    e.s.stop().await;
}
