//! Workflow executions, the runs of their steps, and the entries that carry the re-entry rules. Every
//! change of an execution is one transaction that writes the whole row only over the state it was
//! decided from (status, step, timer): a cancel, a second process or a repeated job that came first
//! makes it write nothing. Every query filters by project.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::events::{Event, OUTBOX_INSERT, outbox_row};
use super::jobs::NewJob;
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
    /// the runs of its steps, kept in the row (migration 0032), in the order they started; a write adds
    /// or replaces the runs its effects carry ([`Effects::runs`])
    #[serde(default)]
    pub runs: Vec<StepRunRow>,
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

/// An execution's fields without its step runs (lists), and with them (everything that moves it).
macro_rules! exec_fields {
    () => {
        "record::id(id) AS id, workflow, contact, status, context, step, timer, run, waiting_event, \
         trigger_event, error, exit_reason, created_at, updated_at, completed_at, depth"
    };
}
const LIST_FIELDS: &str = exec_fields!();
const EXEC_FIELDS: &str = concat!(exec_fields!(), ", runs");

/// The row of an execution as it is written: its runs as read, with `more` added or replaced by id.
pub(super) fn exec_doc(project: &str, e: &ExecutionRow, more: &[StepRunRow]) -> Value {
    let mut runs = e.runs.clone();
    for r in more {
        match runs.iter_mut().find(|x| x.id == r.id) {
            Some(x) => *x = r.clone(),
            None => runs.push(r.clone()),
        }
    }
    let runs: Vec<Value> = runs
        .iter()
        .map(|r| {
            super::jobs::strip_nulls(vars! {
                "id": r.id, "step": r.step, "step_type": r.step_type, "status": r.status, "output": r.output,
                "error": r.error, "started_at": r.started_at, "completed_at": r.completed_at,
            })
        })
        .collect();
    super::jobs::strip_nulls(vars! {
        "project": project, "workflow": e.workflow, "contact": e.contact, "status": e.status, "context": e.context,
        "step": e.step, "timer": e.timer, "run": e.run, "waiting_event": e.waiting_event, "trigger_event": e.trigger_event,
        "error": e.error, "exit_reason": e.exit_reason, "created_at": e.created_at, "updated_at": e.updated_at,
        "completed_at": e.completed_at, "depth": e.depth, "runs": runs,
    })
}

/// What a write of an execution carries besides the row: its step runs (added to the row or replacing
/// the run with the same id there), jobs to
/// queue, events to store, an email a SEND_EMAIL step wrote, and whether the contact leaves the
/// workflow (its entry stops being active).
#[derive(Debug, Clone, Default)]
pub struct Effects {
    pub runs: Vec<StepRunRow>,
    /// jobs to queue (each written as created at its `run_at`)
    pub jobs: Vec<NewJob>,
    pub events: Vec<Event>,
    pub emails: Vec<NewEmail>,
    /// a plugin step's change to the contact, written only over the version it was planned from
    pub contact: Option<ContactChange>,
    pub leaves: bool,
    /// when the execution's timer (its `timer` token) comes due: written as a timer job shared with the
    /// other executions of the write whose timers come due then
    pub timer_at: Option<i64>,
}

impl Effects {
    /// The kinds of the jobs these effects queue that are due by `now` (a worker is woken for them).
    pub fn kinds_due(&self, now: i64) -> impl Iterator<Item = &str> {
        let jobs = self.jobs.iter().filter(move |j| j.run_at <= now);
        jobs.map(|j| j.kind.as_str()).chain(self.emails.iter().map(|e| e.job_kind))
    }

    /// Adds the effects of a later step: a later contact change replaces the earlier one's state and is
    /// written over the version the first was planned from.
    pub fn merge(&mut self, later: Effects) {
        self.runs.extend(later.runs);
        self.jobs.extend(later.jobs);
        self.events.extend(later.events);
        self.emails.extend(later.emails);
        self.leaves |= later.leaves;
        self.timer_at = later.timer_at.or(self.timer_at);
        if let Some(c) = later.contact {
            self.contact = Some(match self.contact.take() {
                Some(first) => ContactChange { version: first.version, events: Vec::new(), ..c },
                None => c,
            });
        }
    }
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

/// One execution's move in a batch: written only if it is still `from` (status, step and timer as read).
pub struct Move<'a> {
    pub from: &'a ExecutionRow,
    pub to: &'a ExecutionRow,
    pub fx: &'a Effects,
}

