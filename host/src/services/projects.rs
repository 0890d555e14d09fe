//! Projects: their onboarding checklist and sending standing (docs/behaviour.md#project-setup-and-security),
//! and deleting one. `DELETE /users/@me/projects/:id` removes the project row, its memberships and its
//! sender domains at once (its keys stop working, its domain names are free) and queues a purge job in
//! the same transaction; the job deletes everything else the project owns in batches (emails with their
//! bodies, contacts, events, segments and memberships, campaigns, templates, idempotency keys) and gives
//! its queued jobs up. Deliveries check that the project still exists, so nothing queued is sent after
//! the delete answers.
//!
//! Must not import: salvo, surrealdb.

use serde_json::json;

use crate::domain::status::ProjectStanding;

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

/// A project's onboarding checklist (docs/behaviour.md#project-setup-and-security).
pub async fn setup_state(
    st: &crate::state::AppState,
    project: &str,
) -> Result<crate::store::project_state::SetupState, crate::error::ApiError> {
    Ok(st.store.setup_state(project).await?)
}

/// Sending figures of one window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Window {
    pub sent: i64,
    pub bounced: i64,
    pub complained: i64,
}

impl Window {
    pub fn bounce_rate(&self) -> f64 {
        crate::domain::activity::rate(self.bounced, self.sent)
    }

    pub fn complaint_rate(&self) -> f64 {
        crate::domain::activity::rate(self.complained, self.sent)
    }
}

/// A project's bounce and complaint figures over the last 7 and 30 days (from the analytics counters,
/// whole UTC hours) and its standing.
pub struct Security {
    pub last7: Window,
    pub last30: Window,
    pub standing: ProjectStanding,
}

pub async fn security(st: &crate::state::AppState, project: &str) -> Result<Security, crate::error::ApiError> {
    use crate::domain::activity::{DAY_MS, HOUR_MS, bucket};
    let now = st.clock.now_ms();
    let to = bucket(now, HOUR_MS) + HOUR_MS;
    let hours = st.store.hour_counts(project, to - 30 * DAY_MS, to).await?;
    let (mut last7, mut last30) = (Window::default(), Window::default());
    for (hour, c) in hours {
        let get = |m: &str| c.get(m).copied().unwrap_or(0);
        let w = Window { sent: get("sent"), bounced: get("bounced"), complained: get("complained") };
        for (into, since) in [(&mut last30, to - 30 * DAY_MS), (&mut last7, to - 7 * DAY_MS)] {
            if hour >= since {
                into.sent += w.sent;
                into.bounced += w.bounced;
                into.complained += w.complained;
            }
        }
    }
    let c = &st.config;
    let warning = last7.bounce_rate() >= c.suspend_bounce_percent / 2.0
        || last7.complaint_rate() >= c.suspend_complaint_percent / 2.0;
    let standing = if warning { ProjectStanding::Warning } else { ProjectStanding::Active };
    Ok(Security { last7, last30, standing })
}
