//! Bounces that are not a readable RFC 3464 report (docs/bounces.md): a provider's or an MTA's own
//! failure notice in plain text, a report whose MIME structure is broken, or a report forwarded inside
//! another failure notice. A message is taken for one when it comes from a mail system (the null
//! sender, a mailer daemon or postmaster, or an `X-Failed-Recipients` header) and its subject or its
//! text says delivery failed; its status is the first SMTP status its text gives, else what its words
//! say (a delay, or a failure for good).
//!
//! Everything read here is bounded: the text is cut to [`MAX_TEXT_BYTES`], the lists of words are fixed.

use mail_parser::{Message, PartType};

use super::{Bounce, Kind, MAX_TEXT_BYTES, cut, delivery_status, is_report, original, status_code};

/// Local parts and display names of the senders of failure notices.
const DAEMONS: &[&str] = &[
    "mailer-daemon",
    "mailerdaemon",
    "mail-daemon",
    "maildaemon",
    "postmaster",
    "post_master",
    "mail.delivery.system",
    "mail delivery",
    "mail deliver system",
    "mailer daemon",
    "ndr administrator",
];

/// Subjects of failure notices (lowercased, anywhere in the subject).
const SUBJECTS: &[&str] = &[
    "undeliverable",
    "undelivered",
    "delivery status",
    "mail delivery failed",
    "delivery failure",
    "failure delivery",
    "returned mail",
    "failure notice",
    "delivery has failed",
    "could not be delivered",
    "mail failure",
    "non-delivery",
    "nondelivery",
    "not delivered",
    "mail system error",
    "delivery notification",
    "delivery problem",
    "error sending",
    "returned to sender",
    "delivery failed",
    "delayed",
    "warning: could not send",
];

/// Words of a failure notice's text that say a message was not delivered (lowercased).
const FAILED: &[&str] = &[
    "could not be delivered",
    "couldn't be delivered",
    "could not be sent",
    "could not deliver",
    "was not delivered",
    "not be delivered",
    "wasn't able to deliver",
    "unable to deliver",
    "failed to deliver",
    "delivery has failed",
    "delivery failed",
    "delivery to the following recipient",
    "did not reach the following recipient",
    "permanent error",
    "permanent fatal error",
    "permanent delivery error",
    "failed permanently",
    "had delivery problems",
    "had delivery errors",
    "had fatal errors",
    "following address failed",
    "following address(es) failed",
    "returned permanent errors",
    "trouble delivering",
    "non-deliverable",
    "undeliverable",
    "failure reasons",
    "invalid user address",
    "rejected by a remote mail server",
    "unknown user",
    "user unknown",
    "no such user",
    "not listed in domino directory",
    "recipient name is not recognized",
    "mailbox is full",
    "mailfolder is full",
    "exceeds allowed size",
    "was aborted after",
];

/// Words that say delivery is only delayed or will be tried again (lowercased).
const DELAYED: &[&str] = &[
    "retry timeout exceeded",
    "warning message only",
    "will be retried",
    "will retry",
    "has not yet been delivered",
    "delivery has been delayed",
    "delivery is delayed",
    "delivery delayed",
];

/// Words after which a basic reply code (`550`) stands for the server's answer.
const BEFORE_CODE: &[&str] =
    &["said", "with", "responsecode", "error_code", "code", "error", "status", "reply", "response"];

/// A failure notice: from a mail system, with a subject or text that says delivery failed.
pub(super) fn looks_like_bounce(message: &Message<'_>, envelope_from: &str) -> bool {
    if message.header_raw("X-Failed-Recipients").is_some() {
        return true;
    }
    let from = message.from().and_then(|a| a.first());
    let address = from.and_then(|a| a.address()).unwrap_or("").to_ascii_lowercase();
    let local = address.split('@').next().unwrap_or("");
    let name = from.and_then(|a| a.name()).unwrap_or("").to_ascii_lowercase();
    let daemon = envelope_from.is_empty()
        || envelope_from.to_ascii_lowercase().starts_with("mailer-daemon")
        || DAEMONS.iter().any(|d| local == *d || name.contains(d));
    if !daemon || super::auto_reply_subject(message) {
        return false;
    }
    let subject = message.subject().unwrap_or("").to_ascii_lowercase();
    SUBJECTS.iter().any(|s| subject.contains(s)) || {
        let text = text(message).to_ascii_lowercase();
        FAILED.iter().any(|s| text.contains(s))
    }
}

