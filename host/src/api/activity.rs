//! The activity endpoints (docs/behaviour.md#activity-and-analytics): the feed, counts per type, the live
//! count, the types that occur and what is coming up. Secret key.

use salvo::oapi::ToSchema;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::auth::{ApiKeyAuth, KeyRule, project};
use super::body::Reply;
use super::pagination::{decode_cursor, encode_cursor, limit, query_str, typed_query};
use super::state;
use crate::api::errors::ApiError;
use crate::error::Error;
use crate::infra::clock::{parse_rfc3339, rfc3339};
use crate::services::activity::{self, FeedQuery, Item};

pub fn router() -> Router {
    Router::with_path("activity")
        .hoop(ApiKeyAuth(KeyRule::SecretOnly))
        .get(feed)
        .push(Router::with_path("stats").get(stats))
        .push(Router::with_path("recent-count").get(recent_count))
        .push(Router::with_path("types").get(types))
        .push(Router::with_path("upcoming").get(upcoming))
}

/// `{id, name}` of what an item names (name null once deleted).
#[derive(Serialize, ToSchema)]
pub struct Named {
    id: String,
    name: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ContactRef {
    id: String,
    /// null once the contact is deleted
    email: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct EmailRef {
    id: String,
    subject: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ActivityOut {
    id: String,
    /// email.sent, email.delivered, email.opened, email.clicked, email.bounced, email.complained,
    /// email.failed, contact.subscribed, contact.unsubscribed, campaign.scheduled, campaign.sending,
    /// campaign.sent, campaign.cancelled, workflow.started, workflow.completed, workflow.exited,
    /// workflow.failed
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    kind: String,
    occurred_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    contact: Option<ContactRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    email: Option<EmailRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    campaign: Option<Named>,
    #[serde(skip_serializing_if = "Option::is_none")]
    workflow: Option<Named>,
    data: Map<String, Value>,
}

impl From<Item> for ActivityOut {
    fn from(i: Item) -> Self {
        let named = |n: Option<(String, Option<String>)>| n.map(|(id, name)| Named { id, name });
        ActivityOut {
            id: i.id,
            kind: i.kind.to_string(),
            occurred_at: rfc3339(i.at),
            contact: i.contact.map(|(id, email)| ContactRef { id, email }),
            email: i.email.map(|(id, subject)| EmailRef { id, subject }),
            campaign: named(i.campaign),
            workflow: named(i.workflow),
            data: i.data,
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ActivityPage {
    data: Vec<ActivityOut>,
    /// pass as `cursor` for the next page; empty at the end
    cursor: String,
    has_more: bool,
}

/// An activity type as the feed's `type` filter takes it: the document lists the types as an enum.
pub struct ActivityTypeName;

impl ToSchema for ActivityTypeName {
    fn to_schema(_: &mut salvo::oapi::Components) -> salvo::oapi::RefOr<salvo::oapi::Schema> {
        let names = crate::domain::activity::TYPES.iter().map(|(t, _)| *t);
        salvo::oapi::Object::new().schema_type(salvo::oapi::BasicType::String).enum_values(names).into()
    }
}

/// An optional RFC 3339 query parameter (400 naming it when it is not one).
pub(crate) fn time_param(req: &Request, name: &str) -> Result<Option<i64>, ApiError> {
    typed_query(req, name)?
        .map(|s| {
            parse_rfc3339(&s).ok_or_else(|| Error::Invalid(format!("{name} must be an RFC 3339 date-time")).into())
        })
        .transpose()
}

/// Every value of a repeatable query parameter (comma-separated values split too).
pub(crate) fn list_param(req: &Request, name: &str) -> Vec<String> {
    req.queries()
        .get_vec(name)
        .into_iter()
        .flatten()
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

/// The window of `from`, `to` and `days` (default the last 30 days, `to` default now).
pub(crate) fn window_params(req: &Request, now: i64) -> Result<(i64, i64), ApiError> {
    let to = time_param(req, "to")?.unwrap_or(now + 1);
    let from = match (time_param(req, "from")?, typed_query(req, "days")?) {
        (Some(f), _) => f,
        (None, Some(d)) => {
            let d: i64 = d.trim().parse().map_err(|_| Error::Invalid("days must be an integer".into()))?;
            if !(1..=activity::MAX_WINDOW_DAYS).contains(&d) {
                return Err(Error::Invalid(format!("days must be 1 to {}", activity::MAX_WINDOW_DAYS)).into());
            }
            to - d * crate::domain::activity::DAY_MS
        }
        (None, None) => to - 30 * crate::domain::activity::DAY_MS,
    };
    Ok((from, to))
}

/// The project's activity, newest first, cursor-paginated: email, subscription and workflow events and
/// campaign milestones. A page with a `contactId` or `campaignId` filter may hold fewer items than
/// `limit` while `hasMore` is true: follow the cursor.
#[endpoint(
    tags("activity"),
    security(("bearer" = [])),
    parameters(
        ("type" = Option<Vec<ActivityTypeName>>, Query, description = "activity types (repeatable or comma-separated)"),
        ("contactId" = Option<String>, Query, description = "only this contact's activity"),
        ("campaignId" = Option<String>, Query, description = "only this campaign's activity"),
        ("from" = Option<String>, Query, format = DateTime, description = "RFC 3339 start (inclusive)"),
        ("to" = Option<String>, Query, format = DateTime, description = "RFC 3339 end (exclusive)"),
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "cursor of the previous page"),
    ),
    responses((status_code = 200, body = ActivityPage))
)]
pub async fn feed(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let cursor = match query_str(req, "cursor").as_deref().map(decode_cursor).transpose()? {
            Some((Value::Number(n), id)) => Some((n.as_i64().unwrap_or_default(), id)),
            Some(_) => return Err(Error::Invalid("Invalid cursor".into()).into()),
            None => None,
        };
        let q = FeedQuery {
            types: list_param(req, "type"),
            contact: query_str(req, "contactId"),
            campaign: query_str(req, "campaignId"),
            cursor,
            from: time_param(req, "from")?,
            to: time_param(req, "to")?,
            limit: limit(req, 20, 100)?,
        };
        let page = activity::feed(&st, &ctx.project_id, &q).await?;
        let cursor = page.next.as_ref().map(|(t, id)| encode_cursor(&json!(t), id)).unwrap_or_default();
        Reply::ok(&ActivityPage {
            has_more: page.next.is_some(),
            data: page.items.into_iter().map(ActivityOut::from).collect(),
            cursor,
        })
    })
}

#[derive(Serialize, ToSchema)]
pub struct TypeCount {
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    kind: String,
    count: i64,
}

#[derive(Serialize, ToSchema)]
pub struct ActivityStatsOut {
    from: String,
    to: String,
    total: i64,
    /// every activity type, zeros too
    types: Vec<TypeCount>,
}

/// Items per activity type over a window (default the last 30 days; event types count whole UTC days).
#[endpoint(
    tags("activity"),
    security(("bearer" = [])),
    parameters(
        ("days" = Option<i64>, Query, minimum = 1, maximum = 366, description = "window length in days ending at `to`, 1 to 366, default 30"),
        ("from" = Option<String>, Query, format = DateTime, description = "RFC 3339 start (inclusive)"),
        ("to" = Option<String>, Query, format = DateTime, description = "RFC 3339 end (exclusive), default now"),
    ),
    responses((status_code = 200, body = ActivityStatsOut))
)]
pub async fn stats(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let (from, to) = window_params(req, st.clock.now_ms())?;
        let counts = activity::stats(&st, &ctx.project_id, from, to).await?;
        Reply::ok(&ActivityStatsOut {
            from: rfc3339(from),
            to: rfc3339(to),
            total: counts.iter().map(|(_, n)| n).sum(),
            types: counts.into_iter().map(|(t, count)| TypeCount { kind: t.to_string(), count }).collect(),
        })
    })
}

