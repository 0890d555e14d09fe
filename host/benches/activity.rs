//! Benchmark of the activity feed and analytics (issue 33). Prints numbers; asserts nothing.
//!
//! Herald built in-process on a fresh embedded on-disk database. CONTACTS contacts and EVENTS events
//! spread over the last 30 days are written through the store in batches of 1,000 (each batch with its
//! outbox row, as a request would): 50% a tracked `page_view`, 25% `email.sent`, 12% `email.open`, 5%
//! `email.click`, 3% `email.delivery`, 3% `email.bounce`, 2% `contact.unsubscribed`; email events name one
//! of 5 campaigns. The run waits until the event dispatch has handed out and counted every event (the
//! counting rate is printed), then times each read ROUNDS times and prints the median and the slowest:
//! feed pages (the first, one 50 pages deep, a type filter, a contact's, an old campaign's), the
//! per-type counts, the live count, and every analytics endpoint.
//!
//! Run: `cargo bench -p herald-host --bench activity` (env: BENCH_EVENTS, default 300,000;
//! BENCH_CONTACTS, default 10,000; BENCH_ROUNDS, default 20).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_host::App;
use herald_host::store::contacts::Contact;
use herald_host::store::events::Event;
use serde_json::{Map, Value, json};

mod common;
use common::{env_or, in_process, peak_rss_mb, percentile_ms};

const DAY: i64 = 86_400_000;

