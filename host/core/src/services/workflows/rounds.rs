//! Running workflow executions many at a time (docs/behaviour.md#workflows). Executions are advanced
//! in memory, round by round (every execution that still runs has its current step decided, several at
//! once), until each waits, ends, or has a step to try again; then everything they did is written in one
//! transaction per project, each execution only over the state it was read in (a new one under the
//! re-entry rules). Nothing a step decides takes effect before that write: a crash before it leaves the
//! work to be done again (the event handed over again, the job claimed again), and after it nothing is
//! done twice. When one execution of a batch moved first (a cancel, another process) the batch is
//! written again one execution at a time, so that only that one is left out.
//!
//! The steps see the contact as the execution's earlier steps left it. A CONDITION on the contact after
//! an unwritten contact change pauses the execution: it is written, and a `workflow.run` job goes on
//! from there (the condition reads the database).
//!
//! Where the work comes from: the event stream (starts and resumes by events), `workflow.timer` jobs
//! (a DELAY's end, a wait's timeout) and `workflow.run` jobs (manual starts, retries, pauses). A step
//! that asks to be tried again fails its job (retried with the queue's backoff) or, for work from the
//! stream or a timer, is written with a `workflow.run` job for later; a job's last attempt fails its
//! execution instead.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use serde_json::{Value, json};

use super::engine::{Engine, Flows, JOB_ATTEMPTS, Outcome, Planned, Seen, StepError, apply, failed, job, resumed};
use crate::domain::status::ExecutionStatus;
use crate::domain::workflows::steps::{self, Source};
use crate::domain::workflows::{self as wf, WaitOutcome};
use crate::infra::jobs::JobContext;
use crate::store::StoreError;
use crate::store::contacts::Contact;
use crate::store::workflow_runs::{Effects, ExecutionRow, Move, Start};
use crate::store::workflows::WorkflowRow;

/// Steps of one round decided at the same time at most (each may read the store or call a plugin).
const DECIDING: usize = 32;

/// An execution advancing in memory.
pub(super) struct Run {
    /// The job that carries it (None: work from the event stream or a timer, written with a job when it
    /// has to go on later).
    job: Option<usize>,
    project: String,
    attempt: i64,
    /// As read (None: a new execution, started by the write).
    from: Option<ExecutionRow>,
    allow_reentry: bool,
    /// As it is now.
    e: ExecutionRow,
    w: Arc<WorkflowRow>,
    /// What its steps so far did.
    fx: Effects,
    /// The contact as the steps so far left it: None until read, then None inside when it is gone.
    contact: Option<Option<Contact>>,
    /// A step asked to be tried again, for this reason.
    retry: Option<String>,
    /// The next step must see what was done so far written.
    pause: bool,
}

impl Run {
    /// A new execution (its first step's job left out: it runs here).
    pub(super) fn start(project: &str, mut p: Planned, w: Arc<WorkflowRow>) -> Run {
        p.fx.jobs.clear();
        Run::new(None, project, 1, None, p.allow_reentry, p.e, w, p.fx)
    }

    /// An execution that moved from `from` to `e` (a resumed wait) and goes on from there.
    pub(super) fn moved(project: &str, from: ExecutionRow, e: ExecutionRow, fx: Effects, w: Arc<WorkflowRow>) -> Run {
        Run::new(None, project, 1, Some(from), false, e, w, fx)
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        job: Option<usize>,
        project: &str,
        attempt: i64,
        from: Option<ExecutionRow>,
        allow_reentry: bool,
        e: ExecutionRow,
        w: Arc<WorkflowRow>,
        fx: Effects,
    ) -> Run {
        Run {
            job,
            project: project.to_string(),
            attempt,
            from,
            allow_reentry,
            e,
            w,
            fx,
            contact: None,
            retry: None,
            pause: false,
        }
    }
}

/// A job of the batch: its project, execution, attempt and (timers) token.
struct Wanted {
    job: usize,
    project: String,
    id: String,
    attempt: i64,
    token: Option<String>,
}

