//! One SMTP conversation, for either server (see the module above): commands parsed by `smtp-proto`,
//! STARTTLS, AUTH PLAIN and LOGIN on the submission server, the message read by its DATA receiver, and
//! what each step asks of the core.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use smtp_proto::request::receiver::{DataReceiver, RequestReceiver};
use smtp_proto::{AUTH_LOGIN, AUTH_PLAIN, Request};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::limits::{Held, Slot, network};
use super::{Mode, Resources, Shared};
use crate::domain::contacts::{is_email, normalize_email};
use crate::error::{Code, Error};
use crate::infra::spool::{Draft, SpoolError};
use crate::services::inbound::Verdict;
use crate::state::AppState;

/// Recipients of one message.
const MAX_RECIPIENTS: usize = 100;
/// Commands that fail before the connection is closed.
const MAX_ERRORS: u32 = 10;
/// Failed AUTH attempts before the connection is closed.
const MAX_AUTH_FAILURES: u32 = 3;
/// The longest a whole message may take to arrive.
const DATA_DEADLINE: Duration = Duration::from_secs(600);
/// The longest line accepted outside DATA (an AUTH response).
const MAX_LINE: usize = 4096;
/// The longest a session may last, and the most commands it may give (a mail server delivering a
/// queue reconnects).
const MAX_SESSION: Duration = Duration::from_secs(1800);
const MAX_COMMANDS: u32 = 2000;
/// Bytes a second a message must arrive at on average once [`SLOW_GRACE`] has passed: a client
/// trickling a byte now and then is cut off instead of holding its connection for the whole deadline.
const MIN_DATA_RATE: u64 = 1024;
const SLOW_GRACE: Duration = Duration::from_secs(30);
/// Bytes of a message gathered before they go to the spool.
const WRITE_CHUNK: usize = 64 * 1024;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The connection: plain until STARTTLS.
enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// Only while the handshake runs.
    Gone,
}

impl Conn {
    fn io(&mut self) -> Option<&mut dyn Io> {
        match self {
            Conn::Plain(s) => Some(s),
            Conn::Tls(s) => Some(s.as_mut()),
            Conn::Gone => None,
        }
    }
}

/// The connection ends (the client left, timed out, or broke a limit).
struct Closed;

struct Session {
    state: Arc<AppState>,
    shared: Arc<Shared>,
    mode: Mode,
    peer: SocketAddr,
    /// The client's network, what its limits count under.
    net: IpAddr,
    started: tokio::time::Instant,
    commands: u32,
    /// When the client last moved a conversation forward (NOOP, RSET and failures do not).
    progressed: tokio::time::Instant,
    conn: Conn,
    /// Bytes read and not yet parsed.
    pending: Vec<u8>,
    timeout: Duration,
    helo: Option<String>,
    /// Submission: the project the client authenticated as.
    project: Option<String>,
    /// Submission: the digest of the key it authenticated with, checked again at each `MAIL FROM` and
    /// before a message is accepted (a key regenerated while the session is open stops it sending).
    key: Option<String>,
    mail_from: Option<String>,
    /// The size MAIL FROM declared (0: none).
    declared: usize,
    rcpts: Vec<String>,
    errors: u32,
    auth_failures: u32,
}

/// Answers a client over the connection limits with `line` and closes.
pub(super) async fn refuse(mut socket: TcpStream, line: &str) {
    let _ = tokio::time::timeout(Duration::from_secs(5), socket.write_all(format!("{line}\r\n").as_bytes())).await;
}

/// Where a message's bytes go as they arrive: the spool (received mail), or memory (a submission, read
/// whole by the relay).
enum Sink {
    Spool(Draft),
    Memory(Vec<u8>),
}

/// How reading a message ended.
enum Read {
    Whole(Sink),
    /// Larger than its limit.
    TooBig,
    /// The server's or the network's bytes in flight, or the spool, had no room for it.
    NoRoom,
    /// The spool could not be written.
    Failed,
}

pub(super) async fn run(
    state: Arc<AppState>,
    shared: Arc<Shared>,
    mode: Mode,
    socket: TcpStream,
    peer: SocketAddr,
    _slot: Slot,
) {
    let timeout = Duration::from_secs(state.config.smtp.timeout_secs);
    let now = tokio::time::Instant::now();
    let mut s = Session {
        state,
        shared,
        mode,
        peer,
        net: network(peer.ip()),
        started: now,
        commands: 0,
        progressed: now,
        conn: Conn::Plain(socket),
        pending: Vec::new(),
        timeout,
        helo: None,
        project: None,
        key: None,
        mail_from: None,
        declared: 0,
        rcpts: Vec::new(),
        errors: 0,
        auth_failures: 0,
    };
    let host = s.state.config.smtp.hostname.clone();
    if s.reply(&format!("220 {host} ESMTP Herald")).await.is_err() {
        return;
    }
    let _ = s.conversation().await;
}

