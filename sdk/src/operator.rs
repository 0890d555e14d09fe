//! Condition operators (world `operator`): the [`Operator`] trait and its export adapter.

use std::marker::PhantomData;

use herald_sdk_bindings_operator::exports::herald::plugin::{operators as wit_ops, plugin as wit_plugin};
use herald_sdk_bindings_operator::herald::plugin::types as wit;

use crate::types::{Metadata, PluginError, Value, convert_shared_types};

convert_shared_types!(herald_sdk_bindings_operator::herald::plugin::types);

/// One operator a plugin provides (WIT `operator-info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorInfo {
    /// As used in a condition's `operator` field, e.g. `"matchesRegex"`.
    pub name: String,
    /// For people.
    pub description: String,
    /// JSON Schema (as text) of the operand, if published.
    pub operand_schema: Option<String>,
}

impl OperatorInfo {
    /// An operator without an operand schema.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        OperatorInfo { name: name.into(), description: description.into(), operand_schema: None }
    }

    /// Publishes a JSON Schema of the operand.
    pub fn operand_schema(mut self, schema: serde_json::Value) -> Self {
        self.operand_schema = Some(schema.to_string());
        self
    }
}

/// A plugin that provides condition operators for segments, campaign audiences and workflow conditions.
///
/// Export it with [`export_operator!`](crate::export_operator). Operator plugins may use [`log`](crate::log),
/// [`config`](crate::config) and [`clock`](crate::clock), not [`http`](crate::http).
pub trait Operator {
    /// What the plugin is; `kind` must be [`PluginKind::Operator`](crate::PluginKind::Operator) and
    /// `provides` the operator names.
    fn metadata() -> Metadata;

    /// The operators this plugin provides.
    fn operators() -> Vec<OperatorInfo>;

    /// Checks an operand when a condition is saved; the error tells the user what is wrong.
    fn validate_operand(operator: &str, operand: &Value) -> Result<(), String>;

    /// Evaluates `operator` with `operand` against many field values; the result has one entry per
    /// value, in order. A missing field arrives as [`Value::Null`].
    fn evaluate(operator: &str, operand: &Value, values: &[Value]) -> Result<Vec<bool>, PluginError>;
}

/// Adapts an [`Operator`] to the generated `Guest` traits. Used by [`export_operator!`](crate::export_operator).
#[doc(hidden)]
pub struct OperatorExport<T>(PhantomData<T>);

impl<T: Operator> wit_plugin::Guest for OperatorExport<T> {
    fn metadata() -> wit::PluginMetadata {
        T::metadata().into()
    }
}

impl<T: Operator> wit_ops::Guest for OperatorExport<T> {
    fn operators() -> Vec<wit_ops::OperatorInfo> {
        T::operators()
            .into_iter()
            .map(|o| wit_ops::OperatorInfo {
                name: o.name,
                description: o.description,
                operand_schema: o.operand_schema,
            })
            .collect()
    }

    fn validate_operand(operator: String, operand: wit::Value) -> Result<(), String> {
        T::validate_operand(&operator, &operand.into())
    }

    fn evaluate(operator: String, operand: wit::Value, values: Vec<wit::Value>) -> Result<Vec<bool>, wit::PluginError> {
        let values: Vec<Value> = values.into_iter().map(Value::from).collect();
        let result = T::evaluate(&operator, &operand.into(), &values)?;
        if result.len() != values.len() {
            return Err(wit::PluginError {
                code: "bad_result".into(),
                message: format!("operator {operator} returned {} results for {} values", result.len(), values.len()),
                retryable: false,
            });
        }
        Ok(result)
    }
}

impl From<wit::Value> for Value {
    fn from(v: wit::Value) -> Self {
        match v {
            wit::Value::Null => Value::Null,
            wit::Value::Boolean(b) => Value::Boolean(b),
            wit::Value::Integer(n) => Value::Integer(n),
            wit::Value::Float(f) => Value::Float(f),
            wit::Value::Text(s) => Value::Text(s),
            wit::Value::Timestamp(t) => Value::Timestamp(t),
            wit::Value::TextList(items) => Value::TextList(items),
            wit::Value::Json(s) => Value::Json(s),
        }
    }
}

impl From<Value> for wit::Value {
    fn from(v: Value) -> Self {
        match v {
            Value::Null => wit::Value::Null,
            Value::Boolean(b) => wit::Value::Boolean(b),
            Value::Integer(n) => wit::Value::Integer(n),
            Value::Float(f) => wit::Value::Float(f),
            Value::Text(s) => wit::Value::Text(s),
            Value::Timestamp(t) => wit::Value::Timestamp(t),
            Value::TextList(items) => wit::Value::TextList(items),
            Value::Json(s) => wit::Value::Json(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PluginKind;
    use wit_ops::Guest as _;

    struct Wrong;

    impl Operator for Wrong {
        fn metadata() -> Metadata {
            Metadata::new("wrong", "1.0.0", PluginKind::Operator).provides(["short"])
        }
        fn operators() -> Vec<OperatorInfo> {
            vec![OperatorInfo::new("short", "returns too few results")]
        }
        fn validate_operand(_: &str, operand: &Value) -> Result<(), String> {
            if operand.is_null() { Err("operand required".into()) } else { Ok(()) }
        }
        fn evaluate(_: &str, _: &Value, _: &[Value]) -> Result<Vec<bool>, PluginError> {
            Ok(vec![true])
        }
    }

    #[test]
    fn adapter_checks_result_length() {
        let err = OperatorExport::<Wrong>::evaluate("short".into(), wit::Value::Null, vec![wit::Value::Null; 3])
            .expect_err("too few results");
        assert_eq!(err.code, "bad_result");
        let ok = OperatorExport::<Wrong>::evaluate("short".into(), wit::Value::Null, vec![wit::Value::Null]);
        assert_eq!(ok.ok(), Some(vec![true]));
    }

    #[test]
    fn adapter_converts_values() {
        assert!(OperatorExport::<Wrong>::validate_operand("short".into(), wit::Value::Null).is_err());
        assert!(OperatorExport::<Wrong>::validate_operand("short".into(), wit::Value::Integer(1)).is_ok());
        let v: wit::Value = Value::TextList(vec!["a".into()]).into();
        assert_eq!(Value::from(v), Value::TextList(vec!["a".into()]));
    }
}
