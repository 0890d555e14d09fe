//! Benchmark of outbound webhooks (docs/behaviour.md#webhooks). Prints numbers; asserts nothing.
//!
//! 1. The ceiling: the receiver alone, a keep-alive HTTP/1.1 server on loopback answering 200, posted the
//!    same signed body by 16 concurrent clients (as many as one worker's batch of attempts) for 5 s.
//! 2. Herald in-process on a fresh embedded on-disk database, with ENDPOINTS endpoints on that receiver
//!    wanting every event. EVENTS events of 1,000 contacts are written through the store in batches of
//!    1,000 with their outbox rows, as requests would; the run times from the first write until the
//!    receiver has had every delivery (EVENTS × ENDPOINTS), and checks that each `webhook-id` and
//!    endpoint pair arrived once.
//!
//! Run: `cargo bench -p herald-host --bench webhooks` (env: BENCH_EVENTS, default 10,000;
//! BENCH_ENDPOINTS, default 2).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herald_host::App;
use herald_host::store::contacts::Contact;
use herald_host::store::events::Event;
use serde_json::{Map, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::{env_or, in_process, peak_rss_mb};

/// What the receiver saw: requests, and the (path, webhook-id) pairs.
#[derive(Default)]
struct Seen {
    requests: AtomicU64,
    pairs: Mutex<HashSet<(String, String)>>,
    repeats: AtomicU64,
}

/// A keep-alive HTTP/1.1 receiver answering every request 200 (Content-Length bodies only).
async fn receiver(seen: Arc<Seen>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(16 * 1024);
                let mut chunk = vec![0u8; 16 * 1024];
                loop {
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i;
                        }
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                    let path = head.split(' ').nth(1).unwrap_or_default().to_string();
                    let header = |name: &str| {
                        head.split("\r\n").find_map(|l| {
                            l.split_once(':')
                                .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                                .map(|(_, v)| v.trim().to_string())
                        })
                    };
                    let len: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
                    let id = header("webhook-id").unwrap_or_default();
                    while buf.len() < head_end + 4 + len {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..head_end + 4 + len);
                    seen.requests.fetch_add(1, Ordering::Relaxed);
                    if !id.is_empty() && !seen.pairs.lock().unwrap().insert((path, id)) {
                        seen.repeats.fetch_add(1, Ordering::Relaxed);
                    }
                    let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
                    if sock.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::main]
async fn main() {
    let events = env_or("BENCH_EVENTS", 10_000) as usize;
    let endpoints = env_or("BENCH_ENDPOINTS", 2).max(1) as usize;
    let seen = Arc::new(Seen::default());
    let addr = receiver(seen.clone()).await;

    // 1. The receiver alone.
    let client = reqwest::Client::new();
    let body = json!({ "type": "signup", "timestamp": "2026-12-04T00:00:00Z", "data": { "id": "x" } }).to_string();
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (client, body) = (client.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while t.elapsed() < Duration::from_secs(5) {
                let r = client
                    .post(format!("http://{addr}/ceiling"))
                    .header("content-type", "application/json")
                    .header("webhook-signature", "v1,x")
                    .body(body.clone())
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success());
                n += 1;
            }
            n
        }));
    }
    let mut n = 0;
    for task in tasks {
        n += task.await.unwrap();
    }
    println!("webhooks benchmark: {events} events to {endpoints} endpoints on a loopback receiver");
    println!("  ceiling: the receiver alone, 16 clients: {:.0} requests/s", n as f64 / t.elapsed().as_secs_f64());
    let before = seen.requests.load(Ordering::Relaxed);

    // 2. Herald.
    let dir = std::env::temp_dir().join(format!("herald-bench-webhooks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut settings = in_process(&dir);
    settings.webhooks_allow_private = Some(true);
    let app = App::build(settings.resolve().unwrap()).await.unwrap();
    let st = Arc::clone(&app.state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let _running = app.start(listener).await.unwrap();
    let (project, _) = herald_host::services::accounts::create_project_for(&st, "bench", None, None).await.unwrap();
    for i in 0..endpoints {
        let new = herald_host::services::webhooks::NewEndpoint {
            url: format!("http://{addr}/hook{i}"),
            events: vec!["*".into()],
            description: None,
            enabled: true,
        };
        st.webhooks.create(&project.id, new).await.unwrap();
    }
    let now = st.clock.now_ms();
    let people: Vec<Contact> = (0..1000)
        .map(|k| Contact {
            id: uuid::Uuid::now_v7().to_string(),
            email: format!("u{k}@example.org"),
            subscribed: true,
            data: Map::new(),
            version: 1,
            created_at: now,
            updated_at: now,
        })
        .collect();
    st.store.write_contact_batch(&project.id, &people, &[], &[], &[]).await.unwrap();
    // Let the contacts' own writes settle before the clock starts.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let base = seen.requests.load(Ordering::Relaxed);
    let want = (events * endpoints) as u64;
    let t = Instant::now();
    for b in 0..events.div_ceil(1000) {
        let batch: Vec<Event> = (b * 1000..((b + 1) * 1000).min(events))
            .map(|k| {
                let mut data = Map::new();
                data.insert("n".into(), k.into());
                Event::new(&project.id, &people[k % people.len()].id, "signup", data, "api", st.clock.now_ms())
            })
            .collect();
        st.store.write_contact_batch(&project.id, &[], &[], &[], &batch).await.unwrap();
    }
    let written = t.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(600);
    while seen.requests.load(Ordering::Relaxed) - base < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = t.elapsed().as_secs_f64();
    let got = seen.requests.load(Ordering::Relaxed) - base;
    println!(
        "  herald: {got} of {want} deliveries in {took:.1} s = {:.0} deliveries/s (events written in {written:.1} s); \
         repeats {}; before Herald the receiver had {before} requests",
        got as f64 / took,
        seen.repeats.load(Ordering::Relaxed)
    );
    println!("  peak RSS of the process {:.0} MB", peak_rss_mb(std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
}
