//! Campaign rules (docs/behaviour.md#campaigns): statuses, which actions each allows, the date forms
//! `scheduledFor` accepts, the audience as a condition tree, the id of a campaign email, and the rates of
//! the stats.
//!
//! Must not import: salvo, surrealdb, tokio.

use chrono::{DateTime, NaiveDate, NaiveDateTime};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub use super::status::CampaignStatus;
pub const AUDIENCES: &[&str] = &["ALL", "SEGMENT", "FILTERED"];

/// What a user can ask of a campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// PUT: DRAFT or SCHEDULED.
    Replace,
    /// DELETE: anything but SCHEDULED or SENDING.
    Delete,
    /// send, now or scheduled: DRAFT only.
    Send,
    /// cancel: SCHEDULED or SENDING.
    Cancel,
    /// resend-failed: SENDING or SENT (docs/delivery.md#resending-what-failed).
    ResendFailed,
}

/// Whether `action` is allowed in `status`; otherwise the reason (a 409's message).
pub fn allowed(action: Action, status: CampaignStatus) -> Result<(), String> {
    use CampaignStatus::{Draft, Scheduled, Sending, Sent};
    let ok = match action {
        Action::Replace => matches!(status, Draft | Scheduled),
        Action::Delete => !matches!(status, Scheduled | Sending),
        Action::Send => status == Draft,
        Action::Cancel => matches!(status, Scheduled | Sending),
        Action::ResendFailed => matches!(status, Sending | Sent),
    };
    if ok {
        return Ok(());
    }
    Err(match action {
        Action::Replace => format!("the campaign is {status}; only DRAFT or SCHEDULED campaigns can be changed"),
        Action::Delete => format!("the campaign is {status}; cancel it before deleting it"),
        Action::Send => format!("the campaign is {status}; only a DRAFT campaign can be sent"),
        Action::Cancel => format!("the campaign is {status}; only SCHEDULED or SENDING campaigns can be cancelled"),
        Action::ResendFailed => {
            format!("the campaign is {status}; only a SENDING or SENT campaign's failed emails can be sent again")
        }
    })
}

/// `scheduledFor`: RFC 3339, RFC 2822, `YYYY-MM-DD[ T]HH:MM[:SS[.fff]]` (UTC), `YYYY-MM-DD` (midnight
/// UTC), or milliseconds since the epoch. None when nothing parses.
pub fn parse_when(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().filter(|ms| *ms >= 0),
        Value::String(s) => {
            let s = s.trim();
            if let Ok(d) = DateTime::parse_from_rfc3339(s) {
                return Some(d.timestamp_millis());
            }
            if let Ok(d) = DateTime::parse_from_rfc2822(s) {
                return Some(d.timestamp_millis());
            }
            for f in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"] {
                if let Ok(d) = NaiveDateTime::parse_from_str(s, f) {
                    return Some(d.and_utc().timestamp_millis());
                }
            }
            if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
                return d.and_hms_opt(0, 0, 0).map(|d| d.and_utc().timestamp_millis());
            }
            if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
                return s.parse::<i64>().ok();
            }
            None
        }
        _ => None,
    }
}

/// The audience of a campaign as one condition tree: always subscribed contacts only,
/// members of the segment for SEGMENT, matching the condition for FILTERED.
pub fn audience_tree(audience_type: &str, segment: Option<&str>, condition: Option<&Value>) -> Value {
    let mut filters = vec![json!({ "field": "subscribed", "operator": "equals", "value": true })];
    let mut group = json!({});
    match audience_type {
        "SEGMENT" => {
            if let Some(s) = segment {
                filters.push(json!({ "field": format!("segment.{s}"), "operator": "memberOfSegment" }));
            }
        }
        "FILTERED" => {
            if let Some(c) = condition {
                group["conditions"] = c.clone();
            }
        }
        _ => {}
    }
    group["filters"] = Value::Array(filters);
    json!({ "logic": "AND", "groups": [group] })
}

/// The email record id of a campaign's email to a contact: derived from both, so the record itself is
/// the unique (campaign, contact) key and a second write of it fails.
pub fn email_id(campaign: &str, contact: &str) -> String {
    let digest = Sha256::digest(format!("herald-campaign-email:{campaign}:{contact}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid().to_string()
}

/// `part` as a percentage of `of`, two decimals; 0 when `of` is 0.
pub fn rate(part: i64, of: i64) -> f64 {
    if of <= 0 {
        return 0.0;
    }
    ((part as f64) * 10_000.0 / (of as f64)).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_by_status() {
        use CampaignStatus::*;
        let table = [
            (Action::Replace, [Draft, Scheduled].as_slice()),
            (Action::Delete, [Draft, Sent, Cancelled].as_slice()),
            (Action::Send, [Draft].as_slice()),
            (Action::Cancel, [Scheduled, Sending].as_slice()),
        ];
        for (action, ok) in table {
            for s in CampaignStatus::ALL {
                assert_eq!(allowed(action, *s).is_ok(), ok.contains(s), "{action:?} in {s}");
            }
        }
        assert!(allowed(Action::Send, Sent).unwrap_err().contains("SENT"));
    }

    #[test]
    fn scheduled_for_forms() {
        let day = 1_893_456_000_000; // 2030-01-01T00:00:00Z
        let cases = [
            (json!("2030-01-01T00:00:00Z"), Some(day)),
            (json!("2030-01-01T01:00:00+01:00"), Some(day)),
            (json!("2030-01-01T00:00:00.250Z"), Some(day + 250)),
            (json!("Tue, 01 Jan 2030 00:00:00 +0000"), Some(day)),
            (json!("2030-01-01 00:00:00"), Some(day)),
            (json!("2030-01-01T00:00"), Some(day)),
            (json!("2030-01-01 00:30"), Some(day + 1_800_000)),
            (json!("2030-01-01"), Some(day)),
            (json!(day), Some(day)),
            (json!(day.to_string()), Some(day)),
            (json!("next tuesday"), None),
            (json!("2030-13-01"), None),
            (json!(""), None),
            (json!(true), None),
            (json!(-5), None),
        ];
        for (v, want) in cases {
            assert_eq!(parse_when(&v), want, "{v}");
        }
    }

    #[test]
    fn audiences_always_require_subscribed() {
        let all = audience_tree("ALL", None, None);
        assert_eq!(all["groups"][0]["filters"][0], json!({"field": "subscribed", "operator": "equals", "value": true}));
        assert_eq!(all["groups"][0]["filters"].as_array().unwrap().len(), 1);
        let seg = audience_tree("SEGMENT", Some("s1"), None);
        assert_eq!(seg["groups"][0]["filters"][1]["field"], "segment.s1");
        let cond = json!({"logic": "OR", "groups": [{"filters": [{"field": "data.plan", "operator": "exists"}]}]});
        let f = audience_tree("FILTERED", None, Some(&cond));
        assert_eq!(f["groups"][0]["conditions"], cond);
        assert_eq!(f["logic"], "AND");
    }

    #[test]
    fn email_ids_are_stable_per_pair_and_distinct_across_pairs() {
        assert_eq!(email_id("c1", "a"), email_id("c1", "a"));
        assert_ne!(email_id("c1", "a"), email_id("c1", "b"));
        assert_ne!(email_id("c1", "a"), email_id("c2", "a"));
        assert!(uuid::Uuid::parse_str(&email_id("c1", "a")).is_ok());
    }

    #[test]
    fn rates_are_percentages_of_sent() {
        assert_eq!(rate(1, 3), 33.33);
        assert_eq!(rate(3, 3), 100.0);
        assert_eq!(rate(5, 0), 0.0);
    }
}
