//! Extra condition operators for segments, campaign audiences and workflow conditions:
//!
//! | operator | operand | true when the field |
//! |---|---|---|
//! | `matchesRegex` | text: a regular expression | (text, or any item of a text list, or a number/boolean as text) matches it |
//! | `domainIs` | text or text list of domains | is an email address whose domain is one of them (exact, case-insensitive) |
//! | `semverAtLeast` | text: a version (`1.2.3`, `v1.2`) | is a version at least as high (semver precedence) |
//! | `anniversaryWithin` | integer: days (0 to 366) | is a date (timestamp or ISO 8601 text) whose next anniversary is at most that many days away |
//!
//! A missing or null field, or a field of another type, never matches.
#![warn(missing_docs)]

use herald_sdk::serde_json::json;
use herald_sdk::time::{UtcDateTime, days_from_civil, days_in_month};
use herald_sdk::{Metadata, Operator, OperatorInfo, PluginError, PluginKind, Value, clock};
use regex::{Regex, RegexBuilder};

/// The `operators` plugin.
pub struct Operators;

const MATCHES_REGEX: &str = "matchesRegex";
const DOMAIN_IS: &str = "domainIs";
const SEMVER_AT_LEAST: &str = "semverAtLeast";
const ANNIVERSARY_WITHIN: &str = "anniversaryWithin";

/// Longest accepted regular expression, in bytes.
const MAX_PATTERN_LEN: usize = 1000;
/// Cap on the compiled program and on the lazy DFA's cache.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
const MAX_ANNIVERSARY_DAYS: i64 = 366;

impl Operator for Operators {
    fn metadata() -> Metadata {
        Metadata::new("operators", env!("CARGO_PKG_VERSION"), PluginKind::Operator)
            .description("Condition operators: matchesRegex, domainIs, semverAtLeast, anniversaryWithin")
            .provides([MATCHES_REGEX, DOMAIN_IS, SEMVER_AT_LEAST, ANNIVERSARY_WITHIN])
    }

