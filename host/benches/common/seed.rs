//! A project of many contacts with varied data and events, written straight through the store (batched
//! `INSERT`s, one transaction per batch, several concurrent writers): the segments and dashboard
//! benchmarks share it so their numbers describe the same data.
//!
//! Each contact: `plan` (free 50%, starter 25%, pro 20%, enterprise 5%), `score` (0-999), `country` (12
//! values), `signup` (an ISO 8601 date), `beta` (bool) and `rank` (the contact's number); 90% subscribed.
//! Events: 40% of the contacts have a `purchase` (a third of those within the last 30 days, some with
//! two), 30% a `login`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use herald_host::infra::clock::rfc3339;
use herald_host::store::Store;
use serde_json::{Value, json};

use super::Rng;

const DAY: i64 = 86_400_000;

/// The contact and event rows of contacts `from..to` of `project`.
fn rows(project: &str, from: u64, to: u64, now: i64) -> (Vec<Value>, Vec<Value>) {
    const COUNTRIES: [&str; 12] = ["FR", "DE", "US", "GB", "ES", "IT", "NL", "BR", "IN", "JP", "CA", "PL"];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (from + 1));
    let mut contacts = Vec::with_capacity((to - from) as usize);
    let mut events = Vec::new();
    for i in from..to {
        let id = uuid::Uuid::now_v7().to_string();
        let plan = match rng.below(20) {
            0..10 => "free",
            10..15 => "starter",
            15..19 => "pro",
            _ => "enterprise",
        };
        let created = now - 1 - rng.below(730) as i64 * DAY - rng.below(DAY as u64) as i64;
        let updated = created + rng.below((now - created) as u64 + 1) as i64;
        contacts.push(json!({
            "id": id, "project": project, "email": format!("user{i}@bench.example"), "subscribed": rng.below(10) != 0,
            "data": {
                "plan": plan, "score": rng.below(1000), "country": COUNTRIES[rng.below(12) as usize],
                "signup": rfc3339(created), "beta": rng.below(4) == 0, "rank": i,
            },
            "version": 1, "created_at": created, "updated_at": updated,
        }));
        let mut event = |name: &str, at: i64| {
            events.push(json!({
                "id": uuid::Uuid::now_v7().to_string(), "project": project, "contact": id, "name": name,
                "data": {}, "source": "api", "created_at": at,
            }));
        };
        // 40% purchased: a third of them within 30 days; one in four of those twice.
        if rng.below(10) < 4 {
            let recent = rng.below(3) == 0;
            let age = if recent { rng.below(30 * DAY as u64 - 1) as i64 } else { (31 + rng.below(700) as i64) * DAY };
            event("purchase", now - age);
            if rng.below(4) == 0 {
                event("purchase", now - age - rng.below(60) as i64 * DAY);
            }
        }
        if rng.below(10) < 3 {
            event("login", now - rng.below(90) as i64 * DAY);
        }
    }
    (contacts, events)
}

/// Writes `total` contacts (and their events) of `project`: `writers` concurrent writers, `batch` contacts
/// per transaction. Answers how many events were written.
pub async fn seed(store: &Store, project: &str, total: u64, writers: u64, batch: u64, now: i64) -> u64 {
    let next = Arc::new(AtomicU64::new(0));
    let events = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let (store, next, events, project) = (store.clone(), next.clone(), events.clone(), project.to_string());
        tasks.push(tokio::spawn(async move {
            loop {
                let from = next.fetch_add(batch, Ordering::Relaxed);
                if from >= total {
                    return;
                }
                let to = (from + batch).min(total);
                let (c, e) = rows(&project, from, to, now);
                events.fetch_add(e.len() as u64, Ordering::Relaxed);
                store
                    .query(
                        "BEGIN; INSERT INTO contact $c RETURN NONE; INSERT INTO event $e RETURN NONE; COMMIT;",
                        json!({ "c": c, "e": e }),
                    )
                    .await
                    .expect("seed insert");
                if to % 100_000 < batch {
                    eprintln!("  seeded {to} contacts");
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("a seeding writer");
    }
    events.load(Ordering::Relaxed)
}
