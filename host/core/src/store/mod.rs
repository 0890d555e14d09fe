//! The store: one repository per aggregate over SurrealDB. This is the only module that imports
//! `surrealdb`; the rest of the host never knows which engine (embedded SurrealKV, in-memory, or a
//! SurrealDB server over WebSocket) is behind it.
//!
//! Invariants:
//! - Parameters are always bound, never formatted into query text.
//! - Every project-scoped query filters by `project`.
//! - Every write unit runs through [`Store::write`], which retries SurrealDB's retryable transaction
//!   conflicts, and every failure is classified once, here, into [`StoreError`] (unique index -> Conflict,
//!   ASSERT/type failure -> Validation).
//! - Times are stored as integer milliseconds since the Unix epoch (UTC).

pub mod account_tokens;
pub mod accounts;
pub mod activity;
pub mod backup;
pub mod billing;
pub mod campaigns;
pub mod contact_jobs;
pub mod contacts;
pub mod domains;
pub mod emails;
mod engine_cache;
mod engine_locks;
mod engine_space;
pub mod events;
pub mod idempotency;
pub mod inbound;
pub mod ingest;
pub mod jobs;
pub mod migrate;
pub mod project_state;
pub mod quotas;
pub mod retention;
pub mod segments;
pub mod suppressions;
pub mod suspensions;
pub mod tallies;
pub mod templates;
pub mod throttles;
pub mod uploads;
pub mod webhooks;
pub mod workflow_budgets;
pub mod workflow_runs;
pub mod workflows;

use std::future::Future;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

use surrealdb::Surreal;
use surrealdb::engine::any::Any;
use surrealdb::engine::local::Db;
use surrealdb::opt::auth::Root;

use crate::config::Config;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A unique index already holds the value.
    #[error("{0}")]
    Conflict(String),
    /// A field assertion or type check failed.
    #[error("{0}")]
    Validation(String),
    /// A transaction conflict that survived every retry, or any other retryable failure.
    #[error("the database is busy, try again: {0}")]
    Busy(String),
    #[error("database error: {0}")]
    Db(String),
    #[error("unexpected data from the database: {0}")]
    Decode(String),
    #[error("{0}")]
    Migration(String),
    /// A rule of the data that the store checked, worded for the client (answered 409 as it is).
    #[error("{0}")]
    Refused(String),
    /// The database's storage cannot take writes now (disk full, read-only): answered 503 until space
    /// returns (docs/behaviour.md#errors).
    #[error("the database cannot write: {0}")]
    Storage(String),
    /// A query's own `THROW 'CODE: detail'`: a rule the statement checked (compare with
    /// [`StoreError::thrown`], never by substring).
    #[error("{0}")]
    Thrown(String),
}

impl StoreError {
    pub(crate) fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Busy(_))
    }

    /// Whether this is the query's own `THROW` of `code` (alone or followed by `: detail`).
    pub fn thrown(&self, code: &str) -> bool {
        matches!(self, StoreError::Thrown(m) if m == code || m.strip_prefix(code).is_some_and(|r| r.starts_with(':')))
    }
}

/// What the engine's messages say when the disk it writes to is full or read-only (the operating
/// system's words, which SurrealKV passes on).
const STORAGE_FULL: [&str; 4] =
    ["no space left on device", "no storage space", "read-only file system", "disk quota exceeded"];

/// Whether an error's text (a [`StoreError::Storage`] turned into a string on its way up) says the
/// disk is full or read-only.
pub fn says_storage_full(message: &str) -> bool {
    let lower = message.to_lowercase();
    STORAGE_FULL.iter().any(|m| lower.contains(m))
}

