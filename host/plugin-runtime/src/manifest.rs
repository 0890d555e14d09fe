//! A plugin's manifest (`<name>.toml` beside `<name>.wasm`) and the grants that follow from it and the
//! operator's `[plugin.<name>]` settings.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::types::Kind;

/// What the operator of the server grants one plugin, beyond (or instead of) what its manifest asks for.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PluginGrant {
    /// Host patterns the plugin may call; replaces the manifest's list when given.
    pub http: Option<Vec<String>>,
    /// Lets the plugin reach private, loopback and link-local addresses (off by default).
    #[serde(default)]
    pub allow_private: bool,
    /// Secret values; a secret is visible only when the manifest names it too.
    #[serde(default)]
    pub secrets: std::collections::BTreeMap<String, String>,
    /// Config values, over the manifest's defaults.
    #[serde(default)]
    pub config: std::collections::BTreeMap<String, String>,
    pub timeout_ms: Option<u64>,
    pub memory_mb: Option<u64>,
    pub fuel: Option<u64>,
    /// Set to false to keep a plugin in the folder from loading.
    pub enabled: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub name: String,
    /// the `herald:plugin` version the plugin was built against
    pub abi: String,
    pub kind: String,
    #[serde(default)]
    pub capabilities: Capabilities,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    #[serde(default)]
    pub http: Vec<String>,
    #[serde(default)]
    pub secrets: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub timeout_ms: Option<u64>,
    pub memory_mb: Option<u64>,
    pub fuel: Option<u64>,
}

impl Manifest {
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let m: Manifest = toml::from_str(text).map_err(|e| format!("invalid manifest: {e}"))?;
        if !valid_name(&m.name) {
            return Err(format!("invalid manifest: name {:?} must be lowercase letters, digits and dashes", m.name));
        }
        if Kind::parse(&m.kind).is_none() {
            return Err(format!("invalid manifest: kind {:?} must be operator, step or transport", m.kind));
        }
        Ok(m)
    }
}

pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
}

/// Default limits per call.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_MEMORY_MB: u64 = 64;
pub const MAX_MEMORY_MB: u64 = 256;
/// Fuel per operator call (a unit is roughly one wasm instruction).
pub const DEFAULT_FUEL: u64 = 2_000_000_000;

/// What one plugin may do, resolved from its manifest and the operator's grant.
#[derive(Debug, Clone)]
pub struct Grants {
    pub http_hosts: Vec<String>,
    pub allow_private: bool,
    pub secrets: BTreeMap<String, String>,
    pub config: BTreeMap<String, String>,
    pub timeout: Duration,
    pub memory_bytes: usize,
    pub fuel: u64,
}

impl Grants {
    /// Secrets come from the grant's `secrets` table or from `HERALD_PLUGIN_<NAME>_<SECRET>` (upper case,
    /// dashes as underscores); only names the manifest lists are visible.
    pub fn resolve(manifest: Option<&Manifest>, name: &str, grant: Option<&PluginGrant>) -> Grants {
        let empty = PluginGrant::default();
        let grant = grant.unwrap_or(&empty);
        let caps = manifest.map(|m| m.capabilities.clone()).unwrap_or_default();
        let limits = manifest.map(|m| m.limits.clone()).unwrap_or_default();
        let mut config = manifest.map(|m| m.config.clone()).unwrap_or_default();
        config.extend(grant.config.clone());
        let mut secrets = BTreeMap::new();
        for s in &caps.secrets {
            let env = format!("HERALD_PLUGIN_{}_{}", name, s).to_ascii_uppercase().replace('-', "_");
            if let Some(v) = grant.secrets.get(s).cloned().or_else(|| std::env::var(env).ok()) {
                secrets.insert(s.clone(), v);
            }
        }
        let memory_mb = grant.memory_mb.or(limits.memory_mb).unwrap_or(DEFAULT_MEMORY_MB).clamp(1, MAX_MEMORY_MB);
        Grants {
            http_hosts: grant.http.clone().unwrap_or(caps.http),
            allow_private: grant.allow_private,
            secrets,
            config,
            timeout: Duration::from_millis(
                grant.timeout_ms.or(limits.timeout_ms).unwrap_or(DEFAULT_TIMEOUT_MS).clamp(1, 300_000),
            ),
            memory_bytes: (memory_mb as usize) << 20,
            fuel: grant.fuel.or(limits.fuel).unwrap_or(DEFAULT_FUEL).max(1),
        }
    }
}
