//! Projects: their onboarding checklist and sending standing (docs/behaviour.md#project-setup-and-security),
//! resetting one (its data deleted, the project kept), and deleting one. `DELETE /users/@me/projects/:id` removes the project row, its memberships and its
//! sender domains at once (its keys stop working, its domain names are free) and queues a purge job in
//! the same transaction; the job deletes everything else the project owns in batches (emails with their
//! bodies, contacts, events, segments and memberships, campaigns, templates, idempotency keys, upload
//! rows, then the uploaded files no other project names) and gives its queued jobs up. Deliveries check
//! that the project still exists, so nothing queued is sent after the delete answers.
//!
//! Must not import: salvo, surrealdb.

use serde_json::json;

use crate::domain::status::ProjectStanding;

use crate::infra::jobs::{JobContext, JobError, Registry};
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

pub const RESET_PROJECT_JOB: &str = "project.reset";

/// Wipes a project's data but keeps the project (`POST /users/@me/projects/:id/reset`): OWNER only;
/// `confirm` must be the project's name (422 naming `confirm`); 409 while a campaign sends. Queues the
/// job that deletes in batches what the purge of a deleted project deletes, and answers its id.
pub async fn reset(
    st: &crate::context::Context,
    id: &str,
    role: crate::store::accounts::Role,
    confirm: &str,
) -> Result<String, crate::error::Error> {
    use crate::error::Error;
    crate::services::roles::need(role, crate::store::accounts::Role::Owner, "reset a project")?;
    let project = st
        .store
        .project(id)
        .await?
        .ok_or_else(|| Error::not_found("PROJECT_NOT_FOUND", format!("Project {id} not found")))?;
    if confirm != project.name {
        return Err(Error::field(
            "confirm",
            "mismatch",
            "confirm must be the project's name exactly: the reset deletes its data for good",
            confirm.into(),
        ));
    }
    let sending = st
        .store
        .unsent_campaigns(id)
        .await?
        .iter()
        .filter(|c| c.status == crate::domain::status::CampaignStatus::Sending)
        .count();
    if sending > 0 {
        return Err(Error::Conflict(format!(
            "{sending} campaign(s) of this project are sending; cancel them (or let them finish) before a reset"
        )));
    }
    let now = st.clock.now_ms();
    let mut job = NewJob::new(RESET_PROJECT_JOB, json!({ "project": id }), now);
    job.max_attempts = 20;
    let job = st.store.enqueue(&job, now).await?;
    st.job_wake.kind(RESET_PROJECT_JOB);
    Ok(job)
}

/// Registers the purge and reset jobs; `uploads_dir` is the folder of uploaded images, whose files a
/// purge deletes once no project's upload row names them.
pub fn register(registry: &mut Registry, uploads_dir: std::path::PathBuf) {
    let dir = std::sync::Arc::new(uploads_dir);
    for kind in [PURGE_PROJECT_JOB, RESET_PROJECT_JOB] {
        // A reset deletes what a purge deletes but the project's sending record (hourly counters,
        // suspensions, billing counters); the project row, its members, keys and domains stay.
        let dir = dir.clone();
        registry.register(kind, move |ctx: JobContext| {
            let dir = dir.clone();
            async move { purge_all(&ctx, &dir).await }
        });
    }
}

/// A project job's payload.
#[derive(serde::Deserialize)]
struct ProjectPayload {
    project: String,
}

/// Deletes the data of the job's project batch after batch until nothing is left, then the uploaded
/// files no project names any more; the worker keeps the lease alive meanwhile, and a retry after a
/// crash goes on from what is left.
async fn purge_all(ctx: &JobContext, uploads_dir: &std::path::Path) -> Result<(), JobError> {
    let ProjectPayload { project } = ctx.payload()?;
    let project = project.as_str();
    let reset = ctx.kind == RESET_PROJECT_JOB;
    loop {
        let n = ctx
            .store
            .purge_project_batch(project, PURGE_BATCH, reset, ctx.clock.now_ms())
            .await
            .map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
    }
    crate::services::uploads::sweep(&ctx.store, uploads_dir, project).await?;
    // A deleted project's billing counters go too; a reset keeps them (it must not reopen a used-up
    // month's limits), as it keeps the hourly counters and suspensions the suspension check reads.
    if ctx.kind == PURGE_PROJECT_JOB {
        ctx.store.delete_usage(project).await.map_err(|e| e.to_string())?;
        ctx.store.delete_payment_records(project).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A project's onboarding checklist (docs/behaviour.md#project-setup-and-security).
pub async fn setup_state(
    st: &crate::context::Context,
    project: &str,
) -> Result<crate::store::project_state::SetupState, crate::error::Error> {
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

    /// Adds one hour's analytics counters.
    pub fn add(&mut self, hour: &std::collections::HashMap<String, i64>) {
        let get = |m: &str| hour.get(m).copied().unwrap_or(0);
        self.sent += get("sent");
        self.bounced += get("bounced");
        self.complained += get("complained");
    }
}

/// A project's bounce and complaint figures over the last 7 and 30 days (from the analytics counters,
/// whole UTC hours) and its standing.
pub struct Security {
    pub last7: Window,
    pub last30: Window,
    pub standing: ProjectStanding,
    /// The current suspension, if any.
    pub suspended: Option<crate::store::accounts::Suspended>,
    /// The latest suspensions, newest first.
    pub suspensions: Vec<crate::store::suspensions::Suspension>,
}

/// How many past suspensions the security figures list.
pub const SUSPENSIONS_LISTED: usize = 10;

pub async fn security(st: &crate::context::Context, project: &str) -> Result<Security, crate::error::Error> {
    use crate::domain::activity::{DAY_MS, HOUR_MS, bucket};
    let now = st.clock.now_ms();
    let to = bucket(now, HOUR_MS) + HOUR_MS;
    let hours = st.store.hour_counts(project, to - 30 * DAY_MS, to).await?;
    let (mut last7, mut last30) = (Window::default(), Window::default());
    for (hour, c) in hours {
        for (into, since) in [(&mut last30, to - 30 * DAY_MS), (&mut last7, to - 7 * DAY_MS)] {
            if hour >= since {
                into.add(&c);
            }
        }
    }
    let c = &st.config;
    let warning = last7.bounce_rate() >= c.suspend_bounce_percent / 2.0
        || last7.complaint_rate() >= c.suspend_complaint_percent / 2.0;
    let suspended = st.store.project(project).await?.and_then(|p| p.suspended);
    let standing = match (&suspended, warning) {
        (Some(_), _) => ProjectStanding::Suspended,
        (None, true) => ProjectStanding::Warning,
        (None, false) => ProjectStanding::Active,
    };
    let suspensions = st.store.suspensions(project, SUSPENSIONS_LISTED).await?;
    Ok(Security { last7, last30, standing, suspended, suspensions })
}
