//! A real SMTP server on loopback for tests: it speaks enough SMTP for lettre (EHLO, MAIL, RCPT, DATA,
//! RSET, NOOP, QUIT) and keeps every accepted message. Recipients whose local part starts with
//! `bounce` are refused with 550; those starting with `tempfail` get 451 for the first `tempfails`
//! attempts. Herald's own mail (from [`SYSTEM_FROM`], the test server's system sender) is kept apart,
//! so the tests of project mail count only theirs.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[derive(Debug, Clone)]
pub struct Received {
    pub from: String,
    pub to: Vec<String>,
    pub data: String,
}

/// The envelope sender of Herald's own mail on a test server (its public URL has no domain name).
pub const SYSTEM_FROM: &str = "no-reply@localhost";

#[derive(Clone)]
pub struct SmtpSink {
    pub addr: SocketAddr,
    pub messages: Arc<Mutex<Vec<Received>>>,
    pub system: Arc<Mutex<Vec<Received>>>,
    tempfails: Arc<Mutex<usize>>,
}

impl SmtpSink {
    pub async fn start(tempfails: usize) -> SmtpSink {
        Self::start_on(0, tempfails).await
    }

    /// A sink on `port` of loopback (0: any free one), say where a relay that was down comes back.
    pub async fn start_on(port: u16, tempfails: usize) -> SmtpSink {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let sink = SmtpSink {
            addr: listener.local_addr().unwrap(),
            messages: Arc::default(),
            system: Arc::default(),
            tempfails: Arc::new(Mutex::new(tempfails)),
        };
        let s = sink.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move { s.session(stream).await });
            }
        });
        sink
    }

    pub fn url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.messages.lock().unwrap().clone()
    }

    /// Herald's own mail received so far.
    pub fn system_received(&self) -> Vec<Received> {
        self.system.lock().unwrap().clone()
    }

    /// Waits (up to ten seconds) until at least `n` of Herald's own mails arrived, and answers them.
    pub async fn wait_for_system(&self, n: usize) -> Vec<Received> {
        for _ in 0..400 {
            let got = self.system_received();
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("expected {n} system mails, got {}", self.system_received().len());
    }

    /// Waits (up to ten seconds) until at least `n` messages arrived, and answers them.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        for _ in 0..400 {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("expected {n} messages, got {}", self.received().len());
    }

    async fn session(&self, stream: tokio::net::TcpStream) {
        let (r, mut w) = stream.into_split();
        let mut lines = BufReader::new(r).lines();
        let _ = w.write_all(b"220 sink.test ESMTP\r\n").await;
        let (mut from, mut to) = (String::new(), Vec::new());
        while let Ok(Some(line)) = lines.next_line().await {
            let upper = line.to_uppercase();
            let reply: String = if upper.starts_with("EHLO") || upper.starts_with("HELO") {
                "250-sink.test\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n".into()
            } else if upper.starts_with("MAIL FROM:") {
                from = line[10..].trim().trim_matches(['<', '>']).to_string();
                to.clear();
                "250 OK\r\n".into()
            } else if upper.starts_with("RCPT TO:") {
                let rcpt = line[8..].trim().trim_matches(['<', '>']).to_string();
                if rcpt.starts_with("bounce") {
                    "550 5.1.1 No such user\r\n".into()
                } else if rcpt.starts_with("tempfail") && {
                    let mut n = self.tempfails.lock().unwrap();
                    let fail = *n > 0;
                    if fail {
                        *n -= 1;
                    }
                    fail
                } {
                    "451 4.3.0 Try again later\r\n".into()
                } else {
                    to.push(rcpt);
                    "250 OK\r\n".into()
                }
            } else if upper == "DATA" {
                let _ = w.write_all(b"354 Go ahead\r\n").await;
                let data = read_data(&mut lines, String::new()).await;
                let got = Received { from: from.clone(), to: to.clone(), data };
                if from == SYSTEM_FROM {
                    self.system.lock().unwrap().push(got)
                } else {
                    self.messages.lock().unwrap().push(got)
                }
                "250 OK queued\r\n".into()
            } else if upper == "QUIT" {
                let _ = w.write_all(b"221 Bye\r\n").await;
                return;
            } else {
                "250 OK\r\n".into()
            };
            if w.write_all(reply.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

/// The lines of a message after DATA up to its lone `.`, dot-unstuffed (RFC 5321 4.5.2), after `data`.
pub async fn read_data(
    lines: &mut tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    mut data: String,
) -> String {
    while let Ok(Some(l)) = lines.next_line().await {
        if l == "." {
            break;
        }
        data.push_str(l.strip_prefix('.').unwrap_or(&l));
        data.push_str("\r\n");
    }
    data
}

/// A header's value, with folded continuation lines joined.
pub fn header(data: &str, name: &str) -> Option<String> {
    let head = data.split("\r\n\r\n").next().unwrap_or("");
    let mut unfolded: Vec<String> = Vec::new();
    for l in head.lines() {
        match (l.starts_with([' ', '\t']), unfolded.last_mut()) {
            (true, Some(prev)) => {
                prev.push(' ');
                prev.push_str(l.trim());
            }
            _ => unfolded.push(l.to_string()),
        }
    }
    unfolded.iter().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// The HTML part of a received message.
pub fn html_of(m: &Received) -> String {
    let parsed = mail_parser::MessageParser::default().parse(m.data.as_bytes()).unwrap();
    parsed.body_html(0).unwrap().to_string()
}

/// A quoted-printable body decoded (the mails are ASCII with lines longer than 76 characters).
pub fn decoded(m: &Received) -> String {
    let body = m.data.split_once("\r\n\r\n").map_or("", |(_, b)| b).replace("=\r\n", "");
    let (mut out, mut rest) = (Vec::new(), body.as_bytes());
    while let Some((&b, tail)) = rest.split_first() {
        match (b, tail.get(..2).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())) {
            (b'=', Some(v)) => {
                out.push(v);
                rest = &tail[2..];
            }
            _ => {
                out.push(b);
                rest = tail;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// The token of the `/account/<page>` link in a mail.
pub fn token_in(m: &Received, page: &str) -> String {
    let text = decoded(m);
    let marker = format!("/account/{page}?token=");
    let at = text.find(&marker).unwrap_or_else(|| panic!("no {page} link in {text}")) + marker.len();
    text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect()
}
