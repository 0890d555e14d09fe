//! Benchmark of the plugin runtime (plugin issue). Prints numbers; asserts nothing.
//!
//! Builds the first-party plugins and fixtures with `cargo plugins`, loads them into an in-process
//! `PluginHost` (the real wasmtime setup), and prints:
//! 1. the per-call overhead of a trivial operator call (one value) and of a step call (fresh instance);
//! 2. operator throughput in values/s through the batch call (batches of 10,000);
//! 3. a transport plugin's messages/s (the `http` transport) into a local HTTP receiver;
//! 4. the time from writing a new plugin version into the watched folder to it serving, under
//!    concurrent calls, with the number of failed calls (must be 0).
//!
//! Run: `cargo bench -p herald-host --bench plugins` (env: BENCH_SECONDS per phase, default 3).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use herald_host::config::PluginGrant;
use herald_host::infra::clock::SystemClock;
use herald_host::plugins::{
    Address, Execution, Options, Outgoing, PluginHost, SendOutcome, StepContact, StepInput, Value,
};
use salvo::prelude::*;

mod common;
use common::{build_plugins, env_or, repo};

fn install(artifacts: &Path, dir: &Path, file: &str, manifest: &str, name: &str) {
    std::fs::copy(repo().join(manifest), dir.join(format!("{name}.toml"))).unwrap();
    std::fs::copy(artifacts.join(format!("{file}.wasm")), dir.join(format!("{name}.wasm"))).unwrap();
}

