//! Checks every plugin of a kind should pass, for the plugin's own `cargo test` (native builds only).
//!
//! ```ignore
//! #[test]
//! fn compliance() {
//!     herald_sdk::compliance::check_operator::<MyOperators>();
//!     herald_sdk::compliance::check_manifest(include_str!("../manifest.toml"), &MyOperators::metadata());
//! }
//! ```
//!
//! Each check panics with the list of problems it found. Calls run under a fresh
//! [`crate::mock::MockHost`] without config, secrets or HTTP answers; a panic inside the
//! plugin counts as a problem (in a real host it would trap the call).
//!
//! # The manifest
//!
//! Herald loads `<name>.wasm` with its manifest `<name>.toml`:
//!
//! ```toml
//! name = "webhook"        # the plugin's name, equal to metadata().name
//! abi = "1.1.0"           # the herald:plugin version it was built against
//! kind = "step"           # operator | step | transport
//! [capabilities]
//! http = ["*"]            # hosts it may call: "*" (any public host), "api.example.com", "*.amazonaws.com", "host:port"
//! secrets = ["signing_key"]
//! [limits]                # optional
//! timeout_ms = 10000
//! memory_mb = 64
//! [config]                # optional default config values (strings)
//! region = "us-east-1"
//! ```

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::mock::MockHost;
use crate::{ABI_VERSION, InboundRequest, Metadata, Operator, Outgoing, PluginKind, Step, StepInput, Transport, Value};

fn report(what: &str, problems: Vec<String>) {
    if !problems.is_empty() {
        panic!("{what} has {} problem(s):\n  - {}", problems.len(), problems.join("\n  - "));
    }
}

/// Runs `f` under a fresh mock host; a panic becomes `Err` with its message.
fn guarded<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    let _host = MockHost::new().now_ms(1_700_000_000_000).install();
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default()
    })
}

fn check_metadata(m: &Metadata, kind: PluginKind, problems: &mut Vec<String>) {
    let name_ok = !m.name.is_empty()
        && m.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !m.name.starts_with('-')
        && !m.name.ends_with('-');
    if !name_ok {
        problems.push(format!("metadata name {:?} is not lowercase letters, digits and dashes", m.name));
    }
    let parts: Vec<&str> = m.version.split(['-', '+']).next().unwrap_or("").split('.').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        problems.push(format!("metadata version {:?} is not semver (MAJOR.MINOR.PATCH)", m.version));
    }
    if m.kind != kind {
        problems.push(format!("metadata kind is {} but the plugin implements {}", m.kind, kind));
    }
    if m.description.trim().is_empty() {
        problems.push("metadata description is empty".into());
    }
    if m.provides.is_empty() {
        problems.push("metadata provides nothing".into());
    }
}

fn check_provides(m: &Metadata, listed: &[String], what: &str, problems: &mut Vec<String>) {
    let mut seen = HashSet::new();
    for name in listed {
        if !seen.insert(name) {
            problems.push(format!("{what} {name:?} is listed twice"));
        }
    }
    let provided: HashSet<&String> = m.provides.iter().collect();
    let listed: HashSet<&String> = listed.iter().collect();
    if provided != listed {
        problems.push(format!("metadata provides {:?} but the plugin lists {what}s {:?}", m.provides, listed));
    }
}

fn check_schema(owner: &str, schema: Option<&String>, problems: &mut Vec<String>) {
    if let Some(s) = schema
        && !serde_json::from_str::<serde_json::Value>(s).is_ok_and(|v| v.is_object())
    {
        problems.push(format!("{owner}: the published schema is not a JSON object"));
    }
}

fn sample_values() -> Vec<Value> {
    vec![
        Value::Null,
        Value::Boolean(true),
        Value::Integer(-1),
        Value::Float(1.5),
        Value::Text(String::new()),
        Value::Text("ada@example.com".into()),
        Value::Timestamp(0),
        Value::TextList(vec!["a".into(), String::new()]),
        Value::Json("{\"a\":[1,2]}".into()),
    ]
}

