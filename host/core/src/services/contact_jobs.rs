//! Bulk changes of contacts (docs/behaviour.md#bulk-changes-and-import): subscribe, unsubscribe or
//! delete up to 1,000 contacts by id as a job on the durable queue, and the job's status. The work goes
//! in chunks, each committed with the job's progress, so a crash costs at most the chunk in hand and
//! never counts or changes anything twice.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashSet;

use serde_json::{Map, json};

use crate::context::Context;
use crate::domain::status::ContactJobState;
use crate::error::Error;
use crate::infra::jobs::{JobContext, JobError, Registry};
use crate::store::contact_jobs::{ChunkWrite, ContactJobRow, Flip, NewContactJob};
use crate::store::events::Event;
use crate::store::jobs::NewJob;
use crate::store::{Store, StoreError};

/// The queue job that runs a bulk change.
pub const BULK_JOB: &str = "contacts.bulk";
/// Most contact ids one bulk request takes.
pub const MAX_BULK_IDS: usize = 1000;
/// Contacts changed per transaction.
const CHUNK: usize = 100;
/// Attempts of a bulk job before it is FAILED.
const ATTEMPTS: i64 = 5;
/// Reads of a chunk whose contacts keep changing under it before the attempt fails.
const STALE_TRIES: usize = 16;

/// What a bulk request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkOp {
    Subscribe,
    Unsubscribe,
    Delete,
}

impl BulkOp {
    pub const fn kind(self) -> &'static str {
        match self {
            BulkOp::Subscribe => "bulk-subscribe",
            BulkOp::Unsubscribe => "bulk-unsubscribe",
            BulkOp::Delete => "bulk-delete",
        }
    }

    fn from_kind(kind: &str) -> Option<BulkOp> {
        [BulkOp::Subscribe, BulkOp::Unsubscribe, BulkOp::Delete].into_iter().find(|op| op.kind() == kind)
    }

    /// The counters of its result, in the order they are shown.
    pub const fn counters(self) -> &'static [&'static str] {
        match self {
            BulkOp::Subscribe | BulkOp::Unsubscribe => &["updated", "unchanged", "notFound"],
            BulkOp::Delete => &["deleted", "notFound"],
        }
    }
}

fn job_not_found(id: &str) -> Error {
    Error::not_found("JOB_NOT_FOUND", format!("Bulk job {id} not found"))
}

/// Queues a bulk change of these contacts (duplicates counted once, 1 to [`MAX_BULK_IDS`]); answers the
/// job's id.
pub async fn start(st: &Context, project: &str, op: BulkOp, ids: Vec<String>) -> Result<String, Error> {
    let mut seen = HashSet::new();
    let ids: Vec<String> = ids.into_iter().filter(|i| seen.insert(i.clone())).collect();
    let now = st.clock.now_ms();
    let id = uuid::Uuid::now_v7().to_string();
    let mut job = NewJob::new(BULK_JOB, json!({ "id": id }), now);
    job.max_attempts = ATTEMPTS;
    let new = NewContactJob {
        id: &id,
        project,
        kind: op.kind(),
        input: &ids,
        total: ids.len() as i64,
        counters: op.counters(),
        options: None,
        file: None,
    };
    st.store.create_contact_job(&new, &job, now).await?;
    st.job_wake.kind(BULK_JOB);
    Ok(id)
}

/// A bulk job of the project (404 for another project's, or for an import job).
pub async fn get(st: &Context, project: &str, id: &str) -> Result<ContactJobRow, Error> {
    match st.store.contact_job(project, id).await? {
        Some(row) if BulkOp::from_kind(&row.kind).is_some() => Ok(row),
        _ => Err(job_not_found(id)),
    }
}

/// Registers the job that runs bulk changes.
pub fn register(registry: &mut Registry) {
    register_job(registry, BULK_JOB, ATTEMPTS, |store, id, now| async move { run(&store, &id, now).await });
}

