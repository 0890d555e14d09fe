//! Contact jobs: the row a client polls for a bulk change (and, later, a CSV import), beside the
//! durable queue's job that does the work. A chunk's changes and its progress commit in one transaction
//! guarded by the progress it started from, so a job run again after a crash continues at the first
//! input not yet handled and no chunk counts twice.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::events::{Event, OUTBOX_INSERT, outbox_row};
use super::jobs::NewJob;
use super::{Store, StoreError};
use crate::domain::status::ContactJobState;
use crate::vars;

#[derive(Debug, Clone, Deserialize)]
pub struct ContactJobRow {
    pub id: String,
    pub project: String,
    pub kind: String,
    pub state: ContactJobState,
    pub total: i64,
    pub done: i64,
    /// What the job did so far: counters by name.
    pub result: Map<String, Value>,
    /// The first 100 bad rows of an import: `{line, email, reason}`.
    #[serde(default)]
    pub errors: Vec<Value>,
    #[serde(default)]
    pub options: Option<Value>,
    pub error: Option<String>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
}

const FIELDS: &str =
    "record::id(id) AS id, project, kind, state, total, done, result, errors, options, error, created_at, finished_at";

/// A contact job to create.
pub struct NewContactJob<'a> {
    pub id: &'a str,
    pub project: &'a str,
    pub kind: &'a str,
    /// The contact ids of a bulk job.
    pub input: &'a [String],
    pub total: i64,
    /// The names of its result's counters (each starts at 0).
    pub counters: &'a [&'a str],
    /// What an import was asked, and its file's header.
    pub options: Option<Value>,
    /// An import's file.
    pub file: Option<&'a str>,
}

/// How a chunk's write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkWrite {
    Done,
    /// A contact changed since it was read: read the chunk again.
    Stale,
    /// The job's progress is no longer where the chunk started (another run wrote it): skip ahead.
    Moved,
}

/// A subscription flip of one contact read at `version`.
pub struct Flip {
    pub id: String,
    pub version: i64,
}

fn counters(add: &[(&str, i64)]) -> Value {
    Value::Object(add.iter().map(|(k, n)| (k.to_string(), Value::from(*n))).collect())
}

/// The statements that move the job from `$from` to `$to`, add `$add` to its counters and `$errs` to its
/// first 100 errors (THROW `CHUNK_MOVED` when another run got there first).
pub(super) const ADVANCE: &str = "
    LET $j = (SELECT done, result, errors FROM ONLY type::record('contact_job', $job));
    IF $j == NONE OR $j.done != $from { THROW 'CHUNK_MOVED'; };
    UPDATE type::record('contact_job', $job) SET done = $to, updated_at = $now,
        result = object::from_entries(object::entries($j.result).map(|$e| [$e[0], $e[1] + ($add[$e[0]] ?? 0)])),
        errors = array::slice(array::concat($j.errors, $errs), 0, 100)
        RETURN NONE;";

