//! The operator's side door (docs/behaviour.md#backups): a Unix socket beside the embedded database,
//! `<data dir>.sock`, through which `herald backup` asks the running server for a backup (the embedded
//! database is open in one process only), and the loop of scheduled backups. The socket is made by the
//! user Herald runs as and only that user may connect to it (mode 0600): it takes no key.
//!
//! One request a connection, a line of JSON: `{"backup":"/absolute/folder"}`; one answer, a line of JSON:
//! `{"manifest":{...}}` or `{"error":"...","refused":true|false}`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::services::backup::{self, BackupError, Manifest};
use crate::state::AppState;

/// Longest request line read.
const MAX_REQUEST: u64 = 8 * 1024;
/// Time a client has to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the schedule waits after a scheduled backup failed before trying again.
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// A request on the socket.
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    pub backup: PathBuf,
}

/// The answer to one.
#[derive(Debug, Serialize, Deserialize)]
pub struct Answer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<Manifest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub refused: bool,
}

/// Where the socket of the embedded database `db` (a `surrealkv://` URL) is.
pub fn socket_path(db: &str) -> Option<PathBuf> {
    db.strip_prefix("surrealkv://").map(|d| PathBuf::from(format!("{}.sock", d.trim_end_matches('/'))))
}

/// The socket and the schedule, while the server runs.
pub struct Control {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    socket: Option<PathBuf>,
}

impl Control {
    /// Stops listening and scheduling, and removes the socket.
    pub fn stop(self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Some(p) = &self.socket {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Starts the socket (embedded database only) and the schedule (when a backup folder is set).
pub fn start(state: Arc<AppState>) -> Control {
    let mut control = Control { tasks: Vec::new(), socket: None };
    let embedded = state.config.db.starts_with("surrealkv://") || state.config.db.starts_with("mem://");
    if let Some(path) = socket_path(&state.config.db) {
        match bind(&path) {
            Ok(listener) => {
                control.tasks.push(tokio::spawn(serve(state.clone(), listener)));
                control.socket = Some(path);
            }
            Err(e) => {
                tracing::warn!(socket = %path.display(), error = %e, "no operator socket: herald backup cannot reach this server")
            }
        }
    }
    if state.config.backup.dir.is_some() {
        if embedded {
            control.tasks.push(tokio::spawn(schedule(state)));
        } else {
            tracing::warn!("scheduled backups read the embedded database; on a SurrealDB server use surreal export");
        }
    }
    control
}

/// Binds the socket, private to this user. A socket file left by a process that died is replaced: the
/// database is already open here, so no other server owns it.
#[cfg(unix)]
fn bind(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(path);
    let listener = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

#[cfg(unix)]
async fn serve(state: Arc<AppState>, listener: tokio::net::UnixListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        tokio::spawn(answer(state.clone(), stream));
    }
}

#[cfg(unix)]
async fn answer(state: Arc<AppState>, stream: tokio::net::UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_REQUEST));
    let got = tokio::time::timeout(READ_TIMEOUT, reader.read_line(&mut line)).await;
    let answer = match got.ok().and_then(|r| r.ok()).and_then(|_| serde_json::from_str::<Request>(&line).ok()) {
        None => Answer {
            manifest: None,
            error: Some("send one line: {\"backup\":\"/absolute/folder\"}".into()),
            refused: true,
        },
        Some(r) if !r.backup.is_absolute() => {
            Answer { manifest: None, error: Some("the backup folder must be an absolute path".into()), refused: true }
        }
        Some(r) => {
            tracing::info!(dest = %r.backup.display(), "backup requested");
            match backup::write(&state.store, &state.config, &r.backup, state.clock.now_ms()).await {
                Ok(m) => Answer { manifest: Some(m), error: None, refused: false },
                Err(e) => {
                    tracing::warn!(dest = %r.backup.display(), error = %e, "backup failed");
                    Answer { manifest: None, refused: matches!(e, BackupError::Refused(_)), error: Some(e.to_string()) }
                }
            }
        }
    };
    let mut text = serde_json::to_vec(&answer).unwrap_or_default();
    text.push(b'\n');
    let _ = write.write_all(&text).await;
    let _ = write.shutdown().await;
}

#[cfg(not(unix))]
fn bind(_: &Path) -> std::io::Result<()> {
    Err(std::io::Error::other("no Unix sockets on this system"))
}

#[cfg(not(unix))]
async fn serve(_: Arc<AppState>, _: ()) {}

/// Writes a scheduled backup whenever one is due.
async fn schedule(state: Arc<AppState>) {
    loop {
        let now = state.clock.now_ms();
        let Some(due) = backup::next_due_ms(&state.config, now) else { return };
        if due > now {
            tokio::time::sleep(Duration::from_millis((due - now) as u64).min(Duration::from_secs(60))).await;
            continue;
        }
        match backup::scheduled(&state.store, &state.config, now).await {
            Ok(Some(dest)) => tracing::info!(backup = %dest.display(), "scheduled backup written"),
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "scheduled backup failed");
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
}

/// The client side, for `herald backup`: asks the server listening on `socket` for a backup to `dest`.
/// `Ok(None)` when no server listens there.
#[cfg(unix)]
pub async fn request(socket: &Path, dest: &Path) -> std::io::Result<Option<Answer>> {
    let stream = match tokio::net::UnixStream::connect(socket).await {
        Ok(s) => s,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let (read, mut write) = stream.into_split();
    let mut line = serde_json::to_vec(&Request { backup: dest.to_path_buf() }).map_err(std::io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await?;
    let mut answer = String::new();
    BufReader::new(read).read_line(&mut answer).await?;
    if answer.is_empty() {
        return Err(std::io::Error::other("the server closed the socket before it answered (did it stop?)"));
    }
    serde_json::from_str(&answer).map(Some).map_err(std::io::Error::other)
}

#[cfg(not(unix))]
pub async fn request(_: &Path, _: &Path) -> std::io::Result<Option<Answer>> {
    Ok(None)
}
