//! Benchmark of segments (segments issue). Prints numbers; asserts nothing.
//!
//! 1. Opens a fresh embedded database on disk (SurrealKV in a temp dir) in-process and seeds CONTACTS
//!    contacts of one project straight through the store with varied data and events
//!    (`common/seed.rs`: batched `INSERT`s, one transaction per batch, WRITERS concurrent writers).
//! 2. Through the segment engine (`herald_host::services::segments::Engine`, what the API calls), on a DYNAMIC
//!    segment `plan = pro AND score > 500 AND purchase within 30 days`: counts it (cold, then warm),
//!    pages its first 100 members (the page query alone, and the contacts endpoint's work: page + total).
//! 3. Computes a tracked segment `rank < TRACKED` in the same project: the first compute (TRACKED
//!    contacts enter: a membership row and an entry event each, in one transaction), then a recompute
//!    with nothing changed.
//! 4. Prints the seeding rate, each time next to its target, and peak memory (VmHWM) of each process:
//!    steps 2 and 3 run in a second process of this benchmark that opens the seeded database (closed by
//!    the first), as a server would, so its peak is the segment work's and not what writing a million
//!    contacts in one go left in the seeding process.
//!
//! Run: `cargo bench -p herald-host --bench segments` (env: BENCH_CONTACTS, default 1,000,000;
//! BENCH_TRACKED, default 100,000; BENCH_WRITERS, default 2; BENCH_BATCH contacts per transaction,
//! default 2,000; BENCH_KEEP_DB keeps the seeded database and prints how to measure it again).

#![allow(clippy::unwrap_used, clippy::expect_used)]

/// The server binary's allocator (`host/src/main.rs`), so the in-process numbers (memory above all) are
/// the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::Instant;

use herald_host::infra::clock::{SystemClock, wall_now_ms};
use herald_host::plugins::{Options, PluginHost};
use herald_host::services::segments::Engine;
use herald_host::store::Store;
use herald_host::store::segments::SegmentWrite;
use serde_json::{Value, json};

mod common;
use common::env_or;

const PROJECT: &str = "bench";

