//! Benchmark of the retention purge against `/v1/track` (issue 79). Prints numbers; asserts nothing.
//!
//! Herald built in-process on a fresh embedded on-disk database, events kept 30 days. A backlog past its
//! period is written straight through the store: BENCH_OLD_EVENTS events, BENCH_OLD_EMAILS emails with
//! their bodies and BENCH_OLD_DELIVERIES webhook deliveries with their payloads, all 100 days old. Then
//! CLIENTS clients drive `/v1/track` (the track benchmark's mix: returning and new contacts, 1 to 10 data
//! keys) three times: for SECONDS with no purge, while the purge works the backlog off (the job's own
//! code and limits: 500-row batches, each followed by a pause as long as it took, 100 batches of a kind a run, runs back to back until
//! nothing is left; timed until it ends, at most SECONDS), and for SECONDS with no purge again. Prints
//! each phase's rate and p50/p99, the rows the purge deleted and its rate.
//!
//! Run: `cargo bench -p herald-host --bench retention` (env: BENCH_CLIENTS, default 16; BENCH_SECONDS,
//! default 15; BENCH_OLD_EVENTS, default 200,000; BENCH_OLD_EMAILS and BENCH_OLD_DELIVERIES, default
//! 50,000 each).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use herald_host::App;
use herald_host::services::retention::{Limits, purge};
use serde_json::{Value, json};

mod common;
use common::{Rng, env_or, in_process, peak_rss_mb, percentile_ms, track_body};

const DAY: i64 = 86_400_000;

/// `/v1/track` from `clients` clients until `deadline` or until `stop` is set; answers the sorted
/// latencies (µs), the errors and the seconds it ran.
async fn drive(
    base: &str,
    key: &str,
    clients: usize,
    deadline: Instant,
    stop: Arc<AtomicBool>,
    seed: u64,
) -> (Vec<u64>, u64, f64) {
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build().unwrap();
    let new_counter = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, base, key, new_counter, errors, stop) =
            (http.clone(), base.to_string(), key.to_string(), new_counter.clone(), errors.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (seed * 1000 + c as u64 + 1));
            let mut lat = Vec::new();
            while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                let body = track_body(&mut rng, &new_counter, 5_000);
                let t = Instant::now();
                match http.post(format!("{base}/v1/track")).bearer_auth(&key).json(&body).send().await {
                    Ok(r) if r.status().is_success() => lat.push(t.elapsed().as_micros() as u64),
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    lat.sort_unstable();
    (lat, errors.load(Ordering::Relaxed), started.elapsed().as_secs_f64())
}

fn report(what: &str, (lat, errors, secs): &(Vec<u64>, u64, f64)) -> f64 {
    let p99 = percentile_ms(lat, 0.99);
    println!(
        "  {what:<22} {:>6} tracks in {secs:.1} s ({:.0}/s), errors {errors}, p50 {:.2} ms, p99 {p99:.2} ms",
        lat.len(),
        lat.len() as f64 / secs,
        percentile_ms(lat, 0.50),
    );
    p99
}

