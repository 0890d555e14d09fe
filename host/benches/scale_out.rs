//! Scale-out check and benchmark (issue 60): Herald as N processes on one SurrealDB server, SurrealDB's
//! own (`scripts/surreal-server` builds it; `scripts/scale-out` runs this program). For each run: a
//! fresh server (`surreal start ... memory`), one SMTP sink, N `herald serve` processes over
//! `ws://`, a project with a trusted sender domain and CONTACTS seeded contacts. Then, at once: a
//! campaign to every contact (sent through process 1), SENDS `/v1/send` calls, EVENTS tracked events
//! and ENROLLS tracked events that enroll a new contact each in a workflow whose first step sends an
//! email, spread round-robin over the processes by 32 clients (each call with an `Idempotency-Key`,
//! retried on the next process when one does not answer). A run marked `k` SIGKILLs process 2 halfway
//! through the calls and starts it again.
//!
//! Checks, for every run: every email arrived (the campaign's CONTACTS recipients, SENDS sends, ENROLLS
//! workflow emails) and none twice by Message-ID, except at most the 32 hand-overs the killed process
//! may have had open (listed); every tracked event stored once. Prints the throughput of each run.
//! Exits non-zero when a check fails.
//!
//! Run: `scripts/scale-out` (or `cargo bench -p herald-host --bench scale_out` with HERALD_SURREAL_BIN).
//! Env: SCALE_RUNS (default `1,2,3,3k`), SCALE_CONTACTS (20000), SCALE_SENDS (5000), SCALE_EVENTS
//! (5000), SCALE_ENROLLS (2000).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use herald_host::store::Store;
use serde_json::{Value, json};

mod common;
use common::{env_or, free_port, post, wait_healthy};
#[path = "../../tests/api/smtp_sink.rs"]
mod smtp_sink;
use smtp_sink::{SmtpSink, header};

/// Hand-overs a process can have open when it dies (`delivery::HANDOVERS`).
const HANDOVERS: usize = 32;
const CLIENTS: usize = 32;
const DOMAIN: &str = "scale.test";

struct Sizes {
    contacts: u64,
    sends: u64,
    events: u64,
    enrolls: u64,
}

