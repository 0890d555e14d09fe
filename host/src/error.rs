//! The one table of public errors: each `ApiError` variant maps to an HTTP status, a machine-readable code
//! and a message. This is the only place where response statuses for failures are chosen, and the only
//! place that builds the error envelope; `api::errors` writes it into responses.
//!
//! Must not import: salvo, surrealdb (store errors arrive already classified as
//! [`crate::store::StoreError`]).

use serde::Serialize;
use serde_json::{Value, json};

use crate::store::StoreError;

/// One field-level problem in a request body (docs/behaviour.md#errors).
#[derive(Debug, Clone, Serialize)]
pub struct FieldError {
    /// Dotted path of the field, for example `to.0.email`.
    pub field: String,
    pub message: String,
    /// `invalid_string`, `required`, `too_big`, `too_small`, `invalid_type`, `invalid_enum_value`, ...
    pub code: String,
    /// What the request carried at that path (null when missing).
    pub received: Value,
}

impl FieldError {
    pub fn new(field: impl Into<String>, code: &str, message: impl Into<String>, received: Value) -> Self {
        Self { field: field.into(), message: message.into(), code: code.to_string(), received }
    }
}

/// Every error a request can end with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    /// Malformed JSON or a body that is not a JSON object.
    #[error("{0}")]
    MalformedBody(String),
    #[error("The request body is larger than the {limit} limit")]
    PayloadTooLarge { limit: String },
    /// A body of a kind the route does not take (an upload that is not one of the image formats).
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("Validation failed")]
    Validation(Vec<FieldError>),
    /// The bare `{ "error": "..." }` 400 responses the interface lists (docs/behaviour.md#errors).
    #[error("{0}")]
    BareBadRequest(String),
    #[error("{0}")]
    MissingAuth(String),
    #[error("{0}")]
    InvalidApiKey(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("This project is disabled")]
    ProjectDisabled,
    /// A resource that does not exist (or belongs to another project): code such as `PROJECT_NOT_FOUND`.
    #[error("{message}")]
    NotFound { code: &'static str, message: String },
    #[error("No route matches {method} {path}")]
    RouteNotFound { method: String, path: String },
    #[error("{0}")]
    Conflict(String),
    #[error("The Idempotency-Key {key:?} was already used for {request}")]
    IdempotencyKeyReused { key: String, request: String, at_ms: i64, status: Option<i64> },
    #[error("Rate limit exceeded: at most {limit} requests per minute for this project")]
    RateLimited { limit: u32, retry_after_secs: u64 },
    #[error("An unexpected error occurred")]
    Internal(String),
    /// A plugin needed for the request failed (trap, timeout); the message names it.
    #[error("{0}")]
    PluginUnavailable(String),
    /// An error with a status and code of its own (`INVALID_TOKEN`, `EMAIL_NOT_VERIFIED`, ...).
    #[error("{message}")]
    Coded { status: u16, code: &'static str, message: String },
    /// A per-project (or per-user) ceiling the operator sets is reached (docs/security.md#quotas): 403
    /// `QUOTA_EXCEEDED`; the message names the quota and its setting, `details` carry its name, limit
    /// and setting (and for stored bytes what is used and what was asked for).
    #[error("{message}")]
    QuotaExceeded {
        quota: &'static str,
        limit: u64,
        setting: &'static str,
        used: Option<u64>,
        requested: Option<u64>,
        message: String,
    },
    /// A [`ApiError::Coded`] with `details` for the client (`SUBSCRIPTION_ACTIVE` and its portal link).
    #[error("{message}")]
    Detailed { status: u16, code: &'static str, message: String, details: Value },
    /// The sender check: 403 with code INTERNAL_SERVER_ERROR, as the interface names it
    /// (docs/behaviour.md#errors).
    #[error("{message}")]
    SenderDomain { reason: &'static str, domain: String, message: String },
}

impl ApiError {
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        ApiError::NotFound { code, message: message.into() }
    }

    pub fn coded(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ApiError::Coded { status, code, message: message.into() }
    }

    pub fn field(field: &str, code: &str, message: &str, received: Value) -> Self {
        ApiError::Validation(vec![FieldError::new(field, code, message, received)])
    }

    /// Status, code and suggestion of each variant: the table.
    fn parts(&self) -> (u16, &'static str, Option<&'static str>) {
        use ApiError::*;
        match self {
            BadRequest(_) => (400, "BAD_REQUEST", None),
            MalformedBody(_) => {
                (400, "BAD_REQUEST", Some("Send a valid JSON object with Content-Type: application/json"))
            }
            PayloadTooLarge { .. } => (413, "PAYLOAD_TOO_LARGE", None),
            UnsupportedMediaType(_) => (415, "UNSUPPORTED_MEDIA_TYPE", Some("Upload a PNG, JPEG, GIF or WebP image")),
            Validation(_) => (422, "VALIDATION_ERROR", Some("Check the errors array for the fields that need fixing")),
            BareBadRequest(_) => (400, "BAD_REQUEST", None),
            MissingAuth(_) => (401, "MISSING_AUTH", Some("Send the header Authorization: Bearer <API key>")),
            InvalidApiKey(_) => (
                401,
                "INVALID_API_KEY",
                Some("Use the project's current key; keys stop working as soon as they are regenerated"),
            ),
            Unauthorized(_) => (401, "UNAUTHORIZED", Some("Log in with POST /auth/login")),
            Forbidden(_) => (403, "FORBIDDEN", None),
            ProjectDisabled => (403, "PROJECT_DISABLED", None),
            NotFound { code, .. } => (404, code, None),
            Coded { status, code, .. } | Detailed { status, code, .. } => (*status, code, None),
            QuotaExceeded { .. } => (
                403,
                "QUOTA_EXCEEDED",
                Some("Delete what the project no longer needs, or ask the operator to raise the limit"),
            ),
            RouteNotFound { .. } => (404, "NOT_FOUND", Some("See /docs for the list of endpoints")),
            Conflict(_) => (409, "CONFLICT", None),
            IdempotencyKeyReused { .. } => (
                409,
                "IDEMPOTENCY_KEY_REUSED",
                Some("Use a new Idempotency-Key for a new request; keys are kept for 24 hours"),
            ),
            RateLimited { .. } => (429, "RATE_LIMIT_EXCEEDED", Some("Wait for the Retry-After seconds")),
            Internal(_) => (500, "INTERNAL_SERVER_ERROR", None),
            PluginUnavailable(_) => {
                (503, "PLUGIN_UNAVAILABLE", Some("GET /plugins shows each plugin's status and last error"))
            }
            SenderDomain { .. } => (
                403,
                "INTERNAL_SERVER_ERROR",
                Some("Add the domain with POST /domains, publish its DNS records, then verify it"),
            ),
        }
    }

    /// The HTTP status of this error.
    pub fn status_code(&self) -> u16 {
        self.parts().0
    }

    /// The JSON body of this error, given the request id.
    pub fn body(&self, request_id: &str) -> Value {
        if let ApiError::BareBadRequest(message) = self {
            return json!({ "error": message });
        }
        let (status, code, suggestion) = self.parts();
        let mut error = json!({
            "code": code,
            "message": self.to_string(),
            "statusCode": status,
            "requestId": request_id,
        });
        if let ApiError::Validation(errors) = self {
            error["errors"] = serde_json::to_value(errors).unwrap_or(Value::Array(vec![]));
        }
        if let ApiError::IdempotencyKeyReused { key, request, at_ms, status } = self {
            error["details"] = json!({
                "key": key,
                "originalRequest": request,
                "originalRequestAt": crate::infra::clock::rfc3339(*at_ms),
                "originalStatusCode": status,
            });
        }
        if let ApiError::SenderDomain { reason, domain, .. } = self {
            error["details"] = json!({ "reason": reason, "domain": domain });
        }
        if let ApiError::QuotaExceeded { quota, limit, setting, used, requested, .. } = self {
            error["details"] = json!({ "quota": quota, "limit": limit, "setting": setting });
            if let (Some(used), Some(requested)) = (used, requested) {
                error["details"]["used"] = json!(used);
                error["details"]["requested"] = json!(requested);
            }
        }
        if let ApiError::Detailed { details, .. } = self {
            error["details"] = details.clone();
        }
        if let ApiError::RateLimited { limit, retry_after_secs } = self {
            error["details"] = json!({ "limit": limit, "retryAfter": retry_after_secs });
        }
        if let Some(s) = suggestion {
            error["suggestion"] = json!(s);
        }
        json!({ "success": false, "error": error, "timestamp": crate::infra::clock::rfc3339(crate::infra::clock::wall_now_ms()) })
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        // The database's own words name records and values: they go to the log, never to the client.
        match e {
            StoreError::Conflict(m) => {
                tracing::debug!(error = %m, "unique index");
                ApiError::Conflict("This would duplicate a record that already exists".into())
            }
            StoreError::Refused(m) => ApiError::Conflict(m),
            StoreError::Validation(m) => {
                tracing::debug!(error = %m, "refused by the schema");
                let field = m.split_once("field `").and_then(|(_, rest)| rest.split_once('`')).map(|(f, _)| f);
                ApiError::BadRequest(match field {
                    Some(f) => format!("The value of {f} is not valid"),
                    None => "A value is not valid".into(),
                })
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<crate::services::segments::SegmentError> for ApiError {
    fn from(e: crate::services::segments::SegmentError) -> Self {
        match e {
            crate::services::segments::SegmentError::Invalid(m) => ApiError::BadRequest(m),
            crate::services::segments::SegmentError::TooLarge(m) => {
                ApiError::field("condition", "too_big", &m, serde_json::Value::Null)
            }
            crate::services::segments::SegmentError::Store(s) => s.into(),
            crate::services::segments::SegmentError::Plugin(p) => ApiError::PluginUnavailable(p.to_string()),
        }
    }
}