    fn operators() -> Vec<OperatorInfo> {
        vec![
            OperatorInfo::new(MATCHES_REGEX, "The field matches a regular expression (Rust regex syntax)")
                .operand_schema(json!({"type": "string", "minLength": 1, "maxLength": MAX_PATTERN_LEN})),
            OperatorInfo::new(
                DOMAIN_IS,
                "The field is an email address at one of these domains (exact, case-insensitive)",
            )
            .operand_schema(json!({
                "oneOf": [
                    {"type": "string", "minLength": 1},
                    {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
                ]
            })),
            OperatorInfo::new(SEMVER_AT_LEAST, "The field is a semantic version at least this high")
                .operand_schema(json!({"type": "string", "minLength": 1})),
            OperatorInfo::new(
                ANNIVERSARY_WITHIN,
                "The next anniversary of the field's date (timestamp or ISO 8601 text) is at most this many days away",
            )
            .operand_schema(json!({"type": "integer", "minimum": 0, "maximum": MAX_ANNIVERSARY_DAYS})),
        ]
    }

    fn validate_operand(operator: &str, operand: &Value) -> Result<(), String> {
        Compiled::new(operator, operand).map(|_| ())
    }

    fn evaluate(operator: &str, operand: &Value, values: &[Value]) -> Result<Vec<bool>, PluginError> {
        let compiled = Compiled::new(operator, operand).map_err(|m| PluginError::permanent("bad_operand", m))?;
        let today = match compiled {
            Compiled::Anniversary(_) => UtcDateTime::from_unix_ms(clock::now_ms()).days_since_epoch(),
            _ => 0,
        };
        Ok(values.iter().map(|v| compiled.matches(v, today)).collect())
    }
}

/// An operator with its operand checked and prepared once per call.
enum Compiled {
    Regex(Regex),
    Domains(Vec<String>),
    SemverAtLeast(semver::Version),
    Anniversary(i64),
}

impl Compiled {
    fn new(operator: &str, operand: &Value) -> Result<Compiled, String> {
        match operator {
            MATCHES_REGEX => {
                let pattern = operand.as_text().ok_or_else(|| {
                    format!("{MATCHES_REGEX} needs a regular expression (text), not {}", operand.type_name())
                })?;
                if pattern.is_empty() || pattern.len() > MAX_PATTERN_LEN {
                    return Err(format!("{MATCHES_REGEX}: the pattern must be 1 to {MAX_PATTERN_LEN} characters long"));
                }
                RegexBuilder::new(pattern)
                    .size_limit(REGEX_SIZE_LIMIT)
                    .dfa_size_limit(REGEX_SIZE_LIMIT)
                    .nest_limit(64)
                    .build()
                    .map(Compiled::Regex)
                    .map_err(|e| format!("{MATCHES_REGEX}: invalid regular expression: {e}"))
            }
            DOMAIN_IS => {
                let raw: Vec<&str> = match operand {
                    Value::Text(d) => vec![d.as_str()],
                    Value::TextList(ds) if !ds.is_empty() => ds.iter().map(String::as_str).collect(),
                    other => {
                        return Err(format!(
                            "{DOMAIN_IS} needs a domain or a non-empty list of domains, not {}",
                            other.type_name()
                        ));
                    }
                };
                let mut domains = Vec::with_capacity(raw.len());
                for d in raw {
                    let norm = normalize_domain(d.trim().trim_start_matches('@'));
                    if norm.is_empty() || norm.contains(['@', ' ', '/', ':']) {
                        return Err(format!("{DOMAIN_IS}: {d:?} is not a domain"));
                    }
                    domains.push(norm);
                }
                Ok(Compiled::Domains(domains))
            }
            SEMVER_AT_LEAST => {
                let text = operand
                    .as_text()
                    .ok_or_else(|| format!("{SEMVER_AT_LEAST} needs a version (text), not {}", operand.type_name()))?;
                parse_version(text)
                    .map(Compiled::SemverAtLeast)
                    .ok_or_else(|| format!("{SEMVER_AT_LEAST}: {text:?} is not a semantic version like 1.2.3"))
            }
            ANNIVERSARY_WITHIN => match operand.as_integer() {
                Some(days) if (0..=MAX_ANNIVERSARY_DAYS).contains(&days) => Ok(Compiled::Anniversary(days)),
                _ => Err(format!("{ANNIVERSARY_WITHIN} needs a whole number of days from 0 to {MAX_ANNIVERSARY_DAYS}")),
            },
            other => Err(format!("unknown operator {other:?}")),
        }
    }