/// Registers a contact job's queue kind: `run(store, contact job id, now)` does the work from where the
/// job stands; the last of `attempts` failed attempts leaves the contact job FAILED with the error.
/// A contact job's payload: the id of its `contact_job` row.
#[derive(serde::Deserialize)]
struct JobPayload {
    id: String,
}

pub(crate) fn register_job<F, Fut>(registry: &mut Registry, kind: &str, attempts: i64, run: F)
where
    F: Fn(Store, String, i64) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = Result<(), StoreError>> + Send + 'static,
{
    registry.register(kind, move |ctx: JobContext| {
        let run = run.clone();
        async move {
            let JobPayload { id } = ctx.payload()?;
            match run(ctx.store.clone(), id.clone(), ctx.clock.now_ms()).await {
                Ok(()) => Ok(()),
                Err(e) => {
                    let e = e.to_string();
                    if ctx.attempt >= attempts {
                        let now = ctx.clock.now_ms();
                        ctx.store.set_contact_job_state(&id, ContactJobState::Failed, Some(&e), now).await.ok();
                    }
                    Err(JobError::Retry(e))
                }
            }
        }
    });
}

/// Runs a bulk job from where it stands.
async fn run(store: &Store, id: &str, now: i64) -> Result<(), StoreError> {
    let Some((row, input)) = store.contact_job_input(id).await? else { return Ok(()) };
    let Some(op) = BulkOp::from_kind(&row.kind) else { return Ok(()) };
    if matches!(row.state, ContactJobState::Completed | ContactJobState::Failed) {
        return Ok(());
    }
    if row.state == ContactJobState::Queued {
        store.set_contact_job_state(id, ContactJobState::Active, None, now).await?;
    }
    let mut from = usize::try_from(row.done).unwrap_or(0).min(input.len());
    while from < input.len() {
        let to = (from + CHUNK).min(input.len());
        let chunk = &input[from..to];
        let span = (from as i64, to as i64);
        match op {
            BulkOp::Delete => {
                store.bulk_delete_chunk(id, &row.project, span, chunk, now).await?;
            }
            BulkOp::Subscribe | BulkOp::Unsubscribe => {
                subscription_chunk(store, id, &row.project, span, chunk, op == BulkOp::Subscribe, now).await?;
            }
        }
        from = to;
    }
    store.set_contact_job_state(id, ContactJobState::Completed, None, now).await
}

/// One chunk of a subscription change: contacts whose subscription differs flip (with their
/// `contact.subscribed` / `contact.unsubscribed` event), the others count as unchanged, ids the project
/// does not have as not found.
async fn subscription_chunk(
    store: &Store,
    job: &str,
    project: &str,
    span: (i64, i64),
    ids: &[String],
    subscribed: bool,
    now: i64,
) -> Result<(), StoreError> {
    let event = if subscribed { "contact.subscribed" } else { "contact.unsubscribed" };
    for _ in 0..STALE_TRIES {
        let contacts = store.contacts_by_ids(project, ids).await?;
        let flips: Vec<Flip> = contacts
            .iter()
            .filter(|c| c.subscribed != subscribed)
            .map(|c| Flip { id: c.id.clone(), version: c.version })
            .collect();
        let events: Vec<Event> =
            flips.iter().map(|f| Event::new(project, &f.id, event, Map::new(), "system", now)).collect();
        let found = contacts.len() as i64;
        let add = [
            ("updated", flips.len() as i64),
            ("unchanged", found - flips.len() as i64),
            ("notFound", ids.len() as i64 - found),
        ];
        match store.bulk_subscription_chunk(job, project, span, &flips, subscribed, &events, &add, now).await? {
            ChunkWrite::Done | ChunkWrite::Moved => return Ok(()),
            ChunkWrite::Stale => continue,
        }
    }
    Err(StoreError::Busy("the contacts of a bulk chunk kept changing".into()))
}
