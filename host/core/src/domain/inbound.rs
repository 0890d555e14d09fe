//! What a message received over SMTP is (docs/behaviour.md#receiving-mail, docs/bounces.md): a delivery
//! status notification about an email Herald sent (RFC 3464, or an MTA's or provider's own failure
//! notice, in `bounces`), a feedback-loop complaint (RFC 5965 ARF, or Microsoft's JMRP format), or other
//! mail (a reply). Parsing is
//! mail-parser's; the machine-readable parts of reports (`message/delivery-status`,
//! `message/feedback-report`) are header blocks, read with its header parser too.
//!
//! Must not import: salvo, surrealdb, store, services.

mod bounces;

use mail_parser::{Message, MessageParser, MimeHeaders, PartType};
use serde::Serialize;

/// The longest text part kept in an `email.received` event, in bytes.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// The longest HTML part kept in an `email.received` event, in bytes (longer ones are cut and marked).
pub const MAX_HTML_BYTES: usize = 256 * 1024;
/// Attachments described in an `email.received` event (their metadata only, never their content).
pub const MAX_ATTACHMENTS: usize = 20;
/// The longest attachment name kept, in bytes.
pub const MAX_ATTACHMENT_NAME: usize = 100;
/// The most an `email.received` event's data takes as JSON, [`Received`] within 60 KiB and room for what
/// the service adds to it (the sender's authentication results, the id of the email it answers), so that
/// the stored data stays within the 64 KiB of any event's: the text and the HTML share what the rest
/// leaves, the text first.
pub const MAX_EVENT_BYTES: usize = 60 * 1024;
/// Recipients listed in an `email.received` event.
pub const MAX_LISTED: usize = 50;

/// What a received message is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A report that delivery failed for good (5.x.x) or is delayed (4.x.x).
    Bounce(Bounce),
    /// A feedback-loop report: a recipient marked the message as spam.
    Complaint(Complaint),
    /// Any other message.
    Mail(Received),
    /// A report that says nothing Herald acts on (a success DSN, an unknown report type), or a message
    /// that does not parse.
    Ignored(&'static str),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Bounce {
    pub permanent: bool,
    /// The enhanced status code (`5.1.1`), or the basic reply code when that is all there was.
    pub status: String,
    /// The diagnostic the reporting server gave, cut to 500 bytes.
    pub reason: Option<String>,
    /// The Message-ID of the returned message, when the report includes it.
    pub message_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Complaint {
    /// `abuse`, `fraud`, `virus`, `other`, ...
    pub feedback_type: String,
    /// The Message-ID of the reported message.
    pub message_id: Option<String>,
    /// The envelope sender (Return-Path) of the reported message: Herald's return-path address names the
    /// email when the Message-ID was removed.
    pub return_path: Option<String>,
}

/// Another message, as an `email.received` event records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Received {
    /// The sender's address (From; the envelope sender when there is no From), lowercased.
    pub from: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_name: Option<String>,
    pub to: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cc: Vec<String>,
    pub subject: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<String>,
    pub text: String,
    /// The text part was cut ([`MAX_TEXT_BYTES`], or to fit [`MAX_EVENT_BYTES`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub text_truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// The HTML part was cut ([`MAX_HTML_BYTES`], or to fit [`MAX_EVENT_BYTES`]).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub html_truncated: bool,
    pub attachments: Vec<Attachment>,
    /// An automatic reply (Auto-Submitted, an out-of-office answer): no person wrote it.
    pub auto_reply: bool,
    /// The message's size in bytes.
    pub size: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    pub content_type: String,
    pub size: usize,
}

/// Reads a received message. `envelope_from` is its MAIL FROM (empty for the null sender bounces use).
pub fn classify(raw: &[u8], envelope_from: &str) -> Kind {
    let Some(message) = MessageParser::default().parse(raw) else { return Kind::Ignored("unreadable") };
    if is_report(&message, "delivery-status") {
        // A report without a readable recipient block (a broken MIME structure, a notice sent as a report
        // without its machine-readable part) is read as a failure notice below.
        if let Some(kind) = delivery_status(&message) {
            return kind;
        }
    } else if is_report(&message, "feedback-report") {
        return feedback(&message).unwrap_or(Kind::Ignored("a feedback report without a type"));
    }
    if let Some(c) = other_complaint(&message) {
        return Kind::Complaint(c);
    }
    if bounces::looks_like_bounce(&message, envelope_from) {
        return match bounces::notice(&message) {
            Some(b) => Kind::Bounce(b),
            None => Kind::Ignored("a bounce without a status"),
        };
    }
    received(&message, envelope_from, raw.len()).map(Kind::Mail).unwrap_or(Kind::Ignored("no sender"))
}

