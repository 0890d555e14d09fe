//! The analytics endpoints (docs/behaviour.md#activity-and-analytics): series, top campaigns, one
//! campaign's figures, top events. Secret key.

use salvo::oapi::ToSchema;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value};

use super::activity::{list_param, time_param, window_params};
use super::auth::{ApiKeyAuth, KeyRule, project};
use super::body::Reply;
use super::pagination::{limit, query_str, typed_query};
use super::state;
use crate::api::errors::ApiError;
use crate::error::Error;
use crate::infra::clock::rfc3339;
use crate::services::analytics::{self, CampaignFigures, Interval};

pub fn router() -> Router {
    Router::with_path("analytics")
        .hoop(ApiKeyAuth(KeyRule::SecretOnly))
        .push(Router::with_path("timeseries").get(timeseries))
        .push(Router::with_path("top-campaigns").get(top_campaigns))
        .push(Router::with_path("campaign-stats").get(campaign_stats))
        .push(Router::with_path("top-events").get(top_events))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct SeriesOut {
    interval: String,
    from: String,
    to: String,
    metrics: Vec<String>,
    /// one object per bucket: `time` (its UTC start) and a count per metric
    series: Vec<Map<String, Value>>,
}

/// Counts per UTC hour or day, zero-filled, at most 366 buckets. Metrics: sent, delivered, opened and
/// clicked (each email once), opens and clicks (every time), bounced, complained, failed, subscribed,
/// unsubscribed; default sent, delivered, opened, clicked, bounced.
#[endpoint(
    tags("analytics"),
    security(("bearer" = [])),
    parameters(
        ("metric" = Option<String>, Query, description = "comma-separated metrics"),
        ("interval" = Option<String>, Query, pattern = "^(hour|day)$", description = "hour or day (default day)"),
        ("from" = Option<String>, Query, format = DateTime, description = "RFC 3339 start (default 30 days before `to`)"),
        ("to" = Option<String>, Query, format = DateTime, description = "RFC 3339 end (exclusive), default now"),
    ),
    responses((status_code = 200, body = SeriesOut))
)]
pub async fn timeseries(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let metrics = analytics::parse_metrics(&list_param(req, "metric"))?;
        let interval = match typed_query(req, "interval")? {
            None => Interval::Day,
            Some(s) => {
                Interval::parse(&s).ok_or_else(|| Error::Invalid(format!("interval must be hour or day, got {s:?}")))?
            }
        };
        let to = time_param(req, "to")?.unwrap_or(st.clock.now_ms() + 1);
        let from = time_param(req, "from")?.unwrap_or(to - 30 * crate::domain::activity::DAY_MS);
        let buckets = analytics::timeseries(&st, &ctx.project_id, &metrics, interval, from, to).await?;
        let series = series_rows(buckets);
        Reply::ok(&SeriesOut {
            interval: interval.as_str().into(),
            from: rfc3339(from),
            to: rfc3339(to),
            metrics: metrics.iter().map(|m| m.to_string()).collect(),
            series,
        })
    })
}

