//! Herald's HTTP server, the front end behind the `herald` binary: routing, request parsing, the OpenAPI
//! document, the error envelope, the pages (`api`), and the CLI (`main.rs`). The rules are in the core
//! crate (`herald-core`, re-exported here under the names they always had); [`App::build`] assembles the
//! core and serves it, so tests boot the real thing in-process on an ephemeral port.

pub mod api;
pub mod control;
pub mod smtp;

pub use herald_core::{BuildError, DOMAIN_CHECK_JOB, config, domain, error, infra, plugins, services, state, store};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::infra::clock::SharedClock;
use crate::infra::jobs::{Registry, Worker};
use crate::state::AppState;
use crate::store::Store;

/// The assembled application, not yet serving.
pub struct App {
    pub state: Arc<AppState>,
    pub worker: Worker,
}

impl From<herald_core::Core> for App {
    fn from(core: herald_core::Core) -> Self {
        App { state: core.state, worker: core.worker }
    }
}

impl App {
    /// Builds the application with the system clock.
    pub async fn build(config: Config) -> Result<App, BuildError> {
        Ok(herald_core::Core::build(config).await?.into())
    }

    /// Builds the application with a given clock and job handlers (tests use a manual clock).
    pub async fn build_with(config: Config, clock: SharedClock, registry: Registry) -> Result<App, BuildError> {
        Ok(herald_core::Core::build_with(config, clock, registry).await?.into())
    }

    /// Builds the application on an already connected (and migrated) store.
    pub async fn from_store(
        config: Config,
        store: Store,
        clock: SharedClock,
        registry: Registry,
    ) -> Result<App, BuildError> {
        Ok(herald_core::Core::from_store(config, store, clock, registry).await?.into())
    }

    /// Starts serving on `listener` and running jobs. Returns at once with a handle.
    pub async fn start(self, listener: tokio::net::TcpListener) -> Result<Running, BuildError> {
        let addr = listener.local_addr().map_err(BuildError::Listen)?;
        // SMTP first: once the HTTP server answers, every listener is bound.
        let smtp = smtp::start(self.state.clone())
            .await
            .map_err(|e| BuildError::Listen(std::io::Error::other(e.to_string())))?;
        let http = api::serve::serve(self.state.clone(), listener).await.map_err(BuildError::Listen)?;
        let control = control::start(self.state.clone());
        let state = self.state.clone();
        let background = herald_core::Core { state: self.state, worker: self.worker }.start();
        Ok(Running {
            addr,
            smtp_addr: smtp.inbound,
            submission_addr: smtp.submission,
            state,
            http,
            smtp,
            control,
            background,
        })
    }

    /// Ends a front end that did not serve (a CLI command): drops the services, then closes the store as
    /// the last of its handles inside the runtime ([`Store::close_last`]).
    pub async fn close(self) {
        let store = self.state.store.clone();
        drop(self);
        store.close_last(Duration::from_secs(5)).await;
    }

    /// Binds the configured address and starts.
    pub async fn listen(self) -> Result<Running, BuildError> {
        let listener = tokio::net::TcpListener::bind(self.state.config.listen).await.map_err(BuildError::Listen)?;
        self.start(listener).await
    }
}

/// A running server.
pub struct Running {
    pub addr: SocketAddr,
    /// Where mail is received, and where applications submit mail over SMTP, when configured.
    pub smtp_addr: Option<SocketAddr>,
    pub submission_addr: Option<SocketAddr>,
    pub state: Arc<AppState>,
    http: api::serve::HttpServer,
    smtp: smtp::SmtpServers,
    control: control::Control,
    background: herald_core::Background,
}

impl Running {
    /// Graceful shutdown: stop accepting, let requests in flight finish (up to 30 s), let running jobs
    /// finish, release leases.
    pub async fn shutdown(self) {
        self.control.stop();
        self.http.stop(Duration::from_secs(30));
        self.smtp.stop().await;
        self.background.signal();
        self.http.stopped().await;
        self.background.stop().await;
    }
}