    /// `today`: days since the epoch (used by `anniversaryWithin` only).
    fn matches(&self, value: &Value, today: i64) -> bool {
        match self {
            Compiled::Regex(re) => match value {
                Value::Text(s) => re.is_match(s),
                Value::TextList(items) => items.iter().any(|s| re.is_match(s)),
                Value::Integer(n) => re.is_match(&n.to_string()),
                Value::Float(f) => re.is_match(&f.to_string()),
                Value::Boolean(b) => re.is_match(if *b { "true" } else { "false" }),
                Value::Null | Value::Timestamp(_) | Value::Json(_) => false,
            },
            Compiled::Domains(domains) => {
                let is_at = |email: &str| {
                    email.rsplit_once('@').is_some_and(|(_, d)| {
                        let d = normalize_domain(d);
                        domains.contains(&d)
                    })
                };
                match value {
                    Value::Text(s) => is_at(s),
                    Value::TextList(items) => items.iter().any(|s| is_at(s)),
                    _ => false,
                }
            }
            Compiled::SemverAtLeast(min) => {
                let version = match value {
                    Value::Text(s) => parse_version(s),
                    Value::Integer(n) if *n >= 0 => parse_version(&n.to_string()),
                    _ => None,
                };
                version.is_some_and(|v| v >= *min)
            }
            Compiled::Anniversary(days) => {
                let date = match value {
                    Value::Timestamp(ms) => Some(UtcDateTime::from_unix_ms(*ms)),
                    Value::Text(s) => UtcDateTime::parse(s),
                    _ => None,
                };
                date.is_some_and(|d| days_until_anniversary(d.month, d.day, today) <= *days)
            }
        }
    }
}

fn normalize_domain(d: &str) -> String {
    d.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// A semantic version, leniently: a leading `v` is dropped and missing minor or patch numbers are 0
/// (`v2` is 2.0.0, `1.4` is 1.4.0).
fn parse_version(text: &str) -> Option<semver::Version> {
    let t = text.trim();
    let t = t.strip_prefix(['v', 'V']).unwrap_or(t);
    if let Ok(v) = semver::Version::parse(t) {
        return Some(v);
    }
    let end = t.find(['-', '+']).unwrap_or(t.len());
    let (core, rest) = t.split_at(end);
    let parts: Vec<&str> = core.split('.').collect();
    if parts.is_empty()
        || parts.len() > 2
        || parts.iter().any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let padded = match parts.len() {
        1 => format!("{core}.0.0{rest}"),
        _ => format!("{core}.0{rest}"),
    };
    semver::Version::parse(&padded).ok()
}

/// Days from `today` (days since the epoch, UTC) to the next anniversary of `month`/`day`, today
/// counting as 0. The 29th of February falls on the 28th in years without one.
fn days_until_anniversary(month: u32, day: u32, today: i64) -> i64 {
    let (year, _, _) = herald_sdk::time::civil_from_days(today);
    let on = |y: i32| days_from_civil(y, month, day.min(days_in_month(y, month)));
    let this_year = on(year);
    if this_year >= today { this_year - today } else { on(year + 1) - today }
}

herald_sdk::export_operator!(Operators);

#[cfg(test)]
mod tests {
    use super::*;
    use herald_sdk::mock::MockHost;

    fn eval(op: &str, operand: Value, values: &[Value]) -> Vec<bool> {
        Operators::evaluate(op, &operand, values).expect("evaluates")
    }

    fn text(s: &str) -> Value {
        Value::from(s)
    }

    #[test]
    fn compliance() {
        herald_sdk::compliance::check_operator::<Operators>();
        herald_sdk::compliance::check_manifest(include_str!("../manifest.toml"), &Operators::metadata());
    }

    #[test]
    fn matches_regex() {
        let values = [
            text("ada@example.com"),
            text("bob@test.org"),
            Value::TextList(vec!["x".into(), "carl@example.com".into()]),
            Value::Integer(42),
            Value::Null,
            Value::Json("{\"a\":\"@example.com\"}".into()),
        ];
        assert_eq!(eval(MATCHES_REGEX, text("@example\\.com$"), &values), [true, false, true, false, false, false]);
        assert_eq!(eval(MATCHES_REGEX, text("^4\\d$"), &values), [false, false, false, true, false, false]);
        assert_eq!(eval(MATCHES_REGEX, text("(?i)^ADA"), &values[..1]), [true]);
    }

    #[test]
    fn matches_regex_refuses_bad_patterns() {
        for bad in [text("("), text(""), text(&"a".repeat(MAX_PATTERN_LEN + 1)), Value::Integer(1), Value::Null] {
            assert!(Operators::validate_operand(MATCHES_REGEX, &bad).is_err(), "{bad:?}");
        }
        // Huge repetition counts blow the compiled-size limit instead of the plugin's memory.
        assert!(Operators::validate_operand(MATCHES_REGEX, &text("(\\w{1000}){1000}")).is_err());
        let err = Operators::evaluate(MATCHES_REGEX, &text("["), &[text("x")]).expect_err("bad operand");
        assert_eq!(err.code, "bad_operand");
        assert!(!err.retryable);
    }

    #[test]
    fn domain_is() {
        let values = [
            text("Ada@Example.COM"),
            text("bob@sub.example.com"),
            text("carl@example.com."),
            text("not-an-email"),
            text("dan@other.org"),
            Value::Null,
            Value::Integer(3),
        ];
        assert_eq!(eval(DOMAIN_IS, text("example.com"), &values), [true, false, true, false, false, false, false]);
        let list = Value::TextList(vec!["@OTHER.org".into(), "sub.example.com".into()]);
        assert_eq!(eval(DOMAIN_IS, list, &values), [false, true, false, false, true, false, false]);
        for bad in [text(""), text("a@b.com"), Value::TextList(vec![]), Value::Integer(1), text("http://x")] {
            assert!(Operators::validate_operand(DOMAIN_IS, &bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn semver_at_least() {
        let values = [
            text("1.2.3"),
            text("1.2.2"),
            text("v2"),
            text("1.3"),
            text("1.2.3-beta.1"),
            text("banana"),
            Value::Null,
            Value::Integer(2),
        ];
        assert_eq!(eval(SEMVER_AT_LEAST, text("1.2.3"), &values), [true, false, true, true, false, false, false, true]);
        assert_eq!(eval(SEMVER_AT_LEAST, text("v1.2"), &values[..2]), [true, true]);
        for bad in [text("one"), text(""), text("1.2.3.4"), Value::Integer(1)] {
            assert!(Operators::validate_operand(SEMVER_AT_LEAST, &bad).is_err(), "{bad:?}");
        }
    }

    fn ms(date: &str) -> i64 {
        UtcDateTime::parse(date).expect("date").to_unix_ms()
    }

    #[test]
    fn anniversary_within() {
        let _host = MockHost::new().now_ms(ms("2025-03-10T15:00:00Z")).install();
        let values = [
            text("1990-03-10"),                 // today: 0 days
            text("1990-03-17T23:00:00Z"),       // 7 days
            Value::Timestamp(ms("2001-03-18")), // 8 days
            text("1985-03-09"),                 // yesterday: next year, 364 days
            text("2000-12-31T23:30:00-01:00"),  // 2001-01-01 UTC: 297 days
            text("not a date"),
            Value::Null,
            Value::Integer(0),
        ];
        assert_eq!(
            eval(ANNIVERSARY_WITHIN, Value::Integer(7), &values),
            [true, true, false, false, false, false, false, false]
        );
        assert_eq!(eval(ANNIVERSARY_WITHIN, Value::Integer(0), &values[..2]), [true, false]);
        assert_eq!(eval(ANNIVERSARY_WITHIN, Value::Integer(364), &values[3..5]), [true, true]);
        assert_eq!(eval(ANNIVERSARY_WITHIN, Value::Float(8.0), &values[2..3]), [true]);
        for bad in [Value::Integer(-1), Value::Integer(367), Value::Float(1.5), text("7"), Value::Null] {
            assert!(Operators::validate_operand(ANNIVERSARY_WITHIN, &bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn anniversary_of_the_29th_of_february() {
        let leapling = [text("2000-02-29")];
        let _host = MockHost::new().now_ms(ms("2025-02-27T00:00:00Z")).install();
        assert_eq!(eval(ANNIVERSARY_WITHIN, Value::Integer(1), &leapling), [true]); // 2025-02-28
        assert_eq!(eval(ANNIVERSARY_WITHIN, Value::Integer(0), &leapling), [false]);
        let host = MockHost::new().now_ms(ms("2028-02-28T00:00:00Z")).install();
        assert_eq!(eval(ANNIVERSARY_WITHIN, Value::Integer(0), &leapling), [false]);
        assert_eq!(eval(ANNIVERSARY_WITHIN, Value::Integer(1), &leapling), [true]); // 2028-02-29
        host.set_now_ms(ms("2025-12-31T12:00:00Z"));
        assert_eq!(eval(ANNIVERSARY_WITHIN, Value::Integer(1), &[text("1999-01-01")]), [true]);
    }

    #[test]
    fn unknown_operators_are_refused() {
        assert!(Operators::validate_operand("equals", &text("x")).is_err());
        assert!(Operators::evaluate("equals", &text("x"), &[]).is_err());
    }
}
