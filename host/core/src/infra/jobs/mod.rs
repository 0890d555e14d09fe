//! The durable job queue's workers and scheduler. Jobs are rows (see `store::jobs`); this module claims
//! them under a lease, runs the registered handler for their kind, and records the outcome: done,
//! retried with exponential backoff, or dead-lettered with the error after the last attempt (at once when
//! the job can never succeed: [`JobError::Fatal`], a payload that does not parse). Recurring jobs are
//! registered at start-up and queue themselves again after each run.
//!
//! Tests drive a worker step by step with [`Worker::run_once`] and a manual clock; `run` is the loop the
//! server uses.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{Notify, Semaphore, watch};

use crate::domain::status::JobStatus;
use crate::infra::clock::SharedClock;
use crate::store::jobs::Job;
use crate::store::{Store, StoreError};

pub type JobFuture = Pin<Box<dyn Future<Output = Result<(), JobError>> + Send>>;
type HandlerFn = Arc<dyn Fn(JobContext) -> JobFuture + Send + Sync>;
pub type BatchFuture = Pin<Box<dyn Future<Output = Vec<Result<(), JobError>>> + Send>>;
type BatchFn = Arc<dyn Fn(Vec<JobContext>) -> BatchFuture + Send + Sync>;

/// How a job's attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// Worth another attempt: retried with backoff, dead-lettered with the reason after the last.
    #[error("{0}")]
    Retry(String),
    /// Can never succeed (its payload does not parse, what it names has the wrong form): dead-lettered
    /// at once with the reason, whatever attempts are left.
    #[error("{0}")]
    Fatal(String),
    /// Not a failure of the job: its work waits (deferred mail). Queued again to run at `until`, or
    /// earlier when one of `signals` is given ([`crate::store::Store::signal_jobs`]); the attempt is not
    /// counted against the job's attempts.
    #[error("{reason}")]
    Wait { until: i64, signals: Vec<String>, reason: String },
}

impl From<String> for JobError {
    fn from(e: String) -> Self {
        JobError::Retry(e)
    }
}

impl From<&str> for JobError {
    fn from(e: &str) -> Self {
        JobError::Retry(e.to_string())
    }
}

impl From<StoreError> for JobError {
    fn from(e: StoreError) -> Self {
        JobError::Retry(e.to_string())
    }
}

/// What a handler gets: the job's payload and identity, and the shared services.
#[derive(Clone)]
pub struct JobContext {
    pub id: String,
    pub kind: String,
    /// The payload as stored: read it with [`JobContext::payload`].
    pub payload: Value,
    pub attempt: i64,
    pub store: Store,
    pub clock: SharedClock,
}

impl JobContext {
    /// The payload as its kind's type; one that does not parse fails the job for good
    /// ([`JobError::Fatal`], dead-lettered with the reason), since no attempt can make it parse.
    pub fn payload<P: serde::de::DeserializeOwned>(&self) -> Result<P, JobError> {
        P::deserialize(&self.payload)
            .map_err(|e| JobError::Fatal(format!("the payload of this {} job does not parse: {e}", self.kind)))
    }
}

/// Handlers by job kind.
#[derive(Clone, Default)]
pub struct Registry {
    handlers: HashMap<String, HandlerFn>,
    /// Kinds whose jobs are claimed and run many at a time (one handler call, one outcome write).
    batch: HashMap<String, (usize, BatchFn)>,
    /// Claim order of kinds: higher first (0 unless set). Within a kind, jobs run in `run_at` order.
    priority: HashMap<String, i64>,
    /// Kinds that run on their own, every so many milliseconds ([`ensure_recurring`]).
    recurring: std::collections::BTreeMap<String, i64>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `kind` (registered by the same module) run on its own every `interval_ms`: one queued job per
    /// kind in the whole cluster, ensured at start-up.
    pub fn every(&mut self, kind: &str, interval_ms: i64) {
        self.recurring.insert(kind.to_string(), interval_ms);
    }

