//! The SMTP relay (docs/behaviour.md#smtp-relay): a message an application submits over SMTP becomes
//! the [`SendCommand`] `/v1/send` makes, so every rule of a send holds for it (the sender's domain,
//! suspension, the billing limit, suppressions, contacts, DKIM, tracking). The envelope's recipients
//! are the recipients; the caller's subject, bodies, attachments and headers are kept, except the
//! headers Herald writes itself. Its subject and body are the caller's text, never templates.
//!
//! Must not import: salvo, surrealdb.

use base64::Engine as _;
use mail_parser::{MessageParser, MimeHeaders, PartType};
use serde_json::Value;

use crate::domain::contacts::DataPatch;
use crate::error::Error;
use crate::infra::security;
use crate::services::delivery::StoredAttachment;
use crate::services::send::{MAX_ATTACHMENT_BYTES, MAX_ATTACHMENTS, RESERVED_HEADERS, SendCommand};

/// Headers of a submitted message that describe the MIME structure Herald builds again, or its route
/// here; dropped like [`RESERVED_HEADERS`], the ones Herald writes on every email.
const REBUILT_HEADERS: &[&str] = &["content-disposition", "content-id", "received"];

/// Headers that state what a receiving server found (authentication results, ARC seals, SPF): only a
/// receiver may write them, so a caller's are dropped rather than sent on under the tenant's name.
fn receivers_header(name: &str) -> bool {
    name == "authentication-results" || name == "received-spf" || name.starts_with("arc-")
}

/// Headers of the caller's kept.
const MAX_HEADERS: usize = 50;

/// The project a secret key (the SMTP password) belongs to; None for anything else (a public key, a
/// wrong or revoked key, a disabled project).
pub async fn project_of_key(st: &crate::context::Context, key: &str) -> Result<Option<String>, Error> {
    if security::key_kind(key) != Some(security::KeyKind::Secret) {
        return Ok(None);
    }
    project_of_digest(st, &security::key_digest(key)).await
}

