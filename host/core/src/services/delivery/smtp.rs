//! Herald's own pool of SMTP sessions to the relay, over lettre's connection type.
//!
//! lettre's pooled transport cannot set `TCP_NODELAY`, and its connection writes the end-of-data
//! `.` in a write of its own after the message: with Nagle's algorithm on, that small write waits for
//! the ACK of the message, which the relay delays (40 ms on Linux), so every message costs ~45 ms per
//! session whatever the load. Here the TCP socket is opened by Herald with `TCP_NODELAY` and handed to
//! `AsyncSmtpConnection::connect_with_transport`; STARTTLS and AUTH go through lettre's connection API.
//! (Implicit TLS, `smtps://`, connects through lettre, without `TCP_NODELAY`.)
//!
//! At most [`SESSIONS`] messages are in flight; a session is reused while it works, a session idle
//! longer than [`IDLE`] is closed, and one idle longer than [`PROBE_AFTER`] must answer a `NOOP` first
//! (a relay may close idle sessions at any time). A session whose relay closed its socket meanwhile (it
//! stopped or restarted) is seen closed before it is reused, by a look at the socket that costs no
//! round trip, so a message never goes to a dead session (where it could only fail without saying
//! whether it was taken).

use std::time::{Duration, Instant};

use lettre::address::Envelope;
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, TlsParameters};
use lettre::transport::smtp::extension::ClientId;
use tokio::sync::{Mutex, Semaphore};

use super::SendError;

/// Sessions kept open to the relay, and the most messages in flight at once.
pub const SESSIONS: usize = 32;
/// A pooled session idle this long is closed instead of reused.
const IDLE: Duration = Duration::from_secs(30);
/// A pooled session idle this long answers a `NOOP` before it is given a message.
const PROBE_AFTER: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tls {
    None,
    StartTlsRequired,
    StartTlsOpportunistic,
    Implicit,
}

/// The relay of `HERALD_SMTP_URL`.
#[derive(Debug, Clone)]
pub struct Relay {
    host: String,
    port: u16,
    tls: Tls,
    credentials: Option<Credentials>,
    hello: ClientId,
    /// Opening a session (connect, greeting, EHLO, STARTTLS, AUTH), and a `NOOP` probe.
    timeout: Duration,
    /// One message on an open session: a relay that stops answering frees its session slot.
    send_timeout: Duration,
}

impl Relay {
    /// `smtp://[user:pass@]host[:port][?tls=required|opportunistic][&ehlo_name=name]` (plain, or
    /// STARTTLS), `smtps://...` (implicit TLS). Default ports: 25 plain, 587 STARTTLS, 465 implicit.
    /// `timeout_secs` (30) bounds opening a session, `send_timeout_secs` (300) one message on it; each
    /// 1 to 3600.
    pub fn parse(url: &str) -> Result<Relay, String> {
        let u = reqwest::Url::parse(url).map_err(|e| format!("invalid SMTP URL: {e}"))?;
        let host = u.host_str().filter(|h| !h.is_empty()).ok_or("invalid SMTP URL: no host")?.to_string();
        let mut tls = match u.scheme() {
            "smtp" => Tls::None,
            "smtps" => Tls::Implicit,
            other => return Err(format!("invalid SMTP URL: unknown scheme {other} (smtp or smtps)")),
        };
        let mut hello = ClientId::default();
        let (mut timeout, mut send_timeout) = (Duration::from_secs(30), Duration::from_secs(300));
        let secs = |k: &str, v: &str| match v.parse::<u64>() {
            Ok(n) if (1..=3600).contains(&n) => Ok(Duration::from_secs(n)),
            _ => Err(format!("invalid SMTP URL: {k}={v} (1 to 3600 seconds)")),
        };
        for (k, v) in u.query_pairs() {
            match (k.as_ref(), v.as_ref()) {
                ("tls", "required") if tls == Tls::None => tls = Tls::StartTlsRequired,
                ("tls", "opportunistic") if tls == Tls::None => tls = Tls::StartTlsOpportunistic,
                ("tls", "none") if tls == Tls::None => {}
                ("tls", other) => return Err(format!("invalid SMTP URL: tls={other}")),
                ("ehlo_name", name) => hello = ClientId::Domain(name.to_string()),
                ("timeout_secs", v) => timeout = secs("timeout_secs", v)?,
                ("send_timeout_secs", v) => send_timeout = secs("send_timeout_secs", v)?,
                _ => {}
            }
        }
        let default_port = match tls {
            Tls::None => 25,
            Tls::StartTlsRequired | Tls::StartTlsOpportunistic => 587,
            Tls::Implicit => 465,
        };
        let decode = |s: &str| {
            percent_decode(s)
                .map_err(|_| "invalid SMTP URL: credentials are not valid percent-encoded UTF-8".to_string())
        };
        let credentials = if u.username().is_empty() {
            None
        } else {
            Some(Credentials::new(decode(u.username())?, decode(u.password().unwrap_or(""))?))
        };
        Ok(Relay { host, port: u.port().unwrap_or(default_port), tls, credentials, hello, timeout, send_timeout })
    }

