//! Group commit: many concurrent requests written in one transaction, so the database's cost per
//! transaction is shared by the batch. `/v1/track` upserts ([`crate::services::ingest`]) and `/v1/send` acceptance
//! ([`crate::services::accept`]) use it; CSV import and workflow enrollment are meant to.
//!
//! A [`GroupCommit`] runs a few lanes (tasks). A request goes to the lane its key hashes to (a contact's
//! email, say, so requests for one contact never race each other); a lane takes everything waiting, and
//! under load (its previous batch held several requests) lingers a moment for more, up to a maximum. The
//! batch is split by project, and each project's part goes to [`Batch::together`], which writes it in
//! one transaction. When that fails because a row changed meanwhile (busy or conflict), it runs once
//! more on fresh reads; when it fails again, each request runs alone through [`Batch::one`], so nothing
//! is lost or applied twice. A lone request goes straight to [`Batch::one`]. A panic while a batch runs
//! fails that batch's requests (their answers are dropped) and the lane goes on.
//!
//! Each batch is counted in the metrics by engine name: batches, requests, fallbacks and time spent.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hasher;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::{mpsc, oneshot};

use crate::store::StoreError;

/// The answers of a batch written together: one per request, or nothing written.
pub type Answers<O, E> = Result<Vec<Result<O, E>>, StoreError>;

/// What a group-commit user writes: one project's requests together, or one request alone.
pub trait Batch: Send + Sync + 'static {
    /// One request, owned so a lane can take it.
    type Request: Send + Sync + 'static;
    /// What a request gets back when it is written.
    type Output: Send + 'static;
    /// A request's own failure (a store failure converts into it).
    type Error: From<StoreError> + Send + 'static;

    /// The project a request belongs to; one transaction never mixes projects.
    fn project(request: &Self::Request) -> &str;

    /// Feeds what chooses a request's lane to `state` (say, its project and contact email, so requests
    /// for one contact never race each other on two lanes).
    fn lane_key<H: Hasher>(request: &Self::Request, state: &mut H);

    /// Writes the requests of one project in one transaction, in order, and answers each (a request can
    /// fail alone, e.g. when its message cannot be rendered, without failing the others). An `Err` means
    /// nothing was written.
    fn together(
        &self,
        project: &str,
        requests: &[Arc<Self::Request>],
    ) -> impl Future<Output = Answers<Self::Output, Self::Error>> + Send;

    /// Writes one request on its own, retrying its own conflicts.
    fn one(&self, request: &Arc<Self::Request>) -> impl Future<Output = Result<Self::Output, Self::Error>> + Send;
}

/// The shape of a group-commit engine.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Name in logs and metrics (`engine="<name>"`).
    pub name: &'static str,
    /// Parallel lanes (at least one).
    pub lanes: usize,
    /// Most requests one batch takes.
    pub max_batch: usize,
    /// How long a lane under load waits for more requests before writing.
    pub linger: Duration,
}

/// Requests queued on a lane at most; a full lane makes `submit` wait (back-pressure).
const LANE_QUEUE: usize = 4096;

struct Pending<B: Batch> {
    request: Arc<B::Request>,
    reply: oneshot::Sender<Result<B::Output, B::Error>>,
}

/// A running group-commit engine for one kind of request.
pub struct GroupCommit<B: Batch> {
    lanes: Vec<mpsc::Sender<Pending<B>>>,
    name: &'static str,
}

