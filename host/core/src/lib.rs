//! Herald's core: its rules and everything they stand on, with no front end. `domain` holds pure rules,
//! `store` is the only module that speaks to the database, `services` holds one module per capability
//! (its rules, transactions and jobs; each operation has one entry point there), `infra` what every
//! capability builds on (clock, job queue, group commit, metrics, security, DNS, DKIM). [`Core::build`]
//! assembles the services once at start-up; every front end (the HTTP server, the CLI) is given the
//! same [`state::AppState`] and calls the same entry points (ARCHITECTURE.md).

pub mod config;
pub mod context;
pub mod domain;
pub mod error;
pub mod infra;
pub mod services;
pub mod state;
pub mod store;

#[cfg(test)]
mod properties;

/// The plugin runtime (its own crate, `host/plugin-runtime`), where the host has always found it.
pub use herald_plugin_runtime as plugins;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::infra::{dkim, dns, jobs, ratelimit, security};
use crate::services::{accept, campaigns, compose, delivery, events, ingest, segments, sending_domains, workflows};

use crate::config::Config;
use crate::context::{Context, KeyCache};
use crate::infra::clock::{SharedClock, SystemClock};
use crate::infra::jobs::{Registry, Worker, WorkerOptions};
use crate::state::AppState;
use crate::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot listen: {0}")]
    Listen(std::io::Error),
    #[error("DNS: {0}")]
    Dns(String),
    #[error("transport: {0}")]
    Transport(String),
    #[error("plugins: {0}")]
    Plugins(String),
    #[error("server secret: {0}")]
    Secret(String),
    #[error("the spool of received messages, {0}: {1}")]
    Spool(String, std::io::Error),
}

