//! The HTTP server around [`super::service`]: started on a bound listener, plain HTTP or HTTPS
//! (`--tls-cert`/`--tls-key`, the certificate reloaded when its files change), stopped gracefully.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use salvo::Server;
use salvo::conn::Listener;
use salvo::conn::rustls::{Keycert, RustlsConfig, RustlsListener};
use salvo::conn::tcp::TcpAcceptor;
use salvo::server::ServerHandle;

use crate::state::AppState;

/// How often the certificate's files are read for a change.
pub const TLS_RELOAD_EVERY: Duration = Duration::from_secs(2);
/// Largest certificate chain or key file read.
const TLS_FILE_MAX: u64 = 1 << 20;

/// A serving HTTP server.
pub struct HttpServer {
    handle: ServerHandle,
    task: tokio::task::JoinHandle<()>,
}

/// Starts serving the API on `listener`, over TLS when the configuration names a certificate. A
/// certificate that cannot be used is an error naming its file.
pub async fn serve(state: Arc<AppState>, listener: tokio::net::TcpListener) -> std::io::Result<HttpServer> {
    let acceptor = TcpAcceptor::try_from(listener)?;
    let tls = state.config.http.tls.clone();
    let service = super::service(state);
    let (handle, task) = match tls {
        None => {
            let server = Server::new(acceptor);
            (server.handle(), tokio::spawn(server.serve(service)))
        }
        Some((cert, key)) => {
            let (pem, first) = load(&cert, &key).await.map_err(std::io::Error::other)?;
            let configs = futures_util::stream::once(std::future::ready(first))
                .chain(futures_util::stream::unfold((cert, key, pem), reloaded));
            let acceptor =
                RustlsListener::new(configs, Bound(acceptor)).try_bind().await.map_err(std::io::Error::other)?;
            let server = Server::new(acceptor);
            (server.handle(), tokio::spawn(server.serve(service)))
        }
    };
    Ok(HttpServer { handle, task })
}

/// An acceptor already bound, as the listener [`RustlsListener`] wraps.
struct Bound(TcpAcceptor);

impl Listener for Bound {
    type Acceptor = TcpAcceptor;

    async fn try_bind(self) -> salvo::Result<TcpAcceptor> {
        Ok(self.0)
    }
}

/// The certificate chain's and the key's PEM bytes.
type Pem = (Vec<u8>, Vec<u8>);

/// Reads and checks the pair: the chain parses, the key parses and belongs to its first certificate.
async fn load(cert: &Path, key: &Path) -> Result<(Pem, RustlsConfig), String> {
    let pem = (read(cert).await?, read(key).await?);
    let config =
        check(&pem).map_err(|e| format!("HTTPS certificate {} with key {}: {e}", cert.display(), key.display()))?;
    Ok((pem, config))
}

async fn read(path: &Path) -> Result<Vec<u8>, String> {
    let shown = || path.display().to_string();
    let meta = tokio::fs::metadata(path).await.map_err(|e| format!("HTTPS certificate file {}: {e}", shown()))?;
    if meta.len() > TLS_FILE_MAX {
        return Err(format!("HTTPS certificate file {}: over {} bytes", shown(), TLS_FILE_MAX));
    }
    tokio::fs::read(path).await.map_err(|e| format!("HTTPS certificate file {}: {e}", shown()))
}

fn check((cert, key): &Pem) -> Result<RustlsConfig, String> {
    use tokio_rustls::rustls;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert).collect::<Result<_, _>>().map_err(|e| format!("the certificate: {e}"))?;
    if chain.is_empty() {
        return Err("no certificate in the PEM file".into());
    }
    let der = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("the key: {e}"))?;
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    rustls::sign::CertifiedKey::from_der(chain, der, &provider).map_err(|e| e.to_string())?;
    Ok(RustlsConfig::new(Keycert::new().cert(cert.clone()).key(key.clone())))
}

/// Waits for the files to change into a usable pair and answers its configuration; a pair that cannot
/// be used (a half-written renewal, a wrong key) is logged once and the certificate served stays.
async fn reloaded((cert, key, mut seen): (PathBuf, PathBuf, Pem)) -> Option<(RustlsConfig, (PathBuf, PathBuf, Pem))> {
    loop {
        tokio::time::sleep(TLS_RELOAD_EVERY).await;
        let pem = match (read(&cert).await, read(&key).await) {
            (Ok(c), Ok(k)) => (c, k),
            _ => continue,
        };
        if pem == seen {
            continue;
        }
        match check(&pem) {
            Ok(config) => {
                tracing::info!(cert = %cert.display(), "HTTPS certificate changed: serving the new one");
                return Some((config, (cert, key, pem)));
            }
            Err(e) => {
                tracing::warn!(cert = %cert.display(), error = %e, "HTTPS certificate changed but cannot be used; still serving the previous one");
                seen = pem;
            }
        }
    }
}

impl HttpServer {
    /// Stops accepting; the requests in flight get up to `grace` to finish ([`HttpServer::stopped`]).
    pub fn stop(&self, grace: Duration) {
        self.handle.stop_graceful(Some(grace));
    }

    /// Waits until the server has stopped.
    pub async fn stopped(self) {
        let _ = self.task.await;
    }
}
