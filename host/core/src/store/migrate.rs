//! Schema migrations: `migrations/NNNN_name.surql`, applied in order at start-up and recorded with a
//! SHA-256 checksum. A migration whose text changed after it was applied stops start-up with a message
//! naming the file.

use sha2::{Digest, Sha256};

use super::{Store, StoreError};
use crate::vars;

/// Every migration, in order. Add new files here; never edit a released one.
pub const MIGRATIONS: &[(&str, &str)] = &[
    ("0001_foundation.surql", include_str!("../../../../migrations/0001_foundation.surql")),
    ("0002_contacts_events.surql", include_str!("../../../../migrations/0002_contacts_events.surql")),
    ("0003_domains.surql", include_str!("../../../../migrations/0003_domains.surql")),
    ("0004_templates.surql", include_str!("../../../../migrations/0004_templates.surql")),
    ("0005_emails.surql", include_str!("../../../../migrations/0005_emails.surql")),
    ("0006_tracking.surql", include_str!("../../../../migrations/0006_tracking.surql")),
    ("0007_notifications.surql", include_str!("../../../../migrations/0007_notifications.surql")),
    ("0008_plugins.surql", include_str!("../../../../migrations/0008_plugins.surql")),
    ("0009_segments.surql", include_str!("../../../../migrations/0009_segments.surql")),
    ("0011_campaigns.surql", include_str!("../../../../migrations/0011_campaigns.surql")),
    ("0012_email_bodies.surql", include_str!("../../../../migrations/0012_email_bodies.surql")),
    ("0013_email_lookups.surql", include_str!("../../../../migrations/0013_email_lookups.surql")),
    ("0014_segment_track.surql", include_str!("../../../../migrations/0014_segment_track.surql")),
    ("0015_outbox.surql", include_str!("../../../../migrations/0015_outbox.surql")),
    ("0016_contact_count.surql", include_str!("../../../../migrations/0016_contact_count.surql")),
    ("0017_job_interruptions.surql", include_str!("../../../../migrations/0017_job_interruptions.surql")),
    ("0018_revoked_sessions.surql", include_str!("../../../../migrations/0018_revoked_sessions.surql")),
    ("0019_domain_claims.surql", include_str!("../../../../migrations/0019_domain_claims.surql")),
    ("0020_attachment_sets.surql", include_str!("../../../../migrations/0020_attachment_sets.surql")),
    ("0021_campaign_gates.surql", include_str!("../../../../migrations/0021_campaign_gates.surql")),
    ("0022_email_reports.surql", include_str!("../../../../migrations/0022_email_reports.surql")),
    ("0023_workflows.surql", include_str!("../../../../migrations/0023_workflows.surql")),
    ("0024_workflow_triggers.surql", include_str!("../../../../migrations/0024_workflow_triggers.surql")),
    ("0025_workflow_schedules.surql", include_str!("../../../../migrations/0025_workflow_schedules.surql")),
    ("0026_contact_jobs.surql", include_str!("../../../../migrations/0026_contact_jobs.surql")),
    ("0027_activity.surql", include_str!("../../../../migrations/0027_activity.surql")),
    ("0028_account_tokens.surql", include_str!("../../../../migrations/0028_account_tokens.surql")),
    ("0029_billing.surql", include_str!("../../../../migrations/0029_billing.surql")),
    ("0030_suspension.surql", include_str!("../../../../migrations/0030_suspension.surql")),
    ("0031_payments.surql", include_str!("../../../../migrations/0031_payments.surql")),
    ("0032_step_runs_in_execution.surql", include_str!("../../../../migrations/0032_step_runs_in_execution.surql")),
    ("0033_awaited_events.surql", include_str!("../../../../migrations/0033_awaited_events.surql")),
    ("0034_pending_signups.surql", include_str!("../../../../migrations/0034_pending_signups.surql")),
    ("0035_billing_hardening.surql", include_str!("../../../../migrations/0035_billing_hardening.surql")),
    ("0036_workflow_loops.surql", include_str!("../../../../migrations/0036_workflow_loops.surql")),
    ("0037_uploads.surql", include_str!("../../../../migrations/0037_uploads.surql")),
    ("0038_suppressions.surql", include_str!("../../../../migrations/0038_suppressions.surql")),
    ("0039_webhooks.surql", include_str!("../../../../migrations/0039_webhooks.surql")),
    ("0040_tallies.surql", include_str!("../../../../migrations/0040_tallies.surql")),
    ("0041_inbound.surql", include_str!("../../../../migrations/0041_inbound.surql")),
    ("0042_throttles.surql", include_str!("../../../../migrations/0042_throttles.surql")),
    ("0043_deferral.surql", include_str!("../../../../migrations/0043_deferral.surql")),
    ("0044_inbound_optin.surql", include_str!("../../../../migrations/0044_inbound_optin.surql")),
    ("0045_inbound_spool.surql", include_str!("../../../../migrations/0045_inbound_spool.surql")),
    ("0046_webhook_payloads.surql", include_str!("../../../../migrations/0046_webhook_payloads.surql")),
    ("0047_segment_depth.surql", include_str!("../../../../migrations/0047_segment_depth.surql")),
    ("0048_retention.surql", include_str!("../../../../migrations/0048_retention.surql")),
];

