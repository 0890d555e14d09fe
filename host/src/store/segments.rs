//! Segments, their stored memberships, and the translation of condition trees (`domain::conditions`)
//! into SurrealQL.
//!
//! Translation: every built-in filter becomes a fragment of a `WHERE` clause over `contact`, with every
//! value and every `data` key bound as a parameter (only fixed fragments are concatenated). Event and
//! static-membership filters first collect the matching contact ids into an object used as a set
//! (`LET $sN = ...` over the `event_project_name` / `segment_member_segment` indexes), so a contact row
//! is checked with one lookup instead of a sub-query per row. A reference to a dynamic segment inlines
//! that segment's tree. Operators a plugin provides cannot run in the database: the `WHERE` clause then
//! treats them as "maybe" (true where the filter is not negated, false under a negation), which yields a
//! superset of the matches, and the host evaluates the exact tree over those candidates in batches.
//!
//! Every query filters by project.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Store, StoreError, key_of};
use crate::domain::conditions::{Field, Filter, Logic, Node, Op, Operand, Tree};
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

/// What a referenced segment contributes to a tree.
#[derive(Debug, Clone)]
pub enum Ref {
    /// Static members: the stored membership.
    Static,
    /// A dynamic segment: its tree, inlined.
    Dynamic(Tree),
}

/// One leaf of a compiled condition.
#[derive(Debug, Clone)]
pub enum Leaf {
    /// Runs in the database: a boolean SurrealQL expression over a contact row.
    Sql(String),
    /// Runs in the host: a plugin operator over the value of `expr` (a SurrealQL expression).
    Plugin { operator: String, operand: Value, expr: String, timestamp: bool },
}

/// A condition translated to SurrealQL.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// `LET` statements that precede the query (sets of contact ids).
    pub lets: String,
    /// The predicate over a contact row; with plugin leaves, a superset of the matches.
    pub predicate: String,
    pub vars: Map<String, Value>,
    pub leaves: Vec<Leaf>,
    pub node: Node,
}

impl Compiled {
    pub fn has_plugins(&self) -> bool {
        self.leaves.iter().any(|l| matches!(l, Leaf::Plugin { .. }))
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CompileError(pub String);

struct Builder<'a> {
    refs: &'a HashMap<String, Ref>,
    now: i64,
    vars: Map<String, Value>,
    lets: String,
    leaves: Vec<Leaf>,
    /// Segments being inlined (cycle guard).
    stack: Vec<String>,
    /// Set variables already collected, by what they hold.
    sets: HashMap<String, String>,
}

/// Translates a tree. `refs` holds every segment the tree references, directly or through inlined trees.
pub fn compile(tree: &Tree, refs: &HashMap<String, Ref>, now: i64) -> Result<Compiled, CompileError> {
    let mut b = Builder {
        refs,
        now,
        vars: Map::new(),
        lets: String::new(),
        leaves: Vec::new(),
        stack: Vec::new(),
        sets: HashMap::new(),
    };
    let node = b.tree(tree)?;
    let predicate = b.sql(&node, true);
    Ok(Compiled { lets: b.lets, predicate, vars: b.vars, leaves: b.leaves, node })
}

impl Builder<'_> {
    fn param(&mut self, v: Value) -> String {
        let name = format!("c{}", self.vars.len());
        self.vars.insert(name.clone(), v);
        format!("${name}")
    }

    fn leaf(&mut self, l: Leaf) -> Node {
        self.leaves.push(l);
        Node::Leaf(self.leaves.len() - 1)
    }

    fn tree(&mut self, t: &Tree) -> Result<Node, CompileError> {
        if t.groups.is_empty() {
            return Ok(Node::Const(true));
        }
        let mut groups = Vec::with_capacity(t.groups.len());
        for g in &t.groups {
            let mut parts = Vec::new();
            for f in &g.filters {
                parts.push(self.filter(f)?);
            }
            if let Some(c) = &g.conditions {
                parts.push(self.tree(c)?);
            }
            groups.push(Node::And(parts));
        }
        Ok(match t.logic {
            Logic::And => Node::And(groups),
            Logic::Or => Node::Or(groups),
        })
    }

    fn field_expr(&mut self, field: &Field) -> String {
        match field {
            Field::Email => "email".into(),
            Field::Subscribed => "subscribed".into(),
            Field::CreatedAt => "created_at".into(),
            Field::UpdatedAt => "updated_at".into(),
            Field::Data(keys) => {
                let mut s = "data".to_string();
                for k in keys {
                    let p = self.param(Value::String(k.clone()));
                    s.push('[');
                    s.push_str(&p);
                    s.push(']');
                }
                s
            }
            Field::Event(_) | Field::Segment(_) => "NONE".into(),
        }
    }

