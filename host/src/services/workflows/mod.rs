//! Workflows (docs/behaviour.md#workflows): `manage.rs` is what the user edits (the workflow, its
//! trigger, steps and transitions under the graph rules of `domain::workflows`); `engine.rs` starts and
//! runs executions on the job queue; `executions.rs` is what the user does with executions.
//!
//! Must not import: salvo, surrealdb.

pub mod engine;
pub mod executions;
pub mod manage;
