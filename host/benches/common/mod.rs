//! Helpers shared by the benchmark programs.

#![allow(dead_code)]

use std::time::Duration;

/// Writes email rows and their stored bodies straight into the database (benches that need old mail).
pub async fn insert_emails(
    store: &herald_host::store::Store,
    emails: Vec<serde_json::Value>,
    bodies: Vec<serde_json::Value>,
) {
    store
        .query(
            "INSERT INTO email $e RETURN NONE; INSERT INTO email_body $b RETURN NONE;",
            serde_json::json!({ "e": emails, "b": bodies }),
        )
        .await
        .unwrap();
}

/// A small deterministic generator (xorshift), so runs are comparable.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The track benchmark's request: 30% new contacts (numbered by `new_counter`), the rest of a pool of
/// `pool`, with one to ten data fields of three types and one of five event names.
pub fn track_body(rng: &mut Rng, new_counter: &std::sync::atomic::AtomicUsize, pool: u64) -> serde_json::Value {
    use serde_json::json;
    let email = if rng.below(10) < 3 {
        format!("new{}@bench.example", new_counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    } else {
        format!("user{}@bench.example", rng.below(pool))
    };
    let keys = 1 + rng.below(10);
    let mut data = serde_json::Map::new();
    for k in 0..keys {
        let v = match k % 3 {
            0 => json!(format!("v{}", rng.below(50))),
            1 => json!(rng.below(1000)),
            _ => json!(rng.below(2) == 0),
        };
        data.insert(format!("k{k}"), v);
    }
    let events = ["page_view", "signup", "purchase", "login", "click"];
    json!({ "email": email, "event": events[rng.below(5) as usize], "data": data })
}

/// A value parsed from the environment; `None` when unset or unparsable.
pub fn env_opt<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// An integer from the environment, or `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    env_opt(name).unwrap_or(default)
}

/// Whether `BENCH_ONLY` (a comma list; empty or unset: everything) names `part`, or names none of the
/// parts of its `group` (say `unsigned`/`signed`), so that each group not mentioned runs whole.
pub fn chosen(part: &str, group: &[&str]) -> bool {
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let named: Vec<&str> = only.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    named.contains(&part) || !named.iter().any(|n| group.contains(n))
}

