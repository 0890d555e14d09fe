//! Billing limits (on the project row) and the monthly usage counters (`usage_month`), which the writers
//! of emails add to in their own transactions (`EmailDocs::INSERTS`).

use serde_json::Value;

use super::emails::EmailRow;
use super::{Store, StoreError};
use crate::domain::billing::{Category, Limits, month_key};
use crate::domain::status::EmailStatus;
use crate::vars;

/// Shards of one (project, month, category) counter.
const SHARDS: u8 = 16;

/// The counts of `rows` that go to delivery (PENDING), per project and month written, as `$usage` for
/// `EmailDocs::INSERTS`.
pub(crate) fn usage_docs<'a>(rows: impl IntoIterator<Item = &'a EmailRow>, category: Category) -> Value {
    let mut per: std::collections::BTreeMap<(&str, String), i64> = Default::default();
    for r in rows {
        if r.status == EmailStatus::Pending {
            *per.entry((r.project.as_str(), month_key(r.created_at))).or_default() += 1;
        }
    }
    // Round robin within the process: writers committing at the same moment (the group-commit lanes,
    // campaign batches) take different shards, so they never conflict on a counter.
    static NEXT: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    let shard = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SHARDS;
    Value::Array(
        per.into_iter()
            .map(|((p, month), n)| {
                vars! { "project": p, "month": month, "category": category.as_str(), "shard": shard, "n": n }
            })
            .collect(),
    )
}

impl Store {
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

    /// Applies a subscription as the provider reported it: its id, status and plan, and (when given)
    /// the limits that go with the plan, in one write.
    pub async fn apply_subscription(
        &self,
        project: &str,
        s: &PaymentAccount,
        limits: Option<&Limits>,
        now: i64,
    ) -> Result<(), StoreError> {
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
        let sql = format!("UPDATE type::record('project', $p) SET {} RETURN NONE", sets.join(", "));
        self.write(|| async { self.query(&sql, v.clone()).await }).await?;
        self.forget_project(project);
        Ok(())
    }
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
