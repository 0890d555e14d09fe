//! Operational endpoints without authentication: `/health`, `/config`, `/metrics`.

use salvo::http::StatusCode;
use salvo::oapi::ToSchema;
use salvo::prelude::*;
use serde::Serialize;

use super::body::Reply;
use super::state;
use crate::api::errors::ApiError;
use crate::error::Error;

#[derive(Serialize, ToSchema)]
pub struct HealthOut {
    /// "ok" or "unavailable"
    status: String,
    database: String,
    version: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ConfigOut {
    version: String,
    /// Feature flags: which integrations are on.
    features: Features,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct Features {
    signups: bool,
    /// users verify their email before creating projects (`HERALD_REQUIRE_EMAIL_VERIFICATION`)
    email_verification: bool,
    rate_limit: bool,
    billing: bool,
    plugins: bool,
    smtp: bool,
    /// `POST /uploads/image` takes images for template bodies
    uploads: bool,
}

pub fn router() -> Router {
    Router::new()
        .push(Router::with_path("health").get(health))
        .push(Router::with_path("config").get(config))
        .push(Router::with_path("metrics").get(metrics))
}

/// Liveness and database reachability: 200 when the database answers, 503 otherwise.
#[endpoint(tags("system"), responses((status_code = 200, body = HealthOut), (status_code = 503, body = HealthOut)))]
pub async fn health(depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let db_ok = crate::services::system::database_reachable(&st).await;
        let out = HealthOut {
            status: if db_ok { "ok" } else { "unavailable" }.into(),
            database: if db_ok { "reachable" } else { "unreachable" }.into(),
            version: env!("CARGO_PKG_VERSION").into(),
        };
        Reply::with(if db_ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, &out)
    })
}

/// Public configuration: version and feature flags of the integrations that are on.
#[endpoint(tags("system"), responses((status_code = 200, body = ConfigOut)))]
pub async fn config(depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        Reply::ok(&ConfigOut {
            version: env!("CARGO_PKG_VERSION").into(),
            features: Features {
                signups: !st.config.disable_signups,
                email_verification: st.config.require_email_verification,
                rate_limit: st.limiter.enabled(),
                billing: st.stripe.is_some(),
                plugins: true,
                smtp: st.config.smtp_url.is_some(),
                uploads: true,
            },
        })
    })
}

/// Prometheus metrics: requests by route and status, latency histogram, jobs by state (counted at most
/// every two seconds).
#[endpoint(tags("system"), responses((status_code = 200, description = "Prometheus text format")))]
pub async fn metrics(depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let body = crate::services::system::metrics_text(&st).await;
        res.headers_mut().insert(
            salvo::http::header::CONTENT_TYPE,
            salvo::http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        res.write_body(body).map_err(|e| Error::Internal(e.to_string()))?;
        Ok(())
    })
}
