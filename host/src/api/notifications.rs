//! `POST /webhooks/notifications` (docs/behaviour.md#delivery-notifications): delivery, bounce and
//! complaint notifications in Herald's own signed JSON format. Transport plugins will add their providers'
//! formats.
//!
//! Format: body `{"type": "delivery" | "bounce" | "complaint", "messageId": "<id@domain>", "permanent"?: bool,
//! "reason"?: string}`; headers `X-Herald-Timestamp: <unix seconds>` and
//! `X-Herald-Signature: v1=<hex HMAC-SHA256(key, timestamp + "." + body)>`, where the key is
//! `herald notifications-key`'s output (derived from HERALD_SECRET). A timestamp more than 5 minutes
//! away is refused, and an accepted signature is refused if it comes again (replay).

use hmac::{Hmac, Mac};
use salvo::oapi::ToSchema;
use salvo::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::body::{MAX_BODY_BYTES, Reply};
use super::state;
use crate::api::errors::ApiError;
use crate::error::Error;
use crate::plugins::{Notification as PluginNotification, NotificationKind};
use crate::services::notifications;
use salvo::oapi::extract::PathParam;

const WINDOW_SECS: i64 = 300;

#[derive(Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct Notification {
    /// delivery, bounce or complaint
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    kind: String,
    /// the Message-ID Herald gave the email
    message_id: String,
    /// bounces: true for a permanent (hard) bounce
    #[serde(default)]
    permanent: Option<bool>,
    reason: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct NotificationOut {
    success: bool,
    /// the email's id
    email: String,
}

pub fn router() -> Router {
    Router::with_path("webhooks/notifications")
        .post(notify)
        .push(Router::with_path("{transport}").post(notify_transport))
}

/// Signs a notification body (for senders and tests).
pub fn sign(key: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Receives a delivery, bounce or complaint notification for an email Herald sent.
#[endpoint(
    tags("webhooks"),
    parameters(
        ("X-Herald-Timestamp" = String, Header, description = "unix seconds"),
        ("X-Herald-Signature" = String, Header, description = "v1=<hex HMAC-SHA256 of timestamp.body>"),
    ),
    request_body = Notification,
    responses((status_code = 200, body = NotificationOut))
)]
pub async fn notify(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ts_header: Option<String> = req.header("x-herald-timestamp");
        let sig_header: Option<String> = req.header("x-herald-signature");
        let (Some(ts), Some(sig)) = (ts_header, sig_header) else {
            return Err(Error::Unauthenticated(
                "Notifications must carry X-Herald-Timestamp and X-Herald-Signature".into(),
            )
            .into());
        };
        let body = match req.payload_with_max_size(MAX_BODY_BYTES).await {
            Ok(b) => b.clone(),
            Err(_) => return Err(Error::Malformed("Cannot read the request body".into()).into()),
        };
        let ts: i64 =
            ts.trim().parse().map_err(|_| Error::Unauthenticated("X-Herald-Timestamp must be unix seconds".into()))?;
        let expected = sign(&st.notifications_key, ts, &body);
        let ok = sig.trim().len() == expected.len()
            && sig.trim().bytes().zip(expected.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        if !ok {
            return Err(Error::Unauthenticated("The notification signature does not match".into()).into());
        }
        let now = st.clock.now_ms();
        if (now / 1000 - ts).abs() > WINDOW_SECS {
            return Err(
                Error::Unauthenticated("The notification timestamp is outside the 5-minute window".into()).into()
            );
        }
        if !notifications::first_receipt(&st.store, &expected, (ts + WINDOW_SECS) * 1000 + 1, now).await? {
            return Err(Error::Conflict("This notification was already received (replay)".into()).into());
        }
        let n: Notification =
            serde_json::from_slice(&body).map_err(|e| Error::Malformed(format!("Malformed notification: {e}")))?;
        let kind = match n.kind.as_str() {
            "delivery" => NotificationKind::Delivery,
            "bounce" => NotificationKind::Bounce,
            "complaint" => NotificationKind::Complaint,
            other => {
                return Err(Error::field(
                    "type",
                    "invalid_enum_value",
                    "type is delivery, bounce or complaint",
                    other.into(),
                )
                .into());
            }
        };
        let id = notifications::apply(
            &st.store,
            &st.clock,
            &PluginNotification {
                kind,
                message_id: Some(n.message_id.clone()),
                provider_message_id: None,
                permanent: n.permanent.unwrap_or(true),
                reason: n.reason.clone(),
            },
        )
        .await?
        .ok_or_else(|| Error::not_found("EMAIL_NOT_FOUND", format!("No email has the Message-ID {}", n.message_id)))?;
        Reply::ok(&NotificationOut { success: true, email: id })
    })
}

#[derive(Serialize, ToSchema)]
pub struct PluginNotificationsOut {
    success: bool,
    /// notifications the transport plugin parsed
    received: usize,
    /// ids of the emails they matched
    emails: Vec<String>,
    /// true when this exact notification was received before (nothing was applied again)
    duplicate: bool,
}

/// Receives a provider's delivery, bounce and complaint notifications for a transport plugin, which
/// authenticates and parses them.
#[endpoint(
    tags("webhooks"),
    parameters(("transport" = String, Path, description = "the transport plugin's name")),
    responses((status_code = 200, body = PluginNotificationsOut))
)]
pub async fn notify_transport(
    transport: PathParam<String>,
    req: &mut Request,
    depot: &mut Depot,
) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let transport = transport.into_inner();
        if st.plugins.transport(&transport).is_none() {
            return Err(Error::not_found(
                "TRANSPORT_NOT_FOUND",
                format!("No loaded transport plugin is called {transport}"),
            )
            .into());
        }
        let headers: Vec<(String, String)> = req
            .headers()
            .iter()
            .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_string(), v.to_string())))
            .collect();
        let body = match req.payload_with_max_size(MAX_BODY_BYTES).await {
            Ok(b) => b.to_vec(),
            Err(_) => return Err(Error::Malformed("Cannot read the request body".into()).into()),
        };
        // Plugins keep no state between calls, so the host refuses replays: the same body for the same
        // transport counts once (a provider's redelivery is answered 200 without applying it again).
        let digest = {
            use sha2::Digest;
            let mut h = Sha256::new();
            h.update(transport.as_bytes());
            h.update(b"\0");
            h.update(&body);
            format!("{transport}:{}", hex::encode(h.finalize()))
        };
        let now = st.clock.now_ms();
        let parsed = st
            .plugins
            .parse_notifications(&transport, headers, body)
            .await
            .map_err(|e| Error::PluginUnavailable(e.to_string()))?
            .map_err(|msg| Error::Unauthenticated(format!("The {transport} plugin refused the notification: {msg}")))?;
        if !notifications::first_receipt(&st.store, &digest, now + 24 * 3_600_000, now).await? {
            return Reply::ok(&PluginNotificationsOut {
                success: true,
                received: parsed.len(),
                emails: vec![],
                duplicate: true,
            });
        }
        let mut emails = Vec::new();
        for n in &parsed {
            if let Some(id) = notifications::apply(&st.store, &st.clock, n).await? {
                emails.push(id);
            }
        }
        Reply::ok(&PluginNotificationsOut { success: true, received: parsed.len(), emails, duplicate: false })
    })
}