/// One new execution in a batch, under the re-entry rules (`allow_reentry`).
pub struct Start<'a> {
    pub e: &'a ExecutionRow,
    pub allow_reentry: bool,
    pub fx: &'a Effects,
}

/// Why a batch wrote nothing: one of its items was refused (which one is not said: write the items one
/// at a time to find out).
#[derive(Debug, PartialEq, Eq)]
pub enum BatchRefused {
    Start(StartRefused),
    /// An execution moved since it was read.
    Moved,
    /// A contact changed since a plugin step's patch was planned from it.
    StaleContact,
    /// The batch's emails would take the month past the project's workflows limit (another batch
    /// counted first): written one at a time, the executions that no longer fit are tried again and
    /// then find the limit reached.
    Limit,
}

/// The job kind of workflow timers (a DELAY's end, a wait's timeout).
pub const TIMER_KIND: &str = "workflow.timer";
/// Claim priority of workflow jobs: after transactional delivery (100), before campaign work (5, 1).
pub const JOB_PRIORITY: i64 = 50;
/// Attempts of a workflow job before the execution fails.
pub const JOB_ATTEMPTS: i64 = 5;

/// The timer jobs of these executions: one per due time, listing every execution that comes due then
/// with its timer token (`{project, timers: [{execution, token}]}`), so the executions a batch moves into
/// a wait at one moment cost one job row and one claim instead of one each.
fn timer_jobs(project: &str, items: &[(&ExecutionRow, &Effects)]) -> Vec<Value> {
    let mut due: std::collections::BTreeMap<i64, Vec<Value>> = Default::default();
    for (e, fx) in items {
        if let (Some(at), Some(token)) = (fx.timer_at, &e.timer) {
            due.entry(at).or_default().push(vars! { "execution": e.id, "token": token });
        }
    }
    due.into_iter()
        .map(|(at, timers)| {
            let mut j = NewJob::new(TIMER_KIND, vars! { "project": project, "timers": timers }, at);
            j.priority = JOB_PRIORITY;
            j.max_attempts = JOB_ATTEMPTS;
            j.doc(at)
        })
        .collect()
}

