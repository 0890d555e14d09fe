//! Segments, their stored memberships, and the evaluation of condition trees (`domain::conditions`).
//!
//! Translation: every contact-field filter becomes a fragment of a `WHERE` clause over `contact`, with
//! every value and every `data` key bound as a parameter (only fixed fragments are concatenated). Event,
//! email-activity and static-membership filters are sets of contact ids, each listed by one query over its
//! index (`event_project_name`, `segment_member_segment`) and held in the host: looking a contact up in a
//! bound object per row costs a copy of the whole object in SurrealDB 3.3 (quadratic), and a sub-query
//! per row is slower still. A reference to a dynamic segment inlines that segment's tree. Operators a
//! plugin provides run in the host too.
//!
//! In the `WHERE` clause, host leaves (sets, plugin operators) are "maybe" (true where the filter is not
//! negated, false under a negation), which yields a superset of the matches; the top-level conjuncts
//! made of database leaves only are exact there, and the host evaluates the other conjuncts over each
//! candidate ([`Prepared`]).
//!
//! Counts and full walks list every set while they scan the contact table (`WITH NOINDEX`: faster than
//! the `project` index when most rows belong to the project), two queries at once; when a set ANDed at
//! the top turns out small enough that reading its contacts by record id beats the scan, the scan is
//! dropped and the set drives. Pages read newest first: the contact table backwards (`ORDER BY id DESC`
//! is the table's key order, read without sorting; contact ids are UUIDv7, time-ordered) in growing
//! batches, or the driving set's ids in order. A page lists only sets of up to [`PAGE_SET_PROBE`] rows
//! and asks the larger ones about its candidates (a lookup by contact each), so its first members cost a
//! few hundred candidates instead of a set of a hundred thousand; when the candidates it would ask about
//! run past [`PAGE_LOOKUPS`], it lists the sets after all.
//!
//! Every query filters by project.

//!
//! This module holds segments and their stored memberships; `translate` turns a condition into SurrealQL
//! and `evaluate` runs a translated condition (counts, walks, pages).

mod evaluate;
mod translate;

pub use evaluate::*;
pub use translate::*;

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::events::OUTBOX_INSERT;
use super::{Store, StoreError};
use crate::vars;

/// A stored segment.
#[derive(Debug, Clone, Deserialize)]
pub struct Segment {
    pub id: String,
    pub project: String,
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub kind: String,
    #[serde(default)]
    pub condition: Option<Value>,
    pub track: bool,
    pub member_count: i64,
    #[serde(default)]
    pub ref_fields: Vec<String>,
    #[serde(default)]
    pub ref_segments: Vec<String>,
    #[serde(default)]
    pub ref_events: Vec<String>,
    #[serde(default)]
    pub computed_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Segment {
    pub fn is_dynamic(&self) -> bool {
        self.kind == "DYNAMIC"
    }
}

/// A new or changed segment.
#[derive(Debug, Clone)]
pub struct SegmentWrite {
    pub name: String,
    pub description: Option<String>,
    pub kind: String,
    pub condition: Option<Value>,
    pub track: bool,
    pub ref_fields: Vec<String>,
    pub ref_events: Vec<String>,
    pub ref_segments: Vec<String>,
}

const SEGMENT_FIELDS: &str = "record::id(id) AS id, project, name, description, kind, condition, track, member_count, \
                              ref_fields, ref_segments, ref_events, computed_at, created_at, updated_at";

/// The names and payload of a tracked segment's entry and exit events.
#[derive(Debug, Clone)]
pub struct MembershipEvents {
    pub entry: String,
    pub exit: String,
    pub data: Value,
}

/// What a compute changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Diff {
    pub entered: i64,
    pub exited: i64,
    pub count: i64,
}

impl Store {
    // ---- segments ----

    pub async fn segment(&self, project: &str, id: &str) -> Result<Option<Segment>, StoreError> {
        self.query(
            &format!("SELECT {SEGMENT_FIELDS} FROM segment WHERE id = type::record('segment', $id) AND project = $p"),
            vars! { "p": project, "id": id },
        )
        .await?
        .first(0)
    }

