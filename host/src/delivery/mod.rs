//! Delivery: builds each email's MIME message, DKIM-signs it with its verified domain's key, and hands
//! it to the transport (SMTP through lettre with pooled connections, or `.eml` files in a folder).
//! Outcomes follow decision 19: accepted → SENT and `email.sent`; a temporary failure (4xx, connection)
//! → retried with backoff, then FAILED; a permanent failure (5xx) → BOUNCED, the contact unsubscribed,
//! `email.bounce` and `contact.unsubscribed`.
//!
//! Must not import: salvo, surrealdb.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::PoolConfig;
use lettre::{Address, AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde::{Deserialize, Serialize};
use serde_json::Map;

use crate::jobs::{JobContext, Registry};
use crate::sending_domains::Domains;
use crate::store::contacts::{ContactWrite, Event};
use crate::store::emails::EmailRow;

pub const DELIVER_JOB: &str = "email.deliver";
pub const DELIVER_ATTEMPTS: i64 = 6;

/// One attachment as stored with an email.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StoredAttachment {
    pub filename: String,
    pub content_type: String,
    /// base64
    pub content: String,
    pub content_id: Option<String>,
    pub inline: bool,
}

/// Why a transport did not take a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// Try again later (SMTP 4xx, connection trouble).
    Transient(String),
    /// Will never succeed (SMTP 5xx).
    Permanent(String),
}

/// Where messages go.
pub enum Transport {
    Smtp(AsyncSmtpTransport<Tokio1Executor>),
    /// Writes `<message-id>.eml` files into a folder (the default without SMTP, so the quickstart works
    /// offline).
    File(PathBuf),
}

