//! `POST /v1/send` (docs/behaviour.md#sending): parses the request field by field and hands it to the
//! one entry point of a send, [`crate::services::send::send`], which checks the project's rules and
//! writes each recipient's contact, email and delivery job before answering.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use salvo::oapi::ToSchema;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::auth::{ApiKeyAuth, KeyRule, project};
use super::body::{Fields, Reply, is_email, json_object};
use super::contacts::data_patch;
use super::{idempotency, state};
use crate::api::errors::ApiError;
use crate::error::{Error, FieldError};
use crate::infra::clock::rfc3339;
use crate::services::delivery::StoredAttachment;
use crate::services::send::{
    MAX_ATTACHMENT_BYTES, MAX_ATTACHMENTS, MAX_MESSAGE_BYTES, RESERVED_HEADERS, SendCommand, send as accept_send,
};

pub const MAX_RECIPIENTS: usize = 100;

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct SendBody {
    /// an address, {name, email}, or an array of up to 100 of either
    to: Value,
    /// 1 to 998 characters without line breaks; required without a template
    #[salvo(schema(min_length = 1, max_length = 998, pattern = r"^[^\r\n]*$"))]
    subject: Option<String>,
    /// HTML; required without a template
    #[salvo(schema(min_length = 1))]
    body: Option<String>,
    /// template id; its subject, body, from and reply-to apply unless given here
    #[salvo(schema(min_length = 1, max_length = 100))]
    template: Option<String>,
    /// an address on a verified domain, or {name, email}
    from: Option<Value>,
    /// deprecated sender name, used when `from` is a bare address
    #[salvo(schema(max_length = 200, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"))]
    name: Option<String>,
    /// reply-to address
    #[salvo(schema(format = Email, max_length = 254))]
    reply: Option<String>,
    /// for new contacts default false
    subscribed: Option<bool>,
    /// template variables and contact data (null deletes a key, "" is ignored; `{value, persistent: false}`
    /// is used for this send only)
    data: Option<Map<String, Value>>,
    /// custom headers
    headers: Option<Map<String, Value>>,
    /// at most 10: {filename, content (base64), contentType, contentId?, disposition: attachment|inline}
    #[salvo(schema(max_items = 10))]
    attachments: Option<Vec<Value>>,
}

#[derive(Serialize, ToSchema)]
pub struct SentContact {
    id: String,
    email: String,
}

#[derive(Serialize, ToSchema)]
pub struct SentEmail {
    contact: SentContact,
    /// id of the email record
    email: String,
    /// present when the recipient is on the project's suppression list: why the email is recorded
    /// SUPPRESSED and not sent
    #[serde(skip_serializing_if = "Option::is_none")]
    suppressed: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct SendData {
    emails: Vec<SentEmail>,
    timestamp: String,
}

#[derive(Serialize, ToSchema)]
pub struct SendOut {
    success: bool,
    data: SendData,
}

pub fn router() -> Router {
    Router::with_path("v1/send").hoop(ApiKeyAuth(KeyRule::SecretOnly)).post(send)
}

/// (email, name) of one recipient or sender value.
fn address(f: &mut Vec<FieldError>, path: &str, v: &Value) -> Option<(String, Option<String>)> {
    let (email, name) = match v {
        Value::String(s) => (s.clone(), None),
        Value::Object(o) => {
            let email = match o.get("email") {
                Some(Value::String(s)) => s.clone(),
                other => {
                    f.push(FieldError::new(
                        format!("{path}.email"),
                        "required",
                        "email is required",
                        other.cloned().unwrap_or(Value::Null),
                    ));
                    return None;
                }
            };
            let name = match o.get("name") {
                None | Some(Value::Null) => None,
                Some(Value::String(n)) if !n.contains(['\r', '\n']) && n.chars().count() <= 200 => {
                    Some(n.trim().to_string()).filter(|n| !n.is_empty())
                }
                Some(other) => {
                    f.push(FieldError::new(
                        format!("{path}.name"),
                        "invalid_string",
                        "name must be a string of at most 200 characters without line breaks",
                        other.clone(),
                    ));
                    return None;
                }
            };
            (email, name)
        }
        other => {
            f.push(FieldError::new(path, "invalid_type", "must be an email address or {name, email}", other.clone()));
            return None;
        }
    };
    let e = crate::domain::contacts::normalize_email(&email);
    if !is_email(&e) {
        let p = if v.is_object() { format!("{path}.email") } else { path.to_string() };
        f.push(FieldError::new(p, "invalid_string", "must be a valid email address", Value::String(email)));
        return None;
    }
    Some((e, name))
}

fn headers(errors: &mut Vec<FieldError>, v: Option<&Value>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (name, value) in m {
                let path = format!("headers.{name}");
                let valid_name =
                    !name.is_empty() && name.len() <= 100 && name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
                if !valid_name {
                    errors.push(FieldError::new(
                        &path,
                        "invalid_string",
                        "header names are printable ASCII without colons or line breaks",
                        Value::String(name.clone()),
                    ));
                    continue;
                }
                if RESERVED_HEADERS.contains(&name.to_lowercase().as_str()) {
                    errors.push(FieldError::new(
                        &path,
                        "reserved_header",
                        format!("{name} is set by Herald"),
                        value.clone(),
                    ));
                    continue;
                }
                match value {
                    Value::String(s) if s.contains(['\r', '\n']) => errors.push(FieldError::new(
                        &path,
                        "invalid_string",
                        "header values must not contain line breaks",
                        value.clone(),
                    )),
                    Value::String(s) if s.chars().count() > 998 => errors.push(FieldError::new(
                        &path,
                        "too_big",
                        "header values are at most 998 characters",
                        value.clone(),
                    )),
                    Value::String(s) => out.push((name.clone(), s.clone())),
                    other => errors.push(FieldError::new(
                        &path,
                        "invalid_type",
                        "header values must be strings",
                        other.clone(),
                    )),
                }
            }
        }
        Some(other) => {
            errors.push(FieldError::new("headers", "invalid_type", "headers must be an object", other.clone()))
        }
    }
    out
}

