//! Campaigns (docs/behaviour.md#campaigns): offset list with status filter, search and sort;
//! create (wrapped), get, replace, delete, duplicate, send now or scheduled (wrapped, with a message),
//! cancel, test send and stats. The sending itself is `crate::services::campaigns`.

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
use crate::domain::campaigns::{AUDIENCES, CampaignStatus, parse_when, rate};
use crate::error::Error;
use crate::infra::clock::rfc3339;
use crate::services::campaigns::{CampaignError, manage};
use crate::state::AppState;
use crate::store::campaigns::{CampaignQuery, CampaignRow};

const TYPES: &[&str] = &["TRANSACTIONAL", "MARKETING", "HEADLESS"];

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct CampaignOut {
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
    /// DRAFT, SCHEDULED, SENDING, SENT or CANCELLED
    status: String,
    /// ALL, SEGMENT or FILTERED
    audience_type: String,
    segment_id: Option<String>,
    audience_condition: Option<Value>,
    scheduled_for: Option<String>,
    total_recipients: i64,
    sent_count: i64,
    delivered_count: i64,
    opened_count: i64,
    clicked_count: i64,
    bounced_count: i64,
    project_id: String,
    sent_at: Option<String>,
    created_at: String,
    updated_at: String,
}

impl From<&CampaignRow> for CampaignOut {
    fn from(c: &CampaignRow) -> Self {
        CampaignOut {
            id: c.id.clone(),
            name: c.name.clone(),
            description: c.description.clone(),
            subject: c.subject.clone(),
            body: c.body.clone(),
            from: c.from.clone(),
            from_name: c.from_name.clone(),
            reply_to: c.reply_to.clone(),
            kind: c.kind.clone(),
            status: c.status.to_string(),
            audience_type: c.audience_type.clone(),
            segment_id: c.segment.clone(),
            audience_condition: c.audience_condition.clone(),
            scheduled_for: c.scheduled_for.map(rfc3339),
            total_recipients: c.total_recipients,
            sent_count: c.sent_count,
            delivered_count: c.delivered_count,
            opened_count: c.opened_count,
            clicked_count: c.clicked_count,
            bounced_count: c.bounced_count,
            project_id: c.project.clone(),
            sent_at: c.sent_at.map(rfc3339),
            created_at: rfc3339(c.created_at),
            updated_at: rfc3339(c.updated_at),
        }
    }
}

