//! Watches the plugins folder with notify and applies changes off the request path. Events are
//! debounced per file (a copy arrives as several writes), and manifests count for their `.wasm`.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher as _};

use super::PluginHost;

const SETTLE: Duration = Duration::from_millis(100);

/// Keeps the watch alive; dropping it stops watching.
pub struct Watcher {
    _inner: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn start(host: Arc<PluginHost>) -> Result<Watcher, String> {
    let dir = host.dir().to_path_buf();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PathBuf>();
    let mut inner = notify::recommended_watcher(move |res: notify::Result<notify::Event>| match res {
        Ok(ev) => {
            for p in ev.paths {
                let _ = tx.send(p);
            }
        }
        Err(e) => tracing::warn!(error = %e, "plugin folder watch error"),
    })
    .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    inner.watch(&dir, RecursiveMode::NonRecursive).map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    let task = tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut changed = HashSet::new();
            changed.insert(first);
            // let a burst of writes settle before loading
            loop {
                match tokio::time::timeout(SETTLE, rx.recv()).await {
                    Ok(Some(p)) => {
                        changed.insert(p);
                    }
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            let mut wasm: Vec<PathBuf> = changed
                .into_iter()
                .filter_map(|p| match p.extension().and_then(|e| e.to_str()) {
                    Some("wasm") => Some(p),
                    Some("toml") => Some(p.with_extension("wasm")),
                    _ => None,
                })
                .filter(|p| super::loading::is_plugin_file(p))
                .collect();
            wasm.sort();
            wasm.dedup();
            for p in wasm {
                host.sync_file(&p).await;
            }
        }
    });
    Ok(Watcher { _inner: inner, task })
}
