//! Image uploads (docs/behaviour.md#uploads): `POST /uploads/image` (multipart field `file`) stores an
//! image and answers its public URL; `GET /uploads/:name` streams it with a long cache lifetime.

use salvo::http::StatusCode;
use salvo::http::header::{
    CACHE_CONTROL, CONTENT_LENGTH, CONTENT_SECURITY_POLICY, CONTENT_TYPE, HeaderValue, X_CONTENT_TYPE_OPTIONS,
};
use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;

use super::auth::{ApiKeyAuth, KeyRule, project};
use super::body::{Reply, multipart_file};
use super::state;
use crate::api::errors::ApiError;
use crate::error::Error;
use crate::services::uploads;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct UploadOut {
    url: String,
    size: usize,
    content_type: String,
    width: u32,
    height: u32,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct UploadForm {
    /// a PNG, JPEG, GIF or WebP image (recognised by its content), at most 5 MB by default
    #[salvo(schema(value_type = String, format = Binary))]
    file: Vec<u8>,
}

pub fn router() -> Router {
    Router::with_path("uploads")
        .push(Router::with_path("image").hoop(ApiKeyAuth(KeyRule::SecretOnly)).post(upload_image))
        .push(Router::with_path("{name}").get(get_upload))
}

/// Stores an image for template bodies: 201 with its public URL, size, type and dimensions. The type
/// is read from the content (415 for anything else); too large is 413; past the project's quota 403.
#[endpoint(
    tags("uploads"),
    security(("bearer" = [])),
    request_body(content = UploadForm, content_type = "multipart/form-data"),
    responses((status_code = 201, body = UploadOut))
)]
pub async fn upload_image(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let project = project(depot)?.project_id;
        let (_, bytes) = multipart_file(req, st.config.upload_max_bytes).await?;
        let u = uploads::store_image(&st, &project, &bytes).await?;
        Reply::with(
            StatusCode::CREATED,
            &UploadOut {
                url: u.url,
                size: u.size,
                content_type: u.content_type.into(),
                width: u.width,
                height: u.height,
            },
        )
    })
}

/// Serves an uploaded image (no authentication: it is meant for email bodies), cached for a year since
/// its name is its content's hash, streamed from the disk, and sandboxed (docs/security.md#uploads).
#[endpoint(tags("uploads"), responses((status_code = 200, description = "the image")))]
pub async fn get_upload(name: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let name = name.into_inner();
        let Some(stored) = uploads::open_image(&st, &name).await else {
            return Err(Error::not_found("UPLOAD_NOT_FOUND", format!("Upload {name} not found")).into());
        };
        let h = res.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static(stored.content_type));
        h.insert(CONTENT_LENGTH, HeaderValue::from(stored.len));
        h.insert(CACHE_CONTROL, HeaderValue::from_static("public, max-age=31536000, immutable"));
        h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        // Opened on its own (not in a page), the file can run nothing and load nothing.
        h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static("default-src 'none'; sandbox"));
        res.stream(stored.chunks());
        Ok(())
    })
}
