//! Settings: command-line flags, then `HERALD_*` environment variables, then an optional `herald.toml`,
//! then defaults (that order of precedence). `Settings` is what the CLI and the TOML file fill in;
//! [`Config`] is the resolved, validated result the rest of the host uses.
//!
//! Must not import: salvo, surrealdb.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// What the operator grants one plugin (`[plugin.<name>]`); defined by the plugin runtime.
pub use herald_plugin_runtime::manifest::PluginGrant;

use clap::Args;
use serde::Deserialize;

mod backup;
mod delivery;
mod http;
mod memory;
#[cfg(test)]
mod reference_doc;
mod retention;
mod smtp;
mod testing;
pub use backup::{BackupConfig, BackupSettings};
pub use delivery::{
    DeliveryConfig, DeliverySettings, FILE, Limits, RouteSettings, SMTP, TransportSettings, TransportSpec,
    TransportTarget,
};
pub use http::{Cidr, HttpConfig, HttpSettings};
pub use memory::{MemorySizes, max_blocking_threads, worker_threads};
pub use retention::{RetentionConfig, RetentionSettings};
pub use smtp::{SmtpConfig, SmtpSettings};

/// Every setting, each optional so that the sources can be layered. Flag names are the TOML keys with
/// `-` instead of `_`; environment variables are `HERALD_` + the key in upper case.
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Address to listen on [default: 127.0.0.1:3000]
    #[arg(long, env = "HERALD_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Database: `surrealkv://PATH` (embedded, on disk), `mem://` (in memory) or `ws://HOST:PORT`
    /// (a SurrealDB server) [default: surrealkv://herald-data]
    #[arg(long, env = "HERALD_DB")]
    pub db: Option<String>,
    /// SurrealDB namespace [default: herald]
    #[arg(long, env = "HERALD_DB_NAMESPACE")]
    pub db_namespace: Option<String>,
    /// SurrealDB database name [default: herald]
    #[arg(long, env = "HERALD_DB_DATABASE")]
    pub db_database: Option<String>,
    /// User for a remote SurrealDB server (root user)
    #[arg(long, env = "HERALD_DB_USER")]
    pub db_user: Option<String>,
    /// Password for a remote SurrealDB server
    #[arg(long, env = "HERALD_DB_PASSWORD", hide_env_values = true)]
    pub db_password: Option<String>,
    /// Embedded database only: MiB of SurrealKV's block cache (its own default is half the machine's
    /// memory less 1 GiB) [default: 128]
    #[arg(long, env = "HERALD_DB_CACHE_MB")]
    pub db_cache_mb: Option<u64>,
    /// Embedded database only: MiB of SurrealKV's in-memory write buffer before it flushes to disk (its
    /// own default is 1 GiB on machines with 16-64 GiB) [default: 64]
    #[arg(long, env = "HERALD_DB_MEMTABLE_MB")]
    pub db_memtable_mb: Option<u64>,
    /// Embedded database only: KiB of a SurrealKV data block in newly written files (its own default is
    /// 64; every point read copies a whole block) [default: 4]
    #[arg(long, env = "HERALD_DB_BLOCK_KB")]
    pub db_block_kb: Option<u64>,
    /// Embedded database only: values of at least this many KiB go to SurrealKV's value log instead of
    /// its sorted tables, so compaction moves a pointer rather than the value (an email's stored
    /// message, say) [default: 4, SurrealKV's own]
    #[arg(long, env = "HERALD_DB_VLOG_KB")]
    pub db_vlog_kb: Option<u64>,
    /// MiB the process should fit in: sizes the database cache and memtable, job concurrency and threads
    /// unless set (docs/behaviour.md#memory-budget) [default: none, the sizes of each setting]
    #[arg(long, env = "HERALD_MEMORY_BUDGET_MB")]
    pub memory_budget_mb: Option<u64>,
    /// Public base URL, used for links in emails [default: http://<listen>, https:// with tls_cert]
    #[arg(long, env = "HERALD_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Secret that signs cookies and tokens; generated and kept in the database when unset
    #[arg(long, env = "HERALD_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// Refuse POST /auth/signup [default: false]
    #[arg(long, env = "HERALD_DISABLE_SIGNUPS")]
    pub disable_signups: Option<bool>,
    /// Users must verify their email before they create projects [default: false]
    #[arg(long, env = "HERALD_REQUIRE_EMAIL_VERIFICATION")]
    pub require_email_verification: Option<bool>,
    /// Sender of Herald's own mail (verification, password reset, invitations), `Name <address>` or an
    /// address [default: Herald <no-reply@HOST of the public URL>]
    #[arg(long, env = "HERALD_SYSTEM_FROM")]
    pub system_from: Option<String>,
    /// Log format: text or json [default: text]
    #[arg(long, env = "HERALD_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Log filter in tracing's EnvFilter syntax [default: info]
    #[arg(long, env = "HERALD_LOG")]
    pub log: Option<String>,
    /// API requests per minute per project; 0 turns the limit off [default: 1000]
    #[arg(long, env = "HERALD_RATE_LIMIT_PER_MINUTE")]
    pub rate_limit_per_minute: Option<u32>,
    /// Concurrent jobs per process [default: 8]
    #[arg(long, env = "HERALD_JOB_CONCURRENCY")]
    pub job_concurrency: Option<usize>,
    /// Seconds a claimed job stays leased before another worker may take it over [default: 60]
    #[arg(long, env = "HERALD_JOB_LEASE_SECS")]
    pub job_lease_secs: Option<u64>,
    /// Milliseconds between job-queue polls when idle [default: 500]
    #[arg(long, env = "HERALD_JOB_POLL_MS")]
    pub job_poll_ms: Option<u64>,
    /// Run job workers in this process (false makes an API-only node) [default: true]
    #[arg(long, env = "HERALD_RUN_JOBS")]
    pub run_jobs: Option<bool>,
    /// Parallel group-commit lanes for tracking [default: 2]
    #[arg(long, env = "HERALD_INGEST_LANES")]
    pub ingest_lanes: Option<usize>,
    /// Hours an Idempotency-Key is kept [default: 24]
    #[arg(long, env = "HERALD_IDEMPOTENCY_TTL_HOURS")]
    pub idempotency_ttl_hours: Option<u64>,
    /// Milliseconds between event-stream dispatch runs [default: 1000]
    #[arg(long, env = "HERALD_EVENT_DISPATCH_MS")]
    pub event_dispatch_ms: Option<u64>,
    /// Milliseconds between campaign progress runs (counters, completion) [default: 2000]
    #[arg(long, env = "HERALD_CAMPAIGN_PROGRESS_MS")]
    pub campaign_progress_ms: Option<u64>,
    /// Contacts per campaign batch job [default: 100; a memory budget of N: N/5, 25-100]
    #[arg(long, env = "HERALD_CAMPAIGN_BATCH_SIZE")]
    pub campaign_batch_size: Option<usize>,
    /// Campaign emails per delivery job [default: 100; a memory budget of N: N/5, 25-100]
    #[arg(long, env = "HERALD_CAMPAIGN_DELIVERY_CHUNK")]
    pub campaign_delivery_chunk: Option<usize>,
    /// Workflow executions events may start per contact per UTC hour; past it a start is written EXITED
    /// with the reason; 0 turns the budget off [default: 100]
    #[arg(long, env = "HERALD_WORKFLOW_STARTS_PER_CONTACT_HOUR")]
    pub workflow_starts_per_contact_hour: Option<u32>,
    /// Emails SEND_EMAIL steps may write per contact per UTC hour; past it the step is SKIPPED with the
    /// reason; 0 turns the budget off [default: 20]
    #[arg(long, env = "HERALD_WORKFLOW_EMAILS_PER_CONTACT_HOUR")]
    pub workflow_emails_per_contact_hour: Option<u32>,
    /// Projects one user may own (create); 0: no ceiling [default: 10]
    #[arg(long, env = "HERALD_MAX_PROJECTS_PER_USER")]
    pub max_projects_per_user: Option<u64>,
    /// Contacts per project; past it requests that would add one are refused; 0: none [default: 1000000]
    #[arg(long, env = "HERALD_MAX_CONTACTS")]
    pub max_contacts: Option<u64>,
    /// Workflows per project; 0: no ceiling [default: 100]
    #[arg(long, env = "HERALD_MAX_WORKFLOWS")]
    pub max_workflows: Option<u64>,
    /// Segments per project; 0: no ceiling [default: 100]
    #[arg(long, env = "HERALD_MAX_SEGMENTS")]
    pub max_segments: Option<u64>,
    /// Contacts one tick of a SCHEDULE workflow may enroll; 0: no ceiling [default: 100000]
    #[arg(long, env = "HERALD_MAX_SCHEDULE_AUDIENCE")]
    pub max_schedule_audience: Option<u64>,
    /// DNS servers for domain checks, /v1/verify and the senders of received mail, comma-separated
    /// host:port [default: the system's]
    #[arg(long, env = "HERALD_DNS_SERVERS")]
    pub dns_servers: Option<String>,
    /// Timeout of one DNS lookup in milliseconds [default: 3000]
    #[arg(long, env = "HERALD_DNS_TIMEOUT_MS")]
    pub dns_timeout_ms: Option<u64>,
    /// DKIM selector of new domains [default: herald]
    #[arg(long, env = "HERALD_DKIM_SELECTOR")]
    pub dkim_selector: Option<String>,
    /// SPF mechanism the SPF record recommends, e.g. include:_spf.example.net [default: "a mx"]
    #[arg(long, env = "HERALD_SPF_MECHANISM")]
    pub spf_mechanism: Option<String>,
    /// Host a domain's bounces.<domain> CNAME points to (adds a return-path record) [default: none]
    #[arg(long, env = "HERALD_RETURN_PATH_HOST")]
    pub return_path_host: Option<String>,
    /// Seconds between background checks of every domain [default: 300]
    #[arg(long, env = "HERALD_DOMAIN_CHECK_SECS")]
    pub domain_check_secs: Option<u64>,
    /// Milliseconds between checks for key changes made by other processes [default: 1000]
    #[arg(long, env = "HERALD_KEY_CACHE_CHECK_MS")]
    pub key_cache_check_ms: Option<u64>,
    /// SMTP server for delivery: smtp://user:pass@host:port (add ?tls=required for STARTTLS) or smtps://
    /// for implicit TLS [default: none, the file transport is used]
    #[arg(long, env = "HERALD_SMTP_URL", hide_env_values = true)]
    pub smtp_url: Option<String>,
    /// Folder of the file transport (.eml files) when no SMTP server is configured [default: herald-mail]
    #[arg(long, env = "HERALD_MAIL_DIR")]
    pub mail_dir: Option<PathBuf>,
    /// Folder of uploaded images, served under /uploads/ [default: herald-uploads]
    #[arg(long, env = "HERALD_UPLOADS_DIR")]
    pub uploads_dir: Option<PathBuf>,
    /// Largest image upload in MiB, 1 to 50 [default: 5]
    #[arg(long, env = "HERALD_UPLOAD_MAX_MB")]
    pub upload_max_mb: Option<u64>,
    /// Bytes of images one project may store, in MiB; 0 for no quota [default: 100]
    #[arg(long, env = "HERALD_UPLOADS_QUOTA_MB")]
    pub uploads_quota_mb: Option<u64>,
    /// Bounce rate over 7 days, in percent of the emails sent, a project is held to [default: 5]
    #[arg(long, env = "HERALD_SUSPEND_BOUNCE_PERCENT")]
    pub suspend_bounce_percent: Option<f64>,
    /// Complaint rate over 7 days, in percent of the emails sent, a project is held to [default: 0.1]
    #[arg(long, env = "HERALD_SUSPEND_COMPLAINT_PERCENT")]
    pub suspend_complaint_percent: Option<f64>,
    /// Emails sent over 7 days below which the rates are not held against a project [default: 500]
    #[arg(long, env = "HERALD_SUSPEND_MIN_SENT")]
    pub suspend_min_sent: Option<u64>,
    /// Hours after an automatic suspension from which the project's OWNER may lift it; unset, only the
    /// operator can (herald project unsuspend) [default: unset]
    #[arg(long, env = "HERALD_SELF_UNSUSPEND_AFTER_HOURS")]
    pub self_unsuspend_after_hours: Option<u64>,
    /// DKIM-sign outgoing mail from verified domains (turn off only when an MTA downstream signs) [default: true]
    #[arg(long, env = "HERALD_DKIM_SIGNING")]
    pub dkim_signing: Option<bool>,
    /// Let outbound webhooks call private, loopback and link-local addresses (docs/behaviour.md#webhooks)
    /// [default: false]
    #[arg(long, env = "HERALD_WEBHOOKS_ALLOW_PRIVATE")]
    pub webhooks_allow_private: Option<bool>,
    /// Messages per second per project handed to the transport; 0 turns the throttle off [default: 100]
    #[arg(long, env = "HERALD_SEND_RATE_PER_SECOND")]
    pub send_rate_per_second: Option<u32>,
    /// Folder watched for plugins (`<name>.wasm` beside its `<name>.toml` manifest) [default: herald-plugins]
    #[arg(long, env = "HERALD_PLUGINS_DIR")]
    pub plugins_dir: Option<PathBuf>,
    /// Folder of precompiled plugin artifacts, keyed by content hash and engine [default: herald-plugin-cache]
    #[arg(long, env = "HERALD_PLUGIN_CACHE_DIR")]
    pub plugin_cache_dir: Option<PathBuf>,
    /// The server's default transport: `smtp` (needs smtp_url), `file`, or a transport plugin's name
    /// [default: smtp when smtp_url is set, else file]
    #[arg(long, env = "HERALD_TRANSPORT")]
    pub transport: Option<String>,
    /// Seconds after its acceptance an email's delivery stops retrying, 1 to 2592000 (30 days) [default: 259200]
    #[arg(long, env = "HERALD_DELIVERY_GIVE_UP_AFTER_SECS")]
    pub delivery_give_up_after_secs: Option<u64>,
    /// Named transports, only in herald.toml: `[transports.<name>]` with `url` (smtp:// or smtps://) or
    /// `plugin` (a transport plugin's name), and optional `max_per_second`, `max_connections`.
    #[arg(skip)]
    pub transports: Option<std::collections::BTreeMap<String, TransportSettings>>,
    /// Routes, only in herald.toml: `[[routes]]` with `transports` (names in failover order) and optional
    /// `class`, `project`, `from_domain`, `recipient_domain`; the first that matches an email wins.
    #[arg(skip)]
    pub routes: Option<Vec<RouteSettings>>,
    /// Limits per recipient domain, only in herald.toml: `[destinations."<domain>"]` with `max_per_second`,
    /// `max_connections`.
    #[arg(skip)]
    pub destinations: Option<std::collections::BTreeMap<String, Limits>>,
    /// Per-plugin grants and settings, only in herald.toml: `[plugin.<name>]` with `http` (host patterns),
    /// `allow_private`, `secrets` (name = value), `config` (key = value), `timeout_ms`, `memory_mb`, `fuel`.
    #[arg(skip)]
    pub plugin: Option<std::collections::BTreeMap<String, PluginGrant>>,
    /// Stripe secret API key: turns payments on (with the webhook secret) [default: off]
    #[arg(long, env = "HERALD_STRIPE_SECRET_KEY", hide_env_values = true)]
    pub stripe_secret_key: Option<String>,
    /// Signing secret of the Stripe webhook endpoint (`whsec_...`)
    #[arg(long, env = "HERALD_STRIPE_WEBHOOK_SECRET", hide_env_values = true)]
    pub stripe_webhook_secret: Option<String>,
    /// Base URL of the Stripe API [default: https://api.stripe.com]
    #[arg(long, env = "HERALD_STRIPE_API_BASE")]
    pub stripe_api_base: Option<String>,
    /// Plans a project can subscribe to, in the settings file only: `[plan.NAME]` with `price` (a Stripe
    /// price id; a plan without one, named `free`, applies when a subscription ends) and monthly limits
    /// `transactional`, `campaigns`, `workflows`, `inbound` (left out: unlimited)
    #[arg(skip)]
    pub plan: Option<std::collections::BTreeMap<String, Plan>>,
    /// OAuth sign-in providers, in the settings file only: `[oauth.NAME]` with `kind` (`github` or
    /// `oidc`), `client_id`, `client_secret`, and for OIDC `issuer` (required; its discovery document gives
    /// the endpoints unless `authorize_url`, `token_url` and `jwks_url` are all set); optional `name`, `scopes`, `userinfo_url`,
    /// and for GitHub `authorize_url`, `token_url`, `api_base` (GitHub Enterprise)
    #[arg(skip)]
    pub oauth: Option<std::collections::BTreeMap<String, OAuthProvider>>,
    /// Client id of a GitHub OAuth app: with the secret, adds the `github` sign-in provider
    #[arg(long, env = "HERALD_OAUTH_GITHUB_CLIENT_ID")]
    pub oauth_github_client_id: Option<String>,
    /// Client secret of that GitHub OAuth app
    #[arg(long, env = "HERALD_OAUTH_GITHUB_CLIENT_SECRET", hide_env_values = true)]
    pub oauth_github_client_secret: Option<String>,
    /// Receiving mail and the SMTP relay (`[smtp]` in herald.toml)
    #[command(flatten)]
    #[serde(default)]
    pub smtp: SmtpSettings,
    /// The HTTP listener behind proxies and with TLS (`[http]` in herald.toml)
    #[command(flatten)]
    #[serde(default)]
    pub http: HttpSettings,
    /// Retention periods (`[retention]` in herald.toml)
    #[command(flatten)]
    #[serde(default)]
    pub retention: RetentionSettings,
    /// Scheduled backups (`[backup]` in herald.toml)
    #[command(flatten)]
    #[serde(default)]
    pub backup: BackupSettings,
    /// Path of the TOML settings file [default: ./herald.toml when it exists]
    #[arg(long, env = "HERALD_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub db: String,
    pub db_namespace: String,
    pub db_database: String,
    pub db_user: Option<String>,
    pub db_password: Option<String>,
    /// SurrealKV block cache in bytes (embedded database only).
    pub db_cache_bytes: u64,
    /// SurrealKV memtable in bytes (embedded database only).
    pub db_memtable_bytes: u64,
    /// SurrealKV data block size in bytes (embedded database only).
    pub db_block_bytes: u64,
    /// SurrealKV value-log threshold in bytes (embedded database only).
    pub db_vlog_bytes: u64,
    /// The memory budget in MiB (`memory.rs`), None without one.
    pub memory_budget_mb: Option<u64>,
    pub public_url: String,
    pub secret: Option<String>,
    pub disable_signups: bool,
    pub require_email_verification: bool,
    /// Sender of Herald's own mail, a valid mailbox (docs/behaviour.md#account-mail).
    pub system_from: String,
    pub log_format: LogFormat,
    pub log: String,
    pub rate_limit_per_minute: u32,
    pub job_concurrency: usize,
    pub job_lease_ms: i64,
    pub job_poll_ms: u64,
    pub run_jobs: bool,
    pub ingest_lanes: usize,
    pub dns_servers: Vec<SocketAddr>,
    pub dns_timeout_ms: u64,
    pub dkim_selector: String,
    pub spf_mechanism: String,
    pub return_path_host: Option<String>,
    pub domain_check_ms: i64,
    pub key_cache_check_ms: u64,
    pub smtp_url: Option<String>,
    pub send_rate_per_second: u32,
    pub dkim_signing: bool,
    /// Outbound webhooks may call private, loopback and link-local addresses.
    pub webhooks_allow_private: bool,
    pub mail_dir: PathBuf,
    pub uploads_dir: PathBuf,
    pub upload_max_bytes: usize,
    /// Bytes of images one project may store (docs/behaviour.md#uploads); 0: no quota.
    pub uploads_quota_bytes: u64,
    /// Project suspension thresholds (docs/behaviour.md#project-setup-and-security).
    pub suspend_bounce_percent: f64,
    pub suspend_complaint_percent: f64,
    pub suspend_min_sent: u64,
    /// Hours after a suspension from which its OWNER may lift it (None: only the operator).
    pub self_unsuspend_after_hours: Option<u64>,
    pub idempotency_ttl_ms: i64,
    pub event_dispatch_ms: i64,
    pub campaign_progress_ms: i64,
    pub campaign_batch_size: usize,
    pub campaign_delivery_chunk: usize,
    /// Per-contact hourly budgets of workflows (docs/security.md#workflows); 0: none.
    pub workflow_starts_per_contact_hour: u32,
    pub workflow_emails_per_contact_hour: u32,
    /// Ceilings per project and user (docs/security.md#quotas).
    pub quotas: Quotas,
    /// The SMTP front end: receiving mail and the submission relay.
    pub smtp: SmtpConfig,
    /// The HTTP listener: trusted proxies, TLS.
    pub http: HttpConfig,
    /// Retention periods.
    pub retention: RetentionConfig,
    /// Scheduled backups.
    pub backup: BackupConfig,
    pub plugins_dir: PathBuf,
    pub plugin_cache_dir: PathBuf,
    /// `smtp`, `file` or a transport plugin's name; None: smtp when `smtp_url` is set, else file
    /// (see [`Config::default_transport`]).
    pub transport: Option<String>,
    /// Named transports, routes and destination limits, the older settings resolved in (`delivery.rs`).
    pub delivery: DeliveryConfig,
    pub plugin_grants: std::collections::BTreeMap<String, PluginGrant>,
    /// Stripe, when both its secret key and webhook secret are set (docs/behaviour.md#billing).
    pub stripe: Option<StripeConfig>,
    pub plans: std::collections::BTreeMap<String, Plan>,
    /// OAuth sign-in providers by name (docs/behaviour.md#oauth-sign-in).
    pub oauth: std::collections::BTreeMap<String, OAuthProvider>,
}