    /// A set variable of contact ids (created once per distinct query).
    fn set(&mut self, key: String, query: String, params: Vec<(String, Value)>) -> String {
        if let Some(v) = self.sets.get(&key) {
            return v.clone();
        }
        let name = format!("$s{}", self.sets.len());
        let mut q = query;
        for (placeholder, value) in params {
            let p = self.param(value);
            q = q.replace(&placeholder, &p);
        }
        self.lets.push_str(&format!("LET {name} = object::from_entries(array::map(({q}), |$c| [$c, true]));\n"));
        self.sets.insert(key, name.clone());
        name
    }

    /// Contacts with an event named `name` (at or after `since`, when given).
    fn event_set(&mut self, name: &str, since: Option<i64>) -> String {
        match since {
            None => self.set(
                format!("event:{name}"),
                "SELECT VALUE contact FROM event WHERE project = $p AND name = @n".into(),
                vec![("@n".into(), json!(name))],
            ),
            Some(t) => self.set(
                format!("event:{name}:{t}"),
                "SELECT VALUE contact FROM event WHERE project = $p AND name = @n AND created_at >= @t".into(),
                vec![("@n".into(), json!(name)), ("@t".into(), json!(t))],
            ),
        }
    }

    fn member_set(&mut self, segment: &str) -> String {
        self.set(
            format!("segment:{segment}"),
            "SELECT VALUE contact FROM segment_member WHERE project = $p AND segment = @s".into(),
            vec![("@s".into(), json!(segment))],
        )
    }