/// Checks an [`Operator`]: metadata (name, semver version, kind, description), `provides` equal to
/// the listed operators, schemas that are JSON objects, unknown operators refused, and for every
/// operator and sample operand: no panic, and one result per value when evaluation succeeds.
pub fn check_operator<T: Operator>() {
    let mut problems = Vec::new();
    let meta = T::metadata();
    check_metadata(&meta, PluginKind::Operator, &mut problems);
    let ops = T::operators();
    let names: Vec<String> = ops.iter().map(|o| o.name.clone()).collect();
    check_provides(&meta, &names, "operator", &mut problems);
    for op in &ops {
        check_schema(&op.name, op.operand_schema.as_ref(), &mut problems);
    }
    match guarded(|| T::validate_operand("no-such-operator-xyz", &Value::Null)) {
        Ok(Ok(())) => problems.push("validate_operand accepts an unknown operator".into()),
        Ok(Err(_)) => {}
        Err(p) => problems.push(format!("validate_operand panics on an unknown operator: {p}")),
    }
    match guarded(|| T::evaluate("no-such-operator-xyz", &Value::Null, &[Value::Null])) {
        Ok(Ok(_)) => problems.push("evaluate accepts an unknown operator".into()),
        Ok(Err(_)) => {}
        Err(p) => problems.push(format!("evaluate panics on an unknown operator: {p}")),
    }
    let values = sample_values();
    for op in &names {
        for operand in sample_values() {
            if let Err(p) = guarded(|| T::validate_operand(op, &operand)) {
                problems.push(format!("validate_operand({op}, {operand:?}) panics: {p}"));
            }
            match guarded(|| T::evaluate(op, &operand, &values)) {
                Ok(Ok(r)) if r.len() != values.len() => problems.push(format!(
                    "evaluate({op}, {operand:?}) returns {} results for {} values",
                    r.len(),
                    values.len()
                )),
                Ok(_) => {}
                Err(p) => problems.push(format!("evaluate({op}, {operand:?}) panics: {p}")),
            }
            match guarded(|| T::evaluate(op, &operand, &[])) {
                Ok(Ok(r)) if !r.is_empty() => problems.push(format!("evaluate({op}) returns results for no values")),
                Ok(_) => {}
                Err(p) => problems.push(format!("evaluate({op}, {operand:?}, []) panics: {p}")),
            }
        }
    }
    report(&format!("operator plugin {:?}", meta.name), problems);
}

/// Checks a [`Step`]: metadata, `provides` equal to the listed step types (upper case, digits and
/// underscores), schemas that are JSON objects, unknown step types refused, `validate_config` and
/// `execute` never panicking on odd config.
pub fn check_step<T: Step>() {
    let mut problems = Vec::new();
    let meta = T::metadata();
    check_metadata(&meta, PluginKind::Step, &mut problems);
    let types = T::step_types();
    let names: Vec<String> = types.iter().map(|t| t.name.clone()).collect();
    check_provides(&meta, &names, "step type", &mut problems);
    for t in &types {
        if t.name.is_empty() || !t.name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_') {
            problems.push(format!("step type {:?} is not upper case letters, digits and underscores", t.name));
        }
        check_schema(&t.name, t.config_schema.as_ref(), &mut problems);
    }
    match guarded(|| T::validate_config("NO_SUCH_STEP_XYZ", &serde_json::json!({}))) {
        Ok(Ok(())) => problems.push("validate_config accepts an unknown step type".into()),
        Ok(Err(e)) if e.is_empty() => problems.push("validate_config refuses without saying why".into()),
        Ok(Err(_)) => {}
        Err(p) => problems.push(format!("validate_config panics on an unknown step type: {p}")),
    }
    let odd = [
        serde_json::json!(null),
        serde_json::json!([]),
        serde_json::json!("x"),
        serde_json::json!({}),
        serde_json::json!({"url": 5, "updates": "x", "method": ["GET"]}),
    ];
    for t in &names {
        for config in &odd {
            match guarded(|| T::validate_config(t, config)) {
                Ok(Err(e)) if e.is_empty() => problems.push(format!("validate_config({t}) refuses without saying why")),
                Ok(_) => {}
                Err(p) => problems.push(format!("validate_config({t}, {config}) panics: {p}")),
            }
            if let Err(p) = guarded(|| T::execute(&StepInput::new(t.clone(), config.clone()))) {
                problems.push(format!("execute({t}, {config}) panics: {p}"));
            }
        }
    }
    report(&format!("step plugin {:?}", meta.name), problems);
}