/// A `multipart/report` whose report type contains `report_type`.
fn is_report(message: &Message<'_>, report_type: &str) -> bool {
    message.content_type().is_some_and(|ct| {
        ct.ctype().eq_ignore_ascii_case("multipart")
            && ct.subtype().is_some_and(|s| s.eq_ignore_ascii_case("report"))
            && ct.attribute("report-type").is_some_and(|t| t.to_ascii_lowercase().contains(report_type))
    })
}

/// The fields of a report's header block (`Name: value` lines; continuation lines folded).
fn fields(block: &str) -> Vec<(String, String)> {
    let Some(parsed) = MessageParser::default().parse_headers(block.as_bytes()) else { return Vec::new() };
    parsed.headers_raw().map(|(name, value)| (name.to_ascii_lowercase(), unfold(value))).collect()
}

fn unfold(v: &str) -> String {
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()).filter(|v| !v.is_empty())
}

/// The blocks of a report part: groups of fields separated by blank lines.
fn blocks(text: &str) -> Vec<Vec<(String, String)>> {
    let text = text.replace("\r\n", "\n");
    text.split("\n\n").map(str::trim).filter(|b| !b.is_empty()).take(100).map(|b| fields(&format!("{b}\n\n"))).collect()
}

/// The first part of `message` whose content type is `ctype/subtype`.
fn part_of<'a>(message: &'a Message<'a>, ctype: &str, subtypes: &[&str]) -> Option<&'a mail_parser::MessagePart<'a>> {
    message.parts.iter().find(|p| {
        p.content_type().is_some_and(|ct| {
            ct.ctype().eq_ignore_ascii_case(ctype)
                && ct.subtype().is_some_and(|s| subtypes.iter().any(|w| s.eq_ignore_ascii_case(w)))
        })
    })
}

/// The Message-ID and Return-Path of the message a report returns (its `message/rfc822` part, or its
/// `text/rfc822-headers` part).
fn original(message: &Message<'_>) -> (Option<String>, Option<String>) {
    for part in &message.parts {
        if let PartType::Message(m) = &part.body {
            return (m.message_id().map(angle), m.return_address().map(str::to_string));
        }
    }
    if let Some(part) = part_of(message, "text", &["rfc822-headers"])
        && let Some(m) = MessageParser::default().parse_headers(part.contents())
    {
        return (m.message_id().map(angle), m.return_address().map(str::to_string));
    }
    (None, None)
}

fn angle(id: &str) -> String {
    format!("<{}>", id.trim().trim_matches(['<', '>']))
}

fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// RFC 3464: the first recipient whose action is `failed` or `delayed` (or, without an action, whose
/// status is a failure). Ignored when the recipients were delivered, relayed or expanded; None when no
/// recipient block can be read.
fn delivery_status(message: &Message<'_>) -> Option<Kind> {
    let part = part_of(message, "message", &["delivery-status", "global-delivery-status"])?;
    let text = String::from_utf8_lossy(part.contents());
    let (message_id, _) = original(message);
    let mut other = false;
    for block in blocks(&text) {
        let action = field(&block, "action").unwrap_or("").to_ascii_lowercase();
        let status = field(&block, "status").and_then(status_code);
        let (permanent, status) = match (action.as_str(), status) {
            ("failed", Some(s)) => (!s.starts_with('4'), s),
            ("failed", None) => (true, "5.0.0".to_string()),
            ("delayed", Some(s)) => (false, s),
            ("delayed", None) => (false, "4.0.0".to_string()),
            ("", Some(s)) if s.starts_with('5') || s.starts_with('4') => (s.starts_with('5'), s),
            ("", _) => continue,
            _ => {
                other = true;
                continue;
            }
        };
        let reason = field(&block, "diagnostic-code").map(|d| cut(d.split_once(';').map_or(d, |(_, r)| r.trim()), 500));
        return Some(Kind::Bounce(Bounce { permanent, status, reason, message_id }));
    }
    other.then_some(Kind::Ignored("a delivery report without a failure"))
}

