//! Soak (issue 60): `herald serve` on the embedded default for SOAK_SECONDS (600) of mixed load at a
//! fixed rate, about half of what this mix sustains on the 2-core machine (docs/performance.md#soak-issue-60;
//! the track and send benchmarks alone sustain more, the mix about 630 calls a second): tracked events,
//! `/v1/send` calls, workflow enrollments (tracked events that start a workflow sending an email),
//! activity-feed reads, and a campaign to the 20,000 seeded contacts sent at the start. It samples the
//! server's resident memory every second; every 10 s it prints the window's median and maximum RSS, the
//! `/v1/track` p99 of the window and the emails received. At the end: each window's median RSS against
//! the median of the first minute's last window (target: within 20%), the highest sample, `/v1/track` p99
//! (target: under 100 ms), and the 5xx answers (target: none). Prints numbers; asserts nothing.
//!
//! Run: `cargo bench -p herald-host --bench soak` (env: SOAK_SECONDS; SOAK_TRACK, SOAK_SEND,
//! SOAK_ENROLL, SOAK_READ: calls a second, default 280, 28, 7 and 2; SOAK_CONTACTS, default 20,000).
//!
//! The memory budget (issue 79, docs/performance.md#memory-budget-issue-79): SOAK_BUDGET_MB starts the
//! server with `HERALD_MEMORY_BUDGET_MB`, and SOAK_IDLE_SECS (default 20 with a budget, else 0) waits
//! that long on the empty database first. RSS is also sampled every second from the start in a separate
//! task; the end prints the idle RSS (the last idle sample) and the highest sample of each phase (idle,
//! seeding, the measured run). A quarter of the default rates: `SOAK_TRACK=70 SOAK_SEND=7 SOAK_ENROLL=2
//! SOAK_READ=1` (2 and 1 round 1.75 and 0.5 up). SOAK_LOG sets the server's `HERALD_LOG` (default warn) and keeps
//! its log in the temp directory as herald-soak-serve.log.
//!
//! SOAK_HERALD_BIN runs another `herald` than the one cargo built (e.g. a script that starts `serve`
//! under heaptrack; the RSS samples and the closing TERM then reach the script's process, not the
//! server: stop that yourself).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;
use common::{env_or, free_port, percentile_ms, post, project_with_trusted_domain, wait_healthy};
#[path = "../../tests/api/smtp_sink.rs"]
mod smtp_sink;

const DOMAIN: &str = "soak.test";

fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    server_errors: AtomicU64,
    other_errors: AtomicU64,
    /// Microseconds of the `/v1/track` calls answered since the last report.
    track_us: Mutex<Vec<u64>>,
}