/// One SurrealDB server and the Herald processes on it.
struct Cluster {
    surreal: Child,
    envs: Vec<(&'static str, String)>,
    ports: Vec<u16>,
    procs: Vec<Option<Child>>,
    dir: std::path::PathBuf,
}

impl Cluster {
    fn herald(&self, i: usize) -> Child {
        Command::new(env!("CARGO_BIN_EXE_herald"))
            .arg("serve")
            .envs(self.envs.iter().map(|(k, v)| (*k, v.as_str())))
            .env("HERALD_LISTEN", format!("127.0.0.1:{}", self.ports[i]))
            .env("HERALD_PLUGIN_CACHE_DIR", self.dir.join(format!("plugin-cache-{i}")))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join(format!("herald-{i}.log"))).unwrap())
            .spawn()
            .expect("herald serve")
    }

    fn base(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i])
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.procs[i].take() {
            let _ = Command::new("kill").args(["-KILL", &c.id().to_string()]).status();
            let _ = c.wait();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.procs.len() {
            self.kill(i);
        }
        let _ = self.surreal.kill();
        let _ = self.surreal.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn start(n: usize, sink: &SmtpSink, surreal_bin: &str) -> Cluster {
    let dir = std::env::temp_dir().join(format!("herald-scale-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let db_port = free_port();
    let surreal = Command::new(surreal_bin)
        .args(["start", "--bind", &format!("127.0.0.1:{db_port}"), "--user", "root", "--pass", "root"])
        .args(["--log", "warn", "--no-banner", "memory"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("surreal.log")).unwrap())
        .spawn()
        .expect("surreal start");
    let http = reqwest::Client::new();
    wait_healthy(&http, &format!("http://127.0.0.1:{db_port}")).await;
    let envs = vec![
        ("HERALD_DB", format!("ws://127.0.0.1:{db_port}")),
        ("HERALD_DB_USER", "root".into()),
        ("HERALD_DB_PASSWORD", "root".into()),
        ("HERALD_SECRET", "scale-out-secret-scale-out-secret".into()),
        ("HERALD_SMTP_URL", sink.url()),
        ("HERALD_RATE_LIMIT_PER_MINUTE", "0".into()),
        ("HERALD_SEND_RATE_PER_SECOND", "0".into()),
        ("HERALD_JOB_LEASE_SECS", "6".into()),
        ("HERALD_LOG", "warn".into()),
        ("HERALD_UPLOADS_DIR", dir.join("uploads").display().to_string()),
        ("HERALD_PLUGINS_DIR", dir.join("plugins").display().to_string()),
        ("HERALD_MAIL_DIR", dir.join("mail").display().to_string()),
    ];
    let ports = (0..n).map(|_| free_port()).collect();
    let mut c = Cluster { surreal, envs, ports, procs: Vec::new(), dir };
    for i in 0..n {
        let child = c.herald(i);
        c.procs.push(Some(child));
    }
    for i in 0..n {
        wait_healthy(&http, &c.base(i)).await;
    }
    c
}

/// `herald project create` and `herald domain add --trust` through the CLI; answers (id, secret).
fn project(c: &Cluster) -> (String, String) {
    let bin = env!("CARGO_BIN_EXE_herald");
    let envs: Vec<(&str, &str)> = c.envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = Command::new(bin).args(["project", "create", "scale"]).envs(envs.clone()).output().unwrap();
    let p: Value = serde_json::from_slice(&out.stdout).expect("project json");
    let id = p["id"].as_str().unwrap().to_string();
    let out =
        Command::new(bin).args(["domain", "add", DOMAIN, "--project", &id, "--trust"]).envs(envs).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (id, p["secret"].as_str().unwrap().to_string())
}

async fn store(c: &Cluster) -> Store {
    let mut config = herald_host::config::Config::for_tests();
    config.db = c.envs[0].1.clone();
    config.db_user = Some("root".into());
    config.db_password = Some("root".into());
    Store::connect(&config).await.expect("connect to the server")
}

async fn seed(st: &Store, project: &str, contacts: u64) {
    // Rows for `herald serve` processes, which run on the real clock.
    #[expect(clippy::disallowed_methods)]
    let now = chrono::Utc::now().timestamp_millis();
    let mut i = 0;
    while i < contacts {
        let n = (contacts - i).min(2_000);
        let rows: Vec<Value> = (i..i + n)
            .map(|k| {
                json!({
                    "id": uuid::Uuid::now_v7().to_string(), "project": project,
                    "email": format!("user{k}@example.org"), "subscribed": true,
                    "data": { "firstName": format!("User{k}") }, "version": 1, "created_at": now, "updated_at": now,
                })
            })
            .collect();
        st.query("INSERT INTO contact $rows RETURN NONE", json!({ "rows": rows })).await.unwrap();
        i += n;
    }
}

/// The workflow on `enroll` whose first step sends an email, and the campaign to every contact.
async fn setup(c: &Cluster, key: &str) -> String {
    let http = reqwest::Client::new();
    let base = c.base(0);
    let from = format!("news@{DOMAIN}");
    let t = post(
        &http,
        format!("{base}/templates"),
        key,
        json!({ "name": "Welcome", "type": "TRANSACTIONAL",
        "subject": "Welcome {{email}}", "body": "<p>Welcome</p>", "from": from }),
    )
    .await;
    let wf = post(&http, format!("{base}/workflows"), key, json!({ "name": "Welcome", "eventName": "enroll" })).await;
    let wf = wf["id"].as_str().unwrap();
    for step in [
        json!({ "type": "SEND_EMAIL", "name": "welcome", "templateId": t["id"] }),
        json!({ "type": "EXIT", "name": "done" }),
    ] {
        post(&http, format!("{base}/workflows/{wf}/steps"), key, step).await;
    }
    let r =
        http.patch(format!("{base}/workflows/{wf}")).bearer_auth(key).json(&json!({ "enabled": true })).send().await;
    assert!(r.unwrap().status().is_success());
    let campaign = post(
        &http,
        format!("{base}/campaigns"),
        key,
        json!({ "name": "Scale", "subject": "Campaign for {{firstName}}",
        "body": "<p>Hello {{firstName}}</p><p><a href=\"{{unsubscribeUrl}}\">Unsubscribe</a></p>",
        "from": from, "audienceType": "ALL" }),
    )
    .await;
    campaign["data"]["id"].as_str().unwrap().to_string()
}

/// The `i`-th call of the load: (path, idempotency key, body).
fn call(i: u64, s: &Sizes) -> (&'static str, String, Value) {
    if i < s.sends {
        let body = json!({ "to": format!("user{}@example.org", i % s.contacts.max(1)), "from": format!("app@{DOMAIN}"),
            "subject": format!("Send {i}"), "body": "<p>Your receipt</p>" });
        ("/v1/send", format!("send-{i}"), body)
    } else if i < s.sends + s.events {
        let k = i - s.sends;
        let email = format!("user{}@example.org", k % s.contacts.max(1));
        ("/v1/track", format!("visit-{k}"), json!({ "email": email, "event": "visit", "data": { "k": k } }))
    } else {
        let k = i - s.sends - s.events;
        (
            "/v1/track",
            format!("enroll-{k}"),
            json!({ "email": format!("new{k}@example.org"), "event": "enroll", "data": { "k": k } }),
        )
    }
}

struct Outcome {
    ok: bool,
    line: String,
}

async fn run(n: usize, kill: bool, s: &Sizes, surreal_bin: &str) -> Outcome {
    let sink = SmtpSink::start(0).await;
    let mut cluster = start(n, &sink, surreal_bin).await;
    let (project, key) = project(&cluster);
    let st = store(&cluster).await;
    seed(&st, &project, s.contacts).await;
    let campaign = setup(&cluster, &key).await;
    let http = reqwest::Client::new();
    let bases: Arc<Vec<String>> = Arc::new((0..n).map(|i| cluster.base(i)).collect());
    let t0 = Instant::now();
    post(&http, format!("{}/campaigns/{campaign}/send", bases[0]), &key, json!({})).await;
    let total = s.sends + s.events + s.enrolls;
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let retries = Arc::new(AtomicUsize::new(0));
    // Per call: 1 answered 2xx (accepted), 2 answered 409 after an attempt that got no answer (the
    // first attempt may or may not have been done by a process that died), 0 never answered.
    let outcome: Arc<Vec<std::sync::atomic::AtomicU8>> = Arc::new((0..total).map(|_| Default::default()).collect());
    let sizes = Arc::new(Sizes { ..*s });
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (next, done, retries, bases, key, sizes, outcome) =
            (next.clone(), done.clone(), retries.clone(), bases.clone(), key.clone(), sizes.clone(), outcome.clone());
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        clients.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return;
                }
                let (path, idem, body) = call(i, &sizes);
                for attempt in 0..1_200usize {
                    let base = &bases[(i as usize + attempt) % bases.len()];
                    let r = http
                        .post(format!("{base}{path}"))
                        .bearer_auth(&key)
                        .header("Idempotency-Key", &idem)
                        .json(&body)
                        .send()
                        .await;
                    match r {
                        Ok(r) if r.status().is_success() => {
                            outcome[i as usize].store(1, Ordering::Relaxed);
                            break;
                        }
                        Ok(r) if r.status() == 409 && attempt > 0 => {
                            outcome[i as usize].store(2, Ordering::Relaxed);
                            break;
                        }
                        Ok(r) if r.status().is_client_error() && r.status() != 429 => {
                            panic!("{path} refused: {} {}", r.status(), r.text().await.unwrap_or_default())
                        }
                        _ => {
                            retries.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    if kill && n > 1 {
        while done.load(Ordering::Relaxed) < total / 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cluster.kill(1);
        println!(
            "    process 2 killed with SIGKILL after {:.1} s, {} calls answered",
            t0.elapsed().as_secs_f64(),
            done.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let child = cluster.herald(1);
        cluster.procs[1] = Some(child);
        wait_healthy(&http, &cluster.base(1)).await;
    }
    for c in clients {
        c.await.unwrap();
    }
    let calls_secs = t0.elapsed().as_secs_f64();
    let expected = (s.contacts + s.sends + s.enrolls) as usize;
    let deadline = Instant::now() + Duration::from_secs(1200);
    while sink.messages.lock().unwrap().len() < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mail_secs = t0.elapsed().as_secs_f64();
    // Late repeats (an attempt re-run after a lease ran out) would arrive now.
    tokio::time::sleep(Duration::from_secs(if kill { 10 } else { 2 })).await;
    let got = sink.received();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let (mut campaign_to, mut sends, mut welcomes) = (HashSet::new(), HashSet::new(), HashSet::new());
    for m in &got {
        *by_id.entry(header(&m.data, "Message-ID").unwrap_or_default()).or_default() += 1;
        let subject = header(&m.data, "Subject").unwrap_or_default();
        let to = m.to.first().cloned().unwrap_or_default();
        if subject.starts_with("Campaign for") {
            campaign_to.insert(to);
        } else if subject.starts_with("Send ") {
            sends.insert(subject);
        } else if subject.starts_with("Welcome") {
            welcomes.insert(to);
        }
    }
    let repeats: Vec<(&String, &usize)> = by_id.iter().filter(|(_, n)| **n > 1).collect();
    let repeated: usize = repeats.iter().map(|(_, n)| **n - 1).sum();
    // The call indices of the stored events of `name`.
    let stored = |name: &'static str| {
        let st = st.clone();
        let project = project.clone();
        async move {
            let ks: Vec<Value> = st
                .query(
                    "SELECT VALUE data.k FROM event WHERE project = $p AND name = $name",
                    json!({ "p": project, "name": name }),
                )
                .await
                .unwrap()
                .all(0)
                .unwrap();
            ks.into_iter().filter_map(|v| v.as_u64()).collect::<Vec<u64>>()
        }
    };
    let (visits, enrolled) = (stored("visit").await, stored("enroll").await);
    let state = |i: u64| outcome[i as usize].load(Ordering::Relaxed);
    let accepted = |from: u64, n: u64| (0..n).filter(|k| state(from + k) == 1).collect::<Vec<u64>>();
    let uncertain_calls = (0..total).filter(|i| state(*i) == 2).count();
    let unanswered = (0..total).filter(|i| state(*i) == 0).count();
    let twice = |ks: &[u64]| ks.len() - ks.iter().collect::<HashSet<_>>().len();
    let (visits_twice, enrolled_twice) = (twice(&visits), twice(&enrolled));
    let visit_set: HashSet<u64> = visits.iter().copied().collect();
    let enroll_set: HashSet<u64> = enrolled.iter().copied().collect();
    let lost_events = accepted(s.sends, s.events).iter().filter(|k| !visit_set.contains(k)).count()
        + accepted(s.sends + s.events, s.enrolls).iter().filter(|k| !enroll_set.contains(k)).count();
    let allowed = if kill { HANDOVERS } else { 0 };
    let lost_mail = (s.contacts as usize).saturating_sub(campaign_to.len())
        + accepted(0, s.sends).iter().filter(|i| !sends.contains(&format!("Send {i}"))).count()
        + accepted(s.sends + s.events, s.enrolls)
            .iter()
            .filter(|k| !welcomes.contains(&format!("new{k}@example.org")))
            .count();
    let ok = lost_mail == 0
        && lost_events == 0
        && unanswered == 0
        && repeated <= allowed
        && visits_twice + enrolled_twice == 0
        && (kill || uncertain_calls == 0);
    println!(
        "    calls: {} answered 2xx, {uncertain_calls} uncertain (409 after an unanswered attempt), {unanswered} unanswered; retried {}",
        total as usize - uncertain_calls - unanswered,
        retries.load(Ordering::Relaxed)
    );
    println!(
        "    events stored: visit {}/{} ({visits_twice} twice), enroll {}/{} ({enrolled_twice} twice); accepted but not stored {lost_events}",
        visits.len(),
        s.events,
        enrolled.len(),
        s.enrolls
    );
    println!(
        "    emails: {} received, campaign {}/{}, sends {}/{}, workflow {}/{}; accepted but not received {lost_mail}; \
         repeated by Message-ID {repeated} (allowed {allowed})",
        got.len(),
        campaign_to.len(),
        s.contacts,
        sends.len(),
        s.sends,
        welcomes.len(),
        s.enrolls
    );
    for (id, n) in repeats.iter().take(40) {
        println!("      uncertain hand-over: {id} arrived {n} times");
    }
    let line = format!(
        "{n} process{}{}: {total} calls in {calls_secs:.1} s = {:.0} calls/s; {} emails in {mail_secs:.1} s = {:.0} emails/s",
        if n == 1 { "" } else { "es" },
        if kill { " (one killed and restarted)" } else { "" },
        total as f64 / calls_secs,
        got.len(),
        got.len() as f64 / mail_secs
    );
    println!("    {line}{}", if ok { "" } else { "  FAILED" });
    Outcome { ok, line }
}

#[tokio::main]
async fn main() {
    let Ok(surreal_bin) = std::env::var("HERALD_SURREAL_BIN") else {
        eprintln!("scale_out: set HERALD_SURREAL_BIN to SurrealDB's server (scripts/surreal-server prints it)");
        std::process::exit(2);
    };
    let sizes = Sizes {
        contacts: env_or("SCALE_CONTACTS", 20_000),
        sends: env_or("SCALE_SENDS", 5_000),
        events: env_or("SCALE_EVENTS", 5_000),
        enrolls: env_or("SCALE_ENROLLS", 2_000),
    };
    let runs = std::env::var("SCALE_RUNS").unwrap_or_else(|_| "1,2,3,3k".into());
    println!(
        "scale-out: {} contacts in a campaign, {} sends, {} events, {} workflow enrollments; {CLIENTS} clients",
        sizes.contacts, sizes.sends, sizes.events, sizes.enrolls
    );
    let mut lines = Vec::new();
    let mut ok = true;
    for r in runs.split(',').map(str::trim).filter(|r| !r.is_empty()) {
        let kill = r.ends_with('k');
        let n: usize = r.trim_end_matches('k').parse().expect("SCALE_RUNS: numbers of processes, `k` to kill one");
        println!("  run: {n} process(es){}", if kill { ", one killed halfway" } else { "" });
        let o = run(n, kill, &sizes, &surreal_bin).await;
        ok &= o.ok;
        lines.push(o.line);
    }
    println!("summary:");
    for l in &lines {
        println!("  {l}");
    }
    if !ok {
        println!("scale-out: FAILED");
        std::process::exit(1);
    }
    println!("scale-out: every email arrived, none twice beyond the listed hand-overs; every event stored once");
}
