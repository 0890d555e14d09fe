//! The SMTP front end's settings: receiving mail and the submission relay (docs/behaviour.md#receiving-mail,
//! docs/behaviour.md#smtp-relay). In herald.toml they are the `[smtp]` table, keys without the `smtp_`
//! prefix.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;

use super::ConfigError;

#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpSettings {
    /// Address to receive mail on (bounces, complaints, replies), e.g. 0.0.0.0:25 [default: off]
    #[arg(long, env = "HERALD_SMTP_LISTEN")]
    #[serde(rename = "listen")]
    pub smtp_listen: Option<SocketAddr>,
    /// Address of the authenticated submission relay, e.g. 0.0.0.0:587 [default: off]
    #[arg(long, env = "HERALD_SMTP_SUBMISSION_LISTEN")]
    #[serde(rename = "submission_listen")]
    pub smtp_submission_listen: Option<SocketAddr>,
    /// PEM certificate chain offered by STARTTLS (with the key) [default: no STARTTLS]
    #[arg(long, env = "HERALD_SMTP_TLS_CERT")]
    #[serde(rename = "tls_cert")]
    pub smtp_tls_cert: Option<PathBuf>,
    /// PEM private key of that certificate
    #[arg(long, env = "HERALD_SMTP_TLS_KEY")]
    #[serde(rename = "tls_key")]
    pub smtp_tls_key: Option<PathBuf>,
    /// Name the SMTP servers greet with [default: the return-path host, else the public URL's host]
    #[arg(long, env = "HERALD_SMTP_HOSTNAME")]
    #[serde(rename = "hostname")]
    pub smtp_hostname: Option<String>,
    /// Largest message accepted, in MiB, 1 to 40 [default: 25]
    #[arg(long, env = "HERALD_SMTP_MAX_MESSAGE_MB")]
    #[serde(rename = "max_message_mb")]
    pub smtp_max_message_mb: Option<u64>,
    /// Connections one client address may hold open at once [default: 10]
    #[arg(long, env = "HERALD_SMTP_MAX_CONNECTIONS_PER_IP")]
    #[serde(rename = "max_connections_per_ip")]
    pub smtp_max_connections_per_ip: Option<u32>,
    /// Messages one client address may send a minute [default: 120]
    #[arg(long, env = "HERALD_SMTP_MESSAGES_PER_MINUTE")]
    #[serde(rename = "messages_per_minute")]
    pub smtp_messages_per_minute: Option<u32>,
    /// Seconds a client may take to send a command or the next piece of a message [default: 60]
    #[arg(long, env = "HERALD_SMTP_TIMEOUT_SECS")]
    #[serde(rename = "timeout_secs")]
    pub smtp_timeout_secs: Option<u64>,
    /// Folder of received messages from their 250 until they are applied (processes sharing a database
    /// share it) [default: herald-spool]
    #[arg(long, env = "HERALD_SMTP_SPOOL_DIR")]
    #[serde(rename = "spool_dir")]
    pub smtp_spool_dir: Option<PathBuf>,
    /// MiB the spool may hold; past it mail is refused with a temporary error [default: 2048]
    #[arg(long, env = "HERALD_SMTP_SPOOL_MAX_MB")]
    #[serde(rename = "spool_max_mb")]
    pub smtp_spool_max_mb: Option<u64>,
    /// Let submission clients on loopback authenticate without STARTTLS (local development) [default: false]
    #[arg(long, env = "HERALD_SMTP_SUBMISSION_ALLOW_PLAIN")]
    #[serde(rename = "submission_allow_plain")]
    pub smtp_submission_allow_plain: Option<bool>,
}

/// The resolved SMTP settings.
#[derive(Debug, Clone)]
pub struct SmtpConfig {
    pub listen: Option<SocketAddr>,
    pub submission_listen: Option<SocketAddr>,
    /// (certificate chain, private key) PEM files.
    pub tls: Option<(PathBuf, PathBuf)>,
    pub hostname: String,
    pub max_message_bytes: usize,
    pub max_connections_per_ip: u32,
    pub messages_per_minute: u32,
    pub timeout_secs: u64,
    pub submission_allow_plain: bool,
    pub spool_dir: PathBuf,
    pub spool_max_bytes: u64,
}

impl SmtpSettings {
    /// Fills every unset field of `self` from `other`.
    pub(super) fn or(self, o: SmtpSettings) -> SmtpSettings {
        SmtpSettings {
            smtp_listen: self.smtp_listen.or(o.smtp_listen),
            smtp_submission_listen: self.smtp_submission_listen.or(o.smtp_submission_listen),
            smtp_tls_cert: self.smtp_tls_cert.or(o.smtp_tls_cert),
            smtp_tls_key: self.smtp_tls_key.or(o.smtp_tls_key),
            smtp_hostname: self.smtp_hostname.or(o.smtp_hostname),
            smtp_max_message_mb: self.smtp_max_message_mb.or(o.smtp_max_message_mb),
            smtp_max_connections_per_ip: self.smtp_max_connections_per_ip.or(o.smtp_max_connections_per_ip),
            smtp_messages_per_minute: self.smtp_messages_per_minute.or(o.smtp_messages_per_minute),
            smtp_timeout_secs: self.smtp_timeout_secs.or(o.smtp_timeout_secs),
            smtp_submission_allow_plain: self.smtp_submission_allow_plain.or(o.smtp_submission_allow_plain),
            smtp_spool_dir: self.smtp_spool_dir.or(o.smtp_spool_dir),
            smtp_spool_max_mb: self.smtp_spool_max_mb.or(o.smtp_spool_max_mb),
        }
    }

    /// `default_host`: the name to greet with when none is set.
    pub(super) fn resolve(self, default_host: &str) -> Result<SmtpConfig, ConfigError> {
        let tls = match (self.smtp_tls_cert, self.smtp_tls_key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => return Err(ConfigError::Invalid("smtp_tls_cert and smtp_tls_key go together".into())),
        };
        let hostname = self.smtp_hostname.filter(|h| !h.trim().is_empty()).unwrap_or_else(|| default_host.to_string());
        if hostname.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(ConfigError::Invalid(format!("smtp_hostname = {hostname:?}: a host name")));
        }
        Ok(SmtpConfig {
            listen: self.smtp_listen,
            submission_listen: self.smtp_submission_listen,
            tls,
            hostname,
            max_message_bytes: (self.smtp_max_message_mb.unwrap_or(25).clamp(1, 40) << 20) as usize,
            max_connections_per_ip: self.smtp_max_connections_per_ip.unwrap_or(10).max(1),
            messages_per_minute: self.smtp_messages_per_minute.unwrap_or(120),
            timeout_secs: self.smtp_timeout_secs.unwrap_or(60).clamp(1, 600),
            submission_allow_plain: self.smtp_submission_allow_plain.unwrap_or(false),
            spool_dir: self.smtp_spool_dir.unwrap_or_else(|| PathBuf::from("herald-spool")),
            spool_max_bytes: self.smtp_spool_max_mb.unwrap_or(2048).max(1) << 20,
        })
    }
}
