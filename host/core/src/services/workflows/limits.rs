//! What keeps workflows from looping without bound (docs/security.md#workflows). An event a workflow
//! step caused carries the depth of the execution that caused it (`Event::depth`, `EmailRow::depth`),
//! and an execution an event starts is one deeper: past [`MAX_DEPTH`] the start is stopped. What depth
//! cannot follow (a webhook that calls back through the API, a plugin, segment entry and exit) is
//! bounded per contact and hour: the executions events may start ([`Budgets::starts`]) and the emails
//! SEND_EMAIL steps may write ([`Budgets::emails`]).
//!
//! A stopped start is written as an execution that ended at once, EXITED with the reason, so it shows
//! in the workflow's executions; it runs nothing and writes no event. An email past the budget is a
//! SKIPPED step with the reason, and the execution goes on. Both are counted in
//! `herald_workflow_limited_total`.
//!
//! Must not import: salvo, surrealdb.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::engine::{Engine, Planned};
use crate::domain::status::{ExecutionStatus, StepRunStatus};
use crate::store::events::Event;
use crate::store::workflow_runs::Start;
use crate::store::workflows::WorkflowRow;
use crate::store::{Store, StoreError};

/// Most rounds of workflows that trigger each other through the events their steps cause.
pub const MAX_DEPTH: i64 = 8;

/// The per-contact hourly budgets (0: none), from `HERALD_WORKFLOW_STARTS_PER_CONTACT_HOUR` and
/// `HERALD_WORKFLOW_EMAILS_PER_CONTACT_HOUR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budgets {
    pub starts: u32,
    pub emails: u32,
}

impl Budgets {
    pub fn of(config: &crate::config::Config) -> Budgets {
        Budgets { starts: config.workflow_starts_per_contact_hour, emails: config.workflow_emails_per_contact_hour }
    }
}

/// The depth of an execution an event starts: one more than the depth of the execution that caused the
/// event, 0 for an event nothing of a workflow caused. (`workflow.*` events stored before events carried
/// a depth of their own have it in their data; no caller can send such a name.)
pub fn cause_depth(ev: &Event) -> i64 {
    let caused = ev.depth.or_else(|| {
        ev.name.starts_with("workflow.").then(|| ev.data.get("depth").and_then(Value::as_i64).unwrap_or(0))
    });
    caused.map_or(0, |d| d.saturating_add(1))
}

/// Why a start was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Depth,
    Starts(u32),
}

impl Stop {
    fn metric(self) -> &'static str {
        match self {
            Stop::Depth => "depth",
            Stop::Starts(_) => "starts",
        }
    }

    /// The exit reason of the stopped execution.
    pub fn reason(self) -> String {
        match self {
            Stop::Depth => format!(
                "LOOP_LIMIT: not run: its trigger event was caused by a chain of {MAX_DEPTH} workflow executions \
                 already, the most one event may start"
            ),
            Stop::Starts(n) => format!(
                "LOOP_LIMIT: not run: events started {n} executions for this contact this hour, the most the \
                 server allows (HERALD_WORKFLOW_STARTS_PER_CONTACT_HOUR)"
            ),
        }
    }
}

/// The reason of a SEND_EMAIL step skipped by the email budget.
pub fn emails_reason(n: u32) -> String {
    format!(
        "LOOP_LIMIT: workflows wrote {n} emails to this contact this hour, the most the server allows \
         (HERALD_WORKFLOW_EMAILS_PER_CONTACT_HOUR)"
    )
}

/// Emails SEND_EMAIL steps wrote or decided for contacts during one batch: read from the budget rows
/// the first time a contact sends, then counted as the batch's steps decide.
#[derive(Default)]
pub(super) struct EmailUse(Mutex<HashMap<(String, String), i64>>);

