//! Billing rules (docs/behaviour.md#billing): the categories emails are counted in, the calendar month
//! they are counted by (UTC), and limits (None: unlimited).

use chrono::{Datelike, TimeZone, Utc};
use serde::{Deserialize, Serialize};

/// What an email is counted as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// `/v1/send`
    Transactional,
    /// campaign emails (and a campaign's test sends)
    Campaigns,
    /// emails of workflow SEND_EMAIL steps
    Workflows,
    /// inbound mail (not received by Herald yet: always 0)
    Inbound,
}

pub const CATEGORIES: [Category; 4] =
    [Category::Transactional, Category::Campaigns, Category::Workflows, Category::Inbound];

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Transactional => "transactional",
            Category::Campaigns => "campaigns",
            Category::Workflows => "workflows",
            Category::Inbound => "inbound",
        }
    }

    pub fn parse(s: &str) -> Option<Category> {
        CATEGORIES.into_iter().find(|c| c.as_str() == s)
    }
}

/// Largest limit accepted (a billion emails a month).
pub const MAX_LIMIT: i64 = 1_000_000_000;

/// A project's monthly limits per category.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    #[serde(default)]
    pub transactional: Option<i64>,
    #[serde(default)]
    pub campaigns: Option<i64>,
    #[serde(default)]
    pub workflows: Option<i64>,
    #[serde(default)]
    pub inbound: Option<i64>,
}

impl Limits {
    pub fn get(&self, c: Category) -> Option<i64> {
        match c {
            Category::Transactional => self.transactional,
            Category::Campaigns => self.campaigns,
            Category::Workflows => self.workflows,
            Category::Inbound => self.inbound,
        }
    }

    pub fn set(&mut self, c: Category, v: Option<i64>) {
        match c {
            Category::Transactional => self.transactional = v,
            Category::Campaigns => self.campaigns = v,
            Category::Workflows => self.workflows = v,
            Category::Inbound => self.inbound = v,
        }
    }
}

/// The month a moment falls in, as counters key it: `2026-11`.
pub fn month_key(at_ms: i64) -> String {
    let t = Utc.timestamp_millis_opt(at_ms).single().unwrap_or_default();
    format!("{:04}-{:02}", t.year(), t.month())
}

/// The first millisecond of the month `at_ms` falls in, and of the next one.
pub fn period(at_ms: i64) -> (i64, i64) {
    let t = Utc.timestamp_millis_opt(at_ms).single().unwrap_or_default();
    let start = Utc.with_ymd_and_hms(t.year(), t.month(), 1, 0, 0, 0).single().unwrap_or_default();
    let (y, m) = if t.month() == 12 { (t.year() + 1, 1) } else { (t.year(), t.month() + 1) };
    let end = Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0).single().unwrap_or_default();
    (start.timestamp_millis(), end.timestamp_millis())
}

/// How many of `wanted` emails fit under `limit` when `used` were accepted this month (all of them
/// without a limit).
pub fn allowance(limit: Option<i64>, used: i64, wanted: usize) -> usize {
    match limit {
        None => wanted,
        Some(l) => (l - used).clamp(0, wanted as i64) as usize,
    }
}

/// `used` as a percentage of `limit`, two decimals (None without a limit; 100 for a limit of 0).
pub fn percent(used: i64, limit: Option<i64>) -> Option<f64> {
    let l = limit?;
    if l <= 0 {
        return Some(100.0);
    }
    Some(((used as f64) * 10_000.0 / (l as f64)).round() / 100.0)
}

/// Why an email was not sent when its category's limit was reached.
pub fn exceeded_reason(c: Category, limit: i64) -> String {
    format!("BILLING_LIMIT_EXCEEDED: the project's monthly {} limit of {limit} emails is reached", c.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_are_utc_calendar_months() {
        // 2026-11-30T23:59:59.999Z and the next millisecond.
        let last = Utc.with_ymd_and_hms(2026, 11, 30, 23, 59, 59).unwrap().timestamp_millis() + 999;
        assert_eq!(month_key(last), "2026-11");
        assert_eq!(month_key(last + 1), "2026-12");
        let (start, end) = period(last);
        assert_eq!(start, Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap().timestamp_millis());
        assert_eq!(end, last + 1);
        let (s, e) = period(Utc.with_ymd_and_hms(2026, 12, 15, 8, 0, 0).unwrap().timestamp_millis());
        assert_eq!((month_key(s), month_key(e)), ("2026-12".to_string(), "2027-01".to_string()));
    }

    #[test]
    fn allowance_and_percent() {
        assert_eq!(allowance(None, 1_000, 50), 50);
        assert_eq!(allowance(Some(10), 7, 5), 3);
        assert_eq!(allowance(Some(10), 12, 5), 0);
        assert_eq!(allowance(Some(0), 0, 5), 0);
        assert_eq!(percent(1, Some(3)), Some(33.33));
        assert_eq!(percent(5, None), None);
        assert_eq!(percent(0, Some(0)), Some(100.0));
        assert_eq!(Category::parse("campaigns"), Some(Category::Campaigns));
        assert_eq!(Category::parse("sms"), None);
    }
}
