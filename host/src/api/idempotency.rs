//! The `Idempotency-Key` header of `/v1/send` and `/v1/track` (docs/behaviour.md#idempotency): 1..255
//! printable ASCII, scoped to the project, kept for the configured time. The claim is written before the
//! work runs; any reuse answers 409 `IDEMPOTENCY_KEY_REUSED`; a 4xx outcome frees the key, 2xx and 5xx
//! keep it.

use std::future::Future;

use salvo::prelude::*;

use super::body::Reply;
use crate::api::errors::ApiError;
use crate::error::Error;
use crate::state::AppState;

/// The header's value, validated; None when absent.
pub fn key(req: &Request) -> Result<Option<String>, ApiError> {
    let Some(raw) = req.headers().get("idempotency-key") else { return Ok(None) };
    let bytes = raw.as_bytes();
    if bytes.is_empty() || bytes.len() > 255 || !bytes.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(Error::Invalid("Idempotency-Key must be 1 to 255 printable ASCII characters".into()).into());
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// Runs `work` at most once per key.
pub async fn run<F, Fut>(
    st: &AppState,
    project: &str,
    key: Option<String>,
    request: &str,
    work: F,
) -> Result<Reply, ApiError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Reply, ApiError>>,
{
    let Some(key) = key else { return work().await };
    crate::services::idempotency::claim(st, project, &key, request).await?;
    let result = work().await;
    let status = match &result {
        Ok(r) => r.status,
        Err(e) => crate::api::errors::status(e),
    };
    crate::services::idempotency::finish(st, project, &key, status.as_u16()).await;
    result
}
