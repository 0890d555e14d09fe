//! Contacts and events. Every query here filters by project. A contact write and the events it causes
//! are one transaction; a contact carries a `version` so read-modify-write updates detect concurrent
//! changes (optimistic concurrency) and are retried by the caller.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Store, StoreError};
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

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Event {
    pub id: String,
    pub project: String,
    pub contact: String,
    pub name: String,
    #[serde(default)]
    pub data: Map<String, Value>,
    pub source: String,
    pub created_at: i64,
}

impl Event {
    pub fn new(project: &str, contact: &str, name: &str, data: Map<String, Value>, source: &str, now: i64) -> Event {
        Event {
            id: uuid::Uuid::now_v7().to_string(),
            project: project.to_string(),
            contact: contact.to_string(),
            name: name.to_string(),
            data,
            source: source.to_string(),
            created_at: now,
        }
    }

    /// The event as a row for `INSERT INTO event` (one statement for many events).
    pub(crate) fn row(&self) -> Value {
        vars! {
            "id": self.id, "project": self.project, "contact": self.contact, "name": self.name, "data": self.data,
            "source": self.source, "created_at": self.created_at,
        }
    }

    pub(crate) fn doc(&self) -> Value {
        vars! {
            "id": self.id, "doc": {
                "project": self.project, "contact": self.contact, "name": self.name, "data": self.data,
                "source": self.source, "created_at": self.created_at,
            }
        }
    }
}

/// Records a transaction's events in the event-stream outbox: one `outbox` row listing their ids,
/// bound as `$outbox` ([`outbox_row`]). Rows are keyed by UUIDv7, so the table reads oldest first.
pub(crate) const OUTBOX_INSERT: &str =
    "CREATE type::record('outbox', $outbox.id) CONTENT { events: $outbox.events } RETURN NONE;\n";

/// The `$outbox` binding of [`OUTBOX_INSERT`] for events with these ids.
pub(crate) fn outbox_row<'a>(ids: impl IntoIterator<Item = &'a str>) -> Value {
    vars! { "id": uuid::Uuid::now_v7().to_string(), "events": ids.into_iter().collect::<Vec<_>>() }
}

/// One outbox row: the events a transaction stored, in order, that some subscriber has not seen yet.
#[derive(Debug, Clone)]
pub struct OutboxEntry {
    pub id: String,
    /// The ids the row lists.
    pub ids: Vec<String>,
    /// Those events, in the same order (an event deleted since, with its contact, is left out).
    pub events: Vec<Event>,
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

/// Filters of an event list.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    pub name: Option<String>,
    pub contact: Option<String>,
    /// Keyset cursor: the last row's created_at and id (newest first).
    pub after: Option<(i64, String)>,
    pub limit: usize,
}

pub(crate) const CONTACT_FIELDS: &str =
    "record::id(id) AS id, email, subscribed, data, version, created_at, updated_at";
const EVENT_FIELDS: &str = "record::id(id) AS id, project, contact, name, data, source, created_at";

