//! The activity feed's types and the analytics counters (docs/behaviour.md#activity-and-analytics): which
//! stored event or milestone each activity type comes from, and what each dispatched event adds to the
//! counters of its project's hour, its campaign and its name's day.
//!
//! Must not import: salvo, surrealdb, tokio.

use std::collections::BTreeMap;

use serde_json::Value;

/// Where the items of one activity type are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Stored events of this name.
    Event(&'static str),
    /// Campaign milestones (`milestone` rows of this type).
    Milestone,
}

/// Every activity type with the source of its items.
pub const TYPES: &[(&str, Source)] = &[
    ("email.sent", Source::Event("email.sent")),
    ("email.delivered", Source::Event("email.delivery")),
    ("email.opened", Source::Event("email.open")),
    ("email.clicked", Source::Event("email.click")),
    ("email.bounced", Source::Event("email.bounce")),
    ("email.complained", Source::Event("email.complaint")),
    ("email.failed", Source::Event("email.failed")),
    ("email.deferred", Source::Event("email.deferred")),
    ("email.received", Source::Event("email.received")),
    ("contact.subscribed", Source::Event("contact.subscribed")),
    ("contact.unsubscribed", Source::Event("contact.unsubscribed")),
    ("campaign.scheduled", Source::Milestone),
    ("campaign.sending", Source::Milestone),
    ("campaign.sent", Source::Milestone),
    ("campaign.cancelled", Source::Milestone),
    ("project.suspended", Source::Milestone),
    ("project.unsuspended", Source::Milestone),
    ("workflow.started", Source::Event("workflow.started")),
    ("workflow.completed", Source::Event("workflow.completed")),
    ("workflow.exited", Source::Event("workflow.exited")),
    ("workflow.failed", Source::Event("workflow.failed")),
];

/// The source of an activity type, None for a name that is not one.
pub fn source(kind: &str) -> Option<Source> {
    TYPES.iter().find(|(t, _)| *t == kind).map(|(_, s)| *s)
}

/// The activity type of a stored event's name (None: the event is not activity, e.g. a tracked one).
pub fn type_of_event(name: &str) -> Option<&'static str> {
    TYPES.iter().find(|(_, s)| matches!(s, Source::Event(n) if *n == name)).map(|(t, _)| *t)
}

/// The counters of `stat_hour` and `stat_campaign` (the order of the migration's fields).
pub const METRICS: &[&str] = &[
    "sent",
    "delivered",
    "opened",
    "opens",
    "clicked",
    "clicks",
    "bounced",
    "complained",
    "failed",
    "subscribed",
    "unsubscribed",
];

pub const HOUR_MS: i64 = 3_600_000;
pub const DAY_MS: i64 = 24 * HOUR_MS;

/// The start of the UTC hour (or day, with `DAY_MS`) holding `ms`.
pub fn bucket(ms: i64, size: i64) -> i64 {
    ms.div_euclid(size) * size
}

/// What one event adds to the counters: the metrics it counts in.
pub fn metrics_of(name: &str, data: &serde_json::Map<String, Value>) -> Vec<&'static str> {
    let first = data.get("first").and_then(Value::as_bool) == Some(true);
    match name {
        "email.sent" => vec!["sent"],
        "email.delivery" => vec!["delivered"],
        "email.open" if first => vec!["opens", "opened"],
        "email.open" => vec!["opens"],
        "email.click" if first => vec!["clicks", "clicked"],
        "email.click" => vec!["clicks"],
        // A soft bounce (a notification that says it is not permanent) changes nothing.
        "email.bounce" if data.get("permanent").and_then(Value::as_bool) == Some(false) => vec![],
        "email.bounce" => vec!["bounced"],
        "email.complaint" => vec!["complained"],
        "email.failed" => vec!["failed"],
        "contact.subscribed" => vec!["subscribed"],
        "contact.unsubscribed" => vec!["unsubscribed"],
        _ => vec![],
    }
}

/// The counter changes of a batch of dispatched events, summed per row.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tally {
    /// (project, hour start) → metric → count
    pub hours: BTreeMap<(String, i64), BTreeMap<&'static str, i64>>,
    /// (project, campaign) → metric → count
    pub campaigns: BTreeMap<(String, String), BTreeMap<&'static str, i64>>,
    /// (project, day start, event name) → count
    pub names: BTreeMap<(String, i64, String), i64>,
}

impl Tally {
    /// Adds one event.
    pub fn add(&mut self, project: &str, name: &str, data: &serde_json::Map<String, Value>, at: i64) {
        *self.names.entry((project.to_string(), bucket(at, DAY_MS), name.to_string())).or_default() += 1;
        let metrics = metrics_of(name, data);
        if metrics.is_empty() {
            return;
        }
        let hour = self.hours.entry((project.to_string(), bucket(at, HOUR_MS))).or_default();
        for m in &metrics {
            *hour.entry(m).or_default() += 1;
        }
        if let Some(c) = data.get("campaignId").and_then(Value::as_str) {
            let camp = self.campaigns.entry((project.to_string(), c.to_string())).or_default();
            for m in &metrics {
                *camp.entry(m).or_default() += 1;
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// A percentage of `of`, two decimals; 0 when `of` is 0.
pub fn rate(n: i64, of: i64) -> f64 {
    if of <= 0 {
        return 0.0;
    }
    (n as f64 * 10_000.0 / of as f64).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn data(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn every_activity_type_has_one_source_and_events_map_back() {
        for (t, s) in TYPES {
            assert_eq!(source(t), Some(*s));
            if let Source::Event(name) = s {
                assert_eq!(type_of_event(name), Some(*t));
            }
        }
        assert_eq!(type_of_event("signup"), None);
    }

    #[test]
    fn a_batch_sums_per_hour_campaign_and_day_and_first_opens_count_once() {
        let mut t = Tally::default();
        let h = 5 * HOUR_MS;
        t.add("p", "email.sent", &data(json!({"campaignId": "c"})), h + 10);
        t.add("p", "email.open", &data(json!({"campaignId": "c", "first": true})), h + 20);
        t.add("p", "email.open", &data(json!({"campaignId": "c"})), h + HOUR_MS + 1);
        t.add("p", "email.bounce", &data(json!({"permanent": false})), h);
        t.add("p", "email.bounce", &data(json!({})), h);
        t.add("p", "signup", &data(json!({})), h);
        t.add("q", "email.sent", &data(json!({})), h);
        let hour = &t.hours[&("p".to_string(), h)];
        assert_eq!((hour["sent"], hour["opens"], hour["opened"], hour["bounced"]), (1, 1, 1, 1));
        assert_eq!(t.hours[&("p".to_string(), h + HOUR_MS)].get("opened"), None);
        let camp = &t.campaigns[&("p".to_string(), "c".to_string())];
        assert_eq!((camp["sent"], camp["opens"], camp["opened"]), (1, 2, 1));
        assert_eq!(t.names[&("p".to_string(), 0, "signup".to_string())], 1);
        assert_eq!(t.names[&("p".to_string(), 0, "email.bounce".to_string())], 2);
        assert_eq!(t.hours[&("q".to_string(), h)]["sent"], 1);
    }

    #[test]
    fn buckets_and_rates() {
        assert_eq!(bucket(HOUR_MS - 1, HOUR_MS), 0);
        assert_eq!(bucket(-1, HOUR_MS), -HOUR_MS);
        assert_eq!(bucket(DAY_MS + 5, DAY_MS), DAY_MS);
        assert_eq!(rate(1, 3), 33.33);
        assert_eq!(rate(5, 0), 0.0);
    }
}
