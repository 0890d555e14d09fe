//! Event tracking and the event endpoints: docs/behaviour.md#events, docs/behaviour.md#idempotency and,
//! for which key may track, docs/behaviour.md#keys-and-authentication.

use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::auth::{ApiKeyAuth, KeyRule, project};
use super::body::{Fields, Reply, json_object};
use super::contacts::data_patch;
use super::pagination::{decode_cursor, encode_cursor, finish_page, limit, query_str, typed_query};
use super::{idempotency, state};
use crate::api::errors::ApiError;
use crate::domain::contacts::is_reserved_event;
use crate::error::Error;
use crate::infra::clock::{parse_rfc3339, rfc3339};
use crate::services::events::history;
use crate::services::ingest::Upsert;
use crate::store::events::{Event, EventQuery};

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct TrackBody {
    #[salvo(schema(format = Email, max_length = 254))]
    email: String,
    /// must not be a reserved name (email.*, contact.subscribed, contact.unsubscribed, segment.<slug>.entry|exit)
    #[salvo(schema(
        min_length = 1,
        max_length = 255,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    event: String,
    /// omitted keeps an existing contact's state; new contacts default to true
    subscribed: Option<bool>,
    /// contact data; `{value, persistent: false}` is used for this event only
    data: Option<Map<String, Value>>,
}

#[derive(Serialize, ToSchema)]
pub struct TrackData {
    /// contact id
    contact: String,
    /// event id
    event: String,
    timestamp: String,
}

