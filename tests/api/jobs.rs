//! The durable job queue (foundation issue): leases, takeover after a crash, exactly-once across
//! workers, delayed jobs, retries with backoff and dead-lettering. The clock is manual: nothing sleeps.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herald_host::config::Config;
use herald_host::infra::clock::{Clock, ManualClock};
use herald_host::infra::jobs::{Outcome, Registry, Worker, WorkerOptions};
use herald_host::store::Store;
use herald_host::store::jobs::NewJob;
use serde_json::json;

const T0: i64 = 1_800_000_000_000;

async fn store() -> Store {
    Store::connect(&Config::for_tests()).await.expect("store")
}

fn worker(store: &Store, clock: &ManualClock, registry: Registry, id: &str) -> Worker {
    Worker::new(
        store.clone(),
        Arc::new(clock.clone()),
        registry,
        WorkerOptions {
            id: id.into(),
            concurrency: 8,
            lease_ms: 30_000,
            poll: Duration::from_millis(20),
            due_reuse: herald_host::infra::jobs::DUE_REUSE,
        },
    )
}

fn counting(kind: &str, counter: Arc<Mutex<HashMap<String, usize>>>) -> Registry {
    let mut r = Registry::new();
    r.register(kind, move |ctx| {
        let counter = counter.clone();
        async move {
            *counter.lock().unwrap().entry(ctx.payload["n"].to_string()).or_default() += 1;
            Ok::<(), String>(())
        }
    });
    r
}

