//! Benchmark of deferred mail (issue 77, docs/delivery.md#a-breaker-per-transport): a backlog of
//! BENCH_EMAILS (100,000) emails whose relay is down costs the server no CPU while it waits, and drains
//! at the transport's rate once the relay is back. Prints numbers; asserts nothing. Needs `smtp-sink`
//! and `smtp-source` (Debian package postfix; the binaries run without the daemon).
//!
//! 1. An API-only `herald serve` (embedded database) accepts the backlog through `/v1/send`, 100
//!    recipients a call.
//! 2. A `herald serve` with workers starts while the relay's port is closed: it finds the relay down and
//!    defers every email (time until `herald_emails_deferred` reaches the backlog).
//! 3. That server stops and one with the default job poll (500 ms, what a self-hoster runs) starts on
//!    the same data: its CPU time (utime + stime from /proc) over BENCH_IDLE_SECONDS (60) while
//!    everything waits, against the same server over an empty database (what it costs to be running at
//!    all).
//! 4. `smtp-sink` starts on the relay's port: seconds until the last email is delivered, messages/s
//!    from the relay's return, against smtp-source into the same sink over 8 sessions (the ceiling).
//!
//! Run: `cargo bench -p herald-host --bench backlog` (env: BENCH_EMAILS, BENCH_IDLE_SECONDS).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

mod common;
use common::{
    delivery_envs, env_or, free_port, peak_rss_mb, post, project_with_trusted_domain, serve, smtp_sink, stop,
    wait_healthy,
};

/// A metric of the server's `/metrics`, by the start of its line.
async fn metric(http: &reqwest::Client, base: &str, line: &str) -> f64 {
    let text = match http.get(format!("{base}/metrics")).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => return 0.0,
    };
    text.lines().find_map(|l| l.strip_prefix(line)).and_then(|v| v.trim().parse().ok()).unwrap_or(0.0)
}

/// Waits (up to `limit`) until `metric` reaches `target`; answers the seconds it took.
async fn until_metric(http: &reqwest::Client, base: &str, line: &str, target: f64, limit: Duration) -> f64 {
    let started = Instant::now();
    while started.elapsed() < limit {
        if metric(http, base, line).await >= target {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    started.elapsed().as_secs_f64()
}

/// The CPU seconds (user + system) a process has used, from /proc.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command (in parentheses): utime and stime are the 14th and 15th of the line.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0) + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    // USER_HZ is 100 on Linux.
    ticks / 100.0
}

#[tokio::main]
async fn main() {
    let emails = env_or("BENCH_EMAILS", 100_000);
    let idle = env_or("BENCH_IDLE_SECONDS", 60);
    let bin = env!("CARGO_BIN_EXE_herald");
    let relay_port = free_port();
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("herald-bench-backlog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let envs = delivery_envs(&dir, port, &format!("smtp://127.0.0.1:{relay_port}?timeout_secs=2"), false);
    let key = project_with_trusted_domain(bin, &envs, "bench.test");
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().pool_max_idle_per_host(16).build().unwrap();
    println!("backlog benchmark: {emails} emails, the relay down for {idle} s of measuring, then smtp-sink");

    // 1. The backlog, accepted by a node that delivers nothing.
    let server = serve(&envs, false);
    wait_healthy(&http, &base).await;
    let started = Instant::now();
    let calls = emails.div_ceil(100);
    let mut tasks = Vec::new();
    for lane in 0..16u64 {
        let (http, base, key) = (http.clone(), base.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = lane;
            while c < calls {
                let to: Vec<String> = (0..100).map(|i| format!("r{c}-{i}@example.org")).collect();
                let body = json!({ "to": to, "from": "news@bench.test", "subject": "Backlog", "body": "<p>Hello</p>" });
                post(&http, format!("{base}/v1/send"), &key, body).await;
                c += 16;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = calls * 100;
    println!("  accepted {total} emails in {:.1} s", started.elapsed().as_secs_f64());
    stop(server);

    // 2. Delivery starts with the relay down: every email deferred.
    let server = serve(&envs, true);
    wait_healthy(&http, &base).await;
    let secs = until_metric(&http, &base, "herald_emails_deferred ", total as f64, Duration::from_secs(1800)).await;
    let deferred = metric(&http, &base, "herald_emails_deferred ").await;
    println!(
        "  relay down: {deferred:.0} emails deferred {secs:.1} s after the server started ({:.1} s of CPU so far)",
        cpu_secs(server.id())
    );

    stop(server);

    // 3. Waiting costs nothing: the CPU over the idle window of a server as deployed (default poll),
    // with the backlog and with an empty database.
    let deployed: Vec<(&str, String)> = envs.iter().filter(|(k, _)| *k != "HERALD_JOB_POLL_MS").cloned().collect();
    let empty_dir = dir.with_extension("empty");
    let empty_envs: Vec<(&str, String)> = deployed
        .iter()
        .map(
            |(k, v)| {
                if *k == "HERALD_DB" { (*k, format!("surrealkv://{}", empty_dir.display())) } else { (*k, v.clone()) }
            },
        )
        .collect();
    let idle_cpu = |envs: Vec<(&'static str, String)>| {
        let http = http.clone();
        let base = base.clone();
        async move {
            let server = serve(&envs, true);
            wait_healthy(&http, &base).await;
            // Past its start: the first probe and the first look at what waits.
            tokio::time::sleep(Duration::from_secs(5)).await;
            let before = cpu_secs(server.id());
            tokio::time::sleep(Duration::from_secs(idle)).await;
            let used = cpu_secs(server.id()) - before;
            (server, used)
        }
    };
    let (server, baseline) = idle_cpu(empty_envs).await;
    stop(server);
    let _ = std::fs::remove_dir_all(&empty_dir);
    let (server, used) = idle_cpu(deployed).await;
    println!(
        "  waiting: {used:.2} s of CPU in {idle} s ({:.2}% of one core) with {deferred:.0} emails deferred; \
         {baseline:.2} s ({:.2}%) with nothing in the database (default job poll, 500 ms)",
        100.0 * used / idle as f64,
        100.0 * baseline / idle as f64
    );

    // 4. The relay is back: the backlog drains.
    let back = Instant::now();
    let relay = smtp_sink(relay_port);
    let secs = until_metric(
        &http,
        &base,
        "herald_emails_delivered_total{status=\"SENT\"} ",
        total as f64,
        Duration::from_secs(3600),
    )
    .await;
    let sent = metric(&http, &base, "herald_emails_delivered_total{status=\"SENT\"} ").await;
    println!(
        "  relay back: {sent:.0} delivered {secs:.1} s after its return = {:.0} msg/s; peak RSS {:.0} MB",
        sent / back.elapsed().as_secs_f64(),
        peak_rss_mb(server.id())
    );
    stop(server);

    // The ceiling: smtp-source into the same sink.
    let n = 20_000;
    let t = Instant::now();
    let src = Command::new("smtp-source")
        .args([
            "-s",
            "8",
            "-m",
            &n.to_string(),
            "-f",
            "a@bench.test",
            "-t",
            "b@example.org",
            &format!("127.0.0.1:{relay_port}"),
        ])
        .status()
        .expect("smtp-source (Debian package postfix) must be installed");
    if src.success() {
        println!(
            "  ceiling: smtp-source into the same sink over 8 sessions: {:.0} msg/s",
            n as f64 / t.elapsed().as_secs_f64()
        );
    }
    stop(relay);
    let _ = std::fs::remove_dir_all(&dir);
}
