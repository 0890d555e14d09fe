//! The pure part of running a workflow (docs/behaviour.md#workflows): which step follows a step given
//! its outcome, and a CONDITION step's filter evaluated in memory against a value (the contact's field
//! or the execution's context), with the meaning segment filters have in the database.
//!
//! Must not import: salvo, surrealdb, tokio.

use serde_json::Value;

use super::{CONDITION, Graph, WAIT_FOR_EVENT, WaitOutcome};
use crate::domain::conditions::{Field, Filter, Op, Operand};
use crate::infra::clock::parse_rfc3339;

/// What a finished step leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Step(String),
    /// Nothing follows: the execution is COMPLETED.
    End,
}

/// The step after `step`: a CONDITION follows its `branch` (`yes`/`no`), a WAIT_FOR_EVENT its
/// `outcome`, a plugin step the link of the branch its plugin named or else its plain link, any other
/// step its one link. No matching link ends the execution.
pub fn next(g: &Graph, step: &str, branch: Option<&str>, outcome: Option<WaitOutcome>) -> Next {
    let kind = g.step(step).map(|s| s.kind.as_str()).unwrap_or("");
    let pick = |f: &dyn Fn(&super::Transition) -> bool| g.outgoing(step).find(|t| f(t)).map(|t| t.to.clone());
    let found = match kind {
        CONDITION => pick(&|t| t.branch.as_deref() == branch),
        WAIT_FOR_EVENT => pick(&|t| t.wait_outcome == outcome),
        _ => match branch {
            Some(b) => pick(&|t| t.branch.as_deref() == Some(b)).or_else(|| pick(&|t| t.branch.is_none())),
            None => pick(&|t| t.branch.is_none()),
        },
    };
    found.map_or(Next::End, Next::Step)
}

