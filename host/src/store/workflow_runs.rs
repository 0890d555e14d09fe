//! Workflow executions, the runs of their steps, and the entries that carry the re-entry rules. Every
//! change of an execution is one transaction that writes the whole row only over the state it was
//! decided from (status, step, timer): a cancel, a second process or a repeated job that came first
//! makes it write nothing. Every query filters by project.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::events::{Event, OUTBOX_INSERT, outbox_row};
use super::{Store, StoreError};
use crate::domain::status::{ExecutionStatus, StepRunStatus};
use crate::vars;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExecutionRow {
    pub id: String,
    pub workflow: String,
    pub contact: String,
    pub status: ExecutionStatus,
    pub context: Value,
    pub step: Option<String>,
    pub timer: Option<String>,
    /// the step run that is open (RUNNING or WAITING) now
    pub run: Option<String>,
    pub waiting_event: Option<String>,
    pub trigger_event: Option<String>,
    pub error: Option<String>,
    pub exit_reason: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub completed_at: Option<i64>,
    /// how many workflow.* events led to it (0 or none: a tracked event, a contact change, a person)
    #[serde(default)]
    pub depth: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StepRunRow {
    pub id: String,
    pub step: String,
    pub step_type: String,
    pub status: StepRunStatus,
    /// JSON text
    pub output: Option<String>,
    pub error: Option<String>,
    pub started_at: i64,
    pub completed_at: Option<i64>,
}

const EXEC_FIELDS: &str = "record::id(id) AS id, workflow, contact, status, context, step, timer, run, waiting_event, \
                           trigger_event, error, exit_reason, created_at, updated_at, completed_at, depth";
const RUN_FIELDS: &str = "record::id(id) AS id, step, step_type, status, output, error, started_at, completed_at";

fn exec_doc(project: &str, e: &ExecutionRow) -> Value {
    super::jobs::strip_nulls(vars! {
        "project": project, "workflow": e.workflow, "contact": e.contact, "status": e.status, "context": e.context,
        "step": e.step, "timer": e.timer, "run": e.run, "waiting_event": e.waiting_event, "trigger_event": e.trigger_event,
        "error": e.error, "exit_reason": e.exit_reason, "created_at": e.created_at, "updated_at": e.updated_at,
        "completed_at": e.completed_at, "depth": e.depth,
    })
}

fn run_docs(project: &str, execution: &str, runs: &[StepRunRow]) -> Vec<Value> {
    runs.iter()
        .map(|r| {
            vars! { "id": r.id, "doc": super::jobs::strip_nulls(vars! {
                "project": project, "execution": execution, "step": r.step, "step_type": r.step_type,
                "status": r.status, "output": r.output, "error": r.error, "started_at": r.started_at,
                "completed_at": r.completed_at,
            }) }
        })
        .collect()
}

/// What a write of an execution carries besides the row: its step runs (created or replaced), jobs to
/// queue, events to store, an email a SEND_EMAIL step wrote, and whether the contact leaves the
/// workflow (its entry stops being active).
#[derive(Debug, Clone, Default)]
pub struct Effects {
    pub runs: Vec<StepRunRow>,
    /// job rows (`NewJob::doc`)
    pub jobs: Vec<Value>,
    pub events: Vec<Event>,
    pub email: Option<NewEmail>,
    /// a plugin step's change to the contact, written only over the version it was planned from
    pub contact: Option<ContactChange>,
    pub leaves: bool,
}

/// A change to the execution's contact (its events go with the effects' events).
#[derive(Debug, Clone)]
pub struct ContactChange {
    pub id: String,
    pub version: i64,
    pub email: String,
    pub subscribed: bool,
    pub data: serde_json::Map<String, Value>,
    pub events: Vec<Event>,
}

/// An email record to write with its delivery job.
#[derive(Debug, Clone)]
pub struct NewEmail {
    pub row: super::emails::EmailRow,
    pub job_kind: &'static str,
    pub priority: i64,
    pub attempts: i64,
}

/// Why a new execution was not started.
#[derive(Debug, PartialEq, Eq)]
pub enum StartRefused {
    /// The contact entered before (allowReentry false) or is in the workflow now.
    Reentry,
    /// An execution with this id exists (the same event, delivered again).
    Duplicate,
}

impl Store {
    fn effects_sql(sql: &mut String, fx: &Effects) {
        if !fx.runs.is_empty() {
            sql.push_str(
                "FOR $r IN $runs { UPSERT type::record('workflow_step_run', $r.id) CONTENT $r.doc RETURN NONE; };\n",
            );
        }
        if fx.contact.is_some() {
            sql.push_str(
                "LET $cr = (UPDATE type::record('contact', $c.id) SET email = $c.email, subscribed = $c.subscribed,
                    data = $c.data, version = version + 1, updated_at = $now
                    WHERE project = $p AND version = $c.version RETURN VALUE id);
                 IF array::len($cr) == 0 { THROW 'STALE_CONTACT'; };\n",
            );
        }
        if fx.leaves {
            sql.push_str(
                "UPDATE type::record('workflow_entry', [$wf, $contact]) SET active = false, updated_at = $now RETURN NONE;\n",
            );
        }
        if fx.email.is_some() {
            sql.push_str(
                "INSERT INTO email $emails RETURN NONE;
                 INSERT INTO email_body $bodies RETURN NONE;
                 INSERT IGNORE INTO attachment_set $sets RETURN NONE;\n",
            );
        }
        if !fx.jobs.is_empty() || fx.email.is_some() {
            sql.push_str("INSERT INTO job $jobs RETURN NONE;\n");
        }
        if !fx.events.is_empty() {
            sql.push_str("INSERT INTO event $events RETURN NONE;\n");
            sql.push_str(OUTBOX_INSERT);
        }
    }

    fn effects_vars(project: &str, e: &ExecutionRow, fx: &Effects, now: i64) -> Value {
        let mut jobs = fx.jobs.clone();
        let mail = match &fx.email {
            Some(m) => {
                let docs =
                    super::emails::email_docs(std::slice::from_ref(&m.row), m.job_kind, m.priority, m.attempts, 1);
                jobs.extend(docs.jobs);
                (docs.rows, docs.bodies, docs.sets)
            }
            None => Default::default(),
        };
        let change = fx.contact.as_ref().map(|c| {
            vars! { "id": c.id, "version": c.version, "email": c.email, "subscribed": c.subscribed, "data": c.data }
        });
        vars! {
            "c": change,
            "emails": mail.0, "bodies": mail.1, "sets": mail.2,
            "p": project, "id": e.id, "wf": e.workflow, "contact": e.contact, "now": now,
            "doc": exec_doc(project, e), "runs": run_docs(project, &e.id, &fx.runs), "jobs": jobs,
            "events": fx.events.iter().map(Event::row).collect::<Vec<_>>(),
            "outbox": outbox_row(fx.events.iter().map(|x| x.id.as_str())),
        }
    }

    /// Starts an execution under the re-entry rules (`allow_reentry`): with its effects in the same
    /// transaction. The entry is active unless the execution ended at once.
    pub async fn start_execution(
        &self,
        project: &str,
        e: &ExecutionRow,
        allow_reentry: bool,
        fx: &Effects,
        now: i64,
    ) -> Result<Result<(), StartRefused>, StoreError> {
        let mut sql = String::from(
            "BEGIN TRANSACTION;
             IF record::exists(type::record('workflow_execution', $id)) { THROW 'DUPLICATE'; };
             LET $entry = type::record('workflow_entry', [$wf, $contact]);
             IF record::exists($entry) AND (!$reentry OR (SELECT VALUE active FROM ONLY $entry) = true) { THROW 'REENTRY'; };
             UPSERT $entry SET project = $p, active = $active, updated_at = $now RETURN NONE;
             CREATE type::record('workflow_execution', $id) CONTENT $doc RETURN NONE;\n",
        );
        Self::effects_sql(&mut sql, &Effects { leaves: false, ..fx.clone() });
        sql.push_str("COMMIT TRANSACTION;");
        let mut v = Self::effects_vars(project, e, fx, now);
        v["reentry"] = Value::Bool(allow_reentry);
        v["active"] = Value::Bool(e.status.is_active());
        match self.write(|| async { self.query(&sql, v.clone()).await }).await {
            Ok(_) => Ok(Ok(())),
            Err(err) if err.thrown("REENTRY") => Ok(Err(StartRefused::Reentry)),
            Err(err) if err.thrown("DUPLICATE") => Ok(Err(StartRefused::Duplicate)),
            Err(err) => Err(err),
        }
    }

    /// Writes an execution's new state with its effects if it is still `from` (status, step and timer
    /// as read): false when something else moved it first (nothing is written then).
    pub async fn advance_execution(
        &self,
        project: &str,
        from: &ExecutionRow,
        to: &ExecutionRow,
        fx: &Effects,
        now: i64,
    ) -> Result<bool, StoreError> {
        let mut sql = String::from(
            "BEGIN TRANSACTION;
             LET $moved = (UPDATE type::record('workflow_execution', $id) CONTENT $doc
                WHERE project = $p AND status = $fs AND step = $fstep AND timer = $ftimer RETURN VALUE record::id(id));
             IF array::len($moved) == 0 { THROW 'MOVED'; };\n",
        );
        Self::effects_sql(&mut sql, fx);
        sql.push_str("COMMIT TRANSACTION;");
        if let Some(c) = &fx.contact {
            let w = super::contacts::ContactWrite::Update {
                id: c.id.clone(),
                version: c.version,
                email: c.email.clone(),
                subscribed: c.subscribed,
                data: c.data.clone(),
                now,
            };
            self.forget_written(project, std::slice::from_ref(&w));
        }
        let mut v = Self::effects_vars(project, to, fx, now);
        v["fs"] = serde_json::to_value(from.status).unwrap_or(Value::Null);
        // NONE in the row reads as NONE; a bound null would not compare equal to it.
        v["fstep"] = from.step.clone().map_or(Value::Null, Value::String);
        v["ftimer"] = from.timer.clone().map_or(Value::Null, Value::String);
        let sql = sql
            .replace("step = $fstep", if from.step.is_some() { "step = $fstep" } else { "step = NONE" })
            .replace("timer = $ftimer", if from.timer.is_some() { "timer = $ftimer" } else { "timer = NONE" });
        match self.write(|| async { self.query(&sql, v.clone()).await }).await {
            Ok(_) => Ok(true),
            Err(err) if err.thrown("MOVED") => Ok(false),
            Err(err) => Err(err),
        }
    }

    pub async fn execution(&self, project: &str, id: &str) -> Result<Option<ExecutionRow>, StoreError> {
        self.query(
            &format!("SELECT {EXEC_FIELDS} FROM workflow_execution WHERE id = type::record('workflow_execution', $id) AND project = $p"),
            vars! { "p": project, "id": id },
        )
        .await?
        .first(0)
    }

    /// The project's executions of a contact that wait for an event with this name.
    pub async fn waiting_for_event(
        &self,
        project: &str,
        contact: &str,
        name: &str,
    ) -> Result<Vec<ExecutionRow>, StoreError> {
        self.query(
            &format!(
                "SELECT {EXEC_FIELDS} FROM workflow_execution
                 WHERE project = $p AND contact = $c AND waiting_event = $n AND status = 'WAITING'"
            ),
            vars! { "p": project, "c": contact, "n": name },
        )
        .await?
        .all(0)
    }

    /// The runs of an execution's steps, in the order they started.
    pub async fn step_runs(&self, project: &str, execution: &str) -> Result<Vec<StepRunRow>, StoreError> {
        self.query(
            &format!(
                "SELECT {RUN_FIELDS} FROM workflow_step_run WHERE execution = $e AND project = $p ORDER BY started_at, id"
            ),
            vars! { "p": project, "e": execution },
        )
        .await?
        .all(0)
    }

    /// One page of a workflow's executions (newest first), optionally of one status, and the total.
    pub async fn list_executions(
        &self,
        project: &str,
        workflow: &str,
        status: Option<ExecutionStatus>,
        offset: usize,
        limit: usize,
    ) -> Result<(Vec<ExecutionRow>, i64), StoreError> {
        let filter = if status.is_some() {
            " WHERE project = $p AND workflow = $wf AND status = $status"
        } else {
            " WHERE project = $p AND workflow = $wf"
        };
        let mut rows = self
            .query(
                &format!(
                    "SELECT {EXEC_FIELDS} FROM workflow_execution{filter} ORDER BY created_at DESC, id DESC LIMIT $limit START $offset;
                     SELECT count() AS n FROM workflow_execution{filter} GROUP ALL;"
                ),
                vars! { "p": project, "wf": workflow, "status": status, "limit": limit, "offset": offset },
            )
            .await?;
        let list = rows.all(0)?;
        let total = rows.value(1)?.get(0).and_then(|r| r.get("n")).and_then(Value::as_i64).unwrap_or(0);
        Ok((list, total))
    }

    /// Cancels RUNNING or WAITING executions of a workflow: the one `id`, or up to `limit` of them. Their
    /// timers become inert, their open step runs CANCELLED, their contacts leave. Answers how many.
    pub async fn cancel_executions(
        &self,
        project: &str,
        workflow: &str,
        id: Option<&str>,
        limit: usize,
        now: i64,
    ) -> Result<i64, StoreError> {
        let which = if id.is_some() { "id = type::record('workflow_execution', $id) AND " } else { "" };
        let v = self
            .write(|| async {
                self.query(
                    &format!(
                        "BEGIN TRANSACTION;
                         LET $gone = (SELECT record::id(id) AS id, contact, run FROM workflow_execution
                            WHERE {which}project = $p AND workflow = $wf AND status IN ['RUNNING', 'WAITING'] LIMIT $limit);
                         LET $ids = $gone.id;
                         UPDATE array::map($ids, |$i| type::record('workflow_execution', $i)) SET status = 'CANCELLED',
                            timer = NONE, run = NONE, waiting_event = NONE, updated_at = $now, completed_at = $now RETURN NONE;
                         LET $runs = array::filter($gone.run, |$r| $r != NONE AND $r != NULL);
                         UPDATE array::map($runs, |$r| type::record('workflow_step_run', $r)) SET status = 'CANCELLED',
                            completed_at = $now WHERE status IN ['RUNNING', 'WAITING'] RETURN NONE;
                         FOR $g IN $gone {{
                            UPDATE type::record('workflow_entry', [$wf, $g.contact]) SET active = false, updated_at = $now RETURN NONE;
                         }};
                         RETURN array::len($ids);
                         COMMIT TRANSACTION;"
                    ),
                    vars! { "p": project, "wf": workflow, "id": id, "limit": limit, "now": now },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_i64().unwrap_or(0))
    }
}
