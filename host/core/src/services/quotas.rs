//! Ceilings the operator sets per project and per user (docs/security.md#quotas): projects a user owns,
//! a project's contacts, workflows and segments, and the contacts one tick of a SCHEDULE workflow
//! enrolls (stored uploads are `uploads.rs`'s). Past one, what would add to it is refused with 403
//! `QUOTA_EXCEEDED` naming the ceiling and its setting; what is there already keeps working.
//!
//! Each check counts when the request comes, so requests at the same moment can pass a ceiling by as
//! many as they are. Contacts are many and added on hot paths, so their count is kept per process for a
//! while (longer the farther the project is from its ceiling), and only a project at its ceiling pays a
//! read to learn whether a request's address is new.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::Quotas;
use crate::error::Error;
use crate::store::{Store, StoreError};

/// How long a project's contact count is used, by how far it is from the ceiling: far (more than
/// 10,000 to go), near, in the last 100 (counted for every request, so the ceiling holds exactly but for
/// requests at the same moment), and at the ceiling (only deletions move it).
const FAR_FRESH_MS: i64 = 300_000;
const NEAR_FRESH_MS: i64 = 10_000;
const AT_CEILING_FRESH_MS: i64 = 10_000;

fn fresh_ms(headroom: i64) -> i64 {
    match headroom {
        h if h <= 0 => AT_CEILING_FRESH_MS,
        h if h <= 100 => 0,
        h if h <= 10_000 => NEAR_FRESH_MS,
        _ => FAR_FRESH_MS,
    }
}

/// The ceilings, and the contact counts this process read.
pub struct Ceilings {
    pub limits: Quotas,
    /// Per project: its last count and the gate one count at a time passes.
    contacts: Mutex<HashMap<String, Arc<ContactCount>>>,
}

impl Ceilings {
    pub fn new(limits: Quotas) -> Ceilings {
        Ceilings { limits, contacts: Mutex::default() }
    }

    fn contact_count(&self, project: &str) -> Arc<ContactCount> {
        let mut map = self.contacts.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 10_000 && !map.contains_key(project) {
            map.clear();
        }
        map.entry(project.to_string()).or_default().clone()
    }
}

/// One project's contact count in this process. Counting walks every contact of the project, so one
/// count runs at a time: requests arriving meanwhile use the count there is when it is far from the
/// ceiling, and otherwise wait for the running one (docs/security.md#quotas).
#[derive(Default)]
struct ContactCount {
    /// When it was counted, how many there were, and how many counts this process finished.
    last: Mutex<Option<(i64, i64, u64)>>,
    counting: tokio::sync::Mutex<()>,
}

