//! How often a campaign's counters are recounted from its email records (docs/behaviour.md#campaigns).
//!
//! A recount reads every email record of the campaign: a few milliseconds for a small one, seconds for
//! one of a hundred thousand. Reads (`GET /campaigns/:id`, `/stats`) and the progress job share one
//! memory per process of each campaign's last recount, and a recount that took longer than
//! [`CHEAP`] is not repeated within [`BUDGET`] times its duration: however often a dashboard (or
//! anyone with a key) asks, recounting one campaign takes at most about 1/[`BUDGET`] of a core, and the
//! counters of a big campaign lag by at most that long. Small campaigns are recounted on every read.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::status::CampaignStatus;
use crate::store::campaigns::EmailCounts;

/// The campaign's status and run when it was recounted: a recount is only reused while both hold, so
/// after a cancel or completion (served by any process) the next read recounts.
pub type State = (CampaignStatus, i64);

/// A recount is not repeated within this many times its own duration (unless cheaper than [`CHEAP`]).
pub const BUDGET: u32 = 20;
/// Recounts that took less than this are never held back.
pub const CHEAP: Duration = Duration::from_millis(25);
/// Remembered campaigns above which those no longer holding anything back are forgotten.
const REMEMBERED: usize = 1024;

/// How long after a recount that took `cost` the next one waits, at least `base`.
pub fn hold(base: Duration, cost: Duration) -> Duration {
    let budget = if cost < CHEAP { Duration::ZERO } else { cost.saturating_mul(BUDGET) };
    base.max(budget)
}

/// One campaign's last recount in this process.
#[derive(Clone)]
struct Last {
    state: State,
    at: Instant,
    cost: Duration,
    counts: EmailCounts,
}

/// The last recount of each campaign, in this process.
#[derive(Default)]
pub struct Recounts {
    last: Mutex<HashMap<String, Last>>,
}

impl Recounts {
    fn last(&self) -> std::sync::MutexGuard<'_, HashMap<String, Last>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The counts of the campaign's last recount, when it was made in the same `state` and is recent
    /// enough that a new one, waiting at least `base`, is not due yet.
    pub fn fresh(&self, campaign: &str, state: State, base: Duration) -> Option<EmailCounts> {
        let last = self.last();
        let l = last.get(campaign)?;
        (l.state == state && l.at.elapsed() < hold(base, l.cost)).then(|| l.counts.clone())
    }

    /// Remembers a recount made in `state` that took `cost`.
    pub fn note(&self, campaign: &str, state: State, cost: Duration, counts: &EmailCounts) {
        let mut last = self.last();
        if last.len() >= REMEMBERED {
            let longest = super::RECOUNT_EVERY.max(super::READ_RECOUNT_EVERY);
            last.retain(|_, l| l.at.elapsed() < hold(longest, l.cost));
        }
        last.insert(campaign.to_string(), Last { state, at: Instant::now(), cost, counts: counts.clone() });
    }

    /// Forgets a campaign (it finished: its next read recounts).
    pub fn forget(&self, campaign: &str) {
        self.last().remove(campaign);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_costly_recount_holds_the_next_one_back_in_proportion_and_a_cheap_one_does_not() {
        let ms = Duration::from_millis;
        // Cheap: only the base applies (zero for a read of a campaign that is not sending).
        assert_eq!(hold(Duration::ZERO, ms(3)), Duration::ZERO);
        assert_eq!(hold(ms(2000), ms(24)), ms(2000));
        // Costly: twenty times its duration, or the base when that is longer.
        assert_eq!(hold(Duration::ZERO, ms(500)), ms(10_000));
        assert_eq!(hold(ms(2000), ms(500)), ms(10_000));
        assert_eq!(hold(ms(30_000), ms(500)), ms(30_000));
        assert_eq!(hold(Duration::ZERO, Duration::MAX), Duration::MAX, "no overflow");
    }

    #[test]
    fn counts_are_served_from_memory_only_while_the_hold_lasts_and_the_state_holds() {
        let r = Recounts::default();
        let sending = (CampaignStatus::Sending, 1);
        let counts = EmailCounts { total: 7, sent: 5, ..Default::default() };
        assert!(r.fresh("c", sending, Duration::ZERO).is_none(), "never recounted");
        r.note("c", sending, Duration::from_millis(1), &counts);
        assert!(r.fresh("c", sending, Duration::ZERO).is_none(), "cheap and no base: recount on every read");
        assert_eq!(r.fresh("c", sending, Duration::from_secs(60)), Some(counts.clone()), "within the base");
        r.note("c", sending, Duration::from_secs(3), &counts);
        assert_eq!(r.fresh("c", sending, Duration::ZERO), Some(counts), "costly: held back without a base");
        // Cancelled or sent meanwhile (perhaps by another process), or a new run: recounted at once.
        assert!(r.fresh("c", (CampaignStatus::Cancelled, 1), Duration::ZERO).is_none());
        assert!(r.fresh("c", (CampaignStatus::Sending, 2), Duration::ZERO).is_none());
        r.forget("c");
        assert!(r.fresh("c", sending, Duration::from_secs(60)).is_none());
    }
}