/// An enhanced status code (`class.subject.detail`) at the start of `v`.
fn status_code(v: &str) -> Option<String> {
    let code = v.split_whitespace().next()?;
    let mut parts = code.split('.');
    let class = parts.next()?;
    let (subject, detail) = (parts.next()?, parts.next()?);
    let digits = |p: &str, max: usize| !p.is_empty() && p.len() <= max && p.bytes().all(|b| b.is_ascii_digit());
    (matches!(class, "2" | "4" | "5") && digits(subject, 3) && digits(detail, 3) && parts.next().is_none())
        .then(|| code.to_string())
}

/// RFC 5965: the feedback type and the reported message.
fn feedback(message: &Message<'_>) -> Option<Kind> {
    let part = part_of(message, "message", &["feedback-report"])?;
    let report = fields(&format!("{}\n\n", String::from_utf8_lossy(part.contents()).trim()));
    let feedback_type = field(&report, "feedback-type")?.to_ascii_lowercase();
    let (message_id, return_path) = original(message);
    let return_path = return_path.or_else(|| field(&report, "original-mail-from").map(str::to_string));
    Some(Kind::Complaint(Complaint { feedback_type, message_id, return_path }))
}

/// A complaint in another format than RFC 5965's (docs/bounces.md): Microsoft's JMRP report (a subject
/// "complaint about message from <address>" and the reported message attached), or a mail client's
/// automatic unsubscribe request (subject "unsubscribe", Auto-Submitted), an `opt-out`.
fn other_complaint(message: &Message<'_>) -> Option<Complaint> {
    let subject = message.subject().unwrap_or("").trim().to_ascii_lowercase();
    if subject.starts_with("complaint about message from")
        && message.parts.iter().any(|p| matches!(p.body, PartType::Message(_)))
    {
        let (message_id, return_path) = original(message);
        return Some(Complaint { feedback_type: "abuse".into(), message_id, return_path });
    }
    if subject == "unsubscribe" && auto_submitted(message) {
        let (message_id, return_path) = original(message);
        return Some(Complaint { feedback_type: "opt-out".into(), message_id, return_path });
    }
    None
}

fn auto_submitted(message: &Message<'_>) -> bool {
    message.header_raw("Auto-Submitted").is_some_and(|v| {
        let v = v.trim().to_ascii_lowercase();
        !v.is_empty() && v != "no"
    })
}

/// A subject that starts like an automatic reply or an out-of-office answer.
fn auto_reply_subject(message: &Message<'_>) -> bool {
    let subject = message.subject().unwrap_or("").trim().to_ascii_lowercase();
    [
        "auto:",
        "automatic reply",
        "autoreply",
        "auto-reply",
        "auto reply",
        "autorespon",
        "auto response",
        "out of office",
        "out of the office",
    ]
    .iter()
    .any(|s| subject.starts_with(s))
}

/// Auto-Submitted other than `no`, the common auto-responder headers, or an out-of-office subject.
fn auto_reply(message: &Message<'_>) -> bool {
    let raw = |name: &str| message.header_raw(name).map(|v| v.trim().to_ascii_lowercase());
    if auto_submitted(message) {
        return true;
    }
    if raw("X-Autoreply").is_some() || raw("X-Autorespond").is_some() || raw("X-Autoresponse").is_some() {
        return true;
    }
    if raw("Precedence").is_some_and(|v| v == "auto_reply") {
        return true;
    }
    auto_reply_subject(message)
}

fn addresses(a: Option<&mail_parser::Address<'_>>) -> Vec<String> {
    a.map(|a| a.iter().filter_map(|x| x.address()).map(str::to_ascii_lowercase).take(MAX_LISTED).collect())
        .unwrap_or_default()
}

