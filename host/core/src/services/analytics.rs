//! Analytics (docs/behaviour.md#activity-and-analytics): series per hour or day, campaigns ranked by
//! engagement, one campaign's figures, and the most frequent events. Every figure comes from the
//! counters the event dispatch keeps (`store/activity.rs`), never from reading emails or events.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;

use crate::context::Context;
use crate::domain::activity::{DAY_MS, HOUR_MS, METRICS, bucket, rate};
use crate::error::Error;

/// Most buckets of one series.
pub const MAX_BUCKETS: i64 = 366;
/// The metrics of a series when none are asked for.
pub const DEFAULT_METRICS: &[&str] = &["sent", "delivered", "opened", "clicked", "bounced"];

/// Bucket size of a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    Hour,
    Day,
}

impl Interval {
    pub fn parse(s: &str) -> Option<Interval> {
        match s {
            "hour" => Some(Interval::Hour),
            "day" => Some(Interval::Day),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Interval::Hour => "hour",
            Interval::Day => "day",
        }
    }

    fn ms(self) -> i64 {
        match self {
            Interval::Hour => HOUR_MS,
            Interval::Day => DAY_MS,
        }
    }
}

/// The metrics asked for (comma-separated, repeated or both): 400 naming an unknown one.
pub fn parse_metrics(asked: &[String]) -> Result<Vec<&'static str>, Error> {
    let mut out = Vec::new();
    for m in asked.iter().flat_map(|a| a.split(',')).map(str::trim).filter(|m| !m.is_empty()) {
        let Some(known) = METRICS.iter().find(|k| **k == m) else {
            return Err(Error::Invalid(format!("Unknown metric {m:?}; the metrics are {}", METRICS.join(", "))));
        };
        if !out.contains(known) {
            out.push(*known);
        }
    }
    Ok(if out.is_empty() { DEFAULT_METRICS.to_vec() } else { out })
}