    async fn connect(&self) -> Result<(AsyncSmtpConnection, Option<Watch>), SendError> {
        tokio::time::timeout(self.timeout, self.open()).await.map_err(|_| {
            SendError::Unreachable(format!("opening an SMTP session to {}:{} timed out", self.host, self.port))
        })?
    }

    async fn open(&self) -> Result<(AsyncSmtpConnection, Option<Watch>), SendError> {
        let params = || TlsParameters::new(self.host.clone()).map_err(classify);
        let mut watch = None;
        let mut conn = if self.tls == Tls::Implicit {
            AsyncSmtpConnection::connect_tokio1(
                (self.host.as_str(), self.port),
                Some(self.timeout),
                &self.hello,
                Some(params()?),
                None,
            )
            .await
            .map_err(classify)?
        } else {
            let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
                .await
                .map_err(|e| SendError::Unreachable(format!("cannot connect to {}:{}: {e}", self.host, self.port)))?;
            tcp.set_nodelay(true).map_err(|e| SendError::Unreachable(e.to_string()))?;
            let (tcp, w) = watched(tcp).map_err(|e| SendError::Unreachable(e.to_string()))?;
            watch = w;
            let mut conn =
                AsyncSmtpConnection::connect_with_transport(Box::new(tcp), &self.hello).await.map_err(classify)?;
            match self.tls {
                Tls::StartTlsRequired => conn.starttls(params()?, &self.hello).await.map_err(classify)?,
                Tls::StartTlsOpportunistic if conn.can_starttls() => {
                    conn.starttls(params()?, &self.hello).await.map_err(classify)?
                }
                _ => {}
            }
            conn
        };
        if let Some(c) = &self.credentials {
            conn.auth(&[Mechanism::Plain, Mechanism::Login], c).await.map_err(classify)?;
        }
        Ok((conn, watch))
    }
}

/// A second handle on a session's socket, to see whether the relay closed it while it sat idle.
struct Watch(std::net::TcpStream);

impl Watch {
    /// Whether the socket is still open with nothing unread: a look at it without waiting (the socket
    /// is non-blocking). End of stream (the relay closed it), an error, or bytes nobody asked for (a
    /// relay's parting `421`) all mean it is not to be reused.
    fn open(&self) -> bool {
        matches!(self.0.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

/// The socket with a watch on it (a duplicate of its descriptor).
fn watched(tcp: tokio::net::TcpStream) -> std::io::Result<(tokio::net::TcpStream, Option<Watch>)> {
    let std = tcp.into_std()?;
    let watch = std.try_clone().ok().map(Watch);
    Ok((tokio::net::TcpStream::from_std(std)?, watch))
}

/// A failure to open a session, as the relay's own.
fn unreachable(e: SendError) -> SendError {
    match e {
        SendError::Transient(m) | SendError::Permanent(m) | SendError::Broken(m) | SendError::Uncertain(m) => {
            SendError::Unreachable(m)
        }
        other => other,
    }
}

fn percent_decode(s: &str) -> Result<String, std::string::FromUtf8Error> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out)
}

/// lettre's error as a delivery outcome: 5xx is permanent, 4xx temporary, anything else (the network, a
/// reply that does not parse) a conversation that broke off.
fn classify(e: lettre::transport::smtp::Error) -> SendError {
    if e.is_permanent() {
        SendError::Permanent(e.to_string())
    } else if e.is_transient() {
        SendError::Transient(e.to_string())
    } else {
        SendError::Broken(e.to_string())
    }
}

/// The pool.
pub struct Pool {
    relay: Relay,
    idle: Mutex<Vec<(AsyncSmtpConnection, Instant, Option<Watch>)>>,
    slots: Semaphore,
}

impl Pool {
    pub fn new(relay: Relay) -> Pool {
        Pool::with_sessions(relay, SESSIONS)
    }

    /// A pool of at most `sessions` sessions (a transport's `max_connections`; at least one).
    pub fn with_sessions(relay: Relay, sessions: usize) -> Pool {
        Pool { relay, idle: Mutex::new(Vec::new()), slots: Semaphore::new(sessions.max(1)) }
    }

