//! Benchmark of `POST /v1/track` (contacts issue). Prints numbers; asserts nothing.
//!
//! 1. Creates a project with `herald project create` in a fresh embedded (SurrealKV, on disk) database.
//! 2. Starts `herald serve` on that database as a child process, with the rate limit off.
//! 3. Drives `/v1/track` over loopback from CLIENTS concurrent clients for SECONDS: a mix of returning
//!    contacts (a pool) and new ones, with 1 to 10 data keys each.
//! 4. Prints events/s, p50/p99 latency and the server's peak memory (VmHWM).
//! 5. Stops the server, opens the same database in-process and measures the raw rate at which it takes
//!    the same event rows through batched `INSERT`s: the ceiling Herald works under.
//!
//! Run: `cargo bench -p herald-host --bench track` (env: BENCH_CLIENTS, BENCH_SECONDS, BENCH_LANES, and for
//! the ceiling BENCH_RAW_BATCH rows per INSERT and BENCH_RAW_WRITERS, default 64 and 4, and
//! BENCH_RAW_SECONDS, default BENCH_SECONDS).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::{Rng, env_or, free_port, peak_rss_mb, percentile_ms, track_body, wait_healthy};

#[tokio::main]
async fn main() {
    let clients = env_or("BENCH_CLIENTS", 48) as usize;
    let seconds = env_or("BENCH_SECONDS", 10);
    let pool = 5_000;
    let bin = env!("CARGO_BIN_EXE_herald");
    let dir = std::env::temp_dir().join(format!("herald-bench-track-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = format!("surrealkv://{}", dir.display());
    let port = free_port();
    let envs = [
        ("HERALD_DB", db.clone()),
        ("HERALD_LISTEN", format!("127.0.0.1:{port}")),
        ("HERALD_RATE_LIMIT_PER_MINUTE", "0".into()),
        ("HERALD_LOG", "warn".into()),
        ("HERALD_SECRET", "bench-secret-bench-secret".into()),
        ("HERALD_INGEST_LANES", std::env::var("BENCH_LANES").unwrap_or_else(|_| "2".into())),
        ("HERALD_EVENT_DISPATCH_MS", std::env::var("BENCH_DISPATCH_MS").unwrap_or_else(|_| "1000".into())),
    ];

    let out = Command::new(bin).args(["project", "create", "bench"]).envs(envs.clone()).output().expect("run herald");
    assert!(out.status.success(), "project create failed: {}", String::from_utf8_lossy(&out.stderr));
    let project: Value = serde_json::from_slice(&out.stdout).expect("project json");
    let key = project["public"].as_str().unwrap().to_string();

    let mut server = Command::new(bin).arg("serve").envs(envs.clone()).stdout(Stdio::null()).spawn().expect("serve");
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build().unwrap();
    wait_healthy(&http, &base).await;

    // Seed the pool of returning contacts (not measured).
    let seed_counter = Arc::new(AtomicUsize::new(0));
    let mut seeders = Vec::new();
    for w in 0..16u64 {
        let (http, base, key) = (http.clone(), base.clone(), key.clone());
        seeders.push(tokio::spawn(async move {
            for i in (w..pool).step_by(16) {
                let body = json!({ "email": format!("user{i}@bench.example"), "event": "seed", "data": { "k0": i } });
                http.post(format!("{base}/v1/track")).bearer_auth(&key).json(&body).send().await.unwrap();
            }
        }));
    }
    for s in seeders {
        s.await.unwrap();
    }
    drop(seed_counter);

    println!(
        "track benchmark: {clients} clients, {seconds} s, pool {pool} returning contacts, 30% new, 1-10 data keys"
    );
    let new_counter = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, base, key, new_counter, errors) =
            (http.clone(), base.clone(), key.clone(), new_counter.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (c as u64 + 1));
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let body = track_body(&mut rng, &new_counter, pool);
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
    let mut lat: Vec<u64> = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    lat.sort_unstable();
    let rate = lat.len() as f64 / elapsed;
    let peak = peak_rss_mb(server.id());
    println!("  events accepted: {} in {:.1} s, errors: {}", lat.len(), elapsed, errors.load(Ordering::Relaxed));
    println!("  throughput:      {rate:.0} events/s");
    println!("  latency:         p50 {:.2} ms, p99 {:.2} ms", percentile_ms(&lat, 0.50), percentile_ms(&lat, 0.99));
    println!("  server peak RSS: {peak:.0} MB");

    if let Ok(r) = http.get(format!("{base}/metrics")).send().await {
        let text = r.text().await.unwrap_or_default();
        for l in
            text.lines().filter(|l| l.starts_with("herald_group_commit_") || l.starts_with("herald_job_seconds_total"))
        {
            println!("  {l}");
        }
    }
    let _ = Command::new("kill").args(["-TERM", &server.id().to_string()]).status();
    let _ = server.wait();

    // The ceiling: the same rows straight into the same database through batched INSERTs.
    let mut config = herald_host::config::Config::for_tests();
    config.db = db;
    let store = herald_host::store::Store::connect(&config).await.expect("open the bench database");
    let batch = env_or("BENCH_RAW_BATCH", 64) as usize;
    let writers = env_or("BENCH_RAW_WRITERS", 4);
    // Over the same window as Herald's run, so both pay the same memtable flushes and compactions.
    let raw_secs = env_or("BENCH_RAW_SECONDS", seconds);
    // (a) event rows only; (b) the rows a track writes: one event and one contact per track.
    for with_contacts in [false, true] {
        let raw_deadline = Instant::now() + Duration::from_secs(raw_secs);
        let raw_started = Instant::now();
        let inserted = Arc::new(AtomicU64::new(0));
        let mut ws = Vec::new();
        for w in 0..writers {
            let (store, inserted) = (store.clone(), inserted.clone());
            ws.push(tokio::spawn(async move {
                let mut rng = Rng(0xABCD ^ (w + 1));
                let counter = AtomicUsize::new(0);
                while Instant::now() < raw_deadline {
                    let now = herald_host::infra::clock::wall_now_ms();
                    let mut events = Vec::with_capacity(batch);
                    let mut contacts = Vec::with_capacity(batch);
                    for _ in 0..batch {
                        let b = track_body(&mut rng, &counter, pool);
                        let cid = uuid::Uuid::now_v7().to_string();
                        events.push(json!({
                            "id": uuid::Uuid::now_v7().to_string(), "project": "raw", "contact": cid,
                            "name": b["event"], "data": b["data"], "source": "api", "created_at": now,
                        }));
                        contacts.push(json!({
                            "id": cid, "project": "raw", "email": format!("{cid}@raw.example"), "subscribed": true,
                            "data": b["data"], "version": 1, "created_at": now, "updated_at": now,
                        }));
                    }
                    let sql = if with_contacts {
                        "BEGIN; INSERT INTO contact $contacts RETURN NONE; INSERT INTO event $events RETURN NONE; COMMIT;"
                    } else {
                        "INSERT INTO event $events RETURN NONE"
                    };
                    store.query(sql, json!({ "events": events, "contacts": contacts })).await.expect("insert");
                    inserted.fetch_add(batch as u64, Ordering::Relaxed);
                }
            }));
        }
        for w in ws {
            w.await.unwrap();
        }
        let raw = inserted.load(Ordering::Relaxed) as f64 / raw_started.elapsed().as_secs_f64();
        if with_contacts {
            println!(
                "  ceiling, the same rows (1 event + 1 contact per track, {writers} writers x {batch}): {raw:.0} tracks/s"
            );
        } else {
            println!("  ceiling, event rows only ({writers} writers x {batch} rows per INSERT): {raw:.0} rows/s");
        }
        println!("    Herald / this ceiling: {:.0}%", rate / raw * 100.0);
    }

    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