/// Classifies a SurrealDB error by its kind and message. SurrealDB reports unique-index violations and
/// assertion failures as generic errors told apart only by their text, so this is the one place that
/// reads that text.
fn classify(e: surrealdb::Error) -> StoreError {
    let msg = e.to_string();
    let lower = msg.to_lowercase();
    // A `THROW` (SurrealDB words it "An error occurred: <what was thrown>").
    const THROWN: &str = "An error occurred: ";
    if let Some(at) = msg.find(THROWN) {
        return StoreError::Thrown(msg[at + THROWN.len()..].trim().to_string());
    }
    if STORAGE_FULL.iter().any(|m| lower.contains(m)) {
        StoreError::Storage(msg)
    } else if lower.contains("can be retried")
        || lower.contains("transaction conflict")
        || lower.contains("write conflict")
    {
        StoreError::Busy(msg)
    } else if lower.contains("already contains") || e.is_already_exists() {
        StoreError::Conflict(msg)
    } else if lower.contains("must conform to") || lower.contains("couldn't coerce") || lower.contains("expected a") {
        StoreError::Validation(msg)
    } else {
        StoreError::Db(msg)
    }
}

/// The database handle. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: Conn,
    /// Short-lived copies of rows read on every send (see [`ReadCache`]).
    cache: Arc<ReadCache>,
    /// Notified after each write through this handle that stored events (see [`Store::stored_events`]).
    events_stored: Arc<tokio::sync::Notify>,
}

/// How long (seconds) a cached project or sender-domain row is used before it is read again. Writes
/// through this store drop the entry at once; a change made by another Herald process shows within this
/// time.
const READ_CACHE_FRESH: u64 = 2;

/// Projects and sender domains as `/v1/send` reads them on every request (the project's tracking mode
/// and name, the sender check), kept for [`READ_CACHE_FRESH`] so a busy sender does not pay two database
/// reads per request.
///
/// Writers drop entries after their write; a read that raced a write (the generation moved while it
/// read) is not kept.
#[derive(Default)]
struct ReadCache {
    projects: CacheMap<Option<accounts::Project>>,
    domains: CacheMap<Vec<domains::DomainRow>>,
    /// Job counts by state for `/metrics` (a count reads every job row).
    job_counts: CacheMap<Vec<(String, i64)>>,
    /// DEFERRED emails in the whole database, for `/metrics`.
    deferred: CacheMap<i64>,
    /// The contacts group commit last read or wrote (see `ingest::KnownContacts`).
    known_contacts: ingest::KnownContacts,
    /// Rows of the contact table, for the segment engine's choice between scanning and reading by id
    /// (an estimate: counting takes 0.36 s for 1,000,000 contacts, so it is kept a minute).
    contact_rows: CacheMap<u64, 60>,
}

/// Values kept for `FRESH_SECS` seconds ([`READ_CACHE_FRESH`] unless given).
struct CacheMap<T, const FRESH_SECS: u64 = READ_CACHE_FRESH> {
    map: std::sync::Mutex<std::collections::HashMap<String, (T, std::time::Instant)>>,
    generation: std::sync::atomic::AtomicU64,
}

impl<T, const FRESH_SECS: u64> Default for CacheMap<T, FRESH_SECS> {
    fn default() -> Self {
        CacheMap { map: Default::default(), generation: Default::default() }
    }
}

impl<T: Clone, const FRESH_SECS: u64> CacheMap<T, FRESH_SECS> {
    fn get(&self, key: &str) -> Option<T> {
        let m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        m.get(key).filter(|(_, at)| at.elapsed() < Duration::from_secs(FRESH_SECS)).map(|(v, _)| v.clone())
    }

    fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Keeps a value read while the generation was `seen`, unless a writer moved it meanwhile.
    fn put(&self, key: &str, v: T, seen: u64) {
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if self.generation() != seen {
            return;
        }
        if m.len() > 10_000 {
            m.clear();
        }
        m.insert(key.to_string(), (v, std::time::Instant::now()));
    }

    /// The cached value of `key`, or `load`'s answer, kept unless a writer moved the generation while
    /// it loaded.
    async fn get_or_load<F, Fut>(&self, key: &str, load: F) -> Result<T, StoreError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        if let Some(v) = self.get(key) {
            return Ok(v);
        }
        let seen = self.generation();
        let v = load().await?;
        self.put(key, v.clone(), seen);
        Ok(v)
    }

    /// Drops `key` (every entry with None); reads in flight are not kept.
    fn forget(&self, key: Option<&str>) {
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match key {
            Some(k) => {
                m.remove(k);
            }
            None => m.clear(),
        }
    }
}

