//! Events and the event-stream outbox. Every transaction that stores events also writes one `outbox`
//! row listing their ids ([`OUTBOX_INSERT`]); the dispatcher reads rows oldest first and deletes each once
//! every subscriber has had its events. Event reads filter by project; the outbox is system-wide.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Store, StoreError, count_of};
use crate::vars;

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
    /// For an event a workflow step caused: the depth of the execution that caused it (an execution
    /// it starts is one deeper; docs/security.md#workflows). Outside `data`, which callers control.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<i64>,
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
            depth: None,
        }
    }

    /// The event as caused by a workflow step at `depth` (None: not caused by one).
    pub fn at_depth(mut self, depth: Option<i64>) -> Event {
        self.depth = depth;
        self
    }

    /// The event as a row for `INSERT INTO event` (one statement for many events).
    pub fn row(&self) -> Value {
        let mut v = vars! {
            "id": self.id, "project": self.project, "contact": self.contact, "name": self.name, "data": self.data,
            "source": self.source, "created_at": self.created_at,
        };
        if let Some(d) = self.depth {
            v["depth"] = d.into();
        }
        v
    }

    pub(crate) fn doc(&self) -> Value {
        let mut doc = vars! {
            "project": self.project, "contact": self.contact, "name": self.name, "data": self.data,
            "source": self.source, "created_at": self.created_at,
        };
        if let Some(d) = self.depth {
            doc["depth"] = d.into();
        }
        vars! { "id": self.id, "doc": doc }
    }
}

/// Records a transaction's events in the event-stream outbox: one `outbox` row listing their ids,
/// bound as `$outbox` ([`outbox_row`]). Rows are keyed by UUIDv7, so the table reads oldest first.
pub const OUTBOX_INSERT: &str =
    "CREATE type::record('outbox', $outbox.id) CONTENT { events: $outbox.events } RETURN NONE;\n";
/// What every query that writes an outbox row contains (it notifies [`super::Store::stored_events`]).
pub(crate) const OUTBOX_MARK: &str = "CREATE type::record('outbox'";

/// The `$outbox` binding of [`OUTBOX_INSERT`] for events with these ids.
pub fn outbox_row<'a>(ids: impl IntoIterator<Item = &'a str>) -> Value {
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

/// Filters of an event list.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    pub name: Option<String>,
    pub contact: Option<String>,
    /// Keyset cursor: the last row's created_at and id (newest first).
    pub after: Option<(i64, String)>,
    pub limit: usize,
}

const EVENT_FIELDS: &str = "record::id(id) AS id, project, contact, name, data, source, created_at, depth";

/// Outbox rows read per dispatch batch at most.
const OUTBOX_ROWS: usize = 100;

impl Store {
    /// A page of the project's events, newest first. Past a cursor, the rest of the cursor's millisecond
    /// and the older events are two statements: each a backward index range that stops at the limit
    /// (one statement with `OR` scans every event of the project; see `store/activity.rs`).
    pub async fn list_events(&self, project: &str, q: &EventQuery) -> Result<Vec<Event>, StoreError> {
        let mut filter = String::from("project = $p");
        if q.name.is_some() {
            filter.push_str(" AND name = $name");
        }
        if q.contact.is_some() {
            filter.push_str(" AND contact = $contact");
        }
        let sql = if q.after.is_some() {
            format!(
                "SELECT {EVENT_FIELDS} FROM event WHERE {filter} AND created_at = $av AND record::id(id) < $aid
                    ORDER BY id DESC LIMIT $limit;
                 SELECT {EVENT_FIELDS} FROM event WHERE {filter} AND created_at < $av ORDER BY created_at DESC LIMIT $limit;"
            )
        } else {
            format!("SELECT {EVENT_FIELDS} FROM event WHERE {filter} ORDER BY created_at DESC LIMIT $limit;")
        };
        let (av, aid) = q.after.clone().unzip();
        let mut res = self
            .query(
                &sql,
                vars! { "p": project, "name": q.name, "contact": q.contact, "av": av, "aid": aid, "limit": q.limit },
            )
            .await?;
        let mut rows: Vec<Event> = res.all(0)?;
        if q.after.is_some() {
            rows.append(&mut res.all(1)?);
        }
        rows.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        rows.truncate(q.limit);
        Ok(rows)
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

    /// The project's first event name after `after` in name order, with the time of its latest event:
    /// two walks of the `event_project_name` index that stop at their first entry, so listing the names
    /// one after another reads one entry per name instead of every event.
    pub async fn event_name_after(&self, project: &str, after: &str) -> Result<Option<(String, i64)>, StoreError> {
        let v = self
            .query(
                "{
                    LET $name = (SELECT VALUE name FROM event WHERE project = $p AND name > $after ORDER BY name LIMIT 1)[0];
                    IF !$name { RETURN NONE; };
                    LET $last = (SELECT VALUE created_at FROM event WHERE project = $p AND name = $name
                        ORDER BY created_at DESC LIMIT 1)[0];
                    RETURN { name: $name, last: $last ?? 0 };
                }",
                vars! { "p": project, "after": after },
            )
            .await?
            .value_last()?;
        Ok(match (v["name"].as_str(), v["last"].as_i64()) {
            (Some(n), Some(l)) => Some((n.to_string(), l)),
            _ => None,
        })
    }

    pub async fn delete_events_named(&self, project: &str, name: &str) -> Result<i64, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    &format!(
                        "{{
                            LET $gone_events = (DELETE event WHERE project = $p AND name = $name RETURN BEFORE);
                            {}
                            RETURN array::len($gone_events);
                        }}",
                        super::tallies::LOWER_EVENTS
                    ),
                    vars! { "p": project, "name": name },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_i64().unwrap_or(0))
    }

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
}
