//! The workflow engine (docs/behaviour.md#workflows): starts executions under the re-entry rules and
//! decides what each step comes to; `rounds.rs` runs them on the durable job queue. Steps that finish at
//! once run back to back in one `workflow.run` job; a DELAY's end and a wait's timeout are
//! `workflow.timer` jobs that carry the execution's timer token, so a timer whose execution moved on
//! (cancelled, resumed by its event) does nothing. Each step's outcome is written with the execution's
//! move in one transaction, over the state it was decided from: a cancel or another process that came
//! first makes it write nothing, so a step never takes effect twice. Both job kinds are claimed many at
//! a time, and the steps of a batch's executions advance in rounds, one transaction per round.
//!
//! Must not import: salvo, surrealdb.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use futures_util::StreamExt;
use serde_json::{Map, Value, json};

use super::rounds::Run;
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
use crate::store::workflow_runs::{ContactChange, Effects, ExecutionRow, NewEmail, Start, StartRefused, StepRunRow};
use crate::store::workflows::WorkflowRow;
use crate::store::{Store, StoreError};

pub const RUN_JOB: &str = "workflow.run";
/// Timer jobs: the executions whose timers come due at one moment, each with its timer token (a timer
/// job queued by an earlier version names one execution and token; both are read).
pub const TIMER_JOB: &str = crate::store::workflow_runs::TIMER_KIND;
/// Claim priority of workflow jobs: after transactional delivery (100), before campaign work (5, 1).
pub const JOB_PRIORITY: i64 = crate::store::workflow_runs::JOB_PRIORITY;
/// Delivery priority of workflow mail: after transactional sends (100), before marketing sends (10)
/// and campaigns (a kind of their own, claimed last).
pub const EMAIL_PRIORITY: i64 = 50;
/// Attempts of a workflow job before the execution fails.
pub(super) const JOB_ATTEMPTS: i64 = crate::store::workflow_runs::JOB_ATTEMPTS;
/// Workflow jobs of one kind claimed and run together at most.
const JOB_BATCH: usize = 256;
/// Executions started in one transaction at most, and such batches in flight at once.
const START_BATCH: usize = 128;
const START_CHUNKS: usize = 4;
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
    pub wake: OnceLock<crate::infra::jobs::JobWake>,
    /// Per project, the event names its workflows listen for, and when they were read (on the engine's
    /// clock; see [`LISTEN_FRESH_MS`]).
    pub listening: Mutex<HashMap<String, Listening>>,
    /// The shared `workflows_epoch` when `listening` was last known to be current: a workflow changed
    /// through any process moves it, and the next batch of events read after that drops `listening`.
    pub listening_epoch: Mutex<Option<String>>,
    /// The per-contact hourly budgets that bound loops depth cannot follow (`limits.rs`).
    pub budgets: super::limits::Budgets,
    /// Contacts one SCHEDULE tick enrolls at most (0: no ceiling; docs/security.md#quotas).
    pub schedule_audience: u64,
}

/// The event names a project's workflows listen for, and when they were read.
pub type Listening = (i64, Arc<HashSet<String>>);

/// How long the event names a project's workflows listen for are used before they are read again. A
/// change made through any process drops them for the next batch of events (the shared
/// `workflows_epoch`); this bounds what a change whose epoch write failed can miss.
const LISTEN_FRESH_MS: i64 = 2_000;

/// The shared setting every workflow change moves (docs/behaviour.md#running-several-processes).
const WORKFLOWS_EPOCH: &str = "workflows_epoch";

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

/// Most rounds of workflows that trigger each other through the events their steps cause.
pub use super::limits::MAX_DEPTH;
use super::limits::cause_depth;

fn event(project: &str, e: &ExecutionRow, name: &str, extra: Map<String, Value>, now: i64) -> Event {
    let mut data = Map::new();
    data.insert("workflowId".into(), json!(e.workflow));
    data.insert("executionId".into(), json!(e.id));
    data.insert("depth".into(), json!(e.depth.unwrap_or(0)));
    data.extend(extra);
    Event::new(project, &e.contact, name, data, "system", now).at_depth(Some(e.depth.unwrap_or(0)))
}

pub(super) fn job(kind: &str, payload: Value, run_at: i64) -> NewJob {
    NewJob { priority: JOB_PRIORITY, max_attempts: JOB_ATTEMPTS, ..NewJob::new(kind, payload, run_at) }
}

