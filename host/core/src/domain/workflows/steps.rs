//! The configs of the built-in step types, checked when a step is saved (docs/behaviour.md#workflows):
//! each problem names its field (`config.amount`) for a 422. Plugin step types are checked by their
//! plugin; the host only requires their config to be a JSON object of bounded size.
//!
//! Must not import: salvo, surrealdb, tokio.

use serde_json::{Map, Value, json};

use super::{CONDITION, DELAY, EXIT, SEND_EMAIL, Step, TRIGGER, WAIT_FOR_EVENT};
use crate::domain::conditions::{self, Field, Filter, Op};

/// Largest step config, in bytes of JSON.
pub const MAX_CONFIG_BYTES: usize = 16 * 1024;
/// Longest DELAY and WAIT_FOR_EVENT timeout, in seconds.
pub const MAX_WAIT_SECS: i64 = 365 * 86_400;
/// Longest event name a step names.
const MAX_EVENT_NAME: usize = 255;

/// One thing wrong with a step: the field, a code and a message (a 422 field error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub field: String,
    pub code: &'static str,
    pub message: String,
}

fn problem(field: &str, code: &'static str, message: impl Into<String>) -> Problem {
    Problem { field: field.to_string(), code, message: message.into() }
}

/// Where a CONDITION step's field reads from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// The contact (and what the segment engine knows of it: events, segments), as in a segment filter.
    Contact,
    /// The execution's context: `event.<path>` (the trigger event's data and what later events merged
    /// in) or `workflow.<path>`; the path's keys.
    Context(Vec<String>),
}

/// A checked CONDITION step: the filter, with its field read from `source`.
#[derive(Debug, Clone, PartialEq)]
pub struct StepCondition {
    pub source: Source,
    pub filter: Filter,
}

/// Parses a CONDITION step's config `{field, operator, value?, unit?}`. Fields: `contact.email`,
/// `contact.subscribed`, `contact.createdAt`, `contact.updatedAt`, `data.<path>`, `segment.<id>`,
/// `email.<activity>`; `event.<name>` with an event operator (`triggered`, ...) is whether the contact
/// triggered that event, `event.<path>` with any other operator and `workflow.<path>` read the
/// execution's context.
pub fn parse_condition(config: &Value, is_plugin_operator: &dyn Fn(&str) -> bool) -> Result<StepCondition, String> {
    let Some(o) = config.as_object() else { return Err("config must be an object".into()) };
    let field = match o.get("field") {
        Some(Value::String(s)) => s.trim().to_string(),
        _ => return Err("field is required (a string such as contact.email or data.plan)".into()),
    };
    let op = o.get("operator").and_then(Value::as_str).unwrap_or("");
    let event_op = Op::builtin(op).is_some_and(|o| o.is_event_op());
    let (source, as_filter) = if let Some(rest) = field.strip_prefix("contact.") {
        (Source::Contact, rest.to_string())
    } else if let Some(path) = field.strip_prefix("event.").filter(|_| !event_op) {
        (Source::Context(path.split('.').map(str::to_string).collect()), format!("data.{path}"))
    } else if let Some(path) = field.strip_prefix("workflow.") {
        (Source::Context(path.split('.').map(str::to_string).collect()), format!("data.{path}"))
    } else {
        (Source::Contact, field.clone())
    };
    let mut synthetic = o.clone();
    synthetic.insert("field".into(), Value::String(as_filter.clone()));
    let filter = conditions::parse_one(&Value::Object(synthetic), "config", is_plugin_operator)
        .map_err(|e| e.0.replacen(&format!("config ({as_filter})"), &format!("config ({field})"), 1))?;
    if let Source::Context(keys) = &source
        && keys.iter().any(String::is_empty)
    {
        return Err(format!("config ({field}): the path after event. or workflow. needs keys"));
    }
    Ok(StepCondition { source, filter: Filter { field_name: field, ..filter } })
}

