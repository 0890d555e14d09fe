//! Image uploads (docs/behaviour.md#uploads): an image checked by its bytes (`domain::images`), stored
//! once per content under the uploads folder, named by its SHA-256, and served back by that name. Each
//! project's uploads are rows (`store::uploads`) that count against its quota; purging a project deletes
//! its rows, then each file no project's row names any more.
//!
//! The order makes a file and its rows agree without a lock, in one process or several sharing the
//! folder: an upload writes its row before it makes sure of the file, and a purge moves a file aside
//! before it looks at the rows once more, putting it back if a row appeared meanwhile.
//!
//! Must not import: salvo, surrealdb.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::context::Context;
use crate::domain::images::{self, KINDS};
use crate::error::Error;
use crate::store::Store;
use crate::store::uploads::Recorded;

/// The setting of the per-project quota, as messages name it.
pub const QUOTA_SETTING: &str = "HERALD_UPLOADS_QUOTA_MB";

/// A stored image, as the upload answers it.
pub struct Uploaded {
    pub url: String,
    pub size: usize,
    pub content_type: &'static str,
    pub width: u32,
    pub height: u32,
}

/// Stores an image for `project` (415 for anything that is not wholly a PNG, JPEG, GIF or WebP by its
/// bytes; 403 `QUOTA_EXCEEDED` when it would take the project's stored bytes past the quota). The same
/// image twice is one file and one URL, and counts once for a project.
pub async fn store_image(st: &Context, project: &str, bytes: &[u8]) -> Result<Uploaded, Error> {
    let info = images::check(bytes).map_err(|refusal| Error::UnsupportedType(refusal.message()))?;
    let name = format!("{}.{}", hex::encode(Sha256::digest(bytes)), info.ext);
    let dir = st.config.uploads_dir.clone();
    let path = dir.join(&name);
    let quota = st.config.uploads_quota_bytes;
    let size = bytes.len() as u64;
    let on_disk = tokio::fs::metadata(&path).await.is_ok();
    // The row first: a purge that moves the file aside after this sees the row and puts it back.
    match st.store.record_upload(project, &name, size, quota, on_disk, st.clock.now_ms()).await? {
        Recorded::New { .. } | Recorded::Again => {}
        Recorded::OverQuota { used } => return Err(over_quota(quota, used, size)),
    }
    if tokio::fs::metadata(&path).await.is_err() {
        let io = |e: std::io::Error| Error::Internal(format!("storing an upload: {e}"));
        tokio::fs::create_dir_all(&dir).await.map_err(io)?;
        // Written aside and renamed, so a reader never sees half a file and two uploads of one image at
        // once end with the same complete file. Should this fail, the row stays: the same image again
        // counts nothing more and writes the file.
        let part = dir.join(format!(".{name}.{}", uuid::Uuid::new_v4()));
        tokio::fs::write(&part, bytes).await.map_err(io)?;
        tokio::fs::rename(&part, &path).await.map_err(io)?;
    }
    Ok(Uploaded {
        url: format!("{}/uploads/{name}", st.config.public_url.trim_end_matches('/')),
        size: bytes.len(),
        content_type: info.content_type,
        width: info.width,
        height: info.height,
    })
}

/// The refusal of an upload past the quota, naming it and its setting.
fn over_quota(limit: u64, used: u64, requested: u64) -> Error {
    let quota = if limit.is_multiple_of(1 << 20) { format!("{} MiB", limit >> 20) } else { format!("{limit} bytes") };
    Error::QuotaExceeded {
        quota: "uploads",
        setting: QUOTA_SETTING,
        limit,
        used: Some(used),
        requested: Some(requested),
        message: format!(
            "This image ({requested} bytes) would take the project's uploads past their quota of {quota} \
             ({used} bytes are stored); the server's operator sets the quota with {QUOTA_SETTING}"
        ),
    }
}

/// Files of a purged project's deleted rows checked at a time.
const SWEEP_BATCH: usize = 500;

