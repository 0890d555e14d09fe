//! Templates (docs/behaviour.md#templates): offset-paginated list with type filter, search and
//! sort; create and patch with field checks, a Handlebars syntax check that names the line, and the
//! sender check; get, delete, duplicate (`<name> (Copy)`) and usage.

use salvo::http::StatusCode;
use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value};

use super::auth::{ApiKeyAuth, KeyRule, project};
use super::body::{Fields, Reply, json_object};
use super::pagination::{OffsetPage, query_str, sort_and_dir, typed_query};
use super::state;
use crate::api::errors::ApiError;
use crate::domain::templating::{Engine, Mode};
use crate::error::Error;
use crate::infra::clock::rfc3339;
use crate::services::templates;
use crate::store::templates::{TemplateQuery, TemplateRow};

pub const TYPES: &[&str] = &["TRANSACTIONAL", "MARKETING", "HEADLESS"];

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct TemplateOut {
    id: String,
    name: String,
    description: Option<String>,
    subject: String,
    body: String,
    from: String,
    from_name: Option<String>,
    reply_to: Option<String>,
    /// TRANSACTIONAL, MARKETING or HEADLESS
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    kind: String,
    project_id: String,
    created_at: String,
    updated_at: String,
}

impl TemplateOut {
    fn new(t: &TemplateRow, project_id: &str) -> Self {
        TemplateOut {
            id: t.id.clone(),
            name: t.name.clone(),
            description: t.description.clone(),
            subject: t.subject.clone(),
            body: t.body.clone(),
            from: t.from.clone(),
            from_name: t.from_name.clone(),
            reply_to: t.reply_to.clone(),
            kind: t.kind.clone(),
            project_id: project_id.to_string(),
            created_at: rfc3339(t.created_at),
            updated_at: rfc3339(t.updated_at),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct TemplatePage {
    data: Vec<TemplateOut>,
    total: i64,
    page: usize,
    page_size: usize,
    total_pages: i64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct TemplateBody {
    #[salvo(schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    name: String,
    #[salvo(schema(max_length = 1000))]
    description: Option<String>,
    /// 1 to 998 characters without line breaks; Handlebars
    #[salvo(schema(min_length = 1, max_length = 998, pattern = r"^[^\r\n]*$"))]
    subject: String,
    /// HTML; Handlebars (`{{var}}` escaped, `{{{var}}}` raw, `{{var ?? "fallback"}}`)
    #[salvo(schema(min_length = 1))]
    body: String,
    /// an address on a domain verified for the project
    #[salvo(schema(format = Email, max_length = 254))]
    from: String,
    #[salvo(schema(max_length = 200, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"))]
    from_name: Option<String>,
    #[salvo(schema(format = Email, max_length = 254))]
    reply_to: Option<String>,
    /// TRANSACTIONAL, MARKETING (default) or HEADLESS
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    #[salvo(schema(pattern = "^(TRANSACTIONAL|MARKETING|HEADLESS)$"))]
    kind: Option<String>,
}

/// The body of a template update: any of the create's fields, each checked as on create.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct TemplatePatchBody {
    #[salvo(schema(
        nullable = false,
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    name: Option<String>,
    #[salvo(schema(max_length = 1000))]
    description: Option<String>,
    /// 1 to 998 characters without line breaks; Handlebars
    #[salvo(schema(nullable = false, min_length = 1, max_length = 998, pattern = r"^[^\r\n]*$"))]
    subject: Option<String>,
    /// HTML; Handlebars
    #[salvo(schema(nullable = false, min_length = 1))]
    body: Option<String>,
    /// an address on a domain verified for the project
    #[salvo(schema(nullable = false, format = Email, max_length = 254))]
    from: Option<String>,
    #[salvo(schema(max_length = 200, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"))]
    from_name: Option<String>,
    #[salvo(schema(format = Email, max_length = 254))]
    reply_to: Option<String>,
    /// TRANSACTIONAL, MARKETING or HEADLESS
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    #[salvo(schema(nullable = false, pattern = "^(TRANSACTIONAL|MARKETING|HEADLESS)$"))]
    kind: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct UsageOut {
    campaigns: Vec<Value>,
    workflow_steps: Vec<Value>,
    /// emails rendered from the template (every `/v1/send` recipient that named it)
    emails_sent: i64,
}

pub fn router() -> Router {
    Router::with_path("templates")
        .hoop(ApiKeyAuth(KeyRule::SecretOnly))
        .get(list_templates)
        .post(create_template)
        .push(Router::with_path("preview").post(preview_template))
        .push(Router::with_path("{id}/duplicate").post(duplicate_template))
        .push(Router::with_path("{id}/usage").get(template_usage))
        .push(Router::with_path("{id}").get(get_template).patch(patch_template).delete(delete_template))
}

/// A rendered preview: the subject as text, the body as the HTML an email would carry.
#[derive(Serialize, ToSchema)]
pub struct PreviewOut {
    subject: String,
    body: String,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct PreviewBody {
    /// the subject source (optional)
    #[salvo(schema(max_length = 998))]
    subject: Option<String>,
    /// the body source
    #[salvo(schema(min_length = 1))]
    body: String,
    /// the variables to render with, as a contact's data would give them
    data: Option<Map<String, Value>>,
}

/// Largest preview answered: a body that renders to more is cut off with an error.
const PREVIEW_MAX_BYTES: usize = 2 * 1024 * 1024;

/// Renders a template with sample data, as sending would (docs/dashboard.md#template-preview). A syntax
/// or render error is 422 on `subject` or `body`, its message naming the line and column.
#[endpoint(
    tags("templates"),
    security(("bearer" = [])),
    request_body = PreviewBody,
    responses((status_code = 200, body = PreviewOut))
)]
pub async fn preview_template(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        project(depot)?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let subject = f.string("subject", false, 0, 998).unwrap_or_default();
        let src = f.string("body", true, 1, 5 * 1024 * 1024).unwrap_or_default();
        let vars = match body.get("data") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(Value::Object(m)) => Value::Object(m.clone()),
            Some(other) => {
                f.error("data", "invalid_type", "data must be an object");
                other.clone()
            }
        };
        f.finish()?;
        let render = |field: &str, src: &str, mode: Mode| {
            st.templates
                .render(src, &vars, mode, PREVIEW_MAX_BYTES)
                .map_err(|issue| Error::field(field, "invalid_template", &format!("{field}: {issue}"), Value::Null))
        };
        let subject = if subject.is_empty() { String::new() } else { render("subject", &subject, Mode::Text)? };
        let body = render("body", &src, Mode::Html)?;
        Reply::ok(&PreviewOut { subject, body })
    })
}

