//! The plugin's configuration and secrets, set by the operator of the Herald server (WIT `config`).
//!
//! Values come from the manifest's `[config]` table or the operator's override; secrets are only
//! those the operator granted to this plugin (manifest `capabilities.secrets`). In a native build
//! both come from the [`MockHost`](crate::mock::MockHost).

use crate::PluginError;

/// A configuration value.
pub fn get(key: &str) -> Option<String> {
    crate::backend::config_get(key)
}

/// A secret; names not granted read as `None`.
pub fn secret(name: &str) -> Option<String> {
    crate::backend::config_secret(name)
}

/// A configuration value that must be set and not blank, or a non-retryable `not_configured` error
/// naming it.
pub fn require(key: &str) -> Result<String, PluginError> {
    match get(key) {
        Some(v) if !v.trim().is_empty() => Ok(v),
        _ => Err(PluginError::permanent("not_configured", format!("the plugin's config value `{key}` is not set"))),
    }
}

/// A secret that must be granted and not blank, or a non-retryable `not_configured` error naming it.
pub fn require_secret(name: &str) -> Result<String, PluginError> {
    match secret(name) {
        Some(v) if !v.trim().is_empty() => Ok(v),
        _ => Err(PluginError::permanent("not_configured", format!("the plugin's secret `{name}` is not set"))),
    }
}
