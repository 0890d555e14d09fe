//! Workflows as the user edits them (docs/behaviour.md#workflows): the workflow and its trigger, steps
//! (configs checked when saved, by the plugin for plugin steps), transitions, and the graph rules every
//! edit keeps. Each edit reads the workflow, applies itself to the graph, checks the whole graph and
//! writes it over the version it read (another edit in between: it runs again on the new one).
//!
//! Must not import: salvo, surrealdb.

use serde_json::Value;

use crate::context::Context;
use crate::domain::workflows::steps::{self, Problem};
use crate::domain::workflows::{self as wf, Graph, Position, Step, Transition, WaitOutcome};
use crate::error::{Error, FieldError};
use crate::store::StoreError;
use crate::store::workflows::{Refs, WorkflowItem, WorkflowQuery, WorkflowRow};

/// How many times an edit runs again after another edit changed the workflow under it.
const EDIT_ATTEMPTS: usize = 8;

fn not_found(id: &str) -> Error {
    Error::not_found("WORKFLOW_NOT_FOUND", format!("Workflow {id} not found"))
}

fn step_not_found(id: &str) -> Error {
    Error::not_found("STEP_NOT_FOUND", format!("Step {id} not found in this workflow"))
}

/// The 409 of an edit or delete refused while executions are active (the store's `WORKFLOW_ACTIVE: <n>`).
fn active(thrown: &StoreError, what: &str) -> Error {
    let text = thrown.to_string();
    let n = text.split_once(": ").map_or("some", |(_, n)| n);
    Error::Conflict(format!(
        "The workflow has {n} active execution(s) (RUNNING or WAITING): {what}. Cancel them \
         (POST /workflows/:id/executions/cancel-all) or wait for them to finish; name, description, enabled and \
         allowReentry stay editable"
    ))
}

fn problems(list: Vec<Problem>) -> Error {
    Error::Validation(list.into_iter().map(|p| FieldError::new(p.field, p.code, p.message, Value::Null)).collect())
}

/// One workflow of the project (404 otherwise).
pub async fn get(st: &Context, project: &str, id: &str) -> Result<WorkflowRow, Error> {
    st.store.workflow(project, id).await?.ok_or_else(|| not_found(id))
}

/// A page of the project's workflows and the total that match.
pub async fn list(st: &Context, project: &str, q: &WorkflowQuery) -> Result<(Vec<WorkflowItem>, i64), Error> {
    Ok(st.store.list_workflows(project, q).await?)
}

fn refs(g: &Graph) -> Refs {
    Refs { events: g.events(), fields: g.data_keys(), templates: g.templates(), segments: g.segments() }
}

/// A new workflow (fields checked by the caller).
pub struct NewWorkflow {
    pub name: String,
    pub description: Option<String>,
    pub event_name: String,
    pub allow_reentry: bool,
}

/// Creates a workflow, disabled, with an EVENT trigger and its TRIGGER step.
pub async fn create(
    st: &Context,
    workflows: &super::engine::Engine,
    project: &str,
    new: NewWorkflow,
) -> Result<WorkflowRow, Error> {
    crate::services::quotas::room_for_workflow(&st.store, &st.quotas, project).await?;
    let now = st.clock.now_ms();
    let trigger = Step {
        id: uuid::Uuid::now_v7().to_string(),
        kind: wf::TRIGGER.into(),
        name: format!("Trigger: {}", new.event_name),
        position: Position { x: 100.0, y: 100.0 },
        config: steps::trigger_config(&new.event_name),
        template_id: None,
        created_at: now,
        updated_at: now,
    };
    let w = WorkflowRow {
        id: uuid::Uuid::now_v7().to_string(),
        name: new.name,
        description: new.description,
        enabled: false,
        trigger_type: "EVENT".into(),
        trigger_config: Some(steps::trigger_config(&new.event_name)),
        allow_reentry: new.allow_reentry,
        graph: Graph { steps: vec![trigger], transitions: vec![] },
        version: 1,
        created_at: now,
        updated_at: now,
        next_at: None,
    };
    st.store.create_workflow(project, &w, &refs(&w.graph)).await?;
    workflows.invalidate(project).await;
    Ok(w)
}

