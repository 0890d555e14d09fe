//! [`Harness`]: one built plugin loaded into the real Herald plugin runtime, in a private plugins folder.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use herald_plugin_runtime::clock::{Clock, ManualClock, SharedClock, SystemClock};
use herald_plugin_runtime::manifest::Manifest;
use herald_plugin_runtime::manifest::PluginGrant;
use herald_plugin_runtime::{
    CallError, Kind, Loaded, Notification, Options, Outgoing, PluginHost, PluginStatus, SendOutcome, StepInput,
    StepOutcome, Value,
};

/// Where a plugin's manifest comes from: a file, or its TOML text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestSource {
    /// A `manifest.toml` file.
    Path(PathBuf),
    /// The manifest's TOML text.
    Text(String),
}

impl ManifestSource {
    fn text(&self) -> Result<String, String> {
        match self {
            ManifestSource::Text(t) => Ok(t.clone()),
            ManifestSource::Path(p) => {
                std::fs::read_to_string(p).map_err(|e| format!("cannot read the manifest {}: {e}", p.display()))
            }
        }
    }
}

impl From<&Path> for ManifestSource {
    fn from(p: &Path) -> Self {
        ManifestSource::Path(p.to_path_buf())
    }
}

impl From<PathBuf> for ManifestSource {
    fn from(p: PathBuf) -> Self {
        ManifestSource::Path(p)
    }
}

impl From<&PathBuf> for ManifestSource {
    fn from(p: &PathBuf) -> Self {
        ManifestSource::Path(p.clone())
    }
}

/// A string with a `=` (every manifest has `name = …`) is manifest text; anything else is a path.
impl From<&str> for ManifestSource {
    fn from(s: &str) -> Self {
        if s.contains('=') { ManifestSource::Text(s.to_owned()) } else { ManifestSource::Path(PathBuf::from(s)) }
    }
}

/// Like `From<&str>`: text when it contains `=`, else a path.
impl From<String> for ManifestSource {
    fn from(s: String) -> Self {
        ManifestSource::from(s.as_str())
    }
}

/// The clock the runtime (and so the plugin's `clock.now-ms`) reads.
#[derive(Debug, Clone)]
pub enum TestClock {
    /// The real time.
    System,
    /// A clock that moves only when the test sets or advances it.
    Manual(ManualClock),
}

impl TestClock {
    /// Milliseconds since the Unix epoch, as the plugin sees them.
    pub fn now_ms(&self) -> i64 {
        match self {
            TestClock::System => SystemClock.now_ms(),
            TestClock::Manual(c) => c.now_ms(),
        }
    }

    fn shared(&self) -> SharedClock {
        match self {
            TestClock::System => Arc::new(SystemClock),
            TestClock::Manual(c) => Arc::new(c.clone()),
        }
    }
}

/// A built plugin (`.wasm` + manifest) and how to load it: the clock and the artifact cache. Load it as
/// many times as needed, with different grants ([`HarnessBuilder::load`]); the compliance suites take
/// one of these because some checks need a fresh load (another timeout, no config, ...).
#[derive(Debug, Clone)]
pub struct HarnessBuilder {
    wasm: PathBuf,
    manifest: ManifestSource,
    clock: TestClock,
    cache_dir: Option<PathBuf>,
}

impl HarnessBuilder {
    /// A plugin from its component file and its manifest (a path or the TOML text).
    pub fn new(wasm: impl AsRef<Path>, manifest: impl Into<ManifestSource>) -> HarnessBuilder {
        HarnessBuilder {
            wasm: wasm.as_ref().to_path_buf(),
            manifest: manifest.into(),
            clock: TestClock::System,
            cache_dir: None,
        }
    }

    /// Runs the plugin against the system clock (the default).
    pub fn system_clock(mut self) -> HarnessBuilder {
        self.clock = TestClock::System;
        self
    }

    /// Runs the plugin against a settable clock; keep a clone to move it ([`ManualClock::set`],
    /// [`ManualClock::advance`]), or use [`Harness::manual_clock`].
    pub fn manual_clock(mut self, clock: ManualClock) -> HarnessBuilder {
        self.clock = TestClock::Manual(clock);
        self
    }

