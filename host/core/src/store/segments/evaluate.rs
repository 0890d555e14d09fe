//! Running a translated condition against the contact table: the evaluation plan, the sets its leaves
//! read, and counts, full walks and newest-first pages (see the module above for the strategy).

use std::collections::{HashMap, HashSet};

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::super::{Store, StoreError, key_of};
use super::translate::*;
use crate::domain::conditions::Node;
use crate::vars;

/// A contact row as the segment queries return it.
#[derive(Debug, Clone, Deserialize)]
pub struct Candidate {
    pub id: String,
    /// Results of the SQL leaves, in leaf order (None for plugin leaves).
    #[serde(default)]
    pub l: Vec<Option<bool>>,
    /// Values of the plugin leaves' fields, in leaf order (null for SQL leaves).
    #[serde(default)]
    pub v: Vec<Value>,
}

/// Sets larger than this never drive a query, a page's included (reading them by id would cost more
/// than the scans of far larger tables); below it, counts and full walks also weigh the table's size
/// (`scan_is_cheaper`).
pub const DRIVE_MAX: usize = 250_000;
/// What reading one contact by id costs in scanned rows. Measured on 1,000,000 contacts (SurrealDB 3.3.5,
/// release build): 25-28 µs a read against about 1 µs a scanned row, 2.5 µs when the predicate makes
/// SurrealDB decode every row; 20 leans towards reading by id.
const DRIVE_COST_IN_ROWS: u64 = 20;

/// Whether scanning the contact table (`WITH NOINDEX` reads every project's rows) is cheaper than reading
/// a set's contacts by id.
pub(super) fn scan_is_cheaper(set_len: usize, table_rows: u64) -> bool {
    (set_len as u64).saturating_mul(DRIVE_COST_IN_ROWS) > table_rows
}

/// Membership changes per write transaction.
pub const WRITE_BATCH: usize = 1000;

/// Stored memberships deleted per transaction when a segment is deleted.
pub const DELETE_BATCH: usize = 5000;

/// Candidates per plugin call.
pub const PLUGIN_BATCH: usize = 1000;
/// Contacts read by id per query when a set drives (the first queries read fewer, for pages).
const DRIVE_CHUNK: usize = 16_000;
const DRIVE_FIRST: usize = 1_000;
/// Candidates of the first newest-first query of a scan; each next query asks for twice as many, up to
/// NEWEST_MAX.
const NEWEST_FIRST: usize = 250;
const NEWEST_MAX: usize = 4_000;
/// A page lists a set only when it holds at most this many rows; a larger set is asked about the page's
/// candidates instead, which finds a page long before the whole set would have been listed.
pub(super) const PAGE_SET_PROBE: usize = 2_000;
/// Candidates a page asks its unlisted sets about before it lists them after all (few candidates match:
/// listing the sets and driving or scanning is then cheaper than asking about every candidate).
pub(super) const PAGE_LOOKUPS: usize = 4_000;

/// A compiled condition's evaluation plan, and the sets its leaves test.
#[derive(Debug, Default)]
pub struct Prepared {
    /// Top-level conjuncts holding host leaves; the others are exact in the `WHERE` clause.
    pub host: Vec<Node>,
    /// Database leaves the host needs the result of (they sit in host conjuncts).
    pub row_leaves: Vec<usize>,
    /// The set leaf whose contacts are read by id instead of scanning the project.
    pub driver: Option<usize>,
    /// The contact ids of each listed set leaf.
    pub sets: HashMap<usize, HashSet<String>>,
    /// Set leaves too large to list for a page: each batch of candidates is looked up in them instead.
    pub partial: Vec<usize>,
}

/// Evaluates the plugin leaves of a batch of candidates: per plugin leaf, one result per candidate.
pub trait PluginEval<E> {
    fn eval<'a>(
        &'a self,
        c: &'a Compiled,
        batch: &'a [Candidate],
    ) -> BoxFuture<'a, Result<HashMap<usize, Vec<bool>>, E>>;
}

/// For conditions without plugin operators.
pub struct NoPlugins;

impl<E: Send> PluginEval<E> for NoPlugins {
    fn eval<'a>(&'a self, _: &'a Compiled, _: &'a [Candidate]) -> BoxFuture<'a, Result<HashMap<usize, Vec<bool>>, E>> {
        Box::pin(async { Ok(HashMap::new()) })
    }
}

