//! Workflows (docs/behaviour.md#workflows): the workflow with its trigger, steps and transitions.

use salvo::http::StatusCode;
use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value};

use super::auth::{ApiKeyAuth, KeyRule, project};
use super::body::{Fields, Reply, json_object};
use super::pagination::{OffsetPage, bool_param, query_str};
use super::state;
use crate::api::errors::ApiError;
use crate::domain::workflows::{Graph, Position, Step, Transition, WaitOutcome};
use crate::error::Error;
use crate::infra::clock::rfc3339;
use crate::services::workflows::manage::{self, NewStep, NewTransition, NewWorkflow, StepPatch, WorkflowPatch};
use crate::store::workflows::{WorkflowItem, WorkflowQuery, WorkflowRow};

#[derive(Serialize, ToSchema)]
pub struct PositionOut {
    x: f64,
    y: f64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct TransitionOut {
    id: String,
    from_step_id: String,
    to_step_id: String,
    /// `{branch: yes|no}` on the links of a CONDITION step (or a plugin step's named branch), else null
    #[salvo(schema(value_type = Object))]
    condition: Value,
    /// EVENT or TIMEOUT on the links of a WAIT_FOR_EVENT step, else null
    wait_outcome: Option<String>,
    priority: i64,
    created_at: String,
}

impl From<&Transition> for TransitionOut {
    fn from(t: &Transition) -> Self {
        let condition = match &t.branch {
            Some(b) => serde_json::json!({ "branch": b }),
            None => Value::Null,
        };
        TransitionOut {
            id: t.id.clone(),
            from_step_id: t.from.clone(),
            to_step_id: t.to.clone(),
            condition,
            wait_outcome: t.wait_outcome.map(|o| o.as_str().to_string()),
            priority: 0,
            created_at: rfc3339(t.created_at),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct StepOut {
    id: String,
    workflow_id: String,
    /// TRIGGER, SEND_EMAIL, DELAY, WAIT_FOR_EVENT, CONDITION, EXIT or a plugin's step type
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    kind: String,
    name: String,
    position: PositionOut,
    #[salvo(schema(value_type = Object))]
    config: Value,
    template_id: Option<String>,
    outgoing_transitions: Vec<TransitionOut>,
    incoming_transitions: Vec<TransitionOut>,
    created_at: String,
    updated_at: String,
}

impl StepOut {
    fn new(s: &Step, g: &Graph, workflow_id: &str) -> Self {
        StepOut {
            id: s.id.clone(),
            workflow_id: workflow_id.to_string(),
            kind: s.kind.clone(),
            name: s.name.clone(),
            position: PositionOut { x: s.position.x, y: s.position.y },
            config: s.config.clone(),
            template_id: s.template_id.clone(),
            outgoing_transitions: g.outgoing(&s.id).map(TransitionOut::from).collect(),
            incoming_transitions: g.incoming(&s.id).map(TransitionOut::from).collect(),
            created_at: rfc3339(s.created_at),
            updated_at: rfc3339(s.updated_at),
        }
    }
}

/// A workflow with its steps and transitions.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct WorkflowOut {
    id: String,
    project_id: String,
    name: String,
    description: Option<String>,
    enabled: bool,
    /// EVENT, MANUAL or SCHEDULE
    trigger_type: String,
    #[salvo(schema(value_type = Object))]
    trigger_config: Value,
    allow_reentry: bool,
    steps: Vec<StepOut>,
    transitions: Vec<TransitionOut>,
    created_at: String,
    updated_at: String,
}

impl WorkflowOut {
    fn new(w: &WorkflowRow, project_id: &str) -> Self {
        WorkflowOut {
            id: w.id.clone(),
            project_id: project_id.to_string(),
            name: w.name.clone(),
            description: w.description.clone(),
            enabled: w.enabled,
            trigger_type: w.trigger_type.clone(),
            trigger_config: w.trigger_config.clone().unwrap_or(Value::Null),
            allow_reentry: w.allow_reentry,
            steps: w.graph.steps.iter().map(|s| StepOut::new(s, &w.graph, &w.id)).collect(),
            transitions: w.graph.transitions.iter().map(TransitionOut::from).collect(),
            created_at: rfc3339(w.created_at),
            updated_at: rfc3339(w.updated_at),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct CountOut {
    steps: i64,
    executions: i64,
}

/// A workflow in a list (without its graph).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct WorkflowItemOut {
    id: String,
    project_id: String,
    name: String,
    description: Option<String>,
    enabled: bool,
    trigger_type: String,
    #[salvo(schema(value_type = Object))]
    trigger_config: Value,
    allow_reentry: bool,
    #[serde(rename = "_count")]
    #[salvo(schema(rename = "_count"))]
    count: CountOut,
    created_at: String,
    updated_at: String,
}

impl WorkflowItemOut {
    fn new(w: &WorkflowItem, project_id: &str) -> Self {
        WorkflowItemOut {
            id: w.id.clone(),
            project_id: project_id.to_string(),
            name: w.name.clone(),
            description: w.description.clone(),
            enabled: w.enabled,
            trigger_type: w.trigger_type.clone(),
            trigger_config: w.trigger_config.clone().unwrap_or(Value::Null),
            allow_reentry: w.allow_reentry,
            count: CountOut { steps: w.step_count, executions: w.execution_count },
            created_at: rfc3339(w.created_at),
            updated_at: rfc3339(w.updated_at),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct WorkflowPage {
    data: Vec<WorkflowItemOut>,
    total: i64,
    page: usize,
    page_size: usize,
    total_pages: i64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct WorkflowBody {
    /// 1 to 100 characters
    #[salvo(schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    name: String,
    /// at most 500 characters
    #[salvo(schema(max_length = 500))]
    description: Option<String>,
    /// the event that starts an execution (its EVENT trigger; change it later through `triggerConfig`)
    #[salvo(schema(
        min_length = 1,
        max_length = 255,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    event_name: String,
    /// default false: a contact enters once; true: again once its last execution ended
    allow_reentry: Option<bool>,
}

/// The fields a PATCH changes; those left out keep their value.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct WorkflowPatchBody {
    /// 1 to 100 characters
    #[salvo(schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    name: Option<String>,
    /// at most 500 characters; null removes it
    #[salvo(schema(max_length = 500))]
    description: Option<String>,
    /// EVENT, MANUAL or SCHEDULE, with `triggerConfig`
    #[salvo(schema(pattern = "^(EVENT|MANUAL|SCHEDULE)$"))]
    trigger_type: Option<String>,
    /// EVENT: `{eventName}`; MANUAL: null; SCHEDULE: its schedule (docs/behaviour.md#workflows)
    #[salvo(schema(value_type = Option<Object>))]
    trigger_config: Option<Value>,
    enabled: Option<bool>,
    /// false: a contact enters once; true: again once its last execution ended
    allow_reentry: Option<bool>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct StepBody {
    /// SEND_EMAIL, DELAY, WAIT_FOR_EVENT, CONDITION, EXIT or a plugin's type (WEBHOOK, UPDATE_CONTACT, ...)
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    #[salvo(schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    kind: String,
    #[salvo(schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    name: String,
    position: Option<PositionOut>,
    /// the step type's settings (docs/behaviour.md#workflows)
    #[salvo(schema(value_type = Object))]
    config: Option<Value>,
    /// SEND_EMAIL: the template to send
    #[salvo(schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    template_id: Option<String>,
    /// default true: link the new step after the newest step that leads nowhere yet
    auto_connect: Option<bool>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct TransitionBody {
    #[salvo(schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    from_step_id: String,
    #[salvo(schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    to_step_id: String,
    /// `{branch: "yes"|"no"}` from a CONDITION step
    #[salvo(schema(value_type = Object))]
    condition: Option<Value>,
    /// EVENT or TIMEOUT from a WAIT_FOR_EVENT step
    #[salvo(schema(pattern = "^(EVENT|TIMEOUT)$"))]
    wait_outcome: Option<String>,
}

pub fn router() -> Router {
    Router::with_path("workflows")
        .hoop(ApiKeyAuth(KeyRule::SecretOnly))
        .get(list_workflows)
        .post(create_workflow)
        .push(Router::with_path("fields").get(workflow_fields))
        .append(&mut super::workflow_executions::routes())
        .push(Router::with_path("{id}/steps/{step_id}").patch(patch_step).delete(delete_step))
        .push(Router::with_path("{id}/steps").post(add_step))
        .push(Router::with_path("{id}/transitions/{transition_id}").delete(delete_transition))
        .push(Router::with_path("{id}/transitions").post(add_transition))
        .push(Router::with_path("{id}").get(get_workflow).patch(patch_workflow).delete(delete_workflow))
}

#[derive(Serialize, ToSchema)]
pub struct FieldOut {
    field: String,
    /// string, number, boolean, date or object
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    kind: String,
    /// Contact Fields, Custom Data or Event Data
    category: String,
    /// event fields: the event names the key was seen in
    #[serde(skip_serializing_if = "Vec::is_empty")]
    events: Vec<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct FieldsOut {
    /// every field name, sorted
    fields: Vec<String>,
    typed_fields: Vec<FieldOut>,
    count: usize,
}

/// The fields a CONDITION step can read: contact fields (`contact.email`, `contact.subscribed`, ...,
/// `data.<key>` with types) and event fields (`event.<key>`, from the project's recent events, with the
/// event names they came from; `eventName` narrows them to one event).
#[endpoint(
    tags("workflows"),
    security(("bearer" = [])),
    parameters(("eventName" = Option<String>, Query, description = "only the fields of this event")),
    responses((status_code = 200, body = FieldsOut))
)]
pub async fn workflow_fields(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let event = query_str(req, "eventName");
        let all = crate::services::workflows::fields::fields(&st, &ctx.project_id, event.as_deref()).await?;
        Reply::ok(&FieldsOut {
            fields: all.iter().map(|f| f.field.clone()).collect(),
            count: all.len(),
            typed_fields: all
                .into_iter()
                .map(|f| FieldOut {
                    field: f.field,
                    kind: f.kind.into(),
                    category: f.category.into(),
                    events: f.events,
                })
                .collect(),
        })
    })
}

/// Lists workflows, newest first: `page`, `pageSize` (1 to 100), `search` (name, description), `enabled`.
#[endpoint(
    tags("workflows"),
    security(("bearer" = [])),
    parameters(
        ("page" = Option<i64>, Query, description = "1-based, default 1"),
        ("pageSize" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("search" = Option<String>, Query, description = "case-insensitive, on name and description"),
        ("enabled" = Option<bool>, Query, description = "true or false"),
    ),
    responses((status_code = 200, body = WorkflowPage))
)]
pub async fn list_workflows(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let paging = OffsetPage::from(req)?;
        let q = WorkflowQuery {
            search: query_str(req, "search").map(|s| s.trim().to_lowercase()).filter(|s| !s.is_empty()),
            enabled: bool_param(req, "enabled")?,
            offset: paging.offset(),
            limit: paging.page_size,
        };
        let (rows, total) = manage::list(&st, &ctx.project_id, &q).await?;
        Reply::ok(&WorkflowPage {
            data: rows.iter().map(|w| WorkflowItemOut::new(w, &ctx.project_id)).collect(),
            total,
            page: paging.page,
            page_size: paging.page_size,
            total_pages: paging.total_pages(total),
        })
    })
}

/// Reads `description` (null clears it).
fn description(f: &mut Fields, body: &Map<String, Value>) -> Option<Option<String>> {
    match body.get("description") {
        Some(Value::Null) => Some(None),
        Some(_) => f.string("description", false, 0, 500).map(|d| Some(d).filter(|d| !d.trim().is_empty())),
        None => None,
    }
}

/// Creates a workflow: disabled, with an EVENT trigger on `eventName` and its TRIGGER step.
#[endpoint(tags("workflows"), security(("bearer" = [])), request_body = WorkflowBody, responses((status_code = 201, body = WorkflowOut)))]
pub async fn create_workflow(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let name = f.text("name", true, 100);
        let description = description(&mut f, &body).flatten();
        let event_name = f.text("eventName", true, 255);
        let allow_reentry = f.boolean("allowReentry").unwrap_or(false);
        f.finish()?;
        let (Some(name), Some(event_name)) = (name, event_name) else {
            return Err(Error::Invalid("name and eventName are required".into()).into());
        };
        let w = manage::create(
            &st,
            &st.workflows,
            &ctx.project_id,
            NewWorkflow { name, description, event_name, allow_reentry },
        )
        .await?;
        Reply::created(&WorkflowOut::new(&w, &ctx.project_id))
    })
}

/// One workflow with its steps (each with its incoming and outgoing transitions) and transitions.
#[endpoint(tags("workflows"), security(("bearer" = [])), responses((status_code = 200, body = WorkflowOut)))]
pub async fn get_workflow(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let w = manage::get(&st, &ctx.project_id, &id.into_inner()).await?;
        Reply::ok(&WorkflowOut::new(&w, &ctx.project_id))
    })
}

