//! Billing endpoints (docs/behaviour.md#billing): limits and consumption of a project, and the payment
//! endpoints, which need a payment provider.

use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::Value;

use super::auth::{require_session, role_in, user};
use super::body::{Fields, Reply, json_object};
use super::state;
use crate::domain::billing::{CATEGORIES, Category, Limits, MAX_LIMIT};
use crate::error::ApiError;
use crate::infra::clock::rfc3339;
use crate::services::billing;

/// Monthly limits per category; null is unlimited.
#[derive(Serialize, ToSchema)]
pub struct LimitsOut {
    transactional: Option<i64>,
    campaigns: Option<i64>,
    workflows: Option<i64>,
    inbound: Option<i64>,
}

impl From<&Limits> for LimitsOut {
    fn from(l: &Limits) -> Self {
        LimitsOut { transactional: l.transactional, campaigns: l.campaigns, workflows: l.workflows, inbound: l.inbound }
    }
}

#[derive(Serialize, ToSchema)]
pub struct PeriodOut {
    start: String,
    end: String,
}

#[derive(Serialize, ToSchema)]
pub struct UseOut {
    used: i64,
    limit: Option<i64>,
    /// `used` as a percentage of `limit`; null without a limit
    percent: Option<f64>,
}

/// The current calendar month (UTC) and each category's use in it.
#[derive(Serialize, ToSchema)]
pub struct ConsumptionOut {
    period: PeriodOut,
    /// by category: transactional, campaigns, workflows, inbound
    usage: std::collections::BTreeMap<String, UseOut>,
}

pub fn router() -> Router {
    Router::new()
        .push(
            Router::with_path("users/@me/projects/{id}")
                .hoop(require_session)
                .push(Router::with_path("billing-limits").get(get_limits).put(put_limits))
                .push(Router::with_path("billing-consumption").get(consumption))
                .push(Router::with_path("checkout").post(checkout))
                .push(Router::with_path("billing-portal").post(portal))
                .push(Router::with_path("billing-invoices").get(invoices)),
        )
        .push(Router::with_path("webhooks/incoming/payments").post(payment_webhook))
}

/// The project's monthly limits (OWNER or ADMIN).
#[endpoint(tags("billing"), security(("session" = [])), responses((status_code = 200, body = LimitsOut)))]
pub async fn get_limits(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    let fut: crate::api::HandlerFuture<'_, Result<Reply, ApiError>> = Box::pin(async move {
        let st = state(depot)?;
        let u = user(depot)?;
        let id = id.into_inner();
        let role = role_in(&st, &id, &u).await?;
        Reply::ok(&LimitsOut::from(&billing::limits(&st, &id, role).await?))
    });
    fut.await
}

/// Sets limits (OWNER only): each category in the body is set (an integer 0 to 1,000,000,000, or null
/// for unlimited); categories left out keep their limit.
#[endpoint(tags("billing"), security(("session" = [])), request_body = LimitsOut, responses((status_code = 200, body = LimitsOut)))]
pub async fn put_limits(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    let fut: crate::api::HandlerFuture<'_, Result<Reply, ApiError>> = Box::pin(async move {
        let st = state(depot)?;
        let u = user(depot)?;
        let id = id.into_inner();
        let role = role_in(&st, &id, &u).await?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let mut changes = Vec::new();
        for (key, v) in &body {
            match (Category::parse(key), v) {
                (None, _) => f.error(key, "unknown_field", format!("{key} is not a billing category")),
                (Some(c), Value::Null) => changes.push((c, None)),
                (Some(c), v) => match v.as_i64().filter(|n| (0..=MAX_LIMIT).contains(n)) {
                    Some(n) => changes.push((c, Some(n))),
                    None => {
                        f.error(key, "invalid_type", format!("{key} must be null or an integer from 0 to {MAX_LIMIT}"))
                    }
                },
            }
        }
        f.finish()?;
        Reply::ok(&LimitsOut::from(&billing::set_limits(&st, &id, role, &changes).await?))
    });
    fut.await
}

/// This calendar month's consumption per category (OWNER or ADMIN), counted as emails are accepted.
#[endpoint(tags("billing"), security(("session" = [])), responses((status_code = 200, body = ConsumptionOut)))]
pub async fn consumption(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    let fut: crate::api::HandlerFuture<'_, Result<Reply, ApiError>> = Box::pin(async move {
        let st = state(depot)?;
        let u = user(depot)?;
        let id = id.into_inner();
        let role = role_in(&st, &id, &u).await?;
        let c = billing::consumption(&st, &id, role).await?;
        let usage = c
            .usage
            .iter()
            .map(|x| (x.category.as_str().to_string(), UseOut { used: x.used, limit: x.limit, percent: x.percent }))
            .collect();
        debug_assert_eq!(c.usage.len(), CATEGORIES.len());
        Reply::ok(&ConsumptionOut { period: PeriodOut { start: rfc3339(c.start), end: rfc3339(c.end) }, usage })
    });
    fut.await
}

/// The payment endpoints: OWNER only; 400 `BILLING_DISABLED` while no payment provider is configured.
async fn payments(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    let st = state(depot)?;
    let u = user(depot)?;
    let role = role_in(&st, &id.into_inner(), &u).await?;
    match billing::payments(role)? {}
}

/// Creates a payment checkout session (needs a payment provider).
#[endpoint(tags("billing"), security(("session" = [])), responses((status_code = 400, description = "BILLING_DISABLED")))]
pub async fn checkout(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    let fut: crate::api::HandlerFuture<'_, Result<Reply, ApiError>> = Box::pin(payments(id, depot));
    fut.await
}

/// Opens the billing portal (needs a payment provider).
#[endpoint(tags("billing"), security(("session" = [])), responses((status_code = 400, description = "BILLING_DISABLED")))]
pub async fn portal(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    let fut: crate::api::HandlerFuture<'_, Result<Reply, ApiError>> = Box::pin(payments(id, depot));
    fut.await
}

/// Lists invoices (needs a payment provider).
#[endpoint(tags("billing"), security(("session" = [])), responses((status_code = 400, description = "BILLING_DISABLED")))]
pub async fn invoices(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    let fut: crate::api::HandlerFuture<'_, Result<Reply, ApiError>> = Box::pin(payments(id, depot));
    fut.await
}

/// Billing events of the payment provider; 400 `BILLING_DISABLED` while none is configured.
#[endpoint(tags("billing"), responses((status_code = 400, description = "BILLING_DISABLED")))]
pub async fn payment_webhook() -> Result<Reply, ApiError> {
    Err(ApiError::coded(400, "BILLING_DISABLED", "No payment provider is configured on this Herald server"))
}
