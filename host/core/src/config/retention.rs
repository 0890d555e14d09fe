//! How long Herald keeps what it stores (docs/behaviour.md#retention). In herald.toml the `[retention]` table.

use clap::Args;
use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {}

/// The resolved settings.
#[derive(Debug, Clone, Default)]
pub struct RetentionConfig {}

impl RetentionSettings {
    /// Fills every unset field of `self` from `other`.
    pub(super) fn or(self, _other: RetentionSettings) -> RetentionSettings {
        RetentionSettings {}
    }

    pub(super) fn resolve(self) -> Result<RetentionConfig, ConfigError> {
        Ok(RetentionConfig {})
    }
}
