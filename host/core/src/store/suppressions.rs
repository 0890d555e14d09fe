//! The suppression list (docs/behaviour.md#suppressions): `suppression:[project, value]`, where the
//! value is an address or a domain, so one project's list is one record-id range (listed in value
//! order) and whether an address is suppressed is two point reads (the address and its domain).

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use super::{Store, StoreError};
use crate::domain::suppressions::{Entry, Reason, keys_of};
use crate::vars;

/// One entry of a project's list.
#[derive(Debug, Clone, Deserialize)]
pub struct Suppression {
    /// The address or domain.
    pub value: String,
    /// `address` or `domain`
    pub kind: String,
    pub reason: Reason,
    /// What caused it (the bounce's or complaint's text, or a note given by hand).
    pub detail: Option<String>,
    /// The email whose bounce or complaint added it.
    pub email: Option<String>,
    pub created_at: i64,
}

/// A purge step (see [`Store::purge_project_batch`]): up to `$n` entries of the project `$p`.
pub(super) const PURGE_SUPPRESSIONS: &str =
    "LET $r = (SELECT VALUE id FROM suppression:[$p, NONE]..[$p, {}] LIMIT $n); DELETE $r RETURN NONE;";

const FIELDS: &str = "`value`, kind, reason, detail, email, created_at";

