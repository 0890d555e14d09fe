//! Benchmark of the data directory's size as data is deleted (issue 79, "disk that stops growing").
//! Prints numbers; asserts nothing.
//!
//! Herald built in-process on a fresh embedded on-disk database (its own purge job kept off: every
//! retention period 0), two parts, each on a directory of its own:
//!
//! - give-back: BENCH_MB of email bodies (BENCH_BODY_KB each, with their small email rows) written
//!   straight through the store, 100 days old; the directory's size once settled; then the retention
//!   purge (the job's own code and batches, email bodies kept 1 day) deletes every body, and the size is
//!   sampled every 10 s for BENCH_GIVEBACK_SECS (default 600): bytes given back and when. Then Herald is
//!   closed and opened again, and the size read once more.
//! - plateau: a steady state of BENCH_PLATEAU_SECS (default 600): every second BENCH_RATE_KB of email
//!   bodies and 200 small events are written with a virtual clock that moves a day every
//!   BENCH_KEEP_SECS seconds (default 60), and the purge runs with email bodies and events kept 1 day,
//!   so about BENCH_KEEP_SECS seconds of writes stay alive. Prints the size every 30 s, at minute 4
//!   (or 40% of the run) and at the end, and the space amplification: bytes on disk / bytes of live data,
//!   the live data counted from what the bench keeps (the body and event bytes written and not yet
//!   purged, plus the email rows that stay).
//!
//! Each size is `du`'s (allocated blocks), with SurrealKV's folders (`sstables`, `vlog`, `wal`, ...)
//! apart.
//!
//! Run: `cargo bench -p herald-host --bench disk` (env: BENCH_ONLY=giveback|plateau; BENCH_MB, default
//! 1024; BENCH_BODY_KB, default 64; BENCH_GIVEBACK_SECS, default 600; BENCH_PLATEAU_SECS, default 600;
//! BENCH_RATE_KB, default 1024; BENCH_KEEP_SECS, default 60; BENCH_LOG, a log filter such as
//! `surrealkv=info`; and the HERALD_DB_* caps).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_host::App;
use herald_host::config::RetentionConfig;
use herald_host::services::retention::{Limits, purge};
use herald_host::state::AppState;
use serde_json::{Value, json};

mod common;
use common::{chosen, env_or, in_process, peak_rss_mb};

const DAY: i64 = 86_400_000;
const MB: f64 = 1024.0 * 1024.0;

/// Allocated bytes under `path` (what `du` counts), recursively.
fn du(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    let own = meta.blocks() * 512;
    if !meta.is_dir() {
        return own;
    }
    own + std::fs::read_dir(path).map(|d| d.flatten().map(|e| du(&e.path())).sum()).unwrap_or(0)
}

/// The size of the database folder, in MB, with its sub-folders apart: "123.4 MB (sstables 1.2, vlog ...)".
fn sizes(db: &Path) -> (u64, String) {
    let total = du(db);
    let mut parts: Vec<(String, u64)> = std::fs::read_dir(db)
        .map(|d| d.flatten().map(|e| (e.file_name().to_string_lossy().into_owned(), du(&e.path()))).collect())
        .unwrap_or_default();
    parts.sort();
    let parts: Vec<String> =
        parts.iter().filter(|(_, b)| *b >= 1 << 20).map(|(n, b)| format!("{n} {:.1}", *b as f64 / MB)).collect();
    (total, format!("{:.1} MB ({})", total as f64 / MB, parts.join(", ")))
}

/// Deterministic filler text (xorshift over 64 letters): `len` bytes, different for each `seed`.
fn filler(seed: u64, len: usize) -> String {
    const ABC: &[u8; 64] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .";
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ABC[(x & 63) as usize] as char
        })
        .collect()
}