/// Where a chunk moves its job, for a write that carries it (`Store::write_import_chunk`).
pub struct Progress {
    pub job: String,
    pub from: i64,
    pub to: i64,
    /// Counters to add, by name.
    pub add: Vec<(&'static str, i64)>,
    /// Errors to keep (the first 100 of the job are).
    pub errors: Vec<Value>,
    pub now: i64,
}

impl Progress {
    /// The bindings [`ADVANCE`] reads.
    pub(super) fn bind(&self, v: &mut Value) {
        v["job"] = Value::from(self.job.clone());
        v["from"] = Value::from(self.from);
        v["to"] = Value::from(self.to);
        v["add"] = counters(&self.add);
        v["errs"] = Value::Array(self.errors.clone());
        v["now"] = Value::from(self.now);
    }
}

impl Store {
    /// Creates a contact job and the queue job that runs it, in one transaction.
    pub async fn create_contact_job(&self, new: &NewContactJob<'_>, job: &NewJob, now: i64) -> Result<(), StoreError> {
        let id = new.id;
        let doc = vars! {
            "project": new.project, "kind": new.kind, "state": ContactJobState::Queued, "total": new.total, "done": 0,
            "input": new.input, "result": counters(&new.counters.iter().map(|k| (*k, 0)).collect::<Vec<_>>()),
            "errors": [], "options": new.options, "created_at": now, "updated_at": now,
        };
        let doc = super::jobs::strip_nulls(doc);
        let file = if new.file.is_some() {
            "CREATE type::record('contact_job_file', $id) CONTENT { content: $file } RETURN NONE;"
        } else {
            ""
        };
        let job = job.doc(now);
        self.write(|| async {
            self.query(
                &format!(
                    "BEGIN TRANSACTION;
                 CREATE type::record('contact_job', $id) CONTENT $doc RETURN NONE;
                 {file}
                 INSERT INTO job [$job] RETURN NONE;
                 COMMIT TRANSACTION;"
                ),
                vars! { "id": id, "doc": doc.clone(), "job": job.clone(), "file": new.file },
            )
            .await
        })
        .await?;
        Ok(())
    }

    /// A contact job of the project (None for another project's).
    pub async fn contact_job(&self, project: &str, id: &str) -> Result<Option<ContactJobRow>, StoreError> {
        self.query(
            &format!("SELECT {FIELDS} FROM ONLY type::record('contact_job', $id) WHERE project = $p"),
            vars! { "p": project, "id": id },
        )
        .await?
        .first(0)
    }

    /// A contact job and its input, for the job that runs it.
    pub async fn contact_job_input(&self, id: &str) -> Result<Option<(ContactJobRow, Vec<String>)>, StoreError> {
        #[derive(Deserialize)]
        struct WithInput {
            #[serde(flatten)]
            row: ContactJobRow,
            input: Vec<String>,
        }
        let found: Option<WithInput> = self
            .query(&format!("SELECT {FIELDS}, input FROM ONLY type::record('contact_job', $id)"), vars! { "id": id })
            .await?
            .first(0)?;
        Ok(found.map(|f| (f.row, f.input)))
    }

    /// An import's file (None once the job ended).
    pub async fn contact_job_file(&self, id: &str) -> Result<Option<String>, StoreError> {
        let v = self
            .query("RETURN (SELECT VALUE content FROM ONLY type::record('contact_job_file', $id))", vars! { "id": id })
            .await?
            .value(0)?;
        Ok(v.as_str().map(str::to_string))
    }

    /// Moves a contact job to `state` (`error` with FAILED; a finished job gets its end time).
    pub async fn set_contact_job_state(
        &self,
        id: &str,
        state: ContactJobState,
        error: Option<&str>,
        now: i64,
    ) -> Result<(), StoreError> {
        let finished = matches!(state, ContactJobState::Completed | ContactJobState::Failed).then_some(now);
        self.write(|| async {
            self.query(
                "UPDATE type::record('contact_job', $id) SET state = $state, error = $error ?? NONE, finished_at = $fin ?? NONE,
                    updated_at = $now RETURN NONE;
                 IF $fin != NULL { DELETE type::record('contact_job_file', $id); };",
                vars! { "id": id, "state": state, "error": error, "fin": finished, "now": now },
            )
            .await
        })
        .await?;
        Ok(())
    }

