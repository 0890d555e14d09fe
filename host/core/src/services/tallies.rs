//! Totals of a project's contacts and events without walking them (docs/behaviour.md#contacts-and-data):
//! the count taken at a moment plus the rows created since. The first total of a scope counts; a count
//! older than ten minutes is taken again by a job.
//!
//! Must not import: salvo, surrealdb.

use serde_json::json;

use crate::context::Context;
use crate::error::Error;
use crate::infra::jobs::{JobContext, JobError, Registry};
use crate::store::StoreError;
use crate::store::jobs::NewJob;
use crate::store::tallies::Scope;

/// The job that counts a scope again.
pub const RECOUNT_JOB: &str = "tallies.recount";
/// How old a count may grow before a read asks for a new one.
pub const RECOUNT_AFTER_MS: i64 = 600_000;
/// How far before its start a count reaches: rows written by transactions still running when it starts
/// are counted live instead (their creation time is after this margin).
const RECOUNT_MARGIN_MS: i64 = 5_000;

/// How many rows the scope holds. A count is read, never refused, when the disk is full: the recount it
/// would ask for is left for a later read, and a first count is taken without being kept.
pub async fn count(st: &Context, project: &str, scope: Scope<'_>) -> Result<i64, Error> {
    let now = st.clock.now_ms();
    match st.store.tally(project, scope).await? {
        Some((n, at)) => {
            if now - at > RECOUNT_AFTER_MS {
                let mut job = NewJob::new(RECOUNT_JOB, json!({ "project": project, "scope": scope.key() }), now);
                // One recount per count: the next count has another moment.
                job.unique_key = Some(format!("{RECOUNT_JOB}:{project}:{}:{at}", scope.key()));
                job.max_attempts = 3;
                match st.store.enqueue(&job, now).await {
                    Ok(_) => st.job_wake.kind(RECOUNT_JOB),
                    Err(StoreError::Storage(e)) => tracing::warn!(error = %e, "no recount while the disk is full"),
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(n)
        }
        None => match st.store.recount(project, scope, now - RECOUNT_MARGIN_MS).await {
            Ok(_) => Ok(st.store.tally(project, scope).await?.map(|(n, _)| n).unwrap_or(0)),
            Err(StoreError::Storage(_)) => Ok(st.store.count_unkept(project, scope).await?),
            Err(e) => Err(e.into()),
        },
    }
}

/// The scope a key names (`contacts`, `events`, `event:<name>`).
fn scope_of(key: &str) -> Option<Scope<'_>> {
    match key {
        "contacts" => Some(Scope::Contacts),
        "events" => Some(Scope::Events),
        k => k.strip_prefix("event:").map(Scope::EventName),
    }
}

/// Registers the job that counts a scope again.
pub fn register(registry: &mut Registry) {
    registry.register(RECOUNT_JOB, |ctx: JobContext| async move {
        #[derive(serde::Deserialize)]
        struct Payload {
            project: String,
            scope: String,
        }
        let p: Payload = ctx.payload()?;
        let scope = scope_of(&p.scope).ok_or_else(|| JobError::Fatal(format!("unknown scope {:?}", p.scope)))?;
        ctx.store.recount(&p.project, scope, ctx.clock.now_ms() - RECOUNT_MARGIN_MS).await?;
        Ok::<(), JobError>(())
    });
}
