//! Loading plugins: reading a `.wasm` file (or its precompiled artifact from the cache), checking its ABI
//! version and manifest, compiling it off the request path, and swapping it into the registry.
//!
//! Must not import: salvo, surrealdb.

use super::*;

impl PluginHost {
    /// Loads every `*.wasm` in the folder (creating the folder if needed).
    pub async fn load_all(self: &Arc<Self>) {
        if let Err(e) = std::fs::create_dir_all(&self.options.dir) {
            tracing::warn!(dir = %self.options.dir.display(), error = %e, "cannot create the plugins folder");
            return;
        }
        let mut files: Vec<PathBuf> = match std::fs::read_dir(&self.options.dir) {
            Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| is_plugin_file(p)).collect(),
            Err(e) => {
                tracing::warn!(dir = %self.options.dir.display(), error = %e, "cannot read the plugins folder");
                return;
            }
        };
        files.sort();
        for f in files {
            self.sync_file(&f).await;
        }
    }

    /// Brings the registry in line with one file: loads it when new or changed, unloads its plugin when
    /// it is gone. Errors are recorded (see [`PluginHost::list`]) and logged; the previous version keeps
    /// serving.
    pub async fn sync_file(self: &Arc<Self>, wasm: &Path) {
        let Some(stem) = wasm.file_stem().and_then(|s| s.to_str()).map(str::to_string) else { return };
        let _guard = self.loading.lock().await;
        if !wasm.exists() {
            let mut reg = self.write();
            let removed = reg.plugins.remove(&stem).is_some();
            reg.failures.remove(&stem);
            reg.reindex();
            if removed {
                tracing::info!(plugin = %stem, "plugin unloaded (file removed)");
            }
            return;
        }
        let started = Instant::now();
        let host = self.clone();
        let path = wasm.to_path_buf();
        let current = self.read().plugins.get(&stem).map(|p| p.hash.clone());
        let result = tokio::task::spawn_blocking(move || host.prepare(&path, current.as_deref()))
            .await
            .unwrap_or_else(|e| Err(format!("load task failed: {e}")));
        let prepared = match result {
            Ok(Some(p)) => p,
            Ok(None) => return, // unchanged
            Err(error) => return self.record_failure(&stem, wasm, error),
        };
        match self.finish(prepared, started).await {
            Ok(loaded) => {
                let mut reg = self.write();
                if let Some(conflict) = reg.conflict(&loaded) {
                    drop(reg);
                    return self.record_failure(&stem, wasm, conflict);
                }
                tracing::info!(
                    plugin = %loaded.metadata.name, version = %loaded.metadata.version, abi = %loaded.abi,
                    ms = loaded.load_ms, "plugin loaded"
                );
                reg.failures.remove(&stem);
                reg.plugins.insert(stem, Arc::new(loaded));
                reg.reindex();
            }
            Err(error) => self.record_failure(&stem, wasm, error),
        }
    }

    fn record_failure(&self, stem: &str, path: &Path, error: String) {
        let serving = self.read().plugins.contains_key(stem);
        tracing::warn!(plugin = %stem, error = %error, previous_version_serving = serving, "plugin failed to load");
        self.write()
            .failures
            .insert(stem.to_string(), Failure { path: path.to_path_buf(), error, at_ms: self.clock.now_ms() });
    }

    /// The blocking part of a load: read, hash, manifest, compile or load from cache, ABI check.
    fn prepare(&self, wasm: &Path, current_hash: Option<&str>) -> Result<Option<Prepared>, String> {
        let stem = wasm.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        if !manifest::valid_name(&stem) {
            return Err(format!("file name {stem:?}: a plugin file is <name>.wasm with a lowercase name"));
        }
        let bytes = std::fs::read(wasm).map_err(|e| format!("cannot read {}: {e}", wasm.display()))?;
        let manifest_path = wasm.with_extension("toml");
        let manifest_text = match std::fs::read_to_string(&manifest_path) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("cannot read {}: {e}", manifest_path.display())),
        };
        let mut h = Sha256::new();
        h.update(&bytes);
        if let Some(t) = &manifest_text {
            h.update(b"\0manifest\0");
            h.update(t.as_bytes());
        }
        let hash = hex::encode(h.finalize());
        if current_hash == Some(hash.as_str()) {
            return Ok(None);
        }
        let manifest = manifest_text.as_deref().map(Manifest::parse).transpose()?;
        if let Some(m) = &manifest
            && m.name != stem
        {
            return Err(format!("the manifest names plugin {:?} but the file is {stem}.wasm", m.name));
        }
        let component = self.compile(&bytes)?;
        let abi = abi_version(&self.engine, &component)?;
        if let Some(m) = &manifest
            && m.abi != abi
        {
            return Err(format!(
                "the manifest says abi {} but the component was built against herald:plugin@{abi}",
                m.abi
            ));
        }
        Ok(Some(Prepared { stem, path: wasm.to_path_buf(), hash, manifest, component, abi }))
    }

    /// Compiles a component, or loads its precompiled artifact from the cache.
    fn compile(&self, bytes: &[u8]) -> Result<Component, String> {
        let mut compat = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut compat);
        let key = format!("{}-{:016x}.cwasm", hex::encode(Sha256::digest(bytes)), compat.finish());
        let cached = self.options.cache_dir.join(&key);
        if cached.exists() {
            match load_artifact(&self.engine, &cached) {
                Ok(c) => return Ok(c),
                Err(e) => tracing::warn!(file = %cached.display(), error = %e, "ignoring a bad cached artifact"),
            }
        }
        let artifact = self.engine.precompile_component(bytes).map_err(|e| format!("not a valid component: {e:#}"))?;
        if std::fs::create_dir_all(&self.options.cache_dir).is_ok() {
            let tmp = self.options.cache_dir.join(format!(".{key}.{}.tmp", uuid::Uuid::new_v4()));
            if std::fs::write(&tmp, &artifact).is_ok() {
                let _ = std::fs::rename(&tmp, &cached);
            }
        }
        load_artifact_bytes(&self.engine, &artifact)
    }

    /// The async part of a load: link, instantiate once, read the metadata and what the plugin provides.
    async fn finish(&self, p: Prepared, started: Instant) -> Result<Loaded, String> {
        let grants = Grants::resolve(p.manifest.as_ref(), &p.stem, self.options.grants.get(&p.stem));
        if self.options.grants.get(&p.stem).and_then(|g| g.enabled) == Some(false) {
            return Err("disabled by the operator ([plugin.<name>] enabled = false)".into());
        }
        let outbound = http::Outbound::new(grants.http_hosts.clone(), grants.allow_private, grants.timeout)?;
        let env = Arc::new(PluginEnv {
            name: p.stem.clone(),
            grants,
            outbound,
            clock: self.clock.clone(),
            counters: self.counters.clone(),
        });
        let major = abi_major(&p.abi).ok_or_else(|| format!("unreadable ABI version {}", p.abi))?;
        let exports = match major {
            1 => abi_v1::exported_kinds(&self.engine, &p.component),
            _ => return Err(format!("no binding for ABI major version {major}")),
        };
        let kind = match exports.as_slice() {
            [k] => *k,
            [] => return Err("the component exports none of operators, steps or transports".into()),
            _ => return Err("the component exports more than one plugin kind".into()),
        };
        if let Some(m) = &p.manifest
            && Kind::parse(&m.kind) != Some(kind)
        {
            return Err(format!("the manifest says kind {} but the component is a {} plugin", m.kind, kind.as_str()));
        }
        let pre = self.linker.instantiate_pre(&p.component).map_err(|e| format!("cannot link: {e:#}"))?;
        let (binding, probe) = match major {
            1 => abi_v1::bind(self, &pre, kind, &env).await.map(|(b, probe)| (Binding::V1(b), probe))?,
            _ => return Err(format!("no binding for ABI major version {major}")),
        };
        if probe.metadata.name != p.stem {
            return Err(format!("the plugin calls itself {:?} but the file is {}.wasm", probe.metadata.name, p.stem));
        }
        if probe.metadata.kind != kind {
            return Err(format!(
                "metadata says kind {} but the component exports {}",
                probe.metadata.kind.as_str(),
                kind.as_str()
            ));
        }
        Ok(Loaded {
            stats: self.stats_for(&p.stem),
            metadata: probe.metadata,
            abi: p.abi,
            path: p.path,
            hash: p.hash,
            loaded_at_ms: self.clock.now_ms(),
            load_ms: started.elapsed().as_millis() as u64,
            operators: probe.operators,
            step_types: probe.step_types,
            transport: probe.transport,
            env,
            pre,
            binding,
        })
    }
}

