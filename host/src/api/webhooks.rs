//! Outbound webhooks (docs/behaviour.md#webhooks): endpoints (list, add, read, change, delete, rotate
//! the signing secret, send a test) and their deliveries (list, retry one).

use salvo::http::StatusCode;
use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::auth::{ApiKeyAuth, KeyRule, project};
use super::body::{Fields, Reply, json_object};
use super::pagination::{decode_cursor, encode_cursor, finish_page, limit, query_str, typed_query};
use super::state;
use crate::api::errors::ApiError;
use crate::domain::status::DeliveryStatus;
use crate::domain::webhooks::MAX_URL_CHARS;
use crate::error::Error;
use crate::infra::clock::rfc3339;
use crate::services::webhooks::{self, Change, MAX_DESCRIPTION, NewEndpoint};
use crate::store::webhooks::{Attempt, Delivery, Endpoint};

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct WebhookOut {
    id: String,
    url: String,
    /// event names and prefixes (`email.*`; `*` for every event)
    events: Vec<String>,
    description: Option<String>,
    enabled: bool,
    /// why Herald disabled it (every attempt failing for three days)
    disabled_reason: Option<String>,
    /// since when every attempt has failed
    failing_since: Option<String>,
    /// the signing secret (`whsec_...`): only in the answer that created or rotated it
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
    created_at: String,
    updated_at: String,
}

impl WebhookOut {
    fn of(e: &Endpoint, secret: Option<String>) -> Self {
        WebhookOut {
            id: e.id.clone(),
            url: e.url.clone(),
            events: e.events.clone(),
            description: e.description.clone(),
            enabled: e.enabled,
            disabled_reason: e.disabled_reason.clone(),
            failing_since: e.failing_since.map(rfc3339),
            secret,
            created_at: rfc3339(e.created_at),
            updated_at: rfc3339(e.updated_at),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct WebhookList {
    data: Vec<WebhookOut>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct AttemptOut {
    at: String,
    /// the endpoint's HTTP status, when it answered
    status_code: Option<u16>,
    /// why the attempt failed
    error: Option<String>,
    duration_ms: i64,
}

impl From<&Attempt> for AttemptOut {
    fn from(a: &Attempt) -> Self {
        AttemptOut { at: rfc3339(a.at), status_code: a.status_code, error: a.error.clone(), duration_ms: a.duration_ms }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct DeliveryOut {
    /// the event's id, sent as `webhook-id`
    id: String,
    webhook_id: String,
    /// the event's name
    event_type: String,
    /// `PENDING`, `SUCCEEDED` or `FAILED`
    status: String,
    /// the body every attempt sends
    payload: Value,
    attempts: Vec<AttemptOut>,
    /// when the next attempt runs
    next_attempt_at: Option<String>,
    test: bool,
    created_at: String,
    updated_at: String,
}

impl From<&Delivery> for DeliveryOut {
    fn from(d: &Delivery) -> Self {
        DeliveryOut {
            id: d.id.clone(),
            webhook_id: d.webhook.clone(),
            event_type: d.event_type.clone(),
            status: d.status.as_str().to_string(),
            payload: serde_json::from_str(&d.body).unwrap_or(Value::Null),
            attempts: d.attempts.iter().map(AttemptOut::from).collect(),
            next_attempt_at: d.next_at.map(rfc3339),
            test: d.test,
            created_at: rfc3339(d.created_at),
            updated_at: rfc3339(d.updated_at),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct DeliveryPage {
    data: Vec<DeliveryOut>,
    cursor: String,
    has_more: bool,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct WebhookBody {
    /// the endpoint: an http or https URL
    #[salvo(schema(
        min_length = 1,
        max_length = 2048,
        pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\u0000-\u001f\u007f-\u009f]+$"
    ))]
    url: String,
    /// event names and prefixes it wants (`email.*`, `contact.unsubscribed`, `*` for all), 1 to 50
    #[salvo(schema(min_items = 1, max_items = 50, max_length = 100, pattern = r"^(\*|[A-Za-z0-9._:-]+(\.\*)?)$"))]
    events: Vec<String>,
    /// up to 500 characters
    #[salvo(schema(max_length = 500, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"))]
    description: Option<String>,
    /// default true
    enabled: Option<bool>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct WebhookPatch {
    #[salvo(schema(
        nullable = false,
        min_length = 1,
        max_length = 2048,
        pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://[^\u0000-\u001f\u007f-\u009f]+$"
    ))]
    url: Option<String>,
    #[salvo(schema(
        nullable = false,
        min_items = 1,
        max_items = 50,
        max_length = 100,
        pattern = r"^(\*|[A-Za-z0-9._:-]+(\.\*)?)$"
    ))]
    events: Option<Vec<String>>,
    /// null removes it
    #[salvo(schema(max_length = 500, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"))]
    description: Option<String>,
    /// true re-enables an endpoint Herald disabled
    enabled: Option<bool>,
}

pub fn router() -> Router {
    Router::with_path("webhooks").hoop(ApiKeyAuth(KeyRule::SecretOnly)).get(list_webhooks).post(create_webhook).push(
        Router::with_path("{id}")
            .get(get_webhook)
            .patch(update_webhook)
            .delete(delete_webhook)
            .push(Router::with_path("rotate-secret").post(rotate_webhook_secret))
            .push(Router::with_path("test").post(test_webhook))
            .push(
                Router::with_path("deliveries")
                    .get(list_deliveries)
                    .push(Router::with_path("{delivery}/retry").post(retry_delivery)),
            ),
    )
}

/// The events list of a body: an array of strings (its rules are the service's).
fn events_of(f: &mut Fields, body: &Map<String, Value>, required: bool) -> Option<Vec<String>> {
    match body.get("events") {
        None | Some(Value::Null) => {
            if required {
                f.error("events", "required", "events is required: the event names or prefixes to send");
            }
            None
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
            Some(a.iter().filter_map(|v| v.as_str().map(|s| s.trim().to_string())).collect())
        }
        Some(_) => {
            f.error("events", "invalid_type", "events must be an array of strings");
            None
        }
    }
}

/// The project's endpoints, oldest first (without their secrets).
#[endpoint(tags("webhooks"), security(("bearer" = [])), responses((status_code = 200, body = WebhookList)))]
pub async fn list_webhooks(depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let rows = st.webhooks.list(&ctx.project_id).await?;
        Reply::ok(&WebhookList { data: rows.iter().map(|e| WebhookOut::of(e, None)).collect() })
    })
}

