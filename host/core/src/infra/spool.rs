//! The spool of received messages (docs/behaviour.md#receiving-mail): each message Herald takes on port 25
//! is a file of its own in `HERALD_SMTP_SPOOL_DIR` from its 250 until it is applied, and then deleted, so
//! its disk space is given back at once. (The embedded database engine keeps the bytes of large values it
//! deleted for a long time, and a stranger decides how many arrive.)
//!
//! A message arriving is held in memory up to [`BUFFER`] bytes, then written to `<id>.eml` as it comes;
//! once whole it is flushed to the disk (one hop to a blocking thread for a small message), and only then
//! is its row written and the client told 250. Whatever a crash leaves behind (a message cut off, or one
//! whose row never came) is a file with no row, swept once it is old. The spool has a cap on its bytes
//! (messages arriving and waiting together): past it a message is refused with a temporary error instead
//! of filling the disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Files older than this with no row are left over from a crash: a message still arriving is younger
/// (DATA takes at most ten minutes), and so is a whole one whose row another process sharing the folder
/// is writing.
const ORPHAN_AGE: Duration = Duration::from_secs(900);

/// Bytes of a message held in memory before its file is written: most messages are smaller, and reach
/// the disk in one write when they are whole.
pub const BUFFER: usize = 64 * 1024;

/// Why a message could not be spooled.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("the spool of received messages is full")]
    Full,
    #[error("the spool of received messages: {0}")]
    Io(#[from] std::io::Error),
}

/// The folder of received messages and the bytes it holds.
pub struct Spool {
    dir: PathBuf,
    cap: u64,
    used: AtomicU64,
}

/// A message being received: its first bytes in memory, the rest in its file (removed when the draft
/// is dropped unless it was kept).
pub struct Draft {
    spool: Arc<Spool>,
    id: String,
    buffer: Vec<u8>,
    file: Option<std::fs::File>,
    len: u64,
    kept: bool,
}

impl Spool {
    /// The spool in `dir` (created when missing), holding at most `cap` bytes; counts what is there.
    pub fn open(dir: &Path, cap: u64) -> std::io::Result<Arc<Spool>> {
        std::fs::create_dir_all(dir)?;
        let spool = Spool { dir: dir.to_path_buf(), cap, used: AtomicU64::new(0) };
        let mut used = 0;
        for entry in std::fs::read_dir(dir)?.flatten() {
            if let Ok(m) = entry.metadata() {
                used += m.len();
            }
        }
        spool.used.store(used, Ordering::Relaxed);
        Ok(Arc::new(spool))
    }

