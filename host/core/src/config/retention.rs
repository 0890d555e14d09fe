//! How long Herald keeps what it stores (docs/behaviour.md#retention). In herald.toml the `[retention]`
//! table, keys without the `retention_` prefix. Each period is in days; 0 keeps for ever.

use clap::Args;
use serde::Deserialize;

use super::ConfigError;

const DAY_MS: i64 = 86_400_000;

/// Longest period a setting takes, in days (100 years: for ever in all but name is 0).
const MAX_DAYS: u64 = 36_500;

#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    /// Days an email's message (HTML, text, headers, attachment list) is kept after it was written; the
    /// email's record (status, recipient, subject, times, opens and clicks) stays. 0: for ever [default: 90]
    #[arg(long, env = "HERALD_RETENTION_EMAIL_BODY_DAYS")]
    #[serde(rename = "email_body_days")]
    pub retention_email_body_days: Option<u64>,
    /// Days an event (and the activity read from it) is kept. 0: for ever [default: 0]
    #[arg(long, env = "HERALD_RETENTION_EVENT_DAYS")]
    #[serde(rename = "event_days")]
    pub retention_event_days: Option<u64>,
    /// Days a webhook delivery (its attempts and body) is kept. 0: for ever [default: 30]
    #[arg(long, env = "HERALD_RETENTION_WEBHOOK_DELIVERY_DAYS")]
    #[serde(rename = "webhook_delivery_days")]
    pub retention_webhook_delivery_days: Option<u64>,
    /// Days a received message that could not be applied is kept (an applied one is deleted at once).
    /// 0: for ever [default: 7]
    #[arg(long, env = "HERALD_RETENTION_INBOUND_DAYS")]
    #[serde(rename = "inbound_days")]
    pub retention_inbound_days: Option<u64>,
    /// Days a finished job (completed or dead) is kept for inspection, 1 or more [default: 7]
    #[arg(long, env = "HERALD_RETENTION_JOB_DAYS")]
    #[serde(rename = "job_days")]
    pub retention_job_days: Option<u64>,
}

/// The resolved periods, in milliseconds; None keeps for ever.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionConfig {
    pub email_body_ms: Option<i64>,
    pub event_ms: Option<i64>,
    pub webhook_delivery_ms: Option<i64>,
    pub inbound_ms: Option<i64>,
    pub job_ms: i64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionSettings::default().resolve().unwrap_or_else(|_| unreachable!("the defaults resolve"))
    }
}

impl RetentionSettings {
    /// Fills every unset field of `self` from `other`.
    pub(super) fn or(self, o: RetentionSettings) -> RetentionSettings {
        RetentionSettings {
            retention_email_body_days: self.retention_email_body_days.or(o.retention_email_body_days),
            retention_event_days: self.retention_event_days.or(o.retention_event_days),
            retention_webhook_delivery_days: self.retention_webhook_delivery_days.or(o.retention_webhook_delivery_days),
            retention_inbound_days: self.retention_inbound_days.or(o.retention_inbound_days),
            retention_job_days: self.retention_job_days.or(o.retention_job_days),
        }
    }

    pub(super) fn resolve(self) -> Result<RetentionConfig, ConfigError> {
        let period = |name: &str, days: Option<u64>, default: u64| -> Result<Option<i64>, ConfigError> {
            match days.unwrap_or(default) {
                0 => Ok(None),
                d if d > MAX_DAYS => Err(ConfigError::Invalid(format!(
                    "retention_{name} = {d}: at most {MAX_DAYS} days (0 keeps for ever)"
                ))),
                d => Ok(Some(d as i64 * DAY_MS)),
            }
        };
        let job_ms = match period("job_days", self.retention_job_days, 7)? {
            Some(ms) => ms,
            None => return Err(ConfigError::Invalid("retention_job_days = 0: at least 1 day".into())),
        };
        Ok(RetentionConfig {
            email_body_ms: period("email_body_days", self.retention_email_body_days, 90)?,
            event_ms: period("event_days", self.retention_event_days, 0)?,
            webhook_delivery_ms: period("webhook_delivery_days", self.retention_webhook_delivery_days, 30)?,
            inbound_ms: period("inbound_days", self.retention_inbound_days, 7)?,
            job_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_defaults_are_90_days_of_bodies_events_for_ever_30_days_of_deliveries_7_of_the_rest() {
        let c = RetentionConfig::default();
        assert_eq!(c.email_body_ms, Some(90 * DAY_MS));
        assert_eq!(c.event_ms, None);
        assert_eq!(c.webhook_delivery_ms, Some(30 * DAY_MS));
        assert_eq!(c.inbound_ms, Some(7 * DAY_MS));
        assert_eq!(c.job_ms, 7 * DAY_MS);
    }

    #[test]
    fn retention_zero_keeps_for_ever_and_set_values_win_over_the_file() {
        let flags = RetentionSettings {
            retention_event_days: Some(14),
            retention_email_body_days: Some(0),
            ..Default::default()
        };
        let file: RetentionSettings =
            toml::from_str("event_days = 3\nwebhook_delivery_days = 0\njob_days = 2\n").expect("the [retention] table");
        let c = flags.or(file).resolve().unwrap();
        assert_eq!(c.event_ms, Some(14 * DAY_MS));
        assert_eq!(c.email_body_ms, None);
        assert_eq!(c.webhook_delivery_ms, None);
        assert_eq!(c.job_ms, 2 * DAY_MS);
    }

    #[test]
    fn retention_refuses_no_job_period_and_unknown_keys() {
        assert!(RetentionSettings { retention_job_days: Some(0), ..Default::default() }.resolve().is_err());
        assert!(
            RetentionSettings { retention_event_days: Some(MAX_DAYS + 1), ..Default::default() }.resolve().is_err()
        );
        assert!(toml::from_str::<RetentionSettings>("events_days = 3\n").is_err());
    }
}
