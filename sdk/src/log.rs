//! Structured logging into the host's log, tagged with the plugin's name (WIT `log`).
//!
//! ```
//! herald_sdk::log::info("webhook called", &[("status", "200"), ("url", "https://example.com/hook")]);
//! ```
//!
//! In a native build the record goes to the [`MockHost`](crate::mock::MockHost) (and to stderr,
//! which `cargo test` shows for failing tests).

/// How important a log record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the plugin handled.
    Warn,
    /// Something failed.
    Error,
}

impl Level {
    /// `"trace"`, `"debug"`, `"info"`, `"warn"` or `"error"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

/// Writes one record with `fields` as structured key-value pairs.
pub fn write(level: Level, message: &str, fields: &[(&str, &str)]) {
    crate::backend::log(level, message, fields);
}

/// Writes a [`Level::Trace`] record.
pub fn trace(message: &str, fields: &[(&str, &str)]) {
    write(Level::Trace, message, fields);
}

/// Writes a [`Level::Debug`] record.
pub fn debug(message: &str, fields: &[(&str, &str)]) {
    write(Level::Debug, message, fields);
}

/// Writes a [`Level::Info`] record.
pub fn info(message: &str, fields: &[(&str, &str)]) {
    write(Level::Info, message, fields);
}

/// Writes a [`Level::Warn`] record.
pub fn warn(message: &str, fields: &[(&str, &str)]) {
    write(Level::Warn, message, fields);
}

/// Writes a [`Level::Error`] record.
pub fn error(message: &str, fields: &[(&str, &str)]) {
    write(Level::Error, message, fields);
}