#[tokio::test]
async fn a_job_whose_worker_died_runs_again_after_its_lease() {
    let store = store().await;
    let clock = ManualClock::new(T0);
    let id = store.enqueue(&NewJob::new("work", json!({"n": 1}), T0), T0).await.unwrap();
    // Worker A claims the job and dies without finishing it.
    let claimed = store.claim_jobs("dead-worker", clock.now_ms(), 30_000, 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let counter = Arc::new(Mutex::new(HashMap::new()));
    let b = worker(&store, &clock, counting("work", counter.clone()), "b");
    assert!(b.run_once(10).await.unwrap().is_empty(), "the lease still holds");
    clock.advance(29_999);
    assert!(b.run_once(10).await.unwrap().is_empty(), "the lease still holds one ms before expiry");
    clock.advance(1);
    let ran = b.run_once(10).await.unwrap();
    assert_eq!(ran.len(), 1);
    assert_eq!(ran[0].1, Outcome::Completed);
    assert_eq!(counter.lock().unwrap().values().sum::<usize>(), 1);
    let job = store.job(&id).await.unwrap().unwrap();
    assert_eq!(job.status.as_str(), "completed");
    assert_eq!(job.attempts, 2, "the lost attempt counts");
    // The dead worker coming back cannot record an outcome any more.
    assert!(!store.complete_job(&id, "dead-worker", clock.now_ms()).await.unwrap());
}

#[tokio::test]
async fn two_workers_sharing_one_database_run_each_job_exactly_once() {
    let store = store().await;
    let clock = ManualClock::new(T0);
    let n = 300;
    for i in 0..n {
        store.enqueue(&NewJob::new("work", json!({ "n": i }), T0), T0).await.unwrap();
    }
    let counter = Arc::new(Mutex::new(HashMap::new()));
    let a = worker(&store, &clock, counting("work", counter.clone()), "a");
    let b = worker(&store, &clock, counting("work", counter.clone()), "b");
    let done = Arc::new(AtomicUsize::new(0));
    let spin = |w: Worker, done: Arc<AtomicUsize>| async move {
        loop {
            let ran = w.run_once(7).await.expect("run");
            if ran.is_empty() {
                break;
            }
            done.fetch_add(ran.iter().filter(|(_, o)| *o == Outcome::Completed).count(), Ordering::SeqCst);
        }
    };
    tokio::join!(spin(a, done.clone()), spin(b, done.clone()));
    let counts = counter.lock().unwrap();
    assert_eq!(counts.len(), n, "every job ran");
    assert!(
        counts.values().all(|&c| c == 1),
        "no job ran twice: {:?}",
        counts.iter().filter(|(_, c)| **c > 1).collect::<Vec<_>>()
    );
    assert_eq!(done.load(Ordering::SeqCst), n);
}

#[tokio::test]
async fn a_delayed_job_never_runs_early() {
    let store = store().await;
    let clock = ManualClock::new(T0);
    store.enqueue(&NewJob::new("work", json!({"n": 1}), T0 + 60_000), T0).await.unwrap();
    let counter = Arc::new(Mutex::new(HashMap::new()));
    let w = worker(&store, &clock, counting("work", counter.clone()), "w");
    for step in [0, 30_000, 29_999] {
        clock.advance(step);
        assert!(w.run_once(10).await.unwrap().is_empty(), "ran early at +{} ms", clock.now_ms() - T0);
    }
    clock.advance(1);
    assert_eq!(w.run_once(10).await.unwrap().len(), 1);
    assert_eq!(counter.lock().unwrap().values().sum::<usize>(), 1);
}

#[tokio::test]
async fn a_failing_job_is_retried_with_backoff_then_dead_lettered_with_its_error() {
    let store = store().await;
    let clock = ManualClock::new(T0);
    let mut job = NewJob::new("flaky", json!({}), T0);
    job.max_attempts = 3;
    let id = store.enqueue(&job, T0).await.unwrap();
    let mut r = Registry::new();
    r.register("flaky", |ctx| async move { Err(format!("boom on attempt {}", ctx.attempt)) });
    let w = worker(&store, &clock, r, "w");

    let ran = w.run_once(10).await.unwrap();
    assert_eq!(ran[0].1, Outcome::Retried { at: T0 + 1000 });
    assert!(w.run_once(10).await.unwrap().is_empty(), "not before the backoff");
    clock.advance(1000);
    let ran = w.run_once(10).await.unwrap();
    assert_eq!(ran[0].1, Outcome::Retried { at: T0 + 1000 + 2000 });
    clock.advance(2000);
    let ran = w.run_once(10).await.unwrap();
    assert_eq!(ran[0].1, Outcome::Dead);
    let job = store.job(&id).await.unwrap().unwrap();
    assert_eq!(job.status.as_str(), "dead");
    assert_eq!(job.attempts, 3);
    assert_eq!(job.last_error.as_deref(), Some("boom on attempt 3"));
    clock.advance(10_000_000);
    assert!(w.run_once(10).await.unwrap().is_empty(), "a dead job stays dead");
}

#[tokio::test]
async fn a_panicking_handler_fails_only_its_attempt() {
    let store = store().await;
    let clock = ManualClock::new(T0);
    store.enqueue(&NewJob::new("panics", json!({}), T0), T0).await.unwrap();
    let mut r = Registry::new();
    r.register("panics", |_ctx| async move {
        if true {
            panic!("handler bug");
        }
        Ok::<(), String>(())
    });
    let w = worker(&store, &clock, r, "w");
    let ran = w.run_once(10).await.unwrap();
    assert!(matches!(ran[0].1, Outcome::Retried { .. }));
}

#[tokio::test]
async fn recurring_jobs_queue_themselves_again_and_register_once() {
    let store = store().await;
    let clock = ManualClock::new(T0);
    let a = store.ensure_recurring("tick", 60_000, T0).await.unwrap();
    let b = store.ensure_recurring("tick", 60_000, T0).await.unwrap();
    assert_eq!(a, b, "registering twice (two processes) makes one job");
    let counter = Arc::new(AtomicUsize::new(0));
    let mut r = Registry::new();
    let c2 = counter.clone();
    r.register("tick", move |_| {
        let c = c2.clone();
        async move {
            c.fetch_add(1, Ordering::SeqCst);
            Ok::<(), String>(())
        }
    });
    let w = worker(&store, &clock, r, "w");
    assert_eq!(w.run_once(10).await.unwrap().len(), 1);
    assert!(w.run_once(10).await.unwrap().is_empty());
    clock.advance(60_000);
    assert_eq!(w.run_once(10).await.unwrap().len(), 1);
    assert_eq!(counter.load(Ordering::SeqCst), 2);
    assert_eq!(store.job(&a).await.unwrap().unwrap().status.as_str(), "queued");

    // Hurried, a queued recurring job's next run comes forward to now (the event stream's dispatch is
    // brought forward this way by every write that stores events), among other queued jobs; a kind
    // with no recurring job answers false.
    for n in 0..50 {
        store.enqueue(&NewJob::new("later", json!({ "n": n }), T0 + 3_600_000), clock.now_ms()).await.unwrap();
    }
    let now = clock.now_ms();
    assert!(store.job(&a).await.unwrap().unwrap().run_at > now);
    assert!(store.hurry_recurring("tick", now).await.unwrap());
    assert_eq!(store.job(&a).await.unwrap().unwrap().run_at, now);
    assert!(!store.hurry_recurring("nothing-recurs", now).await.unwrap());
    assert_eq!(w.run_once(1).await.unwrap().len(), 1, "the hurried job runs now");
}

#[tokio::test]
async fn a_waiter_on_a_kind_hears_each_recorded_outcome_of_that_kind_only() {
    // The event stream's hurry waits on this instead of asking the database every few milliseconds
    // whether the dispatch is queued again: by the time it hears, the recurring job is queued.
    let store = store().await;
    let clock = ManualClock::new(T0);
    let tick = store.ensure_recurring("tick", 60_000, T0).await.unwrap();
    store.ensure_recurring("tock", 60_000, T0 + 30_000).await.unwrap();
    let mut r = Registry::new();
    r.register("tick", |_| async { Ok::<(), String>(()) });
    r.register("tock", |_| async { Ok::<(), String>(()) });
    r.register_batch("bulk", 8, |ctxs| async move { ctxs.iter().map(|_| Ok::<(), String>(())).collect() });
    let w = worker(&store, &clock, r, "w");
    let (on_tick, on_tock) = (w.on_finished("tick"), w.on_finished("tock"));
    let heard = |n: Arc<tokio::sync::Notify>| async move {
        tokio::time::timeout(Duration::from_millis(200), n.notified()).await.is_ok()
    };

    let (ticked, ran) = tokio::join!(heard(on_tick.clone()), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        w.run_once(10).await.unwrap()
    });
    assert_eq!(ran.len(), 1, "only tick is due");
    assert!(ticked, "a waiter on tick hears when tick's outcome is recorded");
    assert_eq!(store.job(&tick).await.unwrap().unwrap().status.as_str(), "queued", "queued again by then");
    let (tocked, _) = tokio::join!(heard(on_tock.clone()), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        w.run_once(10).await.unwrap()
    });
    assert!(!tocked, "nothing of tock ran, so nothing is heard");
    clock.advance(30_000);
    let (tocked, ran) = tokio::join!(heard(on_tock), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        w.run_once(10).await.unwrap()
    });
    assert_eq!(ran.len(), 1);
    assert!(tocked);
    // A batch kind's outcomes are recorded together, and heard the same way.
    for n in 0..3 {
        store.enqueue(&NewJob::new("bulk", json!({ "n": n }), T0), clock.now_ms()).await.unwrap();
    }
    let (bulked, ran) = tokio::join!(heard(w.on_finished("bulk")), async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        w.run_once(10).await.unwrap()
    });
    assert_eq!(ran.len(), 3);
    assert!(bulked, "a waiter on a batch kind hears when the batch's outcomes are recorded");
}