/// The bounce a failure notice reports: a delivery report forwarded inside it, else the status its text
/// gives or implies. None when nothing in it says what failed.
pub(super) fn notice(message: &Message<'_>) -> Option<Bounce> {
    for part in message.parts.iter().take(100) {
        if let PartType::Message(inner) = &part.body
            && is_report(inner, "delivery-status")
            && let Some(Kind::Bounce(b)) = delivery_status(inner)
        {
            return Some(b);
        }
    }
    let text = text(message);
    let (message_id, _) = original(message);
    let lower = text.to_ascii_lowercase();
    let (status, reason) = if let Some(code) = enhanced(&text).or_else(|| basic(&text)) {
        let line = text.lines().find(|l| l.contains(code.as_str())).map(|l| cut(l.trim(), 500));
        (code, line)
    } else if DELAYED.iter().any(|s| lower.contains(s)) {
        ("4.0.0".to_string(), phrase_line(&text, DELAYED))
    } else if FAILED.iter().any(|s| lower.contains(s)) {
        ("5.0.0".to_string(), phrase_line(&text, FAILED))
    } else if let Some(failed) = message.header_raw("X-Failed-Recipients") {
        // Set by Exim and Gmail on a notice of a failure for good.
        ("5.0.0".to_string(), Some(cut(&format!("failed recipients: {}", failed.trim()), 500)))
    } else {
        return None;
    };
    Some(Bounce { permanent: status.starts_with('5'), status, reason, message_id })
}

/// The notice's own words: its first text part, or its raw body when the MIME structure gave none (a
/// broken boundary), cut where the returned message starts (its `Received:` or `Return-Path:` lines).
fn text(message: &Message<'_>) -> String {
    let body = message.body_text(0).map(|t| cut(&t, MAX_TEXT_BYTES)).filter(|t| !t.trim().is_empty());
    let body = body.unwrap_or_else(|| {
        let raw = message.raw_message();
        let start = (message.root_part().offset_body as usize).min(raw.len());
        let end = raw.len().min(start + MAX_TEXT_BYTES);
        String::from_utf8_lossy(&raw[start..end]).into_owned()
    });
    let mut out = String::with_capacity(body.len());
    for line in body.lines() {
        let l = line.trim_start().to_ascii_lowercase();
        if l.starts_with("received:") || l.starts_with("return-path:") {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The first enhanced status code other than a success (`5.1.1`, also written `#5.1.1` or `(5.1.1)`).
fn enhanced(text: &str) -> Option<String> {
    text.split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '/' | '='))
        .map(|w| w.trim_matches(|c: char| !c.is_ascii_digit()))
        .find_map(|w| status_code(w).filter(|s| !s.starts_with('2')))
}

/// The first basic reply code of 4xx or 5xx that starts a line or follows a word like "said" or "error".
fn basic(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let words: Vec<&str> = line
            .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_')))
            .filter(|w| !w.is_empty())
            .take(200)
            .collect();
        words.iter().enumerate().find_map(|(i, w)| {
            let b = w.as_bytes();
            let code = b.len() == 3 && matches!(b[0], b'4' | b'5') && b.iter().all(u8::is_ascii_digit);
            let first = i == 0 && line.trim_start().starts_with(*w);
            let after = i > 0 && BEFORE_CODE.contains(&words[i - 1].to_ascii_lowercase().as_str());
            (code && (first || after)).then(|| (*w).to_string())
        })
    })
}

/// The first line holding one of `phrases`, as the reason.
fn phrase_line(text: &str, phrases: &[&str]) -> Option<String> {
    text.lines()
        .find(|l| {
            let l = l.to_ascii_lowercase();
            phrases.iter().any(|p| l.contains(p))
        })
        .map(|l| cut(l.trim(), 500))
}