/// Reads `path` in a JSON object (`["order", "total"]`).
pub fn at_path<'a>(root: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(root, |v, k| v.get(k.as_str()))
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// Whether two scalars are equal as the database compares them (numbers by value).
fn same(a: &Value, b: &Value) -> bool {
    match (num(a), num(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// A date as milliseconds: the field's own milliseconds (createdAt, updatedAt) or an RFC 3339 string.
fn millis(v: &Value, is_time: bool) -> Option<i64> {
    if is_time {
        return v.as_i64();
    }
    v.as_str().and_then(parse_rfc3339)
}

/// Evaluates a built-in, non-event, non-segment filter against the value of its field (`None` when the
/// field is missing) at time `now`. Event and segment operators and plugin operators are answered by
/// the caller (they need the database or a plugin).
pub fn eval(f: &Filter, value: Option<&Value>, now: i64) -> bool {
    let present = value.filter(|v| !v.is_null());
    let is_time = matches!(f.field, Field::CreatedAt | Field::UpdatedAt);
    let cmp = |a: f64, b: f64| match f.op {
        Op::GreaterThan => a > b,
        Op::LessThan => a < b,
        Op::GreaterThanOrEqual => a >= b,
        _ => a <= b,
    };
    match (&f.op, &f.operand) {
        (Op::Exists, _) => present.is_some(),
        (Op::NotExists, _) => present.is_none(),
        (Op::Equals, Operand::Scalar(s)) => present.is_some_and(|v| same(v, s)),
        (Op::NotEquals, Operand::Scalar(s)) => present.is_some_and(|v| !same(v, s)),
        (Op::Equals, Operand::Date(ms)) => present.and_then(|v| millis(v, is_time)) == Some(*ms),
        (Op::NotEquals, Operand::Date(ms)) => present.and_then(|v| millis(v, is_time)).is_some_and(|m| m != *ms),
        (Op::Contains | Op::NotContains, Operand::Scalar(s)) => {
            let want = f.op == Op::Contains;
            match present {
                Some(Value::String(text)) => {
                    let needle = match s {
                        Value::String(n) => n.to_lowercase(),
                        other => other.to_string(),
                    };
                    text.to_lowercase().contains(&needle) == want
                }
                Some(Value::Array(items)) => items.iter().any(|i| same(i, s)) == want,
                _ => false,
            }
        }
        (_, Operand::Number(n)) => present.and_then(num).is_some_and(|v| cmp(v, *n)),
        (_, Operand::Date(ms)) => present.and_then(|v| millis(v, is_time)).is_some_and(|v| cmp(v as f64, *ms as f64)),
        (Op::Within, Operand::Window(w)) => {
            present.and_then(|v| millis(v, is_time)).is_some_and(|v| v >= now - w && v <= now)
        }
        (Op::OlderThan, Operand::Window(w)) => present.and_then(|v| millis(v, is_time)).is_some_and(|v| v < now - w),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Position, Step, Transition, steps::parse_condition};
    use super::*;
    use serde_json::json;

    fn filter(config: Value) -> Filter {
        parse_condition(&config, &|_| false).unwrap().filter
    }

    #[test]
    fn filters_mean_in_memory_what_they_mean_in_the_database() {
        let now = 1_000_000_000_000;
        let day = 86_400_000;
        let iso = |ms: i64| chrono::DateTime::from_timestamp_millis(ms).unwrap().to_rfc3339();
        let cases: Vec<(Value, Option<Value>, bool)> = vec![
            (json!({"field": "data.plan", "operator": "equals", "value": "pro"}), Some(json!("pro")), true),
            (json!({"field": "data.plan", "operator": "equals", "value": "pro"}), Some(json!("Pro")), false),
            (json!({"field": "data.n", "operator": "equals", "value": 2}), Some(json!(2.0)), true),
            (json!({"field": "data.plan", "operator": "notEquals", "value": "pro"}), Some(json!("free")), true),
            (json!({"field": "data.plan", "operator": "notEquals", "value": "pro"}), None, false),
            (json!({"field": "data.plan", "operator": "notEquals", "value": "pro"}), Some(Value::Null), false),
            (json!({"field": "data.tags", "operator": "contains", "value": "vip"}), Some(json!(["a", "vip"])), true),
            (json!({"field": "data.name", "operator": "contains", "value": "ANN"}), Some(json!("Joanna")), true),
            (json!({"field": "data.name", "operator": "notContains", "value": "ann"}), Some(json!("Bob")), true),
            (json!({"field": "data.name", "operator": "notContains", "value": "ann"}), None, false),
            (json!({"field": "data.n", "operator": "greaterThan", "value": 5}), Some(json!(6)), true),
            (json!({"field": "data.n", "operator": "greaterThan", "value": 5}), Some(json!("6")), false),
            (json!({"field": "data.n", "operator": "lessThanOrEqual", "value": 5}), Some(json!(5)), true),
            (
                json!({"field": "data.at", "operator": "greaterThan", "value": iso(now - day)}),
                Some(json!(iso(now))),
                true,
            ),
            (
                json!({"field": "data.at", "operator": "within", "value": 2, "unit": "days"}),
                Some(json!(iso(now - day))),
                true,
            ),
            (
                json!({"field": "data.at", "operator": "within", "value": 2, "unit": "days"}),
                Some(json!(iso(now - 3 * day))),
                false,
            ),
            (
                json!({"field": "data.at", "operator": "olderThan", "value": 2, "unit": "days"}),
                Some(json!(iso(now - 3 * day))),
                true,
            ),
            (
                json!({"field": "contact.createdAt", "operator": "within", "value": 1, "unit": "hours"}),
                Some(json!(now - 1000)),
                true,
            ),
            (json!({"field": "data.x", "operator": "exists"}), Some(json!(0)), true),
            (json!({"field": "data.x", "operator": "exists"}), Some(Value::Null), false),
            (json!({"field": "data.x", "operator": "notExists"}), None, true),
            (json!({"field": "contact.subscribed", "operator": "equals", "value": true}), Some(json!(true)), true),
            (json!({"field": "contact.email", "operator": "equals", "value": "A@X.io"}), Some(json!("a@x.io")), true),
        ];
        for (config, value, want) in cases {
            assert_eq!(eval(&filter(config.clone()), value.as_ref(), now), want, "{config} on {value:?}");
        }
    }

    #[test]
    fn next_follows_the_outcome_or_ends() {
        let step = |id: &str, kind: &str| Step {
            id: id.into(),
            kind: kind.into(),
            name: id.into(),
            position: Position::default(),
            config: json!({}),
            template_id: None,
            created_at: 0,
            updated_at: 0,
        };
        let link = |from: &str, to: &str, branch: Option<&str>, o: Option<WaitOutcome>| Transition {
            id: format!("{from}{to}"),
            from: from.into(),
            to: to.into(),
            branch: branch.map(str::to_string),
            wait_outcome: o,
            created_at: 0,
        };
        let g = Graph {
            steps: vec![
                step("t", "TRIGGER"),
                step("c", CONDITION),
                step("w", WAIT_FOR_EVENT),
                step("h", "WEBHOOK"),
                step("e", "EXIT"),
            ],
            transitions: vec![
                link("t", "c", None, None),
                link("c", "w", Some("yes"), None),
                link("w", "h", None, Some(WaitOutcome::Event)),
                link("h", "e", Some("failed"), None),
            ],
        };
        assert_eq!(next(&g, "t", None, None), Next::Step("c".into()));
        assert_eq!(next(&g, "c", Some("yes"), None), Next::Step("w".into()));
        assert_eq!(next(&g, "c", Some("no"), None), Next::End, "no `no` link: the execution completes");
        assert_eq!(next(&g, "w", None, Some(WaitOutcome::Event)), Next::Step("h".into()));
        assert_eq!(
            next(&g, "w", None, Some(WaitOutcome::Timeout)),
            Next::End,
            "a timeout without a TIMEOUT link completes"
        );
        assert_eq!(next(&g, "h", Some("failed"), None), Next::Step("e".into()));
        assert_eq!(next(&g, "h", None, None), Next::End);
        assert_eq!(next(&g, "e", None, None), Next::End);
        assert_eq!(at_path(&json!({"a": {"b": 3}}), &["a".into(), "b".into()]), Some(&json!(3)));
    }
}
