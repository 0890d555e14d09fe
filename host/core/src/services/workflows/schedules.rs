//! SCHEDULE triggers on the job queue (docs/behaviour.md#workflows). The recurring `workflows.schedule`
//! job finds the enabled SCHEDULE workflows that are due and moves each one's `next_at` to its next time
//! with a compare-and-set that queues the tick's `workflow.enroll` job in the same transaction: however
//! many processes run the job, each tick fires once. The next time is counted from now, so ticks missed
//! while Herald was down fire once, not once each. `workflow.enroll` resolves the audience (its
//! subscribed contacts) through the segment engine and splits it into `workflow.enroll.batch` jobs of 500,
//! like a campaign's; each batch starts its executions under the re-entry rules, with ids derived from the
//! workflow, the tick and the contact (a retried batch starts nobody twice).
//!
//! Must not import: salvo, surrealdb.

use std::sync::Arc;

use serde_json::{Value, json};

use super::engine::{Engine, JOB_PRIORITY, derived_id, plan_start};
use crate::domain::workflows::schedule::{self, Audience};
use crate::infra::jobs::{JobContext, JobError, Registry};
use crate::store::jobs::NewJob;
use crate::store::workflows::WorkflowRow;

pub const SCHEDULE_JOB: &str = "workflows.schedule";
pub const ENROLL_JOB: &str = "workflow.enroll";
pub const ENROLL_BATCH_JOB: &str = "workflow.enroll.batch";
/// How often due schedules are looked for (schedules have minute granularity).
const EVERY_MS: i64 = 15_000;
/// Contacts per enrollment batch.
const ENROLL_BATCH: usize = 500;
/// Due workflows fired per run of the schedule job.
const DUE_PER_RUN: usize = 100;

/// The payload of a tick's jobs (enrollment and its batches).
#[derive(serde::Deserialize)]
struct Tick {
    project: String,
    workflow: String,
    tick: i64,
}

fn s(e: impl ToString) -> String {
    e.to_string()
}

impl Engine {
    pub(super) fn register_schedules(self: &Arc<Self>, registry: &mut Registry) {
        registry.every(SCHEDULE_JOB, EVERY_MS);
        let e = self.clone();
        registry.register(SCHEDULE_JOB, move |ctx: JobContext| {
            let e = e.clone();
            async move { e.fire_due(ctx.clock.now_ms()).await.map(|_| ()) }
        });
        let e = self.clone();
        registry.register(ENROLL_JOB, move |ctx: JobContext| {
            let e = e.clone();
            async move { e.enroll(ctx).await }
        });
        let e = self.clone();
        registry.register(ENROLL_BATCH_JOB, move |ctx: JobContext| {
            let e = e.clone();
            async move { e.enroll_batch(ctx).await }
        });
        for kind in [ENROLL_JOB, ENROLL_BATCH_JOB] {
            registry.set_priority(kind, JOB_PRIORITY);
        }
    }

    /// Fires the ticks due at `now`; answers how many this process fired.
    pub async fn fire_due(&self, now: i64) -> Result<usize, String> {
        let mut fired = 0;
        for (project, w) in self.store.due_workflows(now, DUE_PER_RUN).await.map_err(s)? {
            let (Some(due), Ok((sched, _))) = (w.next_at, schedule::parse(w.trigger_config.as_ref())) else { continue };
            let mut job = NewJob::new(ENROLL_JOB, json!({ "project": project, "workflow": w.id, "tick": due }), now);
            job.priority = JOB_PRIORITY;
            job.unique_key = Some(format!("{ENROLL_JOB}:{}:{due}", w.id));
            if self.store.fire_schedule(&project, &w.id, due, sched.next_after(now), &job, now).await.map_err(s)? {
                fired += 1;
            }
        }
        if fired > 0 {
            self.wake([ENROLL_JOB]);
        }
        Ok(fired)
    }

    /// A tick job's project, workflow id and tick, with the workflow while it is enabled.
    async fn tick_of(&self, ctx: &JobContext) -> Result<Option<(String, String, i64, WorkflowRow)>, JobError> {
        let Tick { project, workflow, tick } = ctx.payload()?;
        let w = self.store.workflow(&project, &workflow).await.map_err(s)?.filter(|w| w.enabled);
        Ok(w.map(|w| (project, workflow, tick, w)))
    }

    /// One tick: the audience's subscribed contacts, split into enrollment batches.
    async fn enroll(&self, ctx: JobContext) -> Result<(), JobError> {
        let Some((project, id, tick, w)) = self.tick_of(&ctx).await? else { return Ok(()) };
        let (project, id) = (project.as_str(), id.as_str());
        let Ok((sched, _)) = schedule::parse(w.trigger_config.as_ref()) else { return Ok(()) };
        let subscribed = json!({ "field": "subscribed", "operator": "equals", "value": true });
        let tree = match sched.audience {
            Audience::Segment(seg) => json!({ "groups": [{ "filters": [
                subscribed, { "field": format!("segment.{seg}"), "operator": "memberOfSegment" }
            ] }] }),
            Audience::Condition(c) => json!({ "groups": [{ "filters": [subscribed], "conditions": c }] }),
        };
        let now = ctx.clock.now_ms();
        let tree = self.segments.parse(&tree).map_err(s)?;
        let compiled = self.segments.compile(project, &tree, now).await.map_err(s)?;
        let ids = self.segments.matching_ids(project, &compiled).await.map_err(s)?;
        // An audience past the ceiling enrolls nobody (a part of it, picked by id, would be arbitrary):
        // the tick is logged and counted (docs/security.md#quotas).
        if self.schedule_audience > 0 && ids.len() as u64 > self.schedule_audience {
            tracing::warn!(
                project, workflow = %id, tick, audience = ids.len(), ceiling = self.schedule_audience,
                "a SCHEDULE tick's audience is past HERALD_MAX_SCHEDULE_AUDIENCE: nobody was enrolled"
            );
            crate::infra::metrics::workflow_limited("audience", 1);
            return Ok(());
        }
        for (i, chunk) in ids.chunks(ENROLL_BATCH).enumerate() {
            let payload = json!({ "project": project, "workflow": id, "tick": tick, "contacts": chunk });
            let mut job = NewJob::new(ENROLL_BATCH_JOB, payload, now);
            job.priority = JOB_PRIORITY;
            job.unique_key = Some(format!("{ENROLL_BATCH_JOB}:{id}:{tick}:{i}"));
            self.store.enqueue(&job, now).await.map_err(s)?;
        }
        self.wake([ENROLL_BATCH_JOB]);
        Ok(())
    }

    /// One batch of a tick's contacts: an execution each, under the re-entry rules.
    async fn enroll_batch(&self, ctx: JobContext) -> Result<(), JobError> {
        let Some((project, id, tick, w)) = self.tick_of(&ctx).await? else { return Ok(()) };
        let (project, id) = (project.as_str(), id.as_str());
        let p = &ctx.payload;
        let contacts = p.get("contacts").and_then(Value::as_array).cloned().unwrap_or_default();
        let now = self.clock.now_ms();
        let context = json!({ "scheduledAt": crate::infra::clock::rfc3339(tick) });
        let w = Arc::new(w);
        let mut plans = Vec::new();
        for c in contacts.iter().filter_map(Value::as_str) {
            let key = derived_id(&format!("{id}:{tick}:{c}"));
            plans.push((plan_start(project, &w, c, context.clone(), key, None, 0, now).map_err(s)?, w.clone()));
        }
        // Refusals (the re-entry rules, this tick's starts made before a retry) are the answer.
        self.start_many(project, plans).await?;
        Ok(())
    }
}
