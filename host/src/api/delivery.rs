//! Delivery as a project sees it (docs/delivery.md): how many of its emails are deferred, and whether
//! each transport is up or down in the process that answers.

use salvo::oapi::ToSchema;
use salvo::prelude::*;
use serde::Serialize;

use super::auth::{ApiKeyAuth, KeyRule, project};
use super::body::Reply;
use super::state;
use crate::api::errors::ApiError;
use crate::infra::clock::rfc3339;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct TransportOut {
    /// the transport's name (`smtp`, `file`, a `[transports.NAME]` of the settings, a transport plugin)
    name: String,
    /// false once this process found it down (no session could be opened, a plugin missing or rate
    /// limited), until a probe finds it back
    up: bool,
    /// when it went down
    down_since: Option<String>,
    /// why it is down
    reason: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct DeliveryStatusOut {
    /// the project's emails waiting to be tried again (DEFERRED)
    deferred: i64,
    transports: Vec<TransportOut>,
}

pub fn router() -> Router {
    Router::with_path("delivery/status").hoop(ApiKeyAuth(KeyRule::SecretOnly)).get(delivery_status)
}

/// The project's deferred emails, and each transport's state as the answering process sees it.
#[endpoint(tags("delivery"), security(("bearer" = [])), responses((status_code = 200, body = DeliveryStatusOut)))]
pub async fn delivery_status(depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let s = st.delivery.status(&st.store, &ctx.project_id).await.map_err(crate::error::Error::from)?;
        Reply::ok(&DeliveryStatusOut {
            deferred: s.deferred,
            transports: s
                .transports
                .into_iter()
                .map(|t| TransportOut {
                    name: t.name,
                    up: t.down.is_none(),
                    down_since: t.down.as_ref().map(|(_, since)| rfc3339(*since)),
                    reason: t.down.map(|(why, _)| why),
                })
                .collect(),
        })
    })
}
