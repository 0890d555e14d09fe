//! The in-process event stream. Every stored event, tracked or emitted, is handed to each subscriber
//! (the workflow engine subscribes) by a recurring job on the durable queue that reads the outbox
//! (`outbox`: one row per transaction that stored events, listing them, deleted once dispatched). A
//! subscriber that fails makes the job retry, and a crash between storing and dispatching only delays
//! delivery: at-least-once, and subscribers de-duplicate by event id.
//!
//! Must not import: salvo, surrealdb.

pub mod history;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use crate::domain::activity::Tally;
use crate::infra::jobs::{JobContext, Registry};
use crate::store::events::Event;

pub type SubscriberFuture<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;
/// A batch's outcome: on failure, how many events were handled before it, and why.
pub type BatchFuture<'a> = Pin<Box<dyn Future<Output = Result<(), (usize, String)>> + Send + 'a>>;

pub trait Subscriber: Send + Sync + 'static {
    fn name(&self) -> &str;
    /// Handles one event. Must tolerate seeing the same event again.
    fn handle<'a>(&'a self, event: &'a Event) -> SubscriberFuture<'a>;

    /// Handles events in order; a failure says how many of them (from the first) were handled before
    /// it, and the stream hands out the rest again later. By default one at a time.
    fn handle_batch<'a>(&'a self, events: &'a [Event]) -> BatchFuture<'a> {
        Box::pin(async move {
            for (i, e) in events.iter().enumerate() {
                self.handle(e).await.map_err(|m| (i, m))?;
            }
            Ok(())
        })
    }
}

#[derive(Default)]
pub struct EventBus {
    subscribers: RwLock<Vec<Arc<dyn Subscriber>>>,
}

pub const DISPATCH_JOB: &str = "events.dispatch";
const BATCH: usize = 500;
/// Pause before bringing a dispatch forward.
const HURRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(5);
/// Tries to bring a dispatch forward while one runs: each waits for a dispatch of this process to end,
/// or [`HURRY_SPACING`] for one of another process.
const HURRY_TRIES: usize = 20;
/// Least time between two dispatches brought forward. A busy process stores events in every write (a
/// campaign's delivery rounds come every few milliseconds), and each dispatch costs a claim, a read and
/// a delete: spaced like this, a burst is handed out in a few larger batches instead of hundreds of tiny
/// ones, and an event still reaches the subscribers within about this long.
const HURRY_SPACING: std::time::Duration = std::time::Duration::from_millis(100);

impl EventBus {
    pub fn subscribe(&self, s: Arc<dyn Subscriber>) {
        self.subscribers.write().unwrap_or_else(|p| p.into_inner()).push(s);
    }

