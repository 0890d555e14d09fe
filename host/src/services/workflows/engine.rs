//! The workflow engine (docs/behaviour.md#workflows): starts executions under the re-entry rules and
//! runs their steps on the durable job queue. Steps that finish at once run back to back in one
//! `workflow.run` job; a DELAY's end and a wait's timeout are `workflow.timer` jobs that carry the
//! execution's timer token, so a timer whose execution moved on (cancelled, resumed by its event) does
//! nothing. Each step's outcome is written with the execution's move in one transaction, over the state
//! it was decided from: a cancel or another process that came first makes it write nothing, so a step
//! never takes effect twice.
//!
//! Must not import: salvo, surrealdb.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::domain::status::{ExecutionStatus, StepRunStatus};
use crate::domain::workflows::run::{self, Next};
use crate::domain::workflows::steps;
use crate::domain::workflows::{self as wf, Step, WaitOutcome};
use crate::infra::clock::SharedClock;
use crate::infra::jobs::{JobContext, Registry};
use crate::plugins::PluginHost;
use crate::services::segments;
use crate::store::events::Event;
use crate::store::jobs::NewJob;
use crate::store::workflow_runs::{ContactChange, Effects, ExecutionRow, NewEmail, StartRefused, StepRunRow};
use crate::store::workflows::WorkflowRow;
use crate::store::{Store, StoreError};

pub const RUN_JOB: &str = "workflow.run";
pub const TIMER_JOB: &str = "workflow.timer";
/// Claim priority of workflow jobs: after transactional delivery (100), before campaign work (5, 1).
pub const JOB_PRIORITY: i64 = 50;
/// Delivery priority of workflow mail: after transactional sends (100), before marketing sends (10)
/// and campaigns (a kind of their own, claimed last).
pub const EMAIL_PRIORITY: i64 = 50;
/// Attempts of a workflow job before the execution fails.
const JOB_ATTEMPTS: i64 = 5;
/// Event names Herald emits for executions.
pub const STARTED: &str = "workflow.started";
pub const COMPLETED: &str = "workflow.completed";
pub const EXITED: &str = "workflow.exited";
pub const FAILED: &str = "workflow.failed";

pub struct Engine {
    pub store: Store,
    pub clock: SharedClock,
    pub plugins: Arc<PluginHost>,
    pub segments: segments::Engine,
    pub composer: Arc<crate::services::compose::Composer>,
    /// Wakes the job worker (set once the worker exists).
    pub wake: OnceLock<Arc<tokio::sync::Notify>>,
    /// Per project, the event names its workflows listen for, and when they were read ([`LISTEN_FRESH`]).
    pub listening: Mutex<HashMap<String, Listening>>,
}

/// The event names a project's workflows listen for, and when they were read.
pub type Listening = (Instant, Arc<HashSet<String>>);

/// How long the event names a project's workflows listen for are used before they are read again. A
/// change made through this process drops them at once; one made through another process shows within
/// this time.
const LISTEN_FRESH: Duration = Duration::from_secs(2);

/// What a step came to.
pub(super) enum Outcome {
    /// Finished: the branch or wait outcome to follow, and its output.
    Done { branch: Option<String>, wait: Option<WaitOutcome>, output: Value },
    /// A plugin step finished with a change to the contact, written with the step's completion.
    Patched { branch: Option<String>, output: Value, change: Box<ContactChange> },
    /// Waits: until a time (a timer job then), for an event, or both.
    Wait { until: Option<i64>, event: Option<String>, output: Value },
    /// A SEND_EMAIL step wrote its email (with the step's completion, so never twice).
    Sent { email: Box<crate::store::emails::EmailRow>, output: Value },
    /// The step had nothing to do (the reason in its output); the flow goes on.
    Skipped { reason: String },
    /// An EXIT step.
    Exit { reason: Option<String> },
    /// The step failed; so does the execution.
    Failed { error: String },
}

/// Most rounds of workflows that trigger each other through their `workflow.*` events.
pub const MAX_DEPTH: i64 = 8;

fn event(project: &str, e: &ExecutionRow, name: &str, extra: Map<String, Value>, now: i64) -> Event {
    let mut data = Map::new();
    data.insert("workflowId".into(), json!(e.workflow));
    data.insert("executionId".into(), json!(e.id));
    data.insert("depth".into(), json!(e.depth.unwrap_or(0)));
    data.extend(extra);
    Event::new(project, &e.contact, name, data, "system", now)
}

