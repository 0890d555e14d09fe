//! Billing limits (on the project row) and the monthly usage counters (`usage_month`), which the writers
//! of emails add to in their own transactions (`EmailDocs::INSERTS`).
//!
//! A writer whose category has a limit also checks it in that transaction (docs/behaviour.md#billing):
//! it sums the month's counters, throws [`LIMIT_REACHED`] when its emails do not fit, and adds its count
//! to one row shared by every limited writer of that project, month and category ([`RESERVED_SHARD`]).
//! Two such transactions at once both write that row, so the database commits one and the other fails
//! with a conflict and runs again (`Store::write`) against the new count: no two can both pass. Writers
//! without a limit read nothing and spread their counts over 16 shards, as before.

use serde_json::Value;

use super::{Store, StoreError};
use crate::domain::billing::{Category, Limits, month_key};
use crate::vars;

/// Shards of one (project, month, category) counter that writers without a limit add to.
const SHARDS: u8 = 16;

/// The shard every writer with a limit adds to, so that any two of them conflict (see the module).
const RESERVED_SHARD: u8 = SHARDS;

/// What a writing transaction throws when its emails would take the month past the limit, with the
/// limit and how many still fit: `BILLING_LIMIT_EXCEEDED: <limit>/<fits>` (see [`limit_reached`]).
pub const LIMIT_REACHED: &str = "BILLING_LIMIT_EXCEEDED";

/// The limit and how many emails still fit, when `e` is a writer's [`LIMIT_REACHED`].
pub fn limit_reached(e: &StoreError) -> Option<(i64, usize)> {
    let StoreError::Thrown(m) = e else { return None };
    let (limit, fits) = m.strip_prefix(LIMIT_REACHED)?.strip_prefix(':')?.trim().split_once('/')?;
    Some((limit.parse().ok()?, fits.parse().ok()?))
}

/// What the emails a transaction writes count in, and the limit it holds them to (None: unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub category: Category,
    pub limit: Option<i64>,
}

/// The counts of the emails that go to delivery (their project and when each was written), per project
/// and month, as `$usage` for `EmailDocs::INSERTS`.
pub(crate) fn usage_docs<'a>(pending: impl IntoIterator<Item = (&'a str, i64)>, counted: Counted) -> Value {
    let mut per: std::collections::BTreeMap<(&str, String), i64> = Default::default();
    for (project, created_at) in pending {
        *per.entry((project, month_key(created_at))).or_default() += 1;
    }
    // Round robin within the process: unlimited writers committing at the same moment (the group-commit
    // lanes, campaign batches) take different shards, so they never conflict on a counter. Limited ones
    // must conflict: they share one.
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    let shard = match counted.limit {
        Some(_) => RESERVED_SHARD,
        None => NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SHARDS,
    };
    let category = counted.category.as_str();
    Value::Array(
        per.into_iter()
            .map(|((p, month), n)| vars! { "project": p, "month": month, "category": category, "shard": shard, "n": n })
            .collect(),
    )
}

impl Store {
    /// What a project's emails of `category` count in, with its limit (from the short read cache: a
    /// limit set through this process applies at once, through another within its few seconds).
    pub(crate) async fn counted(&self, project: &str, category: Category) -> Result<Counted, StoreError> {
        let limit = self.project_cached(project).await?.and_then(|p| p.billing_limits).and_then(|l| l.get(category));
        Ok(Counted { category, limit })
    }