/// `{ success: true, data }`: the create response is wrapped, unlike other dashboard-style responses.
#[derive(Serialize, ToSchema)]
pub struct Wrapped {
    success: bool,
    data: CampaignOut,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct SendData {
    id: String,
    name: String,
    status: String,
    scheduled_for: Option<String>,
}

/// `{ success, data: { id, name, status, scheduledFor }, message }`: the send response.
#[derive(Serialize, ToSchema)]
pub struct SendOut {
    success: bool,
    data: SendData,
    message: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ResendData {
    id: String,
    status: String,
    /// emails sent again: those whose delivery had failed, each once
    resent: usize,
}

/// `{ success, data: { id, status, resent }, message }`: the resend-failed response.
#[derive(Serialize, ToSchema)]
pub struct ResendOut {
    success: bool,
    data: ResendData,
    message: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct CampaignPage {
    data: Vec<CampaignOut>,
    total: i64,
    page: usize,
    page_size: usize,
    total_pages: i64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct StatsOut {
    id: String,
    status: String,
    total_recipients: i64,
    sent_count: i64,
    delivered_count: i64,
    opened_count: i64,
    clicked_count: i64,
    bounced_count: i64,
    complained_count: i64,
    failed_count: i64,
    cancelled_count: i64,
    /// emails whose hand-over a crash interrupted: the transport may or may not have taken them, and
    /// they are never sent again (UNCERTAIN)
    uncertain_count: i64,
    /// emails not settled yet: waiting (PENDING) or inside a hand-over (SENDING)
    pending_count: i64,
    /// emails a temporary failure deferred: tried again on their schedule or when their transport is
    /// back, FAILED only when their give-up window ends (DEFERRED)
    deferred_count: i64,
    /// contacts who unsubscribed through this campaign's emails (the link, one-click, the manage page)
    unsubscribed_count: i64,
    /// percentages of sentCount, two decimals
    delivery_rate: f64,
    open_rate: f64,
    click_rate: f64,
    bounce_rate: f64,
    unsubscribe_rate: f64,
    complaint_rate: f64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct TestData {
    email_id: String,
    to: String,
}

#[derive(Serialize, ToSchema)]
pub struct TestOut {
    success: bool,
    data: TestData,
    message: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct CampaignBody {
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
    /// HTML; Handlebars with the contact's data and the subscription links
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
    /// ALL, SEGMENT or FILTERED
    #[salvo(schema(pattern = "^(ALL|SEGMENT|FILTERED)$"))]
    audience_type: String,
    /// required for SEGMENT (1 to 100 characters); ignored for the other audiences
    segment_id: Option<String>,
    /// required for FILTERED: a condition tree
    audience_condition: Option<Value>,
}

pub fn router() -> Router {
    Router::with_path("campaigns")
        .hoop(ApiKeyAuth(KeyRule::SecretOnly))
        .get(list_campaigns)
        .post(create_campaign)
        .push(Router::with_path("audience-count").post(audience_count))
        .push(Router::with_path("{id}/duplicate").post(duplicate_campaign))
        .push(Router::with_path("{id}/send").post(send_campaign))
        .push(Router::with_path("{id}/cancel").post(cancel_campaign))
        .push(Router::with_path("{id}/resend-failed").post(resend_failed))
        .push(Router::with_path("{id}/test").post(test_campaign))
        .push(Router::with_path("{id}/stats").get(campaign_stats))
        .push(Router::with_path("{id}/timeseries").get(campaign_timeseries))
        .push(Router::with_path("{id}").get(get_campaign).put(replace_campaign).delete(delete_campaign))
}

#[derive(Serialize, ToSchema)]
pub struct AudienceCountOut {
    /// the subscribed contacts the audience reaches now
    count: i64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct AudienceBody {
    /// ALL, SEGMENT or FILTERED
    #[salvo(schema(pattern = "^(ALL|SEGMENT|FILTERED)$"))]
    audience_type: String,
    /// required for SEGMENT (1 to 100 characters); ignored for the other audiences
    segment_id: Option<String>,
    /// required for FILTERED: a condition tree
    audience_condition: Option<Value>,
}

/// The segmentId of a body: required and non-blank for a SEGMENT audience; beside another audience it is
/// ignored, but must still be a string (or null) of at most 100 characters.
fn segment_id(f: &mut Fields, audience: Option<&str>) -> Option<String> {
    if audience == Some("SEGMENT") {
        f.text("segmentId", true, 100)
    } else {
        f.string("segmentId", false, 0, 100);
        None
    }
}

/// How many subscribed contacts an audience reaches now, counted as a send would resolve it: the count
/// a send confirmation names. Fields as in a campaign; 400 for an audience a campaign could not have.
#[endpoint(tags("campaigns"), security(("bearer" = [])), request_body = AudienceBody, responses((status_code = 200, body = AudienceCountOut)))]
pub async fn audience_count(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let audience = f.one_of("audienceType", true, AUDIENCES);
        // Checked whenever given (a segmentId beside another audience is ignored, but must still be one).
        let segment = segment_id(&mut f, audience.as_deref());
        let condition = match (audience.as_deref(), body.get("audienceCondition")) {
            (Some("FILTERED"), Some(v @ Value::Object(_))) => Some(v.clone()),
            (Some("FILTERED"), None | Some(Value::Null)) => {
                f.error("audienceCondition", "required", "audienceCondition is required for a FILTERED audience");
                None
            }
            (Some("FILTERED"), Some(_)) => {
                f.error("audienceCondition", "invalid_type", "audienceCondition must be a condition tree");
                None
            }
            _ => None,
        };
        f.finish()?;
        let audience = audience.unwrap_or_default();
        let now = st.clock.now_ms();
        let count =
            st.segments.audience_count(&ctx.project_id, &audience, segment.as_deref(), condition.as_ref(), now).await?;
        Reply::ok(&AudienceCountOut { count })
    })
}

/// A campaign's first opens and first clicks over time.
#[derive(Serialize, ToSchema)]
pub struct EngagementOut {
    /// hour (the first 14 days after the send) or day
    interval: String,
    /// `{time, opened, clicked}` per bucket, zero-filled, oldest first, at most 366
    #[salvo(schema(value_type = Vec<Object>))]
    series: Vec<Map<String, Value>>,
}

/// The campaign's emails opened and clicked for the first time, per hour over its first 14 days and
/// per day after that, from its send to now (docs/dashboard.md#campaign-results).
#[endpoint(tags("campaigns"), security(("bearer" = [])), responses((status_code = 200, body = EngagementOut)))]
pub async fn campaign_timeseries(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let c = load(&st, &ctx.project_id, &id.into_inner()).await?;
        let (interval, buckets) =
            crate::services::analytics::campaign_engagement(&st, &ctx.project_id, &c, st.clock.now_ms()).await?;
        Reply::ok(&EngagementOut { interval: interval.as_str().into(), series: super::analytics::series_rows(buckets) })
    })
}

fn campaign_error(e: CampaignError) -> ApiError {
    Error::from(e).into()
}

async fn load(st: &AppState, project: &str, id: &str) -> Result<CampaignRow, ApiError> {
    Ok(manage::get(st, project, id).await?)
}

/// Reads every field of a campaign (create and PUT replace it whole) into `c`; the service checks the
/// audience's references and the sender domain when it saves.
fn read_campaign(st: &AppState, body: &Map<String, Value>, c: &mut CampaignRow) -> Result<(), ApiError> {
    let mut f = Fields::new(body);
    c.name = f.text("name", true, 200).unwrap_or_default();
    c.description = f.string("description", false, 0, 1000).filter(|s| !s.trim().is_empty());
    let subject = f.string("subject", true, 1, 998);
    if subject.as_deref().is_some_and(|s| s.contains(['\r', '\n'])) {
        f.error("subject", "invalid_string", "subject must not contain line breaks");
    }
    c.subject = subject.unwrap_or_default();
    c.body = f.string("body", true, 1, 5 * 1024 * 1024).unwrap_or_default();
    c.from = f.email("from", true).unwrap_or_default();
    c.from_name = f.line("fromName", false, 0, 200).filter(|s| !s.trim().is_empty());
    c.reply_to = f.email("replyTo", false);
    c.kind = f.one_of("type", false, TYPES).unwrap_or_else(|| "MARKETING".into());
    let audience = f.one_of("audienceType", true, AUDIENCES);
    c.audience_type = audience.clone().unwrap_or_default();
    c.segment = None;
    c.audience_condition = None;
    let segment = segment_id(&mut f, audience.as_deref());
    match audience.as_deref() {
        Some("SEGMENT") => c.segment = segment,
        Some("FILTERED") => match body.get("audienceCondition") {
            None | Some(Value::Null) => {
                f.error("audienceCondition", "required", "audienceCondition is required for a FILTERED audience")
            }
            Some(v @ Value::Object(_)) => c.audience_condition = Some(v.clone()),
            Some(_) => f.error("audienceCondition", "invalid_type", "audienceCondition must be a condition tree"),
        },
        _ => {}
    }
    for (field, src) in [("subject", c.subject.clone()), ("body", c.body.clone())] {
        if !src.is_empty()
            && let Err(issue) = st.templates.check(&src)
        {
            f.error(field, "invalid_template", format!("{field} is not a valid template: {issue}"));
        }
    }
    f.finish()?;
    Ok(())
}

/// Creates a DRAFT campaign: `{ success: true, data }` (201). 422 on validation, 403 for an unverified
/// sender domain.
#[endpoint(tags("campaigns"), security(("bearer" = [])), request_body = CampaignBody, responses((status_code = 201, body = Wrapped)))]
pub async fn create_campaign(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        let now = st.clock.now_ms();
        let mut c = CampaignRow::draft(uuid::Uuid::now_v7().to_string(), &ctx.project_id, now);
        read_campaign(&st, &body, &mut c)?;
        manage::create(&st, &st.campaigns, &ctx.project_id, &c).await?;
        Reply::created(&Wrapped { success: true, data: CampaignOut::from(&c) })
    })
}

/// Lists campaigns: `page`, `pageSize` (1 to 100), `status` (400 when unknown), `search` (name, subject,
/// sender), `sort` (name, createdAt, updatedAt; default createdAt), `dir` (default desc).
#[endpoint(
    tags("campaigns"),
    security(("bearer" = [])),
    parameters(
        ("page" = Option<i64>, Query, description = "1-based, default 1"),
        ("pageSize" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("status" = Option<String>, Query, pattern = "^(DRAFT|SCHEDULED|SENDING|SENT|CANCELLED)$", description = "DRAFT, SCHEDULED, SENDING, SENT or CANCELLED"),
        ("search" = Option<String>, Query, description = "case-insensitive, on name, subject and sender address"),
        ("sort" = Option<String>, Query, description = "name, createdAt (default) or updatedAt"),
        ("dir" = Option<String>, Query, description = "asc or desc (default)"),
    ),
    responses((status_code = 200, body = CampaignPage))
)]
pub async fn list_campaigns(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let paging = OffsetPage::from(req)?;
        let status = match typed_query(req, "status")? {
            None => None,
            Some(s) => Some(CampaignStatus::parse(&s).ok_or_else(|| {
                let all: Vec<&str> = CampaignStatus::ALL.iter().map(|s| s.as_str()).collect();
                Error::Invalid(format!("status must be one of {}, got {s:?}", all.join(", ")))
            })?),
        };
        let (sort, ascending) = sort_and_dir(req);
        let q = CampaignQuery {
            status,
            search: query_str(req, "search").map(|s| s.trim().to_lowercase()).filter(|s| !s.is_empty()),
            sort,
            ascending,
            offset: paging.offset(),
            limit: paging.page_size,
        };
        let (rows, total) = manage::list(&st, &ctx.project_id, &q).await?;
        let (page, page_size, total_pages) = (paging.page, paging.page_size, paging.total_pages(total));
        Reply::ok(&CampaignPage {
            data: rows.iter().map(CampaignOut::from).collect(),
            total,
            page,
            page_size,
            total_pages,
        })
    })
}

