//! The current time as the host sees it (WIT `clock`). Tests may freeze it: in a native build it
//! comes from the [`MockHost`](crate::mock::MockHost), or from the system clock when none is set.

/// Milliseconds since the Unix epoch, UTC.
pub fn now_ms() -> i64 {
    crate::backend::now_ms()
}
