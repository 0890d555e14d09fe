//! Black-box API tests: each test boots the real Herald server in-process on an ephemeral loopback port
//! with its own in-memory database, and speaks HTTP to it.

#![allow(clippy::unwrap_used)]

mod dns_server;
mod harness;
mod http_sink;
mod plugin_kit;

mod account_mail;
mod accounts;
mod activity;
mod api_doc;
mod backups;
mod billing;
mod binary;
mod campaign_delivery;
mod campaigns;
mod compat;
mod contact_bulk;
mod contact_import;
mod contacts;
mod corpus;
mod crash;
mod crash_workflows;
mod dashboard;
mod delivery_control;
mod delivery_routes;
mod disk_full;
mod domains;
mod foundation;
mod hardening;
mod inbound;
mod inbound_senders;
mod isolation;
mod jobs;
mod oauth;
mod payments;
mod plugins;
mod processes;
mod project_state;
mod proxies;
mod quotas;
mod relay_process;
mod retention;
mod segments;
mod send;
mod smtp_resources;
mod smtp_sink;
mod submission;
mod suppressions;
mod suspension;
mod templates;
mod tracking;
mod transport_faults;
mod upgrades;
mod uploads;
mod webhooks;
mod workflow_batches;
mod workflow_durability;
mod workflow_kit;
mod workflow_loops;
mod workflow_runs;
mod workflow_steps;
mod workflow_triggers;
mod workflows;