    /// Emails accepted in a project in the month of `at_ms`, per category.
    pub async fn billing_usage(&self, project: &str, at_ms: i64) -> Result<Vec<(Category, i64)>, StoreError> {
        let rows: Vec<Value> = self
            .query(
                "SELECT category, math::sum(n) AS n FROM usage_month WHERE project = $p AND month = $m GROUP BY category",
                vars! { "p": project, "m": month_key(at_ms) },
            )
            .await?
            .all(0)?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let c = Category::parse(r.get("category")?.as_str()?)?;
                Some((c, r.get("n").and_then(Value::as_i64).unwrap_or(0)))
            })
            .collect())
    }

    /// Emails of one category accepted in a project in the month of `at_ms`.
    pub async fn usage_of(&self, project: &str, category: Category, at_ms: i64) -> Result<i64, StoreError> {
        Ok(self.billing_usage(project, at_ms).await?.into_iter().find(|(c, _)| *c == category).map_or(0, |(_, n)| n))
    }

    /// Replaces a project's limits.
    pub async fn set_billing_limits(&self, project: &str, limits: &Limits, now: i64) -> Result<(), StoreError> {
        let doc =
            super::jobs::strip_nulls(serde_json::to_value(limits).map_err(|e| StoreError::Decode(e.to_string()))?);
        self.write(|| async {
            self.query(
                "UPDATE type::record('project', $p) SET billing_limits = $l, updated_at = $now RETURN NONE",
                vars! { "p": project, "l": doc.clone(), "now": now },
            )
            .await
        })
        .await?;
        self.forget_project(project);
        Ok(())
    }

    /// Deletes a (deleted) project's usage counters.
    pub async fn delete_usage(&self, project: &str) -> Result<(), StoreError> {
        self.write(|| async {
            self.query("DELETE usage_month WHERE project = $p RETURN NONE", vars! { "p": project }).await
        })
        .await
        .map(|_| ())
    }

    /// A project's payment-provider records: (customer, subscription, plan, status).
    pub async fn payment_account(&self, project: &str) -> Result<Option<PaymentAccount>, StoreError> {
        self.query(
            "SELECT billing_customer AS customer, billing_subscription AS subscription, billing_plan AS plan,
                billing_status AS status FROM ONLY type::record('project', $p)",
            vars! { "p": project },
        )
        .await?
        .first(0)
    }

    /// Records the project's customer at the payment provider.
    pub async fn set_billing_customer(&self, project: &str, customer: &str, now: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE type::record('project', $p) SET billing_customer = $c, updated_at = $now RETURN NONE",
                vars! { "p": project, "c": customer, "now": now },
            )
            .await
        })
        .await?;
        self.forget_project(project);
        Ok(())
    }

    /// The project whose customer at the payment provider this is.
    pub async fn project_of_customer(&self, customer: &str) -> Result<Option<String>, StoreError> {
        let v = self
            .query(
                "SELECT VALUE record::id(id) FROM project WHERE billing_customer = $c LIMIT 1",
                vars! { "c": customer },
            )
            .await?
            .value(0)?;
        Ok(v.get(0).and_then(Value::as_str).map(str::to_string))
    }

    /// Remembers a payment event's id until `expires_at` (with the notifications seen); false when it
    /// was remembered already (a replay).
    pub async fn remember_payment_event(&self, id: &str, expires_at: i64, now: i64) -> Result<bool, StoreError> {
        self.remember_notification(&format!("{PAYMENT_EVENT}{id}"), expires_at, now).await
    }

    /// Forgets a payment event's id (it could not be applied: the provider's retry must get through).
    pub async fn forget_payment_event(&self, id: &str) -> Result<(), StoreError> {
        let key = format!("{PAYMENT_EVENT}{id}");
        self.write(|| async {
            self.query("DELETE notification_seen WHERE signature = $s RETURN NONE", vars! { "s": key.clone() }).await
        })
        .await
        .map(|_| ())
    }

    /// Deletes a (deleted) project's payment records kept apart from its row (the last event applied to
    /// each of its subscriptions).
    pub async fn delete_payment_records(&self, project: &str) -> Result<(), StoreError> {
        self.write(|| async {
            self.query("DELETE payment_subscription WHERE project = $p RETURN NONE", vars! { "p": project }).await
        })
        .await
        .map(|_| ())
    }

    /// Applies a subscription as the provider reported it: its id, status and plan, and (when given)
    /// the limits that go with the plan, in one write. With `order`, only when that event was not
    /// created before the last one applied to its subscription, which it then becomes, in the same
    /// transaction; false when it is older and nothing was written.
    pub async fn apply_subscription(
        &self,
        project: &str,
        s: &PaymentAccount,
        limits: Option<&Limits>,
        order: Option<&EventOrder>,
        now: i64,
    ) -> Result<bool, StoreError> {
        // Each field set, or cleared (NONE) when the subscription has none; the customer is kept.
        let mut sets = vec!["updated_at = $now".to_string()];
        let mut v = vars! { "p": project, "now": now };
        for (field, value) in [
            ("billing_customer", &s.customer),
            ("billing_subscription", &s.subscription),
            ("billing_plan", &s.plan),
            ("billing_status", &s.status),
        ] {
            match value {
                Some(x) => {
                    sets.push(format!("{field} = ${field}"));
                    v[field] = x.clone().into();
                }
                None if field != "billing_customer" => sets.push(format!("{field} = NONE")),
                None => {}
            }
        }
        if let Some(l) = limits {
            sets.push("billing_limits = $limits".into());
            v["limits"] =
                super::jobs::strip_nulls(serde_json::to_value(l).map_err(|e| StoreError::Decode(e.to_string()))?);
        }
        let mut sql = String::from("BEGIN TRANSACTION;\n");
        if let Some(o) = order {
            sql.push_str(
                "LET $last = (SELECT event_at, event_id FROM ONLY type::record('payment_subscription', $sub));
                 IF $last != NONE AND $last.event_at > $at { THROW 'PAYMENT_EVENT_OLDER'; };
                 UPSERT type::record('payment_subscription', $sub) SET project = $p, event_at = $at, event_id = $evt
                    RETURN NONE;\n",
            );
            v["sub"] = o.subscription.clone().into();
            v["at"] = o.created.into();
            v["evt"] = o.event.clone().into();
        }
        sql.push_str(&format!("UPDATE type::record('project', $p) SET {} RETURN NONE;\n", sets.join(", ")));
        sql.push_str("COMMIT TRANSACTION;");
        match self.write(|| async { self.query(&sql, v.clone()).await }).await {
            Ok(_) => {}
            Err(e) if e.thrown("PAYMENT_EVENT_OLDER") => return Ok(false),
            Err(e) => return Err(e),
        }
        self.forget_project(project);
        Ok(true)
    }
}