    fn filter(&mut self, f: &Filter) -> Result<Node, CompileError> {
        let in_set = |s: &str| format!("{s}[record::id(id)] = true");
        let not_in_set = |s: &str| format!("{s}[record::id(id)] != true");
        if let Field::Segment(id) = &f.field {
            let member = match self.refs.get(id) {
                // A deleted segment has no members.
                None => Node::Const(false),
                Some(Ref::Static) => {
                    let s = self.member_set(id);
                    self.leaf(Leaf::Sql(in_set(&s)))
                }
                Some(Ref::Dynamic(t)) => {
                    if self.stack.iter().any(|s| s == id) {
                        return Err(CompileError(format!("{} ({}): circular segment reference", f.at, f.field_name)));
                    }
                    self.stack.push(id.clone());
                    let n = self.tree(t)?;
                    self.stack.pop();
                    n
                }
            };
            return Ok(match f.op {
                Op::NotMemberOfSegment => Node::Not(Box::new(member)),
                _ => member,
            });
        }
        if let Field::Event(name) = &f.field {
            let window = match f.operand {
                Operand::Window(w) => Some(self.now - w),
                _ => None,
            };
            let sql = match (&f.op, window) {
                (Op::Triggered, _) => in_set(&self.event_set(name, None)),
                (Op::NotTriggered, _) => not_in_set(&self.event_set(name, None)),
                (Op::TriggeredWithin, Some(t)) => in_set(&self.event_set(name, Some(t))),
                (Op::NotTriggeredWithin, Some(t)) => not_in_set(&self.event_set(name, Some(t))),
                (Op::TriggeredOlderThan, Some(t)) => {
                    let ever = self.event_set(name, None);
                    let recent = self.event_set(name, Some(t));
                    format!("({} AND {})", in_set(&ever), not_in_set(&recent))
                }
                _ => return Err(CompileError(format!("{}: operator does not apply to events", f.at))),
            };
            return Ok(self.leaf(Leaf::Sql(sql)));
        }
        let x = self.field_expr(&f.field);
        if let Op::Plugin(name) = &f.op {
            let operand = match &f.operand {
                Operand::Raw(v) => v.clone(),
                _ => Value::Null,
            };
            let timestamp = matches!(f.field, Field::CreatedAt | Field::UpdatedAt);
            return Ok(self.leaf(Leaf::Plugin { operator: name.clone(), operand, expr: x, timestamp }));
        }
        let present = format!("({x} != NONE AND {x} != NULL)");
        let is_time = matches!(f.field, Field::CreatedAt | Field::UpdatedAt);
        // A data value read as a date: an ISO 8601 string.
        let as_date = format!("(type::is_string({x}) AND string::is_datetime({x}) AND time::millis(<datetime> {x})");
        let cmp = |op: &Op| match op {
            Op::GreaterThan => ">",
            Op::LessThan => "<",
            Op::GreaterThanOrEqual => ">=",
            _ => "<=",
        };
        let sql = match (&f.op, &f.operand) {
            (Op::Exists, _) => present,
            (Op::NotExists, _) => format!("({x} = NONE OR {x} = NULL)"),
            (Op::Equals, Operand::Scalar(v)) => {
                let p = self.param(v.clone());
                format!("({x} = {p})")
            }
            (Op::NotEquals, Operand::Scalar(v)) => {
                let p = self.param(v.clone());
                format!("({present} AND {x} != {p})")
            }
            (Op::Equals, Operand::Date(ms)) => {
                let p = self.param(json!(ms));
                format!("({x} = {p})")
            }
            (Op::NotEquals, Operand::Date(ms)) => {
                let p = self.param(json!(ms));
                format!("({x} != {p})")
            }
            (Op::Contains | Op::NotContains, Operand::Scalar(v)) => {
                let lower = match v {
                    Value::String(s) => Value::String(s.to_lowercase()),
                    other => Value::String(other.to_string()),
                };
                let pl = self.param(lower);
                let pv = self.param(v.clone());
                if f.op == Op::Contains {
                    format!(
                        "((type::is_string({x}) AND string::contains(string::lowercase({x}), {pl})) OR \
                         (type::is_array({x}) AND {x} CONTAINS {pv}))"
                    )
                } else {
                    format!(
                        "((type::is_string({x}) AND !string::contains(string::lowercase({x}), {pl})) OR \
                         (type::is_array({x}) AND {x} CONTAINSNOT {pv}))"
                    )
                }
            }
            (op, Operand::Number(n)) => {
                let p = self.param(json!(n));
                format!("(type::is_number({x}) AND {x} {} {p})", cmp(op))
            }
            (op, Operand::Date(ms)) if is_time => {
                let p = self.param(json!(ms));
                format!("({x} {} {p})", cmp(op))
            }
            (op, Operand::Date(ms)) => {
                let p = self.param(json!(ms));
                format!("{as_date} {} {p})", cmp(op))
            }
            (Op::Within, Operand::Window(w)) => {
                let cut = self.param(json!(self.now - w));
                let now = self.param(json!(self.now));
                if is_time {
                    format!("({x} >= {cut} AND {x} <= {now})")
                } else {
                    format!("{as_date} >= {cut} AND time::millis(<datetime> {x}) <= {now})")
                }
            }
            (Op::OlderThan, Operand::Window(w)) => {
                let cut = self.param(json!(self.now - w));
                if is_time { format!("({x} < {cut})") } else { format!("{as_date} < {cut})") }
            }
            _ => return Err(CompileError(format!("{}: operator {:?} cannot be translated", f.at, f.op))),
        };
        Ok(self.leaf(Leaf::Sql(sql)))
    }

