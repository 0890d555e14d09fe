//! The `ses` transport: sends through Amazon SES v2 `SendEmail` with the raw message Herald built and
//! DKIM-signed, and turns SES bounce, complaint and delivery events (delivered by SNS) into
//! notifications.
//!
//! # Configuration
//!
//! - config `region` (manifest default `us-east-1`), `endpoint` (default
//!   `https://email.<region>.amazonaws.com`; point it at a local fake in tests), `configuration_set`
//!   (optional SES configuration set, e.g. one that publishes events to SNS).
//! - secrets `access_key_id`, `secret_access_key`, optional `session_token`: SigV4 credentials
//!   (service `ses`).
//! - secret `notification_token`: what SNS deliveries must carry, either as the `X-Herald-Token`
//!   header or as the password of HTTP basic auth (subscribe SNS to
//!   `https://herald:<token>@your-herald/…`, since SNS cannot add headers).
//!
//! # Sending
//!
//! `POST <endpoint>/v2/email/outbound-emails` with `{"Content": {"Raw": {"Data": <base64>}},
//! "Destination": {"ToAddresses": <envelope recipients>}, "EmailTags": [...], "ConfigurationSetName"?}`.
//! 200 accepts (provider id `MessageId`); 429 or a throttling error asks to retry later
//! (`Retry-After`, 1 s without one, an hour for an exhausted daily quota); 408, 5xx, timeouts and
//! connection failures are temporary. So are configuration problems, which are not the recipient's
//! fault (a bounce unsubscribes the contact): missing region or credentials, an endpoint the host
//! refuses, authentication and signature errors (401, 403, `InvalidClientTokenId`,
//! `SignatureDoesNotMatch`, `AccessDenied`, ...), an unknown configuration set (404) and account-level
//! refusals (`AccountSuspendedException`, `SendingPausedException`,
//! `MailFromDomainNotVerifiedException`). Any other 4xx (`MessageRejected`, an invalid recipient,
//! `BadRequestException`, ...) rejects the message for good: permanent (the email bounces).
//!
//! # Notifications
//!
//! An SNS HTTP(S) notification whose `Message` is an SES event (`eventType` from a configuration set,
//! or `notificationType` from identity notifications): `Bounce` (permanent when `bounceType` is
//! `Permanent`), `Complaint`, `Delivery`, and `Reject` (as a permanent bounce). Other event types are
//! accepted and ignored. The provider id is `mail.messageId`; Herald's Message-ID comes from
//! `mail.commonHeaders.messageId`. A `SubscriptionConfirmation` is accepted with no notifications and
//! its `SubscribeURL` logged for the operator to visit.
#![warn(missing_docs)]

mod sigv4;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use herald_sdk::http::{self, HttpError, Request, Response};
use herald_sdk::serde_json::{self, Value as Json, json};
use herald_sdk::time::UtcDateTime;
use herald_sdk::{
    Accepted, InboundRequest, Metadata, Notification, NotificationKind, Outgoing, PluginKind, SendError, Transport,
    clock, config, log,
};

use crate::sigv4::{Credentials, Signable};

/// The `ses` transport plugin.
pub struct Ses;

const SERVICE: &str = "ses";
const SEND_PATH: &str = "/v2/email/outbound-emails";
const TIMEOUT_MS: u32 = 15_000;
const DEFAULT_RETRY_AFTER_MS: u64 = 1000;
const QUOTA_RETRY_AFTER_MS: u64 = 3_600_000;

impl Transport for Ses {
    fn metadata() -> Metadata {
        Metadata::new("ses", env!("CARGO_PKG_VERSION"), PluginKind::Transport)
            .description("ses: Amazon SES v2 SendEmail (raw MIME, SigV4); SES events through SNS")
            .provides(["ses"])
    }

    fn send(message: &Outgoing) -> Result<Accepted, SendError> {
        // a configuration problem: retried, then FAILED (never a bounce)
        let setup = Setup::load().map_err(SendError::Temporary)?;
        let body = request_body(message, config::get("configuration_set").filter(|c| !c.trim().is_empty()));
        let request = setup.signed_request(&body, clock::now_ms());
        match http::fetch(&request) {
            Ok(response) => classify(&response),
            Err(HttpError::Denied(reason)) => {
                Err(SendError::Temporary(format!("the host refused the SES endpoint: {reason}")))
            }
            Err(e) => Err(SendError::Temporary(format!("SES: {e}"))),
        }
    }