    /// Sends one message: 5xx is permanent, anything else temporary (see [`Session::send`]).
    pub async fn send(&self, envelope: &Envelope, raw: &[u8]) -> Result<(), SendError> {
        self.session().await?.send(envelope, raw).await.0
    }

    /// A session ready to carry one message: a free slot and an open connection (reused or new). The
    /// delivery pipeline takes one *before* it marks a campaign email as being handed over, so an email
    /// that waits for a connection is still cancellable. A session that cannot be opened, for whatever
    /// reason (refused, a timeout, a `421` greeting, TLS, a refused AUTH), is the relay's failure, not the
    /// message's: [`SendError::Unreachable`].
    pub async fn session(&self) -> Result<Session<'_>, SendError> {
        let slot = self.slots.acquire().await.map_err(|_| SendError::Unreachable("the SMTP pool is closed".into()))?;
        let (conn, watch) = match self.reusable().await {
            Some(c) => c,
            None => self.relay.connect().await.map_err(unreachable)?,
        };
        Ok(Session { pool: self, conn, watch, slot })
    }

    /// Whether the relay answers: a session opened (greeting, EHLO, STARTTLS, AUTH) and closed with
    /// `QUIT`, outside the pool's slots.
    pub async fn probe(&self) -> Result<(), String> {
        let (mut conn, _) = self.relay.connect().await.map_err(|e| e.reason().to_string())?;
        let _ = tokio::time::timeout(self.relay.timeout, conn.quit()).await;
        Ok(())
    }

    /// The most recently used idle session that still answers, closing the stale ones on the way.
    async fn reusable(&self) -> Option<(AsyncSmtpConnection, Option<Watch>)> {
        loop {
            let (mut conn, at, watch) = self.idle.lock().await.pop()?;
            let idle = at.elapsed();
            if idle >= IDLE || conn.has_broken() || watch.as_ref().is_some_and(|w| !w.open()) {
                conn.abort().await;
                continue;
            }
            if idle < PROBE_AFTER {
                return Some((conn, watch));
            }
            match tokio::time::timeout(self.relay.timeout, conn.test_connected()).await {
                Ok(true) => return Some((conn, watch)),
                Ok(false) => conn.abort().await,
                Err(_) => {} // no answer: dropped, which closes the socket
            }
        }
    }
}

/// One open session of the pool, holding its slot until the message is sent.
pub struct Session<'a> {
    pool: &'a Pool,
    conn: AsyncSmtpConnection,
    watch: Option<Watch>,
    slot: tokio::sync::SemaphorePermit<'a>,
}

impl<'a> Session<'a> {
    /// Sends one message and gives the session back to the pool: 5xx is permanent, a relay that stops
    /// answering mid-conversation is uncertain (it may have taken the message), anything else temporary.
    ///
    /// A message is never sent twice by the pool itself: a session that sat idle longer than
    /// [`PROBE_AFTER`] is probed with `NOOP` before it carries a message (a relay may close idle
    /// sessions), and a failed send is reported as it is, for the delivery job's own decision.
    ///
    /// The connection goes back to the pool at once; the session's slot is handed back with the result,
    /// for the caller to hold until the message's outcome is written (so that at most [`SESSIONS`]
    /// messages are ever handed over without a written outcome).
    pub async fn send(mut self, envelope: &Envelope, raw: &[u8]) -> (Result<(), SendError>, SessionSlot<'a>) {
        let timeout = self.pool.relay.send_timeout;
        let Ok(result) = tokio::time::timeout(timeout, self.conn.send(envelope, raw)).await else {
            // The session is mid-command: it is dropped (closing the socket), never reused.
            let why = format!("the SMTP relay did not answer within {} s", timeout.as_secs());
            return (Err(SendError::Uncertain(why)), SessionSlot(self.slot));
        };
        if self.conn.has_broken() {
            self.conn.abort().await;
        } else {
            self.pool.idle.lock().await.push((self.conn, Instant::now(), self.watch));
        }
        (result.map(|_| ()).map_err(classify), SessionSlot(self.slot))
    }
}

/// One of the pool's [`SESSIONS`] slots, held after a send until its outcome is written; dropping it
/// frees the slot.
pub struct SessionSlot<'a>(#[allow(dead_code)] tokio::sync::SemaphorePermit<'a>);