    /// Where compiled artifacts are cached between loads (default: `.herald-testkit-cache` beside the
    /// `.wasm`, so a plugin is compiled once per build, not once per test).
    pub fn cache_dir(mut self, dir: impl AsRef<Path>) -> HarnessBuilder {
        self.cache_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// The component file.
    pub fn wasm(&self) -> &Path {
        &self.wasm
    }

    /// The manifest's text.
    pub fn manifest_text(&self) -> Result<String, String> {
        self.manifest.text()
    }

    /// The clock loads use.
    pub fn clock(&self) -> &TestClock {
        &self.clock
    }

    /// Loads the plugin in a fresh runtime with this grant (the operator's `[plugin.<name>]` settings).
    /// Fails with the runtime's recorded load error when the plugin does not load.
    pub async fn load(&self, grant: PluginGrant) -> Result<Harness, String> {
        let text = self.manifest.text()?;
        let manifest = Manifest::parse(&text)?;
        let name = manifest.name.clone();
        let dir = TempDir::new()?;
        let plugins = dir.path().join("plugins");
        std::fs::create_dir_all(&plugins).map_err(|e| format!("cannot create {}: {e}", plugins.display()))?;
        std::fs::write(plugins.join(format!("{name}.toml")), &text)
            .map_err(|e| format!("cannot write the manifest: {e}"))?;
        std::fs::copy(&self.wasm, plugins.join(format!("{name}.wasm")))
            .map_err(|e| format!("cannot copy {}: {e}", self.wasm.display()))?;
        let cache_dir = self.cache_dir.clone().unwrap_or_else(|| match self.wasm.parent() {
            Some(p) => p.join(".herald-testkit-cache"),
            None => dir.path().join("cache"),
        });
        let options = Options { dir: plugins, cache_dir, grants: [(name.clone(), grant)].into_iter().collect() };
        let host = PluginHost::new(options, self.clock.shared())?;
        host.load_all().await;
        let harness = Harness { host, name, clock: self.clock.clone(), _dir: dir };
        let status =
            harness.status().ok_or_else(|| format!("plugin `{}` was not found in its folder", harness.name))?;
        if status.status != "loaded" {
            return Err(format!(
                "plugin `{}` did not load: {}",
                harness.name,
                status.error.unwrap_or_else(|| "(no error recorded)".into())
            ));
        }
        Ok(harness)
    }
}

/// One plugin loaded into a real [`PluginHost`] (the runtime Herald serves with), from a private
/// plugins folder that is removed on drop.
///
/// ```no_run
/// # async fn demo() -> Result<(), String> {
/// use herald_plugin_testkit::{Harness, PluginGrant, Value};
///
/// let harness = Harness::load(
///     "target/wasm32-wasip2/release/herald_plugin_example.wasm",
///     "manifest.toml",
///     PluginGrant::default(),
/// )
/// .await?;
/// let results = harness.evaluate("startsWith", &Value::Text("ad".into()), &[Value::Text("ada".into())]).await;
/// assert_eq!(results, Ok(vec![true]));
/// # Ok(()) }
/// ```
pub struct Harness {
    host: Arc<PluginHost>,
    name: String,
    clock: TestClock,
    _dir: TempDir,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness").field("name", &self.name).field("clock", &self.clock).finish_non_exhaustive()
    }
}

impl Harness {
    /// Loads `wasm` with its manifest (a path, or the TOML text) and `grant`, against the system clock.
    /// For a settable clock or another cache folder, use [`Harness::builder`].
    pub async fn load(
        wasm: impl AsRef<Path>,
        manifest: impl Into<ManifestSource>,
        grant: PluginGrant,
    ) -> Result<Harness, String> {
        HarnessBuilder::new(wasm, manifest).load(grant).await
    }

    /// A [`HarnessBuilder`] for this plugin.
    pub fn builder(wasm: impl AsRef<Path>, manifest: impl Into<ManifestSource>) -> HarnessBuilder {
        HarnessBuilder::new(wasm, manifest)
    }

    /// The runtime, for anything the convenience calls do not cover.
    pub fn host(&self) -> &Arc<PluginHost> {
        &self.host
    }

