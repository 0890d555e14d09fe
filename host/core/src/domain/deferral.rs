//! When a deferred email is tried again, and when Herald gives up on it (docs/delivery.md#deferral).
//!
//! A temporary failure (an SMTP 4xx, a refused or dropped connection, a transport plugin's `temporary`
//! or `rate-limited`) defers an email instead of failing it. Its attempts follow a schedule that grows
//! ([`RETRY_AFTER_SECS`], then hourly), and the email is FAILED when its give-up window, counted from
//! when it was written, ends: at that moment, not at some later attempt, so no attempt is ever planned
//! past the window's end.
//!
//! Must not import: salvo, surrealdb, tokio.

/// Seconds from the n-th failed attempt to the next one (n = 1, 2, ...); past the list, hourly.
pub const RETRY_AFTER_SECS: [i64; 6] = [60, 120, 300, 600, 1200, 1800];
/// The wait after the attempts the list names.
pub const THEN_EVERY_SECS: i64 = 3600;
/// The give-up window when none is set: 72 hours.
pub const DEFAULT_GIVE_UP_AFTER_SECS: i64 = 259_200;

/// What becomes of a deferred email.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Tried again at this moment (ms).
    At(i64),
    /// Its window ended: FAILED now, with the last reason.
    GiveUp,
}

/// The moment an email written at `created_at` is given up (ms).
pub fn deadline(created_at: i64, give_up_after_ms: i64) -> i64 {
    created_at.saturating_add(give_up_after_ms)
}

/// The wait after the `failed`-th failed attempt (1-based; 0 counts as 1), in ms.
pub fn wait_after(failed: i64) -> i64 {
    let i = failed.max(1) - 1;
    let secs = usize::try_from(i).ok().and_then(|i| RETRY_AFTER_SECS.get(i)).copied().unwrap_or(THEN_EVERY_SECS);
    secs * 1000
}

/// After the `failed`-th failed attempt at `now` of an email whose window ends at `deadline`: the next
/// attempt, never later than the deadline (where the email is given up), or [`Next::GiveUp`] when the
/// window has ended.
pub fn after_failure(failed: i64, now: i64, deadline: i64) -> Next {
    if now >= deadline { Next::GiveUp } else { Next::At(now.saturating_add(wait_after(failed)).min(deadline)) }
}

/// Whether a deferred email is to be tried now: its window has not ended (see [`due_to_fail`]) and its
/// next attempt has come, or it has none (it waits for its transport, which the caller found up).
pub fn due(next_attempt_at: Option<i64>, now: i64) -> bool {
    next_attempt_at.is_none_or(|at| at <= now)
}

/// Whether a deferred email's window has ended: it is FAILED without another attempt.
pub fn due_to_fail(deadline: i64, now: i64) -> bool {
    now >= deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_grows_then_stays_hourly() {
        let cases = [(0, 60), (1, 60), (2, 120), (3, 300), (4, 600), (5, 1200), (6, 1800), (7, 3600), (500, 3600)];
        for (failed, secs) in cases {
            assert_eq!(wait_after(failed), secs * 1000, "after {failed} failed attempts");
        }
        assert_eq!(wait_after(i64::MAX), 3_600_000, "no overflow");
    }

    #[test]
    fn no_attempt_is_planned_past_the_window_and_the_window_ends_on_time() {
        let deadline = deadline(1_000, 259_200_000);
        assert_eq!(deadline, 259_201_000);
        let cases = [
            // (failed attempts, now, what next)
            (1, 1_000, Next::At(61_000)),
            (7, 100_000_000, Next::At(103_600_000)),
            // The next attempt would come after the window: the deadline instead, where it is given up.
            (7, 259_000_000, Next::At(259_201_000)),
            (2, 259_200_999, Next::At(259_201_000)),
            (1, 259_201_000, Next::GiveUp),
            (1, 300_000_000, Next::GiveUp),
        ];
        for (failed, now, want) in cases {
            assert_eq!(after_failure(failed, now, deadline), want, "{failed} failed, at {now}");
        }
        assert!(due_to_fail(deadline, deadline) && !due_to_fail(deadline, deadline - 1));
    }

    #[test]
    fn a_deferred_email_is_due_at_its_time_or_when_it_waits_for_its_transport() {
        assert!(due(None, 5));
        assert!(due(Some(5), 5));
        assert!(!due(Some(6), 5));
        assert_eq!(deadline(i64::MAX - 1, 10), i64::MAX, "no overflow");
    }
}
