//! Per-contact hourly budgets of workflows (docs/security.md#workflows): how many executions events
//! started for a contact, and how many emails SEND_EMAIL steps wrote to it, in the current UTC hour.
//! One `workflow_budget` row per project and contact (record id `[project, contact]`, no secondary
//! index), written in the transaction that writes the executions and emails it counts; a row of an
//! earlier hour counts as nothing and is restarted by the next write. Also the executions that were
//! stopped before they ran.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use super::{Store, StoreError};
use crate::vars;

/// The UTC hour (hours since the epoch) a budget counts in.
pub fn hour_of(now_ms: i64) -> i64 {
    now_ms.div_euclid(3_600_000)
}

/// What one contact used of its budgets in the current hour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Used {
    pub starts: i64,
    pub emails: i64,
}

/// Adds to `sql` (inside the caller's transaction) what a write uses of the budgets: per contact, the
/// executions events started and the emails written. Nothing when there is none.
pub(super) fn add_use(project: &str, uses: &HashMap<&str, Used>, now: i64, sql: &mut String, v: &mut Value) {
    let rows: Vec<Value> = uses
        .iter()
        .filter(|(_, u)| u.starts > 0 || u.emails > 0)
        .map(|(contact, u)| {
            vars! {
                "id": [project, *contact], "project": project, "hour": hour_of(now), "starts": u.starts,
                "emails": u.emails,
            }
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    // The counts are set before the hour, so they still compare with the row's old hour.
    sql.push_str(
        "INSERT INTO workflow_budget $budget ON DUPLICATE KEY UPDATE
            starts = IF hour = $input.hour THEN starts + $input.starts ELSE $input.starts END,
            emails = IF hour = $input.hour THEN emails + $input.emails ELSE $input.emails END,
            hour = $input.hour RETURN NONE;\n",
    );
    v["budget"] = Value::Array(rows);
}

impl Store {
    /// What these contacts of a project used of their budgets this hour (a contact without a row, or
    /// with an earlier hour's, used nothing).
    pub async fn workflow_budgets(
        &self,
        project: &str,
        contacts: &[&str],
        now: i64,
    ) -> Result<HashMap<String, Used>, StoreError> {
        if contacts.is_empty() {
            return Ok(HashMap::new());
        }
        let keys: Vec<[&str; 2]> = contacts.iter().map(|c| [project, *c]).collect();
        #[derive(Deserialize)]
        struct Row {
            k: (String, String),
            starts: i64,
            emails: i64,
        }
        let rows: Vec<Row> = self
            .query(
                "SELECT record::id(id) AS k, starts, emails
                 FROM array::map($keys, |$k| type::record('workflow_budget', $k)) WHERE hour = $hour",
                vars! { "keys": keys, "hour": hour_of(now) },
            )
            .await?
            .all(0)?;
        Ok(rows.into_iter().map(|r| (r.k.1, Used { starts: r.starts, emails: r.emails })).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store() -> Store {
        Store::connect(&crate::config::Config::for_tests()).await.expect("store")
    }

    async fn add(store: &Store, uses: &[(&str, i64, i64)], now: i64) {
        let map: HashMap<&str, Used> = uses.iter().map(|(c, s, e)| (*c, Used { starts: *s, emails: *e })).collect();
        let (mut sql, mut v) = (String::from("BEGIN TRANSACTION;\n"), vars! {});
        add_use("p", &map, now, &mut sql, &mut v);
        sql.push_str("COMMIT TRANSACTION;");
        store.query(&sql, v).await.expect("write");
    }

    #[tokio::test]
    async fn uses_add_up_within_an_hour_and_start_again_in_the_next() {
        let s = store().await;
        // 2027-01-15 08:00 UTC, the start of an hour.
        let h = 1_800_000_000_000;
        add(&s, &[("a", 1, 0), ("b", 0, 2)], h + 10).await;
        add(&s, &[("a", 2, 1)], h + 20).await;
        let used = s.workflow_budgets("p", &["a", "b", "c"], h + 30).await.unwrap();
        assert_eq!(used.get("a"), Some(&Used { starts: 3, emails: 1 }));
        assert_eq!(used.get("b"), Some(&Used { starts: 0, emails: 2 }));
        assert_eq!(used.get("c"), None);
        // Another project's contact of the same id is its own.
        assert!(s.workflow_budgets("q", &["a"], h + 30).await.unwrap().is_empty());
        // The next hour: nothing used, and a write starts from zero.
        let next = h + 3_600_000;
        assert!(s.workflow_budgets("p", &["a"], next).await.unwrap().is_empty());
        add(&s, &[("a", 1, 0)], next).await;
        assert_eq!(s.workflow_budgets("p", &["a"], next).await.unwrap()["a"], Used { starts: 1, emails: 0 });
    }
}
