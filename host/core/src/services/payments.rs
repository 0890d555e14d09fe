//! Payments through Stripe (docs/behaviour.md#billing): a Checkout Session to subscribe a project to a
//! configured plan, the billing portal, the customer's invoices, and the webhook that applies
//! subscription changes to the project's plan and limits. Without Stripe configured every one of them
//! answers 400 `BILLING_DISABLED`.
//!
//! Must not import: salvo, surrealdb.

use serde_json::Value;

use crate::config::Plan;
use crate::context::Context;
use crate::error::{Code, Error};
use crate::infra::stripe::{Stripe, verify_signature};
use crate::store::accounts::{Role, User};
use crate::store::billing::{EventOrder, PaymentAccount};

fn disabled() -> Error {
    Error::refused(
        Code::BillingDisabled,
        "Billing payments are not set up on this Herald server: the operator has not configured a payment \
         provider. Limits and consumption work without one",
    )
}

fn provider(e: String) -> Error {
    tracing::warn!(error = %e, "payment provider call failed");
    Error::refused(Code::PaymentProviderError, e)
}

/// The Stripe client, after the OWNER check: payments are the OWNER's business.
fn stripe(st: &Context, role: Role) -> Result<&Stripe, Error> {
    crate::services::roles::need(role, Role::Owner, "manage payments")?;
    st.stripe.as_deref().ok_or_else(disabled)
}

/// How long a payment event's id is remembered: Stripe retries a delivery for up to three days.
const EVENT_IDS_KEPT_MS: i64 = 30 * 86_400_000;

/// Subscribes the project to `plan` through a Stripe Checkout Session (creating the project's customer
/// the first time); answers (session id, URL to send the OWNER to). 409 `SUBSCRIPTION_ACTIVE` with the
/// billing portal's link while the project has an active or trialing subscription: that is where a
/// plan is changed, and a second checkout would start a second subscription.
pub async fn checkout(
    st: &Context,
    project: &str,
    role: Role,
    owner: &User,
    plan: Option<&str>,
) -> Result<(String, String), Error> {
    let stripe = stripe(st, role)?;
    let plan = plan.ok_or_else(|| Error::field("plan", "required", "plan is required", Value::Null))?;
    let priced: Vec<&String> = st.config.plans.iter().filter(|(_, p)| p.price.is_some()).map(|(n, _)| n).collect();
    let Some(price) = st.config.plans.get(plan).and_then(|p| p.price.clone()) else {
        let names = priced.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ");
        return Err(Error::field("plan", "invalid_value", &format!("plan must be one of: {names}"), plan.into()));
    };
    let account = st.store.payment_account(project).await?.unwrap_or_default();
    let back = format!("{}/billing?project={project}", st.config.public_url);
    if account.subscription.is_some() && matches!(account.status.as_deref(), Some("active" | "trialing")) {
        let portal = match &account.customer {
            Some(c) => stripe.portal_session(c, &back).await.map_err(|e| tracing::warn!(error = %e, "portal")).ok(),
            None => None,
        };
        return Err(Error::Refused {
            code: Code::SubscriptionActive,
            message: "This project has an active subscription already: change or cancel it in the billing portal \
                      (details.portalUrl, or POST .../billing-portal)"
                .into(),
            details: Some(serde_json::json!({ "portalUrl": portal })),
        });
    }
    let customer = match account.customer {
        Some(c) => c,
        None => {
            let c = stripe.create_customer(project, &owner.email).await.map_err(provider)?;
            st.store.set_billing_customer(project, &c, st.clock.now_ms()).await?;
            c
        }
    };
    stripe
        .checkout_session(
            &customer,
            &price,
            project,
            &format!("{back}&checkout=success"),
            &format!("{back}&checkout=cancelled"),
        )
        .await
        .map_err(provider)
}

/// A billing portal session for the project's customer; 409 before the project has one.
pub async fn portal(st: &Context, project: &str, role: Role) -> Result<String, Error> {
    let stripe = stripe(st, role)?;
    let customer = st.store.payment_account(project).await?.and_then(|a| a.customer).ok_or_else(|| {
        Error::Conflict("This project has no subscription yet: start one with POST .../checkout".into())
    })?;
    let back = format!("{}/billing?project={project}", st.config.public_url);
    stripe.portal_session(&customer, &back).await.map_err(provider)
}

/// The project's invoices at Stripe (none before it has a customer).
pub async fn invoices(st: &Context, project: &str, role: Role) -> Result<Vec<Value>, Error> {
    let stripe = stripe(st, role)?;
    match st.store.payment_account(project).await?.and_then(|a| a.customer) {
        None => Ok(vec![]),
        Some(c) => stripe.invoices(&c).await.map_err(provider),
    }
}

