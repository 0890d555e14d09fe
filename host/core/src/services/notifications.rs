//! Delivery notifications: what a delivery, bounce or complaint reported after the hand-over does to an
//! email and its contact (docs/behaviour.md#delivery-notifications). Both the signed JSON webhook and the
//! transport plugins' provider webhooks come here once parsed and authenticated.
//!
//! Must not import: salvo, surrealdb.

use serde_json::Map;

use crate::domain::status::EmailStatus;
use crate::domain::suppressions::Reason;
use crate::domain::tracking::below;
use crate::infra::clock::SharedClock;
use crate::plugins::{Notification, NotificationKind};
use crate::services::ingest::set_subscribed;
use crate::store::contacts::ContactWrite;
use crate::store::emails::EmailKey;
use crate::store::events::Event;
use crate::store::{Store, StoreError};

/// Records that a notification (by its signature or digest) was received, until `until_ms`. False when it
/// was received before: a replay or a provider's redelivery, which must not be applied again.
pub async fn first_receipt(store: &Store, key: &str, until_ms: i64, now: i64) -> Result<bool, StoreError> {
    store.remember_notification(key, until_ms, now).await
}

/// Applies one notification: the email's status only moves up (DELIVERED, BOUNCED for a permanent bounce,
/// COMPLAINED), the matching `email.*` event is recorded, and a hard bounce or a complaint unsubscribes
/// the contact and puts its address on the suppression list. The email is found by its Message-ID, else
/// by the provider's message id. Returns the email's id, or None when no email matches.
pub async fn apply(store: &Store, clock: &SharedClock, n: &Notification) -> Result<Option<String>, StoreError> {
    let found = match (&n.message_id, &n.provider_message_id) {
        (Some(m), _) if !m.trim().is_empty() => {
            store.email_by_message_id(&format!("<{}>", m.trim().trim_matches(['<', '>']))).await?
        }
        _ => None,
    };
    let found = match (found, &n.provider_message_id) {
        (Some(f), _) => Some(f),
        (None, Some(p)) if !p.trim().is_empty() => store.email_by_provider_message_id(p.trim()).await?,
        _ => None,
    };
    let Some(key) = found else { return Ok(None) };
    apply_to(store, clock, key, n, None).await.map(Some)
}

/// Applies a notification to the email `key` (see [`apply`]). A delivery, a permanent bounce and a
/// complaint are each recorded at most once per email, however many copies of the report arrive
/// (their event's id is derived from the email and the kind): a copy changes nothing and counts
/// nowhere again (docs/security.md#reports-count-once-per-email). A soft bounce is recorded per report:
/// `event_id` names its event (a received report's, so that applying that report again records
/// nothing twice), else it gets a fresh one. Returns the email's id.
pub async fn apply_to(
    store: &Store,
    clock: &SharedClock,
    key: EmailKey,
    n: &Notification,
    event_id: Option<String>,
) -> Result<String, StoreError> {
    let (project, id, contact, depth) = (key.project, key.id, key.contact, key.depth);
    let now = clock.now_ms();
    let (status, event, unsubscribe) = match n.kind {
        NotificationKind::Delivery => (Some(EmailStatus::Delivered), "email.delivery", false),
        NotificationKind::Bounce if n.permanent => (Some(EmailStatus::Bounced), "email.bounce", true),
        NotificationKind::Bounce => (None, "email.bounce", false),
        NotificationKind::Complaint => (Some(EmailStatus::Complained), "email.complaint", true),
    };
    if let Some(status) = status {
        store.advance_email(&project, &id, status, &below(status), now).await?;
    }
    let mut data = Map::new();
    data.insert("emailId".into(), id.clone().into());
    if let Some(c) = key.campaign {
        data.insert("campaignId".into(), c.into());
    }
    if let Some(r) = &n.reason {
        data.insert("reason".into(), r.clone().into());
    }
    if n.kind == NotificationKind::Bounce {
        data.insert("permanent".into(), n.permanent.into());
    }
    let mut recorded = Event::new(&project, &contact, event, data, "system", now).at_depth(depth);
    let once = match n.kind {
        NotificationKind::Bounce if !n.permanent => None,
        _ => Some(
            uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, format!("herald-report:{id}:{event}").as_bytes())
                .to_string(),
        ),
    };
    let written = match once.or(event_id) {
        Some(e) => {
            let before = store.event_exists(&e).await?;
            recorded.id = e;
            before
        }
        None => false,
    };
    if !written {
        store.write_contact(&project, &ContactWrite::None, &[recorded]).await?;
    }
    if unsubscribe {
        set_subscribed(store, clock, &project, &contact, false).await?;
        // The address goes on the suppression list: no email of the project reaches it again.
        if let Some(row) = store.email(&project, &id).await? {
            let reason = if n.kind == NotificationKind::Complaint { Reason::Complaint } else { Reason::Bounce };
            let detail = n.reason.as_deref();
            crate::services::suppressions::after_refusal(store, &project, &row.recipient, reason, detail, &id, now)
                .await;
        }
    }
    Ok(id)
}
