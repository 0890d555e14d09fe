//! Herald's plugin runtime: WebAssembly components in the plugins folder that add condition operators,
//! workflow step types and delivery transports (ABI: `plugin-api/wit/<version>`).
//!
//! A crate of its own so that it depends on neither the database nor the HTTP server: the host uses it
//! (re-exported as `herald_host::plugins`), and so does the SDK's test kit, so a plugin author's
//! `cargo test` compiles wasmtime but not SurrealDB.
//!
//! One wasmtime [`Engine`] per process (pooling allocator, epoch interruption, fuel). Each plugin is
//! compiled off the request path (or loaded from the on-disk cache of precompiled artifacts, keyed by
//! content hash and engine compatibility), checked against the ABI versions this host supports, and kept
//! as an `InstancePre`. Steps and transports get a fresh store per call, so nothing leaks between calls;
//! operators keep warm instances and evaluate in batches. Every call has a wall-clock deadline (epoch
//! interruption plus a timeout around host calls), a linear-memory cap and, for operators, fuel; a trap,
//! timeout, memory exhaustion or panic fails that call with an error naming the plugin.
//!
//! The registry swaps plugins atomically: a call holds an `Arc` of the version it started on, a plugin
//! that fails to load leaves the previous version serving, and a removed file unloads its plugin.
//!
//! Must not depend on: salvo, surrealdb (checked by `tests/tidy.rs`).

pub mod abi_v1;
pub mod clock;
pub mod http;
mod loading;
pub mod manifest;
pub mod types;
pub mod watch;

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, InstancePre, Linker, ResourceTable};
use wasmtime::{Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter, Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use clock::SharedClock;
use manifest::PluginGrant;
use manifest::{Grants, Manifest};
pub use types::*;

/// The `herald:plugin` versions this host loads.
pub const SUPPORTED_ABI: &[&str] = &["1.0.0", "1.1.0"];
/// Plugin-defined counters kept per process (all plugins together).
const MAX_COUNTERS: usize = 1000;

/// Plugin-defined counters by (plugin, counter).
pub type Counters = Arc<Mutex<BTreeMap<(String, String), u64>>>;
const EPOCH_TICK: Duration = Duration::from_millis(5);
const STDERR_CAPACITY: usize = 4096;

/// Why a plugin call failed. The message always names the plugin.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    #[error("no loaded plugin provides {0}")]
    NotFound(String),
    #[error("plugin `{plugin}` timed out after {ms} ms")]
    Timeout { plugin: String, ms: u64 },
    #[error("plugin `{plugin}` ran out of fuel (limit {fuel})")]
    OutOfFuel { plugin: String, fuel: u64 },
    #[error("plugin `{plugin}` exceeded its memory limit of {mb} MiB")]
    OutOfMemory { plugin: String, mb: u64 },
    #[error("plugin `{plugin}` panicked: {message}")]
    Panic { plugin: String, message: String },
    #[error("plugin `{plugin}` trapped: {message}")]
    Trap { plugin: String, message: String },
    #[error("plugin `{plugin}` failed: {message}")]
    Guest { plugin: String, code: String, message: String, retryable: bool },
    #[error("plugin `{plugin}` could not start: {message}")]
    Instantiate { plugin: String, message: String },
}

impl CallError {
    /// Whether trying again later can help (timeouts and retryable guest errors).
    pub fn retryable(&self) -> bool {
        match self {
            CallError::Timeout { .. } | CallError::Instantiate { .. } | CallError::NotFound(_) => true,
            CallError::Guest { retryable, .. } => *retryable,
            _ => false,
        }
    }
}

/// Per-call store data.
pub struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: MemoryCap,
    env: Arc<PluginEnv>,
    stderr: MemoryOutputPipe,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// What a plugin's host imports see: its name, grants, HTTP client and the clock.
pub struct PluginEnv {
    pub name: String,
    pub grants: Grants,
    pub outbound: http::Outbound,
    pub clock: SharedClock,
    pub counters: Counters,
}