/// The project whose secret key has this digest, while that key is current and the project enabled: what
/// an open relay session checks again before each message (a regenerated key stops it).
pub async fn project_of_digest(st: &crate::context::Context, digest: &str) -> Result<Option<String>, Error> {
    let found = crate::services::accounts::project_by_key(st, digest).await?;
    Ok(found.filter(|(p, secret)| *secret && !p.disabled).map(|(p, _)| p.id))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The send a submitted message asks for. `recipients` are the envelope's (RCPT TO), normalised.
pub fn command(project: &str, envelope_from: &str, recipients: &[String], raw: &[u8]) -> Result<SendCommand, Error> {
    let message = MessageParser::default()
        .parse(raw)
        .ok_or_else(|| Error::field("body", "invalid_message", "the message has no headers", Value::Null))?;
    let from_header = message.from().and_then(|a| a.first());
    let from_email = from_header.and_then(|a| a.address()).unwrap_or(envelope_from).to_ascii_lowercase();
    let from_name = from_header.and_then(|a| a.name()).map(str::to_string);
    // Display names of the recipients the headers name.
    let named: Vec<(String, Option<String>)> = [message.to(), message.cc()]
        .into_iter()
        .flatten()
        .flat_map(|a| a.iter())
        .filter_map(|a| Some((a.address()?.to_ascii_lowercase(), a.name().map(str::to_string))))
        .collect();
    let recipients = recipients
        .iter()
        .map(|r| (r.clone(), named.iter().find(|(e, _)| e == r).and_then(|(_, n)| n.clone())))
        .collect();
    let html = match message.html_bodies().next() {
        Some(p) if matches!(p.body, PartType::Html(_)) => message.body_html(0).map(|h| h.into_owned()),
        _ => None,
    };
    let html = html.unwrap_or_else(|| {
        let text = message.body_text(0).map(|t| t.into_owned()).unwrap_or_default();
        format!("<div style=\"white-space:pre-wrap\">{}</div>", escape(&text))
    });
    let mut attachments = Vec::new();
    let mut attachment_bytes = 0;
    for part in message.attachments() {
        if attachments.len() == MAX_ATTACHMENTS {
            return Err(Error::field(
                "attachments",
                "too_many",
                &format!("at most {MAX_ATTACHMENTS} attachments per message"),
                Value::Null,
            ));
        }
        let content = part.contents();
        attachment_bytes += content.len();
        let content_type = part
            .content_type()
            .map(|ct| format!("{}/{}", ct.ctype(), ct.subtype().unwrap_or("octet-stream")).to_ascii_lowercase())
            .unwrap_or_else(|| "application/octet-stream".into());
        let inline = part.content_disposition().is_some_and(|d| d.ctype().eq_ignore_ascii_case("inline"));
        attachments.push(StoredAttachment {
            filename: part.attachment_name().unwrap_or("attachment").to_string(),
            content_type,
            content: base64::engine::general_purpose::STANDARD.encode(content),
            content_id: part.content_id().map(|c| c.trim_matches(['<', '>']).to_string()),
            inline,
        });
    }
    if attachment_bytes > MAX_ATTACHMENT_BYTES {
        return Err(Error::field(
            "attachments",
            "too_big",
            "attachments are at most 10 MB in total",
            Value::from(attachment_bytes),
        ));
    }
    let headers = message
        .headers_raw()
        .filter(|(name, _)| {
            let name = name.to_ascii_lowercase();
            !RESERVED_HEADERS.contains(&name.as_str())
                && !REBUILT_HEADERS.contains(&name.as_str())
                && !receivers_header(&name)
        })
        .filter(|(name, _)| name.len() <= 100 && name.bytes().all(|b| b.is_ascii_graphic() && b != b':'))
        .map(|(name, value)| (name.to_string(), value.split_whitespace().collect::<Vec<_>>().join(" ")))
        .filter(|(_, value)| value.chars().count() <= 998)
        .take(MAX_HEADERS)
        .collect();
    Ok(SendCommand {
        project: project.to_string(),
        recipients,
        from: Some((from_email, from_name)),
        legacy_name: None,
        reply_to: message.reply_to().and_then(|a| a.first()).and_then(|a| a.address()).map(str::to_string),
        subscribed: None,
        patch: DataPatch::default(),
        template: None,
        subject: Some(message.subject().unwrap_or("").to_string()),
        html: Some(html),
        headers,
        attachments,
        attachment_bytes,
        literal: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_keeps_its_parts_and_headers_except_those_herald_writes() {
        let raw = "From: \"Shop\" <orders@shop.test>\r\nTo: \"Ann\" <ann@example.com>\r\nSubject: Your {{order}}\r\n\
            Message-ID: <x@client>\r\nX-Order: 42\r\nReceived: from somewhere\r\nMIME-Version: 1.0\r\n\
            Authentication-Results: mx.example; dkim=pass header.d=bank.example\r\nARC-Seal: i=1; a=rsa-sha256\r\n\
            ARC-Authentication-Results: i=1; mx.example; spf=pass\r\nReceived-SPF: pass\r\n\
            Content-Type: multipart/mixed; boundary=\"M\"\r\n\r\n--M\r\nContent-Type: text/html\r\n\r\n<p>Total {{x}}</p>\r\n\
            --M\r\nContent-Type: text/csv\r\nContent-Disposition: attachment; filename=\"o.csv\"\r\n\r\na,b\r\n--M--\r\n";
        let c = command("p", "bounce@shop.test", &["ann@example.com".into(), "bcc@example.com".into()], raw.as_bytes())
            .unwrap();
        assert_eq!(c.from, Some(("orders@shop.test".into(), Some("Shop".into()))));
        assert_eq!(
            c.recipients,
            vec![("ann@example.com".into(), Some("Ann".into())), ("bcc@example.com".into(), None)]
        );
        assert_eq!(c.subject.as_deref(), Some("Your {{order}}"));
        assert_eq!(c.html.as_deref().map(str::trim), Some("<p>Total {{x}}</p>"));
        assert_eq!(c.headers, vec![("X-Order".to_string(), "42".to_string())]);
        assert_eq!(c.attachments.len(), 1);
        assert_eq!(c.attachments[0].filename, "o.csv");
        assert!(c.literal);
    }

    #[test]
    fn a_text_only_message_becomes_escaped_html() {
        let raw = "From: a@shop.test\r\nSubject: s\r\n\r\n1 < 2 & <b>\r\n";
        let c = command("p", "a@shop.test", &["b@example.com".into()], raw.as_bytes()).unwrap();
        assert!(c.html.unwrap().contains("1 &lt; 2 &amp; &lt;b&gt;"));
    }

    #[test]
    fn attachments_past_the_send_cap_are_refused_like_on_v1_send() {
        let big = base64::engine::general_purpose::STANDARD.encode(vec![b'a'; 6 * 1024 * 1024]);
        let part = |name: &str| {
            format!(
                "--M\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"{name}\"\r\n\
                 Content-Transfer-Encoding: base64\r\n\r\n{big}\r\n"
            )
        };
        let head = "From: a@shop.test\r\nSubject: s\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"M\"\r\n\r\n\
            --M\r\nContent-Type: text/plain\r\n\r\nhi\r\n";
        let one = format!("{head}{}--M--\r\n", part("a.bin"));
        assert!(command("p", "a@shop.test", &["b@example.com".into()], one.as_bytes()).is_ok(), "6 MiB passes");
        let two = format!("{head}{}{}--M--\r\n", part("a.bin"), part("b.bin"));
        let e =
            command("p", "a@shop.test", &["b@example.com".into()], two.as_bytes()).err().expect("12 MiB is refused");
        assert!(format!("{e:?}").contains("too_big"), "{e:?}");
    }
}
