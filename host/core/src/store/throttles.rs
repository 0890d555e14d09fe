//! The shared counters of `services::throttles`: one `throttle` row per (kind, key) with the count and
//! the window it counts in, so every process of a database sees the same counts.

use serde::Deserialize;

use super::{Store, StoreError};
use crate::vars;

/// A key's count and when its window began.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub struct Count {
    pub count: i64,
    pub since: i64,
}

impl Store {
    /// The count of `key` under `kind`, if it counted in a window not yet purged.
    pub async fn throttle_count(&self, kind: &str, key: &str) -> Result<Option<Count>, StoreError> {
        self.query(
            "SELECT count, since FROM ONLY type::record('throttle', [$kind, $key])",
            vars! { "kind": kind, "key": key },
        )
        .await?
        .first(0)
    }

    /// Counts one more for `key` under `kind`: in the current window, or in a new one from `now` when
    /// there was none or it has passed (`window_ms` long). One transaction, so concurrent counts add up.
    pub async fn throttle_add(&self, kind: &str, key: &str, now: i64, window_ms: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "BEGIN TRANSACTION;
                 LET $old = (SELECT count, since FROM ONLY type::record('throttle', [$kind, $key]));
                 LET $fresh = $now >= ($old.since ?? ($now - $window)) + $window;
                 LET $since = IF $fresh { $now } ELSE { $old.since };
                 UPSERT type::record('throttle', [$kind, $key]) SET
                    count = IF $fresh { 1 } ELSE { $old.count + 1 }, since = $since, expires = $since + $window
                 RETURN NONE;
                 COMMIT TRANSACTION;",
                vars! { "kind": kind, "key": key, "now": now, "window": window_ms },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Forgets the count of `key` under `kind`.
    pub async fn throttle_clear(&self, kind: &str, key: &str) -> Result<(), StoreError> {
        self.write(|| async {
            self.query("DELETE type::record('throttle', [$kind, $key]) RETURN NONE", vars! { "kind": kind, "key": key })
                .await
        })
        .await
        .map(|_| ())
    }

    /// Deletes the counts whose window has passed.
    pub async fn purge_throttles(&self, now: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query("DELETE throttle WHERE expires <= $now RETURN NONE", vars! { "now": now }).await
        })
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_add_up_in_their_window_and_start_again_after_it() {
        let s = Store::connect(&crate::config::Config::for_tests()).await.expect("store");
        assert_eq!(s.throttle_count("login", "a").await.unwrap(), None);
        for now in [1_000, 2_000, 3_000] {
            s.throttle_add("login", "a", now, 10_000).await.unwrap();
        }
        assert_eq!(s.throttle_count("login", "a").await.unwrap(), Some(Count { count: 3, since: 1_000 }));
        assert_eq!(s.throttle_count("login", "b").await.unwrap(), None, "keys count apart");
        assert_eq!(s.throttle_count("mail", "a").await.unwrap(), None, "kinds count apart");
        // The window began with the first count: at its end a new one begins.
        s.throttle_add("login", "a", 11_000, 10_000).await.unwrap();
        assert_eq!(s.throttle_count("login", "a").await.unwrap(), Some(Count { count: 1, since: 11_000 }));
        s.throttle_add("login", "b", 11_000, 10_000).await.unwrap();
        s.purge_throttles(20_999).await.unwrap();
        assert!(s.throttle_count("login", "a").await.unwrap().is_some(), "its window ends at 21,000");
        s.purge_throttles(21_000).await.unwrap();
        assert_eq!(s.throttle_count("login", "a").await.unwrap(), None);
        s.throttle_add("login", "c", 30_000, 10_000).await.unwrap();
        s.throttle_clear("login", "c").await.unwrap();
        assert_eq!(s.throttle_count("login", "c").await.unwrap(), None);
    }
}
