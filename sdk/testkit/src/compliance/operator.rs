//! The operator suite.

use herald_plugin_runtime::Value;
use herald_plugin_runtime::manifest::PluginGrant;

use super::{Report, json_ok, metadata_matches};
use crate::harness::{Harness, HarnessBuilder};

/// How to exercise one operator: an operand it must accept, and optionally operands it must refuse and
/// values with the result they must give.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorCase {
    operator: String,
    example: Value,
    bad_operands: Vec<Value>,
    expected: Vec<(Value, bool)>,
}

impl OperatorCase {
    /// A case for `operator` with an operand it must accept (also used to evaluate).
    pub fn new(operator: impl Into<String>, example_operand: Value) -> OperatorCase {
        OperatorCase { operator: operator.into(), example: example_operand, bad_operands: vec![], expected: vec![] }
    }

    /// An operand validation must refuse with a message (repeatable).
    pub fn bad_operand(mut self, operand: Value) -> OperatorCase {
        self.bad_operands.push(operand);
        self
    }

    /// A value the example operand must match (repeatable).
    pub fn true_for(mut self, value: Value) -> OperatorCase {
        self.expected.push((value, true));
        self
    }

    /// A value the example operand must not match (repeatable).
    pub fn false_for(mut self, value: Value) -> OperatorCase {
        self.expected.push((value, false));
        self
    }
}

/// How to run the [`operator`] suite against one operator plugin: its grant and a case per operator.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OperatorProfile {
    grant: PluginGrant,
    cases: Vec<OperatorCase>,
}

impl OperatorProfile {
    /// A profile with the default grant and no cases yet.
    pub fn new() -> OperatorProfile {
        OperatorProfile::default()
    }

    /// The grant the plugin is loaded with.
    pub fn grant(mut self, grant: PluginGrant) -> OperatorProfile {
        self.grant = grant;
        self
    }

    /// Adds the case of one operator (every operator the plugin lists needs one).
    pub fn operator(mut self, case: OperatorCase) -> OperatorProfile {
        self.cases.push(case);
        self
    }
}

/// One value of each kind, null first.
fn sample_values() -> Vec<Value> {
    vec![
        Value::Null,
        Value::Boolean(true),
        Value::Integer(42),
        Value::Float(-1.5),
        Value::Text("ada@example.org".into()),
        Value::Text(String::new()),
        Value::Timestamp(1_700_000_000_000),
        Value::TextList(vec!["a".into(), "ada@example.org".into()]),
        Value::Json(r#"{"nested":{"list":[1,2]}}"#.into()),
    ]
}

/// Runs the operator suite: see the [module documentation](super).
pub async fn operator(plugin: &HarnessBuilder, profile: &OperatorProfile) -> Report {
    let mut report = Report::new("operator", plugin);
    let harness = match plugin.load(profile.grant.clone()).await {
        Ok(h) => h,
        Err(e) => {
            report.record("loads", Err(e));
            return report;
        }
    };
    let operators = harness.loaded().map(|p| p.operators.clone()).unwrap_or_default();
    report.record("loads", if operators.is_empty() { Err("the plugin provides no operator".into()) } else { Ok(()) });
    let names: Vec<String> = operators.iter().map(|o| o.name.clone()).collect();
    let mut meta = metadata_matches(&harness, "operator", &names);
    for o in &operators {
        let schema =
            o.operand_schema.as_deref().map_or(Ok(()), |s| json_ok(&format!("{}'s operand schema", o.name), s));
        let described = if o.description.trim().is_empty() {
            Err(format!("operator {} has no description", o.name))
        } else {
            Ok(())
        };
        meta = meta.and(schema).and(described);
    }
    report.record("metadata (provides = operators, descriptions, operand schemas)", meta);
    let uncovered: Vec<&String> = names.iter().filter(|n| !profile.cases.iter().any(|c| &c.operator == *n)).collect();
    let unknown: Vec<&String> = profile.cases.iter().map(|c| &c.operator).filter(|o| !names.contains(o)).collect();
    report.record(
        "every operator has a case",
        if uncovered.is_empty() && unknown.is_empty() {
            Ok(())
        } else {
            Err(format!("no case for {uncovered:?}; cases for operators the plugin does not list: {unknown:?}"))
        },
    );
    for case in &profile.cases {
        run_case(&mut report, &harness, case).await;
    }
    report
}

async fn run_case(report: &mut Report, harness: &Harness, case: &OperatorCase) {
    let op = &case.operator;
    let check = match harness.validate_operand(op, &case.example).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(m)) => Err(format!("refused {:?}: {m}", case.example)),
        Err(e) => Err(format!("call error: {e}")),
    };
    report.record(format!("{op}: validates its example operand"), check);
    for bad in &case.bad_operands {
        let check = match harness.validate_operand(op, bad).await {
            Ok(Err(m)) if !m.trim().is_empty() => Ok(()),
            Ok(Err(_)) => Err("refused without a message".into()),
            Ok(Ok(())) => Err("accepted".into()),
            Err(e) => Err(format!("call error: {e}")),
        };
        report.record(format!("{op}: refuses the operand {bad:?}"), check);
    }

    let values = sample_values();
    let check = match harness.evaluate(op, &case.example, &values).await {
        Ok(r) if r.len() == values.len() => match harness.evaluate(op, &case.example, &[]).await {
            Ok(r) if r.is_empty() => Ok(()),
            Ok(r) => Err(format!("{} results for no values", r.len())),
            Err(e) => Err(format!("no values: call error: {e}")),
        },
        Ok(r) => Err(format!("{} results for {} values", r.len(), values.len())),
        Err(e) => Err(format!("call error: {e}")),
    };
    report.record(format!("{op}: one result per value"), check);

    let check = match harness.evaluate(op, &case.example, &[Value::Null, Value::Null]).await {
        Ok(r) if r == [false, false] => Ok(()),
        Ok(r) => Err(format!("null (a missing field) gave {r:?}")),
        Err(e) => Err(format!("call error: {e}")),
    };
    report.record(format!("{op}: null and missing values are false"), check);

    if !case.expected.is_empty() {
        let values: Vec<Value> = case.expected.iter().map(|(v, _)| v.clone()).collect();
        let expected: Vec<bool> = case.expected.iter().map(|(_, b)| *b).collect();
        let check = match harness.evaluate(op, &case.example, &values).await {
            Ok(r) if r == expected => Ok(()),
            Ok(r) => {
                let wrong: Vec<String> = values
                    .iter()
                    .zip(r.iter().zip(&expected))
                    .filter(|(_, (got, want))| got != want)
                    .map(|(v, (got, _))| format!("{v:?} gave {got}"))
                    .collect();
                Err(wrong.join("; "))
            }
            Err(e) => Err(format!("call error: {e}")),
        };
        report.record(format!("{op}: expected results"), check);
    }
}
