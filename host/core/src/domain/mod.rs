//! Pure domain logic: no I/O, no clock, no database, no HTTP.
//!
//! Must not import: salvo, surrealdb, tokio.

pub mod activity;
pub mod billing;
pub mod campaigns;
pub mod conditions;
pub mod contacts;
pub mod deferral;
pub mod domains;
pub mod images;
pub mod import;
pub mod inbound;
pub mod return_path;
pub mod routes;
pub mod status;
pub mod suppressions;
pub mod templating;
pub mod text;
pub mod tracking;
pub mod webhooks;
pub mod workflows;
