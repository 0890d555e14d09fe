//! Benchmark of the dashboard (docs/dashboard.md): each page's weight and server time on a project of a
//! million contacts. Prints numbers; asserts nothing.
//!
//! 1. Herald in-process on a fresh embedded on-disk database (SurrealKV in a temp dir); one project of
//!    CONTACTS contacts with varied data and events (`common/seed.rs`, the segments benchmark's data),
//!    their first counts taken (the totals Herald keeps from then on, `services::tallies`),
//!    its owner, a trusted domain, a template, a dynamic segment (`plan = pro AND score > 500 AND purchase
//!    within 30 days`), a draft campaign to that segment and a workflow.
//! 2. For each page of the dashboard, a fresh headless Chromium (an empty cache: a first load) holding
//!    the owner's session cookie opens the page and waits until it has settled (no API request in flight
//!    for a second). The page's Resource Timing entries give:
//!    - weight: the bytes transferred for the document and everything it loaded, headers included;
//!    - server time: per request, from the request leaving the browser to the first byte of its answer
//!      (on loopback, the server's own time): the page's sum over its requests (they partly overlap, so
//!      the sum is an upper bound of what a person waits for) and its slowest request.
//!
//!    The page is then reloaded ROUNDS times in the same browser (assets revalidate: 304) and the
//!    median and the slowest of those sums are printed.
//! 3. The requests a person's edits make, timed alone ROUNDS times: the live counts of a condition and
//!    of a campaign's audience, and a contact search.
//!
//! Needs Debian's `chromium` and `chromium-driver` (what the browser tests use).
//! Run: `cargo bench -p herald-host --bench dashboard` (env: BENCH_CONTACTS, default 1,000,000;
//! BENCH_ROUNDS, default 5; BENCH_WRITERS, default 2; BENCH_BATCH contacts per transaction, default 2,000).

#![allow(clippy::unwrap_used, clippy::expect_used)]

/// The server binary's allocator (`host/src/main.rs`), so the in-process numbers are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_host::App;
use serde_json::{Value, json};

mod common;
#[allow(dead_code)]
#[path = "../../tests/browser/driver.rs"]
mod driver;

use common::{env_or, in_process, peak_rss_mb};
use driver::Browser;

const OWNER: &str = "owner@bench.example";
const PASSWORD: &str = "a long bench password";

/// One request of a page, from its Resource Timing entry.
struct Hit {
    name: String,
    kind: String,
    transfer: f64,
    server_ms: f64,
}

const ENTRIES: &str = "[...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')]
    .map((e) => ({ name: e.name, kind: e.initiatorType, transfer: e.transferSize || 0,
                   server: e.requestStart > 0 ? Math.max(0, e.responseStart - e.requestStart) : 0 }))";

