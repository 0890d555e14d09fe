//! Time as plugins and the host see it. Everything reads "now" through a [`Clock`] so tests can control it
//! and never sleep; `wall_now_ms` is the single place that reads the system clock. The plugin runtime owns
//! the clock because plugins read time through it (the `clock` import) and a plugin author's tests drive it
//! with a [`ManualClock`]; the host re-exports these types from its own `clock` module.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, SecondsFormat, Utc};

/// Milliseconds since the Unix epoch, UTC, read from the system clock.
// The one read of the wall clock; everything else asks a `Clock` (clippy.toml).
#[expect(clippy::disallowed_methods)]
pub fn wall_now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// RFC 3339 UTC with milliseconds, the form of every time on the wire (docs/behaviour.md#names-and-formats).
pub fn rfc3339(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default().to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> i64;
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        wall_now_ms()
    }
}

/// A clock that only moves when told to. Used by tests and benchmarks.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start_ms: i64) -> Self {
        Self(Arc::new(AtomicI64::new(start_ms)))
    }
    pub fn set(&self, ms: i64) {
        self.0.store(ms, Ordering::SeqCst);
    }
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

pub type SharedClock = Arc<dyn Clock>;