/// Changes name, description, enabled, allowReentry, or the trigger (`triggerType` with
/// `triggerConfig`; the TRIGGER step follows). A new trigger is refused (409) while the workflow is
/// enabled and has RUNNING or WAITING executions.
#[endpoint(tags("workflows"), security(("bearer" = [])), request_body = WorkflowPatchBody, responses((status_code = 200, body = WorkflowOut)))]
pub async fn patch_workflow(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let mut patch = WorkflowPatch {
            name: f.text("name", false, 100),
            description: description(&mut f, &body),
            enabled: f.boolean("enabled"),
            allow_reentry: f.boolean("allowReentry"),
            trigger: None,
        };
        let kind = f.one_of("triggerType", false, crate::domain::workflows::TRIGGER_TYPES);
        f.finish()?;
        if kind.is_some() || body.contains_key("triggerConfig") {
            let kind = match kind {
                Some(k) => k,
                None => manage::get(&st, &ctx.project_id, &id).await?.trigger_type,
            };
            let config = manage::check_trigger(&kind, body.get("triggerConfig"))?;
            patch.trigger = Some((kind, config));
        }
        let w = manage::update(&st, &st.workflows, &ctx.project_id, &id, patch).await?;
        Reply::ok(&WorkflowOut::new(&w, &ctx.project_id))
    })
}