/// The effects of many executions besides their rows, as statements and their bindings.
fn effects(
    project: &str,
    items: &[(&ExecutionRow, &Effects)],
    counted: super::billing::Counted,
    now: i64,
    sql: &mut String,
    v: &mut Value,
) {
    let mut jobs = Vec::new();
    let mut events = Vec::new();
    let mut emails = Vec::new();
    let mut contacts = Vec::new();
    let mut leaves = Vec::new();
    for (e, fx) in items {
        jobs.extend(fx.jobs.iter().map(|j| j.doc(j.run_at)));
        events.extend(fx.events.iter());
        emails.extend(fx.emails.iter());
        if let Some(c) = &fx.contact {
            // The execution's depth goes with the version its change makes: the segment tracker gives the
            // entry and exit events this change causes that depth (`Store::apply_membership`).
            contacts.push(vars! {
                "id": c.id, "project": project, "version": c.version, "email": c.email, "subscribed": c.subscribed,
                "data": c.data, "created_at": now, "updated_at": now, "depth": e.depth.unwrap_or(0),
            });
        }
        if fx.leaves {
            leaves.push(vars! { "wf": e.workflow, "contact": e.contact });
        }
    }
    if !contacts.is_empty() {
        sql.push_str(
            // Set-wise: every contact still at the version its change was planned from (one contact
            // changed twice in a batch is refused too: the batch is then written one execution at a
            // time), then all changes in one statement, each to the version after the one checked.
            "IF array::len(array::distinct($cids)) != array::len($cids)
                OR (SELECT VALUE [record::id(id), version] FROM array::map($cids, |$i| type::record('contact', $i))
                    WHERE project = $p) != $cvers { THROW 'STALE_CONTACT'; };
             INSERT INTO contact $contacts ON DUPLICATE KEY UPDATE email = $input.email, subscribed = $input.subscribed,
                data = $input.data, version = $input.version + 1, updated_at = $now, depth = $input.depth,
                depth_version = $input.version + 1 RETURN NONE;\n",
        );
    }
    if !leaves.is_empty() {
        sql.push_str(
            "FOR $l IN $leaves {
                UPDATE type::record('workflow_entry', [$l.wf, $l.contact]) SET active = false, updated_at = $now RETURN NONE;
             };\n",
        );
    }
    // Every workflow email goes with the same delivery settings (the first one's), in delivery jobs of
    // up to SEND_JOB_CHUNK emails like a `/v1/send` transaction's: a job per email would cost a job
    // row, its claim and its completion per email.
    if let Some(m) = emails.first() {
        let rows: Vec<super::emails::EmailRow> = emails.iter().map(|m| m.row.clone()).collect();
        let chunk = super::emails::SEND_JOB_CHUNK;
        let docs = super::emails::email_docs(&rows, m.job_kind, m.priority, m.attempts, chunk, Some(counted));
        jobs.extend(docs.jobs);
        // The delivery jobs go with the round's other jobs below.
        sql.push_str(super::emails::EmailDocs::RECORDS);
        v["emails"] = Value::Array(docs.rows);
        v["bodies"] = Value::Array(docs.bodies);
        v["sets"] = Value::Array(docs.sets);
        v["usage"] = Value::Array(docs.usage);
        v["cap"] = docs.cap.into();
    }
    jobs.extend(timer_jobs(project, items));
    if !jobs.is_empty() {
        sql.push_str("INSERT INTO job $jobs RETURN NONE;\n");
    }
    if !events.is_empty() {
        sql.push_str("INSERT INTO event $events RETURN NONE;\n");
        sql.push_str(OUTBOX_INSERT);
        v["outbox"] = outbox_row(events.iter().map(|x| x.id.as_str()));
    }
    v["events"] = Value::Array(events.iter().map(|x| x.row()).collect());
    v["jobs"] = Value::Array(jobs);
    v["cids"] = contacts.iter().map(|c| c["id"].clone()).collect();
    v["cvers"] = contacts.iter().map(|c| Value::Array(vec![c["id"].clone(), c["version"].clone()])).collect();
    v["contacts"] = Value::Array(contacts);
    v["leaves"] = Value::Array(leaves);
    v["p"] = Value::String(project.to_string());
    v["now"] = Value::from(now);
}

fn refused(err: &StoreError) -> Option<BatchRefused> {
    [
        ("DUPLICATE", BatchRefused::Start(StartRefused::Duplicate)),
        ("REENTRY", BatchRefused::Start(StartRefused::Reentry)),
        ("MOVED", BatchRefused::Moved),
        ("STALE_CONTACT", BatchRefused::StaleContact),
        (super::billing::LIMIT_REACHED, BatchRefused::Limit),
    ]
    .into_iter()
    .find_map(|(code, r)| err.thrown(code).then_some(r))
}

