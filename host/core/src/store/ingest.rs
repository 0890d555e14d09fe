//! The writers of contacts with their events and emails, one request or a batch: the `/v1/send`
//! transaction of one request ([`Store::write_contacts_and_emails`]) and the group-commit batches of
//! `/v1/track` and `/v1/send` (one read of many contacts and one transaction that inserts new contacts,
//! updates changed ones at their expected versions, and inserts the events, emails and jobs).

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::contacts::{Contact, ContactWrite, WriteResult};
use super::events::{Event, OUTBOX_INSERT, outbox_row};
use super::{Store, StoreError};
use crate::vars;

const CONTACT_FIELDS: &str = "record::id(id) AS id, email, subscribed, data, version, created_at, updated_at";

/// A contact to update at the version it was read at.
#[derive(Debug, Clone)]
pub struct VersionedUpdate {
    pub id: String,
    pub version: i64,
    /// Email and creation time as read: the update writes the whole row (see `write_batch`).
    pub email: String,
    pub created_at: i64,
    pub subscribed: bool,
    pub data: Map<String, Value>,
    pub now: i64,
}

/// Approximate bytes of remembered contacts kept; past it the memory starts over.
const MAX_KNOWN_BYTES: usize = 48 << 20;
/// A contact whose `data` serializes to more than this is remembered by id only.
const MAX_STATE_DATA: usize = 4096;

/// What this process last saw of a contact: its id, and its whole row at a version when it is small.
struct Known {
    id: String,
    state: Option<Contact>,
    bytes: usize,
}

#[derive(Default)]
struct KnownMap {
    map: HashMap<(String, String), Known>,
    bytes: usize,
}

/// The contacts this process last read or wrote through group commit, by (project, email). Never trusted
/// as they are: a remembered row is only used by a batch that writes it at its version (a version-checked
/// update) or checks that version in its own transaction, and a remembered id is only a hint for a read
/// that keeps a row when its project and email still match. Every contact write bumps the version, so a
/// contact changed elsewhere (another process included) fails the batch, which forgets its contacts and
/// reads them again. Remembering skips a read per returning contact: a point read costs 40-70 µs here, a
/// lookup by email more, and under tracking load those reads were a sixth of the server's CPU.
#[derive(Default)]
pub(super) struct KnownContacts(std::sync::Mutex<KnownMap>);

impl KnownContacts {
    fn lock(&self) -> std::sync::MutexGuard<'_, KnownMap> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The remembered rows of these emails, and the remembered ids of the others that have one.
    fn get(&self, project: &str, emails: &[String]) -> (Vec<Contact>, Vec<String>) {
        let m = self.lock();
        let (mut rows, mut ids) = (Vec::new(), Vec::new());
        for e in emails {
            match m.map.get(&(project.to_string(), e.clone())) {
                Some(Known { state: Some(c), .. }) => rows.push(c.clone()),
                Some(k) => ids.push(k.id.clone()),
                None => {}
            }
        }
        (rows, ids)
    }

    /// The remembered ids of these emails (hints for a read).
    fn ids(&self, project: &str, emails: &[String]) -> Vec<String> {
        let m = self.lock();
        emails.iter().filter_map(|e| m.map.get(&(project.to_string(), e.clone())).map(|k| k.id.clone())).collect()
    }