struct MemoryCap {
    max: usize,
    hit: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.max {
            self.hit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// Call counters of one plugin name (kept across reloads).
#[derive(Default)]
pub struct Stats {
    pub calls: AtomicU64,
    pub failures: AtomicU64,
    pub micros: AtomicU64,
}

/// One loaded plugin version.
pub struct Loaded {
    pub metadata: Metadata,
    pub abi: String,
    pub path: PathBuf,
    pub hash: String,
    pub loaded_at_ms: i64,
    pub load_ms: u64,
    pub operators: Vec<OperatorInfo>,
    pub step_types: Vec<StepTypeInfo>,
    pub transport: Option<String>,
    env: Arc<PluginEnv>,
    pre: InstancePre<CallState>,
    binding: Binding,
    stats: Arc<Stats>,
}

/// How a loaded plugin is called, by the major version of the ABI it was built against. Minor versions
/// share their major's module; a new major version (2.0) adds a module and a variant beside `V1`, and the
/// calls of [`PluginHost`] dispatch on it, so the 1.x code is never edited for it.
enum Binding {
    V1(abi_v1::Bound),
}

/// The major version of an ABI version string (`"1.1.0"` → 1).
fn abi_major(abi: &str) -> Option<u64> {
    abi.split('.').next()?.parse().ok()
}

/// A plugin file that did not load, and why.
#[derive(Debug, Clone)]
pub struct Failure {
    pub path: PathBuf,
    pub error: String,
    pub at_ms: i64,
}

#[derive(Default)]
struct Registry {
    /// by plugin name (= file stem)
    plugins: BTreeMap<String, Arc<Loaded>>,
    /// by file stem: the last load error (a previous version may still be serving)
    failures: BTreeMap<String, Failure>,
    operators: HashMap<String, Arc<Loaded>>,
    step_types: HashMap<String, Arc<Loaded>>,
    transports: HashMap<String, Arc<Loaded>>,
}

impl Registry {
    fn reindex(&mut self) {
        self.operators.clear();
        self.step_types.clear();
        self.transports.clear();
        for p in self.plugins.values() {
            for o in &p.operators {
                self.operators.insert(o.name.clone(), p.clone());
            }
            for s in &p.step_types {
                self.step_types.insert(s.name.clone(), p.clone());
            }
            if let Some(t) = &p.transport {
                self.transports.insert(t.clone(), p.clone());
            }
        }
    }

    /// Names another plugin already provides.
    fn conflict(&self, candidate: &Loaded) -> Option<String> {
        let other = |p: &Arc<Loaded>| p.metadata.name != candidate.metadata.name;
        for o in &candidate.operators {
            if let Some(p) = self.operators.get(&o.name).filter(|p| other(p)) {
                return Some(format!("operator {} is already provided by plugin `{}`", o.name, p.metadata.name));
            }
        }
        for s in &candidate.step_types {
            if let Some(p) = self.step_types.get(&s.name).filter(|p| other(p)) {
                return Some(format!("step type {} is already provided by plugin `{}`", s.name, p.metadata.name));
            }
        }
        if let Some(t) = &candidate.transport {
            if t == "smtp" || t == "file" {
                return Some(format!("transport name {t} is built in"));
            }
            if let Some(p) = self.transports.get(t).filter(|p| other(p)) {
                return Some(format!("transport {t} is already provided by plugin `{}`", p.metadata.name));
            }
        }
        None
    }
}

/// A row of `GET /plugins`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    pub name: String,
    pub version: Option<String>,
    pub kind: Option<String>,
    pub abi_version: Option<String>,
    pub description: Option<String>,
    pub provides: Vec<String>,
    /// loaded or failed
    pub status: String,
    /// the last load error (with status loaded, an older version is still serving)
    pub error: Option<String>,
    pub loaded_at: Option<String>,
    pub load_ms: Option<u64>,
    pub calls: u64,
    pub failures: u64,
    pub file: String,
}

/// Runtime settings.
#[derive(Clone)]
pub struct Options {
    pub dir: PathBuf,
    pub cache_dir: PathBuf,
    pub grants: BTreeMap<String, PluginGrant>,
}

/// The plugin runtime of one process.
pub struct PluginHost {
    engine: Engine,
    linker: Linker<CallState>,
    registry: RwLock<Registry>,
    stats: Mutex<HashMap<String, Arc<Stats>>>,
    counters: Counters,
    options: Options,
    clock: SharedClock,
    /// serialises loads so two events for one file cannot race
    loading: tokio::sync::Mutex<()>,
    stop: Arc<AtomicBool>,
}

impl Drop for PluginHost {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn engine() -> Result<Engine, String> {
    let mut c = wasmtime::Config::new();
    c.wasm_component_model(true);
    c.concurrency_support(false);
    c.epoch_interruption(true);
    c.consume_fuel(true);
    c.max_wasm_stack(1 << 20);
    c.async_stack_size(2 << 20);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(512)
        .total_core_instances(4096)
        .max_core_instances_per_component(64)
        .total_memories(512)
        .max_memories_per_component(8)
        .total_tables(4096)
        .max_tables_per_component(64)
        .total_stacks(512)
        .max_memory_size((manifest::MAX_MEMORY_MB as usize) << 20)
        .max_unused_warm_slots(32);
    c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&c).map_err(|e| format!("cannot create the wasm engine: {e}"))
}

impl PluginHost {
    /// Creates the runtime (no plugins loaded yet) and starts its epoch ticker.
    pub fn new(options: Options, clock: SharedClock) -> Result<Arc<PluginHost>, String> {
        let engine = engine()?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| e.to_string())?;
        abi_v1::add_imports(&mut linker).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        {
            let engine = engine.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("herald-wasm-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| format!("cannot start the epoch ticker: {e}"))?;
        }
        Ok(Arc::new(PluginHost {
            engine,
            linker,
            registry: RwLock::new(Registry::default()),
            stats: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            options,
            clock,
            loading: tokio::sync::Mutex::new(()),
            stop,
        }))
    }