impl Session {
    fn resources(&self) -> &Resources {
        self.shared.of(self.mode)
    }

    async fn reply(&mut self, line: &str) -> Result<(), Closed> {
        let timeout = self.timeout;
        let io = self.conn.io().ok_or(Closed)?;
        let mut out = Vec::with_capacity(line.len() + 2);
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
        match tokio::time::timeout(timeout, io.write_all(&out)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(Closed),
        }
    }

    /// Reads more bytes into `pending`.
    async fn read_more(&mut self, deadline: Option<tokio::time::Instant>) -> Result<(), Closed> {
        let mut wait = self.timeout;
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_duration_since(tokio::time::Instant::now()));
        }
        let io = self.conn.io().ok_or(Closed)?;
        let mut buf = [0u8; 16 * 1024];
        match tokio::time::timeout(wait, io.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {
                self.pending.extend_from_slice(&buf[..n]);
                Ok(())
            }
            Ok(_) => Err(Closed),
            Err(_) => {
                let _ = self.reply("421 4.4.2 Timeout, closing the connection").await;
                Err(Closed)
            }
        }
    }

    /// The next command.
    async fn command(&mut self, receiver: &mut RequestReceiver) -> Result<Result<Request<String>, String>, Closed> {
        loop {
            let mut iter = self.pending.iter();
            let parsed = match receiver.ingest(&mut iter) {
                Ok(r) => Some(Ok(r.into_owned())),
                Err(smtp_proto::Error::NeedsMoreData { .. }) => None,
                Err(e) => Some(Err(syntax(&e))),
            };
            let rest = iter.as_slice().to_vec();
            self.pending = rest;
            if let Some(p) = parsed {
                return Ok(p);
            }
            self.read_more(None).await?;
        }
    }

    /// One line (an AUTH response), without its line break.
    async fn line(&mut self) -> Result<String, Closed> {
        loop {
            if let Some(pos) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=pos).collect();
                return Ok(String::from_utf8_lossy(&line).trim_end_matches(['\r', '\n']).to_string());
            }
            if self.pending.len() > MAX_LINE {
                let _ = self.reply("500 5.5.6 Line too long").await;
                return Err(Closed);
            }
            self.read_more(None).await?;
        }
    }

    async fn conversation(&mut self) -> Result<(), Closed> {
        let mut receiver = RequestReceiver::default();
        loop {
            let request = self.command(&mut receiver).await?;
            self.commands += 1;
            if self.commands > MAX_COMMANDS || self.started.elapsed() > MAX_SESSION {
                let _ = self.reply("421 4.7.0 This session has lasted long enough, connect again").await;
                return Err(Closed);
            }
            // A greeting moves forward only once (and again after STARTTLS): EHLO over and over is idling.
            let greeting = self.helo.is_none() && matches!(request, Ok(Request::Ehlo { .. } | Request::Helo { .. }));
            let forward = greeting
                || matches!(
                    request,
                    Ok(Request::StartTls
                        | Request::Auth { .. }
                        | Request::Mail { .. }
                        | Request::Rcpt { .. }
                        | Request::Data
                        | Request::Quit)
                );
            if forward {
                self.progressed = tokio::time::Instant::now();
            } else if self.progressed.elapsed() >= self.timeout {
                // NOOP and the like keep a connection open but do nothing: an idle client is closed at
                // the command timeout all the same.
                let _ = self.reply("421 4.4.2 Idle too long, closing the connection").await;
                return Err(Closed);
            }
            let request = match request {
                Ok(r) => r,
                Err(message) => {
                    self.failed(&message).await?;
                    continue;
                }
            };
            match request {
                Request::Ehlo { host } => self.ehlo(host).await?,
                Request::Helo { host } => {
                    self.helo = Some(host);
                    self.reset();
                    let host = self.state.config.smtp.hostname.clone();
                    self.reply(&format!("250 {host}")).await?
                }
                Request::StartTls => self.starttls(&mut receiver).await?,
                Request::Auth { mechanism, initial_response } => self.auth(mechanism, initial_response).await?,
                Request::Mail { from } => self.mail(from.address, from.size).await?,
                Request::Rcpt { to } => self.rcpt(to.address).await?,
                Request::Data => self.data().await?,
                Request::Rset => {
                    self.reset();
                    self.reply("250 2.0.0 OK").await?
                }
                Request::Noop { .. } => self.reply("250 2.0.0 OK").await?,
                Request::Vrfy { .. } => self.reply("252 2.5.2 Cannot verify the user").await?,
                Request::Quit => {
                    let _ = self.reply("221 2.0.0 Bye").await;
                    return Ok(());
                }
                Request::Bdat { .. } => self.failed("502 5.5.1 BDAT is not offered here").await?,
                _ => self.failed("502 5.5.1 Command not implemented").await?,
            }
        }
    }

    /// A failed command: its reply, and the end of the connection after too many.
    async fn failed(&mut self, reply: &str) -> Result<(), Closed> {
        self.errors += 1;
        self.reply(reply).await?;
        if self.errors >= MAX_ERRORS {
            let _ = self.reply("421 4.7.0 Too many errors, closing the connection").await;
            return Err(Closed);
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.mail_from = None;
        self.declared = 0;
        self.rcpts.clear();
    }

    fn tls(&self) -> bool {
        matches!(self.conn, Conn::Tls(_))
    }

    /// AUTH is offered on the submission server over TLS, or in the clear to a loopback client when the
    /// operator allows it.
    fn may_auth(&self) -> bool {
        self.mode == Mode::Submission
            && (self.tls() || (self.state.config.smtp.submission_allow_plain && self.peer.ip().is_loopback()))
    }

    async fn ehlo(&mut self, host: String) -> Result<(), Closed> {
        self.helo = Some(host);
        self.reset();
        let c = &self.state.config.smtp;
        let mut lines = vec![c.hostname.clone(), format!("SIZE {}", c.max_message_bytes), "8BITMIME".into()];
        lines.push("ENHANCEDSTATUSCODES".into());
        if self.shared.tls.is_some() && !self.tls() {
            lines.push("STARTTLS".into());
        }
        if self.may_auth() {
            lines.push("AUTH PLAIN LOGIN".into());
        }
        let last = lines.len() - 1;
        let text: Vec<String> =
            lines.iter().enumerate().map(|(i, l)| format!("250{}{l}", if i == last { ' ' } else { '-' })).collect();
        self.reply(&text.join("\r\n")).await
    }

    async fn starttls(&mut self, receiver: &mut RequestReceiver) -> Result<(), Closed> {
        let Some(acceptor) = self.shared.tls.clone().filter(|_| !self.tls()) else {
            return self.failed("502 5.5.1 STARTTLS is not offered").await;
        };
        self.reply("220 2.0.0 Ready to start TLS").await?;
        let Conn::Plain(tcp) = std::mem::replace(&mut self.conn, Conn::Gone) else { return Err(Closed) };
        match tokio::time::timeout(self.timeout, acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => self.conn = Conn::Tls(Box::new(tls)),
            _ => return Err(Closed),
        }
        // Nothing said before the handshake counts after it (RFC 3207).
        self.pending.clear();
        *receiver = RequestReceiver::default();
        self.helo = None;
        self.project = None;
        self.key = None;
        self.reset();
        Ok(())
    }

    async fn auth(&mut self, mechanism: u64, initial: String) -> Result<(), Closed> {
        if !self.may_auth() {
            return self.failed("530 5.7.0 Must issue a STARTTLS command first").await;
        }
        if self.project.is_some() {
            return self.failed("503 5.5.1 Already authenticated").await;
        }
        let throttle_key = format!("smtp-auth:{}", self.peer.ip());
        let blocked = match self.state.login_failures.blocked(&throttle_key).await {
            Ok(wait) => wait.is_some(),
            Err(_) => return self.reply("454 4.7.0 Temporary authentication failure").await,
        };
        if blocked {
            let _ = self.reply("454 4.7.0 Too many failed attempts, try again later").await;
            return Err(Closed);
        }
        let decode = |s: &str| base64::engine::general_purpose::STANDARD.decode(s.trim()).ok();
        let password = if mechanism == AUTH_PLAIN {
            let response = if initial.is_empty() || initial == "=" {
                self.reply("334 ").await?;
                self.line().await?
            } else {
                initial
            };
            // authzid NUL authcid NUL password
            decode(&response).and_then(|b| b.split(|&c| c == 0).nth(2).map(|p| String::from_utf8_lossy(p).to_string()))
        } else if mechanism == AUTH_LOGIN {
            if initial.is_empty() {
                self.reply("334 VXNlcm5hbWU6").await?;
                self.line().await?;
            }
            self.reply("334 UGFzc3dvcmQ6").await?;
            let response = self.line().await?;
            decode(&response).map(|b| String::from_utf8_lossy(&b).to_string())
        } else {
            return self.failed("504 5.5.4 Unrecognized authentication type: use PLAIN or LOGIN").await;
        };
        let project = match password.as_deref() {
            Some(key) => match crate::services::relay::project_of_key(&self.state, key.trim()).await {
                Ok(p) => p,
                Err(_) => return self.reply("454 4.7.0 Temporary authentication failure").await,
            },
            None => None,
        };
        match project {
            Some(p) => {
                if let Err(e) = self.state.login_failures.succeeded(&throttle_key).await {
                    tracing::warn!(error = %e, "cannot clear the failed logins of an SMTP client");
                }
                self.project = Some(p);
                self.key = password.as_deref().map(|k| crate::infra::security::key_digest(k.trim()));
                self.reply("235 2.7.0 Authentication succeeded").await
            }
            None => {
                if let Err(e) = self.state.login_failures.failed(&throttle_key).await {
                    tracing::warn!(error = %e, "cannot count a failed SMTP login");
                }
                self.auth_failures += 1;
                self.reply("535 5.7.8 Authentication credentials invalid: use a project's secret key as the password")
                    .await?;
                if self.auth_failures >= MAX_AUTH_FAILURES {
                    return Err(Closed);
                }
                Ok(())
            }
        }
    }

    async fn mail(&mut self, from: String, size: usize) -> Result<(), Closed> {
        if self.helo.is_none() {
            return self.failed("503 5.5.1 Send EHLO first").await;
        }
        if self.mail_from.is_some() {
            return self.failed("503 5.5.1 Nested MAIL command").await;
        }
        let max = self.state.config.smtp.max_message_bytes;
        if size > max {
            return self.failed(&format!("552 5.3.4 Message size exceeds the limit of {max} bytes")).await;
        }
        if !self.resources().per_minute.check(&self.net.to_string()).allowed {
            return self.failed("451 4.7.1 Too many messages from your network, try again later").await;
        }
        self.declared = size;
        if self.mode == Mode::Submission {
            let Some(project) = self.project.clone() else {
                return self.failed("530 5.7.0 Authentication required").await;
            };
            if let Some(reply) = self.key_revoked().await {
                return self.failed(&reply).await;
            }
            let from = normalize_email(&from);
            if let Err(e) = crate::services::sending_domains::require_sender(&self.state.store, &project, &from).await {
                return self.failed(&format!("550 5.7.1 {}", one_line(&e.to_string()))).await;
            }
            self.mail_from = Some(from);
        } else {
            self.mail_from = Some(from.to_ascii_lowercase());
        }
        self.reply("250 2.1.0 OK").await
    }

    async fn rcpt(&mut self, to: String) -> Result<(), Closed> {
        if self.mail_from.is_none() {
            return self.failed("503 5.5.1 Send MAIL first").await;
        }
        if self.rcpts.len() >= MAX_RECIPIENTS {
            return self.reply("452 4.5.3 Too many recipients").await;
        }
        let address = normalize_email(&to);
        if !is_email(&address) {
            return self.failed("501 5.1.3 Bad recipient address syntax").await;
        }
        if self.mode == Mode::Inbound {
            match self.state.inbound.route(&address).await {
                Ok(Verdict::Accept(_)) => {}
                Ok(Verdict::Unknown) => {
                    return self
                        .failed(&format!("550 5.1.2 <{address}>: no mail is accepted for this domain here"))
                        .await;
                }
                Ok(Verdict::OverLimit) => {
                    return self.reply("452 4.2.2 The recipient's monthly inbound limit is reached").await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a recipient could not be checked");
                    return self.reply("451 4.3.0 Temporary failure, try again later").await;
                }
            }
        }
        if !self.rcpts.contains(&address) {
            self.rcpts.push(address);
        }
        self.reply("250 2.1.5 OK").await
    }

    /// Reads the message after 354 into `sink`, reserving its bytes in `held` as they arrive; past its
    /// limit, the budget or the spool's room it is read to its end and dropped.
    async fn read_message(&mut self, max: usize, mut sink: Sink, held: &mut Held) -> Result<Read, Closed> {
        let started = tokio::time::Instant::now();
        let deadline = started + DATA_DEADLINE;
        let mut receiver = DataReceiver::new();
        let mut chunk = Vec::new();
        let mut size = 0usize;
        let mut arrived = self.pending.len() as u64;
        let mut outcome: Option<Read> = None;
        loop {
            let mut iter = self.pending.iter();
            let done = receiver.ingest(&mut iter, &mut chunk);
            let rest = iter.as_slice().to_vec();
            self.pending = rest;
            if outcome.is_none() && (done || chunk.len() >= WRITE_CHUNK) && !chunk.is_empty() {
                size += chunk.len();
                outcome = if size > max {
                    Some(Read::TooBig)
                } else if !held.grow(chunk.len() as u64) {
                    Some(Read::NoRoom)
                } else {
                    match &mut sink {
                        Sink::Memory(m) => {
                            m.extend_from_slice(&chunk);
                            None
                        }
                        Sink::Spool(d) => match d.write(&chunk).await {
                            Ok(()) => None,
                            Err(SpoolError::Full) => Some(Read::NoRoom),
                            Err(SpoolError::Io(e)) => {
                                tracing::warn!(error = %e, "a received message could not be spooled");
                                Some(Read::Failed)
                            }
                        },
                    }
                };
                chunk.clear();
            }
            if outcome.is_some() {
                // Read to its end, keeping nothing.
                chunk.clear();
            }
            if done {
                return Ok(outcome.unwrap_or(Read::Whole(sink)));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                let _ = self.reply("421 4.4.2 The message took too long, closing the connection").await;
                return Err(Closed);
            }
            let elapsed = now - started;
            if elapsed > SLOW_GRACE && arrived < MIN_DATA_RATE * elapsed.as_secs() {
                let _ = self.reply("421 4.4.2 The message is arriving too slowly, closing the connection").await;
                return Err(Closed);
            }
            let before = self.pending.len();
            self.read_more(Some(deadline)).await?;
            arrived += (self.pending.len() - before) as u64;
        }
    }

    async fn data(&mut self) -> Result<(), Closed> {
        let Some(mail_from) = self.mail_from.clone() else {
            return self.failed("503 5.5.1 Send MAIL first").await;
        };
        if self.rcpts.is_empty() {
            return self.failed("554 5.5.1 No valid recipients").await;
        }
        // Held to the size it declared (else the limit).
        let max = match self.declared {
            0 => self.state.config.smtp.max_message_bytes,
            // An estimate (RFC 1870): a tenth and 4 KiB more are taken.
            declared => (declared + declared / 10 + 4096).min(self.state.config.smtp.max_message_bytes),
        };
        let mut held = self.resources().budget.hold(self.net);
        let sink = match self.mode {
            Mode::Submission => Sink::Memory(Vec::new()),
            Mode::Inbound => match self.state.inbound.draft().await {
                Ok(mut draft) => match draft.write(self.received_header().as_bytes()).await {
                    Ok(()) => Sink::Spool(draft),
                    Err(e) => return self.not_now(e).await,
                },
                Err(e) => return self.not_now(e).await,
            },
        };
        self.reply("354 Start mail input; end with <CRLF>.<CRLF>").await?;
        let read = self.read_message(max, sink, &mut held).await?;
        let rcpts = std::mem::take(&mut self.rcpts);
        self.reset();
        let reply = match read {
            Read::Whole(Sink::Spool(draft)) => self.receive(&mail_from, &rcpts, draft).await,
            Read::Whole(Sink::Memory(message)) => self.submit(&mail_from, &rcpts, message).await,
            Read::TooBig => format!("552 5.3.4 Message size exceeds the limit of {max} bytes"),
            Read::NoRoom => "452 4.3.1 Insufficient system resources, try again later".into(),
            Read::Failed => "451 4.3.0 Temporary failure, try again later".into(),
        };
        drop(held);
        self.reply(&reply).await
    }

    /// The spool cannot take a message now.
    async fn not_now(&mut self, e: SpoolError) -> Result<(), Closed> {
        self.reset();
        match e {
            SpoolError::Full => self.reply("452 4.3.1 Insufficient system storage, try again later").await,
            SpoolError::Io(e) => {
                tracing::warn!(error = %e, "a received message could not be spooled");
                self.reply("451 4.3.0 Temporary failure, try again later").await
            }
        }
    }

    /// The trace line a received message starts with.
    fn received_header(&self) -> String {
        let helo = self.helo.as_deref().unwrap_or("unknown");
        let with = if self.tls() { "ESMTPS" } else { "ESMTP" };
        format!(
            "Received: from {} ({}) by {} with {with}; {}\r\n",
            one_line(helo),
            self.peer.ip(),
            self.state.config.smtp.hostname,
            crate::infra::clock::rfc2822(self.state.clock.now_ms())
        )
    }

    /// Inbound: kept with its job before the 250.
    async fn receive(&self, mail_from: &str, rcpts: &[String], message: Draft) -> String {
        let helo = self.helo.as_deref().unwrap_or("unknown");
        match self.state.inbound.accept(mail_from, rcpts, message, &self.peer.ip().to_string(), helo).await {
            Ok(id) => format!("250 2.0.0 OK: queued as {id}"),
            Err(e) => {
                tracing::warn!(error = %e, "an inbound message could not be stored");
                "451 4.3.0 Temporary failure, try again later".into()
            }
        }
    }

    /// Submission: why the session may no longer send (its key was regenerated or its project
    /// disabled since AUTH, or the check failed for now); the session must authenticate again.
    async fn key_revoked(&mut self) -> Option<String> {
        let (Some(project), Some(key)) = (&self.project, &self.key) else {
            return Some("530 5.7.0 Authentication required".into());
        };
        match crate::services::relay::project_of_digest(&self.state, key).await {
            Ok(Some(p)) if &p == project => None,
            Ok(_) => {
                self.project = None;
                self.key = None;
                Some(
                    "535 5.7.8 Authentication credentials no longer valid: the key was revoked; authenticate again"
                        .into(),
                )
            }
            Err(_) => Some("454 4.7.0 Temporary authentication failure".into()),
        }
    }

    /// Submission: the same entry point as `/v1/send`.
    async fn submit(&mut self, mail_from: &str, rcpts: &[String], message: Vec<u8>) -> String {
        if let Some(reply) = self.key_revoked().await {
            return reply;
        }
        let Some(project) = &self.project else { return "530 5.7.0 Authentication required".into() };
        let st = &self.state;
        let sent = match crate::services::relay::command(project, mail_from, rcpts, &message) {
            Ok(cmd) => crate::services::send::send(st, &st.composer, &st.accepter, cmd).await,
            Err(e) => Err(e),
        };
        match sent {
            Ok(accepted) => {
                let ids: Vec<String> = accepted.iter().map(|a| a.email.clone()).collect();
                format!("250 2.0.0 OK: queued as {}", ids.join(","))
            }
            Err(e) => refusal(&e),
        }
    }
}

