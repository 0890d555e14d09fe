//! The API rate limit of decision 8: a token bucket per project holding `limit` requests that refills
//! at `limit` per minute. Buckets live in this process's memory (a cluster-wide limit is part of the
//! scale-out work).
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::clock::SharedClock;

/// The verdict for one request, with what the rate-limit headers report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    /// Seconds until the bucket is full again.
    pub reset_secs: u64,
    /// Seconds until the next request would be allowed (0 when allowed).
    pub retry_after_secs: u64,
}

struct Bucket {
    tokens: f64,
    updated_ms: i64,
}

pub struct RateLimiter {
    per_minute: u32,
    clock: SharedClock,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// `per_minute == 0` turns the limit off.
    pub fn new(per_minute: u32, clock: SharedClock) -> Self {
        RateLimiter { per_minute, clock, buckets: Mutex::new(HashMap::new()) }
    }

    pub fn enabled(&self) -> bool {
        self.per_minute > 0
    }

    pub fn check(&self, key: &str) -> Decision {
        let limit = self.per_minute;
        if limit == 0 {
            return Decision { allowed: true, limit, remaining: 0, reset_secs: 0, retry_after_secs: 0 };
        }
        let now = self.clock.now_ms();
        let rate_per_ms = f64::from(limit) / 60_000.0;
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() > 100_000 {
            // Forget buckets that are full anyway, so the map cannot grow without bound.
            buckets.retain(|_, b| b.tokens + (now - b.updated_ms) as f64 * rate_per_ms < f64::from(limit));
        }
        let b = buckets.entry(key.to_string()).or_insert(Bucket { tokens: f64::from(limit), updated_ms: now });
        let elapsed = (now - b.updated_ms).max(0) as f64;
        b.tokens = (b.tokens + elapsed * rate_per_ms).min(f64::from(limit));
        b.updated_ms = now;
        let allowed = b.tokens >= 1.0;
        if allowed {
            b.tokens -= 1.0;
        }
        let missing = f64::from(limit) - b.tokens;
        let reset_secs = (missing / rate_per_ms / 1000.0).ceil() as u64;
        let retry_after_secs =
            if allowed { 0 } else { ((1.0 - b.tokens) / rate_per_ms / 1000.0).ceil().max(1.0) as u64 };
        Decision { allowed, limit, remaining: b.tokens.floor() as u32, reset_secs, retry_after_secs }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn the_request_after_the_limit_is_refused_and_others_are_unaffected() {
        let clock = ManualClock::new(0);
        let rl = RateLimiter::new(1000, Arc::new(clock.clone()));
        for i in 0..1000 {
            let d = rl.check("a");
            assert!(d.allowed, "request {i}");
            assert_eq!(d.remaining, 999 - i);
        }
        let d = rl.check("a");
        assert!(!d.allowed);
        assert_eq!(d.retry_after_secs, 1);
        assert!(rl.check("b").allowed);
        clock.advance(60);
        assert!(rl.check("a").allowed, "one token back after 60 ms");
        clock.advance(60_000);
        assert_eq!(rl.check("a").remaining, 999);
    }

    #[test]
    fn zero_turns_the_limit_off() {
        let rl = RateLimiter::new(0, Arc::new(ManualClock::new(0)));
        assert!((0..5000).all(|_| rl.check("a").allowed));
    }
}