    /// The recurring kinds with their intervals.
    pub fn recurring(&self) -> impl Iterator<Item = (&str, i64)> {
        self.recurring.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Registers the handler of `kind`. It fails with a [`JobError`], or with anything that converts into
    /// one (a `String` or a store error: worth another attempt).
    pub fn register<F, Fut, E>(&mut self, kind: &str, f: F)
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<JobError> + 'static,
    {
        let f = Arc::new(f);
        self.handlers.insert(
            kind.to_string(),
            Arc::new(move |ctx| {
                let fut = f(ctx);
                Box::pin(async move { fut.await.map_err(Into::into) })
            }),
        );
    }

    /// Registers a batch handler: up to `max` jobs of `kind` are claimed together and handed over in one
    /// call, which returns one result per job, in order. Outcomes are recorded in one transaction.
    pub fn register_batch<F, Fut, E>(&mut self, kind: &str, max: usize, f: F)
    where
        F: Fn(Vec<JobContext>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<Result<(), E>>> + Send + 'static,
        E: Into<JobError> + 'static,
    {
        let f = Arc::new(f);
        let handler: BatchFn = Arc::new(move |ctxs| {
            let fut = f(ctxs);
            Box::pin(async move { fut.await.into_iter().map(|r| r.map_err(Into::into)).collect() })
        });
        self.batch.insert(kind.to_string(), (max.max(1), handler));
    }

    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.handlers.keys().chain(self.batch.keys()).map(String::as_str)
    }

    /// Sets a kind's claim priority: when several kinds have work, the worker claims the higher first
    /// (transactional deliveries before campaign deliveries).
    pub fn set_priority(&mut self, kind: &str, priority: i64) {
        self.priority.insert(kind.to_string(), priority);
    }

    fn ordered(&self, mut kinds: Vec<String>) -> Vec<String> {
        kinds.sort_by_key(|k| (-self.priority.get(k).copied().unwrap_or(0), k.clone()));
        kinds
    }

    fn batch_kinds(&self) -> Vec<String> {
        self.ordered(self.batch.keys().cloned().collect())
    }

    fn single_kinds(&self) -> Vec<String> {
        self.ordered(self.handlers.keys().cloned().collect())
    }
}

/// Delay before retry `attempt` (1-based): 1 s, 2 s, 4 s, ... capped at one hour.
pub fn backoff_ms(attempt: i64) -> i64 {
    let exp = attempt.clamp(1, 13) - 1;
    (1000i64 << exp).min(3_600_000)
}

/// How long a job waits when its attempt failed because the disk is full (docs/behaviour.md#errors).
const STORAGE_PAUSE_MS: i64 = 30_000;

/// A failure that says the disk is full is no failure of the job: it waits [`STORAGE_PAUSE_MS`], the
/// attempt not counted, so a full disk dead-letters nothing.
fn paused_on_full_disk(error: JobError, now: i64) -> JobError {
    match error {
        JobError::Retry(m) if crate::store::says_storage_full(&m) => {
            JobError::Wait { until: now + STORAGE_PAUSE_MS, signals: Vec::new(), reason: m }
        }
        other => other,
    }
}

/// When a failed attempt runs again: after the backoff while attempts are left, never (dead-lettered)
/// after the last or when the failure is [`JobError::Fatal`]; a job that waits at its time.
fn retry_at(job: &Job, error: &JobError, now: i64) -> Option<i64> {
    if let JobError::Wait { until, .. } = error {
        return Some(*until);
    }
    let again = job.attempts < job.max_attempts && matches!(error, JobError::Retry(_));
    again.then(|| now + backoff_ms(job.attempts))
}

/// A failed (or waiting) attempt as the store records it.
fn failed_job(job: &Job, error: &JobError, now: i64) -> crate::store::jobs::FailedJob {
    let (waits, signals) = match error {
        JobError::Wait { signals, .. } => (true, signals.clone()),
        _ => (false, vec![]),
    };
    crate::store::jobs::FailedJob {
        id: job.id.clone(),
        error: error.to_string(),
        retry_at: retry_at(job, error, now),
        counted: !waits,
        signals,
    }
}

/// Outcome of one job run, for tests and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    Retried {
        at: i64,
    },
    /// Its work waits ([`JobError::Wait`]): queued again, the attempt not counted.
    Waiting {
        at: i64,
    },
    Dead,
    /// The lease was lost meanwhile; the outcome was not recorded.
    LeaseLost,
}