pub(super) fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// An id derived from `key` (the same key, the same id): what makes a repeated start a duplicate.
pub fn derived_id(key: &str) -> String {
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, key.as_bytes()).to_string()
}

/// What a step sees besides its execution: the contact as the execution's earlier steps left it (None:
/// gone), and templates read once per batch.
pub(super) struct Seen<'a> {
    pub contact: Option<&'a crate::store::contacts::Contact>,
    pub templates: &'a Mutex<HashMap<String, Option<Arc<crate::store::templates::TemplateRow>>>>,
    /// The emails the batch's contacts have used of their hourly budget.
    pub emails: &'a super::limits::EmailUse,
    /// What the batch's SEND_EMAIL steps may still send under the workflows limit.
    pub allowance: &'a crate::services::billing::Allowance,
}

/// Workflows read once per batch, by id (`None`: gone).
#[derive(Default)]
pub(super) struct Flows(HashMap<String, Option<Arc<WorkflowRow>>>);

impl Flows {
    pub(super) async fn get(
        &mut self,
        store: &Store,
        project: &str,
        id: &str,
    ) -> Result<Option<Arc<WorkflowRow>>, StoreError> {
        if let Some(w) = self.0.get(id) {
            return Ok(w.clone());
        }
        let w = store.workflow(project, id).await?.map(Arc::new);
        self.0.insert(id.to_string(), w.clone());
        Ok(w)
    }
}

/// A start decided and not yet written.
pub(super) struct Planned {
    pub e: ExecutionRow,
    pub fx: Effects,
    pub allow_reentry: bool,
}

/// What starting `w` for a contact writes: the TRIGGER step completed, `workflow.started`, and a job
/// for the next step (or the execution completed at once).
#[allow(clippy::too_many_arguments)]
pub(super) fn plan_start(
    project: &str,
    w: &WorkflowRow,
    contact: &str,
    context: Value,
    id: String,
    trigger_event: Option<String>,
    depth: i64,
    now: i64,
) -> Result<Planned, StoreError> {
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
        runs: Vec::new(),
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
    Ok(Planned { e, fx, allow_reentry: w.allow_reentry })
}

impl Engine {
    pub fn register(self: &Arc<Self>, registry: &mut Registry) {
        let e = self.clone();
        registry.register_batch(RUN_JOB, JOB_BATCH, move |ctxs: Vec<JobContext>| {
            let e = e.clone();
            async move { e.run_jobs(ctxs).await }
        });
        let e = self.clone();
        registry.register_batch(TIMER_JOB, JOB_BATCH, move |ctxs: Vec<JobContext>| {
            let e = e.clone();
            async move { e.timer_jobs(ctxs).await }
        });
        registry.set_priority(RUN_JOB, JOB_PRIORITY);
        registry.set_priority(TIMER_JOB, JOB_PRIORITY);
        self.register_schedules(registry);
    }