#[handler]
async fn receive(req: &mut Request, res: &mut Response) {
    let _ = req.payload().await;
    res.render(Text::Json(r#"{"id":"bench"}"#));
}

fn step_input() -> StepInput {
    StepInput {
        step_type: "OK".into(),
        config: "{}".into(),
        contact: StepContact { id: "c".into(), email: "a@example.com".into(), subscribed: true, data: "{}".into() },
        execution: Execution {
            project_id: "p".into(),
            workflow_id: "w".into(),
            execution_id: "x".into(),
            step_id: "s".into(),
            attempt: 1,
            now_ms: 0,
            event: None,
        },
    }
}

fn outgoing(i: u64) -> Outgoing {
    let addr = |e: &str| Address { email: e.into(), name: None };
    Outgoing {
        mail_from: "news@shop.test".into(),
        rcpt_to: vec![format!("r{i}@example.org")],
        message_id: format!("{i}@shop.test"),
        from: addr("news@shop.test"),
        reply_to: None,
        to: vec![addr(&format!("r{i}@example.org"))],
        cc: vec![],
        subject: "Benchmark".into(),
        html: Some("<p>Hello from the benchmark</p>".repeat(20)),
        text: Some("Hello from the benchmark".repeat(20)),
        headers: vec![],
        attachments: vec![],
        tags: vec![("project".into(), "p".into())],
        raw: vec![b'x'; 4096],
    }
}

async fn timed_calls<F, Fut>(seconds: u64, concurrency: usize, f: F) -> (u64, Duration)
where
    F: Fn() -> Fut + Send + Sync + 'static + Clone,
    Fut: std::future::Future<Output = bool> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (stop, done, f) = (stop.clone(), done.clone(), f.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                assert!(f().await, "call failed");
                done.fetch_add(1, Ordering::Relaxed);
                // wasm calls that finish without waiting never yield; let the timer and others run
                tokio::task::yield_now().await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    (done.load(Ordering::Relaxed), started.elapsed())
}

#[tokio::main]
async fn main() {
    let seconds = env_or("BENCH_SECONDS", 3);
    let artifacts = build_plugins();
    let dir = std::env::temp_dir().join(format!("herald-bench-plugins-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let manifests = [
        (
            "herald_fixture_misbehaving_operator",
            "plugins/fixtures/misbehaving-operator/manifest.toml",
            "misbehaving-operator",
        ),
        ("herald_fixture_misbehaving_step", "plugins/fixtures/misbehaving-step/manifest.toml", "misbehaving-step"),
        ("herald_plugin_operators", "plugins/operators/manifest.toml", "operators"),
        ("herald_plugin_http", "plugins/http/manifest.toml", "http"),
        ("herald_fixture_version_a", "plugins/fixtures/version-a/manifest.toml", "versioned"),
    ];
    for (file, manifest, name) in manifests {
        install(&artifacts, &dir, file, manifest, name);
    }
    // a local HTTP receiver for the transport
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let receiver = listener.local_addr().unwrap();
    let acceptor = salvo::conn::tcp::TcpAcceptor::try_from(listener).unwrap();
    tokio::spawn(Server::new(acceptor).serve(Router::with_path("mail").post(receive)));
    let mut grants = std::collections::BTreeMap::new();
    grants.insert(
        "http".to_string(),
        PluginGrant {
            allow_private: true,
            config: [("url".to_string(), format!("http://{receiver}/mail"))].into(),
            secrets: [("signing_key".to_string(), "bench-key".to_string())].into(),
            ..Default::default()
        },
    );
    let cache = std::env::temp_dir().join("herald-bench-plugin-cache");
    let host = PluginHost::new(Options { dir: dir.clone(), cache_dir: cache, grants }, Arc::new(SystemClock)).unwrap();
    let load = Instant::now();
    host.load_all().await;
    println!("loaded {} plugins in {:.0} ms", host.list().len(), load.elapsed().as_secs_f64() * 1e3);
    for p in host.list() {
        assert_eq!(p.status, "loaded", "{} failed: {:?}", p.name, p.error);
    }

    // 1. per-call overhead, sequential
    let one = [Value::Text("yes".into())];
    for _ in 0..1000 {
        host.evaluate("ok", &Value::Null, &one).await.unwrap();
    }
    let n = 20_000;
    let t = Instant::now();
    for _ in 0..n {
        host.evaluate("ok", &Value::Null, &one).await.unwrap();
    }
    let op_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let input = step_input();
    for _ in 0..200 {
        host.execute_step(&input).await.unwrap();
    }
    let n_steps = 5_000;
    let t = Instant::now();
    for _ in 0..n_steps {
        host.execute_step(&input).await.unwrap();
    }
    let step_us = t.elapsed().as_secs_f64() * 1e6 / n_steps as f64;
    println!("trivial operator call: {op_us:.2} µs per call (target ≤ 10 µs)");
    println!("step call (fresh instance each): {step_us:.2} µs per call");

    // 2. operator throughput through the batch call
    let batch: Arc<Vec<Value>> =
        Arc::new((0..10_000).map(|i| Value::Text(if i % 3 == 0 { "yes".into() } else { format!("v{i}") })).collect());
    for (op, operand) in [("ok", Value::Null), ("domainIs", Value::Text("example.com".into()))] {
        let values: Arc<Vec<Value>> = if op == "domainIs" {
            Arc::new(
                (0..10_000)
                    .map(|i| Value::Text(format!("user{i}@{}", if i % 2 == 0 { "example.com" } else { "other.org" })))
                    .collect(),
            )
        } else {
            batch.clone()
        };
        let h = host.clone();
        let (calls, elapsed) = timed_calls(seconds, 2, move || {
            let (h, values, operand) = (h.clone(), values.clone(), operand.clone());
            async move { h.evaluate(op, &operand, &values).await.is_ok() }
        })
        .await;
        let per_s = (calls * 10_000) as f64 / elapsed.as_secs_f64();
        println!("operator {op}: {:.2} million values/s in batches of 10,000 (target ≥ 5 million)", per_s / 1e6);
    }

    // 3. a transport plugin into a local HTTP receiver
    let counter = Arc::new(AtomicU64::new(0));
    let h = host.clone();
    let (sent, elapsed) = timed_calls(seconds, 16, move || {
        let (h, counter) = (h.clone(), counter.clone());
        async move {
            let i = counter.fetch_add(1, Ordering::Relaxed);
            match h.send("http", &outgoing(i)).await {
                Ok(SendOutcome::Accepted { .. }) => true,
                other => {
                    eprintln!("send failed: {other:?}");
                    false
                }
            }
        }
    })
    .await;
    println!(
        "http transport plugin: {:.0} messages/s into a loopback receiver (16 concurrent)",
        sent as f64 / elapsed.as_secs_f64()
    );

    // 4. hot reload under concurrent load
    let _watch = host.watch().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let switched_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (h, stop, failed, calls, switched_at) =
            (host.clone(), stop.clone(), failed.clone(), calls.clone(), switched_at.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match h.evaluate("whichVersion", &Value::Null, &[Value::Null]).await {
                    Ok(v) if v == [false] => {
                        let mut s = switched_at.lock().unwrap();
                        if s.is_none() {
                            *s = Some(Instant::now());
                        }
                    }
                    Ok(_) => {}
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                calls.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let written = Instant::now();
    std::fs::copy(artifacts.join("herald_fixture_version_b.wasm"), dir.join("versioned.wasm")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while switched_at.lock().unwrap().is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    match *switched_at.lock().unwrap() {
        Some(at) => println!(
            "hot reload: new version serving {:.0} ms after the file was written (target ≤ 1000 ms), {} calls during the run, {} failed",
            at.duration_since(written).as_secs_f64() * 1e3,
            calls.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed)
        ),
        None => println!("hot reload: the new version did not serve within 30 s"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
