//! The activity feed's reads (events of the activity names and campaign milestones, newest first) and
//! the analytics counters (`stat_hour`, `stat_campaign`, `stat_event_day`), written by the event dispatch
//! in the transaction that removes the counted events from the outbox. Every read filters by project.
//!
//! A newest-first read is one backward index range with its limit (`created_at <= $t ORDER BY
//! created_at DESC LIMIT n`): SurrealDB 3.3.5 stops such a scan at the limit, but scans the whole
//! prefix for a two-sided range or an `OR` (measured: 5 ms against 530 ms over 50,000 events), so the
//! cursor's tie within one millisecond is a second statement of its own (`= $t ... ORDER BY id DESC`,
//! which scans that millisecond's index entries backwards from the newest) and `from` is applied here.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Store, StoreError};
use crate::domain::activity::{METRICS, Tally};
use crate::vars;

/// Rows a filtered read looks at, per source and page, before it stops (the page then ends early and
/// its cursor continues from there).
pub const SCAN: usize = 500;

/// One activity row as read: a stored event or a campaign milestone.
#[derive(Debug, Clone, Deserialize)]
pub struct FeedRow {
    pub id: String,
    /// The event's name or the milestone's type.
    pub name: String,
    #[serde(default)]
    pub contact: Option<String>,
    #[serde(default)]
    pub campaign: Option<String>,
    #[serde(default)]
    pub data: Map<String, Value>,
    pub at: i64,
}

impl FeedRow {
    pub fn key(&self) -> (i64, &str) {
        (self.at, self.id.as_str())
    }
}

/// Where a read starts: below a cursor (the last row's time and id), or at a time (inclusive).
#[derive(Debug, Clone)]
pub enum Start {
    Below(i64, String),
    AtOrBefore(i64),
}

/// One newest-first source of a feed page.
#[derive(Debug, Clone)]
pub enum FeedSource {
    /// Events of one name.
    Name(String),
    /// Events of one contact (any name: the caller filters).
    Contact(String),
    /// Campaign milestones.
    Milestones,
}

/// What one source answered: its rows, and whether it read `limit` rows (more may follow).
pub struct SourceRows {
    pub rows: Vec<FeedRow>,
    pub full: bool,
}

const EVENT_ROW: &str = "record::id(id) AS id, name, contact, data, created_at AS at";
const MILESTONE_ROW: &str = "record::id(id) AS id, type AS name, campaign, data, at";

impl Store {
    /// Reads each source newest first from `start`, `limit` rows each at most, in one query.
    pub async fn feed(
        &self,
        project: &str,
        sources: &[FeedSource],
        start: &Start,
        limit: usize,
    ) -> Result<Vec<SourceRows>, StoreError> {
        let mut sql = String::new();
        let mut vars = Map::new();
        vars.insert("p".into(), project.into());
        vars.insert("limit".into(), limit.into());
        let (t, tie) = match start {
            Start::Below(t, id) => (*t, Some(id.clone())),
            Start::AtOrBefore(t) => (*t, None),
        };
        vars.insert("t".into(), t.into());
        vars.insert("tie".into(), tie.clone().into());
        for (i, s) in sources.iter().enumerate() {
            let (fields, table, time, filter) = match s {
                FeedSource::Name(n) => {
                    vars.insert(format!("s{i}"), n.clone().into());
                    (EVENT_ROW, "event", "created_at", format!("name = $s{i}"))
                }
                FeedSource::Contact(c) => {
                    vars.insert(format!("s{i}"), c.clone().into());
                    (EVENT_ROW, "event", "created_at", format!("contact = $s{i}"))
                }
                FeedSource::Milestones => (MILESTONE_ROW, "milestone", "at", String::new()),
            };
            let filter = if filter.is_empty() { String::new() } else { format!(" AND {filter}") };
            if tie.is_some() {
                sql.push_str(&format!(
                    "SELECT {fields} FROM {table} WHERE project = $p{filter} AND {time} = $t AND record::id(id) < $tie
                        ORDER BY id DESC LIMIT $limit;
                     SELECT {fields} FROM {table} WHERE project = $p{filter} AND {time} < $t
                        ORDER BY {time} DESC LIMIT $limit;\n"
                ));
            } else {
                sql.push_str(&format!(
                    "SELECT {fields} FROM {table} WHERE project = $p{filter} AND {time} <= $t
                        ORDER BY {time} DESC LIMIT $limit;\n"
                ));
            }
        }
        let mut res = self.query(&sql, Value::Object(vars)).await?;
        let per = if tie.is_some() { 2 } else { 1 };
        let mut out = Vec::with_capacity(sources.len());
        for i in 0..sources.len() {
            let mut rows: Vec<FeedRow> = Vec::new();
            for k in 0..per {
                let mut part: Vec<FeedRow> = res.all(i * per + k)?;
                rows.append(&mut part);
            }
            rows.sort_by(|a, b| (b.at, &b.id).cmp(&(a.at, &a.id)));
            rows.truncate(limit);
            let full = rows.len() >= limit;
            out.push(SourceRows { rows, full });
        }
        Ok(out)
    }