async fn entries(b: &Browser) -> Vec<Hit> {
    let v = b.js(ENTRIES).await;
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|e| Hit {
                    name: e["name"].as_str().unwrap_or_default().trim_start_matches(&b.base).to_string(),
                    kind: e["kind"].as_str().unwrap_or_default().to_string(),
                    transfer: e["transfer"].as_f64().unwrap_or(0.0),
                    server_ms: e["server"].as_f64().unwrap_or(0.0),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until the page is loaded and no API request has been in flight for a second (the dashboard
/// keeps the count on `<html data-pending>`); a second also covers the live counts' 400 ms debounce.
async fn settle(b: &Browser) -> bool {
    let started = Instant::now();
    let mut quiet: Option<Instant> = None;
    let mut last = -1;
    while started.elapsed() < Duration::from_secs(120) {
        let v = b
            .js("[document.readyState, document.documentElement.dataset.pending || '0', \
                 performance.getEntriesByType('resource').length]")
            .await;
        let idle = v[0] == "complete" && v[1] == "0";
        let n = v[2].as_i64().unwrap_or(0);
        if idle && n == last {
            if quiet.get_or_insert_with(Instant::now).elapsed() >= Duration::from_secs(1) {
                return true;
            }
        } else {
            quiet = None;
        }
        last = n;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn api_of(hits: &[Hit]) -> impl Iterator<Item = &Hit> {
    hits.iter().filter(|h| h.kind == "fetch")
}

fn sum_ms(hits: &[Hit]) -> f64 {
    hits.iter().map(|h| h.server_ms).sum()
}

fn slowest(hits: &[Hit]) -> (f64, String) {
    hits.iter().map(|h| (h.server_ms, h.name.clone())).fold((0.0, String::new()), |a, b| if b.0 > a.0 { b } else { a })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// The id in an API answer (`{id}` or `{data: {id}}`).
fn id_of(v: &Value) -> String {
    v["data"]["id"].as_str().or_else(|| v["id"].as_str()).unwrap_or_else(|| panic!("no id in {v}")).to_string()
}

#[tokio::main]
async fn main() {
    let total = env_or("BENCH_CONTACTS", 1_000_000);
    let rounds = env_or("BENCH_ROUNDS", 5).max(1) as usize;
    let writers = env_or("BENCH_WRITERS", 2).max(1);
    let batch = env_or("BENCH_BATCH", 2_000).max(1);
    let dir = std::env::temp_dir().join(format!("herald-bench-dashboard-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = in_process(&dir).resolve().unwrap();
    let app = App::build(config).await.unwrap();
    let st = Arc::clone(&app.state);
    let (project, keys) =
        herald_host::services::accounts::create_project_for(&st, "Bench shop", Some(OWNER), Some(PASSWORD))
            .await
            .unwrap();
    st.domains.add(&st.store, &project.id, "bench.example", true, st.clock.now_ms()).await.unwrap();

    println!("dashboard benchmark: {total} contacts, SurrealKV on disk, each page a first load in headless Chromium");
    let t = Instant::now();
    let events = common::seed::seed(&st.store, &project.id, total, writers, batch, st.clock.now_ms()).await;
    println!("  seeded {total} contacts and {events} events in {:.1} s", t.elapsed().as_secs_f64());
    // The counts a running Herald keeps (docs/behaviour.md#contacts-and-data), taken once here as the
    // first look at the contacts or events would take them, and timed on their own.
    let t = Instant::now();
    let tally = |scope| herald_host::services::tallies::count(&st, &project.id, scope);
    let contacts_n = tally(herald_host::store::tallies::Scope::Contacts).await.unwrap();
    let events_n = tally(herald_host::store::tallies::Scope::Events).await.unwrap();
    let names = herald_host::services::events::history::names(&st, &project.id).await.unwrap();
    println!(
        "  first counts (contacts {contacts_n}, events {events_n}, {} event names) in {:.1} s",
        names.len(),
        t.elapsed().as_secs_f64()
    );

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = app.start(listener).await.unwrap();
    let base = format!("http://{}", running.addr);
    let http = reqwest::Client::new();
    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let req = http.request(method, format!("{base}{path}")).bearer_auth(&keys.secret);
        let req = match body {
            Some(b) => req.json(&b),
            None => req,
        };
        let path = path.to_string();
        async move {
            let r = req.send().await.unwrap();
            let status = r.status();
            let v: Value = r.json().await.unwrap_or(Value::Null);
            assert!(status.is_success(), "{path}: {status} {v}");
            v
        }
    };
    let post = |path: &'static str, body: Value| call(reqwest::Method::POST, path, Some(body));

    // What the pages show besides the contacts.
    let condition = json!({ "logic": "AND", "groups": [{ "filters": [
        { "field": "data.plan", "operator": "equals", "value": "pro" },
        { "field": "data.score", "operator": "greaterThan", "value": 500 },
        { "field": "event.purchase", "operator": "triggeredWithin", "value": 30, "unit": "days" },
    ]}]});
    let template = id_of(
        &post(
            "/templates",
            json!({ "name": "Welcome", "type": "TRANSACTIONAL", "subject": "Welcome, {{firstName ?? \"friend\"}}",
                "body": "<p>Hello {{firstName ?? \"there\"}}</p>", "from": "hello@bench.example" }),
        )
        .await,
    );
    let t = Instant::now();
    let segment = id_of(&post("/segments", json!({ "name": "Recent pro buyers", "condition": condition })).await);
    println!("  created the segment (its first count) in {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    let campaign = id_of(
        &post(
            "/campaigns",
            json!({ "name": "Spring offer", "subject": "Spring", "body": "<p>Our spring offer</p>",
                "from": "news@bench.example", "audienceType": "SEGMENT", "segmentId": segment }),
        )
        .await,
    );
    let workflow = id_of(&post("/workflows", json!({ "name": "Welcome series", "eventName": "signup" })).await);
    let first = call(reqwest::Method::GET, "/contacts?limit=1", None).await;
    let contact = first["data"][0]["id"].as_str().expect("a contact").to_string();

    // The owner's session, handed to each fresh browser as its cookie.
    let login = http
        .post(format!("{base}/auth/login"))
        .json(&json!({ "email": OWNER, "password": PASSWORD }))
        .send()
        .await
        .unwrap();
    let token = login
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("herald_token=").map(|rest| rest.split(';').next().unwrap_or("").to_string()))
        .expect("a session cookie");

    let pages = [
        ("overview", "/app".to_string()),
        ("contacts", "/app/contacts".to_string()),
        ("a contact", format!("/app/contacts/{contact}")),
        ("import", "/app/contacts/import".to_string()),
        ("templates", "/app/templates".to_string()),
        ("a template", format!("/app/templates/{template}")),
        ("segments", "/app/segments".to_string()),
        ("a segment", format!("/app/segments/{segment}")),
        ("campaigns", "/app/campaigns".to_string()),
        ("a campaign", format!("/app/campaigns/{campaign}")),
        ("workflows", "/app/workflows".to_string()),
        ("a workflow", format!("/app/workflows/{workflow}")),
        ("domains", "/app/domains".to_string()),
        ("events", "/app/events".to_string()),
        ("activity", "/app/activity".to_string()),
        ("analytics", "/app/analytics".to_string()),
        ("plugins", "/app/plugins".to_string()),
        ("API keys", "/app/keys".to_string()),
        ("settings", "/app/settings".to_string()),
        ("log in", "/account/login".to_string()),
    ];
    println!(
        "  {:<11} {:>9} {:>5} {:>4} {:>22} {:>24}  slowest request (first load)",
        "page",
        "weight",
        "reqs",
        "api",
        "server ms, first load",
        &format!("median of {rounds} reloads")
    );
    println!(
        "  {:<11} {:>9} {:>5} {:>4} {:>11} {:>10} {:>12} {:>11}",
        "", "KB", "", "", "sum", "slowest", "sum", "slowest"
    );
    let mut worst: (f64, String) = (0.0, String::new());
    for (label, path) in &pages {
        let b = Browser::start(&base).await;
        if !label.starts_with("log in") {
            // The cookie is set from a small document of the same origin, so the page's assets are not
            // cached before its first load (WebDriver's add-cookie refuses an IP-address host).
            b.goto("/favicon.svg").await;
            let set = format!(
                "(document.cookie = {}, document.cookie.includes('herald_token='))",
                json!(format!("herald_token={token}; path=/; SameSite=Lax"))
            );
            assert_eq!(b.js(&set).await, json!(true), "the session cookie is set");
        }
        b.goto(path).await;
        if !settle(&b).await {
            eprintln!("  {label}: did not settle within 2 minutes");
        }
        let hits = entries(&b).await;
        let weight = hits.iter().map(|h| h.transfer).sum::<f64>() / 1024.0;
        let api = api_of(&hits).count();
        let (first_slow, first_slow_name) = slowest(&hits);
        let (mut sums, mut slows) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            b.client.refresh().await.unwrap();
            settle(&b).await;
            let again = entries(&b).await;
            sums.push(sum_ms(&again));
            slows.push(slowest(&again).0);
        }
        let slow_median = median(slows);
        if slow_median > worst.0 {
            worst = (slow_median, label.to_string());
        }
        println!(
            "  {:<11} {:>9.1} {:>5} {:>4} {:>11.1} {:>10.1} {:>12.1} {:>11.1}  {first_slow_name}",
            label,
            weight,
            hits.len(),
            api,
            sum_ms(&hits),
            first_slow,
            median(sums),
            slow_median,
        );
        b.close().await;
    }
    println!(
        "  slowest page request (median over reloads): {:.1} ms on {}   (target: every page < 200 ms)",
        worst.0, worst.1
    );

    // What editing asks of the server.
    let timed = |label: &'static str, method: reqwest::Method, path: String, body: Option<Value>| {
        let call = &call;
        async move {
            let mut ms = Vec::new();
            for _ in 0..rounds {
                let t = Instant::now();
                call(method.clone(), &path, body.clone()).await;
                ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let max = ms.iter().cloned().fold(0.0, f64::max);
            println!("  {label:<44} median {:>7.1} ms, slowest {max:>7.1} ms", median(ms));
        }
    };
    println!("  requests of edits, {rounds} times each:");
    timed(
        "live count of the segment's condition",
        reqwest::Method::POST,
        "/segments/count".into(),
        Some(json!({ "condition": condition })),
    )
    .await;
    timed(
        "live count of an audience: every subscribed",
        reqwest::Method::POST,
        "/campaigns/audience-count".into(),
        Some(json!({ "audienceType": "ALL" })),
    )
    .await;
    timed(
        "live count of an audience: the segment",
        reqwest::Method::POST,
        "/campaigns/audience-count".into(),
        Some(json!({ "audienceType": "SEGMENT", "segmentId": segment })),
    )
    .await;
    timed(
        "contact search (first page and total)",
        reqwest::Method::GET,
        "/contacts?limit=25&search=user4242".into(),
        None,
    )
    .await;
    println!("  peak RSS of the process (seeding, server, pages): {:.0} MB", peak_rss_mb(std::process::id()));

    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
