//! Benchmark of receiving mail over SMTP (docs/behaviour.md#receiving-mail). Prints numbers; asserts
//! nothing.
//!
//! 1. The ceilings: the SMTP conversation alone (the same clients against a loopback responder that
//!    answers every command and drops the message), and the database alone (the rows accepting a message
//!    writes, `Store::store_inbound`, from 16 tasks; the message's bytes go to a spool file, not a row).
//! 2. Herald in-process on a fresh embedded on-disk database with the receiving server on loopback:
//!    CLIENTS concurrent SMTP clients (connections kept open) send MESSAGES replies of about 2 KB to a
//!    verified domain. Printed: accepted messages/s (until the last 250) and applied messages/s (until
//!    every message is an `email.received` event). The senders are checked against a DNS server on
//!    loopback (tests/api/dns_server.rs) that answers every name with NXDOMAIN.
//!
//! Run: `cargo bench -p herald-host --bench inbound` (env: BENCH_MESSAGES, default 5,000; BENCH_CLIENTS,
//! default 16).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_host::App;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

mod common;
#[path = "../../tests/api/dns_server.rs"]
mod dns_server;
use common::{env_or, in_process, peak_rss_mb};

fn message(i: usize) -> String {
    format!(
        "From: \"Customer {i}\" <c{i}@example.net>\r\nTo: support@shop.test\r\nSubject: Re: order {i}\r\n\
         Message-ID: <m{i}@example.net>\r\nMIME-Version: 1.0\r\nContent-Type: text/plain\r\n\r\n{}\r\n",
        "Where is my order? ".repeat(100)
    )
}

