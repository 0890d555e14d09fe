//! Deleting a project. `DELETE /users/@me/projects/:id` removes the project row, its memberships and its
//! sender domains at once (its keys stop working, its domain names are free) and queues a purge job in
//! the same transaction; the job deletes everything else the project owns in batches (emails with their
//! bodies, contacts, events, segments and memberships, campaigns, templates, idempotency keys) and gives
//! its queued jobs up. Deliveries check that the project still exists, so nothing queued is sent after
//! the delete answers.
//!
//! Must not import: salvo, surrealdb.

use serde_json::json;

use crate::infra::jobs::{JobContext, Registry};
use crate::store::jobs::NewJob;

pub const PURGE_PROJECT_JOB: &str = "project.purge";

/// Rows one purge transaction deletes.
const PURGE_BATCH: usize = 2_000;

/// The job that purges a deleted project's data.
pub fn purge_job(project: &str, now: i64) -> NewJob {
    let mut job = NewJob::new(PURGE_PROJECT_JOB, json!({ "project": project }), now);
    job.unique_key = Some(format!("{PURGE_PROJECT_JOB}:{project}"));
    job.max_attempts = 20;
    job
}

pub fn register(registry: &mut Registry) {
    registry.register(PURGE_PROJECT_JOB, |ctx: JobContext| async move {
        let Some(project) = ctx.payload["project"].as_str().map(str::to_string) else {
            return Err("a purge job without a project".into());
        };
        // Batch after batch until nothing is left; the worker keeps the lease alive meanwhile, and a
        // retry after a crash goes on from what is left.
        loop {
            let n = ctx
                .store
                .purge_project_batch(&project, PURGE_BATCH, ctx.clock.now_ms())
                .await
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Ok(());
            }
        }
    });
}
