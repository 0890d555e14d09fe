//! Writes [`ApiError`]s into responses (status, `Retry-After`, the envelope) and describes the envelope in
//! the OpenAPI document. The table itself (status, code, message of each error) is `crate::error`.

use salvo::http::StatusCode;
use salvo::oapi::{self, Components, EndpointOutRegister, Operation, ToSchema};
use salvo::prelude::*;
use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;

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
        if let ApiError::Internal(detail) = &self {
            tracing::error!(error = %detail, "internal error");
        }
        if let ApiError::RateLimited { retry_after_secs, .. } = &self
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