#[tokio::main]
async fn main() {
    let clients = env_or("BENCH_CLIENTS", 16) as usize;
    let seconds = env_or("BENCH_SECONDS", 15);
    let old_events = env_or("BENCH_OLD_EVENTS", 200_000) as usize;
    let old_emails = env_or("BENCH_OLD_EMAILS", 50_000) as usize;
    let old_deliveries = env_or("BENCH_OLD_DELIVERIES", 50_000) as usize;
    let dir = std::env::temp_dir().join(format!("herald-bench-retention-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut settings = in_process(&dir);
    settings.retention.retention_event_days = Some(30);
    let config = settings.resolve().unwrap();
    let periods = config.retention.clone();
    let app = App::build(config).await.unwrap();
    let st = Arc::clone(&app.state);
    let (project, keys) = herald_host::services::accounts::create_project_for(&st, "bench", None, None).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = app.start(listener).await.unwrap();
    let base = format!("http://{}", running.addr);
    println!(
        "retention benchmark: {old_events} events, {old_emails} emails and {old_deliveries} webhook deliveries 100 days \
         old; {clients} clients on /v1/track"
    );

    // The backlog, straight through the store (no outbox: nothing for the dispatch to do).
    let t = Instant::now();
    let old = st.clock.now_ms() - 100 * DAY;
    let p = project.id.clone();
    for from in (0..old_events).step_by(2_000) {
        let rows: Vec<Value> = (from..(from + 2_000).min(old_events))
            .map(|k| {
                json!({ "project": p, "contact": format!("c{}", k % 5_000), "name": "page_view", "data": { "k": k },
                    "source": "api", "created_at": old + k as i64 })
            })
            .collect();
        st.store.query("INSERT INTO event $r RETURN NONE", json!({ "r": rows })).await.unwrap();
    }
    for from in (0..old_emails).step_by(1_000) {
        let (mut emails, mut bodies) = (Vec::new(), Vec::new());
        for k in from..(from + 1_000).min(old_emails) {
            let id = format!("old-{k:08}");
            emails.push(
                json!({ "id": id, "project": p, "contact": format!("c{}", k % 5_000), "recipient": "r@bench.example",
                "from": "news@bench.example", "subject": "Old news", "kind": "MARKETING",
                "message_id": format!("<{id}@bench.example>"), "status": "DELIVERED", "created_at": old + k as i64,
                "updated_at": old + k as i64 }),
            );
            bodies.push(json!({ "id": id, "html": "<p>An old newsletter</p>".repeat(100), "text": "An old newsletter",
                "headers": "[]", "attachments": "[]" }));
        }
        common::insert_emails(&st.store, emails, bodies).await;
    }
    for from in (0..old_deliveries).step_by(1_000) {
        let rows: Vec<Value> = (from..(from + 1_000).min(old_deliveries))
            .map(|k| json!({ "e": format!("ev-{k:08}"), "at": old + k as i64 }))
            .collect();
        st.store
            .query(
                "FOR $d IN $rows {
                    CREATE type::record('webhook_delivery', ['wh', $d.e]) CONTENT { project: $p, event_type: 'page_view',
                        status: 'SUCCEEDED', attempts: [], test: false, created_at: $d.at, updated_at: $d.at } RETURN NONE;
                    CREATE type::record('webhook_payload', $d.e) CONTENT { project: $p, body: '{\"type\":\"page_view\"}' }
                        RETURN NONE;
                 }",
                json!({ "rows": rows, "p": p }),
            )
            .await
            .unwrap();
    }
    println!("  backlog written in {:.1} s", t.elapsed().as_secs_f64());
    // The database settles (its flushes and compactions of the backlog), then returning contacts for the
    // mix (not measured).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let warm = Instant::now() + Duration::from_secs(3);
    drive(&base, &keys.secret, clients, warm, Arc::new(AtomicBool::new(false)), 0).await;

    let window = Duration::from_secs(seconds);
    let before =
        drive(&base, &keys.secret, clients, Instant::now() + window, Arc::new(AtomicBool::new(false)), 1).await;

    // The purge, run after run, while the clients track.
    let done = Arc::new(AtomicBool::new(false));
    let purger = {
        let (st, done, periods) = (st.clone(), done.clone(), periods.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let mut total = herald_host::services::retention::Purged::default();
            let mut runs = 0;
            loop {
                let p = purge(&st.store, st.clock.now_ms(), &periods, None, Limits::default()).await.unwrap();
                runs += 1;
                total.email_bodies += p.email_bodies;
                total.events += p.events;
                total.webhook_deliveries += p.webhook_deliveries;
                total.jobs += p.jobs;
                total.idempotency_keys += p.idempotency_keys;
                if !p.more {
                    break;
                }
            }
            done.store(true, Ordering::Relaxed);
            (total, runs, started.elapsed().as_secs_f64())
        })
    };
    let during = drive(&base, &keys.secret, clients, Instant::now() + window, done.clone(), 2).await;
    let (purged, runs, purge_secs) = purger.await.unwrap();
    let after = drive(&base, &keys.secret, clients, Instant::now() + window, Arc::new(AtomicBool::new(false)), 3).await;

    println!("  phases of /v1/track:");
    let p99_before = report("no purge (before)", &before);
    let p99_during = report("during the purge", &during);
    let p99_after = report("no purge (after)", &after);
    let without = (p99_before + p99_after) / 2.0;
    println!(
        "  the purge: {} rows ({} events, {} email bodies, {} webhook deliveries) in {purge_secs:.1} s over {runs} runs \
         ({:.0} rows/s); it {} the measured window",
        purged.total(),
        purged.events,
        purged.email_bodies,
        purged.webhook_deliveries,
        purged.total() as f64 / purge_secs,
        if during.2 + 0.5 < seconds as f64 { "ended inside" } else { "covered" },
    );
    println!(
        "  p99 during / without (mean of before and after): {p99_during:.2} / {without:.2} ms = {:+.0}%",
        (p99_during / without - 1.0) * 100.0
    );
    println!("  peak RSS: {:.0} MB", peak_rss_mb(std::process::id()));
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