    pub fn dir(&self) -> &Path {
        &self.options.dir
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.registry.write().unwrap_or_else(|p| p.into_inner())
    }

    fn stats_for(&self, name: &str) -> Arc<Stats> {
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        s.entry(name.to_string()).or_default().clone()
    }

    /// A fresh store for one call, with the plugin's limits.
    fn store(&self, env: &Arc<PluginEnv>, fuel: Option<u64>) -> Store<CallState> {
        let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
        let wasi = WasiCtxBuilder::new().stderr(stderr.clone()).build();
        let state = CallState {
            wasi,
            table: ResourceTable::new(),
            limits: MemoryCap { max: env.grants.memory_bytes, hit: false },
            env: env.clone(),
            stderr,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        let _ = store.set_fuel(fuel.unwrap_or(u64::MAX));
        store.set_epoch_deadline(deadline_ticks(env.grants.timeout));
        store
    }

    /// Turns a wasmtime error into a call error naming the plugin.
    fn classify(env: &PluginEnv, store: Option<&Store<CallState>>, e: wasmtime::Error) -> CallError {
        let plugin = env.name.clone();
        let (memory_hit, stderr) = match store {
            Some(s) => (s.data().limits.hit, String::from_utf8_lossy(&s.data().stderr.contents()).to_string()),
            None => (false, String::new()),
        };
        if memory_hit {
            return CallError::OutOfMemory { plugin, mb: (env.grants.memory_bytes >> 20) as u64 };
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => {
                return CallError::Timeout { plugin, ms: env.grants.timeout.as_millis() as u64 };
            }
            Some(Trap::OutOfFuel) => return CallError::OutOfFuel { plugin, fuel: env.grants.fuel },
            _ => {}
        }
        if let Some(line) = stderr.lines().find(|l| l.contains("panicked at")) {
            let rest: Vec<&str> = stderr.lines().skip_while(|l| !l.contains("panicked at")).skip(1).take(3).collect();
            let message = if rest.is_empty() { line.to_string() } else { rest.join(" ") };
            return CallError::Panic { plugin, message: message.trim().to_string() };
        }
        CallError::Trap { plugin, message: format!("{e:#}") }
    }

    fn record(&self, p: &Loaded, started: Instant, ok: bool) {
        p.stats.calls.fetch_add(1, Ordering::Relaxed);
        if !ok {
            p.stats.failures.fetch_add(1, Ordering::Relaxed);
        }
        p.stats.micros.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// A loaded plugin by name.
    pub fn plugin(&self, name: &str) -> Option<Arc<Loaded>> {
        self.read().plugins.get(name).cloned()
    }

    /// The plugin that provides an operator.
    pub fn operator(&self, name: &str) -> Option<Arc<Loaded>> {
        self.read().operators.get(name).cloned()
    }

    /// The plugin that provides a step type.
    pub fn step_type(&self, name: &str) -> Option<Arc<Loaded>> {
        self.read().step_types.get(name).cloned()
    }

    /// The plugin that provides a transport.
    pub fn transport(&self, name: &str) -> Option<Arc<Loaded>> {
        self.read().transports.get(name).cloned()
    }

    /// Operators from plugins, with their plugin's name.
    pub fn operators(&self) -> Vec<(OperatorInfo, String)> {
        let reg = self.read();
        let mut out: Vec<_> = reg
            .operators
            .values()
            .flat_map(|p| p.operators.iter().map(|o| (o.clone(), p.metadata.name.clone())))
            .collect();
        out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        out.dedup_by(|a, b| a.0.name == b.0.name);
        out
    }

    /// Transport names from plugins.
    pub fn transports(&self) -> Vec<String> {
        let mut t: Vec<String> = self.read().transports.keys().cloned().collect();
        t.sort();
        t
    }

    /// Step types from plugins.
    pub fn step_types(&self) -> Vec<StepTypeInfo> {
        let mut t: Vec<StepTypeInfo> =
            self.read().plugins.values().flat_map(|p| p.step_types.iter().cloned()).collect();
        t.sort_by(|a, b| a.name.cmp(&b.name));
        t
    }

    /// Checks an operand for a plugin operator; `Ok(Err(msg))` is the plugin's refusal.
    pub async fn validate_operand(&self, operator: &str, operand: &Value) -> Result<Result<(), String>, CallError> {
        let p = self.operator(operator).ok_or_else(|| CallError::NotFound(format!("operator {operator}")))?;
        let started = Instant::now();
        let r = match &p.binding {
            Binding::V1(b) => abi_v1::validate_operand(self, &p, b, operator, operand).await,
        };
        self.record(&p, started, r.is_ok());
        r
    }

    /// Evaluates a plugin operator against many values (one result per value, in order).
    pub async fn evaluate(&self, operator: &str, operand: &Value, values: &[Value]) -> Result<Vec<bool>, CallError> {
        let p = self.operator(operator).ok_or_else(|| CallError::NotFound(format!("operator {operator}")))?;
        let started = Instant::now();
        let r = match &p.binding {
            Binding::V1(b) => abi_v1::evaluate(self, &p, b, operator, operand, values).await,
        };
        let r = r.and_then(|r| {
            let bools = r.map_err(|g| CallError::Guest {
                plugin: p.metadata.name.clone(),
                code: g.code,
                message: g.message,
                retryable: g.retryable,
            })?;
            if bools.len() != values.len() {
                return Err(CallError::Trap {
                    plugin: p.metadata.name.clone(),
                    message: format!("returned {} results for {} values", bools.len(), values.len()),
                });
            }
            Ok(bools)
        });
        self.record(&p, started, r.is_ok());
        r
    }

    /// Checks a step's config; `Ok(Err(problems))` lists what is wrong with it.
    pub async fn validate_step_config(
        &self,
        step_type: &str,
        config: &str,
    ) -> Result<Result<(), Vec<String>>, CallError> {
        let p = self.step_type(step_type).ok_or_else(|| CallError::NotFound(format!("step type {step_type}")))?;
        let started = Instant::now();
        let r = match &p.binding {
            Binding::V1(b) => abi_v1::validate_step_config(self, &p, b, step_type, config).await,
        };
        self.record(&p, started, r.is_ok());
        r
    }

    /// Runs a step in a fresh instance.
    pub async fn execute_step(&self, input: &StepInput) -> Result<StepOutcome, CallError> {
        let p = self
            .step_type(&input.step_type)
            .ok_or_else(|| CallError::NotFound(format!("step type {}", input.step_type)))?;
        let started = Instant::now();
        let r = match &p.binding {
            Binding::V1(b) => abi_v1::execute_step(self, &p, b, input).await,
        };
        self.record(&p, started, r.is_ok());
        r
    }

    /// Hands one message to a transport plugin.
    pub async fn send(&self, transport: &str, msg: &Outgoing) -> Result<SendOutcome, CallError> {
        let p = self.transport(transport).ok_or_else(|| CallError::NotFound(format!("transport {transport}")))?;
        let started = Instant::now();
        let r = match &p.binding {
            Binding::V1(b) => abi_v1::send(self, &p, b, msg).await,
        };
        self.record(&p, started, r.as_ref().is_ok_and(|o| matches!(o, SendOutcome::Accepted { .. })));
        r
    }

    /// Lets a transport plugin parse its provider's webhook call.
    pub async fn parse_notifications(
        &self,
        transport: &str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Result<Result<Vec<Notification>, String>, CallError> {
        let p = self.transport(transport).ok_or_else(|| CallError::NotFound(format!("transport {transport}")))?;
        let started = Instant::now();
        let r = match &p.binding {
            Binding::V1(b) => abi_v1::parse_notifications(self, &p, b, headers, body).await,
        };
        self.record(&p, started, r.is_ok());
        r
    }

    /// Every plugin file with its status, sorted by name.
    pub fn list(&self) -> Vec<PluginStatus> {
        let reg = self.read();
        let mut names: Vec<&String> = reg.plugins.keys().chain(reg.failures.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|name| {
                let failure = reg.failures.get(name);
                match reg.plugins.get(name) {
                    Some(p) => PluginStatus {
                        name: name.clone(),
                        version: Some(p.metadata.version.clone()),
                        kind: Some(p.metadata.kind.as_str().into()),
                        abi_version: Some(p.abi.clone()),
                        description: Some(p.metadata.description.clone()),
                        provides: p.metadata.provides.clone(),
                        status: "loaded".into(),
                        error: failure.map(|f| f.error.clone()),
                        loaded_at: Some(clock::rfc3339(p.loaded_at_ms)),
                        load_ms: Some(p.load_ms),
                        calls: p.stats.calls.load(Ordering::Relaxed),
                        failures: p.stats.failures.load(Ordering::Relaxed),
                        file: p.path.display().to_string(),
                    },
                    None => PluginStatus {
                        name: name.clone(),
                        version: None,
                        kind: None,
                        abi_version: None,
                        description: None,
                        provides: vec![],
                        status: "failed".into(),
                        error: failure.map(|f| f.error.clone()),
                        loaded_at: None,
                        load_ms: None,
                        calls: 0,
                        failures: 0,
                        file: failure.map(|f| f.path.display().to_string()).unwrap_or_default(),
                    },
                }
            })
            .collect()
    }

    /// Per-plugin metrics in the Prometheus text format.
    pub fn render_metrics(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        out.push_str(
            "# HELP herald_plugin_calls_total Calls into each plugin.\n# TYPE herald_plugin_calls_total counter\n",
        );
        let stats: Vec<(String, Arc<Stats>)> = {
            let s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
            let mut v: Vec<_> = s.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        };
        for (name, s) in &stats {
            let _ = writeln!(out, "herald_plugin_calls_total{{plugin=\"{name}\"}} {}", s.calls.load(Ordering::Relaxed));
        }
        out.push_str("# HELP herald_plugin_failures_total Failed calls into each plugin.\n# TYPE herald_plugin_failures_total counter\n");
        for (name, s) in &stats {
            let _ = writeln!(
                out,
                "herald_plugin_failures_total{{plugin=\"{name}\"}} {}",
                s.failures.load(Ordering::Relaxed)
            );
        }
        out.push_str("# HELP herald_plugin_call_seconds_total Time spent in each plugin's calls.\n# TYPE herald_plugin_call_seconds_total counter\n");
        for (name, s) in &stats {
            let _ = writeln!(
                out,
                "herald_plugin_call_seconds_total{{plugin=\"{name}\"}} {}",
                s.micros.load(Ordering::Relaxed) as f64 / 1e6
            );
        }
        out.push_str("# HELP herald_plugin_counter_total Counters plugins keep (herald:plugin/metrics).\n# TYPE herald_plugin_counter_total counter\n");
        for ((plugin, counter), n) in self.counters.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "herald_plugin_counter_total{{plugin=\"{plugin}\",counter=\"{counter}\"}} {n}");
        }
        let reg = self.read();
        out.push_str("# HELP herald_plugin_loaded Whether each plugin is loaded (1) or failed (0).\n# TYPE herald_plugin_loaded gauge\n");
        for name in reg.plugins.keys() {
            let _ = writeln!(out, "herald_plugin_loaded{{plugin=\"{name}\"}} 1");
        }
        for name in reg.failures.keys().filter(|n| !reg.plugins.contains_key(*n)) {
            let _ = writeln!(out, "herald_plugin_loaded{{plugin=\"{name}\"}} 0");
        }
        out
    }

    /// Starts watching the plugins folder; changes are applied off the request path.
    pub fn watch(self: &Arc<Self>) -> Result<watch::Watcher, String> {
        watch::start(self.clone())
    }
}

fn deadline_ticks(timeout: Duration) -> u64 {
    (timeout.as_micros() / EPOCH_TICK.as_micros()).max(1) as u64 + 1
}
