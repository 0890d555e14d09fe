//! CSV import of contacts (docs/behaviour.md#bulk-changes-and-import): the file is checked whole when
//! it arrives (422 naming the problem), stored with its job, and imported by a queue job in chunks of
//! rows. Each chunk upserts its contacts by the rules `/v1/track` applies (`ingest::apply`, the same
//! batch write) in one transaction together with the job's progress, so a run after a crash resumes at
//! the first row not yet imported and no row counts or writes twice.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::ingest::{Upsert, apply, batch_changes, changed};
use crate::context::Context;
use crate::domain::contacts::DataPatch;
use crate::domain::import::{self, Header, Row};
use crate::domain::status::ContactJobState;
use crate::error::Error;
use crate::infra::jobs::Registry;
use crate::store::contact_jobs::{ContactJobRow, NewContactJob, Progress};
use crate::store::contacts::Contact;
use crate::store::{Store, StoreError};

/// The queue job that runs an import.
pub const IMPORT_JOB: &str = "contacts.import";
/// The `kind` of an import's contact job.
pub const IMPORT_KIND: &str = "import";
/// Largest file taken.
pub const MAX_FILE_BYTES: usize = 5 * 1024 * 1024;
/// Rows upserted per transaction.
const CHUNK: usize = 500;
/// Attempts of an import job before it is FAILED.
const ATTEMPTS: i64 = 5;
/// Tries of a chunk whose contacts keep changing under it before the attempt fails.
const STALE_TRIES: usize = 16;
const COUNTERS: &[&str] = &["created", "updated", "skipped", "failed"];

/// What an import was asked besides its file.
#[derive(Debug, Clone, Copy)]
pub struct ImportOptions {
    /// Subscription of contacts the import creates (a row's `subscribed` column wins).
    pub subscribed: bool,
    /// Whether rows update contacts that exist (otherwise they are skipped).
    pub update_existing: bool,
}

fn job_not_found(id: &str) -> Error {
    Error::not_found("JOB_NOT_FOUND", format!("Import job {id} not found"))
}

/// Checks a file and queues its import; answers the job's id. A file that is not UTF-8 CSV with a
/// header row and an `email` column is 422 naming `file`.
pub async fn start(st: &Context, project: &str, bytes: &[u8], opts: ImportOptions) -> Result<String, Error> {
    let checked = import::check(bytes).map_err(|p| Error::field("file", "invalid_file", &p.0, Value::Null))?;
    let now = st.clock.now_ms();
    let id = uuid::Uuid::now_v7().to_string();
    let mut job = crate::store::jobs::NewJob::new(IMPORT_JOB, json!({ "id": id }), now);
    job.max_attempts = ATTEMPTS;
    let options = json!({
        "subscribed": opts.subscribed, "updateExisting": opts.update_existing, "header": checked.header,
    });
    let new = NewContactJob {
        id: &id,
        project,
        kind: IMPORT_KIND,
        input: &[],
        total: checked.rows as i64,
        counters: COUNTERS,
        options: Some(options),
        file: Some(&checked.text),
    };
    st.store.create_contact_job(&new, &job, now).await?;
    st.job_wake.kind(IMPORT_JOB);
    Ok(id)
}

/// An import job of the project (404 for another project's, or for a bulk job).
pub async fn get(st: &Context, project: &str, id: &str) -> Result<ContactJobRow, Error> {
    match st.store.contact_job(project, id).await? {
        Some(row) if row.kind == IMPORT_KIND => Ok(row),
        _ => Err(job_not_found(id)),
    }
}

/// Registers the job that runs imports; `max_contacts` is the project's contacts ceiling (0: none).
pub fn register(registry: &mut Registry, max_contacts: u64) {
    super::contact_jobs::register_job(registry, IMPORT_JOB, ATTEMPTS, move |store, id, now| async move {
        run(&store, &id, now, max_contacts).await
    });
}

/// Why a row that would add a contact was not imported.
fn past_ceiling(limit: u64) -> String {
    format!("the project has reached its ceiling of {limit} contacts (HERALD_MAX_CONTACTS)")
}

