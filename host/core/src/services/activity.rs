//! The activity feed (docs/behaviour.md#activity-and-analytics): email, subscription and workflow events
//! and campaign milestones, newest first, each with the contact, email, campaign and workflow it names;
//! counts per type over a window, a live count, the types that occur, and what is coming up.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::context::Context;
use crate::domain::activity::{DAY_MS, Source, TYPES, bucket, source};
use crate::domain::status::CampaignStatus;
use crate::error::Error;
use crate::store::activity::{FeedRow, FeedSource, SCAN, Start};

/// Longest window of [`stats`], in days.
pub const MAX_WINDOW_DAYS: i64 = 366;
/// Most items a live count counts per source (`/activity/recent-count` says when it stopped there).
pub const RECENT_CAP: usize = 10_000;

/// What a feed page asks for.
#[derive(Debug, Clone, Default)]
pub struct FeedQuery {
    /// Activity types (empty: all).
    pub types: Vec<String>,
    pub contact: Option<String>,
    pub campaign: Option<String>,
    /// The previous page's last item (time, id).
    pub cursor: Option<(i64, String)>,
    /// Inclusive start and exclusive end.
    pub from: Option<i64>,
    pub to: Option<i64>,
    pub limit: usize,
}

/// One item of the feed, with what it names looked up.
#[derive(Debug, Clone)]
pub struct Item {
    pub id: String,
    pub kind: &'static str,
    pub at: i64,
    /// (id, email: None once the contact is deleted)
    pub contact: Option<(String, Option<String>)>,
    pub email: Option<(String, Option<String>)>,
    pub campaign: Option<(String, Option<String>)>,
    pub workflow: Option<(String, Option<String>)>,
    pub data: Map<String, Value>,
}

/// A page of the feed and the cursor of the next (None at the end).
pub struct Page {
    pub items: Vec<Item>,
    pub next: Option<(i64, String)>,
}

/// The activity types asked for: 400 naming an unknown one; none asked is every type.
pub fn resolve_types(asked: &[String]) -> Result<Vec<&'static str>, Error> {
    if asked.is_empty() {
        return Ok(TYPES.iter().map(|(t, _)| *t).collect());
    }
    let mut out = Vec::new();
    for a in asked {
        match TYPES.iter().find(|(t, _)| t == a) {
            Some((t, _)) if !out.contains(t) => out.push(*t),
            Some(_) => {}
            None => {
                let known: Vec<&str> = TYPES.iter().map(|(t, _)| *t).collect();
                return Err(Error::Invalid(format!("Unknown activity type {a:?}; the types are {}", known.join(", "))));
            }
        }
    }
    Ok(out)
}

/// The event names and milestone types behind activity types.
fn split(types: &[&'static str]) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut names = Vec::new();
    let mut milestones = Vec::new();
    for t in types {
        match source(t) {
            Some(Source::Event(n)) => names.push(n),
            Some(Source::Milestone) => milestones.push(*t),
            None => {}
        }
    }
    (names, milestones)
}

/// The activity type of a feed row.
fn kind_of(row: &FeedRow) -> Option<&'static str> {
    crate::domain::activity::type_of_event(&row.name)
        .or_else(|| TYPES.iter().find(|(t, s)| *s == Source::Milestone && *t == row.name).map(|(t, _)| *t))
}

fn campaign_of(row: &FeedRow) -> Option<String> {
    row.campaign.clone().or_else(|| row.data.get("campaignId").and_then(Value::as_str).map(str::to_string))
}