    fn parse_notifications(request: &InboundRequest) -> Result<Vec<Notification>, String> {
        authenticate(request)?;
        let body: Json = serde_json::from_slice(&request.body).map_err(|e| format!("malformed JSON: {e}"))?;
        let event = match body.get("Type").and_then(Json::as_str) {
            Some("SubscriptionConfirmation") => {
                let url = body.get("SubscribeURL").and_then(Json::as_str).unwrap_or("(none)");
                let topic = body.get("TopicArn").and_then(Json::as_str).unwrap_or("(unknown)");
                log::warn(
                    "SNS subscription to confirm: visit the SubscribeURL",
                    &[("topic", topic), ("subscribe_url", url)],
                );
                return Ok(Vec::new());
            }
            Some("UnsubscribeConfirmation") => return Ok(Vec::new()),
            Some("Notification") => {
                let message =
                    body.get("Message").and_then(Json::as_str).ok_or("the SNS notification has no Message")?;
                serde_json::from_str(message).map_err(|e| format!("the SNS Message is not an SES event: {e}"))?
            }
            Some(other) => return Err(format!("unknown SNS message type {other:?}")),
            // Raw message delivery: the body is the SES event itself.
            None => body,
        };
        Ok(ses_event(&event)?.into_iter().collect())
    }
}

/// Region, endpoint and credentials, read from the plugin's config and secrets.
struct Setup {
    region: String,
    /// `https://host[:port][/prefix]` without a trailing slash.
    endpoint: String,
    /// The `Host` header the HTTP client sends for `endpoint`.
    host: String,
    /// The path prefix of `endpoint` (empty or `/something`).
    prefix: String,
    creds: Credentials,
}

impl Setup {
    fn load() -> Result<Setup, String> {
        let region = config::get("region")
            .map(|r| r.trim().to_owned())
            .filter(|r| !r.is_empty())
            .ok_or("the ses transport has no `region` configured")?;
        let endpoint = config::get("endpoint")
            .map(|e| e.trim().trim_end_matches('/').to_owned())
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| format!("https://email.{region}.amazonaws.com"));
        let (host, prefix) = split_endpoint(&endpoint)?;
        let secret = |name: &str| {
            config::secret(name)
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .ok_or_else(|| format!("the ses transport has no `{name}` secret"))
        };
        let creds = Credentials {
            access_key_id: secret("access_key_id")?,
            secret_access_key: secret("secret_access_key")?,
            session_token: secret("session_token").ok(),
        };
        Ok(Setup { region, endpoint, host, prefix, creds })
    }

    fn signed_request(&self, body: &str, now_ms: i64) -> Request {
        let amz_date = UtcDateTime::from_unix_ms(now_ms).to_basic_iso8601();
        let mut headers = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("host".to_owned(), self.host.clone()),
            ("x-amz-date".to_owned(), amz_date.clone()),
        ];
        if let Some(token) = &self.creds.session_token {
            headers.push(("x-amz-security-token".to_owned(), token.clone()));
        }
        let path = format!("{}{SEND_PATH}", self.prefix);
        let signable =
            Signable { method: "POST", path: &path, query: &[], headers: &headers, payload: body.as_bytes() };
        let authorization = sigv4::authorization(&signable, &self.creds, &self.region, SERVICE, &amz_date);
        let mut request = Request::post(format!("{}{SEND_PATH}", self.endpoint)).timeout_ms(TIMEOUT_MS);
        // `host` is signed but not set: the HTTP client sends it from the URL.
        for (name, value) in headers.into_iter().filter(|(n, _)| n != "host") {
            request = request.header(name, value);
        }
        request.header("authorization", authorization).body(body.to_owned())
    }
}

