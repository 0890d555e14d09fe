//! Image uploads (docs/behaviour.md#uploads): an image checked by its bytes (`domain::images`), stored
//! once per content under the uploads folder, named by its SHA-256, and served back by that name.
//!
//! Must not import: salvo, surrealdb.

use std::path::PathBuf;

use sha2::{Digest, Sha256};

use crate::domain::images::{self, KINDS};
use crate::error::ApiError;
use crate::state::AppState;

/// A stored image, as the upload answers it.
pub struct Uploaded {
    pub url: String,
    pub size: usize,
    pub content_type: &'static str,
    pub width: u32,
    pub height: u32,
}

/// Stores an image (415 for anything that is not wholly a PNG, JPEG, GIF or WebP by its bytes). The same
/// image twice is one file and one URL.
pub async fn store_image(st: &AppState, bytes: &[u8]) -> Result<Uploaded, ApiError> {
    let info = images::check(bytes).map_err(|refusal| ApiError::UnsupportedMediaType(refusal.message()))?;
    let name = format!("{}.{}", hex::encode(Sha256::digest(bytes)), info.ext);
    let dir = st.config.uploads_dir.clone();
    let path = dir.join(&name);
    if tokio::fs::metadata(&path).await.is_err() {
        let io = |e: std::io::Error| ApiError::Internal(format!("storing an upload: {e}"));
        tokio::fs::create_dir_all(&dir).await.map_err(io)?;
        // Written aside and renamed, so a reader never sees half a file and two uploads of one image at
        // once end with the same complete file.
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
pub async fn open_image(st: &AppState, name: &str) -> Option<Stored> {
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