/// One campaign, its counters recounted from its email records (a big campaign's at most every so often:
/// docs/behaviour.md#campaigns).
#[endpoint(tags("campaigns"), security(("bearer" = [])), responses((status_code = 200, body = CampaignOut)))]
pub async fn get_campaign(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let mut c = load(&st, &ctx.project_id, &id).await?;
        if c.run > 0 && st.campaigns.recount_for_read(&c).await.map_err(campaign_error)? {
            c = load(&st, &ctx.project_id, &id).await?;
        }
        Reply::ok(&CampaignOut::from(&c))
    })
}

/// Replaces a DRAFT or SCHEDULED campaign's fields (the same checks as create); 409 otherwise.
#[endpoint(tags("campaigns"), security(("bearer" = [])), request_body = CampaignBody, responses((status_code = 200, body = CampaignOut)))]
pub async fn replace_campaign(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let body = json_object(req).await?;
        let mut c = load(&st, &ctx.project_id, &id).await?;
        manage::replaceable(&c)?;
        read_campaign(&st, &body, &mut c)?;
        manage::replace(&st, &st.campaigns, &ctx.project_id, &mut c).await?;
        Reply::ok(&CampaignOut::from(&c))
    })
}

/// Deletes a campaign (204); 409 while it is SCHEDULED or SENDING.
#[endpoint(tags("campaigns"), security(("bearer" = [])), responses((status_code = 204, description = "deleted")))]
pub async fn delete_campaign(id: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        manage::delete(&st, &ctx.project_id, &id).await?;
        res.status_code(StatusCode::NO_CONTENT);
        Ok(())
    })
}