/// The top-level conjuncts of a node.
fn conjuncts(n: &Node, out: &mut Vec<Node>) {
    match n {
        Node::And(v) => v.iter().for_each(|x| conjuncts(x, out)),
        Node::Const(true) => {}
        other => out.push(other.clone()),
    }
}

fn leaves_of(n: &Node, out: &mut Vec<usize>) {
    match n {
        Node::And(v) | Node::Or(v) => v.iter().for_each(|x| leaves_of(x, out)),
        Node::Not(x) => leaves_of(x, out),
        Node::Leaf(i) => out.push(*i),
        Node::Const(_) => {}
    }
}

enum Source {
    /// The driving set's ids, newest first.
    Ids { ids: Vec<String>, pos: usize, chunk: usize },
    /// The project's contacts newest first: a scan of the table backwards (`ORDER BY id DESC`, which
    /// SurrealDB reads in key order without sorting), `n` candidates at a time after the `start` already
    /// returned; `last` is the oldest id returned so far (rows written since are skipped).
    Newest { start: usize, n: usize, last: Option<String>, done: bool },
    /// One scan of the project.
    All { done: bool },
}

/// Candidate batches of a condition, each newest first.
struct Cursor<'a> {
    c: &'a Compiled,
    source: Source,
    /// The projection: `VALUE record::id(id)` or the id with the leaf results and plugin values.
    cols: Option<String>,
}

