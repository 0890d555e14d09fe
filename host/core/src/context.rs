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
    /// Moves (under the map's lock) whenever entries are dropped, so that a key read from the database
    /// before the drop is not cached after it ([`KeyCache::put`]).
    generation: std::sync::atomic::AtomicU64,
}

impl KeyCache {
    pub fn get(&self, digest: &str) -> Option<KeyEntry> {
        self.map.read().unwrap_or_else(|p| p.into_inner()).get(digest).cloned()
    }
    /// The cache's generation: read it before looking a key up in the database and give it to
    /// [`KeyCache::put`].
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Caches a key read from the database while the cache was at `generation`; nothing when entries
    /// were dropped since (the read may predate a regeneration another process made).
    pub fn put(&self, digest: String, entry: KeyEntry, generation: u64) {
        let mut m = self.map.write().unwrap_or_else(|p| p.into_inner());
        if self.generation() != generation {
            return;
        }
        if m.len() > 50_000 {
            m.clear();
        }
        m.insert(digest, entry);
    }
    /// Empties the cache when the shared `keys_epoch` moved (another process changed keys).
    pub fn observe_epoch(&self, epoch: Option<String>) {
        let mut seen = self.epoch.write().unwrap_or_else(|p| p.into_inner());
        if *seen != epoch {
            let mut m = self.map.write().unwrap_or_else(|p| p.into_inner());
            self.generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            m.clear();
            *seen = epoch;
        }
    }

    pub fn invalidate_project(&self, project_id: &str) {
        let mut m = self.map.write().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        m.retain(|_, e| e.project_id != project_id);
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
    pub login_failures: crate::services::throttles::Throttle,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> KeyEntry {
        KeyEntry { project_id: "p".into(), is_secret: true, disabled: false }
    }

    #[test]
    fn a_key_read_before_the_cache_was_cleared_is_not_cached_after() {
        let cache = KeyCache::default();
        cache.observe_epoch(Some("1".into()));
        // A request reads the key from the database...
        let generation = cache.generation();
        // ...another process regenerates the keys meanwhile, and this one notices...
        cache.observe_epoch(Some("2".into()));
        // ...before the request caches what it read: it must not be cached.
        cache.put("digest".into(), entry(), generation);
        assert!(cache.get("digest").is_none());
        // The same after a project's keys were dropped here.
        let generation = cache.generation();
        cache.invalidate_project("p");
        cache.put("digest".into(), entry(), generation);
        assert!(cache.get("digest").is_none());
        // A read with nothing dropped meanwhile is cached.
        let generation = cache.generation();
        cache.put("digest".into(), entry(), generation);
        assert!(cache.get("digest").is_some());
    }
}
