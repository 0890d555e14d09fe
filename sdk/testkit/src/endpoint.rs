//! [`FakeEndpoint`]: a small HTTP/1.1 server on `127.0.0.1` that stands in for a provider's API or a
//! webhook receiver. It records every request and answers from a programmable queue, a closure or a
//! default, optionally after a delay (to provoke timeouts).
//!
//! It runs on its own thread with its own Tokio runtime, so it serves whatever runtime (or none) the
//! test uses, and it stops when dropped. The parser is deliberately small: requests with a
//! `Content-Length` body (or none), keep-alive connections, no chunked request bodies (answered with
//! 411) and no `Expect: 100-continue`. Every answer carries `Content-Length`.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head the endpoint reads.
const MAX_HEAD: usize = 64 << 10;
/// Largest request body the endpoint reads.
const MAX_BODY: usize = 64 << 20;

/// One request the endpoint received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedRequest {
    /// The method, upper case as sent (`POST`).
    pub method: String,
    /// The request target: path and query (`/v2/email/outbound-emails?x=1`).
    pub target: String,
    /// Header names and values in the order received (names as sent).
    pub headers: Vec<(String, String)>,
    /// The body (empty when there was none).
    pub body: Vec<u8>,
}

impl ReceivedRequest {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON, when it is JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// An answer the endpoint gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Headers besides `Content-Length` and `Connection`, which the endpoint sets.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// How long to wait before answering.
    pub delay: Option<Duration>,
}

impl Reply {
    /// An answer with this status, no headers and an empty body.
    pub fn new(status: u16) -> Reply {
        Reply { status, headers: Vec::new(), body: Vec::new(), delay: None }
    }

