//! Idempotency keys (docs/behaviour.md#idempotency): a claim row per (project, key), written before the
//! handler runs so that of two concurrent requests with one key exactly one runs.

use serde::Deserialize;

use super::{Store, StoreError};
use crate::vars;

#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Claim {
    pub key: String,
    pub request: String,
    pub status_code: Option<i64>,
    pub created_at: i64,
    pub expires_at: i64,
}

/// The result of trying to claim a key.
#[derive(Debug)]
pub enum ClaimResult {
    /// This request owns the key now.
    Claimed,
    /// The key is held by an earlier request.
    Taken(Claim),
}

impl Store {
    pub async fn claim_idempotency_key(
        &self,
        project: &str,
        key: &str,
        request: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<ClaimResult, StoreError> {
        for _ in 0..5 {
            let created = self
                .query(
                    "BEGIN TRANSACTION;
                     DELETE idempotency WHERE project = $p AND key = $k AND expires_at <= $now;
                     CREATE idempotency SET project = $p, key = $k, request = $req, created_at = $now,
                        expires_at = $now + $ttl RETURN NONE;
                     COMMIT TRANSACTION;",
                    vars! { "p": project, "k": key, "req": request, "now": now, "ttl": ttl_ms },
                )
                .await;
            match created {
                Ok(_) => return Ok(ClaimResult::Claimed),
                Err(StoreError::Conflict(_)) | Err(StoreError::Busy(_)) => {
                    let existing: Option<Claim> = self
                        .query(
                            "SELECT key, request, status_code, created_at, expires_at FROM idempotency
                             WHERE project = $p AND key = $k LIMIT 1",
                            vars! { "p": project, "k": key },
                        )
                        .await?
                        .first(0)?;
                    match existing {
                        Some(c) if c.expires_at > now => return Ok(ClaimResult::Taken(c)),
                        // Expired or freed meanwhile: try again.
                        _ => continue,
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Busy("idempotency key contention".into()))
    }

    /// Records the outcome of the request that holds the key.
    pub async fn finish_idempotency_key(&self, project: &str, key: &str, status: u16) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE idempotency SET status_code = $s WHERE project = $p AND key = $k RETURN NONE",
                vars! { "p": project, "k": key, "s": status },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Frees a key (its request ended with a 4xx).
    pub async fn release_idempotency_key(&self, project: &str, key: &str) -> Result<(), StoreError> {
        self.write(|| async {
            self.query("DELETE idempotency WHERE project = $p AND key = $k", vars! { "p": project, "k": key }).await
        })
        .await
        .map(|_| ())
    }
}