/// A positive whole number (JSON number or numeric string), for amounts and timeouts.
fn whole(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => {
            n.as_i64().or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e15).map(|f| f as i64))
        }
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Checks a built-in step's config (and `templateId` for SEND_EMAIL) and answers the config to store
/// (defaults filled in). `TRIGGER` steps are made with their workflow, never through the steps API.
pub fn check_builtin(
    kind: &str,
    config: &Value,
    template_id: Option<&str>,
    is_plugin_operator: &dyn Fn(&str) -> bool,
) -> Result<Value, Vec<Problem>> {
    let Some(o) = config.as_object() else {
        return Err(vec![problem("config", "invalid_type", "config must be a JSON object")]);
    };
    let mut out = o.clone();
    let mut problems = Vec::new();
    match kind {
        TRIGGER => problems.push(problem(
            "type",
            "invalid_enum_value",
            "a workflow has one TRIGGER step, made with the workflow; change it with PATCH /workflows/:id",
        )),
        SEND_EMAIL => {
            if template_id.is_none_or(|t| t.trim().is_empty()) {
                problems.push(problem("templateId", "required", "a SEND_EMAIL step needs templateId"));
            }
            match o.get("recipient") {
                None | Some(Value::Null) => {
                    out.insert("recipient".into(), json!({ "type": "CONTACT" }));
                }
                Some(Value::Object(r)) => match r.get("type").and_then(Value::as_str) {
                    Some("CONTACT") | None => {
                        out.insert("recipient".into(), json!({ "type": "CONTACT" }));
                    }
                    Some("CUSTOM") => match r.get("customEmail") {
                        Some(Value::String(e)) if !e.trim().is_empty() && e.len() <= 320 && (e.contains('@') || e.contains("{{")) => {
                            out.insert("recipient".into(), json!({ "type": "CUSTOM", "customEmail": e.trim() }));
                        }
                        _ => problems.push(problem(
                            "config.recipient.customEmail",
                            "invalid_string",
                            "a CUSTOM recipient needs customEmail: an address (at most 320 characters) or a {{variable}} that renders one",
                        )),
                    },
                    Some(other) => problems.push(problem(
                        "config.recipient.type",
                        "invalid_enum_value",
                        format!("recipient.type must be CONTACT or CUSTOM, got {other:?}"),
                    )),
                },
                Some(_) => problems.push(problem("config.recipient", "invalid_type", "recipient must be an object {type, customEmail?}")),
            }
        }
        DELAY => {
            let amount = o.get("amount").and_then(whole);
            let unit =
                o.get("unit").and_then(Value::as_str).and_then(|u| conditions::unit_ms(u).map(|ms| (u, ms / 1000)));
            match amount {
                Some(a) if a > 0 => {}
                _ => problems.push(problem("config.amount", "invalid_type", "amount must be a positive whole number")),
            }
            if unit.is_none() {
                problems.push(problem("config.unit", "invalid_enum_value", "unit must be minutes, hours or days"));
            }
            if let (Some(a), Some((u, secs))) = (amount, unit)
                && a > 0
            {
                if a.saturating_mul(secs) > MAX_WAIT_SECS {
                    problems.push(problem("config.amount", "too_big", "a delay is at most 365 days"));
                } else {
                    out.insert("amount".into(), json!(a));
                    out.insert("unit".into(), json!(u));
                }
            }
        }
        WAIT_FOR_EVENT => {
            match o.get("eventName") {
                Some(Value::String(n)) if !n.trim().is_empty() && n.trim().chars().count() <= MAX_EVENT_NAME => {
                    out.insert("eventName".into(), json!(n.trim()));
                }
                _ => problems.push(problem(
                    "config.eventName",
                    "invalid_string",
                    "eventName must be the name of the event to wait for (1 to 255 characters)",
                )),
            }
            match o.get("timeout") {
                None | Some(Value::Null) => {
                    out.remove("timeout");
                }
                Some(v) => match whole(v) {
                    Some(t) if t > 0 && t <= MAX_WAIT_SECS => {
                        out.insert("timeout".into(), json!(t));
                    }
                    Some(t) if t > MAX_WAIT_SECS => problems.push(problem(
                        "config.timeout",
                        "too_big",
                        "timeout is at most 365 days (31536000 seconds)",
                    )),
                    _ => problems.push(problem(
                        "config.timeout",
                        "invalid_type",
                        "timeout must be a positive whole number of seconds",
                    )),
                },
            }
        }
        CONDITION => {
            if let Err(m) = parse_condition(config, is_plugin_operator) {
                problems.push(problem("config", "invalid_condition", m));
            }
        }
        EXIT => match o.get("reason") {
            None | Some(Value::Null) => {}
            Some(Value::String(r)) if r.chars().count() <= 500 => {}
            Some(_) => problems.push(problem(
                "config.reason",
                "invalid_string",
                "reason must be text of at most 500 characters",
            )),
        },
        _ => problems.push(problem("type", "invalid_enum_value", format!("{kind} is not a built-in step type"))),
    }
    if problems.is_empty() { Ok(Value::Object(out)) } else { Err(problems) }
}

