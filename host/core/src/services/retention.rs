//! Retention (docs/behaviour.md#retention): the recurring `retention.purge` job deletes what is past its
//! period (`[retention]` in herald.toml, `config::RetentionConfig`): email bodies (the emails stay),
//! events (and so the activity read from them), webhook deliveries with the payloads no other delivery
//! shares, received messages never applied (with their spool files), finished jobs and expired
//! idempotency keys.
//!
//! It never holds up requests: each batch is one small transaction ([`Limits::batch`] rows, read oldest
//! first as an index range that stops at the batch), followed by a pause as long as the batch took (the
//! purge works at most half the time), and a run does at most
//! [`Limits::batches`] batches of each kind, so a large backlog is worked off over several runs instead of
//! holding a worker. One job per cluster: one process purges at a time.
//!
//! Must not import: salvo, surrealdb.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::RetentionConfig;
use crate::domain::status::JobStatus;
use crate::infra::jobs::{JobContext, Registry};
use crate::infra::spool::Spool;
use crate::store::retention::Step;
use crate::store::{Store, StoreError};

pub const PURGE_JOB: &str = "retention.purge";

/// How often the purge runs.
pub const EVERY_MS: i64 = 10 * 60_000;

/// How much one run does, and how gently.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Rows per batch (one transaction).
    pub batch: usize,
    /// Batches of each kind per run at most.
    pub batches: usize,
    /// Pause after each batch, at least: the pause is as long as the batch took, so the purge works at
    /// most half the time.
    pub pause: Duration,
}

impl Default for Limits {
    /// 500 rows a batch, 100 batches of each kind a run (50,000 rows; a run every ten minutes), 5 ms
    /// between batches.
    fn default() -> Self {
        Limits { batch: 500, batches: 100, pause: Duration::from_millis(5) }
    }
}

/// What a run deleted, and whether it stopped at its limit with more left.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Purged {
    pub email_bodies: usize,
    pub events: usize,
    pub webhook_deliveries: usize,
    pub inbound_messages: usize,
    pub jobs: usize,
    pub idempotency_keys: usize,
    /// Some kind stopped at its limit of batches: the next run goes on.
    pub more: bool,
}

impl Purged {
    pub fn total(&self) -> usize {
        self.email_bodies
            + self.events
            + self.webhook_deliveries
            + self.inbound_messages
            + self.jobs
            + self.idempotency_keys
    }
}

/// Registers the recurring purge. `spool`: this process's spool of received messages, whose files of
/// purged messages it deletes (a process without one leaves them to the spool's sweep where they are).
pub fn register(registry: &mut Registry, periods: RetentionConfig, spool: Option<Arc<Spool>>) {
    registry.every(PURGE_JOB, EVERY_MS);
    registry.register(PURGE_JOB, move |ctx: JobContext| {
        let (periods, spool) = (periods.clone(), spool.clone());
        async move {
            let now = ctx.clock.now_ms();
            let purged = purge(&ctx.store, now, &periods, spool.as_deref(), Limits::default()).await?;
            if purged.total() > 0 {
                tracing::info!(?purged, "retention: purged what is past its period");
            }
            Ok::<(), StoreError>(())
        }
    });
}

/// The pause after a batch that began at `began`: as long as it took, and `limits.pause` at least.
async fn rest(limits: &Limits, began: Instant) {
    tokio::time::sleep(began.elapsed().max(limits.pause)).await;
}

/// Batches of one kind, from the oldest on, until none is left or `limits.batches` ran; true when it
/// stopped at the limit. `batch(from)` deletes one batch from `from` on.
async fn batches<F, Fut>(limits: &Limits, count: &mut usize, mut batch: F) -> Result<bool, StoreError>
where
    F: FnMut(i64) -> Fut,
    Fut: std::future::Future<Output = Result<Step, StoreError>>,
{
    let mut from = i64::MIN;
    for _ in 0..limits.batches {
        let began = Instant::now();
        let step = batch(from).await?;
        *count += step.deleted;
        rest(limits, began).await;
        match step.next {
            // A batch that deleted nothing and did not move on would read the same rows again.
            Some(next) if next > from || step.deleted > 0 => from = next,
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// One run of the purge at `now`.
pub async fn purge(
    store: &Store,
    now: i64,
    periods: &RetentionConfig,
    spool: Option<&Spool>,
    limits: Limits,
) -> Result<Purged, StoreError> {
    let mut p = Purged::default();
    let n = limits.batch.max(1);
    let mut more = false;
    if let Some(keep) = periods.inbound_ms {
        let gone = std::sync::Mutex::new(Vec::new());
        more |= batches(&limits, &mut p.inbound_messages, |from| {
            let gone = &gone;
            async move {
                let (step, ids) = store.purge_inbound(from, now - keep, n).await?;
                gone.lock().unwrap_or_else(|e| e.into_inner()).extend(ids);
                Ok(step)
            }
        })
        .await?;
        if let Some(spool) = spool {
            for id in gone.into_inner().unwrap_or_else(|e| e.into_inner()) {
                if let Err(e) = spool.remove(&id).await {
                    tracing::warn!(error = %e, "a purged message's spool file stays until the sweep");
                }
            }
        }
    }
    more |= batches(&limits, &mut p.idempotency_keys, |from| store.purge_idempotency_batch(from, now, n)).await?;
    for status in [JobStatus::Completed, JobStatus::Dead] {
        let before = now - periods.job_ms;
        more |= batches(&limits, &mut p.jobs, |from| store.purge_finished_jobs_batch(status, from, before, n)).await?;
    }
    if let Some(keep) = periods.webhook_delivery_ms {
        let before = now - keep;
        more |=
            batches(&limits, &mut p.webhook_deliveries, |from| store.purge_webhook_deliveries(from, before, n)).await?;
    }
    let projects = if periods.event_ms.is_some() || periods.email_body_ms.is_some() {
        store.retention_projects().await?
    } else {
        vec![]
    };
    if let Some(keep) = periods.event_ms {
        let before = now - keep;
        // The limit of batches is the kind's, over every project.
        let mut left = limits.batches;
        for project in &projects {
            let budget = Limits { batches: left, ..limits };
            let mut ran = 0;
            let stopped = batches(&budget, &mut p.events, |from| {
                ran += 1;
                store.purge_events(project, from, before, n)
            })
            .await?;
            left -= ran.min(left);
            if stopped || left == 0 {
                more = true;
                break;
            }
        }
    }
    if let Some(keep) = periods.email_body_ms {
        let before = now - keep;
        let mut left = limits.batches;
        'projects: for project in &projects {
            loop {
                if left == 0 {
                    more = true;
                    break 'projects;
                }
                left -= 1;
                let began = Instant::now();
                let (deleted, again) = store.purge_email_bodies(project, before, n).await?;
                p.email_bodies += deleted;
                rest(&limits, began).await;
                if !again {
                    break;
                }
            }
        }
        store.purge_retention_marks().await?;
    }
    p.more = more;
    Ok(p)
}