/// Calls `make(i)` `rate` times a second, open loop (a call does not wait for the one before), for
/// `seconds` (`rate * seconds` calls in all); at most 512 calls in flight.
fn load(
    rate: u64,
    seconds: u64,
    tally: Arc<Tally>,
    http: reqwest::Client,
    key: String,
    track: bool,
    make: impl Fn(u64) -> (reqwest::Method, String, Option<Value>) + Send + Sync + 'static,
) -> tokio::task::JoinHandle<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(512));
    let make = Arc::new(make);
    tokio::spawn(async move {
        if rate == 0 {
            return;
        }
        let start = Instant::now();
        let mut i = 0u64;
        let total = rate * seconds;
        while i < total {
            let due = ((start.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
            while i < due {
                let permit = slots.clone().acquire_owned().await.unwrap();
                let (method, url, body) = make(i);
                let (http, key, tally) = (http.clone(), key.clone(), tally.clone());
                tokio::spawn(async move {
                    let t = Instant::now();
                    let mut rb = http.request(method, url).bearer_auth(&key);
                    if let Some(b) = body {
                        rb = rb.json(&b);
                    }
                    match rb.send().await {
                        Ok(r) if r.status().is_success() => {
                            tally.ok.fetch_add(1, Ordering::Relaxed);
                            if track {
                                tally.track_us.lock().unwrap().push(t.elapsed().as_micros() as u64);
                            }
                        }
                        Ok(r) if r.status().is_server_error() => {
                            tally.server_errors.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {
                            tally.other_errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    drop(permit);
                });
                i += 1;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

#[tokio::main]
async fn main() {
    let seconds = env_or("SOAK_SECONDS", 600);
    let (track_rate, send_rate, enroll_rate, read_rate) =
        (env_or("SOAK_TRACK", 280), env_or("SOAK_SEND", 28), env_or("SOAK_ENROLL", 7), env_or("SOAK_READ", 2));
    let contacts = env_or("SOAK_CONTACTS", 20_000);
    let dir = std::env::temp_dir().join(format!("herald-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sink = smtp_sink::SmtpSink::start(0).await;
    let port = free_port();
    let envs: Vec<(&str, String)> = vec![
        ("HERALD_DB", format!("surrealkv://{}", dir.join("db").display())),
        ("HERALD_SECRET", "soak-secret-soak-secret-soak".into()),
        ("HERALD_LISTEN", format!("127.0.0.1:{port}")),
        ("HERALD_SMTP_URL", sink.url()),
        ("HERALD_RATE_LIMIT_PER_MINUTE", "0".into()),
        ("HERALD_SEND_RATE_PER_SECOND", "0".into()),
        ("HERALD_LOG", std::env::var("SOAK_LOG").unwrap_or_else(|_| "warn".into())),
        ("HERALD_PLUGINS_DIR", dir.join("plugins").display().to_string()),
        ("HERALD_PLUGIN_CACHE_DIR", dir.join("plugin-cache").display().to_string()),
        ("HERALD_UPLOADS_DIR", dir.join("uploads").display().to_string()),
    ];
    let budget = std::env::var("SOAK_BUDGET_MB").ok().filter(|b| !b.is_empty());
    let mut envs = envs;
    if let Some(b) = &budget {
        envs.push(("HERALD_MEMORY_BUDGET_MB", b.clone()));
    }
    let bin_path = std::env::var("SOAK_HERALD_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_herald").to_string());
    let bin = bin_path.as_str();
    let key = project_with_trusted_domain(bin, &envs, DOMAIN);
    let mut server = Command::new(bin)
        .arg("serve")
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().pool_max_idle_per_host(512).build().unwrap();
    wait_healthy(&http, &base).await;
    // Every second's RSS from the start, with when each phase began (idle, seeding, the run).
    let began = Instant::now();
    let all_samples: Arc<Mutex<Vec<(f64, f64)>>> = Arc::default();
    let sampler = {
        let (samples, pid) = (all_samples.clone(), server.id());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                samples.lock().unwrap().push((began.elapsed().as_secs_f64(), rss_mb(pid)));
            }
        })
    };
    let idle_secs = env_or("SOAK_IDLE_SECS", if budget.is_some() { 20 } else { 0 });
    tokio::time::sleep(Duration::from_secs(idle_secs)).await;
    let idle_rss = rss_mb(server.id());
    let seeding_from = began.elapsed().as_secs_f64();

    // Set-up (not measured): the contacts, a workflow on `enroll` that sends an email, a campaign.
    let seeders: Vec<_> = (0..16u64)
        .map(|w| {
            let (http, base, key) = (http.clone(), base.clone(), key.clone());
            tokio::spawn(async move {
                for i in (w..contacts).step_by(16) {
                    let body = json!({ "email": format!("user{i}@example.org"), "subscribed": true, "data": { "firstName": format!("U{i}") } });
                    http.post(format!("{base}/contacts")).bearer_auth(&key).json(&body).send().await.unwrap();
                }
            })
        })
        .collect();
    for s in seeders {
        s.await.unwrap();
    }
    let from = format!("news@{DOMAIN}");
    let t = post(
        &http,
        format!("{base}/templates"),
        &key,
        json!({ "name": "Welcome", "type": "TRANSACTIONAL",
        "subject": "Welcome {{email}}", "body": "<p>Welcome</p>", "from": from }),
    )
    .await;
    let wf = post(&http, format!("{base}/workflows"), &key, json!({ "name": "Welcome", "eventName": "enroll" })).await;
    let wf = wf["id"].as_str().unwrap().to_string();
    for step in [
        json!({ "type": "SEND_EMAIL", "name": "welcome", "templateId": t["id"] }),
        json!({ "type": "EXIT", "name": "done" }),
    ] {
        post(&http, format!("{base}/workflows/{wf}/steps"), &key, step).await;
    }
    http.patch(format!("{base}/workflows/{wf}"))
        .bearer_auth(&key)
        .json(&json!({ "enabled": true }))
        .send()
        .await
        .unwrap();
    let c = post(&http, format!("{base}/campaigns"), &key, json!({ "name": "Soak", "subject": "News for {{firstName}}",
        "body": "<p>Hello {{firstName}}</p><p><a href=\"{{unsubscribeUrl}}\">Unsubscribe</a></p>", "from": from, "audienceType": "ALL" })).await;
    let campaign = c["data"]["id"].as_str().unwrap().to_string();

    println!(
        "soak: {seconds} s; {track_rate} tracked events, {send_rate} sends, {enroll_rate} enrollments, {read_rate} activity reads a second; \
         a campaign to {contacts} contacts at the start"
    );
    let tally = Arc::new(Tally::default());
    post(&http, format!("{base}/campaigns/{campaign}/send"), &key, json!({})).await;
    let b = base.clone();
    let mut tasks = vec![load(track_rate, seconds, tally.clone(), http.clone(), key.clone(), true, move |i| {
        let body = json!({ "email": format!("user{}@example.org", (i * 7919) % contacts.max(1)), "event": "page_view", "data": { "n": i } });
        (reqwest::Method::POST, format!("{b}/v1/track"), Some(body))
    })];
    let b = base.clone();
    tasks.push(load(send_rate, seconds, tally.clone(), http.clone(), key.clone(), false, move |i| {
        let body = json!({ "to": format!("user{}@example.org", i % contacts.max(1)), "from": format!("app@{DOMAIN}"),
            "subject": format!("Receipt {i}"), "body": "<p>Your receipt</p>" });
        (reqwest::Method::POST, format!("{b}/v1/send"), Some(body))
    }));
    let b = base.clone();
    tasks.push(load(enroll_rate, seconds, tally.clone(), http.clone(), key.clone(), false, move |i| {
        (
            reqwest::Method::POST,
            format!("{b}/v1/track"),
            Some(json!({ "email": format!("new{i}@example.org"), "event": "enroll" })),
        )
    }));
    let b = base.clone();
    tasks.push(load(read_rate, seconds, tally.clone(), http.clone(), key.clone(), false, move |_| {
        (reqwest::Method::GET, format!("{b}/activity?limit=50"), None)
    }));

    let pid = server.id();
    let start = Instant::now();
    let run_from = began.elapsed().as_secs_f64();
    let (mut baseline, mut worst, mut received) = (0.0f64, 0.0f64, 0usize);
    let mut peak = 0.0f64;
    let mut all_track: Vec<u64> = Vec::new();
    println!("     t    RSS MB (median, max)   track p99 ms   calls ok   5xx   emails");
    for tick in 1..=seconds / 10 {
        // RSS each second; the window's median is what it holds, the maximum what it touched (the
        // database's write-buffer flush holds a second buffer for a second or two).
        let mut samples = Vec::with_capacity(10);
        for s in 1..=10 {
            tokio::time::sleep_until((start + Duration::from_secs((tick - 1) * 10 + s)).into()).await;
            samples.push(rss_mb(pid));
        }
        samples.sort_by(f64::total_cmp);
        let (rss, max) = (samples[samples.len() / 2], samples[samples.len() - 1]);
        let mut window = std::mem::take(&mut *tally.track_us.lock().unwrap());
        window.sort_unstable();
        received += std::mem::take(&mut *sink.messages.lock().unwrap()).len();
        println!(
            "  {:>4}   {rss:>7.0} {max:>7.0}        {:>12.1}   {:>8}   {:>3}   {received:>6}",
            tick * 10,
            percentile_ms(&window, 0.99),
            tally.ok.load(Ordering::Relaxed),
            tally.server_errors.load(Ordering::Relaxed)
        );
        all_track.extend(window);
        if tick == 6 {
            baseline = rss;
        } else if tick > 6 && baseline > 0.0 {
            worst = worst.max((rss - baseline).abs() / baseline);
            peak = peak.max(max);
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    // The last second's emails are still in flight at the last sample: wait for them (up to 30 s).
    let expected = (contacts + (send_rate + enroll_rate) * seconds) as usize;
    for _ in 0..300 {
        received += std::mem::take(&mut *sink.messages.lock().unwrap()).len();
        if received >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    all_track.sort_unstable();
    println!(
        "soak result: RSS after the first minute {baseline:.0} MB (median of the 50-60 s samples), largest departure \
         of a 10 s window's median from it {:.1}% (target 20%), highest single sample after it {peak:.0} MB ({:+.1}%); \
         /v1/track p99 {:.1} ms over {} calls (target 100 ms); 5xx {} (target 0); other failures {}; emails received {received} of {expected}",
        worst * 100.0,
        if baseline > 0.0 { (peak - baseline) / baseline * 100.0 } else { 0.0 },
        percentile_ms(&all_track, 0.99),
        all_track.len(),
        tally.server_errors.load(Ordering::Relaxed),
        tally.other_errors.load(Ordering::Relaxed)
    );
    sampler.abort();
    let samples = std::mem::take(&mut *all_samples.lock().unwrap());
    let max_in = |from: f64, to: f64| {
        samples.iter().filter(|(t, _)| *t >= from && *t < to).map(|(_, r)| *r).fold(0.0f64, f64::max)
    };
    println!(
        "soak memory: budget {} MB; idle RSS {idle_rss:.0} MB after {idle_secs} s (highest idle sample {:.0}); \
         highest 1 s sample while seeding {:.0} MB, during the run {:.0} MB ({} samples in all)",
        budget.as_deref().unwrap_or("none"),
        max_in(0.0, seeding_from),
        max_in(seeding_from, run_from),
        max_in(run_from, f64::MAX),
        samples.len()
    );
    let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    let _ = server.wait();
    if std::env::var("SOAK_LOG").is_ok() {
        let kept = std::env::temp_dir().join("herald-soak-serve.log");
        let _ = std::fs::copy(dir.join("serve.log"), &kept);
        println!("soak: the server's log is in {}", kept.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
