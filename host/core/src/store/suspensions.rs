//! Project suspensions: the `suspended` mark on the project, the `suspension` history, and the delivery
//! jobs a suspended project's emails wait in (`held`, naming the project) until it is lifted.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::activity::MILESTONE_INSERT;
use super::{Store, StoreError};
use crate::vars;

/// One suspension of a project.
#[derive(Debug, Clone, Deserialize)]
pub struct Suspension {
    pub reason: String,
    pub at: i64,
    #[serde(default)]
    pub lifted_at: Option<i64>,
    #[serde(default)]
    pub lifted_by: Option<String>,
}

/// The `$milestone` of a project's own milestone (no campaign).
fn project_milestone(project: &str, kind: &str, data: Map<String, Value>, at: i64) -> Value {
    vars! { "id": uuid::Uuid::now_v7().to_string(), "project": project, "type": kind, "data": data, "at": at }
}

impl Store {
    /// Projects whose analytics counters hold bounces or complaints in an hour from `since` on.
    pub async fn projects_with_trouble(&self, since: i64) -> Result<Vec<String>, StoreError> {
        let mut ids: Vec<String> = self
            .query(
                "SELECT VALUE project FROM stat_hour WHERE hour >= $since AND (bounced > 0 OR complained > 0)",
                vars! { "since": since },
            )
            .await?
            .all(0)?;
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// Suspends a project that is not suspended yet: the mark, a `suspension` row and a
    /// `project.suspended` milestone in one transaction. False when it was suspended already (or is gone).
    pub async fn suspend_project(&self, project: &str, reason: &str, now: i64) -> Result<bool, StoreError> {
        let mut data = Map::new();
        data.insert("reason".into(), reason.into());
        let sql = format!(
            "BEGIN TRANSACTION;
             LET $row = (SELECT suspended FROM ONLY type::record('project', $p));
             LET $out = IF $row != NONE AND $row.suspended = NONE {{
                UPDATE type::record('project', $p) SET suspended = {{ at: $now, reason: $reason }}, updated_at = $now
                    RETURN NONE;
                CREATE suspension CONTENT {{ project: $p, reason: $reason, at: $now }} RETURN NONE;
                {MILESTONE_INSERT}
                true
             }} ELSE {{ false }};
             RETURN $out;
             COMMIT TRANSACTION;"
        );
        let v = vars! {
            "p": project, "reason": reason, "now": now,
            "milestone": project_milestone(project, "project.suspended", data, now),
        };
        let out = self.write(|| async { self.query(&sql, v.clone()).await?.value_last() }).await?;
        self.forget_project(project);
        Ok(out.as_bool().unwrap_or(false))
    }

    /// Lifts a project's suspension (with `began_by`, only one that began then or before): clears the
    /// mark, closes its `suspension` row, writes a `project.unsuspended` milestone and puts its held
    /// delivery jobs back in the queue, in one transaction. None when it was not suspended (or later);
    /// else how many jobs went back.
    pub async fn unsuspend_project(
        &self,
        project: &str,
        by: &str,
        began_by: Option<i64>,
        now: i64,
    ) -> Result<Option<u64>, StoreError> {
        let mut data = Map::new();
        data.insert("by".into(), by.into());
        let sql = format!(
            "BEGIN TRANSACTION;
             LET $row = (SELECT suspended FROM ONLY type::record('project', $p));
             LET $out = IF $row != NONE AND $row.suspended != NONE AND $row.suspended.at <= $before {{
                UPDATE type::record('project', $p) SET suspended = NONE, updated_at = $now RETURN NONE;
                UPDATE suspension SET lifted_at = $now, lifted_by = $by WHERE project = $p AND lifted_at = NONE
                    RETURN NONE;
                {MILESTONE_INSERT}
                array::len(UPDATE job SET status = 'queued', run_at = $now, held_project = NONE, updated_at = $now
                    WHERE held_project = $p AND status = 'held' RETURN VALUE id)
             }} ELSE {{ NONE }};
             RETURN $out;
             COMMIT TRANSACTION;"
        );
        let v = vars! {
            "p": project, "by": by, "now": now, "before": began_by.unwrap_or(i64::MAX),
            "milestone": project_milestone(project, "project.unsuspended", data, now),
        };
        let out = self.write(|| async { self.query(&sql, v.clone()).await?.value_last() }).await?;
        self.forget_project(project);
        Ok(out.as_u64())
    }

    /// A project's suspensions, newest first (at most `limit`).
    pub async fn suspensions(&self, project: &str, limit: usize) -> Result<Vec<Suspension>, StoreError> {
        self.query(
            "SELECT reason, at, lifted_at, lifted_by FROM suspension WHERE project = $p ORDER BY at DESC LIMIT $n",
            vars! { "p": project, "n": limit },
        )
        .await?
        .all(0)
    }

    /// Moves running delivery jobs into `held` for a project, provided the project is still
    /// suspended (checked, and its row written, in the same transaction: a concurrent lift conflicts
    /// with this write instead of missing the jobs). False when the project is no longer suspended.
    pub async fn hold_jobs(&self, project: &str, ids: &[String], now: i64) -> Result<bool, StoreError> {
        let out = self
            .write(|| async {
                self.query(
                    "BEGIN TRANSACTION;
                     LET $row = (SELECT suspended FROM ONLY type::record('project', $p));
                     LET $out = IF $row != NONE AND $row.suspended != NONE {
                        UPDATE type::record('project', $p) SET suspended.held_at = $now RETURN NONE;
                        UPDATE array::map($ids, |$i| type::record('job', $i)) SET status = 'held', held_project = $p,
                            lease_owner = NONE, lease_expires = NONE, updated_at = $now
                            WHERE status = 'running' RETURN NONE;
                        true
                     } ELSE { false };
                     RETURN $out;
                     COMMIT TRANSACTION;",
                    vars! { "p": project, "ids": ids, "now": now },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(out.as_bool().unwrap_or(false))
    }
}