/// The executions the jobs name: one each, or a timer job's list (`timers`, written together).
fn wanted(ctxs: &[JobContext]) -> Vec<Wanted> {
    let mut out = Vec::new();
    for (job, c) in ctxs.iter().enumerate() {
        let p = &c.payload;
        let Some(project) = p.get("project").and_then(Value::as_str) else { continue };
        let one = std::slice::from_ref(p);
        let items = p.get("timers").and_then(Value::as_array).map_or(one, Vec::as_slice);
        for t in items {
            let Some(id) = t.get("execution").and_then(Value::as_str) else { continue };
            out.push(Wanted {
                job,
                project: project.to_string(),
                id: id.to_string(),
                attempt: c.attempt,
                token: t.get("token").and_then(Value::as_str).map(str::to_string),
            });
        }
    }
    out
}

/// Whether a step reads the contact (SEND_EMAIL and plugin steps).
fn reads_contact(kind: &str) -> bool {
    !matches!(kind, wf::TRIGGER | wf::DELAY | wf::WAIT_FOR_EVENT | wf::CONDITION | wf::EXIT)
}

/// Whether a CONDITION step's config is evaluated against the contact in the database.
fn condition_on_contact(config: &Value) -> bool {
    steps::parse_condition(config, &|_| true).map(|c| matches!(c.source, Source::Contact)).unwrap_or(true)
}

impl Engine {
    /// The jobs' executions (one read per project) with their workflows, each once: a second job for
    /// the same execution has nothing to do. Jobs whose read failed get the error.
    async fn read(
        &self,
        jobs: Vec<Wanted>,
        results: &mut [Result<(), String>],
    ) -> Vec<(Wanted, ExecutionRow, Arc<WorkflowRow>)> {
        let mut by_project: HashMap<String, Vec<Wanted>> = HashMap::new();
        for j in jobs {
            by_project.entry(j.project.clone()).or_default().push(j);
        }
        let mut out = Vec::new();
        for (project, jobs) in by_project {
            let ids: Vec<String> = jobs.iter().map(|j| j.id.clone()).collect();
            let rows = match self.store.executions(&project, &ids).await {
                Ok(rows) => rows,
                Err(e) => {
                    for j in jobs {
                        results[j.job] = Err(e.to_string());
                    }
                    continue;
                }
            };
            let mut rows: HashMap<String, ExecutionRow> = rows.into_iter().map(|e| (e.id.clone(), e)).collect();
            let mut flows = Flows::default();
            for j in jobs {
                // What the read by ids left out is read again on its own before the job counts as done
                // (its execution deleted): a job is never dropped on a read that missed its row.
                let e = match rows.remove(&j.id) {
                    Some(e) => e,
                    None => match self.store.execution(&project, &j.id).await {
                        Ok(Some(e)) => {
                            tracing::warn!(execution = %j.id, "a batch read missed an execution; read it alone");
                            e
                        }
                        Ok(None) => continue,
                        Err(err) => {
                            results[j.job] = Err(err.to_string());
                            continue;
                        }
                    },
                };
                match flows.get(&self.store, &project, &e.workflow).await {
                    Ok(Some(w)) => out.push((j, e, w)),
                    Ok(None) => {}
                    Err(err) => results[j.job] = Err(err.to_string()),
                }
            }
        }
        out
    }

    /// `workflow.run` jobs: runs their executions' steps until each waits or ends.
    pub(super) async fn run_jobs(&self, ctxs: Vec<JobContext>) -> Vec<Result<(), String>> {
        let mut results = vec![Ok(()); ctxs.len()];
        let mut runs = Vec::new();
        for (j, e, w) in self.read(wanted(&ctxs), &mut results).await {
            if e.status == ExecutionStatus::Running {
                let from = Some(e.clone());
                runs.push(Run::new(Some(j.job), &j.project, j.attempt, from, false, e, w, Effects::default()));
            }
        }
        for (job, r) in self.advance(runs).await {
            if let (Some(job), Err(m)) = (job, r) {
                results[job] = Err(m);
            }
        }
        self.last_attempts(&ctxs, results).await
    }