/// Waits (up to 10 s) until `done` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A registry whose handlers for `kinds` each take `hold`, then count one run in `ran`.
fn counting_runs(kinds: &[&str], ran: &Arc<AtomicUsize>, hold: Duration) -> Registry {
    let mut r = Registry::new();
    for kind in kinds {
        let ran = ran.clone();
        r.register(kind, move |_| {
            let ran = ran.clone();
            async move {
                tokio::time::sleep(hold).await;
                ran.fetch_add(1, Ordering::SeqCst);
                Ok::<(), String>(())
            }
        });
    }
    r
}

/// A worker for running its loop: `concurrency` slots, `poll`, and a due answer trusted for an hour.
fn looping_worker(store: &Store, clock: &ManualClock, r: Registry, concurrency: usize, poll: Duration) -> Worker {
    let opts =
        WorkerOptions { id: "w".into(), concurrency, lease_ms: 30_000, poll, due_reuse: Duration::from_secs(3600) };
    Worker::new(store.clone(), Arc::new(clock.clone()), r, opts)
}

#[tokio::test]
async fn a_worker_whose_slots_are_all_busy_does_not_ask_at_every_poll() {
    // One slot, held by each job for ~300 ms, and a poll of 5 ms: nothing can be claimed while a job
    // runs, and the answer (trusted for an hour here) is still fresh when the slot comes free, so the
    // polls of a busy worker ask nothing. Before, every poll while busy dropped the answer and the freed
    // slot asked again.
    let store = store().await;
    let clock = ManualClock::new(T0);
    let ran = Arc::new(AtomicUsize::new(0));
    let r = counting_runs(&["slow"], &ran, Duration::from_millis(300));
    let w = looping_worker(&store, &clock, r, 1, Duration::from_millis(5));
    for n in 0..2 {
        store.enqueue(&NewJob::new("slow", json!({ "n": n }), T0), T0).await.unwrap();
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let looping = tokio::spawn(w.clone().run(stopped));
    // The first job ended, the second took the slot without a question, and is running: ~100 polls
    // while it runs ask nothing either. (Once the queue is empty, an idle worker's polls ask again.)
    until("the first job ran", || ran.load(Ordering::SeqCst) == 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the second job still runs");
    assert_eq!(w.due_questions(), 1, "polls while the only slot was busy asked nothing; the first question only");
    until("the second job ran", || ran.load(Ordering::SeqCst) == 2).await;
    stop.send(true).unwrap();
    looping.await.unwrap();
}

#[tokio::test]
async fn a_wake_naming_its_kind_is_claimed_without_asking_which_kinds_are_due() {
    // The question costs an index read per kind; a busy process is woken many times a second. Poll and
    // trust are long here, so every question the loop asks below is one a wake caused.
    let store = store().await;
    let clock = ManualClock::new(T0);
    let ran = Arc::new(AtomicUsize::new(0));
    let r = counting_runs(&["named", "other"], &ran, Duration::ZERO);
    let w = looping_worker(&store, &clock, r, 4, Duration::from_secs(3600));
    let wake = w.waker();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let looping = tokio::spawn(w.clone().run(stopped));
    until("the loop has asked once", || w.due_questions() == 1).await;
    for n in 1..=10 {
        store.enqueue(&NewJob::new("named", json!({ "n": n }), T0), T0).await.unwrap();
        wake.kind("named");
        until(&format!("job {n} ran"), || ran.load(Ordering::SeqCst) == n).await;
    }
    assert_eq!(w.due_questions(), 1, "ten named wakes, no question");
    // A wake that names no kind asks, and finds the job.
    store.enqueue(&NewJob::new("other", json!({}), T0), T0).await.unwrap();
    wake.any();
    until("the unnamed job ran", || ran.load(Ordering::SeqCst) == 11).await;
    assert_eq!(w.due_questions(), 2);
    stop.send(true).unwrap();
    looping.await.unwrap();
}

#[tokio::test]
async fn graceful_release_gives_jobs_back_without_counting_the_attempt() {
    let store = store().await;
    let id = store.enqueue(&NewJob::new("work", json!({}), T0), T0).await.unwrap();
    assert_eq!(store.claim_jobs("w", T0, 30_000, 10).await.unwrap().len(), 1);
    store.release_leases("w", T0).await.unwrap();
    let job = store.job(&id).await.unwrap().unwrap();
    assert_eq!(job.status.as_str(), "queued");
    assert_eq!(job.attempts, 0);
    assert_eq!(store.claim_jobs("other", T0, 30_000, 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_batch_kind_runs_many_jobs_in_one_call_and_records_each_outcome() {
    let store = store().await;
    let clock = ManualClock::new(T0);
    let calls = Arc::new(AtomicUsize::new(0));
    let mut r = Registry::new();
    let seen = calls.clone();
    r.register_batch("batch", 10, move |ctxs| {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            ctxs.iter()
                .map(|c| match c.payload["n"].as_i64() {
                    Some(0) => Err("fails for good".to_string()),
                    Some(1) => Err("fails once".to_string()),
                    _ => Ok(()),
                })
                .collect()
        }
    });
    let mut ids = Vec::new();
    for n in 0..4 {
        let mut job = NewJob::new("batch", json!({ "n": n }), T0);
        job.max_attempts = if n == 0 { 1 } else { 3 };
        ids.push(store.enqueue(&job, T0).await.unwrap());
    }
    let w = worker(&store, &clock, r, "w");
    let ran = w.run_once(10).await.unwrap();
    assert_eq!(ran.len(), 4);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one handler call for the whole batch");
    let status = |id: &str| {
        let store = store.clone();
        let id = id.to_string();
        async move { store.job(&id).await.unwrap().unwrap() }
    };
    assert_eq!(status(&ids[0]).await.status.as_str(), "dead");
    assert_eq!(status(&ids[0]).await.last_error.as_deref(), Some("fails for good"));
    let retried = status(&ids[1]).await;
    assert_eq!((retried.status.as_str(), retried.run_at), ("queued", T0 + 1000), "retried with backoff");
    assert_eq!(status(&ids[2]).await.status.as_str(), "completed");
    assert_eq!(status(&ids[3]).await.status.as_str(), "completed");
    // the retried job runs again once its time comes
    clock.advance(1000);
    let ran = w.run_once(10).await.unwrap();
    assert_eq!(ran.len(), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_job_whose_attempts_never_finish_is_dead_lettered_instead_of_crash_looping() {
    let store = store().await;
    let clock = ManualClock::new(T0);
    let id = store.enqueue(&NewJob::new("kills-the-process", json!({}), T0), T0).await.unwrap();
    let other = store.enqueue(&NewJob::new("work", json!({"n": 1}), T0), T0).await.unwrap();
    // Three processes in a row claim it and die while running it (their leases expire).
    for life in 0..3 {
        let kinds = vec!["kills-the-process".to_string()];
        let claimed = store.claim_kinds(&format!("life-{life}"), clock.now_ms(), 30_000, 10, &kinds).await.unwrap();
        assert_eq!(claimed.len(), 1, "attempt {life} is claimed");
        assert_eq!(claimed[0].interrupted.unwrap_or(0), life, "interrupted attempts so far");
        clock.advance(30_000);
    }
    // The next claim finds its third expired lease: dead-lettered with the reason, not run again.
    let counter = Arc::new(Mutex::new(HashMap::new()));
    let mut registry = counting("work", counter.clone());
    let ran_fatal = Arc::new(AtomicUsize::new(0));
    let seen = ran_fatal.clone();
    registry.register("kills-the-process", move |_| {
        let seen = seen.clone();
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            Ok::<(), String>(())
        }
    });
    let w = worker(&store, &clock, registry, "survivor");
    let ran = w.run_once(10).await.unwrap();
    assert_eq!(ran.len(), 1, "only the other job runs: {ran:?}");
    assert_eq!(ran_fatal.load(Ordering::SeqCst), 0, "the crashing job is not run a fourth time");
    let job = store.job(&id).await.unwrap().unwrap();
    assert_eq!(job.status.as_str(), "dead");
    assert_eq!(job.interrupted, Some(3));
    assert!(job.last_error.unwrap_or_default().contains("interrupted 3 times"));
    assert_eq!(store.job(&other).await.unwrap().unwrap().status.as_str(), "completed");

    // A job interrupted once that then finishes is not held against later runs.
    let id = store.enqueue(&NewJob::new("work", json!({"n": 2}), clock.now_ms()), clock.now_ms()).await.unwrap();
    store.claim_jobs("dies", clock.now_ms(), 30_000, 10).await.unwrap();
    clock.advance(30_000);
    let ran = w.run_once(10).await.unwrap();
    assert_eq!(ran.len(), 1);
    let job = store.job(&id).await.unwrap().unwrap();
    assert_eq!((job.status.as_str(), job.interrupted), ("completed", Some(1)));
}

/// Every recurring kind is declared by the module that handles it, and a started server has exactly one
/// queued job of each, with its interval.
#[tokio::test]
async fn each_recurring_kind_is_queued_once_with_its_interval() {
    let mut config = Config::for_tests();
    config.run_jobs = false;
    config.event_dispatch_ms = 1_234;
    config.campaign_progress_ms = 2_345;
    config.domain_check_ms = 3_456;
    let s = crate::harness::Server::start_with(config, None).await;
    let rows = s
        .state
        .store
        .query(
            "SELECT kind, interval_ms FROM job WHERE interval_ms != NONE AND status = 'queued' ORDER BY kind",
            serde_json::json!({}),
        )
        .await
        .unwrap()
        .value(0)
        .unwrap();
    let got: Vec<(String, i64)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["kind"].as_str().unwrap().to_string(), r["interval_ms"].as_i64().unwrap()))
        .collect();
    let want: Vec<(String, i64)> = [
        ("campaigns.progress", 2_345),
        ("domains.check", 3_456),
        ("events.dispatch", 1_234),
        ("jobs.purge", 3_600_000),
        ("projects.suspension-check", 60_000),
        ("retention.purge", 600_000),
        ("segments.refresh", 300_000),
        ("segments.track", 2_000),
        ("workflows.schedule", 15_000),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(got, want);
    s.stop().await;
}

#[tokio::test]
async fn the_worker_asks_only_for_kinds_that_are_due_queued_or_with_an_expired_lease() {
    let store = store().await;
    let clock = ManualClock::new(T0);
    let kinds: Vec<String> = ["due", "later", "stale", "held", "idle"].iter().map(|k| k.to_string()).collect();
    store.enqueue(&NewJob::new("due", json!({}), T0), T0).await.unwrap();
    store.enqueue(&NewJob::new("later", json!({}), T0 + 60_000), T0).await.unwrap();
    store.enqueue(&NewJob::new("stale", json!({}), T0), T0).await.unwrap();
    store.enqueue(&NewJob::new("held", json!({}), T0), T0).await.unwrap();
    let one = |k: &str| vec![k.to_string()];
    store.claim_kinds("gone", T0, 1_000, 1, &one("stale")).await.unwrap();
    store.claim_kinds("alive", T0, 60_000, 1, &one("held")).await.unwrap();
    clock.advance(1_000);
    let mut due = store.due_kinds(&kinds, clock.now_ms()).await.unwrap();
    due.sort();
    // "later" is not due yet, "held" runs under a live lease, "idle" has no job.
    assert_eq!(due, ["due", "stale"]);
    clock.advance(60_000);
    let mut due = store.due_kinds(&kinds, clock.now_ms()).await.unwrap();
    due.sort();
    assert_eq!(due, ["due", "held", "later", "stale"]);
    assert!(store.due_kinds(&[], clock.now_ms()).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_job_whose_payload_does_not_parse_is_dead_lettered_at_once_with_the_reason() {
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Wants {
        project: String,
    }
    let store = store().await;
    let clock = ManualClock::new(T0);
    let mut job = NewJob::new("typed", json!({ "project": 7 }), T0);
    job.max_attempts = 5;
    let id = store.enqueue(&job, T0).await.unwrap();
    let ran_handler = Arc::new(AtomicUsize::new(0));
    let mut r = Registry::new();
    let counter = ran_handler.clone();
    r.register("typed", move |ctx| {
        let counter = counter.clone();
        async move {
            let _: Wants = ctx.payload()?;
            counter.fetch_add(1, Ordering::SeqCst);
            Ok::<(), herald_host::infra::jobs::JobError>(())
        }
    });
    let w = worker(&store, &clock, r, "w");
    let ran = w.run_once(10).await.unwrap();
    assert_eq!(ran[0].1, Outcome::Dead, "no attempt can make the payload parse: it is not retried");
    assert_eq!(ran_handler.load(Ordering::SeqCst), 0);
    let job = store.job(&id).await.unwrap().unwrap();
    assert_eq!(job.status.as_str(), "dead");
    assert_eq!(job.attempts, 1);
    let error = job.last_error.unwrap_or_default();
    assert!(error.contains("typed job does not parse") && error.contains("expected a string"), "{error}");
}

#[tokio::test]
async fn the_real_job_kinds_dead_letter_a_payload_that_does_not_parse_instead_of_completing_it() {
    let s = crate::harness::Server::start_stepped().await;
    let store = &s.state.store;
    let mut ids = Vec::new();
    for kind in [
        herald_host::services::campaigns::START_JOB,
        herald_host::services::campaigns::RESOLVE_JOB,
        herald_host::services::campaigns::BATCH_JOB,
        herald_host::services::projects::PURGE_PROJECT_JOB,
        herald_host::services::delivery::DELIVER_JOB,
    ] {
        let mut job = NewJob::new(kind, json!({ "campaign": ["not", "an", "id"] }), T0);
        job.max_attempts = 5;
        ids.push((kind, store.enqueue(&job, s.clock().now_ms()).await.unwrap()));
    }
    for _ in 0..5 {
        s.worker.run_once(20).await.unwrap();
    }
    for (kind, id) in ids {
        let job = store.job(&id).await.unwrap().unwrap();
        assert_eq!(job.status.as_str(), "dead", "{kind}");
        assert_eq!(job.attempts, 1, "{kind}: dead-lettered at the first attempt");
        let error = job.last_error.unwrap_or_default();
        assert!(error.contains("does not parse"), "{kind}: {error}");
    }
    s.stop().await;
}

#[tokio::test]
async fn a_waiting_job_spends_no_attempt_costs_nothing_until_its_time_and_runs_at_once_on_its_signal() {
    use herald_host::infra::jobs::JobError;
    let store = store().await;
    let clock = ManualClock::new(T0);
    let runs = Arc::new(AtomicUsize::new(0));
    let mut r = Registry::new();
    let seen = runs.clone();
    r.register("waits", move |ctx| {
        let seen = seen.clone();
        async move {
            // Waits twice (for its signal, an hour at most), then succeeds.
            match seen.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(JobError::Wait {
                    until: ctx.clock.now_ms() + 3_600_000,
                    signals: vec!["relay:up".into()],
                    reason: "its relay is down".into(),
                }),
                _ => Ok(()),
            }
        }
    });
    let mut job = NewJob::new("waits", json!({}), T0);
    job.max_attempts = 1;
    let id = store.enqueue(&job, T0).await.unwrap();
    let w = worker(&store, &clock, r, "w");
    let out = w.run_once(10).await.unwrap();
    assert_eq!(out[0].1, Outcome::Waiting { at: T0 + 3_600_000 });
    let row = store.job(&id).await.unwrap().unwrap();
    assert_eq!((row.status.as_str(), row.run_at, row.attempts), ("queued", T0 + 3_600_000, 0), "no attempt spent");
    assert_eq!(store.awaited_signals(&["relay:up".into(), "other".into()]).await.unwrap(), ["relay:up"]);
    // Nothing runs before its time or its signal.
    clock.advance(60_000);
    assert!(w.run_once(10).await.unwrap().is_empty());
    // Its time comes: it runs, and waits again (its one attempt still unspent).
    clock.advance(3_600_000);
    assert_eq!(w.run_once(10).await.unwrap().len(), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // The signal brings it forward at once, and takes its waits with it.
    assert_eq!(store.signal_jobs("other", clock.now_ms()).await.unwrap(), 0);
    assert_eq!(store.signal_jobs("relay:up", clock.now_ms()).await.unwrap(), 1);
    assert!(store.awaited_signals(&["relay:up".into()]).await.unwrap().is_empty());
    assert_eq!(w.run_once(10).await.unwrap()[0].1, Outcome::Completed);
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}