/// An OAuth sign-in provider.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthProvider {
    /// `github` or `oidc`
    pub kind: String,
    /// shown to users [default: GitHub, or the provider's key]
    #[serde(default)]
    pub name: Option<String>,
    pub client_id: String,
    pub client_secret: String,
    #[serde(default)]
    pub issuer: Option<String>,
    #[serde(default)]
    pub authorize_url: Option<String>,
    #[serde(default)]
    pub token_url: Option<String>,
    #[serde(default)]
    pub userinfo_url: Option<String>,
    #[serde(default)]
    pub jwks_url: Option<String>,
    /// GitHub's API [default: https://api.github.com]
    #[serde(default)]
    pub api_base: Option<String>,
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
}

/// Ceilings per project and per user (0: none), from `HERALD_MAX_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    pub projects_per_user: u64,
    pub contacts: u64,
    pub workflows: u64,
    pub segments: u64,
    pub schedule_audience: u64,
}

/// The payment provider's settings.
#[derive(Debug, Clone)]
pub struct StripeConfig {
    pub secret_key: String,
    pub webhook_secret: String,
    pub api_base: String,
}

/// A plan: its Stripe price and the monthly limits it gives.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    #[serde(default)]
    pub price: Option<String>,
    #[serde(default)]
    pub transactional: Option<i64>,
    #[serde(default)]
    pub campaigns: Option<i64>,
    #[serde(default)]
    pub workflows: Option<i64>,
    #[serde(default)]
    pub inbound: Option<i64>,
}