impl Outcome {
    /// The outcome's name in metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Completed => JobStatus::Completed.as_str(),
            Outcome::Retried { .. } => "retried",
            Outcome::Waiting { .. } => "waiting",
            Outcome::Dead => JobStatus::Dead.as_str(),
            Outcome::LeaseLost => "lease_lost",
        }
    }
}

#[derive(Clone)]
pub struct WorkerOptions {
    pub id: String,
    pub concurrency: usize,
    pub lease_ms: i64,
    pub poll: Duration,
    /// How long an answer to which kinds are due is trusted ([`DUE_REUSE`] in a server).
    pub due_reuse: Duration,
}

/// One worker: a process runs one, with `concurrency` job slots.
#[derive(Clone)]
pub struct Worker {
    store: Store,
    clock: SharedClock,
    registry: Arc<Registry>,
    opts: WorkerOptions,
    wake: JobWake,
    /// A slot of this worker came free (a job ended): see [`DUE_REUSE`].
    freed: Arc<Notify>,
    /// Kinds someone waits on: notified after this worker recorded the outcome of a job of that kind.
    finished: Arc<std::sync::Mutex<HashMap<String, Arc<Notify>>>>,
    /// How often the loop asked the database which kinds are due.
    questions: Arc<std::sync::atomic::AtomicU64>,
}

/// How long the worker's answer to "which kinds are due" is trusted, instead of asked again. A busy
/// worker frees a slot and is woken by new work many times a second, and the question costs one index
/// read per kind the process serves (~3 ms with thirty kinds on a busy 2-core machine): asked after
/// every finished job, a 20,000-email campaign asked it 1,246 times in 22 s. While the answer is fresh, a
/// kind whose claim comes back short leaves it and a kind named by a [`JobWake`] joins it; once it is
/// older than this, the next slot that comes free or the next wake asks again, and the poll (500 ms by
/// default) always does. Work that comes due without a named wake (a timer, another process's work)
/// thus waits at most this much longer while the worker is busy, and at most the poll while it is idle.
pub const DUE_REUSE: Duration = Duration::from_millis(200);

/// Wakes a worker early after work was enqueued that should run now. Naming the work's kinds
/// ([`JobWake::kinds`]) lets the worker claim them at once, without asking the database which kinds are
/// due (see [`DUE_REUSE`]); [`JobWake::any`] (kinds not known) makes it ask. Cheap to clone.
#[derive(Clone, Default)]
pub struct JobWake {
    inner: Arc<WakeInner>,
}

#[derive(Default)]
struct WakeInner {
    notify: Notify,
    /// The kinds named since the worker last looked, and whether a wake named none.
    woken: std::sync::Mutex<(Vec<String>, bool)>,
}

impl JobWake {
    /// Work of these kinds was enqueued, due now.
    pub fn kinds<S: AsRef<str>>(&self, kinds: impl IntoIterator<Item = S>) {
        {
            let mut w = self.inner.woken.lock().unwrap_or_else(|p| p.into_inner());
            for k in kinds {
                let k = k.as_ref();
                if !w.0.iter().any(|have| have == k) {
                    w.0.push(k.to_string());
                }
            }
        }
        self.inner.notify.notify_one();
    }

    /// Work of this kind was enqueued, due now.
    pub fn kind(&self, kind: &str) {
        self.kinds([kind]);
    }

    /// Work was enqueued, of kinds the caller does not name: the worker asks the database.
    pub fn any(&self) {
        self.inner.woken.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        self.inner.notify.notify_one();
    }

