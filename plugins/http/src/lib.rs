//! The `http` transport: hands each message to an HTTP endpoint as signed JSON, and takes signed
//! delivery, bounce and complaint notifications back.
//!
//! # Configuration
//!
//! - config `url` (required): where messages are POSTed.
//! - config `timeout_ms` (optional, default 15000): the request timeout (the host caps it).
//! - secret `signing_key`: the HMAC key. Requests are signed when it is set; notifications are refused
//!   without it.
//!
//! # Sending
//!
//! `POST <url>` with `Content-Type: application/json` and the body
//!
//! ```json
//! {"messageId": "…", "envelope": {"mailFrom": "…", "rcptTo": ["…"]},
//!  "from": {"email": "…", "name": "…"}, "replyTo": null, "to": [{"email": "…", "name": null}], "cc": [],
//!  "subject": "…", "html": "…", "text": "…", "headers": [{"name": "…", "value": "…"}],
//!  "attachments": [{"filename": "…", "contentType": "…", "contentId": null, "content": "<base64>"}],
//!  "tags": {"projectId": "…"}, "raw": "<base64 of the RFC 5322 message>"}
//! ```
//!
//! with headers `X-Herald-Timestamp: <unix seconds>`, `X-Herald-Signature: v1=<hex HMAC-SHA256(key,
//! timestamp + "." + body)>` and `X-Herald-Message-Id` (an idempotency key, stable across retries).
//!
//! A 2xx answer accepts the message (the provider id is the `id` of a JSON answer, if any); 429 asks
//! to retry after `Retry-After` seconds (1 s without one); 401, 403, 404, 408, 5xx, timeouts and
//! connection failures are temporary, and so are configuration problems (no `url`, an endpoint the host
//! refuses): they are not the recipient's fault, and a bounce unsubscribes the contact. Any other 4xx
//! rejects the message for good: permanent (the email bounces).
//!
//! # Notifications
//!
//! A JSON object or array of objects `{"type": "delivery" | "bounce" | "complaint", "messageId"?,
//! "providerMessageId"?, "permanent"?, "reason"?}` (at least one of the ids; `permanent` defaults to
//! true for bounces), signed like the requests (header names case-insensitive). A bad signature or
//! a timestamp more than 5 minutes away is refused. Refusing a replay is the host's job: a plugin
//! keeps no state between calls.
#![warn(missing_docs)]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use herald_sdk::http::{self, HttpError, Request, Response};
use herald_sdk::serde_json::{Map, Value as Json, json};
use herald_sdk::{
    Accepted, Address, InboundRequest, Metadata, Notification, NotificationKind, Outgoing, PluginKind, SendError,
    Transport, clock, config, log,
};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The `http` transport plugin.
pub struct HttpTransport;

const DEFAULT_TIMEOUT_MS: u32 = 15_000;
const DEFAULT_RETRY_AFTER_MS: u64 = 1000;
/// Notifications whose timestamp is further than this from now are refused.
const WINDOW_SECS: i64 = 300;

impl Transport for HttpTransport {
    fn metadata() -> Metadata {
        Metadata::new("http", env!("CARGO_PKG_VERSION"), PluginKind::Transport)
            .description("http: POSTs each message as HMAC-signed JSON to an endpoint; takes signed notifications")
            .provides(["http"])
    }

    fn send(message: &Outgoing) -> Result<Accepted, SendError> {
        let url = config::get("url")
            .filter(|u| !u.trim().is_empty())
            .ok_or_else(|| SendError::Temporary("the http transport has no `url` configured".into()))?;
        let timeout_ms = config::get("timeout_ms").and_then(|t| t.trim().parse().ok()).unwrap_or(DEFAULT_TIMEOUT_MS);
        let body = payload(message).to_string();
        let mut request = Request::post(url.trim())
            .header("Content-Type", "application/json")
            .header("X-Herald-Message-Id", message.message.message_id.clone())
            .timeout_ms(timeout_ms);
        if let Some(key) = config::secret("signing_key").filter(|k| !k.is_empty()) {
            let timestamp = clock::now_ms().div_euclid(1000);
            request = request
                .header("X-Herald-Timestamp", timestamp.to_string())
                .header("X-Herald-Signature", sign(key.as_bytes(), timestamp, body.as_bytes()));
        }
        let request = request.body(body);
        match http::fetch(&request) {
            Ok(response) => classify(&response),
            Err(HttpError::Denied(reason)) => {
                // a configuration problem, not the recipient's: retried, then FAILED (never a bounce)
                Err(SendError::Temporary(format!("the host refused the transport's endpoint: {reason}")))
            }
            Err(e) => Err(SendError::Temporary(e.to_string())),
        }
    }

