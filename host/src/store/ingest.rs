//! Batched contact writes for group commit: one read of many contacts and one transaction that inserts
//! new contacts, updates changed ones at their expected versions, and inserts the events.

use serde_json::{Map, Value};

use super::contacts::{Contact, Event};
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

/// Most (project, email) → contact id hints kept; past it the map starts over (~100 bytes an entry).
const MAX_CONTACT_IDS: usize = 200_000;

/// Which contact id an email had when this process last read or created it. Only a hint: a read by
/// hinted id keeps a row only when its project and email still match, and looks up the rest by email,
/// so a contact deleted, re-created or renamed elsewhere (another process included) is found anyway.
/// Fetching records by id skips the per-email index lookup and its query planning, which took a
/// sixth of the server's CPU under tracking load.
#[derive(Default)]
pub(super) struct ContactIds(std::sync::Mutex<std::collections::HashMap<(String, String), String>>);

impl ContactIds {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<(String, String), String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, project: &str, emails: &[String]) -> Vec<String> {
        let m = self.lock();
        emails.iter().filter_map(|e| m.get(&(project.to_string(), e.clone())).cloned()).collect()
    }

    fn remember<'a>(&self, project: &str, contacts: impl Iterator<Item = (&'a str, &'a str)>) {
        let mut m = self.lock();
        for (id, email) in contacts {
            if m.len() >= MAX_CONTACT_IDS {
                m.clear();
            }
            m.insert((project.to_string(), email.to_string()), id.to_string());
        }
    }
}