/// Deletes a workflow and its history: 204; 409 while it has RUNNING or WAITING executions.
#[endpoint(tags("workflows"), security(("bearer" = [])), responses((status_code = 204, description = "deleted")))]
pub async fn delete_workflow(id: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let ctx = project(depot)?;
        manage::delete(&st, &st.workflows, &ctx.project_id, &id.into_inner()).await?;
        res.status_code(StatusCode::NO_CONTENT);
        Ok(())
    })
}

/// `{x, y}` numbers (finite).
fn position(f: &mut Fields, body: &Map<String, Value>) -> Option<Position> {
    let v = body.get("position").filter(|v| !v.is_null())?;
    let coord = |k: &str| v.get(k).and_then(Value::as_f64).filter(|n| n.is_finite() && n.abs() <= 1e9);
    match (coord("x"), coord("y")) {
        (Some(x), Some(y)) => Some(Position { x, y }),
        _ => {
            f.error("position", "invalid_type", "position must be {x, y} with numbers");
            None
        }
    }
}

/// A JSON object field (`config`).
fn object(f: &mut Fields, body: &Map<String, Value>, name: &str) -> Option<Value> {
    match body.get(name) {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(_) => {
            f.error(name, "invalid_type", format!("{name} must be a JSON object"));
            None
        }
    }
}