/// Email rows with bodies of `body` bytes, ids `from..to`, created at `at(k)`.
async fn write_emails(st: &AppState, project: &str, from: u64, to: u64, body: usize, at: impl Fn(u64) -> i64) {
    let (mut emails, mut bodies) = (Vec::new(), Vec::new());
    for k in from..to {
        let id = format!("e-{k:010}");
        emails.push(json!({ "id": id, "project": project, "contact": format!("c{}", k % 5_000),
            "recipient": "r@bench.example", "from": "news@bench.example", "subject": "News", "kind": "MARKETING",
            "message_id": format!("<{id}@bench.example>"), "status": "DELIVERED", "created_at": at(k),
            "updated_at": at(k) }));
        bodies.push(json!({ "id": id, "html": filler(k, body), "text": "News", "headers": "[]",
            "attachments": "[]" }));
    }
    common::insert_emails(&st.store, emails, bodies).await;
}

async fn build(dir: &Path) -> App {
    let mut settings = in_process(dir);
    // Herald's own purge job keeps everything: the bench runs the purge itself.
    settings.retention.retention_email_body_days = Some(0);
    settings.retention.retention_event_days = Some(0);
    settings.retention.retention_webhook_delivery_days = Some(0);
    App::build(settings.resolve().unwrap()).await.unwrap()
}

/// Bodies and events kept one day; nothing else purged.
fn one_day(app: &App) -> RetentionConfig {
    let mut periods = app.state.config.retention.clone();
    periods.email_body_ms = Some(DAY);
    periods.event_ms = Some(DAY);
    periods
}

/// Runs the purge until nothing is left; answers the rows it deleted.
async fn purge_all(st: &AppState, now: i64, periods: &RetentionConfig) -> usize {
    let mut rows = 0;
    loop {
        let p = purge(&st.store, now, periods, None, Limits::default()).await.unwrap();
        rows += p.total();
        if !p.more {
            return rows;
        }
    }
}

async fn giveback(root: &Path) {
    let total_mb = env_or("BENCH_MB", 1024);
    let body_kb = env_or("BENCH_BODY_KB", 64);
    let secs = env_or("BENCH_GIVEBACK_SECS", 600);
    let dir = root.join("giveback");
    let db = dir.join("db");
    let app = build(&dir).await;
    let st = Arc::clone(&app.state);
    let (project, _) = herald_host::services::accounts::create_project_for(&st, "bench", None, None).await.unwrap();
    let n = (total_mb << 10) / body_kb;
    println!("give-back: {n} email bodies of {body_kb} KB ({total_mb} MB), 100 days old");
    let t = Instant::now();
    let old = st.clock.now_ms() - 100 * DAY;
    let per = (8 << 10) / body_kb.max(1); // about 8 MB a transaction
    for from in (0..n).step_by(per.max(1) as usize) {
        write_emails(&st, &project.id, from, (from + per).min(n), (body_kb << 10) as usize, |k| old + k as i64).await;
    }
    println!("  written in {:.1} s: {}", t.elapsed().as_secs_f64(), sizes(&db).1);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (full, text) = sizes(&db);
    println!("  settled (10 s): {text}");

    let t = Instant::now();
    let rows = purge_all(&st, st.clock.now_ms(), &one_day(&app)).await;
    println!("  purge: {rows} rows in {:.1} s: {}", t.elapsed().as_secs_f64(), sizes(&db).1);
    let written = (n * body_kb) as f64 / 1024.0;
    let start = Instant::now();
    let mut eighty = None;
    while start.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (now, text) = sizes(&db);
        let back = full.saturating_sub(now) as f64 / MB;
        if eighty.is_none() && back >= 0.8 * written {
            eighty = Some(start.elapsed().as_secs());
        }
        println!(
            "  +{:>3} s: {text}; given back {back:.1} MB = {:.0}% of the {written:.0} MB deleted",
            start.elapsed().as_secs(),
            back / written * 100.0
        );
    }
    match eighty {
        Some(s) => println!("  80% given back within {s} s of the purge's end"),
        None => println!("  80% not given back within {secs} s"),
    }
    println!("  peak RSS: {:.0} MB", peak_rss_mb(std::process::id()));
    drop(st);
    app.close().await;
    println!("  closed: {}", sizes(&db).1);
    let app = build(&dir).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (now, text) = sizes(&db);
    println!(
        "  opened again (10 s): {text}; given back {:.1} MB = {:.0}%",
        full.saturating_sub(now) as f64 / MB,
        full.saturating_sub(now) as f64 / MB / written * 100.0
    );
    app.close().await;
}

