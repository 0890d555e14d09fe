//! Benchmark of CSV import (issue 33). Prints numbers; asserts nothing.
//!
//! Herald built in-process on a fresh embedded on-disk database (SurrealKV in a temp dir), rate limit
//! off. A generated CSV of ROWS rows and 5 columns (email, firstName, plan, age, signupDate), every
//! 100th row with an invalid email, is uploaded to `POST /contacts/import` and its job polled every
//! 250 ms until it is completed. Prints rows/s, the time to completed, the bad rows reported and the
//! process's peak resident memory over the import (VmHWM reset through `/proc/self/clear_refs`). Then,
//! in the same run, the ceiling: the same contacts (new emails, a second project) upserted through
//! `/v1/track` by CLIENTS concurrent clients (its group commit), rows/s, and the import's rate as a
//! percentage of it.
//!
//! Run: `cargo bench -p herald-host --bench import` (env: BENCH_ROWS, default 100,000; BENCH_CLIENTS,
//! default 64; BENCH_TRACK_ROWS rows sent through `/v1/track`, default 30,000; HERALD_DB_CACHE_MB and
//! HERALD_DB_MEMTABLE_MB as for `herald serve`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

/// The server binary's allocator (`host/src/main.rs`), so the in-process numbers are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use herald_host::App;
use serde_json::{Value, json};

mod common;
use common::{env_or, in_process, peak_rss_mb};

const BOUNDARY: &str = "herald-bench-boundary";

fn csv(rows: u64) -> Vec<u8> {
    let plans = ["free", "starter", "pro", "enterprise"];
    let mut out = String::from("email,firstName,plan,age,signupDate\n");
    for k in 0..rows {
        let email = if k % 100 == 99 { format!("broken{k}.example.org") } else { format!("u{k}@example.org") };
        let day = 1 + k % 28;
        out.push_str(&format!("{email},User{k},{},{},2026-01-{day:02}\n", plans[(k % 4) as usize], 18 + k % 60));
    }
    out.into_bytes()
}

fn multipart(file: &[u8]) -> Vec<u8> {
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"contacts.csv\"\r\n\
         Content-Type: text/csv\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(file);
    body.extend(format!("\r\n--{BOUNDARY}--\r\n").bytes());
    body
}

#[tokio::main]
async fn main() {
    let rows = env_or("BENCH_ROWS", 100_000);
    let clients = env_or("BENCH_CLIENTS", 64);
    let track_rows = env_or("BENCH_TRACK_ROWS", 30_000);
    let dir = std::env::temp_dir().join(format!("herald-bench-import-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = in_process(&dir).resolve().unwrap();
    let app = App::build(config).await.unwrap();
    let st = Arc::clone(&app.state);
    let (_, keys) = herald_host::services::accounts::create_project_for(&st, "bench", None, None).await.unwrap();
    let (_, other) = herald_host::services::accounts::create_project_for(&st, "ceiling", None, None).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = app.start(listener).await.unwrap();
    let base = format!("http://{}", running.addr);
    let http = reqwest::Client::new();

    let file = csv(rows);
    println!("import benchmark: {rows} rows, 5 columns, {:.2} MB, 1% bad rows", file.len() as f64 / 1e6);
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = peak_rss_mb(std::process::id());
    let t = Instant::now();
    let r = http
        .post(format!("{base}/contacts/import"))
        .bearer_auth(&keys.secret)
        .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
        .body(multipart(&file))
        .send()
        .await
        .unwrap();
    let accepted = t.elapsed().as_secs_f64();
    let r: Value = r.json().await.unwrap();
    let Some(job) = r["jobId"].as_str().map(str::to_string) else {
        println!("  upload refused: {r}");
        return;
    };
    let mut last = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(1800);
    while Instant::now() < deadline {
        last = http
            .get(format!("{base}/contacts/import/{job}"))
            .bearer_auth(&keys.secret)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if last["state"] == "completed" || last["state"] == "failed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let secs = t.elapsed().as_secs_f64();
    let peak = peak_rss_mb(std::process::id());
    let res = &last["result"];
    let import_rate = rows as f64 / secs;
    println!("  upload answered 202 in {:.2} s", accepted);
    println!(
        "  {} in {secs:.1} s = {import_rate:.0} rows/s; created {}, updated {}, skipped {}, failed {} (bad rows reported)",
        last["state"].as_str().unwrap_or("?"),
        res["created"],
        res["updated"],
        res["skipped"],
        res["failed"]
    );
    println!(
        "  peak RSS {peak:.0} MB{} (resident before the upload: {before:.0} MB)",
        if reset { " (import phase)" } else { " (whole process)" }
    );

    // The ceiling: the same kind of contacts through /v1/track's group commit.
    let next = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (http, base, key, next) = (http.clone(), base.clone(), other.secret.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= track_rows {
                    return;
                }
                let body = json!({
                    "email": format!("u{k}@example.org"), "event": "imported",
                    "data": { "firstName": format!("User{k}"), "plan": "pro", "age": 18 + k % 60, "signupDate": "2026-01-15" },
                });
                let r = http.post(format!("{base}/v1/track")).bearer_auth(&key).json(&body).send().await.unwrap();
                assert!(r.status().is_success());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let track_rate = track_rows as f64 / t.elapsed().as_secs_f64();
    println!(
        "  ceiling: /v1/track {track_rows} new contacts with {clients} clients = {track_rate:.0} rows/s; import at {:.0}% of it",
        100.0 * import_rate / track_rate
    );
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
