//! Types shared by every plugin kind: field values, metadata and errors.

use std::fmt;

/// One field value handed to an operator (WIT `value`). Flat, as in the WIT: objects and nested
/// arrays arrive as [`Value::Json`] text.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// The field is missing or null.
    Null,
    /// A boolean.
    Boolean(bool),
    /// A whole number.
    Integer(i64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    Text(String),
    /// Milliseconds since the Unix epoch, UTC.
    Timestamp(i64),
    /// A list of strings.
    TextList(Vec<String>),
    /// Anything else (an object, a mixed or nested array) as JSON text.
    Json(String),
}

impl Value {
    /// Whether this is [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The string of a [`Value::Text`].
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The number of a [`Value::Integer`], or of a [`Value::Float`] without a fractional part.
    pub fn as_integer(&self) -> Option<i64> {
        match *self {
            Value::Integer(n) => Some(n),
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(f as i64),
            _ => None,
        }
    }

    /// The number of a [`Value::Integer`] or [`Value::Float`].
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Integer(n) => Some(n as f64),
            Value::Float(f) => Some(f),
            _ => None,
        }
    }

    /// The strings of a [`Value::TextList`].
    pub fn as_text_list(&self) -> Option<&[String]> {
        match self {
            Value::TextList(items) => Some(items),
            _ => None,
        }
    }

    /// The WIT name of this value's case (`"null"`, `"text"`, `"text-list"`, ...), for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Boolean(_) => "boolean",
            Value::Integer(_) => "integer",
            Value::Float(_) => "float",
            Value::Text(_) => "text",
            Value::Timestamp(_) => "timestamp",
            Value::TextList(_) => "text-list",
            Value::Json(_) => "json",
        }
    }

    /// This value as JSON: [`Value::Json`] is parsed (invalid JSON becomes a JSON string), a
    /// timestamp becomes its number of milliseconds.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Null => J::Null,
            Value::Boolean(b) => J::Bool(*b),
            Value::Integer(n) | Value::Timestamp(n) => J::from(*n),
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
            Value::Text(s) => J::String(s.clone()),
            Value::TextList(items) => J::Array(items.iter().cloned().map(J::String).collect()),
            Value::Json(text) => serde_json::from_str(text).unwrap_or_else(|_| J::String(text.clone())),
        }
    }

    /// The value that carries `json`: scalars map to their case, an array of strings to
    /// [`Value::TextList`], anything else to [`Value::Json`].
    pub fn from_json(json: &serde_json::Value) -> Value {
        use serde_json::Value as J;
        match json {
            J::Null => Value::Null,
            J::Bool(b) => Value::Boolean(*b),
            J::Number(n) => n.as_i64().map_or_else(|| Value::Float(n.as_f64().unwrap_or(f64::NAN)), Value::Integer),
            J::String(s) => Value::Text(s.clone()),
            J::Array(items) if items.iter().all(J::is_string) => {
                Value::TextList(items.iter().filter_map(|i| i.as_str().map(str::to_owned)).collect())
            }
            other => Value::Json(other.to_string()),
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Boolean(b)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Integer(n)
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}

impl From<Vec<String>> for Value {
    fn from(items: Vec<String>) -> Self {
        Value::TextList(items)
    }
}

/// The three kinds of plugin, one per WIT world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginKind {
    /// Condition operators (world `operator`).
    Operator,
    /// Workflow step types (world `step`).
    Step,
    /// A delivery transport (world `transport`).
    Transport,
}

impl PluginKind {
    /// The kind as written in a manifest: `"operator"`, `"step"` or `"transport"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Operator => "operator",
            PluginKind::Step => "step",
            PluginKind::Transport => "transport",
        }
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a plugin is (WIT `plugin-metadata`), so the host can list it without calling anything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// Stable plugin name, lowercase with dashes, e.g. `"webhook"`; equal to the manifest's `name`.
    pub name: String,
    /// The plugin's own version (semver).
    pub version: String,
    /// Which kind of plugin this is.
    pub kind: PluginKind,
    /// One line for people.
    pub description: String,
    /// The operator names, step types or transport name the plugin provides.
    pub provides: Vec<String>,
}