/// How `notification_seen` names a payment event's id.
const PAYMENT_EVENT: &str = "stripe-event:";

/// Where a payment event stands among its subscription's events: the subscription's id, the event's
/// creation time (seconds) and its id. Events of one second are applied as they arrive: Stripe's ids
/// say nothing of their order, and the same event twice is a replay, refused before.
#[derive(Debug, Clone)]
pub struct EventOrder {
    pub subscription: String,
    pub created: i64,
    pub event: String,
}

/// A project's records at the payment provider.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct PaymentAccount {
    #[serde(default)]
    pub customer: Option<String>,
    #[serde(default)]
    pub subscription: Option<String>,
    #[serde(default)]
    pub plan: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::domain::status::EmailStatus;
    use crate::store::emails::EmailRow;

    fn email(project: &str, at: i64) -> EmailRow {
        EmailRow {
            id: uuid::Uuid::now_v7().to_string(),
            project: project.into(),
            contact: String::new(),
            recipient: "a@example.org".into(),
            recipient_name: None,
            from: "hi@shop.test".into(),
            from_name: None,
            reply_to: None,
            subject: "Hi".into(),
            html: "<p>Hi</p>".into(),
            text: "Hi".into(),
            headers: "[]".into(),
            attachments: std::sync::Arc::from("[]"),
            kind: "TRANSACTIONAL".into(),
            template: None,
            campaign: None,
            message_id: String::new(),
            status: EmailStatus::Pending,
            error: None,
            sent_at: None,
            created_at: at,
            updated_at: at,
            depth: None,
            attempts: None,
            next_attempt_at: None,
            resent_at: None,
        }
    }

    /// A write under a limit checks it in its own transaction and reserves what it counts: of two
    /// writes at once that would together pass the limit, exactly one commits; the other is refused
    /// with the limit and the room left, and writes nothing.
    #[tokio::test]
    async fn a_limited_write_checks_and_reserves_its_allowance_in_its_transaction() {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        store.create_project("p1", "One", "ph", "sh", None, None, 1).await.unwrap();
        let now = 1_800_000_000_000;
        let write = |n: usize| {
            let store = store.clone();
            async move {
                let rows: Vec<EmailRow> = (0..n).map(|_| email("p1", now)).collect();
                store.create_emails(&rows, "email.deliver", 100, 5, Some(Category::Transactional)).await
            }
        };
        // Unlimited: nothing is checked.
        write(3).await.unwrap();
        let limits = Limits { transactional: Some(7), ..Default::default() };
        store.set_billing_limits("p1", &limits, now).await.unwrap();
        let refused = write(5).await.expect_err("3 + 5 is past 7");
        assert_eq!(limit_reached(&refused), Some((7, 4)), "{refused:?}");
        let (a, b) = tokio::join!(write(3), write(3));
        let refusals: Vec<_> = [&a, &b].into_iter().filter_map(|r| r.as_ref().err()).collect();
        assert_eq!(refusals.len(), 1, "{a:?} {b:?}");
        assert_eq!(limit_reached(refusals[0]), Some((7, 1)), "{refusals:?}");
        assert_eq!(store.usage_of("p1", Category::Transactional, now).await.unwrap(), 6);
        let emails = store.query("SELECT count() AS n FROM email GROUP ALL", crate::vars! {}).await.unwrap().value(0);
        assert_eq!(emails.unwrap()[0]["n"], 6);
        // Other errors are not taken for the limit.
        assert_eq!(limit_reached(&StoreError::Thrown("STALE_CONTACT".into())), None);
        assert_eq!(limit_reached(&StoreError::Busy("BILLING_LIMIT_EXCEEDED: 1/2".into())), None);
    }
}