    /// `workflow.timer` jobs: a DELAY's end or a wait's timeout, inert unless the execution still waits
    /// with the job's token; the execution goes on from there.
    pub(super) async fn timer_jobs(&self, ctxs: Vec<JobContext>) -> Vec<Result<(), String>> {
        let mut results = vec![Ok(()); ctxs.len()];
        let now = self.clock.now_ms();
        let mut runs = Vec::new();
        let mut jobs = Vec::new();
        for (j, e, w) in self.read(wanted(&ctxs), &mut results).await {
            if e.status != ExecutionStatus::Waiting || e.timer.is_none() || e.timer != j.token {
                continue;
            }
            let (to, fx) = match e.step.as_deref().and_then(|s| w.graph.step(s)) {
                None => lost(&j.project, &e, now),
                Some(step) => {
                    let (wait, output) = match step.kind.as_str() {
                        wf::WAIT_FOR_EVENT => (Some(WaitOutcome::Timeout), json!({ "outcome": "TIMEOUT" })),
                        _ => (None, json!({ "delayed": true })),
                    };
                    resumed(&j.project, &w, &e, step, wait, output, None, now)
                }
            };
            jobs.push(j.job);
            runs.push(Run::moved(&j.project, e, to, fx, w));
        }
        for ((_, r), job) in self.advance(runs).await.into_iter().zip(jobs) {
            if let Err(m) = r {
                results[job] = Err(m);
            }
        }
        self.last_attempts(&ctxs, results).await
    }

    /// Advances executions in memory until each waits, ends, pauses or has a step to try again, then
    /// writes them. Per run, in order: its job and how it went (an error: try again later).
    pub(super) async fn advance(&self, mut runs: Vec<Run>) -> Vec<(Option<usize>, Result<(), String>)> {
        let templates = Mutex::default();
        let emails = super::limits::EmailUse::default();
        let allowance = crate::services::billing::Allowance::default();
        for _ in 0..=wf::MAX_STEPS {
            if !self.round(&mut runs, &templates, &emails, &allowance).await {
                break;
            }
        }
        self.write(runs).await
    }