    /// Writes one chunk of a bulk subscription change: the flips (each guarded by the version it was
    /// read at) with their events, and the job's progress from `from` to `to` with `add` counted.
    #[allow(clippy::too_many_arguments)]
    pub async fn bulk_subscription_chunk(
        &self,
        job: &str,
        project: &str,
        (from, to): (i64, i64),
        flips: &[Flip],
        subscribed: bool,
        events: &[Event],
        add: &[(&str, i64)],
        now: i64,
    ) -> Result<ChunkWrite, StoreError> {
        let flips: Vec<Value> = flips.iter().map(|f| vars! { "id": f.id, "ver": f.version }).collect();
        let stored = if events.is_empty() {
            String::new()
        } else {
            format!("INSERT INTO event $events RETURN NONE;\n{OUTBOX_INSERT}")
        };
        let sql = format!(
            "BEGIN TRANSACTION;
             {ADVANCE}
             FOR $f IN $flips {{
                LET $r = (UPDATE type::record('contact', $f.id) SET subscribed = $sub, version = version + 1,
                    updated_at = $now WHERE project = $p AND version = $f.ver RETURN VALUE id);
                IF array::len($r) == 0 {{ THROW 'STALE_CONTACT'; }};
             }};
             {stored}
             COMMIT TRANSACTION;"
        );
        let v = vars! {
            "job": job, "p": project, "from": from, "to": to, "add": counters(add), "errs": [], "flips": flips,
            "sub": subscribed, "events": events.iter().map(Event::row).collect::<Vec<_>>(),
            "outbox": outbox_row(events.iter().map(|e| e.id.as_str())), "now": now,
        };
        match self.write(|| async { self.query(&sql, v.clone()).await }).await {
            Ok(_) => Ok(ChunkWrite::Done),
            Err(e) if e.thrown("STALE_CONTACT") => Ok(ChunkWrite::Stale),
            Err(e) if e.thrown("CHUNK_MOVED") => Ok(ChunkWrite::Moved),
            Err(e) => Err(e),
        }
    }

    /// Deletes one chunk of a bulk delete: each of the project's contacts among `ids` with its events
    /// and segment memberships (as one delete does), and the job's progress from `from` to `to` with
    /// the deleted and not-found counts. Answers the emails deleted (None when the chunk had moved).
    pub async fn bulk_delete_chunk(
        &self,
        job: &str,
        project: &str,
        (from, to): (i64, i64),
        ids: &[String],
        now: i64,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let sql = format!(
            "BEGIN TRANSACTION;
             LET $gone = (DELETE array::map($ids, |$i| type::record('contact', $i)) WHERE project = $p RETURN BEFORE);
             LET $gone_ids = array::map($gone, |$c| record::id($c.id));
             {lower_contacts}
             LET $add = {{ deleted: array::len($gone), notFound: array::len($ids) - array::len($gone) }};
             {ADVANCE}
             LET $tracked = (SELECT VALUE record::id(id) FROM segment WHERE project = $p AND kind = 'DYNAMIC');
             FOR $c IN $gone_ids {{
                LET $gone_events = (SELECT name, created_at FROM event WHERE project = $p AND contact = $c);
                {lower_events}
                DELETE event WHERE project = $p AND contact = $c;
                DELETE segment_member WHERE project = $p AND contact = $c;
                DELETE array::map($tracked, |$s| type::record('segment_track', [$p, $s, $c])) RETURN NONE;
             }};
             RETURN array::map($gone, |$c| $c.email);
             COMMIT TRANSACTION;",
            lower_contacts = super::tallies::LOWER_CONTACTS,
            lower_events = super::tallies::LOWER_EVENTS,
        );
        let v = vars! { "job": job, "p": project, "from": from, "to": to, "ids": ids, "errs": [], "now": now };
        match self.write(|| async { self.query(&sql, v.clone()).await?.value_last() }).await {
            Ok(emails) => {
                let emails: Vec<String> =
                    emails.as_array().into_iter().flatten().filter_map(|e| e.as_str().map(str::to_string)).collect();
                self.cache.known_contacts.forget(project, emails.iter().map(String::as_str));
                Ok(Some(emails))
            }
            Err(e) if e.thrown("CHUNK_MOVED") => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    async fn contact(store: &Store, project: &str, id: &str, subscribed: bool) {
        store
            .query(
                "CREATE type::record('contact', $id) CONTENT { project: $p, email: $id + '@x.test', subscribed: $s,
                    data: {}, version: 1, created_at: 0, updated_at: 0 }",
                vars! { "id": id, "p": project, "s": subscribed },
            )
            .await
            .unwrap();
    }

    async fn contact_at(store: &Store, project: &str, id: &str, created_at: i64) {
        store
            .query(
                "CREATE type::record('contact', $id) CONTENT { project: $p, email: $id + '@x.test', subscribed: true,
                    data: {}, version: 1, created_at: $at, updated_at: $at }",
                vars! { "id": id, "p": project, "at": created_at },
            )
            .await
            .unwrap();
    }

