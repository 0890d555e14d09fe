//! Sender domains. Every query of the API filters by project; the system-wide listing serves the
//! recurring verification job.

use serde::{Deserialize, Serialize};

use super::{Store, StoreError};
use crate::domain::status::DomainStatus;
use crate::vars;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DomainRow {
    pub id: String,
    pub project: String,
    pub name: String,
    pub selector: String,
    pub dkim_public: String,
    pub dkim_private: String,
    pub status: DomainStatus,
    pub trusted: bool,
    pub records: String,
    pub verified_at: Option<i64>,
    pub last_checked_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// Whether the domain takes mail on port 25 (its project turned receiving on).
    #[serde(default)]
    pub inbound: bool,
}

const FIELDS: &str = "record::id(id) AS id, project, name, selector, dkim_public, dkim_private, status, trusted, \
     records, verified_at, last_checked_at, created_at, updated_at, inbound ?? false AS inbound";

impl Store {
    /// Inserts a domain; Conflict when this project already has the name, or (verified ones: trusted by
    /// the operator) when another project claimed it.
    pub async fn insert_domain(&self, d: &DomainRow) -> Result<(), StoreError> {
        let doc = super::jobs::strip_nulls(vars! {
            "project": d.project, "name": d.name, "selector": d.selector, "dkim_public": d.dkim_public,
            "dkim_private": d.dkim_private, "status": d.status, "trusted": d.trusted, "records": d.records,
            "verified_at": d.verified_at, "last_checked_at": d.last_checked_at,
            "created_at": d.created_at, "updated_at": d.updated_at, "inbound": d.inbound,
        });
        let claim = if d.status == DomainStatus::Verified {
            "CREATE type::record('domain_claim', $name) SET domain = $id, project = $p RETURN NONE;"
        } else {
            ""
        };
        self.write(|| async {
            self.query(
                &format!(
                    "BEGIN TRANSACTION;
                     {claim}
                     CREATE type::record('domain', $id) CONTENT $doc RETURN NONE;
                     COMMIT TRANSACTION;"
                ),
                vars! { "id": d.id, "doc": doc.clone(), "name": d.name, "p": d.project },
            )
            .await
        })
        .await?;
        self.forget_domains();
        Ok(())
    }

    /// The project that claimed a domain name (its verified domain), if any.
    pub async fn domain_claimed_by(&self, name: &str) -> Result<Option<String>, StoreError> {
        let v = self
            .query("RETURN (SELECT VALUE project FROM ONLY type::record('domain_claim', $n))", vars! { "n": name })
            .await?
            .value(0)?;
        Ok(v.as_str().map(str::to_string))
    }

    pub async fn domain(&self, project: &str, id: &str) -> Result<Option<DomainRow>, StoreError> {
        self.query(
            &format!("SELECT {FIELDS} FROM domain WHERE id = type::record('domain', $id) AND project = $p"),
            vars! { "p": project, "id": id },
        )
        .await?
        .first(0)
    }

    /// Every project's domain of a name (at most one of them verified), for the sender check.
    pub async fn domains_named(&self, name: &str) -> Result<Vec<DomainRow>, StoreError> {
        self.query(&format!("SELECT {FIELDS} FROM domain WHERE name = $n"), vars! { "n": name }).await?.all(0)
    }

    /// The verified domain of a name: the one that holds the name's claim, while it is verified.
    pub async fn verified_domain(&self, name: &str) -> Result<Option<DomainRow>, StoreError> {
        self.query(
            &format!(
                "LET $c = (SELECT VALUE domain FROM ONLY type::record('domain_claim', $n));
                 IF $c = NONE {{ [] }} ELSE {{ SELECT {FIELDS} FROM type::record('domain', $c) WHERE status = 'VERIFIED' }};"
            ),
            vars! { "n": name },
        )
        .await?
        .first(1)
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

    /// Stores a check's outcome. A domain becomes VERIFIED only together with its name's claim: when
    /// another project's domain holds the claim, it stays PENDING and this returns false.
    pub async fn save_domain_check(
        &self,
        d: &DomainRow,
        status: DomainStatus,
        records: &str,
        verified_at: Option<i64>,
        now: i64,
    ) -> Result<bool, StoreError> {
        let v = self
            .write(|| async {
                // option<int> takes NONE, not NULL: pick the statement for each case.
                let sql = if verified_at.is_some() {
                    "{
                        LET $c = (SELECT VALUE domain FROM ONLY type::record('domain_claim', $n));
                        IF $c != NONE AND $c != $id {
                            UPDATE type::record('domain', $id) SET status = 'PENDING', records = $r,
                                verified_at = NONE, last_checked_at = $now, updated_at = $now RETURN NONE;
                            RETURN false;
                        };
                        UPSERT type::record('domain_claim', $n) SET domain = $id, project = $p RETURN NONE;
                        UPDATE type::record('domain', $id) SET status = $s, records = $r, verified_at = $v,
                            last_checked_at = $now, updated_at = $now RETURN NONE;
                        RETURN true;
                    }"
                } else {
                    "UPDATE type::record('domain', $id) SET status = $s, records = $r, verified_at = NONE,
                        last_checked_at = $now, updated_at = $now RETURN NONE; RETURN true;"
                };
                self.query(
                    sql,
                    vars! { "id": d.id, "n": d.name, "p": d.project, "s": status, "r": records, "v": verified_at,
                    "now": now },
                )
                .await?
                .value_last()
            })
            .await?;
        self.forget_domains();
        Ok(v.as_bool().unwrap_or(false))
    }

    /// Deletes pending domains created before `before` that never claimed their name (a name nobody
    /// proves control of does not stay reserved).
    pub async fn expire_pending_domains(&self, before: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "LET $claimed = (SELECT VALUE domain FROM domain_claim);
                 DELETE domain WHERE status = 'PENDING' AND trusted = false AND created_at < $before
                    AND record::id(id) NOTINSIDE $claimed RETURN NONE;",
                vars! { "before": before },
            )
            .await
        })
        .await?;
        self.forget_domains();
        Ok(())
    }

    /// Turns receiving on or off for a project's domain; None when the project has no such domain.
    pub async fn set_domain_inbound(
        &self,
        project: &str,
        id: &str,
        on: bool,
        now: i64,
    ) -> Result<Option<DomainRow>, StoreError> {
        let found = self
            .write(|| async {
                self.query(
                    "UPDATE type::record('domain', $id) SET inbound = $on, updated_at = $now WHERE project = $p \
                     RETURN NONE",
                    vars! { "id": id, "p": project, "on": on, "now": now },
                )
                .await
            })
            .await;
        found?;
        self.forget_domains();
        self.domain(project, id).await
    }

    /// Deletes a project's domain, and its name's claim when it held it.
    pub async fn delete_domain(&self, project: &str, id: &str) -> Result<bool, StoreError> {
        let deleted = self.delete_scoped("domain", project, id).await?;
        if deleted {
            self.write(|| async {
                self.query(
                    "DELETE domain_claim WHERE domain = $id AND project = $p RETURN NONE",
                    vars! { "id": id, "p": project },
                )
                .await
            })
            .await?;
        }
        self.forget_domains();
        Ok(deleted)
    }
}
