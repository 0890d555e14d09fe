//! What strangers on port 25 cannot take from everyone else (docs/security.md#receiving-mail): clients
//! trickling messages from a few addresses, or holding connections open with NOOP from many, leave room
//! for a bounce from elsewhere and for the submission relay; and the disk space of received messages is
//! given back once they are applied.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_host::config::Config;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpSocket;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::harness::*;
use crate::smtp_sink::SmtpSink;

const RP: &str = "bounces.herald.test";

/// A raw SMTP client from a chosen loopback address.
struct Client {
    r: BufReader<OwnedReadHalf>,
    w: OwnedWriteHalf,
}

impl Client {
    async fn connect(from: &str, to: SocketAddr) -> Client {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(from.parse::<IpAddr>().unwrap(), 0)).unwrap();
        let (r, w) = socket.connect(to).await.unwrap().into_split();
        Client { r: BufReader::new(r), w }
    }

    /// The next reply (its last line), within `wait`; "" when the connection ended.
    async fn reply_within(&mut self, wait: Duration) -> String {
        loop {
            let mut line = String::new();
            match tokio::time::timeout(wait, self.r.read_line(&mut line)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return String::new(),
                Ok(Ok(_)) if line.len() > 3 && line.as_bytes()[3] == b'-' => continue,
                Ok(Ok(_)) => return line.trim_end().to_string(),
                Err(_) => return "no reply in time".into(),
            }
        }
    }

    async fn reply(&mut self) -> String {
        self.reply_within(Duration::from_secs(10)).await
    }

    async fn send(&mut self, line: &str) {
        let _ = self.w.write_all(format!("{line}\r\n").as_bytes()).await;
    }

    /// Sends a command and answers its reply.
    async fn say(&mut self, line: &str) -> String {
        self.send(line).await;
        self.reply().await
    }
}

async fn receiving(configure: impl FnOnce(&mut Config)) -> (Server, Proj, SmtpSink) {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.return_path_host = Some(RP.into());
    config.smtp.listen = Some("127.0.0.1:0".parse().unwrap());
    config.smtp.submission_listen = Some("127.0.0.1:0".parse().unwrap());
    config.smtp.submission_allow_plain = true;
    configure(&mut config);
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    (s, p, sink)
}

fn addrs(s: &Server) -> (SocketAddr, SocketAddr) {
    let r = s.running.as_ref().unwrap();
    (r.smtp_addr.unwrap(), r.submission_addr.unwrap())
}

/// A bounce from `from` to the return path, start to end; answers the reply to its end of data.
async fn bounce(from: &str, to: SocketAddr) -> String {
    let mut c = Client::connect(from, to).await;
    assert!(c.reply().await.starts_with("220 "));
    assert!(c.say("EHLO mx.example.org").await.starts_with("250 "));
    assert!(c.say("MAIL FROM:<> SIZE=2000").await.starts_with("250 "));
    assert!(c.say(&format!("RCPT TO:<postmaster@{RP}>")).await.starts_with("250 "));
    let data = c.say("DATA").await;
    if !data.starts_with("354") {
        return data;
    }
    c.say("Subject: delivery report\r\n\r\nnothing to report\r\n.").await
}

/// A message submitted with the project's secret key from `from`; answers the reply to its end of data.
async fn submit(from: &str, to: SocketAddr, key: &str) -> String {
    use base64::Engine as _;
    let mut c = Client::connect(from, to).await;
    assert!(c.reply().await.starts_with("220 "));
    assert!(c.say("EHLO app.example.org").await.starts_with("250 "));
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("\0api\0{key}"));
    assert!(c.say(&format!("AUTH PLAIN {auth}")).await.starts_with("235 "));
    assert!(c.say("MAIL FROM:<hello@shop.test> SIZE=500").await.starts_with("250 "));
    assert!(c.say("RCPT TO:<someone@example.org>").await.starts_with("250 "));
    let data = c.say("DATA").await;
    if !data.starts_with("354") {
        return data;
    }
    c.say("From: hello@shop.test\r\nTo: someone@example.org\r\nSubject: hi\r\n\r\nhello\r\n.").await
}