    async fn event_at(store: &Store, project: &str, contact: &str, name: &str, created_at: i64) {
        let e = Event::new(project, contact, name, Map::new(), "api", created_at);
        store.query("CREATE type::record('event', $e.id) CONTENT $e.doc", vars! { "e": e.doc() }).await.unwrap();
    }

    #[tokio::test]
    async fn tallies_add_what_was_created_since_and_drop_what_is_deleted() {
        use crate::store::tallies::Scope::{Contacts, EventName, Events};
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        assert_eq!(store.tally("p1", Contacts).await.unwrap(), None, "counted before the first count");
        for (id, at) in [("a", 10), ("b", 20), ("c", 30)] {
            contact_at(&store, "p1", id, at).await;
            event_at(&store, "p1", id, "signup", at).await;
            event_at(&store, "p1", id, "visit", at + 1).await;
        }
        contact_at(&store, "p2", "z", 10).await;
        event_at(&store, "p2", "z", "signup", 10).await;
        assert_eq!(store.recount("p1", Contacts, 25).await.unwrap(), 2, "counted past its moment");
        assert_eq!(store.recount("p1", Events, 25).await.unwrap(), 4);
        assert_eq!(store.recount("p1", EventName("signup"), 25).await.unwrap(), 2);
        assert_eq!(store.tally("p1", Contacts).await.unwrap(), Some((3, 25)));
        assert_eq!(store.tally("p1", Events).await.unwrap(), Some((6, 25)));
        assert_eq!(store.tally("p1", EventName("signup")).await.unwrap(), Some((3, 25)));
        contact_at(&store, "p1", "d", 40).await;
        event_at(&store, "p1", "d", "signup", 40).await;
        assert_eq!(store.tally("p1", Contacts).await.unwrap(), Some((4, 25)), "a new contact is counted live");
        assert_eq!(store.tally("p1", EventName("signup")).await.unwrap(), Some((4, 25)));
        // Deleting one counted before the moment lowers the counts; one created since just leaves.
        assert!(store.delete_contact("p1", "a").await.unwrap());
        assert!(store.delete_contact("p1", "d").await.unwrap());
        assert_eq!(store.tally("p1", Contacts).await.unwrap(), Some((2, 25)));
        assert_eq!(store.tally("p1", Events).await.unwrap(), Some((4, 25)));
        assert_eq!(store.tally("p1", EventName("signup")).await.unwrap(), Some((2, 25)));
        assert_eq!(store.delete_events_named("p1", "visit").await.unwrap(), 2);
        assert_eq!(store.tally("p1", Events).await.unwrap(), Some((2, 25)));
        let job = NewJob::new("contacts.bulk", serde_json::json!({}), 0);
        let ids: Vec<String> = vec!["b".into(), "c".into(), "z".into()];
        let new = NewContactJob {
            id: "j1",
            project: "p1",
            kind: "bulk-delete",
            input: &ids,
            total: 3,
            counters: &["deleted", "notFound"],
            options: None,
            file: None,
        };
        store.create_contact_job(&new, &job, 0).await.unwrap();
        store.bulk_delete_chunk("j1", "p1", (0, 3), &ids, 50).await.unwrap();
        assert_eq!(store.tally("p1", Contacts).await.unwrap(), Some((0, 25)));
        assert_eq!(store.tally("p1", Events).await.unwrap(), Some((0, 25)));
        assert_eq!(store.tally("p1", EventName("signup")).await.unwrap(), Some((0, 25)));
        assert_eq!(store.tally("p2", Contacts).await.unwrap(), None, "another project's count moved");
    }

