//! The HTTP server around [`super::service`]: started on a bound listener, stopped gracefully.

use std::sync::Arc;
use std::time::Duration;

use salvo::Server;
use salvo::conn::tcp::TcpAcceptor;
use salvo::server::ServerHandle;

use crate::state::AppState;

/// A serving HTTP server.
pub struct HttpServer {
    handle: ServerHandle,
    task: tokio::task::JoinHandle<()>,
}

/// Starts serving the API on `listener`.
pub fn serve(state: Arc<AppState>, listener: tokio::net::TcpListener) -> std::io::Result<HttpServer> {
    let acceptor = TcpAcceptor::try_from(listener)?;
    let server = Server::new(acceptor);
    let handle = server.handle();
    let task = tokio::spawn(server.serve(super::service(state)));
    Ok(HttpServer { handle, task })
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
