//! Idempotency keys of `/v1/send` and `/v1/track` (docs/behaviour.md#idempotency): a key is claimed
//! before the work runs, so of two requests with one key exactly one runs; a 4xx outcome frees it, 2xx
//! and 5xx keep it for the configured time.
//!
//! Must not import: salvo, surrealdb.

use crate::context::Context;
use crate::error::Error;
use crate::store::idempotency::ClaimResult;

/// Claims `key` for `request` (`"POST /v1/send"`); 409 `IDEMPOTENCY_KEY_REUSED` with the first request's
/// details when the key is taken (its status is null while the first request still runs).
pub async fn claim(st: &Context, project: &str, key: &str, request: &str) -> Result<(), Error> {
    let ttl = st.config.idempotency_ttl_ms;
    match st.store.claim_idempotency_key(project, key, request, st.clock.now_ms(), ttl).await? {
        ClaimResult::Taken(c) => Err(Error::IdempotencyKeyReused {
            key: key.to_string(),
            request: c.request,
            at_ms: c.created_at,
            status: c.status_code,
        }),
        ClaimResult::Claimed => Ok(()),
    }
}

/// Records the outcome of the work a claimed key ran: a client error (4xx) frees the key, anything else
/// keeps it with its status. A failure to record is logged, not answered: the work is done.
pub async fn finish(st: &Context, project: &str, key: &str, status: u16) {
    let recorded = if (400..500).contains(&status) {
        st.store.release_idempotency_key(project, key).await
    } else {
        st.store.finish_idempotency_key(project, key, status).await
    };
    if let Err(e) = recorded {
        tracing::warn!(error = %e, "cannot record the idempotency key outcome");
    }
}