/// Checks what every step config shares: a JSON object of at most [`MAX_CONFIG_BYTES`].
pub fn check_shape(config: &Value) -> Result<(), Problem> {
    if !config.is_object() {
        return Err(problem("config", "invalid_type", "config must be a JSON object"));
    }
    let size = serde_json::to_string(config).map(|s| s.len()).unwrap_or(usize::MAX);
    if size > MAX_CONFIG_BYTES {
        return Err(problem("config", "too_big", format!("config is at most {} KiB of JSON", MAX_CONFIG_BYTES / 1024)));
    }
    Ok(())
}

/// The event a step waits for or asks about, for usage reports.
pub(super) fn event_of(s: &Step) -> Option<String> {
    match s.kind.as_str() {
        WAIT_FOR_EVENT => s.config.get("eventName").and_then(Value::as_str).map(str::to_string),
        CONDITION => match parse_condition(&s.config, &|_| true).ok()?.filter.field {
            Field::Event(name) => Some(name),
            _ => None,
        },
        _ => None,
    }
}

/// The top-level data key a CONDITION step reads.
pub(super) fn data_key_of(s: &Step) -> Option<String> {
    if s.kind != CONDITION {
        return None;
    }
    let c = parse_condition(&s.config, &|_| true).ok()?;
    match (c.source, c.filter.field) {
        (Source::Contact, Field::Data(keys)) => keys.into_iter().next(),
        _ => None,
    }
}

/// The segment a CONDITION step asks about.
pub(super) fn segment_of(s: &Step) -> Option<String> {
    if s.kind != CONDITION {
        return None;
    }
    match parse_condition(&s.config, &|_| true).ok()?.filter.field {
        Field::Segment(id) => Some(id),
        _ => None,
    }
}

