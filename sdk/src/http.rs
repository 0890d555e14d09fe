//! Buffered outbound HTTP (WIT `http`), for steps and transports.
//!
//! The host only lets a plugin call the hosts its manifest lists (`capabilities.http`), never private,
//! loopback or link-local addresses unless the operator allowed them, re-checks redirects, and caps
//! every request's timeout. A refusal is [`HttpError::Denied`]. In a native build requests go to the
//! [`MockHost`](crate::mock::MockHost).
//!
//! ```no_run
//! use herald_sdk::http::{self, Request};
//!
//! let response = http::fetch(&Request::post("https://api.example.com/v1/things").json(&serde_json::json!({"a": 1})));
//! ```

use std::fmt;

/// An HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// An absolute `http` or `https` URL.
    pub url: String,
    /// Request headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body, if any.
    pub body: Option<Vec<u8>>,
    /// The timeout in milliseconds; the host caps it with the plugin's limit.
    pub timeout_ms: Option<u32>,
}

impl Request {
    /// A request with no headers, no body and the host's default timeout.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Self {
        Request { method: method.into(), url: url.into(), headers: Vec::new(), body: None, timeout_ms: None }
    }

    /// A `GET` request.
    pub fn get(url: impl Into<String>) -> Self {
        Request::new("GET", url)
    }

    /// A `POST` request.
    pub fn post(url: impl Into<String>) -> Self {
        Request::new("POST", url)
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Sets a JSON body and, unless already set, `Content-Type: application/json`.
    pub fn json(mut self, body: &serde_json::Value) -> Self {
        if self.header_value("content-type").is_none() {
            self.headers.push(("Content-Type".into(), "application/json".into()));
        }
        self.body = Some(body.to_string().into_bytes());
        self
    }

    /// Sets the timeout in milliseconds.
    pub fn timeout_ms(mut self, timeout_ms: u32) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }

    /// The first header called `name`, compared case-insensitively.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    /// The body as text (invalid UTF-8 replaced), empty when there is none.
    pub fn body_text(&self) -> String {
        self.body.as_deref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default()
    }
}

/// An HTTP response. Any status is a response, including 4xx and 5xx.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Response headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body (capped by the host).
    pub body: Vec<u8>,
}

impl Response {
    /// A response with `status`, no headers and an empty body.
    pub fn new(status: u16) -> Self {
        Response { status, headers: Vec::new(), body: Vec::new() }
    }

    /// Adds a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    pub fn with_body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and `Content-Type: application/json`.
    pub fn with_json(self, body: &serde_json::Value) -> Self {
        self.with_header("Content-Type", "application/json").with_body(body.to_string())
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first header called `name`, compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        find_header(&self.headers, name)
    }

    /// The body as text, invalid UTF-8 replaced.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    pub fn json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// Refused by policy: host not allowed, private address, bad URL. Retrying will not help.
    Denied(String),
    /// No response in time.
    Timeout,
    /// The connection failed (DNS, TCP, TLS).
    Connect(String),
    /// The response body was larger than the host allows.
    ResponseTooLarge,
    /// Anything else.
    Other(String),
}

impl HttpError {
    /// Whether trying again later may succeed: timeouts, connection failures and other transport
    /// errors, but not a policy refusal or an oversized response.
    pub fn is_transient(&self) -> bool {
        matches!(self, HttpError::Timeout | HttpError::Connect(_) | HttpError::Other(_))
    }

    /// A short machine-readable code: `denied`, `timeout`, `connect`, `response_too_large`, `other`.
    pub fn code(&self) -> &'static str {
        match self {
            HttpError::Denied(_) => "denied",
            HttpError::Timeout => "timeout",
            HttpError::Connect(_) => "connect",
            HttpError::ResponseTooLarge => "response_too_large",
            HttpError::Other(_) => "other",
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied(m) => write!(f, "request refused by the host's policy: {m}"),
            HttpError::Timeout => f.write_str("request timed out"),
            HttpError::Connect(m) => write!(f, "connection failed: {m}"),
            HttpError::ResponseTooLarge => f.write_str("response too large"),
            HttpError::Other(m) => write!(f, "request failed: {m}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// Sends `request` and waits for the whole response.
pub fn fetch(request: &Request) -> Result<Response, HttpError> {
    crate::backend::fetch(request)
}

fn find_header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_builder() {
        let r = Request::post("https://x.test/").header("X-A", "1").json(&json!({"a": 1})).timeout_ms(500);
        assert_eq!(r.header_value("content-type"), Some("application/json"));
        assert_eq!(r.header_value("x-a"), Some("1"));
        assert_eq!(r.body_text(), "{\"a\":1}");
        assert_eq!(r.timeout_ms, Some(500));
    }

    #[test]
    fn response_helpers() {
        let r = Response::new(201).with_json(&json!({"id": "x"}));
        assert!(r.is_success());
        assert_eq!(r.json().ok(), Some(json!({"id": "x"})));
        assert_eq!(r.header("CONTENT-TYPE"), Some("application/json"));
        assert!(!Response::new(404).is_success());
        assert!(HttpError::Timeout.is_transient());
        assert!(!HttpError::Denied("x".into()).is_transient());
    }
}
