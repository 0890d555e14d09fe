//! The capabilities of Herald, one module each: the rules, the transactions (through `store`) and the
//! registration of its recurring jobs. `api/` and the CLI call these; a new capability (workflows, CSV
//! import, billing) gets a module here.
//!
//! Must not import: salvo, surrealdb.

pub mod accept;
pub mod account_mail;
pub mod accounts;
pub mod activity;
pub mod analytics;
pub mod backup;
pub mod billing;
pub mod campaigns;
pub mod compose;
pub mod contact_import;
pub mod contact_jobs;
pub mod contacts;
pub mod delivery;
pub mod events;
pub mod idempotency;
pub mod inbound;
pub mod ingest;
pub mod invitations;
pub mod notifications;
pub mod oauth;
pub mod oauth_documents;
pub mod payments;
pub mod projects;
pub mod quotas;
pub mod relay;
pub mod retention;
pub mod roles;
pub mod segments;
pub mod send;
pub mod sender_auth;
pub mod sending_domains;
pub mod suppressions;
pub mod suspension;
pub mod system;
pub mod system_mail;
pub mod tallies;
pub mod templates;
pub mod throttles;
pub mod tracking;
pub mod uploads;
pub mod verify;
pub mod webhooks;
pub mod workflows;