async fn plateau(root: &Path) {
    let secs = env_or("BENCH_PLATEAU_SECS", 600);
    let rate_kb = env_or("BENCH_RATE_KB", 1024);
    let keep = env_or("BENCH_KEEP_SECS", 60) as i64;
    let body_kb = env_or("BENCH_BODY_KB", 64);
    let dir = root.join("plateau");
    let db = dir.join("db");
    let app = build(&dir).await;
    let st = Arc::clone(&app.state);
    let periods = one_day(&app);
    let (project, _) = herald_host::services::accounts::create_project_for(&st, "bench", None, None).await.unwrap();
    let per_sec = (rate_kb / body_kb).max(1);
    let mark = if secs >= 600 { 240 } else { secs * 2 / 5 };
    println!(
        "plateau: {secs} s; each second {per_sec} email bodies of {body_kb} KB and 200 events, a virtual day every \
         {keep} s, bodies and events kept 1 day"
    );
    let base = st.clock.now_ms() - 400 * DAY;
    let step = DAY / keep;
    // What stays alive: the last `keep` seconds' bodies and events, every email row (~400 bytes each).
    let (event_bytes, row_bytes) = (200 * 120u64, 400u64);
    let start = Instant::now();
    let (mut at_mark, mut k, mut tick) = (0u64, 0u64, 0i64);
    let mut next_print = 30;
    while start.elapsed() < Duration::from_secs(secs) {
        let now = base + tick * step;
        write_emails(&st, &project.id, k, k + per_sec, (body_kb << 10) as usize, |_| now).await;
        k += per_sec;
        let events: Vec<Value> = (0..200)
            .map(|e| {
                json!({ "project": project.id, "contact": format!("c{}", e * 7 % 5_000), "name": "page_view",
                    "data": { "k": filler(tick as u64 * 200 + e, 40) }, "source": "api", "created_at": now })
            })
            .collect();
        st.store.query("INSERT INTO event $r RETURN NONE", json!({ "r": events })).await.unwrap();
        purge_all(&st, now, &periods).await;
        tick += 1;
        let ahead = Duration::from_secs(tick as u64).saturating_sub(start.elapsed());
        tokio::time::sleep(ahead).await;
        let el = start.elapsed().as_secs();
        if el >= next_print || (at_mark == 0 && el >= mark) {
            let (size, text) = sizes(&db);
            if at_mark == 0 && el >= mark {
                at_mark = size;
                println!("  {el:>4} s (the mark): {text}");
            } else {
                println!("  {el:>4} s: {text}");
            }
            next_print = el / 30 * 30 + 30;
        }
    }
    let live_ticks = (keep + 1).min(tick) as u64;
    let live = live_ticks * (per_sec * (body_kb << 10) + event_bytes) + k * row_bytes;
    let (end, text) = sizes(&db);
    println!("  end ({} s, {tick} seconds written, {k} emails): {text}", start.elapsed().as_secs());
    println!(
        "  end / mark: {:.1} / {:.1} MB = {:+.0}%; live data ~{:.1} MB; space amplification {:.1}; peak RSS {:.0} MB",
        end as f64 / MB,
        at_mark as f64 / MB,
        (end as f64 / at_mark.max(1) as f64 - 1.0) * 100.0,
        live as f64 / MB,
        end as f64 / live as f64,
        peak_rss_mb(std::process::id())
    );
    drop(st);
    app.close().await;
}

#[tokio::main]
async fn main() {
    // BENCH_LOG: a log filter (e.g. `surrealkv=info` shows the engine's flushes and merges) [default: warn].
    let filter = std::env::var("BENCH_LOG").unwrap_or_else(|_| "warn".into());
    herald_host::infra::telemetry::init(herald_host::config::LogFormat::Text, &filter);
    let root = std::env::temp_dir().join(format!("herald-bench-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    if chosen("giveback", &["giveback", "plateau"]) {
        giveback(&root).await;
    }
    if chosen("plateau", &["giveback", "plateau"]) {
        plateau(&root).await;
    }
    let _ = std::fs::remove_dir_all(&root);
}
