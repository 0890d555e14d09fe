//! Bulk changes and CSV import of contacts (docs/behaviour.md#bulk-changes-and-import): `POST
//! /contacts/bulk-subscribe|bulk-unsubscribe|bulk-delete` and `POST /contacts/import` (multipart) queue
//! a job, `GET /contacts/bulk/:jobId` and `GET /contacts/import/:jobId` say where it is. Mounted under
//! `/contacts` (its auth applies).

use salvo::http::StatusCode;
use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::auth::project;
use super::body::{Reply, json_object, multipart_file};
use super::state;
use crate::api::errors::ApiError;
use crate::error::{Error, FieldError};
use crate::infra::clock::rfc3339;
use crate::services::contact_import::{self, ImportOptions, MAX_FILE_BYTES};
use crate::services::contact_jobs::{self, BulkOp, MAX_BULK_IDS};
use crate::store::contact_jobs::ContactJobRow;

/// Longest contact id taken (ids are UUIDs; anything longer cannot be one).
const MAX_ID_CHARS: usize = 64;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct JobIdOut {
    job_id: String,
}

#[derive(Serialize, ToSchema)]
pub struct ProgressOut {
    done: i64,
    total: i64,
    /// whole percent of `total` done (100 for an empty job)
    percent: i64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ContactJobOut {
    id: String,
    /// bulk-subscribe, bulk-unsubscribe, bulk-delete or import
    kind: String,
    /// queued, active, completed or failed
    state: String,
    progress: ProgressOut,
    /// what the job did so far: `{updated, unchanged, notFound}` or `{deleted, notFound}`; an import's
    /// `{created, updated, skipped, failed, errors: [{line, email, reason}]}` (the first 100 bad rows)
    #[salvo(schema(value_type = Object))]
    result: Map<String, Value>,
    error: Option<String>,
    created_at: String,
    finished_at: Option<String>,
}

impl From<&ContactJobRow> for ContactJobOut {
    fn from(r: &ContactJobRow) -> Self {
        let percent = if r.total <= 0 { 100 } else { (r.done * 100 / r.total).clamp(0, 100) };
        let mut result = r.result.clone();
        if r.kind == contact_import::IMPORT_KIND {
            result.insert("errors".into(), Value::Array(r.errors.clone()));
        }
        ContactJobOut {
            id: r.id.clone(),
            kind: r.kind.clone(),
            state: r.state.to_string(),
            progress: ProgressOut { done: r.done, total: r.total, percent },
            result,
            error: r.error.clone(),
            created_at: rfc3339(r.created_at),
            finished_at: r.finished_at.map(rfc3339),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct BulkBody {
    /// 1 to 1,000 ids of the project's contacts (others count as not found)
    #[salvo(schema(min_items = 1, max_items = 1000, min_length = 1, max_length = 64))]
    contact_ids: Vec<String>,
}

/// The bulk routes, mounted under `/contacts` before `/contacts/{id}`.
pub fn routes() -> Vec<Router> {
    vec![
        Router::with_path("bulk-subscribe").post(bulk_subscribe),
        Router::with_path("bulk-unsubscribe").post(bulk_unsubscribe),
        Router::with_path("bulk-delete").post(bulk_delete),
        Router::with_path("bulk/{job_id}").get(get_bulk_job),
        Router::with_path("import").post(import_contacts),
        Router::with_path("import/{job_id}").get(get_import_job),
    ]
}

/// `contactIds` of a bulk body: an array of 1 to [`MAX_BULK_IDS`] strings.
fn contact_ids(body: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let field = |code: &str, message: &str, got: Value| Error::field("contactIds", code, message, got);
    let list = match body.get("contactIds") {
        Some(Value::Array(a)) => a,
        None | Some(Value::Null) => return Err(field("required", "contactIds is required", Value::Null).into()),
        Some(other) => {
            return Err(field("invalid_type", "contactIds must be an array of contact ids", other.clone()).into());
        }
    };
    if list.is_empty() {
        return Err(field("too_small", "contactIds needs at least one id", json!([])).into());
    }
    if list.len() > MAX_BULK_IDS {
        let message = format!("at most {MAX_BULK_IDS} contact ids per request");
        return Err(field("too_big", &message, json!(list.len())).into());
    }
    let mut errors = Vec::new();
    let mut ids = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        match v.as_str() {
            Some(s) if !s.is_empty() && s.chars().count() <= MAX_ID_CHARS => ids.push(s.to_string()),
            Some(_) => errors.push(FieldError::new(
                format!("contactIds.{i}"),
                "invalid_string",
                format!("a contact id is 1 to {MAX_ID_CHARS} characters"),
                v.clone(),
            )),
            None => {
                errors.push(FieldError::new(format!("contactIds.{i}"), "invalid_type", "must be a string", v.clone()))
            }
        }
    }
    if !errors.is_empty() {
        errors.truncate(20);
        return Err(Error::Validation(errors).into());
    }
    Ok(ids)
}

async fn queue(req: &mut Request, depot: &mut Depot, op: BulkOp) -> Result<Reply, ApiError> {
    let st = state(depot)?;
    let ctx = project(depot)?;
    let body = json_object(req).await?;
    let ids = contact_ids(&body)?;
    let job_id = contact_jobs::start(&st, &ctx.project_id, op, ids).await?;
    Reply::with(StatusCode::ACCEPTED, &JobIdOut { job_id })
}

/// Subscribes up to 1,000 contacts, as a job: 202 with its id. A real change records
/// `contact.subscribed`.
#[endpoint(tags("contacts"), security(("bearer" = [])), request_body = BulkBody, responses((status_code = 202, body = JobIdOut)))]
pub async fn bulk_subscribe(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({ queue(req, depot, BulkOp::Subscribe).await })
}

/// Unsubscribes up to 1,000 contacts, as a job: 202 with its id. A real change records
/// `contact.unsubscribed`.
#[endpoint(tags("contacts"), security(("bearer" = [])), request_body = BulkBody, responses((status_code = 202, body = JobIdOut)))]
pub async fn bulk_unsubscribe(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({ queue(req, depot, BulkOp::Unsubscribe).await })
}

/// Deletes up to 1,000 contacts with their events, as a job: 202 with its id.
#[endpoint(tags("contacts"), security(("bearer" = [])), request_body = BulkBody, responses((status_code = 202, body = JobIdOut)))]
pub async fn bulk_delete(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({ queue(req, depot, BulkOp::Delete).await })
}

/// Where a bulk job is: state, progress and what it did so far (404 for another project's job).
#[endpoint(tags("contacts"), security(("bearer" = [])), responses((status_code = 200, body = ContactJobOut)))]
pub async fn get_bulk_job(job_id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let row = contact_jobs::get(&st, &ctx.project_id, &job_id.into_inner()).await?;
        Reply::ok(&ContactJobOut::from(&row))
    })
}

/// A `true`/`false` form field (`default` when absent).
fn form_bool(form: &salvo::http::form::FormData, name: &str, default: bool) -> Result<bool, ApiError> {
    match form.fields.get(name).map(|v| v.trim()) {
        None | Some("") => Ok(default),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(Error::field(name, "invalid_type", &format!("{name} must be true or false"), json!(v)).into()),
    }
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ImportForm {
    /// the CSV file (at most 5 MB, UTF-8, a header row with an `email` column)
    #[salvo(schema(value_type = String, format = Binary))]
    file: Vec<u8>,
    /// subscription of the contacts the import creates, default true (a `subscribed` column wins)
    subscribed: Option<bool>,
    /// whether rows update contacts that exist, default true (false: they are skipped)
    update_existing: Option<bool>,
}

/// Imports contacts from a CSV file (multipart field `file`, at most 5 MB), as a job: 202 with its id.
/// A file too large is 413; one that is not UTF-8 CSV with a header row and an `email` column is 422.
#[endpoint(
    tags("contacts"),
    security(("bearer" = [])),
    request_body(content = ImportForm, content_type = "multipart/form-data"),
    responses((status_code = 202, body = JobIdOut))
)]
pub async fn import_contacts(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let (form, bytes) = multipart_file(req, MAX_FILE_BYTES).await?;
        let opts = ImportOptions {
            subscribed: form_bool(form, "subscribed", true)?,
            update_existing: form_bool(form, "updateExisting", true)?,
        };
        let job_id = contact_import::start(&st, &ctx.project_id, &bytes, opts).await?;
        Reply::with(StatusCode::ACCEPTED, &JobIdOut { job_id })
    })
}

/// Where an import is: state, progress (rows) and what it did so far (404 for another project's job).
#[endpoint(tags("contacts"), security(("bearer" = [])), responses((status_code = 200, body = ContactJobOut)))]
pub async fn get_import_job(job_id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let row = contact_import::get(&st, &ctx.project_id, &job_id.into_inner()).await?;
        Reply::ok(&ContactJobOut::from(&row))
    })
}
