//! Condition trees (docs/behaviour.md#segments-and-conditions): parsing and validation, the references a
//! tree makes (fields, events, segments), the segment slug of emitted event names
//! (docs/behaviour.md#events), and the evaluation of an expanded tree over leaf results. The same engine
//! serves segments now and campaign audiences and workflow conditions later. Translation to SurrealQL lives in `store::segments`.
//!
//! A tree is `{logic: AND|OR, groups: [{filters: [...], conditions?: tree}]}`; inside a group, the
//! filters and the nested tree are ANDed, and the groups are combined with the tree's logic.
//!
//! Must not import: salvo, surrealdb, tokio.

use serde_json::{Map, Value};

use crate::infra::clock::parse_rfc3339;

/// Deepest nesting of trees, and most filters in one tree (with its nested trees).
pub const MAX_DEPTH: usize = 5;
pub const MAX_FILTERS: usize = 100;

/// The email activities `email.<activity>` can name (the `email.*` events Herald emits).
pub const EMAIL_ACTIVITIES: &[&str] = &["sent", "delivery", "open", "click", "bounce", "complaint"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logic {
    And,
    Or,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    pub logic: Logic,
    pub groups: Vec<Group>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub filters: Vec<Filter>,
    pub conditions: Option<Tree>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    Email,
    Subscribed,
    CreatedAt,
    UpdatedAt,
    /// `data.<path>`: the keys of the path (at least one).
    Data(Vec<String>),
    /// `event.<name>` and `email.<activity>`: the event name.
    Event(String),
    /// `segment.<id>`
    Segment(String),
}

impl Field {
    /// Contact fields hold a value; event and segment fields are about the contact's history.
    pub fn is_contact_field(&self) -> bool {
        !matches!(self, Field::Event(_) | Field::Segment(_))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Equals,
    NotEquals,
    Contains,
    NotContains,
    GreaterThan,
    LessThan,
    GreaterThanOrEqual,
    LessThanOrEqual,
    Exists,
    NotExists,
    Within,
    OlderThan,
    Triggered,
    TriggeredWithin,
    TriggeredOlderThan,
    NotTriggered,
    NotTriggeredWithin,
    MemberOfSegment,
    NotMemberOfSegment,
    /// An operator a loaded plugin provides.
    Plugin(String),
}

impl Op {
    pub fn builtin(name: &str) -> Option<Op> {
        Some(match name {
            "equals" => Op::Equals,
            "notEquals" => Op::NotEquals,
            "contains" => Op::Contains,
            "notContains" => Op::NotContains,
            "greaterThan" => Op::GreaterThan,
            "lessThan" => Op::LessThan,
            "greaterThanOrEqual" => Op::GreaterThanOrEqual,
            "lessThanOrEqual" => Op::LessThanOrEqual,
            "exists" => Op::Exists,
            "notExists" => Op::NotExists,
            "within" => Op::Within,
            "olderThan" => Op::OlderThan,
            "triggered" => Op::Triggered,
            "triggeredWithin" => Op::TriggeredWithin,
            "triggeredOlderThan" => Op::TriggeredOlderThan,
            "notTriggered" => Op::NotTriggered,
            "notTriggeredWithin" => Op::NotTriggeredWithin,
            "memberOfSegment" => Op::MemberOfSegment,
            "notMemberOfSegment" => Op::NotMemberOfSegment,
            _ => return None,
        })
    }

    /// The operators of event fields (`triggered`, `triggeredWithin`, ...).
    pub fn is_event_op(&self) -> bool {
        matches!(
            self,
            Op::Triggered | Op::TriggeredWithin | Op::TriggeredOlderThan | Op::NotTriggered | Op::NotTriggeredWithin
        )
    }

    fn is_segment_op(&self) -> bool {
        matches!(self, Op::MemberOfSegment | Op::NotMemberOfSegment)
    }
}

/// The checked operand of a filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    None,
    /// equals / notEquals / contains / notContains: a string, number or boolean (strings as given).
    Scalar(Value),
    /// Comparisons against a number.
    Number(f64),
    /// Comparisons against a date (ms since the epoch).
    Date(i64),
    /// A time window in ms (within, olderThan, triggeredWithin, ...).
    Window(i64),
    /// A plugin operator's operand, as given.
    Raw(Value),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// Where the filter sits, for messages: `groups[0].filters[1]`.
    pub at: String,
    /// The field as written.
    pub field_name: String,
    pub field: Field,
    pub op: Op,
    pub operand: Operand,
}

/// What is wrong with a tree; the message names the filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionError(pub String);

impl std::fmt::Display for ConditionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Units of time windows, in ms.
pub fn unit_ms(unit: &str) -> Option<i64> {
    match unit {
        "minutes" => Some(60_000),
        "hours" => Some(3_600_000),
        "days" => Some(86_400_000),
        _ => None,
    }
}

/// Parses and checks a tree. `is_plugin_operator` says whether a loaded plugin provides an operator name.
pub fn parse(v: &Value, is_plugin_operator: &dyn Fn(&str) -> bool) -> Result<Tree, ConditionError> {
    let mut count = 0;
    parse_tree(v, "condition", 1, is_plugin_operator, &mut count)
}

fn parse_tree(
    v: &Value,
    at: &str,
    depth: usize,
    plugin: &dyn Fn(&str) -> bool,
    count: &mut usize,
) -> Result<Tree, ConditionError> {
    let err = |m: String| Err(ConditionError(m));
    let Some(o) = v.as_object() else { return err(format!("{at} must be an object with logic and groups")) };
    if depth > MAX_DEPTH {
        return err(format!("{at}: conditions nest at most {MAX_DEPTH} levels deep"));
    }
    let logic = match o.get("logic") {
        None | Some(Value::Null) => Logic::And,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("and") => Logic::And,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("or") => Logic::Or,
        Some(other) => return err(format!("{at}.logic must be AND or OR, got {other}")),
    };
    let groups = match o.get("groups") {
        Some(Value::Array(a)) => a,
        None | Some(Value::Null) => return err(format!("{at}.groups is required (an array of groups)")),
        Some(_) => return err(format!("{at}.groups must be an array of groups")),
    };
    let prefix = if at == "condition" { String::new() } else { format!("{at}.") };
    let mut out = Vec::with_capacity(groups.len());
    for (gi, g) in groups.iter().enumerate() {
        let gat = format!("{prefix}groups[{gi}]");
        let Some(go) = g.as_object() else { return err(format!("{gat} must be an object with filters")) };
        let filters = match go.get("filters") {
            None | Some(Value::Null) => &Vec::new(),
            Some(Value::Array(a)) => a,
            Some(_) => return err(format!("{gat}.filters must be an array of filters")),
        };
        let mut fs = Vec::with_capacity(filters.len());
        for (fi, f) in filters.iter().enumerate() {
            *count += 1;
            if *count > MAX_FILTERS {
                return err(format!("a condition holds at most {MAX_FILTERS} filters"));
            }
            fs.push(parse_filter(f, &format!("{gat}.filters[{fi}]"), plugin)?);
        }
        let conditions = match go.get("conditions") {
            None | Some(Value::Null) => None,
            Some(t) => Some(parse_tree(t, &format!("{gat}.conditions"), depth + 1, plugin, count)?),
        };
        out.push(Group { filters: fs, conditions });
    }
    Ok(Tree { logic, groups: out })
}

/// Parses and checks one filter on its own (a workflow's CONDITION step); `at` names it in messages.
pub fn parse_one(v: &Value, at: &str, is_plugin_operator: &dyn Fn(&str) -> bool) -> Result<Filter, ConditionError> {
    parse_filter(v, at, is_plugin_operator)
}

fn parse_field(name: &str) -> Option<Field> {
    match name {
        "email" => return Some(Field::Email),
        "subscribed" => return Some(Field::Subscribed),
        "createdAt" => return Some(Field::CreatedAt),
        "updatedAt" => return Some(Field::UpdatedAt),
        _ => {}
    }
    if let Some(path) = name.strip_prefix("data.") {
        let keys: Vec<String> = path.split('.').map(str::to_string).collect();
        if keys.iter().any(|k| k.is_empty()) || keys.len() > 8 {
            return None;
        }
        return Some(Field::Data(keys));
    }
    if let Some(ev) = name.strip_prefix("event.") {
        return (!ev.is_empty() && ev.len() <= 255).then(|| Field::Event(ev.to_string()));
    }
    if let Some(act) = name.strip_prefix("email.") {
        return EMAIL_ACTIVITIES.contains(&act).then(|| Field::Event(name.to_string()));
    }
    if let Some(id) = name.strip_prefix("segment.") {
        return (!id.is_empty() && id.len() <= 64).then(|| Field::Segment(id.to_string()));
    }
    None
}

fn parse_filter(v: &Value, at: &str, plugin: &dyn Fn(&str) -> bool) -> Result<Filter, ConditionError> {
    let Some(o) = v.as_object() else { return Err(ConditionError(format!("{at} must be an object"))) };
    let field_name = match o.get("field") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => return Err(ConditionError(format!("{at}: field is required"))),
        Some(other) => return Err(ConditionError(format!("{at}: field must be a string, got {other}"))),
    };
    let here = format!("{at} ({field_name})");
    let err = |m: String| Err(ConditionError(format!("{here}: {m}")));
    let Some(field) = parse_field(&field_name) else {
        return err(format!(
            "unknown field {field_name:?}; use email, subscribed, createdAt, updatedAt, data.<key>, event.<name>, \
             email.<{}> or segment.<id>",
            EMAIL_ACTIVITIES.join("|")
        ));
    };
    let op_name = match o.get("operator") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => return err("operator is required".into()),
        Some(other) => return err(format!("operator must be a string, got {other}")),
    };
    let op = match Op::builtin(&op_name) {
        Some(op) => op,
        None if plugin(&op_name) => Op::Plugin(op_name.clone()),
        None => return err(format!("unknown operator {op_name:?}")),
    };
    // Which operators fit which fields.
    let fits = match (&field, &op) {
        (Field::Event(_), op) => op.is_event_op(),
        (Field::Segment(_), op) => op.is_segment_op(),
        (_, op) if op.is_event_op() => false,
        (_, op) if op.is_segment_op() => false,
        (Field::Subscribed, op) => {
            matches!(op, Op::Equals | Op::NotEquals | Op::Exists | Op::NotExists | Op::Plugin(_))
        }
        (Field::CreatedAt | Field::UpdatedAt, Op::Contains | Op::NotContains) => false,
        _ => true,
    };
    if !fits {
        let what = match &field {
            Field::Event(_) => "event fields take triggered, triggeredWithin, triggeredOlderThan, notTriggered or \
                                notTriggeredWithin"
                .to_string(),
            Field::Segment(_) => "segment fields take memberOfSegment or notMemberOfSegment".to_string(),
            _ => format!("operator {op_name} does not apply to {field_name}"),
        };
        return err(format!("operator {op_name} cannot be used here: {what}"));
    }
    let value = o.get("value").unwrap_or(&Value::Null);
    let unit = o.get("unit");
    let missing_value = || format!("operator {op_name} needs a value");
    let operand = match &op {
        Op::Exists
        | Op::NotExists
        | Op::Triggered
        | Op::NotTriggered
        | Op::MemberOfSegment
        | Op::NotMemberOfSegment => Operand::None,
        Op::Plugin(_) => Operand::Raw(value.clone()),
        Op::Equals | Op::NotEquals => match (&field, value) {
            (_, Value::Null) => return err(missing_value()),
            (Field::Subscribed, Value::Bool(_)) => Operand::Scalar(value.clone()),
            (Field::Subscribed, _) => return err(format!("value must be a boolean, got {value}")),
            (Field::Email, Value::String(s)) => Operand::Scalar(Value::String(super::contacts::normalize_email(s))),
            (Field::Email, _) => return err(format!("value must be a string, got {value}")),
            (Field::CreatedAt | Field::UpdatedAt, v) => match date_value(v) {
                Some(ms) => Operand::Date(ms),
                None => return err(format!("value must be an ISO 8601 date-time or milliseconds, got {value}")),
            },
            (_, Value::String(_) | Value::Number(_) | Value::Bool(_)) => Operand::Scalar(value.clone()),
            (_, _) => return err(format!("value must be a string, number or boolean, got {value}")),
        },
        Op::Contains | Op::NotContains => match value {
            Value::Null => return err(missing_value()),
            Value::String(_) | Value::Number(_) | Value::Bool(_) => Operand::Scalar(value.clone()),
            _ => return err(format!("value must be a string, number or boolean, got {value}")),
        },
        Op::GreaterThan | Op::LessThan | Op::GreaterThanOrEqual | Op::LessThanOrEqual => match (&field, value) {
            (_, Value::Null) => return err(missing_value()),
            (Field::CreatedAt | Field::UpdatedAt, v) => match date_value(v) {
                Some(ms) => Operand::Date(ms),
                None => return err(format!("value must be an ISO 8601 date-time or milliseconds, got {value}")),
            },
            (_, Value::Number(n)) => Operand::Number(n.as_f64().unwrap_or(0.0)),
            (_, Value::String(s)) => match parse_rfc3339(s) {
                Some(ms) => Operand::Date(ms),
                None => return err(format!("value must be a number or an ISO 8601 date-time, got {value}")),
            },
            (_, _) => return err(format!("value must be a number or an ISO 8601 date-time, got {value}")),
        },
        Op::Within | Op::OlderThan | Op::TriggeredWithin | Op::TriggeredOlderThan | Op::NotTriggeredWithin => {
            let amount = match value {
                Value::Null => return err(missing_value()),
                Value::Number(n) => n.as_f64().unwrap_or(-1.0),
                Value::String(s) => match s.trim().parse::<f64>() {
                    Ok(n) => n,
                    Err(_) => return err(format!("value must be a positive number, got {value}")),
                },
                _ => return err(format!("value must be a positive number, got {value}")),
            };
            if !(amount > 0.0 && amount.is_finite()) {
                return err(format!("value must be a positive number, got {value}"));
            }
            let per = match unit {
                None | Some(Value::Null) => {
                    return err(format!("operator {op_name} needs a unit (minutes, hours or days)"));
                }
                Some(Value::String(u)) => match unit_ms(u) {
                    Some(ms) => ms,
                    None => return err(format!("unknown unit {u:?}; use minutes, hours or days")),
                },
                Some(other) => return err(format!("unit must be minutes, hours or days, got {other}")),
            };
            let window = amount * per as f64;
            if window > 100.0 * 365.0 * 86_400_000.0 {
                return err("the window must be at most 100 years".into());
            }
            Operand::Window(window as i64)
        }
    };
    Ok(Filter { at: at.to_string(), field_name, field, op, operand })
}