/// Adds an endpoint: 201 with its signing secret, shown this once.
#[endpoint(
    tags("webhooks"),
    security(("bearer" = [])),
    request_body = WebhookBody,
    responses((status_code = 201, body = WebhookOut))
)]
pub async fn create_webhook(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let url = f.line("url", true, 1, MAX_URL_CHARS);
        let events = events_of(&mut f, &body, true);
        let description = f.line("description", false, 0, MAX_DESCRIPTION);
        let enabled = f.boolean("enabled").unwrap_or(true);
        f.finish()?;
        let (Some(url), Some(events)) = (url, events) else {
            return Err(Error::Internal("validated fields missing".into()).into());
        };
        let new = NewEndpoint { url: url.trim().to_string(), events, description, enabled };
        let (e, secret) = st.webhooks.create(&ctx.project_id, new).await?;
        Reply::created(&WebhookOut::of(&e, Some(secret)))
    })
}

/// One endpoint (without its secret).
#[endpoint(tags("webhooks"), security(("bearer" = [])), responses((status_code = 200, body = WebhookOut)))]
pub async fn get_webhook(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let e = st.webhooks.get(&ctx.project_id, &id.into_inner()).await?;
        Reply::ok(&WebhookOut::of(&e, None))
    })
}

/// Changes an endpoint's URL, events, description or whether it is enabled.
#[endpoint(
    tags("webhooks"),
    security(("bearer" = [])),
    request_body = WebhookPatch,
    responses((status_code = 200, body = WebhookOut))
)]
pub async fn update_webhook(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let url = f.line("url", false, 1, MAX_URL_CHARS);
        let events = events_of(&mut f, &body, false);
        let description = f.line("description", false, 0, MAX_DESCRIPTION);
        let enabled = f.boolean("enabled");
        f.finish()?;
        let description = match body.get("description") {
            None => None,
            Some(Value::Null) => Some(None),
            Some(_) => Some(description.filter(|d| !d.trim().is_empty())),
        };
        let change = Change { url: url.map(|u| u.trim().to_string()), events, description, enabled };
        let e = st.webhooks.update(&ctx.project_id, &id.into_inner(), change).await?;
        Reply::ok(&WebhookOut::of(&e, None))
    })
}