impl Store {
    /// A project, possibly as read up to [`READ_CACHE_FRESH`] ago (for per-request settings).
    pub async fn project_cached(&self, id: &str) -> Result<Option<accounts::Project>, StoreError> {
        self.cache.projects.get_or_load(id, || self.project(id)).await
    }

    /// A sender domain by name, possibly as read up to [`READ_CACHE_FRESH`] ago (for the sender check).
    pub async fn domains_named_cached(&self, name: &str) -> Result<Vec<domains::DomainRow>, StoreError> {
        self.cache.domains.get_or_load(name, || self.domains_named(name)).await
    }

    /// Job counts by state, possibly as counted up to [`READ_CACHE_FRESH`] ago: counting reads every job
    /// row, and a scraper (or a dashboard) may ask many times a second.
    pub async fn job_counts_cached(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.cache.job_counts.get_or_load("", || self.job_counts()).await
    }

    /// DEFERRED emails in the whole database, as counted a moment ago (see [`Store::deferred_emails`]).
    pub async fn deferred_emails_cached(&self) -> Result<i64, StoreError> {
        self.cache.deferred.get_or_load("", || self.deferred_emails()).await
    }

    /// Rows of the contact table (every project), possibly as counted up to a minute ago.
    pub(crate) async fn contact_rows_cached(&self) -> Result<u64, StoreError> {
        self.cache.contact_rows.get_or_load("", || self.contact_rows()).await
    }

    /// Drops a project's cached row (its settings changed here).
    pub(crate) fn forget_project(&self, id: &str) {
        self.cache.projects.forget(Some(id));
    }

    /// Drops every cached domain (one was added, checked or deleted here).
    pub(crate) fn forget_domains(&self) {
        self.cache.domains.forget(None);
    }
}

/// The client: the embedded SurrealKV datastore Herald built itself (so it can size SurrealKV's caches),
/// or any other engine through the SDK's URL connection (`mem://`, `ws://`).
#[derive(Clone)]
enum Conn {
    Local(Surreal<Db>, Arc<surrealdb_engine_local::Datastore>),
    Any(Surreal<Any>),
}

/// `count() ... GROUP ALL` answers `[{n}]`, or `[]` when nothing matched.
pub(crate) fn count_of(v: Value) -> Result<i64, StoreError> {
    Ok(v.get(0).and_then(|r| r.get("n")).and_then(Value::as_i64).unwrap_or(0))
}

fn decode<T: DeserializeOwned>(v: Value) -> Result<T, StoreError> {
    serde_json::from_value(v).map_err(|e| StoreError::Decode(e.to_string()))
}

/// Statement results of one query, decoded lazily.
pub struct Rows(surrealdb::IndexedResults);

impl Rows {
    /// All rows of statement `idx`, decoded from JSON.
    pub fn all<T: DeserializeOwned>(&mut self, idx: usize) -> Result<Vec<T>, StoreError> {
        let values: Vec<Value> = self.0.take(idx).map_err(classify)?;
        values.into_iter().map(decode).collect()
    }

    /// The first row of statement `idx`, if any. A `NONE` row (what `SELECT ... FROM ONLY` answers for a
    /// missing record) is no row.
    pub fn first<T: DeserializeOwned>(&mut self, idx: usize) -> Result<Option<T>, StoreError> {
        let values: Vec<Value> = self.0.take(idx).map_err(classify)?;
        match values.into_iter().next() {
            None | Some(Value::Null) => Ok(None),
            Some(v) => decode(v).map(Some),
        }
    }

    /// The value of the last statement that produced one (for multi-statement units ending in `RETURN`).
    pub fn value_last(&mut self) -> Result<Value, StoreError> {
        let n = self.0.num_statements();
        for idx in (0..n).rev() {
            let v = self.value(idx)?;
            if !v.is_null() {
                return Ok(v);
            }
        }
        Ok(Value::Null)
    }

    /// A single scalar or object returned by statement `idx` (for `RETURN` or `count()` statements).
    pub fn value(&mut self, idx: usize) -> Result<Value, StoreError> {
        let v: surrealdb::types::Value = self.0.take(idx).map_err(classify)?;
        Ok(v.into_json_value())
    }
}