    fn remember<'a>(&self, project: &str, contacts: impl Iterator<Item = &'a Contact>) {
        let mut m = self.lock();
        for c in contacts {
            let data = serde_json::to_vec(&c.data).map(|v| v.len()).unwrap_or(usize::MAX);
            let small = data <= MAX_STATE_DATA;
            let bytes = 160 + project.len() + 2 * c.email.len() + 2 * c.id.len() + if small { 3 * data } else { 0 };
            if m.bytes + bytes > MAX_KNOWN_BYTES {
                m.map.clear();
                m.bytes = 0;
            }
            let known = Known { id: c.id.clone(), state: small.then(|| c.clone()), bytes };
            m.bytes += bytes;
            if let Some(old) = m.map.insert((project.to_string(), c.email.clone()), known) {
                m.bytes -= old.bytes;
            }
        }
    }

    pub(super) fn forget<'a>(&self, project: &str, emails: impl Iterator<Item = &'a str>) {
        let mut m = self.lock();
        for e in emails {
            if let Some(old) = m.map.remove(&(project.to_string(), e.to_string())) {
                m.bytes -= old.bytes;
            }
        }
    }

    pub(super) fn clear(&self) {
        let mut m = self.lock();
        m.map.clear();
        m.bytes = 0;
    }
}

/// The contacts of a group-commit batch: read, or remembered by this process.
#[derive(Debug, Default)]
pub struct BatchContacts {
    pub contacts: Vec<Contact>,
    /// Ids of the contacts taken from memory instead of read.
    pub remembered: HashSet<String>,
}

impl BatchContacts {
    /// The remembered contacts a batch does not update: its transaction checks that each is still at the
    /// version remembered (the updated ones are written at theirs).
    pub fn unchanged_remembered(&self, updated: &[VersionedUpdate]) -> Vec<Contact> {
        let written: HashSet<&str> = updated.iter().map(|u| u.id.as_str()).collect();
        self.contacts
            .iter()
            .filter(|c| self.remembered.contains(&c.id) && !written.contains(c.id.as_str()))
            .cloned()
            .collect()
    }
}

impl Store {
    /// The contacts of a project with any of these emails, in one query: the emails with an id hint
    /// are fetched by record id (and kept only if project and email still match), the others by one
    /// point lookup per email on the (project, email) index (SurrealDB 3.3 answers `email IN $list` on
    /// that index by scanning the project's range: 19 ms for 8 emails among 5,000 contacts, against
    /// 0.9 ms for this form).
    pub async fn contacts_by_emails(&self, project: &str, emails: &[String]) -> Result<Vec<Contact>, StoreError> {
        let hinted = self.cache.known_contacts.ids(project, emails);
        self.read_contacts(project, emails, hinted).await
    }

    /// The contacts of a batch: those this process remembers at a version, without reading them, and the
    /// others read as [`Store::contacts_by_emails`] does. The batch's write must be given the remembered
    /// ones it does not change (`BatchContacts::unchanged_remembered`).
    pub async fn group_contacts(&self, project: &str, emails: &[String]) -> Result<BatchContacts, StoreError> {
        let (mut contacts, hinted) = self.cache.known_contacts.get(project, emails);
        let remembered: HashSet<String> = contacts.iter().map(|c| c.id.clone()).collect();
        let known: HashSet<&str> = contacts.iter().map(|c| c.email.as_str()).collect();
        let rest: Vec<String> = emails.iter().filter(|e| !known.contains(e.as_str())).cloned().collect();
        if !rest.is_empty() {
            contacts.extend(self.read_contacts(project, &rest, hinted).await?);
        }
        Ok(BatchContacts { contacts, remembered })
    }