impl Store {
    /// Adds an entry unless the project has one for the same value, which is kept as it is (the first
    /// reason stands). Returns the entry the list now holds and whether this call added it.
    pub async fn add_suppression(
        &self,
        project: &str,
        entry: &Entry,
        reason: Reason,
        detail: Option<&str>,
        email: Option<&str>,
        now: i64,
    ) -> Result<(Suppression, bool), StoreError> {
        let sql = format!(
            "{{
                LET $id = type::record('suppression', [$p, $v]);
                LET $added = !record::exists($id);
                IF $added {{
                    CREATE $id CONTENT {{ project: $p, `value`: $v, kind: $kind, reason: $reason, detail: $detail ?? NONE,
                        email: $email ?? NONE, created_at: $now }} RETURN NONE;
                }};
                RETURN {{ added: $added, row: (SELECT {FIELDS} FROM ONLY $id) }};
            }}"
        );
        let v = self
            .write(|| async {
                self.query(
                    &sql,
                    vars! {
                        "p": project, "v": entry.value(), "kind": entry.kind(), "reason": reason.as_str(),
                        "detail": detail, "email": email, "now": now,
                    },
                )
                .await?
                .value_last()
            })
            .await?;
        let added = v["added"].as_bool().unwrap_or(false);
        let row = serde_json::from_value(v["row"].clone()).map_err(|e| StoreError::Decode(e.to_string()))?;
        Ok((row, added))
    }

    /// Removes the entry for `value` (an address or a domain); false when there was none.
    pub async fn remove_suppression(&self, project: &str, value: &str) -> Result<bool, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    "{ LET $id = type::record('suppression', [$p, $v]);
                       LET $had = record::exists($id);
                       DELETE $id RETURN NONE;
                       RETURN $had; }",
                    vars! { "p": project, "v": value },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_bool().unwrap_or(false))
    }

    /// The entry for `value`, if any.
    pub async fn suppression(&self, project: &str, value: &str) -> Result<Option<Suppression>, StoreError> {
        self.query(
            &format!("SELECT {FIELDS} FROM ONLY type::record('suppression', [$p, $v])"),
            vars! { "p": project, "v": value },
        )
        .await?
        .first(0)
    }

    /// Up to `limit` entries in value order, from the first value after `after` (the previous page's
    /// last), of one reason when `reason` is given.
    pub async fn suppressions_page(
        &self,
        project: &str,
        after: Option<&str>,
        reason: Option<Reason>,
        limit: usize,
    ) -> Result<Vec<Suppression>, StoreError> {
        // The range starts at the previous page's last value (inclusive), which is then skipped.
        let filter = match reason {
            Some(_) => "WHERE `value` != $after AND reason = $reason",
            None => "WHERE `value` != $after",
        };
        self.query(
            &format!("SELECT {FIELDS} FROM suppression:[$p, $from]..[$p, {{}}] {filter} LIMIT $n"),
            vars! {
                "p": project, "from": after.map(|a| Value::String(a.into())).unwrap_or(Value::Null),
                "after": after.unwrap_or(""), "reason": reason.map(Reason::as_str), "n": limit,
            },
        )
        .await?
        .all(0)
    }

    /// How many entries the project's list holds.
    pub async fn suppression_count(&self, project: &str) -> Result<i64, StoreError> {
        let v = self
            .query("RETURN array::len((SELECT VALUE id FROM suppression:[$p, NONE]..[$p, {}]))", vars! { "p": project })
            .await?
            .value(0)?;
        Ok(v.as_i64().unwrap_or(0))
    }

    /// Of these addresses (lowercased), the suppressed ones with the entry that stops each (the
    /// address's own before its domain's).
    pub async fn suppressed_among(
        &self,
        project: &str,
        addresses: &[String],
    ) -> Result<HashMap<String, Suppression>, StoreError> {
        if addresses.is_empty() {
            return Ok(HashMap::new());
        }
        let mut keys: Vec<String> = addresses.iter().flat_map(|a| keys_of(a)).collect();
        keys.sort_unstable();
        keys.dedup();
        let found: Vec<Suppression> = self
            .query(
                &format!("SELECT {FIELDS} FROM array::map($keys, |$k| type::record('suppression', [$p, $k]))"),
                vars! { "p": project, "keys": keys },
            )
            .await?
            .all(0)?;
        if found.is_empty() {
            return Ok(HashMap::new());
        }
        let by_value: HashMap<&str, &Suppression> = found.iter().map(|s| (s.value.as_str(), s)).collect();
        Ok(addresses
            .iter()
            .filter_map(|a| keys_of(a).iter().find_map(|k| by_value.get(k.as_str())).map(|s| (a.clone(), (*s).clone())))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store() -> Store {
        Store::connect(&crate::config::Config::for_tests()).await.expect("store")
    }

    #[tokio::test]
    async fn an_address_is_stopped_by_its_own_entry_or_its_domains_in_its_project_only() {
        let s = store().await;
        let addr = Entry::parse("ann@example.com").unwrap();
        let (row, added) = s.add_suppression("p", &addr, Reason::Bounce, Some("550 5.1.1"), None, 1).await.unwrap();
        assert!(added);
        assert_eq!((row.value.as_str(), row.reason), ("ann@example.com", Reason::Bounce));
        // The first reason stands.
        let (row, added) = s.add_suppression("p", &addr, Reason::Manual, None, None, 2).await.unwrap();
        assert!(!added);
        assert_eq!(row.reason, Reason::Bounce);
        s.add_suppression("p", &Entry::parse("spam.test").unwrap(), Reason::Manual, None, None, 3).await.unwrap();

        let all = ["ann@example.com", "bob@example.com", "eve@spam.test", "eve@sub.spam.test"].map(String::from);
        let hit = s.suppressed_among("p", &all).await.unwrap();
        assert_eq!(hit.len(), 2, "{hit:?}");
        assert_eq!(hit["ann@example.com"].reason, Reason::Bounce);
        assert_eq!(hit["eve@spam.test"].value, "spam.test");
        assert!(s.suppressed_among("q", &all).await.unwrap().is_empty(), "another project's list applies");

        assert_eq!(s.suppression_count("p").await.unwrap(), 2);
        assert!(s.remove_suppression("p", "spam.test").await.unwrap());
        assert!(!s.remove_suppression("p", "spam.test").await.unwrap());
        assert!(!s.suppressed_among("p", &all).await.unwrap().contains_key("eve@spam.test"));

        // Deleting the project deletes its list; a reset keeps it (it is part of the sending record).
        assert_eq!(s.purge_project_batch("p", 100, true, 10).await.unwrap(), 0);
        assert_eq!(s.suppression_count("p").await.unwrap(), 1);
        while s.purge_project_batch("p", 100, false, 10).await.unwrap() > 0 {}
        assert_eq!(s.suppression_count("p").await.unwrap(), 0);
    }

    #[tokio::test]
    async fn pages_follow_value_order_without_repeats() {
        let s = store().await;
        for i in 0..7 {
            let e = Entry::parse(&format!("u{i}@example.com")).unwrap();
            let reason = if i % 2 == 0 { Reason::Bounce } else { Reason::Complaint };
            s.add_suppression("p", &e, reason, None, None, i).await.unwrap();
        }
        s.add_suppression("q", &Entry::parse("q@example.com").unwrap(), Reason::Manual, None, None, 0).await.unwrap();
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = s.suppressions_page("p", after.as_deref(), None, 3).await.unwrap();
            if page.is_empty() {
                break;
            }
            after = page.last().map(|r| r.value.clone());
            seen.extend(page.into_iter().map(|r| r.value));
        }
        let want: Vec<String> = (0..7).map(|i| format!("u{i}@example.com")).collect();
        assert_eq!(seen, want);
        let bounces = s.suppressions_page("p", None, Some(Reason::Complaint), 10).await.unwrap();
        assert_eq!(bounces.len(), 3);
    }
}