    /// Whether the project has any event of this name / any milestone of this type.
    pub async fn activity_types_present(
        &self,
        project: &str,
        names: &[&str],
        milestones: &[&str],
    ) -> Result<Vec<String>, StoreError> {
        let mut sql = String::new();
        for i in 0..names.len() {
            sql.push_str(&format!("SELECT VALUE name FROM event WHERE project = $p AND name = $n[{i}] LIMIT 1;\n"));
        }
        sql.push_str("SELECT VALUE type FROM milestone WHERE project = $p AND type IN $m;\n");
        let mut res = self.query(&sql, vars! { "p": project, "n": names, "m": milestones }).await?;
        let mut found = Vec::new();
        for i in 0..=names.len() {
            let mut v: Vec<String> = res.all(i)?;
            found.append(&mut v);
        }
        found.sort_unstable();
        found.dedup();
        Ok(found)
    }

    /// How many events of these names (and milestones of these types) are at or after `since`, counting
    /// at most `cap` of each.
    pub async fn activity_since(
        &self,
        project: &str,
        names: &[&str],
        milestones: &[&str],
        since: i64,
        cap: usize,
    ) -> Result<i64, StoreError> {
        let mut sql = String::new();
        for i in 0..names.len() {
            sql.push_str(&format!(
                "RETURN array::len((SELECT VALUE id FROM event WHERE project = $p AND name = $n[{i}] AND created_at >= $s
                    LIMIT $cap));\n"
            ));
        }
        sql.push_str(
            "RETURN array::len((SELECT VALUE id FROM milestone WHERE project = $p AND at >= $s AND type IN $m LIMIT $cap));",
        );
        let mut res =
            self.query(&sql, vars! { "p": project, "n": names, "m": milestones, "s": since, "cap": cap }).await?;
        let mut n = 0;
        for i in 0..=names.len() {
            n += res.value(i)?.as_i64().unwrap_or(0);
        }
        Ok(n)
    }

    /// Milestones of the project in `[from, to)` per type.
    pub async fn milestone_counts(&self, project: &str, from: i64, to: i64) -> Result<Vec<(String, i64)>, StoreError> {
        #[derive(Deserialize)]
        struct Row {
            name: String,
            n: i64,
        }
        let rows: Vec<Row> = self
            .query(
                "SELECT type AS name, count() AS n FROM milestone WHERE project = $p AND at >= $from AND at < $to GROUP BY name",
                vars! { "p": project, "from": from, "to": to },
            )
            .await?
            .all(0)?;
        Ok(rows.into_iter().map(|r| (r.name, r.n)).collect())
    }

    /// The counters of each hour in `[from, to)` that has any (hour start → metric → count).
    pub async fn hour_counts(
        &self,
        project: &str,
        from: i64,
        to: i64,
    ) -> Result<BTreeMap<i64, HashMap<String, i64>>, StoreError> {
        let rows: Vec<Map<String, Value>> = self
            .query(
                &format!(
                    "SELECT hour, {} FROM stat_hour WHERE project = $p AND hour >= $from AND hour < $to",
                    METRICS.join(", ")
                ),
                vars! { "p": project, "from": from, "to": to },
            )
            .await?
            .all(0)?;
        Ok(rows.into_iter().filter_map(|r| Some((r.get("hour")?.as_i64()?, counts(&r)))).collect())
    }

    /// The counters of each of the project's campaigns that has any (campaign id → metric → count).
    pub async fn campaign_stat_counts(
        &self,
        project: &str,
        campaign: Option<&str>,
    ) -> Result<HashMap<String, HashMap<String, i64>>, StoreError> {
        let filter = if campaign.is_some() { " AND campaign = $c" } else { "" };
        let rows: Vec<Map<String, Value>> = self
            .query(
                &format!("SELECT campaign, {} FROM stat_campaign WHERE project = $p{filter}", METRICS.join(", ")),
                vars! { "p": project, "c": campaign },
            )
            .await?
            .all(0)?;
        Ok(rows.into_iter().filter_map(|r| Some((r.get("campaign")?.as_str()?.to_string(), counts(&r)))).collect())
    }

    /// Events per name over the UTC days starting in `[from, to)`.
    pub async fn event_day_counts(&self, project: &str, from: i64, to: i64) -> Result<Vec<(String, i64)>, StoreError> {
        #[derive(Deserialize)]
        struct Row {
            name: String,
            n: i64,
        }
        let rows: Vec<Row> = self
            .query(
                "SELECT name, math::sum(n) AS n FROM stat_event_day WHERE project = $p AND day >= $from AND day < $to
                 GROUP BY name",
                vars! { "p": project, "from": from, "to": to },
            )
            .await?
            .all(0)?;
        Ok(rows.into_iter().map(|r| (r.name, r.n)).collect())
    }
}