fn job(kind: &str, payload: Value, run_at: i64) -> Value {
    let mut j = NewJob::new(kind, payload, run_at);
    j.priority = JOB_PRIORITY;
    j.max_attempts = JOB_ATTEMPTS;
    j.doc(run_at)
}

pub(super) fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// An id derived from `key` (the same key, the same id): what makes a repeated start a duplicate.
pub fn derived_id(key: &str) -> String {
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, key.as_bytes()).to_string()
}

impl Engine {
    pub fn register(self: &Arc<Self>, registry: &mut Registry) {
        let e = self.clone();
        registry.register(RUN_JOB, move |ctx: JobContext| {
            let e = e.clone();
            async move { e.run_job(ctx).await }
        });
        let e = self.clone();
        registry.register(TIMER_JOB, move |ctx: JobContext| {
            let e = e.clone();
            async move { e.timer_job(ctx).await }
        });
        registry.set_priority(RUN_JOB, JOB_PRIORITY);
        registry.set_priority(TIMER_JOB, JOB_PRIORITY);
        self.register_schedules(registry);
    }

    pub(super) fn wake(&self) {
        if let Some(w) = self.wake.get() {
            w.notify_one();
        }
    }

    /// Starts an execution of `w` for a contact with a context (the trigger event's data or the caller's):
    /// the TRIGGER step completes at once and the next step is queued. An execution an event starts has
    /// an id derived from the workflow and the event, so the same event delivered again starts nothing.
    pub async fn start(
        &self,
        project: &str,
        w: &WorkflowRow,
        contact: &str,
        context: Value,
        cause: Option<&Event>,
    ) -> Result<Result<ExecutionRow, StartRefused>, StoreError> {
        let id = match cause {
            Some(ev) => derived_id(&format!("{}:{}", w.id, ev.id)),
            None => new_id(),
        };
        let depth = match cause {
            Some(ev) if ev.name.starts_with("workflow.") => {
                ev.data.get("depth").and_then(Value::as_i64).unwrap_or(0).saturating_add(1)
            }
            _ => 0,
        };
        self.start_as(project, w, contact, context, id, cause.map(|ev| ev.id.clone()), depth).await
    }

    /// [`Engine::start`] with the execution's id, trigger event and depth given.
    #[allow(clippy::too_many_arguments)]
    pub async fn start_as(
        &self,
        project: &str,
        w: &WorkflowRow,
        contact: &str,
        context: Value,
        id: String,
        trigger_event: Option<String>,
        depth: i64,
    ) -> Result<Result<ExecutionRow, StartRefused>, StoreError> {
        let now = self.clock.now_ms();
        let Some(trigger) = w.graph.trigger() else {
            return Err(StoreError::Decode("a workflow without a TRIGGER step".into()));
        };
        let next = run::next(&w.graph, &trigger.id, None, None);
        let mut e = ExecutionRow {
            id,
            workflow: w.id.clone(),
            contact: contact.to_string(),
            status: ExecutionStatus::Running,
            context,
            step: None,
            timer: None,
            run: None,
            waiting_event: None,
            trigger_event,
            error: None,
            exit_reason: None,
            created_at: now,
            updated_at: now,
            completed_at: None,
            depth: Some(depth),
        };
        let mut fx = Effects::default();
        fx.runs.push(StepRunRow {
            id: new_id(),
            step: trigger.id.clone(),
            step_type: wf::TRIGGER.into(),
            status: StepRunStatus::Completed,
            output: None,
            error: None,
            started_at: now,
            completed_at: Some(now),
        });
        fx.events.push(event(project, &e, STARTED, Map::new(), now));
        match next {
            Next::Step(s) => {
                e.step = Some(s);
                fx.jobs.push(job(RUN_JOB, json!({ "project": project, "execution": e.id }), now));
            }
            Next::End => {
                e.status = ExecutionStatus::Completed;
                e.completed_at = Some(now);
                fx.events.push(event(project, &e, COMPLETED, Map::new(), now));
            }
        }
        let started = self.store.start_execution(project, &e, w.allow_reentry, &fx, now).await?;
        if started.is_ok() {
            self.wake();
        }
        Ok(started.map(|()| e))
    }