    /// Segments of a project by id (missing ones are left out).
    pub async fn segments_by_ids(&self, project: &str, ids: &[String]) -> Result<Vec<Segment>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // Read by record id (see `contacts_by_ids`).
        self.query(
            &format!(
                "LET $r = array::map($ids, |$i| type::record('segment', $i));
                 SELECT {SEGMENT_FIELDS} FROM $r WHERE project = $p;"
            ),
            vars! { "p": project, "ids": ids },
        )
        .await?
        .all(1)
    }

    /// Every segment of the project, newest first.
    pub async fn list_segments(&self, project: &str) -> Result<Vec<Segment>, StoreError> {
        self.query(
            &format!("SELECT {SEGMENT_FIELDS} FROM segment WHERE project = $p ORDER BY created_at DESC, id DESC"),
            vars! { "p": project },
        )
        .await?
        .all(0)
    }

    /// Every segment of every project (the recurring recount).
    pub async fn all_segments(&self) -> Result<Vec<Segment>, StoreError> {
        self.query(&format!("SELECT {SEGMENT_FIELDS} FROM segment"), vars! {}).await?.all(0)
    }

    pub async fn create_segment(&self, project: &str, id: &str, w: &SegmentWrite, now: i64) -> Result<(), StoreError> {
        let doc = super::jobs::strip_nulls(json!({
            "project": project, "name": w.name, "description": w.description, "kind": w.kind,
            "condition": w.condition, "track": w.track, "member_count": 0,
            "ref_fields": w.ref_fields, "ref_events": w.ref_events, "ref_segments": w.ref_segments,
            "created_at": now, "updated_at": now,
        }));
        self.write(|| async {
            self.query("CREATE type::record('segment', $id) CONTENT $doc RETURN NONE", vars! { "id": id, "doc": doc })
                .await
        })
        .await
        .map(|_| ())
    }

    /// Replaces a segment's editable fields. False when it does not exist in the project.
    pub async fn update_segment(
        &self,
        project: &str,
        id: &str,
        w: &SegmentWrite,
        now: i64,
    ) -> Result<bool, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    "LET $r = (UPDATE type::record('segment', $id) SET name = $name, description = $desc,
                        condition = $cond, track = $track, ref_fields = $rf, ref_events = $re, ref_segments = $rs,
                        updated_at = $now WHERE project = $p RETURN AFTER);
                     RETURN array::len($r) > 0;",
                    vars! {
                        "p": project, "id": id, "name": w.name, "desc": w.description.clone().map(Value::String).unwrap_or(Value::Null),
                        "cond": w.condition.clone().unwrap_or(Value::Null), "track": w.track,
                        "rf": w.ref_fields, "re": w.ref_events, "rs": w.ref_segments, "now": now,
                    },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_bool().unwrap_or(false))
    }

    /// Deletes a segment, then its stored memberships in transactions of [`DELETE_BATCH`] rows (one
    /// transaction for a hundred thousand members overflows the embedded store's write buffer). False
    /// when it does not exist in the project. Rows a crash leaves behind belong to a segment id that is
    /// never used again and are never read.
    pub async fn delete_segment(&self, project: &str, id: &str) -> Result<bool, StoreError> {
        self.delete_segment_in_batches(project, id, DELETE_BATCH).await
    }

    async fn delete_segment_in_batches(&self, project: &str, id: &str, batch: usize) -> Result<bool, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    "LET $gone = (DELETE segment WHERE id = type::record('segment', $id) AND project = $p RETURN BEFORE);
                     RETURN array::len($gone) > 0;",
                    vars! { "p": project, "id": id },
                )
                .await?
                .value_last()
            })
            .await?;
        if !v.as_bool().unwrap_or(false) {
            return Ok(false);
        }
        for sql in [
            "LET $r = (SELECT VALUE id FROM segment_track:[$p, $s, NONE]..[$p, $s, {}] LIMIT $n);
             DELETE $r RETURN NONE; RETURN array::len($r);",
            "LET $r = (SELECT VALUE id FROM segment_member WHERE project = $p AND segment = $s LIMIT $n);
             DELETE $r RETURN NONE; RETURN array::len($r);",
        ] {
            loop {
                let n = self
                    .write(|| async {
                        self.query(sql, vars! { "p": project, "s": id, "n": batch }).await?.value_last()
                    })
                    .await?;
                if n.as_u64().unwrap_or(0) < batch as u64 {
                    break;
                }
            }
        }
        Ok(true)
    }

    /// Segments of the project whose condition references segment `id`.
    pub async fn segments_referencing_segment(&self, project: &str, id: &str) -> Result<Vec<Segment>, StoreError> {
        self.query(
            &format!("SELECT {SEGMENT_FIELDS} FROM segment WHERE project = $p AND ref_segments CONTAINS $id"),
            vars! { "p": project, "id": id },
        )
        .await?
        .all(0)
    }

    /// (id, name) of the segments that read `data.<key>`.
    pub async fn segments_using_field(&self, project: &str, key: &str) -> Result<Vec<(String, String)>, StoreError> {
        self.usage("ref_fields", project, key).await
    }

    /// (id, name) of the segments that read event `name`.
    pub async fn segments_using_event(&self, project: &str, name: &str) -> Result<Vec<(String, String)>, StoreError> {
        self.usage("ref_events", project, name).await
    }

    async fn usage(&self, column: &'static str, project: &str, v: &str) -> Result<Vec<(String, String)>, StoreError> {
        #[derive(Deserialize)]
        struct Row {
            id: String,
            name: String,
        }
        let rows: Vec<Row> = self
            .query(
                &format!(
                    "SELECT record::id(id) AS id, name, created_at FROM segment WHERE project = $p AND {column} CONTAINS $v
                     ORDER BY created_at DESC"
                ),
                vars! { "p": project, "v": v },
            )
            .await?
            .all(0)?;
        Ok(rows.into_iter().map(|r| (r.id, r.name)).collect())
    }

    pub async fn set_member_count(&self, project: &str, id: &str, count: i64, now: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE type::record('segment', $id) SET member_count = $n, counted_at = $now WHERE project = $p RETURN NONE",
                vars! { "p": project, "id": id, "n": count, "now": now },
            )
            .await
        })
        .await
        .map(|_| ())
    }
}

impl Store {
    // ---- stored memberships ----

    pub async fn count_members(&self, project: &str, segment: &str) -> Result<i64, StoreError> {
        let v = self
            .query(
                "SELECT count() AS n FROM segment_member WHERE project = $p AND segment = $s GROUP ALL",
                vars! { "p": project, "s": segment },
            )
            .await?
            .value(0)?;
        Ok(v.get(0).and_then(|r| r.get("n")).and_then(Value::as_i64).unwrap_or(0))
    }

