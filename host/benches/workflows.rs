//! Benchmark of workflows (issue 32). Prints numbers; asserts nothing. Needs `smtp-sink` (Debian package
//! postfix) and builds the first-party plugins (`cargo plugins`) on first use.
//!
//! Herald in-process on a fresh embedded on-disk database with the system clock, the WEBHOOK and
//! UPDATE_CONTACT plugins loaded (the webhook may call loopback), SMTP to smtp-sink and a webhook
//! receiver on loopback. One enabled workflow: TRIGGER (event `signup`) → CONDITION (`event.source`
//! equals `bench`) → UPDATE_CONTACT → SEND_EMAIL → DELAY 1 minute → WEBHOOK → EXIT. CONTACTS contacts
//! are tracked with `signup` through `/v1/track` (64 at a time). Prints: executions/s through the
//! instant steps (first track call to the last execution WAITING in its DELAY), p50/p99 from each track
//! response to its execution's first step, the time from the last DELAY's due time until every
//! execution has EXITED, emails handed to the transport and webhook calls received (each must equal
//! CONTACTS), the peak RSS of the process over the run, and the ceiling: the same execution rows with
//! their step runs written in batches of 500 executions straight to the store, with Herald's rate as a
//! share of it. Progress is read from the process's counters of executions written, not by counting rows.
//!
//! Run: `cargo bench -p herald-host --bench workflows` (env: BENCH_CONTACTS, default 20,000;
//! HERALD_DB_CACHE_MB and HERALD_DB_MEMTABLE_MB as for `herald serve`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use herald_host::App;
use herald_host::config::{PluginGrant, Settings};
use herald_host::infra::clock::wall_now_ms;
use herald_host::store::events::{Event, OUTBOX_INSERT, outbox_row};
use herald_host::store::jobs::NewJob;
use salvo::prelude::*;
use serde_json::{Value, json};

mod common;
use common::{build_plugins, env_or, free_port, in_process, peak_rss_mb, percentile_ms, post, repo};

static HOOKS: AtomicUsize = AtomicUsize::new(0);

#[handler]
async fn hook(req: &mut Request, res: &mut Response) {
    let _ = req.payload().await;
    HOOKS.fetch_add(1, Ordering::Relaxed);
    res.render(Text::Json("{}"));
}

/// The rows the first statement of `sql` returns.
async fn rows(st: &herald_host::state::AppState, sql: &str, vars: Value) -> Value {
    st.store.query(sql, vars).await.unwrap().value(0).unwrap()
}

