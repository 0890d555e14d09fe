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
    /// The transport refused it for now (SMTP 4xx, a plugin's `temporary`): deferred, and offered to the
    /// next transport of its route at once.
    Transient(String),
    /// The transport itself failed before the message was offered (no session could be opened: refused,
    /// a timeout, a `421` greeting, a failed AUTH; a transport plugin that is not loaded): the transport
    /// is down (`breaker.rs`) and the message waits for it, or goes to the next transport.
    Unreachable(String),
    /// The connection broke off mid-conversation without a reply (lettre cannot say at which step): the
    /// message is deferred until the transport answers again, never offered to another transport at
    /// once (the first may have taken it; a retry keeps the Message-ID).
    Broken(String),
    /// A transport plugin asks for a pause of this many milliseconds: the transport is paused that long
    /// and the message waits for it.
    RateLimited(String, u64),
    /// Will never succeed (SMTP 5xx).
    Permanent(String),
    /// The conversation broke off after the message may have been taken (the relay stopped answering, a
    /// plugin trapped or timed out): a campaign email is not sent again, transactional mail is.
    Uncertain(String),
}

impl SendError {
    /// The words of the failure.
    pub fn reason(&self) -> &str {
        match self {
            SendError::Transient(m)
            | SendError::Unreachable(m)
            | SendError::Broken(m)
            | SendError::RateLimited(m, _)
            | SendError::Permanent(m)
            | SendError::Uncertain(m) => m,
        }
    }
}

/// Where messages go.
pub enum Transport {
    /// Herald's own session pool (`smtp.rs`): lettre's pooled transport cannot set `TCP_NODELAY`.
    Smtp(Box<smtp::Pool>),
    /// Writes `<message-id>.eml` files into a folder (the default without SMTP, so the quickstart works
    /// offline).
    File(PathBuf),
    /// A transport plugin under another name (`[transports.NAME] plugin = "..."`): the delivery job calls
    /// it with the structured message.
    Plugin(String),
}

impl Transport {
    /// `smtp://user:pass@host:port` (STARTTLS with `?tls=required`), `smtps://...` for implicit TLS.
    pub fn smtp(url: &str) -> Result<Transport, String> {
        Ok(Transport::Smtp(Box::new(smtp::Pool::new(smtp::Relay::parse(url)?))))
    }

    /// Sends a built message (Herald's own mail, which goes to SMTP or files only).
    pub async fn send(&self, from: &str, to: &str, id: &str, raw: &[u8]) -> Result<(), SendError> {
        match self {
            Transport::Smtp(pool) => pool.send(&envelope(from, to)?, raw).await,
            Transport::Plugin(name) => {
                Err(SendError::Unreachable(format!("the transport plugin {name} takes no raw message here")))
            }
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
