//! The SMTP front end (docs/behaviour.md#receiving-mail, docs/behaviour.md#smtp-relay): a listener for
//! received mail (`HERALD_SMTP_LISTEN`) and one for authenticated submission
//! (`HERALD_SMTP_SUBMISSION_LISTEN`). Like the HTTP server it only speaks the protocol and calls the
//! core: `services::inbound` for what is received, `services::relay` and `services::send` for what is
//! submitted. Limits here protect the process: connections per client address and in all, messages per
//! client address a minute, a timeout on every read and on a whole message, the message size.

mod session;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

use crate::infra::ratelimit::RateLimiter;
use crate::state::AppState;

/// Connections the two listeners hold open at once, over all clients.
const MAX_CONNECTIONS: u32 = 1000;

/// Message bytes all sessions may hold at once, in KiB: a message reserves its declared `SIZE` (else the
/// size limit) before DATA, so many large messages at once wait or are told to come back, instead of
/// taking the process's memory.
const DATA_BUDGET_KIB: u32 = 512 * 1024;

/// Which server a session belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Mail to Herald: bounces, complaints, replies.
    Inbound,
    /// Mail from an application, authenticated with a secret key.
    Submission,
}

/// What every session of the process shares: the TLS setup, the connection counts, the message rate.
pub(crate) struct Shared {
    pub tls: Option<TlsAcceptor>,
    connections: Mutex<HashMap<IpAddr, u32>>,
    pub per_minute: RateLimiter,
    /// KiB of message bytes sessions may still reserve ([`DATA_BUDGET_KIB`]).
    pub data_budget: Arc<tokio::sync::Semaphore>,
}

/// One open connection, counted until dropped.
pub(crate) struct Slot {
    shared: Arc<Shared>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut map = self.shared.connections.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

impl Shared {
    /// A slot for a connection from `ip`, unless it or everyone holds too many.
    fn enter(self: &Arc<Self>, ip: IpAddr, per_ip: u32) -> Option<Slot> {
        let mut map = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        let total: u32 = map.values().sum();
        let mine = map.get(&ip).copied().unwrap_or(0);
        if mine >= per_ip || total >= MAX_CONNECTIONS {
            return None;
        }
        map.insert(ip, mine + 1);
        Some(Slot { shared: self.clone(), ip })
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
    let shared = Arc::new(Shared {
        tls,
        connections: Mutex::default(),
        per_minute: RateLimiter::new(c.messages_per_minute, state.clock.clone()),
        data_budget: Arc::new(tokio::sync::Semaphore::new(DATA_BUDGET_KIB as usize)),
    });
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
    Ok(servers)
}

async fn accept_loop(
    state: Arc<AppState>,
    shared: Arc<Shared>,
    listener: TcpListener,
    mode: Mode,
    mut stop: watch::Receiver<bool>,
) {
    let per_ip = state.config.smtp.max_connections_per_ip;
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
        let slot = shared.enter(peer.ip(), per_ip);
        let (state, shared) = (state.clone(), shared.clone());
        tokio::spawn(async move {
            match slot {
                Some(slot) => session::run(state, shared, mode, socket, peer, slot).await,
                None => session::refuse(socket).await,
            }
        });
    }
}