    /// One page of a static segment's members, newest membership first.
    pub async fn member_page(
        &self,
        project: &str,
        segment: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<super::contacts::Contact>, StoreError> {
        let ids: Vec<String> = self
            .query(
                "SELECT VALUE contact FROM segment_member WHERE project = $p AND segment = $s
                 ORDER BY created_at DESC, contact DESC LIMIT $limit START $start",
                vars! { "p": project, "s": segment, "limit": limit, "start": offset },
            )
            .await?
            .all(0)?;
        self.contacts_by_ids(project, &ids).await
    }

    /// Adds contacts to a static segment; returns the ids that were not members yet. With `events`, writes
    /// the entry event of each (name, data) in the same transaction.
    pub async fn add_members(
        &self,
        project: &str,
        segment: &str,
        contacts: &[String],
        event: Option<(&str, &Value)>,
        now: i64,
    ) -> Result<Vec<String>, StoreError> {
        self.change_members(project, segment, contacts, true, event, now).await
    }

    /// Removes contacts from a static segment; returns the ids that were members.
    pub async fn remove_members(
        &self,
        project: &str,
        segment: &str,
        contacts: &[String],
        event: Option<(&str, &Value)>,
        now: i64,
    ) -> Result<Vec<String>, StoreError> {
        self.change_members(project, segment, contacts, false, event, now).await
    }

    async fn change_members(
        &self,
        project: &str,
        segment: &str,
        contacts: &[String],
        add: bool,
        event: Option<(&str, &Value)>,
        now: i64,
    ) -> Result<Vec<String>, StoreError> {
        let (name, data) = match event {
            Some((n, d)) => (Some(n.to_string()), d.clone()),
            None => (None, Value::Null),
        };
        let (pick, change) = if add {
            (
                "array::filter($ids, |$c| !record::exists(type::record('segment_member', [$s, $c])))",
                "CREATE type::record('segment_member', [$s, $c]) CONTENT
                    {project: $p, segment: $s, contact: $c, created_at: $now} RETURN NONE;",
            )
        } else {
            (
                "array::filter($ids, |$c| record::exists(type::record('segment_member', [$s, $c])))",
                "DELETE type::record('segment_member', [$s, $c]) RETURN NONE;",
            )
        };
        let sql = format!(
            "BEGIN TRANSACTION;
             LET $changed = {pick};
             FOR $c IN $changed {{
                {change}
             }};
             IF $ev != NULL AND array::len($changed) > 0 {{
                LET $evs = array::map($changed, |$c| {{ id: <string> rand::uuid::v7(), project: $p, contact: $c,
                    name: $ev, data: $data, source: 'system', created_at: $now }});
                INSERT INTO event $evs RETURN NONE;
                CREATE type::record('outbox', <string> rand::uuid::v7()) CONTENT {{
                    events: array::map($evs, |$e| $e.id) }} RETURN NONE;
             }};
             UPDATE type::record('segment', $s) SET member_count =
                (SELECT count() AS n FROM segment_member WHERE project = $p AND segment = $s GROUP ALL)[0].n ?? 0,
                counted_at = $now WHERE project = $p RETURN NONE;
             RETURN $changed;
             COMMIT TRANSACTION;"
        );
        let v = self
            .write(|| async {
                self.query(
                    &sql,
                    vars! { "p": project, "s": segment, "ids": contacts, "ev": name, "data": data, "now": now },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(serde_json::from_value(v).unwrap_or_default())
    }

    /// Diffs `matches` against the stored membership of a tracked segment (`segment_track`, one range of
    /// record ids) in the host (sorted id lists), writes the difference in transactions of
    /// [`WRITE_BATCH`] contacts, each change with its membership row and exactly one entry or exit event,
    /// and sets the cached count. Each transaction writes only the rows that really change (`INSERT IGNORE`
    /// and `DELETE` report them), so a concurrent or earlier compute of the same segment that wrote a row
    /// first leaves no second event.
    pub async fn apply_membership(
        &self,
        project: &str,
        segment: &str,
        matches: &[String],
        events: &MembershipEvents,
        now: i64,
    ) -> Result<Diff, StoreError> {
        let mut stored: Vec<String> = self
            .query(
                "SELECT VALUE id[2] FROM segment_track:[$p, $s, NONE]..[$p, $s, {}]",
                vars! { "p": project, "s": segment },
            )
            .await?
            .all(0)?;
        stored.sort_unstable();
        let mut wanted: Vec<&str> = matches.iter().map(String::as_str).collect();
        wanted.sort_unstable();
        wanted.dedup();
        let (mut entering, mut exiting) = (Vec::new(), Vec::new());
        let (mut i, mut j) = (0, 0);
        while i < wanted.len() || j < stored.len() {
            match (wanted.get(i), stored.get(j)) {
                (Some(w), Some(s)) if *w == s.as_str() => {
                    i += 1;
                    j += 1;
                }
                (Some(w), Some(s)) if *w < s.as_str() => {
                    entering.push(*w);
                    i += 1;
                }
                (Some(w), None) => {
                    entering.push(*w);
                    i += 1;
                }
                (_, Some(s)) => {
                    exiting.push(s.as_str());
                    j += 1;
                }
                (None, None) => break,
            }
        }
        let mut diff = Diff { entered: 0, exited: 0, count: wanted.len() as i64 };
        // One batch at a time: two at once measured no faster (SurrealDB 3.3.5 writes them one after the
        // other), 16.3 s against 16.9 s for 100,000 entries.
        for (ids, add) in [(&entering, true), (&exiting, false)] {
            for batch in ids.chunks(WRITE_BATCH) {
                let n = self.write_membership_batch(project, segment, batch, add, events, now).await?;
                if add {
                    diff.entered += n;
                } else {
                    diff.exited += n;
                }
            }
        }
        self.write(|| async {
            self.query(
                "UPDATE type::record('segment', $s) SET member_count = $n, counted_at = $now, computed_at = $now
                 WHERE project = $p RETURN NONE",
                vars! { "p": project, "s": segment, "n": diff.count, "now": now },
            )
            .await
        })
        .await?;
        Ok(diff)
    }

    /// Writes one batch of membership changes of a tracked segment in one transaction: the membership
    /// rows of the contacts whose membership still differs, and one entry (`add`) or exit event each;
    /// how many changed.
    async fn write_membership_batch(
        &self,
        project: &str,
        segment: &str,
        ids: &[&str],
        add: bool,
        events: &MembershipEvents,
        now: i64,
    ) -> Result<i64, StoreError> {
        // The rows are built here, not by `array::map` in the query: 2,000 closure calls per batch cost
        // SurrealDB 3.3.5 about 13 ms of a batch's 80.
        let ev = if add { &events.entry } else { &events.exit };
        let depths = self.workflow_depths(project, ids).await?;
        let evs: Vec<Value> = ids
            .iter()
            .map(|c| {
                let mut e = json!({
                    "id": uuid::Uuid::now_v7().to_string(), "project": project, "contact": c, "name": ev,
                    "data": &events.data, "source": "system", "created_at": now,
                });
                if let Some(d) = depths.get(*c) {
                    e["depth"] = json!(d);
                }
                e
            })
            .collect();
        let outbox = super::events::outbox_row(evs.iter().filter_map(|e| e["id"].as_str()));
        // `$changed`: the contacts whose row really changed, `$n` how many. Every row changes unless
        // another compute got there first: then only the events of the rows that changed are written.
        let changed = if add {
            "LET $new = (INSERT IGNORE INTO segment_track $rows RETURN VALUE id);
             LET $n = array::len($new);
             LET $changed = IF $n = array::len($ids) { $ids } ELSE { array::map($new, |$r| record::id($r)[2]) };"
        } else {
            "LET $changed = (DELETE array::map($ids, |$c| type::record('segment_track', [$p, $s, $c]))
                RETURN VALUE record::id($before.id)[2]);
             LET $n = array::len($changed);"
        };
        let sql = format!(
            "BEGIN TRANSACTION;
             {changed}
             IF $n = array::len($ids) {{
                INSERT INTO event $evs RETURN NONE;
                {OUTBOX_INSERT}
             }} ELSE IF $n > 0 {{
                LET $some = array::filter($evs, |$e| $e.contact IN $changed);
                INSERT INTO event $some RETURN NONE;
                CREATE type::record('outbox', $outbox.id) CONTENT {{ events: array::map($some, |$e| $e.id) }}
                    RETURN NONE;
             }};
             RETURN $n;
             COMMIT TRANSACTION;"
        );
        let rows: Vec<Value> = if add {
            ids.iter().map(|c| json!({ "id": [project, segment, c], "created_at": now })).collect()
        } else {
            Vec::new()
        };
        let v = self
            .write(|| async {
                self.query(
                    &sql,
                    vars! { "p": project, "s": segment, "ids": ids, "rows": &rows, "evs": &evs, "outbox": &outbox },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_i64().unwrap_or(0))
    }

    /// The depth of the workflow execution whose change made each of these contacts what it is, for those a
    /// workflow step wrote last (docs/security.md#workflows): their entry or exit events carry it.
    async fn workflow_depths(&self, project: &str, ids: &[&str]) -> Result<HashMap<String, i64>, StoreError> {
        let rows: Vec<(String, i64)> = self
            .query(
                "SELECT VALUE [record::id(id), depth] FROM array::map($ids, |$c| type::record('contact', $c))
                 WHERE project = $p AND depth != NONE AND depth_version = version",
                vars! { "p": project, "ids": ids },
            )
            .await?
            .all(0)?;
        Ok(rows.into_iter().collect())
    }

    /// Whether anything a tracked segment may read changed at or after `since`: a contact written, or
    /// an event of one of `events` recorded.
    pub async fn changed_since(&self, project: &str, since: i64, events: &[String]) -> Result<bool, StoreError> {
        let v = self
            .query(
                "LET $c = (SELECT VALUE id FROM contact WHERE project = $p AND updated_at >= $t LIMIT 1);
                 LET $e = array::flatten(array::map($names, |$n|
                    (SELECT VALUE id FROM event WHERE project = $p AND name = $n AND created_at >= $t LIMIT 1)));
                 RETURN array::len($c) > 0 OR array::len($e) > 0;",
                vars! { "p": project, "t": since, "names": events },
            )
            .await?
            .value_last()?;
        Ok(v.as_bool().unwrap_or(true))
    }
}

#[cfg(test)]
mod tests {
    //! The semantics of every condition operator (docs/behaviour.md#segments-and-conditions), case by
    //! case, against the real database (`mem://`), so the SurrealQL translation is what is tested.

    use std::collections::HashMap;

    use super::*;
    use crate::config::Config;
    use crate::domain::conditions::parse;
    use crate::infra::clock::rfc3339;

    const NOW: i64 = 1_800_000_000_000;
    const MIN: i64 = 60_000;
    const HOUR: i64 = 60 * MIN;
    const DAY: i64 = 24 * HOUR;

    async fn seed() -> Store {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        // a: every field set; b: other values; m: no data; n: null values; w: wrong types.
        let contacts = json!([
            {"id": "a", "email": "a@x.io", "subscribed": true, "created": NOW - HOUR, "updated": NOW, "data": {
                "plan": "pro", "name": "Ada Lovelace", "tags": ["a", "b"], "n": 5, "d": rfc3339(NOW - 2 * DAY),
                "nested": {"city": "Paris"}}},
            {"id": "b", "email": "b@y.io", "subscribed": false, "created": NOW - 3 * DAY, "updated": NOW, "data": {
                "plan": "free", "name": "Bob", "tags": ["c"], "n": 2.5, "d": rfc3339(NOW - 400 * DAY),
                "nested": {"city": "Rome"}}},
            {"id": "m", "email": "m@x.io", "subscribed": true, "created": NOW - 40 * DAY, "updated": NOW - 40 * DAY, "data": {}},
            {"id": "n", "email": "n@z.io", "subscribed": true, "created": NOW - 10 * MIN, "updated": NOW, "data": {
                "plan": null, "name": null, "tags": null, "n": null, "d": null, "nested": null}},
            {"id": "w", "email": "w@z.io", "subscribed": false, "created": NOW - 2 * DAY, "updated": NOW, "data": {
                "plan": 3, "name": 7, "tags": "a", "n": "5", "d": "not a date", "nested": {"city": 1}}},
            {"id": "other-project", "email": "a@x.io", "subscribed": true, "created": NOW, "updated": NOW, "project": "q",
             "data": {"plan": "pro"}},
        ]);
        store
            .query(
                "FOR $c IN $contacts { CREATE type::record('contact', $c.id) CONTENT {
                    project: $c.project ?? 'p', email: $c.email, subscribed: $c.subscribed, data: $c.data, version: 1,
                    created_at: $c.created, updated_at: $c.updated }; };",
                json!({ "contacts": contacts }),
            )
            .await
            .unwrap();
        let events = json!([
            ["a", "signup", NOW - 2 * DAY],
            ["a", "purchase", NOW - HOUR],
            ["b", "signup", NOW - 60 * DAY],
            ["w", "purchase", NOW - 10 * DAY],
            ["w", "email.open", NOW - 5 * MIN],
            ["n", "email.open", NOW - 3 * DAY],
        ]);
        store
            .query(
                "FOR $e IN $events { CREATE event CONTENT { project: 'p', contact: $e[0], name: $e[1], data: {},
                    source: 'api', created_at: $e[2] }; };
                 CREATE type::record('segment_member', ['s1', 'a']) CONTENT {project: 'p', segment: 's1', contact: 'a', created_at: 1};
                 CREATE type::record('segment_member', ['s1', 'm']) CONTENT {project: 'p', segment: 's1', contact: 'm', created_at: 1};",
                json!({ "events": events }),
            )
            .await
            .unwrap();
        store
    }

    fn refs() -> HashMap<String, Ref> {
        let pro = parse(
            &json!({"groups": [{"filters": [{"field": "data.plan", "operator": "equals", "value": "pro"}]}]}),
            &|_| false,
        )
        .unwrap();
        HashMap::from([("s1".to_string(), Ref::Static), ("d1".to_string(), Ref::Dynamic(pro))])
    }

    async fn matches(store: &Store, tree: &Value) -> Vec<String> {
        let t = parse(tree, &|_| false).unwrap_or_else(|e| panic!("{tree}: {e}"));
        let c = compile(&t, &refs(), NOW).unwrap();
        let mut ids = store
            .matching_ids::<StoreError>("p", &c, &NoPlugins)
            .await
            .unwrap_or_else(|e| panic!("{tree}: {e}\n{}", c.predicate));
        let n = store.count_matching::<StoreError>("p", &c, &NoPlugins).await.unwrap();
        assert_eq!(n, ids.len() as i64, "count agrees with the ids for {tree}");
        // Pages, newest first, agree with the ids (which come newest first).
        let page: Vec<String> = store
            .matching_page::<StoreError>("p", &c, 1, 2, &NoPlugins)
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.id)
            .collect();
        let second: Vec<String> = ids.iter().skip(1).take(2).cloned().collect();
        assert_eq!(page, second, "page of {tree}");
        // Pages that ask every set about their candidates instead of listing it, and pages that run out of
        // lookups at once and list the sets after all, find the same members.
        for (probe, lookups) in [(0, usize::MAX), (0, 1)] {
            let page = store.page_ids::<StoreError>("p", &c, 1, 2, probe, lookups, &NoPlugins).await.unwrap();
            assert_eq!(page, second, "page of {tree} (sets of more than {probe} rows asked, {lookups} lookups)");
        }
        // Counts and full walks driven by a set (as on a large contact table) agree with the scan.
        let rows = &store.cache.contact_rows;
        rows.put("", 1 << 40, rows.generation());
        let driven = store.matching_ids::<StoreError>("p", &c, &NoPlugins).await.unwrap();
        let driven_n = store.count_matching::<StoreError>("p", &c, &NoPlugins).await.unwrap();
        rows.forget(None);
        assert_eq!((driven, driven_n), (ids.clone(), n), "driven walk of {tree}");
        let (rows, total) = store.matching_page_and_total::<StoreError>("p", &c, 0, 3, &NoPlugins).await.unwrap();
        assert_eq!(total, n, "total of {tree}");
        assert_eq!(rows.len(), ids.len().min(3), "page and total of {tree}");
        ids.sort();
        ids
    }

