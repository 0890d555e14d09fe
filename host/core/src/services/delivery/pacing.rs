//! Pacing per destination (docs/delivery.md#per-destination): mail to one recipient domain is paced on
//! its own, so a destination that refuses for now (greylisting, a provider's throttling) slows down
//! without holding up any other.
//!
//! Each domain has its fixed limits from `[destinations."<domain>"]` (`max_per_second`,
//! `max_connections`) and an adaptive share of them: it starts with [`INITIAL_CONNECTIONS`] hand-overs at
//! once, every acceptance gives it one more (up to its ceiling), every temporary refusal halves them
//! (down to one), and [`PAUSE_AFTER`] refusals in a row
//! pause it ([`FIRST_PAUSE`], doubling up to [`LONGEST_PAUSE`] while the refusals go on): its emails are
//! then deferred to the pause's end without an attempt. Per process, like the transports' limits.
//!
//! Must not import: salvo, surrealdb.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::Limits;
use crate::infra::clock::SharedClock;
use crate::infra::ratelimit::SendThrottle;

/// Hand-overs at once to a domain without a `max_connections` of its own, at most.
pub const DEFAULT_CONNECTIONS: u32 = 32;
/// Hand-overs at once to a domain Herald has not heard from yet (a burst to a destination that refuses
/// costs at most this many refusals before its share shrinks).
pub const INITIAL_CONNECTIONS: u32 = 5;
/// Temporary refusals in a row after which a domain is paused.
pub const PAUSE_AFTER: u32 = 5;
/// The first pause of a domain, in ms.
pub const FIRST_PAUSE_MS: i64 = 30_000;
/// The longest pause, in ms.
pub const LONGEST_PAUSE_MS: i64 = 600_000;
/// Domains remembered at most; the idle ones are forgotten beyond it.
const REMEMBERED: usize = 10_000;

/// One domain's state.
struct Dest {
    /// Hand-overs it may have at once now (1 ..= its ceiling).
    allowed: u32,
    ceiling: u32,
    in_flight: u32,
    /// Temporary refusals in a row.
    refusals: u32,
    /// Paused until this moment (the clock's ms).
    paused_until: Option<i64>,
    /// The length of the next pause.
    next_pause_ms: i64,
    freed: Arc<Notify>,
}

/// Every destination's pace.
pub struct Pacing {
    limits: BTreeMap<String, Limits>,
    buckets: SendThrottle,
    dests: Mutex<HashMap<String, Dest>>,
    clock: SharedClock,
}

/// What a hand-over to a destination may do.
pub enum Admit {
    /// Go: the permit holds one of the domain's hand-overs until dropped.
    Go(Permit),
    /// The domain is paused until this moment (ms): defer the email to it.
    Paused(i64),
}

/// One hand-over to a domain in flight.
pub struct Permit {
    pacing: Arc<Pacing>,
    domain: String,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut dests = self.pacing.map();
        if let Some(d) = dests.get_mut(&self.domain) {
            d.in_flight = d.in_flight.saturating_sub(1);
            d.freed.notify_one();
        }
    }
}