    fn parse_notifications(request: &InboundRequest) -> Result<Vec<Notification>, String> {
        let key = config::secret("signing_key")
            .filter(|k| !k.is_empty())
            .ok_or("the http transport has no signing_key secret, so notifications cannot be authenticated")?;
        let timestamp = request.header("x-herald-timestamp").ok_or("missing X-Herald-Timestamp header")?;
        let signature = request.header("x-herald-signature").ok_or("missing X-Herald-Signature header")?;
        let timestamp: i64 = timestamp.trim().parse().map_err(|_| "X-Herald-Timestamp must be unix seconds")?;
        let expected = sign(key.as_bytes(), timestamp, &request.body);
        if !signature.split(',').any(|s| constant_time_eq(s.trim().as_bytes(), expected.as_bytes())) {
            return Err("the notification signature does not match".into());
        }
        if (clock::now_ms().div_euclid(1000) - timestamp).abs() > WINDOW_SECS {
            return Err("the notification timestamp is more than 5 minutes away".into());
        }
        let body: Json =
            herald_sdk::serde_json::from_slice(&request.body).map_err(|e| format!("malformed JSON: {e}"))?;
        let items = match body {
            Json::Array(items) => items,
            object @ Json::Object(_) => vec![object],
            _ => return Err("the body must be a notification object or an array of them".into()),
        };
        let notifications = items.iter().map(parse_one).collect::<Result<Vec<_>, _>>()?;
        log::debug("notifications accepted", &[("count", &notifications.len().to_string())]);
        Ok(notifications)
    }
}

/// `v1=<hex HMAC-SHA256(key, timestamp + "." + body)>`.
fn sign(key: &[u8], timestamp: i64, body: &[u8]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else { unreachable!("HMAC takes keys of any length") };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1={}", hex::encode(mac.finalize().into_bytes()))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn address(a: &Address) -> Json {
    json!({"email": a.email, "name": a.name})
}

/// The JSON body of a send.
fn payload(o: &Outgoing) -> Json {
    let m = &o.message;
    json!({
        "messageId": m.message_id,
        "envelope": {"mailFrom": o.envelope.mail_from, "rcptTo": o.envelope.rcpt_to},
        "from": address(&m.from),
        "replyTo": m.reply_to.as_ref().map(address),
        "to": m.to.iter().map(address).collect::<Vec<_>>(),
        "cc": m.cc.iter().map(address).collect::<Vec<_>>(),
        "subject": m.subject,
        "html": m.html,
        "text": m.text,
        "headers": m.headers.iter().map(|(n, v)| json!({"name": n, "value": v})).collect::<Vec<_>>(),
        "attachments": m.attachments.iter().map(|a| json!({
            "filename": a.filename,
            "contentType": a.content_type,
            "contentId": a.content_id,
            "content": BASE64.encode(&a.content),
        })).collect::<Vec<_>>(),
        "tags": m.tags.iter().map(|(k, v)| (k.clone(), Json::String(v.clone()))).collect::<Map<_, _>>(),
        "raw": BASE64.encode(&o.raw),
    })
}

/// Maps the endpoint's answer to the send's result.
fn classify(response: &Response) -> Result<Accepted, SendError> {
    let status = response.status;
    if response.is_success() {
        let id = response.json().ok().and_then(|j| match j.get("id") {
            Some(Json::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(Json::Number(n)) => Some(n.to_string()),
            _ => None,
        });
        return Ok(Accepted { provider_message_id: id });
    }
    let snippet: String = response.text().chars().take(200).collect();
    match status {
        429 => {
            let ms = response
                .header("retry-after")
                .and_then(|s| s.trim().parse::<u64>().ok())
                .map_or(DEFAULT_RETRY_AFTER_MS, |secs| secs.saturating_mul(1000));
            Err(SendError::RateLimited(ms))
        }
        // timeouts, server errors and the endpoint's own configuration (auth, path) are not the recipient's
        // fault: retried, then FAILED; other 4xx reject this message for good (a bounce)
        401 | 403 | 404 | 408 | 500..=599 => {
            Err(SendError::Temporary(format!("the endpoint answered {status}: {snippet}")))
        }
        _ => Err(SendError::Permanent(format!("the endpoint answered {status}: {snippet}"))),
    }
}

fn parse_one(item: &Json) -> Result<Notification, String> {
    let obj = item.as_object().ok_or("each notification must be a JSON object")?;
    let text = |key: &str| -> Result<Option<String>, String> {
        match obj.get(key) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Json::String(s)) => Ok(Some(s.trim().to_owned())),
            Some(_) => Err(format!("{key} must be a string")),
        }
    };
    let kind = match obj.get("type").and_then(Json::as_str) {
        Some("delivery") => NotificationKind::Delivery,
        Some("bounce") => NotificationKind::Bounce,
        Some("complaint") => NotificationKind::Complaint,
        _ => return Err("type must be delivery, bounce or complaint".into()),
    };
    let message_id = text("messageId")?;
    let provider_message_id = text("providerMessageId")?;
    if message_id.is_none() && provider_message_id.is_none() {
        return Err("a notification needs messageId or providerMessageId".into());
    }
    let permanent = match obj.get("permanent") {
        None | Some(Json::Null) => kind == NotificationKind::Bounce,
        Some(Json::Bool(b)) => *b,
        Some(_) => return Err("permanent must be a boolean".into()),
    };
    Ok(Notification { kind, message_id, provider_message_id, permanent, reason: text("reason")? })
}

