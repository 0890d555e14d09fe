//! Upload rows (docs/behaviour.md#uploads): which projects stored which image file, and the bytes each
//! project's uploads take. A file is content-addressed and shared; its rows are `upload:[project, name]`
//! (one project's rows are one record-id range), the project's total is `upload_usage:<project>`,
//! written in the same transactions. Purging a project deletes its rows and leaves `upload_sweep` rows
//! naming the files to check; a file that was on the disk before any row named it is `upload_kept`.

use serde_json::Value;

use super::{Store, StoreError};
use crate::vars;

/// What recording an upload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// A new row: `used` bytes are now stored by the project, this upload's included.
    New { used: u64 },
    /// The project had already stored this file: nothing changed.
    Again,
    /// Not written: `used` bytes are stored and this upload would take the project past its quota.
    OverQuota { used: u64 },
}

/// A purge step (see [`Store::purge_project_batch`]): up to `$n` upload rows of the project `$p`
/// deleted, their bytes taken off its total and a sweep row left for each file, in one transaction.
pub(super) const PURGE_UPLOADS: &str = "LET $u = (SELECT id, name, size FROM upload:[$p, NONE]..[$p, {}] LIMIT $n);
     LET $r = $u.id;
     IF array::len($r) > 0 {
        FOR $x IN $u {
            UPSERT type::record('upload_sweep', [$p, $x.name]) SET project = $p, name = $x.name RETURN NONE;
        };
        UPDATE type::record('upload_usage', $p) SET bytes -= math::sum($u.size) RETURN NONE;
        DELETE $r RETURN NONE;
     };";

/// A purge step after [`PURGE_UPLOADS`]: the project's total once it has no upload row left (a reset
/// keeps the project, and an upload made meanwhile keeps its total).
pub(super) const PURGE_UPLOAD_USAGE: &str =
    "LET $r = IF array::len((SELECT VALUE id FROM upload:[$p, NONE]..[$p, {}] LIMIT 1)) == 0 {
        (SELECT VALUE id FROM type::record('upload_usage', $p))
     } ELSE { [] };
     DELETE $r RETURN NONE;";

