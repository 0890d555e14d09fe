//! Time. The rest of the host reads "now" through a [`Clock`] so tests can control it and never sleep.
//! The clock types live in the plugin runtime (plugins read time through them too) and are re-exported
//! here; this module adds the date parsing the host needs.
//!
//! Must not import: salvo, surrealdb.

pub use herald_plugin_runtime::clock::{Clock, ManualClock, SharedClock, SystemClock, rfc3339, wall_now_ms};

use chrono::DateTime;

/// Parses an RFC 3339 date-time into milliseconds since the epoch.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(s).ok().map(|d| d.timestamp_millis())
}

/// Milliseconds since the epoch as an RFC 2822 date (mail headers).
pub fn rfc2822(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms).unwrap_or_default().to_rfc2822()
}

/// Whether `s` is a calendar date without a time (`2026-01-15`).
pub fn is_date_only(s: &str) -> bool {
    s.len() == 10 && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips() {
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.123Z"), Some(1_700_000_000_123));
        assert_eq!(parse_rfc3339(&rfc3339(1_700_000_000_123)), Some(1_700_000_000_123));
    }

    #[test]
    fn a_date_without_time_is_date_only() {
        assert!(is_date_only("2026-01-15"));
        assert!(!is_date_only("2026-01-15T10:00:00Z"));
        assert!(!is_date_only("2026-13-15"));
    }
}