/// Deletes an endpoint and its deliveries: 204.
#[endpoint(tags("webhooks"), security(("bearer" = [])), responses((status_code = 204, description = "deleted")))]
pub async fn delete_webhook(id: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let ctx = project(depot)?;
        st.webhooks.delete(&ctx.project_id, &id.into_inner()).await?;
        res.status_code(StatusCode::NO_CONTENT);
        Ok(())
    })
}

/// A new signing secret (the old one signs nothing from now on), shown this once.
#[endpoint(tags("webhooks"), security(("bearer" = [])), responses((status_code = 200, body = WebhookOut)))]
pub async fn rotate_webhook_secret(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let (e, secret) = st.webhooks.rotate(&ctx.project_id, &id.into_inner()).await?;
        Reply::ok(&WebhookOut::of(&e, Some(secret)))
    })
}

/// Sends a `webhook.test` event now (enabled or not) and answers its delivery after the one attempt.
#[endpoint(tags("webhooks"), security(("bearer" = [])), responses((status_code = 200, body = DeliveryOut)))]
pub async fn test_webhook(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let d = st.webhooks.test(&ctx.project_id, &id.into_inner()).await?;
        Reply::ok(&DeliveryOut::from(&d))
    })
}

/// An endpoint's deliveries, newest first, cursor-paginated; `status` filters.
#[endpoint(
    tags("webhooks"),
    security(("bearer" = [])),
    parameters(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "cursor of the previous page"),
        ("status" = Option<String>, Query, pattern = "^(PENDING|SUCCEEDED|FAILED)$", description = "PENDING, SUCCEEDED or FAILED"),
    ),
    responses((status_code = 200, body = DeliveryPage))
)]
pub async fn list_deliveries(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let limit = limit(req, 20, webhooks::MAX_PAGE as i64)?;
        let status = match typed_query(req, "status")? {
            None => None,
            Some(s) => Some(DeliveryStatus::parse(&s).ok_or_else(|| {
                Error::Invalid(format!("status must be one of PENDING, SUCCEEDED, FAILED, got {s:?}"))
            })?),
        };
        let before = match query_str(req, "cursor").as_deref().map(decode_cursor).transpose()? {
            None => None,
            Some((Value::String(v), _)) => Some(v),
            Some(_) => return Err(Error::Invalid("Invalid cursor".into()).into()),
        };
        let rows =
            st.webhooks.deliveries(&ctx.project_id, &id.into_inner(), before.as_deref(), status, limit + 1).await?;
        let (rows, next, has_more) = finish_page(rows, limit, |d| encode_cursor(&json!(d.id), ""));
        Reply::ok(&DeliveryPage { data: rows.iter().map(DeliveryOut::from).collect(), cursor: next, has_more })
    })
}

/// Queues one more attempt of a delivery that succeeded or failed: 202 with the delivery; 409 while it
/// waits for an attempt already.
#[endpoint(tags("webhooks"), security(("bearer" = [])), responses((status_code = 202, body = DeliveryOut)))]
pub async fn retry_delivery(
    id: PathParam<String>,
    delivery: PathParam<String>,
    depot: &mut Depot,
) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let d = st.webhooks.retry(&ctx.project_id, &id.into_inner(), &delivery.into_inner()).await?;
        Reply::with(StatusCode::ACCEPTED, &DeliveryOut::from(&d))
    })
}
