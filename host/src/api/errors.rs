//! The HTTP face of Herald's errors: the one table that gives each [`Error`] of the core its status,
//! code and suggestion, the error envelope, `Retry-After`, and the envelope in the OpenAPI document. No
//! other place chooses the status of a failure (docs/behaviour.md#errors).

use salvo::http::StatusCode;
use salvo::oapi::{self, Components, EndpointOutRegister, Operation, ToSchema};
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::Error;
use crate::infra::clock;

/// What a handler fails with: an error of the core, or one only HTTP has.
#[derive(Debug)]
pub enum ApiError {
    Core(Error),
    /// No route matches the method and path.
    RouteNotFound {
        method: String,
        path: String,
    },
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::Core(e)
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        ApiError::Core(e.into())
    }
}

impl From<crate::services::segments::SegmentError> for ApiError {
    fn from(e: crate::services::segments::SegmentError) -> Self {
        ApiError::Core(e.into())
    }
}

/// The `Retry-After` of a 503 for a database that cannot write: seconds.
const STORAGE_RETRY_SECS: &str = "30";

/// Status, code and suggestion of each error of the core: the table.
fn parts(e: &Error) -> (u16, &'static str, Option<&'static str>) {
    use Error::*;
    match e {
        Invalid(_) => (400, "BAD_REQUEST", None),
        Malformed(_) => (400, "BAD_REQUEST", Some("Send a valid JSON object with Content-Type: application/json")),
        TooLarge { .. } => (413, "PAYLOAD_TOO_LARGE", None),
        UnsupportedType(_) => (415, "UNSUPPORTED_MEDIA_TYPE", Some("Upload a PNG, JPEG, GIF or WebP image")),
        Validation(_) => (422, "VALIDATION_ERROR", Some("Check the errors array for the fields that need fixing")),
        Plain(_) => (400, "BAD_REQUEST", None),
        MissingAuth(_) => (401, "MISSING_AUTH", Some("Send the header Authorization: Bearer <API key>")),
        InvalidApiKey(_) => (
            401,
            "INVALID_API_KEY",
            Some("Use the project's current key; keys stop working as soon as they are regenerated"),
        ),
        Unauthenticated(_) => (401, "UNAUTHORIZED", Some("Log in with POST /auth/login")),
        Forbidden(_) => (403, "FORBIDDEN", None),
        ProjectDisabled => (403, "PROJECT_DISABLED", None),
        NotFound { code, .. } => (404, code, None),
        Refused { code, .. } => (refusal_status(*code), code.as_str(), None),
        QuotaExceeded { .. } => (
            403,
            "QUOTA_EXCEEDED",
            Some("Delete what the project no longer needs, or ask the operator to raise the limit"),
        ),
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
        StorageUnavailable(_) => (
            503,
            "STORAGE_FULL",
            Some("The server's disk is full: retry after the Retry-After seconds; the operator must free space"),
        ),
        // The interface names this 403 INTERNAL_SERVER_ERROR (docs/behaviour.md#errors).
        SenderDomain { .. } => (
            403,
            "INTERNAL_SERVER_ERROR",
            Some("Add the domain with POST /domains, publish its DNS records, then verify it"),
        ),
    }
}

/// The status of each refusal code.
fn refusal_status(code: crate::error::Code) -> u16 {
    use crate::error::Code::*;
    match code {
        InvalidToken | OauthFailed | OauthStateMismatch | BillingDisabled | InvalidSignature => 400,
        BillingLimitExceeded => 402,
        EmailNotVerified | OauthEmailUnverified | UnsuspendNotAllowed | ProjectSuspended => 403,
        SubscriptionActive => 409,
        PaymentProviderError => 502,
    }
}

impl ApiError {
    /// The HTTP status of this error.
    pub fn status_code(&self) -> u16 {
        match self {
            ApiError::Core(e) => parts(e).0,
            ApiError::RouteNotFound { .. } => 404,
        }
    }

    /// The JSON body of this error, given the request id.
    pub fn body(&self, request_id: &str) -> Value {
        let e = match self {
            ApiError::Core(e) => e,
            ApiError::RouteNotFound { method, path } => {
                return envelope(json!({
                    "code": "NOT_FOUND",
                    "message": format!("No route matches {method} {path}"),
                    "statusCode": 404,
                    "requestId": request_id,
                    "suggestion": "See /docs for the list of endpoints",
                }));
            }
        };
        if let Error::Plain(message) = e {
            return json!({ "error": message });
        }
        let (status, code, suggestion) = parts(e);
        let mut error = json!({
            "code": code,
            "message": e.to_string(),
            "statusCode": status,
            "requestId": request_id,
        });
        if let Some(details) = details(e) {
            error["details"] = details;
        }
        if let Error::Validation(errors) = e {
            error["errors"] = serde_json::to_value(errors).unwrap_or(Value::Array(vec![]));
        }
        if let Some(s) = suggestion {
            error["suggestion"] = json!(s);
        }
        envelope(error)
    }
}

