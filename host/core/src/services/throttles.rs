//! The per-process counters that hold back account mail, invitations and password guessing, and their
//! limits (docs/security.md#sessions).
//!
//! Must not import: salvo, surrealdb.

use crate::infra::clock::SharedClock;
use crate::infra::ratelimit::FailureThrottle;

/// Failed password checks of one account (or from one address) within [`LOGIN_WINDOW_MS`] after which
/// more attempts wait (docs/security.md#sessions).
pub const LOGIN_FAILURES: u32 = 10;
pub const LOGIN_WINDOW_MS: i64 = 15 * 60_000;

/// Invitations one user may send per [`INVITER_WINDOW_MS`].
pub const PER_INVITER: u32 = 20;
pub const INVITER_WINDOW_MS: i64 = 3_600_000;
/// Invitations one project may send, and one address may receive, per [`DAY_MS`].
pub const PER_PROJECT: u32 = 50;
pub const PER_ADDRESS: u32 = 5;
pub const DAY_MS: i64 = 24 * 3_600_000;

/// Account mails one client may ask for about one address, and about any addresses, per
/// [`MAIL_WINDOW_MS`]; past either the client is answered 429.
pub const MAILS_PER_CLIENT_AND_ADDRESS: u32 = 5;
pub const MAILS_PER_CLIENT: u32 = 30;
/// Account mails one address is sent per [`MAIL_WINDOW_MS`], whoever asks. Past it a request is
/// answered as usual but sends nothing and leaves the last link mailed working, so nobody can keep the
/// owner of an address from their own links by asking for many.
pub const MAILS_PER_ADDRESS: u32 = 20;
pub const MAIL_WINDOW_MS: i64 = 3_600_000;

/// The per-process counters behind the account-mail and invitation throttles.
pub struct Throttles {
    pub(crate) by_client: FailureThrottle,
    pub(crate) by_client_address: FailureThrottle,
    pub(crate) by_address: FailureThrottle,
    pub(crate) invites_by_inviter: FailureThrottle,
    pub(crate) invites_by_project: FailureThrottle,
    pub(crate) invites_to_address: FailureThrottle,
}

impl Throttles {
    pub fn new(clock: SharedClock) -> Throttles {
        let t = |max, window| FailureThrottle::new(max, window, clock.clone());
        Throttles {
            by_client: t(MAILS_PER_CLIENT, MAIL_WINDOW_MS),
            by_client_address: t(MAILS_PER_CLIENT_AND_ADDRESS, MAIL_WINDOW_MS),
            by_address: t(MAILS_PER_ADDRESS, MAIL_WINDOW_MS),
            invites_by_inviter: t(PER_INVITER, INVITER_WINDOW_MS),
            invites_by_project: t(PER_PROJECT, DAY_MS),
            invites_to_address: t(PER_ADDRESS, DAY_MS),
        }
    }
}
