//! Backups of the embedded database and restoring them (docs/behaviour.md#backups).
//!
//! A backup is a folder: `data.surql` (the database at one moment, [`Store::snapshot`]), `uploads/` and
//! `spool/` (copies of the uploaded images and of the received messages not yet applied), and
//! `manifest.json` (Herald's version, the last migration, the records of each table as the snapshot holds
//! them, the checksum of `data.surql`). It is written under a hidden partial name beside its destination
//! and renamed when complete, so a crash leaves nothing under the final name. The server secret is not
//! in it: a backup that leaks opens no DKIM key and forges no token; the secret file is backed up apart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::config::Config;
use crate::infra::clock::rfc3339;
use crate::store::backup::RecordCounter;
use crate::store::migrate::MIGRATIONS;
use crate::store::{Store, StoreError};

/// The manifest's format; a restore refuses others.
const FORMAT: u32 = 1;
const MANIFEST: &str = "manifest.json";
const DATA: &str = "data.surql";
/// Scheduled backups are folders named this followed by their UTC time.
const SCHEDULED: &str = "herald-backup-";

/// What a backup holds (`manifest.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: u32,
    pub herald_version: String,
    pub created_at: String,
    /// The newest migration the database had applied.
    pub last_migration: String,
    /// Records of each table in `data.surql`.
    pub tables: BTreeMap<String, u64>,
    pub data_bytes: u64,
    pub data_sha256: String,
    pub uploads: u64,
    pub spool: u64,
}

/// Why a backup or a restore did not happen.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The request itself cannot be done (a destination that exists, a backup of a newer schema...).
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Io(String),
}

fn io(what: &Path) -> impl Fn(std::io::Error) -> BackupError + '_ {
    move |e| BackupError::Io(format!("{}: {e}", what.display()))
}

/// One backup at a time per process: a second waits for nothing and is refused.
static WRITING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Writes a backup of the database `store` is connected to (and of `config`'s uploads and spool
/// folders) to the new folder `dest`.
pub async fn write(store: &Store, config: &Config, dest: &Path, now_ms: i64) -> Result<Manifest, BackupError> {
    let Ok(_one) = WRITING.try_lock() else {
        return Err(BackupError::Refused("a backup is already being written".into()));
    };
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned());
    let Some(name) = name.filter(|n| n != "." && n != "..") else {
        return Err(BackupError::Refused(format!("{}: name a new folder for the backup", dest.display())));
    };
    if tokio::fs::symlink_metadata(dest).await.is_ok() {
        return Err(BackupError::Refused(format!("{} already exists: name a new folder", dest.display())));
    }
    let (parent, partial) = beside(dest, &name);
    if !tokio::fs::metadata(parent).await.is_ok_and(|m| m.is_dir()) {
        return Err(BackupError::Refused(format!("{} is not a folder", parent.display())));
    }
    private_dir(&partial).await.map_err(io(&partial))?;
    match fill(store, config, &partial, now_ms).await {
        Ok(manifest) => {
            tokio::fs::rename(&partial, dest).await.map_err(io(dest))?;
            sync_dir(parent).await;
            Ok(manifest)
        }
        Err(e) => {
            let _ = tokio::fs::remove_dir_all(&partial).await;
            Err(e)
        }
    }
}

/// Writes the snapshot, the folders and the manifest into `dir`.
async fn fill(store: &Store, config: &Config, dir: &Path, now_ms: i64) -> Result<Manifest, BackupError> {
    let data = dir.join(DATA);
    let mut file =
        tokio::io::BufWriter::with_capacity(1 << 20, tokio::fs::File::create(&data).await.map_err(io(&data))?);
    let (mut counter, mut hash, mut bytes) = (RecordCounter::new(), Sha256::new(), 0u64);
    let mut snapshot = store.snapshot().await?;
    while let Some(piece) = snapshot.next().await {
        let piece = piece?;
        counter.feed(&piece);
        hash.update(&piece);
        bytes += piece.len() as u64;
        file.write_all(&piece).await.map_err(io(&data))?;
    }
    file.flush().await.map_err(io(&data))?;
    file.into_inner().sync_all().await.map_err(io(&data))?;
    let last_migration = store.last_migration().await?.unwrap_or_default();
    let uploads = copy_files(&config.uploads_dir, &dir.join("uploads"), false).await?;
    let spool = copy_files(&config.smtp.spool_dir, &dir.join("spool"), false).await?;
    let manifest = Manifest {
        format: FORMAT,
        herald_version: env!("CARGO_PKG_VERSION").to_string(),
        created_at: rfc3339(now_ms),
        last_migration,
        tables: counter.counts().clone(),
        data_bytes: bytes,
        data_sha256: hex::encode(hash.finalize()),
        uploads,
        spool,
    };
    let text = serde_json::to_vec_pretty(&manifest).map_err(|e| BackupError::Io(e.to_string()))?;
    let path = dir.join(MANIFEST);
    let mut f = tokio::fs::File::create(&path).await.map_err(io(&path))?;
    f.write_all(&text).await.map_err(io(&path))?;
    f.sync_all().await.map_err(io(&path))?;
    sync_dir(dir).await;
    Ok(manifest)
}