#[derive(Serialize, ToSchema)]
pub struct TrackOut {
    success: bool,
    data: TrackData,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct EventOut {
    id: String,
    name: String,
    contact_id: String,
    /// the contact's email (null once the contact is deleted)
    contact_email: Option<String>,
    data: Map<String, Value>,
    /// api (tracked) or system (emitted by Herald)
    source: String,
    created_at: String,
}

impl EventOut {
    fn new(e: &Event, emails: &std::collections::HashMap<String, String>) -> Self {
        EventOut {
            id: e.id.clone(),
            name: e.name.clone(),
            contact_id: e.contact.clone(),
            contact_email: emails.get(&e.contact).cloned(),
            data: e.data.clone(),
            source: e.source.clone(),
            created_at: rfc3339(e.created_at),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct EventPage {
    data: Vec<EventOut>,
    cursor: String,
    has_more: bool,
    total: i64,
}

#[derive(Serialize, ToSchema)]
pub struct NameCount {
    name: String,
    count: i64,
}

#[derive(Serialize, ToSchema)]
pub struct DayCount {
    /// YYYY-MM-DD (UTC)
    date: String,
    count: i64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct StatsOut {
    from: String,
    to: String,
    total: i64,
    by_name: Vec<NameCount>,
    by_day: Vec<DayCount>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct EventName {
    name: String,
    count: i64,
    last_seen_at: String,
}

#[derive(Serialize, ToSchema)]
pub struct NamesOut {
    names: Vec<EventName>,
    count: usize,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct EventUsageOut {
    event: String,
    used_in_segments: Vec<Value>,
    used_in_workflows: Vec<Value>,
    used_in_campaigns: Vec<Value>,
    event_count: i64,
}

#[derive(Serialize, ToSchema)]
pub struct EventsDeletedOut {
    event: String,
    deleted: i64,
}

pub fn router() -> Router {
    Router::new()
        .push(Router::with_path("v1/track").hoop(ApiKeyAuth(KeyRule::AnyKey)).post(track))
        .push(Router::with_path("events/track").hoop(ApiKeyAuth(KeyRule::AnyKey)).post(track_alias))
        .push(
            Router::with_path("events")
                .hoop(ApiKeyAuth(KeyRule::SecretOnly))
                .get(list_events)
                .push(Router::with_path("stats").get(stats))
                .push(Router::with_path("names").get(event_names))
                .push(Router::with_path("contact/{contact_id}").get(contact_events))
                .push(Router::with_path("{event_name}/usage").get(usage))
                .push(Router::with_path("{event_name}").delete(delete_named)),
        )
}

/// Records an event for a contact, creating or updating the contact first. Accepts the public or the
/// secret key, and an `Idempotency-Key` header.
#[endpoint(
    tags("events"),
    security(("bearer" = [])),
    parameters(("Idempotency-Key" = Option<String>, Header, description = "1 to 255 printable ASCII characters")),
    request_body = TrackBody,
    responses((status_code = 200, body = TrackOut))
)]
pub async fn track(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({ track_request(req, depot).await })
}

/// Dashboard alias of `POST /v1/track`.
#[endpoint(tags("events"), security(("bearer" = []), ("session" = [])), request_body = TrackBody, responses((status_code = 200, body = TrackOut)))]
pub async fn track_alias(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({ track_request(req, depot).await })
}

async fn track_request(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    let st = state(depot)?;
    let ctx = project(depot)?;
    let key = idempotency::key(req)?;
    let body = json_object(req).await?;
    idempotency::run(&st, &ctx.project_id, key, "POST /v1/track", || async {
        let mut f = Fields::new(&body);
        let email = f.email("email", true);
        let event = f.text("event", true, 255);
        if let Some(name) = &event
            && is_reserved_event(name)
        {
            f.error("event", "reserved_event", format!("{name} is a reserved event name that only Herald emits"));
        }
        let subscribed = f.boolean("subscribed");
        let patch = data_patch(&mut f, &body, true);
        f.finish()?;
        let (Some(email), Some(event)) = (email, event) else {
            return Err(Error::Internal("validated fields missing".into()).into());
        };
        let values = patch.request_values();
        // A public key is known to anyone (it sits in browsers): its `subscribed` sets only a new
        // contact's state and never changes an existing contact's (docs/security.md).
        let (subscribed, default_subscribed) =
            if ctx.secret { (subscribed, true) } else { (None, subscribed.unwrap_or(true)) };
        let now = st.clock.now_ms();
        crate::services::quotas::room_for_contacts(
            &st.store,
            &st.quotas,
            &ctx.project_id,
            std::slice::from_ref(&email),
            now,
        )
        .await?;
        let up = st
            .ingest
            .submit(
                &ctx.project_id,
                Upsert { email, subscribed, default_subscribed, patch, event: Some((event, values)) },
            )
            .await?;
        Reply::ok(&TrackOut {
            success: true,
            data: TrackData {
                contact: up.contact.id,
                event: up.event_id.unwrap_or_default(),
                timestamp: rfc3339(st.clock.now_ms()),
            },
        })
    })
    .await
}

async fn page(
    depot: &mut Depot,
    req: &Request,
    name: Option<String>,
    contact: Option<String>,
) -> Result<Reply, ApiError> {
    let st = state(depot)?;
    let ctx = project(depot)?;
    let limit = limit(req, 20, 100)?;
    let cursor = query_str(req, "cursor");
    let after = match cursor.as_deref().map(decode_cursor).transpose()? {
        None => None,
        Some((Value::Number(n), id)) => Some((n.as_i64().unwrap_or(0), id)),
        Some(_) => return Err(Error::Invalid("Invalid cursor".into()).into()),
    };
    let q = EventQuery { name, contact, after, limit: limit + 1 };
    let (rows, emails, total) = history::page(&st, &ctx.project_id, &q, cursor.is_none()).await?;
    let (rows, next, has_more) = finish_page(rows, limit, |l| encode_cursor(&json!(l.created_at), &l.id));
    Reply::ok(&EventPage {
        data: rows.iter().map(|e| EventOut::new(e, &emails)).collect(),
        cursor: next,
        has_more,
        total,
    })
}

/// Recent events, newest first, cursor-paginated; filter by `name`.
#[endpoint(
    tags("events"),
    security(("bearer" = [])),
    parameters(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "cursor of the previous page"),
        ("name" = Option<String>, Query, description = "only events with this name"),
    ),
    responses((status_code = 200, body = EventPage))
)]
pub async fn list_events(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let name = query_str(req, "name");
        page(depot, req, name, None).await
    })
}