impl Pacing {
    pub fn new(limits: BTreeMap<String, Limits>, clock: SharedClock) -> Arc<Pacing> {
        Arc::new(Pacing {
            limits,
            buckets: SendThrottle::new(0, clock.clone()),
            dests: Mutex::new(HashMap::new()),
            clock,
        })
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Dest>> {
        self.dests.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ceiling(&self, domain: &str) -> u32 {
        self.limits.get(domain).and_then(|l| l.max_connections).unwrap_or(DEFAULT_CONNECTIONS).max(1)
    }

    /// Waits for the domain's rate and a hand-over of its share, or answers that it is paused. `stop`
    /// gives up waiting (a cancelled campaign; the permit is then still given, and the claim cancels it).
    pub async fn admit(self: &Arc<Self>, domain: &str, stop: impl Fn() -> bool) -> Admit {
        let domain = domain.to_ascii_lowercase();
        if let Some(rate) = self.limits.get(&domain).and_then(|l| l.max_per_second) {
            while !stop() {
                match self.buckets.try_take_at(&domain, rate) {
                    Ok(()) => break,
                    Err(ms) => tokio::time::sleep(Duration::from_millis(ms).min(super::GATE_POLL)).await,
                }
            }
        }
        loop {
            let freed = {
                let now = self.clock.now_ms();
                let ceiling = self.ceiling(&domain);
                let mut dests = self.map();
                if dests.len() >= REMEMBERED && !dests.contains_key(&domain) {
                    dests.retain(|_, d| d.in_flight > 0 || d.paused_until.is_some_and(|p| p > now));
                }
                let d = dests.entry(domain.clone()).or_insert_with(|| Dest {
                    allowed: INITIAL_CONNECTIONS.min(ceiling),
                    ceiling,
                    in_flight: 0,
                    refusals: 0,
                    paused_until: None,
                    next_pause_ms: FIRST_PAUSE_MS,
                    freed: Arc::new(Notify::new()),
                });
                if let Some(until) = d.paused_until.filter(|u| *u > now) {
                    return Admit::Paused(until);
                }
                if d.in_flight < d.allowed || stop() {
                    d.in_flight += 1;
                    return Admit::Go(Permit { pacing: self.clone(), domain });
                }
                d.freed.clone()
            };
            // Re-checked now and then: a cancel seen meanwhile ends the wait.
            let _ = tokio::time::timeout(super::GATE_POLL, freed.notified()).await;
        }
    }

    /// The domain refused a message for now: its share halves, and after [`PAUSE_AFTER`] refusals in a
    /// row it is paused. Answers the pause's end when this refusal paused it.
    pub fn refused(&self, domain: &str) -> Option<i64> {
        let now = self.clock.now_ms();
        let mut dests = self.map();
        let d = dests.get_mut(&domain.to_ascii_lowercase())?;
        d.allowed = (d.allowed / 2).max(1);
        d.refusals += 1;
        if d.refusals < PAUSE_AFTER {
            return None;
        }
        d.refusals = 0;
        let until = now + d.next_pause_ms;
        d.paused_until = Some(until);
        d.next_pause_ms = (d.next_pause_ms * 2).min(LONGEST_PAUSE_MS);
        tracing::info!(domain, pause_ms = until - now, "destination paused after repeated temporary refusals");
        Some(until)
    }

    /// The domain took a message: one hand-over of its share back, and its refusals and pauses forgotten.
    pub fn accepted(&self, domain: &str) {
        let mut dests = self.map();
        if let Some(d) = dests.get_mut(&domain.to_ascii_lowercase()) {
            d.allowed = (d.allowed + 1).min(d.ceiling);
            d.refusals = 0;
            d.next_pause_ms = FIRST_PAUSE_MS;
            d.freed.notify_one();
        }
    }

    /// A domain's share now (for tests and the dashboard).
    pub fn allowed(&self, domain: &str) -> Option<u32> {
        self.map().get(domain).map(|d| d.allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::clock::ManualClock;

    fn pacing(limits: &[(&str, Limits)]) -> (Arc<Pacing>, ManualClock) {
        let clock = ManualClock::new(1_000_000);
        let limits = limits.iter().map(|(d, l)| (d.to_string(), *l)).collect();
        (Pacing::new(limits, Arc::new(clock.clone())), clock)
    }

    fn go(a: Admit) -> Permit {
        match a {
            Admit::Go(p) => p,
            Admit::Paused(until) => panic!("paused until {until}"),
        }
    }

    #[tokio::test]
    async fn refusals_halve_a_destinations_share_and_acceptances_give_it_back() {
        let (p, _) = pacing(&[("slow.test", Limits { max_per_second: None, max_connections: Some(8) })]);
        let held = go(p.admit("slow.test", || false).await);
        assert_eq!(p.allowed("slow.test"), Some(INITIAL_CONNECTIONS));
        for want in [6, 7, 8, 8] {
            p.accepted("slow.test");
            assert_eq!(p.allowed("slow.test"), Some(want), "grows up to its ceiling");
        }
        for want in [4, 2, 1, 1] {
            assert_eq!(p.refused("slow.test"), None);
            assert_eq!(p.allowed("slow.test"), Some(want));
        }
        // One at once now: a second waits for the first.
        let second = tokio::time::timeout(Duration::from_millis(150), p.admit("slow.test", || false)).await;
        assert!(second.is_err(), "waits while its one hand-over is in flight");
        drop(held);
        let held = go(p.admit("slow.test", || false).await);
        p.accepted("slow.test");
        assert_eq!(p.allowed("slow.test"), Some(2));
        drop(held);
        // Another domain is not held up by any of it.
        let _other = go(p.admit("fast.test", || false).await);
        assert_eq!(p.allowed("fast.test"), Some(INITIAL_CONNECTIONS));
    }

    #[tokio::test]
    async fn refusals_in_a_row_pause_a_destination_for_growing_pauses_and_an_acceptance_resets_them() {
        let (p, clock) = pacing(&[]);
        drop(go(p.admit("grey.test", || false).await));
        for _ in 1..PAUSE_AFTER {
            assert_eq!(p.refused("grey.test"), None);
        }
        let until = p.refused("grey.test").expect("paused");
        assert_eq!(until, 1_000_000 + FIRST_PAUSE_MS);
        assert!(matches!(p.admit("grey.test", || false).await, Admit::Paused(u) if u == until));
        clock.advance(FIRST_PAUSE_MS);
        drop(go(p.admit("grey.test", || false).await));
        for _ in 0..PAUSE_AFTER {
            p.refused("grey.test");
        }
        assert!(
            matches!(p.admit("grey.test", || false).await, Admit::Paused(u) if u == 1_000_000 + 3 * FIRST_PAUSE_MS)
        );
        clock.advance(2 * FIRST_PAUSE_MS);
        drop(go(p.admit("grey.test", || false).await));
        p.accepted("grey.test");
        for _ in 0..PAUSE_AFTER {
            p.refused("grey.test");
        }
        let now = herald_plugin_runtime::clock::Clock::now_ms(&clock);
        assert!(matches!(p.admit("grey.test", || false).await, Admit::Paused(u) if u == now + FIRST_PAUSE_MS));
        // Names are compared without case.
        assert!(matches!(p.admit("GREY.test", || false).await, Admit::Paused(_)));
    }

    #[tokio::test]
    async fn a_destinations_fixed_rate_is_kept() {
        let (p, clock) = pacing(&[("gmail.com", Limits { max_per_second: Some(2), max_connections: None })]);
        drop(go(p.admit("gmail.com", || false).await));
        drop(go(p.admit("gmail.com", || false).await));
        let third = tokio::time::timeout(Duration::from_millis(300), p.admit("gmail.com", || false)).await;
        assert!(third.is_err(), "the third waits for the next second");
        clock.advance(500);
        drop(go(p.admit("gmail.com", || false).await));
    }
}