    fn subscribers(&self) -> Vec<Arc<dyn Subscriber>> {
        self.subscribers.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Dispatches the outbox (one row per transaction that stored events, oldest first) in batches until
    /// it is empty or a subscriber fails; a row is deleted once every subscriber has had its events, and
    /// a failure leaves in it only the events not yet handed out. While no subscriber is registered the
    /// outbox is left as it is, so the first subscriber still gets every event.
    pub async fn dispatch(&self, ctx: &JobContext) -> Result<usize, String> {
        let mut total = 0;
        loop {
            let subs = self.subscribers();
            if subs.is_empty() {
                return Ok(total);
            }
            let batch = ctx.store.outbox(BATCH).await.map_err(|e| e.to_string())?;
            if batch.is_empty() {
                return Ok(total);
            }
            // The whole batch to each subscriber at once. A subscriber that fails says how many events
            // it handled first; the later subscribers get only those, and only those count as handed out.
            let all: Vec<crate::store::events::Event> =
                batch.iter().flat_map(|entry| entry.events.iter().cloned()).collect();
            let mut upto = all.len();
            let mut failure = None;
            for s in &subs {
                if let Err((done, e)) = s.handle_batch(&all[..upto]).await {
                    let at = all.get(done).map(|e| e.id.as_str()).unwrap_or_default();
                    failure = Some(format!("subscriber {} failed on event {at}: {e}", s.name()));
                    upto = done.min(upto);
                }
            }
            total += upto;
            // Rows fully handed out are deleted together (one write per batch, not per row); the row of
            // a failed event keeps only the events from it on (events deleted since are skipped). A crash
            // before these writes hands the events out again: subscribers see an event at least once.
            // The analytics counters count exactly the events whose outbox entries these writes remove,
            // in the same transactions: each event is counted once, however often it is handed out.
            let mut done_rows = Vec::new();
            let mut tally = Tally::default();
            let mut offset = 0;
            for entry in &batch {
                let n = entry.events.len();
                if offset + n <= upto {
                    done_rows.push(entry.id.clone());
                    entry.events.iter().for_each(|e| tally.add(&e.project, &e.name, &e.data, e.created_at));
                    offset += n;
                    continue;
                }
                ctx.store.outbox_done(&done_rows, &tally).await.map_err(|e| e.to_string())?;
                let handed = &entry.events[..upto - offset];
                let mut part = Tally::default();
                handed.iter().for_each(|e| part.add(&e.project, &e.name, &e.data, e.created_at));
                let from = entry.events.get(upto - offset).map(|e| e.id.as_str());
                let at = from.and_then(|f| entry.ids.iter().position(|i| i == f)).unwrap_or(0);
                ctx.store.outbox_progress(&entry.id, &entry.ids[at..], &part).await.map_err(|e| e.to_string())?;
                return Err(failure.unwrap_or_else(|| "a subscriber failed".into()));
            }
            ctx.store.outbox_done(&done_rows, &tally).await.map_err(|e| e.to_string())?;
            if let Some(f) = failure {
                return Err(f);
            }
        }
    }

    /// Brings the next dispatch forward whenever this process stores events, so that they are handed out
    /// within moments instead of at the next interval (the writes of [`HURRY_SPACING`] make one round).
    /// While a dispatch runs (its last read may have come before these events), it waits for that
    /// dispatch to end: `finished` (the job worker's signal that it recorded a dispatch's outcome) says
    /// so at once for a dispatch of this process, one of another process is asked about again every
    /// [`HURRY_SPACING`]; after [`HURRY_TRIES`] the regular interval takes over anyway. (Asking every few
    /// milliseconds instead cost 8% of the CPU of a busy workflow benchmark: a busy process's dispatch
    /// runs nearly all the time.) Runs until `stop` changes.
    pub async fn hurry(
        store: crate::store::Store,
        clock: crate::infra::clock::SharedClock,
        worker: crate::infra::jobs::JobWake,
        finished: Arc<tokio::sync::Notify>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let stored = store.stored_events();
        loop {
            tokio::select! {
                _ = stored.notified() => {}
                _ = stop.changed() => return,
            }
            tokio::time::sleep(HURRY_PAUSE).await;
            for _ in 0..HURRY_TRIES {
                // Registered before asking, so that a dispatch ending in between still wakes it.
                let finished = finished.notified();
                tokio::pin!(finished);
                finished.as_mut().enable();
                match store.hurry_recurring(DISPATCH_JOB, clock.now_ms()).await {
                    Ok(true) => {
                        worker.kind(DISPATCH_JOB);
                        // Events stored meanwhile are remembered by `stored` and bring the dispatch
                        // after this one forward.
                        tokio::time::sleep(HURRY_SPACING).await;
                        break;
                    }
                    Ok(false) => {
                        tokio::select! {
                            _ = &mut finished => {}
                            _ = tokio::time::sleep(HURRY_SPACING) => {}
                            _ = stop.changed() => return,
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot bring the event dispatch forward");
                        break;
                    }
                }
            }
        }
    }

    /// Registers the dispatch job, run every `every_ms`.
    pub fn register(self: &Arc<Self>, registry: &mut Registry, every_ms: i64) {
        registry.every(DISPATCH_JOB, every_ms);
        let bus = self.clone();
        registry.register(DISPATCH_JOB, move |ctx: JobContext| {
            let bus = bus.clone();
            async move { bus.dispatch(&ctx).await.map(|_| ()) }
        });
    }
}