struct Prepared {
    stem: String,
    path: PathBuf,
    hash: String,
    manifest: Option<Manifest>,
    component: Component,
    abi: String,
}

pub(crate) fn is_plugin_file(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "wasm")
        && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| !n.starts_with('.'))
}

/// The `herald:plugin` version a component was built against, refused when this host does not support it.
fn abi_version(engine: &Engine, component: &Component) -> Result<String, String> {
    let ty = component.component_type();
    let names: Vec<String> =
        ty.imports(engine).map(|(n, _)| n.to_string()).chain(ty.exports(engine).map(|(n, _)| n.to_string())).collect();
    let mut versions: Vec<String> = names
        .iter()
        .filter_map(|n| n.strip_prefix("herald:plugin/"))
        .map(|rest| rest.split_once('@').map(|(_, v)| v.to_string()).unwrap_or_else(|| "unversioned".into()))
        .collect();
    versions.sort();
    versions.dedup();
    match versions.as_slice() {
        [] => Err("not a Herald plugin: it neither imports nor exports any herald:plugin interface".into()),
        [v] if SUPPORTED_ABI.contains(&v.as_str()) => Ok(v.clone()),
        [v] => Err(format!(
            "built against herald:plugin@{v}, which this host does not support (supported: {})",
            SUPPORTED_ABI.join(", ")
        )),
        many => Err(format!("mixes herald:plugin versions {}", many.join(", "))),
    }
}

/// Loads a precompiled artifact this process (or an earlier one) wrote into its private cache folder.
#[allow(unsafe_code)]
fn load_artifact(engine: &Engine, path: &Path) -> Result<Component, String> {
    // SAFETY: wasmtime requires that a deserialized artifact was produced by `Engine::precompile_*`. The
    // cache folder is Herald's own; files are written whole (temporary file, then rename) and named by
    // the source's SHA-256 and the engine's compatibility hash, and wasmtime checks version and settings
    // before use.
    unsafe { Component::deserialize_file(engine, path) }.map_err(|e| format!("{e:#}"))
}

#[allow(unsafe_code)]
fn load_artifact_bytes(engine: &Engine, bytes: &[u8]) -> Result<Component, String> {
    // SAFETY: `bytes` was just produced by `precompile_component` on this engine.
    unsafe { Component::deserialize(engine, bytes) }.map_err(|e| format!("{e:#}"))
}