/// Runs an import from where it stands.
async fn run(store: &Store, id: &str, now: i64, max_contacts: u64) -> Result<(), StoreError> {
    let Some((row, _)) = store.contact_job_input(id).await? else { return Ok(()) };
    if row.kind != IMPORT_KIND || matches!(row.state, ContactJobState::Completed | ContactJobState::Failed) {
        return Ok(());
    }
    let options = row.options.clone().unwrap_or(Value::Null);
    let header: Header = serde_json::from_value(options["header"].clone())
        .map_err(|e| StoreError::Decode(format!("the import's header: {e}")))?;
    let opts = ImportOptions {
        subscribed: options["subscribed"].as_bool().unwrap_or(true),
        update_existing: options["updateExisting"].as_bool().unwrap_or(true),
    };
    let Some(text) = store.contact_job_file(id).await? else {
        let why = "the import's file is gone";
        return store.set_contact_job_state(id, ContactJobState::Failed, Some(why), now).await;
    };
    if row.state == ContactJobState::Queued {
        store.set_contact_job_state(id, ContactJobState::Active, None, now).await?;
    }
    let done = usize::try_from(row.done).unwrap_or(0);
    // The contacts the project may still add (docs/security.md#quotas), counted once per run.
    let mut left = match max_contacts {
        0 => None,
        limit => Some(limit.saturating_sub(store.count_contacts(&row.project, None, None).await?.max(0) as u64)),
    };
    let ceiling = (max_contacts > 0).then_some(max_contacts);
    let mut rows = import::rows(&text, &header, done);
    let mut from = done;
    loop {
        let chunk: Vec<Row> = rows.by_ref().take(CHUNK).collect();
        if chunk.is_empty() {
            break;
        }
        let to = from + chunk.len();
        write_chunk(store, id, &row.project, (from, to), &chunk, opts, (ceiling, &mut left), now).await?;
        from = to;
    }
    store.set_contact_job_state(id, ContactJobState::Completed, None, now).await
}

/// Upserts one chunk's contacts and moves the job past it, in one transaction; reads and plans again
/// when a contact changed meanwhile. A row that would add a contact once the project has none `left`
/// of its ceiling fails with the reason.
#[allow(clippy::too_many_arguments)]
async fn write_chunk(
    store: &Store,
    job: &str,
    project: &str,
    (from, to): (usize, usize),
    chunk: &[Row],
    opts: ImportOptions,
    (ceiling, left): (Option<u64>, &mut Option<u64>),
    now: i64,
) -> Result<(), StoreError> {
    let mut emails: Vec<String> = chunk
        .iter()
        .filter_map(|r| match r {
            Row::Contact { email, .. } => Some(email.clone()),
            Row::Bad { .. } => None,
        })
        .collect();
    emails.sort_unstable();
    emails.dedup();
    for _ in 0..STALE_TRIES {
        let read = store.group_contacts(project, &emails).await?;
        let original: HashMap<String, Contact> = read.contacts.iter().map(|c| (c.email.clone(), c.clone())).collect();
        let mut current = original.clone();
        let (mut created, mut updated, mut skipped, mut failed) = (0i64, 0i64, 0i64, 0i64);
        let mut events = Vec::new();
        let mut errors = Vec::new();
        let mut room = *left;
        for r in chunk {
            match r {
                Row::Bad { line, email, reason } => {
                    failed += 1;
                    errors.push(json!({ "line": line, "email": email, "reason": reason }));
                }
                Row::Contact { line, email, subscribed, data } => {
                    let existing = current.get(email);
                    if existing.is_some() && !opts.update_existing {
                        skipped += 1;
                        continue;
                    }
                    if existing.is_none() {
                        match room.as_mut() {
                            Some(0) => {
                                failed += 1;
                                let reason = past_ceiling(ceiling.unwrap_or_default());
                                errors.push(json!({ "line": line, "email": email, "reason": reason }));
                                continue;
                            }
                            Some(n) => *n -= 1,
                            None => {}
                        }
                    }
                    let u = Upsert {
                        email: email.clone(),
                        subscribed: *subscribed,
                        default_subscribed: opts.subscribed,
                        patch: DataPatch::parse(data, false),
                        event: None,
                    };
                    let a = apply(project, existing, &u, now);
                    match existing {
                        None => created += 1,
                        Some(before) if changed(before, &a.contact) => updated += 1,
                        Some(_) => skipped += 1,
                    }
                    events.extend(a.events);
                    current.insert(email.clone(), a.contact);
                }
            }
        }
        let (new, changes) = batch_changes(&original, &current, now);
        let unchanged = read.unchanged_remembered(&changes);
        let progress = Progress {
            job: job.to_string(),
            from: from as i64,
            to: to as i64,
            add: vec![("created", created), ("updated", updated), ("skipped", skipped), ("failed", failed)],
            errors,
            now,
        };
        match store.write_import_chunk(project, &new, &changes, &unchanged, &events, &progress).await {
            Ok(_) => {
                *left = room;
                return Ok(());
            }
            // A contact changed or was created meanwhile: the batch forgot its contacts; read again.
            Err(StoreError::Busy(_) | StoreError::Conflict(_)) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Busy("the contacts of an import chunk kept changing".into()))
}
