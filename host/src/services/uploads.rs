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

/// The stored image with this name and its content type; None for a name Herald never gives out (only
/// `<64 hex digits>.<png|jpg|gif|webp>`: nothing else of the disk is reachable) or one not stored.
pub async fn read_image(st: &AppState, name: &str) -> Option<(Vec<u8>, &'static str)> {
    let (hash, ext) = name.split_once('.')?;
    let valid = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let content_type = KINDS.iter().find(|(e, _)| *e == ext).map(|(_, t)| *t)?;
    if !valid {
        return None;
    }
    let path: PathBuf = st.config.uploads_dir.join(name);
    tokio::fs::read(path).await.ok().map(|b| (b, content_type))
}