impl Store {
    /// Writes new executions and moves of existing ones of one project, each with its effects, in one
    /// transaction, all or nothing: a start refused by the re-entry rules (the contact entered before or
    /// is in the workflow now) or by an existing id, a move whose execution moved since it was read
    /// (status, step and timer), a contact a plugin step patches that changed, or emails that would take
    /// the month past the workflows limit, makes the whole batch write nothing. A started execution's
    /// entry is active unless it ended at once.
    pub async fn write_executions(
        &self,
        project: &str,
        starts: &[Start<'_>],
        moves: &[Move<'_>],
        now: i64,
    ) -> Result<Result<(), BatchRefused>, StoreError> {
        if starts.is_empty() && moves.is_empty() {
            return Ok(Ok(()));
        }
        let mut sql = String::from("BEGIN TRANSACTION;\n");
        let mut v = vars! {};
        if !starts.is_empty() {
            sql.push_str(
                // Set-wise, a few statements for the whole batch (a statement per start costs more than
                // the rows it writes): an existing id, an entry that refuses (any entry without
                // re-entry, an active one with it), then the entries and the executions.
                "IF array::len(SELECT VALUE id FROM array::map($ids, |$i| type::record('workflow_execution', $i))
                    WHERE id != NONE) > 0 { THROW 'DUPLICATE'; };
                 IF array::len(SELECT VALUE id FROM array::map($once, |$k| type::record('workflow_entry', $k))
                    WHERE id != NONE) > 0 { THROW 'REENTRY'; };
                 IF array::len(SELECT VALUE id FROM array::map($again, |$k| type::record('workflow_entry', $k))
                    WHERE active = true) > 0 { THROW 'REENTRY'; };
                 INSERT INTO workflow_entry $entries ON DUPLICATE KEY UPDATE active = $input.active,
                    updated_at = $input.updated_at RETURN NONE;
                 INSERT INTO workflow_execution $execs RETURN NONE;\n",
            );
            let key = |s: &Start<'_>| vec![s.e.workflow.clone(), s.e.contact.clone()];
            v["ids"] = starts.iter().map(|s| Value::String(s.e.id.clone())).collect();
            v["once"] = starts.iter().filter(|s| !s.allow_reentry).map(|s| Value::from(key(s))).collect();
            v["again"] = starts.iter().filter(|s| s.allow_reentry).map(|s| Value::from(key(s))).collect();
            v["entries"] = starts
                .iter()
                .map(|s| {
                    vars! { "id": key(s), "project": project, "active": s.e.status.is_active(), "updated_at": now }
                })
                .collect();
            v["execs"] = starts
                .iter()
                .map(|s| {
                    let mut d = exec_doc(project, s.e, &s.fx.runs);
                    d["id"] = Value::String(s.e.id.clone());
                    d
                })
                .collect();
        }
        if !moves.is_empty() {
            // NONE in the row reads as NONE, and a bound null does not compare equal to it: both sides
            // compare as text, with "" for none (ids are never empty).
            sql.push_str(
                "FOR $x IN $moves {
                    LET $moved = (UPDATE type::record('workflow_execution', $x.id) CONTENT $x.doc
                        WHERE project = $p AND status = $x.fs AND (step ?? '') = $x.fstep AND (timer ?? '') = $x.ftimer
                        RETURN VALUE record::id(id));
                    IF array::len($moved) == 0 { THROW 'MOVED'; };
                 };\n",
            );
            v["moves"] = moves
                .iter()
                .map(|m| {
                    vars! {
                        "id": m.to.id, "doc": exec_doc(project, m.to, &m.fx.runs), "fs": m.from.status,
                        "fstep": m.from.step.clone().unwrap_or_default(), "ftimer": m.from.timer.clone().unwrap_or_default(),
                    }
                })
                .collect();
        }
        // The entry of a started execution is written above (nothing leaves at its start).
        let start_fx: Vec<Effects> = starts.iter().map(|s| Effects { leaves: false, ..s.fx.clone() }).collect();
        let pairs: Vec<(&ExecutionRow, &Effects)> =
            starts.iter().zip(&start_fx).map(|(s, f)| (s.e, f)).chain(moves.iter().map(|m| (m.to, m.fx))).collect();
        let counted = self.counted(project, crate::domain::billing::Category::Workflows).await?;
        effects(project, &pairs, counted, now, &mut sql, &mut v);
        // What the write uses of the contacts' hourly budgets: the starts events made, the emails.
        let mut uses: std::collections::HashMap<&str, super::workflow_budgets::Used> = Default::default();
        for s in starts.iter().filter(|s| s.e.trigger_event.is_some()) {
            uses.entry(s.e.contact.as_str()).or_default().starts += 1;
        }
        for m in pairs.iter().flat_map(|(_, fx)| fx.emails.iter()) {
            uses.entry(m.row.contact.as_str()).or_default().emails += 1;
        }
        super::workflow_budgets::add_use(project, &uses, now, &mut sql, &mut v);
        sql.push_str("COMMIT TRANSACTION;");
        let writes: Vec<super::contacts::ContactWrite> = pairs
            .iter()
            .filter_map(|(_, fx)| fx.contact.as_ref())
            .map(|c| super::contacts::ContactWrite::Update {
                id: c.id.clone(),
                version: c.version,
                email: c.email.clone(),
                subscribed: c.subscribed,
                data: c.data.clone(),
                now,
            })
            .collect();
        if !writes.is_empty() {
            self.forget_written(project, &writes);
        }
        match self.write(|| async { self.query(&sql, v.clone()).await }).await {
            Ok(_) => {
                crate::infra::metrics::executions_written(
                    starts.iter().map(|s| s.e.status.as_str()).chain(moves.iter().map(|m| m.to.status.as_str())),
                );
                Ok(Ok(()))
            }
            Err(err) => refused(&err).map(Err).ok_or(err),
        }
    }

