//! Plugin-defined counters (WIT `metrics`, new in `herald:plugin@1.1.0`). The host exports them on its
//! `/metrics` page as `herald_plugin_counter_total{plugin="<name>",counter="<name>"}`. In a native build
//! they are recorded by the [`MockHost`](crate::mock::MockHost) ([`MockGuard::counter`](crate::mock::MockGuard::counter)).

/// Adds `delta` to the counter `name`: lowercase letters, digits and underscores, at most 64 characters
/// (the host ignores other names and keeps at most 1,000 counters per process).
pub fn counter(name: &str, delta: u64) {
    crate::backend::counter(name, delta)
}