/// Splits `scheme://authority/prefix` into the `Host` header value (default port dropped) and the prefix.
fn split_endpoint(endpoint: &str) -> Result<(String, String), String> {
    let lower = endpoint.to_ascii_lowercase();
    let (rest, default_port) = if let Some(r) = lower.strip_prefix("https://") {
        (&endpoint[endpoint.len() - r.len()..], ":443")
    } else if let Some(r) = lower.strip_prefix("http://") {
        (&endpoint[endpoint.len() - r.len()..], ":80")
    } else {
        return Err(format!("the ses endpoint {endpoint:?} must start with https:// or http://"));
    };
    let (authority, prefix) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    if authority.is_empty() || authority.contains(['@', '?', '#']) {
        return Err(format!("the ses endpoint {endpoint:?} has no usable host"));
    }
    let host = authority.strip_suffix(default_port).unwrap_or(authority).to_ascii_lowercase();
    Ok((host, prefix.to_owned()))
}

/// An SES tag name or value: letters, digits, `_` and `-`, at most 256 characters.
fn tag_safe(s: &str) -> String {
    s.chars().take(256).map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// The SendEmail request body.
fn request_body(o: &Outgoing, configuration_set: Option<String>) -> String {
    let tags: Vec<Json> = o
        .message
        .tags
        .iter()
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .take(50)
        .map(|(k, v)| json!({"Name": tag_safe(k), "Value": tag_safe(v)}))
        .collect();
    let mut body = json!({
        "Content": {"Raw": {"Data": BASE64.encode(&o.raw)}},
        "Destination": {"ToAddresses": o.envelope.rcpt_to},
    });
    if !tags.is_empty() {
        body["EmailTags"] = Json::Array(tags);
    }
    if let Some(set) = configuration_set {
        body["ConfigurationSetName"] = Json::String(set.trim().to_owned());
    }
    body.to_string()
}

/// SES's error code: the `x-amzn-ErrorType` header (before any `:`), or `__type`/`code` in the body.
fn error_code(response: &Response, body: &Json) -> String {
    let raw = response
        .header("x-amzn-errortype")
        .map(str::to_owned)
        .or_else(|| body.get("__type").or_else(|| body.get("code")).and_then(Json::as_str).map(str::to_owned))
        .unwrap_or_default();
    let code = raw.split(':').next().unwrap_or("");
    code.rsplit('#').next().unwrap_or(code).to_owned()
}

/// Error codes that mean the sender's setup (credentials, signature, account, configuration set) is
/// wrong, not the message: temporary, so the email is retried and never bounces.
const CONFIGURATION_ERRORS: &[&str] = &[
    "AccessDenied",
    "AccessDeniedException",
    "AccountSuspendedException",
    "ExpiredToken",
    "ExpiredTokenException",
    "IncompleteSignature",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "MailFromDomainNotVerifiedException",
    "MissingAuthenticationToken",
    "NotAuthorized",
    "NotFoundException",
    "SendingPausedException",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
];

/// Maps SES's answer to the send's result.
fn classify(response: &Response) -> Result<Accepted, SendError> {
    let body = response.json().unwrap_or(Json::Null);
    if response.is_success() {
        let id = body.get("MessageId").and_then(Json::as_str).map(str::to_owned);
        return Ok(Accepted { provider_message_id: id });
    }
    let status = response.status;
    let code = error_code(response, &body);
    let message = body
        .get("message")
        .or_else(|| body.get("Message"))
        .and_then(Json::as_str)
        .map_or_else(|| response.text().chars().take(200).collect(), str::to_owned);
    let throttled = status == 429 || code.contains("Throttling") || code == "TooManyRequestsException";
    if throttled {
        let ms = if message.to_ascii_lowercase().contains("daily message quota") {
            QUOTA_RETRY_AFTER_MS
        } else {
            response
                .header("retry-after")
                .and_then(|s| s.trim().parse::<u64>().ok())
                .map_or(DEFAULT_RETRY_AFTER_MS, |secs| secs.saturating_mul(1000))
        };
        return Err(SendError::RateLimited(ms));
    }
    let what = format!("SES answered {status} {code}: {message}");
    let temporary =
        matches!(status, 401 | 403 | 404 | 408) || status >= 500 || CONFIGURATION_ERRORS.contains(&code.as_str());
    if temporary { Err(SendError::Temporary(what)) } else { Err(SendError::Permanent(what)) }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The request must carry the `notification_token` secret as `X-Herald-Token` or as a basic-auth password.
fn authenticate(request: &InboundRequest) -> Result<(), String> {
    let token = config::secret("notification_token")
        .filter(|t| !t.is_empty())
        .ok_or("the ses transport has no notification_token secret, so notifications cannot be authenticated")?;
    if let Some(given) = request.header("x-herald-token") {
        return if constant_time_eq(given.trim().as_bytes(), token.as_bytes()) {
            Ok(())
        } else {
            Err("the X-Herald-Token header does not match".into())
        };
    }
    let basic = request
        .header("authorization")
        .and_then(|a| a.trim().strip_prefix("Basic ").or_else(|| a.trim().strip_prefix("basic ")))
        .and_then(|b| BASE64.decode(b.trim()).ok())
        .and_then(|b| String::from_utf8(b).ok());
    match basic.as_deref().and_then(|userpass| userpass.split_once(':')) {
        Some((_, password)) if constant_time_eq(password.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err("the basic-auth password does not match".into()),
        None => Err("missing X-Herald-Token header (or basic auth)".into()),
    }
}

/// The notification in one SES event, if it is one Herald tracks.
fn ses_event(event: &Json) -> Result<Option<Notification>, String> {
    let kind = event
        .get("eventType")
        .or_else(|| event.get("notificationType"))
        .and_then(Json::as_str)
        .ok_or("the SES event has no eventType or notificationType")?;
    let mail = event.get("mail").ok_or("the SES event has no mail object")?;
    let provider_message_id = mail.get("messageId").and_then(Json::as_str).map(str::to_owned);
    let message_id = mail
        .pointer("/commonHeaders/messageId")
        .and_then(Json::as_str)
        .map(|m| m.trim().trim_start_matches('<').trim_end_matches('>').to_owned())
        .filter(|m| !m.is_empty());
    if provider_message_id.is_none() && message_id.is_none() {
        return Err("the SES event names no message".into());
    }
    let text = |pointer: &str| event.pointer(pointer).and_then(Json::as_str);
    let (kind, permanent, reason) = match kind {
        "Bounce" => {
            let bounce_type = text("/bounce/bounceType").unwrap_or("Undetermined");
            let sub_type = text("/bounce/bounceSubType").unwrap_or("");
            let diagnostic = text("/bounce/bouncedRecipients/0/diagnosticCode");
            let reason = match diagnostic {
                Some(d) => format!("{bounce_type}/{sub_type}: {d}"),
                None => format!("{bounce_type}/{sub_type}"),
            };
            (NotificationKind::Bounce, bounce_type == "Permanent", Some(reason))
        }
        "Complaint" => {
            let reason = text("/complaint/complaintFeedbackType").map(str::to_owned);
            (NotificationKind::Complaint, false, reason)
        }
        "Delivery" => (NotificationKind::Delivery, false, None),
        "Reject" => {
            let reason = format!("rejected by SES: {}", text("/reject/reason").unwrap_or("unknown"));
            (NotificationKind::Bounce, true, Some(reason))
        }
        _ => return Ok(None),
    };
    Ok(Some(Notification { kind, message_id, provider_message_id, permanent, reason }))
}

herald_sdk::export_transport!(Ses);

#[cfg(test)]
mod tests {
    use super::*;
    use herald_sdk::mock::{MockGuard, MockHost};

    // 2015-08-30T12:36:00Z, the SigV4 test suite's date.
    const NOW_MS: i64 = 1_440_938_160_000;

    fn host() -> MockHost {
        MockHost::new()
            .config("region", "us-east-1")
            .secret("access_key_id", "AKIDEXAMPLE")
            .secret("secret_access_key", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
            .secret("notification_token", "tok")
            .now_ms(NOW_MS)
    }

    fn message() -> Outgoing {
        let mut o = Outgoing::simple("news@example.com", "ada@example.org", "Hello", "Hi Ada");
        o.envelope.rcpt_to.push("bcc@example.net".into());
        o.message.tags = vec![("emailId".into(), "e-1".into()), ("campaign id".into(), "c/2".into())];
        o
    }

    fn send(host: &MockGuard) -> (Result<Accepted, SendError>, Request) {
        let result = Ses::send(&message());
        let requests = host.requests();
        (result, requests.last().cloned().unwrap_or_else(|| Request::get("none")))
    }

    #[test]
    fn compliance() {
        herald_sdk::compliance::check_transport::<Ses>();
        herald_sdk::compliance::check_manifest(include_str!("../manifest.toml"), &Ses::metadata());
    }

    #[test]
    fn sends_raw_mail_signed_with_sigv4() {
        let host = host().respond(Response::new(200).with_json(&json!({"MessageId": "0100-abc"}))).install();
        let (result, req) = send(&host);
        assert_eq!(result, Ok(Accepted { provider_message_id: Some("0100-abc".into()) }));
        assert_eq!(req.method, "POST");
        assert_eq!(req.url, "https://email.us-east-1.amazonaws.com/v2/email/outbound-emails");
        assert_eq!(req.header_value("x-amz-date"), Some("20150830T123600Z"));
        assert_eq!(req.header_value("host"), None, "the client sends Host itself");
        let body: Json = serde_json::from_slice(req.body.as_deref().unwrap_or_default()).expect("json");
        assert_eq!(BASE64.decode(body["Content"]["Raw"]["Data"].as_str().unwrap_or("")).ok(), Some(message().raw));
        assert_eq!(body["Destination"]["ToAddresses"], json!(["ada@example.org", "bcc@example.net"]));
        assert_eq!(
            body["EmailTags"],
            json!([{"Name": "emailId", "Value": "e-1"}, {"Name": "campaign_id", "Value": "c_2"}])
        );
        assert!(body.get("ConfigurationSetName").is_none());

        // The Authorization header is the SigV4 signature of exactly what was sent, Host included.
        let signed_headers = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("host".to_owned(), "email.us-east-1.amazonaws.com".to_owned()),
            ("x-amz-date".to_owned(), "20150830T123600Z".to_owned()),
        ];
        let payload = req.body.clone().unwrap_or_default();
        let signable =
            Signable { method: "POST", path: SEND_PATH, query: &[], headers: &signed_headers, payload: &payload };
        let creds = Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        };
        let expected = sigv4::authorization(&signable, &creds, "us-east-1", "ses", "20150830T123600Z");
        assert_eq!(req.header_value("authorization"), Some(expected.as_str()));
        assert!(expected.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/ses/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, Signature="
        ));
    }

    #[test]
    fn custom_endpoint_session_token_and_configuration_set() {
        let host = host()
            .config("endpoint", "http://127.0.0.1:4566/ses/")
            .config("region", "eu-west-1")
            .config("configuration_set", "herald-events")
            .secret("session_token", "sess")
            .respond(Response::new(200).with_json(&json!({"MessageId": "m"})))
            .install();
        let (result, req) = send(&host);
        assert!(result.is_ok());
        assert_eq!(req.url, "http://127.0.0.1:4566/ses/v2/email/outbound-emails");
        assert_eq!(req.header_value("x-amz-security-token"), Some("sess"));
        let auth = req.header_value("authorization").unwrap_or_default();
        assert!(
            auth.contains(
                "/eu-west-1/ses/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token,"
            )
        );
        let body: Json = serde_json::from_slice(req.body.as_deref().unwrap_or_default()).expect("json");
        assert_eq!(body["ConfigurationSetName"], "herald-events");
    }

    #[test]
    fn endpoint_hosts() {
        assert_eq!(
            split_endpoint("https://email.us-east-1.amazonaws.com"),
            Ok(("email.us-east-1.amazonaws.com".into(), String::new()))
        );
        assert_eq!(split_endpoint("HTTPS://Fake.test:443/p"), Ok(("fake.test".into(), "/p".into())));
        assert_eq!(split_endpoint("http://127.0.0.1:4566"), Ok(("127.0.0.1:4566".into(), String::new())));
        assert!(split_endpoint("ftp://x").is_err());
        assert!(split_endpoint("https://").is_err());
    }

    #[test]
    fn maps_ses_answers() {
        let err = |status: u16, kind: &str, message: &str| {
            Response::new(status).with_header("x-amzn-ErrorType", kind).with_json(&json!({"message": message}))
        };
        let host = host()
            .respond(err(429, "TooManyRequestsException:http://internal.amazon.com/", "slow down"))
            .respond(err(400, "Throttling", "Maximum sending rate exceeded.").with_header("Retry-After", "3"))
            .respond(err(400, "Throttling", "Daily message quota exceeded."))
            .respond(err(400, "MessageRejected", "Email address is not verified."))
            .respond(err(400, "BadRequestException", "Illegal address"))
            .respond(err(403, "InvalidClientTokenId", "The security token included in the request is invalid."))
            .respond(err(403, "SignatureDoesNotMatch", "The request signature we calculated does not match."))
            .respond(err(403, "AccessDeniedException", "not authorized to perform ses:SendEmail"))
            .respond(Response::new(401).with_body("Unauthorized"))
            .respond(err(400, "AccountSuspendedException", "sending is disabled for this account"))
            .respond(err(404, "NotFoundException", "Configuration set <herald> does not exist."))
            .respond(Response::new(503).with_body("Service Unavailable"))
            .respond(
                Response::new(400).with_json(&json!({"__type": "com.amazon#BadRequestException", "message": "bad"})),
            )
            .respond_error(HttpError::Timeout)
            .respond_error(HttpError::Denied("not allowed".into()))
            .install();
        assert_eq!(send(&host).0, Err(SendError::RateLimited(DEFAULT_RETRY_AFTER_MS)));
        assert_eq!(send(&host).0, Err(SendError::RateLimited(3000)));
        assert_eq!(send(&host).0, Err(SendError::RateLimited(QUOTA_RETRY_AFTER_MS)));
        assert!(
            matches!(send(&host).0, Err(SendError::Permanent(m)) if m.contains("MessageRejected") && m.contains("not verified"))
        );
        assert!(matches!(send(&host).0, Err(SendError::Permanent(m)) if m.contains("Illegal address")));
        // credentials, signature, account and configuration set: the sender's setup, never a bounce
        for code in [
            "InvalidClientTokenId",
            "SignatureDoesNotMatch",
            "AccessDeniedException",
            "401",
            "AccountSuspendedException",
            "NotFoundException",
        ] {
            assert!(matches!(send(&host).0, Err(SendError::Temporary(m)) if m.contains(code)), "{code}");
        }
        assert!(matches!(send(&host).0, Err(SendError::Temporary(m)) if m.contains("503")));
        assert!(matches!(send(&host).0, Err(SendError::Permanent(m)) if m.contains("BadRequestException")));
        assert!(matches!(send(&host).0, Err(SendError::Temporary(_))));
        assert!(matches!(send(&host).0, Err(SendError::Temporary(m)) if m.contains("refused")));
    }

    #[test]
    fn missing_configuration_is_temporary() {
        let guard = MockHost::new().config("region", "us-east-1").secret("access_key_id", "a").install();
        assert!(matches!(Ses::send(&message()), Err(SendError::Temporary(m)) if m.contains("secret_access_key")));
        assert!(guard.requests().is_empty(), "nothing is sent without credentials");
        drop(guard);
        let guard = MockHost::new().secret("access_key_id", "a").secret("secret_access_key", "b").install();
        assert!(matches!(Ses::send(&message()), Err(SendError::Temporary(m)) if m.contains("region")));
        drop(guard);
        let _guard = host().config("endpoint", "ftp://nowhere").install();
        assert!(matches!(Ses::send(&message()), Err(SendError::Temporary(m)) if m.contains("https://")));
    }

    fn sns(event: &Json) -> Vec<u8> {
        json!({
            "Type": "Notification",
            "MessageId": "sns-1",
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:ses-events",
            "Message": event.to_string(),
        })
        .to_string()
        .into_bytes()
    }

    fn mail() -> Json {
        json!({"messageId": "0100-abc", "commonHeaders": {"messageId": "<m-1@herald.example>"}})
    }

    fn authorized(body: Vec<u8>) -> InboundRequest {
        InboundRequest::new(body).with_header("X-Herald-Token", "tok")
    }

    #[test]
    fn parses_ses_events_from_sns() {
        let _host = host().install();
        let bounce = json!({
            "eventType": "Bounce",
            "mail": mail(),
            "bounce": {"bounceType": "Permanent", "bounceSubType": "General",
                       "bouncedRecipients": [{"emailAddress": "ada@example.org", "diagnosticCode": "550 5.1.1 user unknown"}]}
        });
        let n = Ses::parse_notifications(&authorized(sns(&bounce))).expect("accepted");
        assert_eq!(
            n,
            vec![Notification {
                kind: NotificationKind::Bounce,
                message_id: Some("m-1@herald.example".into()),
                provider_message_id: Some("0100-abc".into()),
                permanent: true,
                reason: Some("Permanent/General: 550 5.1.1 user unknown".into()),
            }]
        );

        let transient = json!({"notificationType": "Bounce", "mail": mail(),
                               "bounce": {"bounceType": "Transient", "bounceSubType": "MailboxFull"}});
        let n = Ses::parse_notifications(&authorized(sns(&transient))).expect("accepted");
        assert!(!n[0].permanent);

        let complaint =
            json!({"notificationType": "Complaint", "mail": mail(), "complaint": {"complaintFeedbackType": "abuse"}});
        let n = Ses::parse_notifications(&authorized(sns(&complaint))).expect("accepted");
        assert_eq!((n[0].kind, n[0].reason.as_deref()), (NotificationKind::Complaint, Some("abuse")));

        let delivery = json!({"eventType": "Delivery", "mail": {"messageId": "0100-def"}});
        let n = Ses::parse_notifications(&authorized(sns(&delivery))).expect("accepted");
        assert_eq!((n[0].kind, n[0].message_id.as_deref()), (NotificationKind::Delivery, None));

        let open = json!({"eventType": "Open", "mail": mail()});
        assert_eq!(Ses::parse_notifications(&authorized(sns(&open))), Ok(vec![]));

        // Raw message delivery: the SES event without the SNS envelope.
        let n = Ses::parse_notifications(&authorized(delivery.to_string().into_bytes())).expect("accepted");
        assert_eq!(n.len(), 1);
    }

    #[test]
    fn subscription_confirmation_is_logged() {
        let host = host().install();
        let body = json!({"Type": "SubscriptionConfirmation", "TopicArn": "arn:t",
                          "SubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=x"});
        assert_eq!(Ses::parse_notifications(&authorized(body.to_string().into_bytes())), Ok(vec![]));
        let logs = host.logs();
        assert_eq!(
            logs[0].field("subscribe_url"),
            Some("https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=x")
        );
        assert!(host.requests().is_empty(), "nothing is fetched");
    }

    #[test]
    fn authenticates_with_the_token_or_basic_auth() {
        let _host = host().install();
        let body = || sns(&json!({"eventType": "Delivery", "mail": mail()}));
        let basic = |userpass: &str| format!("Basic {}", BASE64.encode(userpass));
        assert!(
            Ses::parse_notifications(&InboundRequest::new(body()).with_header("authorization", basic("herald:tok")))
                .is_ok()
        );
        let refuse = |req: InboundRequest| Ses::parse_notifications(&req).expect_err("refused");
        assert!(refuse(InboundRequest::new(body())).contains("X-Herald-Token"));
        assert!(refuse(InboundRequest::new(body()).with_header("x-herald-token", "nope")).contains("does not match"));
        assert!(
            refuse(InboundRequest::new(body()).with_header("Authorization", basic("herald:nope")))
                .contains("does not match")
        );
        assert!(refuse(authorized(b"{]".to_vec())).contains("JSON"));
        assert!(refuse(authorized(json!({"Type": "Weird"}).to_string().into_bytes())).contains("Weird"));
        assert!(refuse(authorized(sns(&json!({"eventType": "Bounce"})))).contains("mail"));
    }
}
