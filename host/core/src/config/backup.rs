//! Scheduled backups of the embedded database (docs/behaviour.md#backups). In herald.toml the `[backup]` table.

use clap::Args;
use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupSettings {}

/// The resolved settings.
#[derive(Debug, Clone, Default)]
pub struct BackupConfig {}

impl BackupSettings {
    /// Fills every unset field of `self` from `other`.
    pub(super) fn or(self, _other: BackupSettings) -> BackupSettings {
        BackupSettings {}
    }

    pub(super) fn resolve(self) -> Result<BackupConfig, ConfigError> {
        Ok(BackupConfig {})
    }
}