/// Every event of one contact, newest first, cursor-paginated.
#[endpoint(
    tags("events"),
    security(("bearer" = [])),
    parameters(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "cursor of the previous page"),
    ),
    responses((status_code = 200, body = EventPage))
)]
pub async fn contact_events(
    contact_id: PathParam<String>,
    req: &mut Request,
    depot: &mut Depot,
) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = contact_id.into_inner();
        if !history::contact_exists(&st, &ctx.project_id, &id).await? {
            return Err(Error::not_found("CONTACT_NOT_FOUND", format!("Contact {id} not found")).into());
        }
        page(depot, req, None, Some(id)).await
    })
}

/// Totals per event name and per UTC day over a window: `days` (1 to 365, default 30) ending now, or
/// `from` and `to` as RFC 3339 date-times.
#[endpoint(
    tags("events"),
    security(("bearer" = [])),
    parameters(
        ("days" = Option<i64>, Query, description = "window length in days ending now, 1 to 365, default 30"),
        ("from" = Option<String>, Query, format = DateTime, description = "RFC 3339 start (inclusive)"),
        ("to" = Option<String>, Query, format = DateTime, description = "RFC 3339 end (exclusive), default now"),
    ),
    responses((status_code = 200, body = StatsOut))
)]
pub async fn stats(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let now = st.clock.now_ms();
        let parse = |name: &str| -> Result<Option<i64>, ApiError> {
            typed_query(req, name)?
                .map(|s| {
                    parse_rfc3339(&s)
                        .ok_or_else(|| Error::Invalid(format!("{name} must be an RFC 3339 date-time")).into())
                })
                .transpose()
        };
        // Without `to`, the window ends just after now, so an event tracked this millisecond counts.
        let to = parse("to")?.unwrap_or(now + 1);
        let from = match (parse("from")?, typed_query(req, "days")?) {
            (Some(f), _) => f,
            (None, Some(d)) => {
                let d: i64 = d.parse().map_err(|_| Error::Invalid("days must be an integer".into()))?;
                history::days_before(to, d)
            }
            (None, None) => history::days_before(to, 30),
        };
        let totals = history::stats(&st, &ctx.project_id, from, to).await?;
        let by_name = totals.by_name.into_iter().map(|(name, count)| NameCount { name, count }).collect();
        let by_day = totals
            .by_day
            .into_iter()
            .map(|(d, count)| DayCount { date: rfc3339(d)[..10].to_string(), count })
            .collect();
        Reply::ok(&StatsOut { from: rfc3339(from), to: rfc3339(to), total: totals.total, by_name, by_day })
    })
}

/// Distinct event names with their count and last time, most frequent first.
#[endpoint(tags("events"), security(("bearer" = [])), responses((status_code = 200, body = NamesOut)))]
pub async fn event_names(depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let rows = history::names(&st, &ctx.project_id).await?;
        let names: Vec<EventName> = rows
            .into_iter()
            .map(|(name, count, last)| EventName { name, count, last_seen_at: rfc3339(last) })
            .collect();
        let count = names.len();
        Reply::ok(&NamesOut { names, count })
    })
}

/// Where an event name is referenced: segment filters, workflow triggers and conditions.
#[endpoint(tags("events"), security(("bearer" = [])), responses((status_code = 200, body = EventUsageOut)))]
pub async fn usage(event_name: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let name = event_name.into_inner();
        let found = history::usage(&st, &ctx.project_id, &name).await?;
        let pairs = |v: Vec<(String, String)>| -> Vec<serde_json::Value> {
            v.into_iter().map(|(id, name)| serde_json::json!({ "id": id, "name": name })).collect()
        };
        // Campaign audiences are segments or conditions without event filters of their own.
        Reply::ok(&EventUsageOut {
            event: name,
            used_in_segments: pairs(found.segments),
            used_in_workflows: pairs(found.workflows),
            used_in_campaigns: vec![],
            event_count: found.count,
        })
    })
}

/// Deletes every event with this name in the project.
#[endpoint(tags("events"), security(("bearer" = [])), responses((status_code = 200, body = EventsDeletedOut)))]
pub async fn delete_named(event_name: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let name = event_name.into_inner();
        let deleted = history::delete_named(&st, &ctx.project_id, &name).await?;
        Reply::ok(&EventsDeletedOut { event: name, deleted })
    })
}