    /// The kinds named since the last call, and whether some wake named none.
    fn take(&self) -> (Vec<String>, bool) {
        std::mem::take(&mut *self.inner.woken.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// What ended a worker's wait.
enum Woke {
    /// A slot came free or work was enqueued: the last answer to which kinds are due may be reused.
    Event,
    /// The poll or a shutdown: ask again.
    Poll,
}

impl Worker {
    pub fn new(store: Store, clock: SharedClock, registry: Registry, opts: WorkerOptions) -> Self {
        Worker {
            store,
            clock,
            registry: Arc::new(registry),
            opts,
            wake: JobWake::default(),
            freed: Arc::new(Notify::new()),
            finished: Default::default(),
            questions: Default::default(),
        }
    }

    /// Notified (every waiter) each time this worker has recorded the outcome of a job of `kind`: a
    /// recurring job is queued again by then.
    pub fn on_finished(&self, kind: &str) -> Arc<Notify> {
        let mut m = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(kind.to_string()).or_default().clone()
    }

    pub fn id(&self) -> &str {
        &self.opts.id
    }

    /// How many times the loop has asked the database which kinds are due (see [`DUE_REUSE`]).
    pub fn due_questions(&self) -> u64 {
        self.questions.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The handle that wakes this worker (given to request handlers that enqueue urgent work).
    pub fn waker(&self) -> JobWake {
        self.wake.clone()
    }

    /// Claims up to `limit` runnable jobs and runs them to completion, in parallel. Returns the outcomes.
    pub async fn run_once(&self, limit: usize) -> Result<Vec<(Job, Outcome)>, StoreError> {
        let now = self.clock.now_ms();
        let jobs = self.store.claim_jobs(&self.opts.id, now, self.opts.lease_ms, limit).await?;
        let (batched, single): (Vec<Job>, Vec<Job>) =
            jobs.into_iter().partition(|j| self.registry.batch.contains_key(&j.kind));
        let runs = single.into_iter().map(|job| {
            let this = self.clone();
            async move {
                let outcome = this.execute(&job).await;
                (job, outcome)
            }
        });
        let mut out = futures_util::future::join_all(runs).await;
        for kind in self.registry.batch_kinds() {
            let group: Vec<Job> = batched.iter().filter(|j| j.kind == kind).cloned().collect();
            if !group.is_empty() {
                out.extend(self.execute_batch(&kind, group).await);
            }
        }
        Ok(out)
    }

    fn context(&self, job: &Job) -> JobContext {
        JobContext {
            id: job.id.clone(),
            kind: job.kind.clone(),
            payload: serde_json::from_str(&job.payload).unwrap_or(Value::Null),
            attempt: job.attempts,
            store: self.store.clone(),
            clock: self.clock.clone(),
        }
    }

    /// Runs claimed jobs of a batch kind through one handler call and records every outcome in one
    /// transaction.
    async fn execute_batch(&self, kind: &str, jobs: Vec<Job>) -> Vec<(Job, Outcome)> {
        let started = std::time::Instant::now();
        let Some((_, handler)) = self.registry.batch.get(kind).cloned() else { return vec![] };
        let ctxs: Vec<JobContext> = jobs.iter().map(|j| self.context(j)).collect();
        let ids: Vec<String> = jobs.iter().map(|j| j.id.clone()).collect();
        let fut = tokio::spawn(handler(ctxs));
        let heartbeat = self.heartbeat_many(ids);
        let results = tokio::select! {
            r = fut => r.unwrap_or_else(|e| vec![Err(format!("job handler panicked: {e}").into()); jobs.len()]),
            _ = heartbeat => vec![Err("lease heartbeat stopped".into()); jobs.len()],
        };
        let now = self.clock.now_ms();
        let mut done = Vec::new();
        let mut failed = Vec::new();
        let mut outcomes = Vec::with_capacity(jobs.len());
        for (i, job) in jobs.into_iter().enumerate() {
            let result = results.get(i).cloned().unwrap_or_else(|| Err("the batch handler returned no result".into()));
            let result = result.map_err(|e| paused_on_full_disk(e, now));
            let outcome = match result {
                Ok(()) => {
                    done.push(job.id.clone());
                    Outcome::Completed
                }
                Err(error) => {
                    let f = failed_job(&job, &error, now);
                    if f.counted {
                        tracing::warn!(job = %job.id, kind = %job.kind, attempt = job.attempts, error = %error, "job failed");
                    }
                    let outcome = match f.retry_at {
                        Some(at) if !f.counted => Outcome::Waiting { at },
                        Some(at) => Outcome::Retried { at },
                        None => Outcome::Dead,
                    };
                    failed.push(f);
                    outcome
                }
            };
            outcomes.push((job, outcome));
        }
        if let Err(e) = self.store.finish_jobs(&self.opts.id, &done, &failed, now).await {
            tracing::error!(kind, error = %e, "cannot record the outcomes of a job batch");
            for o in &mut outcomes {
                o.1 = Outcome::LeaseLost;
            }
        }
        for (job, outcome) in &outcomes {
            crate::infra::metrics::job_finished(&job.kind, outcome.label());
        }
        crate::infra::metrics::job_ran(kind, started.elapsed());
        self.recorded(kind);
        outcomes
    }

    /// Wakes whoever waits on `kind` ([`Worker::on_finished`]): this worker recorded an outcome of it.
    fn recorded(&self, kind: &str) {
        let waiting = self.finished.lock().unwrap_or_else(|p| p.into_inner()).get(kind).cloned();
        if let Some(n) = waiting {
            n.notify_waiters();
        }
    }

    /// Extends the leases of a batch every third of the lease length, forever (dropped when it ends).
    async fn heartbeat_many(&self, ids: Vec<String>) {
        let period = Duration::from_millis((self.opts.lease_ms / 3).max(10) as u64);
        loop {
            tokio::time::sleep(period).await;
            let until = self.clock.now_ms() + self.opts.lease_ms;
            if let Err(e) = self.store.extend_leases(&ids, &self.opts.id, until).await {
                tracing::warn!(error = %e, "cannot extend job leases");
            }
        }
    }

    /// Runs one claimed job and records its outcome.
    async fn execute(&self, job: &Job) -> Outcome {
        let started = std::time::Instant::now();
        let result = match self.registry.handlers.get(&job.kind) {
            None => Err(JobError::Retry(format!("no handler registered for job kind {:?}", job.kind))),
            Some(handler) => {
                let ctx = self.context(job);
                // Keep the lease alive while the handler runs; a panic in the handler fails the attempt.
                let fut = tokio::spawn(handler(ctx));
                let heartbeat = self.heartbeat(job.id.clone());
                let res = tokio::select! {
                    r = fut => r.unwrap_or_else(|e| Err(format!("job handler panicked: {e}").into())),
                    _ = heartbeat => Err("lease heartbeat stopped".into()),
                };
                res
            }
        };
        let now = self.clock.now_ms();
        let outcome = match result.map_err(|e| paused_on_full_disk(e, now)) {
            Ok(()) => match self.store.complete_job(&job.id, &self.opts.id, now).await {
                Ok(true) => Outcome::Completed,
                Ok(false) => Outcome::LeaseLost,
                Err(e) => {
                    tracing::error!(job = %job.id, error = %e, "cannot record job completion");
                    Outcome::LeaseLost
                }
            },
            // Waiting work is recorded the way a batch's is (its signals with it).
            Err(err @ JobError::Wait { .. }) => {
                let f = failed_job(job, &err, now);
                let at = f.retry_at.unwrap_or(now);
                match self.store.finish_jobs(&self.opts.id, &[], &[f], now).await {
                    Ok(()) => Outcome::Waiting { at },
                    Err(e) => {
                        tracing::error!(job = %job.id, error = %e, "cannot record a waiting job");
                        Outcome::LeaseLost
                    }
                }
            }
            Err(err) => {
                let retry_at = retry_at(job, &err, now);
                tracing::warn!(job = %job.id, kind = %job.kind, attempt = job.attempts, error = %err, "job failed");
                match self.store.fail_job(&job.id, &self.opts.id, &err.to_string(), retry_at, now).await {
                    Ok(true) => match retry_at {
                        Some(at) => Outcome::Retried { at },
                        None if job.interval_ms.is_some() => {
                            Outcome::Retried { at: now + job.interval_ms.unwrap_or(0) }
                        }
                        None => Outcome::Dead,
                    },
                    Ok(false) => Outcome::LeaseLost,
                    Err(e) => {
                        tracing::error!(job = %job.id, error = %e, "cannot record job failure");
                        Outcome::LeaseLost
                    }
                }
            }
        };
        crate::infra::metrics::job_finished(&job.kind, outcome.label());
        crate::infra::metrics::job_ran(&job.kind, started.elapsed());
        self.recorded(&job.kind);
        outcome
    }

    /// Extends the lease every third of its length, forever (dropped when the job ends).
    async fn heartbeat(&self, id: String) {
        let period = Duration::from_millis((self.opts.lease_ms / 3).max(10) as u64);
        loop {
            tokio::time::sleep(period).await;
            let until = self.clock.now_ms() + self.opts.lease_ms;
            if let Err(e) = self.store.extend_lease(&id, &self.opts.id, until).await {
                tracing::warn!(job = %id, error = %e, "cannot extend job lease");
            }
        }
    }

    async fn ask_due(&self, kinds: &[String]) -> Result<Vec<String>, StoreError> {
        self.questions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.store.due_kinds(kinds, self.clock.now_ms()).await
    }

    /// Waits for a slot to come free, a wake, the poll or a shutdown.
    async fn idle(&self, shutdown: &mut watch::Receiver<bool>) -> Woke {
        tokio::select! {
            _ = self.freed.notified() => Woke::Event,
            _ = self.wake.inner.notify.notified() => Woke::Event,
            _ = tokio::time::sleep(self.opts.poll) => Woke::Poll,
            _ = shutdown.changed() => Woke::Poll,
        }
    }

    /// The worker loop: claims jobs into free slots until `shutdown` turns true, then waits for running
    /// jobs to finish and releases any leases still held.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let slots = Arc::new(Semaphore::new(self.opts.concurrency));
        let batch_kinds = self.registry.batch_kinds();
        // At most this many batches of one kind at a time, so that under a steady trickle of work the
        // next batch fills up while the others run instead of many tiny batches each paying the fixed cost.
        let max_batches = (self.opts.concurrency / 2).max(1);
        let in_flight: HashMap<String, Arc<std::sync::atomic::AtomicUsize>> =
            batch_kinds.iter().map(|k| (k.clone(), Arc::default())).collect();
        let single = self.registry.single_kinds();
        let all_kinds: Vec<String> = batch_kinds.iter().chain(&single).cloned().collect();
        // The last answer to "which kinds are due" and when it was asked (see DUE_REUSE).
        let mut known: Option<(Vec<String>, std::time::Instant)> = None;
        loop {
            if *shutdown.borrow() {
                break;
            }
            // Every slot busy: nothing could be claimed, so wait for one before asking what is due. The
            // poll does not make the answer stale here: when a slot comes free, the answer's age decides
            // ([`DUE_REUSE`]); a poll shorter than that would otherwise have every freed slot ask again.
            if slots.available_permits() == 0 {
                self.idle(&mut shutdown).await;
                continue;
            }
            let (woken, unnamed) = self.wake.take();
            if unnamed {
                known = None;
            }
            let mut claimed = 0;
            // One read says which kinds have work, so an idle kind costs no claim transaction. On error
            // every kind is tried. A fresh answer is reused, with the kinds woken since added.
            let mut due = match known.take().filter(|(_, at)| at.elapsed() < self.opts.due_reuse) {
                Some((mut d, at)) => {
                    for k in woken {
                        if !d.contains(&k) && all_kinds.contains(&k) {
                            d.push(k);
                        }
                    }
                    (d, at)
                }
                None => match self.ask_due(&all_kinds).await {
                    Ok(d) => (d, std::time::Instant::now()),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read which job kinds are due");
                        (all_kinds.clone(), std::time::Instant::now())
                    }
                },
            };
            let mut drained: Vec<String> = Vec::new();
            // Batch kinds first: one slot runs a whole batch.
            for kind in batch_kinds.iter().filter(|k| due.0.contains(k)) {
                let Some((max, _)) = self.registry.batch.get(kind) else { continue };
                if slots.available_permits() == 0 {
                    break;
                }
                let Some(running) = in_flight.get(kind).cloned() else { continue };
                if running.load(std::sync::atomic::Ordering::SeqCst) >= max_batches {
                    continue;
                }
                match self
                    .store
                    .claim_kinds(
                        &self.opts.id,
                        self.clock.now_ms(),
                        self.opts.lease_ms,
                        *max,
                        std::slice::from_ref(kind),
                    )
                    .await
                {
                    Ok(jobs) if !jobs.is_empty() => {
                        claimed += jobs.len();
                        if jobs.len() < *max {
                            drained.push(kind.clone());
                        }
                        let Ok(permit) = slots.clone().acquire_owned().await else { break };
                        let this = self.clone();
                        let kind = kind.clone();
                        running.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::spawn(async move {
                            this.execute_batch(&kind, jobs).await;
                            running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                            drop(permit);
                            // a slot is free: look for more work now rather than at the next poll
                            this.freed.notify_one();
                        });
                    }
                    Ok(_) => drained.push(kind.clone()),
                    Err(e) => tracing::warn!(error = %e, "cannot claim jobs"),
                }
            }
            let free = slots.available_permits();
            let single: Vec<String> = single.iter().filter(|k| due.0.contains(k)).cloned().collect();
            if free > 0 && !single.is_empty() {
                match self
                    .store
                    .claim_kinds(&self.opts.id, self.clock.now_ms(), self.opts.lease_ms, free, &single)
                    .await
                {
                    Ok(jobs) => {
                        claimed += jobs.len();
                        // Short of what it asked: every one of these kinds ran out.
                        if jobs.len() < free {
                            drained.extend(single.iter().cloned());
                        }
                        for job in jobs {
                            let Ok(permit) = slots.clone().acquire_owned().await else { break };
                            let this = self.clone();
                            tokio::spawn(async move {
                                this.execute(&job).await;
                                drop(permit);
                                this.freed.notify_one();
                            });
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot claim jobs"),
                }
            }
            due.0.retain(|k| !drained.contains(k));
            // Nothing left that is known to be due: wait for a slot, a wake or the poll.
            let wait = claimed == 0 || slots.available_permits() == 0 || due.0.is_empty();
            known = Some(due);
            if wait && matches!(self.idle(&mut shutdown).await, Woke::Poll) && slots.available_permits() > 0 {
                known = None;
            }
        }
        // Finish running jobs: wait until every slot is free again.
        let _all = slots.acquire_many(self.opts.concurrency as u32).await;
        if let Err(e) = self.store.release_leases(&self.opts.id, self.clock.now_ms()).await {
            tracing::warn!(error = %e, "cannot release job leases");
        }
        tracing::info!(worker = %self.opts.id, "job worker stopped");
    }
}

/// Ensures the recurring job of every kind the registry declares with [`Registry::every`] (at start-up;
/// each kind keeps one queued job however many processes start).
pub async fn ensure_recurring(store: &Store, registry: &Registry, now: i64) -> Result<(), StoreError> {
    for (kind, interval_ms) in registry.recurring() {
        store.ensure_recurring(kind, interval_ms, now).await?;
    }
    Ok(())
}

pub const PURGE_JOBS: &str = "jobs.purge";

/// Handlers of the host's own job kinds (`App::from_store` adds those that need the configuration, the
/// project purge among them).
pub fn builtin_registry() -> Registry {
    let mut r = Registry::new();
    r.every(PURGE_JOBS, 3_600_000);
    r.register(PURGE_JOBS, |ctx: JobContext| async move {
        // Finished jobs and expired idempotency keys go with the retention purge, in batches
        // (`services::retention`).
        let now = ctx.clock.now_ms();
        ctx.store.purge_job_waits().await.map_err(|e| e.to_string())?;
        ctx.store.purge_revoked_sessions(now).await.map_err(|e| e.to_string())?;
        ctx.store.purge_throttles(now).await.map_err(|e| e.to_string())?;
        ctx.store.purge_seen_notifications(now).await.map_err(|e| e.to_string())
    });
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_makes_a_job_wait_uncounted_and_other_failures_stay_failures() {
        let full = JobError::Retry("database error: No space left on device (os error 28)".into());
        match paused_on_full_disk(full, 1_000) {
            JobError::Wait { until, signals, .. } => assert_eq!((until, signals.len()), (1_000 + STORAGE_PAUSE_MS, 0)),
            other => panic!("{other:?}"),
        }
        let other = JobError::Retry("the relay said 451".into());
        assert_eq!(paused_on_full_disk(other.clone(), 1_000), other);
        let fatal = JobError::Fatal("no space left on device".into());
        assert_eq!(paused_on_full_disk(fatal.clone(), 1_000), fatal, "a payload that never parses stays fatal");
    }

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff_ms(1), 1000);
        assert_eq!(backoff_ms(2), 2000);
        assert_eq!(backoff_ms(3), 4000);
        assert_eq!(backoff_ms(40), 3_600_000);
    }
}
