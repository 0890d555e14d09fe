//! The errors Herald's operations end with, said in Herald's own terms: what was wrong, never a front
//! end's status. Each front end maps every variant in one table of its own: the HTTP server in
//! `api::errors` (status, code, suggestion and the error envelope, docs/behaviour.md#errors).
//!
//! Must not import: salvo, surrealdb (store errors arrive already classified as
//! [`crate::store::StoreError`]).

use serde::Serialize;
use serde_json::Value;

use crate::store::StoreError;

/// One field-level problem in a request (docs/behaviour.md#errors).
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

/// Why an operation refused, where the reason has a machine-readable code of its own
/// ([`Error::Refused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// An account link (sign-up, verification, reset, invitation) that is not valid.
    InvalidToken,
    /// The account's address is not verified yet.
    EmailNotVerified,
    /// The OAuth provider refused or answered something unusable.
    OauthFailed,
    /// The OAuth callback does not belong to a sign-in this server started.
    OauthStateMismatch,
    /// The OAuth provider reports no verified address.
    OauthEmailUnverified,
    /// No payment provider is configured.
    BillingDisabled,
    /// The payment provider failed.
    PaymentProviderError,
    /// The project has a subscription already.
    SubscriptionActive,
    /// A payment provider's event whose signature does not hold.
    InvalidSignature,
    /// The project's monthly limit of a category would be exceeded.
    BillingLimitExceeded,
    /// The caller may not lift this suspension.
    UnsuspendNotAllowed,
    /// The project is suspended (its code is the disabled project's).
    ProjectSuspended,
}

impl Code {
    /// The code as clients read it.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidToken => "INVALID_TOKEN",
            Code::EmailNotVerified => "EMAIL_NOT_VERIFIED",
            Code::OauthFailed => "OAUTH_FAILED",
            Code::OauthStateMismatch => "OAUTH_STATE_MISMATCH",
            Code::OauthEmailUnverified => "OAUTH_EMAIL_UNVERIFIED",
            Code::BillingDisabled => "BILLING_DISABLED",
            Code::PaymentProviderError => "PAYMENT_PROVIDER_ERROR",
            Code::SubscriptionActive => "SUBSCRIPTION_ACTIVE",
            Code::InvalidSignature => "INVALID_SIGNATURE",
            Code::BillingLimitExceeded => "BILLING_LIMIT_EXCEEDED",
            Code::UnsuspendNotAllowed => "UNSUSPEND_NOT_ALLOWED",
            Code::ProjectSuspended => "PROJECT_DISABLED",
        }
    }
}

/// Every error an operation can end with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Input that is not acceptable, said in one message.
    #[error("{0}")]
    Invalid(String),
    /// Input that does not parse at all (not JSON, not an object).
    #[error("{0}")]
    Malformed(String),
    /// Input larger than the operation takes.
    #[error("The request body is larger than the {limit} limit")]
    TooLarge { limit: String },
    /// Content of a kind the operation does not take (an upload that is not one of the image formats).
    #[error("{0}")]
    UnsupportedType(String),
    /// Input that is not acceptable, field by field.
    #[error("Validation failed")]
    Validation(Vec<FieldError>),
    /// The bare `{ "error": "..." }` answers the interface lists (docs/behaviour.md#errors).
    #[error("{0}")]
    Plain(String),
    /// No credentials at all.
    #[error("{0}")]
    MissingAuth(String),
    /// An API key that is not (or no longer) valid.
    #[error("{0}")]
    InvalidApiKey(String),
    /// No valid session, or wrong credentials.
    #[error("{0}")]
    Unauthenticated(String),
    /// Authenticated, but not allowed.
    #[error("{0}")]
    Forbidden(String),
    #[error("This project is disabled")]
    ProjectDisabled,
    /// A resource that does not exist (or belongs to another project): code such as `PROJECT_NOT_FOUND`.
    #[error("{message}")]
    NotFound { code: &'static str, message: String },
    #[error("{0}")]
    Conflict(String),
    #[error("The Idempotency-Key {key:?} was already used for {request}")]
    IdempotencyKeyReused { key: String, request: String, at_ms: i64, status: Option<i64> },
    #[error("Rate limit exceeded: at most {limit} requests per minute for this project")]
    RateLimited { limit: u32, retry_after_secs: u64 },
    #[error("An unexpected error occurred")]
    Internal(String),
    /// A plugin needed for the operation failed (trap, timeout); the message names it.
    #[error("{0}")]
    PluginUnavailable(String),
    /// The server cannot store anything now (its disk is full or read-only); nothing of the request was
    /// kept, and the same request succeeds once space returns.
    #[error("The server cannot store data right now; try again shortly")]
    StorageUnavailable(String),
    /// A refusal with a code of its own (`INVALID_TOKEN`, `EMAIL_NOT_VERIFIED`, ...), and details for the
    /// client where it has some (`SUBSCRIPTION_ACTIVE` and its portal link).
    #[error("{message}")]
    Refused { code: Code, message: String, details: Option<Value> },
    /// A per-project (or per-user) ceiling the operator sets is reached (docs/security.md#quotas): the
    /// message names the quota and its setting; the fields carry its name, limit and setting (and for
    /// stored bytes what is used and what was asked for).
    #[error("{message}")]
    QuotaExceeded {
        quota: &'static str,
        limit: u64,
        setting: &'static str,
        used: Option<u64>,
        requested: Option<u64>,
        message: String,
    },
    /// The sender check (docs/behaviour.md#errors).
    #[error("{message}")]
    SenderDomain { reason: &'static str, domain: String, message: String },
}

impl Error {
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Error::NotFound { code, message: message.into() }
    }

    /// A refusal with a code of its own.
    pub fn refused(code: Code, message: impl Into<String>) -> Self {
        Error::Refused { code, message: message.into(), details: None }
    }

    pub fn field(field: &str, code: &str, message: &str, received: Value) -> Self {
        Error::Validation(vec![FieldError::new(field, code, message, received)])
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        // The database's own words name records and values: they go to the log, never to the client.
        match e {
            StoreError::Conflict(m) => {
                tracing::debug!(error = %m, "unique index");
                Error::Conflict("This would duplicate a record that already exists".into())
            }
            StoreError::Refused(m) => Error::Conflict(m),
            StoreError::Storage(m) => Error::StorageUnavailable(m),
            StoreError::Validation(m) => {
                tracing::debug!(error = %m, "refused by the schema");
                let field = m.split_once("field `").and_then(|(_, rest)| rest.split_once('`')).map(|(f, _)| f);
                Error::Invalid(match field {
                    Some(f) => format!("The value of {f} is not valid"),
                    None => "A value is not valid".into(),
                })
            }
            other => Error::Internal(other.to_string()),
        }
    }
}
