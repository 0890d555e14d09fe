//! What every capability builds on and none owns: the clock, the durable job queue, the group-commit
//! engine, metrics and tracing, API keys, sessions and secrets, rate limits, DNS and DKIM, the spool of received messages.
//!
//! Must not import: salvo, surrealdb.

pub mod batching;
pub mod clock;
pub mod dkim;
pub mod dns;
pub mod jobs;
pub mod metrics;
pub mod ratelimit;
pub mod security;
pub mod spool;
pub mod stripe;
pub mod telemetry;
