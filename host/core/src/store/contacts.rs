//! Contacts. Every query here filters by project. A contact write and the events it causes (`events.rs`)
//! are one transaction; a contact carries a `version` so read-modify-write updates detect concurrent
//! changes (optimistic concurrency) and are retried by the caller.
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::events::{Event, OUTBOX_INSERT, outbox_row};
use super::{Store, StoreError, count_of};
use crate::vars;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Contact {
    pub id: String,
    pub email: String,
    pub subscribed: bool,
    #[serde(default)]
    pub data: Map<String, Value>,
    pub version: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A contact write: create, or update at an expected version.
#[derive(Debug, Clone)]
pub enum ContactWrite {
    Create {
        id: String,
        email: String,
        subscribed: bool,
        data: Map<String, Value>,
        now: i64,
    },
    Update {
        id: String,
        version: i64,
        email: String,
        subscribed: bool,
        data: Map<String, Value>,
        now: i64,
    },
    /// Only the events (the contact did not change).
    None,
}

/// Outcome of a contact write.
#[derive(Debug, PartialEq, Eq)]
pub enum WriteResult {
    Done,
    /// The contact changed since it was read (or the email was taken meanwhile): read again.
    Stale,
}

/// Filters and order of a contact list.
#[derive(Debug, Clone, Default)]
pub struct ContactQuery {
    pub search: Option<String>,
    pub subscribed: Option<bool>,
    /// `created_at` or `email`
    pub sort_email: bool,
    pub ascending: bool,
    /// Keyset cursor: the last row's sort value and id.
    pub after: Option<(Value, String)>,
    pub limit: usize,
}

pub(crate) const CONTACT_FIELDS: &str =
    "record::id(id) AS id, email, subscribed, data, version, created_at, updated_at";

impl Store {
    /// The emails of a project's contacts, by id (missing ones left out): one point read each.
    pub async fn contact_emails(
        &self,
        project: &str,
        ids: &[String],
    ) -> Result<std::collections::HashMap<String, String>, StoreError> {
        #[derive(Deserialize)]
        struct Row {
            id: String,
            email: String,
        }
        if ids.is_empty() {
            return Ok(Default::default());
        }
        let rows: Vec<Row> = self
            .query(
                "SELECT record::id(id) AS id, email FROM array::map($ids, |$i| type::record('contact', $i))
                 WHERE project = $p",
                vars! { "p": project, "ids": ids },
            )
            .await?
            .all(0)?;
        Ok(rows.into_iter().map(|r| (r.id, r.email)).collect())
    }
}

impl Store {
    pub async fn contact(&self, project: &str, id: &str) -> Result<Option<Contact>, StoreError> {
        self.query(
            &format!("SELECT {CONTACT_FIELDS} FROM contact WHERE id = type::record('contact', $id) AND project = $p"),
            vars! { "p": project, "id": id },
        )
        .await?
        .first(0)
    }

    pub async fn contact_by_email(&self, project: &str, email: &str) -> Result<Option<Contact>, StoreError> {
        self.query(
            &format!("SELECT {CONTACT_FIELDS} FROM contact WHERE project = $p AND email = $e LIMIT 1"),
            vars! { "p": project, "e": email },
        )
        .await?
        .first(0)
    }

    /// Group commit would find the rows these writes change stale anyway; forgetting them spares that
    /// batch a retry.
    pub(crate) fn forget_written(&self, project: &str, writes: &[ContactWrite]) {
        let emails = writes.iter().filter_map(|w| match w {
            ContactWrite::Create { email, .. } | ContactWrite::Update { email, .. } => Some(email.as_str()),
            ContactWrite::None => None,
        });
        self.cache.known_contacts.forget(project, emails);
    }

    /// Writes a contact change and its events in one transaction.
    pub async fn write_contact(
        &self,
        project: &str,
        write: &ContactWrite,
        events: &[Event],
    ) -> Result<WriteResult, StoreError> {
        if matches!(write, ContactWrite::None) && events.is_empty() {
            return Ok(WriteResult::Done); // nothing changes: no transaction
        }
        self.forget_written(project, std::slice::from_ref(write));
        let event_rows = events;
        let events: Vec<Value> = events.iter().map(Event::doc).collect();
        let (sql_contact, mut v) = match write {
            ContactWrite::Create { id, email, subscribed, data, now } => (
                "CREATE type::record('contact', $cid) CONTENT {
                    project: $p, email: $email, subscribed: $sub, data: $data, version: 1,
                    created_at: $now, updated_at: $now
                 } RETURN NONE;",
                vars! { "cid": id, "email": email, "sub": subscribed, "data": data, "now": now },
            ),
            ContactWrite::Update { id, version, email, subscribed, data, now } => (
                "LET $r = (UPDATE type::record('contact', $cid) SET email = $email, subscribed = $sub, data = $data,
                    version = version + 1, updated_at = $now WHERE project = $p AND version = $ver RETURN AFTER);
                 IF array::len($r) == 0 { THROW 'STALE_CONTACT'; };",
                vars! { "cid": id, "email": email, "sub": subscribed, "data": data, "now": now, "ver": version },
            ),
            ContactWrite::None => ("", vars! {}),
        };
        v["p"] = Value::String(project.to_string());
        v["events"] = Value::Array(events);
        v["outbox"] = outbox_row(event_rows.iter().map(|e| e.id.as_str()));
        let outbox = if event_rows.is_empty() { "" } else { OUTBOX_INSERT };
        let sql = format!(
            "BEGIN TRANSACTION;
             {sql_contact}
             FOR $e IN $events {{ CREATE type::record('event', $e.id) CONTENT $e.doc RETURN NONE; }};
             {outbox}
             COMMIT TRANSACTION;"
        );
        match self.query(&sql, v).await {
            Ok(_) => Ok(WriteResult::Done),
            Err(e) if e.thrown("STALE_CONTACT") => Ok(WriteResult::Stale),
            Err(StoreError::Busy(_)) => Ok(WriteResult::Stale),
            // A concurrent create of the same email, or an update to an email another contact took.
            Err(StoreError::Conflict(m)) if m.contains("contact_project_email") => match write {
                ContactWrite::Create { .. } => Ok(WriteResult::Stale),
                _ => Err(StoreError::Conflict(m)),
            },
            Err(e) => Err(e),
        }
    }

    /// Deletes a contact, its events and its segment memberships. False when it does not exist in the project.
    pub async fn delete_contact(&self, project: &str, id: &str) -> Result<bool, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    &"BEGIN TRANSACTION;
                     LET $gone = (DELETE contact WHERE id = type::record('contact', $id) AND project = $p RETURN BEFORE);
                     IF array::len($gone) > 0 {
                        {LOWER_CONTACTS}
                        LET $gone_events = (SELECT name, created_at FROM event WHERE project = $p AND contact = $id);
                        {LOWER_EVENTS}
                        DELETE event WHERE project = $p AND contact = $id;
                        DELETE segment_member WHERE project = $p AND contact = $id;
                        LET $tracked = (SELECT VALUE record::id(id) FROM segment WHERE project = $p AND kind = 'DYNAMIC');
                        DELETE array::map($tracked, |$s| type::record('segment_track', [$p, $s, $id])) RETURN NONE;
                     };
                     RETURN array::len($gone) > 0;
                     COMMIT TRANSACTION;"
                        .replace("{LOWER_CONTACTS}", super::tallies::LOWER_CONTACTS)
                        .replace("{LOWER_EVENTS}", super::tallies::LOWER_EVENTS),
                    vars! { "p": project, "id": id },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_bool().unwrap_or(false))
    }

    pub async fn list_contacts(&self, project: &str, q: &ContactQuery) -> Result<Vec<Contact>, StoreError> {
        let (field, cmp, dir) = order_parts(q.sort_email, q.ascending);
        let mut sql = format!("SELECT {CONTACT_FIELDS} FROM contact WHERE project = $p");
        if q.search.is_some() {
            sql.push_str(" AND string::contains(email, $search)");
        }
        if q.subscribed.is_some() {
            sql.push_str(" AND subscribed = $sub");
        }
        if q.after.is_some() {
            sql.push_str(&format!(" AND ({field} {cmp} $av OR ({field} = $av AND record::id(id) {cmp} $aid))"));
        }
        sql.push_str(&format!(" ORDER BY {field} {dir}, id {dir} LIMIT $limit"));
        let (av, aid) = q.after.clone().unzip();
        self.query(
            &sql,
            vars! { "p": project, "search": q.search, "sub": q.subscribed, "av": av, "aid": aid, "limit": q.limit },
        )
        .await?
        .all(0)
    }

    pub async fn count_contacts(
        &self,
        project: &str,
        search: Option<&str>,
        subscribed: Option<bool>,
    ) -> Result<i64, StoreError> {
        let mut sql = "SELECT count() AS n FROM contact WHERE project = $p".to_string();
        if search.is_some() {
            sql.push_str(" AND string::contains(email, $search)");
        }
        if subscribed.is_some() {
            sql.push_str(" AND subscribed = $sub");
        }
        sql.push_str(" GROUP ALL");
        count_of(self.query(&sql, vars! { "p": project, "search": search, "sub": subscribed }).await?.value(0)?)
    }

    /// Which of these (normalised) emails have a contact in the project.
    pub async fn existing_emails(&self, project: &str, emails: &[String]) -> Result<Vec<String>, StoreError> {
        // One point lookup per email (see `contacts_by_emails` on why not `IN`).
        let v = self
            .query(
                "RETURN array::flatten(array::map($emails, |$e|
                    (SELECT VALUE email FROM contact WHERE project = $p AND email = $e)))",
                vars! { "p": project, "emails": emails },
            )
            .await?
            .value(0)?;
        Ok(serde_json::from_value(v).unwrap_or_default())
    }

    /// The `data` objects of the project's `limit` most recently updated contacts (a backward walk of the
    /// `contact_project_updated` index that stops at the limit).
    pub async fn recent_contact_data(
        &self,
        project: &str,
        limit: usize,
    ) -> Result<Vec<Map<String, Value>>, StoreError> {
        let v = self
            .query(
                "SELECT VALUE data FROM contact WHERE project = $p ORDER BY updated_at DESC LIMIT $n",
                vars! { "p": project, "n": limit },
            )
            .await?
            .value(0)?;
        let list: Vec<Value> = serde_json::from_value(v).unwrap_or_default();
        Ok(list.into_iter().filter_map(|d| d.as_object().cloned()).collect())
    }

    /// The `data` object of every contact in the project.
    pub async fn all_contact_data(&self, project: &str) -> Result<Vec<Map<String, Value>>, StoreError> {
        let v =
            self.query("SELECT VALUE data FROM contact WHERE project = $p", vars! { "p": project }).await?.value(0)?;
        let list: Vec<Value> = serde_json::from_value(v).unwrap_or_default();
        Ok(list.into_iter().filter_map(|d| d.as_object().cloned()).collect())
    }

    /// Removes `data.<field>` from every contact of the project; returns how many had it.
    pub async fn remove_data_field(&self, project: &str, field: &str, now: i64) -> Result<i64, StoreError> {
        self.cache.known_contacts.clear(); // every contact with the field moves to a new version
        let v = self
            .write(|| async {
                self.query(
                    "LET $ids = (SELECT VALUE id FROM contact WHERE project = $p AND data[$f] != NONE);
                     UPDATE $ids SET data = object::from_entries(object::entries(data).filter(|$e| $e[0] != $f)),
                        version = version + 1, updated_at = $now RETURN NONE;
                     RETURN array::len($ids);",
                    vars! { "p": project, "f": field, "now": now },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_i64().unwrap_or(0))
    }

    // ---- events ----
}

fn order_parts(sort_email: bool, ascending: bool) -> (&'static str, &'static str, &'static str) {
    let field = if sort_email { "email" } else { "created_at" };
    if ascending { (field, ">", "ASC") } else { (field, "<", "DESC") }
}