impl SessionSlot<'_> {
    /// Frees the slot now.
    pub fn free(self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_urls_parse_to_the_session_settings() {
        let r = Relay::parse("smtp://127.0.0.1:2525").unwrap();
        assert_eq!((r.host.as_str(), r.port, r.tls), ("127.0.0.1", 2525, Tls::None));
        assert!(r.credentials.is_none());

        let r = Relay::parse("smtp://user%40x.io:p%3Ass@mail.example.com?tls=required&ehlo_name=herald.local").unwrap();
        assert_eq!((r.port, r.tls), (587, Tls::StartTlsRequired));
        assert_eq!(r.credentials, Some(Credentials::new("user@x.io".into(), "p:ss".into())));
        assert_eq!(r.hello, ClientId::Domain("herald.local".into()));

        assert_eq!(Relay::parse("smtp://h?tls=opportunistic").unwrap().tls, Tls::StartTlsOpportunistic);
        assert_eq!(Relay::parse("smtp://h").unwrap().port, 25);
        let r = Relay::parse("smtps://h").unwrap();
        assert_eq!((r.port, r.tls), (465, Tls::Implicit));
    }

    /// A loopback relay that greets and answers EHLO, then reads and never answers (`greet` false: it
    /// never even greets).
    async fn silent_relay(greet: bool) -> u16 {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (r, mut w) = sock.into_split();
                    let mut lines = BufReader::new(r).lines();
                    if greet {
                        w.write_all(b"220 silent.test ESMTP\r\n").await.unwrap();
                        if lines.next_line().await.ok().flatten().is_some() {
                            w.write_all(b"250 silent.test\r\n").await.unwrap();
                        }
                    }
                    while let Ok(Some(_)) = lines.next_line().await {}
                });
            }
        });
        port
    }

    #[tokio::test]
    async fn a_relay_that_stops_answering_fails_the_send_and_frees_the_session() {
        let envelope = Envelope::new(Some("a@x.test".parse().unwrap()), vec!["b@y.test".parse().unwrap()]).unwrap();
        for greet in [false, true] {
            let mut relay = Relay::parse(&format!("smtp://127.0.0.1:{}", silent_relay(greet).await)).unwrap();
            relay.timeout = Duration::from_millis(300);
            relay.send_timeout = Duration::from_millis(300);
            let pool = Pool::new(relay);
            for _ in 0..SESSIONS + 1 {
                let started = Instant::now();
                let r = tokio::time::timeout(Duration::from_secs(5), pool.send(&envelope, b"Subject: x\r\n\r\nx\r\n"))
                    .await
                    .expect("the send gives up by itself");
                // A relay that never greets never had the message (it is unreachable); one that stops
                // answering during the conversation may have taken it (uncertain).
                match greet {
                    false => assert!(matches!(r, Err(SendError::Unreachable(_))), "{r:?}"),
                    true => assert!(matches!(r, Err(SendError::Uncertain(_))), "{r:?}"),
                }
                assert!(started.elapsed() < Duration::from_secs(2));
            }
            assert!(pool.idle.lock().await.is_empty(), "a session that timed out is never reused");
        }
    }

    /// A loopback relay that takes one message per connection and then closes it (as a relay that
    /// stops or restarts closes its sessions); answers how many connections it had.
    async fn one_message_relay() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = connections.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let (r, mut w) = sock.into_split();
                    let mut lines = BufReader::new(r).lines();
                    w.write_all(b"220 once.test ESMTP\r\n").await.unwrap();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let reply: &[u8] = match line.to_uppercase().as_str() {
                            l if l.starts_with("EHLO") => b"250 once.test\r\n",
                            "DATA" => {
                                w.write_all(b"354 go\r\n").await.unwrap();
                                while let Ok(Some(l)) = lines.next_line().await {
                                    if l == "." {
                                        break;
                                    }
                                }
                                w.write_all(b"250 taken\r\n").await.unwrap();
                                return; // closes the connection
                            }
                            _ => b"250 ok\r\n",
                        };
                        w.write_all(reply).await.unwrap();
                    }
                });
            }
        });
        (port, connections)
    }

    #[tokio::test]
    async fn a_session_its_relay_closed_is_never_given_a_message() {
        let (port, connections) = one_message_relay().await;
        let pool = Pool::new(Relay::parse(&format!("smtp://127.0.0.1:{port}")).unwrap());
        let envelope = Envelope::new(Some("a@x.test".parse().unwrap()), vec!["b@y.test".parse().unwrap()]).unwrap();
        for n in 1..=3 {
            // Well within the idle time after which a pooled session is probed with NOOP.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let r = pool.send(&envelope, b"Subject: x\r\n\r\nx\r\n").await;
            assert_eq!(r, Ok(()), "message {n}");
            assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), n, "a new session each time");
        }
    }

    #[test]
    fn bad_relay_urls_are_refused() {
        for bad in ["http://h", "smtp://h?tls=maybe", "smtps://h?tls=bogus", "not a url", "smtp://u:%ff@h"] {
            assert!(Relay::parse(bad).is_err(), "{bad} parsed");
        }
    }
}
