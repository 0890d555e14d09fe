//! Contacts (docs/behaviour.md#contacts-and-data): list with keyset cursors, upsert, get, patch,
//! delete, lookup, and the custom-field endpoints. Also the contact upsert that `/v1/track` (and later
//! `/v1/send`) share.

use salvo::http::StatusCode;
use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::auth::{ApiKeyAuth, KeyRule, project};
use super::body::{Fields, Reply, json_object};
use super::pagination::{bool_param, decode_cursor, encode_cursor, finish_page, limit, query_str};
use super::state;
use crate::api::errors::ApiError;
use crate::domain::contacts::{DataPatch, normalize_email};
use crate::error::Error;
use crate::infra::clock::rfc3339;
use crate::services::contacts;
use crate::services::ingest::{Upsert, upsert};
use crate::state::AppState;
use crate::store::contacts::{Contact, ContactQuery};

/// Largest accepted `data` object, serialised.
pub const MAX_DATA_BYTES: usize = 64 * 1024;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ContactOut {
    pub id: String,
    pub email: String,
    pub subscribed: bool,
    pub data: Map<String, Value>,
    pub created_at: String,
    pub updated_at: String,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    #[salvo(schema(rename = "_meta"))]
    pub meta: Option<MetaOut>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct MetaOut {
    pub is_new: bool,
    pub is_update: bool,
}

impl From<&Contact> for ContactOut {
    fn from(c: &Contact) -> Self {
        ContactOut {
            id: c.id.clone(),
            email: c.email.clone(),
            subscribed: c.subscribed,
            data: c.data.clone(),
            created_at: rfc3339(c.created_at),
            updated_at: rfc3339(c.updated_at),
            meta: None,
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ContactPage {
    pub data: Vec<ContactOut>,
    /// Pass unchanged to get the next page; empty at the end.
    pub cursor: String,
    pub has_more: bool,
    /// Only on the first page; 0 on later pages.
    pub total: i64,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ContactBody {
    #[salvo(schema(format = Email, max_length = 254))]
    email: String,
    /// default true for a new contact; omitted keeps an existing contact's state
    subscribed: Option<bool>,
    /// null deletes a key, "" is ignored, reserved keys are dropped
    data: Option<Map<String, Value>>,
}

/// The fields a PATCH changes; those left out keep their value.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ContactPatchBody {
    /// a new address (409 when another contact has it)
    #[salvo(schema(format = Email, max_length = 254))]
    email: Option<String>,
    /// a change emits contact.subscribed or contact.unsubscribed
    subscribed: Option<bool>,
    /// null deletes a key, "" is ignored, reserved keys are dropped
    data: Option<Map<String, Value>>,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct LookupBody {
    /// at most 500
    #[salvo(schema(max_items = 500))]
    emails: Vec<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct LookupOut {
    found: Vec<String>,
    not_found: Vec<String>,
}

#[derive(Serialize, ToSchema)]
pub struct FieldInfo {
    field: String,
    /// string, number, boolean, date or object
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    kind: String,
    /// percentage of contacts that have the field
    coverage: f64,
}

#[derive(Serialize, ToSchema)]
pub struct FieldsOut {
    fields: Vec<FieldInfo>,
    count: usize,
}

#[derive(Serialize, ToSchema)]
pub struct FieldValuesOut {
    field: String,
    values: Vec<Value>,
    count: usize,
    limit: usize,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct FieldUsageOut {
    field: String,
    used_in_segments: Vec<Value>,
    used_in_campaigns: Vec<Value>,
    used_in_workflows: Vec<Value>,
    contact_count: usize,
    can_delete: bool,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct FieldDeletedOut {
    field: String,
    contacts_updated: i64,
}

pub fn router() -> Router {
    Router::with_path("contacts")
        .hoop(ApiKeyAuth(KeyRule::SecretOnly))
        .get(list_contacts)
        .post(upsert_contact)
        .push(Router::with_path("lookup").post(lookup))
        .push(Router::with_path("fields").get(list_fields))
        .push(Router::with_path("fields/{field}/values").get(field_values))
        .push(Router::with_path("fields/{field}/usage").get(field_usage))
        .push(Router::with_path("fields/{field}").delete(delete_field))
        .append(&mut super::contact_jobs::routes())
        .push(Router::with_path("{id}").get(get_contact).patch(patch_contact).delete(delete_contact))
}

/// Checks `data` (an object of bounded size) and parses it by the data rules
/// (docs/behaviour.md#contacts-and-data).
pub fn data_patch(f: &mut Fields, body: &Map<String, Value>, one_off: bool) -> DataPatch {
    match body.get("data") {
        None | Some(Value::Null) => DataPatch::default(),
        Some(Value::Object(o)) => {
            if serde_json::to_vec(o).map(|b| b.len()).unwrap_or(0) > MAX_DATA_BYTES {
                f.error("data", "too_big", format!("data must be at most {} KB", MAX_DATA_BYTES / 1024));
                return DataPatch::default();
            }
            DataPatch::parse(o, one_off)
        }
        Some(_) => {
            f.error("data", "invalid_type", "data must be an object");
            DataPatch::default()
        }
    }
}

/// Lists contacts with cursor pagination, search, subscription filter and sort.
#[endpoint(
    tags("contacts"),
    security(("bearer" = [])),
    parameters(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20; larger values are clamped"),
        ("cursor" = Option<String>, Query, description = "cursor of the previous page"),
        ("search" = Option<String>, Query, description = "case-insensitive substring of the email"),
        ("subscribed" = Option<bool>, Query, description = "omit for both"),
        ("sort" = Option<String>, Query, description = "email or createdAt (default)"),
        ("dir" = Option<String>, Query, description = "asc or desc (default)"),
    ),
    responses((status_code = 200, body = ContactPage))
)]
pub async fn list_contacts(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let limit = limit(req, 20, 100)?;
        let search = query_str(req, "search").map(|s| s.trim().to_lowercase()).filter(|s| !s.is_empty());
        let subscribed = bool_param(req, "subscribed")?;
        let sort_email = query_str(req, "sort").as_deref() == Some("email");
        let ascending = query_str(req, "dir").as_deref() == Some("asc");
        let cursor = query_str(req, "cursor");
        let after = cursor.as_deref().map(decode_cursor).transpose()?;
        if let Some((v, _)) = &after
            && (sort_email != v.is_string())
        {
            return Err(Error::Invalid("The cursor does not belong to this sort order".into()).into());
        }
        let q = ContactQuery { search, subscribed, sort_email, ascending, after, limit: limit + 1 };
        let (rows, total) = contacts::list(&st, &ctx.project_id, &q, cursor.is_none()).await?;
        let (rows, next, has_more) = finish_page(rows, limit, |last| {
            let v = if sort_email { json!(last.email) } else { json!(last.created_at) };
            encode_cursor(&v, &last.id)
        });
        Reply::ok(&ContactPage { data: rows.iter().map(ContactOut::from).collect(), cursor: next, has_more, total })
    })
}

/// Creates or updates a contact by email: 201 for a new contact, 200 for an update, both with `_meta`.
#[endpoint(
    tags("contacts"),
    security(("bearer" = [])),
    request_body = ContactBody,
    responses((status_code = 201, body = ContactOut), (status_code = 200, body = ContactOut), (status_code = 400, description = "a missing email: the bare `{\"error\": \"...\"}` (docs/behaviour.md#errors); other refusals: the envelope", body = crate::api::errors::BareErrorOrEnvelope))
)]
pub async fn upsert_contact(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        if body.get("email").is_none_or(Value::is_null) {
            return Err(Error::Plain("Email is required".into()).into());
        }
        let mut f = Fields::new(&body);
        let email = f.email("email", true);
        let subscribed = f.boolean("subscribed");
        let patch = data_patch(&mut f, &body, false);
        f.finish()?;
        let email = email.ok_or_else(|| Error::Internal("validated email missing".into()))?;
        let now = st.clock.now_ms();
        crate::services::quotas::room_for_contacts(
            &st.store,
            &st.quotas,
            &ctx.project_id,
            std::slice::from_ref(&email),
            now,
        )
        .await?;
        let up = upsert(
            &st.store,
            &st.clock,
            &ctx.project_id,
            &Upsert { email, subscribed, default_subscribed: true, patch, event: None },
        )
        .await?;
        let mut out = ContactOut::from(&up.contact);
        out.meta = Some(MetaOut { is_new: up.is_new, is_update: !up.is_new });
        Reply::with(if up.is_new { StatusCode::CREATED } else { StatusCode::OK }, &out)
    })
}