impl ContactCount {
    fn last(&self) -> Option<(i64, i64, u64)> {
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The count, from the last one while it is fresh for `limit`, else from `count` run by one caller
    /// at a time.
    async fn get<F, Fut>(&self, limit: i64, now: i64, count: F) -> Result<i64, StoreError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<i64, StoreError>>,
    {
        let last = self.last();
        if let Some((at, n, _)) = last
            && (0..fresh_ms(limit - n)).contains(&(now - at))
        {
            return Ok(n);
        }
        let _gate = match self.counting.try_lock() {
            Ok(gate) => gate,
            Err(_) => {
                // A count is on its way: far from the ceiling the last one serves until it lands.
                if let Some((_, n, _)) = last
                    && limit - n > 100
                {
                    return Ok(n);
                }
                let gate = self.counting.lock().await;
                let landed = self.last();
                if let Some((_, n, done)) = landed
                    && Some(done) != last.map(|l| l.2)
                {
                    return Ok(n);
                }
                gate
            }
        };
        let n = count().await?;
        let mut slot = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let done = slot.map_or(0, |l| l.2) + 1;
        *slot = Some((now, n, done));
        Ok(n)
    }
}

fn exceeded(quota: &'static str, limit: u64, setting: &'static str, what: &str) -> Error {
    Error::QuotaExceeded {
        quota,
        limit,
        setting,
        used: None,
        requested: None,
        message: format!("{what}: the most this server allows is {limit} ({setting})"),
    }
}

/// A ceiling on a count of what its owner has: which one, its setting, and what the count is of.
struct Counted {
    quota: &'static str,
    setting: &'static str,
    /// "You own" or "This project has", and what is counted.
    owner: &'static str,
    of: &'static str,
}

/// 403 when the owner's count (read only when there is a ceiling) has reached `limit` (0: none).
async fn room<F>(limit: u64, q: Counted, count: F) -> Result<(), Error>
where
    F: std::future::Future<Output = Result<i64, StoreError>>,
{
    if limit == 0 {
        return Ok(());
    }
    let n = count.await?.max(0);
    if n as u64 >= limit {
        return Err(exceeded(q.quota, limit, q.setting, &format!("{} {n} {}", q.owner, q.of)));
    }
    Ok(())
}

/// Before a user creates a project (the operator's command line is not held to it).
pub async fn room_for_project(store: &Store, c: &Ceilings, user: &str) -> Result<(), Error> {
    let q =
        Counted { quota: "projectsPerUser", setting: "HERALD_MAX_PROJECTS_PER_USER", owner: "You own", of: "projects" };
    room(c.limits.projects_per_user, q, store.count_owned_projects(user)).await
}

/// Before a project creates a workflow.
pub async fn room_for_workflow(store: &Store, c: &Ceilings, project: &str) -> Result<(), Error> {
    let q = Counted { quota: "workflows", setting: "HERALD_MAX_WORKFLOWS", owner: "This project has", of: "workflows" };
    room(c.limits.workflows, q, store.count_workflows(project)).await
}

/// Before a project creates a segment.
pub async fn room_for_segment(store: &Store, c: &Ceilings, project: &str) -> Result<(), Error> {
    let q = Counted { quota: "segments", setting: "HERALD_MAX_SEGMENTS", owner: "This project has", of: "segments" };
    room(c.limits.segments, q, store.count_segments(project)).await
}

/// The project's contact count, from this process's copy while it is fresh.
async fn contacts(store: &Store, c: &Ceilings, project: &str, now: i64) -> Result<i64, StoreError> {
    let limit = c.limits.contacts as i64;
    c.contact_count(project).get(limit, now, || store.count_contacts(project, None, None)).await
}

/// Before a request adds contacts with these (normalised) addresses: 403 when the project has reached
/// its contacts ceiling and one of them is not a contact yet.
pub async fn room_for_contacts(
    store: &Store,
    c: &Ceilings,
    project: &str,
    emails: &[String],
    now: i64,
) -> Result<(), Error> {
    let limit = c.limits.contacts;
    if limit == 0 || emails.is_empty() {
        return Ok(());
    }
    let n = contacts(store, c, project, now).await?;
    if (n as u64) < limit {
        return Ok(());
    }
    let known = store.existing_emails(project, emails).await?;
    if emails.iter().all(|e| known.contains(e)) {
        return Ok(());
    }
    Err(exceeded("contacts", limit, "HERALD_MAX_CONTACTS", &format!("This project has {n} contacts")))
}

/// How many of `wanted` new contacts a project may still add (an import's share).
pub async fn contacts_left(store: &Store, c: &Ceilings, project: &str, now: i64) -> Result<Option<u64>, StoreError> {
    let limit = c.limits.contacts;
    if limit == 0 {
        return Ok(None);
    }
    let n = contacts(store, c, project, now).await?.max(0) as u64;
    Ok(Some(limit.saturating_sub(n)))
}

/// The contacts a SCHEDULE tick may enroll at most (None: no ceiling), and the reason a tick with more
/// enrolls nobody.
pub fn schedule_audience(c: &Ceilings) -> Option<u64> {
    (c.limits.schedule_audience > 0).then_some(c.limits.schedule_audience)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// `requests` concurrent reads of `entry` at `now`, each with a count that takes 20 ms and finds
    /// `found`; returns what each read and how many counts ran.
    async fn concurrent(entry: &ContactCount, limit: i64, now: i64, found: i64, requests: usize) -> (Vec<i64>, usize) {
        let counts = AtomicUsize::new(0);
        let reads = (0..requests).map(|_| {
            entry.get(limit, now, || async {
                counts.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(found)
            })
        });
        let got = futures_util::future::join_all(reads).await;
        (got.into_iter().map(|r| r.expect("count")).collect(), counts.load(Ordering::SeqCst))
    }

    #[tokio::test]
    async fn requests_after_the_count_expires_run_one_count_and_use_the_last_meanwhile() {
        let entry = ContactCount::default();
        let (first, ran) = concurrent(&entry, 1_000_000, 0, 5_000, 200).await;
        assert_eq!(ran, 1, "the first requests share one count");
        assert!(first.iter().all(|&n| n == 5_000));
        // Within the far freshness nothing is counted.
        let (_, ran) = concurrent(&entry, 1_000_000, FAR_FRESH_MS - 1, 6_000, 50).await;
        assert_eq!(ran, 0);
        // Expired: one request counts; the others use the count there is instead of counting too.
        let (after, ran) = concurrent(&entry, 1_000_000, FAR_FRESH_MS, 6_000, 500).await;
        assert_eq!(ran, 1, "500 requests after expiry ran {ran} counts");
        assert_eq!(after.iter().filter(|&&n| n == 6_000).count(), 1);
        assert_eq!(after.iter().filter(|&&n| n == 5_000).count(), 499);
        assert_eq!(entry.last().map(|l| l.1), Some(6_000));
    }

    #[tokio::test]
    async fn near_the_ceiling_requests_wait_for_the_running_count_instead_of_the_last() {
        let entry = ContactCount::default();
        // 50 short of the ceiling: every request would count, but those arriving during a count wait
        // for it and use what it found.
        let (_, ran) = concurrent(&entry, 1_000, 0, 950, 1).await;
        assert_eq!(ran, 1);
        let (got, ran) = concurrent(&entry, 1_000, 1, 1_000, 100).await;
        assert_eq!(ran, 1, "100 requests near the ceiling ran {ran} counts");
        assert!(got.iter().all(|&n| n == 1_000), "{got:?}");
    }

    #[tokio::test]
    async fn a_failed_count_is_not_kept_and_the_next_request_counts_again() {
        let entry = ContactCount::default();
        let failed = entry.get(1_000, 0, || async { Err(StoreError::Busy("down".into())) }).await;
        assert!(failed.is_err());
        assert_eq!(entry.last(), None);
        assert_eq!(entry.get(1_000, 0, || async { Ok(7) }).await.expect("count"), 7);
    }
}