impl Transport {
    /// `smtp://user:pass@host:port` (STARTTLS with `?tls=required`), `smtps://...` for implicit TLS.
    pub fn smtp(url: &str) -> Result<Transport, String> {
        let t = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|e| format!("invalid SMTP URL: {e}"))?
            .pool_config(PoolConfig::new().max_size(8))
            .timeout(Some(Duration::from_secs(30)))
            .build();
        Ok(Transport::Smtp(t))
    }

    pub async fn send(&self, from: &str, to: &str, id: &str, raw: &[u8]) -> Result<(), SendError> {
        match self {
            Transport::Smtp(t) => {
                let parse = |a: &str| {
                    a.parse::<Address>().map_err(|e| SendError::Permanent(format!("invalid address {a}: {e}")))
                };
                let envelope = lettre::address::Envelope::new(Some(parse(from)?), vec![parse(to)?])
                    .map_err(|e| SendError::Permanent(e.to_string()))?;
                match t.send_raw(&envelope, raw).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_permanent() => Err(SendError::Permanent(e.to_string())),
                    Err(e) => Err(SendError::Transient(e.to_string())),
                }
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

fn mailbox(name: Option<&str>, email: &str) -> Result<Mailbox, String> {
    let addr = email.parse::<Address>().map_err(|e| format!("invalid address {email}: {e}"))?;
    Ok(Mailbox::new(name.map(str::to_string), addr))
}

/// The complete RFC 5322 message of an email (unsigned).
pub fn build_message(e: &EmailRow, now_ms: i64) -> Result<Vec<u8>, String> {
    let mut b = lettre::Message::builder()
        .from(mailbox(e.from_name.as_deref(), &e.from)?)
        .to(mailbox(e.recipient_name.as_deref(), &e.recipient)?)
        .subject(e.subject.clone())
        .message_id(Some(e.message_id.clone()))
        .date(UNIX_EPOCH + Duration::from_millis(now_ms.max(0) as u64));
    if let Some(r) = &e.reply_to {
        b = b.reply_to(mailbox(None, r)?);
    }
    let headers: Vec<(String, String)> = serde_json::from_str(&e.headers).unwrap_or_default();
    for (name, value) in headers {
        let name = HeaderName::new_from_ascii(name).map_err(|e| format!("invalid header name: {e}"))?;
        b = b.raw_header(HeaderValue::new(name, value));
    }
    let attachments: Vec<StoredAttachment> = serde_json::from_str(&e.attachments).unwrap_or_default();
    let alternative = MultiPart::alternative_plain_html(e.text.clone(), e.html.clone());
    let part = |a: &StoredAttachment| -> Result<SinglePart, String> {
        let bytes = STANDARD.decode(&a.content).map_err(|e| e.to_string())?;
        let ct = ContentType::parse(&a.content_type)
            .unwrap_or(ContentType::parse("application/octet-stream").map_err(|e| e.to_string())?);
        Ok(match (&a.content_id, a.inline) {
            (Some(cid), true) => Attachment::new_inline_with_name(cid.clone(), a.filename.clone()).body(bytes, ct),
            _ => Attachment::new(a.filename.clone()).body(bytes, ct),
        })
    };
    let inline: Vec<&StoredAttachment> = attachments.iter().filter(|a| a.inline).collect();
    let regular: Vec<&StoredAttachment> = attachments.iter().filter(|a| !a.inline).collect();
    let mut body = if inline.is_empty() {
        alternative
    } else {
        let mut related = MultiPart::related().multipart(alternative);
        for a in inline {
            related = related.singlepart(part(a)?);
        }
        related
    };
    if !regular.is_empty() {
        let mut mixed = MultiPart::mixed().multipart(body);
        for a in regular {
            mixed = mixed.singlepart(part(a)?);
        }
        body = mixed;
    }
    let msg = b.multipart(body).map_err(|e| e.to_string())?;
    Ok(msg.formatted())
}

/// Delivery with its dependencies.
pub struct Delivery {
    pub transport: Transport,
    pub domains: Arc<Domains>,
    /// Messages per second per project handed to the transport.
    pub throttle: crate::ratelimit::SendThrottle,
    /// Sign with the sender domain's DKIM key.
    pub sign: bool,
}

#[derive(Deserialize)]
struct Payload {
    email: String,
    project: String,
}

impl Delivery {
    pub fn register(self: &Arc<Self>, registry: &mut Registry) {
        let d = self.clone();
        registry.register(DELIVER_JOB, move |ctx: JobContext| {
            let d = d.clone();
            async move { d.deliver(&ctx).await }
        });
    }

    async fn deliver(&self, ctx: &JobContext) -> Result<(), String> {
        let p: Payload = serde_json::from_value(ctx.payload.clone()).map_err(|e| format!("bad payload: {e}"))?;
        let store = &ctx.store;
        let Some(e) = store.email(&p.project, &p.email).await.map_err(|e| e.to_string())? else {
            return Ok(()); // deleted meanwhile
        };
        if e.status != "PENDING" && e.status != "SENDING" {
            return Ok(()); // already decided (a retried job after the outcome was stored)
        }
        let now = ctx.clock.now_ms();
        store.set_email_status(&e.id, "SENDING", None, None, now).await.map_err(|e| e.to_string())?;
        let mut raw = build_message(&e, now)?;
        let from_domain = e.from.rsplit_once('@').map(|(_, d)| d.to_string()).unwrap_or_default();
        if self.sign
            && let Some(d) = store.domain_by_name(&from_domain).await.map_err(|e| e.to_string())?
            && d.project == e.project
            && d.status == "VERIFIED"
        {
            let signer = self.domains.signer(&d).map_err(|e| e.to_string())?;
            let extra: &[&str] = if e.kind == "MARKETING" { crate::dkim::LIST_UNSUBSCRIBE_HEADERS } else { &[] };
            let header = signer.sign(&raw, extra).map_err(|e| e.to_string())?;
            let mut signed = header.into_bytes();
            signed.extend_from_slice(&raw);
            raw = signed;
        }
        let id = e.message_id.trim_matches(['<', '>']).to_string();
        self.throttle.take(&e.project).await;
        let now = ctx.clock.now_ms();
        match self.transport.send(&e.from, &e.recipient, &id, &raw).await {
            Ok(()) => {
                store.set_email_status(&e.id, "SENT", None, Some(now), now).await.map_err(|e| e.to_string())?;
                emit(ctx, &e, "email.sent", None).await
            }
            Err(SendError::Transient(msg)) if ctx.attempt < DELIVER_ATTEMPTS => {
                Err(format!("temporary failure: {msg}"))
            }
            Err(SendError::Transient(msg)) => {
                store.set_email_status(&e.id, "FAILED", Some(&msg), None, now).await.map_err(|e| e.to_string())?;
                Ok(())
            }
            Err(SendError::Permanent(msg)) => {
                store.set_email_status(&e.id, "BOUNCED", Some(&msg), None, now).await.map_err(|e| e.to_string())?;
                emit(ctx, &e, "email.bounce", Some(&msg)).await?;
                unsubscribe(ctx, &e).await
            }
        }
    }
}

async fn emit(ctx: &JobContext, e: &EmailRow, name: &str, reason: Option<&str>) -> Result<(), String> {
    let mut data = Map::new();
    data.insert("emailId".into(), e.id.clone().into());
    data.insert("subject".into(), e.subject.clone().into());
    if let Some(r) = reason {
        data.insert("reason".into(), r.into());
    }
    let ev = Event::new(&e.project, &e.contact, name, data, "system", ctx.clock.now_ms());
    ctx.store.write_contact(&e.project, &ContactWrite::None, &[ev]).await.map(|_| ()).map_err(|e| e.to_string())
}

/// A permanent bounce unsubscribes the contact (decision 19), with its event when it really flips.
async fn unsubscribe(ctx: &JobContext, e: &EmailRow) -> Result<(), String> {
    crate::ingest::set_subscribed(&ctx.store, &ctx.clock, &e.project, &e.contact, false)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}