/// Adds a step: 201 with the step. Its config is checked for its type (422 naming the field).
#[endpoint(tags("workflows"), security(("bearer" = [])), request_body = StepBody, responses((status_code = 201, body = StepOut)))]
pub async fn add_step(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let kind = f.text("type", true, 64);
        let name = f.text("name", true, 100);
        let position = position(&mut f, &body).unwrap_or_default();
        let config = object(&mut f, &body, "config").unwrap_or_else(|| Value::Object(Map::new()));
        let template_id = f.text("templateId", false, 64);
        let auto_connect = f.boolean("autoConnect").unwrap_or(true);
        f.finish()?;
        let (Some(kind), Some(name)) = (kind, name) else {
            return Err(Error::Invalid("type and name are required".into()).into());
        };
        let new = NewStep { kind, name, position, config, template_id, auto_connect };
        let (w, step) = manage::add_step(&st, &st.workflows, &ctx.project_id, &id, new).await?;
        Reply::created(&StepOut::new(&step, &w.graph, &w.id))
    })
}

/// Changes a step's name, position, config or template (config and template: 409 while the workflow
/// is enabled with active executions).
#[endpoint(tags("workflows"), security(("bearer" = [])), request_body = StepBody, responses((status_code = 200, body = StepOut)))]
pub async fn patch_step(
    id: PathParam<String>,
    step_id: PathParam<String>,
    req: &mut Request,
    depot: &mut Depot,
) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let patch = StepPatch {
            name: f.text("name", false, 100),
            position: position(&mut f, &body),
            config: object(&mut f, &body, "config"),
            template_id: match body.get("templateId") {
                None => None,
                Some(Value::Null) => Some(None),
                Some(_) => f.text("templateId", false, 64).map(Some),
            },
        };
        f.finish()?;
        let (w, step) =
            manage::update_step(&st, &st.workflows, &ctx.project_id, &id.into_inner(), &step_id.into_inner(), patch)
                .await?;
        Reply::ok(&StepOut::new(&step, &w.graph, &w.id))
    })
}