impl<'a> Cursor<'a> {
    /// The driver set's contacts are read by id (when there is one).
    fn new(c: &'a Compiled, p: &Prepared, newest: bool) -> Cursor<'a> {
        let source = match p.driver {
            Some(i) => {
                let mut ids: Vec<String> = p.sets[&i].iter().cloned().collect();
                ids.sort_unstable_by(|a, b| b.cmp(a));
                Source::Ids { ids, pos: 0, chunk: DRIVE_FIRST }
            }
            _ if newest => Source::Newest { start: 0, n: NEWEST_FIRST, last: None, done: false },
            _ => Source::All { done: false },
        };
        let cols = (!p.row_leaves.is_empty() || c.has_plugins()).then(|| {
            let mut l = Vec::with_capacity(c.leaves.len());
            let mut v = Vec::with_capacity(c.leaves.len());
            for (i, leaf) in c.leaves.iter().enumerate() {
                match leaf {
                    Leaf::Sql(s) if p.row_leaves.contains(&i) => {
                        l.push(s.as_str());
                        v.push("NULL");
                    }
                    Leaf::Plugin { expr, .. } => {
                        l.push("NULL");
                        v.push(expr.as_str());
                    }
                    _ => {
                        l.push("NULL");
                        v.push("NULL");
                    }
                }
            }
            format!("record::id(id) AS id, [{}] AS l, [{}] AS v", l.join(", "), v.join(", "))
        });
        Cursor { c, source, cols }
    }

    /// Candidates read by id: the given contacts only.
    fn over(c: &'a Compiled, p: &Prepared, ids: &[String]) -> Cursor<'a> {
        let mut cursor = Cursor::new(c, p, false);
        cursor.source = Source::Ids { ids: ids.to_vec(), pos: 0, chunk: DRIVE_CHUNK };
        cursor
    }

    async fn next(&mut self, store: &Store, project: &str) -> Result<Option<Vec<Candidate>>, StoreError> {
        let cols = self.cols.as_deref().unwrap_or("VALUE record::id(id)");
        let mut vars = with_project(&self.c.vars, project);
        let sql = match &mut self.source {
            Source::Ids { ids, pos, chunk } => {
                if *pos >= ids.len() {
                    return Ok(None);
                }
                let end = (*pos + *chunk).min(ids.len());
                vars["ids"] = json!(ids[*pos..end]);
                *pos = end;
                *chunk = (*chunk * 2).min(DRIVE_CHUNK);
                format!(
                    "LET $r = array::map($ids, |$i| type::record('contact', $i));
                     SELECT {cols} FROM $r WHERE {};",
                    self.c.project_filter()
                )
            }
            Source::Newest { start, n, done, .. } => {
                if *done {
                    return Ok(None);
                }
                vars["start"] = json!(*start);
                vars["n"] = json!(*n);
                format!(
                    "RETURN NONE; SELECT {cols} FROM contact WITH NOINDEX WHERE {} ORDER BY id DESC LIMIT $n START $start;",
                    self.c.project_filter()
                )
            }
            Source::All { done } => {
                if *done {
                    return Ok(None);
                }
                *done = true;
                format!("RETURN NONE; SELECT {cols} FROM contact WITH NOINDEX WHERE {};", self.c.project_filter())
            }
        };
        let mut rows = store.query(&sql, vars).await?;
        let mut batch: Vec<Candidate> = if self.cols.is_some() {
            rows.all(1)?
        } else {
            let v = rows.value(1)?;
            serde_json::from_value::<Vec<Value>>(v)
                .map_err(|e| StoreError::Decode(e.to_string()))?
                .iter()
                .map(|v| Candidate { id: key_of(v), l: Vec::new(), v: Vec::new() })
                .collect()
        };
        batch.sort_unstable_by(|a, b| b.id.cmp(&a.id));
        if let Source::Newest { start, n, last, done } = &mut self.source {
            *done = batch.len() < *n;
            *start += batch.len();
            *n = (*n * 2).min(NEWEST_MAX);
            // Contacts written since the previous query sit before it in the scan and shift it: skip what
            // was returned already.
            if let Some(l) = last.as_deref() {
                batch.retain(|c| c.id.as_str() < l);
            }
            if let Some(c) = batch.last() {
                *last = Some(c.id.clone());
            }
        }
        Ok(Some(batch))
    }
}

impl Store {
    // ---- matching ----

    /// A condition's evaluation plan before any set is listed: the top-level conjuncts the host
    /// evaluates and the database leaves they read.
    fn plan(c: &Compiled) -> Prepared {
        let mut top = Vec::new();
        conjuncts(&c.node, &mut top);
        let host: Vec<Node> = top
            .into_iter()
            .filter(|n| {
                let mut ls = Vec::new();
                leaves_of(n, &mut ls);
                !ls.iter().all(|&i| c.is_db_leaf(i))
            })
            .collect();
        let mut row_leaves = Vec::new();
        for n in &host {
            leaves_of(n, &mut row_leaves);
        }
        row_leaves.retain(|&i| c.is_db_leaf(i));
        row_leaves.sort_unstable();
        row_leaves.dedup();
        Prepared { host, row_leaves, ..Default::default() }
    }

    /// Every set leaf of a condition.
    fn set_leaves(c: &Compiled) -> Vec<usize> {
        (0..c.leaves.len()).filter(|&i| matches!(c.leaves[i], Leaf::Set(_))).collect()
    }

    /// The set leaves ANDed at the top of a plan (those that may drive it).
    fn top_sets(c: &Compiled, p: &Prepared) -> Vec<usize> {
        p.host
            .iter()
            .filter_map(|n| match n {
                Node::Leaf(i) if matches!(c.leaves[*i], Leaf::Set(_)) => Some(*i),
                _ => None,
            })
            .collect()
    }

    /// Lists set leaves `which` (one indexed query each, all at once); with `probe`, a set of more than
    /// `probe` rows comes back as None.
    async fn list_sets(
        &self,
        project: &str,
        c: &Compiled,
        which: &[usize],
        probe: Option<usize>,
    ) -> Result<Vec<(usize, Option<HashSet<String>>)>, StoreError> {
        futures_util::future::try_join_all(which.iter().filter_map(|&i| match &c.leaves[i] {
            Leaf::Set(q) => Some(async move { Ok::<_, StoreError>((i, self.list_set(project, q, probe).await?)) }),
            _ => None,
        }))
        .await
    }

    /// The contact ids of a set, or None when `probe` is given and the set has more rows than that.
    async fn list_set(
        &self,
        project: &str,
        q: &SetQuery,
        probe: Option<usize>,
    ) -> Result<Option<HashSet<String>>, StoreError> {
        let (sql, vars) = match q {
            SetQuery::Event { name, since: None } => {
                ("SELECT VALUE contact FROM event WHERE project = $p AND name = $n", vars! { "p": project, "n": name })
            }
            SetQuery::Event { name, since: Some(t) } => (
                "SELECT VALUE contact FROM event WHERE project = $p AND name = $n AND created_at >= $t",
                vars! { "p": project, "n": name, "t": t },
            ),
            SetQuery::Members(s) => (
                "SELECT VALUE contact FROM segment_member WHERE project = $p AND segment = $s",
                vars! { "p": project, "s": s },
            ),
        };
        let ids: Vec<String> = match probe {
            Some(n) => self.query(&format!("{sql} LIMIT {}", n.saturating_add(1)), vars).await?.all(0)?,
            None => self.query(sql, vars).await?.all(0)?,
        };
        if probe.is_some_and(|n| ids.len() > n) {
            return Ok(None);
        }
        Ok(Some(ids.into_iter().collect()))
    }

    /// Which of `ids` (contacts of the project) are in a set: a lookup by contact per id, in one query.
    async fn look_up_set(&self, project: &str, q: &SetQuery, ids: &[&str]) -> Result<HashSet<String>, StoreError> {
        let found: Vec<String> = match q {
            SetQuery::Event { name, since } => {
                // The index is named: inside a closure `contact = $c` is not known when the query is
                // planned, and SurrealDB 3.3.5 then picks `event_project_name`, reading every event of
                // that name once per contact.
                self.query(
                    "RETURN array::filter($ids, |$c| array::len(
                        (SELECT VALUE id FROM event WITH INDEX event_project_contact
                         WHERE project = $p AND contact = $c AND created_at >= $t AND name = $n LIMIT 1)
                     ) > 0);",
                    vars! { "p": project, "n": name, "t": since.unwrap_or(i64::MIN), "ids": ids },
                )
                .await?
                .all(0)?
            }
            SetQuery::Members(s) => self
                .query(
                    "LET $r = array::map($ids, |$c| type::record('segment_member', [$s, $c]));
                     SELECT VALUE contact FROM $r WHERE project = $p;",
                    vars! { "p": project, "s": s, "ids": ids },
                )
                .await?
                .all(1)?,
        };
        Ok(found.into_iter().collect())
    }

