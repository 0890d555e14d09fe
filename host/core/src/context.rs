//! What every capability of the core stands on, built once at start-up: the configuration, the store,
//! the clock, the keys derived from the server secret, the per-process throttles and caches, the job
//! queue's wake-up, the plugin runtime and Herald's own mail. Services take a `&Context` (and, where an
//! operation needs one, the engine it drives: the segment engine, the campaign sender, the workflow
//! engine, the group commit of sends), never the front ends' handle ([`crate::state::AppState`]), so the
//! services sit below the handle that holds them.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::config::Config;
use crate::infra::clock::SharedClock;
use crate::infra::ratelimit::RateLimiter;
use crate::store::Store;

/// What an API key resolved to.
#[derive(Debug, Clone)]
pub struct KeyEntry {
    pub project_id: String,
    pub is_secret: bool,
    pub disabled: bool,
}

/// Resolved API keys by digest, so a request does not need a database read to authenticate. Entries of
/// a project are dropped when its keys are regenerated or it is deleted.
#[derive(Default)]
pub struct KeyCache {
    map: RwLock<HashMap<String, KeyEntry>>,
    /// The database's `keys_epoch` when this cache was last known to be current.
    epoch: RwLock<Option<String>>,
}

impl KeyCache {
    pub fn get(&self, digest: &str) -> Option<KeyEntry> {
        self.map.read().unwrap_or_else(|p| p.into_inner()).get(digest).cloned()
    }
    pub fn put(&self, digest: String, entry: KeyEntry) {
        let mut m = self.map.write().unwrap_or_else(|p| p.into_inner());
        if m.len() > 50_000 {
            m.clear();
        }
        m.insert(digest, entry);
    }
    /// Empties the cache when the shared `keys_epoch` moved (another process changed keys).
    pub fn observe_epoch(&self, epoch: Option<String>) {
        let mut seen = self.epoch.write().unwrap_or_else(|p| p.into_inner());
        if *seen != epoch {
            self.map.write().unwrap_or_else(|p| p.into_inner()).clear();
            *seen = epoch;
        }
    }

    pub fn invalidate_project(&self, project_id: &str) {
        self.map.write().unwrap_or_else(|p| p.into_inner()).retain(|_, e| e.project_id != project_id);
    }
}

pub struct Context {
    pub config: Config,
    pub store: Store,
    pub clock: SharedClock,
    /// Key that signs session tokens (derived from the server secret).
    pub session_key: Vec<u8>,
    /// Key that signs the links of the public subscription pages.
    pub links_key: Vec<u8>,
    /// Key that signs open and click tracking tokens.
    pub tracking_key: Vec<u8>,
    /// Key that signs delivery notifications (`herald notifications-key` prints it).
    pub notifications_key: Vec<u8>,
    pub limiter: RateLimiter,
    /// Failed logins per account and per address (`/auth/login` slows down after repeated failures).
    pub login_failures: crate::infra::ratelimit::FailureThrottle,
    /// The operator's ceilings per project and user, with the contact counts read.
    pub quotas: Arc<crate::services::quotas::Ceilings>,
    /// Password hashing, bounded.
    pub passwords: crate::infra::security::Passwords,
    /// Account mails (sign-up, verification, password reset) and invitations, counted per client, per
    /// address and per inviter (docs/security.md#sessions).
    pub account_mail: crate::services::throttles::Throttles,
    /// OAuth providers' discovery documents and key sets.
    pub oauth_documents: crate::services::oauth_documents::Documents,
    /// Stripe, when payments are configured.
    pub stripe: Option<Arc<crate::infra::stripe::Stripe>>,
    /// Herald's own mail to its users.
    pub system_mail: Arc<crate::services::system_mail::SystemMail>,
    pub keys: KeyCache,
    /// Template syntax checks and rendering.
    pub templates: crate::domain::templating::Engine,
    /// Wakes the job worker after enqueueing urgent work (deliveries).
    pub job_wake: crate::infra::jobs::JobWake,
    /// The plugin runtime (operators, step types, transports).
    pub plugins: Arc<crate::plugins::PluginHost>,
}