/// Deletes a step: 204. `splice=true` links its parents to its one child (400 when it has two);
/// otherwise the steps only it leads to go with it.
#[endpoint(
    tags("workflows"),
    security(("bearer" = [])),
    parameters(("splice" = Option<bool>, Query, description = "reconnect the step's parents to its child")),
    responses((status_code = 204, description = "deleted"))
)]
pub async fn delete_step(
    id: PathParam<String>,
    step_id: PathParam<String>,
    req: &mut Request,
    depot: &mut Depot,
    res: &mut Response,
) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let ctx = project(depot)?;
        let splice = bool_param(req, "splice")?.unwrap_or(false);
        manage::delete_step(&st, &st.workflows, &ctx.project_id, &id.into_inner(), &step_id.into_inner(), splice)
            .await?;
        res.status_code(StatusCode::NO_CONTENT);
        Ok(())
    })
}

/// Links two steps: 201 with the transition; a link that breaks a graph rule is 400 naming the steps.
#[endpoint(tags("workflows"), security(("bearer" = [])), request_body = TransitionBody, responses((status_code = 201, body = TransitionOut)))]
pub async fn add_transition(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let from = f.text("fromStepId", true, 64);
        let to = f.text("toStepId", true, 64);
        let branch = match body.get("condition") {
            None | Some(Value::Null) => None,
            Some(c) => match c.get("branch").and_then(Value::as_str).map(str::trim) {
                Some(b) if !b.is_empty() && b.len() <= 64 => Some(b.to_string()),
                _ => {
                    f.error("condition", "invalid_type", "condition must be {branch: \"yes\" | \"no\"}");
                    None
                }
            },
        };
        let wait_outcome = match f.one_of("waitOutcome", false, &["EVENT", "TIMEOUT"]) {
            Some(o) => WaitOutcome::parse(&o),
            None => None,
        };
        f.finish()?;
        let (Some(from), Some(to)) = (from, to) else {
            return Err(Error::Invalid("fromStepId and toStepId are required".into()).into());
        };
        let t = manage::add_transition(
            &st,
            &st.workflows,
            &ctx.project_id,
            &id.into_inner(),
            NewTransition { from, to, branch, wait_outcome },
        )
        .await?;
        Reply::created(&TransitionOut::from(&t))
    })
}

/// Deletes a transition: 204.
#[endpoint(tags("workflows"), security(("bearer" = [])), responses((status_code = 204, description = "deleted")))]
pub async fn delete_transition(
    id: PathParam<String>,
    transition_id: PathParam<String>,
    depot: &mut Depot,
    res: &mut Response,
) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let ctx = project(depot)?;
        manage::delete_transition(&st, &st.workflows, &ctx.project_id, &id.into_inner(), &transition_id.into_inner())
            .await?;
        res.status_code(StatusCode::NO_CONTENT);
        Ok(())
    })
}