impl Plan {
    /// The monthly limits the plan gives.
    pub fn limits(&self) -> crate::domain::billing::Limits {
        crate::domain::billing::Limits {
            transactional: self.transactional,
            campaigns: self.campaigns,
            workflows: self.workflows,
            inbound: self.inbound,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("invalid settings file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("invalid setting {0}")]
    Invalid(String),
}

/// A percentage setting: `default` when unset or not a number, else clamped to 0.01..=100.
fn percent(v: Option<f64>, default: f64) -> f64 {
    v.filter(|x| x.is_finite()).map_or(default, |x| x.clamp(0.01, 100.0))
}

impl Settings {
    /// Fills every unset field of `self` from `other`.
    fn or(self, other: Settings) -> Settings {
        Settings {
            listen: self.listen.or(other.listen),
            db: self.db.or(other.db),
            db_namespace: self.db_namespace.or(other.db_namespace),
            db_database: self.db_database.or(other.db_database),
            db_user: self.db_user.or(other.db_user),
            db_password: self.db_password.or(other.db_password),
            db_cache_mb: self.db_cache_mb.or(other.db_cache_mb),
            db_memtable_mb: self.db_memtable_mb.or(other.db_memtable_mb),
            db_block_kb: self.db_block_kb.or(other.db_block_kb),
            db_vlog_kb: self.db_vlog_kb.or(other.db_vlog_kb),
            memory_budget_mb: self.memory_budget_mb.or(other.memory_budget_mb),
            public_url: self.public_url.or(other.public_url),
            secret: self.secret.or(other.secret),
            disable_signups: self.disable_signups.or(other.disable_signups),
            require_email_verification: self.require_email_verification.or(other.require_email_verification),
            system_from: self.system_from.or(other.system_from),
            log_format: self.log_format.or(other.log_format),
            log: self.log.or(other.log),
            rate_limit_per_minute: self.rate_limit_per_minute.or(other.rate_limit_per_minute),
            job_concurrency: self.job_concurrency.or(other.job_concurrency),
            job_lease_secs: self.job_lease_secs.or(other.job_lease_secs),
            job_poll_ms: self.job_poll_ms.or(other.job_poll_ms),
            idempotency_ttl_hours: self.idempotency_ttl_hours.or(other.idempotency_ttl_hours),
            run_jobs: self.run_jobs.or(other.run_jobs),
            ingest_lanes: self.ingest_lanes.or(other.ingest_lanes),
            dns_servers: self.dns_servers.or(other.dns_servers),
            dns_timeout_ms: self.dns_timeout_ms.or(other.dns_timeout_ms),
            dkim_selector: self.dkim_selector.or(other.dkim_selector),
            spf_mechanism: self.spf_mechanism.or(other.spf_mechanism),
            return_path_host: self.return_path_host.or(other.return_path_host),
            domain_check_secs: self.domain_check_secs.or(other.domain_check_secs),
            key_cache_check_ms: self.key_cache_check_ms.or(other.key_cache_check_ms),
            smtp_url: self.smtp_url.or(other.smtp_url),
            send_rate_per_second: self.send_rate_per_second.or(other.send_rate_per_second),
            dkim_signing: self.dkim_signing.or(other.dkim_signing),
            webhooks_allow_private: self.webhooks_allow_private.or(other.webhooks_allow_private),
            mail_dir: self.mail_dir.or(other.mail_dir),
            uploads_dir: self.uploads_dir.or(other.uploads_dir),
            upload_max_mb: self.upload_max_mb.or(other.upload_max_mb),
            uploads_quota_mb: self.uploads_quota_mb.or(other.uploads_quota_mb),
            suspend_bounce_percent: self.suspend_bounce_percent.or(other.suspend_bounce_percent),
            suspend_complaint_percent: self.suspend_complaint_percent.or(other.suspend_complaint_percent),
            suspend_min_sent: self.suspend_min_sent.or(other.suspend_min_sent),
            self_unsuspend_after_hours: self.self_unsuspend_after_hours.or(other.self_unsuspend_after_hours),
            event_dispatch_ms: self.event_dispatch_ms.or(other.event_dispatch_ms),
            campaign_progress_ms: self.campaign_progress_ms.or(other.campaign_progress_ms),
            campaign_batch_size: self.campaign_batch_size.or(other.campaign_batch_size),
            campaign_delivery_chunk: self.campaign_delivery_chunk.or(other.campaign_delivery_chunk),
            workflow_starts_per_contact_hour: self
                .workflow_starts_per_contact_hour
                .or(other.workflow_starts_per_contact_hour),
            workflow_emails_per_contact_hour: self
                .workflow_emails_per_contact_hour
                .or(other.workflow_emails_per_contact_hour),
            max_projects_per_user: self.max_projects_per_user.or(other.max_projects_per_user),
            max_contacts: self.max_contacts.or(other.max_contacts),
            max_workflows: self.max_workflows.or(other.max_workflows),
            max_segments: self.max_segments.or(other.max_segments),
            max_schedule_audience: self.max_schedule_audience.or(other.max_schedule_audience),
            plugins_dir: self.plugins_dir.or(other.plugins_dir),
            plugin_cache_dir: self.plugin_cache_dir.or(other.plugin_cache_dir),
            transport: self.transport.or(other.transport),
            delivery_give_up_after_secs: self.delivery_give_up_after_secs.or(other.delivery_give_up_after_secs),
            transports: self.transports.or(other.transports),
            routes: self.routes.or(other.routes),
            destinations: self.destinations.or(other.destinations),
            plugin: self.plugin.or(other.plugin),
            stripe_secret_key: self.stripe_secret_key.or(other.stripe_secret_key),
            stripe_webhook_secret: self.stripe_webhook_secret.or(other.stripe_webhook_secret),
            stripe_api_base: self.stripe_api_base.or(other.stripe_api_base),
            plan: self.plan.or(other.plan),
            oauth: self.oauth.or(other.oauth),
            oauth_github_client_id: self.oauth_github_client_id.or(other.oauth_github_client_id),
            oauth_github_client_secret: self.oauth_github_client_secret.or(other.oauth_github_client_secret),
            smtp: self.smtp.or(other.smtp),
            http: self.http.or(other.http),
            retention: self.retention.or(other.retention),
            backup: self.backup.or(other.backup),
            config: self.config.or(other.config),
        }
    }

    /// Layers the TOML file (when there is one) under these settings and applies defaults.
    pub fn resolve(self) -> Result<Config, ConfigError> {
        let file = match &self.config {
            Some(path) => Some(read_toml(path)?),
            None if Path::new("herald.toml").exists() => Some(read_toml(Path::new("herald.toml"))?),
            None => None,
        };
        let s = match file {
            Some(f) => self.or(f),
            None => self,
        };
        let listen = s.listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 3000)));
        let db = s.db.unwrap_or_else(|| "surrealkv://herald-data".to_string());
        if !(db.starts_with("surrealkv://")
            || db.starts_with("mem://")
            || db == "memory"
            || db.starts_with("ws://")
            || db.starts_with("wss://"))
        {
            return Err(ConfigError::Invalid(format!("db = {db:?}: use surrealkv://PATH, mem:// or ws://HOST:PORT")));
        }
        let public_url = s.public_url.unwrap_or_else(|| format!("{}://{listen}", s.http.scheme()));
        let public_url = public_url.trim_end_matches('/').to_string();
        if !(public_url.starts_with("http://") || public_url.starts_with("https://")) {
            return Err(ConfigError::Invalid(format!(
                "public_url = {public_url:?}: must start with http:// or https://"
            )));
        }
        if let Some(secret) = &s.secret
            && secret.len() < 16
        {
            return Err(ConfigError::Invalid("secret: must be at least 16 characters".into()));
        }
        let mut dns_servers = Vec::new();
        for part in s.dns_servers.as_deref().unwrap_or("").split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let addr = part
                .parse::<SocketAddr>()
                .or_else(|_| part.parse::<std::net::IpAddr>().map(|ip| SocketAddr::new(ip, 53)))
                .map_err(|_| ConfigError::Invalid(format!("dns_servers: {part:?} is not an address (host:port)")))?;
            dns_servers.push(addr);
        }
        let selector = s.dkim_selector.unwrap_or_else(|| "herald".into());
        if selector.is_empty() || !selector.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return Err(ConfigError::Invalid(format!(
                "dkim_selector: {selector:?} must be letters, digits and hyphens"
            )));
        }
        let smtp_url = s.smtp_url.filter(|u| !u.is_empty());
        let transport = s.transport.filter(|t| !t.is_empty());
        if transport.as_deref() == Some("smtp") && smtp_url.is_none() {
            return Err(ConfigError::Invalid("transport = \"smtp\" needs smtp_url".into()));
        }
        let delivery = DeliverySettings {
            give_up_after_secs: s.delivery_give_up_after_secs,
            transports: s.transports,
            routes: s.routes,
            destinations: s.destinations,
        }
        .resolve(smtp_url.as_deref(), transport.as_deref())?;
        let system_from = match s.system_from.filter(|f| !f.trim().is_empty()) {
            Some(f) => f.trim().to_string(),
            None => format!("Herald <no-reply@{}>", mail_host(&public_url)),
        };
        if system_from.parse::<lettre::message::Mailbox>().is_err() {
            return Err(ConfigError::Invalid(format!("system_from: {system_from:?} is not a mailbox")));
        }
        let stripe =
            match (s.stripe_secret_key.filter(|k| !k.is_empty()), s.stripe_webhook_secret.filter(|k| !k.is_empty())) {
                (Some(secret_key), Some(webhook_secret)) => Some(StripeConfig {
                    secret_key,
                    webhook_secret,
                    api_base: s
                        .stripe_api_base
                        .filter(|b| !b.is_empty())
                        .unwrap_or_else(|| "https://api.stripe.com".into())
                        .trim_end_matches('/')
                        .to_string(),
                }),
                (None, None) => None,
                _ => {
                    return Err(ConfigError::Invalid(
                        "stripe_secret_key and stripe_webhook_secret go together: set both or neither".into(),
                    ));
                }
            };
        let mut oauth = s.oauth.unwrap_or_default();
        if let (Some(id), Some(secret)) = (s.oauth_github_client_id, s.oauth_github_client_secret) {
            oauth.entry("github".into()).or_insert(OAuthProvider {
                kind: "github".into(),
                client_id: id,
                client_secret: secret,
                ..Default::default()
            });
        }
        for (name, p) in &oauth {
            let named = !name.is_empty()
                && name.len() <= 40
                && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            let complete = match p.kind.as_str() {
                "github" => true,
                // The issuer is what an ID token must name, so it is required even with explicit endpoints.
                "oidc" => p.issuer.as_deref().is_some_and(|i| i.starts_with("https://") || i.starts_with("http://")),
                _ => false,
            };
            if !named || !complete || p.client_id.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "oauth.{name}: a name of lowercase letters, digits and hyphens; kind github, or oidc with an \
                     issuer URL (its discovery document gives the endpoints unless authorize_url, token_url and \
                     jwks_url are set); and a client_id"
                )));
            }
        }
        let return_path_host = s.return_path_host.clone().filter(|h| !h.is_empty());
        let explicit = memory::Explicit {
            cache_mb: s.db_cache_mb,
            memtable_mb: s.db_memtable_mb,
            jobs: s.job_concurrency,
            campaign_batch: s.campaign_batch_size,
            campaign_chunk: s.campaign_delivery_chunk,
        };
        let mem = MemorySizes::of(s.memory_budget_mb, explicit);
        let smtp = s.smtp.clone().resolve(return_path_host.as_deref().unwrap_or(&mail_host(&public_url)))?;
        Ok(Config {
            delivery,
            smtp,
            http: s.http.clone().resolve()?,
            retention: s.retention.clone().resolve()?,
            backup: s.backup.clone().resolve()?,
            oauth,
            stripe,
            plans: s.plan.unwrap_or_default(),
            require_email_verification: s.require_email_verification.unwrap_or(false),
            system_from,
            plugins_dir: s.plugins_dir.unwrap_or_else(|| PathBuf::from("herald-plugins")),
            plugin_cache_dir: s.plugin_cache_dir.unwrap_or_else(|| PathBuf::from("herald-plugin-cache")),
            transport,
            plugin_grants: s.plugin.unwrap_or_default(),
            dns_servers,
            dns_timeout_ms: s.dns_timeout_ms.unwrap_or(3000).max(50),
            dkim_selector: selector,
            spf_mechanism: s.spf_mechanism.unwrap_or_else(|| "a mx".into()),
            return_path_host: s.return_path_host.filter(|h| !h.is_empty()),
            smtp_url,
            send_rate_per_second: s.send_rate_per_second.unwrap_or(100),
            dkim_signing: s.dkim_signing.unwrap_or(true),
            webhooks_allow_private: s.webhooks_allow_private.unwrap_or(false),
            mail_dir: s.mail_dir.unwrap_or_else(|| PathBuf::from("herald-mail")),
            uploads_dir: s.uploads_dir.unwrap_or_else(|| PathBuf::from("herald-uploads")),
            upload_max_bytes: (s.upload_max_mb.unwrap_or(5).clamp(1, 50) << 20) as usize,
            uploads_quota_bytes: s.uploads_quota_mb.unwrap_or(100).saturating_mul(1 << 20),
            suspend_bounce_percent: percent(s.suspend_bounce_percent, 5.0),
            suspend_complaint_percent: percent(s.suspend_complaint_percent, 0.1),
            suspend_min_sent: s.suspend_min_sent.unwrap_or(500),
            self_unsuspend_after_hours: s.self_unsuspend_after_hours,
            key_cache_check_ms: s.key_cache_check_ms.unwrap_or(1000).max(10),
            domain_check_ms: (s.domain_check_secs.unwrap_or(300).max(10) * 1000) as i64,
            listen,
            db,
            db_namespace: s.db_namespace.unwrap_or_else(|| "herald".into()),
            db_database: s.db_database.unwrap_or_else(|| "herald".into()),
            db_user: s.db_user,
            db_password: s.db_password,
            db_cache_bytes: mem.cache_mb << 20,
            db_memtable_bytes: mem.memtable_mb << 20,
            memory_budget_mb: s.memory_budget_mb,
            db_block_bytes: s.db_block_kb.unwrap_or(4).clamp(1, 1024) << 10,
            db_vlog_bytes: s.db_vlog_kb.unwrap_or(4).clamp(1, 1024) << 10,
            public_url,
            secret: s.secret,
            disable_signups: s.disable_signups.unwrap_or(false),
            log_format: s.log_format.unwrap_or(LogFormat::Text),
            log: s.log.unwrap_or_else(|| "info".into()),
            rate_limit_per_minute: s.rate_limit_per_minute.unwrap_or(1000),
            job_concurrency: mem.job_concurrency,
            job_lease_ms: (s.job_lease_secs.unwrap_or(60).max(1) * 1000) as i64,
            job_poll_ms: s.job_poll_ms.unwrap_or(500).max(10),
            run_jobs: s.run_jobs.unwrap_or(true),
            ingest_lanes: s.ingest_lanes.unwrap_or(2).clamp(1, 64),
            idempotency_ttl_ms: (s.idempotency_ttl_hours.unwrap_or(24).max(1) * 3_600_000) as i64,
            event_dispatch_ms: s.event_dispatch_ms.unwrap_or(1000).max(10) as i64,
            campaign_progress_ms: s.campaign_progress_ms.unwrap_or(2000).max(10) as i64,
            campaign_batch_size: mem.campaign_batch,
            campaign_delivery_chunk: mem.campaign_chunk,
            workflow_starts_per_contact_hour: s.workflow_starts_per_contact_hour.unwrap_or(100),
            workflow_emails_per_contact_hour: s.workflow_emails_per_contact_hour.unwrap_or(20),
            quotas: Quotas {
                projects_per_user: s.max_projects_per_user.unwrap_or(10),
                contacts: s.max_contacts.unwrap_or(1_000_000),
                workflows: s.max_workflows.unwrap_or(100),
                segments: s.max_segments.unwrap_or(100),
                schedule_audience: s.max_schedule_audience.unwrap_or(100_000),
            },
        })
    }
}