/// Reads template fields over `base` (a new template, or the one being patched). `null` clears an
/// optional field on patch.
fn read_fields(f: &mut Fields, body: &Map<String, Value>, base: &mut TemplateRow, creating: bool, engine: &Engine) {
    if let Some(v) = f.text("name", creating, 200) {
        base.name = v;
    }
    if let Some(v) = f.string("subject", creating, 1, 998) {
        if v.contains(['\r', '\n']) {
            f.error("subject", "invalid_string", "subject must not contain line breaks");
        } else {
            base.subject = v;
        }
    }
    if let Some(v) = f.string("body", creating, 1, 5 * 1024 * 1024) {
        base.body = v;
    }
    if let Some(v) = f.email("from", creating) {
        base.from = v;
    }
    for (key, slot, max) in [("description", &mut base.description, 1000usize), ("fromName", &mut base.from_name, 200)]
    {
        match body.get(key) {
            Some(Value::Null) => *slot = None,
            Some(_) => {
                let v = if key == "fromName" { f.line(key, false, 0, max) } else { f.string(key, false, 0, max) };
                if let Some(v) = v {
                    *slot = Some(v).filter(|s| !s.trim().is_empty());
                }
            }
            None => {}
        }
    }
    match body.get("replyTo") {
        Some(Value::Null) => base.reply_to = None,
        Some(_) => {
            if let Some(v) = f.email("replyTo", false) {
                base.reply_to = Some(v);
            }
        }
        None => {}
    }
    if let Some(v) = f.one_of("type", false, TYPES) {
        base.kind = v;
    }
    for (field, src) in [("subject", base.subject.clone()), ("body", base.body.clone())] {
        if !src.is_empty()
            && let Err(issue) = engine.check(&src)
        {
            f.error(field, "invalid_template", format!("{field} is not a valid template: {issue}"));
        }
    }
}

/// Creates a template. Missing `from`: a bare `{"error": "..."}` 400; an unverified sender domain: 403.
#[endpoint(tags("templates"), security(("bearer" = [])), request_body = TemplateBody, responses((status_code = 201, body = TemplateOut), (status_code = 400, description = "a missing from: the bare `{\"error\": \"...\"}` (docs/behaviour.md#errors); other refusals: the envelope", body = crate::api::errors::BareErrorOrEnvelope)))]
pub async fn create_template(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        if body.get("from").is_none_or(Value::is_null) {
            return Err(Error::Plain("from is required".into()).into());
        }
        let now = st.clock.now_ms();
        let mut t = TemplateRow {
            id: uuid::Uuid::now_v7().to_string(),
            name: String::new(),
            description: None,
            subject: String::new(),
            body: String::new(),
            from: String::new(),
            from_name: None,
            reply_to: None,
            kind: "MARKETING".into(),
            created_at: now,
            updated_at: now,
        };
        let mut f = Fields::new(&body);
        read_fields(&mut f, &body, &mut t, true, &st.templates);
        f.finish()?;
        templates::create(&st, &ctx.project_id, &t).await?;
        Reply::created(&TemplateOut::new(&t, &ctx.project_id))
    })
}