/// The server secret when `HERALD_SECRET` is not set. On the embedded engine it lives in a file of its
/// own beside the data directory (`<data dir>.secret`, mode 0600), generated on first start, so a copy of
/// the database alone (a backup, a leaked directory) cannot open DKIM keys or forge tokens; back the file
/// up apart from the data. A secret that older versions kept in the database moves into the file (and out
/// of the database) on start. `mem://` gets a fresh secret per process; a SurrealDB server shared by
/// several processes needs `HERALD_SECRET`.
async fn server_secret(db: &str, store: &store::Store) -> Result<String, BuildError> {
    if db.starts_with("mem://") {
        return Ok(store.setting("secret").await?.unwrap_or_else(security::generate_secret));
    }
    let Some(dir) = db.strip_prefix("surrealkv://") else {
        return Err(BuildError::Secret(
            "set HERALD_SECRET: processes sharing a database server must share one secret".into(),
        ));
    };
    let file = std::path::PathBuf::from(format!("{}.secret", dir.trim_end_matches('/')));
    let stored = store.setting("secret").await?;
    let secret = match std::fs::read_to_string(&file) {
        Ok(s) if !s.trim().is_empty() => s.trim().to_string(),
        Ok(_) => return Err(BuildError::Secret(format!("{} is empty", file.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let secret = stored.clone().unwrap_or_else(security::generate_secret);
            write_private(&file, &secret).map_err(|e| BuildError::Secret(format!("{}: {e}", file.display())))?;
            secret
        }
        Err(e) => return Err(BuildError::Secret(format!("{}: {e}", file.display()))),
    };
    if stored.is_some() {
        store.delete_setting("secret").await?;
    }
    Ok(secret)
}

/// Writes a file only its owner can read (created with mode 0600, never widened).
fn write_private(path: &std::path::Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(path)?;
    f.write_all(contents.as_bytes())?;
    f.sync_all()
}

/// The recurring job that re-checks every sender domain's DNS.
pub const DOMAIN_CHECK_JOB: &str = "domains.check";

/// The assembled services and their job worker, not yet running: what every front end is given.
pub struct Core {
    pub state: Arc<AppState>,
    pub worker: Worker,
}

impl Core {
    /// Builds the services with the system clock.
    pub async fn build(config: Config) -> Result<Core, BuildError> {
        Self::build_with(config, Arc::new(SystemClock), jobs::builtin_registry()).await
    }

    /// Builds the services with a given clock and job handlers (tests use a manual clock).
    pub async fn build_with(config: Config, clock: SharedClock, registry: Registry) -> Result<Core, BuildError> {
        let store = Store::connect(&config).await?;
        Self::from_store(config, store, clock, registry).await
    }

    /// Builds the services on an already connected (and migrated) store.
    pub async fn from_store(
        config: Config,
        store: Store,
        clock: SharedClock,
        mut registry: Registry,
    ) -> Result<Core, BuildError> {
        let bus = Arc::new(events::EventBus::default());
        bus.register(&mut registry, config.event_dispatch_ms);
        let secret = match &config.secret {
            Some(s) => s.clone(),
            None => server_secret(&config.db, &store).await?,
        };
        let dns = dns::Dns::new(&config.dns_servers, Duration::from_millis(config.dns_timeout_ms))
            .map_err(BuildError::Dns)?;
        // Replies' senders are checked through the same resolver (SPF, DKIM, DMARC).
        let senders = Some((mail_auth::MessageAuthenticator(dns.resolver().clone()), config.smtp.hostname.clone()));
        let domains = Arc::new(sending_domains::Domains {
            dns,
            storage_key: dkim::storage_key(&secret),
            settings: domain::domains::RecordSettings {
                selector: config.dkim_selector.clone(),
                spf_mechanism: config.spf_mechanism.clone(),
                return_path_host: config.return_path_host.clone(),
            },
        });
        {
            let domains = domains.clone();
            registry.every(DOMAIN_CHECK_JOB, config.domain_check_ms);
            registry.register(DOMAIN_CHECK_JOB, move |ctx: jobs::JobContext| {
                let domains = domains.clone();
                async move { domains.check_all(&ctx.store, ctx.clock.now_ms()).await.map(|_| ()).map_err(|e| e.to_string()) }
            });
        }
        let transports = delivery::routing::transports(&config).map_err(BuildError::Transport)?;
        let plugins = plugins::PluginHost::new(
            plugins::Options {
                dir: config.plugins_dir.clone(),
                cache_dir: config.plugin_cache_dir.clone(),
                grants: config.plugin_grants.clone(),
            },
            clock.clone(),
        )
        .map_err(BuildError::Plugins)?;
        plugins.load_all().await;
        let throttle = ratelimit::SendThrottle::new(config.send_rate_per_second, clock.clone());
        let ledger = delivery::ledger::Ledger::start(store.clone(), clock.clone());
        // The return-path host and the key of its tokens: delivery writes them, receiving reads them.
        let return_path =
            config.return_path_host.clone().map(|host| (host, security::derive_key(&secret, "herald-return-path-v1")));
        let delivery = Arc::new(delivery::Delivery {
            transports,
            routing: delivery::routing::Routing::new(&config, clock.clone()),
            pacing: delivery::pacing::Pacing::new(config.delivery.destinations.clone(), clock.clone()),
            default_transport: config.default_transport(),
            plugins: plugins.clone(),
            signers: Default::default(),
            domains: domains.clone(),
            throttle,
            sign: config.dkim_signing,
            ledger: ledger.clone(),
            handovers: delivery::handover::Handovers::new(delivery::HANDOVERS, ledger),
            return_path: return_path.clone(),
            breakers: Default::default(),
            give_up_after_ms: config.delivery.give_up_after_ms,
            wake: Default::default(),
        });
        delivery.register(&mut registry);
        let system_mail = Arc::new(
            services::system_mail::SystemMail::new(&config.system_from, &secret, delivery.clone())
                .map_err(BuildError::Transport)?,
        );
        system_mail.register(&mut registry);
        let segments = segments::Engine::new(store.clone(), plugins.clone());
        segments.register(&mut registry);
        let composer = Arc::new(compose::Composer {
            templates: domain::templating::Engine::new(),
            links_key: security::derive_key(&secret, "herald-links-v1"),
            tracking_key: security::derive_key(&secret, "herald-tracking-v1"),
            public_url: config.public_url.clone(),
        });
        let campaigns = Arc::new(campaigns::Campaigns {
            store: store.clone(),
            clock: clock.clone(),
            composer: composer.clone(),
            segments: segments.clone(),
            batch_size: config.campaign_batch_size,
            delivery_chunk: config.campaign_delivery_chunk,
            wake: Default::default(),
            recounted: Default::default(),
        });
        campaigns.register(&mut registry, config.campaign_progress_ms);
        let workflows = Arc::new(workflows::engine::Engine {
            store: store.clone(),
            clock: clock.clone(),
            plugins: plugins.clone(),
            segments: segments.clone(),
            composer: composer.clone(),
            wake: Default::default(),
            listening: Default::default(),
            listening_epoch: Default::default(),
            budgets: workflows::limits::Budgets::of(&config),
            schedule_audience: config.quotas.schedule_audience,
        });
        workflows.register(&mut registry);
        services::projects::register(&mut registry, config.uploads_dir.clone());
        services::contact_jobs::register(&mut registry);
        services::tallies::register(&mut registry);
        services::suspension::register(&mut registry, services::suspension::Thresholds::of(&config));
        services::contact_import::register(&mut registry, config.quotas.contacts);
        bus.subscribe(Arc::new(workflows::engine::Triggers(workflows.clone())));
        let webhooks = Arc::new(
            services::webhooks::Webhooks::new(store.clone(), clock.clone(), &secret, config.webhooks_allow_private)
                .map_err(BuildError::Transport)?,
        );
        webhooks.register(&mut registry);
        bus.subscribe(Arc::new(services::webhooks::Fanout(webhooks.clone())));
        // The project ceilings and the contact counts read for them, one copy for the process.
        let quotas = Arc::new(services::quotas::Ceilings::new(config.quotas));
        // Only a process that receives mail keeps a spool.
        let spool = match config.smtp.listen {
            Some(_) => Some(
                infra::spool::Spool::open(&config.smtp.spool_dir, config.smtp.spool_max_bytes)
                    .map_err(|e| BuildError::Spool(config.smtp.spool_dir.display().to_string(), e))?,
            ),
            None => None,
        };
        let inbound = Arc::new(services::inbound::Inbound::new(
            store.clone(),
            clock.clone(),
            return_path,
            quotas.clone(),
            spool.clone(),
            senders,
        ));
        inbound.register(&mut registry);
        services::retention::register(&mut registry, config.retention.clone(), spool);
        jobs::ensure_recurring(&store, &registry, clock.now_ms()).await?;
        let worker = Worker::new(
            store.clone(),
            clock.clone(),
            registry,
            WorkerOptions {
                id: format!("worker-{}", uuid::Uuid::new_v4()),
                concurrency: config.job_concurrency,
                lease_ms: config.job_lease_ms,
                poll: Duration::from_millis(config.job_poll_ms),
                due_reuse: jobs::DUE_REUSE,
            },
        );
        let _ = campaigns.wake.set(worker.waker());
        let _ = workflows.wake.set(worker.waker());
        let _ = webhooks.wake.set(worker.waker());
        let _ = inbound.wake.set(worker.waker());
        let _ = delivery.wake.set(worker.waker());
        let ingest = ingest::Ingester::start(store.clone(), clock.clone(), config.ingest_lanes);
        let accepter = accept::Accepter::start(store.clone(), clock.clone(), composer.clone(), config.ingest_lanes);
        let context = Context {
            session_key: security::derive_key(&secret, "herald-session-v1"),
            links_key: security::derive_key(&secret, "herald-links-v1"),
            tracking_key: security::derive_key(&secret, "herald-tracking-v1"),
            notifications_key: security::derive_key(&secret, "herald-notifications-v1"),
            limiter: ratelimit::RateLimiter::new(config.rate_limit_per_minute, clock.clone()),
            login_failures: services::throttles::login_failures(&store, clock.clone()),
            account_mail: services::throttles::Throttles::new(&store, clock.clone()),
            passwords: Default::default(),
            quotas,
            oauth_documents: Default::default(),
            system_mail,
            stripe: match &config.stripe {
                Some(c) => Some(Arc::new(infra::stripe::Stripe::new(c).map_err(BuildError::Transport)?)),
                None => None,
            },
            keys: KeyCache::default(),
            templates: domain::templating::Engine::new(),
            job_wake: worker.waker(),
            plugins,
            config,
            store,
            clock,
        };
        let state = Arc::new(AppState {
            context,
            bus,
            domains,
            ingest,
            accepter,
            segments,
            composer,
            campaigns,
            workflows,
            webhooks,
            inbound,
            delivery,
        });
        Ok(Core { state, worker })
    }

    /// Starts what runs beside the front ends: the job worker (when the configuration runs jobs), the
    /// watch on the plugins folder and on the shared key epoch. Returns the handle that stops them.
    pub fn start(self) -> Background {
        let (stop_tx, stop_rx) = watch::channel(false);
        let plugin_watch = match self.state.plugins.watch() {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "plugins folder is not watched; restart to pick up new plugins");
                None
            }
        };
        tokio::spawn(watch_key_epoch(self.state.clone(), stop_rx.clone()));
        let worker_task = if self.state.config.run_jobs {
            let st = &self.state;
            tokio::spawn(services::events::EventBus::hurry(
                st.store.clone(),
                st.clock.clone(),
                self.worker.waker(),
                self.worker.on_finished(services::events::DISPATCH_JOB),
                stop_rx.clone(),
            ));
            tokio::spawn(st.delivery.clone().watch(st.store.clone(), st.clock.clone(), stop_rx.clone()));
            tokio::spawn(self.worker.clone().run(stop_rx))
        } else {
            tokio::spawn(async {})
        };
        Background { stop_tx, worker_task, _plugin_watch: plugin_watch }
    }
}

/// What [`Core::start`] started.
pub struct Background {
    stop_tx: watch::Sender<bool>,
    worker_task: tokio::task::JoinHandle<()>,
    _plugin_watch: Option<plugins::watch::Watcher>,
}

impl Background {
    /// Asks everything to stop, without waiting.
    pub fn signal(&self) {
        let _ = self.stop_tx.send(true);
    }

    /// Asks everything to stop and waits for the jobs that are running to finish (their leases are
    /// released).
    pub async fn stop(self) {
        let _ = self.stop_tx.send(true);
        let _ = self.worker_task.await;
    }
}

/// Polls the shared `keys_epoch` so that keys regenerated or deleted through another process stop
/// working here within `key_cache_check_ms`.
async fn watch_key_epoch(state: Arc<AppState>, mut stop: watch::Receiver<bool>) {
    let period = Duration::from_millis(state.config.key_cache_check_ms);
    loop {
        match state.store.setting("keys_epoch").await {
            Ok(epoch) => state.keys.observe_epoch(epoch),
            Err(e) => tracing::warn!(error = %e, "cannot read the key epoch"),
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
    }
}
