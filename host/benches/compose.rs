//! Benchmark of composing large messages (issue 29: link rewriting and the text part were quadratic, and
//! composing ran on the async worker threads). Prints numbers; asserts nothing.
//!
//! 1. In process: one recipient's email record composed from a 1.5 MB HTML body with 10,000 links, with
//!    tracking (every link rewritten through a signed token, the pixel added) and the plain-text part:
//!    median and slowest of ROUNDS runs. Also 97 / 195 / 390 KiB bodies, the sizes the review measured.
//! 2. Against `herald serve` (API-only node on a fresh embedded database): two clients send that message
//!    (a MARKETING template, so tracked) back to back for SECONDS while a third asks `/health` every
//!    10 ms; prints the sends, their latency, and `/health` p50 / p99 / max beside them.
//!
//! Run: `cargo bench -p herald-host --bench compose` (env: BENCH_SECONDS, default 20; BENCH_ROUNDS,
//! default 20; BENCH_ONLY: `compose`, `server`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use herald_host::domain::templating::{Engine, Mode};
use herald_host::services::compose::{Composer, Message, Recipient};
use serde_json::{Map, Value, json};

mod common;
use common::{chosen, env_or, free_port, percentile_ms, project_with_trusted_domain, wait_healthy};

/// An HTML body of about `bytes` with `links` links spread through it.
fn body(bytes: usize, links: usize) -> String {
    let mut html = String::from("<html><head><style>p{margin:0}</style></head><body>");
    let per_link = bytes / links.max(1);
    let filler = "Lorem ipsum dolor sit amet, <b>consectetur</b> adipiscing elit. ";
    for i in 0..links {
        html.push_str(&format!(
            "<p>Hello {{{{name}}}}, <a href=\"https://example.org/item/{i}?ref=mail&amp;x=1\">item {i}</a> "
        ));
        while html.len() < (i + 1) * per_link {
            html.push_str(filler);
        }
        html.push_str("</p>\n");
    }
    html.push_str("</body></html>");
    html
}

fn composer() -> Composer {
    Composer {
        templates: Engine::new(),
        links_key: vec![7; 32],
        tracking_key: vec![9; 32],
        public_url: "https://herald.example".into(),
    }
}

/// Milliseconds of each of `rounds` compositions of `html` for one recipient, sorted.
fn compose_times(html: &str, rounds: u64) -> Vec<f64> {
    let c = composer();
    let subject = c.templates.prepare("Hello {{name}}", Mode::Text).unwrap();
    let prepared = c.templates.prepare(html, Mode::Html).unwrap();
    let data: Map<String, Value> = json!({"name": "Ada"}).as_object().cloned().unwrap();
    let message = Message {
        project: "p",
        from: "news@bench.test",
        from_name: Some("Bench"),
        reply_to: None,
        subject: &subject,
        html: &prepared,
        kind: "MARKETING",
        template: None,
        campaign: None,
        headers: &[],
        attachments: std::sync::Arc::from("[]"),
        track: true,
        request_vars: &[],
        subject_prefix: "",
        bulk: false,
    };
    let r = Recipient { contact_id: "c1", email: "ada@example.org", name: None, data: &data };
    let mut times: Vec<f64> = (0..rounds)
        .map(|i| {
            let t = Instant::now();
            let row = c.compose(&message, &r, &format!("e{i}"), 0).unwrap();
            std::hint::black_box(row);
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times
}

async fn server_part(seconds: u64) {
    let bin = env!("CARGO_BIN_EXE_herald");
    let dir = std::env::temp_dir().join(format!("herald-bench-compose-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let port = free_port();
    let envs = [
        ("HERALD_DB", format!("surrealkv://{}", dir.display())),
        ("HERALD_LISTEN", format!("127.0.0.1:{port}")),
        ("HERALD_RATE_LIMIT_PER_MINUTE", "0".into()),
        ("HERALD_RUN_JOBS", "false".into()),
        ("HERALD_LOG", "warn".into()),
        ("HERALD_SECRET", "bench-secret-bench-secret".into()),
    ];
    let key = project_with_trusted_domain(bin, &envs, "bench.test");
    let mut server = Command::new(bin).arg("serve").envs(envs.clone()).stdout(Stdio::null()).spawn().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    wait_healthy(&http, &base).await;
    let template = json!({"name": "big", "subject": "Hello {{name}}", "body": body(1_500_000, 10_000),
        "from": "news@bench.test", "type": "MARKETING"});
    let r = http.post(format!("{base}/templates")).bearer_auth(&key).json(&template).send().await.unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    let template_id = r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let senders: Vec<_> = (0..2)
        .map(|c| {
            let (http, base, key, template_id) = (http.clone(), base.clone(), key.clone(), template_id.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut i = 0;
                while Instant::now() < deadline {
                    i += 1;
                    let body = json!({"to": format!("r{c}-{i}@example.org"), "template": template_id,
                        "subscribed": true, "data": {"name": format!("R {c}")}});
                    let t = Instant::now();
                    let r = http.post(format!("{base}/v1/send")).bearer_auth(&key).json(&body).send().await.unwrap();
                    assert!(r.status().is_success(), "{}", r.text().await.unwrap_or_default());
                    lat.push(t.elapsed().as_micros() as u64);
                }
                lat
            })
        })
        .collect();
    let health = {
        let (http, base) = (http.clone(), base.clone());
        tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                http.get(format!("{base}/health")).send().await.unwrap();
                lat.push(t.elapsed().as_micros() as u64);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            lat
        })
    };
    let mut sends: Vec<u64> = Vec::new();
    for s in senders {
        sends.extend(s.await.unwrap());
    }
    sends.sort_unstable();
    let mut h = health.await.unwrap();
    h.sort_unstable();
    println!(
        "  server (two clients sending the 1.5 MB / 10,000-link marketing message for {seconds} s, API-only node):"
    );
    println!(
        "    sends: {} ({:.1}/s), latency p50 {:.0} ms, p99 {:.0} ms",
        sends.len(),
        sends.len() as f64 / seconds as f64,
        percentile_ms(&sends, 0.5),
        percentile_ms(&sends, 0.99)
    );
    println!(
        "    /health beside them: {} requests, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        h.len(),
        percentile_ms(&h, 0.5),
        percentile_ms(&h, 0.99),
        percentile_ms(&h, 1.0)
    );
    let _ = Command::new("kill").args(["-TERM", &server.id().to_string()]).status();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let seconds = env_or("BENCH_SECONDS", 20);
    let rounds = env_or("BENCH_ROUNDS", 20);
    println!("compose benchmark");
    if chosen("compose", &["compose", "server"]) {
        for (kib, links) in [(97, 650), (195, 1_300), (390, 2_600), (1_465, 10_000)] {
            let html = body(kib * 1024, links);
            let t = compose_times(&html, rounds);
            println!(
                "  compose one recipient, tracked: {:.2} MB body, {links} links: median {:.1} ms, slowest {:.1} ms",
                html.len() as f64 / 1e6,
                t[t.len() / 2],
                t[t.len() - 1]
            );
        }
    }
    if chosen("server", &["compose", "server"]) {
        server_part(seconds).await;
    }
}
