//! Benchmark of the delivery ledger's rounds (issue 30). Prints numbers; asserts nothing.
//!
//! What one ledger round costs the database, apart from everything else a campaign does: a fresh
//! embedded on-disk database per case (SurrealKV in a temp dir, migrated), EMAILS campaign emails
//! written in batches of 500 and two seconds for their flushes to settle, then `Store::delivery_round`
//! called in series the way a busy campaign calls it: each round claims the next SIZE emails and writes
//! the SENT outcomes and `email.sent` events of the SIZE claimed by the round before. Prints the
//! process's CPU time (user + system, from `/proc/self/stat`) per round and per email, and the wall
//! time, for each round size; then, at one size, the same with only the claims, only the outcomes and
//! only the events, so the share of each part shows. The round's fixed cost is what a small round pays
//! per email on top of a large one's.
//!
//! Run: `cargo bench -p herald-host --bench ledger` (env: BENCH_EMAILS per case, default 8,000;
//! BENCH_SIZES, default `1,8,32,128`; BENCH_PART_SIZE for the breakdown, default 32; the HERALD_DB_*
//! caps as for `herald serve`, see `common::in_process`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

/// The server binary's allocator (`host/src/main.rs`), so the numbers are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::Instant;

use herald_host::domain::status::EmailStatus;
use herald_host::store::Store;
use herald_host::store::emails::{DeliveryOutcome, EmailRow};
use herald_host::store::events::Event;

mod common;
use common::{env_or, in_process};

const PROJECT: &str = "bench-project";
const CAMPAIGN: &str = "bench-campaign";
const NOW: i64 = 1_800_000_000_000;

/// The process's CPU time so far (user + system), in seconds; 0 where `/proc` is missing.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the command name (which may hold spaces): state is the 1st, utime the 12th, stime the 13th.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Which parts of a round each case writes.
#[derive(Clone, Copy)]
struct Parts {
    claims: bool,
    outcomes: bool,
    events: bool,
}

fn email(id: &str) -> EmailRow {
    EmailRow {
        id: id.to_string(),
        project: PROJECT.into(),
        contact: format!("contact-{id}"),
        recipient: format!("{id}@example.org"),
        recipient_name: None,
        from: "news@example.org".into(),
        from_name: Some("News".into()),
        reply_to: None,
        subject: "This week".into(),
        html: "<p>Hello</p>".repeat(80),
        text: "Hello ".repeat(80),
        headers: "[]".into(),
        attachments: "[]".into(),
        kind: "MARKETING".into(),
        template: Some("bench-template".into()),
        campaign: Some(CAMPAIGN.into()),
        message_id: format!("<{id}@example.org>"),
        status: EmailStatus::Pending,
        error: None,
        sent_at: None,
        created_at: NOW,
        updated_at: NOW,
        depth: None,
        attempts: None,
        next_attempt_at: None,
        resent_at: None,
    }
}

/// Writes `n` PENDING campaign emails (in the campaign writer's batches of 500) and returns their ids.
async fn seed(store: &Store, n: usize) -> Vec<String> {
    let ids: Vec<String> = (0..n).map(|_| uuid::Uuid::now_v7().to_string()).collect();
    for chunk in ids.chunks(500) {
        let rows: Vec<EmailRow> = chunk.iter().map(|id| email(id)).collect();
        store.create_emails(&rows, "email.deliver", 10, 3, None).await.unwrap();
    }
    ids
}

/// Runs the rounds of one case: (CPU seconds, wall seconds, rounds).
async fn rounds(store: &Store, ids: &[String], size: usize, parts: Parts) -> (f64, f64, usize) {
    let (cpu, wall) = (cpu_seconds(), Instant::now());
    let mut previous: &[String] = &[];
    let mut count = 0;
    for chunk in ids.chunks(size).chain(std::iter::once(&[][..])) {
        let claims: Vec<(String, String)> = match parts.claims {
            true => chunk.iter().map(|id| (id.clone(), CAMPAIGN.to_string())).collect(),
            false => vec![],
        };
        let outcomes: Vec<DeliveryOutcome> = match parts.outcomes {
            true => previous
                .iter()
                .map(|id| DeliveryOutcome::new(id, Some(CAMPAIGN.into()), EmailStatus::Sent, None))
                .collect(),
            false => vec![],
        };
        let events: Vec<Event> = match parts.events {
            true => previous
                .iter()
                .map(|id| {
                    Event::new(PROJECT, &format!("contact-{id}"), "email.sent", Default::default(), "system", NOW)
                })
                .collect(),
            false => vec![],
        };
        if !(claims.is_empty() && outcomes.is_empty() && events.is_empty()) {
            let claimed = store.delivery_round(&claims, &outcomes, &events, NOW).await.unwrap();
            assert_eq!(claimed.len(), claims.len(), "every claim answered");
            count += 1;
        }
        previous = chunk;
    }
    (cpu_seconds() - cpu, wall.elapsed().as_secs_f64(), count)
}

#[tokio::main]
async fn main() {
    let emails = env_or("BENCH_EMAILS", 8_000) as usize;
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .unwrap_or_else(|_| "1,8,32,128".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&s| s > 0)
        .collect();
    let part_size = env_or("BENCH_PART_SIZE", 32).max(1) as usize;

    println!("ledger benchmark: {emails} campaign emails per case, rounds written one after another");
    let all = Parts { claims: true, outcomes: true, events: true };
    let mut cases: Vec<(String, usize, Parts)> =
        sizes.iter().map(|&s| (format!("claims + outcomes + events, {s} per round"), s, all)).collect();
    let only = |claims, outcomes, events| Parts { claims, outcomes, events };
    cases.push((format!("claims only, {part_size} per round"), part_size, only(true, false, false)));
    cases.push((format!("outcomes only, {part_size} per round"), part_size, only(false, true, false)));
    cases.push((format!("events only, {part_size} per round"), part_size, only(false, false, true)));
    for (k, (name, size, parts)) in cases.into_iter().enumerate() {
        let dir = std::env::temp_dir().join(format!("herald-bench-ledger-{}-{k}", std::process::id()));
        let store = open(&dir).await;
        let ids = seed(&store, emails).await;
        // The seeding's memtable flushes and compactions are not the rounds' work.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        let (cpu, wall, count) = rounds(&store, &ids, size, parts).await;
        println!(
            "  {name}: {count} rounds, CPU {cpu:.2} s = {:.0} µs a round, {:.0} µs an email; wall {wall:.2} s",
            cpu * 1e6 / count.max(1) as f64,
            cpu * 1e6 / emails.max(1) as f64,
        );
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// A fresh migrated database under `dir` with the campaign's gate open.
async fn open(dir: &std::path::Path) -> Store {
    // The embedded database's caps from the environment, as `herald serve` and the other benchmarks read them.
    let config = in_process(dir).resolve().expect("benchmark settings");
    let store = Store::connect(&config).await.unwrap();
    store
        .query(
            "UPSERT type::record('campaign_gate', $c) SET project = $p, open = true RETURN NONE",
            serde_json::json!({ "c": CAMPAIGN, "p": PROJECT }),
        )
        .await
        .unwrap();
    store
}