    /// Plans a page: lists the sets of up to `probe` rows (all of them without `probe`) and leaves the
    /// others to be asked about each batch of candidates (`Prepared::partial`); the smallest listed set
    /// ANDed at the top drives.
    pub async fn prepare(&self, project: &str, c: &Compiled, probe: Option<usize>) -> Result<Prepared, StoreError> {
        let mut p = Self::plan(c);
        let all = Self::set_leaves(c);
        for (i, ids) in self.list_sets(project, c, &all, probe).await? {
            match ids {
                Some(ids) => {
                    p.sets.insert(i, ids);
                }
                None => p.partial.push(i),
            }
        }
        p.driver = Self::top_sets(c, &p)
            .into_iter()
            .filter(|i| p.sets.contains_key(i))
            .min_by_key(|i| p.sets[i].len())
            .filter(|i| p.sets[i].len() <= DRIVE_MAX);
        Ok(p)
    }

    /// Visits every contact matching a compiled condition, in no particular order. The sets are listed
    /// while the contact table is scanned (two queries at once); when a set ANDed at the top turns out
    /// small enough that reading its contacts by id is cheaper than the scan, the scan is dropped
    /// (embedded, that stops it) and the set drives.
    async fn walk_all<E: From<StoreError>>(
        &self,
        project: &str,
        c: &Compiled,
        plugins: &(dyn PluginEval<E> + Sync),
        visit: &mut (dyn FnMut(&str) -> bool + Send),
    ) -> Result<(), E> {
        use futures_util::future::{Either, select, try_join};
        let mut p = Self::plan(c);
        let tops = Self::top_sets(c, &p);
        let all = Self::set_leaves(c);
        let listing = try_join(self.list_sets(project, c, &all, None), async {
            if tops.is_empty() { Ok(0) } else { self.contact_rows_cached().await }
        });
        let mut cursor = Cursor::new(c, &p, false);
        let scan = cursor.next(self, project);
        let batch = match select(Box::pin(listing), Box::pin(scan)).await {
            Either::Left((listed, scan)) => {
                let (listed, rows) = listed?;
                p.sets.extend(listed.into_iter().map(|(i, ids)| (i, ids.unwrap_or_default())));
                p.driver = tops
                    .iter()
                    .copied()
                    .filter(|i| p.sets[i].len() <= DRIVE_MAX && !scan_is_cheaper(p.sets[i].len(), rows))
                    .min_by_key(|i| p.sets[i].len());
                if p.driver.is_some() {
                    drop(scan);
                    self.walk(project, c, &p, plugins, usize::MAX, visit).await?;
                    return Ok(());
                }
                scan.await?
            }
            Either::Right((batch, listing)) => {
                let batch = batch?;
                let (listed, _) = listing.await?;
                p.sets.extend(listed.into_iter().map(|(i, ids)| (i, ids.unwrap_or_default())));
                batch
            }
        };
        if let Some(batch) = batch {
            self.visit_batch(project, c, &p, &batch, plugins, visit).await?;
        }
        Ok(())
    }