/// One contact.
#[endpoint(tags("contacts"), security(("bearer" = [])), responses((status_code = 200, body = ContactOut)))]
pub async fn get_contact(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let c = contacts::get(&st, &ctx.project_id, &id).await?;
        Reply::ok(&ContactOut::from(&c))
    })
}

/// Updates a contact: email (409 when another contact has it), subscribed (a flip emits its event),
/// data (null deletes a key, "" is ignored, reserved keys are dropped).
#[endpoint(tags("contacts"), security(("bearer" = [])), request_body = ContactPatchBody, responses((status_code = 200, body = ContactOut)))]
pub async fn patch_contact(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let email = f.email("email", false);
        let requested = f.boolean("subscribed");
        let patch = data_patch(&mut f, &body, false);
        f.finish()?;
        let change = contacts::ContactChange { email, subscribed: requested, patch };
        let c = contacts::update(&st, &ctx.project_id, &id, &change).await?;
        Reply::ok(&ContactOut::from(&c))
    })
}

/// Deletes a contact and its events: 204 with an empty body.
#[endpoint(tags("contacts"), security(("bearer" = [])), responses((status_code = 204, description = "deleted")))]
pub async fn delete_contact(id: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        contacts::delete(&st, &ctx.project_id, &id).await?;
        res.status_code(StatusCode::NO_CONTENT);
        Ok(())
    })
}