impl Store {
    /// Connects to the configured database, selects namespace and database, and applies migrations.
    pub async fn connect(config: &Config) -> Result<Store, StoreError> {
        let store = Self::connect_only(config).await?;
        migrate::apply(&store).await?;
        Ok(store)
    }

    /// Connects without applying migrations.
    pub async fn connect_only(config: &Config) -> Result<Store, StoreError> {
        let url = match config.db.as_str() {
            "memory" => "mem://".to_string(),
            other => other.to_string(),
        };
        let db = if url.starts_with("surrealkv://") {
            let (db, kvs) = open_surrealkv(&url, config).await?;
            Conn::Local(db, kvs)
        } else {
            let db = surrealdb::engine::any::connect(url.as_str())
                .await
                .map_err(|e| StoreError::Db(format!("cannot open {url}: {e}")))?;
            if let (Some(user), Some(pass)) = (&config.db_user, &config.db_password) {
                db.signin(Root { username: user.clone(), password: pass.clone() })
                    .await
                    .map_err(|e| StoreError::Db(format!("cannot sign in to {url}: {e}")))?;
            }
            Conn::Any(db)
        };
        let selected = match &db {
            Conn::Local(db, _) => db.use_ns(config.db_namespace.clone()).use_db(config.db_database.clone()).await,
            Conn::Any(db) => db.use_ns(config.db_namespace.clone()).use_db(config.db_database.clone()).await,
        };
        selected.map_err(|e| StoreError::Db(format!("cannot select namespace/database: {e}")))?;
        Ok(Store { db, cache: Arc::default(), events_stored: Arc::default() })
    }

    /// Another handle on the same database with caches of its own: what a second Herald process sharing
    /// the database sees (tests run two processes' worth of Herald side by side with it).
    pub fn sibling(&self) -> Store {
        Store { db: self.db.clone(), cache: Arc::default(), events_stored: Arc::default() }
    }

    /// Notified after a write through this handle (or its clones) stored events in the outbox, so that
    /// the event stream can hand them out without waiting for its next round.
    pub fn stored_events(&self) -> Arc<tokio::sync::Notify> {
        self.events_stored.clone()
    }

    /// Runs one query with bound variables (`vars` must be a JSON object) and checks every statement
    /// for errors.
    pub async fn query(&self, sql: &str, vars: Value) -> Result<Rows, StoreError> {
        let res = match &self.db {
            Conn::Local(db, _) => db.query(sql).bind(vars).await,
            Conn::Any(db) => db.query(sql).bind(vars).await,
        };
        let mut res = res.map_err(classify)?;
        let errors = res.take_errors();
        if !errors.is_empty() {
            // Report the first failing statement; the others usually only say the transaction failed.
            let mut errors: Vec<_> = errors.into_iter().collect();
            errors.sort_by_key(|(i, _)| *i);
            let mut classified: Vec<StoreError> = errors.into_iter().map(|(_, e)| classify(e)).collect();
            if let Some(pos) = classified.iter().position(|e| !is_cascade(e)) {
                return Err(classified.swap_remove(pos));
            }
            return Err(classified.swap_remove(0));
        }
        if sql.contains(events::OUTBOX_MARK) {
            self.events_stored.notify_one();
        }
        Ok(Rows(res))
    }

    /// Runs a write unit, retrying it on retryable transaction conflicts (snapshot isolation reports a
    /// conflict instead of waiting, and nothing retries for us). The unit must be safe to run again.
    pub async fn write<T, F, Fut>(&self, mut unit: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut attempt = 0u32;
        loop {
            match unit().await {
                Err(e) if e.is_retryable() && attempt < 12 => {
                    attempt += 1;
                    // Half the backoff fixed, half random: two writers that conflicted must not retry in
                    // step (with a jitter of a few milliseconds only, two job workers claiming from one
                    // queue once conflicted twelve times in a row and the claim failed).
                    let backoff = 1u64 << attempt.min(6);
                    let wait = backoff / 2 + rand::random::<u64>() % (backoff / 2 + 5);
                    tokio::time::sleep(Duration::from_millis(wait)).await;
                }
                other => return other,
            }
        }
    }

