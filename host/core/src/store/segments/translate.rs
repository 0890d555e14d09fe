//! Translation of a condition tree (`domain::conditions`) to SurrealQL: contact-field filters become
//! `WHERE` fragments with bound values, event, email-activity and membership filters become sets of contact
//! ids listed by one indexed query, plugin operators become host leaves (see the module above).

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::domain::conditions::{Field, Filter, Logic, Node, Op, Operand, Tree};

/// What a referenced segment contributes to a tree.
#[derive(Debug, Clone)]
pub enum Ref {
    /// Static members: the stored membership.
    Static,
    /// A dynamic segment: its tree, inlined.
    Dynamic(Tree),
}

/// A set of contact ids a leaf tests membership in, listed by one indexed query.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SetQuery {
    /// Contacts with an event named `name` (at or after `since`, when given).
    Event { name: String, since: Option<i64> },
    /// Stored members of a segment.
    Members(String),
}

/// One leaf of a compiled condition.
#[derive(Debug, Clone)]
pub enum Leaf {
    /// Runs in the database: a boolean SurrealQL expression over a contact row.
    Sql(String),
    /// Runs in the host: whether the contact is in a set of contact ids.
    Set(SetQuery),
    /// Runs in the host: a plugin operator over the value of `expr` (a SurrealQL expression).
    Plugin { operator: String, operand: Value, expr: String, timestamp: bool },
}

/// A condition translated to SurrealQL.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The predicate over a contact row; with host leaves, a superset of the matches.
    pub predicate: String,
    pub vars: Map<String, Value>,
    pub leaves: Vec<Leaf>,
    pub node: Node,
    /// When the condition was translated (ms); newest-first pages look back from there.
    pub now: i64,
}

impl Compiled {
    /// The `WHERE` condition of a query over the project's contacts: the project, and the predicate
    /// unless it is `true` (a constant among the conditions slows SurrealDB's scans, see `sql`).
    pub(super) fn project_filter(&self) -> String {
        match self.predicate.as_str() {
            "true" => "project = $p".into(),
            p => format!("project = $p AND {p}"),
        }
    }

    pub fn has_plugins(&self) -> bool {
        self.leaves.iter().any(|l| matches!(l, Leaf::Plugin { .. }))
    }

    pub(super) fn is_db_leaf(&self, i: usize) -> bool {
        matches!(self.leaves[i], Leaf::Sql(_))
    }
}

#[derive(Debug)]
pub enum CompileError {
    /// The condition cannot be translated (names the filter).
    Invalid(String),
    /// The condition is larger than [`MAX_COMPILED_NODES`] once its references are expanded.
    TooLarge(String),
}

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompileError::Invalid(m) | CompileError::TooLarge(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for CompileError {}

struct Builder<'a> {
    refs: &'a HashMap<String, Ref>,
    now: i64,
    vars: Map<String, Value>,
    leaves: Vec<Leaf>,
    /// Segments being inlined (cycle guard).
    stack: Vec<String>,
    /// Set leaves already created, by what they hold.
    sets: HashMap<SetQuery, usize>,
    /// Referenced dynamic segments already translated: each is compiled once and reused.
    memo: HashMap<String, Node>,
    /// Nodes of the translation so far, bounded by [`MAX_COMPILED_NODES`].
    nodes: usize,
}

/// Largest translated condition, counted in nodes once referenced segments are expanded: a chain of
/// references that each use the next several times would otherwise grow exponentially.
pub const MAX_COMPILED_NODES: usize = 20_000;

fn node_size(n: &Node) -> usize {
    match n {
        Node::And(v) | Node::Or(v) => 1 + v.iter().map(node_size).sum::<usize>(),
        Node::Not(n) => 1 + node_size(n),
        _ => 1,
    }
}