/// Bulk existence check of up to 500 emails; echoes the caller's strings.
#[endpoint(tags("contacts"), security(("bearer" = [])), request_body = LookupBody, responses((status_code = 200, body = LookupOut)))]
pub async fn lookup(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        let emails = match body.get("emails") {
            Some(Value::Array(a)) => a,
            Some(_) => {
                return Err(Error::field(
                    "emails",
                    "invalid_type",
                    "emails must be an array of strings",
                    body["emails"].clone(),
                )
                .into());
            }
            None => return Err(Error::field("emails", "required", "emails is required", Value::Null).into()),
        };
        if emails.len() > 500 {
            return Err(Error::field("emails", "too_big", "at most 500 emails per call", json!(emails.len())).into());
        }
        let mut errors = Vec::new();
        let mut given = Vec::new();
        for (i, e) in emails.iter().enumerate() {
            match e.as_str() {
                Some(s) => given.push(s.to_string()),
                None => errors.push(crate::error::FieldError::new(
                    format!("emails.{i}"),
                    "invalid_type",
                    "must be a string",
                    e.clone(),
                )),
            }
        }
        if !errors.is_empty() {
            return Err(Error::Validation(errors).into());
        }
        let normalized: Vec<String> = given.iter().map(|s| normalize_email(s)).collect();
        let existing = contacts::existing_emails(&st, &ctx.project_id, &normalized).await?;
        let (mut found, mut not_found) = (Vec::new(), Vec::new());
        for (orig, norm) in given.into_iter().zip(normalized) {
            if existing.contains(&norm) { found.push(orig) } else { not_found.push(orig) }
        }
        Reply::ok(&LookupOut { found, not_found })
    })
}