impl EmailUse {
    /// Reads what these contacts of `project` used this hour, for those not read yet.
    pub(super) async fn load(
        &self,
        store: &Store,
        project: &str,
        contacts: &[&str],
        now: i64,
    ) -> Result<(), StoreError> {
        let missing: Vec<&str> = {
            let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            let mut seen = HashSet::new();
            contacts
                .iter()
                .copied()
                .filter(|c| !map.contains_key(&(project.to_string(), c.to_string())) && seen.insert(*c))
                .collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        let used = store.workflow_budgets(project, &missing, now).await?;
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for c in missing {
            let n = used.get(c).map_or(0, |u| u.emails);
            map.entry((project.to_string(), c.to_string())).or_insert(n);
        }
        Ok(())
    }

    /// Takes one email of the contact's budget of `limit` (0: none): false when it is spent.
    pub(super) fn take(&self, project: &str, contact: &str, limit: u32) -> bool {
        if limit == 0 {
            return true;
        }
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let used = map.entry((project.to_string(), contact.to_string())).or_insert(0);
        if *used >= i64::from(limit) {
            crate::infra::metrics::workflow_limited("emails", 1);
            return false;
        }
        *used += 1;
        true
    }
}

impl Engine {
    /// Splits the planned starts of one project into the ones that may run and the ones the starts
    /// budget stops (in order: the first ones of a contact run), reading the contacts' budgets once.
    pub(super) async fn admit(
        &self,
        project: &str,
        plans: Vec<(Planned, Arc<WorkflowRow>)>,
        now: i64,
    ) -> Result<(Vec<(Planned, Arc<WorkflowRow>)>, Vec<(Planned, Stop)>), StoreError> {
        let limit = self.budgets.starts;
        if limit == 0 || plans.is_empty() {
            return Ok((plans, Vec::new()));
        }
        let contacts: Vec<&str> = {
            let mut seen = HashSet::new();
            plans.iter().map(|(p, _)| p.e.contact.as_str()).filter(|c| seen.insert(*c)).collect()
        };
        let used = self.store.workflow_budgets(project, &contacts, now).await?;
        let mut counted: HashMap<String, i64> =
            used.into_iter().map(|(contact, used)| (contact, used.starts)).collect();
        let (mut go, mut stop) = (Vec::new(), Vec::new());
        for (p, w) in plans {
            let n = counted.entry(p.e.contact.clone()).or_insert(0);
            if *n >= i64::from(limit) {
                stop.push((p, Stop::Starts(limit)));
            } else {
                *n += 1;
                go.push((p, w));
            }
        }
        Ok((go, stop))
    }

    /// Writes stopped starts as executions that ended at once (EXITED with the reason), except those the
    /// re-entry rules or an earlier delivery of the event would have refused anyway.
    pub(super) async fn stop(&self, project: &str, stopped: Vec<(Planned, Stop)>, now: i64) -> Result<(), StoreError> {
        if stopped.is_empty() {
            return Ok(());
        }
        let starts: Vec<Start> =
            stopped.iter().map(|(p, _)| Start { e: &p.e, allow_reentry: p.allow_reentry, fx: &p.fx }).collect();
        let refused = self.store.refused_starts(project, &starts).await?;
        drop(starts);
        let mut rows = Vec::new();
        for ((p, why), refused) in stopped.into_iter().zip(refused) {
            if refused {
                continue;
            }
            crate::infra::metrics::workflow_limited(why.metric(), 1);
            let mut e = p.e;
            e.status = ExecutionStatus::Exited;
            e.step = None;
            e.exit_reason = Some(why.reason());
            e.completed_at = Some(now);
            // The trigger's run, as a start writes it, marked as not run.
            e.runs = p.fx.runs;
            for r in &mut e.runs {
                r.status = StepRunStatus::Skipped;
            }
            rows.push(e);
        }
        self.store.write_stopped(project, &rows).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;

    fn ev(name: &str, data: Value, depth: Option<i64>) -> Event {
        let data: Map<String, Value> = data.as_object().cloned().unwrap_or_default();
        Event::new("p", "c", name, data, "system", 1).at_depth(depth)
    }

    #[test]
    fn an_event_a_step_caused_starts_one_deeper_whatever_its_name() {
        // Nothing of a workflow caused it: depth 0, whatever its data says.
        assert_eq!(cause_depth(&ev("signed-up", json!({ "depth": 99 }), None)), 0);
        assert_eq!(cause_depth(&ev("email.sent", json!({}), None)), 0);
        // Caused at depth d: d + 1, for email, contact and segment events as for workflow events.
        for name in ["email.sent", "contact.unsubscribed", "segment.vip.entry", "workflow.completed"] {
            assert_eq!(cause_depth(&ev(name, json!({}), Some(3))), 4, "{name}");
        }
        // A workflow event stored before events carried their depth: from its data.
        assert_eq!(cause_depth(&ev("workflow.completed", json!({ "depth": 5 }), None)), 6);
    }
}
