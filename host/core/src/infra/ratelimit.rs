//! The API rate limit (docs/behaviour.md#limits): a token bucket per project holding `limit` requests
//! that refills at `limit` per minute. Buckets live in this process's memory: N processes allow N times
//! the limit (docs/behaviour.md#running-several-processes).
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::infra::clock::SharedClock;

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

/// The sending throttle (docs/behaviour.md#limits): at most `per_second` messages per project handed to
/// the transport each second (a bucket of one second's worth). Per process, like the API limit.
pub struct SendThrottle {
    per_second: u32,
    clock: SharedClock,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl SendThrottle {
    /// `per_second == 0` turns the throttle off.
    pub fn new(per_second: u32, clock: SharedClock) -> Self {
        SendThrottle { per_second, clock, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes a token for `project` if one is there; otherwise answers how many ms until one is.
    pub fn try_take(&self, project: &str) -> Result<(), u64> {
        self.try_take_at(project, self.per_second)
    }

    /// Takes a token for `key` from a bucket of `per_second` (0: no limit) if one is there; otherwise
    /// answers how many ms until one is. For keys of different rates (a transport, a destination).
    pub fn try_take_at(&self, key: &str, per_second: u32) -> Result<(), u64> {
        if per_second == 0 {
            return Ok(());
        }
        let cap = f64::from(per_second);
        let rate_per_ms = cap / 1000.0;
        let now = self.clock.now_ms();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = buckets.entry(key.to_string()).or_insert(Bucket { tokens: cap, updated_ms: now });
        b.tokens = (b.tokens + (now - b.updated_ms).max(0) as f64 * rate_per_ms).min(cap);
        b.updated_ms = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(((1.0 - b.tokens) / rate_per_ms).ceil().max(1.0) as u64)
        }
    }

    /// Waits (in real time) until the project may hand over one more message.
    pub async fn take(&self, project: &str) {
        while let Err(wait_ms) = self.try_take(project) {
            tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::infra::clock::ManualClock;

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
    fn the_send_throttle_allows_one_second_of_messages_per_project() {
        let clock = ManualClock::new(0);
        let t = SendThrottle::new(10, Arc::new(clock.clone()));
        for _ in 0..10 {
            assert!(t.try_take("a").is_ok());
        }
        assert_eq!(t.try_take("a"), Err(100), "the next token comes in 100 ms");
        assert!(t.try_take("b").is_ok(), "projects are throttled separately");
        clock.advance(100);
        assert!(t.try_take("a").is_ok());
        assert!(t.try_take("a").is_err());
        assert!(SendThrottle::new(0, Arc::new(clock)).try_take("a").is_ok());
    }

    #[test]
    fn zero_turns_the_limit_off() {
        let rl = RateLimiter::new(0, Arc::new(ManualClock::new(0)));
        assert!((0..5000).all(|_| rl.check("a").allowed));
    }
}
