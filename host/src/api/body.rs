//! Reading request bodies and checking their fields, and the success reply type.
//!
//! Bodies are read as JSON objects (malformed JSON or a non-object: 400; over 50 MB: 413). Field checks
//! collect every problem of a body before answering 422 with dotted field paths (docs/behaviour.md#errors).

use salvo::http::ParseError;
use salvo::http::StatusCode;
use salvo::oapi::{Components, EndpointOutRegister, Operation};
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::api::errors::ApiError;
use crate::error::{Error, FieldError};

/// The largest request body Herald reads.
pub const MAX_BODY_BYTES: usize = 50 * 1024 * 1024;

/// Reads the body as a JSON object. An empty body counts as `{}`.
pub async fn json_object(req: &mut Request) -> Result<Map<String, Value>, ApiError> {
    json_object_max(req, MAX_BODY_BYTES).await
}

/// "50 MB", "16 KB": a body limit as the error message says it.
pub fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 20 { format!("{} MB", bytes >> 20) } else { format!("{} KB", bytes >> 10) }
}

/// [`json_object`] for routes whose bodies are small: reading stops at `max` bytes (413).
pub async fn json_object_max(req: &mut Request, max: usize) -> Result<Map<String, Value>, ApiError> {
    let bytes = match req.payload_with_max_size(max).await {
        Ok(b) => b.clone(),
        Err(ParseError::PayloadTooLarge) => return Err(Error::TooLarge { limit: size_label(max) }.into()),
        Err(e) => return Err(Error::Malformed(format!("Cannot read the request body: {e}")).into()),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(Error::Malformed("The request body must be a JSON object".into()).into()),
        Err(e) => Err(Error::Malformed(format!("Malformed JSON in the request body: {e}")).into()),
    }
}

/// Field checks over one JSON object, collecting every error.
pub struct Fields<'a> {
    obj: &'a Map<String, Value>,
    prefix: String,
    pub errors: Vec<FieldError>,
}

impl<'a> Fields<'a> {
    pub fn new(obj: &'a Map<String, Value>) -> Self {
        Fields { obj, prefix: String::new(), errors: Vec::new() }
    }

    fn path(&self, name: &str) -> String {
        if self.prefix.is_empty() { name.to_string() } else { format!("{}.{name}", self.prefix) }
    }

    pub fn error(&mut self, name: &str, code: &str, message: impl Into<String>) {
        let received = self.obj.get(name).cloned().unwrap_or(Value::Null);
        self.errors.push(FieldError::new(self.path(name), code, message, received));
    }

    /// Refuses every key of the object but `allowed` (for bodies where an unknown key is a mistake worth
    /// telling: a setting the caller thinks it changed).
    pub fn only(&mut self, allowed: &[&str]) {
        let unknown: Vec<&String> = self.obj.keys().filter(|k| !allowed.contains(&k.as_str())).collect();
        for key in unknown {
            self.error(key, "unrecognized_keys", format!("{key} cannot be set here"));
        }
    }

    fn present(&self, name: &str) -> Option<&'a Value> {
        self.obj.get(name).filter(|v| !v.is_null())
    }

    /// A string field; `None` when absent (or null). Checks type and length (in characters).
    pub fn string(&mut self, name: &str, required: bool, min: usize, max: usize) -> Option<String> {
        match self.present(name) {
            None => {
                if required {
                    self.error(name, "required", format!("{name} is required"));
                }
                None
            }
            Some(Value::String(s)) => {
                let n = s.chars().count();
                if n < min {
                    self.error(name, "too_small", format!("{name} must be at least {min} characters"));
                    None
                } else if n > max {
                    self.error(name, "too_big", format!("{name} must be at most {max} characters"));
                    None
                } else {
                    Some(s.clone())
                }
            }
            Some(_) => {
                self.error(name, "invalid_type", format!("{name} must be a string"));
                None
            }
        }
    }

    /// A trimmed string that must not be blank.
    /// A name: trimmed, not empty, one line (names end up in mail headers and page titles).
    pub fn text(&mut self, name: &str, required: bool, max: usize) -> Option<String> {
        let s = self.line(name, required, 0, max)?;
        let t = s.trim().to_string();
        if t.is_empty() {
            self.error(name, if required { "required" } else { "too_small" }, format!("{name} must not be empty"));
            return None;
        }
        Some(t)
    }

    /// A string of one line: no CR, LF or other control characters (a sender name with a line break
    /// would split the mail header it is written into).
    pub fn line(&mut self, name: &str, required: bool, min: usize, max: usize) -> Option<String> {
        let s = self.string(name, required, min, max)?;
        if s.chars().any(char::is_control) {
            self.error(name, "invalid_string", format!("{name} must be one line without control characters"));
            return None;
        }
        Some(s)
    }

    /// An email address: trimmed and lowercased (docs/behaviour.md#contacts-and-data).
    /// Checked before it is folded: folding can turn a character no address may hold into one that
    /// spells another address (the Kelvin sign folds to `k`), so only ASCII addresses pass.
    pub fn email(&mut self, name: &str, required: bool) -> Option<String> {
        let s = self.string(name, required, 0, 320)?;
        let e = s.trim();
        if !is_email(e) {
            self.error(name, "invalid_string", format!("{name} must be a valid email address"));
            return None;
        }
        Some(e.to_ascii_lowercase())
    }

    pub fn boolean(&mut self, name: &str) -> Option<bool> {
        match self.present(name) {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                self.error(name, "invalid_type", format!("{name} must be a boolean"));
                None
            }
        }
    }

    /// A string that must be one of `allowed`.
    pub fn one_of(&mut self, name: &str, required: bool, allowed: &[&str]) -> Option<String> {
        let s = self.string(name, required, 0, 64)?;
        if !allowed.contains(&s.as_str()) {
            self.error(name, "invalid_enum_value", format!("{name} must be one of {}", allowed.join(", ")));
            return None;
        }
        Some(s)
    }

    /// Ends the checks: 422 with every collected error, if any.
    pub fn finish(self) -> Result<(), ApiError> {
        if self.errors.is_empty() { Ok(()) } else { Err(Error::Validation(self.errors).into()) }
    }
}