#[derive(serde::Deserialize)]
struct Applied {
    name: String,
    checksum: String,
}

fn checksum(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// What `herald migrate --dry-run` reports: the migrations not yet applied, in order, and those applied
/// whose file changed since (applying would refuse to start).
#[derive(Debug, Default, serde::Serialize)]
pub struct Plan {
    pub pending: Vec<String>,
    pub changed: Vec<String>,
}

/// The migrations `apply` would apply, without applying any (nor creating the migration table).
pub async fn plan(store: &Store) -> Result<Plan, StoreError> {
    plan_list(store, MIGRATIONS).await
}

pub async fn plan_list(store: &Store, list: &[(&str, &str)]) -> Result<Plan, StoreError> {
    // A database no migration touched yet has no migration table: everything is pending.
    let tables = store.query("INFO FOR DB", vars! {}).await?.value(0)?;
    let known = tables.get("tables").and_then(|t| t.get("migration")).is_some();
    let recorded: Vec<Applied> = match known {
        true => store.query("SELECT name, checksum FROM migration", vars! {}).await?.all(0)?,
        false => Vec::new(),
    };
    let mut plan = Plan::default();
    for (name, text) in list {
        match recorded.iter().find(|a| a.name == *name) {
            None => plan.pending.push(name.to_string()),
            Some(a) if a.checksum != checksum(text) => plan.changed.push(name.to_string()),
            Some(_) => {}
        }
    }
    Ok(plan)
}

/// Applies every migration not yet recorded. Returns the names applied now.
pub async fn apply(store: &Store) -> Result<Vec<String>, StoreError> {
    apply_list(store, MIGRATIONS).await
}

pub async fn apply_list(store: &Store, list: &[(&str, &str)]) -> Result<Vec<String>, StoreError> {
    // Several processes may start at once against one server: every step below is retried when
    // SurrealDB reports a write conflict, and a migration is checked again before each attempt, so the
    // first process applies it and the others find it recorded (docs/behaviour.md#running-several-processes).
    store
        .write(|| {
            store.query(
                "DEFINE TABLE IF NOT EXISTS migration SCHEMAFULL;
                 DEFINE FIELD IF NOT EXISTS name ON migration TYPE string;
                 DEFINE FIELD IF NOT EXISTS checksum ON migration TYPE string;
                 DEFINE FIELD IF NOT EXISTS applied_at ON migration TYPE int;
                 DEFINE INDEX IF NOT EXISTS migration_name ON migration FIELDS name UNIQUE;",
                vars! {},
            )
        })
        .await
        .map_err(|e| StoreError::Migration(format!("cannot create the migration table: {e}")))?;
    let mut applied_now = Vec::new();
    for (name, text) in list {
        if apply_one(store, name, text).await? {
            tracing::info!(migration = %name, "applied migration");
            applied_now.push(name.to_string());
        }
    }
    Ok(applied_now)
}

/// Applies one migration unless it is recorded; true when this call applied it.
async fn apply_one(store: &Store, name: &str, text: &str) -> Result<bool, StoreError> {
    let sum = checksum(text);
    let sql = format!(
        "BEGIN TRANSACTION;\n{text}\nCREATE migration SET name = $name, checksum = $checksum, applied_at = $now;\nCOMMIT TRANSACTION;"
    );
    let recorded = || async {
        let existing: Option<Applied> = store
            .query("SELECT name, checksum FROM migration WHERE name = $name", vars! { "name": name })
            .await?
            .first(0)?;
        match existing {
            Some(a) if a.checksum == sum => Ok(true),
            Some(a) => Err(StoreError::Migration(format!(
                "migration {} was changed after it was applied (recorded checksum {}, file now {}); \
                 restore the file and put the change in a new migration",
                a.name, a.checksum, sum
            ))),
            None => Ok(false),
        }
    };
    let outcome = store
        .write(|| async {
            if store.write(recorded).await? {
                return Ok(false);
            }
            let now = crate::infra::clock::wall_now_ms();
            match store.query(&sql, vars! { "name": name, "checksum": sum.clone(), "now": now }).await {
                Ok(_) => Ok(true),
                Err(e) if e.is_retryable() => Err(e),
                // Another process may have applied it at the same moment (its record, or a definition
                // it made, conflicts with this attempt): then what it recorded must be this text.
                Err(e) => match store.write(recorded).await? {
                    true => Ok(false),
                    false => Err(e),
                },
            }
        })
        .await;
    outcome.map_err(|e| match e {
        StoreError::Migration(m) => StoreError::Migration(m),
        e => StoreError::Migration(format!("migration {name} failed: {e}")),
    })
}
