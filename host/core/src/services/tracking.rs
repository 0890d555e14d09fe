//! What the recipient's clicks do: open and click tracking, and the subscription links of an email
//! (docs/behaviour.md#tracking-and-unsubscribe). The tokens are checked by the caller; this module
//! records what they name.
//!
//! Must not import: salvo, surrealdb.

use serde_json::Map;

use crate::domain::status::EmailStatus;
use crate::domain::tracking::below;
use crate::infra::clock::SharedClock;
use crate::services::ingest::set_subscribed_with;
use crate::store::contacts::{Contact, ContactWrite};
use crate::store::events::Event;
use crate::store::{Store, StoreError};

/// Records an open (or a click on `url`) of an email: the status moves up to OPENED / CLICKED, and
/// `email.open` / `email.click` is recorded for its contact. An email that no longer exists is ignored.
pub async fn record_engagement(
    store: &Store,
    clock: &SharedClock,
    project: &str,
    email: &str,
    url: Option<&str>,
    click: bool,
) -> Result<(), StoreError> {
    let target = if click { EmailStatus::Clicked } else { EmailStatus::Opened };
    let now = clock.now_ms();
    let Some(found) = store.record_engagement(project, email, click, &below(target), now).await? else {
        return Ok(());
    };
    let mut data = Map::new();
    data.insert("emailId".into(), email.into());
    if let Some(c) = found.campaign {
        data.insert("campaignId".into(), c.into());
    }
    // The email's first open (click) counts in the unique figures of analytics.
    if found.first {
        data.insert("first".into(), true.into());
    }
    if let Some(u) = url {
        data.insert("url".into(), u.into());
    }
    let name = if click { "email.click" } else { "email.open" };
    let ev = Event::new(project, &found.contact, name, data, "system", now).at_depth(found.depth);
    store.write_contact(project, &ContactWrite::None, &[ev]).await?;
    Ok(())
}

/// The contact a subscription link names, if it still exists.
pub async fn linked_contact(store: &Store, project: &str, contact: &str) -> Result<Option<Contact>, StoreError> {
    store.contact(project, contact).await
}

/// Sets the subscription from a link. An unsubscribe of a subscribed contact is attributed to the email
/// whose link made it (`via`, counted in its campaign's `unsubscribedCount`).
pub async fn change_by_link(
    store: &Store,
    clock: &SharedClock,
    project: &str,
    contact: &str,
    subscribe: bool,
    was_subscribed: bool,
    via: Option<&str>,
) -> Result<(), StoreError> {
    // An unsubscribe through an email's link names the email and its campaign in its event.
    let mut data = Map::new();
    if was_subscribed
        && !subscribe
        && let Some(via) = via
    {
        let campaign = store.attribute_unsubscribe(project, contact, via, clock.now_ms()).await?;
        data.insert("emailId".into(), via.into());
        if let Some(c) = campaign {
            data.insert("campaignId".into(), c.into());
        }
    }
    set_subscribed_with(store, clock, project, contact, subscribe, data).await?;
    Ok(())
}