    /// Forgets what the project's workflows listen for (after a workflow of the project changed).
    pub fn invalidate(&self, project: &str) {
        self.listening.lock().unwrap_or_else(|p| p.into_inner()).remove(project);
    }

    /// Whether any workflow of the project listens for events named `name` (most events: none).
    async fn listens(&self, project: &str, name: &str) -> Result<bool, StoreError> {
        let cached = self.listening.lock().unwrap_or_else(|p| p.into_inner()).get(project).cloned();
        let names = match cached {
            Some((at, names)) if at.elapsed() < LISTEN_FRESH => names,
            _ => {
                let names: Arc<HashSet<String>> =
                    Arc::new(self.store.workflow_event_names(project).await?.into_iter().collect());
                let mut map = self.listening.lock().unwrap_or_else(|p| p.into_inner());
                // Bounded: an entry per project that had events in the last moments.
                if map.len() > 10_000 {
                    map.retain(|_, (at, _)| at.elapsed() < LISTEN_FRESH);
                }
                map.insert(project.to_string(), (Instant::now(), names.clone()));
                names
            }
        };
        Ok(names.contains(name))
    }

    /// An event of the stream (at least once, in order per transaction): starts the project's enabled
    /// EVENT workflows on its name for its contact (a workflow never starts from its own `workflow.*`
    /// events, and chains of workflows stop after [`MAX_DEPTH`] rounds), and resumes the contact's
    /// executions that wait for it (on their EVENT link, its data merged into the context).
    pub async fn on_event(&self, ev: &Event) -> Result<(), String> {
        let s = |e: StoreError| e.to_string();
        if ev.contact.is_empty() || !self.listens(&ev.project, &ev.name).await.map_err(s)? {
            return Ok(());
        }
        let (from_workflow, depth) = if ev.name.starts_with("workflow.") {
            (
                ev.data.get("workflowId").and_then(Value::as_str),
                ev.data.get("depth").and_then(Value::as_i64).unwrap_or(0),
            )
        } else {
            (None, 0)
        };
        if depth < MAX_DEPTH {
            for w in self.store.event_workflows(&ev.project, &ev.name).await.map_err(s)? {
                if Some(w.id.as_str()) == from_workflow {
                    continue;
                }
                // A refusal (the re-entry rules, the same event again) is the answer, not a failure.
                let _ = self
                    .start(&ev.project, &w, &ev.contact, Value::Object(ev.data.clone()), Some(ev))
                    .await
                    .map_err(s)?;
            }
        }
        for e in self.store.waiting_for_event(&ev.project, &ev.contact, &ev.name).await.map_err(s)? {
            // Only an event stored once the wait began resumes it (the stream may hand it over later).
            if ev.created_at < e.updated_at {
                continue;
            }
            let Some(w) = self.store.workflow(&ev.project, &e.workflow).await.map_err(s)? else { continue };
            let Some(step) = e.step.as_deref().and_then(|st| w.graph.step(st)).cloned() else { continue };
            let mut context = match &e.context {
                Value::Object(m) => m.clone(),
                _ => Map::new(),
            };
            context.extend(ev.data.clone());
            let output = json!({ "outcome": "EVENT", "eventId": ev.id });
            self.resume(&ev.project, &w, &e, &step, Some(WaitOutcome::Event), output, Some(Value::Object(context)))
                .await
                .map_err(s)?;
        }
        Ok(())
    }

    async fn run_job(&self, ctx: JobContext) -> Result<(), String> {
        let (Some(project), Some(id)) =
            (ctx.payload.get("project").and_then(Value::as_str), ctx.payload.get("execution").and_then(Value::as_str))
        else {
            return Ok(());
        };
        let ran = self.run(project, id, ctx.attempt).await;
        self.unless_last(project, id, ctx.attempt, ran).await
    }