    /// One round: decides the current step of every execution that goes on. False when none did.
    async fn round(
        &self,
        runs: &mut [Run],
        templates: &Mutex<HashMap<String, Option<Arc<crate::store::templates::TemplateRow>>>>,
        emails: &super::limits::EmailUse,
        allowance: &crate::services::billing::Allowance,
    ) -> bool {
        let mut going = Vec::new();
        let mut unread: HashMap<String, Vec<usize>> = HashMap::new();
        let mut sending: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, r) in runs.iter_mut().enumerate() {
            if r.e.status != ExecutionStatus::Running || r.retry.is_some() || r.pause {
                continue;
            }
            if let Some(step) = r.e.step.as_deref().and_then(|s| r.w.graph.step(s)) {
                if step.kind == wf::CONDITION && r.fx.contact.is_some() && condition_on_contact(&step.config) {
                    r.pause = true;
                    continue;
                }
                if reads_contact(&step.kind) && r.contact.is_none() {
                    unread.entry(r.project.clone()).or_default().push(i);
                }
                if step.kind == wf::SEND_EMAIL && self.budgets.emails > 0 {
                    sending.entry(r.project.clone()).or_default().push(i);
                }
            }
            going.push(i);
        }
        if going.is_empty() {
            return false;
        }
        // The contacts the round's steps read, one read per project.
        for (project, idx) in unread {
            let ids: Vec<String> = idx.iter().map(|i| runs[*i].e.contact.clone()).collect();
            match self.store.contacts_by_ids(&project, &ids).await {
                Ok(found) => {
                    let found: HashMap<String, Contact> = found.into_iter().map(|c| (c.id.clone(), c)).collect();
                    for i in idx {
                        let id = runs[i].e.contact.clone();
                        runs[i].contact = match found.get(&id) {
                            Some(c) => Some(Some(c.clone())),
                            // Read alone before the step is told the contact is gone.
                            None => match self.store.contact(&project, &id).await {
                                Ok(c) => {
                                    if c.is_some() {
                                        tracing::warn!(contact = %id, "a batch read missed a contact; read it alone");
                                    }
                                    Some(c)
                                }
                                Err(e) => {
                                    runs[i].retry = Some(e.to_string());
                                    None
                                }
                            },
                        };
                    }
                }
                Err(e) => {
                    for i in idx {
                        runs[i].retry = Some(e.to_string());
                    }
                }
            }
        }
        let now = self.clock.now_ms();
        // What the contacts of the round's SEND_EMAIL steps used of their email budget, one read per
        // project (contacts read before in this batch are counted in memory).
        for (project, idx) in sending {
            let contacts: Vec<&str> = idx.iter().map(|i| runs[*i].e.contact.as_str()).collect();
            if let Err(e) = emails.load(&self.store, &project, &contacts, now).await {
                for i in idx {
                    runs[i].retry = Some(e.to_string());
                }
            }
        }
        going.retain(|i| runs[*i].retry.is_none());
        let decided: Vec<(usize, Result<Option<Outcome>, StepError>)> = {
            let runs: &[Run] = runs;
            futures_util::stream::iter(going)
                .map(|i| async move {
                    let r = &runs[i];
                    let Some(step) = r.e.step.as_deref().and_then(|s| r.w.graph.step(s)) else { return (i, Ok(None)) };
                    let contact = r.contact.as_ref().and_then(Option::as_ref);
                    let seen = Seen { contact, templates, emails, allowance };
                    (i, self.execute(&r.project, &r.w, &r.e, step, now, r.attempt, &seen).await.map(Some))
                })
                .buffered(DECIDING)
                .collect()
                .await
        };
        for (i, outcome) in decided {
            let r = &mut runs[i];
            let outcome = match outcome {
                Ok(o) => o,
                // Tried again later; a job's last attempt fails the execution instead.
                Err(StepError::Retry(m)) if r.attempt < JOB_ATTEMPTS => {
                    r.retry = Some(m);
                    continue;
                }
                Err(StepError::Retry(m)) => Some(Outcome::Failed { error: m }),
            };
            let step = r.e.step.as_deref().and_then(|s| r.w.graph.step(s));
            let (to, fx) = match (outcome, step) {
                (Some(o), Some(step)) => apply(&r.project, &r.w, &r.e, step, o, now),
                _ => lost(&r.project, &r.e, now),
            };
            if let (Some(change), Some(Some(c))) = (&fx.contact, &mut r.contact) {
                c.data = change.data.clone();
                c.subscribed = change.subscribed;
            }
            r.fx.merge(fx);
            r.e = to;
        }
        true
    }

    /// Writes what the runs did, one transaction per project (one at a time when the batch is refused).
    /// A run that still runs (a pause, a step to try again) is written with a `workflow.run` job, unless
    /// its own job is tried again.
    async fn write(&self, mut runs: Vec<Run>) -> Vec<(Option<usize>, Result<(), String>)> {
        let now = self.clock.now_ms();
        let mut out: Vec<(Option<usize>, Result<(), String>)> =
            runs.iter().map(|r| (r.job, r.retry.clone().map_or(Ok(()), Err))).collect();
        let mut by_project: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, r) in runs.iter_mut().enumerate() {
            if r.e.status == ExecutionStatus::Running && !(r.job.is_some() && r.retry.is_some()) {
                let at = if r.retry.is_some() { now + crate::infra::jobs::backoff_ms(1) } else { now };
                r.fx.jobs.push(job(super::engine::RUN_JOB, json!({ "project": r.project, "execution": r.e.id }), at));
            }
            let changed = r.from.as_ref() != Some(&r.e) || !r.fx.runs.is_empty() || !r.fx.jobs.is_empty();
            if changed {
                by_project.entry(r.project.clone()).or_default().push(i);
            }
        }
        let mut woke = false;
        for (project, idx) in by_project {
            // Recipients on the suppression list: their emails are recorded SUPPRESSED, not delivered.
            if let Err(e) = self.suppress(&project, &idx, &mut runs).await {
                for i in idx {
                    out[i].1 = Err(e.to_string());
                }
                continue;
            }
            let (new, old): (Vec<usize>, Vec<usize>) = idx.iter().partition(|i| runs[**i].from.is_none());
            let s: Vec<Start> = new
                .iter()
                .map(|i| Start { e: &runs[*i].e, allow_reentry: runs[*i].allow_reentry, fx: &runs[*i].fx })
                .collect();
            let m: Vec<Move> = old
                .iter()
                .filter_map(|i| runs[*i].from.as_ref().map(|from| Move { from, to: &runs[*i].e, fx: &runs[*i].fx }))
                .collect();
            match self.store.write_executions(&project, &s, &m, now).await {
                Ok(Ok(())) => woke = true,
                // Something came first: one at a time, each refusal (a start the rules refuse, an
                // execution that moved) its answer.
                Ok(Err(_)) => {
                    for (i, st) in new.iter().zip(&s) {
                        match self.store.start_execution(&project, st.e, st.allow_reentry, st.fx, now).await {
                            Ok(_) => woke = true,
                            Err(e) => out[*i].1 = Err(e.to_string()),
                        }
                    }
                    for (i, mv) in old.iter().zip(&m) {
                        match self.store.advance_execution(&project, mv.from, mv.to, mv.fx, now).await {
                            Ok(_) => woke = true,
                            Err(e) => out[*i].1 = Err(e.to_string()),
                        }
                    }
                }
                Err(e) => {
                    for i in idx {
                        out[i].1 = Err(e.to_string());
                    }
                }
            }
        }
        if woke {
            self.wake(runs.iter().flat_map(|r| r.fx.kinds_due(now)));
        }
        out
    }

    /// Marks the emails of these runs whose recipient is on the project's suppression list (one read for
    /// all of them; none when they send nothing).
    async fn suppress(&self, project: &str, idx: &[usize], runs: &mut [Run]) -> Result<(), StoreError> {
        use crate::domain::status::EmailStatus;
        let pending = |m: &&mut crate::store::workflow_runs::NewEmail| m.row.status == EmailStatus::Pending;
        let addresses: Vec<String> = idx
            .iter()
            .flat_map(|i| runs[*i].fx.emails.iter())
            .filter(|m| m.row.status == EmailStatus::Pending)
            .map(|m| m.row.recipient.clone())
            .collect();
        if addresses.is_empty() {
            return Ok(());
        }
        let found = crate::services::suppressions::among(&self.store, project, &addresses).await?;
        for i in idx {
            for m in runs[*i].fx.emails.iter_mut().filter(pending) {
                if let Some(why) = found.get(&m.row.recipient) {
                    m.row.status = EmailStatus::Suppressed;
                    m.row.error = Some(why.clone());
                }
            }
        }
        Ok(())
    }

    /// The batch's results, except that a job failing on its last attempt fails its execution instead of
    /// leaving it RUNNING or WAITING with nothing left to move it.
    async fn last_attempts(
        &self,
        ctxs: &[JobContext],
        mut results: Vec<Result<(), String>>,
    ) -> Vec<Result<(), String>> {
        // Per job given up on: whether failing each of its executions went well.
        let mut given_up: HashMap<usize, Result<(), String>> = HashMap::new();
        for w in wanted(ctxs) {
            let job = w.job;
            let Err(m) = &results[job] else { continue };
            if w.attempt < JOB_ATTEMPTS {
                continue;
            }
            let why = format!("gave up after {JOB_ATTEMPTS} attempts: {m}");
            // A timer job's executions that went on (their token moved) are left as they are.
            let r = self.fail(&w.project, &w.id, w.token.as_deref(), &why).await.map_err(|e| e.to_string());
            let entry = given_up.entry(job).or_insert(Ok(()));
            if entry.is_ok() {
                *entry = r;
            }
        }
        for (job, r) in given_up {
            results[job] = r;
        }
        results
    }

    /// Fails an execution that cannot go on, if it still runs or waits (on the timer `token`, when given).
    async fn fail(&self, project: &str, id: &str, token: Option<&str>, why: &str) -> Result<(), StoreError> {
        let still = |e: &ExecutionRow| e.status.is_active() && (token.is_none() || e.timer.as_deref() == token);
        let Some(e) = self.store.execution(project, id).await?.filter(still) else {
            return Ok(());
        };
        let now = self.clock.now_ms();
        let mut to = e.clone();
        to.updated_at = now;
        let mut fx = Effects::default();
        failed(project, &mut to, &mut fx, why, now);
        self.store.advance_execution(project, &e, &to, &fx, now).await?;
        Ok(())
    }
}

/// An execution whose step was deleted from its workflow: it fails.
pub(super) fn lost(project: &str, e: &ExecutionRow, now: i64) -> (ExecutionRow, Effects) {
    let mut to = e.clone();
    to.updated_at = now;
    let mut fx = Effects::default();
    failed(project, &mut to, &mut fx, "its step was deleted from the workflow", now);
    (to, fx)
}
