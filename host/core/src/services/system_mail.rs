//! Herald's own mail to its users (docs/behaviour.md#account-mail): email verification, password reset
//! and project invitations. It belongs to no project, so it is not an email record: each message is a
//! `system.mail` job (durable, retried with backoff like any job) handed to the server's SMTP relay, or
//! to the file transport when none is configured. Its text carries a single-use link, so the job keeps
//! it sealed (AES-GCM with a key derived from the server secret) rather than in the clear; a retry
//! sends the same Message-ID.
//!
//! Must not import: salvo, surrealdb.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use lettre::message::Mailbox;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::infra::jobs::{JobContext, Registry};
use crate::services::delivery::{Delivery, SendError};
use crate::store::Store;
use crate::store::jobs::NewJob;

pub const SYSTEM_MAIL_JOB: &str = "system.mail";

/// Herald's own mail: the sender, the sealing key and the transports.
pub struct SystemMail {
    from: Mailbox,
    key: [u8; 32],
    delivery: Arc<Delivery>,
}

/// One message as its job keeps it (sealed).
#[derive(Serialize, Deserialize)]
struct Mail {
    to: String,
    subject: String,
    text: String,
}

impl SystemMail {
    /// `from` is the configured sender (checked when the configuration was read).
    pub fn new(from: &str, secret: &str, delivery: Arc<Delivery>) -> Result<SystemMail, String> {
        let from = from.parse::<Mailbox>().map_err(|e| format!("system_from: {e}"))?;
        let derived = crate::infra::security::derive_key(secret, "herald-system-mail-v1");
        let key: [u8; 32] = derived.try_into().map_err(|_| "derived key is not 32 bytes".to_string())?;
        Ok(SystemMail { from, key, delivery })
    }

    /// Queues a plain-text message to `to`.
    pub async fn queue(&self, store: &Store, now: i64, to: &str, subject: &str, text: &str) -> Result<(), String> {
        let mail = Mail { to: to.into(), subject: subject.into(), text: text.into() };
        let plain = serde_json::to_vec(&mail).map_err(|e| e.to_string())?;
        let sealed = crate::infra::dkim::seal(&self.key, &plain).map_err(|e| e.to_string())?;
        let mut job = NewJob::new(SYSTEM_MAIL_JOB, json!({ "sealed": sealed }), now);
        job.priority = 50;
        job.max_attempts = 8;
        store.enqueue(&job, now).await.map(|_| ()).map_err(|e| e.to_string())
    }

    pub fn register(self: &Arc<Self>, registry: &mut Registry) {
        let me = self.clone();
        registry.register(SYSTEM_MAIL_JOB, move |ctx: JobContext| {
            let me = me.clone();
            async move { me.send(&ctx).await }
        });
    }

    /// Sends one queued message. A temporary failure fails the job (it is retried); a permanent refusal
    /// is logged and ends it.
    async fn send(&self, ctx: &JobContext) -> Result<(), String> {
        let sealed = ctx.payload.get("sealed").and_then(|v| v.as_str()).ok_or("system mail without content")?;
        let plain = crate::infra::dkim::open(&self.key, sealed).map_err(|e| e.to_string())?;
        let mail: Mail = serde_json::from_slice(&plain).map_err(|e| e.to_string())?;
        let to = match mail.to.parse::<Mailbox>() {
            Ok(to) => to,
            Err(e) => {
                tracing::warn!(job = %ctx.id, error = %e, "system mail to an invalid address is dropped");
                return Ok(());
            }
        };
        let message_id = format!("<{}@{}>", ctx.id, self.from.email.domain());
        let auto = HeaderValue::new(HeaderName::new_from_ascii_str("Auto-Submitted"), "auto-generated".into());
        let msg = lettre::Message::builder()
            .from(self.from.clone())
            .to(to.clone())
            .subject(mail.subject)
            .message_id(Some(message_id))
            .date(UNIX_EPOCH + Duration::from_millis(ctx.clock.now_ms().max(0) as u64))
            .raw_header(auto)
            .header(ContentType::TEXT_PLAIN)
            .body(mail.text)
            .map_err(|e| e.to_string())?;
        let Some(transport) = self.delivery.system_transport() else {
            return Err("no transport for Herald's own mail".into());
        };
        let from = self.from.email.to_string();
        match transport.send(&from, to.email.as_ref(), &ctx.id, &msg.formatted()).await {
            Ok(()) => Ok(()),
            Err(SendError::Permanent(why)) => {
                tracing::warn!(job = %ctx.id, error = %why, "system mail refused by the relay");
                Ok(())
            }
            Err(e) => Err(e.reason().to_string()),
        }
    }
}