fn counts(r: &Map<String, Value>) -> HashMap<String, i64> {
    METRICS.iter().map(|m| (m.to_string(), r.get(*m).and_then(Value::as_i64).unwrap_or(0))).collect()
}

/// The statements that add a dispatched batch's [`Tally`] to the counters, with their bindings
/// (`$hours`, `$camps`, `$names`); empty when there is nothing to count. Run inside the transaction
/// that removes the batch's events from the outbox.
pub(crate) fn tally_statements(t: &Tally) -> (String, Vec<(&'static str, Value)>) {
    if t.is_empty() {
        return (String::new(), vec![]);
    }
    let adds = METRICS.iter().map(|m| format!("{m} += $r.add.{m}")).collect::<Vec<_>>().join(", ");
    let add = |m: &BTreeMap<&'static str, i64>| -> Value {
        Value::Object(METRICS.iter().map(|k| (k.to_string(), m.get(k).copied().unwrap_or(0).into())).collect())
    };
    let hours: Vec<Value> =
        t.hours.iter().map(|((p, h), m)| vars! { "project": p, "hour": h, "add": add(m) }).collect();
    let camps: Vec<Value> =
        t.campaigns.iter().map(|((p, c), m)| vars! { "project": p, "campaign": c, "add": add(m) }).collect();
    let names: Vec<Value> =
        t.names.iter().map(|((p, d, n), c)| vars! { "project": p, "day": d, "name": n, "n": c }).collect();
    let sql = format!(
        "FOR $r IN $hours {{
            UPSERT type::record('stat_hour', [$r.project, $r.hour]) SET project = $r.project, hour = $r.hour, {adds}
                RETURN NONE;
         }};
         FOR $r IN $camps {{
            UPSERT type::record('stat_campaign', [$r.project, $r.campaign]) SET project = $r.project,
                campaign = $r.campaign, {adds} RETURN NONE;
         }};
         FOR $r IN $names {{
            UPSERT type::record('stat_event_day', [$r.project, $r.day, $r.name]) SET project = $r.project, day = $r.day,
                name = $r.name, n += $r.n RETURN NONE;
         }};\n"
    );
    (sql, vec![("hours", Value::Array(hours)), ("camps", Value::Array(camps)), ("names", Value::Array(names))])
}

/// The outbox's hand-outs, counted: the analytics counters move in the transaction that records how far
/// the subscribers got (so each event is counted once).
impl Store {
    /// Deletes the outbox rows whose events every subscriber has had, and adds those events to the
    /// analytics counters, in one transaction (so each event is counted once).
    pub async fn outbox_done(&self, ids: &[String], tally: &Tally) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let (count, bind) = tally_statements(tally);
        let sql = format!(
            "BEGIN TRANSACTION;
             DELETE array::map($ids, |$i| type::record('outbox', $i)) RETURN NONE;
             {count}COMMIT TRANSACTION;"
        );
        let mut v = vars! { "ids": ids };
        for (k, b) in bind {
            v[k] = b;
        }
        self.write(|| async { self.query(&sql, v.clone()).await }).await.map(|_| ())
    }

    /// Records how far the subscribers got through an outbox row: `left` are the ids still to hand
    /// out (none left deletes the row); `tally` counts the events handed out, in the same transaction.
    pub async fn outbox_progress(&self, id: &str, left: &[String], tally: &Tally) -> Result<(), StoreError> {
        let (count, bind) = tally_statements(tally);
        let change = if left.is_empty() {
            "DELETE type::record('outbox', $id) RETURN NONE;"
        } else {
            "UPDATE type::record('outbox', $id) SET events = $left RETURN NONE;"
        };
        let sql = format!("BEGIN TRANSACTION;\n{change}\n{count}COMMIT TRANSACTION;");
        let mut v = vars! { "id": id, "left": left };
        for (k, b) in bind {
            v[k] = b;
        }
        self.write(|| async { self.query(&sql, v.clone()).await }).await.map(|_| ())
    }
}