    /// `200 OK` with an empty body.
    pub fn ok() -> Reply {
        Reply::new(200)
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Reply {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and `Content-Type: application/json`.
    pub fn json(self, value: &serde_json::Value) -> Reply {
        self.header("Content-Type", "application/json").body(value.to_string())
    }

    /// Answers only after `delay` (the request is recorded at once).
    pub fn delay(mut self, delay: Duration) -> Reply {
        self.delay = Some(delay);
        self
    }
}

/// Decides the answer to a request when the queue is empty.
pub type Handler = Arc<dyn Fn(&ReceivedRequest) -> Reply + Send + Sync>;

struct State {
    queue: VecDeque<Reply>,
    handler: Option<Handler>,
    default: Reply,
    requests: Vec<ReceivedRequest>,
}

/// A fake HTTP endpoint on `127.0.0.1` and an ephemeral port.
///
/// Each request is answered by the first queued [`Reply`] ([`FakeEndpoint::push`]); when the queue is
/// empty, by the handler ([`FakeEndpoint::set_handler`]) if one is set, else by the default reply
/// (`200` with an empty body unless [`FakeEndpoint::set_default`] changed it).
///
/// ```no_run
/// use herald_plugin_testkit::{FakeEndpoint, Reply};
///
/// let endpoint = FakeEndpoint::start().expect("endpoint");
/// endpoint.push(Reply::new(503).body("down"));
/// endpoint.push(Reply::new(202).json(&serde_json::json!({"id": "prov-1"})));
/// // ... point the plugin at endpoint.url() and send twice ...
/// assert_eq!(endpoint.requests().len(), 2);
/// ```
pub struct FakeEndpoint {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl fmt::Debug for FakeEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeEndpoint").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl FakeEndpoint {
    /// Starts an endpoint that answers `200` until told otherwise.
    pub fn start() -> std::io::Result<FakeEndpoint> {
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            queue: VecDeque::new(),
            handler: None,
            default: Reply::ok(),
            requests: Vec::new(),
        }));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let served = state.clone();
        let thread = std::thread::Builder::new().name(format!("fake-endpoint-{}", addr.port())).spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = TcpListener::from_std(std_listener) else { return };
                let accept = async {
                    loop {
                        match listener.accept().await {
                            Ok((stream, _)) => {
                                tokio::spawn(serve(stream, served.clone()));
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                        }
                    }
                };
                tokio::select! {
                    () = accept => {}
                    _ = stop => {}
                }
            });
            // Dropping the runtime cancels the connections still open (and their delays).
            drop(runtime);
        })?;
        Ok(FakeEndpoint { addr, state, shutdown: Some(shutdown), thread: Some(thread) })
    }

    /// Starts an endpoint whose answers come from `handler` (unless replies are queued).
    pub fn with_handler(
        handler: impl Fn(&ReceivedRequest) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<FakeEndpoint> {
        let endpoint = FakeEndpoint::start()?;
        endpoint.set_handler(handler);
        Ok(endpoint)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The socket address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `127.0.0.1:<port>`: the host pattern to grant a plugin (`PluginGrant::http`).
    pub fn authority(&self) -> String {
        self.addr.to_string()
    }

    /// `http://127.0.0.1:<port>` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues the answer to the next request that finds the queue's front.
    pub fn push(&self, reply: Reply) {
        self.lock().queue.push_back(reply);
    }

    /// Replies still queued.
    pub fn queued(&self) -> usize {
        self.lock().queue.len()
    }

    /// Answers requests with `handler` whenever the queue is empty.
    pub fn set_handler(&self, handler: impl Fn(&ReceivedRequest) -> Reply + Send + Sync + 'static) {
        self.lock().handler = Some(Arc::new(handler));
    }

    /// The answer when neither the queue nor a handler decides (`200`, empty, at first).
    pub fn set_default(&self, reply: Reply) {
        self.lock().default = reply;
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        self.lock().requests.clone()
    }

    /// Returns the requests received so far and forgets them.
    pub fn take_requests(&self) -> Vec<ReceivedRequest> {
        std::mem::take(&mut self.lock().requests)
    }

    /// Forgets the recorded requests and the queued replies (the handler and default stay).
    pub fn reset(&self) {
        let mut s = self.lock();
        s.requests.clear();
        s.queue.clear();
    }
}

impl Drop for FakeEndpoint {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Records the request and picks its answer.
fn answer(state: &Mutex<State>, request: ReceivedRequest) -> Reply {
    let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
    let reply = match s.queue.pop_front() {
        Some(r) => r,
        None => match s.handler.clone() {
            Some(h) => {
                // the handler runs unlocked so it may call back into the endpoint's state
                drop(s);
                let r = h(&request);
                s = state.lock().unwrap_or_else(|p| p.into_inner());
                r
            }
            None => s.default.clone(),
        },
    };
    s.requests.push(request);
    reply
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let (request, keep_alive) = match read_request(&mut stream, &mut buf).await {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(Refusal { status, message }) => {
                let reply = Reply::new(status).body(message);
                let _ = write_reply(&mut stream, &reply, false, false).await;
                return;
            }
        };
        let head_only = request.method.eq_ignore_ascii_case("HEAD");
        let reply = answer(&state, request);
        if let Some(delay) = reply.delay {
            tokio::time::sleep(delay).await;
        }
        if write_reply(&mut stream, &reply, keep_alive, head_only).await.is_err() || !keep_alive {
            return;
        }
    }
}

struct Refusal {
    status: u16,
    message: String,
}

fn refuse(status: u16, message: impl Into<String>) -> Refusal {
    Refusal { status, message: message.into() }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads one request (`None` at a clean end of the connection) and whether to keep the connection.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Option<(ReceivedRequest, bool)>, Refusal> {
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(refuse(431, "request head too large"));
        }
        let n = stream.read(&mut chunk).await.map_err(|e| refuse(400, e.to_string()))?;
        if n == 0 {
            return if buf.is_empty() { Ok(None) } else { Err(refuse(400, "connection closed mid-request")) };
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| refuse(400, "request head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let mut parts = lines.next().unwrap_or_default().split(' ');
    let (method, target, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v), None) if !m.is_empty() && v.starts_with("HTTP/1.") => (m, t, v),
        _ => return Err(refuse(400, "malformed request line")),
    };
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line.split_once(':').ok_or_else(|| refuse(400, format!("malformed header {line:?}")))?;
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let header = |name: &str| headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
    if header("transfer-encoding").is_some() {
        return Err(refuse(411, "the fake endpoint reads Content-Length bodies only"));
    }
    let length: usize = match header("content-length") {
        Some(v) => v.trim().parse().map_err(|_| refuse(400, "bad Content-Length"))?,
        None => 0,
    };
    if length > MAX_BODY {
        return Err(refuse(413, "request body too large"));
    }
    let connection = header("connection").map(str::to_ascii_lowercase);
    let keep_alive = match connection.as_deref() {
        Some(c) if c.contains("close") => false,
        Some(c) if c.contains("keep-alive") => true,
        _ => version != "HTTP/1.0",
    };
    let request_head = (method.to_owned(), target.to_owned(), headers.clone());
    let body_start = head_end + 4;
    while buf.len() < body_start + length {
        let n = stream.read(&mut chunk).await.map_err(|e| refuse(400, e.to_string()))?;
        if n == 0 {
            return Err(refuse(400, "connection closed mid-body"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[body_start..body_start + length].to_vec();
    buf.drain(..body_start + length);
    let (method, target, headers) = request_head;
    Ok(Some((ReceivedRequest { method, target, headers, body }, keep_alive)))
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        410 => "Gone",
        411 => "Length Required",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

async fn write_reply(stream: &mut TcpStream, reply: &Reply, keep_alive: bool, head_only: bool) -> std::io::Result<()> {
    let mut out = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (name, value) in &reply.headers {
        if name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("connection") {
            continue;
        }
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\n", reply.body.len()));
    out.push_str(if keep_alive { "Connection: keep-alive\r\n\r\n" } else { "Connection: close\r\n\r\n" });
    let mut bytes = out.into_bytes();
    if !head_only {
        bytes.extend_from_slice(&reply.body);
    }
    stream.write_all(&bytes).await?;
    stream.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn roundtrip(endpoint: &FakeEndpoint, raw: &[u8]) -> String {
        let mut s = std::net::TcpStream::connect(endpoint.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(raw).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn records_and_answers_in_order() {
        let endpoint = FakeEndpoint::start().unwrap();
        endpoint.push(Reply::new(503).body("down"));
        endpoint.set_handler(|r| Reply::new(201).body(format!("saw {}", r.path())));
        // two requests on one keep-alive connection, the second closes it
        let out = roundtrip(
            &endpoint,
            b"POST /a?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nConnection: close\r\n\r\n",
        );
        assert!(out.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{out}");
        assert!(out.contains("Content-Length: 4\r\nConnection: keep-alive\r\n\r\ndown"), "{out}");
        assert!(out.contains("HTTP/1.1 201 Created\r\n") && out.ends_with("saw /b"), "{out}");
        let requests = endpoint.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!((requests[0].method.as_str(), requests[0].target.as_str()), ("POST", "/a?x=1"));
        assert_eq!(requests[0].path(), "/a");
        assert_eq!(requests[0].header("content-length"), Some("5"));
        assert_eq!(requests[0].body, b"hello");
        assert_eq!(requests[1].body, b"");
        assert_eq!(endpoint.take_requests().len(), 2);
        assert!(endpoint.requests().is_empty());
    }

    #[test]
    fn refuses_chunked_bodies_and_defaults_to_200() {
        let endpoint = FakeEndpoint::start().unwrap();
        let out = roundtrip(&endpoint, b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 411 "), "{out}");
        let out = roundtrip(&endpoint, b"GET / HTTP/1.0\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n") && out.contains("Connection: close"), "{out}");
    }

    #[test]
    fn delays_answers() {
        let endpoint = FakeEndpoint::start().unwrap();
        endpoint.push(Reply::ok().delay(Duration::from_millis(300)));
        let started = std::time::Instant::now();
        let out = roundtrip(&endpoint, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(started.elapsed() >= Duration::from_millis(300));
    }
}
