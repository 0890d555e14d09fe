//! The message of an email record: its RFC 5322 form (lettre: multipart/alternative with the text and
//! HTML parts, inline images in multipart/related, attachments in multipart/mixed, the record's own
//! headers), DKIM-signed when its domain is verified; a delivery batch's messages built on the blocking
//! pool, one task per core.
//!
//! Must not import: salvo, surrealdb.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use lettre::Address;
use lettre::message::header::{ContentType, HeaderName, HeaderValue};
use lettre::message::{Attachment, Mailbox, MultiPart, SinglePart};
use serde::{Deserialize, Serialize};

use crate::store::emails::EmailRow;

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

fn mailbox(name: Option<&str>, email: &str) -> Result<Mailbox, String> {
    let addr = email.parse::<Address>().map_err(|e| format!("invalid address {email}: {e}"))?;
    // Names are refused with control characters when saved; one stored before that check is made one
    // line here rather than split the header (lettre would panic on it).
    let name = name.map(|n| n.chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>());
    Ok(Mailbox::new(name, addr))
}

/// The message of an email, DKIM-signed when a signer is given (with the List-Unsubscribe headers in
/// the signature of any email that carries them).
pub(crate) fn build_signed(
    e: &EmailRow,
    signer: Option<&crate::infra::dkim::Signer>,
    now_ms: i64,
) -> Result<Vec<u8>, String> {
    let raw = build_message(e, now_ms)?;
    match signer {
        None => Ok(raw),
        Some(signer) => {
            let listed = e.headers.to_ascii_lowercase().contains("\"list-unsubscribe\"");
            let extra: &[&str] = if listed { crate::infra::dkim::LIST_UNSUBSCRIBE_HEADERS } else { &[] };
            let header = signer.sign(&raw, extra).map_err(|e| e.to_string())?;
            let mut signed = header.into_bytes();
            signed.extend_from_slice(&raw);
            Ok(signed)
        }
    }
}

/// The complete RFC 5322 message of an email (unsigned).
/// An unstructured header (a subject, a caller's header). Printable ASCII goes as it is (lettre folds
/// it); anything else is sent as RFC 2047 encoded words of Herald's own, each holding its spaces (the
/// encoder lettre uses splits words at a space and loses it, as the space between two encoded words is
/// not text), and so is text that itself looks like an encoded word (`=?...?=`), so a reader shows it
/// as written instead of decoding it.
fn unstructured(name: HeaderName, value: &str) -> HeaderValue {
    let plain = value.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
    if plain && !value.contains("=?") {
        return HeaderValue::new(name, value.to_string());
    }
    let mut words = Vec::new();
    let mut rest = value;
    while !rest.is_empty() {
        let mut end = rest.len().min(45);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        words.push(format!("=?utf-8?b?{}?=", STANDARD.encode(&rest.as_bytes()[..end])));
        rest = &rest[end..];
    }
    HeaderValue::dangerous_new_pre_encoded(name, value.to_string(), words.join("\r\n "))
}

pub fn build_message(e: &EmailRow, now_ms: i64) -> Result<Vec<u8>, String> {
    let mut b = lettre::Message::builder()
        .from(mailbox(e.from_name.as_deref(), &e.from)?)
        .to(mailbox(e.recipient_name.as_deref(), &e.recipient)?)
        .raw_header(unstructured(HeaderName::new_from_ascii_str("Subject"), &e.subject))
        .message_id(Some(e.message_id.clone()))
        .date(UNIX_EPOCH + Duration::from_millis(now_ms.max(0) as u64));
    if let Some(r) = &e.reply_to {
        b = b.reply_to(mailbox(None, r)?);
    }
    let headers: Vec<(String, String)> = serde_json::from_str(&e.headers).unwrap_or_default();
    for (name, value) in headers {
        let name = HeaderName::new_from_ascii(name).map_err(|e| format!("invalid header name: {e}"))?;
        b = b.raw_header(unstructured(name, &value));
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

/// The machine's cores (read once).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map(usize::from).unwrap_or(1))
}

impl super::Delivery {
    /// Builds and signs the messages of a batch (an empty message for each `None`): in one blocking
    /// task per core, each building its share in turn. A blocking task per message grew tokio's blocking
    /// pool to ~120 threads under a campaign, each thread with its own allocator heap.
    pub(super) async fn build_all(
        &self,
        store: &crate::store::Store,
        now: i64,
        todo: &[Option<&EmailRow>],
    ) -> Vec<Result<Vec<u8>, String>> {
        type Work = (usize, EmailRow, Option<Arc<crate::infra::dkim::Signer>>);
        // What a share that failed (a panic while building) leaves: its emails fail their jobs and retry.
        let mut out: Vec<Result<Vec<u8>, String>> =
            todo.iter().map(|e| if e.is_some() { Err("message building failed".into()) } else { Ok(vec![]) }).collect();
        let mut work: Vec<Work> = Vec::new();
        for (i, e) in todo.iter().enumerate() {
            let Some(e) = e else { continue };
            let from_domain = e.from.rsplit_once('@').map(|(_, d)| d.to_string()).unwrap_or_default();
            match if self.sign { self.signer_for(store, &from_domain, &e.project).await } else { Ok(None) } {
                Ok(signer) => work.push((i, (*e).clone(), signer)),
                Err(msg) => out[i] = Err(msg),
            }
        }
        let parts = cores().min(work.len()).max(1);
        let mut shares: Vec<Vec<Work>> = (0..parts).map(|_| Vec::new()).collect();
        for (k, w) in work.into_iter().enumerate() {
            shares[k % parts].push(w);
        }
        let tasks = shares.into_iter().map(|share| {
            tokio::task::spawn_blocking(move || {
                share
                    .into_iter()
                    .map(|(i, row, signer)| (i, build_signed(&row, signer.as_deref(), now)))
                    .collect::<Vec<(usize, Result<Vec<u8>, String>)>>()
            })
        });
        for done in futures_util::future::join_all(tasks).await {
            match done {
                Ok(built) => {
                    for (i, r) in built {
                        out[i] = r;
                    }
                }
                Err(e) => tracing::error!(error = %e, "message building failed"),
            }
        }
        out
    }

    /// The DKIM signer of a verified sender domain of this project (cached for a few seconds).
    async fn signer_for(
        &self,
        store: &crate::store::Store,
        domain: &str,
        project: &str,
    ) -> Result<Option<Arc<crate::infra::dkim::Signer>>, String> {
        const FRESH: Duration = Duration::from_secs(3);
        let cached = {
            let map = self.signers.lock().unwrap_or_else(|p| p.into_inner());
            map.get(domain).filter(|(_, at)| at.elapsed() < FRESH).map(|(s, _)| s.clone())
        };
        let entry = match cached {
            Some(entry) => entry,
            None => {
                let entry = match store.verified_domain(domain).await.map_err(|e| e.to_string())? {
                    Some(d) => Some((d.project.clone(), Arc::new(self.domains.signer(&d).map_err(|e| e.to_string())?))),
                    _ => None,
                };
                let mut map = self.signers.lock().unwrap_or_else(|p| p.into_inner());
                map.insert(domain.to_string(), (entry.clone(), std::time::Instant::now()));
                entry
            }
        };
        Ok(entry.filter(|(p, _)| p == project).map(|(_, s)| s))
    }
}