/// A date operand: an RFC 3339 string or integer milliseconds.
fn date_value(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => parse_rfc3339(s),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

impl Tree {
    /// The path (`groups[1]`, `groups[0].conditions.groups[2]`) of the first group that has neither
    /// filters nor a nested condition: such a group matches nobody, which is never what was meant, so a
    /// condition being saved is refused with it. (Stored conditions are read without this check.)
    pub fn empty_group(&self) -> Option<String> {
        fn walk(t: &Tree, prefix: &str) -> Option<String> {
            for (i, g) in t.groups.iter().enumerate() {
                let at = format!("{prefix}groups[{i}]");
                match &g.conditions {
                    None if g.filters.is_empty() => return Some(at),
                    None => {}
                    Some(c) => {
                        if let Some(found) = walk(c, &format!("{at}.conditions.")) {
                            return Some(found);
                        }
                    }
                }
            }
            None
        }
        walk(self, "")
    }

    /// Every filter, depth first.
    pub fn filters(&self) -> Vec<&Filter> {
        let mut out = Vec::new();
        fn walk<'a>(t: &'a Tree, out: &mut Vec<&'a Filter>) {
            for g in &t.groups {
                out.extend(g.filters.iter());
                if let Some(c) = &g.conditions {
                    walk(c, out);
                }
            }
        }
        walk(self, &mut out);
        out
    }

    /// Top-level `data` keys the tree reads (`data.address.city` reads `address`).
    pub fn data_keys(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .filters()
            .iter()
            .filter_map(|f| match &f.field {
                Field::Data(keys) => keys.first().cloned(),
                _ => None,
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Event names the tree reads (including `email.*`).
    pub fn events(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .filters()
            .iter()
            .filter_map(|f| match &f.field {
                Field::Event(n) => Some(n.clone()),
                _ => None,
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Segment ids the tree references.
    pub fn segments(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .filters()
            .iter()
            .filter_map(|f| match &f.field {
                Field::Segment(id) => Some(id.clone()),
                _ => None,
            })
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The first filter that references segment `id`.
    pub fn filter_referencing(&self, id: &str) -> Option<&Filter> {
        self.filters().into_iter().find(|f| matches!(&f.field, Field::Segment(s) if s == id))
    }
}

/// A tree with segment references expanded, over numbered leaves: what is evaluated.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    And(Vec<Node>),
    Or(Vec<Node>),
    Not(Box<Node>),
    Leaf(usize),
    Const(bool),
}

impl Node {
    /// Evaluates the node given each leaf's result.
    pub fn eval(&self, leaf: &dyn Fn(usize) -> bool) -> bool {
        match self {
            Node::And(v) => v.iter().all(|n| n.eval(leaf)),
            Node::Or(v) => v.iter().any(|n| n.eval(leaf)),
            Node::Not(n) => !n.eval(leaf),
            Node::Leaf(i) => leaf(*i),
            Node::Const(b) => *b,
        }
    }
}

/// The segment slug of event names (docs/behaviour.md#events): lowercase, spaces to `-`, other specials
/// dropped, runs of `-` collapsed.
pub fn slug(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.trim().to_lowercase().chars() {
        let c = if c.is_whitespace() { '-' } else { c };
        if c == '-' {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else if c.is_alphanumeric() || c == '_' {
            out.push(c);
        }
    }
    out.trim_matches('-').to_string()
}

/// The condition as stored and shown: the given JSON (it parsed).
pub fn is_object(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Object(_)))
}

/// A minimal map for tests and callers that build trees by hand.
pub fn filter_json(field: &str, operator: &str, value: Value, unit: Option<&str>) -> Value {
    let mut m = Map::new();
    m.insert("field".into(), field.into());
    m.insert("operator".into(), operator.into());
    m.insert("value".into(), value);
    if let Some(u) = unit {
        m.insert("unit".into(), u.into());
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn no_plugins(_: &str) -> bool {
        false
    }

    fn one(filter: Value) -> Result<Tree, ConditionError> {
        parse(&json!({"logic": "AND", "groups": [{"filters": [filter]}]}), &|o| o == "matchesRegex")
    }

    #[test]
    fn valid_filters_parse() {
        let cases: &[(Value, Op, Operand)] = &[
            (
                json!({"field": "email", "operator": "equals", "value": " A@B.co "}),
                Op::Equals,
                Operand::Scalar(json!("a@b.co")),
            ),
            (
                json!({"field": "subscribed", "operator": "equals", "value": true}),
                Op::Equals,
                Operand::Scalar(json!(true)),
            ),
            (
                json!({"field": "data.plan", "operator": "notEquals", "value": "pro"}),
                Op::NotEquals,
                Operand::Scalar(json!("pro")),
            ),
            (
                json!({"field": "data.a.b", "operator": "contains", "value": "x"}),
                Op::Contains,
                Operand::Scalar(json!("x")),
            ),
            (json!({"field": "data.n", "operator": "greaterThan", "value": 3}), Op::GreaterThan, Operand::Number(3.0)),
            (
                json!({"field": "data.d", "operator": "lessThan", "value": "2024-01-01T00:00:00Z"}),
                Op::LessThan,
                Operand::Date(1_704_067_200_000),
            ),
            (
                json!({"field": "createdAt", "operator": "greaterThanOrEqual", "value": 5}),
                Op::GreaterThanOrEqual,
                Operand::Date(5),
            ),
            (json!({"field": "data.x", "operator": "exists"}), Op::Exists, Operand::None),
            (
                json!({"field": "createdAt", "operator": "within", "value": 2, "unit": "hours"}),
                Op::Within,
                Operand::Window(7_200_000),
            ),
            (
                json!({"field": "data.d", "operator": "olderThan", "value": "1", "unit": "days"}),
                Op::OlderThan,
                Operand::Window(86_400_000),
            ),
            (json!({"field": "event.signup", "operator": "triggered"}), Op::Triggered, Operand::None),
            (
                json!({"field": "email.open", "operator": "triggeredWithin", "value": 30, "unit": "minutes"}),
                Op::TriggeredWithin,
                Operand::Window(1_800_000),
            ),
            (json!({"field": "segment.abc", "operator": "memberOfSegment"}), Op::MemberOfSegment, Operand::None),
            (
                json!({"field": "data.name", "operator": "matchesRegex", "value": "^a"}),
                Op::Plugin("matchesRegex".into()),
                Operand::Raw(json!("^a")),
            ),
        ];
        for (f, op, operand) in cases {
            let t = one(f.clone()).unwrap_or_else(|e| panic!("{f}: {e}"));
            let got = t.filters()[0];
            assert_eq!(&got.op, op, "{f}");
            assert_eq!(&got.operand, operand, "{f}");
        }
    }

    #[test]
    fn bad_filters_are_refused_with_a_message_naming_the_filter() {
        let cases: &[(Value, &str)] = &[
            (json!({"field": "data.plan", "operator": "like", "value": "x"}), "unknown operator \"like\""),
            (json!({"field": "plan", "operator": "equals", "value": "x"}), "unknown field \"plan\""),
            (json!({"field": "email.opened", "operator": "triggered"}), "unknown field"),
            (json!({"field": "data.", "operator": "exists"}), "unknown field"),
            (json!({"field": "data.plan", "operator": "equals"}), "needs a value"),
            (json!({"field": "data.plan", "operator": "equals", "value": null}), "needs a value"),
            (json!({"field": "createdAt", "operator": "within", "value": 3}), "needs a unit"),
            (json!({"field": "createdAt", "operator": "within", "value": 3, "unit": "weeks"}), "unknown unit"),
            (json!({"field": "createdAt", "operator": "within", "value": -1, "unit": "days"}), "positive number"),
            (json!({"field": "data.n", "operator": "greaterThan", "value": "abc"}), "number or an ISO 8601"),
            (json!({"field": "data.n", "operator": "greaterThan", "value": [1]}), "number or an ISO 8601"),
            (json!({"field": "subscribed", "operator": "equals", "value": "yes"}), "must be a boolean"),
            (json!({"field": "subscribed", "operator": "contains", "value": "y"}), "cannot be used here"),
            (json!({"field": "event.x", "operator": "equals", "value": 1}), "cannot be used here"),
            (json!({"field": "data.x", "operator": "triggered"}), "cannot be used here"),
            (json!({"field": "segment.x", "operator": "equals", "value": 1}), "cannot be used here"),
            (json!({"field": "data.x", "operator": "equals", "value": {"a": 1}}), "string, number or boolean"),
            (json!({"operator": "equals", "value": 1}), "field is required"),
            (json!({"field": "data.x", "value": 1}), "operator is required"),
        ];
        for (f, want) in cases {
            let e = one(f.clone()).unwrap_err().0;
            assert!(e.contains(want), "{f}: {e}");
            assert!(e.starts_with("groups[0].filters[0]"), "names the filter: {e}");
        }
        let e = parse(
            &json!({"groups": [{"filters": [], "conditions": {"logic": "OR", "groups": [{"filters": [{"field": "x"}]}]}}]}),
            &no_plugins,
        )
        .unwrap_err();
        assert!(e.0.starts_with("groups[0].conditions.groups[0].filters[0] (x)"), "{e}");
        assert!(parse(&json!({"logic": "XOR", "groups": []}), &no_plugins).unwrap_err().0.contains("AND or OR"));
        let f = json!({"field": "email", "operator": "exists"});
        for (tree, empty) in [
            (json!({"groups": [{"filters": [f]}]}), None),
            (json!({"groups": [{"filters": [f]}, {"filters": []}]}), Some("groups[1]")),
            (json!({"groups": [{}]}), Some("groups[0]")),
            (
                json!({"groups": [{"filters": [], "conditions": {"groups": [{"filters": [f]}, {"filters": null}]}}]}),
                Some("groups[0].conditions.groups[1]"),
            ),
            (json!({"groups": [{"filters": [], "conditions": {"groups": [{"filters": [f]}]}}]}), None),
        ] {
            assert_eq!(parse(&tree, &no_plugins).unwrap().empty_group().as_deref(), empty, "{tree}");
        }
        assert!(parse(&json!({"logic": "AND"}), &no_plugins).unwrap_err().0.contains("groups is required"));
        assert!(parse(&json!("x"), &no_plugins).is_err());
    }

    #[test]
    fn nesting_and_size_are_bounded() {
        let mut t = json!({"groups": []});
        for _ in 0..MAX_DEPTH {
            t = json!({"groups": [{"filters": [], "conditions": t}]});
        }
        assert!(parse(&t, &no_plugins).unwrap_err().0.contains("nest at most"));
        let many: Vec<Value> = (0..=MAX_FILTERS).map(|_| json!({"field": "email", "operator": "exists"})).collect();
        assert!(parse(&json!({"groups": [{"filters": many}]}), &no_plugins).unwrap_err().0.contains("at most"));
    }

    #[test]
    fn references() {
        let t = parse(
            &json!({"logic": "OR", "groups": [
                {"filters": [{"field": "data.address.city", "operator": "exists"}, {"field": "event.signup", "operator": "triggered"}]},
                {"filters": [{"field": "email.open", "operator": "triggered"}],
                 "conditions": {"groups": [{"filters": [{"field": "segment.s1", "operator": "memberOfSegment"}, {"field": "data.plan", "operator": "exists"}]}]}}
            ]}),
            &no_plugins,
        )
        .unwrap();
        assert_eq!(t.data_keys(), vec!["address", "plan"]);
        assert_eq!(t.events(), vec!["email.open", "signup"]);
        assert_eq!(t.segments(), vec!["s1"]);
        assert_eq!(t.filter_referencing("s1").unwrap().at, "groups[1].conditions.groups[0].filters[0]");
    }

    #[test]
    fn slugs() {
        for (name, want) in [
            ("VIP Customers", "vip-customers"),
            ("  Trial -- ending  soon! ", "trial-ending-soon"),
            ("Über Fans", "über-fans"),
            ("a_b", "a_b"),
            ("***", ""),
        ] {
            assert_eq!(slug(name), want, "{name}");
        }
    }

    #[test]
    fn node_evaluation() {
        let n = Node::And(vec![Node::Leaf(0), Node::Or(vec![Node::Leaf(1), Node::Not(Box::new(Node::Leaf(2)))])]);
        let at = |bits: [bool; 3]| n.eval(&|i| bits[i]);
        assert!(at([true, true, true]));
        assert!(at([true, false, false]));
        assert!(!at([true, false, true]));
        assert!(!at([false, true, true]));
        assert!(Node::And(vec![]).eval(&|_| false));
        assert!(!Node::Or(vec![]).eval(&|_| true));
    }
}