#[derive(Serialize, ToSchema)]
pub struct RecentCountOut {
    count: i64,
    since: String,
    /// true when the count stopped at 10,000 (show "10,000+")
    capped: bool,
}

/// How many activity items occurred since `since` (default: the last minute), for a live badge.
#[endpoint(
    tags("activity"),
    security(("bearer" = [])),
    parameters(("since" = Option<String>, Query, format = DateTime, description = "RFC 3339; default one minute ago")),
    responses((status_code = 200, body = RecentCountOut))
)]
pub async fn recent_count(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let since = time_param(req, "since")?.unwrap_or(st.clock.now_ms() - 60_000);
        let (count, capped) = activity::recent_count(&st, &ctx.project_id, since).await?;
        Reply::ok(&RecentCountOut { count, since: rfc3339(since), capped })
    })
}

#[derive(Serialize, ToSchema)]
pub struct TypesOut {
    types: Vec<String>,
}

/// The activity types the project has any item of.
#[endpoint(tags("activity"), security(("bearer" = [])), responses((status_code = 200, body = TypesOut)))]
pub async fn types(depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let found = activity::types_present(&st, &ctx.project_id).await?;
        Reply::ok(&TypesOut { types: found.into_iter().map(str::to_string).collect() })
    })
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct UpcomingCampaignOut {
    id: String,
    name: String,
    scheduled_for: String,
    /// subscribed contacts in the audience now (null when it cannot be evaluated)
    audience_size: Option<i64>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct UpcomingWorkflowOut {
    id: String,
    name: String,
    waiting: i64,
    /// the earliest end of a delay or timeout among them (null: all wait for an event only)
    next_resume_at: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct UpcomingOut {
    campaigns: Vec<UpcomingCampaignOut>,
    workflows: Vec<UpcomingWorkflowOut>,
}

/// Scheduled campaigns (soonest first, with their audience size) and workflows with waiting executions
/// (with the next time one resumes).
#[endpoint(tags("activity"), security(("bearer" = [])), responses((status_code = 200, body = UpcomingOut)))]
pub async fn upcoming(depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let (campaigns, workflows) = activity::upcoming(&st, &st.segments, &ctx.project_id).await?;
        Reply::ok(&UpcomingOut {
            campaigns: campaigns
                .into_iter()
                .map(|c| UpcomingCampaignOut {
                    id: c.id,
                    name: c.name,
                    scheduled_for: rfc3339(c.at),
                    audience_size: c.audience,
                })
                .collect(),
            workflows: workflows
                .into_iter()
                .map(|w| UpcomingWorkflowOut {
                    id: w.id,
                    name: w.name,
                    waiting: w.waiting,
                    next_resume_at: w.next_at.map(rfc3339),
                })
                .collect(),
        })
    })
}