/// Buckets as the series rows the API answers: `{time, <metric>: count, ...}`.
pub(crate) fn series_rows(buckets: Vec<analytics::Bucket>) -> Vec<Map<String, Value>> {
    buckets
        .into_iter()
        .map(|b| {
            let mut m = Map::new();
            m.insert("time".into(), rfc3339(b.start).into());
            for (k, v) in b.values {
                m.insert(k.into(), v.into());
            }
            m
        })
        .collect()
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct CampaignStatsOut {
    campaign_id: String,
    name: String,
    sent: i64,
    delivered: i64,
    /// emails opened at least once
    opened: i64,
    /// emails clicked at least once
    clicked: i64,
    /// every open
    opens: i64,
    /// every click
    clicks: i64,
    bounced: i64,
    complained: i64,
    unsubscribed: i64,
    failed: i64,
    /// percentages of `sent`, two decimals (0 when nothing was sent)
    delivery_rate: f64,
    open_rate: f64,
    click_rate: f64,
    bounce_rate: f64,
    complaint_rate: f64,
    unsubscribe_rate: f64,
}

impl From<&CampaignFigures> for CampaignStatsOut {
    fn from(c: &CampaignFigures) -> Self {
        CampaignStatsOut {
            campaign_id: c.id.clone(),
            name: c.name.clone(),
            sent: c.get("sent"),
            delivered: c.get("delivered"),
            opened: c.get("opened"),
            clicked: c.get("clicked"),
            opens: c.get("opens"),
            clicks: c.get("clicks"),
            bounced: c.get("bounced"),
            complained: c.get("complained"),
            unsubscribed: c.get("unsubscribed"),
            failed: c.get("failed"),
            delivery_rate: c.rate("delivered"),
            open_rate: c.rate("opened"),
            click_rate: c.rate("clicked"),
            bounce_rate: c.rate("bounced"),
            complaint_rate: c.rate("complained"),
            unsubscribe_rate: c.rate("unsubscribed"),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct TopCampaignsOut {
    metric: String,
    campaigns: Vec<CampaignStatsOut>,
}

/// The project's campaigns ranked by unique opens or clicks, or by their rates of the emails sent.
#[endpoint(
    tags("analytics"),
    security(("bearer" = [])),
    parameters(
        ("metric" = Option<String>, Query, pattern = "^(opens|clicks|openRate|clickRate)$", description = "opens, clicks, openRate or clickRate (default opens)"),
        ("limit" = Option<i64>, Query, description = "1 to 50, default 10"),
    ),
    responses((status_code = 200, body = TopCampaignsOut))
)]
pub async fn top_campaigns(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let metric = typed_query(req, "metric")?.unwrap_or_else(|| "opens".into());
        let n = limit(req, 10, 50)?;
        let top = analytics::top_campaigns(&st, &ctx.project_id, &metric, n).await?;
        Reply::ok(&TopCampaignsOut { metric, campaigns: top.iter().map(CampaignStatsOut::from).collect() })
    })
}

/// One campaign's figures with their rates.
#[endpoint(
    tags("analytics"),
    security(("bearer" = [])),
    parameters(("campaignId" = String, Query, min_length = 1, description = "the campaign")),
    responses((status_code = 200, body = CampaignStatsOut))
)]
pub async fn campaign_stats(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let Some(id) = query_str(req, "campaignId") else {
            return Err(Error::Invalid("campaignId is required".into()).into());
        };
        let figures = analytics::campaign_stats(&st, &ctx.project_id, &id).await?;
        Reply::ok(&CampaignStatsOut::from(&figures))
    })
}

#[derive(Serialize, ToSchema)]
pub struct EventCount {
    name: String,
    count: i64,
}

#[derive(Serialize, ToSchema)]
pub struct TopEventsOut {
    from: String,
    to: String,
    events: Vec<EventCount>,
}

/// The most frequent event names over a window (default the last 30 days; whole UTC days).
#[endpoint(
    tags("analytics"),
    security(("bearer" = [])),
    parameters(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 10"),
        ("days" = Option<i64>, Query, minimum = 1, maximum = 366, description = "window length in days ending at `to`, 1 to 366"),
        ("from" = Option<String>, Query, format = DateTime, description = "RFC 3339 start"),
        ("to" = Option<String>, Query, format = DateTime, description = "RFC 3339 end (exclusive), default now"),
    ),
    responses((status_code = 200, body = TopEventsOut))
)]
pub async fn top_events(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let (from, to) = window_params(req, st.clock.now_ms())?;
        let n = limit(req, 10, 100)?;
        let top = analytics::top_events(&st, &ctx.project_id, from, to, n).await?;
        Reply::ok(&TopEventsOut {
            from: rfc3339(from),
            to: rfc3339(to),
            events: top.into_iter().map(|(name, count)| EventCount { name, count }).collect(),
        })
    })
}