    /// Deletes the record `table:id` if it belongs to `project`; true when it did. `table` is a fixed
    /// identifier from the code, never input.
    pub async fn delete_scoped(&self, table: &'static str, project: &str, id: &str) -> Result<bool, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    &format!(
                        "LET $gone = (DELETE {table} WHERE id = type::record('{table}', $id) AND project = $p RETURN BEFORE);
                         RETURN array::len($gone) > 0;"
                    ),
                    serde_json::json!({ "p": project, "id": id }),
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_bool().unwrap_or(false))
    }

    /// Closes the embedded datastore (stops its maintenance tasks, flushes and closes SurrealKV) while
    /// the runtime still runs; a no-op for other engines. Call it last: the store answers nothing after.
    pub async fn close(&self) {
        if let Conn::Local(_, kvs) = &self.db
            && let Err(e) = kvs.shutdown().await
        {
            tracing::warn!(error = %e, "closing the embedded database failed");
        }
    }

    /// Closes the store as the last of its handles, inside the runtime: waits (at most `wait`) for the
    /// tasks that held the other handles (group-commit lanes, the delivery ledger, job handlers) to end
    /// once their owner was dropped, closes the datastore, then gives the connection's own task a moment
    /// to let go of it, so nothing of the engine is dropped after the runtime stops.
    pub async fn close_last(self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        while Arc::strong_count(&self.cache) > 1 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if Arc::strong_count(&self.cache) > 1 {
            tracing::warn!("closing the store while other handles of it are still alive");
        }
        self.close().await;
        drop(self);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    /// Checks that the database answers.
    pub async fn health(&self) -> Result<(), StoreError> {
        self.query("RETURN 1", serde_json::json!({})).await.map(|_| ())
    }
}

/// Size of a SurrealKV value-log file. The file being written is the one the engine never collects
/// (docs/performance.md#disk-that-stops-growing-issue-79): SurrealDB sizes it from the machine's memory
/// (64-512 MiB), so up to that much deleted data could stay on disk however long Herald waited.
const VLOG_FILE_BYTES: u64 = 32 << 20;

/// Opens the embedded SurrealKV datastore at `url` the way the SDK's own `surrealkv://` connection does
/// (build without maintenance tasks, check the storage version, bootstrap, then start the tasks), but
/// with the block cache and memtable sized from the configuration: left alone, SurrealKV sizes its
/// block cache to half the machine's memory less 1 GiB and its memtable to up to 4 GiB, and the SDK's URL
/// parameters cannot reach either setting.
async fn open_surrealkv(
    url: &str,
    config: &Config,
) -> Result<(Surreal<Db>, Arc<surrealdb_engine_local::Datastore>), StoreError> {
    let settings = surrealdb_cnf::ConfigMap::empty()
        .with_key_value("surrealkv_block_cache_capacity", config.db_cache_bytes.to_string())
        .with_key_value("surrealkv_max_memtable_size", config.db_memtable_bytes.to_string())
        .with_key_value("surrealkv_block_size", config.db_block_bytes.to_string())
        .with_key_value("surrealkv_vlog_threshold", config.db_vlog_bytes.to_string())
        .with_key_value("surrealkv_vlog_max_file_size", VLOG_FILE_BYTES.to_string());
    let failed = |e: &dyn std::fmt::Display| StoreError::Db(format!("cannot open {url}: {e}"));
    let kvs = surrealdb_engine_local::Datastore::builder()
        .with_config(settings)
        .without_maintenance_tasks()
        .build_with_path(url)
        .await
        .map_err(|e| failed(&e))?;
    kvs.check_version().await.map_err(|e| failed(&e))?;
    kvs.bootstrap().await.map_err(|e| failed(&e))?;
    kvs.start_maintenance_tasks();
    let db = Surreal::<Db>::unstable_from_datastore(Arc::clone(&kvs), None).await.map_err(|e| failed(&e))?;
    Ok((db, kvs))
}

/// "The query was not executed due to a failed transaction" and similar follow-on errors.
fn is_cascade(e: &StoreError) -> bool {
    let m = e.to_string().to_lowercase();
    m.contains("failed transaction") || m.contains("not executed")
}