    /// A job's error, except on its last attempt: then the execution fails with it instead of staying
    /// RUNNING or WAITING with nothing left to move it.
    async fn unless_last(&self, project: &str, id: &str, attempt: i64, r: Result<(), String>) -> Result<(), String> {
        match r {
            Err(m) if attempt >= JOB_ATTEMPTS => {
                let e = self.store.execution(project, id).await.map_err(|e| e.to_string())?;
                if let Some(e) = e.filter(|e| e.status.is_active()) {
                    let why = format!("gave up after {JOB_ATTEMPTS} attempts: {m}");
                    self.fail(project, &e, &why).await.map_err(|e| e.to_string())?;
                }
                Ok(())
            }
            other => other,
        }
    }

    /// A DELAY's end or a wait's timeout: inert unless the execution still waits with this timer.
    async fn timer_job(&self, ctx: JobContext) -> Result<(), String> {
        let p = &ctx.payload;
        let (Some(project), Some(id), Some(token)) = (
            p.get("project").and_then(Value::as_str),
            p.get("execution").and_then(Value::as_str),
            p.get("token").and_then(Value::as_str),
        ) else {
            return Ok(());
        };
        let Some(e) = self.store.execution(project, id).await.map_err(|e| e.to_string())? else { return Ok(()) };
        if e.status != ExecutionStatus::Waiting || e.timer.as_deref() != Some(token) {
            return Ok(());
        }
        let Some(w) = self.store.workflow(project, &e.workflow).await.map_err(|e| e.to_string())? else {
            return Ok(());
        };
        let Some(step) = e.step.as_deref().and_then(|s| w.graph.step(s)).cloned() else {
            return self.fail(project, &e, "its step was deleted from the workflow").await.map_err(|e| e.to_string());
        };
        let (wait, output) = match step.kind.as_str() {
            wf::WAIT_FOR_EVENT => (Some(WaitOutcome::Timeout), json!({ "outcome": "TIMEOUT" })),
            _ => (None, json!({ "delayed": true })),
        };
        let resumed =
            self.resume(project, &w, &e, &step, wait, output, None).await.map(|_| ()).map_err(|e| e.to_string());
        self.unless_last(project, id, ctx.attempt, resumed).await
    }

    /// Ends the wait of `e` in `step` (its timer fired or its event came): the waiting run completes and
    /// the execution moves on (its next steps in a queued `workflow.run`). `context`: the context after
    /// the event. False when it moved first.
    #[allow(clippy::too_many_arguments)]
    async fn resume(
        &self,
        project: &str,
        w: &WorkflowRow,
        e: &ExecutionRow,
        step: &Step,
        wait: Option<WaitOutcome>,
        output: Value,
        context: Option<Value>,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        let mut to = e.clone();
        to.timer = None;
        to.waiting_event = None;
        to.run = None;
        to.updated_at = now;
        if let Some(c) = context {
            to.context = c;
        }
        let mut fx = Effects::default();
        if let Some(run_id) = &e.run {
            // The waiting run started when the execution last changed (it went WAITING then).
            fx.runs.push(StepRunRow {
                id: run_id.clone(),
                step: step.id.clone(),
                step_type: step.kind.clone(),
                status: StepRunStatus::Completed,
                output: Some(output.to_string()),
                error: None,
                started_at: e.updated_at,
                completed_at: Some(now),
            });
        }
        self.move_on(project, w, &mut to, &step.id, None, wait, &mut fx, now);
        // The steps after it run in a job queued in the same transaction: a crash right after the resume
        // leaves that job to carry on.
        if to.status == ExecutionStatus::Running {
            fx.jobs.push(job(RUN_JOB, json!({ "project": project, "execution": e.id }), now));
        }
        let moved = self.store.advance_execution(project, e, &to, &fx, now).await?;
        if moved {
            self.wake();
        }
        Ok(moved)
    }

    /// Points `to` at the step after `from` (or completes it).
    #[allow(clippy::too_many_arguments)]
    fn move_on(
        &self,
        project: &str,
        w: &WorkflowRow,
        to: &mut ExecutionRow,
        from: &str,
        branch: Option<&str>,
        wait: Option<WaitOutcome>,
        fx: &mut Effects,
        now: i64,
    ) {
        match run::next(&w.graph, from, branch, wait) {
            Next::Step(s) => {
                to.status = ExecutionStatus::Running;
                to.step = Some(s);
            }
            Next::End => {
                to.status = ExecutionStatus::Completed;
                to.step = None;
                to.completed_at = Some(now);
                fx.leaves = true;
                fx.events.push(event(project, to, COMPLETED, Map::new(), now));
            }
        }
    }