/// One page of the feed. Each source is read newest first through its index, `limit + 1` rows at most;
/// with a contact or campaign filter each reads at most [`SCAN`] rows and filters them here, and when a
/// source stops there the page ends at that point (fewer items than `limit`, and a cursor to go on).
pub async fn feed(st: &Context, project: &str, q: &FeedQuery) -> Result<Page, Error> {
    let types = resolve_types(&q.types)?;
    let (names, milestones) = split(&types);
    let all_milestones = milestones.len() == TYPES.iter().filter(|(_, s)| *s == Source::Milestone).count();
    let filtered = q.contact.is_some() || q.campaign.is_some() || (!milestones.is_empty() && !all_milestones);
    let mut sources = Vec::new();
    match &q.contact {
        Some(c) if !names.is_empty() => sources.push(FeedSource::Contact(c.clone())),
        Some(_) => {}
        None => sources.extend(names.iter().map(|n| FeedSource::Name(n.to_string()))),
    }
    // Campaign milestones name no contact.
    if q.contact.is_none() && !milestones.is_empty() {
        sources.push(FeedSource::Milestones);
    }
    let top = q.to.map(|t| t - 1).unwrap_or(i64::MAX);
    let start = match &q.cursor {
        Some((t, id)) if *t <= top => Start::Below(*t, id.clone()),
        _ => Start::AtOrBefore(top),
    };
    let read = if filtered { SCAN } else { q.limit + 1 };
    let answered = if sources.is_empty() { vec![] } else { st.store.feed(project, &sources, &start, read).await? };
    let from = q.from.unwrap_or(i64::MIN);
    let mut rows: Vec<FeedRow> = Vec::new();
    // The newest point where a filtered source stopped reading: older rows may be missing there.
    let mut horizon: Option<(i64, String)> = None;
    for got in answered {
        if filtered
            && got.full
            && let Some(last) = got.rows.last()
            && last.at >= from
        {
            let key = (last.at, last.id.clone());
            if horizon.as_ref().is_none_or(|h| key > *h) {
                horizon = Some(key);
            }
        }
        rows.extend(got.rows.into_iter().filter(|r| {
            let Some(kind) = kind_of(r) else { return false };
            types.contains(&kind)
                && r.at >= from
                && r.at <= top
                && q.campaign.as_ref().is_none_or(|c| campaign_of(r).as_ref() == Some(c))
        }));
    }
    rows.sort_by(|a, b| b.key().cmp(&a.key()));
    if let Some((t, id)) = &horizon {
        rows.retain(|r| r.key() >= (*t, id.as_str()));
    }
    let more = rows.len() > q.limit;
    rows.truncate(q.limit);
    let next = match (more, rows.last(), horizon) {
        (true, Some(last), _) => Some((last.at, last.id.clone())),
        (false, _, Some(h)) => Some(h),
        _ => None,
    };
    Ok(Page { items: enrich(st, project, rows).await?, next })
}

/// Looks up what the rows name (one batch per kind of record) and makes them items.
async fn enrich(st: &Context, project: &str, rows: Vec<FeedRow>) -> Result<Vec<Item>, Error> {
    let ids = |f: &dyn Fn(&FeedRow) -> Option<String>| -> Vec<String> {
        let mut v: Vec<String> = rows.iter().filter_map(f).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let data_id = |key: &'static str| move |r: &FeedRow| r.data.get(key).and_then(Value::as_str).map(str::to_string);
    let contacts = st.store.contact_emails(project, &ids(&|r| r.contact.clone().filter(|c| !c.is_empty()))).await?;
    let emails = st.store.field_of("email", "subject", project, &ids(&data_id("emailId"))).await?;
    let campaigns = st.store.field_of("campaign", "name", project, &ids(&campaign_of)).await?;
    let workflows = st.store.field_of("workflow", "name", project, &ids(&data_id("workflowId"))).await?;
    let named = |id: Option<String>, names: &HashMap<String, String>| id.map(|i| (i.clone(), names.get(&i).cloned()));
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let kind = kind_of(&r)?;
            Some(Item {
                id: r.id.clone(),
                kind,
                at: r.at,
                contact: named(r.contact.clone().filter(|c| !c.is_empty()), &contacts),
                email: named(data_id("emailId")(&r), &emails),
                campaign: named(campaign_of(&r), &campaigns),
                workflow: named(data_id("workflowId")(&r), &workflows),
                data: r.data,
            })
        })
        .collect())
}

/// Items per activity type in `[from, to)`: event types from the daily counters (whole UTC days: the
/// window starts at the start of `from`'s day), milestones from their rows. Every type, zeros too.
pub async fn stats(st: &Context, project: &str, from: i64, to: i64) -> Result<Vec<(&'static str, i64)>, Error> {
    window(from, to)?;
    let by_name: HashMap<String, i64> =
        st.store.event_day_counts(project, bucket(from, DAY_MS), to).await?.into_iter().collect();
    let milestones: HashMap<String, i64> = st.store.milestone_counts(project, from, to).await?.into_iter().collect();
    Ok(TYPES
        .iter()
        .map(|(t, s)| {
            let n = match s {
                Source::Event(name) => by_name.get(*name).copied().unwrap_or(0),
                Source::Milestone => milestones.get(*t).copied().unwrap_or(0),
            };
            (*t, n)
        })
        .collect())
}