impl Store {
    /// The contacts of a project with any of these emails, in one query: the emails with an id hint
    /// are fetched by record id (and kept only if project and email still match), the others by one
    /// point lookup per email on the (project, email) index (SurrealDB 3.3 answers `email IN $list` on
    /// that index by scanning the project's range: 19 ms for 8 emails among 5,000 contacts, against
    /// 0.9 ms for this form).
    pub async fn contacts_by_emails(&self, project: &str, emails: &[String]) -> Result<Vec<Contact>, StoreError> {
        let hinted = self.cache.contact_ids.get(project, emails);
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
                "LET $h = (SELECT {CONTACT_FIELDS} FROM array::map($ids, |$i| type::record('contact', $i))
                    WHERE project = $p AND email IN $emails);
                 RETURN array::concat($h, {});",
                lookup("array::complement($emails, $h.email)")
            )
        };
        let v = self.query(&sql, vars! { "p": project, "emails": emails, "ids": hinted }).await?.value_last()?;
        let found: Vec<Contact> = serde_json::from_value(v).map_err(|e| StoreError::Decode(e.to_string()))?;
        self.cache.contact_ids.remember(project, found.iter().map(|c| (c.id.as_str(), c.email.as_str())));
        Ok(found)
    }

    /// One transaction: insert `created` contacts, apply `updated` (each at its expected version), insert
    /// `events`. Fails whole: Conflict when an email was taken meanwhile, `Busy`/stale when a contact
    /// changed meanwhile (the caller then falls back to one request at a time).
    pub async fn write_contact_batch(
        &self,
        project: &str,
        created: &[Contact],
        updated: &[VersionedUpdate],
        events: &[Event],
    ) -> Result<(), StoreError> {
        self.write_batch(project, created, updated, events, Default::default()).await
    }

    /// [`Store::write_contact_batch`] plus email records, each `(priority of its delivery job, row)`,
    /// and their delivery jobs, in the same transaction (`/v1/send` group commit).
    #[allow(clippy::too_many_arguments)] // the rows of one transaction, each its own kind
    pub async fn write_send_batch(
        &self,
        project: &str,
        created: &[Contact],
        updated: &[VersionedUpdate],
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
        for (priority, group) in by_priority {
            docs.extend(super::emails::email_docs(
                &group,
                job_kind,
                priority,
                max_attempts,
                super::emails::SEND_JOB_CHUNK,
            ));
        }
        self.write_batch(project, created, updated, events, docs).await
    }

    async fn write_batch(
        &self,
        project: &str,
        created: &[Contact],
        updated: &[VersionedUpdate],
        events: &[Event],
        emails: super::emails::EmailDocs,
    ) -> Result<(), StoreError> {
        let mut sql = String::from("BEGIN TRANSACTION;\n");
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
        let updated: Map<String, Value> = updated
            .iter()
            .map(|u| {
                let row = vars! {
                    "project": project, "email": u.email, "subscribed": u.subscribed, "data": u.data,
                    "version": u.version + 1, "created_at": u.created_at, "updated_at": u.now,
                };
                (u.id.clone(), vars! { "version": u.version, "row": row })
            })
            .collect();
        let events: Vec<Value> = events
            .iter()
            .map(|e| {
                vars! {
                    "id": e.id, "project": e.project, "contact": e.contact, "name": e.name, "data": e.data,
                    "source": e.source, "created_at": e.created_at, "dispatched": false,
                }
            })
            .collect();
        let v = vars! {
            "p": project, "created": created_rows, "updated": updated, "events": events, "emails": emails.rows, "bodies": emails.bodies,
            "jobs": emails.jobs,
        };
        match self.query(&sql, v).await {
            Ok(_) => {
                self.cache.contact_ids.remember(project, created.iter().map(|c| (c.id.as_str(), c.email.as_str())));
                Ok(())
            }
            Err(e) if e.to_string().contains("STALE_CONTACT") => Err(StoreError::Busy("a contact changed".into())),
            Err(e) => Err(e),
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
        store.write_contact_batch("p1", &[a, b], &[], &[]).await.unwrap();
        store.write_contact_batch("p2", &[contact("cc", "c@x.test")], &[], &[]).await.unwrap();

        store.write_contact_batch("p1", &[], &[update("ca", 1, "pro"), update("cb", 1, "pro")], &[]).await.unwrap();
        for id in ["ca", "cb"] {
            let c = store.contact("p1", id).await.unwrap().unwrap();
            assert_eq!((c.version, c.subscribed, c.updated_at, c.created_at), (2, false, 5, 1), "{id}");
            assert_eq!(c.email, format!("{}@x.test", &id[1..]));
            assert_eq!(c.data["plan"], "pro");
        }

        // cb is now at version 2: a batch that read it at 1 writes nothing, not even ca's change.
        let stale =
            store.write_contact_batch("p1", &[], &[update("ca", 2, "team"), update("cb", 1, "team")], &[]).await;
        assert!(matches!(stale, Err(StoreError::Busy(_))), "{stale:?}");
        assert_eq!(store.contact("p1", "ca").await.unwrap().unwrap().data["plan"], "pro");

        // A contact of another project is stale for this one.
        let other = store.write_contact_batch("p1", &[], &[update("cc", 1, "team")], &[]).await;
        assert!(matches!(other, Err(StoreError::Busy(_))), "{other:?}");
        let c = store.contact("p2", "cc").await.unwrap().unwrap();
        assert_eq!((c.version, c.data.get("plan")), (1, None));

        // A contact renamed since it was read is stale too, even if its version did not move.
        store.query("UPDATE contact:ca SET email = 'q@x.test'", serde_json::json!({})).await.unwrap();
        let renamed = store.write_contact_batch("p1", &[], &[update("ca", 2, "team")], &[]).await;
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
        store.write_contact_batch("p1", &[contact("ca", &a), contact("cb", &b)], &[], &[]).await.unwrap();
        assert_eq!(store.cache.contact_ids.get("p1", &[a.clone(), b.clone()]), vec!["ca", "cb"], "created: hinted");
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
        assert_eq!(store.cache.contact_ids.get("p1", std::slice::from_ref(&b)), vec!["cb2"], "the hint follows");

        // A (wrong) hint into another project's contact finds nothing there.
        store.cache.contact_ids.remember("p2", [("cb2", b.as_str())].into_iter());
        assert!(store.contacts_by_emails("p2", std::slice::from_ref(&b)).await.unwrap().is_empty());
    }
}
