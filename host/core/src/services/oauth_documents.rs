//! What the OAuth flow fetches from providers: its HTTP client, and the providers' discovery documents
//! and key sets, cached per process (docs/behaviour.md#oauth-sign-in).
//!
//! Must not import: salvo, surrealdb.

use std::time::Duration;

use serde_json::Value;

use crate::error::{Code, Error};

/// The HTTP client of the flow: no redirects followed (a provider cannot bounce Herald elsewhere), 10 s.
pub(crate) fn http() -> Result<reqwest::Client, Error> {
    static HTTP: std::sync::OnceLock<Result<reqwest::Client, String>> = std::sync::OnceLock::new();
    HTTP.get_or_init(|| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .user_agent(concat!("Herald/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| e.to_string())
    })
    .clone()
    .map_err(Error::Internal)
}

pub(crate) fn failed(message: impl Into<String>) -> Error {
    Error::refused(Code::OauthFailed, message)
}

/// Discovery documents and key sets by URL, with when they were fetched (per process).
#[derive(Default)]
pub struct Documents(std::sync::Mutex<std::collections::HashMap<String, (i64, Value)>>);

impl Documents {
    /// The JSON at `url`, from the cache when it was fetched less than `max_age_ms` before `now`.
    pub(crate) async fn get(&self, now: i64, url: &str, max_age_ms: i64) -> Result<Value, Error> {
        let cached = self.0.lock().unwrap_or_else(|p| p.into_inner()).get(url).cloned();
        if let Some((at, doc)) = cached
            && (0..max_age_ms).contains(&(now - at))
        {
            return Ok(doc);
        }
        let res = http()?.get(url).send().await.map_err(|e| failed(format!("{url} did not answer: {e}")))?;
        if !res.status().is_success() {
            return Err(failed(format!("{url} answered {}", res.status())));
        }
        let doc: Value = res.json().await.map_err(|e| failed(format!("{url} is not JSON: {e}")))?;
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 64 {
            map.clear();
        }
        map.insert(url.to_string(), (now, doc.clone()));
        Ok(doc)
    }
}
