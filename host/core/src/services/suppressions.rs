//! The suppression list (docs/behaviour.md#suppressions): addresses and whole domains no email of the
//! project is sent to, whatever its type. Hard bounces and complaints add to it; people add and remove
//! entries by hand. Every send path asks [`among`] (or [`mark`]) before it writes its emails and records a
//! suppressed recipient's email as SUPPRESSED, with the entry in its error, instead of delivering it.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;

use crate::domain::status::EmailStatus;
use crate::domain::suppressions::{Entry, Reason, record_error};
use crate::error::Error;
use crate::store::emails::EmailRow;
use crate::store::suppressions::Suppression;
use crate::store::{Store, StoreError};

/// Most entries a page lists.
pub const MAX_PAGE: usize = 100;

/// Adds an entry by hand (or with the reason given); an entry already there is kept as it is.
/// Returns it and whether this call added it.
pub async fn add(
    store: &Store,
    project: &str,
    entry: &Entry,
    reason: Reason,
    detail: Option<&str>,
    now: i64,
) -> Result<(Suppression, bool), Error> {
    Ok(store.add_suppression(project, entry, reason, detail, None, now).await?)
}

/// Removes the entry for an address or domain: mail to it goes out again. 404 when there is none.
pub async fn remove(store: &Store, project: &str, entry: &Entry) -> Result<(), Error> {
    if store.remove_suppression(project, entry.value()).await? { Ok(()) } else { Err(not_found(entry)) }
}

/// The entry for an address or domain. 404 when there is none.
pub async fn get(store: &Store, project: &str, entry: &Entry) -> Result<Suppression, Error> {
    store.suppression(project, entry.value()).await?.ok_or_else(|| not_found(entry))
}

/// A page of the list in value order after `after`, and the list's size.
pub async fn list(
    store: &Store,
    project: &str,
    after: Option<&str>,
    reason: Option<Reason>,
    limit: usize,
) -> Result<(Vec<Suppression>, i64), Error> {
    let rows = store.suppressions_page(project, after, reason, limit.min(MAX_PAGE + 1)).await?;
    let total = store.suppression_count(project).await?;
    Ok((rows, total))
}

fn not_found(entry: &Entry) -> Error {
    Error::not_found("SUPPRESSION_NOT_FOUND", format!("{} is not on the suppression list", entry.value()))
}

/// Of these recipients (lowercased), the suppressed ones, each with the error its email record carries.
pub async fn among(store: &Store, project: &str, recipients: &[String]) -> Result<HashMap<String, String>, StoreError> {
    let found = store.suppressed_among(project, recipients).await?;
    Ok(found.into_iter().map(|(address, s)| (address, record_error(s.reason, &s.value))).collect())
}

/// Marks the PENDING emails among `rows` whose recipient is suppressed: SUPPRESSED, with the entry in
/// their error, so the store writes no delivery job and no billing use for them.
pub async fn mark(store: &Store, project: &str, rows: &mut [EmailRow]) -> Result<(), StoreError> {
    let addresses: Vec<String> =
        rows.iter().filter(|r| r.status == EmailStatus::Pending).map(|r| r.recipient.clone()).collect();
    let found = among(store, project, &addresses).await?;
    if found.is_empty() {
        return Ok(());
    }
    for r in rows.iter_mut().filter(|r| r.status == EmailStatus::Pending) {
        if let Some(why) = found.get(&r.recipient) {
            r.status = EmailStatus::Suppressed;
            r.error = Some(why.clone());
        }
    }
    Ok(())
}

/// A hard bounce or a complaint of the email `email` to `address`: the address goes on its project's
/// list (an entry already there is kept). A failure is logged, not raised: the bounce itself is
/// recorded by then.
pub async fn after_refusal(
    store: &Store,
    project: &str,
    address: &str,
    reason: Reason,
    detail: Option<&str>,
    email: &str,
    now: i64,
) {
    let Some(entry) = Entry::parse(address) else { return };
    // Long SMTP replies are cut: the entry says why, the email record keeps the whole text.
    let detail = detail.map(|d| d.chars().take(500).collect::<String>());
    if let Err(e) = store.add_suppression(project, &entry, reason, detail.as_deref(), Some(email), now).await {
        tracing::warn!(%project, %email, error = %e, "cannot add a refused address to the suppression list");
    }
}