/// After `project`'s upload rows were purged (`Store::purge_project_batch`): deletes each of their files
/// that no project's row names any more (nor is kept for good, see [`Store::record_upload`]). Resumes
/// where a purge that stopped half-way left off.
pub async fn sweep(store: &Store, dir: &Path, project: &str) -> Result<(), String> {
    loop {
        let names = store.upload_sweeps(project, SWEEP_BATCH).await.map_err(|e| e.to_string())?;
        if names.is_empty() {
            return Ok(());
        }
        for name in names {
            release(store, dir, &name).await?;
            store.delete_upload_sweep(project, &name).await.map_err(|e| e.to_string())?;
        }
    }
}

/// Deletes the file `name` unless a row names it. It is moved aside first and the rows read again: an
/// upload writes its row before it looks for the file, so one that found the file before the move shows
/// in that second read and the file goes back (any copy of the name has the same bytes).
async fn release(store: &Store, dir: &Path, name: &str) -> Result<(), String> {
    if content_type_of(name).is_none() {
        return Ok(());
    }
    let kept = || async { store.upload_file_kept(name).await.map_err(|e| e.to_string()) };
    let (path, aside) = (dir.join(name), dir.join(format!(".{name}.deleting")));
    let io = |what: &str, e: std::io::Error| format!("{what} the upload {name}: {e}");
    let absent = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        other => other,
    };
    if !kept().await? {
        absent(tokio::fs::rename(&path, &aside).await).map_err(|e| io("moving aside", e))?;
        if !kept().await? {
            return absent(tokio::fs::remove_file(&aside).await).map_err(|e| io("deleting", e));
        }
    }
    // Kept: put back what this release (or one a crash interrupted) moved aside.
    absent(tokio::fs::rename(&aside, &path).await).map_err(|e| io("putting back", e))
}

/// Bytes of the file one read takes while an upload is served: what a response holds in memory at a
/// time, whatever the file's size.
const SERVE_CHUNK: usize = 64 * 1024;

/// A stored image opened to be served.
pub struct Stored {
    pub content_type: &'static str,
    /// The file's length in bytes (the response's `Content-Length`).
    pub len: u64,
    file: tokio::fs::File,
}

impl Stored {
    /// The file's bytes, [`SERVE_CHUNK`] at a time, read as the response is sent; exactly `len` of them
    /// (a file that ends early ends the stream with an error, so the response is cut, never padded).
    pub fn chunks(self) -> impl futures_util::Stream<Item = std::io::Result<Vec<u8>>> + Send + 'static {
        use tokio::io::AsyncReadExt;
        futures_util::stream::unfold((self.file, self.len), |(mut file, left)| async move {
            if left == 0 {
                return None;
            }
            let mut buf = vec![0u8; usize::try_from(left).unwrap_or(SERVE_CHUNK).min(SERVE_CHUNK)];
            match file.read(&mut buf).await {
                Ok(0) => {
                    let short = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the upload ended early");
                    Some((Err(short), (file, 0)))
                }
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(buf), (file, left - n as u64)))
                }
                Err(e) => Some((Err(e), (file, 0))),
            }
        })
    }
}

/// The stored image with this name, opened; None for a name Herald never gives out (only
/// `<64 hex digits>.<png|jpg|gif|webp>`: nothing else of the disk is reachable) or one not stored.
/// Files stored before uploads were recorded per project are served the same way.
pub async fn open_image(st: &Context, name: &str) -> Option<Stored> {
    let content_type = content_type_of(name)?;
    let path: PathBuf = st.config.uploads_dir.join(name);
    let file = tokio::fs::File::open(path).await.ok()?;
    let meta = file.metadata().await.ok()?;
    meta.is_file().then_some(Stored { content_type, len: meta.len(), file })
}

/// The content type of a name of the form Herald gives out, or None.
fn content_type_of(name: &str) -> Option<&'static str> {
    let (hash, ext) = name.split_once('.')?;
    let valid = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let content_type = KINDS.iter().find(|(e, _)| *e == ext).map(|(_, t)| *t)?;
    valid.then_some(content_type)
}