    /// Fails an execution that cannot go on.
    async fn fail(&self, project: &str, e: &ExecutionRow, why: &str) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let mut to = e.clone();
        to.updated_at = now;
        let mut fx = Effects::default();
        failed(project, &mut to, &mut fx, why, now);
        self.store.advance_execution(project, e, &to, &fx, now).await?;
        Ok(())
    }

    /// Runs an execution's steps until it waits or ends (at most one pass over the graph: it has no
    /// cycles). `attempt`: the job's attempt (the last one fails the execution instead of retrying).
    pub async fn run(&self, project: &str, id: &str, attempt: i64) -> Result<(), String> {
        let s = |e: StoreError| e.to_string();
        let Some(mut e) = self.store.execution(project, id).await.map_err(s)? else { return Ok(()) };
        let Some(w) = self.store.workflow(project, &e.workflow).await.map_err(s)? else { return Ok(()) };
        for _ in 0..=wf::MAX_STEPS {
            if e.status != ExecutionStatus::Running {
                return Ok(());
            }
            let Some(step) = e.step.as_deref().and_then(|s| w.graph.step(s)).cloned() else {
                return self.fail(project, &e, "its step was deleted from the workflow").await.map_err(s);
            };
            let now = self.clock.now_ms();
            let outcome = match self.execute(project, &w, &e, &step, now, attempt).await {
                Ok(o) => o,
                // The job is tried again with its backoff; its last attempt fails the execution.
                Err(StepError::Retry(m)) if attempt < JOB_ATTEMPTS => return Err(m),
                Err(StepError::Retry(m)) => Outcome::Failed { error: m },
            };
            let (to, fx) = self.apply(project, &w, &e, &step, outcome, now);
            if !self.store.advance_execution(project, &e, &to, &fx, now).await.map_err(s)? {
                return Ok(());
            }
            e = to;
        }
        Ok(())
    }

    /// The new state of `e` and what goes with it, after `step` came to `outcome`.
    fn apply(
        &self,
        project: &str,
        w: &WorkflowRow,
        e: &ExecutionRow,
        step: &Step,
        outcome: Outcome,
        now: i64,
    ) -> (ExecutionRow, Effects) {
        let mut to = e.clone();
        to.updated_at = now;
        let mut fx = Effects::default();
        let run = |status: StepRunStatus, output: Option<Value>, error: Option<String>, done: bool| StepRunRow {
            id: new_id(),
            step: step.id.clone(),
            step_type: step.kind.clone(),
            status,
            output: output.map(|o| o.to_string()),
            error,
            started_at: now,
            completed_at: done.then_some(now),
        };
        match outcome {
            Outcome::Done { branch, wait, output } => {
                fx.runs.push(run(StepRunStatus::Completed, Some(output), None, true));
                self.move_on(project, w, &mut to, &step.id, branch.as_deref(), wait, &mut fx, now);
            }
            Outcome::Patched { branch, output, change } => {
                fx.runs.push(run(StepRunStatus::Completed, Some(output), None, true));
                fx.events.extend(change.events.iter().cloned());
                fx.contact = Some(*change);
                self.move_on(project, w, &mut to, &step.id, branch.as_deref(), None, &mut fx, now);
            }
            Outcome::Sent { email, output } => {
                fx.runs.push(run(StepRunStatus::Completed, Some(output), None, true));
                fx.email = Some(NewEmail {
                    row: *email,
                    job_kind: crate::services::delivery::DELIVER_JOB,
                    priority: EMAIL_PRIORITY,
                    attempts: crate::services::delivery::DELIVER_ATTEMPTS,
                });
                self.move_on(project, w, &mut to, &step.id, None, None, &mut fx, now);
            }
            Outcome::Skipped { reason } => {
                fx.runs.push(run(StepRunStatus::Skipped, Some(json!({ "reason": reason })), None, true));
                self.move_on(project, w, &mut to, &step.id, None, None, &mut fx, now);
            }
            Outcome::Wait { until, event: awaited, output } => {
                let r = run(StepRunStatus::Waiting, Some(output), None, false);
                to.status = ExecutionStatus::Waiting;
                to.run = Some(r.id.clone());
                to.waiting_event = awaited;
                fx.runs.push(r);
                if let Some(at) = until {
                    let token = new_id();
                    fx.jobs.push(job(TIMER_JOB, json!({ "project": project, "execution": e.id, "token": token }), at));
                    to.timer = Some(token);
                }
            }
            Outcome::Exit { reason } => {
                fx.runs.push(run(StepRunStatus::Completed, Some(json!({ "reason": reason })), None, true));
                to.status = ExecutionStatus::Exited;
                to.step = None;
                to.exit_reason = reason.clone();
                to.completed_at = Some(now);
                fx.leaves = true;
                let mut extra = Map::new();
                extra.insert("reason".into(), json!(reason));
                fx.events.push(event(project, &to, EXITED, extra, now));
            }
            Outcome::Failed { error } => {
                fx.runs.push(run(StepRunStatus::Failed, None, Some(error.clone()), true));
                failed(project, &mut to, &mut fx, &error, now);
            }
        }
        (to, fx)
    }

    /// Decides what a step comes to (no effect is written here).
    async fn execute(
        &self,
        project: &str,
        w: &WorkflowRow,
        e: &ExecutionRow,
        step: &Step,
        now: i64,
        attempt: i64,
    ) -> Result<Outcome, StepError> {
        let c = &step.config;
        Ok(match step.kind.as_str() {
            wf::TRIGGER => Outcome::Done { branch: None, wait: None, output: json!({}) },
            wf::DELAY => {
                let amount = c.get("amount").and_then(Value::as_i64).unwrap_or(0);
                let unit = c.get("unit").and_then(Value::as_str).unwrap_or("minutes");
                let ms = crate::domain::conditions::unit_ms(unit).unwrap_or(60_000).saturating_mul(amount);
                let until = now.saturating_add(ms.clamp(0, steps::MAX_WAIT_SECS * 1000));
                Outcome::Wait {
                    until: Some(until),
                    event: None,
                    output: json!({ "until": crate::infra::clock::rfc3339(until) }),
                }
            }
            wf::WAIT_FOR_EVENT => {
                let name = c.get("eventName").and_then(Value::as_str).unwrap_or_default().to_string();
                let until =
                    c.get("timeout").and_then(Value::as_i64).map(|t| now.saturating_add(t.saturating_mul(1000)));
                let output = json!({ "eventName": name, "timeoutAt": until.map(crate::infra::clock::rfc3339) });
                Outcome::Wait { until, event: Some(name), output }
            }
            wf::CONDITION => {
                let result = self.condition(project, e, c, now).await?;
                let branch = if result { "yes" } else { "no" };
                Outcome::Done {
                    branch: Some(branch.into()),
                    wait: None,
                    output: json!({ "result": result, "branch": branch }),
                }
            }
            wf::EXIT => Outcome::Exit { reason: c.get("reason").and_then(Value::as_str).map(str::to_string) },
            wf::SEND_EMAIL => self.send_email(project, e, step, now).await?,
            _ => self.plugin_step(project, w, e, step, now, attempt).await?,
        })
    }
}

/// Ends `to` FAILED with `why` (no timer, wait or open run left) and adds what goes with it: the contact
/// leaves, `workflow.failed` is stored.
fn failed(project: &str, to: &mut ExecutionRow, fx: &mut Effects, why: &str, now: i64) {
    to.status = ExecutionStatus::Failed;
    to.error = Some(why.to_string());
    to.timer = None;
    to.waiting_event = None;
    to.run = None;
    to.completed_at = Some(now);
    fx.leaves = true;
    let mut extra = Map::new();
    extra.insert("error".into(), json!(why));
    fx.events.push(event(project, to, FAILED, extra, now));
}

/// The engine's subscription to the event stream ([`Engine::on_event`]).
pub struct Triggers(pub Arc<Engine>);

impl crate::services::events::Subscriber for Triggers {
    fn name(&self) -> &str {
        "workflows"
    }

    fn handle<'a>(&'a self, event: &'a Event) -> crate::services::events::SubscriberFuture<'a> {
        Box::pin(self.0.on_event(event))
    }
}

/// Why a step could not be decided now.
pub(super) enum StepError {
    /// Worth another attempt later (with the job's backoff); the last attempt fails the execution.
    Retry(String),
}
