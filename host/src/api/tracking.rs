//! Herald's own open and click tracking (docs/behaviour.md#tracking-and-unsubscribe): `GET /t/o/:token`
//! answers a 1×1 GIF and records an open; `GET /t/c/:token` records a click and redirects to the link the
//! token was signed for, so the endpoint cannot be used as an open redirect. Tokens are HMAC-signed. Each
//! open or click counts, the first times are kept, the status only moves up
//! (docs/behaviour.md#delivery-and-email-statuses), and `email.open` / `email.click` events are written.

use salvo::http::StatusCode;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;

use super::state;
use crate::api::errors::ApiError;
use crate::error::Error;
use crate::infra::security::open_token;
use crate::services::compose::TrackingClaim as Claim;
use crate::services::tracking;
use crate::state::AppState;

pub fn router() -> Router {
    Router::new()
        .push(Router::with_path("t/o/{token}").get(track_open))
        .push(Router::with_path("t/c/{token}").get(track_click))
}

/// A transparent 1×1 GIF.
const GIF: &[u8] = &[
    0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff,
    0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00, 0x02,
    0x02, 0x44, 0x01, 0x00, 0x3b,
];

async fn record(st: &AppState, c: &Claim, click: bool) -> Result<(), ApiError> {
    Ok(tracking::record_engagement(&st.store, &st.clock, &c.p, &c.e, c.u.as_deref(), click).await?)
}

fn claim(st: &AppState, token: &str) -> Option<Claim> {
    serde_json::from_str(&open_token(&st.tracking_key, token)?).ok()
}

/// The tracking pixel: always the GIF; an open is recorded for a valid token.
#[handler]
pub async fn track_open(token: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        if let Some(c) = claim(&st, &token.into_inner()) {
            record(&st, &c, false).await?;
        }
        res.headers_mut().insert(salvo::http::header::CONTENT_TYPE, salvo::http::HeaderValue::from_static("image/gif"));
        res.headers_mut().insert(salvo::http::header::CACHE_CONTROL, salvo::http::HeaderValue::from_static("no-store"));
        res.write_body(GIF.to_vec()).map_err(|e| Error::Internal(e.to_string()))?;
        Ok(())
    })
}

/// A tracked link: records the click and redirects to the signed link; an invalid token is 404.
#[handler]
pub async fn track_click(token: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let Some(c) = claim(&st, &token.into_inner()) else {
            return Err(Error::not_found("LINK_NOT_FOUND", "This link is not valid").into());
        };
        let Some(url) = c.u.clone().filter(|u| u.starts_with("http://") || u.starts_with("https://")) else {
            return Err(Error::not_found("LINK_NOT_FOUND", "This link is not valid").into());
        };
        record(&st, &c, true).await?;
        res.status_code(StatusCode::FOUND);
        let loc = salvo::http::HeaderValue::from_str(&url)
            .map_err(|_| Error::not_found("LINK_NOT_FOUND", "This link is not valid"))?;
        res.headers_mut().insert(salvo::http::header::LOCATION, loc);
        Ok(())
    })
}