impl<B: Batch> GroupCommit<B> {
    /// Starts the lanes on the current runtime.
    pub fn start(batch: B, options: Options) -> GroupCommit<B> {
        let batch = Arc::new(batch);
        let lanes = (0..options.lanes.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::channel::<Pending<B>>(LANE_QUEUE);
                tokio::spawn(lane(rx, batch.clone(), options));
                tx
            })
            .collect();
        GroupCommit { lanes, name: options.name }
    }

    /// Queues a request on its lane ([`Batch::lane_key`]) and waits for its outcome.
    pub async fn submit(&self, request: B::Request) -> Result<B::Output, B::Error> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        B::lane_key(&request, &mut h);
        let lane = &self.lanes[(h.finish() % self.lanes.len() as u64) as usize];
        let (reply, rx) = oneshot::channel();
        if lane.send(Pending { request: Arc::new(request), reply }).await.is_err() {
            return Err(StoreError::Db(format!("the {} lane stopped", self.name)).into());
        }
        match rx.await {
            Ok(outcome) => outcome,
            Err(_) => Err(StoreError::Db(format!("the {} lane dropped the request", self.name)).into()),
        }
    }
}

async fn lane<B: Batch>(mut rx: mpsc::Receiver<Pending<B>>, batch: Arc<B>, options: Options) {
    let max = options.max_batch.max(1);
    let mut last_size = 0;
    while let Some(first) = rx.recv().await {
        let mut waiting = vec![first];
        drain(&mut rx, &mut waiting, max);
        // Under load (the previous batch was not a lone request), give concurrent requests a moment to
        // join: larger batches share the per-transaction cost. With no load there is no wait.
        if last_size >= 4 && waiting.len() < max / 2 {
            tokio::time::sleep(options.linger).await;
            drain(&mut rx, &mut waiting, max);
        }
        last_size = waiting.len();
        let run = std::panic::AssertUnwindSafe(process(waiting, &*batch, options.name)).catch_unwind();
        if run.await.is_err() {
            tracing::error!(engine = options.name, "a group-commit batch panicked");
        }
    }
}

fn drain<B: Batch>(rx: &mut mpsc::Receiver<Pending<B>>, waiting: &mut Vec<Pending<B>>, max: usize) {
    while waiting.len() < max {
        match rx.try_recv() {
            Ok(p) => waiting.push(p),
            Err(_) => break,
        }
    }
}