    /// A chain of segments where each references the next `width` times: compiled, each is translated
    /// once, and an expansion past the node limit is refused instead of growing exponentially.
    #[test]
    fn a_chain_of_references_compiles_each_once_and_stops_at_the_size_limit() {
        let chain = |depth: usize, width: usize| {
            let mut refs = HashMap::new();
            refs.insert(
                format!("s{depth}"),
                Ref::Dynamic(
                    parse(
                        &json!({"groups": [{"filters": [{"field": "data.plan", "operator": "equals", "value": "pro"}]}]}),
                        &|_| false,
                    )
                    .unwrap(),
                ),
            );
            for level in (0..depth).rev() {
                let next = format!("segment.s{}", level + 1);
                let filters: Vec<Value> =
                    (0..width).map(|_| json!({"field": next, "operator": "memberOfSegment"})).collect();
                let t = parse(&json!({"logic": "OR", "groups": [{"filters": filters}]}), &|_| false).unwrap();
                refs.insert(format!("s{level}"), Ref::Dynamic(t));
            }
            let top = parse(&f("segment.s0", "memberOfSegment", Value::Null, None), &|_| false).unwrap();
            (top, refs)
        };
        let (top, refs) = chain(3, 10);
        let c = compile(&top, &refs, NOW).unwrap();
        assert_eq!(c.vars.len(), 1, "the innermost segment's value is bound once, however often it is used");
        let (top, refs) = chain(5, 10);
        let err = compile(&top, &refs, NOW).unwrap_err();
        assert!(
            matches!(&err, CompileError::TooLarge(m) if m.contains(&format!("more than {MAX_COMPILED_NODES} nodes"))),
            "{err}"
        );
    }

