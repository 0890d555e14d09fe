//! Workflow executions (docs/behaviour.md#workflows): start by hand, list, read with the runs of their
//! steps, cancel one or all. Mounted under `/workflows` (its auth applies).

use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::Value;

use super::auth::project;
use super::body::{Fields, Reply, json_object};
use super::pagination::{OffsetPage, typed_query};
use super::state;
use crate::api::errors::ApiError;
use crate::domain::status::ExecutionStatus;
use crate::error::Error;
use crate::infra::clock::rfc3339;
use crate::services::workflows::executions;
use crate::store::workflow_runs::{ExecutionRow, StepRunRow};

/// Largest `context` of a manual start, in bytes of JSON.
const MAX_CONTEXT_BYTES: usize = 64 * 1024;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct StepExecutionOut {
    id: String,
    execution_id: String,
    step_id: String,
    step_type: String,
    /// RUNNING, WAITING, COMPLETED, FAILED, SKIPPED or CANCELLED
    status: String,
    #[salvo(schema(value_type = Object))]
    output: Value,
    error: Option<String>,
    started_at: String,
    completed_at: Option<String>,
}

impl StepExecutionOut {
    fn new(r: &StepRunRow, execution: &str) -> Self {
        StepExecutionOut {
            id: r.id.clone(),
            execution_id: execution.to_string(),
            step_id: r.step.clone(),
            step_type: r.step_type.clone(),
            status: r.status.to_string(),
            output: r.output.as_deref().and_then(|o| serde_json::from_str(o).ok()).unwrap_or(Value::Null),
            error: r.error.clone(),
            started_at: rfc3339(r.started_at),
            completed_at: r.completed_at.map(rfc3339),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ExecutionOut {
    id: String,
    workflow_id: String,
    contact_id: String,
    /// RUNNING, WAITING, COMPLETED, EXITED, FAILED or CANCELLED
    status: String,
    /// the step it runs next or waits in
    current_step_id: Option<String>,
    /// the event a WAIT_FOR_EVENT step waits for
    waiting_for: Option<String>,
    #[salvo(schema(value_type = Object))]
    context: Value,
    exit_reason: Option<String>,
    error: Option<String>,
    started_at: String,
    completed_at: Option<String>,
    created_at: String,
    updated_at: String,
    /// on GET of one execution: the runs of its steps, in order
    #[serde(skip_serializing_if = "Option::is_none")]
    step_executions: Option<Vec<StepExecutionOut>>,
}

impl ExecutionOut {
    fn new(e: &ExecutionRow, runs: Option<&[StepRunRow]>) -> Self {
        ExecutionOut {
            id: e.id.clone(),
            workflow_id: e.workflow.clone(),
            contact_id: e.contact.clone(),
            status: e.status.to_string(),
            current_step_id: e.step.clone(),
            waiting_for: e.waiting_event.clone(),
            context: e.context.clone(),
            exit_reason: e.exit_reason.clone(),
            error: e.error.clone(),
            started_at: rfc3339(e.created_at),
            completed_at: e.completed_at.map(rfc3339),
            created_at: rfc3339(e.created_at),
            updated_at: rfc3339(e.updated_at),
            step_executions: runs.map(|rs| rs.iter().map(|r| StepExecutionOut::new(r, &e.id)).collect()),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ExecutionPage {
    data: Vec<ExecutionOut>,
    total: i64,
    page: usize,
    page_size: usize,
    total_pages: i64,
}

#[derive(Serialize, ToSchema)]
pub struct CancelledOut {
    cancelled: i64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct StartBody {
    #[salvo(schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    contact_id: String,
    /// a JSON object of per-execution variables (`workflow.<path>` and `event.<path>` read it)
    #[salvo(schema(value_type = Object))]
    context: Option<Value>,
}

/// The execution routes, mounted under `/workflows`.
pub fn routes() -> Vec<Router> {
    vec![
        Router::with_path("{id}/executions/cancel-all").post(cancel_all),
        Router::with_path("{id}/executions/{execution_id}").get(get_execution).delete(cancel_execution),
        Router::with_path("{id}/executions").get(list_executions).post(start_execution),
    ]
}

/// Starts an execution for a contact: 201. 400 when the workflow is disabled, 404 for an unknown
/// contact, 409 when the re-entry rules refuse it.
#[endpoint(tags("workflows"), security(("bearer" = [])), request_body = StartBody, responses((status_code = 201, body = ExecutionOut)))]
pub async fn start_execution(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let contact = f.text("contactId", true, 64);
        let context = match body.get("context") {
            None | Some(Value::Null) => Value::Object(Default::default()),
            Some(v @ Value::Object(_)) if v.to_string().len() <= MAX_CONTEXT_BYTES => v.clone(),
            Some(Value::Object(_)) => {
                f.error("context", "too_big", format!("context is at most {} KiB of JSON", MAX_CONTEXT_BYTES / 1024));
                Value::Null
            }
            Some(_) => {
                f.error("context", "invalid_type", "context must be a JSON object");
                Value::Null
            }
        };
        f.finish()?;
        let Some(contact) = contact else { return Err(Error::Invalid("contactId is required".into()).into()) };
        let e = executions::start(&st, &st.workflows, &ctx.project_id, &id.into_inner(), &contact, context).await?;
        Reply::created(&ExecutionOut::new(&e, None))
    })
}

/// Lists a workflow's executions, newest first: `page`, `pageSize` (1 to 100), `status`.
#[endpoint(
    tags("workflows"),
    security(("bearer" = [])),
    parameters(
        ("page" = Option<i64>, Query, description = "1-based, default 1"),
        ("pageSize" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("status" = Option<String>, Query, pattern = "^(RUNNING|WAITING|COMPLETED|EXITED|FAILED|CANCELLED)$", description = "RUNNING, WAITING, COMPLETED, EXITED, FAILED or CANCELLED"),
    ),
    responses((status_code = 200, body = ExecutionPage))
)]
pub async fn list_executions(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let paging = OffsetPage::from(req)?;
        let status = match typed_query(req, "status")? {
            None => None,
            Some(s) => Some(ExecutionStatus::parse(&s).ok_or_else(|| {
                let all: Vec<&str> = ExecutionStatus::ALL.iter().map(|s| s.as_str()).collect();
                Error::Invalid(format!("status must be one of {}, got {s:?}", all.join(", ")))
            })?),
        };
        let (rows, total) =
            executions::list(&st, &ctx.project_id, &id.into_inner(), status, paging.offset(), paging.page_size).await?;
        Reply::ok(&ExecutionPage {
            data: rows.iter().map(|e| ExecutionOut::new(e, None)).collect(),
            total,
            page: paging.page,
            page_size: paging.page_size,
            total_pages: paging.total_pages(total),
        })
    })
}

/// One execution with `stepExecutions`: every step it ran or waits in (step, status, output, error,
/// times), in order.
#[endpoint(tags("workflows"), security(("bearer" = [])), responses((status_code = 200, body = ExecutionOut)))]
pub async fn get_execution(
    id: PathParam<String>,
    execution_id: PathParam<String>,
    depot: &mut Depot,
) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let (e, runs) = executions::get(&st, &ctx.project_id, &id.into_inner(), &execution_id.into_inner()).await?;
        Reply::ok(&ExecutionOut::new(&e, Some(&runs)))
    })
}

/// Cancels a RUNNING or WAITING execution (409 otherwise) and answers it; its timers do nothing after.
#[endpoint(tags("workflows"), security(("bearer" = [])), responses((status_code = 200, body = ExecutionOut)))]
pub async fn cancel_execution(
    id: PathParam<String>,
    execution_id: PathParam<String>,
    depot: &mut Depot,
) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let e = executions::cancel(&st, &ctx.project_id, &id.into_inner(), &execution_id.into_inner()).await?;
        Reply::ok(&ExecutionOut::new(&e, None))
    })
}

/// Cancels every RUNNING or WAITING execution of the workflow: `{cancelled: n}`.
#[endpoint(tags("workflows"), security(("bearer" = [])), responses((status_code = 200, body = CancelledOut)))]
pub async fn cancel_all(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let cancelled = executions::cancel_all(&st, &ctx.project_id, &id.into_inner()).await?;
        Reply::ok(&CancelledOut { cancelled })
    })
}