/// The `details` of an error that has some.
fn details(e: &Error) -> Option<Value> {
    Some(match e {
        Error::IdempotencyKeyReused { key, request, at_ms, status } => json!({
            "key": key,
            "originalRequest": request,
            "originalRequestAt": clock::rfc3339(*at_ms),
            "originalStatusCode": status,
        }),
        Error::SenderDomain { reason, domain, .. } => json!({ "reason": reason, "domain": domain }),
        Error::QuotaExceeded { quota, limit, setting, used, requested, .. } => {
            let mut d = json!({ "quota": quota, "limit": limit, "setting": setting });
            if let (Some(used), Some(requested)) = (used, requested) {
                d["used"] = json!(used);
                d["requested"] = json!(requested);
            }
            d
        }
        Error::Refused { details: Some(d), .. } => d.clone(),
        Error::RateLimited { limit, retry_after_secs } => json!({ "limit": limit, "retryAfter": retry_after_secs }),
        _ => return None,
    })
}

fn envelope(error: Value) -> Value {
    json!({ "success": false, "error": error, "timestamp": clock::rfc3339(clock::wall_now_ms()) })
}

/// The HTTP status of an error.
pub fn status(e: &ApiError) -> StatusCode {
    StatusCode::from_u16(e.status_code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// Request id of the current request (set by the request-context hoop).
pub fn request_id(depot: &Depot) -> String {
    depot.get::<String>(crate::api::REQUEST_ID).cloned().unwrap_or_default()
}

#[async_trait]
impl Writer for ApiError {
    async fn write(self, _req: &mut Request, depot: &mut Depot, res: &mut Response) {
        if let ApiError::Core(Error::Internal(detail)) = &self {
            tracing::error!(error = %detail, "internal error");
        }
        if let ApiError::Core(Error::StorageUnavailable(detail)) = &self {
            tracing::error!(error = %detail, "the database cannot write");
            res.headers_mut().insert("Retry-After", salvo::http::HeaderValue::from_static(STORAGE_RETRY_SECS));
        }
        if let ApiError::Core(Error::RateLimited { retry_after_secs, .. }) = &self
            && let Ok(v) = retry_after_secs.to_string().parse()
        {
            res.headers_mut().insert("Retry-After", v);
        }
        res.status_code(status(&self));
        res.render(Json(self.body(&request_id(depot))));
    }
}

/// The error envelope as an OpenAPI schema (documentation only).
#[derive(Serialize, ToSchema)]
#[salvo(schema(name = "ErrorEnvelope"))]
pub struct ErrorEnvelope {
    pub success: bool,
    pub error: ErrorBody,
    pub timestamp: String,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
    #[salvo(schema(rename = "statusCode"))]
    #[serde(rename = "statusCode")]
    pub status_code: u16,
    #[salvo(schema(rename = "requestId"))]
    #[serde(rename = "requestId")]
    pub request_id: String,
    pub errors: Option<Vec<FieldError>>,
    pub details: Option<Value>,
    pub suggestion: Option<String>,
}

/// The bare `{"error": "<message>"}` of the three 400s the interface lists that way (docs/behaviour.md#errors).
#[derive(Serialize, ToSchema)]
#[salvo(schema(name = "BareError"))]
pub struct BareError {
    pub error: String,
}

/// The 400 of an operation with a bare error: that bare form, or the envelope for its other refusals.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[salvo(schema(name = "BareErrorOrEnvelope"))]
pub enum BareErrorOrEnvelope {
    Bare(BareError),
    Envelope(ErrorEnvelope),
}

/// One field-level problem, as the envelope's `errors` items carry it (`crate::error::FieldError`).
#[derive(Serialize, ToSchema)]
pub struct FieldError {
    /// Dotted path of the field, for example `to.0.email`.
    pub field: String,
    pub message: String,
    /// `invalid_string`, `required`, `too_big`, `too_small`, `invalid_type`, `invalid_enum_value`, ...
    pub code: String,
    /// What the request carried at that path (null when missing).
    pub received: Value,
}

impl EndpointOutRegister for ApiError {
    fn register(components: &mut Components, operation: &mut Operation) {
        let schema = ErrorEnvelope::to_schema(components);
        let response =
            oapi::Response::new("The error envelope").add_content("application/json", oapi::Content::new(schema));
        operation.responses.insert("default", response);
    }
}