/// Runs `edit` on the stored workflow and writes the result over the version it read, again on the
/// newest version when another edit came first. `structural`: refused (409) while the workflow is
/// enabled and has active executions.
async fn edit<T>(
    st: &Context,
    workflows: &super::engine::Engine,
    project: &str,
    id: &str,
    structural: bool,
    mut edit: impl FnMut(&mut WorkflowRow) -> Result<T, Error>,
) -> Result<(WorkflowRow, T), Error> {
    for _ in 0..EDIT_ATTEMPTS {
        let mut w = get(st, project, id).await?;
        let from = w.version;
        let before = (w.enabled, w.trigger_type.clone(), w.trigger_config.clone());
        let out = edit(&mut w)?;
        w.graph.check().map_err(|e| Error::Invalid(e.0))?;
        w.version = from + 1;
        w.updated_at = st.clock.now_ms();
        // An enabled SCHEDULE workflow keeps when it is due next; enabling it or a new schedule starts
        // counting from now (ticks missed while disabled do not fire).
        let unchanged = before == (w.enabled, w.trigger_type.clone(), w.trigger_config.clone());
        w.next_at = match scheduled(&w) {
            Some(_) if unchanged && w.next_at.is_some() => w.next_at,
            Some(s) => s.next_after(w.updated_at),
            None => None,
        };
        match st.store.update_workflow(project, &w, &refs(&w.graph), from, structural).await {
            Ok(true) => {
                workflows.invalidate(project).await;
                return Ok((w, out));
            }
            Ok(false) => continue,
            Err(e) if e.thrown("WORKFLOW_ACTIVE") => {
                return Err(active(&e, "the steps, transitions and trigger cannot change now"));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Conflict("The workflow kept changing while this edit was made; try again".into()))
}

/// What PATCH /workflows/:id changes (each `None` leaves the field).
#[derive(Default)]
pub struct WorkflowPatch {
    pub name: Option<String>,
    pub description: Option<Option<String>>,
    /// the trigger type and its config (checked by `check_trigger`)
    pub trigger: Option<(String, Option<Value>)>,
    pub enabled: Option<bool>,
    pub allow_reentry: Option<bool>,
}

/// The schedule of an enabled SCHEDULE workflow.
pub fn scheduled(w: &WorkflowRow) -> Option<crate::domain::workflows::schedule::Schedule> {
    if !w.enabled || w.trigger_type != "SCHEDULE" {
        return None;
    }
    crate::domain::workflows::schedule::parse(w.trigger_config.as_ref()).ok().map(|(s, _)| s)
}

/// Checks a SCHEDULE trigger's audience: its segment exists, or its condition is a valid one.
pub async fn check_audience(
    st: &Context,
    workflows: &super::engine::Engine,
    project: &str,
    config: &Value,
) -> Result<(), Error> {
    use crate::domain::workflows::schedule::{Audience, parse};
    let Ok((s, _)) = parse(Some(config)) else { return Ok(()) };
    match s.audience {
        Audience::Segment(id) => {
            if st.store.segment(project, &id).await?.is_none() {
                return Err(Error::field(
                    "triggerConfig.audience.segmentId",
                    "not_found",
                    &format!("segment {id} does not exist"),
                    Value::String(id),
                ));
            }
        }
        Audience::Condition(c) => {
            workflows.segments.check(project, &c, None).await.map_err(|e| match Error::from(e) {
                Error::Invalid(m) => {
                    Error::field("triggerConfig.audience.condition", "invalid_condition", &m, c.clone())
                }
                other => other,
            })?;
        }
    }
    Ok(())
}

/// Checks a trigger type with its config; answers the config to store.
pub fn check_trigger(kind: &str, config: Option<&Value>) -> Result<Option<Value>, Error> {
    let field = |m: &str| Error::field("triggerConfig", "invalid_type", m, config.cloned().unwrap_or(Value::Null));
    match kind {
        "EVENT" => match config.and_then(|c| c.get("eventName")).and_then(Value::as_str).map(str::trim) {
            Some(name) if !name.is_empty() && name.chars().count() <= 255 => Ok(Some(steps::trigger_config(name))),
            _ => Err(field("an EVENT trigger needs triggerConfig.eventName (1 to 255 characters)")),
        },
        "MANUAL" => match config {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Object(o)) if o.is_empty() => Ok(None),
            Some(_) => Err(field("a MANUAL trigger takes no triggerConfig (send null or {})")),
        },
        "SCHEDULE" => match crate::domain::workflows::schedule::parse(config) {
            Ok((_, stored)) => Ok(Some(stored)),
            Err(list) => Err(problems(list)),
        },
        other => Err(Error::field(
            "triggerType",
            "invalid_enum_value",
            &format!("triggerType must be EVENT, MANUAL or SCHEDULE, got {other:?}"),
            Value::String(other.into()),
        )),
    }
}

/// Changes a workflow. A new trigger is a structural edit (409 while enabled with active executions);
/// the TRIGGER step's config follows it.
pub async fn update(
    st: &Context,
    workflows: &super::engine::Engine,
    project: &str,
    id: &str,
    patch: WorkflowPatch,
) -> Result<WorkflowRow, Error> {
    let structural = patch.trigger.is_some();
    if let Some((kind, Some(config))) = &patch.trigger
        && kind == "SCHEDULE"
    {
        check_audience(st, workflows, project, config).await?;
    }
    let (w, ()) = edit(st, workflows, project, id, structural, |w| {
        if let Some(n) = &patch.name {
            w.name = n.clone();
        }
        if let Some(d) = &patch.description {
            w.description = d.clone();
        }
        if let Some(e) = patch.enabled {
            w.enabled = e;
        }
        if let Some(r) = patch.allow_reentry {
            w.allow_reentry = r;
        }
        if let Some((kind, config)) = &patch.trigger {
            w.trigger_type = kind.clone();
            w.trigger_config = config.clone();
            if let Some(t) = w.graph.steps.iter_mut().find(|s| s.kind == wf::TRIGGER) {
                t.config = config.clone().unwrap_or_else(|| Value::Object(Default::default()));
                if t.name.starts_with("Trigger") {
                    t.name = match config.as_ref().and_then(|c| c.get("eventName")).and_then(Value::as_str) {
                        Some(e) => format!("Trigger: {e}"),
                        None => format!("Trigger: {}", kind.to_lowercase()),
                    };
                }
            }
        }
        Ok(())
    })
    .await?;
    Ok(w)
}

/// Deletes a workflow with its executions: 409 while executions are active.
pub async fn delete(st: &Context, workflows: &super::engine::Engine, project: &str, id: &str) -> Result<(), Error> {
    match st.store.delete_workflow(project, id).await {
        Ok(true) => {
            workflows.invalidate(project).await;
            Ok(())
        }
        Ok(false) => Err(not_found(id)),
        Err(e) if e.thrown("WORKFLOW_ACTIVE") => Err(active(&e, "it cannot be deleted now")),
        Err(e) => Err(e.into()),
    }
}

/// Checks a step's type, config and template; answers the config to store.
async fn check_step(
    st: &Context,
    project: &str,
    kind: &str,
    config: &Value,
    template_id: Option<&str>,
) -> Result<Value, Error> {
    steps::check_shape(config).map_err(|p| problems(vec![p]))?;
    let config = if wf::is_builtin(kind) {
        let plugins = st.plugins.clone();
        steps::check_builtin(kind, config, template_id, &move |op| plugins.operator(op).is_some()).map_err(problems)?
    } else if st.plugins.step_type(kind).is_some() {
        let text = serde_json::to_string(config).unwrap_or_default();
        match st.plugins.validate_step_config(kind, &text).await {
            Ok(Ok(())) => config.clone(),
            Ok(Err(list)) => {
                return Err(problems(
                    list.into_iter()
                        .map(|m| Problem { field: "config".into(), code: "invalid_config", message: m })
                        .collect(),
                ));
            }
            Err(e) => return Err(Error::PluginUnavailable(e.to_string())),
        }
    } else {
        let mut known: Vec<String> =
            wf::BUILTIN_TYPES.iter().filter(|t| **t != wf::TRIGGER).map(|t| t.to_string()).collect();
        known.extend(st.plugins.step_types().into_iter().map(|t| t.name));
        return Err(Error::field(
            "type",
            "invalid_enum_value",
            &format!("unknown step type {kind:?}; this server knows {}", known.join(", ")),
            Value::String(kind.into()),
        ));
    };
    if kind == wf::SEND_EMAIL
        && let Some(t) = template_id
        && st.store.template(project, t).await?.is_none()
    {
        return Err(Error::not_found("TEMPLATE_NOT_FOUND", format!("Template {t} not found")));
    }
    if kind == wf::CONDITION
        && let Some(seg) = steps::parse_condition(&config, &|_| true).ok().and_then(|c| match c.filter.field {
            crate::domain::conditions::Field::Segment(id) => Some(id),
            _ => None,
        })
        && st.store.segment(project, &seg).await?.is_none()
    {
        return Err(Error::field("config", "invalid_condition", &format!("segment {seg} does not exist"), config));
    }
    if kind == wf::CONDITION
        && let Ok(c) = steps::parse_condition(&config, &|_| true)
        && let crate::domain::conditions::Op::Plugin(op) = &c.filter.op
    {
        let operand = match &c.filter.operand {
            crate::domain::conditions::Operand::Raw(v) => crate::plugins::Value::from_json(v),
            _ => crate::plugins::Value::Null,
        };
        match st.plugins.validate_operand(op, &operand).await {
            Ok(Ok(())) => {}
            Ok(Err(m)) => return Err(Error::field("config.value", "invalid_condition", &m, config)),
            Err(e) => return Err(Error::PluginUnavailable(e.to_string())),
        }
    }
    Ok(config)
}

/// A step to add.
pub struct NewStep {
    pub kind: String,
    pub name: String,
    pub position: Position,
    pub config: Value,
    pub template_id: Option<String>,
    /// link it after the newest step that leads nowhere yet
    pub auto_connect: bool,
}

/// Adds a step (and, with `auto_connect`, the link to it).
pub async fn add_step(
    st: &Context,
    workflows: &super::engine::Engine,
    project: &str,
    id: &str,
    new: NewStep,
) -> Result<(WorkflowRow, Step), Error> {
    get(st, project, id).await?;
    let config = check_step(st, project, &new.kind, &new.config, new.template_id.as_deref()).await?;
    let now = st.clock.now_ms();
    // Only a SEND_EMAIL step has a template.
    let template_id = if new.kind == wf::SEND_EMAIL { new.template_id } else { None };
    let step = Step {
        id: uuid::Uuid::now_v7().to_string(),
        kind: new.kind,
        name: new.name,
        position: new.position,
        config,
        template_id,
        created_at: now,
        updated_at: now,
    };
    edit(st, workflows, project, id, true, |w| {
        let parent = if new.auto_connect { w.graph.auto_parent() } else { None };
        w.graph.steps.push(step.clone());
        if let Some((from, branch, wait_outcome)) = parent {
            w.graph.transitions.push(Transition {
                id: uuid::Uuid::now_v7().to_string(),
                from,
                to: step.id.clone(),
                branch,
                wait_outcome,
                created_at: now,
            });
        }
        Ok(step.clone())
    })
    .await
}

/// What PATCH of a step changes.
#[derive(Default)]
pub struct StepPatch {
    pub name: Option<String>,
    pub position: Option<Position>,
    pub config: Option<Value>,
    pub template_id: Option<Option<String>>,
}

/// Changes a step. Name and position are layout (always editable); config and template are structural.
/// The TRIGGER step's config changes only with the workflow's trigger.
pub async fn update_step(
    st: &Context,
    workflows: &super::engine::Engine,
    project: &str,
    id: &str,
    step_id: &str,
    patch: StepPatch,
) -> Result<(WorkflowRow, Step), Error> {
    let w = get(st, project, id).await?;
    let current = w.graph.step(step_id).ok_or_else(|| step_not_found(step_id))?.clone();
    let structural = patch.config.is_some() || patch.template_id.is_some();
    if structural && current.kind == wf::TRIGGER {
        return Err(Error::Invalid(
            "The TRIGGER step follows the workflow's trigger: change it with PATCH /workflows/:id (triggerType, triggerConfig)"
                .into(),
        ));
    }
    let checked = if structural {
        let config = patch.config.clone().unwrap_or_else(|| current.config.clone());
        let template = patch.template_id.clone().unwrap_or_else(|| current.template_id.clone());
        Some((check_step(st, project, &current.kind, &config, template.as_deref()).await?, template))
    } else {
        None
    };
    let now = st.clock.now_ms();
    edit(st, workflows, project, id, structural, |w| {
        let s = w.graph.step_mut(step_id).ok_or_else(|| step_not_found(step_id))?;
        if let Some(n) = &patch.name {
            s.name = n.clone();
        }
        if let Some(p) = patch.position {
            s.position = p;
        }
        if let Some((config, template)) = &checked {
            s.config = config.clone();
            s.template_id = template.clone();
        }
        s.updated_at = now;
        Ok(s.clone())
    })
    .await
}

/// Deletes a step: `splice` reconnects its parents to its one child; otherwise the step goes with
/// what only it leads to.
pub async fn delete_step(
    st: &Context,
    workflows: &super::engine::Engine,
    project: &str,
    id: &str,
    step_id: &str,
    splice: bool,
) -> Result<(), Error> {
    edit(st, workflows, project, id, true, |w| {
        if w.graph.step(step_id).is_none() {
            return Err(step_not_found(step_id));
        }
        w.graph.delete_step(step_id, splice).map_err(|e| Error::Invalid(e.0))
    })
    .await?;
    Ok(())
}

/// A link to add.
pub struct NewTransition {
    pub from: String,
    pub to: String,
    pub branch: Option<String>,
    pub wait_outcome: Option<WaitOutcome>,
}

/// Adds a transition; the graph rules decide (400 naming the steps).
pub async fn add_transition(
    st: &Context,
    workflows: &super::engine::Engine,
    project: &str,
    id: &str,
    new: NewTransition,
) -> Result<Transition, Error> {
    let now = st.clock.now_ms();
    let t = Transition {
        id: uuid::Uuid::now_v7().to_string(),
        from: new.from,
        to: new.to,
        branch: new.branch,
        wait_outcome: new.wait_outcome,
        created_at: now,
    };
    let (_, t) = edit(st, workflows, project, id, true, |w| {
        for end in [&t.from, &t.to] {
            if w.graph.step(end).is_none() {
                return Err(step_not_found(end));
            }
        }
        w.graph.transitions.push(t.clone());
        Ok(t.clone())
    })
    .await?;
    Ok(t)
}

/// Deletes a transition (404 when the workflow has none with this id).
pub async fn delete_transition(
    st: &Context,
    workflows: &super::engine::Engine,
    project: &str,
    id: &str,
    transition_id: &str,
) -> Result<(), Error> {
    edit(st, workflows, project, id, true, |w| {
        let before = w.graph.transitions.len();
        w.graph.transitions.retain(|t| t.id != transition_id);
        if w.graph.transitions.len() == before {
            return Err(Error::not_found(
                "TRANSITION_NOT_FOUND",
                format!("Transition {transition_id} not found in this workflow"),
            ));
        }
        Ok(())
    })
    .await?;
    Ok(())
}