/// What a restore did.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Restored {
    pub data: PathBuf,
    pub tables: BTreeMap<String, u64>,
    /// Migrations newer than the backup, applied after it was restored.
    pub migrated: Vec<String>,
    pub uploads: u64,
    pub spool: u64,
    /// Set when the restored data has no secret to start with (docs/behaviour.md#backups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Restores the backup in `src` into the embedded database `config.db` names, which must not exist yet
/// or be an empty folder; the uploads and the spool go to `config`'s folders (files there are kept).
pub async fn restore(src: &Path, config: &Config) -> Result<Restored, BackupError> {
    let Some(target) = config.db.strip_prefix("surrealkv://").map(|d| PathBuf::from(d.trim_end_matches('/'))) else {
        return Err(BackupError::Refused("a restore makes an embedded database: give --data DIR".into()));
    };
    if let Ok(mut entries) = std::fs::read_dir(&target) {
        if entries.next().is_some() {
            return Err(BackupError::Refused(format!(
                "{} is not empty: restore into a new or empty folder",
                target.display()
            )));
        }
    } else if target.exists() {
        return Err(BackupError::Refused(format!("{} is not a folder", target.display())));
    }
    let manifest = read_manifest(src).await?;
    let known: Vec<&str> = MIGRATIONS.iter().map(|(n, _)| *n).collect();
    if !known.contains(&manifest.last_migration.as_str()) {
        return Err(BackupError::Refused(format!(
            "the backup is of a newer schema ({}; this herald knows up to {}): restore it with Herald {} or later",
            manifest.last_migration,
            known.last().unwrap_or(&"none"),
            manifest.herald_version
        )));
    }
    let data = src.join(DATA);
    let sum = file_sha256(&data).await?;
    if sum != manifest.data_sha256 {
        return Err(BackupError::Refused(format!("{} is damaged: its checksum is not the manifest's", data.display())));
    }
    // Into a partial folder beside the target, renamed when whole, so a restore that fails leaves the
    // target as it was.
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "data".into());
    let (parent, partial) = beside(&target, &name);
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let restored = import_into(&partial, &data, &manifest, config).await;
    let migrated = match restored {
        Ok(m) => m,
        Err(e) => {
            let _ = tokio::fs::remove_dir_all(&partial).await;
            return Err(e);
        }
    };
    if target.exists() {
        tokio::fs::remove_dir(&target).await.map_err(io(&target))?;
    }
    tokio::fs::rename(&partial, &target).await.map_err(io(&target))?;
    sync_dir(parent).await;
    let uploads = copy_files(&src.join("uploads"), &config.uploads_dir, true).await?;
    let spool = copy_files(&src.join("spool"), &config.smtp.spool_dir, true).await?;
    let secret = PathBuf::from(format!("{}.secret", target.display()));
    let note = (config.secret.is_none() && !secret.exists()).then(|| {
        format!(
            "no secret: copy the secret file of the backed-up data (DIR.secret) to {} or set HERALD_SECRET \
             before herald serve, or DKIM keys and signed links of the old data will not open",
            secret.display()
        )
    });
    Ok(Restored { data: target, tables: manifest.tables, migrated, uploads, spool, note })
}

/// Imports `data` into a new embedded database at `dir`, checks its counts against the manifest and
/// applies the migrations newer than the backup.
async fn import_into(
    dir: &Path,
    data: &Path,
    manifest: &Manifest,
    config: &Config,
) -> Result<Vec<String>, BackupError> {
    let config = Config { db: format!("surrealkv://{}", dir.display()), ..config.clone() };
    let store = Store::connect_only(&config).await?;
    let outcome = async {
        store.import_snapshot(data).await?;
        let counts = store.table_counts().await?;
        let differ: Vec<String> = manifest
            .tables
            .iter()
            .filter(|(t, n)| counts.get(*t).copied().unwrap_or(0) != **n)
            .map(|(t, n)| format!("{t}: {} of {n}", counts.get(t).copied().unwrap_or(0)))
            .collect();
        if !differ.is_empty() {
            return Err(BackupError::Io(format!(
                "the restored records differ from the manifest ({})",
                differ.join(", ")
            )));
        }
        Ok(crate::store::migrate::apply(&store).await?)
    }
    .await;
    store.close_last(Duration::from_secs(5)).await;
    outcome
}