/// The settings of a Herald built in-process for a benchmark, on a fresh embedded on-disk database in
/// `dir/db`: rate limit off, jobs polled every 20 ms, plugin folders under `dir`, and the embedded
/// database's caps read from the environment as `herald serve` reads them (HERALD_DB_CACHE_MB,
/// HERALD_DB_MEMTABLE_MB, HERALD_DB_BLOCK_KB, HERALD_DB_VLOG_KB). Callers add what their run needs.
pub fn in_process(dir: &std::path::Path) -> herald_host::config::Settings {
    herald_host::config::Settings {
        db: Some(format!("surrealkv://{}", dir.join("db").display())),
        listen: Some("127.0.0.1:0".parse().expect("a loopback address")),
        secret: Some("bench-secret-bench-secret".into()),
        rate_limit_per_minute: Some(0),
        db_cache_mb: env_opt("HERALD_DB_CACHE_MB"),
        db_memtable_mb: env_opt("HERALD_DB_MEMTABLE_MB"),
        db_block_kb: env_opt("HERALD_DB_BLOCK_KB"),
        db_vlog_kb: env_opt("HERALD_DB_VLOG_KB"),
        job_poll_ms: Some(20),
        plugins_dir: Some(dir.join("plugins")),
        plugin_cache_dir: Some(dir.join("plugin-cache")),
        ..Default::default()
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

/// Peak resident memory (VmHWM) of a process, in MB.
pub fn peak_rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Waits (up to 10 s) until `base/health` answers 2xx.
pub async fn wait_healthy(http: &reqwest::Client, base: &str) {
    for _ in 0..200 {
        if http.get(format!("{base}/health")).send().await.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// POSTs `body` as JSON with the bearer `key`; panics unless the answer is 2xx; answers its JSON.
pub async fn post(http: &reqwest::Client, url: String, key: &str, body: serde_json::Value) -> serde_json::Value {
    let r = http.post(url).bearer_auth(key).json(&body).send().await.expect("the server answers");
    let status = r.status();
    let v: serde_json::Value = r.json().await.unwrap_or(serde_json::Value::Null);
    assert!(status.is_success(), "{status}: {v}");
    v
}

/// The value at quantile `p` of sorted microsecond samples, in ms.
pub fn percentile_ms(sorted_us: &[u64], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    sorted_us[((sorted_us.len() as f64 - 1.0) * p).round() as usize] as f64 / 1000.0
}

/// `herald project create bench` and `herald domain add DOMAIN --trust` on the database of `envs`
/// (server stopped); answers the project's secret key.
pub fn project_with_trusted_domain(bin: &str, envs: &[(&str, String)], domain: &str) -> String {
    use std::process::Command;
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = Command::new(bin).args(["project", "create", "bench"]).envs(envs.clone()).output().unwrap();
    let project: serde_json::Value = serde_json::from_slice(&out.stdout).expect("project json");
    let out = Command::new(bin)
        .args(["domain", "add", domain, "--project", project["id"].as_str().unwrap(), "--trust"])
        .envs(envs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    project["secret"].as_str().unwrap().to_string()
}

/// The repository's root.
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Builds the first-party plugins and fixtures (`cargo plugins`) into a target directory of their own
/// (`HERALD_WASM_TARGET_DIR`, default beside the bench's); answers where the `.wasm` files are.
pub fn build_plugins() -> std::path::PathBuf {
    use std::path::{Path, PathBuf};
    let target = std::env::var_os("HERALD_WASM_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("..").join("wasm-plugins"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status =
        std::process::Command::new(cargo).arg("plugins").current_dir(repo()).env("CARGO_TARGET_DIR", &target).status();
    assert!(status.map(|s| s.success()).unwrap_or(false), "cargo plugins failed");
    target.join("wasm32-wasip2").join("release")
}
pub mod seed;

/// The settings of a `herald serve` child delivering through `smtp_url` on a fresh embedded database in
/// `dir`, listening on `port`: rate limit and send throttle off, 32 job slots polled every 20 ms.
pub fn delivery_envs(dir: &std::path::Path, port: u16, smtp_url: &str, signed: bool) -> Vec<(&'static str, String)> {
    vec![
        ("HERALD_DB", format!("surrealkv://{}", dir.display())),
        ("HERALD_LISTEN", format!("127.0.0.1:{port}")),
        ("HERALD_RATE_LIMIT_PER_MINUTE", "0".into()),
        ("HERALD_SEND_RATE_PER_SECOND", "0".into()),
        ("HERALD_SMTP_URL", smtp_url.to_string()),
        ("HERALD_DKIM_SIGNING", signed.to_string()),
        ("HERALD_JOB_CONCURRENCY", "32".into()),
        ("HERALD_JOB_POLL_MS", "20".into()),
        ("HERALD_LOG", "warn".into()),
        ("HERALD_SECRET", "bench-secret-bench-secret".into()),
    ]
}

/// `herald serve` with `envs`, its job workers running or not (an API-only node).
pub fn serve(envs: &[(&str, String)], run_jobs: bool) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .arg("serve")
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .env("HERALD_RUN_JOBS", run_jobs.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("herald serve starts")
}

/// Stops a child gracefully (SIGTERM) and waits for it.
pub fn stop(mut child: std::process::Child) {
    let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let _ = child.wait();
}

/// Postfix's `smtp-sink` on `127.0.0.1:port` (Debian package postfix; runs without the daemon).
pub fn smtp_sink(port: u16) -> std::process::Child {
    std::process::Command::new("smtp-sink")
        .args(["-u", "nobody", &format!("127.0.0.1:{port}"), "1000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("smtp-sink (Debian package postfix) must be installed")
}
