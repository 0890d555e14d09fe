//! The counters that hold back account mail, invitations and password guessing, and their limits
//! (docs/security.md#sessions). They are rows of the database (`store::throttles`), so every process
//! of one database counts together.
//!
//! Must not import: salvo, surrealdb.

use crate::infra::clock::SharedClock;
use crate::store::{Store, StoreError};

/// One kind of count: after `max` counts of a key within a window of `window_ms` that began with its
/// first count, the key waits until that window has passed. A success may clear a key's count.
pub struct Throttle {
    kind: &'static str,
    max: u32,
    window_ms: i64,
    store: Store,
    clock: SharedClock,
}

impl Throttle {
    pub fn new(kind: &'static str, max: u32, window_ms: i64, store: Store, clock: SharedClock) -> Throttle {
        Throttle { kind, max, window_ms, store, clock }
    }

    /// Seconds to wait before `key` may count again, or None when it may now.
    pub async fn blocked(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let now = self.clock.now_ms();
        let Some(c) = self.store.throttle_count(self.kind, key).await? else { return Ok(None) };
        let ends = c.since + self.window_ms;
        Ok((c.count >= i64::from(self.max) && now < ends).then(|| ((ends - now) as u64).div_ceil(1000)))
    }

    /// Counts one for `key`.
    pub async fn failed(&self, key: &str) -> Result<(), StoreError> {
        self.store.throttle_add(self.kind, key, self.clock.now_ms(), self.window_ms).await
    }

    /// Clears `key`'s count.
    pub async fn succeeded(&self, key: &str) -> Result<(), StoreError> {
        self.store.throttle_clear(self.kind, key).await
    }
}

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

/// The counters behind the account-mail and invitation throttles.
pub struct Throttles {
    pub(crate) by_client: Throttle,
    pub(crate) by_client_address: Throttle,
    pub(crate) by_address: Throttle,
    pub(crate) invites_by_inviter: Throttle,
    pub(crate) invites_by_project: Throttle,
    pub(crate) invites_to_address: Throttle,
}

impl Throttles {
    pub fn new(store: &Store, clock: SharedClock) -> Throttles {
        let t = |kind, max, window| Throttle::new(kind, max, window, store.clone(), clock.clone());
        Throttles {
            by_client: t("mail.client", MAILS_PER_CLIENT, MAIL_WINDOW_MS),
            by_client_address: t("mail.client-address", MAILS_PER_CLIENT_AND_ADDRESS, MAIL_WINDOW_MS),
            by_address: t("mail.address", MAILS_PER_ADDRESS, MAIL_WINDOW_MS),
            invites_by_inviter: t("invite.inviter", PER_INVITER, INVITER_WINDOW_MS),
            invites_by_project: t("invite.project", PER_PROJECT, DAY_MS),
            invites_to_address: t("invite.address", PER_ADDRESS, DAY_MS),
        }
    }
}

/// The failed password checks of accounts, client addresses and SMTP clients ([`LOGIN_FAILURES`] in
/// [`LOGIN_WINDOW_MS`]).
pub fn login_failures(store: &Store, clock: SharedClock) -> Throttle {
    Throttle::new("login", LOGIN_FAILURES, LOGIN_WINDOW_MS, store.clone(), clock)
}
