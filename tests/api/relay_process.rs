//! A real SMTP relay in a process of its own, for the delivery tests that kill and restart their relay
//! (docs/delivery.md): killed with `kill -9`, its connections die with it, as a real relay's do. The
//! test binary runs itself as that process (`serve` below, ignored in a normal run), on a port the test
//! chose, so a restart listens where the first one did.
//!
//! It keeps every message it accepts as a file in its folder (so what a killed relay took is still
//! counted), answers `451` to every recipient of the domains in `tempfail_domains` (and notes each
//! refusal), and waits
//! `delay_ms` before each `250` to DATA (a relay that takes its time).

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const PORT: &str = "HERALD_TEST_RELAY_PORT";
const DIR: &str = "HERALD_TEST_RELAY_DIR";
const TEMPFAIL: &str = "HERALD_TEST_RELAY_TEMPFAIL_DOMAINS";
const DELAY: &str = "HERALD_TEST_RELAY_DELAY_MS";

/// How a relay behaves.
#[derive(Clone, Default)]
pub struct Rules {
    /// Recipient domains answered `451 4.7.1` (greylisting, a throttled destination).
    pub tempfail_domains: Vec<String>,
    /// Milliseconds before each `250` to DATA.
    pub delay_ms: u64,
}

/// A relay process: its port, its folder of accepted messages, and the running child (None while
/// down).
pub struct Relay {
    pub port: u16,
    pub dir: PathBuf,
    rules: Rules,
    child: Option<Child>,
}

/// One accepted message: its recipient and Message-ID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub rcpt: String,
    pub message_id: String,
}

impl Relay {
    /// A relay on a free port, running once it answers.
    pub async fn start(rules: Rules) -> Relay {
        let dir = herald_host::config::Config::test_scratch().join(format!("relay-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut relay = Relay { port: crate::binary::free_port(), dir, rules, child: None };
        relay.up().await;
        relay
    }

    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    /// Starts the process (again) and waits until it greets.
    pub async fn up(&mut self) {
        assert!(self.child.is_none(), "the relay already runs");
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["relay_process::serve", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(PORT, self.port.to_string())
            .env(DIR, &self.dir)
            .env(TEMPFAIL, self.rules.tempfail_domains.join(","))
            .env(DELAY, self.rules.delay_ms.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        for _ in 0..200 {
            if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await {
                let mut line = String::new();
                let _ = BufReader::new(s).read_line(&mut line).await;
                if line.starts_with("220") {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the relay process never greeted on port {}", self.port);
    }

    /// Changes how the relay behaves from its next start.
    pub fn set_rules(&mut self, rules: Rules) {
        self.rules = rules;
    }

    /// `kill -9`: the process and every connection it had are gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Every message accepted so far, by every run of the relay.
    pub fn accepted(&self) -> Vec<Accepted> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if !name.ends_with(".eml") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
            let rcpt = crate::smtp_sink::header(&text, "X-Relay-Rcpt").unwrap_or_default();
            let message_id = crate::smtp_sink::header(&text, "Message-ID").unwrap_or_default();
            out.push(Accepted { rcpt, message_id });
        }
        out
    }

    /// The recipients refused with `451`, one per refusal.
    pub fn refused(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.dir.join("refused.log")).unwrap_or_default();
        text.lines().map(str::to_string).collect()
    }

    /// How many times each Message-ID was accepted.
    pub fn counts(&self) -> HashMap<String, usize> {
        let mut by_id = HashMap::new();
        for a in self.accepted() {
            *by_id.entry(a.message_id).or_default() += 1;
        }
        by_id
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The relay process itself: started by [`Relay::up`] through the test harness, it serves until it is
/// killed. Ignored in a normal run (it needs its settings).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the relay process of the delivery tests, started by them"]
async fn serve() {
    let (Ok(port), Ok(dir)) = (std::env::var(PORT), std::env::var(DIR)) else { return };
    let tempfail: Vec<String> = std::env::var(TEMPFAIL)
        .unwrap_or_default()
        .split(',')
        .filter(|d| !d.is_empty())
        .map(|d| d.to_ascii_lowercase())
        .collect();
    let delay = Duration::from_millis(std::env::var(DELAY).ok().and_then(|d| d.parse().ok()).unwrap_or(0));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port.parse::<u16>().unwrap())).await.unwrap();
    let dir = PathBuf::from(dir);
    let seq = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let (dir, tempfail, seq) = (dir.clone(), tempfail.clone(), seq.clone());
        tokio::spawn(async move { session(stream, &dir, &tempfail, delay, &seq).await });
    }
}

async fn session(
    stream: tokio::net::TcpStream,
    dir: &Path,
    tempfail: &[String],
    delay: Duration,
    seq: &std::sync::atomic::AtomicU64,
) {
    let _ = stream.set_nodelay(true);
    let (r, mut w) = stream.into_split();
    let mut lines = BufReader::new(r).lines();
    let _ = w.write_all(b"220 relay.test ESMTP\r\n").await;
    let mut to: Vec<String> = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        let upper = line.to_uppercase();
        let reply: String = if upper.starts_with("EHLO") || upper.starts_with("HELO") {
            "250-relay.test\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n".into()
        } else if upper.starts_with("MAIL FROM:") {
            to.clear();
            "250 OK\r\n".into()
        } else if upper.starts_with("RCPT TO:") {
            let rcpt = line[8..].trim().trim_matches(['<', '>']).to_string();
            let domain = rcpt.rsplit_once('@').map(|(_, d)| d.to_ascii_lowercase()).unwrap_or_default();
            if tempfail.contains(&domain) {
                use std::io::Write;
                let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("refused.log"));
                let _ = log.and_then(|mut f| writeln!(f, "{rcpt}"));
                "451 4.7.1 Greylisted, please try again later\r\n".into()
            } else {
                to.push(rcpt);
                "250 OK\r\n".into()
            }
        } else if upper == "DATA" {
            let _ = w.write_all(b"354 Go ahead\r\n").await;
            let data = crate::smtp_sink::read_data(&mut lines, format!("X-Relay-Rcpt: {}\r\n", to.join(","))).await;
            tokio::time::sleep(delay).await;
            // Kept before the reply, so whatever was answered 250 is on disk.
            let n = seq.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let name = format!("{}-{}-{n}", std::process::id(), uuid::Uuid::new_v4());
            let tmp = dir.join(format!(".{name}.tmp"));
            if std::fs::write(&tmp, data).is_err() || std::fs::rename(&tmp, dir.join(format!("{name}.eml"))).is_err() {
                "451 4.3.0 Cannot keep the message\r\n".into()
            } else {
                "250 OK queued\r\n".into()
            }
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