    /// Which of these starts the re-entry rules or an existing id would refuse now (in order).
    pub async fn refused_starts(&self, project: &str, items: &[Start<'_>]) -> Result<Vec<bool>, StoreError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = items.iter().map(|s| s.e.id.as_str()).collect();
        let keys: Vec<[&str; 2]> = items.iter().map(|s| [s.e.workflow.as_str(), s.e.contact.as_str()]).collect();
        let mut r = self
            .query(
                "SELECT VALUE record::id(id) FROM array::map($ids, |$i| type::record('workflow_execution', $i)) WHERE id != NONE;
                 SELECT record::id(id) AS k, active FROM array::map($keys, |$k| type::record('workflow_entry', $k))
                    WHERE project = $p;",
                vars! { "p": project, "ids": ids, "keys": keys },
            )
            .await?;
        let existing: std::collections::HashSet<String> = r.all::<String>(0)?.into_iter().collect();
        #[derive(Deserialize)]
        struct Entry {
            k: (String, String),
            active: bool,
        }
        let entries: std::collections::HashMap<(String, String), bool> =
            r.all::<Entry>(1)?.into_iter().map(|e| (e.k, e.active)).collect();
        Ok(items
            .iter()
            .map(|s| {
                existing.contains(&s.e.id)
                    || entries
                        .get(&(s.e.workflow.clone(), s.e.contact.clone()))
                        .is_some_and(|active| !s.allow_reentry || *active)
            })
            .collect())
    }

    /// Starts one execution ([`Store::write_executions`] of one).
    pub async fn start_execution(
        &self,
        project: &str,
        e: &ExecutionRow,
        allow_reentry: bool,
        fx: &Effects,
        now: i64,
    ) -> Result<Result<(), StartRefused>, StoreError> {
        match self.write_executions(project, &[Start { e, allow_reentry, fx }], &[], now).await? {
            Ok(()) => Ok(Ok(())),
            Err(BatchRefused::Start(r)) => Ok(Err(r)),
            Err(other) => Err(StoreError::Thrown(format!("{other:?}"))),
        }
    }

    /// Writes one execution's move ([`Store::write_executions`] of one): false when it moved first. A
    /// contact that changed under a plugin step's patch is the error `STALE_CONTACT` (try again).
    pub async fn advance_execution(
        &self,
        project: &str,
        from: &ExecutionRow,
        to: &ExecutionRow,
        fx: &Effects,
        now: i64,
    ) -> Result<bool, StoreError> {
        match self.write_executions(project, &[], &[Move { from, to, fx }], now).await? {
            Ok(()) => Ok(true),
            Err(BatchRefused::Moved) => Ok(false),
            Err(other) => Err(StoreError::Thrown(format!("{other:?}"))),
        }
    }

    /// The project's executions with these ids (those that exist).
    pub async fn executions(&self, project: &str, ids: &[String]) -> Result<Vec<ExecutionRow>, StoreError> {
        self.query(
            &format!(
                "SELECT {EXEC_FIELDS} FROM array::map($ids, |$i| type::record('workflow_execution', $i)) WHERE project = $p"
            ),
            vars! { "p": project, "ids": ids },
        )
        .await?
        .all(0)
    }

    /// The project's executions of these contacts that wait for an event with one of these names: one
    /// indexed lookup per name says which names anything of the project waits for (migration 0033),
    /// then one per contact for those names only (none when nothing waits, the common case).
    pub async fn waiting_for_events(
        &self,
        project: &str,
        contacts: &[String],
        names: &[String],
    ) -> Result<Vec<ExecutionRow>, StoreError> {
        if contacts.is_empty() || names.is_empty() {
            return Ok(Vec::new());
        }
        let names = self.awaited(project, names).await?;
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut sql = String::new();
        let mut v = vars! { "p": project, "ns": names };
        for (i, c) in contacts.iter().enumerate() {
            sql.push_str(&format!(
                "SELECT {EXEC_FIELDS} FROM workflow_execution
                 WHERE project = $p AND contact = $c{i} AND waiting_event IN $ns AND status = 'WAITING';\n"
            ));
            v[format!("c{i}")] = Value::String(c.clone());
        }
        let mut r = self.query(&sql, v).await?;
        let mut out = Vec::new();
        for i in 0..contacts.len() {
            out.extend(r.all::<ExecutionRow>(i)?);
        }
        Ok(out)
    }

    /// Which of these event names some execution of the project waits for now.
    async fn awaited(&self, project: &str, names: &[String]) -> Result<Vec<String>, StoreError> {
        let mut sql = String::new();
        let mut v = vars! { "p": project };
        for (i, n) in names.iter().enumerate() {
            sql.push_str(&format!(
                "SELECT VALUE waiting_event FROM workflow_execution
                 WHERE project = $p AND waiting_event = $n{i} AND status = 'WAITING' LIMIT 1;\n"
            ));
            v[format!("n{i}")] = Value::String(n.clone());
        }
        let mut r = self.query(&sql, v).await?;
        let mut out = Vec::new();
        for (i, n) in names.iter().enumerate() {
            if !r.all::<String>(i)?.is_empty() {
                out.push(n.clone());
            }
        }
        Ok(out)
    }

    pub async fn execution(&self, project: &str, id: &str) -> Result<Option<ExecutionRow>, StoreError> {
        self.query(
            &format!("SELECT {EXEC_FIELDS} FROM workflow_execution WHERE id = type::record('workflow_execution', $id) AND project = $p"),
            vars! { "p": project, "id": id },
        )
        .await?
        .first(0)
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
                    "SELECT {LIST_FIELDS} FROM workflow_execution{filter} ORDER BY created_at DESC, id DESC LIMIT $limit START $offset;
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
                            timer = NONE, run = NONE, waiting_event = NONE, updated_at = $now, completed_at = $now,
                            runs = array::map(runs, |$r| IF $r.status IN ['RUNNING', 'WAITING']
                                THEN object::extend($r, {{ status: 'CANCELLED', completed_at: $now }}) ELSE $r END)
                            RETURN NONE;
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

impl Store {
    /// Writes executions that were stopped before they ran (EXITED, with the reason): only their rows,
    /// no re-entry entry, job or event. One already written (the same event handed over again) stays.
    pub async fn write_stopped(&self, project: &str, rows: &[ExecutionRow]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        let docs: Vec<Value> = rows
            .iter()
            .map(|e| {
                let mut d = exec_doc(project, e, &[]);
                d["id"] = Value::String(e.id.clone());
                d
            })
            .collect();
        self.write(|| async {
            self.query("INSERT IGNORE INTO workflow_execution $execs RETURN NONE;", vars! { "execs": docs.clone() })
                .await
        })
        .await
        .map(|_| ())
    }
}