/// What a webhook delivery did.
#[derive(Debug, PartialEq, Eq)]
pub enum Applied {
    /// The event changed a project's customer or subscription.
    Project(String),
    /// An event Herald does not act on, or about no project it knows.
    Ignored,
}

/// `POST /webhooks/incoming/payments`: checks the `Stripe-Signature` (400 `INVALID_SIGNATURE` when it
/// is missing, forged or outside the 5-minute tolerance), then the event's id: an event received before
/// (within 30 days, however it is signed) is a replay, refused with the same 400. Then applies it; an
/// id whose event could not be applied is forgotten, so the provider's retry gets through.
pub async fn webhook(st: &Context, signature: Option<&str>, body: &[u8]) -> Result<Applied, Error> {
    let config = st.config.stripe.as_ref().ok_or_else(disabled)?;
    let invalid = |m: String| Error::refused(Code::InvalidSignature, m);
    let header = signature.ok_or_else(|| invalid("The Stripe-Signature header is missing".into()))?;
    let now = st.clock.now_ms();
    verify_signature(&config.webhook_secret, header, body, now / 1000).map_err(invalid)?;
    let event: Value =
        serde_json::from_slice(body).map_err(|e| Error::Malformed(format!("The event is not JSON: {e}")))?;
    let id = event.get("id").and_then(Value::as_str).filter(|id| !id.is_empty() && id.len() <= 255);
    let id = id.ok_or_else(|| Error::Invalid("The event has no id".into()))?;
    if !st.store.remember_payment_event(id, now + EVENT_IDS_KEPT_MS, now).await? {
        return Err(invalid(format!("Event {id} was received already (a replay)")));
    }
    let applied = apply(st, id, &event, now).await;
    if applied.is_err() {
        st.store.forget_payment_event(id).await?;
    }
    applied
}

/// Applies one event (already checked and remembered): see [`webhook`].
async fn apply(st: &Context, id: &str, event: &Value, now: i64) -> Result<Applied, Error> {
    let kind = event.get("type").and_then(Value::as_str).unwrap_or_default();
    let obj = event.pointer("/data/object").cloned().unwrap_or(Value::Null);
    let text = |p: &str| obj.pointer(p).and_then(Value::as_str).map(str::to_string);
    let customer = text("/customer");
    let project = match text("/metadata/project").or_else(|| text("/client_reference_id")) {
        Some(p) => st.store.project(&p).await?.map(|x| x.id),
        None => match &customer {
            Some(c) => st.store.project_of_customer(c).await?,
            None => None,
        },
    };
    let Some(project) = project else {
        tracing::info!(event = kind, "payment event about no known project, ignored");
        return Ok(Applied::Ignored);
    };
    match kind {
        "checkout.session.completed" => {
            if let Some(c) = &customer {
                st.store.set_billing_customer(&project, c, now).await?;
            }
            Ok(Applied::Project(project))
        }
        "customer.subscription.created" | "customer.subscription.updated" | "customer.subscription.deleted" => {
            let status = text("/status");
            let price = text("/items/data/0/price/id");
            let plan = price.as_ref().and_then(|p| st.config.plans.iter().find(|(_, x)| x.price.as_ref() == Some(p)));
            let live = kind != "customer.subscription.deleted"
                && matches!(status.as_deref(), Some("active") | Some("trialing"));
            let (plan_name, limits) = match plan {
                Some((name, p)) if live => (Some(name.clone()), p.limits()),
                // Ended, unpaid or an unknown price: the free plan's limits (unlimited without one).
                _ => (None, st.config.plans.get("free").map(Plan::limits).unwrap_or_default()),
            };
            // Stripe does not deliver events in order: one created before the last applied to its
            // subscription (a late retry, or a replay of an old `active` after `deleted`) is ignored.
            let order = text("/id").map(|subscription| EventOrder {
                subscription,
                created: event.get("created").and_then(Value::as_i64).unwrap_or(0),
                event: id.to_string(),
            });
            let account = PaymentAccount {
                customer,
                subscription: if kind == "customer.subscription.deleted" { None } else { text("/id") },
                plan: plan_name,
                status,
            };
            if !st.store.apply_subscription(&project, &account, Some(&limits), order.as_ref(), now).await? {
                tracing::info!(event = id, kind, "payment event older than the last applied, ignored");
                return Ok(Applied::Ignored);
            }
            Ok(Applied::Project(project))
        }
        _ => Ok(Applied::Ignored),
    }
}