/// Checks a [`Transport`]: metadata, `provides` containing [`Transport::name`], `send` without any
/// configuration failing cleanly (no panic), and `parse_notifications` refusing unauthenticated or
/// garbage requests.
pub fn check_transport<T: Transport>() {
    let mut problems = Vec::new();
    let meta = T::metadata();
    check_metadata(&meta, PluginKind::Transport, &mut problems);
    let name = T::name();
    if meta.provides != [name.clone()] {
        problems.push(format!("metadata provides {:?}, expected exactly the transport name {name:?}", meta.provides));
    }
    match guarded(|| T::send(&Outgoing::simple("a@example.com", "b@example.com", "compliance", "body"))) {
        Ok(Ok(_)) => problems.push("send succeeds without any configuration or HTTP answer".into()),
        Ok(Err(_)) => {}
        Err(p) => problems.push(format!("send panics without configuration: {p}")),
    }
    let garbage = [
        InboundRequest::default(),
        InboundRequest::new("not json"),
        InboundRequest::new("{\"type\":\"bounce\",\"messageId\":\"x\"}"),
        InboundRequest::new("[{\"type\":\"delivery\"}]").with_header("Content-Type", "application/json"),
    ];
    for req in &garbage {
        match guarded(|| T::parse_notifications(req)) {
            Ok(Ok(n)) => problems.push(format!("parse_notifications accepts an unauthenticated request: {n:?}")),
            Ok(Err(_)) => {}
            Err(p) => problems.push(format!("parse_notifications panics: {p}")),
        }
    }
    report(&format!("transport plugin {:?}", meta.name), problems);
}

