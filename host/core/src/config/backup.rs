//! Scheduled backups of the embedded database (docs/behaviour.md#backups). In herald.toml the `[backup]`
//! table, keys without the `backup_` prefix.

use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupSettings {
    /// Folder `herald serve` writes scheduled backups to, one folder each [default: no scheduled backups]
    #[arg(long, env = "HERALD_BACKUP_DIR")]
    #[serde(rename = "dir")]
    pub backup_dir: Option<PathBuf>,
    /// Hours between scheduled backups, counted from the newest backup in the folder; fractions allowed
    /// [default: 24]
    #[arg(long, env = "HERALD_BACKUP_EVERY_HOURS")]
    #[serde(rename = "every_hours")]
    pub backup_every_hours: Option<f64>,
    /// Scheduled backups kept; older ones are deleted once a new one is complete [default: 7]
    #[arg(long, env = "HERALD_BACKUP_KEEP")]
    #[serde(rename = "keep")]
    pub backup_keep: Option<u32>,
}

/// The resolved settings.
#[derive(Debug, Clone, Default)]
pub struct BackupConfig {
    /// Where scheduled backups go; None: no schedule.
    pub dir: Option<PathBuf>,
    pub every_ms: u64,
    pub keep: usize,
}

impl BackupSettings {
    /// Fills every unset field of `self` from `other`.
    pub(super) fn or(self, other: BackupSettings) -> BackupSettings {
        BackupSettings {
            backup_dir: self.backup_dir.or(other.backup_dir),
            backup_every_hours: self.backup_every_hours.or(other.backup_every_hours),
            backup_keep: self.backup_keep.or(other.backup_keep),
        }
    }

    pub(super) fn resolve(self) -> Result<BackupConfig, ConfigError> {
        let hours = self.backup_every_hours.unwrap_or(24.0);
        // At least a second apart (tests schedule in fractions of an hour), at most a year.
        if !hours.is_finite() || !(1.0 / 3600.0..=8760.0).contains(&hours) {
            return Err(ConfigError::Invalid(format!("backup_every_hours = {hours}: from 0.0003 (a second) to 8760")));
        }
        let keep = self.backup_keep.unwrap_or(7);
        if keep == 0 {
            return Err(ConfigError::Invalid("backup_keep = 0: keep at least one backup".into()));
        }
        Ok(BackupConfig {
            dir: self.backup_dir.filter(|d| !d.as_os_str().is_empty()),
            every_ms: (hours * 3_600_000.0) as u64,
            keep: keep as usize,
        })
    }
}