    /// Wakes the job worker for work of these kinds enqueued due now.
    pub(super) fn wake<S: AsRef<str>>(&self, kinds: impl IntoIterator<Item = S>) {
        if let Some(w) = self.wake.get() {
            w.kinds(kinds);
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
        let depth = cause.map_or(0, cause_depth);
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
        let p = plan_start(project, w, contact, context, id, trigger_event, depth, now)?;
        let started = self.store.start_execution(project, &p.e, p.allow_reentry, &p.fx, now).await?;
        if started.is_ok() {
            self.wake(p.fx.kinds_due(now));
        }
        Ok(started.map(|()| p.e))
    }

    /// Starts executions of one project and runs their first steps, [`START_BATCH`] to a batch; the
    /// ones the re-entry rules or an existing id refuse (found by a read first) are left out, which is
    /// their answer. An error: some were not written (start them again; the written ones are refused
    /// then as duplicates).
    pub(super) async fn start_many(
        &self,
        project: &str,
        plans: Vec<(Planned, Arc<WorkflowRow>)>,
    ) -> Result<(), String> {
        // One start per (workflow, contact) in a batch: a second one goes in a later batch, under the
        // rules as the first left them.
        let mut seen = HashSet::new();
        let (mut first, mut later) = (Vec::new(), Vec::new());
        for p in plans {
            if seen.insert((p.0.e.workflow.clone(), p.0.e.contact.clone())) {
                first.push(p);
            } else {
                later.push(p);
            }
        }
        for batch in [first, later] {
            let mut chunks = Vec::new();
            let mut batch = batch.into_iter().peekable();
            while batch.peek().is_some() {
                chunks.push(batch.by_ref().take(START_BATCH).collect::<Vec<_>>());
            }
            // A few chunks at a time: one decides its steps while another writes.
            let done: Vec<Result<(), String>> = futures_util::stream::iter(chunks)
                .map(|chunk| self.start_chunk(project, chunk))
                .buffer_unordered(START_CHUNKS)
                .collect()
                .await;
            done.into_iter().collect::<Result<(), String>>()?;
        }
        Ok(())
    }

    async fn start_chunk(&self, project: &str, chunk: Vec<(Planned, Arc<WorkflowRow>)>) -> Result<(), String> {
        let starts: Vec<Start> =
            chunk.iter().map(|(p, _)| Start { e: &p.e, allow_reentry: p.allow_reentry, fx: &p.fx }).collect();
        let refused = self.store.refused_starts(project, &starts).await.map_err(|e| e.to_string())?;
        drop(starts);
        let runs: Vec<Run> =
            chunk.into_iter().zip(refused).filter(|(_, r)| !r).map(|((p, w), _)| Run::start(project, p, w)).collect();
        for (_, r) in self.advance(runs).await {
            r?;
        }
        Ok(())
    }

    /// Forgets what the project's workflows listen for (after a workflow of the project changed), here
    /// and, through the shared `workflows_epoch`, in every other process before its next batch of events.
    pub async fn invalidate(&self, project: &str) {
        self.listening.lock().unwrap_or_else(|p| p.into_inner()).remove(project);
        if let Err(e) = self.store.bump_epoch(WORKFLOWS_EPOCH).await {
            tracing::warn!(error = %e, "cannot move the workflows epoch; other processes see the change within 2 s");
        }
    }

    /// Drops every project's listened-for names when a workflow changed through another process since
    /// they were read. Called for each batch of events after the batch was read, so an event stored
    /// after a workflow change is always matched against the changed workflows.
    async fn observe_epoch(&self) -> Result<(), StoreError> {
        let epoch = self.store.setting(WORKFLOWS_EPOCH).await?;
        let mut seen = self.listening_epoch.lock().unwrap_or_else(|p| p.into_inner());
        if *seen != epoch {
            self.listening.lock().unwrap_or_else(|p| p.into_inner()).clear();
            *seen = epoch;
        }
        Ok(())
    }

    /// Whether any workflow of the project listens for events named `name` (most events: none).
    async fn listens(&self, project: &str, name: &str) -> Result<bool, StoreError> {
        let cached = self.listening.lock().unwrap_or_else(|p| p.into_inner()).get(project).cloned();
        let now = self.clock.now_ms();
        let fresh = |at: i64| (0..LISTEN_FRESH_MS).contains(&(now - at));
        let names = match cached {
            Some((at, names)) if fresh(at) => names,
            _ => {
                let names: Arc<HashSet<String>> =
                    Arc::new(self.store.workflow_event_names(project).await?.into_iter().collect());
                let mut map = self.listening.lock().unwrap_or_else(|p| p.into_inner());
                // Bounded: an entry per project that had events in the last moments.
                if map.len() > 10_000 {
                    map.retain(|_, (at, _)| fresh(*at));
                }
                map.insert(project.to_string(), (now, names.clone()));
                names
            }
        };
        Ok(names.contains(name))
    }

    /// Events of the stream (at least once, in order per transaction): each starts the project's enabled
    /// EVENT workflows on its name for its contact (a workflow never starts from its own `workflow.*`
    /// events, and chains of workflows stop after [`MAX_DEPTH`] rounds), and resumes the contact's
    /// executions that wait for it (on their EVENT link, its data merged into the context). A batch's
    /// starts are written together, and so are its resumes.
    pub async fn on_events(&self, evs: &[Event]) -> Result<(), String> {
        let s = |e: StoreError| e.to_string();
        if evs.iter().any(|ev| !ev.contact.is_empty()) {
            self.observe_epoch().await.map_err(s)?;
        }
        let mut order: Vec<&str> = Vec::new();
        let mut groups: HashMap<&str, Vec<&Event>> = HashMap::new();
        for ev in evs {
            if ev.contact.is_empty() || !self.listens(&ev.project, &ev.name).await.map_err(s)? {
                continue;
            }
            groups
                .entry(ev.project.as_str())
                .or_insert_with(|| {
                    order.push(ev.project.as_str());
                    Vec::new()
                })
                .push(ev);
        }
        for project in order {
            let evs = groups.get(project).map(Vec::as_slice).unwrap_or_default();
            self.starts_for(project, evs).await?;
            self.resumes_for(project, evs).await?;
        }
        Ok(())
    }

    /// One event ([`Engine::on_events`]).
    pub async fn on_event(&self, ev: &Event) -> Result<(), String> {
        self.on_events(std::slice::from_ref(ev)).await
    }

    async fn starts_for(&self, project: &str, evs: &[&Event]) -> Result<(), String> {
        let s = |e: StoreError| e.to_string();
        let now = self.clock.now_ms();
        let mut flows: HashMap<&str, Vec<Arc<WorkflowRow>>> = HashMap::new();
        let mut plans = Vec::new();
        let mut stopped = Vec::new();
        for ev in evs {
            let from_workflow =
                ev.name.starts_with("workflow.").then(|| ev.data.get("workflowId").and_then(Value::as_str)).flatten();
            let depth = cause_depth(ev);
            if !flows.contains_key(ev.name.as_str()) {
                let found = self.store.event_workflows(project, &ev.name).await.map_err(s)?;
                flows.insert(ev.name.as_str(), found.into_iter().map(Arc::new).collect());
            }
            for w in flows.get(ev.name.as_str()).map(Vec::as_slice).unwrap_or_default() {
                if Some(w.id.as_str()) == from_workflow {
                    continue;
                }
                let id = derived_id(&format!("{}:{}", w.id, ev.id));
                let context = Value::Object(ev.data.clone());
                let p = plan_start(project, w, &ev.contact, context, id, Some(ev.id.clone()), depth, now).map_err(s)?;
                if depth > MAX_DEPTH {
                    stopped.push((p, super::limits::Stop::Depth));
                } else {
                    plans.push((p, w.clone()));
                }
            }
        }
        let (plans, over) = self.admit(project, plans, now).await.map_err(s)?;
        stopped.extend(over);
        self.stop(project, stopped, now).await.map_err(s)?;
        self.start_many(project, plans).await
    }

    async fn resumes_for(&self, project: &str, evs: &[&Event]) -> Result<(), String> {
        let s = |e: StoreError| e.to_string();
        let mut contacts: Vec<String> = evs.iter().map(|e| e.contact.clone()).collect();
        let mut names: Vec<String> = evs.iter().map(|e| e.name.clone()).collect();
        contacts.sort_unstable();
        contacts.dedup();
        names.sort_unstable();
        names.dedup();
        let waiting = self.store.waiting_for_events(project, &contacts, &names).await.map_err(s)?;
        if waiting.is_empty() {
            return Ok(());
        }
        let now = self.clock.now_ms();
        let mut flows = Flows::default();
        let mut taken = HashSet::new();
        let mut runs = Vec::new();
        for ev in evs {
            for e in &waiting {
                // Only an event stored once the wait began resumes it (the stream may hand it over later).
                if e.contact != ev.contact
                    || e.waiting_event.as_deref() != Some(ev.name.as_str())
                    || ev.created_at < e.updated_at
                    || taken.contains(&e.id)
                {
                    continue;
                }
                let Some(w) = flows.get(&self.store, project, &e.workflow).await.map_err(s)? else { continue };
                let Some(step) = e.step.as_deref().and_then(|st| w.graph.step(st)) else { continue };
                let mut context = match &e.context {
                    Value::Object(m) => m.clone(),
                    _ => Map::new(),
                };
                context.extend(ev.data.clone());
                let output = json!({ "outcome": "EVENT", "eventId": ev.id });
                let (to, fx) =
                    resumed(project, &w, e, step, Some(WaitOutcome::Event), output, Some(Value::Object(context)), now);
                taken.insert(e.id.clone());
                runs.push(Run::moved(project, e.clone(), to, fx, w.clone()));
            }
        }
        for (_, r) in self.advance(runs).await {
            r?;
        }
        Ok(())
    }

    /// Decides what a step comes to (no effect is written here).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn execute(
        &self,
        project: &str,
        w: &WorkflowRow,
        e: &ExecutionRow,
        step: &Step,
        now: i64,
        attempt: i64,
        seen: &Seen<'_>,
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
            wf::SEND_EMAIL => self.send_email(project, e, step, now, seen).await?,
            _ => self.plugin_step(project, w, e, step, now, attempt, seen).await?,
        })
    }
}