impl Store {
    /// Records that `project` stored the file `name` of `size` bytes, unless it had already (the same
    /// image twice counts once). A new row adds its size to the project's total in the same
    /// transaction; when that would pass `quota` bytes (0: no quota) nothing is written. `on_disk`: the
    /// file was there before; when no row names it either, it was stored before uploads were recorded
    /// and is marked kept for good.
    pub async fn record_upload(
        &self,
        project: &str,
        name: &str,
        size: u64,
        quota: u64,
        on_disk: bool,
        now: i64,
    ) -> Result<Recorded, StoreError> {
        let sql = "{
            IF record::exists(type::record('upload', [$p, $name])) { RETURN { outcome: 'again' } };
            LET $used = (SELECT VALUE bytes FROM ONLY type::record('upload_usage', $p)) ?? 0;
            IF $quota > 0 AND $used + $size > $quota { RETURN { outcome: 'over', used: $used } };
            IF $on_disk AND array::len((SELECT VALUE id FROM upload WHERE name = $name LIMIT 1)) == 0 {
                UPSERT type::record('upload_kept', $name) SET created_at = $now RETURN NONE;
            };
            CREATE type::record('upload', [$p, $name])
                SET project = $p, name = $name, size = $size, created_at = $now RETURN NONE;
            UPSERT type::record('upload_usage', $p) SET project = $p, bytes = $used + $size RETURN NONE;
            RETURN { outcome: 'new', used: $used + $size };
        }";
        let v = vars! { "p": project, "name": name, "size": size, "quota": quota, "on_disk": on_disk, "now": now };
        let mut tries = 0;
        let answer = loop {
            match self.write(|| async { self.query(sql, v.clone()).await?.value_last() }).await {
                // Two uploads of one image by one project at once: the one that lost finds the row.
                Err(StoreError::Conflict(_)) if tries < 3 => tries += 1,
                other => break other?,
            }
        };
        let used = answer["used"].as_u64().unwrap_or(0);
        match answer["outcome"].as_str() {
            Some("new") => Ok(Recorded::New { used }),
            Some("again") => Ok(Recorded::Again),
            Some("over") => Ok(Recorded::OverQuota { used }),
            _ => Err(StoreError::Decode(format!("recording an upload answered {answer}"))),
        }
    }

    /// The bytes a project's upload rows take.
    pub async fn upload_usage(&self, project: &str) -> Result<u64, StoreError> {
        let v = self
            .query(
                "RETURN (SELECT VALUE bytes FROM ONLY type::record('upload_usage', $p)) ?? 0",
                vars! { "p": project },
            )
            .await?
            .value(0)?;
        Ok(v.as_u64().unwrap_or(0))
    }

    /// Whether the file `name` must stay: a row of any project names it (files are shared across
    /// projects, so this one read is not scoped to a project), or it is kept for good.
    pub async fn upload_file_kept(&self, name: &str) -> Result<bool, StoreError> {
        let v = self
            .query(
                "RETURN array::len((SELECT VALUE id FROM upload WHERE name = $name LIMIT 1)) > 0
                    OR record::exists(type::record('upload_kept', $name))",
                vars! { "name": name },
            )
            .await?
            .value(0)?;
        Ok(v.as_bool().unwrap_or(true))
    }

    /// Up to `n` files a purge of `project` left to check.
    pub async fn upload_sweeps(&self, project: &str, n: usize) -> Result<Vec<String>, StoreError> {
        let rows: Vec<Value> = self
            .query("SELECT VALUE name FROM upload_sweep:[$p, NONE]..[$p, {}] LIMIT $n", vars! { "p": project, "n": n })
            .await?
            .all(0)?;
        Ok(rows.into_iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
    }

    /// Done with checking the file `name` after a purge of `project`.
    pub async fn delete_upload_sweep(&self, project: &str, name: &str) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "DELETE type::record('upload_sweep', [$p, $name]) RETURN NONE",
                vars! { "p": project, "name": name },
            )
            .await
        })
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store() -> Store {
        Store::connect(&crate::config::Config::for_tests()).await.expect("store")
    }

    #[tokio::test]
    async fn uploads_count_once_per_project_within_its_quota_and_purge_leaves_sweeps() {
        let s = store().await;
        assert_eq!(s.record_upload("p", "a.png", 40, 100, false, 1).await.unwrap(), Recorded::New { used: 40 });
        assert_eq!(s.record_upload("p", "a.png", 40, 100, false, 2).await.unwrap(), Recorded::Again);
        assert_eq!(s.record_upload("p", "b.png", 61, 100, false, 3).await.unwrap(), Recorded::OverQuota { used: 40 });
        assert_eq!(s.record_upload("p", "b.png", 60, 100, false, 4).await.unwrap(), Recorded::New { used: 100 });
        assert_eq!(s.record_upload("q", "a.png", 40, 100, false, 5).await.unwrap(), Recorded::New { used: 40 });
        assert_eq!(s.record_upload("q", "c.png", 1000, 0, true, 6).await.unwrap(), Recorded::New { used: 1040 });
        assert_eq!((s.upload_usage("p").await.unwrap(), s.upload_usage("q").await.unwrap()), (100, 1040));
        assert!(s.upload_file_kept("a.png").await.unwrap());
        assert!(s.upload_file_kept("c.png").await.unwrap(), "on the disk before any row named it");
        assert!(!s.upload_file_kept("d.png").await.unwrap());

        // One row at a time, then the total.
        while s.purge_project_batch("p", 1, false, 10).await.unwrap() > 0 {}
        assert_eq!(s.upload_usage("p").await.unwrap(), 0);
        let mut swept = s.upload_sweeps("p", 10).await.unwrap();
        swept.sort();
        assert_eq!(swept, ["a.png", "b.png"]);
        assert!(s.upload_file_kept("a.png").await.unwrap(), "q still names it");
        assert!(!s.upload_file_kept("b.png").await.unwrap());
        assert_eq!(s.upload_usage("q").await.unwrap(), 1040, "the other project keeps its rows");
        s.delete_upload_sweep("p", "a.png").await.unwrap();
        assert_eq!(s.upload_sweeps("p", 10).await.unwrap(), ["b.png"]);
        let left = s.query("SELECT VALUE id FROM upload_usage", vars! {}).await.unwrap().all::<Value>(0).unwrap();
        assert_eq!(left.len(), 1, "only q's total: {left:?}");
    }
}
