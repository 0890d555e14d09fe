//! Templates: saved subject, body and sender, rendered by `/v1/send` (docs/behaviour.md#templates). Every
//! saved sender address passes the sender check first, like every sending path.
//!
//! Must not import: salvo, surrealdb.

use crate::context::Context;
use crate::error::Error;
use crate::services::sending_domains::require_sender;
use crate::store::templates::{TemplateQuery, TemplateRow};

/// Longest template name, in characters.
const MAX_NAME_CHARS: usize = 200;

fn not_found(id: &str) -> Error {
    Error::not_found("TEMPLATE_NOT_FOUND", format!("Template {id} not found"))
}

/// One template of the project (404 otherwise).
pub async fn get(st: &Context, project: &str, id: &str) -> Result<TemplateRow, Error> {
    st.store.template(project, id).await?.ok_or_else(|| not_found(id))
}

/// A page of the project's templates and the total that match.
pub async fn list(st: &Context, project: &str, q: &TemplateQuery) -> Result<(Vec<TemplateRow>, i64), Error> {
    Ok(st.store.list_templates(project, q).await?)
}

/// Saves a new template (its fields checked by the caller) after the sender check.
pub async fn create(st: &Context, project: &str, t: &TemplateRow) -> Result<(), Error> {
    require_sender(&st.store, project, &t.from).await?;
    Ok(st.store.save_template(project, t).await?)
}

/// Saves a changed template; the sender check runs again when the sender changed.
pub async fn update(st: &Context, project: &str, t: &mut TemplateRow, before_from: &str) -> Result<(), Error> {
    if t.from != before_from {
        require_sender(&st.store, project, &t.from).await?;
    }
    t.updated_at = st.clock.now_ms();
    Ok(st.store.save_template(project, t).await?)
}

/// The SEND_EMAIL steps that use a template: (workflow id, workflow name, step id, step name).
pub async fn workflow_steps(
    st: &Context,
    project: &str,
    id: &str,
    enabled_only: bool,
) -> Result<Vec<(String, String, String, String)>, Error> {
    let mut out = Vec::new();
    for w in st.store.workflows_referencing(project, "ref_templates", id, enabled_only).await? {
        for s in w.graph.steps.iter().filter(|s| s.template_id.as_deref() == Some(id)) {
            out.push((w.id.clone(), w.name.clone(), s.id.clone(), s.name.clone()));
        }
    }
    Ok(out)
}

/// Deletes a template (404 when it is not the project's; 409 while an enabled workflow sends it).
pub async fn delete(st: &Context, project: &str, id: &str) -> Result<(), Error> {
    get(st, project, id).await?;
    let users = workflow_steps(st, project, id, true).await?;
    if !users.is_empty() {
        let names: Vec<String> =
            users.iter().map(|(w, wn, _, sn)| format!("step {sn:?} of workflow {wn:?} ({w})")).collect();
        return Err(Error::Conflict(format!(
            "Template {id} is sent by {} of an enabled workflow: {}; disable the workflow or change the step first",
            if users.len() == 1 { "a step" } else { "steps" },
            names.join(", ")
        )));
    }
    if !st.store.delete_template(project, id).await? {
        return Err(not_found(id));
    }
    Ok(())
}

/// Copies a template as `<name> (Copy)` (the name cut to its last 200 characters).
pub async fn duplicate(st: &Context, project: &str, id: &str) -> Result<TemplateRow, Error> {
    let t = get(st, project, id).await?;
    let now = st.clock.now_ms();
    let name = crate::domain::text::copy_name(&t.name, MAX_NAME_CHARS);
    let copy = TemplateRow { id: uuid::Uuid::now_v7().to_string(), name, created_at: now, updated_at: now, ..t };
    st.store.save_template(project, &copy).await?;
    Ok(copy)
}

/// How many emails were rendered from the template (404 when it is not the project's).
pub async fn emails_sent(st: &Context, project: &str, id: &str) -> Result<i64, Error> {
    get(st, project, id).await?;
    Ok(st.store.template_emails(project, id).await?)
}
