//! The runtime's own plugin types: what the rest of Herald sees. Every ABI version's bindings convert to
//! and from these, so callers never depend on a WIT version.

use serde::Serialize;

/// A field value handed to an operator.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Boolean(bool),
    Integer(i64),
    Float(f64),
    Text(String),
    /// milliseconds since the Unix epoch
    Timestamp(i64),
    TextList(Vec<String>),
    /// objects and nested arrays, as JSON text
    Json(String),
}

impl Value {
    /// The natural value of a JSON document (objects and mixed arrays stay JSON).
    pub fn from_json(v: &serde_json::Value) -> Value {
        use serde_json::Value as J;
        match v {
            J::Null => Value::Null,
            J::Bool(b) => Value::Boolean(*b),
            J::Number(n) => match n.as_i64() {
                Some(i) => Value::Integer(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            J::String(s) => Value::Text(s.clone()),
            J::Array(items) if items.iter().all(|i| i.is_string()) => {
                Value::TextList(items.iter().filter_map(|i| i.as_str().map(str::to_string)).collect())
            }
            other => Value::Json(other.to_string()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Operator,
    Step,
    Transport,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Operator => "operator",
            Kind::Step => "step",
            Kind::Transport => "transport",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "operator" => Some(Kind::Operator),
            "step" => Some(Kind::Step),
            "transport" => Some(Kind::Transport),
            _ => None,
        }
    }
}

/// What a plugin says about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Metadata {
    pub name: String,
    pub version: String,
    pub kind: Kind,
    pub description: String,
    pub provides: Vec<String>,
}

/// An error a plugin returned on purpose (not a trap).
#[derive(Debug, Clone, PartialEq)]
pub struct GuestError {
    pub code: String,
    pub message: String,
    pub retryable: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OperatorInfo {
    pub name: String,
    pub description: String,
    #[serde(rename = "operandSchema", skip_serializing_if = "Option::is_none")]
    pub operand_schema: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepTypeInfo {
    pub name: String,
    pub description: String,
    #[serde(rename = "configSchema", skip_serializing_if = "Option::is_none")]
    pub config_schema: Option<String>,
}

/// The contact a step runs for.
#[derive(Debug, Clone, PartialEq)]
pub struct StepContact {
    pub id: String,
    pub email: String,
    pub subscribed: bool,
    /// JSON object
    pub data: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TriggerEvent {
    pub name: String,
    /// JSON object
    pub data: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    pub project_id: String,
    pub workflow_id: String,
    pub execution_id: String,
    pub step_id: String,
    pub attempt: u32,
    pub now_ms: i64,
    pub event: Option<TriggerEvent>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct StepInput {
    pub step_type: String,
    /// JSON accepted by validate-config
    pub config: String,
    pub contact: StepContact,
    pub execution: Execution,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ContactPatch {
    /// JSON object merged into the contact's data with the API's rules
    pub data: Option<String>,
    pub subscribed: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct StepOutcome {
    pub branch: Option<String>,
    pub patch: Option<ContactPatch>,
    /// JSON
    pub output: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Address {
    pub email: String,
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutAttachment {
    pub filename: String,
    pub content_type: String,
    pub content: Vec<u8>,
    pub content_id: Option<String>,
}

/// A message handed to a transport plugin: structured fields and the raw signed bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub mail_from: String,
    pub rcpt_to: Vec<String>,
    pub message_id: String,
    pub from: Address,
    pub reply_to: Option<Address>,
    pub to: Vec<Address>,
    pub cc: Vec<Address>,
    pub subject: String,
    pub html: Option<String>,
    pub text: Option<String>,
    pub headers: Vec<(String, String)>,
    pub attachments: Vec<OutAttachment>,
    pub tags: Vec<(String, String)>,
    pub raw: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SendOutcome {
    Accepted { provider_message_id: Option<String> },
    Temporary(String),
    RateLimited { retry_after_ms: u64 },
    Permanent(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationKind {
    Delivery,
    Bounce,
    Complaint,
}

impl NotificationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NotificationKind::Delivery => "delivery",
            NotificationKind::Bounce => "bounce",
            NotificationKind::Complaint => "complaint",
        }
    }
}

/// A provider's delivery, bounce or complaint notification, parsed by its transport plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub kind: NotificationKind,
    pub message_id: Option<String>,
    pub provider_message_id: Option<String>,
    pub permanent: bool,
    pub reason: Option<String>,
}
