//! A native stand-in for the Herald host, so plugin logic runs under plain `cargo test`.
//!
//! In a native build every host import ([`log`](crate::log), [`config`](crate::config),
//! [`clock`](crate::clock), [`http`](crate::http)) goes to a thread-local mock host. A test builds one
//! with [`MockHost`], installs it, calls the plugin's trait functions, and inspects what the plugin
//! did through the returned [`MockGuard`]. Each test runs on its own thread, so tests do not see
//! each other's mock.
//!
//! ```
//! use herald_sdk::http::{self, Request, Response};
//! use herald_sdk::mock::MockHost;
//!
//! let host = MockHost::new()
//!     .config("url", "https://hooks.example.com/in")
//!     .secret("token", "s3cret")
//!     .now_ms(1_700_000_000_000)
//!     .respond(Response::new(200).with_body("ok"))
//!     .install();
//!
//! // ... the plugin code under test:
//! let url = herald_sdk::config::get("url").unwrap();
//! let response = http::fetch(&Request::post(url).body("hi")).unwrap();
//! herald_sdk::log::info("sent", &[("status", &response.status.to_string())]);
//!
//! assert_eq!(host.requests()[0].url, "https://hooks.example.com/in");
//! assert_eq!(host.logs()[0].field("status"), Some("200"));
//! assert_eq!(herald_sdk::clock::now_ms(), 1_700_000_000_000);
//! ```
//!
//! Without an installed mock: config values and secrets are absent, the clock is the system clock,
//! logs are still recorded, and every HTTP request fails with [`HttpError::Other`].

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::http::{HttpError, Request, Response};
use crate::log::Level;

type Handler = Box<dyn FnMut(&Request) -> Result<Response, HttpError>>;

#[derive(Default)]
struct State {
    config: HashMap<String, String>,
    secrets: HashMap<String, String>,
    now_ms: Option<i64>,
    responses: VecDeque<Result<Response, HttpError>>,
    handler: Option<Handler>,
    requests: Vec<Request>,
    logs: Vec<LogRecord>,
    counters: HashMap<String, u64>,
}

thread_local! {
    static CURRENT: RefCell<Rc<RefCell<State>>> = RefCell::new(Rc::new(RefCell::new(State::default())));
}

fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let state = CURRENT.with(|c| Rc::clone(&c.borrow()));
    let mut state = state.borrow_mut();
    f(&mut state)
}

/// One log record a plugin wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Its level.
    pub level: Level,
    /// Its message.
    pub message: String,
    /// Its structured fields, in order.
    pub fields: Vec<(String, String)>,
}

impl LogRecord {
    /// The value of the field called `name`.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Builds a mock host: configuration, secrets, a frozen clock, and canned HTTP answers.
///
/// HTTP requests are answered from the queue of [`respond`](MockHost::respond) /
/// [`respond_error`](MockHost::respond_error) answers first, in order, then by the
/// [`handler`](MockHost::handler), and fail with [`HttpError::Other`] when neither has an answer.
#[derive(Default)]
#[must_use = "a MockHost does nothing until installed"]
pub struct MockHost {
    state: State,
}

impl MockHost {
    /// A host with no config, no secrets, the system clock and no HTTP answers.
    pub fn new() -> Self {
        MockHost::default()
    }

    /// Sets a configuration value ([`config::get`](crate::config::get)).
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.state.config.insert(key.into(), value.into());
        self
    }

    /// Grants a secret ([`config::secret`](crate::config::secret)).
    pub fn secret(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.state.secrets.insert(name.into(), value.into());
        self
    }

    /// Freezes [`clock::now_ms`](crate::clock::now_ms) at `now_ms`.
    pub fn now_ms(mut self, now_ms: i64) -> Self {
        self.state.now_ms = Some(now_ms);
        self
    }

    /// Queues a response for the next HTTP request.
    pub fn respond(mut self, response: Response) -> Self {
        self.state.responses.push_back(Ok(response));
        self
    }

    /// Queues an error for the next HTTP request.
    pub fn respond_error(mut self, error: HttpError) -> Self {
        self.state.responses.push_back(Err(error));
        self
    }

    /// Answers HTTP requests (once the queue is empty) with `handler`.
    pub fn handler(mut self, handler: impl FnMut(&Request) -> Result<Response, HttpError> + 'static) -> Self {
        self.state.handler = Some(Box::new(handler));
        self
    }

    /// Makes this the current thread's host until the guard is dropped, when the host that was
    /// current before comes back (installs nest).
    pub fn install(self) -> MockGuard {
        let state = Rc::new(RefCell::new(self.state));
        let previous = CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), Rc::clone(&state)));
        MockGuard { state, previous }
    }
}

/// The installed mock host: inspect what the plugin did, or change the host between calls. Dropping
/// it puts back the host that was current before.
#[must_use = "the mock host is uninstalled when the guard is dropped"]
pub struct MockGuard {
    state: Rc<RefCell<State>>,
    previous: Rc<RefCell<State>>,
}

impl MockGuard {
    /// Every HTTP request the plugin made, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.state.borrow().requests.clone()
    }

    /// Every log record the plugin wrote, in order.
    pub fn logs(&self) -> Vec<LogRecord> {
        self.state.borrow().logs.clone()
    }

    /// The value of a plugin-defined counter ([`crate::metrics::counter`]), 0 when never added to.
    pub fn counter(&self, name: &str) -> u64 {
        self.state.borrow().counters.get(name).copied().unwrap_or(0)
    }

    /// Moves the frozen clock.
    pub fn set_now_ms(&self, now_ms: i64) {
        self.state.borrow_mut().now_ms = Some(now_ms);
    }

    /// Sets a configuration value.
    pub fn set_config(&self, key: impl Into<String>, value: impl Into<String>) {
        self.state.borrow_mut().config.insert(key.into(), value.into());
    }

    /// Queues a response for the next HTTP request.
    pub fn push_response(&self, response: Response) {
        self.state.borrow_mut().responses.push_back(Ok(response));
    }

    /// Queues an error for the next HTTP request.
    pub fn push_error(&self, error: HttpError) {
        self.state.borrow_mut().responses.push_back(Err(error));
    }

    /// Forgets the recorded requests, logs and counters.
    pub fn clear(&self) {
        let mut s = self.state.borrow_mut();
        s.requests.clear();
        s.logs.clear();
        s.counters.clear();
    }
}