/// The SMTP reply of a send the core refused.
fn refusal(e: &Error) -> String {
    match e {
        Error::Internal(_) | Error::PluginUnavailable(_) | Error::StorageUnavailable(_) => {
            "451 4.3.0 Temporary failure, try again later".into()
        }
        Error::Refused { code: Code::BillingLimitExceeded, message, .. } => format!("452 4.5.3 {}", one_line(message)),
        Error::Validation(errors) => {
            let said: Vec<String> = errors.iter().map(|f| format!("{}: {}", f.field, f.message)).collect();
            format!("554 5.6.0 {}", one_line(&said.join("; ")))
        }
        Error::Refused { .. } | Error::QuotaExceeded { .. } | Error::SenderDomain { .. } | Error::Forbidden(_) => {
            format!("550 5.7.1 {}", one_line(&e.to_string()))
        }
        _ => format!("554 5.6.0 {}", one_line(&e.to_string())),
    }
}

fn one_line(s: &str) -> String {
    let s: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    s.chars().take(400).collect()
}

fn syntax(e: &smtp_proto::Error) -> String {
    let detail: Cow<'_, str> = match e {
        smtp_proto::Error::UnknownCommand => "Command unrecognized".into(),
        smtp_proto::Error::InvalidSenderAddress => "Bad sender address syntax".into(),
        smtp_proto::Error::InvalidRecipientAddress => "Bad recipient address syntax".into(),
        smtp_proto::Error::SyntaxError { syntax } => format!("Syntax: {syntax}").into(),
        smtp_proto::Error::InvalidParameter { param } => format!("Invalid parameter {param}").into(),
        smtp_proto::Error::UnsupportedParameter { param } => {
            format!("Unsupported parameter {}", one_line(param)).into()
        }
        smtp_proto::Error::ResponseTooLong => "Line too long".into(),
        _ => "Syntax error".into(),
    };
    let code = if matches!(e, smtp_proto::Error::UnknownCommand) { "500 5.5.1" } else { "501 5.5.4" };
    format!("{code} {detail}")
}
