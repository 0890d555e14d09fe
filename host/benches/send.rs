//! Benchmark of `POST /v1/send` and delivery into Postfix's `smtp-sink` on loopback (sending issue).
//! Prints numbers; asserts nothing. Needs `smtp-sink`, `smtp-source` (Debian package postfix; the
//! binaries run without the daemon) and `openssl`.
//!
//! For each of "unsigned" and "DKIM-signed": a fresh embedded database, `herald project create`,
//! `herald domain add --trust`, then `herald serve` (child process, SMTP to smtp-sink, throttles off)
//! driven by CLIENTS concurrent `/v1/send` calls for SECONDS, twice (see [`run`]): once with delivery
//! running during acceptance, and once as an API-only node whose queued backlog a second server then
//! delivers, which measures the delivery pipeline's own rate. It prints accepted sends/s, p99 acceptance
//! latency, delivered messages/s and the server's peak RSS. In the same run it measures the ceilings:
//! smtp-source into the same sink over 8 sessions, and `openssl speed rsa2048` signs/s.
//!
//! Run: `cargo bench -p herald-host --bench send` (env: BENCH_CLIENTS, BENCH_SECONDS; BENCH_ONLY picks
//! parts, a comma list of `unsigned`, `signed`, `mixed`, `pipeline`, for example `unsigned,pipeline`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

mod common;
use common::{
    chosen, delivery_envs, env_or, free_port, peak_rss_mb, percentile_ms, project_with_trusted_domain, serve,
    smtp_sink, stop, wait_healthy,
};