/// Standard fields, then every `data.<key>` with its inferred type and coverage in percent.
#[endpoint(tags("contacts"), security(("bearer" = [])), responses((status_code = 200, body = FieldsOut)))]
pub async fn list_fields(depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let fields: Vec<FieldInfo> = contacts::fields(&st, &ctx.project_id)
            .await?
            .into_iter()
            .map(|f| FieldInfo { field: f.field, kind: f.kind.into(), coverage: f.coverage })
            .collect();
        let count = fields.len();
        Reply::ok(&FieldsOut { fields, count })
    })
}

/// `plan` and `data.plan` both name the custom field `plan`.
fn custom_field(raw: &str) -> Result<String, ApiError> {
    let f = raw.strip_prefix("data.").unwrap_or(raw).to_string();
    if ["email", "subscribed", "createdAt", "updatedAt", "id"].contains(&raw) {
        return Err(Error::Invalid(format!("{raw} is a standard field, not a custom one")).into());
    }
    if f.is_empty() || f.chars().count() > 200 {
        return Err(Error::Invalid("The field name must be 1 to 200 characters".into()).into());
    }
    Ok(f)
}

/// Distinct values of a custom field (up to `limit`, default 100, at most 1000).
#[endpoint(
    tags("contacts"),
    security(("bearer" = [])),
    parameters(
        ("limit" = Option<i64>, Query, description = "1 to 1000, default 100"),
        ("field" = String, Path, pattern = r"^(?!(?:email|subscribed|createdAt|updatedAt|id|data\.)$)(?:data\.)?[\s\S]{1,200}$", description = "a custom field: `plan` or `data.plan` (1 to 200 characters; not a standard field such as email or createdAt)"),
    ),
    responses((status_code = 200, body = FieldValuesOut))
)]
pub async fn field_values(field: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let name = custom_field(&field.into_inner())?;
        let limit = limit(req, 100, 1000)?;
        let values = contacts::field_values(&st, &ctx.project_id, &name, limit).await?;
        Reply::ok(&FieldValuesOut { field: format!("data.{name}"), count: values.len(), values, limit })
    })
}

/// Where a custom field is used, how many contacts have it, and whether it can be deleted.
#[endpoint(tags("contacts"), security(("bearer" = [])), parameters(("field" = String, Path, pattern = r"^(?!(?:email|subscribed|createdAt|updatedAt|id|data\.)$)(?:data\.)?[\s\S]{1,200}$", description = "a custom field: `plan` or `data.plan` (1 to 200 characters; not a standard field such as email or createdAt)")), responses((status_code = 200, body = FieldUsageOut)))]
pub async fn field_usage(field: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let name = custom_field(&field.into_inner())?;
        let usage = field_usage_of(&st, &ctx.project_id, &name).await?;
        Reply::ok(&usage)
    })
}

async fn field_usage_of(st: &AppState, project_id: &str, name: &str) -> Result<FieldUsageOut, ApiError> {
    let usage = contacts::field_usage(st, project_id, name).await?;
    // Campaigns do not name custom fields.
    Ok(FieldUsageOut {
        field: format!("data.{name}"),
        can_delete: usage.can_delete(),
        used_in_segments: usage.segments.into_iter().map(|(id, name)| json!({ "id": id, "name": name })).collect(),
        used_in_campaigns: vec![],
        used_in_workflows: usage.workflows.into_iter().map(|(id, name)| json!({ "id": id, "name": name })).collect(),
        contact_count: usage.contact_count,
    })
}

/// Deletes a custom field on every contact of the project; 409 while something uses it.
#[endpoint(tags("contacts"), security(("bearer" = [])), parameters(("field" = String, Path, pattern = r"^(?!(?:email|subscribed|createdAt|updatedAt|id|data\.)$)(?:data\.)?[\s\S]{1,200}$", description = "a custom field: `plan` or `data.plan` (1 to 200 characters; not a standard field such as email or createdAt)")), responses((status_code = 200, body = FieldDeletedOut)))]
pub async fn delete_field(field: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let name = custom_field(&field.into_inner())?;
        let n = contacts::delete_field(&st, &ctx.project_id, &name).await?;
        Reply::ok(&FieldDeletedOut { field: format!("data.{name}"), contacts_updated: n })
    })
}
