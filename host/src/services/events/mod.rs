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

use crate::infra::jobs::{JobContext, Registry};
use crate::store::events::Event;

pub type SubscriberFuture<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

pub trait Subscriber: Send + Sync + 'static {
    fn name(&self) -> &str;
    /// Handles one event. Must tolerate seeing the same event again.
    fn handle<'a>(&'a self, event: &'a Event) -> SubscriberFuture<'a>;
}

#[derive(Default)]
pub struct EventBus {
    subscribers: RwLock<Vec<Arc<dyn Subscriber>>>,
}

pub const DISPATCH_JOB: &str = "events.dispatch";
const BATCH: usize = 500;

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
            // Rows fully handed out are deleted together once the batch is through (or before a failure
            // is reported): one write per batch, not per row. A crash before that write hands those
            // events out again (subscribers see an event at least once).
            let mut done_rows = Vec::new();
            for entry in &batch {
                let mut failure = None;
                let mut done = 0;
                'events: for event in &entry.events {
                    for s in &subs {
                        if let Err(e) = s.handle(event).await {
                            failure = Some(format!("subscriber {} failed on event {}: {e}", s.name(), event.id));
                            break 'events;
                        }
                    }
                    done += 1;
                }
                total += done;
                // The ids not handed out: from the failed event on (events deleted since are skipped).
                let left: Vec<String> = match failure {
                    None => Vec::new(),
                    Some(_) => {
                        let from = entry.events.get(done).map(|e| e.id.as_str());
                        let at = from.and_then(|f| entry.ids.iter().position(|i| i == f)).unwrap_or(0);
                        entry.ids[at..].to_vec()
                    }
                };
                match failure {
                    None => done_rows.push(entry.id.clone()),
                    Some(f) => {
                        ctx.store.outbox_done(&done_rows).await.map_err(|e| e.to_string())?;
                        ctx.store.outbox_progress(&entry.id, &left).await.map_err(|e| e.to_string())?;
                        return Err(f);
                    }
                }
            }
            ctx.store.outbox_done(&done_rows).await.map_err(|e| e.to_string())?;
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
