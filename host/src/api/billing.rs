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
use crate::api::errors::ApiError;
use crate::domain::billing::{CATEGORIES, Category, Limits, MAX_LIMIT};
use crate::error::Error;
use crate::infra::clock::rfc3339;
use crate::services::{billing, payments};
use crate::store::accounts::Role;

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

/// The state, the logged-in user, the project and the user's role in it (404 for a non-member).
async fn caller(
    id: PathParam<String>,
    depot: &Depot,
) -> Result<(std::sync::Arc<crate::state::AppState>, crate::store::accounts::User, String, Role), ApiError> {
    let st = state(depot)?;
    let u = user(depot)?;
    let id = id.into_inner();
    let role = role_in(&st, &id, &u).await?;
    Ok((st, u, id, role))
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
    boxed!({
        let (st, _, id, role) = caller(id, depot).await?;
        Reply::ok(&LimitsOut::from(&billing::limits(&st, &id, role).await?))
    })
}

/// Sets limits (OWNER only): each category in the body is set (an integer 0 to 1,000,000,000, or null
/// for unlimited); categories left out keep their limit.
#[endpoint(tags("billing"), security(("session" = [])), request_body = LimitsOut, responses((status_code = 200, body = LimitsOut)))]
pub async fn put_limits(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let (st, _, id, role) = caller(id, depot).await?;
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
    })
}

/// This calendar month's consumption per category (OWNER or ADMIN), counted as emails are accepted.
#[endpoint(tags("billing"), security(("session" = [])), responses((status_code = 200, body = ConsumptionOut)))]
pub async fn consumption(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let (st, _, id, role) = caller(id, depot).await?;
        let c = billing::consumption(&st, &id, role).await?;
        let usage = c
            .usage
            .iter()
            .map(|x| (x.category.as_str().to_string(), UseOut { used: x.used, limit: x.limit, percent: x.percent }))
            .collect();
        debug_assert_eq!(c.usage.len(), CATEGORIES.len());
        Reply::ok(&ConsumptionOut { period: PeriodOut { start: rfc3339(c.start), end: rfc3339(c.end) }, usage })
    })
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct CheckoutBody {
    /// a plan of the server's settings that has a price
    plan: String,
}

/// Where to send the OWNER: the payment provider's page.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct RedirectOut {
    url: String,
    /// the Checkout Session's id (checkout only)
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
}

/// One invoice as the payment provider reports it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct InvoiceOut {
    id: String,
    number: Option<String>,
    status: Option<String>,
    /// in the currency's smallest unit
    amount_due: i64,
    amount_paid: i64,
    currency: Option<String>,
    created_at: Option<String>,
    hosted_invoice_url: Option<String>,
    pdf_url: Option<String>,
}

impl From<&Value> for InvoiceOut {
    fn from(v: &Value) -> Self {
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        InvoiceOut {
            id: text("id").unwrap_or_default(),
            number: text("number"),
            status: text("status"),
            amount_due: v.get("amount_due").and_then(Value::as_i64).unwrap_or(0),
            amount_paid: v.get("amount_paid").and_then(Value::as_i64).unwrap_or(0),
            currency: text("currency"),
            created_at: v.get("created").and_then(Value::as_i64).map(|s| rfc3339(s.saturating_mul(1000))),
            hosted_invoice_url: text("hosted_invoice_url"),
            pdf_url: text("invoice_pdf"),
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct InvoicesOut {
    data: Vec<InvoiceOut>,
}

#[derive(Serialize, ToSchema)]
pub struct ReceivedOut {
    received: bool,
}

/// Subscribes the project to a plan: a Checkout Session at the payment provider (OWNER only; 400
/// `BILLING_DISABLED` without a provider; 422 naming `plan` for an unknown one).
#[endpoint(tags("billing"), security(("session" = [])), request_body = CheckoutBody, responses((status_code = 200, body = RedirectOut)))]
pub async fn checkout(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let (st, u, id, role) = caller(id, depot).await?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        // Required, but checked by the service after the role and the provider.
        let plan = f.string("plan", false, 1, 100);
        f.finish()?;
        let (session, url) = payments::checkout(&st, &id, role, &u, plan.as_deref()).await?;
        Reply::ok(&RedirectOut { url, session_id: Some(session) })
    })
}

/// Opens the payment provider's billing portal for the project (OWNER only; 409 before a checkout).
#[endpoint(tags("billing"), security(("session" = [])), responses((status_code = 200, body = RedirectOut)))]
pub async fn portal(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let (st, _, id, role) = caller(id, depot).await?;
        let url = payments::portal(&st, &id, role).await?;
        Reply::ok(&RedirectOut { url, session_id: None })
    })
}

/// The project's invoices at the payment provider, newest first (OWNER only).
#[endpoint(tags("billing"), security(("session" = [])), responses((status_code = 200, body = InvoicesOut)))]
pub async fn invoices(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let (st, _, id, role) = caller(id, depot).await?;
        let list = payments::invoices(&st, &id, role).await?;
        Reply::ok(&InvoicesOut { data: list.iter().map(InvoiceOut::from).collect() })
    })
}

/// Billing events of the payment provider (Stripe), checked by their `Stripe-Signature`: subscription
/// changes set the project's plan and limits. 400 `BILLING_DISABLED` without a provider,
/// `INVALID_SIGNATURE` for a missing, forged, stale or replayed signature.
#[endpoint(tags("billing"), responses((status_code = 200, body = ReceivedOut)))]
pub async fn payment_webhook(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let signature: Option<String> = req.header("stripe-signature");
        let body = req
            .payload_with_max_size(WEBHOOK_MAX_BODY)
            .await
            .map_err(|_| Error::TooLarge { limit: super::body::size_label(WEBHOOK_MAX_BODY) })?
            .to_vec();
        payments::webhook(&st, signature.as_deref(), &body).await?;
        Reply::ok(&ReceivedOut { received: true })
    })
}

/// Largest payment event accepted.
const WEBHOOK_MAX_BODY: usize = 256 * 1024;
