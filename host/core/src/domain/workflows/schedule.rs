//! SCHEDULE triggers (docs/behaviour.md#workflows): `{cron, timezone, audience}` checked when saved, and
//! the next time a schedule is due. The cron expression has five fields (minute granularity; the
//! nicknames `@hourly`, `@daily`, ... too), read by the `croner` crate; the time zone is an IANA name
//! (`chrono-tz`), so a schedule follows its zone's daylight-saving changes.
//!
//! Must not import: salvo, surrealdb, tokio.

use std::str::FromStr;

use chrono::{TimeZone, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde_json::{Map, Value};

use super::steps::Problem;

/// Who a schedule enrolls: the subscribed members of a segment, or the subscribed contacts a condition
/// matches.
#[derive(Debug, Clone, PartialEq)]
pub enum Audience {
    Segment(String),
    Condition(Value),
}

#[derive(Debug, Clone)]
pub struct Schedule {
    pub cron: Cron,
    pub zone: chrono_tz::Tz,
    pub audience: Audience,
}

fn problem(field: &str, code: &'static str, message: impl Into<String>) -> Problem {
    Problem { field: field.to_string(), code, message: message.into() }
}

fn parse_cron(text: &str) -> Result<Cron, String> {
    if text.len() > 200 {
        return Err("the expression is too long".into());
    }
    let fields = text.split_whitespace().count();
    if !text.trim_start().starts_with('@') && fields != 5 {
        return Err(format!(
            "use five fields (minute hour day-of-month month day-of-week), got {fields}; schedules run at most once a minute"
        ));
    }
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(text.trim())
        .map_err(|e| e.to_string())
}

/// Checks a SCHEDULE trigger's config; answers the schedule and the config to store.
pub fn parse(config: Option<&Value>) -> Result<(Schedule, Value), Vec<Problem>> {
    let Some(o) = config.and_then(Value::as_object) else {
        return Err(vec![problem(
            "triggerConfig",
            "invalid_type",
            "a SCHEDULE trigger needs triggerConfig {cron, timezone, audience}",
        )]);
    };
    let mut problems = Vec::new();
    let cron = match o.get("cron").and_then(Value::as_str) {
        Some(c) => match parse_cron(c) {
            Ok(cron) => Some((c.trim().to_string(), cron)),
            Err(m) => {
                problems.push(problem(
                    "triggerConfig.cron",
                    "invalid_string",
                    format!("not a valid cron expression: {m}"),
                ));
                None
            }
        },
        None => {
            problems.push(problem("triggerConfig.cron", "required", "cron is required (for example \"0 9 * * MON\")"));
            None
        }
    };
    let zone_name = o.get("timezone").and_then(Value::as_str).unwrap_or("UTC").trim().to_string();
    let zone = match chrono_tz::Tz::from_str(&zone_name) {
        Ok(z) => Some(z),
        Err(_) => {
            problems.push(problem(
                "triggerConfig.timezone",
                "invalid_string",
                format!("unknown time zone {zone_name:?}; use an IANA name such as Europe/Amsterdam or UTC"),
            ));
            None
        }
    };
    let audience = match o.get("audience") {
        Some(Value::Object(a)) => match (a.get("segmentId"), a.get("condition")) {
            (Some(Value::String(id)), None) if !id.trim().is_empty() && id.len() <= 64 => {
                Some(Audience::Segment(id.trim().into()))
            }
            (None, Some(c @ Value::Object(_))) => Some(Audience::Condition(c.clone())),
            _ => {
                problems.push(problem(
                    "triggerConfig.audience",
                    "invalid_type",
                    "audience is {segmentId} or {condition} (a condition tree), one of them",
                ));
                None
            }
        },
        _ => {
            problems.push(problem(
                "triggerConfig.audience",
                "required",
                "audience is required: {segmentId} or {condition}",
            ));
            None
        }
    };
    match (cron, zone, audience) {
        (Some((text, cron)), Some(zone), Some(audience)) if problems.is_empty() => {
            let mut stored = Map::new();
            stored.insert("cron".into(), Value::String(text));
            stored.insert("timezone".into(), Value::String(zone_name));
            stored.insert(
                "audience".into(),
                match &audience {
                    Audience::Segment(id) => serde_json::json!({ "segmentId": id }),
                    Audience::Condition(c) => serde_json::json!({ "condition": c }),
                },
            );
            Ok((Schedule { cron, zone, audience }, Value::Object(stored)))
        }
        _ => Err(problems),
    }
}

impl Schedule {
    /// The first time the schedule is due strictly after `after_ms` (ms since the epoch), if any.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let at = Utc.timestamp_millis_opt(after_ms).single()?.with_timezone(&self.zone);
        self.cron.find_next_occurrence(&at, false).ok().map(|t| t.timestamp_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ms(s: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    #[test]
    fn configs_are_checked_field_by_field() {
        let ok = json!({ "cron": "0 9 * * MON", "timezone": "Europe/Amsterdam", "audience": { "segmentId": "s1" } });
        let (s, stored) = parse(Some(&ok)).unwrap();
        assert_eq!(s.audience, Audience::Segment("s1".into()));
        assert_eq!(stored, ok);
        let cases = [
            (json!({ "cron": "* * * * * *", "audience": { "segmentId": "s" } }), "triggerConfig.cron"),
            (json!({ "cron": "61 * * * *", "audience": { "segmentId": "s" } }), "triggerConfig.cron"),
            (
                json!({ "cron": "0 9 * * *", "timezone": "Mars/Olympus", "audience": { "segmentId": "s" } }),
                "triggerConfig.timezone",
            ),
            (json!({ "cron": "0 9 * * *" }), "triggerConfig.audience"),
            (
                json!({ "cron": "0 9 * * *", "audience": { "segmentId": "s", "condition": {} } }),
                "triggerConfig.audience",
            ),
            (json!({ "timezone": "UTC", "audience": { "segmentId": "s" } }), "triggerConfig.cron"),
        ];
        for (config, field) in cases {
            let p = parse(Some(&config)).unwrap_err();
            assert_eq!(p[0].field, field, "{config}: {p:?}");
        }
        assert_eq!(parse(None).unwrap_err()[0].field, "triggerConfig");
        let (_, stored) =
            parse(Some(&json!({ "cron": "@daily", "audience": { "condition": { "groups": [] } } }))).unwrap();
        assert_eq!(stored["timezone"], "UTC", "UTC by default");
    }

    #[test]
    fn the_next_time_follows_the_zone_and_its_daylight_saving() {
        let c = json!({ "cron": "0 9 * * *", "timezone": "Europe/Amsterdam", "audience": { "segmentId": "s" } });
        let (s, _) = parse(Some(&c)).unwrap();
        // Winter: 09:00 in Amsterdam is 08:00 UTC; summer: 07:00 UTC.
        assert_eq!(s.next_after(ms("2026-01-10T10:00:00Z")), Some(ms("2026-01-11T08:00:00Z")));
        assert_eq!(s.next_after(ms("2026-07-10T06:00:00Z")), Some(ms("2026-07-10T07:00:00Z")));
        // Strictly after: at the due time itself, the next day's.
        assert_eq!(s.next_after(ms("2026-07-10T07:00:00Z")), Some(ms("2026-07-11T07:00:00Z")));
    }
}