/// Peak resident memory (VmHWM) of this process, in MB.
fn peak_mb() -> f64 {
    common::peak_rss_mb(std::process::id())
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn filter(field: &str, op: &str, value: Value, unit: Option<&str>) -> Value {
    herald_host::domain::conditions::filter_json(field, op, value, unit)
}

async fn segment(engine: &Engine, id: &str, name: &str, condition: Value, track: bool, now: i64) {
    let tree = engine.parse(&condition).expect("condition");
    let w = SegmentWrite {
        name: name.into(),
        description: None,
        kind: "DYNAMIC".into(),
        condition: Some(condition),
        track,
        ref_fields: tree.data_keys(),
        ref_events: tree.events(),
        ref_segments: tree.segments(),
    };
    engine.store.create_segment(PROJECT, id, &w, now).await.expect("create segment");
}

#[tokio::main]
async fn main() {
    let total = env_or("BENCH_CONTACTS", 1_000_000);
    let tracked = env_or("BENCH_TRACKED", 100_000).min(total);
    if let Ok(dir) = std::env::var(MEASURE_DB) {
        let now = std::env::var(MEASURE_NOW).ok().and_then(|v| v.parse().ok()).expect("the seeding time");
        measure(std::path::Path::new(&dir), total, tracked, now).await;
        return;
    }
    let writers = env_or("BENCH_WRITERS", 2).max(1);
    let batch = env_or("BENCH_BATCH", 2_000).max(1);
    let dir = std::env::temp_dir().join(format!("herald-bench-segments-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = open(&dir).await;
    let now = wall_now_ms();

    println!("segments benchmark: {total} contacts, tracked segment of {tracked}, SurrealKV on disk");
    let t = Instant::now();
    let events = common::seed::seed(&store, PROJECT, total, writers, batch, now).await;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "  seeding:     {total} contacts + {events} events in {secs:.1} s: {:.0} contacts/s ({:.0} rows/s; {writers} writers x {batch} contacts per transaction)",
        total as f64 / secs,
        (total + events) as f64 / secs
    );
    println!("  peak RSS of the seeding process: {:.0} MB", peak_mb());
    store.close().await;
    drop(store);

    // The measured phase runs in a process of its own that opens the seeded database, as a server would:
    // its memory is the segment work's, not what seeding a million rows in one go left behind.
    let status = std::process::Command::new(std::env::current_exe().expect("this benchmark's path"))
        .env(MEASURE_DB, &dir)
        .env(MEASURE_NOW, now.to_string())
        .status()
        .expect("start the measuring process");
    if !status.success() {
        eprintln!("the measuring process failed: {status}");
    }
    if std::env::var_os("BENCH_KEEP_DB").is_some() {
        println!(
            "  kept the database: rerun the measured phase with {MEASURE_DB}={} {MEASURE_NOW}={now} {}",
            dir.display(),
            std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default()
        );
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Set in the measuring process: the seeded database's directory, and the seeding time.
const MEASURE_DB: &str = "HERALD_BENCH_SEGMENTS_DB";
const MEASURE_NOW: &str = "HERALD_BENCH_SEGMENTS_NOW";

async fn open(dir: &std::path::Path) -> Store {
    let mut config = herald_host::config::Config::for_tests();
    config.db = format!("surrealkv://{}", dir.display());
    Store::connect(&config).await.expect("open the bench database")
}

/// Counts, pages and computes on the seeded database, then prints this process's peak memory.
async fn measure(dir: &std::path::Path, total: u64, tracked: u64, now: i64) {
    let store = open(dir).await;
    let plugin_dir = dir.with_extension("plugins");
    std::fs::create_dir_all(&plugin_dir).unwrap();
    let plugins = PluginHost::new(
        Options { dir: plugin_dir.clone(), cache_dir: plugin_dir.join("cache"), grants: Default::default() },
        Arc::new(SystemClock),
    )
    .unwrap();
    let engine = Engine::new(store.clone(), plugins);
    println!("  peak RSS of the measuring process after opening the database: {:.0} MB", peak_mb());

    // The dynamic segment of three filters.
    let condition = json!({ "logic": "AND", "groups": [{ "filters": [
        filter("data.plan", "equals", json!("pro"), None),
        filter("data.score", "greaterThan", json!(500), None),
        filter("event.purchase", "triggeredWithin", json!(30), Some("days")),
    ]}]});
    segment(&engine, "dyn", "Recent pro buyers", condition.clone(), false, now).await;
    let dynamic = store.segment(PROJECT, "dyn").await.unwrap().unwrap();
    let tree = engine.parse(&condition).unwrap();
    let compiled = engine.compile(PROJECT, &tree, now).await.unwrap();

    let t = Instant::now();
    let n = engine.live_count(&dynamic, now).await.unwrap();
    let cold = ms(t);
    let t = Instant::now();
    engine.count(PROJECT, &compiled).await.unwrap();
    let warm = ms(t);
    println!("  count (data equality + numeric comparison + event within 30 days): {n} members");
    println!("    first {cold:.0} ms, again {warm:.0} ms   (target ≤ 2,000 ms)");
    println!("    peak RSS so far {:.0} MB", peak_mb());

    let t = Instant::now();
    let rows = engine.page_rows(PROJECT, &compiled, 0, 100).await.unwrap().len();
    let page = ms(t);
    let t = Instant::now();
    engine.contacts(&dynamic, 0, 100, now).await.unwrap();
    let endpoint = ms(t);
    println!("  first page of 100 members ({rows} rows):");
    println!("    page query {page:.0} ms; contacts endpoint (page + total) {endpoint:.0} ms   (target ≤ 200 ms)");
    println!("    peak RSS so far {:.0} MB", peak_mb());

    // The tracked segment.
    segment(
        &engine,
        "trk",
        "First customers",
        json!({ "groups": [{ "filters": [filter("data.rank", "lessThan", json!(tracked), None)] }] }),
        true,
        now,
    )
    .await;
    let trk = store.segment(PROJECT, "trk").await.unwrap().unwrap();
    let t = Instant::now();
    let first = engine.compute(&trk, now).await.unwrap();
    let first_ms = ms(t);
    let after_first = peak_mb();
    let t = Instant::now();
    let again = engine.compute(&trk, now).await.unwrap();
    let again_ms = ms(t);
    println!("  tracked segment data.rank < {tracked} over {total} contacts:");
    println!(
        "    first compute {first_ms:.0} ms ({} entered, {} entry events written)   (target ≤ 10,000 ms)",
        first.entered, first.entered
    );
    println!("    recompute, nothing changed {again_ms:.0} ms ({} entered, {} exited)", again.entered, again.exited);
    println!("    peak RSS after the first compute {after_first:.0} MB");

    println!(
        "  peak RSS of the measuring process (opens the database, counts, pages, computes): {:.0} MB   (target ≤ 1,024 MB)",
        peak_mb()
    );
    drop(engine);
    store.close().await;
    drop(store);
    let _ = std::fs::remove_dir_all(&plugin_dir);
}