/// Translates a tree. `refs` holds every segment the tree references, directly or through inlined trees.
pub fn compile(tree: &Tree, refs: &HashMap<String, Ref>, now: i64) -> Result<Compiled, CompileError> {
    let mut b = Builder {
        refs,
        now,
        vars: Map::new(),
        leaves: Vec::new(),
        stack: Vec::new(),
        sets: HashMap::new(),
        memo: HashMap::new(),
        nodes: 0,
    };
    let node = b.tree(tree)?;
    let predicate = b.sql(&node, true);
    Ok(Compiled { predicate, vars: b.vars, leaves: b.leaves, node, now })
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
                    if is_plain_key(k) {
                        // A static path: SurrealDB can test it on the stored bytes before decoding a row.
                        s.push_str(".`");
                        s.push_str(k);
                        s.push('`');
                    } else {
                        let p = self.param(Value::String(k.clone()));
                        s.push('[');
                        s.push_str(&p);
                        s.push(']');
                    }
                }
                s
            }
            Field::Event(_) | Field::Segment(_) => "NONE".into(),
        }
    }

    /// The leaf of a set (one per distinct set).
    fn set(&mut self, q: SetQuery) -> Node {
        if let Some(i) = self.sets.get(&q) {
            return Node::Leaf(*i);
        }
        self.leaves.push(Leaf::Set(q.clone()));
        self.sets.insert(q, self.leaves.len() - 1);
        Node::Leaf(self.leaves.len() - 1)
    }

    fn event_set(&mut self, name: &str, since: Option<i64>) -> Node {
        self.set(SetQuery::Event { name: name.to_string(), since })
    }

    fn filter(&mut self, f: &Filter) -> Result<Node, CompileError> {
        let not = |n: Node| Node::Not(Box::new(n));
        if let Field::Segment(id) = &f.field {
            let member = match self.refs.get(id) {
                // A deleted segment has no members.
                None => Node::Const(false),
                Some(Ref::Static) => self.set(SetQuery::Members(id.clone())),
                Some(Ref::Dynamic(t)) => {
                    if self.stack.iter().any(|s| s == id) {
                        return Err(CompileError::Invalid(format!(
                            "{} ({}): circular segment reference",
                            f.at, f.field_name
                        )));
                    }
                    let n = match self.memo.get(id) {
                        Some(n) => n.clone(),
                        None => {
                            self.stack.push(id.clone());
                            let n = self.tree(t)?;
                            self.stack.pop();
                            self.memo.insert(id.clone(), n.clone());
                            n
                        }
                    };
                    self.nodes += node_size(&n);
                    if self.nodes > MAX_COMPILED_NODES {
                        return Err(CompileError::TooLarge(format!(
                            "{} ({}): the condition is too large once referenced segments are expanded \
                             (more than {MAX_COMPILED_NODES} nodes)",
                            f.at, f.field_name
                        )));
                    }
                    n
                }
            };
            return Ok(match f.op {
                Op::NotMemberOfSegment => not(member),
                _ => member,
            });
        }
        if let Field::Event(name) = &f.field {
            let window = match f.operand {
                Operand::Window(w) => Some(self.now - w),
                _ => None,
            };
            return Ok(match (&f.op, window) {
                (Op::Triggered, _) => self.event_set(name, None),
                (Op::NotTriggered, _) => not(self.event_set(name, None)),
                (Op::TriggeredWithin, Some(t)) => self.event_set(name, Some(t)),
                (Op::NotTriggeredWithin, Some(t)) => not(self.event_set(name, Some(t))),
                (Op::TriggeredOlderThan, Some(t)) => {
                    Node::And(vec![self.event_set(name, None), not(self.event_set(name, Some(t)))])
                }
                _ => return Err(CompileError::Invalid(format!("{}: operator does not apply to events", f.at))),
            });
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
                let p = self.param(number(*n));
                // Only numbers compare: SurrealDB orders values by kind first (none < null < bool < number
                // < string < ...), so "above true and below ''" is exactly the numbers. Unlike a function
                // call (`type::is_number`), these comparisons let a scan reject rows from their stored bytes.
                let guard = match op {
                    Op::GreaterThan | Op::GreaterThanOrEqual => format!("{x} < ''"),
                    _ => format!("{x} > true"),
                };
                format!("({x} {} {p} AND {guard})", cmp(op))
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
            _ => return Err(CompileError::Invalid(format!("{}: operator {:?} cannot be translated", f.at, f.op))),
        };
        Ok(self.leaf(Leaf::Sql(sql)))
    }

    /// The SurrealQL of a node; host leaves are "maybe": true when `positive`, false under a negation.
    /// Constants are folded away (`x AND true` is `x`): SurrealDB 3.3.5 filters a scanned row from its
    /// stored bytes only when no constant stands among the conditions, and with one a scan of a million
    /// contacts took 2.4 s instead of 1.0 s.
    fn sql(&self, n: &Node, positive: bool) -> String {
        let fold = |v: &[Node], unit: &str, zero: &str, op: &str| {
            let mut parts = Vec::with_capacity(v.len());
            for n in v {
                let s = self.sql(n, positive);
                if s == zero {
                    return zero.to_string();
                }
                if s != unit {
                    parts.push(s);
                }
            }
            match parts.len() {
                0 => unit.to_string(),
                1 => parts.swap_remove(0),
                _ => format!("({})", parts.join(op)),
            }
        };
        match n {
            Node::And(v) => fold(v, "true", "false", " AND "),
            Node::Or(v) => fold(v, "false", "true", " OR "),
            Node::Not(n) => match self.sql(n, !positive).as_str() {
                "true" => "false".into(),
                "false" => "true".into(),
                s => format!("!({s})"),
            },
            Node::Const(b) => b.to_string(),
            Node::Leaf(i) => match &self.leaves[*i] {
                Leaf::Sql(s) => s.clone(),
                Leaf::Set(_) | Leaf::Plugin { .. } => positive.to_string(),
            },
        }
    }
}

/// A number operand as bound: whole numbers as integers, which SurrealDB compares against stored integers
/// without decoding them; others as floats.
fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 { json!(n as i64) } else { json!(n) }
}

/// Whether a `data` key is written into the query as a quoted field name instead of a bound parameter:
/// only ASCII letters, digits and `_`, starting with a letter or `_`, at most 64 characters, so it can
/// neither close the quotes nor mean anything but a field name. Every other key stays bound. SurrealDB
/// 3.3 rejects rows from their stored bytes (before decoding them) only for static field paths, and a
/// bound key (`data[$k]`) is not one: scans with bound keys ran about three times slower.
pub fn is_plain_key(k: &str) -> bool {
    let mut chars = k.chars();
    k.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