/// Creates a campaign milestone (bound as `$milestone`) in a transaction that changes the campaign.
pub(crate) const MILESTONE_INSERT: &str = "CREATE type::record('milestone', $milestone.id) CONTENT {
    project: $milestone.project, type: $milestone.type, campaign: $milestone.campaign, data: $milestone.data,
    at: $milestone.at } RETURN NONE;\n";

/// The `$milestone` binding of [`MILESTONE_INSERT`].
pub(crate) fn milestone(project: &str, kind: &str, campaign: &str, data: Map<String, Value>, at: i64) -> Value {
    vars! {
        "id": uuid::Uuid::now_v7().to_string(), "project": project, "type": kind, "campaign": campaign, "data": data,
        "at": at,
    }
}

/// A waiting workflow's figures for `/activity/upcoming`.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub workflow: String,
    pub name: String,
    pub waiting: i64,
    /// The outputs of the waiting step runs of its first [`WAITING_READ`] waiting executions.
    pub outputs: Vec<String>,
}

/// Waiting executions read per workflow for their resume times.
pub const WAITING_READ: usize = 1000;

impl Store {
    /// One field of records of `table` by id, for the project's records among `ids` (a point read each).
    pub async fn field_of(
        &self,
        table: &str,
        field: &str,
        project: &str,
        ids: &[String],
    ) -> Result<HashMap<String, String>, StoreError> {
        #[derive(Deserialize)]
        struct Row {
            id: String,
            v: Option<String>,
        }
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let rows: Vec<Row> = self
            .query(
                &format!(
                    "SELECT record::id(id) AS id, {field} AS v FROM array::map($ids, |$i| type::record($t, $i))
                     WHERE project = $p"
                ),
                vars! { "p": project, "ids": ids, "t": table },
            )
            .await?
            .all(0)?;
        Ok(rows.into_iter().filter_map(|r| Some((r.id, r.v?))).collect())
    }

    /// The project's workflows with waiting executions: how many wait, and the outputs of the waiting
    /// step runs of the first [`WAITING_READ`] (which say until when).
    pub async fn waiting_executions(&self, project: &str) -> Result<Vec<Waiting>, StoreError> {
        #[derive(Deserialize)]
        struct Wf {
            id: String,
            name: String,
        }
        let flows: Vec<Wf> = self
            .query(
                "SELECT record::id(id) AS id, name FROM workflow WHERE project = $p ORDER BY created_at DESC LIMIT 1000",
                vars! { "p": project },
            )
            .await?
            .all(0)?;
        #[derive(Deserialize)]
        struct Open {
            run: Option<String>,
            #[serde(default)]
            runs: Vec<super::workflow_runs::StepRunRow>,
        }
        let mut out = Vec::new();
        for chunk in flows.chunks(50) {
            let mut sql = String::new();
            for i in 0..chunk.len() {
                sql.push_str(&format!(
                    "RETURN array::len((SELECT VALUE id FROM workflow_execution WHERE workflow = $w[{i}] AND status = 'WAITING'));
                     SELECT run, runs FROM workflow_execution WHERE workflow = $w[{i}] AND status = 'WAITING' AND project = $p
                        LIMIT $read;\n"
                ));
            }
            let ids: Vec<&str> = chunk.iter().map(|w| w.id.as_str()).collect();
            let mut res = self.query(&sql, vars! { "p": project, "w": ids, "read": WAITING_READ }).await?;
            for (i, w) in chunk.iter().enumerate() {
                let waiting = res.value(2 * i)?.as_i64().unwrap_or(0);
                // The output of each one's open run (the run it waits in).
                let outputs: Vec<Option<String>> = res
                    .all::<Open>(2 * i + 1)?
                    .into_iter()
                    .map(|o| o.runs.into_iter().find(|r| Some(&r.id) == o.run.as_ref()).and_then(|r| r.output))
                    .collect();
                if waiting > 0 {
                    out.push(Waiting {
                        workflow: w.id.clone(),
                        name: w.name.clone(),
                        waiting,
                        outputs: outputs.into_iter().flatten().collect(),
                    });
                }
            }
        }
        Ok(out)
    }
}