fn received(message: &Message<'_>, envelope_from: &str, size: usize) -> Option<Received> {
    let from_addr = message.from().and_then(|a| a.first());
    let from = from_addr
        .and_then(|a| a.address())
        .map(str::to_string)
        .or_else(|| (!envelope_from.is_empty()).then(|| envelope_from.to_string()))?
        .to_ascii_lowercase();
    let html = message.body_html(0).filter(|_| message.html_body_count() > 0 && has_html_part(message));
    let html_truncated = html.as_ref().is_some_and(|h| h.len() > MAX_HTML_BYTES);
    let attachments = message
        .attachments()
        .take(MAX_ATTACHMENTS)
        .map(|p| Attachment {
            filename: p.attachment_name().map(|n| cut(n, MAX_ATTACHMENT_NAME)),
            content_type: p
                .content_type()
                .map(|ct| format!("{}/{}", ct.ctype(), ct.subtype().unwrap_or("octet-stream")).to_ascii_lowercase())
                .unwrap_or_else(|| "application/octet-stream".into()),
            size: p.contents().len(),
        })
        .collect();
    let text = message.body_text(0).unwrap_or_default();
    let received = Received {
        from,
        from_name: from_addr.and_then(|a| a.name()).map(|n| cut(n, 255)),
        to: addresses(message.to()),
        cc: addresses(message.cc()),
        subject: cut(message.subject().unwrap_or(""), 998),
        message_id: message.message_id().map(|id| angle(&cut(id, 996))),
        in_reply_to: message.in_reply_to().as_text().map(|id| angle(&cut(id, 996))),
        text_truncated: text.len() > MAX_TEXT_BYTES,
        text: cut(&text, MAX_TEXT_BYTES),
        html: html.map(|h| cut(&h, MAX_HTML_BYTES)),
        html_truncated,
        attachments,
        auto_reply: auto_reply(message),
        size,
    };
    Some(fit(received, MAX_EVENT_BYTES))
}

/// `r` within `max` bytes of JSON: the text and then the HTML cut to what the rest leaves (recipients
/// dropped from the end first, should the rest alone not fit).
fn fit(mut r: Received, max: usize) -> Received {
    let text = std::mem::take(&mut r.text);
    let html = r.html.take();
    let (text_cut, html_cut) = (r.text_truncated, r.html_truncated);
    // Measured with both flags set and an empty HTML part, as they may end up.
    r.html = html.as_ref().map(|_| String::new());
    r.text_truncated = true;
    r.html_truncated = html.is_some();
    let size = |r: &Received| serde_json::to_vec(r).map_or(usize::MAX, |v| v.len());
    while size(&r) > max && (r.cc.pop().is_some() || r.to.pop().is_some() || r.attachments.pop().is_some()) {}
    let mut room = max.saturating_sub(size(&r));
    let (kept, used) = json_prefix(&text, room);
    room -= used;
    r.text_truncated = text_cut || kept.len() < text.len();
    r.text = kept.to_string();
    if let Some(h) = html {
        let (kept, _) = json_prefix(&h, room);
        r.html_truncated = html_cut || kept.len() < h.len();
        r.html = Some(kept.to_string());
    }
    r
}

/// The longest start of `s` that takes at most `room` bytes inside a JSON string, and how many it takes.
fn json_prefix(s: &str, room: usize) -> (&str, usize) {
    let mut used = 0;
    for (i, c) in s.char_indices() {
        let n = match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        };
        if used + n > room {
            return (&s[..i], used);
        }
        used += n;
    }
    (s, used)
}

