//! The handle every front end is given (the HTTP server, the CLI): the [`Context`] the services stand
//! on and the engines built on it once at start-up (`Core::build`). A front end calls an entry point
//! with `&state` (it dereferences to the context) and the engine the operation drives; no service names
//! this type (the tidy test holds it).
//!
//! Must not import: salvo, surrealdb.

use std::sync::Arc;

pub use crate::context::{Context, KeyCache, KeyEntry};
use crate::services::events::EventBus;

pub struct AppState {
    /// What the services stand on.
    pub context: Context,
    /// The in-process event stream (subscribers register here).
    pub bus: Arc<EventBus>,
    /// Group-commit contact upserts (`/v1/track`).
    pub ingest: crate::services::ingest::Ingester,
    /// Group-commit accepted sends (`/v1/send`).
    pub accepter: crate::services::accept::Accepter,
    /// Sender domains: DNS, DKIM key storage, record settings.
    pub domains: Arc<crate::services::sending_domains::Domains>,
    /// The segment engine (conditions, counts, tracked memberships).
    pub segments: crate::services::segments::Engine,
    /// Renders email records (`/v1/send`, campaigns, test sends).
    pub composer: Arc<crate::services::compose::Composer>,
    /// Campaign sending: audiences, batches, progress, cancel.
    pub campaigns: Arc<crate::services::campaigns::Campaigns>,
    /// The workflow engine.
    pub workflows: Arc<crate::services::workflows::engine::Engine>,
    /// Outbound webhooks: endpoints, the fan-out of events, the attempts.
    pub webhooks: Arc<crate::services::webhooks::Webhooks>,
    /// Receiving mail: recipients, durable acceptance, the job that applies a message.
    pub inbound: Arc<crate::services::inbound::Inbound>,
    /// Delivery: the transports, their breakers, deferred mail.
    pub delivery: Arc<crate::services::delivery::Delivery>,
}

impl std::ops::Deref for AppState {
    type Target = Context;
    fn deref(&self) -> &Context {
        &self.context
    }
}
