//! Sender domains. Every query of the API filters by project; the system-wide listing serves the
//! recurring verification job.

use serde::{Deserialize, Serialize};

use super::{Store, StoreError};
use crate::vars;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DomainRow {
    pub id: String,
    pub project: String,
    pub name: String,
    pub selector: String,
    pub dkim_public: String,
    pub dkim_private: String,
    pub status: String,
    pub trusted: bool,
    pub records: String,
    pub verified_at: Option<i64>,
    pub last_checked_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

const FIELDS: &str = "record::id(id) AS id, project, name, selector, dkim_public, dkim_private, status, trusted, \
     records, verified_at, last_checked_at, created_at, updated_at";

impl Store {
    /// Inserts a domain; Conflict when any project already has this name.
    pub async fn insert_domain(&self, d: &DomainRow) -> Result<(), StoreError> {
        let doc = super::jobs::strip_nulls(vars! {
            "project": d.project, "name": d.name, "selector": d.selector, "dkim_public": d.dkim_public,
            "dkim_private": d.dkim_private, "status": d.status, "trusted": d.trusted, "records": d.records,
            "verified_at": d.verified_at, "last_checked_at": d.last_checked_at,
            "created_at": d.created_at, "updated_at": d.updated_at,
        });
        self.write(|| async {
            self.query(
                "CREATE type::record('domain', $id) CONTENT $doc RETURN NONE",
                vars! { "id": d.id, "doc": doc.clone() },
            )
            .await
        })
        .await?;
        self.forget_domains();
        Ok(())
    }

    pub async fn domain(&self, project: &str, id: &str) -> Result<Option<DomainRow>, StoreError> {
        self.query(
            &format!("SELECT {FIELDS} FROM domain WHERE id = type::record('domain', $id) AND project = $p"),
            vars! { "p": project, "id": id },
        )
        .await?
        .first(0)
    }

    /// A domain by name, whichever project holds it (for the sender check and conflicts).
    pub async fn domain_by_name(&self, name: &str) -> Result<Option<DomainRow>, StoreError> {
        self.query(&format!("SELECT {FIELDS} FROM domain WHERE name = $n LIMIT 1"), vars! { "n": name }).await?.first(0)
    }

    pub async fn domains_of_project(&self, project: &str) -> Result<Vec<DomainRow>, StoreError> {
        self.query(
            &format!("SELECT {FIELDS} FROM domain WHERE project = $p ORDER BY created_at DESC"),
            vars! { "p": project },
        )
        .await?
        .all(0)
    }

    /// Every domain not marked trusted (the recurring check).
    pub async fn domains_to_check(&self) -> Result<Vec<DomainRow>, StoreError> {
        self.query(&format!("SELECT {FIELDS} FROM domain WHERE trusted = false"), vars! {}).await?.all(0)
    }

    pub async fn save_domain_check(
        &self,
        id: &str,
        status: &str,
        records: &str,
        verified_at: Option<i64>,
        now: i64,
    ) -> Result<(), StoreError> {
        self.write(|| async {
            // option<int> takes NONE, not NULL: pick the statement for each case.
            let sql = if verified_at.is_some() {
                "UPDATE type::record('domain', $id) SET status = $s, records = $r, verified_at = $v,
                    last_checked_at = $now, updated_at = $now RETURN NONE"
            } else {
                "UPDATE type::record('domain', $id) SET status = $s, records = $r, verified_at = NONE,
                    last_checked_at = $now, updated_at = $now RETURN NONE"
            };
            self.query(sql, vars! { "id": id, "s": status, "r": records, "v": verified_at, "now": now }).await
        })
        .await?;
        self.forget_domains();
        Ok(())
    }

    pub async fn delete_domain(&self, project: &str, id: &str) -> Result<bool, StoreError> {
        let deleted = self.delete_scoped("domain", project, id).await?;
        self.forget_domains();
        Ok(deleted)
    }
}