/// Copies a campaign as a DRAFT named `<name> (Copy)`, with no schedule and zero counters (201).
#[endpoint(tags("campaigns"), security(("bearer" = [])), responses((status_code = 201, body = CampaignOut)))]
pub async fn duplicate_campaign(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let copy = manage::duplicate(&st, &ctx.project_id, &id).await?;
        Reply::created(&CampaignOut::from(&copy))
    })
}

/// Sends a DRAFT campaign now (SENDING) or at `scheduledFor` (SCHEDULED; any date form the parser
/// accepts, 400 when none does). 409 when not DRAFT, 403 when the sender domain is not verified.
#[endpoint(tags("campaigns"), security(("bearer" = [])), responses((status_code = 200, body = SendOut)))]
pub async fn send_campaign(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let body = json_object(req).await?;
        let when = match body.get("scheduledFor") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                parse_when(v)
                    .ok_or_else(|| Error::Invalid(format!("scheduledFor is not a date this server can read: {v}")))?,
            ),
        };
        let c = manage::send(&st, &st.campaigns, &ctx.project_id, &id, when).await?;
        let message = match when {
            None => "Campaign is being sent".to_string(),
            Some(at) => format!("Campaign scheduled for {}", rfc3339(at)),
        };
        Reply::ok(&SendOut {
            success: true,
            data: SendData {
                id: c.id,
                name: c.name,
                status: c.status.to_string(),
                scheduled_for: c.scheduled_for.map(rfc3339),
            },
            message,
        })
    })
}