impl Metadata {
    /// Metadata with an empty description and nothing provided yet.
    pub fn new(name: impl Into<String>, version: impl Into<String>, kind: PluginKind) -> Self {
        Metadata { name: name.into(), version: version.into(), kind, description: String::new(), provides: Vec::new() }
    }

    /// Sets the description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets what the plugin provides (operator names, step types or the transport name).
    pub fn provides<I, S>(mut self, items: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.provides = items.into_iter().map(Into::into).collect();
        self
    }
}

/// A failure of an operator evaluation, a step or a transport call (WIT `plugin-error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    /// Machine-readable, e.g. `"timeout"`, `"bad_response"`.
    pub code: String,
    /// For people.
    pub message: String,
    /// Steps and transports: whether trying again later can succeed.
    pub retryable: bool,
}

impl PluginError {
    /// An error that will not go away by retrying.
    pub fn permanent(code: impl Into<String>, message: impl Into<String>) -> Self {
        PluginError { code: code.into(), message: message.into(), retryable: false }
    }

    /// An error that trying again later may fix (a timeout, a connection failure).
    pub fn retryable(code: impl Into<String>, message: impl Into<String>) -> Self {
        PluginError { code: code.into(), message: message.into(), retryable: true }
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for PluginError {}

/// Conversions between the SDK's types and the `herald:plugin/types` types of one bindings crate
/// (each world's bindings have their own copy of those types).
macro_rules! convert_shared_types {
    ($types:path) => {
        const _: () = {
            use $types as wit;

            impl From<$crate::types::PluginKind> for wit::PluginKind {
                fn from(kind: $crate::types::PluginKind) -> Self {
                    match kind {
                        $crate::types::PluginKind::Operator => wit::PluginKind::Operator,
                        $crate::types::PluginKind::Step => wit::PluginKind::Step,
                        $crate::types::PluginKind::Transport => wit::PluginKind::Transport,
                    }
                }
            }

            impl From<$crate::types::Metadata> for wit::PluginMetadata {
                fn from(m: $crate::types::Metadata) -> Self {
                    wit::PluginMetadata {
                        name: m.name,
                        version: m.version,
                        kind: m.kind.into(),
                        description: m.description,
                        provides: m.provides,
                    }
                }
            }

            impl From<$crate::types::PluginError> for wit::PluginError {
                fn from(e: $crate::types::PluginError) -> Self {
                    wit::PluginError { code: e.code, message: e.message, retryable: e.retryable }
                }
            }
        };
    };
}

pub(crate) use convert_shared_types;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn value_accessors() {
        assert_eq!(Value::from("a").as_text(), Some("a"));
        assert_eq!(Value::Float(4.0).as_integer(), Some(4));
        assert_eq!(Value::Float(4.5).as_integer(), None);
        assert_eq!(Value::Integer(3).as_f64(), Some(3.0));
        assert!(Value::Null.is_null());
        assert_eq!(Value::TextList(vec!["x".into()]).type_name(), "text-list");
    }

    #[test]
    fn value_json_round_trip() {
        assert_eq!(Value::from_json(&json!(["a", "b"])), Value::TextList(vec!["a".into(), "b".into()]));
        assert_eq!(Value::from_json(&json!([1, "b"])), Value::Json("[1,\"b\"]".into()));
        assert_eq!(Value::from_json(&json!(2.5)), Value::Float(2.5));
        assert_eq!(Value::Json("{\"a\":1}".into()).to_json(), json!({"a": 1}));
        assert_eq!(Value::Timestamp(5).to_json(), json!(5));
    }

    #[test]
    fn metadata_builder() {
        let m = Metadata::new("x", "1.0.0", PluginKind::Step).description("d").provides(["A", "B"]);
        assert_eq!(m.provides, vec!["A".to_owned(), "B".to_owned()]);
        assert_eq!(m.kind.to_string(), "step");
    }
}