pub use crate::domain::contacts::is_email;

/// A successful reply: a status and a JSON body (documented per endpoint with `responses(...)`).
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
}

impl Reply {
    pub fn ok<T: Serialize>(body: &T) -> Result<Reply, ApiError> {
        Self::with(StatusCode::OK, body)
    }
    pub fn created<T: Serialize>(body: &T) -> Result<Reply, ApiError> {
        Self::with(StatusCode::CREATED, body)
    }
    pub fn with<T: Serialize>(status: StatusCode, body: &T) -> Result<Reply, ApiError> {
        let body = serde_json::to_value(body).map_err(|e| Error::Internal(e.to_string()))?;
        Ok(Reply { status, body })
    }
}

#[async_trait]
impl Writer for Reply {
    async fn write(self, _req: &mut Request, _depot: &mut Depot, res: &mut Response) {
        res.status_code(self.status);
        res.render(Json(self.body));
    }
}

impl EndpointOutRegister for Reply {
    fn register(_components: &mut Components, _operation: &mut Operation) {}
}

/// Multipart overhead allowed beyond a file (boundaries, part headers, a few small fields).
const FORM_SLACK: usize = 64 * 1024;

/// Reads a `multipart/form-data` body with a file of at most `max` bytes in the field `file`: the
/// form (for its other fields) and the file's bytes. A body or file over the limit is 413, checked from
/// `Content-Length` before anything is read; no multipart body or no file field is 422 naming `file`.
pub async fn multipart_file(
    req: &mut Request,
    max: usize,
) -> Result<(&salvo::http::form::FormData, Vec<u8>), ApiError> {
    let too_large = || Error::TooLarge { limit: size_label(max) };
    let declared = req.headers().get(salvo::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok());
    if declared.is_some_and(|n: usize| n > max + FORM_SLACK) {
        return Err(too_large().into());
    }
    let form = match req.form_data_max_size(max + FORM_SLACK).await {
        Ok(f) => f,
        Err(ParseError::PayloadTooLarge) => return Err(too_large().into()),
        Err(e) if e.to_string().contains("large") || e.to_string().contains("limit") => return Err(too_large().into()),
        Err(e) => {
            let message = format!("send multipart/form-data with the file in the field file ({e})");
            return Err(Error::field("file", "required", &message, Value::Null).into());
        }
    };
    let Some(file) = form.files.get("file") else {
        return Err(Error::field("file", "required", "the multipart field file is required", Value::Null).into());
    };
    if file.size() > max as u64 {
        return Err(too_large().into());
    }
    let bytes = tokio::fs::read(file.path()).await.map_err(|e| Error::Internal(format!("reading an upload: {e}")))?;
    Ok((form, bytes))
}

#[cfg(test)]
mod tests {
    use super::is_email;

    #[test]
    fn email_syntax() {
        for ok in ["a@b.co", "first.last+tag@example.com", "x@sub.domain-name.org", "o'neil@example.ie"] {
            assert!(is_email(ok), "{ok}");
        }
        for bad in ["", "a", "a@", "@b.co", "a@b", "a b@c.co", "a@b..co", "a@-b.co", ".a@b.co", "a@b.c_o", "a@1.2"] {
            assert!(!is_email(bad), "{bad}");
        }
        assert!(!is_email(&format!("{}@b.co", "a".repeat(65))));
    }
}