    async fn read_contacts(
        &self,
        project: &str,
        emails: &[String],
        hinted: Vec<String>,
    ) -> Result<Vec<Contact>, StoreError> {
        let lookup = |list: &str| {
            format!(
                "array::flatten(array::map({list}, |$e|
                    (SELECT {CONTACT_FIELDS} FROM contact WHERE project = $p AND email = $e)))"
            )
        };
        let sql = if hinted.is_empty() {
            format!("RETURN {};", lookup("$emails"))
        } else {
            format!(
                "LET $hinted = array::map($ids, |$i| type::record('contact', $i));
                 LET $h = (SELECT {CONTACT_FIELDS} FROM $hinted WHERE project = $p AND email IN $emails);
                 RETURN array::concat($h, {});",
                lookup("array::complement($emails, $h.email)")
            )
        };
        let v = self.query(&sql, vars! { "p": project, "emails": emails, "ids": hinted }).await?.value_last()?;
        let found: Vec<Contact> = serde_json::from_value(v).map_err(|e| StoreError::Decode(e.to_string()))?;
        self.cache.known_contacts.remember(project, found.iter());
        Ok(found)
    }

    /// One transaction: insert `created` contacts, apply `updated` (each at its expected version), check
    /// that each of `unchanged` (remembered contacts the batch relies on without writing them) is still at
    /// its version, insert `events`. Fails whole: Conflict when an email was taken meanwhile, `Busy`/stale
    /// when a contact changed meanwhile; either way the batch's contacts are forgotten, so the caller's
    /// next attempt reads them.
    pub async fn write_contact_batch(
        &self,
        project: &str,
        created: &[Contact],
        updated: &[VersionedUpdate],
        unchanged: &[Contact],
        events: &[Event],
    ) -> Result<(), StoreError> {
        self.write_batch(project, created, updated, unchanged, events, Default::default(), None).await
    }

    /// [`Store::write_contact_batch`] for one chunk of an import, with the job's progress in the same
    /// transaction (`contact_jobs::ADVANCE`): false when another run already wrote that chunk.
    pub async fn write_import_chunk(
        &self,
        project: &str,
        created: &[Contact],
        updated: &[VersionedUpdate],
        unchanged: &[Contact],
        events: &[Event],
        progress: &super::contact_jobs::Progress,
    ) -> Result<bool, StoreError> {
        match self.write_batch(project, created, updated, unchanged, events, Default::default(), Some(progress)).await {
            Ok(()) => Ok(true),
            Err(e) if e.thrown("CHUNK_MOVED") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Writes several contact changes, their events, and email records with their delivery jobs in one
    /// transaction (`/v1/send`). Stale when a contact changed meanwhile or a concurrent request created
    /// one of the emails: the caller plans again.
    #[allow(clippy::too_many_arguments)] // the rows of one transaction, each its own kind
    pub async fn write_contacts_and_emails(
        &self,
        project: &str,
        writes: &[ContactWrite],
        events: &[Event],
        emails: &[super::emails::EmailRow],
        job_kind: &str,
        priority: i64,
        max_attempts: i64,
    ) -> Result<WriteResult, StoreError> {
        let mut sql = String::from("BEGIN TRANSACTION;\n");
        let mut v = vars! { "p": project };
        self.forget_written(project, writes);
        for (i, w) in writes.iter().enumerate() {
            match w {
                ContactWrite::Create { id, email, subscribed, data, now } => {
                    sql.push_str(&format!(
                        "CREATE type::record('contact', $cid{i}) CONTENT {{
                            project: $p, email: $email{i}, subscribed: $sub{i}, data: $data{i}, version: 1,
                            created_at: $now{i}, updated_at: $now{i}
                         }} RETURN NONE;\n"
                    ));
                    v[format!("cid{i}")] = id.clone().into();
                    v[format!("email{i}")] = email.clone().into();
                    v[format!("sub{i}")] = (*subscribed).into();
                    v[format!("data{i}")] = Value::Object(data.clone());
                    v[format!("now{i}")] = (*now).into();
                }
                ContactWrite::Update { id, version, email, subscribed, data, now } => {
                    sql.push_str(&format!(
                        "LET $r{i} = (UPDATE type::record('contact', $cid{i}) SET email = $email{i}, subscribed = $sub{i},
                            data = $data{i}, version = version + 1, updated_at = $now{i}
                            WHERE project = $p AND version = $ver{i} RETURN AFTER);
                         IF array::len($r{i}) == 0 {{ THROW 'STALE_CONTACT'; }};\n"
                    ));
                    v[format!("cid{i}")] = id.clone().into();
                    v[format!("email{i}")] = email.clone().into();
                    v[format!("sub{i}")] = (*subscribed).into();
                    v[format!("data{i}")] = Value::Object(data.clone());
                    v[format!("now{i}")] = (*now).into();
                    v[format!("ver{i}")] = (*version).into();
                }
                ContactWrite::None => {}
            }
        }
        sql.push_str("FOR $e IN $events { CREATE type::record('event', $e.id) CONTENT $e.doc RETURN NONE; };\n");
        if !events.is_empty() {
            sql.push_str(OUTBOX_INSERT);
            v["outbox"] = outbox_row(events.iter().map(|e| e.id.as_str()));
        }
        sql.push_str(super::emails::EmailDocs::INSERTS);
        sql.push_str("COMMIT TRANSACTION;");
        let counted = self.counted(project, crate::domain::billing::Category::Transactional).await?;
        let docs = super::emails::email_docs(
            emails,
            job_kind,
            priority,
            max_attempts,
            super::emails::SEND_JOB_CHUNK,
            Some(counted),
        );
        v["usage"] = Value::Array(docs.usage);
        v["cap"] = docs.cap.into();
        v["events"] = Value::Array(events.iter().map(Event::doc).collect());
        v["emails"] = Value::Array(docs.rows);
        v["bodies"] = Value::Array(docs.bodies);
        v["sets"] = Value::Array(docs.sets);
        v["jobs"] = Value::Array(docs.jobs);
        match self.query(&sql, v).await {
            Ok(_) => Ok(WriteResult::Done),
            Err(e) if e.thrown("STALE_CONTACT") => Ok(WriteResult::Stale),
            Err(StoreError::Busy(_)) => Ok(WriteResult::Stale),
            Err(StoreError::Conflict(m)) if m.contains("contact_project_email") => Ok(WriteResult::Stale),
            Err(e) => Err(e),
        }
    }

    /// [`Store::write_contact_batch`] plus email records, each `(priority of its delivery job, row)`,
    /// and their delivery jobs, in the same transaction (`/v1/send` group commit).
    #[allow(clippy::too_many_arguments)] // the rows of one transaction, each its own kind
    pub async fn write_send_batch(
        &self,
        project: &str,
        created: &[Contact],
        updated: &[VersionedUpdate],
        unchanged: &[Contact],
        events: &[Event],
        emails: &[(i64, super::emails::EmailRow)],
        job_kind: &str,
        max_attempts: i64,
    ) -> Result<(), StoreError> {
        let mut by_priority: std::collections::BTreeMap<i64, Vec<super::emails::EmailRow>> = Default::default();
        for (priority, row) in emails {
            by_priority.entry(*priority).or_default().push(row.clone());
        }
        let mut docs = super::emails::EmailDocs::default();
        let counted = self.counted(project, crate::domain::billing::Category::Transactional).await?;
        for (priority, group) in by_priority {
            docs.extend(super::emails::email_docs(
                &group,
                job_kind,
                priority,
                max_attempts,
                super::emails::SEND_JOB_CHUNK,
                Some(counted),
            ));
        }
        self.write_batch(project, created, updated, unchanged, events, docs, None).await
    }

    #[allow(clippy::too_many_arguments)] // the rows of one transaction, each its own kind
    async fn write_batch(
        &self,
        project: &str,
        created: &[Contact],
        updated: &[VersionedUpdate],
        unchanged: &[Contact],
        events: &[Event],
        emails: super::emails::EmailDocs,
        progress: Option<&super::contact_jobs::Progress>,
    ) -> Result<(), StoreError> {
        let mut sql = String::from("BEGIN TRANSACTION;\n");
        if progress.is_some() {
            sql.push_str(super::contact_jobs::ADVANCE);
            sql.push('\n');
        }
        if !unchanged.is_empty() {
            // Remembered, not read: the rows this batch relied on must still be at those versions.
            sql.push_str(
                "LET $known = array::map(object::keys($unchanged), |$k| type::record('contact', $k));
                 LET $same = (SELECT VALUE id FROM $known
                    WHERE project = $p AND version = $unchanged[record::id(id)].version
                        AND email = $unchanged[record::id(id)].email);
                 IF array::len($same) != object::len($unchanged) { THROW 'STALE_CONTACT'; };\n",
            );
        }
        if !created.is_empty() {
            sql.push_str("INSERT INTO contact $created RETURN NONE;\n");
        }
        if !updated.is_empty() {
            // One statement for all changed contacts (a statement per contact costs ~0.3 ms of planning
            // each): `$updated` maps contact id to the version it was read at and its whole new row, and
            // a contact that changed meanwhile (version or email) is skipped by the WHERE, which the count
            // then catches. Writing the whole row with CONTENT took 2.4 ms for 16 contacts here, against
            // 4.0 ms for SET with one `$updated[...]` lookup per field.
            sql.push_str(
                "LET $done = (UPDATE array::map(object::keys($updated), |$k| type::record('contact', $k))
                    CONTENT $updated[record::id(id)].row
                    WHERE project = $p AND version = $updated[record::id(id)].version
                        AND email = $updated[record::id(id)].row.email
                    RETURN VALUE id);
                 IF array::len($done) != object::len($updated) { THROW 'STALE_CONTACT'; };\n",
            );
        }
        if !events.is_empty() {
            sql.push_str("INSERT INTO event $events RETURN NONE;\n");
            sql.push_str(super::events::OUTBOX_INSERT);
        }
        if !emails.rows.is_empty() {
            sql.push_str(super::emails::EmailDocs::INSERTS);
        }
        sql.push_str("COMMIT TRANSACTION;");
        let created_rows: Vec<Value> = created
            .iter()
            .map(|c| {
                vars! {
                    "id": c.id, "project": project, "email": c.email, "subscribed": c.subscribed, "data": c.data,
                    "version": 1, "created_at": c.created_at, "updated_at": c.updated_at,
                }
            })
            .collect();
        let updated_rows: Map<String, Value> = updated
            .iter()
            .map(|u| {
                let row = vars! {
                    "project": project, "email": u.email, "subscribed": u.subscribed, "data": u.data,
                    "version": u.version + 1, "created_at": u.created_at, "updated_at": u.now,
                };
                (u.id.clone(), vars! { "version": u.version, "row": row })
            })
            .collect();
        let outbox = super::events::outbox_row(events.iter().map(|e| e.id.as_str()));
        let events: Vec<Value> = events.iter().map(Event::row).collect();
        let unchanged_rows: Map<String, Value> =
            unchanged.iter().map(|c| (c.id.clone(), vars! { "version": c.version, "email": c.email })).collect();
        let mut v = vars! {
            "p": project, "created": created_rows, "updated": updated_rows, "unchanged": unchanged_rows,
            "events": events, "outbox": outbox, "emails": emails.rows, "bodies": emails.bodies, "jobs": emails.jobs, "sets": emails.sets,
            "usage": emails.usage, "cap": emails.cap,
        };
        if let Some(p) = progress {
            p.bind(&mut v);
        }
        let known = &self.cache.known_contacts;
        match self.query(&sql, v).await {
            Ok(_) => {
                // The rows as written, at their new versions.
                let written = updated.iter().map(|u| Contact {
                    id: u.id.clone(),
                    email: u.email.clone(),
                    subscribed: u.subscribed,
                    data: u.data.clone(),
                    version: u.version + 1,
                    created_at: u.created_at,
                    updated_at: u.now,
                });
                let created = created.iter().map(|c| Contact { version: 1, ..c.clone() });
                // An import's contacts are not remembered: a file of new contacts would fill the memory
                // with rows nobody asks for again soon, and push out those that are.
                if progress.is_none() {
                    known.remember(project, created.chain(written).collect::<Vec<_>>().iter());
                }
                Ok(())
            }
            Err(e) => {
                let emails = created.iter().map(|c| c.email.as_str());
                known.forget(project, emails.chain(updated.iter().map(|u| u.email.as_str())));
                known.forget(project, unchanged.iter().map(|c| c.email.as_str()));
                if e.thrown("STALE_CONTACT") { Err(StoreError::Busy("a contact changed".into())) } else { Err(e) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    pub(super) fn contact(id: &str, email: &str) -> Contact {
        Contact {
            id: id.into(),
            email: email.into(),
            subscribed: true,
            data: Map::new(),
            version: 1,
            created_at: 1,
            updated_at: 1,
        }
    }

    fn update(id: &str, version: i64, plan: &str) -> VersionedUpdate {
        let mut data = Map::new();
        data.insert("plan".into(), plan.into());
        let email = format!("{}@x.test", &id[1..]); // the contacts below: "ca" is a@x.test
        VersionedUpdate { id: id.into(), version, email, created_at: 1, subscribed: false, data, now: 5 }
    }

    /// Every changed contact is written by one statement, each only at the version it was read at: one
    /// stale contact fails the whole batch (nothing of it is written), and another project's contact is
    /// never touched.
    #[tokio::test]
    async fn a_batch_updates_each_contact_at_its_version_or_writes_nothing() {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        let (a, b) = (contact("ca", "a@x.test"), contact("cb", "b@x.test"));
        store.write_contact_batch("p1", &[a, b], &[], &[], &[]).await.unwrap();
        store.write_contact_batch("p2", &[contact("cc", "c@x.test")], &[], &[], &[]).await.unwrap();

        store
            .write_contact_batch("p1", &[], &[update("ca", 1, "pro"), update("cb", 1, "pro")], &[], &[])
            .await
            .unwrap();
        for id in ["ca", "cb"] {
            let c = store.contact("p1", id).await.unwrap().unwrap();
            assert_eq!((c.version, c.subscribed, c.updated_at, c.created_at), (2, false, 5, 1), "{id}");
            assert_eq!(c.email, format!("{}@x.test", &id[1..]));
            assert_eq!(c.data["plan"], "pro");
        }

        // cb is now at version 2: a batch that read it at 1 writes nothing, not even ca's change.
        let stale =
            store.write_contact_batch("p1", &[], &[update("ca", 2, "team"), update("cb", 1, "team")], &[], &[]).await;
        assert!(matches!(stale, Err(StoreError::Busy(_))), "{stale:?}");
        assert_eq!(store.contact("p1", "ca").await.unwrap().unwrap().data["plan"], "pro");

        // A contact of another project is stale for this one.
        let other = store.write_contact_batch("p1", &[], &[update("cc", 1, "team")], &[], &[]).await;
        assert!(matches!(other, Err(StoreError::Busy(_))), "{other:?}");
        let c = store.contact("p2", "cc").await.unwrap().unwrap();
        assert_eq!((c.version, c.data.get("plan")), (1, None));

        // A contact renamed since it was read is stale too, even if its version did not move.
        store.query("UPDATE contact:ca SET email = 'q@x.test'", serde_json::json!({})).await.unwrap();
        let renamed = store.write_contact_batch("p1", &[], &[update("ca", 2, "team")], &[], &[]).await;
        assert!(matches!(renamed, Err(StoreError::Busy(_))), "{renamed:?}");
        assert_eq!(store.contact("p1", "ca").await.unwrap().unwrap().email, "q@x.test");
    }
}

#[cfg(test)]
mod hint_tests {
    use super::tests::contact;
    use super::*;
    use crate::config::Config;

    fn ids(found: &[Contact]) -> Vec<(String, String)> {
        let mut v: Vec<_> = found.iter().map(|c| (c.email.clone(), c.id.clone())).collect();
        v.sort();
        v
    }

    /// Id hints are only hints: a contact renamed, deleted or re-created behind this process's back
    /// (another process, say) is still found by its current email, and a hint never reaches another
    /// project's contact.
    #[tokio::test]
    async fn contacts_are_found_by_email_whatever_the_hints_say() {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        let (a, b, z) = ("a@x.test".to_string(), "b@x.test".to_string(), "z@x.test".to_string());
        store.write_contact_batch("p1", &[contact("ca", &a), contact("cb", &b)], &[], &[], &[]).await.unwrap();
        assert_eq!(store.cache.known_contacts.ids("p1", &[a.clone(), b.clone()]), vec!["ca", "cb"], "created: hinted");
        let found = store.contacts_by_emails("p1", &[a.clone(), b.clone()]).await.unwrap();
        assert_eq!(ids(&found), vec![(a.clone(), "ca".into()), (b.clone(), "cb".into())]);

        // Behind the store's back: ca is renamed to z, cb deleted and b re-created as cb2.
        store
            .query(
                "UPDATE contact:ca SET email = 'z@x.test'; DELETE contact:cb;
                 CREATE contact:cb2 CONTENT { project: 'p1', email: 'b@x.test', subscribed: true, data: {},
                    version: 1, created_at: 2, updated_at: 2 };",
                serde_json::json!({}),
            )
            .await
            .unwrap();
        assert!(store.contacts_by_emails("p1", std::slice::from_ref(&a)).await.unwrap().is_empty(), "a is gone");
        let found = store.contacts_by_emails("p1", &[a.clone(), b.clone(), z.clone()]).await.unwrap();
        assert_eq!(ids(&found), vec![(b.clone(), "cb2".into()), (z.clone(), "ca".into())]);
        assert_eq!(store.cache.known_contacts.ids("p1", std::slice::from_ref(&b)), vec!["cb2"], "the hint follows");

        // A (wrong) hint into another project's contact finds nothing there.
        store.cache.known_contacts.remember("p2", [contact("cb2", &b)].iter());
        assert!(store.contacts_by_emails("p2", std::slice::from_ref(&b)).await.unwrap().is_empty());
    }
}

#[cfg(test)]
mod known_tests {
    use super::tests::contact;
    use super::*;
    use crate::config::Config;

    fn event(id: &str, contact: &str) -> Event {
        Event::new("p1", contact, &format!("seen-{id}"), Map::new(), "api", 9)
    }

    async fn event_count(store: &Store) -> i64 {
        let mut rows = store.query("RETURN count(SELECT id FROM event)", serde_json::json!({})).await.unwrap();
        rows.value_last().unwrap().as_i64().unwrap()
    }

    /// A batch takes the contacts this process wrote from memory, and its transaction holds them to the
    /// versions remembered: a contact changed behind the process's back (another process, say) fails the
    /// batch whole, whether the batch updates it or only relies on it, and the next read sees the change.
    #[tokio::test]
    async fn remembered_contacts_are_used_only_at_their_versions() {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        let (a, b) = ("a@x.test".to_string(), "b@x.test".to_string());
        store.write_contact_batch("p1", &[contact("ca", &a), contact("cb", &b)], &[], &[], &[]).await.unwrap();

        // Remembered as written; unknown emails and other projects are read (and find nothing here).
        let read = store.group_contacts("p1", &[a.clone(), b.clone(), "n@x.test".into()]).await.unwrap();
        assert_eq!(read.contacts.len(), 2);
        assert_eq!(read.remembered, HashSet::from(["ca".to_string(), "cb".to_string()]));
        let other = store.group_contacts("p2", std::slice::from_ref(&a)).await.unwrap();
        assert!(other.contacts.is_empty() && other.remembered.is_empty(), "{other:?}");

        // An update at the remembered version is written and remembered at the next one.
        let mut up = VersionedUpdate {
            id: "ca".into(),
            version: 1,
            email: a.clone(),
            created_at: 1,
            subscribed: true,
            data: Map::from_iter([("plan".to_string(), Value::from("pro"))]),
            now: 5,
        };
        store.write_contact_batch("p1", &[], std::slice::from_ref(&up), &[], &[]).await.unwrap();
        let read = store.group_contacts("p1", std::slice::from_ref(&a)).await.unwrap();
        assert!(read.remembered.contains("ca"));
        assert_eq!((read.contacts[0].version, read.contacts[0].data["plan"].as_str()), (2, Some("pro")));

        // Behind the store's back both contacts move to a new version.
        store
            .query(
                "UPDATE contact:ca SET data.plan = 'team', version = 3; UPDATE contact:cb SET subscribed = false, version = 2;",
                serde_json::json!({}),
            )
            .await
            .unwrap();
        let read = store.group_contacts("p1", &[a.clone(), b.clone()]).await.unwrap();
        assert_eq!(read.remembered.len(), 2, "still remembered: nothing told this process");

        // Relying on cb unchanged (with an event for it): stale, nothing written, cb forgotten.
        let unchanged = read.unchanged_remembered(&[]);
        assert_eq!(unchanged.len(), 2);
        let stale = store.write_contact_batch("p1", &[], &[], &unchanged, &[event("1", "cb")]).await;
        assert!(matches!(stale, Err(StoreError::Busy(_))), "{stale:?}");
        assert_eq!(event_count(&store).await, 0);
        let fresh = store.group_contacts("p1", std::slice::from_ref(&b)).await.unwrap();
        assert!(fresh.remembered.is_empty());
        assert_eq!((fresh.contacts[0].version, fresh.contacts[0].subscribed), (2, false));
        // Updating ca at the version remembered (2): stale too, and ca keeps the other writer's data.
        up.version = 2;
        let stale = store.write_contact_batch("p1", &[], std::slice::from_ref(&up), &[], &[event("2", "ca")]).await;
        assert!(matches!(stale, Err(StoreError::Busy(_))), "{stale:?}");
        let fresh = store.group_contacts("p1", std::slice::from_ref(&a)).await.unwrap();
        assert!(fresh.remembered.is_empty());
        assert_eq!((fresh.contacts[0].version, fresh.contacts[0].data["plan"].as_str()), (3, Some("team")));
        assert_eq!(event_count(&store).await, 0);

        // Read at their current versions, both are written or relied on again.
        let unchanged = fresh.unchanged_remembered(&[]);
        assert!(unchanged.is_empty(), "read, not remembered: nothing to check");
        up.version = 3;
        store.write_contact_batch("p1", &[], &[up], &[], &[event("3", "ca")]).await.unwrap();
        let read = store.group_contacts("p1", &[a.clone(), b.clone()]).await.unwrap();
        assert_eq!(read.remembered.len(), 2);
        store.write_contact_batch("p1", &[], &[], &read.unchanged_remembered(&[]), &[event("4", "cb")]).await.unwrap();
        assert_eq!(event_count(&store).await, 2);
    }

    /// A deleted contact that is still remembered fails the batch instead of gaining an event.
    #[tokio::test]
    async fn a_remembered_contact_deleted_elsewhere_fails_the_batch() {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        let a = "a@x.test".to_string();
        store.write_contact_batch("p1", &[contact("ca", &a)], &[], &[], &[]).await.unwrap();
        store.query("DELETE contact:ca", serde_json::json!({})).await.unwrap();
        let read = store.group_contacts("p1", std::slice::from_ref(&a)).await.unwrap();
        let stale =
            store.write_contact_batch("p1", &[], &[], &read.unchanged_remembered(&[]), &[event("1", "ca")]).await;
        assert!(matches!(stale, Err(StoreError::Busy(_))), "{stale:?}");
        assert_eq!(event_count(&store).await, 0);
        assert!(store.group_contacts("p1", std::slice::from_ref(&a)).await.unwrap().contacts.is_empty());
    }
}
