//! Compliance suites: checks every plugin of a kind should pass, run against the **built** component in
//! the **real** runtime (like Vector's component specifications). Each suite takes a [`HarnessBuilder`]
//! (it loads the plugin several times, with different grants) and a small per-plugin profile that says
//! how to configure the plugin and what its provider's answers look like, and returns a [`Report`]:
//!
//! ```no_run
//! # async fn demo() {
//! use herald_plugin_testkit::compliance::{self, OperatorCase, OperatorProfile};
//! use herald_plugin_testkit::{HarnessBuilder, Value};
//!
//! let plugin = HarnessBuilder::new("target/wasm32-wasip2/release/herald_plugin_example.wasm", "manifest.toml");
//! let profile = OperatorProfile::new().operator(
//!     OperatorCase::new("startsWith", Value::Text("ad".into()))
//!         .bad_operand(Value::Integer(1))
//!         .true_for(Value::Text("ada".into()))
//!         .false_for(Value::Text("bob".into())),
//! );
//! compliance::operator(&plugin, &profile).await.assert_passed();
//! # }
//! ```
//!
//! - [`transport`]: accepts, temporary and permanent failures, rate limiting, configuration problems
//!   and a denied endpoint never bounce, timeouts, notifications (valid, forged, unauthenticated).
//! - [`step`]: metadata, config validation (good and bad), execution with different attempts and
//!   times, a bad config fails cleanly.
//! - [`operator`]: metadata, example operands, one result per value, null is false, expected results.

mod operator;
mod step;
mod transport;

use std::fmt;

pub use operator::{OperatorCase, OperatorProfile, operator};
pub use step::{StepCase, StepProfile, StepRun, step};
pub use transport::{InboundCall, NotificationContext, TransportProfile, transport};

#[cfg(doc)]
use crate::HarnessBuilder;

/// What a suite found: the checks that passed and those that failed, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a report does nothing until asserted (Report::assert_passed)"]
pub struct Report {
    /// `transport`, `step` or `operator`.
    pub suite: String,
    /// The plugin's component file.
    pub plugin: String,
    /// Names of the checks that passed, in order.
    pub passed: Vec<String>,
    /// Checks that failed: name and problem.
    pub failed: Vec<(String, String)>,
}

impl Report {
    fn new(suite: &str, plugin: &crate::HarnessBuilder) -> Report {
        Report { suite: suite.into(), plugin: plugin.wasm().display().to_string(), passed: vec![], failed: vec![] }
    }

    fn record(&mut self, check: impl Into<String>, result: Result<(), String>) {
        match result {
            Ok(()) => self.passed.push(check.into()),
            Err(problem) => self.failed.push((check.into(), problem)),
        }
    }

    /// Whether every check passed.
    pub fn is_ok(&self) -> bool {
        self.failed.is_empty()
    }

    /// The problem a check found, if it failed.
    pub fn failure(&self, check: &str) -> Option<&str> {
        self.failed.iter().find(|(c, _)| c == check).map(|(_, p)| p.as_str())
    }

    /// Panics with the report unless every check passed.
    #[track_caller]
    pub fn assert_passed(&self) {
        if !self.is_ok() {
            panic!("{self}");
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} compliance of {}: {} passed, {} failed",
            self.suite,
            self.plugin,
            self.passed.len(),
            self.failed.len()
        )?;
        for check in &self.passed {
            writeln!(f, "  ok    {check}")?;
        }
        for (check, problem) in &self.failed {
            writeln!(f, "  FAIL  {check}: {problem}")?;
        }
        Ok(())
    }
}

/// `Err` unless `text` is valid JSON.
fn json_ok(what: &str, text: &str) -> Result<(), String> {
    serde_json::from_str::<serde_json::Value>(text).map(|_| ()).map_err(|e| format!("{what} is not valid JSON: {e}"))
}

/// Compares the plugin's metadata with what it registered.
fn metadata_matches(harness: &crate::Harness, kind: &str, listed: &[String]) -> Result<(), String> {
    let status = harness.status().ok_or("the plugin is not listed")?;
    let mut problems = Vec::new();
    if status.kind.as_deref() != Some(kind) {
        problems.push(format!("kind is {:?}, expected {kind}", status.kind));
    }
    if status.version.as_deref().is_none_or(|v| v.trim().is_empty()) {
        problems.push("the version is empty".into());
    }
    if status.description.as_deref().is_none_or(|d| d.trim().is_empty()) {
        problems.push("the description is empty".into());
    }
    let mut provides = status.provides.clone();
    provides.sort();
    let mut listed = listed.to_vec();
    listed.sort();
    if provides != listed {
        problems.push(format!("metadata provides {provides:?} but the plugin lists {listed:?}"));
    }
    if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
}