fn delivered(metrics: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with("herald_emails_delivered_total{status=\"SENT\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Drives CLIENTS concurrent `/v1/send` calls for SECONDS against `base`; answers the accepted count,
/// the seconds it took, the sorted latencies (µs) and the number of failed calls.
async fn drive(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    clients: usize,
    seconds: u64,
) -> (u64, f64, Vec<u64>, u64) {
    let errors = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, base, key, errors) = (http.clone(), base.to_string(), key.to_string(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = 0u64;
            while Instant::now() < deadline {
                i += 1;
                let body = json!({
                    "to": format!("user{c}-{i}@example.org"),
                    "from": { "name": "Bench", "email": "news@bench.test" },
                    "subject": "Order {{order}}",
                    "body": "<p>Hello {{name}}, your order {{order}} has shipped.</p><p><a href=\"https://example.org/o\">Track it</a></p>",
                    "data": { "name": format!("User {c}"), "order": i },
                });
                let t = Instant::now();
                match http.post(format!("{base}/v1/send")).bearer_auth(&key).json(&body).send().await {
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
    let secs = started.elapsed().as_secs_f64();
    lat.sort_unstable();
    (lat.len() as u64, secs, lat, errors.load(Ordering::Relaxed))
}

/// The HTTP ceiling of the same server and clients: `GET /config` (a small JSON answer that touches no
/// database) from CLIENTS for `seconds`; answers requests/s.
async fn http_ceiling(http: &reqwest::Client, base: &str, clients: usize, seconds: u64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (http, url) = (http.clone(), format!("{base}/config"));
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    if http.get(&url).send().await.is_ok_and(|r| r.status().is_success()) {
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    let mut n = 0;
    for t in tasks {
        n += t.await.unwrap();
    }
    n as f64 / started.elapsed().as_secs_f64()
}

/// Polls /metrics until `target` deliveries completed (or 5 minutes); answers how many did.
async fn wait_delivered(http: &reqwest::Client, base: &str, target: u64) -> u64 {
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    while Instant::now() < deadline {
        if let Ok(r) = http.get(format!("{base}/metrics")).send().await {
            done = delivered(&r.text().await.unwrap_or_default());
        }
        if done >= target {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done
}

/// One mode (unsigned or DKIM-signed), in two parts on two fresh databases:
/// 1. mixed: `herald serve` accepts sends from CLIENTS for SECONDS while its workers deliver; prints the
///    acceptance rate and p99, and messages delivered per second from the first acceptance until the
///    queue is empty (bounded by the acceptance rate, since delivery cannot run ahead of it);
/// 2. pipeline: an API-only `herald serve` (HERALD_RUN_JOBS=false) accepts sends for SECONDS (the
///    acceptance rate of a node that only accepts), then is stopped, and a `herald serve` with workers
///    starts on the same database and delivers the queued backlog: messages/s from its start until the
///    last is delivered (the rate of the delivery pipeline itself).
async fn run(sink_port: u16, signed: bool, clients: usize, seconds: u64, ceilings: Ceilings) {
    let label = if signed { "DKIM-signed" } else { "unsigned" };
    if !chosen(if signed { "signed" } else { "unsigned" }, &["unsigned", "signed"]) {
        return;
    }
    println!("  {label}:");
    for pipeline in [false, true] {
        if !chosen(if pipeline { "pipeline" } else { "mixed" }, &["mixed", "pipeline"]) {
            continue;
        }
        let bin = env!("CARGO_BIN_EXE_herald");
        let dir = std::env::temp_dir().join(format!("herald-bench-send-{}-{signed}-{pipeline}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let port = free_port();
        let envs = delivery_envs(&dir, port, &format!("smtp://127.0.0.1:{sink_port}"), signed);
        let key = project_with_trusted_domain(bin, &envs, "bench.test");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build().unwrap();
        let serve = |run_jobs: bool| serve(&envs, run_jobs);
        if !pipeline {
            let server = serve(true);
            wait_healthy(&http, &base).await;
            let started = Instant::now();
            let (accepted, secs, lat, errors) = drive(&http, &base, &key, clients, seconds).await;
            let done = wait_delivered(&http, &base, accepted).await;
            let total = started.elapsed().as_secs_f64();
            println!(
                "    mixed (accepting and delivering at once): accepted {accepted} in {secs:.1} s = {:.0} sends/s, \
                 p99 {:.1} ms, errors {errors}; delivered {done} in {total:.1} s = {:.0} msg/s; peak RSS {:.0} MB",
                accepted as f64 / secs,
                percentile_ms(&lat, 0.99),
                done as f64 / total,
                peak_rss_mb(server.id())
            );
            stop(server);
        } else {
            let server = serve(false);
            wait_healthy(&http, &base).await;
            let ceiling = http_ceiling(&http, &base, clients, 3).await;
            println!("    ceiling: the same node answering GET /config (no database): {ceiling:.0} requests/s");
            let (accepted, secs, lat, errors) = drive(&http, &base, &key, clients, seconds).await;
            println!(
                "    API-only node: accepted {accepted} in {secs:.1} s = {:.0} sends/s ({:.0}% of the HTTP ceiling), \
                 p99 {:.1} ms, errors {errors}, peak RSS {:.0} MB",
                accepted as f64 / secs,
                100.0 * accepted as f64 / secs / ceiling,
                percentile_ms(&lat, 0.99),
                peak_rss_mb(server.id())
            );
            stop(server);
            let started = Instant::now();
            let server = serve(true);
            wait_healthy(&http, &base).await;
            let done = wait_delivered(&http, &base, accepted).await;
            let total = started.elapsed().as_secs_f64();
            // Unsigned, the transport is the ceiling; signed, the lower of it and signing on every core.
            let ceiling = if signed { ceilings.smtp.min(ceilings.signs) } else { ceilings.smtp };
            println!(
                "    delivery pipeline (queued backlog): delivered {done} in {total:.1} s = {:.0} msg/s ({:.0}% of the \
                 {} ceiling, {ceiling:.0}/s); peak RSS {:.0} MB",
                done as f64 / total,
                100.0 * done as f64 / total / ceiling,
                if signed { "transport and signing" } else { "transport" },
                peak_rss_mb(server.id())
            );
            stop(server);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The ceilings measured at the start of the run (messages/s).
#[derive(Clone, Copy)]
struct Ceilings {
    /// smtp-source into the same sink over 8 sessions.
    smtp: f64,
    /// RSA-2048 signs/s per core times the cores.
    signs: f64,
}

#[tokio::main]
async fn main() {
    let clients = env_or("BENCH_CLIENTS", 32) as usize;
    let seconds = env_or("BENCH_SECONDS", 10);
    let sink_port = free_port();
    let mut sink = smtp_sink(sink_port);
    std::thread::sleep(Duration::from_millis(300));
    println!("send benchmark: {clients} clients, {seconds} s of sending, smtp-sink on 127.0.0.1:{sink_port}");

    // Ceilings measured in this run.
    let n = 20_000;
    let t = Instant::now();
    let src = Command::new("smtp-source")
        .args([
            "-s",
            "8",
            "-m",
            &n.to_string(),
            "-l",
            "1000",
            "-f",
            "a@bench.test",
            "-t",
            "b@example.org",
            &format!("127.0.0.1:{sink_port}"),
        ])
        .status();
    let mut ceilings = Ceilings { smtp: f64::NAN, signs: f64::NAN };
    if src.is_ok_and(|s| s.success()) {
        ceilings.smtp = n as f64 / t.elapsed().as_secs_f64();
        println!("  ceiling: smtp-source, 8 sessions: {:.0} msg/s", ceilings.smtp);
    }
    if let Ok(out) = Command::new("openssl").args(["speed", "-seconds", "3", "rsa2048"]).output() {
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(line) = text.lines().find(|l| l.starts_with("rsa 2048") || l.contains("rsa  2048")) {
            let nums: Vec<&str> = line.split_whitespace().collect();
            if let Some(signs) = nums.iter().rev().nth(1) {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                ceilings.signs = signs.parse::<f64>().unwrap_or(f64::NAN) * cores as f64;
                println!("  ceiling: openssl speed rsa2048: {signs} signs/s per core, {cores} cores");
            }
        }
    }
    run(sink_port, false, clients, seconds, ceilings).await;
    run(sink_port, true, clients, seconds, ceilings).await;
    let _ = sink.kill();
    let _ = sink.wait();
}