#[tokio::test]
async fn messages_trickled_from_a_few_addresses_hold_up_neither_a_bounce_from_elsewhere_nor_submission() {
    let (s, p, _sink) = receiving(|c| c.smtp.timeout_secs = 5).await;
    let (inbound, submission) = addrs(&s);
    // 22 sessions from three addresses start a message of up to the size limit and send a byte a second.
    let mut tricklers = Vec::new();
    for i in 0..22 {
        let mut c = Client::connect(&format!("127.0.0.{}", 2 + i % 3), inbound).await;
        assert!(c.reply().await.starts_with("220 "));
        assert!(c.say("EHLO attacker.test").await.starts_with("250 "));
        assert!(c.say("MAIL FROM:<a@attacker.test>").await.starts_with("250 "));
        assert!(c.say(&format!("RCPT TO:<anything@{RP}>")).await.starts_with("250 "));
        assert!(c.say("DATA").await.starts_with("354"), "message {i} started");
        tricklers.push(c);
    }
    let trickle = tokio::spawn(async move {
        let started = Instant::now();
        let mut ended = Vec::new();
        while started.elapsed() < Duration::from_secs(45) && ended.len() < tricklers.len() {
            for (i, c) in tricklers.iter_mut().enumerate() {
                if !ended.iter().any(|(j, _)| *j == i) {
                    c.send("x").await;
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            for (i, c) in tricklers.iter_mut().enumerate() {
                if ended.iter().all(|(j, _)| *j != i) {
                    let r = c.reply_within(Duration::from_millis(5)).await;
                    if r != "no reply in time" {
                        ended.push((i, r));
                    }
                }
            }
        }
        (ended, started.elapsed())
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    let reply = bounce("127.0.0.9", inbound).await;
    assert!(reply.starts_with("250 "), "a bounce from another address goes through: {reply}");
    let key = p.json["secret"].as_str().unwrap();
    let reply = submit("127.0.0.2", submission, key).await;
    assert!(reply.starts_with("250 "), "submission, even from a trickling address, goes through: {reply}");
    assert!(started.elapsed() < Duration::from_secs(4), "without waiting: {:?}", started.elapsed());
    // The tricklers are cut off once their grace has passed, well before the message deadline.
    let (ended, took) = trickle.await.unwrap();
    assert_eq!(ended.len(), 22, "every trickler was closed in {took:?}: {ended:?}");
    assert!(ended.iter().all(|(_, r)| r.starts_with("421 4.4.2")), "{ended:?}");
    s.stop().await;
}

#[tokio::test]
async fn clients_holding_connections_with_noop_from_a_hundred_addresses_lock_out_no_one() {
    let (s, p, _sink) = receiving(|c| c.smtp.timeout_secs = 5).await;
    let (inbound, submission) = addrs(&s);
    // 100 addresses open 10 connections each, the most one address may hold: 1,000, every slot.
    let mut holders = Vec::new();
    for a in 1..=100 {
        for _ in 0..10 {
            let mut c = Client::connect(&format!("127.0.2.{a}"), inbound).await;
            assert!(c.reply().await.starts_with("220 "), "holder from 127.0.2.{a}");
            holders.push(c);
        }
    }
    let mut extra = Client::connect("127.0.2.1", inbound).await;
    assert!(extra.reply().await.starts_with("421 4.7.0"), "an eleventh from one address is turned away");
    let hold = tokio::spawn(async move {
        for _ in 0..15 {
            for c in holders.iter_mut() {
                c.send("NOOP").await;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        holders.len()
    });
    // Submission has its own connections: greeted at once.
    let key = p.json["secret"].as_str().unwrap();
    let started = Instant::now();
    assert!(submit("127.0.3.1", submission, key).await.starts_with("250 "), "submission works");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    // A new port-25 client is kept waiting until idle clients are closed at the command timeout, then
    // greeted.
    let started = Instant::now();
    let mut c = Client::connect("127.0.3.2", inbound).await;
    let greeting = c.reply_within(Duration::from_secs(30)).await;
    assert!(greeting.starts_with("220 "), "greeted: {greeting}");
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    assert!(c.say("EHLO mx.example.org").await.starts_with("250 "));
    hold.abort();
    // A session that does nothing but RSET is closed at its command cap.
    let mut c = Client::connect("127.0.3.3", inbound).await;
    let _ = c.reply_within(Duration::from_secs(30)).await;
    assert!(c.say("EHLO mx.example.org").await.starts_with("250 "));
    let mut last = String::new();
    for _ in 0..2100 {
        c.send("RSET").await;
    }
    for _ in 0..2100 {
        last = c.reply().await;
        if !last.starts_with("250") {
            break;
        }
    }
    assert!(last.starts_with("421 4.7.0"), "closed at the command cap: {last}");
    // Greeting over and over is idling too.
    let mut c = Client::connect("127.0.3.4", inbound).await;
    let _ = c.reply_within(Duration::from_secs(30)).await;
    let started = Instant::now();
    let closed = loop {
        let r = c.say("EHLO mx.example.org").await;
        if !r.starts_with("250") || started.elapsed() > Duration::from_secs(20) {
            break r;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(closed.starts_with("421 4.4.2"), "a client repeating EHLO is closed when idle: {closed}");
    s.stop().await;
}

/// Bytes of the files under `dir`.
fn disk(dir: &std::path::Path) -> u64 {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        n += if meta.is_dir() { disk(&entry.path()) } else { meta.len() };
    }
    n
}

#[tokio::test]
async fn the_disk_space_of_received_messages_is_given_back_once_they_are_applied() {
    let dir = Config::test_scratch().join(format!("spool-disk-{}", uuid::Uuid::new_v4()));
    let (db, spool) = (dir.join("db"), dir.join("spool"));
    let (s, _p, _sink) = receiving(|c| {
        c.db = format!("surrealkv://{}", db.display());
        c.smtp.spool_dir = spool.clone();
        c.smtp.messages_per_minute = 100;
    })
    .await;
    let (inbound, _) = addrs(&s);
    let before = disk(&dir);
    // A dozen messages of 10 MiB of text to the return path (not reports: read and dropped).
    let line = format!("{}\r\n", "0123456789abcdef".repeat(4));
    let body = line.repeat((10 << 20) / line.len());
    let mut c = Client::connect("127.0.0.7", inbound).await;
    assert!(c.reply().await.starts_with("220 "));
    assert!(c.say("EHLO mx.example.org").await.starts_with("250 "));
    for i in 0..12 {
        assert!(c.say("MAIL FROM:<someone@example.org>").await.starts_with("250 "));
        assert!(c.say(&format!("RCPT TO:<junk{i}@{RP}>")).await.starts_with("250 "));
        assert!(c.say("DATA").await.starts_with("354"));
        let _ = c.w.write_all(format!("Subject: junk {i}\r\n\r\n").as_bytes()).await;
        let _ = c.w.write_all(body.as_bytes()).await;
        let reply = c.say(".").await;
        assert!(reply.starts_with("250 "), "message {i}: {reply}");
    }
    let accepted = 12 * body.len() as u64;
    let started = Instant::now();
    while s.state.store.count_inbound().await.unwrap() > 0 {
        assert!(started.elapsed() < Duration::from_secs(60), "the messages were applied");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let applied = Instant::now();
    let grown = loop {
        let grown = disk(&dir).saturating_sub(before);
        let emptied = s.state.inbound.spooled_bytes() == 0;
        if (grown <= accepted / 4 && emptied) || applied.elapsed() > Duration::from_secs(30) {
            break grown;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!("the server's files grew {} KiB for {} MiB accepted", grown >> 10, accepted >> 20);
    assert!(
        grown <= accepted / 4,
        "the server's files grew {grown} bytes for {accepted} accepted, 30 s after they were applied"
    );
    assert_eq!(s.state.inbound.spooled_bytes(), 0, "the spool is empty");
    s.stop().await;
}

/// The peak resident memory of a process, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap().trim().trim_end_matches(" kB").trim();
    kb.parse::<u64>().unwrap() * 1024
}

#[tokio::test]
async fn large_messages_at_once_cost_the_server_little_more_memory_than_their_bytes() {
    let dir = Config::test_scratch().join(format!("smtp-memory-{}", uuid::Uuid::new_v4()));
    let (port, smtp_port) = (crate::binary::free_port(), crate::binary::free_port());
    let mut c = crate::binary::herald(&dir, port);
    c.env("HERALD_SECRET", "a test secret of the memory test")
        .env("HERALD_SMTP_LISTEN", format!("127.0.0.1:{smtp_port}"))
        .env("HERALD_RETURN_PATH_HOST", RP);
    let server = crate::binary::serve(c);
    assert!(crate::binary::wait_until_up(&format!("http://127.0.0.1:{port}")).await, "the server came up");
    let pid = server.0.id();
    let inbound: SocketAddr = format!("127.0.0.1:{smtp_port}").parse().unwrap();
    let before = peak_rss(pid);
    // Eight clients from eight addresses send 24 MiB each at once.
    let line = format!("{}\r\n", "0123456789abcdef".repeat(4));
    let body = Arc::new(line.repeat((24 << 20) / line.len()));
    let mut clients = Vec::new();
    for i in 0..8 {
        let body = body.clone();
        clients.push(tokio::spawn(async move {
            let mut c = Client::connect(&format!("127.0.4.{}", i + 1), inbound).await;
            assert!(c.reply().await.starts_with("220 "));
            assert!(c.say("EHLO mx.example.org").await.starts_with("250 "));
            assert!(c.say("MAIL FROM:<someone@example.org>").await.starts_with("250 "));
            assert!(c.say(&format!("RCPT TO:<junk@{RP}>")).await.starts_with("250 "));
            assert!(c.say("DATA").await.starts_with("354"));
            let _ = c.w.write_all(b"Subject: big\r\n\r\n").await;
            for piece in body.as_bytes().chunks(1 << 20) {
                let _ = c.w.write_all(piece).await;
            }
            c.say(".").await
        }));
    }
    for c in clients {
        let reply = c.await.unwrap();
        assert!(reply.starts_with("250 "), "{reply}");
    }
    let in_flight = 8 * body.len() as u64;
    // Until they are applied (the spool is emptied).
    let spool = std::path::PathBuf::from(format!("{}.spool", dir.display()));
    let started = Instant::now();
    while std::fs::read_dir(&spool).map(|d| d.count()).unwrap_or(0) > 0 {
        assert!(started.elapsed() < Duration::from_secs(60), "the messages were applied");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let grown = peak_rss(pid).saturating_sub(before);
    println!("peak memory grew {} MiB for {} MiB in flight", grown >> 20, in_flight >> 20);
    assert!(grown <= 2 * in_flight, "peak memory grew {} MiB for {} MiB in flight", grown >> 20, in_flight >> 20);
    drop(server);
}