herald_sdk::export_transport!(HttpTransport);

#[cfg(test)]
mod tests {
    use super::*;
    use herald_sdk::mock::MockHost;
    use herald_sdk::serde_json;

    const NOW_MS: i64 = 1_700_000_000_123;
    const KEY: &str = "k3y";

    fn host() -> MockHost {
        MockHost::new().config("url", "https://relay.example.com/in").secret("signing_key", KEY).now_ms(NOW_MS)
    }

    fn message() -> Outgoing {
        let mut o = Outgoing::simple("news@example.com", "ada@example.org", "Hello", "Hi Ada");
        o.message.tags = vec![("projectId".into(), "p1".into())];
        o.message.attachments = vec![herald_sdk::Attachment {
            filename: "a.txt".into(),
            content_type: "text/plain".into(),
            content: b"abc".to_vec(),
            content_id: None,
        }];
        o
    }

    #[test]
    fn compliance() {
        herald_sdk::compliance::check_transport::<HttpTransport>();
        herald_sdk::compliance::check_manifest(include_str!("../manifest.toml"), &HttpTransport::metadata());
    }

    #[test]
    fn signature_matches_the_hosts_scheme() {
        // HMAC-SHA256("k3y", "1700000000.{}"), computed independently.
        assert_eq!(
            sign(KEY.as_bytes(), 1_700_000_000, b"{}"),
            format!(
                "v1={}",
                hex::encode({
                    let mut m = Hmac::<Sha256>::new_from_slice(b"k3y").expect("key");
                    m.update(b"1700000000.{}");
                    m.finalize().into_bytes()
                })
            )
        );
        // A published HMAC-SHA256 vector (RFC 4231 test case 2): key "Jefe".
        let Ok(mut m) = Hmac::<Sha256>::new_from_slice(b"Jefe") else { unreachable!() };
        m.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(m.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn posts_signed_json() {
        let host = host().respond(Response::new(202).with_json(&json!({"id": "prov-1"}))).install();
        let accepted = HttpTransport::send(&message()).expect("accepted");
        assert_eq!(accepted.provider_message_id.as_deref(), Some("prov-1"));
        let req = &host.requests()[0];
        assert_eq!((req.method.as_str(), req.url.as_str()), ("POST", "https://relay.example.com/in"));
        assert_eq!(req.header_value("x-herald-timestamp"), Some("1700000000"));
        assert_eq!(req.header_value("x-herald-message-id"), Some("test-1@herald.invalid"));
        let body = req.body.clone().unwrap_or_default();
        assert_eq!(req.header_value("x-herald-signature"), Some(sign(KEY.as_bytes(), 1_700_000_000, &body).as_str()));
        let json: Json = serde_json::from_slice(&body).expect("json");
        assert_eq!(json["messageId"], "test-1@herald.invalid");
        assert_eq!(json["envelope"]["rcptTo"], json!(["ada@example.org"]));
        assert_eq!(json["to"][0]["email"], "ada@example.org");
        assert_eq!(json["tags"], json!({"projectId": "p1"}));
        assert_eq!(json["attachments"][0]["content"], "YWJj");
        let raw = BASE64.decode(json["raw"].as_str().unwrap_or_default()).expect("base64");
        assert_eq!(raw, message().raw);
    }

    #[test]
    fn unsigned_without_a_key_and_no_url_is_temporary() {
        let host = MockHost::new().config("url", "https://relay.example.com/in").respond(Response::new(200)).install();
        assert_eq!(HttpTransport::send(&message()), Ok(Accepted { provider_message_id: None }));
        assert_eq!(host.requests()[0].header_value("x-herald-signature"), None);
        drop(host);
        // a configuration problem: retried, never a bounce
        let host = MockHost::new().config("url", "  ").install();
        assert!(matches!(HttpTransport::send(&message()), Err(SendError::Temporary(m)) if m.contains("url")));
        assert!(host.requests().is_empty(), "nothing is sent without a url");
        drop(host);
        let _host = MockHost::new().install();
        assert!(matches!(HttpTransport::send(&message()), Err(SendError::Temporary(m)) if m.contains("url")));
    }

    #[test]
    fn maps_answers_to_send_errors() {
        let _host = host()
            .respond(Response::new(429).with_header("Retry-After", "7"))
            .respond(Response::new(429).with_header("Retry-After", "Wed, 21 Oct 2015 07:28:00 GMT"))
            .respond(Response::new(503).with_body("down"))
            .respond(Response::new(408))
            .respond(Response::new(422).with_body("bad recipient"))
            .respond(Response::new(400).with_body("malformed address"))
            .respond(Response::new(410))
            .respond(Response::new(401))
            .respond(Response::new(403))
            .respond(Response::new(404))
            .respond(Response::new(500))
            .respond_error(HttpError::Timeout)
            .respond_error(HttpError::Connect("refused".into()))
            .respond_error(HttpError::Denied("10.0.0.1 is private".into()))
            .install();
        let send = || HttpTransport::send(&message());
        assert_eq!(send(), Err(SendError::RateLimited(7000)));
        assert_eq!(send(), Err(SendError::RateLimited(DEFAULT_RETRY_AFTER_MS)));
        assert!(matches!(send(), Err(SendError::Temporary(m)) if m.contains("503") && m.contains("down")));
        assert!(matches!(send(), Err(SendError::Temporary(m)) if m.contains("408")));
        // message-level rejections bounce
        assert!(matches!(send(), Err(SendError::Permanent(m)) if m.contains("422") && m.contains("bad recipient")));
        assert!(matches!(send(), Err(SendError::Permanent(m)) if m.contains("400")));
        assert!(matches!(send(), Err(SendError::Permanent(m)) if m.contains("410")));
        // the endpoint's own configuration (auth, path) is not the recipient's fault
        for status in ["401", "403", "404", "500"] {
            assert!(matches!(send(), Err(SendError::Temporary(m)) if m.contains(status)), "{status}");
        }
        assert!(matches!(send(), Err(SendError::Temporary(_))));
        assert!(matches!(send(), Err(SendError::Temporary(_))));
        assert!(matches!(send(), Err(SendError::Temporary(m)) if m.contains("private")));
    }

    fn signed(body: &str, ts: i64) -> InboundRequest {
        InboundRequest::new(body)
            .with_header("x-herald-timestamp", ts.to_string())
            .with_header("X-HERALD-SIGNATURE", sign(KEY.as_bytes(), ts, body.as_bytes()))
    }

    #[test]
    fn parses_signed_notifications() {
        let _host = host().install();
        let now = NOW_MS / 1000;
        let one = r#"{"type":"bounce","messageId":"m1@x","reason":"mailbox full","permanent":false}"#;
        let n = HttpTransport::parse_notifications(&signed(one, now - 10)).expect("accepted");
        assert_eq!(
            n,
            vec![Notification {
                kind: NotificationKind::Bounce,
                message_id: Some("m1@x".into()),
                provider_message_id: None,
                permanent: false,
                reason: Some("mailbox full".into()),
            }]
        );
        let many = r#"[{"type":"delivery","providerMessageId":"p1"},{"type":"complaint","messageId":"m2"},
                      {"type":"bounce","messageId":"m3"}]"#;
        let n = HttpTransport::parse_notifications(&signed(many, now)).expect("accepted");
        assert_eq!(n.len(), 3);
        assert_eq!(n[0].kind, NotificationKind::Delivery);
        assert!(!n[1].permanent);
        assert!(n[2].permanent, "a bounce is permanent unless told otherwise");
    }

    #[test]
    fn refuses_bad_notifications() {
        let _host = host().install();
        let now = NOW_MS / 1000;
        let body = r#"{"type":"delivery","messageId":"m1"}"#;
        let refuse = |req: InboundRequest| HttpTransport::parse_notifications(&req).expect_err("refused");
        assert!(refuse(InboundRequest::new(body)).contains("X-Herald-Timestamp"));
        assert!(refuse(signed(body, now - WINDOW_SECS - 1)).contains("5 minutes"));
        assert!(refuse(signed(body, now + WINDOW_SECS + 1)).contains("5 minutes"));
        let mut tampered = signed(body, now);
        tampered.body = br#"{"type":"bounce","messageId":"m1"}"#.to_vec();
        assert!(refuse(tampered).contains("signature"));
        assert!(refuse(signed(r#"{"type":"opened","messageId":"m"}"#, now)).contains("type"));
        assert!(refuse(signed(r#"{"type":"delivery"}"#, now)).contains("messageId"));
        assert!(refuse(signed("nope", now)).contains("JSON"));
        assert!(refuse(signed("42", now)).contains("array"));
        drop(_host);
        let _host = MockHost::new().now_ms(NOW_MS).install();
        assert!(refuse(signed(body, now)).contains("signing_key"));
    }
}
