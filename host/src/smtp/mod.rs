//! The SMTP front end (docs/behaviour.md#receiving-mail, docs/behaviour.md#smtp-relay): a listener for
//! received mail (`HERALD_SMTP_LISTEN`) and one for authenticated submission
//! (`HERALD_SMTP_SUBMISSION_LISTEN`). Like the HTTP server it only speaks the protocol and calls the
//! core: `services::inbound` for what is received, `services::relay` and `services::send` for what is
//! submitted. Limits here protect the process and share it fairly (docs/security.md#receiving-mail): each
//! server has its own connections and message bytes in flight, counted per client network and in all
//! (`limits`); messages per network a minute; a timeout on every read, on idling, on a whole message and
//! on a session, a minimum data rate, and the message size.

mod limits;
mod session;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use crate::infra::ratelimit::RateLimiter;
use crate::state::AppState;
use limits::{Budget, Doors, Refused};

/// Connections each server lets in at once, over all clients.
const MAX_CONNECTIONS: u32 = 1000;

/// Message bytes each server's sessions may hold between their first byte and their answer (reserved as
/// bytes arrive), over all clients, and for one client network: many large messages at once wait or are
/// told to come back instead of taking the process's memory or disk, and a few networks cannot take it
/// all.
const DATA_BUDGET: u64 = 512 << 20;

/// How often the spool is swept of what a crash left.
const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// Which server a session belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Mail to Herald: bounces, complaints, replies.
    Inbound,
    /// Mail from an application, authenticated with a secret key.
    Submission,
}

/// What the sessions of one server share: connections, message bytes in flight, the message rate, each
/// per client network ([`limits::network`]).
pub(crate) struct Resources {
    doors: Arc<Doors>,
    pub budget: Arc<Budget>,
    pub per_minute: RateLimiter,
}

/// What every session of the process shares: the TLS setup, and each server's own resources.
pub(crate) struct Shared {
    pub tls: Option<TlsAcceptor>,
    inbound: Resources,
    submission: Resources,
}

impl Shared {
    pub fn of(&self, mode: Mode) -> &Resources {
        match mode {
            Mode::Inbound => &self.inbound,
            Mode::Submission => &self.submission,
        }
    }
}

/// Why the SMTP servers did not start.
#[derive(Debug, thiserror::Error)]
pub enum SmtpError {
    #[error("cannot listen for SMTP on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    #[error("the SMTP TLS certificate or key: {0}")]
    Tls(String),
}

/// The running SMTP servers.
pub struct SmtpServers {
    /// Where each listens (the bound address, when the configured port was 0).
    pub inbound: Option<SocketAddr>,
    pub submission: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl SmtpServers {
    /// Stops accepting connections (sessions in progress end on their own, within their timeouts).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

fn tls_acceptor(cert: &std::path::Path, key: &std::path::Path) -> Result<TlsAcceptor, SmtpError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|e| SmtpError::Tls(format!("{}: {e}", cert.display())))?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| SmtpError::Tls(format!("{}: {e}", key.display())))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SmtpError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| SmtpError::Tls(e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Starts the configured SMTP listeners (none when neither address is set).
pub async fn start(state: Arc<AppState>) -> Result<SmtpServers, SmtpError> {
    let c = &state.config.smtp;
    let tls = match &c.tls {
        Some((cert, key)) => Some(tls_acceptor(cert, key)?),
        None => None,
    };
    // A network may hold two of the largest messages at once.
    let per_network = (2 * c.max_message_bytes as u64).min(DATA_BUDGET);
    let resources = || Resources {
        doors: Doors::new(c.max_connections_per_ip, MAX_CONNECTIONS),
        budget: Budget::new(per_network, DATA_BUDGET),
        per_minute: RateLimiter::new(c.messages_per_minute, state.clock.clone()),
    };
    let shared = Arc::new(Shared { tls, inbound: resources(), submission: resources() });
    let (stop, stopped) = watch::channel(false);
    let mut servers = SmtpServers { inbound: None, submission: None, stop, tasks: Vec::new() };
    for (addr, mode) in [(c.listen, Mode::Inbound), (c.submission_listen, Mode::Submission)] {
        let Some(addr) = addr else { continue };
        let listener = TcpListener::bind(addr).await.map_err(|e| SmtpError::Listen(addr, e))?;
        let bound = listener.local_addr().map_err(|e| SmtpError::Listen(addr, e))?;
        match mode {
            Mode::Inbound => servers.inbound = Some(bound),
            Mode::Submission => servers.submission = Some(bound),
        }
        tracing::info!(%bound, ?mode, "SMTP listening");
        servers.tasks.push(tokio::spawn(accept_loop(state.clone(), shared.clone(), listener, mode, stopped.clone())));
    }
    if c.listen.is_some() {
        servers.tasks.push(tokio::spawn(sweep_loop(state.clone(), stopped.clone())));
    }
    Ok(servers)
}

async fn accept_loop(
    state: Arc<AppState>,
    shared: Arc<Shared>,
    listener: TcpListener,
    mode: Mode,
    mut stop: watch::Receiver<bool>,
) {
    // Idle sessions end within the command timeout and one more command: twice that covers them.
    let wait = Duration::from_secs(2 * state.config.smtp.timeout_secs);
    loop {
        let (socket, peer) = tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "SMTP accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = socket.set_nodelay(true);
        let (state, shared) = (state.clone(), shared.clone());
        tokio::spawn(async move {
            // A full server keeps the client waiting for its greeting a while (clients wait minutes).
            match shared.of(mode).doors.enter(limits::network(peer.ip()), wait).await {
                Ok(slot) => session::run(state, shared, mode, socket, peer, slot).await,
                Err(Refused::Network) => {
                    session::refuse(socket, "421 4.7.0 Too many connections from your network, try again later").await
                }
                Err(Refused::Full) => session::refuse(socket, "421 4.3.2 Too many connections, try again later").await,
            }
        });
    }
}

/// Sweeps the spool on start and then now and then (`infra::spool`).
async fn sweep_loop(state: Arc<AppState>, mut stop: watch::Receiver<bool>) {
    loop {
        let n = state.inbound.sweep().await;
        if n > 0 {
            tracing::info!(files = n, "swept the spool of received messages");
        }
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
        }
    }
}