    /// The plugin's name (from its manifest).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's row of `GET /plugins`: version, kind, ABI, what it provides, calls, failures.
    pub fn status(&self) -> Option<PluginStatus> {
        self.host.list().into_iter().find(|s| s.name == self.name)
    }

    /// The loaded plugin (metadata, ABI version, operators, step types, transport), when it provides
    /// anything.
    pub fn loaded(&self) -> Option<Arc<Loaded>> {
        let status = self.status()?;
        let ours = |p: Option<Arc<Loaded>>| p.filter(|p| p.metadata.name == self.name);
        status.provides.iter().find_map(|provided| match status.kind.as_deref().and_then(Kind::parse)? {
            Kind::Operator => ours(self.host.operator(provided)),
            Kind::Step => ours(self.host.step_type(provided)),
            Kind::Transport => ours(self.host.transport(provided)),
        })
    }

    /// The name of the transport this plugin provides, if it is a transport plugin.
    pub fn transport_name(&self) -> Option<String> {
        self.loaded().and_then(|p| p.transport.clone())
    }

    /// The clock the plugin reads.
    pub fn clock(&self) -> &TestClock {
        &self.clock
    }

    /// The settable clock, when the harness was built with one.
    pub fn manual_clock(&self) -> Option<&ManualClock> {
        match &self.clock {
            TestClock::Manual(c) => Some(c),
            TestClock::System => None,
        }
    }

    /// "Now" as the plugin sees it, in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Checks an operand; `Ok(Err(message))` is the plugin's refusal.
    pub async fn validate_operand(&self, operator: &str, operand: &Value) -> Result<Result<(), String>, CallError> {
        self.host.validate_operand(operator, operand).await
    }

    /// Evaluates an operator against values (one result per value, in order).
    pub async fn evaluate(&self, operator: &str, operand: &Value, values: &[Value]) -> Result<Vec<bool>, CallError> {
        self.host.evaluate(operator, operand, values).await
    }

    /// Checks a step config (JSON text); `Ok(Err(problems))` lists what is wrong with it.
    pub async fn validate_step_config(
        &self,
        step_type: &str,
        config: &str,
    ) -> Result<Result<(), Vec<String>>, CallError> {
        self.host.validate_step_config(step_type, config).await
    }

    /// Runs a step in a fresh instance.
    pub async fn execute_step(&self, input: &StepInput) -> Result<StepOutcome, CallError> {
        self.host.execute_step(input).await
    }

    /// Hands a message to this plugin's transport.
    pub async fn send(&self, message: &Outgoing) -> Result<SendOutcome, CallError> {
        let transport =
            self.transport_name().ok_or_else(|| CallError::NotFound(format!("a transport from `{}`", self.name)))?;
        self.host.send(&transport, message).await
    }

    /// Lets this plugin's transport parse a provider's webhook call; `Ok(Err(reason))` refuses it.
    pub async fn parse_notifications(
        &self,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Result<Result<Vec<Notification>, String>, CallError> {
        let transport =
            self.transport_name().ok_or_else(|| CallError::NotFound(format!("a transport from `{}`", self.name)))?;
        self.host.parse_notifications(&transport, headers, body).await
    }

    /// The runtime's metrics in the Prometheus text format (`herald_plugin_*`).
    pub fn render_metrics(&self) -> String {
        self.host.render_metrics()
    }

    /// The value of one of this plugin's counters (`herald:plugin/metrics`, ABI 1.1.0 and later).
    pub fn counter(&self, counter: &str) -> Option<u64> {
        let prefix = format!("herald_plugin_counter_total{{plugin=\"{}\",counter=\"{counter}\"}} ", self.name);
        self.render_metrics().lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok())
    }
}

/// A folder under the system's temporary folder, removed on drop.
#[derive(Debug)]
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // Only to make a scratch folder's name unlikely to collide, not to tell the time.
        #[expect(clippy::disallowed_methods)]
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        for _ in 0..100 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!("herald-testkit-{}-{n}-{nanos:x}", std::process::id()));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
            }
        }
        Err("cannot create a temporary folder".into())
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
