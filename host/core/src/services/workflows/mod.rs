//! Workflows (docs/behaviour.md#workflows): `manage.rs` is what the user edits (the workflow, its
//! trigger, steps and transitions under the graph rules of `domain::workflows`); `engine.rs` starts
//! executions, listens to the event stream and decides what a step comes to; `rounds.rs` runs
//! executions on the job queue, many at a time; `steps.rs` holds the steps that
//! reach outside it (SEND_EMAIL, plugin steps, CONDITION); `executions.rs` is what the user does with
//! executions; `fields.rs` answers `GET /workflows/fields`; `limits.rs` keeps workflows from looping
//! without bound.
//!
//! Must not import: salvo, surrealdb.

pub mod engine;
pub mod executions;
pub mod fields;
pub mod limits;
pub mod manage;
pub mod rounds;
pub mod schedules;
pub mod steps;
