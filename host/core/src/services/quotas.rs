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
use std::sync::Mutex;

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
    /// Per project: when its contacts were counted, and how many there were.
    contacts: Mutex<HashMap<String, (i64, i64)>>,
}

impl Ceilings {
    pub fn new(limits: Quotas) -> Ceilings {
        Ceilings { limits, contacts: Mutex::default() }
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
    let cached = c.contacts.lock().unwrap_or_else(|p| p.into_inner()).get(project).copied();
    if let Some((at, n)) = cached
        && (0..fresh_ms(limit - n)).contains(&(now - at))
    {
        return Ok(n);
    }
    let n = store.count_contacts(project, None, None).await?;
    let mut map = c.contacts.lock().unwrap_or_else(|p| p.into_inner());
    if map.len() > 10_000 {
        map.clear();
    }
    map.insert(project.to_string(), (now, n));
    Ok(n)
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