async fn process<B: Batch>(waiting: Vec<Pending<B>>, batch: &B, name: &'static str) {
    let mut by_project: HashMap<String, Vec<Pending<B>>> = HashMap::new();
    for p in waiting {
        by_project.entry(B::project(&p.request).to_string()).or_default().push(p);
    }
    for (project, items) in by_project {
        let started = Instant::now();
        let size = items.len();
        let mut fell_back = false;
        if size > 1 {
            let requests: Vec<Arc<B::Request>> = items.iter().map(|p| p.request.clone()).collect();
            let mut outcome = batch.together(&project, &requests).await;
            if matches!(outcome, Err(StoreError::Busy(_) | StoreError::Conflict(_))) {
                outcome = batch.together(&project, &requests).await;
            }
            match outcome {
                Ok(results) if results.len() == size => {
                    for (p, r) in items.into_iter().zip(results) {
                        let _ = p.reply.send(r);
                    }
                    crate::infra::metrics::group_commit(name, size, false, started.elapsed());
                    continue;
                }
                Ok(results) => {
                    tracing::error!(engine = name, size, answers = results.len(), "a batch answered the wrong count")
                }
                Err(e) => tracing::debug!(engine = name, error = %e, size, "batch write failed; one at a time"),
            }
            fell_back = true;
        }
        for p in items {
            let r = batch.one(&p.request).await;
            let _ = p.reply.send(r);
        }
        crate::infra::metrics::group_commit(name, size, fell_back, started.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Records what it was asked to write; fails `together` as often as told.
    #[derive(Default)]
    struct Recorder {
        together: Mutex<Vec<(String, Vec<u32>)>>,
        alone: Mutex<Vec<u32>>,
        fail_together: AtomicUsize,
    }

    struct Rec(Arc<Recorder>);

    impl Batch for Rec {
        type Request = (String, u32);
        type Output = u32;
        type Error = StoreError;
        fn project(r: &(String, u32)) -> &str {
            &r.0
        }
        fn lane_key<H: Hasher>(_: &(String, u32), _: &mut H) {}
        async fn together(
            &self,
            project: &str,
            requests: &[Arc<(String, u32)>],
        ) -> Result<Vec<Result<u32, StoreError>>, StoreError> {
            if self.0.fail_together.load(Ordering::SeqCst) > 0 {
                self.0.fail_together.fetch_sub(1, Ordering::SeqCst);
                return Err(StoreError::Busy("changed meanwhile".into()));
            }
            let values: Vec<u32> = requests.iter().map(|r| r.1).collect();
            self.0.together.lock().unwrap().push((project.to_string(), values.clone()));
            Ok(values
                .into_iter()
                .map(|v| if v == 99 { Err(StoreError::Db("unlucky".into())) } else { Ok(v * 2) })
                .collect())
        }
        async fn one(&self, r: &Arc<(String, u32)>) -> Result<u32, StoreError> {
            self.0.alone.lock().unwrap().push(r.1);
            Ok(r.1 * 2)
        }
    }

    fn options() -> Options {
        Options { name: "test", lanes: 1, max_batch: 64, linger: Duration::from_millis(1) }
    }

    /// Submits `requests` at once and returns their answers in order.
    async fn burst(engine: &Arc<GroupCommit<Rec>>, requests: Vec<(String, u32)>) -> Vec<Result<u32, StoreError>> {
        let tasks: Vec<_> = requests
            .into_iter()
            .map(|r| {
                let engine = engine.clone();
                tokio::spawn(async move { engine.submit(r).await })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    #[tokio::test(flavor = "current_thread")]
    async fn concurrent_requests_are_written_together_per_project_and_answered_each() {
        let rec = Arc::new(Recorder::default());
        let engine = Arc::new(GroupCommit::start(Rec(rec.clone()), options()));
        let requests: Vec<(String, u32)> =
            (0..20).map(|i| (if i % 2 == 0 { "a" } else { "b" }.to_string(), i)).chain([("a".into(), 99)]).collect();
        let answers = burst(&engine, requests).await;
        for (i, a) in answers.iter().take(20).enumerate() {
            assert_eq!(a.as_ref().ok(), Some(&(i as u32 * 2)));
        }
        assert!(answers[20].is_err(), "a request that fails alone gets its own error");
        let together = rec.together.lock().unwrap().clone();
        assert!(
            together.iter().all(|(p, vs)| vs.iter().all(|v| (v % 2 == 0 || *v == 99) == (p == "a"))),
            "{together:?}"
        );
        assert!(together.iter().any(|(_, vs)| vs.len() > 1), "requests were grouped: {together:?}");
        assert!(rec.alone.lock().unwrap().len() < 21, "not every request ran alone");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_batch_that_keeps_failing_is_retried_once_then_runs_one_at_a_time() {
        let rec = Arc::new(Recorder::default());
        rec.fail_together.store(1, Ordering::SeqCst);
        let engine = Arc::new(GroupCommit::start(Rec(rec.clone()), options()));
        let answers = burst(&engine, (1..=5).map(|i| ("p".to_string(), i)).collect()).await;
        assert!(answers.iter().all(|a| a.is_ok()));
        assert!(rec.alone.lock().unwrap().is_empty(), "one failure is retried together");

        rec.fail_together.store(2, Ordering::SeqCst);
        rec.together.lock().unwrap().clear();
        let answers = burst(&engine, (1..=5).map(|i| ("p".to_string(), i)).collect()).await;
        assert_eq!(answers.iter().map(|a| *a.as_ref().unwrap()).collect::<Vec<_>>(), vec![2, 4, 6, 8, 10]);
        let alone = rec.alone.lock().unwrap().clone();
        let together: usize = rec.together.lock().unwrap().iter().map(|(_, v)| v.len()).sum();
        assert_eq!(alone.len() + together, 5, "each request written exactly once: alone {alone:?}");
        assert!(!alone.is_empty(), "two failures fall back to one at a time");
    }
}