    fn f(field: &str, op: &str, value: Value, unit: Option<&str>) -> Value {
        json!({"logic": "AND", "groups": [{"filters": [crate::domain::conditions::filter_json(field, op, value, unit)]}]})
    }

    #[tokio::test]
    async fn every_operator_matching_non_matching_missing_and_null() {
        let store = seed().await;
        let d = |ms: i64| json!(rfc3339(ms));
        let none = Value::Null;
        #[rustfmt::skip]
        let cases: Vec<(&str, &str, Value, Option<&str>, &str)> = vec![
            // standard fields
            ("email", "equals", json!("A@X.IO"), None, "a"),
            ("email", "notEquals", json!("a@x.io"), None, "b m n w"),
            ("email", "contains", json!("X.io"), None, "a m"),
            ("email", "notContains", json!("x.io"), None, "b n w"),
            ("email", "exists", none.clone(), None, "a b m n w"),
            ("email", "notExists", none.clone(), None, ""),
            ("subscribed", "equals", json!(true), None, "a m n"),
            ("subscribed", "equals", json!(false), None, "b w"),
            ("subscribed", "notEquals", json!(true), None, "b w"),
            // data: equality is typed; missing (m) and null (n) never match the negative operators
            ("data.plan", "equals", json!("pro"), None, "a"),
            ("data.plan", "equals", json!(3), None, "w"),
            ("data.plan", "equals", json!("3"), None, ""),
            ("data.plan", "notEquals", json!("pro"), None, "b w"),
            ("data.plan", "exists", none.clone(), None, "a b w"),
            ("data.plan", "notExists", none.clone(), None, "m n"),
            ("data.name", "contains", json!("LOVE"), None, "a"),
            ("data.name", "notContains", json!("love"), None, "b"),
            ("data.tags", "contains", json!("a"), None, "a w"), // w holds the string "a"
            ("data.tags", "notContains", json!("a"), None, "b"),
            ("data.n", "greaterThan", json!(3), None, "a"),
            ("data.n", "lessThan", json!(3), None, "b"),
            ("data.n", "greaterThanOrEqual", json!(5), None, "a"),
            ("data.n", "lessThanOrEqual", json!(2.5), None, "b"),
            ("data.n", "lessThan", json!(100), None, "a b"),
            // only numbers compare: arrays, strings, objects, null and missing values never do
            ("data.tags", "greaterThan", json!(0), None, ""),
            ("data.tags", "lessThan", json!(100), None, ""),
            ("data.nested", "greaterThan", json!(0), None, ""),
            ("data.nested.city", "greaterThan", json!(0), None, "w"),
            ("data.nested.city", "lessThanOrEqual", json!(1), None, "w"),
            ("data.nested.city", "lessThan", json!(0.5), None, ""),
            ("data.n", "equals", json!(5.0), None, "a"),
            // nested paths
            ("data.nested.city", "equals", json!("Paris"), None, "a"),
            ("data.nested.city", "notEquals", json!("Paris"), None, "b w"),
            ("data.nested.city", "exists", none.clone(), None, "a b w"),
            ("data.nested.city", "notExists", none.clone(), None, "m n"),
            ("data.nested.city.x", "notExists", none.clone(), None, "a b m n w"),
            // dates in data (ISO 8601 strings), with units
            ("data.d", "greaterThan", d(NOW - 10 * DAY), None, "a"),
            ("data.d", "lessThan", d(NOW - 10 * DAY), None, "b"),
            ("data.d", "within", json!(7), Some("days"), "a"),
            ("data.d", "within", json!(1), Some("days"), ""),
            ("data.d", "within", json!(49), Some("hours"), "a"),
            ("data.d", "olderThan", json!(30), Some("days"), "b"),
            ("data.d", "olderThan", json!(1), Some("minutes"), "a b"),
            // createdAt / updatedAt
            ("createdAt", "within", json!(2), Some("hours"), "a n"),
            ("createdAt", "within", json!(5), Some("minutes"), ""),
            ("createdAt", "within", json!(11), Some("minutes"), "n"),
            ("createdAt", "olderThan", json!(30), Some("days"), "m"),
            ("createdAt", "greaterThan", d(NOW - DAY), None, "a n"),
            ("createdAt", "lessThan", d(NOW - DAY), None, "b m w"),
            ("createdAt", "lessThanOrEqual", json!(NOW - 40 * DAY), None, "m"),
            ("updatedAt", "olderThan", json!(1), Some("days"), "m"),
            // events and email activity, with windows
            ("event.signup", "triggered", none.clone(), None, "a b"),
            ("event.signup", "notTriggered", none.clone(), None, "m n w"),
            ("event.signup", "triggeredWithin", json!(7), Some("days"), "a"),
            ("event.signup", "notTriggeredWithin", json!(7), Some("days"), "b m n w"),
            ("event.signup", "triggeredOlderThan", json!(30), Some("days"), "b"),
            ("event.signup", "triggeredOlderThan", json!(1), Some("days"), "a b"),
            ("event.purchase", "triggeredWithin", json!(2), Some("hours"), "a"),
            ("event.purchase", "triggeredWithin", json!(30), Some("minutes"), ""),
            ("event.never", "triggered", none.clone(), None, ""),
            ("email.open", "triggered", none.clone(), None, "n w"),
            ("email.open", "triggeredWithin", json!(10), Some("minutes"), "w"),
            ("email.open", "notTriggeredWithin", json!(10), Some("minutes"), "a b m n"),
            // segments: static membership and an inlined dynamic segment; a deleted one has no members
            ("segment.s1", "memberOfSegment", none.clone(), None, "a m"),
            ("segment.s1", "notMemberOfSegment", none.clone(), None, "b n w"),
            ("segment.d1", "memberOfSegment", none.clone(), None, "a"),
            ("segment.d1", "notMemberOfSegment", none.clone(), None, "b m n w"),
            ("segment.gone", "memberOfSegment", none.clone(), None, ""),
            ("segment.gone", "notMemberOfSegment", none.clone(), None, "a b m n w"),
        ];
        let mut failures = Vec::new();
        for (field, op, value, unit, want) in cases {
            let got = matches(&store, &f(field, op, value.clone(), unit)).await.join(" ");
            if got != want {
                failures.push(format!("{field} {op} {value} {unit:?}: got [{got}], want [{want}]"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[tokio::test]
    async fn logic_groups_and_nested_trees() {
        let store = seed().await;
        let cases = vec![
            (json!({"logic": "AND", "groups": []}), "a b m n w"),
            (json!({"logic": "OR", "groups": [{"filters": []}]}), "a b m n w"),
            (
                json!({"logic": "OR", "groups": [
                    {"filters": [{"field": "data.plan", "operator": "equals", "value": "pro"}]},
                    {"filters": [{"field": "subscribed", "operator": "equals", "value": false}]}]}),
                "a b w",
            ),
            (
                json!({"logic": "AND", "groups": [
                    {"filters": [{"field": "data.plan", "operator": "exists"}]},
                    {"filters": [{"field": "subscribed", "operator": "equals", "value": false}]}]}),
                "b w",
            ),
            (
                json!({"groups": [{
                    "filters": [{"field": "subscribed", "operator": "equals", "value": true}],
                    "conditions": {"logic": "OR", "groups": [
                        {"filters": [{"field": "data.plan", "operator": "exists"}]},
                        {"filters": [{"field": "event.signup", "operator": "triggered"}]}]}}]}),
                "a",
            ),
            (
                json!({"groups": [{"filters": [
                    {"field": "data.plan", "operator": "equals", "value": "pro"},
                    {"field": "data.n", "operator": "greaterThan", "value": 1},
                    {"field": "event.signup", "operator": "triggeredWithin", "value": 30, "unit": "days"}]}]}),
                "a",
            ),
        ];
        for (tree, want) in cases {
            assert_eq!(matches(&store, &tree).await.join(" "), want, "{tree}");
        }
    }

    #[test]
    fn a_set_drives_only_while_reading_it_by_id_beats_one_scan_of_the_table() {
        // 141,166 contacts with a recent purchase among 1,000,000: reading them by id (~3.5 s) loses to
        // one scan (~1 s); 20,000 of them (~0.5 s) win.
        assert!(scan_is_cheaper(141_166, 1_000_000));
        assert!(!scan_is_cheaper(20_000, 1_000_000));
        assert!(scan_is_cheaper(1, 0), "an empty table is scanned");
        assert!(!scan_is_cheaper(0, 0));
        assert!(scan_is_cheaper(usize::MAX, u64::MAX - 1), "no overflow");
    }

    #[tokio::test]
    async fn host_leaves_leave_no_constant_in_the_predicate() {
        let filter = crate::domain::conditions::filter_json;
        // One group per filter, joined by `logic`.
        let cond = |logic: &str, filters: Vec<&Value>| json!({"logic": logic, "groups": filters.iter().map(|f| json!({"filters": [f]})).collect::<Vec<_>>()});
        let tree = |logic: &str, filters: Vec<&Value>| parse(&cond(logic, filters), &|_| false).unwrap();
        let plan = filter("data.plan", "equals", json!("pro"), None);
        let bought = filter("event.purchase", "triggeredWithin", json!(30), Some("days"));
        let never = filter("event.purchase", "notTriggered", Value::Null, None);
        // ANDed with a set, the SQL leaf stands alone: `AND true` would make SurrealDB decode every row.
        let c = compile(&tree("AND", vec![&plan, &bought]), &HashMap::new(), NOW).unwrap();
        assert_eq!(c.predicate, "(data.`plan` = $c0)");
        assert_eq!(c.project_filter(), "project = $p AND (data.`plan` = $c0)");
        // A set alone (or ORed with anything) leaves no predicate: the project's contacts are candidates.
        for t in [tree("AND", vec![&bought]), tree("OR", vec![&plan, &bought])] {
            let c = compile(&t, &HashMap::new(), NOW).unwrap();
            assert_eq!((c.predicate.as_str(), c.project_filter().as_str()), ("true", "project = $p"));
        }
        // A negated set folds too (`!(false)` is `true`).
        let c = compile(&tree("AND", vec![&never]), &HashMap::new(), NOW).unwrap();
        assert_eq!(c.predicate, "true");
        // Folding keeps the superset: each condition still finds exactly its matches (a is pro and bought
        // an hour ago, w bought 10 days ago, b, m and n never bought).
        let store = seed().await;
        for (t, expected) in [
            (cond("AND", vec![&plan, &bought]), vec!["a"]),
            (cond("OR", vec![&plan, &bought]), vec!["a", "w"]),
            (cond("AND", vec![&plan, &never]), vec![]),
            (cond("OR", vec![&plan, &never]), vec!["a", "b", "m", "n"]),
            (cond("AND", vec![&never]), vec!["b", "m", "n"]),
        ] {
            assert_eq!(matches(&store, &t).await, expected, "{t}");
        }
    }

    #[tokio::test]
    async fn values_are_bound_not_formatted() {
        let t = parse(&f("data.x' OR true OR '", "equals", json!("'; DELETE contact; --"), None), &|_| false).unwrap();
        let c = compile(&t, &HashMap::new(), NOW).unwrap();
        assert!(!c.predicate.contains("DELETE") && !c.predicate.contains("OR true"), "{}", c.predicate);
        let store = seed().await;
        assert!(store.matching_ids::<StoreError>("p", &c, &NoPlugins).await.unwrap().is_empty());
        assert_eq!(
            store
                .count_matching::<StoreError>(
                    "p",
                    &compile(&parse(&json!({"groups": []}), &|_| false).unwrap(), &HashMap::new(), NOW).unwrap(),
                    &NoPlugins
                )
                .await
                .unwrap(),
            5
        );
    }

    #[tokio::test]
    async fn plain_keys_are_quoted_names_and_other_keys_stay_bound() {
        assert!(is_plain_key("plan") && is_plain_key("_x9") && is_plain_key(&"k".repeat(64)));
        for k in ["", "9lives", "a-b", "a b", "a`b", "é", "x' OR true", &"k".repeat(65)] {
            assert!(!is_plain_key(k), "{k:?}");
        }
        let t = parse(&f("data.nested.city", "equals", json!("Paris"), None), &|_| false).unwrap();
        let c = compile(&t, &HashMap::new(), NOW).unwrap();
        assert!(c.predicate.contains("data.`nested`.`city`"), "{}", c.predicate);
        assert!(c.vars.values().all(|v| v != "nested" && v != "city"), "{:?}", c.vars);
        let store = seed().await;
        let ids = store.matching_ids::<StoreError>("p", &c, &NoPlugins).await.unwrap();
        assert_eq!(ids, vec!["a".to_string()]);

        store.query("UPDATE contact:b SET data = $d;", json!({"d": {"first-name": "Bob", "a`b": 1}})).await.unwrap();
        for (key, value) in [("first-name", json!("Bob")), ("a`b", json!(1))] {
            let t = parse(&f(&format!("data.{key}"), "equals", value, None), &|_| false).unwrap();
            let c = compile(&t, &HashMap::new(), NOW).unwrap();
            assert!(!c.predicate.contains(key) && c.vars.values().any(|v| v == key), "{} {:?}", c.predicate, c.vars);
            let ids = store.matching_ids::<StoreError>("p", &c, &NoPlugins).await.unwrap();
            assert_eq!(ids, vec!["b".to_string()], "{key}");
        }
    }

    #[tokio::test]
    async fn newest_first_pages_cross_time_windows_and_sets_drive() {
        let store = seed().await;
        // v7 ids from a second to years before NOW, and ids that are not v7 at all ("a", "b", ... sort last).
        let v7 = |ago: i64| {
            let ms = NOW - ago;
            let ts = uuid::Timestamp::from_unix(uuid::NoContext, (ms / 1000) as u64, ((ms % 1000) * 1_000_000) as u32);
            uuid::Uuid::new_v7(ts).to_string()
        };
        let mut ids: Vec<String> = [MIN / 60, 3 * MIN, 2 * HOUR, 9 * DAY, 800 * DAY].iter().map(|a| v7(*a)).collect();
        ids.push("0-before-every-v7".into());
        store
            .query(
                "FOR $i IN $ids { CREATE type::record('contact', $i) CONTENT { project: 'p', email: $i + '@v7.io',
                    subscribed: true, data: { plan: 'pro' }, version: 1, created_at: 1, updated_at: 1 };
                    CREATE event CONTENT { project: 'p', contact: $i, name: 'signup', data: {}, source: 'api',
                    created_at: 1 }; };",
                json!({ "ids": ids }),
            )
            .await
            .unwrap();
        for (field, op) in [("data.plan", "equals"), ("event.signup", "triggered")] {
            let value = if op == "equals" { json!("pro") } else { Value::Null };
            let t = parse(&f(field, op, value, None), &|_| false).unwrap();
            let c = compile(&t, &refs(), NOW).unwrap();
            let all = store.matching_ids::<StoreError>("p", &c, &NoPlugins).await.unwrap();
            let mut sorted = all.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            assert_eq!(all, sorted, "{field}");
            let mut paged = Vec::new();
            for offset in 0..all.len() + 1 {
                let page = store.matching_page::<StoreError>("p", &c, offset, 1, &NoPlugins).await.unwrap();
                paged.extend(page.into_iter().map(|c| c.id));
            }
            assert_eq!(paged, all, "{field}");
            assert!(ids.iter().all(|i| all.contains(i)), "{field}: {all:?}");
        }
    }

    #[tokio::test]
    async fn newest_first_pages_read_the_table_backwards_in_growing_batches() {
        let store = seed().await;
        // 700 contacts ("c000".."c699" sort before the seeded ones); every third has data.k = 0 and every
        // other one an event `e`. The condition ORs a set, so every contact is a candidate: a page deep
        // into them crosses the scan's batches (NEWEST_FIRST, then twice as many).
        store
            .query(
                "FOR $i IN 0..700 {
                    LET $id = 'c' + string::slice('00' + <string> $i, -3);
                    CREATE type::record('contact', $id) CONTENT { project: 'p', email: $id + '@b.io', subscribed: true,
                        data: { k: $i % 3 }, version: 1, created_at: 1, updated_at: 1 };
                    IF $i % 2 = 0 { CREATE event CONTENT { project: 'p', contact: $id, name: 'e', data: {},
                        source: 'api', created_at: 1 }; };
                 };",
                json!({}),
            )
            .await
            .unwrap();
        let tree = json!({"logic": "OR", "groups": [
            {"filters": [crate::domain::conditions::filter_json("data.k", "equals", json!(0), None)]},
            {"filters": [crate::domain::conditions::filter_json("event.e", "triggered", Value::Null, None)]},
        ]});
        let t = parse(&tree, &|_| false).unwrap();
        let c = compile(&t, &refs(), NOW).unwrap();
        let all = store.matching_ids::<StoreError>("p", &c, &NoPlugins).await.unwrap();
        let expected: Vec<String> =
            (0..700).rev().filter(|i| i % 3 == 0 || i % 2 == 0).map(|i| format!("c{i:03}")).collect();
        assert_eq!(all.iter().filter(|id| id.starts_with('c')).cloned().collect::<Vec<_>>(), expected);
        for (offset, limit) in [(0, 5), (240, 20), (400, 60), (all.len() - 3, 10)] {
            for (probe, lookups) in [(PAGE_SET_PROBE, PAGE_LOOKUPS), (0, usize::MAX)] {
                let page =
                    store.page_ids::<StoreError>("p", &c, offset, limit, probe, lookups, &NoPlugins).await.unwrap();
                let want: Vec<String> = all.iter().skip(offset).take(limit).cloned().collect();
                assert_eq!(page, want, "offset {offset}, limit {limit}, probe {probe}");
            }
        }
    }

    /// The sorted strings a query returns.
    async fn sorted(store: &Store, sql: &str, vars: Value) -> Vec<String> {
        let mut ids: Vec<String> = store.query(sql, vars).await.unwrap().all(0).unwrap();
        ids.sort();
        ids
    }

    async fn tracked(store: &Store, project: &str, segment: &str) -> Vec<String> {
        let sql = "SELECT VALUE id[2] FROM segment_track:[$p, $s, NONE]..[$p, $s, {}]";
        sorted(store, sql, json!({ "p": project, "s": segment })).await
    }

    async fn events_named(store: &Store, project: &str, name: &str) -> Vec<String> {
        let sql = "SELECT VALUE contact FROM event WHERE project = $p AND name = $n";
        sorted(store, sql, json!({ "p": project, "n": name })).await
    }

    /// A batch written from a stale view of the membership (another compute wrote first) changes only
    /// what still differs: one entry or exit event per real change, never a second one.
    #[tokio::test]
    async fn tracked_memberships_change_once_however_often_a_batch_is_written() {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        let ev = MembershipEvents { entry: "t.entry".into(), exit: "t.exit".into(), data: json!({"k": 1}) };
        assert_eq!(store.write_membership_batch("p", "t1", &["a", "b"], true, &ev, NOW).await.unwrap(), 2);
        assert_eq!(store.write_membership_batch("p", "t1", &["a", "b", "c"], true, &ev, NOW).await.unwrap(), 1);
        assert_eq!(store.write_membership_batch("p", "t1", &["a", "x"], false, &ev, NOW).await.unwrap(), 1);
        assert_eq!(store.write_membership_batch("p", "t1", &["a"], false, &ev, NOW).await.unwrap(), 0);
        assert_eq!(events_named(&store, "p", "t.entry").await, ["a", "b", "c"]);
        assert_eq!(events_named(&store, "p", "t.exit").await, ["a"]);
        // Another segment and another project keep their own rows.
        store.write_membership_batch("p", "t2", &["b", "z"], true, &ev, NOW).await.unwrap();
        store.write_membership_batch("q", "t1", &["b", "y"], true, &ev, NOW).await.unwrap();

        let ids: Vec<String> = ["b", "d"].map(String::from).to_vec();
        let d = store.apply_membership("p", "t1", &ids, &ev, NOW).await.unwrap();
        assert_eq!(d, Diff { entered: 1, exited: 1, count: 2 });
        assert_eq!(tracked(&store, "p", "t1").await, ["b", "d"]);
        assert_eq!(tracked(&store, "p", "t2").await, ["b", "z"]);
        assert_eq!(tracked(&store, "q", "t1").await, ["b", "y"]);
        assert_eq!(events_named(&store, "p", "t.entry").await, ["a", "b", "b", "c", "d", "z"]);
        assert_eq!(events_named(&store, "p", "t.exit").await, ["a", "c"]);
        let again = store.apply_membership("p", "t1", &ids, &ev, NOW).await.unwrap();
        assert_eq!(again, Diff { entered: 0, exited: 0, count: 2 });

        // Two computes at once: each change once between them.
        let many: Vec<String> = (0..50).map(|i| format!("m{i:02}")).collect();
        let (x, y) = tokio::join!(
            store.apply_membership("p", "t3", &many, &ev, NOW),
            store.apply_membership("p", "t3", &many, &ev, NOW)
        );
        assert_eq!(x.unwrap().entered + y.unwrap().entered, 50);
        assert_eq!(events_named(&store, "p", "t.entry").await.iter().filter(|c| c.starts_with('m')).count(), 50);
    }

    /// Deleting a segment removes its stored memberships batch by batch, and only its own; deleting a
    /// contact removes it from every tracked segment of its project.
    #[tokio::test]
    async fn deletes_take_stored_memberships_with_them() {
        let store = Store::connect(&Config::for_tests()).await.unwrap();
        let ev = MembershipEvents { entry: "t.entry".into(), exit: "t.exit".into(), data: json!({}) };
        let w = |kind: &str| SegmentWrite {
            name: "T".into(),
            description: None,
            kind: kind.into(),
            condition: None,
            track: kind == "DYNAMIC",
            ref_fields: vec![],
            ref_events: vec![],
            ref_segments: vec![],
        };
        store.create_segment("p", "t1", &w("DYNAMIC"), NOW).await.unwrap();
        store.create_segment("p", "t2", &w("DYNAMIC"), NOW).await.unwrap();
        store.create_segment("p", "s1", &w("STATIC"), NOW).await.unwrap();
        store.create_segment("q", "t3", &w("DYNAMIC"), NOW).await.unwrap();
        let five = ["a", "b", "c", "d", "e"];
        store.write_membership_batch("p", "t1", &five, true, &ev, NOW).await.unwrap();
        store.write_membership_batch("p", "t2", &["a", "b"], true, &ev, NOW).await.unwrap();
        store.write_membership_batch("q", "t3", &["a"], true, &ev, NOW).await.unwrap();
        let members: Vec<String> = five.map(String::from).to_vec();
        store.add_members("p", "s1", &members, None, NOW).await.unwrap();

        assert!(!store.delete_segment_in_batches("q", "t1", 2).await.unwrap(), "not in project q");
        assert_eq!(tracked(&store, "p", "t1").await.len(), 5);
        assert!(store.delete_segment_in_batches("p", "t1", 2).await.unwrap());
        assert!(store.delete_segment_in_batches("p", "s1", 2).await.unwrap());
        assert!(tracked(&store, "p", "t1").await.is_empty());
        assert_eq!(store.count_members("p", "s1").await.unwrap(), 0);
        assert_eq!(tracked(&store, "p", "t2").await, ["a", "b"]);

        store
            .query(
                "CREATE contact:a CONTENT {project: 'p', email: 'a@x.io', subscribed: true, data: {}, version: 1,
                    created_at: 1, updated_at: 1}",
                json!({}),
            )
            .await
            .unwrap();
        assert!(store.delete_contact("p", "a").await.unwrap());
        assert_eq!(tracked(&store, "p", "t2").await, ["b"]);
        assert_eq!(tracked(&store, "q", "t3").await, ["a"], "another project's contact a is not this one");
    }

    /// The contact table's row count (what a count weighs a driving set against a scan with) comes from
    /// the `contact_count` index and follows creates and deletes.
    #[tokio::test]
    async fn the_contact_tables_row_count_follows_creates_and_deletes() {
        let store = seed().await;
        assert_eq!(store.contact_rows().await.unwrap(), 6);
        assert!(store.delete_contact("p", "a").await.unwrap());
        store
            .query(
                "CREATE contact:z CONTENT {project: 'q', email: 'z@x.io', subscribed: true, data: {}, version: 1,
                    created_at: 1, updated_at: 1};
                 CREATE contact:y CONTENT {project: 'q', email: 'y@x.io', subscribed: true, data: {}, version: 1,
                    created_at: 1, updated_at: 1};
                 UPDATE contact:b SET version = 2;",
                json!({}),
            )
            .await
            .unwrap();
        assert_eq!(store.contact_rows().await.unwrap(), 7);
        let info = store.query("INFO FOR TABLE contact", json!({})).await.unwrap().value(0).unwrap();
        assert!(info["indexes"].get("contact_count").is_some(), "{info}");
    }

    #[tokio::test]
    async fn a_reference_cycle_is_refused_at_translation() {
        let t = parse(&f("segment.x", "memberOfSegment", Value::Null, None), &|_| false).unwrap();
        let refs = HashMap::from([("x".to_string(), Ref::Dynamic(t.clone()))]);
        let e = compile(&t, &refs, NOW).unwrap_err();
        assert!(e.to_string().contains("circular"), "{e}");
    }
}
