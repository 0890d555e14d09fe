//! The server's own state for operators: database reachability and the metrics page.
//!
//! Must not import: salvo, surrealdb.

use crate::context::Context;

/// Whether the database answers.
pub async fn database_reachable(st: &Context) -> bool {
    st.store.health().await.is_ok()
}

/// The Prometheus text of every metric: the process's own counters, the job queue by state and the
/// deferred emails (each counted at most every few seconds) and the plugins'.
pub async fn metrics_text(st: &Context) -> String {
    let counts = st.store.job_counts_cached().await.unwrap_or_default();
    let deferred = st.store.deferred_emails_cached().await.ok();
    let mut body = crate::infra::metrics::render(&counts, deferred);
    body.push_str(&st.plugins.render_metrics());
    body
}
