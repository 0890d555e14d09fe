//! Benchmark of campaign sending (campaigns issue). Prints numbers; asserts nothing. Needs `smtp-sink`
//! (Debian package postfix; it runs without the daemon).
//!
//! For each of "unsigned" and "DKIM-signed": a fresh embedded on-disk database (SurrealKV in a temp dir),
//! Herald built in-process (`App::build`, SMTP to smtp-sink on loopback, send throttle off), CONTACTS
//! subscribed contacts seeded straight through the store (batched `INSERT`s), then over HTTP: create an
//! ALL-audience MARKETING campaign whose body uses contact data, send it, and poll `GET /campaigns/:id`
//! until it is SENT. Prints the time to SENT, messages/s, that every contact got exactly one email
//! record, and the process's peak resident memory over the sending phase (VmHWM reset through
//! `/proc/self/clear_refs` after seeding).
//!
//! Run: `cargo bench -p herald-host --bench campaign` (env: BENCH_CONTACTS, default 100,000;
//! BENCH_CONCURRENCY job slots, default the server's 8; HERALD_DB_CACHE_MB, HERALD_DB_MEMTABLE_MB and
//! HERALD_DB_BLOCK_KB, HERALD_DB_VLOG_KB, HERALD_CAMPAIGN_BATCH_SIZE and HERALD_CAMPAIGN_DELIVERY_CHUNK as for `herald serve`;
//! BENCH_ONLY=unsigned or signed runs one mode).

#![allow(clippy::unwrap_used, clippy::expect_used)]

/// The server binary's allocator (`host/src/main.rs`), so the in-process numbers (memory above all) are
/// the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_host::App;
use herald_host::config::Settings;
use serde_json::{Value, json};

mod common;
use common::{chosen, env_opt, env_or, free_port, in_process, peak_rss_mb, post};

fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

async fn run(sink_port: u16, signed: bool, contacts: u64, concurrency: Option<usize>) {
    let dir = std::env::temp_dir().join(format!("herald-bench-campaign-{}-{signed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = Settings {
        send_rate_per_second: Some(0),
        smtp_url: Some(format!("smtp://127.0.0.1:{sink_port}")),
        dkim_signing: Some(signed),
        job_concurrency: concurrency,
        campaign_batch_size: env_opt("HERALD_CAMPAIGN_BATCH_SIZE"),
        campaign_delivery_chunk: env_opt("HERALD_CAMPAIGN_DELIVERY_CHUNK"),
        ..in_process(&dir)
    }
    .resolve()
    .unwrap();
    let app = App::build(config).await.unwrap();
    let st = Arc::clone(&app.state);
    let (project, keys) = herald_host::services::accounts::create_project_for(&st, "bench", None, None).await.unwrap();
    let project_id = project.id.clone();
    let key = keys.secret.clone();
    st.domains.add(&st.store, &project_id, "bench.test", true, st.clock.now_ms()).await.unwrap();

    // Seed: subscribed contacts with a little data each, 2,000 per transaction.
    let t = Instant::now();
    let now = st.clock.now_ms();
    let plans = ["free", "starter", "pro", "enterprise"];
    let mut i = 0u64;
    while i < contacts {
        let n = (contacts - i).min(2_000);
        let rows: Vec<Value> = (i..i + n)
            .map(|k| {
                json!({
                    "id": uuid::Uuid::now_v7().to_string(), "project": project_id,
                    "email": format!("user{k}@example.org"), "subscribed": true,
                    "data": { "firstName": format!("User{k}"), "plan": plans[(k % 4) as usize] },
                    "version": 1, "created_at": now, "updated_at": now,
                })
            })
            .collect();
        st.store.query("INSERT INTO contact $rows RETURN NONE", json!({ "rows": rows })).await.unwrap();
        i += n;
    }
    let label = if signed { "DKIM-signed" } else { "unsigned" };
    println!("  {label}:");
    println!("    seeded {contacts} contacts in {:.1} s", t.elapsed().as_secs_f64());

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = app.start(listener).await.unwrap();
    let base = format!("http://{}", running.addr);
    let http = reqwest::Client::new();
    let r = post(
        &http,
        format!("{base}/campaigns"),
        &key,
        json!({
            "name": "Bench campaign",
            "subject": "News for {{firstName ?? \"you\"}}",
            "body": "<html><body><p>Hello {{firstName}}, here is what is new on the {{plan}} plan.</p>\
                     <p><a href=\"https://example.org/news\">Read more</a></p>\
                     <p><a href=\"{{unsubscribeUrl}}\">Unsubscribe</a></p></body></html>",
            "from": "news@bench.test",
            "fromName": "Bench",
            "audienceType": "ALL",
        }),
    )
    .await;
    let id = r["data"]["id"].as_str().expect("campaign created").to_string();
    let peak_reset = reset_peak();
    let t = Instant::now();
    post(&http, format!("{base}/campaigns/{id}/send"), &key, json!({})).await;
    let mut last = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(900);
    while Instant::now() < deadline {
        last = http.get(format!("{base}/campaigns/{id}")).bearer_auth(&key).send().await.unwrap().json().await.unwrap();
        if last["status"] == "SENT" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let secs = t.elapsed().as_secs_f64();
    let sent = last["sentCount"].as_i64().unwrap_or(0);
    let records = st
        .store
        .query("SELECT count() AS n FROM email WHERE campaign = $c GROUP ALL", json!({ "c": id }))
        .await
        .unwrap()
        .value(0)
        .unwrap();
    let peak = peak_rss_mb(std::process::id());
    println!(
        "    {} in {secs:.1} s: {sent} sent = {:.0} msg/s; totalRecipients {}, email records {}",
        last["status"].as_str().unwrap_or("?"),
        sent as f64 / secs,
        last["totalRecipients"],
        records[0]["n"]
    );
    println!(
        "    peak RSS {peak:.0} MB{}",
        if peak_reset { " (sending phase)" } else { " (whole process; VmHWM could not be reset)" }
    );
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::main]
async fn main() {
    let contacts = env_or("BENCH_CONTACTS", 100_000);
    // Job slots: the server's default unless BENCH_CONCURRENCY says otherwise.
    let concurrency = env_opt("BENCH_CONCURRENCY");
    let sink_port = free_port();
    let mut sink = Command::new("smtp-sink")
        .args(["-u", "nobody", &format!("127.0.0.1:{sink_port}"), "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("smtp-sink (Debian package postfix) must be installed");
    std::thread::sleep(Duration::from_millis(300));
    println!("campaign benchmark: {contacts} subscribed contacts, smtp-sink on 127.0.0.1:{sink_port}");
    // BENCH_ONLY=unsigned or BENCH_ONLY=signed runs one of the two.
    for signed in [false, true] {
        if chosen(if signed { "signed" } else { "unsigned" }, &["unsigned", "signed"]) {
            run(sink_port, signed, contacts, concurrency).await;
        }
    }
    let _ = sink.kill();
    let _ = sink.wait();
}