fn attachments(errors: &mut Vec<FieldError>, v: Option<&Value>) -> (Vec<StoredAttachment>, usize) {
    let list = match v {
        None | Some(Value::Null) => return (vec![], 0),
        Some(Value::Array(a)) => a,
        Some(other) => {
            errors.push(FieldError::new("attachments", "invalid_type", "attachments must be an array", other.clone()));
            return (vec![], 0);
        }
    };
    if list.len() > MAX_ATTACHMENTS {
        errors.push(FieldError::new(
            "attachments",
            "too_big",
            format!("at most {MAX_ATTACHMENTS} attachments"),
            json!(list.len()),
        ));
        return (vec![], 0);
    }
    let mut out = Vec::new();
    let mut total = 0usize;
    for (i, a) in list.iter().enumerate() {
        let p = format!("attachments.{i}");
        let Some(o) = a.as_object() else {
            errors.push(FieldError::new(&p, "invalid_type", "an attachment is an object", a.clone()));
            continue;
        };
        let filename = o.get("filename").and_then(Value::as_str).map(str::to_string);
        let content = o.get("content").and_then(Value::as_str);
        let content_type =
            o.get("contentType").and_then(Value::as_str).unwrap_or("application/octet-stream").to_string();
        let content_id = o.get("contentId").and_then(Value::as_str).map(str::to_string);
        let disposition = o.get("disposition").and_then(Value::as_str).unwrap_or("attachment");
        let mut ok = true;
        match &filename {
            Some(f) if !f.is_empty() && f.len() <= 255 && !f.contains(['\r', '\n', '"']) => {}
            _ => {
                errors.push(FieldError::new(
                    format!("{p}.filename"),
                    "invalid_string",
                    "filename is required (1 to 255 characters, no quotes or line breaks)",
                    o.get("filename").cloned().unwrap_or(Value::Null),
                ));
                ok = false;
            }
        }
        let decoded = content.and_then(|c| STANDARD.decode(c.trim()).ok());
        if decoded.is_none() {
            errors.push(FieldError::new(
                format!("{p}.content"),
                "invalid_string",
                "content must be base64",
                o.get("content").cloned().unwrap_or(Value::Null),
            ));
            ok = false;
        }
        if content_type.parse::<lettre::message::header::ContentType>().is_err() {
            errors.push(FieldError::new(
                format!("{p}.contentType"),
                "invalid_string",
                "contentType must be a MIME type",
                Value::String(content_type.clone()),
            ));
            ok = false;
        }
        if !["attachment", "inline"].contains(&disposition) {
            errors.push(FieldError::new(
                format!("{p}.disposition"),
                "invalid_enum_value",
                "disposition is attachment or inline",
                Value::String(disposition.into()),
            ));
            ok = false;
        }
        if disposition == "inline" && content_id.as_deref().is_none_or(str::is_empty) {
            errors.push(FieldError::new(
                format!("{p}.contentId"),
                "required",
                "contentId is required for inline attachments",
                Value::Null,
            ));
            ok = false;
        }
        if let (true, Some(bytes), Some(filename)) = (ok, decoded, filename) {
            total += bytes.len();
            out.push(StoredAttachment {
                filename,
                content_type,
                content: STANDARD.encode(&bytes),
                content_id,
                inline: disposition == "inline",
            });
        }
    }
    if total > MAX_ATTACHMENT_BYTES {
        errors.push(FieldError::new("attachments", "too_big", "attachments are at most 10 MB in total", json!(total)));
    }
    (out, total)
}

