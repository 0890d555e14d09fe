//! Delivery: builds each email's MIME message, DKIM-signs it with its verified domain's key, and hands
//! it to the project's transport: SMTP through lettre with pooled connections, `.eml` files in a folder,
//! or a transport plugin (which receives the structured message and the signed raw bytes).
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
    /// The built-in SMTP transport, when the server has an SMTP URL.
    pub smtp: Option<Transport>,
    /// The built-in file transport.
    pub file: Transport,
    /// `smtp`, `file` or a transport plugin's name, for projects that have not picked one.
    pub default_transport: String,
    pub plugins: Arc<crate::plugins::PluginHost>,
    /// Each project's transport setting, read at most every few seconds.
    pub project_transports: std::sync::Mutex<std::collections::HashMap<String, (Option<String>, std::time::Instant)>>,
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
        let transport = self.transport_for(ctx, &e.project).await?;
        self.throttle.take(&e.project).await;
        let now = ctx.clock.now_ms();
        let outcome = match transport.as_str() {
            "smtp" => match &self.smtp {
                Some(t) => t.send(&e.from, &e.recipient, &id, &raw).await.map(|_| None),
                None => Err(SendError::Transient("SMTP is not configured on this server (set smtp_url)".into())),
            },
            "file" => self.file.send(&e.from, &e.recipient, &id, &raw).await.map(|_| None),
            plugin => self.send_plugin(plugin, &e, &id, raw).await,
        };
        match outcome {
            Ok(provider_id) => {
                if let Some(pid) = provider_id {
                    store.set_provider_message_id(&e.id, &pid).await.map_err(|e| e.to_string())?;
                }
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

impl Delivery {
    /// The project's transport (cached for a few seconds), or the server's default.
    async fn transport_for(&self, ctx: &JobContext, project: &str) -> Result<String, String> {
        const FRESH: Duration = Duration::from_secs(3);
        let cached = {
            let map = self.project_transports.lock().unwrap_or_else(|p| p.into_inner());
            map.get(project).filter(|(_, at)| at.elapsed() < FRESH).map(|(t, _)| t.clone())
        };
        let setting = match cached {
            Some(t) => t,
            None => {
                let t = ctx.store.project(project).await.map_err(|e| e.to_string())?.and_then(|p| p.transport);
                let mut map = self.project_transports.lock().unwrap_or_else(|p| p.into_inner());
                map.insert(project.to_string(), (t.clone(), std::time::Instant::now()));
                t
            }
        };
        Ok(setting.unwrap_or_else(|| self.default_transport.clone()))
    }

    /// Hands a message to a transport plugin. Any failure of the plugin itself (not loaded, trap,
    /// timeout) is temporary: the job retries with backoff, and a fixed or reloaded plugin picks it up.
    async fn send_plugin(&self, name: &str, e: &EmailRow, id: &str, raw: Vec<u8>) -> Result<Option<String>, SendError> {
        use crate::plugins::{Address, OutAttachment, Outgoing, SendOutcome};
        let headers: Vec<(String, String)> = serde_json::from_str(&e.headers).unwrap_or_default();
        let stored: Vec<StoredAttachment> = serde_json::from_str(&e.attachments).unwrap_or_default();
        let mut attachments = Vec::with_capacity(stored.len());
        for a in stored {
            let content = STANDARD.decode(&a.content).map_err(|err| SendError::Permanent(err.to_string()))?;
            attachments.push(OutAttachment {
                filename: a.filename,
                content_type: a.content_type,
                content,
                content_id: a.content_id.filter(|_| a.inline),
            });
        }
        let mut tags = vec![("project".to_string(), e.project.clone()), ("email".to_string(), e.id.clone())];
        tags.push(("kind".to_string(), e.kind.clone()));
        if let Some(t) = &e.template {
            tags.push(("template".to_string(), t.clone()));
        }
        let msg = Outgoing {
            mail_from: e.from.clone(),
            rcpt_to: vec![e.recipient.clone()],
            message_id: id.to_string(),
            from: Address { email: e.from.clone(), name: e.from_name.clone() },
            reply_to: e.reply_to.clone().map(|r| Address { email: r, name: None }),
            to: vec![Address { email: e.recipient.clone(), name: e.recipient_name.clone() }],
            cc: vec![],
            subject: e.subject.clone(),
            html: Some(e.html.clone()).filter(|h| !h.is_empty()),
            text: Some(e.text.clone()).filter(|t| !t.is_empty()),
            headers,
            attachments,
            tags,
            raw,
        };
        match self.plugins.send(name, &msg).await {
            Ok(SendOutcome::Accepted { provider_message_id }) => Ok(provider_message_id),
            Ok(SendOutcome::Temporary(m)) => Err(SendError::Transient(format!("{name}: {m}"))),
            Ok(SendOutcome::RateLimited { retry_after_ms }) => {
                Err(SendError::Transient(format!("{name}: rate limited, retry after {retry_after_ms} ms")))
            }
            Ok(SendOutcome::Permanent(m)) => Err(SendError::Permanent(format!("{name}: {m}"))),
            Err(err) => Err(SendError::Transient(err.to_string())),
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