async fn count(st: &herald_host::state::AppState, sql: &str, vars: Value) -> i64 {
    let v = rows(st, sql, vars).await;
    v.get(0).and_then(|r| r.get("n")).and_then(Value::as_i64).unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let n = env_or("BENCH_CONTACTS", 20_000) as usize;
    let sink_port = free_port();
    let mut sink = Command::new("smtp-sink")
        .args(["-u", "nobody", &format!("127.0.0.1:{sink_port}"), "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("smtp-sink (Debian package postfix) must be installed");
    let artifacts = build_plugins();
    let dir = std::env::temp_dir().join(format!("herald-bench-workflows-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    for (file, manifest, name) in [
        ("herald_plugin_webhook", "plugins/webhook/manifest.toml", "webhook"),
        ("herald_plugin_update_contact", "plugins/update-contact/manifest.toml", "update-contact"),
    ] {
        std::fs::copy(repo().join(manifest), plugins.join(format!("{name}.toml"))).unwrap();
        std::fs::copy(artifacts.join(format!("{file}.wasm")), plugins.join(format!("{name}.wasm"))).unwrap();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let receiver = listener.local_addr().unwrap();
    let acceptor = salvo::conn::tcp::TcpAcceptor::try_from(listener).unwrap();
    tokio::spawn(Server::new(acceptor).serve(Router::with_path("hook").post(hook)));

    let mut config = Settings {
        send_rate_per_second: Some(0),
        smtp_url: Some(format!("smtp://127.0.0.1:{sink_port}")),
        plugins_dir: Some(plugins.clone()),
        ..in_process(&dir)
    }
    .resolve()
    .unwrap();
    config.plugin_grants.insert("webhook".into(), PluginGrant { allow_private: true, ..Default::default() });
    let app = App::build(config).await.unwrap();
    let st = Arc::clone(&app.state);
    let (project, keys) = herald_host::services::accounts::create_project_for(&st, "bench", None, None).await.unwrap();
    let pid = project.id.clone();
    st.domains.add(&st.store, &pid, "bench.test", true, st.clock.now_ms()).await.unwrap();
    let running = app.start(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await.unwrap();
    let base = format!("http://{}", running.addr);
    let http = reqwest::Client::new();
    let key = keys.secret.clone();
    let api = |path: &str, body: Value| post(&http, format!("{base}{path}"), &key, body);
    let t = api(
        "/templates",
        json!({ "name": "Welcome", "type": "TRANSACTIONAL", "from": "hello@bench.test",
                "subject": "Welcome {{firstName ?? \"friend\"}}", "body": "<p>Hello {{firstName}}, welcome aboard.</p>" }),
    )
    .await;
    let wf = api("/workflows", json!({ "name": "Onboarding", "eventName": "signup" })).await;
    let wf = wf["id"].as_str().expect("workflow created").to_string();
    for step in [
        json!({ "type": "CONDITION", "name": "from the bench?", "config": { "field": "event.source", "operator": "equals", "value": "bench" } }),
        json!({ "type": "UPDATE_CONTACT", "name": "mark", "config": { "updates": { "onboarded": true } } }),
        json!({ "type": "SEND_EMAIL", "name": "welcome", "templateId": t["id"] }),
        json!({ "type": "DELAY", "name": "a minute", "config": { "amount": 1, "unit": "minutes" } }),
        json!({ "type": "WEBHOOK", "name": "tell the CRM", "config": { "url": format!("http://{receiver}/hook"), "method": "POST",
            "body": { "email": "{{contact.email}}", "onboarded": "{{contact.data.onboarded}}" } } }),
        json!({ "type": "EXIT", "name": "done" }),
    ] {
        let r = api(&format!("/workflows/{wf}/steps"), step).await;
        assert!(r["id"].is_string(), "step created: {r}");
    }
    http.patch(format!("{base}/workflows/{wf}"))
        .bearer_auth(&key)
        .json(&json!({ "enabled": true }))
        .send()
        .await
        .unwrap();
    println!("workflows benchmark: {n} contacts, smtp-sink on 127.0.0.1:{sink_port}, webhook receiver on {receiver}");
    let _ = std::fs::write("/proc/self/clear_refs", "5");

    // The instant part: track every contact's `signup`, 64 requests at a time.
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let responded: Responded = Default::default();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (http, base, key, next, responded) =
            (http.clone(), base.clone(), key.clone(), next.clone(), responded.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                track_signup(&http, &base, &key, &format!("user{i}"), &responded).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let tracked = started.elapsed().as_secs_f64();
    let vars = json!({ "p": pid, "w": wf });
    // Progress is read from the process's counters, not by counting rows: a count over 20,000
    // executions takes a quarter of a second and, every 100 ms, would eat a core of the two.
    let written = herald_host::infra::metrics::executions_written_in;
    let deadline = Instant::now() + Duration::from_secs(1800);
    while written("WAITING") < n as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let instant = started.elapsed().as_secs_f64();
    println!("  tracked {n} events in {tracked:.1} s; every execution in its DELAY after {instant:.1} s");
    println!("  instant steps: {:.0} executions/s", n as f64 / instant);
    // The process's CPU over the instant part (Herald, its database and this benchmark's clients share it).
    let cpu = cpu_seconds() - cpu_before;
    println!("  CPU of the process over the instant part: {cpu:.1} s ({:.2} ms an execution)", 1000.0 * cpu / n as f64);
    while written("EXITED") < n as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let finished_at = wall_now_ms();
    // The peak before the benchmark's own reads below (each materialises 20,000 rows).
    let peak = peak_rss_mb(std::process::id());
    let lat_us = first_step_latencies(&st, &vars, &responded).await;
    println!(
        "  track response to first step: p50 {:.0} ms, p99 {:.0} ms ({} executions)",
        percentile_ms(&lat_us, 0.50),
        percentile_ms(&lat_us, 0.99),
        lat_us.len()
    );

    // The delays: due a minute after each DELAY step started; time from the last due time until all EXITED.
    let runs =
        rows(&st, "SELECT VALUE runs FROM workflow_execution WHERE project = $p AND workflow = $w", vars.clone()).await;
    let delay_started = runs
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rs| rs.as_array().cloned().unwrap_or_default())
        .filter(|r| r["step_type"] == "DELAY")
        .filter_map(|r| r["started_at"].as_i64())
        .max();
    let last_due = delay_started.unwrap_or(0) + 60_000;
    let resumed = (finished_at - last_due) as f64 / 1000.0;
    let exited = count(&st, "SELECT count() AS n FROM workflow_execution WHERE project = $p AND workflow = $w AND status = 'EXITED' GROUP ALL", vars.clone()).await;
    let sent =
        count(&st, "SELECT count() AS n FROM email WHERE project = $p AND status = 'SENT' GROUP ALL", vars.clone())
            .await;
    println!("  all {n} delays resumed and finished {resumed:.1} s after the last came due");
    println!(
        "  executions EXITED in the database: {exited}; emails handed to the transport: {sent}; webhook calls received: {}",
        HOOKS.load(Ordering::Relaxed)
    );
    println!("  peak RSS {peak:.0} MB (the run, before the benchmark's own reads of the results)");

    // The ceiling: the rows an execution's instant part writes, straight to the store in batches of 500,
    // in the three transactions Herald writes them in (tracking, the start, the delivery outcome), with
    // none of the work around them (HTTP, the event stream, the job queue, plugins, rendering, SMTP).
    let t = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        ceiling_chunk(&st.store, chunk, wall_now_ms()).await;
    }
    let ceiling = n as f64 / t.elapsed().as_secs_f64();
    println!(
        "  ceiling (the same rows in batches straight to the store): {ceiling:.0} executions/s; Herald's instant steps at {:.1}% of it",
        100.0 * (n as f64 / instant) / ceiling
    );
    // Sustained load: new contacts tracked at a steady rate (half the instant rate just measured unless
    // BENCH_RATE says otherwise) for BENCH_SUSTAIN_SECONDS, each request sent at its own time whether or
    // not the earlier ones were answered; p50/p99 from each track response to its execution's first step.
    let seconds = env_or("BENCH_SUSTAIN_SECONDS", 30);
    if seconds > 0 {
        let rate = env_or("BENCH_RATE", ((n as f64 / instant) / 2.0).round().max(1.0) as u64).max(1);
        let total = (rate * seconds) as usize;
        let before = written("WAITING");
        let responded: Responded = Default::default();
        let in_flight = Arc::new(tokio::sync::Semaphore::new(256));
        let began = tokio::time::Instant::now();
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..total {
            tokio::time::sleep_until(began + Duration::from_secs_f64(i as f64 / rate as f64)).await;
            let permit = in_flight.clone().acquire_owned().await.unwrap();
            let (http, base, key, responded) = (http.clone(), base.clone(), key.clone(), responded.clone());
            calls.spawn(async move {
                track_signup(&http, &base, &key, &format!("steady{i}"), &responded).await;
                drop(permit);
            });
        }
        while calls.join_next().await.is_some() {}
        let offered = began.elapsed().as_secs_f64();
        let goal = before + total as u64;
        while written("WAITING") < goal && Instant::now() < deadline + Duration::from_secs(600) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let lat_us = first_step_latencies(&st, &vars, &responded).await;
        println!(
            "  sustained {rate} events/s for {offered:.1} s ({total} tracked): track response to first step p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms ({} executions)",
            percentile_ms(&lat_us, 0.50),
            percentile_ms(&lat_us, 0.99),
            percentile_ms(&lat_us, 1.0),
            lat_us.len()
        );
    }
    running.shutdown().await;
    let _ = sink.kill();
    let _ = sink.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

type Responded = Arc<std::sync::Mutex<HashMap<String, i64>>>;

/// Tracks `signup` for `{name}@example.org` and notes when the response came, by the contact's id.
async fn track_signup(http: &reqwest::Client, base: &str, key: &str, name: &str, responded: &Responded) {
    let body = json!({ "email": format!("{name}@example.org"), "event": "signup",
        "data": { "source": "bench", "firstName": name } });
    let r: Value =
        http.post(format!("{base}/v1/track")).bearer_auth(key).json(&body).send().await.unwrap().json().await.unwrap();
    let contact = r["data"]["contact"].as_str().unwrap_or_default().to_string();
    responded.lock().unwrap().insert(contact, wall_now_ms());
}

/// Sorted microseconds from each track response in `responded` to its contact's execution's first step
/// (executions of other contacts are left out).
async fn first_step_latencies(st: &herald_host::state::AppState, vars: &Value, responded: &Responded) -> Vec<u64> {
    let responded = responded.lock().unwrap().clone();
    let executions = rows(
        st,
        "SELECT contact, created_at FROM workflow_execution WHERE project = $p AND workflow = $w",
        vars.clone(),
    )
    .await;
    let mut lat_us: Vec<u64> = executions
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| {
            let at = responded.get(r["contact"].as_str()?)?;
            Some(((r["created_at"].as_i64()? - at).max(0) * 1000) as u64)
        })
        .collect();
    lat_us.sort_unstable();
    lat_us
}

/// User and system CPU time of this process so far, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces) closed by ')': utime and stime are the
    // 12th and 13th of them, in clock ticks (100 a second on Linux).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<f64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

/// Writes the rows of `chunk`'s executions as Herald's instant part does, one transaction per stage:
/// tracking (the contact, the `signup` event, an outbox row), the start (the execution with its step runs,
/// its re-entry entry, the contact's change, the email and its body, `workflow.started`, an outbox row,
/// a delivery job per 32 emails, the DELAY's timer job) and the delivery outcome (the email SENT,
/// `email.sent`, an outbox row).
async fn ceiling_chunk(store: &herald_host::store::Store, chunk: &[usize], now: i64) {
    let p = "ceiling";
    let cid = |i: usize| format!("ceil-c{i}");
    let contacts: Vec<Value> = chunk
        .iter()
        .map(|&i| {
            json!({ "id": cid(i), "project": p, "email": format!("ceil{i}@example.org"), "subscribed": true,
            "data": { "firstName": format!("User{i}") }, "version": 1, "created_at": now, "updated_at": now })
        })
        .collect();
    // Event rows and the outbox row listing them, as Herald's writes store them.
    let events = |name: &str, data: &dyn Fn(usize) -> Value| -> (Vec<Value>, Value) {
        let source = if name == "signup" { "api" } else { "system" };
        let events: Vec<Event> = chunk
            .iter()
            .map(|&i| Event::new(p, &cid(i), name, data(i).as_object().cloned().unwrap_or_default(), source, now))
            .collect();
        (events.iter().map(Event::row).collect(), outbox_row(events.iter().map(|e| e.id.as_str())))
    };
    let (signups, outbox) = events("signup", &|i| json!({ "source": "bench", "firstName": format!("User{i}") }));
    store
        .query(
            &format!(
                "BEGIN TRANSACTION; INSERT INTO contact $c RETURN NONE; INSERT INTO event $e RETURN NONE;
                 {OUTBOX_INSERT} COMMIT TRANSACTION;"
            ),
            json!({ "c": contacts, "e": signups, "outbox": outbox }),
        )
        .await
        .unwrap();

    let execs: Vec<Value> = chunk
        .iter()
        .map(|&i| {
            let runs = ["TRIGGER", "CONDITION", "UPDATE_CONTACT", "SEND_EMAIL", "DELAY"].map(|k| {
                json!({ "id": format!("ceil-{i}-{k}"), "step": k, "step_type": k,
                    "status": if k == "DELAY" { "WAITING" } else { "COMPLETED" }, "output": "{}",
                    "started_at": now, "completed_at": now })
            });
            json!({ "id": format!("ceil-{i}"), "project": p, "workflow": "w", "contact": cid(i), "status": "WAITING",
                "step": "ceil-delay", "timer": format!("ceil-t{i}"), "trigger_event": format!("ceil-signup-{i}"),
                "context": { "source": "bench" },
                "created_at": now, "updated_at": now, "runs": runs })
        })
        .collect();
    let entries: Vec<Value> = chunk
        .iter()
        .map(|&i| json!({ "id": ["w", cid(i)], "project": p, "active": true, "updated_at": now }))
        .collect();
    let changed: Vec<Value> = chunk
        .iter()
        .map(|&i| json!({ "id": cid(i), "project": p, "email": format!("ceil{i}@example.org"), "subscribed": true,
            "data": { "firstName": format!("User{i}"), "onboarded": true }, "version": 1, "created_at": now, "updated_at": now }))
        .collect();
    let emails: Vec<Value> = chunk
        .iter()
        .map(|&i| json!({ "id": format!("ceil-m{i}"), "project": p, "contact": cid(i), "recipient": format!("ceil{i}@example.org"),
            "from": "hello@bench.test", "subject": format!("Welcome User{i}"), "kind": "TRANSACTIONAL", "template": "t",
            "message_id": format!("<ceil-m{i}@bench.test>"), "status": "PENDING", "created_at": now, "updated_at": now }))
        .collect();
    let bodies: Vec<Value> = chunk
        .iter()
        .map(|&i| {
            json!({ "id": format!("ceil-m{i}"), "html": format!("<p>Hello User{i}, welcome aboard.</p>"),
            "text": format!("Hello User{i}, welcome aboard."), "headers": "{}", "attachments": "[]" })
        })
        .collect();
    let (started, started_outbox) = events("workflow.started", &|_| json!({ "workflowId": "w" }));
    // The jobs as Herald writes them (`NewJob::doc`): a delivery job per 32 emails, the chunk's timer job.
    let mut jobs: Vec<Value> = chunk
        .chunks(32)
        .map(|c| {
            let ids: Vec<String> = c.iter().map(|i| format!("ceil-m{i}")).collect();
            NewJob::new("email.deliver", json!({ "project": p, "emails": ids }), now).doc(now)
        })
        .collect();
    let timers: Vec<Value> =
        chunk.iter().map(|&i| json!({ "execution": format!("ceil-{i}"), "token": format!("ceil-t{i}") })).collect();
    jobs.push(NewJob::new("workflow.timer", json!({ "project": p, "timers": timers }), now + 60_000).doc(now));
    store
        .query(
            &format!("BEGIN TRANSACTION; INSERT INTO workflow_entry $entries RETURN NONE; INSERT INTO workflow_execution $execs RETURN NONE;
             INSERT INTO contact $changed ON DUPLICATE KEY UPDATE data = $input.data, version = $input.version + 1,
                updated_at = $input.updated_at RETURN NONE;
             INSERT INTO email $emails RETURN NONE; INSERT INTO email_body $bodies RETURN NONE;
             INSERT INTO job $jobs RETURN NONE; INSERT INTO event $started RETURN NONE; {OUTBOX_INSERT} COMMIT TRANSACTION;"),
            json!({ "entries": entries, "execs": execs, "changed": changed, "emails": emails, "bodies": bodies,
                "jobs": jobs, "started": started, "outbox": started_outbox }),
        )
        .await
        .unwrap();

    let sent: Vec<String> = chunk.iter().map(|i| format!("ceil-m{i}")).collect();
    let (sent_events, sent_outbox) = events("email.sent", &|i| json!({ "emailId": format!("ceil-m{i}") }));
    store
        .query(
            &format!("BEGIN TRANSACTION;
             UPDATE array::map($sent, |$i| type::record('email', $i)) SET sent_at = $now, status = 'SENT', updated_at = $now RETURN NONE;
             INSERT INTO event $events RETURN NONE; {OUTBOX_INSERT} COMMIT TRANSACTION;"),
            json!({ "sent": sent, "events": sent_events, "now": now, "outbox": sent_outbox }),
        )
        .await
        .unwrap();
}