/// Sends a transactional email to one or several recipients.
#[endpoint(
    tags("sending"),
    security(("bearer" = [])),
    parameters(("Idempotency-Key" = Option<String>, Header, description = "1 to 255 printable ASCII characters")),
    request_body = SendBody,
    responses((status_code = 200, body = SendOut))
)]
pub async fn send(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let key = idempotency::key(req)?;
        let body = json_object(req).await?;
        idempotency::run(&st, &ctx.project_id, key, "POST /v1/send", || async {
            let mut errors: Vec<FieldError> = Vec::new();
            // Recipients.
            let mut recipients = Vec::new();
            match body.get("to") {
                None | Some(Value::Null) => {
                    errors.push(FieldError::new("to", "required", "to is required", Value::Null))
                }
                Some(Value::Array(a)) if a.is_empty() => {
                    errors.push(FieldError::new("to", "too_small", "at least one recipient", json!([])))
                }
                Some(Value::Array(a)) if a.len() > MAX_RECIPIENTS => errors.push(FieldError::new(
                    "to",
                    "too_big",
                    format!("at most {MAX_RECIPIENTS} recipients per call"),
                    json!(a.len()),
                )),
                Some(Value::Array(a)) => {
                    for (i, v) in a.iter().enumerate() {
                        if let Some(r) = address(&mut errors, &format!("to.{i}"), v) {
                            recipients.push(r);
                        }
                    }
                }
                Some(v) => {
                    if let Some(r) = address(&mut errors, "to", v) {
                        recipients.push(r);
                    }
                }
            }
            let from = match body.get("from") {
                None | Some(Value::Null) => None,
                Some(v) => address(&mut errors, "from", v),
            };
            let hdrs = headers(&mut errors, body.get("headers"));
            let (atts, att_bytes) = attachments(&mut errors, body.get("attachments"));
            let mut f = Fields::new(&body);
            let template_id = f.string("template", false, 1, 100);
            let subject = f.string("subject", false, 1, 998);
            if subject.as_deref().is_some_and(|s| s.contains(['\r', '\n'])) {
                f.error("subject", "invalid_string", "subject must not contain line breaks");
            }
            let html = f.string("body", false, 1, MAX_MESSAGE_BYTES);
            let legacy_name = f.line("name", false, 0, 200);
            let reply = f.email("reply", false);
            let subscribed = f.boolean("subscribed");
            let patch = data_patch(&mut f, &body, true);
            if template_id.is_none() {
                if subject.is_none() && body.get("subject").is_none() {
                    f.error("subject", "required", "subject is required without a template");
                }
                if html.is_none() && body.get("body").is_none() {
                    f.error("body", "required", "body is required without a template");
                }
            }
            errors.extend(f.errors);
            if !errors.is_empty() {
                return Err(Error::Validation(errors).into());
            }
            let now = st.clock.now_ms();
            let command = SendCommand {
                project: ctx.project_id.clone(),
                recipients,
                from,
                legacy_name,
                reply_to: reply,
                subscribed,
                patch,
                template: template_id,
                subject,
                html,
                headers: hdrs,
                attachments: atts,
                attachment_bytes: att_bytes,
                literal: false,
            };
            let out: Vec<SentEmail> = accept_send(&st, &st.composer, &st.accepter, command)
                .await?
                .into_iter()
                .map(|a| SentEmail {
                    contact: SentContact { id: a.contact_id, email: a.contact_email },
                    email: a.email,
                    suppressed: a.suppressed,
                })
                .collect();
            Reply::ok(&SendOut { success: true, data: SendData { emails: out, timestamp: rfc3339(now) } })
        })
        .await
    })
}