/// The TRIGGER step's config for an EVENT trigger.
pub fn trigger_config(event_name: &str) -> Value {
    let mut m = Map::new();
    m.insert("eventName".into(), Value::String(event_name.to_string()));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_plugins(_: &str) -> bool {
        false
    }

    fn fields(kind: &str, config: Value, template: Option<&str>) -> Vec<String> {
        match check_builtin(kind, &config, template, &no_plugins) {
            Ok(_) => vec![],
            Err(p) => p.into_iter().map(|p| p.field).collect(),
        }
    }

    #[test]
    fn each_builtin_config_is_checked_field_by_field() {
        let cases: Vec<(&str, Value, Option<&str>, Vec<&str>)> = vec![
            (SEND_EMAIL, json!({}), Some("t1"), vec![]),
            (SEND_EMAIL, json!({}), None, vec!["templateId"]),
            (SEND_EMAIL, json!({"recipient": {"type": "CUSTOM"}}), Some("t1"), vec!["config.recipient.customEmail"]),
            (SEND_EMAIL, json!({"recipient": {"type": "CUSTOM", "customEmail": "{{data.boss}}"}}), Some("t1"), vec![]),
            (SEND_EMAIL, json!({"recipient": {"type": "TEAM"}}), Some("t1"), vec!["config.recipient.type"]),
            (SEND_EMAIL, json!({"recipient": 3}), Some("t1"), vec!["config.recipient"]),
            (DELAY, json!({"amount": 2, "unit": "hours"}), None, vec![]),
            (DELAY, json!({"amount": "2", "unit": "days"}), None, vec![]),
            (DELAY, json!({"amount": 0, "unit": "hours"}), None, vec!["config.amount"]),
            (DELAY, json!({"amount": 1.5, "unit": "hours"}), None, vec!["config.amount"]),
            (DELAY, json!({"amount": 1, "unit": "weeks"}), None, vec!["config.unit"]),
            (DELAY, json!({}), None, vec!["config.amount", "config.unit"]),
            (DELAY, json!({"amount": 365, "unit": "days"}), None, vec![]),
            (DELAY, json!({"amount": 366, "unit": "days"}), None, vec!["config.amount"]),
            (DELAY, json!({"amount": i64::MAX, "unit": "days"}), None, vec!["config.amount"]),
            (WAIT_FOR_EVENT, json!({"eventName": "purchase", "timeout": 3600}), None, vec![]),
            (WAIT_FOR_EVENT, json!({"eventName": "purchase"}), None, vec![]),
            (WAIT_FOR_EVENT, json!({"eventName": " "}), None, vec!["config.eventName"]),
            (WAIT_FOR_EVENT, json!({"eventName": "a", "timeout": -1}), None, vec!["config.timeout"]),
            (WAIT_FOR_EVENT, json!({"eventName": "a", "timeout": 31_536_001}), None, vec!["config.timeout"]),
            (CONDITION, json!({"field": "contact.subscribed", "operator": "equals", "value": true}), None, vec![]),
            (CONDITION, json!({"field": "data.plan", "operator": "equals", "value": "pro"}), None, vec![]),
            (CONDITION, json!({"field": "event.amount", "operator": "greaterThan", "value": 10}), None, vec![]),
            (
                CONDITION,
                json!({"field": "event.purchase", "operator": "triggeredWithin", "value": 2, "unit": "days"}),
                None,
                vec![],
            ),
            (CONDITION, json!({"field": "data.plan", "operator": "resembles", "value": 1}), None, vec!["config"]),
            (CONDITION, json!({"field": "data.age", "operator": "within"}), None, vec!["config"]),
            (CONDITION, json!({"operator": "exists"}), None, vec!["config"]),
            (EXIT, json!({"reason": "done"}), None, vec![]),
            (EXIT, json!({"reason": 5}), None, vec!["config.reason"]),
            (TRIGGER, json!({}), None, vec!["type"]),
            (DELAY, json!([1]), None, vec!["config"]),
        ];
        for (kind, config, template, want) in cases {
            assert_eq!(fields(kind, config.clone(), template), want, "{kind} {config}");
        }
    }

    #[test]
    fn defaults_and_normal_forms_are_stored() {
        let c = check_builtin(SEND_EMAIL, &json!({}), Some("t"), &no_plugins).unwrap();
        assert_eq!(c["recipient"], json!({"type": "CONTACT"}));
        let c = check_builtin(DELAY, &json!({"amount": "3", "unit": "minutes"}), None, &no_plugins).unwrap();
        assert_eq!((c["amount"].clone(), c["unit"].clone()), (json!(3), json!("minutes")));
        let c =
            check_builtin(WAIT_FOR_EVENT, &json!({"eventName": " paid ", "timeout": null}), None, &no_plugins).unwrap();
        assert_eq!(c, json!({"eventName": "paid"}));
    }

    #[test]
    fn condition_fields_read_the_contact_or_the_context() {
        let c =
            parse_condition(&json!({"field": "event.order.total", "operator": "greaterThan", "value": 5}), &no_plugins)
                .unwrap();
        assert_eq!(c.source, Source::Context(vec!["order".into(), "total".into()]));
        let c = parse_condition(&json!({"field": "event.signup", "operator": "triggered"}), &no_plugins).unwrap();
        assert_eq!((c.source, c.filter.field), (Source::Contact, Field::Event("signup".into())));
        let c = parse_condition(&json!({"field": "workflow.source", "operator": "exists"}), &no_plugins).unwrap();
        assert_eq!(c.source, Source::Context(vec!["source".into()]));
        let c = parse_condition(&json!({"field": "contact.email", "operator": "contains", "value": "@x"}), &no_plugins)
            .unwrap();
        assert_eq!(
            (c.source, c.filter.field, c.filter.field_name),
            (Source::Contact, Field::Email, "contact.email".to_string())
        );
        let e =
            parse_condition(&json!({"field": "contact.email", "operator": "greaterThan"}), &no_plugins).unwrap_err();
        assert!(e.starts_with("config (contact.email): operator greaterThan needs a value"), "{e}");
        let plugin = |n: &str| n == "isCorporate";
        assert!(parse_condition(&json!({"field": "contact.email", "operator": "isCorporate"}), &plugin).is_ok());
    }

    #[test]
    fn a_config_is_bounded_in_size() {
        assert!(check_shape(&json!({"a": "x".repeat(MAX_CONFIG_BYTES)})).is_err());
        assert!(check_shape(&json!({"a": "x"})).is_ok());
        assert_eq!(check_shape(&json!("x")).unwrap_err().code, "invalid_type");
    }
}