    #[tokio::test]
    async fn a_chunk_commits_with_its_progress_once_and_counts_add_up() {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        let job = NewJob::new("contacts.bulk", serde_json::json!({}), 0);
        let ids: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
        let new = |id, project, kind, counters| NewContactJob {
            id,
            project,
            kind,
            input: &ids,
            total: 3,
            counters,
            options: None,
            file: None,
        };
        store.create_contact_job(&new("j1", "p1", "bulk-delete", &["deleted", "notFound"]), &job, 0).await.unwrap();
        contact(&store, "p1", "a", true).await;
        contact(&store, "p2", "b", true).await;
        let emails = store.bulk_delete_chunk("j1", "p1", (0, 2), &ids[..2], 5).await.unwrap();
        assert_eq!(emails, Some(vec!["a@x.test".to_string()]));
        // The same chunk again (a second run after a crash) changes nothing and counts nothing.
        assert_eq!(store.bulk_delete_chunk("j1", "p1", (0, 2), &ids[..2], 6).await.unwrap(), None);
        let row = store.contact_job("p1", "j1").await.unwrap().unwrap();
        assert_eq!((row.done, row.result["deleted"].clone(), row.result["notFound"].clone()), (2, 1.into(), 1.into()));
        assert!(store.contact("p2", "b").await.unwrap().is_some(), "another project's contact is untouched");
        assert!(store.contact_job("p2", "j1").await.unwrap().is_none(), "another project's job is not found");

        let unsubscribe = new("j2", "p2", "bulk-unsubscribe", &["updated", "unchanged"]);
        store.create_contact_job(&unsubscribe, &job, 0).await.unwrap();
        let flip = |v| vec![Flip { id: "b".into(), version: v }];
        let ev = vec![Event::new("p2", "b", "contact.unsubscribed", Map::new(), "system", 7)];
        let add = [("updated", 1), ("unchanged", 0)];
        let stale = store.bulk_subscription_chunk("j2", "p2", (0, 1), &flip(9), false, &ev, &add, 7).await.unwrap();
        assert_eq!(stale, ChunkWrite::Stale);
        let done = store.bulk_subscription_chunk("j2", "p2", (0, 1), &flip(1), false, &ev, &add, 7).await.unwrap();
        assert_eq!(done, ChunkWrite::Done);
        let again = store.bulk_subscription_chunk("j2", "p2", (0, 1), &flip(2), false, &ev, &add, 8).await.unwrap();
        assert_eq!(again, ChunkWrite::Moved);
        let c = store.contact("p2", "b").await.unwrap().unwrap();
        assert_eq!((c.subscribed, c.version), (false, 2));
        let row = store.contact_job("p2", "j2").await.unwrap().unwrap();
        assert_eq!((row.done, row.result["updated"].clone(), row.result["unchanged"].clone()), (1, 1.into(), 0.into()));
        let (_, input) = store.contact_job_input("j2").await.unwrap().unwrap();
        assert_eq!(input, ids);
        store.set_contact_job_state("j2", ContactJobState::Completed, None, 9).await.unwrap();
        let row = store.contact_job("p2", "j2").await.unwrap().unwrap();
        assert_eq!((row.state, row.finished_at, row.error), (ContactJobState::Completed, Some(9), None));
        store.set_contact_job_state("j1", ContactJobState::Failed, Some("why"), 9).await.unwrap();
        let row = store.contact_job("p1", "j1").await.unwrap().unwrap();
        assert_eq!((row.state, row.error.as_deref()), (ContactJobState::Failed, Some("why")));
    }
}