/// Decodes a record id (`table:⟨key⟩` or a bare key) into its key.
pub fn key_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Helper for building bound variables.
#[macro_export]
macro_rules! vars {
    ($($t:tt)*) => { serde_json::json!({ $($t)* }) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query's own THROW comes back typed with what it threw; unique-index and schema refusals with
    /// their kinds; and a client never sees the database's words for either.
    #[tokio::test]
    async fn store_errors_are_typed_where_they_arise() {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        let thrown = store
            .query(
                "BEGIN TRANSACTION; LET $x = 1; THROW 'CAMPAIGN_STATE: batch written'; COMMIT TRANSACTION;",
                crate::vars! {},
            )
            .await
            .err()
            .expect("a THROW fails the query");
        assert!(thrown.thrown("CAMPAIGN_STATE"), "{thrown:?}");
        assert!(!thrown.thrown("CAMPAIGN"), "a code is matched whole: {thrown:?}");
        assert!(!thrown.thrown("batch written"), "{thrown:?}");

        store.create_project("p1", "One", "ph", "sh", None, None, 1).await.unwrap();
        let q = "CREATE contact SET project = 'p1', email = 'a@example.com', subscribed = true, data = {},
            version = 1, created_at = 1, updated_at = 1";
        store.query(q, crate::vars! {}).await.unwrap();
        let twice = store.query(q, crate::vars! {}).await.err().expect("a second contact with that email");
        assert!(matches!(twice, StoreError::Conflict(_)), "{twice:?}");
        let client = crate::error::Error::from(twice);
        assert!(!client.to_string().contains("a@example.com") && !client.to_string().contains("contact:"), "{client}");

        let bad =
            store.query("CREATE email SET project = 1", crate::vars! {}).await.err().expect("a number for a string");
        assert!(matches!(bad, StoreError::Validation(_)), "{bad:?}");
        let client = crate::error::Error::from(bad);
        assert!(matches!(client, crate::error::Error::Invalid(_)), "{client:?}");
        assert!(!client.to_string().contains("email:"), "{client}");
    }

    /// The read cache serves a row read moments ago (a write that bypasses the store is not seen at
    /// once), and a write through the store is seen by the very next read.
    #[tokio::test]
    async fn read_cache_is_dropped_by_writes_through_the_store() {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        store.create_project("p1", "One", "ph", "sh", None, None, 1).await.unwrap();
        assert_eq!(store.project_cached("p1").await.unwrap().unwrap().tracking, None);
        store.query("UPDATE type::record('project', 'p1') SET tracking = 'DISABLED'", crate::vars! {}).await.unwrap();
        assert_eq!(store.project_cached("p1").await.unwrap().unwrap().tracking, None, "served from the cache");
        store.set_project_tracking("p1", "ENABLED", 2).await.unwrap();
        assert_eq!(store.project_cached("p1").await.unwrap().unwrap().tracking.as_deref(), Some("ENABLED"));
        store.delete_project("p1", &crate::services::projects::purge_job("p1", 3), 3).await.unwrap();
        assert!(store.project_cached("p1").await.unwrap().is_none(), "a deleted project is gone from the cache");

        assert!(store.domains_named_cached("example.com").await.unwrap().is_empty());
        let d = domains::DomainRow {
            id: "d1".into(),
            project: "p1".into(),
            name: "example.com".into(),
            selector: "herald".into(),
            dkim_public: String::new(),
            dkim_private: String::new(),
            status: crate::domain::status::DomainStatus::Pending,
            trusted: false,
            records: "[]".into(),
            verified_at: None,
            last_checked_at: None,
            created_at: 1,
            updated_at: 1,
            inbound: false,
        };
        store.insert_domain(&d).await.unwrap();
        use crate::domain::status::DomainStatus;
        assert_eq!(store.domains_named_cached("example.com").await.unwrap()[0].status, DomainStatus::Pending);
        assert!(store.save_domain_check(&d, DomainStatus::Verified, "[]", Some(3), 3).await.unwrap());
        assert_eq!(store.domains_named_cached("example.com").await.unwrap()[0].status, DomainStatus::Verified);
        assert!(store.delete_domain("p1", "d1").await.unwrap());
        assert!(store.domains_named_cached("example.com").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_missing_record_read_by_id_is_no_row() {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        assert!(store.project("nope").await.unwrap().is_none());
    }
}