/// Outbox rows read per dispatch batch at most.
const OUTBOX_ROWS: usize = 100;

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
    fn forget_written(&self, project: &str, writes: &[ContactWrite]) {
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
        let docs = super::emails::email_docs(emails, job_kind, priority, max_attempts, super::emails::SEND_JOB_CHUNK);
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

    /// Deletes a contact, its events and its segment memberships. False when it does not exist in the project.
    pub async fn delete_contact(&self, project: &str, id: &str) -> Result<bool, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    "BEGIN TRANSACTION;
                     LET $gone = (DELETE contact WHERE id = type::record('contact', $id) AND project = $p RETURN BEFORE);
                     IF array::len($gone) > 0 {
                        DELETE event WHERE project = $p AND contact = $id;
                        DELETE segment_member WHERE project = $p AND contact = $id;
                        LET $tracked = (SELECT VALUE record::id(id) FROM segment WHERE project = $p AND kind = 'DYNAMIC');
                        DELETE array::map($tracked, |$s| type::record('segment_track', [$p, $s, $id])) RETURN NONE;
                     };
                     RETURN array::len($gone) > 0;
                     COMMIT TRANSACTION;",
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

    pub async fn list_events(&self, project: &str, q: &EventQuery) -> Result<Vec<Event>, StoreError> {
        let mut sql = format!("SELECT {EVENT_FIELDS} FROM event WHERE project = $p");
        if q.name.is_some() {
            sql.push_str(" AND name = $name");
        }
        if q.contact.is_some() {
            sql.push_str(" AND contact = $contact");
        }
        if q.after.is_some() {
            sql.push_str(" AND (created_at < $av OR (created_at = $av AND record::id(id) < $aid))");
        }
        sql.push_str(" ORDER BY created_at DESC, id DESC LIMIT $limit");
        let (av, aid) = q.after.clone().unzip();
        self.query(
            &sql,
            vars! { "p": project, "name": q.name, "contact": q.contact, "av": av, "aid": aid, "limit": q.limit },
        )
        .await?
        .all(0)
    }

    pub async fn count_events(
        &self,
        project: &str,
        name: Option<&str>,
        contact: Option<&str>,
    ) -> Result<i64, StoreError> {
        let mut sql = "SELECT count() AS n FROM event WHERE project = $p".to_string();
        if name.is_some() {
            sql.push_str(" AND name = $name");
        }
        if contact.is_some() {
            sql.push_str(" AND contact = $contact");
        }
        sql.push_str(" GROUP ALL");
        count_of(self.query(&sql, vars! { "p": project, "name": name, "contact": contact }).await?.value(0)?)
    }

    /// Name and creation time of every event of the project in `[from, to)`.
    pub async fn event_times(&self, project: &str, from: i64, to: i64) -> Result<Vec<(String, i64)>, StoreError> {
        #[derive(Deserialize)]
        struct Row {
            name: String,
            created_at: i64,
        }
        let rows: Vec<Row> = self
            .query(
                "SELECT name, created_at FROM event WHERE project = $p AND created_at >= $from AND created_at < $to",
                vars! { "p": project, "from": from, "to": to },
            )
            .await?
            .all(0)?;
        Ok(rows.into_iter().map(|r| (r.name, r.created_at)).collect())
    }

    /// Distinct event names with their count and last time.
    pub async fn event_names(&self, project: &str) -> Result<Vec<(String, i64, i64)>, StoreError> {
        #[derive(Deserialize)]
        struct Row {
            name: String,
            n: i64,
            last: i64,
        }
        let rows: Vec<Row> = self
            .query(
                "SELECT name, count() AS n, math::max(created_at) AS last FROM event WHERE project = $p GROUP BY name",
                vars! { "p": project },
            )
            .await?
            .all(0)?;
        Ok(rows.into_iter().map(|r| (r.name, r.n, r.last)).collect())
    }

    pub async fn delete_events_named(&self, project: &str, name: &str) -> Result<i64, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    "LET $gone = (DELETE event WHERE project = $p AND name = $name RETURN BEFORE);
                     RETURN array::len($gone);",
                    vars! { "p": project, "name": name },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_i64().unwrap_or(0))
    }

    // ---- the event-stream outbox (system-wide, not project-scoped) ----

    /// The oldest outbox rows, up to `limit` events in all (at least one row), with their events.
    pub async fn outbox(&self, limit: usize) -> Result<Vec<OutboxEntry>, StoreError> {
        #[derive(Deserialize)]
        struct Row {
            id: String,
            events: Vec<String>,
        }
        // A row lists one transaction's events: a few for a request, up to a thousand for a compute.
        let rows: Vec<Row> = self
            .query(
                "SELECT record::id(id) AS id, events FROM outbox LIMIT $rows",
                vars! { "rows": limit.clamp(1, OUTBOX_ROWS) },
            )
            .await?
            .all(0)?;
        let mut taken = Vec::new();
        let mut n = 0;
        for r in rows {
            if n >= limit && !taken.is_empty() {
                break;
            }
            n += r.events.len();
            taken.push(r);
        }
        let ids: Vec<&str> = taken.iter().flat_map(|r| r.events.iter().map(String::as_str)).collect();
        let found: Vec<Event> = self
            .query(
                &format!(
                    "LET $r = array::map($ids, |$i| type::record('event', $i));
                     SELECT {EVENT_FIELDS} FROM $r;"
                ),
                vars! { "ids": ids },
            )
            .await?
            .all(1)?;
        let mut by_id: HashMap<String, Event> = found.into_iter().map(|e| (e.id.clone(), e)).collect();
        Ok(taken
            .into_iter()
            .map(|r| OutboxEntry {
                events: r.events.iter().filter_map(|i| by_id.remove(i)).collect(),
                id: r.id,
                ids: r.events,
            })
            .collect())
    }

    /// The events no subscriber has been handed yet, oldest first (up to about `limit`).
    pub async fn undispatched_events(&self, limit: usize) -> Result<Vec<Event>, StoreError> {
        Ok(self.outbox(limit).await?.into_iter().flat_map(|e| e.events).collect())
    }

    /// Records how far the subscribers got through an outbox row: `left` are the ids still to hand
    /// out; none left deletes the row.
    /// Deletes the outbox rows whose events every subscriber has had, in one statement.
    pub async fn outbox_done(&self, ids: &[String]) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        self.write(|| async {
            self.query("DELETE array::map($ids, |$i| type::record('outbox', $i)) RETURN NONE", vars! { "ids": ids })
                .await
        })
        .await
        .map(|_| ())
    }

    pub async fn outbox_progress(&self, id: &str, left: &[String]) -> Result<(), StoreError> {
        self.write(|| async {
            if left.is_empty() {
                self.query("DELETE type::record('outbox', $id) RETURN NONE", vars! { "id": id }).await
            } else {
                self.query(
                    "UPDATE type::record('outbox', $id) SET events = $left RETURN NONE",
                    vars! { "id": id, "left": left },
                )
                .await
            }
        })
        .await
        .map(|_| ())
    }
}

fn order_parts(sort_email: bool, ascending: bool) -> (&'static str, &'static str, &'static str) {
    let field = if sort_email { "email" } else { "created_at" };
    if ascending { (field, ">", "ASC") } else { (field, "<", "DESC") }
}

/// `count() ... GROUP ALL` answers `[{n}]`, or `[]` when nothing matched.
fn count_of(v: Value) -> Result<i64, StoreError> {
    Ok(v.get(0).and_then(|r| r.get("n")).and_then(Value::as_i64).unwrap_or(0))
}