/// Cancels a SCHEDULED or SENDING campaign: back to DRAFT when no email reached a
/// transport, else CANCELLED with every email not yet handed over cancelled. 409 in other states.
#[endpoint(tags("campaigns"), security(("bearer" = [])), responses((status_code = 200, body = CampaignOut)))]
pub async fn cancel_campaign(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let c = st.campaigns.cancel(&ctx.project_id, &id.into_inner()).await.map_err(campaign_error)?;
        Reply::ok(&CampaignOut::from(&c))
    })
}

/// Sends the campaign again to each contact whose email of it ended FAILED (delivery gave up on it),
/// once each: the same email back to PENDING with a fresh give-up window; a SENT campaign is SENDING
/// until they settle. 409 unless the campaign is SENDING or SENT.
#[endpoint(tags("campaigns"), security(("bearer" = [])), responses((status_code = 200, body = ResendOut)))]
pub async fn resend_failed(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let (c, resent) =
            st.campaigns.resend_failed(&ctx.project_id, &id.into_inner()).await.map_err(campaign_error)?;
        Reply::ok(&ResendOut {
            success: true,
            data: ResendData { id: c.id, status: c.status.to_string(), resent },
            message: match resent {
                0 => "No failed email to send again".to_string(),
                1 => "1 failed email is being sent again".to_string(),
                n => format!("{n} failed emails are being sent again"),
            },
        })
    })
}

/// Sends the campaign once to `email`, an address of a member of the project: subject
/// prefixed `[TEST] `, header `X-Herald-Test: true`, no tracking, not counted.
#[endpoint(tags("campaigns"), security(("bearer" = [])), responses((status_code = 200, body = TestOut)))]
pub async fn test_campaign(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let to = f.email("email", true);
        f.finish()?;
        let to = to.unwrap_or_default();
        let email_id = manage::test_send(&st, &st.campaigns, &ctx.project_id, &id, &to).await?;
        Reply::ok(&TestOut {
            success: true,
            data: TestData { email_id, to: to.clone() },
            message: format!("Test sent to {to}"),
        })
    })
}

/// Counts of the campaign's emails by outcome, recounted from the records (a big campaign's at most every
/// so often: docs/behaviour.md#campaigns), with rates as percentages of the sent count.
#[endpoint(tags("campaigns"), security(("bearer" = [])), responses((status_code = 200, body = StatsOut)))]
pub async fn campaign_stats(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let c = load(&st, &ctx.project_id, &id).await?;
        let n = st.campaigns.counts_for_stats(&c).await.map_err(campaign_error)?;
        Reply::ok(&StatsOut {
            id: c.id,
            status: c.status.to_string(),
            total_recipients: c.total_recipients,
            sent_count: n.sent,
            delivered_count: n.delivered,
            opened_count: n.opened,
            clicked_count: n.clicked,
            bounced_count: n.bounced,
            complained_count: n.complained,
            failed_count: n.failed,
            cancelled_count: n.cancelled,
            uncertain_count: n.uncertain,
            pending_count: n.pending + n.sending,
            deferred_count: n.deferred,
            delivery_rate: rate(n.delivered, n.sent),
            open_rate: rate(n.opened, n.sent),
            click_rate: rate(n.clicked, n.sent),
            bounce_rate: rate(n.bounced, n.sent),
            unsubscribed_count: n.unsubscribed,
            unsubscribe_rate: rate(n.unsubscribed, n.sent),
            complaint_rate: rate(n.complained, n.sent),
        })
    })
}