    /// Visits the contacts matching a compiled condition newest first (`visit` returns false to stop):
    /// the driver's contacts when there is one, else the contact table backwards. Unlisted sets
    /// (`Prepared::partial`) are asked about each batch of candidates, for at most `lookups` candidates:
    /// false when the walk stopped there.
    async fn walk<E: From<StoreError>>(
        &self,
        project: &str,
        c: &Compiled,
        p: &Prepared,
        plugins: &(dyn PluginEval<E> + Sync),
        lookups: usize,
        visit: &mut (dyn FnMut(&str) -> bool + Send),
    ) -> Result<bool, E> {
        let mut looked_up = 0usize;
        let mut cursor = Cursor::new(c, p, true);
        while let Some(batch) = cursor.next(self, project).await? {
            if !p.partial.is_empty() {
                looked_up += batch.len();
                if looked_up > lookups {
                    return Ok(false);
                }
            }
            if !self.visit_batch(project, c, p, &batch, plugins, visit).await? {
                break;
            }
        }
        Ok(true)
    }

    /// Evaluates the host conjuncts over a batch of candidates and visits the matches, in order: false
    /// when `visit` asked to stop. Plugin leaves and unlisted sets are evaluated a chunk at a time.
    async fn visit_batch<E: From<StoreError>>(
        &self,
        project: &str,
        c: &Compiled,
        p: &Prepared,
        batch: &[Candidate],
        plugins: &(dyn PluginEval<E> + Sync),
        visit: &mut (dyn FnMut(&str) -> bool + Send),
    ) -> Result<bool, E> {
        for chunk in batch.chunks(PLUGIN_BATCH) {
            let mut found = HashMap::new();
            if !p.partial.is_empty() {
                let ids: Vec<&str> = chunk.iter().map(|cand| cand.id.as_str()).collect();
                for &i in &p.partial {
                    if let Leaf::Set(q) = &c.leaves[i] {
                        found.insert(i, self.look_up_set(project, q, &ids).await?);
                    }
                }
            }
            let results = if c.has_plugins() { plugins.eval(c, chunk).await? } else { HashMap::new() };
            for (row, cand) in chunk.iter().enumerate() {
                let ok = p.host.iter().all(|n| {
                    n.eval(&|leaf| match &c.leaves[leaf] {
                        Leaf::Sql(_) => cand.l.get(leaf).copied().flatten().unwrap_or(false),
                        Leaf::Set(_) => {
                            p.sets.get(&leaf).or_else(|| found.get(&leaf)).is_some_and(|s| s.contains(&cand.id))
                        }
                        Leaf::Plugin { .. } => results.get(&leaf).and_then(|r| r.get(row)).copied().unwrap_or(false),
                    })
                });
                if ok && !visit(&cand.id) {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Rows of the contact table, every project's: a sum of the `contact_count` index's deltas
    /// (migration 0016), not a walk over the table's keys.
    pub(in crate::store) async fn contact_rows(&self) -> Result<u64, StoreError> {
        let v = self.query("SELECT count() AS n FROM contact GROUP ALL", json!({})).await?.value(0)?;
        Ok(v.get(0).and_then(|r| r.get("n")).and_then(Value::as_u64).unwrap_or(0))
    }

    /// How many contacts match a compiled condition.
    pub async fn count_matching<E: From<StoreError>>(
        &self,
        project: &str,
        c: &Compiled,
        plugins: &(dyn PluginEval<E> + Sync),
    ) -> Result<i64, E> {
        if Self::plan(c).host.is_empty() {
            let sql = format!("SELECT count() AS n FROM contact WITH NOINDEX WHERE {} GROUP ALL", c.project_filter());
            let v = self.query(&sql, with_project(&c.vars, project)).await?.value(0)?;
            return Ok(v.get(0).and_then(|r| r.get("n")).and_then(Value::as_i64).unwrap_or(0));
        }
        let mut n = 0i64;
        self.walk_all(project, c, plugins, &mut |_| {
            n += 1;
            true
        })
        .await?;
        Ok(n)
    }

    /// Which of `ids` (contacts of the project) match a compiled condition: their rows are read by id and
    /// every set they need is asked about them alone (a workflow's CONDITION step).
    pub async fn matching_among<E: From<StoreError>>(
        &self,
        project: &str,
        c: &Compiled,
        ids: &[String],
        plugins: &(dyn PluginEval<E> + Sync),
    ) -> Result<Vec<String>, E> {
        let mut p = Self::plan(c);
        p.partial = Self::set_leaves(c);
        let mut cursor = Cursor::over(c, &p, ids);
        let mut out = Vec::new();
        while let Some(batch) = cursor.next(self, project).await? {
            self.visit_batch(project, c, &p, &batch, plugins, &mut |id| {
                out.push(id.to_string());
                true
            })
            .await?;
        }
        Ok(out)
    }

    /// Ids of the contacts matching a compiled condition, newest first (one unordered walk, then a sort:
    /// cheaper than walking in id order).
    pub async fn matching_ids<E: From<StoreError>>(
        &self,
        project: &str,
        c: &Compiled,
        plugins: &(dyn PluginEval<E> + Sync),
    ) -> Result<Vec<String>, E> {
        let mut ids = Vec::new();
        self.walk_all(project, c, plugins, &mut |id| {
            ids.push(id.to_string());
            true
        })
        .await?;
        ids.sort_unstable_by(|a, b| b.cmp(a));
        Ok(ids)
    }

    /// One page of the contacts matching a compiled condition, newest first.
    pub async fn matching_page<E: From<StoreError>>(
        &self,
        project: &str,
        c: &Compiled,
        offset: usize,
        limit: usize,
        plugins: &(dyn PluginEval<E> + Sync),
    ) -> Result<Vec<crate::store::contacts::Contact>, E> {
        let ids = self.page_ids(project, c, offset, limit, PAGE_SET_PROBE, PAGE_LOOKUPS, plugins).await?;
        Ok(self.contacts_by_ids(project, &ids).await?)
    }

    /// The ids of one page, newest first. Sets of up to `probe` rows are listed; larger ones are asked
    /// about the candidates of the page, for up to `lookups` candidates, after which the page lists
    /// every set after all and walks again.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn page_ids<E: From<StoreError>>(
        &self,
        project: &str,
        c: &Compiled,
        offset: usize,
        limit: usize,
        probe: usize,
        lookups: usize,
        plugins: &(dyn PluginEval<E> + Sync),
    ) -> Result<Vec<String>, E> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut ids = Vec::new();
        for (probe, lookups) in [(Some(probe), lookups), (None, usize::MAX)] {
            let p = self.prepare(project, c, probe).await?;
            ids.clear();
            let mut seen = 0usize;
            let finished = self
                .walk(project, c, &p, plugins, lookups, &mut |id| {
                    if seen >= offset {
                        ids.push(id.to_string());
                    }
                    seen += 1;
                    ids.len() < limit
                })
                .await?;
            if finished {
                break;
            }
        }
        Ok(ids)
    }

    /// One page of the matching contacts (newest first) and the total, counted at the same time.
    pub async fn matching_page_and_total<E: From<StoreError>>(
        &self,
        project: &str,
        c: &Compiled,
        offset: usize,
        limit: usize,
        plugins: &(dyn PluginEval<E> + Sync),
    ) -> Result<(Vec<crate::store::contacts::Contact>, i64), E> {
        let (rows, total) = futures_util::future::try_join(
            self.matching_page(project, c, offset, limit, plugins),
            self.count_matching(project, c, plugins),
        )
        .await?;
        Ok((rows, total))
    }

    /// Contacts by id, in the given order (missing ones left out). The contacts are read by record id
    /// (`FROM` an array of records): a sub-query per id with `WHERE id = type::record('contact', $i)`
    /// inside a closure is not planned as a point lookup and scans the table once per id.
    pub async fn contacts_by_ids(
        &self,
        project: &str,
        ids: &[String],
    ) -> Result<Vec<crate::store::contacts::Contact>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<crate::store::contacts::Contact> = self
            .query(
                &format!(
                    "LET $r = array::map($ids, |$i| type::record('contact', $i));
                     SELECT {} FROM $r WHERE project = $p;",
                    crate::store::contacts::CONTACT_FIELDS
                ),
                vars! { "p": project, "ids": ids },
            )
            .await?
            .all(1)?;
        let mut by_id: HashMap<String, crate::store::contacts::Contact> =
            rows.into_iter().map(|c| (c.id.clone(), c)).collect();
        Ok(ids.iter().filter_map(|id| by_id.remove(id)).collect())
    }
}

pub(super) fn with_project(vars: &Map<String, Value>, project: &str) -> Value {
    let mut m = vars.clone();
    m.insert("p".into(), Value::String(project.to_string()));
    Value::Object(m)
}
