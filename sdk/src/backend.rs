//! The host imports, as the generated bindings call them (`wasm32` builds only). Native builds use
//! [`crate::mock`] in this module's place.
//!
//! `log`, `config`, `clock` and `metrics` are imported by every world and come from the operator world's
//! bindings; `http` comes from the step world's (the transport world imports the same interface).
//! wit-component keeps only the imports a plugin actually calls.

use herald_sdk_bindings_operator::herald::plugin::{clock, config, log as host_log, metrics, types::LogLevel};
use herald_sdk_bindings_step::herald::plugin::http as host_http;

use crate::http::{HttpError, Request, Response};
use crate::log::Level;

pub(crate) fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    let level = match level {
        Level::Trace => LogLevel::Trace,
        Level::Debug => LogLevel::Debug,
        Level::Info => LogLevel::Info,
        Level::Warn => LogLevel::Warn,
        Level::Error => LogLevel::Error,
    };
    let fields: Vec<(String, String)> = fields.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    host_log::write(level, message, &fields);
}

pub(crate) fn config_get(key: &str) -> Option<String> {
    config::get(key)
}

pub(crate) fn config_secret(name: &str) -> Option<String> {
    config::secret(name)
}

pub(crate) fn now_ms() -> i64 {
    clock::now_ms()
}

pub(crate) fn counter(name: &str, delta: u64) {
    metrics::counter(name, delta)
}

pub(crate) fn fetch(request: &Request) -> Result<Response, HttpError> {
    let req = host_http::Request {
        method: request.method.clone(),
        url: request.url.clone(),
        headers: request.headers.clone(),
        body: request.body.clone(),
        timeout_ms: request.timeout_ms,
    };
    match host_http::fetch(&req) {
        Ok(r) => Ok(Response { status: r.status, headers: r.headers, body: r.body }),
        Err(host_http::HttpError::Denied(m)) => Err(HttpError::Denied(m)),
        Err(host_http::HttpError::Timeout) => Err(HttpError::Timeout),
        Err(host_http::HttpError::Connect(m)) => Err(HttpError::Connect(m)),
        Err(host_http::HttpError::ResponseTooLarge) => Err(HttpError::ResponseTooLarge),
        Err(host_http::HttpError::Other(m)) => Err(HttpError::Other(m)),
    }
}