#[tokio::main]
async fn main() {
    let events = env_or("BENCH_EVENTS", 300_000) as usize;
    let contacts = env_or("BENCH_CONTACTS", 10_000) as usize;
    let rounds = env_or("BENCH_ROUNDS", 20) as usize;
    let dir = std::env::temp_dir().join(format!("herald-bench-activity-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = in_process(&dir).resolve().unwrap();
    let app = App::build(config).await.unwrap();
    let st = Arc::clone(&app.state);
    let (project, keys) = herald_host::services::accounts::create_project_for(&st, "bench", None, None).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = app.start(listener).await.unwrap();
    let base = format!("http://{}", running.addr);
    let http = reqwest::Client::new();
    let get = |path: String| {
        let (http, base, key) = (http.clone(), base.clone(), keys.secret.clone());
        async move {
            let r = http.get(format!("{base}{path}")).bearer_auth(key).send().await.unwrap();
            let status = r.status().as_u16();
            let v: Value = r.json().await.unwrap_or(Value::Null);
            assert_eq!(status, 200, "{path}: {v}");
            v
        }
    };
    st.domains.add(&st.store, &project.id, "example.com", true, st.clock.now_ms()).await.unwrap();
    let mut campaigns = Vec::new();
    for i in 0..5 {
        let r = http
            .post(format!("{base}/campaigns"))
            .bearer_auth(&keys.secret)
            .json(&json!({ "name": format!("Campaign {i}"), "subject": "s", "body": "<p>b</p>",
                "from": "news@example.com", "audienceType": "ALL" }))
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        campaigns.push(v["data"]["id"].as_str().unwrap_or_default().to_string());
    }

    println!("activity benchmark: {events} events of {contacts} contacts over 30 days");
    let now = st.clock.now_ms();
    let people: Vec<Contact> = (0..contacts)
        .map(|k| Contact {
            id: uuid::Uuid::now_v7().to_string(),
            email: format!("u{k}@example.org"),
            subscribed: true,
            data: Map::new(),
            version: 1,
            created_at: now - 31 * DAY,
            updated_at: now - 31 * DAY,
        })
        .collect();
    for chunk in people.chunks(1000) {
        st.store.write_contact_batch(&project.id, chunk, &[], &[], &[]).await.unwrap();
    }
    let t = Instant::now();
    let per = 1000;
    for b in 0..events.div_ceil(per) {
        let batch: Vec<Event> = (b * per..((b + 1) * per).min(events))
            .map(|k| {
                let (name, email) = match k % 100 {
                    0..50 => ("page_view", false),
                    50..75 => ("email.sent", true),
                    75..87 => ("email.open", true),
                    87..92 => ("email.click", true),
                    92..95 => ("email.delivery", true),
                    95..98 => ("email.bounce", true),
                    _ => ("contact.unsubscribed", false),
                };
                let mut data = Map::new();
                if email {
                    data.insert("emailId".into(), format!("e{k}").into());
                    data.insert("campaignId".into(), campaigns[k % 5].clone().into());
                    if k % 3 == 0 {
                        data.insert("first".into(), true.into());
                    }
                }
                // Oldest first, evenly over 30 days.
                let at = now - 30 * DAY + (k as i64 * 30 * DAY) / events as i64;
                Event::new(&project.id, &people[k % contacts].id, name, data, "api", at)
            })
            .collect();
        st.store.write_contact_batch(&project.id, &[], &[], &[], &batch).await.unwrap();
    }
    let written = t.elapsed().as_secs_f64();
    let t = Instant::now();
    loop {
        if st.store.undispatched_events(10).await.unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let counted = t.elapsed().as_secs_f64();
    println!(
        "  written in {written:.1} s; dispatched and counted {:.1} s after ({:.0} events/s behind the writes)",
        counted,
        events as f64 / (written + counted)
    );

    let deep = {
        let mut cursor = String::new();
        for _ in 0..50 {
            let v = get(format!("/activity?limit=50&cursor={cursor}")).await;
            cursor = v["cursor"].as_str().unwrap_or_default().to_string();
        }
        cursor
    };
    // A contact whose every event is an email.sent (k % 100 == 60).
    let contact = &people[60].id;
    let old = herald_host::infra::clock::rfc3339(now - 29 * DAY);
    let from7 = herald_host::infra::clock::rfc3339(now - 7 * DAY);
    let cases: Vec<(&str, String)> = vec![
        ("feed, first page of 50", "/activity?limit=50".into()),
        ("feed, page 51 (cursor)", format!("/activity?limit=50&cursor={deep}")),
        ("feed, type=email.clicked", "/activity?limit=50&type=email.clicked".into()),
        ("feed, one contact", format!("/activity?limit=50&contactId={contact}")),
        ("feed, one campaign", format!("/activity?limit=50&campaignId={}", campaigns[3])),
        ("feed, one campaign 29 days ago", format!("/activity?limit=50&campaignId={}&to={old}", campaigns[3])),
        ("activity/stats (30 days)", "/activity/stats".into()),
        ("activity/recent-count (7 days)", format!("/activity/recent-count?since={from7}")),
        ("activity/types", "/activity/types".into()),
        ("analytics/timeseries hour, 7 days", format!("/analytics/timeseries?interval=hour&from={from7}")),
        (
            "analytics/timeseries day, 366 days",
            format!("/analytics/timeseries?from={}", herald_host::infra::clock::rfc3339(now - 365 * DAY)),
        ),
        ("analytics/top-campaigns", "/analytics/top-campaigns?metric=openRate".into()),
        ("analytics/campaign-stats", format!("/analytics/campaign-stats?campaignId={}", campaigns[0])),
        ("analytics/top-events (30 days)", "/analytics/top-events".into()),
    ];
    for (label, path) in cases {
        let mut us = Vec::with_capacity(rounds);
        let mut items = 0;
        for _ in 0..rounds {
            let t = Instant::now();
            let v = get(path.clone()).await;
            us.push(t.elapsed().as_micros() as u64);
            items = v["data"].as_array().map_or(0, Vec::len);
        }
        us.sort_unstable();
        let shown = if path.starts_with("/activity?") { format!(" ({items} items)") } else { String::new() };
        println!(
            "  {label:<40} median {:>7.1} ms, slowest {:>7.1} ms{shown}",
            percentile_ms(&us, 0.5),
            percentile_ms(&us, 1.0)
        );
    }
    let sent = get(format!("/analytics/campaign-stats?campaignId={}", campaigns[0])).await["sent"].clone();
    println!(
        "  campaign 0 sent: {sent} (expected {})",
        (0..events).filter(|k| (50..75).contains(&(k % 100)) && k % 5 == 0).count()
    );
    println!("  peak RSS {:.0} MB", peak_rss_mb(std::process::id()));
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
