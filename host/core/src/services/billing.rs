//! Billing (docs/behaviour.md#billing): monthly limits per category, the consumption counted as emails
//! are accepted (the writers of emails add to `usage_month` in their own transactions), and their
//! enforcement: `/v1/send` beyond the transactional limit is 402 `BILLING_LIMIT_EXCEEDED`; campaign and
//! workflow emails beyond theirs are recorded as not sent, with the reason. What is read here before a
//! write decides what to try; the transaction that writes the emails checks the limit again and
//! reserves what it counts (`store/billing.rs`), so writers at the same moment cannot pass it together.
//! Payments are `services/payments.rs`.
//!
//! Must not import: salvo, surrealdb.

use crate::config::Config;
use crate::context::Context;
use crate::domain::billing::{CATEGORIES, Category, Limits, allowance, percent, period};
use crate::error::{Code, Error};
use crate::store::accounts::Role;
use crate::store::{Store, StoreError};

/// A project's limits (from the short read cache; all unlimited for an unknown project).
pub async fn limits_of(store: &Store, project: &str) -> Result<Limits, StoreError> {
    Ok(store.project_cached(project).await?.and_then(|p| p.billing_limits).unwrap_or_default())
}

/// How many of `wanted` emails of `category` may still be accepted this month, and the limit (None:
/// unlimited, and nothing is read but the cached project row).
pub async fn room(
    store: &Store,
    project: &str,
    category: Category,
    wanted: usize,
    now: i64,
) -> Result<(usize, Option<i64>), StoreError> {
    let limit = limits_of(store, project).await?.get(category);
    if limit.is_none() {
        return Ok((wanted, None));
    }
    let used = store.usage_of(project, category, now).await?;
    Ok((allowance(limit, used, wanted), limit))
}

/// 402 `BILLING_LIMIT_EXCEEDED` naming the category when `wanted` more emails would pass its limit.
pub async fn check(store: &Store, project: &str, category: Category, wanted: usize, now: i64) -> Result<(), Error> {
    let (fits, limit) = room(store, project, category, wanted, now).await?;
    match limit {
        Some(l) if fits < wanted => Err(exceeded(category, l, fits)),
        _ => Ok(()),
    }
}

/// The 402 of a category whose `limit` leaves room for `fits` more emails this month.
pub fn exceeded(category: Category, limit: i64, fits: usize) -> Error {
    Error::refused(
        Code::BillingLimitExceeded,
        format!(
            "The project's monthly {} limit of {limit} emails would be exceeded: {fits} more can be sent this month",
            category.as_str()
        ),
    )
}

/// The 402 when a write was refused by the limit it checks in its transaction (another writer counted
/// first); None for any other error.
pub fn refused(category: Category, e: &StoreError) -> Option<Error> {
    crate::store::billing::limit_reached(e).map(|(limit, fits)| exceeded(category, limit, fits))
}

/// What the emails decided together (the executions of one workflow round) may still take of a
/// project's limited categories: each project and category read once, then handed out in memory, so
/// the emails decided at the same moment do not all see the same room. Only a hint: the transaction
/// that writes them checks again.
#[derive(Default)]
pub struct Allowance(tokio::sync::Mutex<std::collections::HashMap<(String, Category), Room>>);

/// How many more emails fit, and the limit (None: unlimited).
type Room = (usize, Option<i64>);

impl Allowance {
    /// Takes one email of `category`: None when it fits, else the limit that is reached.
    pub async fn take_one(
        &self,
        store: &Store,
        project: &str,
        category: Category,
        now: i64,
    ) -> Result<Option<i64>, StoreError> {
        let mut left = self.0.lock().await;
        let key = (project.to_string(), category);
        let (room_left, limit) = match left.get_mut(&key) {
            Some(x) => x,
            None => left.entry(key).or_insert(room(store, project, category, i64::MAX as usize, now).await?),
        };
        match (limit, *room_left) {
            (None, _) => Ok(None),
            (Some(l), 0) => Ok(Some(*l)),
            (Some(_), n) => {
                *room_left = n - 1;
                Ok(None)
            }
        }
    }
}

/// One category's consumption.
pub struct Use {
    pub category: Category,
    pub used: i64,
    pub limit: Option<i64>,
    pub percent: Option<f64>,
}

/// The current month's consumption: its period and each category.
pub struct Consumption {
    pub start: i64,
    pub end: i64,
    pub usage: Vec<Use>,
}

/// Reading billing (limits, consumption) is for OWNERs and ADMINs.
fn may_read(role: Role) -> Result<(), Error> {
    crate::services::roles::need(role, Role::Admin, "see billing")
}

/// The project's limits (OWNER or ADMIN).
pub async fn limits(st: &Context, project: &str, role: Role) -> Result<Limits, Error> {
    may_read(role)?;
    Ok(st.store.project(project).await?.and_then(|p| p.billing_limits).unwrap_or_default())
}

/// When payments are configured, the limits a project may not go above, with the name of the plan
/// that gives them: its plan's, or the `free` plan's without a live subscription (or when its plan is
/// no longer configured). None without payments, or without such a plan: the limits are the OWNER's.
pub fn ceiling<'a>(config: &'a Config, plan: Option<&'a str>) -> Option<(&'a str, Limits)> {
    config.stripe.as_ref()?;
    [plan, Some("free")].into_iter().flatten().find_map(|name| Some((name, config.plans.get(name)?.limits())))
}

/// The limits a new project starts with: the `free` plan's when payments are configured (None: none).
pub fn starting_limits(config: &Config) -> Option<Limits> {
    ceiling(config, None).map(|(_, l)| l)
}

/// Changes limits (OWNER only): each category given is set (None: unlimited), the others stay. Under a
/// plan's ceiling ([`ceiling`]) a limit may be lowered, never raised above the plan's or removed: 422
/// naming the category.
pub async fn set_limits(
    st: &Context,
    project: &str,
    role: Role,
    changes: &[(Category, Option<i64>)],
) -> Result<Limits, Error> {
    crate::services::roles::need(role, Role::Owner, "change billing limits")?;
    let plan = st.store.payment_account(project).await?.and_then(|a| a.plan);
    if let Some((name, max)) = ceiling(&st.config, plan.as_deref()) {
        for (c, v) in changes {
            if let Some(m) = max.get(*c)
                && v.is_none_or(|v| v > m)
            {
                let c = c.as_str();
                return Err(Error::field(
                    c,
                    "too_big",
                    &format!(
                        "The {name} plan allows at most {m} {c} emails a month: {c} may be lowered below that, \
                         not raised above it or removed"
                    ),
                    (*v).into(),
                ));
            }
        }
    }
    let mut l = st.store.project(project).await?.and_then(|p| p.billing_limits).unwrap_or_default();
    for (c, v) in changes {
        l.set(*c, *v);
    }
    st.store.set_billing_limits(project, &l, st.clock.now_ms()).await?;
    Ok(l)
}

/// This month's consumption (OWNER or ADMIN).
pub async fn consumption(st: &Context, project: &str, role: Role) -> Result<Consumption, Error> {
    may_read(role)?;
    let now = st.clock.now_ms();
    let limits = st.store.project(project).await?.and_then(|p| p.billing_limits).unwrap_or_default();
    let used = st.store.billing_usage(project, now).await?;
    let (start, end) = period(now);
    let usage = CATEGORIES
        .into_iter()
        .map(|c| {
            let n = used.iter().find(|(k, _)| *k == c).map_or(0, |(_, n)| *n);
            Use { category: c, used: n, limit: limits.get(c), percent: percent(n, limits.get(c)) }
        })
        .collect();
    Ok(Consumption { start, end, usage })
}