/// One bucket of a series: its start and each metric's count.
pub struct Bucket {
    pub start: i64,
    pub values: Vec<(&'static str, i64)>,
}

/// Zero-filled UTC buckets from the one holding `from` up to `to` (exclusive); 400 when `from` is not
/// before `to` or there would be more than [`MAX_BUCKETS`].
pub async fn timeseries(
    st: &Context,
    project: &str,
    metrics: &[&'static str],
    interval: Interval,
    from: i64,
    to: i64,
) -> Result<Vec<Bucket>, Error> {
    if from >= to {
        return Err(Error::Invalid("from must be before to".into()));
    }
    let size = interval.ms();
    let first = bucket(from, size);
    let n = (to - first + size - 1) / size;
    if n > MAX_BUCKETS {
        return Err(Error::Invalid(format!(
            "{n} {} buckets asked; a series holds at most {MAX_BUCKETS} (narrow from/to or use interval=day)",
            interval.as_str()
        )));
    }
    let hours = st.store.hour_counts(project, first, to).await?;
    let mut out: Vec<Bucket> =
        (0..n).map(|i| Bucket { start: first + i * size, values: metrics.iter().map(|m| (*m, 0)).collect() }).collect();
    for (hour, counts) in hours {
        let i = ((hour - first) / size) as usize;
        if let Some(b) = out.get_mut(i) {
            for (m, v) in b.values.iter_mut() {
                *v += counts.get(*m).copied().unwrap_or(0);
            }
        }
    }
    Ok(out)
}

/// A campaign's first opens and first clicks over time: hourly buckets over its first 14 days, daily
/// after that; from the bucket of its send (or of its first engagement, when earlier) to the one holding
/// `now`, the last [`MAX_BUCKETS`] of them, zero-filled. Values `opened` and `clicked`.
pub async fn campaign_engagement(
    st: &Context,
    project: &str,
    campaign: &crate::store::campaigns::CampaignRow,
    now: i64,
) -> Result<(Interval, Vec<Bucket>), Error> {
    let began = campaign.sent_at.unwrap_or(campaign.created_at);
    let interval = if now - began <= 14 * DAY_MS { Interval::Hour } else { Interval::Day };
    let size = interval.ms();
    let rows = st.store.campaign_engagement(project, &campaign.id, size).await?;
    let last = now.div_euclid(size);
    let first = rows.first().map_or(began.div_euclid(size), |r| r.0.min(began.div_euclid(size)));
    let first = first.max(last - MAX_BUCKETS + 1);
    let mut out: Vec<Bucket> = (first..=last.max(first))
        .map(|b| Bucket { start: b * size, values: vec![("opened", 0), ("clicked", 0)] })
        .collect();
    for (b, opened, clicked) in rows {
        if let Some(x) = usize::try_from(b - first).ok().and_then(|i| out.get_mut(i)) {
            x.values = vec![("opened", opened), ("clicked", clicked)];
        }
    }
    Ok((interval, out))
}

/// One campaign's figures.
#[derive(Debug, Clone, Default)]
pub struct CampaignFigures {
    pub id: String,
    pub name: String,
    pub counts: HashMap<String, i64>,
}

impl CampaignFigures {
    pub fn get(&self, m: &str) -> i64 {
        self.counts.get(m).copied().unwrap_or(0)
    }

    /// A metric as a percentage of the emails sent.
    pub fn rate(&self, m: &str) -> f64 {
        rate(self.get(m), self.get("sent"))
    }
}

/// What campaigns are ranked by.
pub const RANKINGS: &[&str] = &["opens", "clicks", "openRate", "clickRate"];

/// The project's campaigns ranked by `metric` (unique opens or clicks, or their rates of the emails
/// sent), the best `limit`; campaigns deleted since are left out.
pub async fn top_campaigns(
    st: &Context,
    project: &str,
    metric: &str,
    limit: usize,
) -> Result<Vec<CampaignFigures>, Error> {
    if !RANKINGS.contains(&metric) {
        return Err(Error::Invalid(format!("metric must be one of {}, got {metric:?}", RANKINGS.join(", "))));
    }
    let stats = st.store.campaign_stat_counts(project, None).await?;
    let ids: Vec<String> = stats.keys().cloned().collect();
    let names = st.store.field_of("campaign", "name", project, &ids).await?;
    let mut all: Vec<CampaignFigures> = stats
        .into_iter()
        .filter_map(|(id, counts)| Some(CampaignFigures { name: names.get(&id)?.clone(), id, counts }))
        .collect();
    let score = |c: &CampaignFigures| -> f64 {
        match metric {
            "opens" => c.get("opened") as f64,
            "clicks" => c.get("clicked") as f64,
            "openRate" => c.rate("opened"),
            _ => c.rate("clicked"),
        }
    };
    all.sort_by(|a, b| score(b).total_cmp(&score(a)).then_with(|| a.id.cmp(&b.id)));
    all.truncate(limit);
    Ok(all)
}

/// One campaign's figures (404 when the project has no such campaign).
pub async fn campaign_stats(st: &Context, project: &str, campaign: &str) -> Result<CampaignFigures, Error> {
    let c = crate::services::campaigns::manage::get(st, project, campaign).await?;
    let mut stats = st.store.campaign_stat_counts(project, Some(campaign)).await?;
    Ok(CampaignFigures { id: c.id, name: c.name, counts: stats.remove(campaign).unwrap_or_default() })
}

/// The most frequent event names over the UTC days of `[from, to)`, the first `limit`.
pub async fn top_events(
    st: &Context,
    project: &str,
    from: i64,
    to: i64,
    limit: usize,
) -> Result<Vec<(String, i64)>, Error> {
    crate::services::activity::window(from, to)?;
    let mut names = st.store.event_day_counts(project, bucket(from, DAY_MS), to).await?;
    names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    names.truncate(limit);
    Ok(names)
}
