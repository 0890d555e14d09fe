//! The HTTP front end's transport: the client address behind trusted proxies, and HTTPS without one. In herald.toml the `[http]` table.

use clap::Args;
use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {}

/// The resolved settings.
#[derive(Debug, Clone, Default)]
pub struct HttpConfig {}

impl HttpSettings {
    /// Fills every unset field of `self` from `other`.
    pub(super) fn or(self, _other: HttpSettings) -> HttpSettings {
        HttpSettings {}
    }

    pub(super) fn resolve(self) -> Result<HttpConfig, ConfigError> {
        Ok(HttpConfig {})
    }
}
