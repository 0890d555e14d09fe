//! The project's stored events as the API reads them: pages (with each contact's email), totals per name
//! and per day over a window, names, where a name is used, and deleting a name
//! (docs/behaviour.md#events).
//!
//! Must not import: salvo, surrealdb.

use std::collections::{BTreeMap, HashMap};

use crate::context::Context;
use crate::error::Error;
use crate::services::tallies;
use crate::store::events::{Event, EventQuery};
use crate::store::tallies::Scope;

const DAY_MS: i64 = 86_400_000;
/// Longest window of [`stats`], in days.
pub const MAX_WINDOW_DAYS: i64 = 366;

/// A page of events (the query's limit) with the email of each event's contact, and the number that
/// match (only when `count`).
pub async fn page(
    st: &Context,
    project: &str,
    q: &EventQuery,
    count: bool,
) -> Result<(Vec<Event>, HashMap<String, String>, i64), Error> {
    let rows = st.store.list_events(project, q).await?;
    let total = match (count, q.name.as_deref(), q.contact.as_deref()) {
        (false, _, _) => 0,
        (true, None, None) => tallies::count(st, project, Scope::Events).await?,
        (true, Some(name), None) => tallies::count(st, project, Scope::EventName(name)).await?,
        (true, name, contact) => st.store.count_events(project, name, contact).await?,
    };
    let mut ids: Vec<String> = rows.iter().map(|e| e.contact.clone()).collect();
    ids.sort_unstable();
    ids.dedup();
    let emails = st.store.contact_emails(project, &ids).await?;
    Ok((rows, emails, total))
}

/// Whether the contact exists in the project (its events are listed only then).
pub async fn contact_exists(st: &Context, project: &str, id: &str) -> Result<bool, Error> {
    Ok(st.store.contact(project, id).await?.is_some())
}

/// Totals of a window: every event, per name (most frequent first) and per UTC day (every day of the
/// window, zero-filled, as the day's first millisecond).
pub struct Stats {
    pub total: i64,
    pub by_name: Vec<(String, i64)>,
    pub by_day: Vec<(i64, i64)>,
}

/// Totals over `[from, to)`; 400 when the window is empty or longer than [`MAX_WINDOW_DAYS`].
pub async fn stats(st: &Context, project: &str, from: i64, to: i64) -> Result<Stats, Error> {
    if from >= to {
        return Err(Error::Invalid("from must be before to".into()));
    }
    if to - from > MAX_WINDOW_DAYS * DAY_MS {
        return Err(Error::Invalid("The window is at most 366 days".into()));
    }
    let rows = st.store.event_times(project, from, to).await?;
    let mut by_name: BTreeMap<String, i64> = BTreeMap::new();
    let mut by_day: BTreeMap<i64, i64> = BTreeMap::new();
    let mut day = from.div_euclid(DAY_MS);
    while day * DAY_MS < to {
        by_day.insert(day, 0);
        day += 1;
    }
    for (name, at) in &rows {
        *by_name.entry(name.clone()).or_default() += 1;
        *by_day.entry(at.div_euclid(DAY_MS)).or_default() += 1;
    }
    let mut by_name: Vec<(String, i64)> = by_name.into_iter().collect();
    by_name.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(Stats { total: rows.len() as i64, by_name, by_day: by_day.into_iter().map(|(d, n)| (d * DAY_MS, n)).collect() })
}

/// The start of a window of `days` (1 to 365) ending at `to`.
pub fn days_before(to: i64, days: i64) -> i64 {
    to - days.clamp(1, 365) * DAY_MS
}

/// Most names [`names`] lists.
pub const MAX_NAMES: usize = 1_000;

/// Distinct event names (at most [`MAX_NAMES`]) with their count and last time, most frequent first:
/// one index entry per name and each name's tally, never a walk over every event.
pub async fn names(st: &Context, project: &str) -> Result<Vec<(String, i64, i64)>, Error> {
    let mut rows = Vec::new();
    let mut after = String::new();
    while rows.len() < MAX_NAMES {
        let Some((name, last)) = st.store.event_name_after(project, &after).await? else {
            break;
        };
        let n = tallies::count(st, project, Scope::EventName(&name)).await?;
        after = name.clone();
        rows.push((name, n, last));
    }
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(rows)
}

/// Where an event name is used.
pub struct EventUsage {
    pub count: i64,
    /// (id, name) of the segments whose condition names it
    pub segments: Vec<(String, String)>,
    /// (id, name) of the workflows it triggers or whose steps wait for or ask about it
    pub workflows: Vec<(String, String)>,
}

/// How many events have this name, and the segments and workflows that name it.
pub async fn usage(st: &Context, project: &str, name: &str) -> Result<EventUsage, Error> {
    let count = tallies::count(st, project, Scope::EventName(name)).await?;
    let segments = st.store.segments_using_event(project, name).await?;
    let workflows = st.store.workflows_using_event(project, name).await?;
    Ok(EventUsage { count, segments, workflows })
}

/// Deletes every event with this name; returns how many.
pub async fn delete_named(st: &Context, project: &str, name: &str) -> Result<i64, Error> {
    Ok(st.store.delete_events_named(project, name).await?)
}