impl Drop for MockGuard {
    fn drop(&mut self) {
        let _ = CURRENT.try_with(|c| {
            let mut current = c.borrow_mut();
            if Rc::ptr_eq(&current, &self.state) {
                *current = Rc::clone(&self.previous);
            }
        });
    }
}

// The host imports of a native build (see `crate::backend` for the wasm32 ones).

pub(crate) fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    let rendered: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    eprintln!("[plugin {}] {message} {}", level.as_str(), rendered.join(" "));
    with_state(|s| {
        s.logs.push(LogRecord {
            level,
            message: message.to_owned(),
            fields: fields.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        })
    });
}

pub(crate) fn config_get(key: &str) -> Option<String> {
    with_state(|s| s.config.get(key).cloned())
}

pub(crate) fn config_secret(name: &str) -> Option<String> {
    with_state(|s| s.secrets.get(name).cloned())
}

// A mock host whose test froze no time (`now_ms`) reads the real one, as the real host would.
#[expect(clippy::disallowed_methods)]
pub(crate) fn now_ms() -> i64 {
    with_state(|s| s.now_ms).unwrap_or_else(|| {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    })
}

pub(crate) fn counter(name: &str, delta: u64) {
    with_state(|s| {
        let c = s.counters.entry(name.to_owned()).or_default();
        *c = c.saturating_add(delta);
    });
}

pub(crate) fn fetch(request: &Request) -> Result<Response, HttpError> {
    let state = CURRENT.with(|c| Rc::clone(&c.borrow()));
    let (queued, handler) = {
        let mut s = state.borrow_mut();
        s.requests.push(request.clone());
        let queued = s.responses.pop_front();
        // The handler is taken out while it runs, so it may itself use the mock host.
        let handler = if queued.is_none() { s.handler.take() } else { None };
        (queued, handler)
    };
    if let Some(answer) = queued {
        return answer;
    }
    match handler {
        Some(mut h) => {
            let answer = h(request);
            let mut s = state.borrow_mut();
            if s.handler.is_none() {
                s.handler = Some(h);
            }
            answer
        }
        None => Err(HttpError::Other(format!(
            "mock host: no response queued for {} {} (use MockHost::respond or MockHost::handler)",
            request.method, request.url
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{clock, config, http, log as plog};

    #[test]
    fn config_secrets_and_clock() {
        let _host = MockHost::new().config("a", "1").secret("s", "x").now_ms(42).install();
        assert_eq!(config::get("a").as_deref(), Some("1"));
        assert_eq!(config::get("b"), None);
        assert_eq!(config::secret("s").as_deref(), Some("x"));
        assert!(config::require("b").is_err());
        assert_eq!(clock::now_ms(), 42);
    }

    #[test]
    fn counters_add_up_per_name() {
        let host = MockHost::new().install();
        crate::metrics::counter("sent", 2);
        crate::metrics::counter("sent", 3);
        crate::metrics::counter("failed", 1);
        assert_eq!((host.counter("sent"), host.counter("failed"), host.counter("other")), (5, 1, 0));
        host.clear();
        assert_eq!(host.counter("sent"), 0);
    }

    #[test]
    fn dropping_the_guard_resets_the_host() {
        {
            let host = MockHost::new().config("a", "1").install();
            host.set_now_ms(7);
            assert_eq!(clock::now_ms(), 7);
        }
        assert_eq!(config::get("a"), None);
        assert!(clock::now_ms() > 1_600_000_000_000);
    }

    #[test]
    fn installs_nest() {
        let outer = MockHost::new().config("a", "outer").install();
        {
            let _inner = MockHost::new().config("a", "inner").install();
            assert_eq!(config::get("a").as_deref(), Some("inner"));
        }
        assert_eq!(config::get("a").as_deref(), Some("outer"));
        plog::info("to the outer host", &[]);
        assert_eq!(outer.logs().len(), 1);
    }

    #[test]
    fn http_queue_then_handler_then_error() {
        let host = MockHost::new()
            .respond(Response::new(201))
            .respond_error(HttpError::Timeout)
            .handler(|req| Ok(Response::new(200).with_body(req.url.clone())))
            .install();
        assert_eq!(http::fetch(&http::Request::get("https://a.test/1")).map(|r| r.status), Ok(201));
        assert_eq!(http::fetch(&http::Request::get("https://a.test/2")), Err(HttpError::Timeout));
        assert_eq!(
            http::fetch(&http::Request::get("https://a.test/3")).map(|r| r.text()).as_deref(),
            Ok("https://a.test/3")
        );
        assert_eq!(host.requests().len(), 3);
        drop(host);
        assert!(matches!(http::fetch(&http::Request::get("https://a.test/")), Err(HttpError::Other(_))));
    }

    #[test]
    fn logs_are_captured() {
        let host = MockHost::new().install();
        plog::warn("careful", &[("k", "v")]);
        let logs = host.logs();
        assert_eq!(logs.len(), 1);
        assert_eq!(logs[0].level, Level::Warn);
        assert_eq!(logs[0].field("k"), Some("v"));
        host.clear();
        assert!(host.logs().is_empty());
    }
}