/// True when the message has a real `text/html` part (mail-parser otherwise renders the text part as
/// HTML for `body_html`).
fn has_html_part(message: &Message<'_>) -> bool {
    message.html_body.iter().any(|id| message.part(*id).is_some_and(|p| matches!(p.body, PartType::Html(_))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dsn(action: &str, status: &str) -> String {
        format!(
            "From: MAILER-DAEMON@mx.example.net\r\nTo: b+abc@rp.herald.test\r\nSubject: Delivery Status Notification\r\n\
             MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\r\n\r\n\
             --B\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n\
             --B\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.net\r\n\r\n\
             Final-Recipient: rfc822; gone@example.net\r\nAction: {action}\r\nStatus: {status}\r\n\
             Diagnostic-Code: smtp; 550 5.1.1 <gone@example.net>: user unknown\r\n\r\n\
             --B\r\nContent-Type: text/rfc822-headers\r\n\r\nMessage-ID: <id-1@herald.test>\r\nSubject: Hi\r\n\r\n--B--\r\n"
        )
    }

    #[test]
    fn an_rfc_3464_failure_is_a_permanent_bounce_with_its_status_reason_and_message_id() {
        let Kind::Bounce(b) = classify(dsn("failed", "5.1.1").as_bytes(), "") else { panic!("not a bounce") };
        assert!(b.permanent);
        assert_eq!(b.status, "5.1.1");
        assert_eq!(b.reason.as_deref(), Some("550 5.1.1 <gone@example.net>: user unknown"));
        assert_eq!(b.message_id.as_deref(), Some("<id-1@herald.test>"));
    }

    #[test]
    fn a_delay_is_not_permanent_and_a_success_is_ignored() {
        let Kind::Bounce(b) = classify(dsn("delayed", "4.4.7").as_bytes(), "") else { panic!("not a bounce") };
        assert!(!b.permanent);
        assert_eq!(b.status, "4.4.7");
        assert!(matches!(classify(dsn("delivered", "2.0.0").as_bytes(), ""), Kind::Ignored(_)));
    }

    #[test]
    fn an_arf_report_is_a_complaint_about_the_included_message() {
        let raw = "From: fbl@isp.example\r\nTo: b+tok@rp.herald.test\r\nSubject: FW: report\r\nMIME-Version: 1.0\r\n\
            Content-Type: multipart/report; report-type=feedback-report; boundary=\"F\"\r\n\r\n\
            --F\r\nContent-Type: text/plain\r\n\r\nThis is an abuse report.\r\n\
            --F\r\nContent-Type: message/feedback-report\r\n\r\nFeedback-Type: abuse\r\nUser-Agent: Fbl/1.0\r\nVersion: 1\r\n\r\n\
            --F\r\nContent-Type: message/rfc822\r\n\r\nReturn-Path: <b+tok@rp.herald.test>\r\nFrom: a@herald.test\r\n\
            Message-ID: <id-2@herald.test>\r\nSubject: Sale\r\n\r\nBuy now\r\n--F--\r\n";
        let Kind::Complaint(c) = classify(raw.as_bytes(), "fbl@isp.example") else { panic!("not a complaint") };
        assert_eq!(c.feedback_type, "abuse");
        assert_eq!(c.message_id.as_deref(), Some("<id-2@herald.test>"));
        assert_eq!(c.return_path.as_deref(), Some("b+tok@rp.herald.test"));
    }

    #[test]
    fn a_providers_own_bounce_format_is_read_where_a_status_can_be_found() {
        let raw = "From: Mail Delivery Subsystem <mailer-daemon@googlemail.com>\r\nTo: b+x@rp.herald.test\r\n\
            Subject: Delivery Status Notification (Failure)\r\n\r\nAddress not found\r\n\r\n\
            The response from the remote server was:\r\n550 5.1.1 The email account that you tried to reach does not exist.\r\n";
        let Kind::Bounce(b) = classify(raw.as_bytes(), "") else { panic!("not a bounce") };
        assert!(b.permanent);
        assert_eq!(b.status, "5.1.1");
        let plain =
            "From: postmaster@example.org\r\nSubject: Undeliverable: hello\r\n\r\n452 mailbox full, try later\r\n";
        let Kind::Bounce(b) = classify(plain.as_bytes(), "") else { panic!("not a bounce") };
        assert!(!b.permanent);
        assert_eq!(b.status, "452");
        let nothing = "From: postmaster@example.org\r\nSubject: Undeliverable: hello\r\n\r\nsomething went wrong\r\n";
        assert!(matches!(classify(nothing.as_bytes(), ""), Kind::Ignored(_)));
    }

    #[test]
    fn a_notice_in_words_only_is_read_by_its_words_and_an_away_message_from_the_null_sender_is_mail() {
        let hard = "From: MAILER-DAEMON@mx.example.net\r\nSubject: failure notice\r\n\r\n\
            I'm afraid I wasn't able to deliver your message to the following addresses.\r\n\
            <gone@example.net>: no mailbox here by that name\r\n";
        let Kind::Bounce(b) = classify(hard.as_bytes(), "") else { panic!("not a bounce") };
        assert!(b.permanent);
        assert_eq!(b.status, "5.0.0");
        let soft = "From: Mail Delivery System <Mailer-Daemon@mx.example.net>\r\n\
            Subject: Warning: message 1abc delayed 24 hours\r\n\r\n\
            This message was created automatically by mail delivery software.\r\n\
            A message that you sent has not yet been delivered to one or more of its recipients.\r\n";
        let Kind::Bounce(b) = classify(soft.as_bytes(), "") else { panic!("not a bounce") };
        assert!(!b.permanent);
        let forwarded = "From: MAILER-DAEMON@mx.example.net\r\nSubject: Returned mail: User unknown\r\n\
            MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"O\"\r\n\r\n--O\r\n\
            Content-Type: text/plain\r\n\r\nSee the report.\r\n--O\r\nContent-Type: message/rfc822\r\n\r\n";
        let Kind::Bounce(b) = classify(format!("{forwarded}{}\r\n--O--\r\n", dsn("failed", "5.2.1")).as_bytes(), "")
        else {
            panic!("not a bounce")
        };
        assert_eq!(b.status, "5.2.1");
        let away = "From: a@example.com\r\nAuto-Submitted: auto-replied\r\nSubject: AutoResponse: hi\r\n\r\n\
            I am away; your message could not be answered before Monday.\r\n";
        let Kind::Mail(m) = classify(away.as_bytes(), "") else { panic!("not mail") };
        assert!(m.auto_reply);
    }

    #[test]
    fn a_jmrp_report_is_a_complaint() {
        let raw = "From: staff@hotmail.com\r\nSubject: complaint about message from 192.0.2.1\r\nMIME-Version: 1.0\r\n\
            Content-Type: multipart/mixed; boundary=\"J\"\r\n\r\n--J\r\nContent-Type: message/rfc822\r\n\r\n\
            From: a@herald.test\r\nMessage-ID: <id-4@herald.test>\r\nSubject: Sale\r\n\r\nBuy\r\n--J--\r\n";
        let Kind::Complaint(c) = classify(raw.as_bytes(), "staff@hotmail.com") else { panic!("not a complaint") };
        assert_eq!(c.feedback_type, "abuse");
        assert_eq!(c.message_id.as_deref(), Some("<id-4@herald.test>"));
    }

    #[test]
    fn a_reply_keeps_its_parts_within_their_caps_and_lists_attachments() {
        let big = "x".repeat(MAX_HTML_BYTES + 10);
        let raw = format!(
            "From: \"Ann Lee\" <Ann@Example.com>\r\nTo: support@mail.herald.test\r\nSubject: Re: your order\r\n\
             Message-ID: <r1@example.com>\r\nIn-Reply-To: <id-3@herald.test>\r\nMIME-Version: 1.0\r\n\
             Content-Type: multipart/mixed; boundary=\"M\"\r\n\r\n--M\r\nContent-Type: multipart/alternative; boundary=\"A\"\r\n\r\n\
             --A\r\nContent-Type: text/plain\r\n\r\nThanks!\r\n--A\r\nContent-Type: text/html\r\n\r\n<p>{big}</p>\r\n--A--\r\n\
             --M\r\nContent-Type: application/pdf; name=\"a.pdf\"\r\nContent-Disposition: attachment; filename=\"a.pdf\"\r\n\
             Content-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQK\r\n--M--\r\n"
        );
        let Kind::Mail(m) = classify(raw.as_bytes(), "ann@example.com") else { panic!("not mail") };
        assert_eq!(m.from, "ann@example.com");
        assert_eq!(m.from_name.as_deref(), Some("Ann Lee"));
        assert_eq!(m.to, vec!["support@mail.herald.test"]);
        assert_eq!(m.subject, "Re: your order");
        assert_eq!(m.text.trim(), "Thanks!");
        assert!(m.html_truncated && !m.text_truncated);
        assert!(m.html.as_ref().is_some_and(|h| h.starts_with("<p>xxx") && h.len() > MAX_EVENT_BYTES - 1024));
        assert_eq!(m.in_reply_to.as_deref(), Some("<id-3@herald.test>"));
        assert_eq!(m.attachments.len(), 1);
        assert_eq!(m.attachments[0].filename.as_deref(), Some("a.pdf"));
        assert_eq!(m.attachments[0].content_type, "application/pdf");
        assert_eq!(m.attachments[0].size, 9);
        assert!(!m.auto_reply);
    }

    #[test]
    fn a_replys_event_data_stays_within_64_kb_whatever_it_carries() {
        // The most a reply could carry before: 64 KiB of text, 256 KiB of HTML, 50 attachments with long
        // names (~345 KB of event data), and text that JSON escapes six times over.
        let name = "n".repeat(300);
        let attachments: String = (0..50)
            .map(|i| {
                format!(
                    "--M\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=\"{i}{name}.pdf\"\r\n\
                     \r\nx\r\n"
                )
            })
            .collect();
        for text in ["t".repeat(70_000), "\u{1}".repeat(70_000)] {
            let raw = format!(
                "From: ann@example.com\r\nTo: support@mail.herald.test\r\nSubject: Re: all of it\r\nMIME-Version: 1.0\r\n\
                 Content-Type: multipart/mixed; boundary=\"M\"\r\n\r\n--M\r\nContent-Type: multipart/alternative; \
                 boundary=\"A\"\r\n\r\n--A\r\nContent-Type: text/plain\r\n\r\n{text}\r\n--A\r\nContent-Type: text/html\r\n\r\n\
                 <p>{}</p>\r\n--A--\r\n{attachments}--M--\r\n",
                "h".repeat(300_000)
            );
            let Kind::Mail(m) = classify(raw.as_bytes(), "ann@example.com") else { panic!("not mail") };
            let stored = serde_json::to_vec(&m).unwrap().len();
            assert!(stored <= MAX_EVENT_BYTES, "{stored} bytes of event data");
            const { assert!(MAX_EVENT_BYTES + 4096 <= 64 * 1024, "room for the authentication results") };
            assert!(m.text_truncated && m.html_truncated);
            assert!(stored > MAX_EVENT_BYTES - 64, "the text and HTML use the room left: {stored}");
            assert_eq!(m.attachments.len(), MAX_ATTACHMENTS);
            assert!(m.attachments.iter().all(|a| a.filename.as_ref().is_some_and(|n| n.len() == MAX_ATTACHMENT_NAME)));
        }
        // A short reply is kept whole.
        let raw = "From: ann@example.com\r\nTo: support@mail.herald.test\r\nSubject: Hi\r\n\r\nThanks, \"all\".\r\n";
        let Kind::Mail(m) = classify(raw.as_bytes(), "ann@example.com") else { panic!("not mail") };
        assert_eq!((m.text.trim(), m.text_truncated, m.html_truncated), ("Thanks, \"all\".", false, false));
    }

    #[test]
    fn auto_replies_are_marked() {
        for header in ["Auto-Submitted: auto-replied", "X-Autoreply: yes", "Precedence: auto_reply"] {
            let raw = format!("From: a@example.com\r\n{header}\r\nSubject: Re: hi\r\n\r\naway\r\n");
            let Kind::Mail(m) = classify(raw.as_bytes(), "a@example.com") else { panic!("not mail") };
            assert!(m.auto_reply, "{header}");
        }
        let raw = "From: a@example.com\r\nSubject: Out of Office: back Monday\r\n\r\naway\r\n";
        let Kind::Mail(m) = classify(raw.as_bytes(), "a@example.com") else { panic!("not mail") };
        assert!(m.auto_reply);
        let raw = "From: a@example.com\r\nAuto-Submitted: no\r\nSubject: Re: hi\r\n\r\nhello\r\n";
        let Kind::Mail(m) = classify(raw.as_bytes(), "a@example.com") else { panic!("not mail") };
        assert!(!m.auto_reply);
        assert_eq!(m.html, None, "a text-only message has no HTML");
    }
}