    /// Bytes of messages in the spool (whole or arriving).
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.eml"))
    }

    /// Starts a message.
    pub async fn draft(self: &Arc<Self>) -> Result<Draft, SpoolError> {
        if self.used() >= self.cap {
            return Err(SpoolError::Full);
        }
        let id = uuid::Uuid::now_v7().to_string();
        Ok(Draft { spool: self.clone(), id, buffer: Vec::new(), file: None, len: 0, kept: false })
    }

    /// A whole message's bytes; None when its file is not here.
    pub async fn read(&self, id: &str) -> std::io::Result<Option<Vec<u8>>> {
        match tokio::fs::read(self.path(id)).await {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The size of a whole message's file, when it is here.
    pub async fn size(&self, id: &str) -> Option<u64> {
        tokio::fs::metadata(self.path(id)).await.ok().map(|m| m.len())
    }

    /// Deletes a whole message (applied); nothing when it is gone already.
    pub async fn remove(&self, id: &str) -> std::io::Result<()> {
        let path = self.path(id);
        let len = match tokio::fs::metadata(&path).await {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        match tokio::fs::remove_file(&path).await {
            Ok(()) => {
                self.release(len);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn release(&self, n: u64) {
        let _ = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| Some(u.saturating_sub(n)));
    }

    /// Files older than [`ORPHAN_AGE`]: what a crash may have left, when no row names them.
    pub async fn stale(&self) -> std::io::Result<Vec<Stale>> {
        let mut out = Vec::new();
        let mut entries = tokio::fs::read_dir(&self.dir).await?;
        while let Some(entry) = entries.next_entry().await? {
            let name = entry.file_name().to_string_lossy().to_string();
            let Ok(meta) = entry.metadata().await else { continue };
            let old = meta.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|age| age >= ORPHAN_AGE);
            if let (true, Some(id)) = (old, name.strip_suffix(".eml")) {
                out.push(Stale { id: id.to_string(), len: meta.len(), path: entry.path() });
            }
        }
        Ok(out)
    }

    /// Deletes a file [`Spool::stale`] found.
    pub async fn discard(&self, file: &Stale) -> std::io::Result<()> {
        tokio::fs::remove_file(&file.path).await?;
        self.release(file.len);
        Ok(())
    }
}

/// A file left in the spool for long.
#[derive(Debug)]
pub struct Stale {
    pub id: String,
    len: u64,
    path: PathBuf,
}

impl Draft {
    /// The message's id (its row's).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends bytes, unless the spool would pass its cap.
    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), SpoolError> {
        let n = bytes.len() as u64;
        let cap = self.spool.cap;
        if self
            .spool
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| (u + n <= cap).then_some(u + n))
            .is_err()
        {
            return Err(SpoolError::Full);
        }
        self.len += n;
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= BUFFER {
            self.flush(false).await?;
        }
        Ok(())
    }

    /// Writes the buffered bytes to the file (created on the first write), on a blocking thread; with
    /// `sync`, flushes the file to the disk as well.
    async fn flush(&mut self, sync: bool) -> std::io::Result<()> {
        let buffer = std::mem::take(&mut self.buffer);
        let file = self.file.take();
        let path = self.spool.path(&self.id);
        let (file, buffer) = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut file = match file {
                Some(f) => f,
                None => std::fs::OpenOptions::new().write(true).create_new(true).open(&path)?,
            };
            file.write_all(&buffer)?;
            if sync {
                file.sync_all()?;
            }
            Ok::<_, std::io::Error>((file, buffer))
        })
        .await
        .map_err(std::io::Error::other)??;
        self.file = Some(file);
        self.buffer = buffer;
        self.buffer.clear();
        Ok(())
    }

    /// Writes the message and flushes it to the disk: from here it survives a crash, and it is deleted
    /// only by [`Spool::remove`] (or the sweep, when no row names it). (A new file's name reaches the disk
    /// with its first flush on the journaling file systems Herald runs on: ext4, XFS.)
    pub async fn keep(mut self) -> Result<String, SpoolError> {
        self.flush(true).await?;
        self.kept = true;
        Ok(self.id.clone())
    }
}

impl Drop for Draft {
    fn drop(&mut self) {
        if !self.kept {
            if self.file.take().is_some() {
                let _ = std::fs::remove_file(self.spool.path(&self.id));
            }
            self.spool.release(self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        std::env::temp_dir().join(format!("herald-spool-test-{}", uuid::Uuid::new_v4()))
    }

    #[tokio::test]
    async fn a_kept_message_is_read_back_and_its_bytes_are_given_back_when_removed() {
        let d = dir();
        let spool = Spool::open(&d, 1 << 20).unwrap();
        let mut m = spool.draft().await.unwrap();
        m.write(b"Subject: a\r\n\r\n").await.unwrap();
        m.write(b"hello\r\n").await.unwrap();
        let id = m.keep().await.unwrap();
        assert_eq!(spool.read(&id).await.unwrap().unwrap(), b"Subject: a\r\n\r\nhello\r\n");
        assert_eq!(spool.used(), 21);
        spool.remove(&id).await.unwrap();
        assert_eq!(spool.used(), 0);
        assert!(spool.read(&id).await.unwrap().is_none());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0, "the file is gone");
    }

    #[tokio::test]
    async fn a_message_dropped_while_arriving_leaves_nothing_and_the_cap_refuses_more() {
        let d = dir();
        let spool = Spool::open(&d, 10).unwrap();
        let mut m = spool.draft().await.unwrap();
        m.write(b"12345678").await.unwrap();
        assert!(matches!(m.write(b"123").await, Err(SpoolError::Full)), "past the cap");
        drop(m);
        assert_eq!(spool.used(), 0);
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
        // A restart counts what is there.
        let mut m = spool.draft().await.unwrap();
        m.write(b"1234").await.unwrap();
        let id = m.keep().await.unwrap();
        assert_eq!(Spool::open(&d, 10).unwrap().used(), 4);
        spool.remove(&id).await.unwrap();
    }
}