/// Lists templates: `page`, `pageSize` (1 to 100), `type`, `search` (name, description, subject),
/// `sort` (name, createdAt, updatedAt; default createdAt), `dir` (default desc).
#[endpoint(
    tags("templates"),
    security(("bearer" = [])),
    parameters(
        ("page" = Option<i64>, Query, description = "1-based, default 1"),
        ("pageSize" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("type" = Option<String>, Query, pattern = "^(TRANSACTIONAL|MARKETING|HEADLESS)$", description = "TRANSACTIONAL, MARKETING or HEADLESS"),
        ("search" = Option<String>, Query, description = "case-insensitive, on name, description and subject"),
        ("sort" = Option<String>, Query, description = "name, createdAt (default) or updatedAt"),
        ("dir" = Option<String>, Query, description = "asc or desc (default)"),
    ),
    responses((status_code = 200, body = TemplatePage))
)]
pub async fn list_templates(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let paging = OffsetPage::from(req)?;
        let kind = typed_query(req, "type")?;
        if let Some(k) = &kind
            && !TYPES.contains(&k.as_str())
        {
            return Err(Error::Invalid(format!("type must be one of {}, got {k:?}", TYPES.join(", "))).into());
        }
        let (sort, ascending) = sort_and_dir(req);
        let q = TemplateQuery {
            kind,
            search: query_str(req, "search").map(|s| s.trim().to_lowercase()).filter(|s| !s.is_empty()),
            sort,
            ascending,
            offset: paging.offset(),
            limit: paging.page_size,
        };
        let (rows, total) = templates::list(&st, &ctx.project_id, &q).await?;
        let (page, page_size, total_pages) = (paging.page, paging.page_size, paging.total_pages(total));
        Reply::ok(&TemplatePage {
            data: rows.iter().map(|t| TemplateOut::new(t, &ctx.project_id)).collect(),
            total,
            page,
            page_size,
            total_pages,
        })
    })
}

/// One template.
#[endpoint(tags("templates"), security(("bearer" = [])), responses((status_code = 200, body = TemplateOut)))]
pub async fn get_template(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let t = templates::get(&st, &ctx.project_id, &id).await?;
        Reply::ok(&TemplateOut::new(&t, &ctx.project_id))
    })
}

/// Updates a template; the same checks as on create apply to the fields given.
#[endpoint(tags("templates"), security(("bearer" = [])), request_body = TemplatePatchBody, responses((status_code = 200, body = TemplateOut)))]
pub async fn patch_template(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let body = json_object(req).await?;
        let mut t = templates::get(&st, &ctx.project_id, &id).await?;
        let before_from = t.from.clone();
        let mut f = Fields::new(&body);
        read_fields(&mut f, &body, &mut t, false, &st.templates);
        f.finish()?;
        templates::update(&st, &ctx.project_id, &mut t, &before_from).await?;
        Reply::ok(&TemplateOut::new(&t, &ctx.project_id))
    })
}

/// Deletes a template: 204.
#[endpoint(tags("templates"), security(("bearer" = [])), responses((status_code = 204, description = "deleted")))]
pub async fn delete_template(id: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        templates::delete(&st, &ctx.project_id, &id).await?;
        res.status_code(StatusCode::NO_CONTENT);
        Ok(())
    })
}

/// Copies a template as `<name> (Copy)` and answers the new template.
#[endpoint(tags("templates"), security(("bearer" = [])), responses((status_code = 201, body = TemplateOut)))]
pub async fn duplicate_template(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let copy = templates::duplicate(&st, &ctx.project_id, &id).await?;
        Reply::created(&TemplateOut::new(&copy, &ctx.project_id))
    })
}

/// Campaigns and workflow steps that use the template (campaigns carry their own body, so none), and
/// how many emails were rendered from it.
#[endpoint(tags("templates"), security(("bearer" = [])), responses((status_code = 200, body = UsageOut)))]
pub async fn template_usage(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let emails_sent = templates::emails_sent(&st, &ctx.project_id, &id).await?;
        let workflow_steps = templates::workflow_steps(&st, &ctx.project_id, &id, false)
            .await?
            .into_iter()
            .map(|(w, wn, s, sn)| serde_json::json!({ "workflowId": w, "workflowName": wn, "stepId": s, "stepName": sn }))
            .collect();
        Reply::ok(&UsageOut { campaigns: vec![], workflow_steps, emails_sent })
    })
}
