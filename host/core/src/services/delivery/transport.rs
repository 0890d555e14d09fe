//! Where messages go: Herald's own SMTP session pool (`smtp.rs`) or `.eml` files in a folder, and why a
//! transport did not take a message. Transport plugins are called by the delivery job itself.
//!
//! Must not import: salvo, surrealdb.

use std::path::PathBuf;

use lettre::Address;

use super::smtp;

/// Why a transport did not take a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// Try again later (SMTP 4xx, connection trouble).
    Transient(String),
    /// Will never succeed (SMTP 5xx).
    Permanent(String),
    /// The conversation broke off after the message may have been taken (the relay stopped answering, a
    /// plugin trapped or timed out): a campaign email is not sent again, transactional mail is.
    Uncertain(String),
}

/// Where messages go.
pub enum Transport {
    /// Herald's own session pool (`smtp.rs`): lettre's pooled transport cannot set `TCP_NODELAY`.
    Smtp(Box<smtp::Pool>),
    /// Writes `<message-id>.eml` files into a folder (the default without SMTP, so the quickstart works
    /// offline).
    File(PathBuf),
}

impl Transport {
    /// `smtp://user:pass@host:port` (STARTTLS with `?tls=required`), `smtps://...` for implicit TLS.
    pub fn smtp(url: &str) -> Result<Transport, String> {
        Ok(Transport::Smtp(Box::new(smtp::Pool::new(smtp::Relay::parse(url)?))))
    }

    pub async fn send(&self, from: &str, to: &str, id: &str, raw: &[u8]) -> Result<(), SendError> {
        match self {
            Transport::Smtp(pool) => pool.send(&envelope(from, to)?, raw).await,
            Transport::File(dir) => {
                tokio::fs::create_dir_all(dir).await.map_err(|e| SendError::Transient(e.to_string()))?;
                let tmp = dir.join(format!(".{id}.tmp"));
                tokio::fs::write(&tmp, raw).await.map_err(|e| SendError::Transient(e.to_string()))?;
                tokio::fs::rename(&tmp, dir.join(format!("{id}.eml")))
                    .await
                    .map_err(|e| SendError::Transient(e.to_string()))
            }
        }
    }
}

/// The SMTP envelope of one message.
pub(super) fn envelope(from: &str, to: &str) -> Result<lettre::address::Envelope, SendError> {
    let parse = |a: &str| a.parse::<Address>().map_err(|e| SendError::Permanent(format!("invalid address {a}: {e}")));
    lettre::address::Envelope::new(Some(parse(from)?), vec![parse(to)?])
        .map_err(|e| SendError::Permanent(e.to_string()))
}