/// Checks a manifest (the text of `<name>.toml`) against the plugin's metadata: `name` equal to
/// `metadata.name`, `abi` equal to [`ABI_VERSION`], `kind` equal to `metadata.kind`,
/// `capabilities.http` and `capabilities.secrets` lists of strings, `limits` positive integers
/// (`timeout_ms`, `memory_mb`), `config` string values, and no unknown keys.
pub fn check_manifest(manifest: &str, metadata: &Metadata) {
    let mut problems = Vec::new();
    let table: toml::Table = match manifest.parse() {
        Ok(t) => t,
        Err(e) => panic!("the manifest is not valid TOML: {e}"),
    };
    let text = |key: &str| table.get(key).and_then(toml::Value::as_str);
    if text("name") != Some(metadata.name.as_str()) {
        problems.push(format!("name is {:?}, metadata says {:?}", text("name"), metadata.name));
    }
    if text("abi") != Some(ABI_VERSION) {
        problems.push(format!("abi is {:?}, the SDK builds against {ABI_VERSION:?}", text("abi")));
    }
    if text("kind") != Some(metadata.kind.as_str()) {
        problems.push(format!("kind is {:?}, metadata says {:?}", text("kind"), metadata.kind.as_str()));
    }
    for (key, value) in &table {
        match (key.as_str(), value) {
            ("name" | "abi" | "kind", _) => {}
            ("capabilities", toml::Value::Table(caps)) => {
                for (cap, list) in caps {
                    let is_list =
                        list.as_array().is_some_and(|a| a.iter().all(|v| v.as_str().is_some_and(|s| !s.is_empty())));
                    if !matches!(cap.as_str(), "http" | "secrets") {
                        problems.push(format!("unknown capability {cap:?}"));
                    } else if !is_list {
                        problems.push(format!("capabilities.{cap} is not a list of non-empty strings"));
                    }
                }
            }
            ("limits", toml::Value::Table(limits)) => {
                for (limit, v) in limits {
                    if !matches!(limit.as_str(), "timeout_ms" | "memory_mb") {
                        problems.push(format!("unknown limit {limit:?}"));
                    } else if v.as_integer().is_none_or(|n| n <= 0) {
                        problems.push(format!("limits.{limit} is not a positive integer"));
                    }
                }
            }
            ("config", toml::Value::Table(config)) => {
                for (k, v) in config {
                    if v.as_str().is_none() {
                        problems.push(format!("config.{k} is not a string"));
                    }
                }
            }
            (other, _) => problems.push(format!("unknown or malformed key {other:?}")),
        }
    }
    report(&format!("manifest of {:?}", metadata.name), problems);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{OperatorInfo, PluginError};

    struct Good;

    impl Operator for Good {
        fn metadata() -> Metadata {
            Metadata::new("good-ops", "1.2.3", PluginKind::Operator).description("d").provides(["isTrue"])
        }
        fn operators() -> Vec<OperatorInfo> {
            vec![OperatorInfo::new("isTrue", "the field is true")]
        }
        fn validate_operand(op: &str, _: &Value) -> Result<(), String> {
            if op == "isTrue" { Ok(()) } else { Err(format!("unknown operator {op}")) }
        }
        fn evaluate(op: &str, _: &Value, values: &[Value]) -> Result<Vec<bool>, PluginError> {
            if op != "isTrue" {
                return Err(PluginError::permanent("unknown_operator", op));
            }
            Ok(values.iter().map(|v| *v == Value::Boolean(true)).collect())
        }
    }

    struct Panicky;

    impl Operator for Panicky {
        fn metadata() -> Metadata {
            Metadata::new("Bad_Name", "1", PluginKind::Step).provides(["x", "y"])
        }
        fn operators() -> Vec<OperatorInfo> {
            vec![OperatorInfo::new("x", "")]
        }
        fn validate_operand(_: &str, _: &Value) -> Result<(), String> {
            Ok(())
        }
        fn evaluate(_: &str, _: &Value, _: &[Value]) -> Result<Vec<bool>, PluginError> {
            panic!("boom")
        }
    }

    #[test]
    fn a_good_operator_passes() {
        check_operator::<Good>();
        check_manifest("name = \"good-ops\"\nabi = \"1.1.0\"\nkind = \"operator\"\n", &Good::metadata());
    }

    #[test]
    fn a_bad_operator_fails_with_every_problem() {
        let err = std::panic::catch_unwind(check_operator::<Panicky>).expect_err("fails");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        for needle in ["not lowercase", "not semver", "kind is step", "description is empty", "provides", "panics"] {
            assert!(msg.contains(needle), "{needle} missing from {msg}");
        }
    }

    #[test]
    fn manifest_problems_are_listed() {
        let manifest = "name = \"other\"\nabi = \"2.0.0\"\nkind = \"step\"\nextra = 1\n\
                        [capabilities]\nhttp = [1]\nfs = [\"/\"]\n[limits]\ntimeout_ms = -1\n[config]\nx = 5\n";
        let err = std::panic::catch_unwind(|| check_manifest(manifest, &Good::metadata())).expect_err("fails");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        for needle in [
            "name is",
            "abi is",
            "kind is",
            "\"extra\"",
            "capabilities.http",
            "\"fs\"",
            "limits.timeout_ms",
            "config.x",
        ] {
            assert!(msg.contains(needle), "{needle} missing from {msg}");
        }
    }
}
