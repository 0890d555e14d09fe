//! Executions as the user sees them (docs/behaviour.md#workflows): start one by hand, list, read with
//! its step runs, cancel one or all.
//!
//! Must not import: salvo, surrealdb.

use serde_json::Value;

use super::manage;
use crate::context::Context;
use crate::domain::status::ExecutionStatus;
use crate::error::Error;
use crate::store::workflow_runs::{ExecutionRow, StartRefused, StepRunRow};

/// Executions cancelled per transaction by cancel-all.
const CANCEL_BATCH: usize = 500;

fn not_found(id: &str) -> Error {
    Error::not_found("EXECUTION_NOT_FOUND", format!("Execution {id} not found in this workflow"))
}

/// Starts an execution for a contact (MANUAL start, any trigger type): 400 when the workflow is
/// disabled, 404 for a contact not in the project, 409 when the re-entry rules refuse it.
pub async fn start(
    st: &Context,
    workflows: &super::engine::Engine,
    project: &str,
    workflow: &str,
    contact: &str,
    context: Value,
) -> Result<ExecutionRow, Error> {
    let w = manage::get(st, project, workflow).await?;
    if !w.enabled {
        return Err(Error::Invalid(format!(
            "Workflow {workflow} is disabled: enable it (PATCH /workflows/{workflow} {{\"enabled\": true}}) before starting executions"
        )));
    }
    if st.store.contact(project, contact).await?.is_none() {
        return Err(Error::not_found("CONTACT_NOT_FOUND", format!("Contact {contact} not found")));
    }
    match workflows.start(project, &w, contact, context, None).await? {
        Ok(e) => Ok(e),
        Err(StartRefused::Reentry) => Err(Error::Conflict(if w.allow_reentry {
            format!("Contact {contact} is in this workflow now (an execution is RUNNING or WAITING)")
        } else {
            format!("Contact {contact} entered this workflow before and allowReentry is false")
        })),
        Err(StartRefused::Duplicate) => Err(Error::Conflict("This execution exists already".into())),
    }
}

/// A page of a workflow's executions (newest first) and the total.
pub async fn list(
    st: &Context,
    project: &str,
    workflow: &str,
    status: Option<ExecutionStatus>,
    offset: usize,
    limit: usize,
) -> Result<(Vec<ExecutionRow>, i64), Error> {
    manage::get(st, project, workflow).await?;
    Ok(st.store.list_executions(project, workflow, status, offset, limit).await?)
}

/// One execution of the workflow with the runs of its steps, in order.
pub async fn get(
    st: &Context,
    project: &str,
    workflow: &str,
    id: &str,
) -> Result<(ExecutionRow, Vec<StepRunRow>), Error> {
    manage::get(st, project, workflow).await?;
    let mut e =
        st.store.execution(project, id).await?.filter(|e| e.workflow == workflow).ok_or_else(|| not_found(id))?;
    let mut runs = std::mem::take(&mut e.runs);
    runs.sort_by(|a, b| (a.started_at, &a.id).cmp(&(b.started_at, &b.id)));
    Ok((e, runs))
}

/// Cancels a RUNNING or WAITING execution (409 otherwise); its pending timer does nothing after.
pub async fn cancel(st: &Context, project: &str, workflow: &str, id: &str) -> Result<ExecutionRow, Error> {
    let (e, _) = get(st, project, workflow, id).await?;
    let refused = |s: ExecutionStatus| {
        Error::Conflict(format!("Execution {id} is {s}: only RUNNING or WAITING executions can be cancelled"))
    };
    if !e.status.is_active() {
        return Err(refused(e.status));
    }
    let n = st.store.cancel_executions(project, workflow, Some(id), 1, st.clock.now_ms()).await?;
    let (after, _) = get(st, project, workflow, id).await?;
    if n == 0 {
        return Err(refused(after.status));
    }
    Ok(after)
}

/// Cancels every RUNNING or WAITING execution of a workflow, a batch per transaction; answers how many.
pub async fn cancel_all(st: &Context, project: &str, workflow: &str) -> Result<i64, Error> {
    manage::get(st, project, workflow).await?;
    let mut total = 0;
    // Bounded even while new executions keep starting: at most 10,000 batches per call.
    for _ in 0..10_000 {
        let n = st.store.cancel_executions(project, workflow, None, CANCEL_BATCH, st.clock.now_ms()).await?;
        total += n;
        if (n as usize) < CANCEL_BATCH {
            break;
        }
    }
    Ok(total)
}
