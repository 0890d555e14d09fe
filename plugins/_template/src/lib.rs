//! An example Herald operator plugin: `startsWith` is true when a text field starts with the operand.
//! Copy this crate to start a plugin; README.md says how to build and install it.

use herald_sdk::{Metadata, Operator, OperatorInfo, PluginError, PluginKind, Value};

/// The plugin. The SDK calls its associated functions; it keeps no state between calls.
pub struct Example;

impl Operator for Example {
    fn metadata() -> Metadata {
        Metadata::new("example", env!("CARGO_PKG_VERSION"), PluginKind::Operator)
            .description("startsWith: a text field starts with the operand")
            .provides(["startsWith"])
    }

    fn operators() -> Vec<OperatorInfo> {
        vec![
            OperatorInfo::new("startsWith", "The field is text that starts with the operand")
                .operand_schema(herald_sdk::serde_json::json!({"type": "string", "minLength": 1})),
        ]
    }

    fn validate_operand(operator: &str, operand: &Value) -> Result<(), String> {
        match (operator, operand) {
            ("startsWith", Value::Text(prefix)) if !prefix.is_empty() => Ok(()),
            ("startsWith", _) => Err("startsWith needs a non-empty text operand".into()),
            (other, _) => Err(format!("unknown operator {other}")),
        }
    }

    fn evaluate(operator: &str, operand: &Value, values: &[Value]) -> Result<Vec<bool>, PluginError> {
        Self::validate_operand(operator, operand).map_err(|m| PluginError::permanent("bad_operand", m))?;
        let prefix = operand.as_text().unwrap_or_default();
        // One result per value, in order; a missing (null) field never matches.
        Ok(values.iter().map(|v| v.as_text().is_some_and(|t| t.starts_with(prefix))).collect())
    }
}

herald_sdk::export_operator!(Example);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compliance() {
        herald_sdk::compliance::check_operator::<Example>();
        herald_sdk::compliance::check_manifest(include_str!("../manifest.toml"), &Example::metadata());
    }

    #[test]
    fn starts_with() {
        let values = [Value::from("herald"), Value::from("mail"), Value::Null];
        assert_eq!(Example::evaluate("startsWith", &Value::from("her"), &values), Ok(vec![true, false, false]));
        assert!(Example::validate_operand("startsWith", &Value::Integer(1)).is_err());
    }
}
