//! A small HTTP/1.1 receiver on loopback for plugin tests: records each request and answers with a fixed
//! status and body (keep-alive, Content-Length bodies only).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

pub struct HttpSink {
    pub addr: SocketAddr,
    pub got: Arc<Mutex<Vec<Received>>>,
}

impl HttpSink {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn requests(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

/// Starts a receiver that answers every request with `status` and `body` (JSON).
pub async fn start(status: u16, body: &'static str) -> HttpSink {
    start_with(Arc::new(move |_: &str, _: &str| (status, body.to_string()))).await
}

/// How a stub answers a request: (method, path with query) to (status, JSON body).
pub type Answer = Arc<dyn Fn(&str, &str) -> (u16, String) + Send + Sync>;

/// Starts a receiver that answers each request as `answer` says (a stub of a third-party API).
pub async fn start_with(answer: Answer) -> HttpSink {
    start_inner(answer, None).await
}

/// Starts a receiver that, while `hold` holds, keeps each request without an answer until the client
/// goes away (an endpoint that hangs), and otherwise answers 200. Only answered requests are recorded.
pub async fn start_holding(hold: Arc<std::sync::atomic::AtomicBool>) -> HttpSink {
    start_inner(Arc::new(|_: &str, _: &str| (200, "{}".to_string())), Some(hold)).await
}

async fn start_inner(answer: Answer, hold: Option<Arc<std::sync::atomic::AtomicBool>>) -> HttpSink {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let store = got.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let store = store.clone();
            let answer = answer.clone();
            let hold = hold.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i;
                        }
                        let mut chunk = [0u8; 8192];
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                    let mut lines = head.split("\r\n");
                    let first = lines.next().unwrap_or_default().to_string();
                    let mut parts = first.split(' ');
                    let method = parts.next().unwrap_or_default().to_string();
                    let path = parts.next().unwrap_or_default().to_string();
                    let headers: Vec<(String, String)> = lines
                        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
                        .collect();
                    let len: usize = headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.parse().ok())
                        .unwrap_or(0);
                    let start = head_end + 4;
                    while buf.len() < start + len {
                        let mut chunk = [0u8; 8192];
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = buf[start..start + len].to_vec();
                    buf.drain(..start + len);
                    if hold.as_ref().is_some_and(|h| h.load(std::sync::atomic::Ordering::SeqCst)) {
                        // Held until the client on the other end goes away.
                        let mut rest = [0u8; 1];
                        let _ = sock.read(&mut rest).await;
                        return;
                    }
                    let (status, reply_body) = answer(&method, &path);
                    store.lock().unwrap().push(Received { method, path, headers, body });
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{reply_body}",
                        reply_body.len()
                    );
                    if sock.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    HttpSink { addr, got }
}

/// A server on loopback that answers every request 302 to `location` (and closes).
pub async fn redirect_to(location: String) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = [0u8; 16 * 1024];
            let _ = sock.read(&mut buf).await;
            let answer =
                format!("HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            let _ = sock.write_all(answer.as_bytes()).await;
        }
    });
    addr
}