async fn read_manifest(src: &Path) -> Result<Manifest, BackupError> {
    let path = src.join(MANIFEST);
    let text = tokio::fs::read(&path)
        .await
        .map_err(|e| BackupError::Refused(format!("{} is not a Herald backup ({MANIFEST}: {e})", src.display())))?;
    let manifest: Manifest = serde_json::from_slice(&text)
        .map_err(|e| BackupError::Refused(format!("{}: not a Herald backup manifest ({e})", path.display())))?;
    if manifest.format != FORMAT {
        return Err(BackupError::Refused(format!(
            "{}: backup format {} (this herald reads {FORMAT}): restore it with Herald {} or later",
            path.display(),
            manifest.format,
            manifest.herald_version
        )));
    }
    Ok(manifest)
}

async fn file_sha256(path: &Path) -> Result<String, BackupError> {
    let path = path.to_path_buf();
    let done = tokio::task::spawn_blocking(move || {
        let mut f = std::fs::File::open(&path).map_err(io(&path))?;
        let mut hash = Sha256::new();
        std::io::copy(&mut f, &mut hash).map_err(io(&path))?;
        Ok(hex::encode(hash.finalize()))
    });
    done.await.map_err(|e| BackupError::Io(e.to_string()))?
}

/// Copies the files directly in `from` (none when it does not exist) into `to`, made private when new;
/// `keep` leaves files that exist in `to` as they are. Answers the files copied.
async fn copy_files(from: &Path, to: &Path, keep: bool) -> Result<u64, BackupError> {
    let (from, to) = (from.to_path_buf(), to.to_path_buf());
    let done = tokio::task::spawn_blocking(move || {
        let Ok(entries) = std::fs::read_dir(&from) else { return Ok(0) };
        std::fs::create_dir_all(&to).map_err(io(&to))?;
        let mut copied = 0;
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            let target = to.join(entry.file_name());
            if !kind.is_file() || (keep && target.exists()) {
                continue;
            }
            match std::fs::copy(entry.path(), &target) {
                Ok(_) => copied += 1,
                // A file deleted while the folder was read (an applied message, a purged image).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&target)(e)),
            }
        }
        Ok(copied)
    });
    done.await.map_err(|e| BackupError::Io(e.to_string()))?
}

/// The folder `path` is in, and a new hidden name there for `path` while it is being written
/// (`.NAME.partial-<random>`): renamed to `path` when whole, so a crash leaves nothing under `path`.
fn beside<'a>(path: &'a Path, name: &str) -> (&'a Path, PathBuf) {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    (parent, parent.join(format!(".{name}.partial-{}", uuid::Uuid::new_v4().simple())))
}

async fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = tokio::fs::DirBuilder::new();
    #[cfg(unix)]
    b.mode(0o700);
    b.create(dir).await
}

/// Makes a rename or a new file in `dir` durable (best effort).
async fn sync_dir(dir: &Path) {
    if let Ok(d) = tokio::fs::File::open(dir).await {
        let _ = d.sync_all().await;
    }
}

/// The scheduled backups in `dir` (folders named [`SCHEDULED`]...), oldest first.
fn scheduled_in(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(SCHEDULED) && e.path().join(MANIFEST).is_file())
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// When the next scheduled backup is due: `every_ms` after the newest in the folder (now when there is
/// none), so a restart does not move the schedule.
pub fn next_due_ms(config: &Config, now_ms: i64) -> Option<i64> {
    let backup = &config.backup;
    let dir = backup.dir.as_ref()?;
    let newest = scheduled_in(dir).last().and_then(|p| {
        let m: Manifest = serde_json::from_slice(&std::fs::read(p.join(MANIFEST)).ok()?).ok()?;
        crate::infra::clock::parse_rfc3339(&m.created_at)
    });
    let Some(at) = newest else { return Some(now_ms) };
    Some((at + backup.every_ms as i64).min(now_ms + backup.every_ms as i64))
}

/// Writes one scheduled backup and deletes the oldest beyond the number kept. Answers its folder.
pub async fn scheduled(store: &Store, config: &Config, now_ms: i64) -> Result<Option<PathBuf>, BackupError> {
    let Some(dir) = config.backup.dir.clone() else { return Ok(None) };
    tokio::fs::create_dir_all(&dir).await.map_err(io(&dir))?;
    let stamp = chrono::DateTime::from_timestamp_millis(now_ms).unwrap_or_default().format("%Y%m%dT%H%M%S%.3fZ");
    let dest = dir.join(format!("{SCHEDULED}{stamp}"));
    write(store, config, &dest, now_ms).await?;
    let all = scheduled_in(&dir);
    for old in all.iter().take(all.len().saturating_sub(config.backup.keep)) {
        if let Err(e) = tokio::fs::remove_dir_all(old).await {
            tracing::warn!(backup = %old.display(), error = %e, "cannot delete an old scheduled backup");
        }
    }
    Ok(Some(dest))
}