/// The host of a public URL when it is a domain name with a dot, else `localhost` (an IP address or a
/// bare name does not make a sender address).
fn mail_host(public_url: &str) -> String {
    let rest = public_url.split_once("://").map_or(public_url, |(_, r)| r);
    let host = rest.split(['/', ':', '?', '#']).next().unwrap_or("");
    let named = host.contains('.') && host.parse::<std::net::IpAddr>().is_err() && !host.starts_with('[');
    if named { host.to_ascii_lowercase() } else { "localhost".into() }
}

fn read_toml(path: &Path) -> Result<Settings, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
    toml::from_str(&text).map_err(|e| {
        // toml's own text quotes the line under a caret, over several lines; a start-up error is one line.
        let at = e.span().and_then(|s| text.get(..s.start)).map(|before| {
            let start = before.rfind('\n').map_or(0, |i| i + 1);
            let line = text[start..].lines().next().unwrap_or("").trim();
            format!("line {} (`{line}`): ", before.matches('\n').count() + 1)
        });
        ConfigError::Parse {
            path: path.display().to_string(),
            message: format!("{}{}", at.unwrap_or_default(), e.message()),
        }
    })
}

impl Config {
    /// The transport of projects that have not picked one.
    pub fn default_transport(&self) -> String {
        match &self.transport {
            Some(t) => t.clone(),
            None if self.smtp_url.is_some() => "smtp".into(),
            None => "file".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_file_and_file_beats_defaults() {
        let dir = Config::test_scratch().join(format!("cfg-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("herald.toml");
        std::fs::write(&path, "db = \"mem://\"\nrate_limit_per_minute = 5\nlisten = \"127.0.0.1:4000\"\n").unwrap();
        let s = Settings { listen: Some("127.0.0.1:5000".parse().unwrap()), config: Some(path), ..Default::default() };
        let c = s.resolve().unwrap();
        assert_eq!(c.listen.port(), 5000);
        assert_eq!(c.db, "mem://");
        assert_eq!(c.rate_limit_per_minute, 5);
        assert_eq!(c.public_url, "http://127.0.0.1:5000");
    }

    #[test]
    fn defaults_are_the_embedded_database_on_port_3000() {
        let c = Settings { config: None, ..Default::default() }.resolve().unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:3000");
        assert_eq!(c.db, "surrealkv://herald-data");
        assert_eq!(c.rate_limit_per_minute, 1000);
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Settings { db: Some("postgres://x".into()), ..Default::default() }.resolve().is_err());
        assert!(Settings { secret: Some("short".into()), ..Default::default() }.resolve().is_err());
        let dir = Config::test_scratch().join(format!("cfg-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("h.toml");
        std::fs::write(&path, "unknown_key = 1\n").unwrap();
        assert!(Settings { config: Some(path), ..Default::default() }.resolve().is_err());
    }

    #[test]
    fn an_openid_provider_needs_an_issuer_even_with_explicit_endpoints() {
        let provider = |issuer: Option<&str>| OAuthProvider {
            kind: "oidc".into(),
            client_id: "c".into(),
            client_secret: "s".into(),
            issuer: issuer.map(str::to_string),
            authorize_url: Some("https://id.example.com/authorize".into()),
            token_url: Some("https://id.example.com/token".into()),
            jwks_url: Some("https://id.example.com/jwks".into()),
            ..Default::default()
        };
        let with = |p: OAuthProvider| Settings { oauth: Some([("sso".to_string(), p)].into()), ..Default::default() };
        let err = with(provider(None)).resolve().expect_err("no issuer");
        assert!(err.to_string().contains("issuer"), "{err}");
        assert!(with(provider(Some("id.example.com"))).resolve().is_err(), "an issuer is a URL");
        assert!(with(provider(Some("https://id.example.com"))).resolve().is_ok());
    }
}