/// A loopback SMTP responder: 250 to everything, 354 to DATA, the message read to its end and dropped.
async fn responder() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let _ = sock.set_nodelay(true);
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                let mut r = BufReader::new(r);
                let _ = w.write_all(b"220 sink ESMTP\r\n").await;
                let mut line = String::new();
                let mut in_data = false;
                loop {
                    line.clear();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let reply: &[u8] = if in_data {
                        if line != ".\r\n" {
                            continue;
                        }
                        in_data = false;
                        b"250 2.0.0 OK\r\n"
                    } else {
                        let upper = line.to_ascii_uppercase();
                        if upper.starts_with("EHLO") {
                            b"250-sink\r\n250 8BITMIME\r\n"
                        } else if upper.starts_with("DATA") {
                            in_data = true;
                            b"354 go\r\n"
                        } else if upper.starts_with("QUIT") {
                            let _ = w.write_all(b"221 bye\r\n").await;
                            return;
                        } else {
                            b"250 OK\r\n"
                        }
                    };
                    if w.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// One SMTP client's conversation: a connection kept open, each command written and its reply read (no
/// pipelining), the message and its end written at once, Nagle off.
struct Client {
    r: BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: tokio::net::tcp::OwnedWriteHalf,
    line: String,
}

impl Client {
    async fn connect(port: u16) -> Client {
        let sock = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        sock.set_nodelay(true).unwrap();
        let (r, w) = sock.into_split();
        let mut c = Client { r: BufReader::new(r), w, line: String::new() };
        c.expect("220").await;
        c.w.write_all(b"EHLO bench.example.net\r\n").await.unwrap();
        c.expect("250 ").await;
        c
    }

    /// Reads replies until one starting with `code` (a multi-line reply's last line).
    async fn expect(&mut self, code: &str) {
        loop {
            self.line.clear();
            assert!(self.r.read_line(&mut self.line).await.unwrap() > 0, "the server closed the connection");
            if self.line.starts_with(code) {
                return;
            }
            assert!(self.line.as_bytes().get(3) == Some(&b'-'), "unexpected reply: {}", self.line);
        }
    }

    async fn send(&mut self, i: usize) {
        self.w.write_all(format!("MAIL FROM:<c{i}@example.net>\r\n").as_bytes()).await.unwrap();
        self.expect("250").await;
        self.w.write_all(b"RCPT TO:<support@shop.test>\r\n").await.unwrap();
        self.expect("250").await;
        self.w.write_all(b"DATA\r\n").await.unwrap();
        self.expect("354").await;
        let mut body = message(i).into_bytes();
        body.extend_from_slice(b".\r\n");
        self.w.write_all(&body).await.unwrap();
        self.expect("250").await;
    }
}

/// Sends `messages` messages from `clients` concurrent clients to `port`; answers the seconds it took.
async fn send_all(port: u16, messages: usize, clients: usize) -> f64 {
    let t = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(port).await;
            for i in (c..messages).step_by(clients) {
                client.send(i).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    t.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() {
    let messages = env_or("BENCH_MESSAGES", 5_000) as usize;
    let clients = env_or("BENCH_CLIENTS", 16).max(1) as usize;
    println!("inbound benchmark: {messages} messages of {} bytes from {clients} SMTP clients", message(0).len());

    // 1a. The conversation alone.
    let sink = responder().await;
    let took = send_all(sink, messages, clients).await;
    println!("  ceiling: SMTP to a responder that stores nothing: {:.0} messages/s", messages as f64 / took);

    let dir = std::env::temp_dir().join(format!("herald-bench-inbound-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut settings = in_process(&dir);
    settings.smtp.smtp_listen = Some("127.0.0.1:0".parse().unwrap());
    settings.smtp.smtp_messages_per_minute = Some(0);
    settings.smtp.smtp_spool_dir = Some(dir.join("spool"));
    settings.smtp.smtp_max_connections_per_ip = Some(clients as u32);
    settings.run_jobs = Some(true);
    // The replies' senders are checked (SPF, DKIM, DMARC) against a DNS server on loopback that knows no
    // name, as a local resolver answers for domains without records.
    let dns = dns_server::DnsServer::start().await;
    settings.dns_servers = Some(dns.addr.to_string());
    let app = App::build(settings.resolve().unwrap()).await.unwrap();
    let st = Arc::clone(&app.state);

    // 1b. The database alone: the rows accepting a message writes (its envelope and its job).
    let t = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let st = st.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let rcpts = vec!["support@elsewhere.test".to_string()];
            while t.elapsed() < Duration::from_secs(5) {
                let id = uuid::Uuid::now_v7().to_string();
                let now = st.clock.now_ms();
                let job = herald_host::store::jobs::NewJob::new("bench.none", serde_json::json!({}), now + 3_600_000);
                let m = herald_host::store::inbound::NewInbound {
                    id: &id,
                    mail_from: "c@example.net",
                    rcpts: &rcpts,
                    size: message(c).len() as u64,
                    peer: "127.0.0.1",
                    helo: "client.example.net",
                };
                st.store.store_inbound(m, job.doc(now), now).await.unwrap();
                n += 1;
            }
            n
        }));
    }
    let mut n = 0;
    for task in tasks {
        n += task.await.unwrap();
    }
    println!(
        "  ceiling: the database alone, {clients} writers: {:.0} messages stored/s",
        n as f64 / t.elapsed().as_secs_f64()
    );

    // 2. Herald.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = app.start(listener).await.unwrap();
    let port = running.smtp_addr.unwrap().port();
    let (project, _) = herald_host::services::accounts::create_project_for(&st, "bench", None, None).await.unwrap();
    let d = st.domains.add(&st.store, &project.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    st.store.set_domain_inbound(&project.id, &d.id, true, st.clock.now_ms()).await.unwrap();
    let before = st.store.count_inbound().await.unwrap();
    let t = Instant::now();
    let accepted = send_all(port, messages, clients).await;
    let deadline = Instant::now() + Duration::from_secs(600);
    while st.store.count_inbound().await.unwrap() > before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let applied = t.elapsed().as_secs_f64();
    let received = herald_host::infra::metrics::inbound_count("received");
    println!(
        "  herald: {messages} accepted in {accepted:.1} s = {:.0} messages/s; applied ({received} email.received events) \
         in {applied:.1} s = {:.0} messages/s",
        messages as f64 / accepted,
        messages as f64 / applied
    );
    println!("  peak RSS of the process {:.0} MB", peak_rss_mb(std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
}