/// 400 unless `from` is before `to` and the window is at most [`MAX_WINDOW_DAYS`] long.
pub fn window(from: i64, to: i64) -> Result<(), Error> {
    if from >= to {
        return Err(Error::Invalid("from must be before to".into()));
    }
    if to - from > MAX_WINDOW_DAYS * DAY_MS {
        return Err(Error::Invalid(format!("The window is at most {MAX_WINDOW_DAYS} days")));
    }
    Ok(())
}

/// Activity at or after `since`: the count, and whether it stopped at [`RECENT_CAP`] for some type.
pub async fn recent_count(st: &Context, project: &str, since: i64) -> Result<(i64, bool), Error> {
    let types: Vec<&str> = TYPES.iter().map(|(t, _)| *t).collect();
    let (names, milestones) = split(&types);
    let n = st.store.activity_since(project, &names, &milestones, since, RECENT_CAP + 1).await?;
    let capped = n > RECENT_CAP as i64;
    Ok((n.min(RECENT_CAP as i64), capped))
}

/// The activity types the project has any item of, in the order of [`TYPES`].
pub async fn types_present(st: &Context, project: &str) -> Result<Vec<&'static str>, Error> {
    let all: Vec<&str> = TYPES.iter().map(|(t, _)| *t).collect();
    let (names, milestones) = split(&all);
    let found = st.store.activity_types_present(project, &names, &milestones).await?;
    Ok(TYPES
        .iter()
        .filter(|(t, s)| match s {
            Source::Event(n) => found.iter().any(|f| f == n),
            Source::Milestone => found.iter().any(|f| f == t),
        })
        .map(|(t, _)| *t)
        .collect())
}

/// A scheduled campaign: id, name, when, and how many contacts its audience holds now (None when the
/// audience cannot be evaluated, say its segment is gone).
pub struct UpcomingCampaign {
    pub id: String,
    pub name: String,
    pub at: i64,
    pub audience: Option<i64>,
}

/// A workflow with waiting executions: how many, and the earliest time one of them resumes (a delay's
/// end or a wait's timeout; None when they all wait for an event without a timeout).
pub struct UpcomingWorkflow {
    pub id: String,
    pub name: String,
    pub waiting: i64,
    pub next_at: Option<i64>,
}

/// Scheduled campaigns, soonest first, and workflows with waiting executions, soonest resume first.
pub async fn upcoming(
    st: &Context,
    segments: &crate::services::segments::Engine,
    project: &str,
) -> Result<(Vec<UpcomingCampaign>, Vec<UpcomingWorkflow>), Error> {
    let now = st.clock.now_ms();
    let mut campaigns = Vec::new();
    for c in st.store.unsent_campaigns(project).await? {
        if c.status != CampaignStatus::Scheduled {
            continue;
        }
        let audience = audience_size(segments, &c, now).await.ok();
        campaigns.push(UpcomingCampaign { id: c.id, name: c.name, at: c.scheduled_for.unwrap_or(now), audience });
    }
    campaigns.sort_by_key(|c| c.at);
    let mut flows: Vec<UpcomingWorkflow> = st
        .store
        .waiting_executions(project)
        .await?
        .into_iter()
        .map(|w| UpcomingWorkflow {
            next_at: w.outputs.iter().filter_map(|o| resume_at(o)).min(),
            id: w.workflow,
            name: w.name,
            waiting: w.waiting,
        })
        .collect();
    flows.sort_by_key(|w| (w.next_at.is_none(), w.next_at));
    Ok((campaigns, flows))
}

/// When a waiting step run resumes by itself: its output's `until` (a delay) or `timeoutAt` (a wait).
fn resume_at(output: &str) -> Option<i64> {
    let v: Value = serde_json::from_str(output).ok()?;
    let at = v.get("until").or_else(|| v.get("timeoutAt"))?.as_str()?;
    crate::infra::clock::parse_rfc3339(at)
}

async fn audience_size(
    segments: &crate::services::segments::Engine,
    c: &crate::store::campaigns::CampaignRow,
    now: i64,
) -> Result<i64, Error> {
    let tree =
        crate::domain::campaigns::audience_tree(&c.audience_type, c.segment.as_deref(), c.audience_condition.as_ref());
    let tree = segments.parse(&tree)?;
    let compiled = segments.compile(&c.project, &tree, now).await?;
    Ok(segments.count(&c.project, &compiled).await?)
}