/// The new state of `e` and what goes with it, after `step` came to `outcome`.
pub(super) fn apply(
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
            move_on(project, w, &mut to, &step.id, branch.as_deref(), wait, &mut fx, now);
        }
        Outcome::Patched { branch, output, change } => {
            fx.runs.push(run(StepRunStatus::Completed, Some(output), None, true));
            fx.events.extend(change.events.iter().cloned());
            fx.contact = Some(*change);
            move_on(project, w, &mut to, &step.id, branch.as_deref(), None, &mut fx, now);
        }
        Outcome::Sent { email, output } => {
            fx.runs.push(run(StepRunStatus::Completed, Some(output), None, true));
            fx.emails.push(NewEmail {
                row: *email,
                job_kind: crate::services::delivery::DELIVER_JOB,
                priority: EMAIL_PRIORITY,
                attempts: crate::services::delivery::DELIVER_ATTEMPTS,
            });
            move_on(project, w, &mut to, &step.id, None, None, &mut fx, now);
        }
        Outcome::Skipped { reason } => {
            fx.runs.push(run(StepRunStatus::Skipped, Some(json!({ "reason": reason })), None, true));
            move_on(project, w, &mut to, &step.id, None, None, &mut fx, now);
        }
        Outcome::Wait { until, event: awaited, output } => {
            let r = run(StepRunStatus::Waiting, Some(output), None, false);
            to.status = ExecutionStatus::Waiting;
            to.run = Some(r.id.clone());
            to.waiting_event = awaited;
            fx.runs.push(r);
            if let Some(at) = until {
                // The store writes the timer job (`workflow_runs::timer_jobs`), shared with the batch.
                to.timer = Some(new_id());
                fx.timer_at = Some(at);
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
    // Whatever the step caused carries the execution's depth (docs/security.md#workflows).
    let depth = Some(e.depth.unwrap_or(0));
    for ev in fx.events.iter_mut().filter(|ev| ev.depth.is_none()) {
        ev.depth = depth;
    }
    for m in &mut fx.emails {
        m.row.depth = depth;
    }
    (to, fx)
}

/// Points `to` at the step after `from` (or completes it).
#[allow(clippy::too_many_arguments)]
fn move_on(
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

/// The end of the wait of `e` in `step` (its timer fired or its event came): the waiting run completes
/// and the execution moves on (its next steps run before anything is written). `context`: the context
/// after the event.
#[allow(clippy::too_many_arguments)]
pub(super) fn resumed(
    project: &str,
    w: &WorkflowRow,
    e: &ExecutionRow,
    step: &Step,
    wait: Option<WaitOutcome>,
    output: Value,
    context: Option<Value>,
    now: i64,
) -> (ExecutionRow, Effects) {
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
    move_on(project, w, &mut to, &step.id, None, wait, &mut fx, now);
    (to, fx)
}

/// Ends `to` FAILED with `why` (no timer, wait or open run left) and adds what goes with it: the contact
/// leaves, `workflow.failed` is stored.
pub(super) fn failed(project: &str, to: &mut ExecutionRow, fx: &mut Effects, why: &str, now: i64) {
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

    /// The whole batch at once; when that fails, one event at a time, to say which one fails (the
    /// engine tolerates seeing an event again).
    fn handle_batch<'a>(&'a self, events: &'a [Event]) -> crate::services::events::BatchFuture<'a> {
        Box::pin(async move {
            if self.0.on_events(events).await.is_ok() {
                return Ok(());
            }
            for (i, e) in events.iter().enumerate() {
                self.0.on_event(e).await.map_err(|m| (i, m))?;
            }
            Ok(())
        })
    }
}

/// Why a step could not be decided now.
pub(super) enum StepError {
    /// Worth another attempt later (with the job's backoff); the last attempt fails the execution.
    Retry(String),
}