    /// The SurrealQL of a node; plugin leaves are "maybe": true when `positive`, false under a negation.
    fn sql(&self, n: &Node, positive: bool) -> String {
        match n {
            Node::And(v) if v.is_empty() => "true".into(),
            Node::Or(v) if v.is_empty() => "false".into(),
            Node::And(v) => format!("({})", v.iter().map(|n| self.sql(n, positive)).collect::<Vec<_>>().join(" AND ")),
            Node::Or(v) => format!("({})", v.iter().map(|n| self.sql(n, positive)).collect::<Vec<_>>().join(" OR ")),
            Node::Not(n) => format!("!({})", self.sql(n, !positive)),
            Node::Const(b) => b.to_string(),
            Node::Leaf(i) => match &self.leaves[*i] {
                Leaf::Sql(s) => s.clone(),
                Leaf::Plugin { .. } => positive.to_string(),
            },
        }
    }
}

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
        let v = self
            .query(
                &format!(
                    "RETURN array::flatten(array::map($ids, |$i| (SELECT {SEGMENT_FIELDS} FROM segment
                        WHERE id = type::record('segment', $i) AND project = $p)))"
                ),
                vars! { "p": project, "ids": ids },
            )
            .await?
            .value(0)?;
        serde_json::from_value(v).map_err(|e| StoreError::Decode(e.to_string()))
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

    /// Deletes a segment and its stored memberships. False when it does not exist in the project.
    pub async fn delete_segment(&self, project: &str, id: &str) -> Result<bool, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    "BEGIN TRANSACTION;
                     LET $gone = (DELETE segment WHERE id = type::record('segment', $id) AND project = $p RETURN BEFORE);
                     IF array::len($gone) > 0 { DELETE segment_member WHERE project = $p AND segment = $id; };
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

    // ---- matching ----

    /// How many contacts match a compiled condition without plugin leaves.
    pub async fn count_matching(&self, project: &str, c: &Compiled) -> Result<i64, StoreError> {
        let sql =
            format!("{}SELECT count() AS n FROM contact WHERE project = $p AND {} GROUP ALL;", c.lets, c.predicate);
        let mut rows = self.query(&sql, with_project(&c.vars, project)).await?;
        let v = rows.value_last()?;
        Ok(v.get(0).and_then(|r| r.get("n")).and_then(Value::as_i64).unwrap_or(0))
    }

    /// Ids of the contacts matching a compiled condition without plugin leaves.
    pub async fn matching_ids(&self, project: &str, c: &Compiled) -> Result<Vec<String>, StoreError> {
        let sql = format!("{}SELECT VALUE record::id(id) FROM contact WHERE project = $p AND {};", c.lets, c.predicate);
        let mut rows = self.query(&sql, with_project(&c.vars, project)).await?;
        let v = rows.value_last()?;
        Ok(serde_json::from_value::<Vec<Value>>(v).unwrap_or_default().iter().map(key_of).collect())
    }

    /// One page of the contacts matching a compiled condition without plugin leaves, newest first.
    pub async fn matching_page(
        &self,
        project: &str,
        c: &Compiled,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<super::contacts::Contact>, StoreError> {
        let sql = format!(
            "{}SELECT {} FROM contact WHERE project = $p AND {} ORDER BY id DESC LIMIT $limit START $start;",
            c.lets,
            super::contacts::CONTACT_FIELDS,
            c.predicate
        );
        let mut vars = with_project(&c.vars, project);
        vars["limit"] = json!(limit);
        vars["start"] = json!(offset);
        let v = self.query(&sql, vars).await?.value_last()?;
        serde_json::from_value(v).map_err(|e| StoreError::Decode(e.to_string()))
    }

    /// Candidates of a condition with plugin leaves, newest first, after the id `before` (keyset), with
    /// the results of the SQL leaves and the values the plugin leaves need.
    pub async fn candidates(
        &self,
        project: &str,
        c: &Compiled,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Candidate>, StoreError> {
        let mut l = Vec::new();
        let mut v = Vec::new();
        for leaf in &c.leaves {
            match leaf {
                Leaf::Sql(s) => {
                    l.push(s.clone());
                    v.push("NULL".to_string());
                }
                Leaf::Plugin { expr, .. } => {
                    l.push("NULL".to_string());
                    v.push(expr.clone());
                }
            }
        }
        let keyset = if before.is_some() { " AND id < type::record('contact', $before)" } else { "" };
        let sql = format!(
            "{}SELECT record::id(id) AS id, [{}] AS l, [{}] AS v FROM contact WHERE project = $p{keyset} AND {}
             ORDER BY id DESC LIMIT $limit;",
            c.lets,
            l.join(", "),
            v.join(", "),
            c.predicate
        );
        let mut vars = with_project(&c.vars, project);
        vars["limit"] = json!(limit);
        vars["before"] = json!(before);
        let v = self.query(&sql, vars).await?.value_last()?;
        serde_json::from_value(v).map_err(|e| StoreError::Decode(e.to_string()))
    }

    /// Contacts by id, in the given order (missing ones left out).
    pub async fn contacts_by_ids(
        &self,
        project: &str,
        ids: &[String],
    ) -> Result<Vec<super::contacts::Contact>, StoreError> {
        let v = self
            .query(
                &format!(
                    "RETURN array::flatten(array::map($ids, |$i| (SELECT {} FROM contact
                        WHERE id = type::record('contact', $i) AND project = $p)))",
                    super::contacts::CONTACT_FIELDS
                ),
                vars! { "p": project, "ids": ids },
            )
            .await?
            .value(0)?;
        serde_json::from_value(v).map_err(|e| StoreError::Decode(e.to_string()))
    }

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
                IF $ev != NULL {{
                    CREATE type::record('event', <string> rand::uuid::v7()) CONTENT {{
                        project: $p, contact: $c, name: $ev, data: $data, source: 'system', created_at: $now,
                        dispatched: false }} RETURN NONE;
                }};
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

    /// Diffs `matches` against the stored membership of a tracked segment, writes the difference and an
    /// entry or exit event per changed contact, and sets the cached count, in one transaction (a
    /// concurrent compute conflicts and is retried against the new state, so each change emits once).
    pub async fn apply_membership(
        &self,
        project: &str,
        segment: &str,
        matches: &[String],
        events: &MembershipEvents,
        now: i64,
    ) -> Result<Diff, StoreError> {
        let (entry, exit, data) = (&events.entry, &events.exit, &events.data);
        let v = self
            .write(|| async {
                self.query(
                    "BEGIN TRANSACTION;
                     LET $stored = (SELECT VALUE contact FROM segment_member WHERE project = $p AND segment = $s);
                     LET $mset = object::from_entries(array::map($matches, |$c| [$c, true]));
                     LET $sset = object::from_entries(array::map($stored, |$c| [$c, true]));
                     LET $entered = array::filter($matches, |$c| $sset[$c] != true);
                     LET $exited = array::filter($stored, |$c| $mset[$c] != true);
                     FOR $c IN $entered {
                        CREATE type::record('segment_member', [$s, $c]) CONTENT
                            {project: $p, segment: $s, contact: $c, created_at: $now} RETURN NONE;
                        CREATE type::record('event', <string> rand::uuid::v7()) CONTENT {
                            project: $p, contact: $c, name: $entry, data: $data, source: 'system', created_at: $now,
                            dispatched: false } RETURN NONE;
                     };
                     FOR $c IN $exited {
                        DELETE type::record('segment_member', [$s, $c]) RETURN NONE;
                        CREATE type::record('event', <string> rand::uuid::v7()) CONTENT {
                            project: $p, contact: $c, name: $exit, data: $data, source: 'system', created_at: $now,
                            dispatched: false } RETURN NONE;
                     };
                     UPDATE type::record('segment', $s) SET member_count = array::len($matches), counted_at = $now,
                        computed_at = $now WHERE project = $p RETURN NONE;
                     RETURN { entered: array::len($entered), exited: array::len($exited) };
                     COMMIT TRANSACTION;",
                    vars! {
                        "p": project, "s": segment, "matches": matches, "entry": entry, "exit": exit,
                        "data": data, "now": now,
                    },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(Diff {
            entered: v.get("entered").and_then(Value::as_i64).unwrap_or(0),
            exited: v.get("exited").and_then(Value::as_i64).unwrap_or(0),
            count: matches.len() as i64,
        })
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

fn with_project(vars: &Map<String, Value>, project: &str) -> Value {
    let mut m = vars.clone();
    m.insert("p".into(), Value::String(project.to_string()));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    //! The semantics of decision 25, case by case, against the real database (`mem://`), so the SurrealQL
    //! translation is what is tested.

    use super::*;
    use crate::clock::rfc3339;
    use crate::config::Config;
    use crate::domain::conditions::parse;

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
        let mut ids =
            store.matching_ids("p", &c).await.unwrap_or_else(|e| panic!("{tree}: {e}\n{}{}", c.lets, c.predicate));
        ids.sort();
        let n = store.count_matching("p", &c).await.unwrap();
        assert_eq!(n, ids.len() as i64, "count agrees with the ids for {tree}");
        ids
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

    #[tokio::test]
    async fn values_are_bound_not_formatted() {
        let t = parse(&f("data.x' OR true OR '", "equals", json!("'; DELETE contact; --"), None), &|_| false).unwrap();
        let c = compile(&t, &HashMap::new(), NOW).unwrap();
        assert!(!c.predicate.contains("DELETE") && !c.predicate.contains("OR true"), "{}", c.predicate);
        let store = seed().await;
        assert!(store.matching_ids("p", &c).await.unwrap().is_empty());
        assert_eq!(
            store
                .count_matching(
                    "p",
                    &compile(&parse(&json!({"groups": []}), &|_| false).unwrap(), &HashMap::new(), NOW).unwrap()
                )
                .await
                .unwrap(),
            5
        );
    }

    #[tokio::test]
    async fn a_reference_cycle_is_refused_at_translation() {
        let t = parse(&f("segment.x", "memberOfSegment", Value::Null, None), &|_| false).unwrap();
        let refs = HashMap::from([("x".to_string(), Ref::Dynamic(t.clone()))]);
        let e = compile(&t, &refs, NOW).unwrap_err();
        assert!(e.0.contains("circular"), "{e}");
    }
}
