//! Cursor and offset pagination helpers (docs/behaviour.md#pagination). A cursor is opaque to clients:
//! base64url of the last row's sort value and id, so paging is keyset-based and stable under concurrent
//! inserts.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use salvo::prelude::*;
use serde_json::{Value, json};

use crate::api::errors::ApiError;
use crate::error::Error;

pub fn encode_cursor(sort_value: &Value, id: &str) -> String {
    URL_SAFE_NO_PAD.encode(json!([sort_value, id]).to_string())
}

pub fn decode_cursor(s: &str) -> Result<(Value, String), ApiError> {
    let bad = || Error::Invalid("Invalid cursor: pass the cursor value of the previous response unchanged".into());
    let bytes = URL_SAFE_NO_PAD.decode(s.trim()).map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    match v {
        Value::Array(mut a) if a.len() == 2 => {
            let id = a.pop().and_then(|x| x.as_str().map(str::to_string)).ok_or_else(bad)?;
            let sv = a.pop().ok_or_else(bad)?;
            Ok((sv, id))
        }
        _ => Err(bad().into()),
    }
}

/// The raw value of a query parameter (None when absent or empty).
pub fn query_str(req: &Request, name: &str) -> Option<String> {
    req.queries().get(name).map(|s| s.to_string()).filter(|s| !s.is_empty())
}

/// The raw value of a typed query parameter (a number, a date-time, a boolean, one of a list): None
/// when absent; present but empty is 400 naming it, as any other value that is not of its type (the
/// dashboard leaves empty parameters out; the document types them, so `?to=` is not a date-time).
pub fn typed_query(req: &Request, name: &str) -> Result<Option<String>, ApiError> {
    match req.queries().get(name) {
        None => Ok(None),
        Some(s) if s.trim().is_empty() => {
            Err(Error::Invalid(format!("{name} must not be empty: give a value or leave the parameter out")).into())
        }
        Some(s) => Ok(Some(s.to_string())),
    }
}

/// `limit` for cursor lists: default 20, clamped to 1..=100; not a number: 400.
pub fn limit(req: &Request, default: i64, max: i64) -> Result<usize, ApiError> {
    match typed_query(req, "limit")? {
        None => Ok(default as usize),
        Some(s) => s
            .trim()
            .parse::<i64>()
            .map(|n| n.clamp(1, max) as usize)
            .map_err(|_| Error::Invalid(format!("limit must be an integer, got {s:?}")).into()),
    }
}

/// An optional boolean query parameter; anything but true/false is 400.
pub fn bool_param(req: &Request, name: &str) -> Result<Option<bool>, ApiError> {
    match typed_query(req, name)?.as_deref() {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(Error::Invalid(format!("{name} must be true or false, got {other:?}")).into()),
    }
}

/// Ends a keyset page: the store was asked for `limit + 1` rows; the extra one only says more exist.
/// Returns the page's rows, the next cursor (empty at the end) and whether more exist.
pub fn finish_page<T>(mut rows: Vec<T>, limit: usize, cursor_of: impl Fn(&T) -> String) -> (Vec<T>, String, bool) {
    let has_more = rows.len() > limit;
    rows.truncate(limit);
    let next = match (has_more, rows.last()) {
        (true, Some(last)) => cursor_of(last),
        _ => String::new(),
    };
    (rows, next, has_more)
}

/// `page` (1-based, default 1) and `pageSize` (1 to 100, default 20) of an offset-paginated list.
pub struct OffsetPage {
    pub page: usize,
    pub page_size: usize,
}

impl OffsetPage {
    pub fn from(req: &Request) -> Result<OffsetPage, ApiError> {
        let int = |name: &str, default: i64| -> Result<i64, ApiError> {
            match typed_query(req, name)? {
                None => Ok(default),
                Some(s) => s
                    .trim()
                    .parse::<i64>()
                    .map_err(|_| Error::Invalid(format!("{name} must be an integer, got {s:?}")).into()),
            }
        };
        Ok(OffsetPage { page: int("page", 1)?.max(1) as usize, page_size: int("pageSize", 20)?.clamp(1, 100) as usize })
    }

    pub fn offset(&self) -> usize {
        (self.page - 1).saturating_mul(self.page_size)
    }

    pub fn total_pages(&self, total: i64) -> i64 {
        (total + self.page_size as i64 - 1) / self.page_size as i64
    }
}

/// `sort` (name, createdAt, updatedAt; default createdAt) as a column, and `dir` (asc, default desc).
pub fn sort_and_dir(req: &Request) -> (&'static str, bool) {
    let sort = match query_str(req, "sort").as_deref() {
        Some("name") => "name",
        Some("updatedAt") => "updated_at",
        _ => "created_at",
    };
    (sort, query_str(req, "dir").as_deref() == Some("asc"))
}
