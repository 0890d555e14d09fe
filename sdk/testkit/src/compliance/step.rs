//! The step suite.

use std::sync::Arc;

use herald_plugin_runtime::manifest::PluginGrant;
use herald_plugin_runtime::{CallError, StepInput, StepOutcome};

use super::{Report, json_ok, metadata_matches};
use crate::endpoint::{FakeEndpoint, ReceivedRequest, Reply};
use crate::harness::{Harness, HarnessBuilder};

type GrantFn = Arc<dyn Fn(&FakeEndpoint) -> PluginGrant + Send + Sync>;
type ConfigFn = Arc<dyn Fn(&FakeEndpoint) -> String + Send + Sync>;
type InputFn = Arc<dyn Fn(&mut StepInput) + Send + Sync>;
type CheckFn = Arc<dyn Fn(&StepRun) -> Result<(), String> + Send + Sync>;

/// One execution the suite ran, handed to [`StepCase::check`].
#[derive(Debug)]
pub struct StepRun<'a> {
    /// What the step ran with (the suite runs attempt 1 "now", then attempt 3 a day later).
    pub input: &'a StepInput,
    /// What it returned.
    pub outcome: &'a StepOutcome,
    /// What the fake endpoint received during this execution.
    pub requests: &'a [ReceivedRequest],
    /// The fake endpoint (its URL, to compare with what the step called).
    pub endpoint: &'a FakeEndpoint,
}

/// How to exercise one step type.
#[derive(Clone)]
pub struct StepCase {
    step_type: String,
    good_config: ConfigFn,
    bad_configs: Vec<String>,
    replies: Vec<Reply>,
    input: Option<InputFn>,
    check: Option<CheckFn>,
}

impl StepCase {
    /// A case for `step_type` whose good config (JSON text) may use the fake endpoint's URL.
    pub fn new(
        step_type: impl Into<String>,
        good_config: impl Fn(&FakeEndpoint) -> String + Send + Sync + 'static,
    ) -> StepCase {
        StepCase {
            step_type: step_type.into(),
            good_config: Arc::new(good_config),
            bad_configs: vec![],
            replies: vec![],
            input: None,
            check: None,
        }
    }

    /// A config (JSON text) validation must refuse with at least one message (repeatable). The suite
    /// adds text that is not JSON.
    pub fn bad_config(mut self, config: impl Into<String>) -> StepCase {
        self.bad_configs.push(config.into());
        self
    }

    /// An answer the fake endpoint gives during each execution (repeatable, in order; `200` otherwise).
    pub fn reply(mut self, reply: Reply) -> StepCase {
        self.replies.push(reply);
        self
    }

    /// Adjusts the input of every execution (contact, event, ...), after the suite set attempt and
    /// time.
    pub fn input(mut self, adjust: impl Fn(&mut StepInput) + Send + Sync + 'static) -> StepCase {
        self.input = Some(Arc::new(adjust));
        self
    }

    /// Checks each execution: the outcome (branch, patch, output) and the requests the step made, for
    /// both runs (attempt 1 now, attempt 3 a day later), so a step that uses `attempt` or `now_ms`
    /// can show it honours them.
    pub fn check(mut self, check: impl Fn(&StepRun) -> Result<(), String> + Send + Sync + 'static) -> StepCase {
        self.check = Some(Arc::new(check));
        self
    }
}

/// How to run the [`step`] suite against one step plugin: its grant and a case per step type.
#[derive(Clone)]
pub struct StepProfile {
    grant: GrantFn,
    cases: Vec<StepCase>,
}

impl Default for StepProfile {
    fn default() -> Self {
        StepProfile::new()
    }
}

impl StepProfile {
    /// A profile whose grant only allows private addresses (so the step may call the fake endpoint).
    pub fn new() -> StepProfile {
        StepProfile {
            grant: Arc::new(|_| PluginGrant { allow_private: true, ..PluginGrant::default() }),
            cases: vec![],
        }
    }

    /// The grant the plugin is loaded with.
    pub fn grant(mut self, grant: impl Fn(&FakeEndpoint) -> PluginGrant + Send + Sync + 'static) -> StepProfile {
        self.grant = Arc::new(grant);
        self
    }

    /// Adds the case of one step type (every step type the plugin lists needs one).
    pub fn step_type(mut self, case: StepCase) -> StepProfile {
        self.cases.push(case);
        self
    }
}

const DAY_MS: i64 = 86_400_000;

/// Runs the step suite: see the [module documentation](super).
pub async fn step(plugin: &HarnessBuilder, profile: &StepProfile) -> Report {
    let mut report = Report::new("step", plugin);
    let endpoint = match FakeEndpoint::start() {
        Ok(e) => e,
        Err(e) => {
            report.record("fake endpoint starts", Err(e.to_string()));
            return report;
        }
    };
    let harness = match plugin.load((profile.grant)(&endpoint)).await {
        Ok(h) => h,
        Err(e) => {
            report.record("loads", Err(e));
            return report;
        }
    };
    let types = harness.loaded().map(|p| p.step_types.clone()).unwrap_or_default();
    report.record("loads", if types.is_empty() { Err("the plugin provides no step type".into()) } else { Ok(()) });
    let names: Vec<String> = types.iter().map(|t| t.name.clone()).collect();
    let mut meta = metadata_matches(&harness, "step", &names);
    for t in &types {
        let schema = t.config_schema.as_deref().map_or(Ok(()), |s| json_ok(&format!("{}'s config schema", t.name), s));
        let described = if t.description.trim().is_empty() {
            Err(format!("step type {} has no description", t.name))
        } else {
            Ok(())
        };
        meta = meta.and(schema).and(described);
    }
    report.record("metadata (provides = step types, descriptions, config schemas)", meta);
    let uncovered: Vec<&String> = names.iter().filter(|n| !profile.cases.iter().any(|c| &c.step_type == *n)).collect();
    let unknown: Vec<&String> = profile.cases.iter().map(|c| &c.step_type).filter(|t| !names.contains(t)).collect();
    report.record(
        "every step type has a case",
        if uncovered.is_empty() && unknown.is_empty() {
            Ok(())
        } else {
            Err(format!("no case for {uncovered:?}; cases for step types the plugin does not list: {unknown:?}"))
        },
    );
    for case in &profile.cases {
        run_case(&mut report, &harness, &endpoint, case).await;
    }
    report
}

async fn run_case(report: &mut Report, harness: &Harness, endpoint: &FakeEndpoint, case: &StepCase) {
    let t = &case.step_type;
    let good = (case.good_config)(endpoint);
    let check = match harness.validate_step_config(t, &good).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(problems)) => Err(format!("refused {good}: {problems:?}")),
        Err(e) => Err(format!("call error: {e}")),
    };
    report.record(format!("{t}: accepts its good config"), check);

    let mut bad = case.bad_configs.clone();
    bad.push("{ not json".into());
    for config in &bad {
        let check = match harness.validate_step_config(t, config).await {
            Ok(Err(problems)) if !problems.is_empty() && problems.iter().all(|p| !p.trim().is_empty()) => Ok(()),
            Ok(Err(problems)) => Err(format!("refused without messages: {problems:?}")),
            Ok(Ok(())) => Err("accepted".into()),
            Err(e) => Err(format!("call error: {e}")),
        };
        report.record(format!("{t}: rejects {config}"), check);
    }

    let now = harness.now_ms();
    for (attempt, now_ms) in [(1, now), (3, now + DAY_MS)] {
        let mut input = crate::sample_step_input(t, &good, now_ms);
        input.execution.attempt = attempt;
        if let Some(adjust) = &case.input {
            adjust(&mut input);
        }
        endpoint.reset();
        for r in &case.replies {
            endpoint.push(r.clone());
        }
        let result = harness.execute_step(&input).await;
        let requests = endpoint.take_requests();
        let check = match &result {
            Ok(outcome) => outcome_sane(outcome).and_then(|()| match &case.check {
                Some(check) => check(&StepRun { input: &input, outcome, requests: &requests, endpoint }),
                None => Ok(()),
            }),
            Err(e) => Err(format!("execute failed: {e}")),
        };
        report.record(format!("{t}: executes (attempt {attempt})"), check);
    }

    if let Some(config) = case.bad_configs.first() {
        let input = crate::sample_step_input(t, config, now);
        endpoint.reset();
        let check = match harness.execute_step(&input).await {
            Err(CallError::Guest { .. }) => Ok(()),
            Err(e) => Err(format!("expected the plugin's own error, got {e}")),
            Ok(outcome) => Err(format!("executed a config validation refuses: {outcome:?}")),
        };
        report.record(format!("{t}: executing a bad config fails cleanly"), check);
    }
}

fn outcome_sane(o: &StepOutcome) -> Result<(), String> {
    if let Some(b) = &o.branch
        && b.trim().is_empty()
    {
        return Err("an empty branch name".into());
    }
    if let Some(output) = &o.output {
        json_ok("the output", output)?;
    }
    if let Some(data) = o.patch.as_ref().and_then(|p| p.data.as_ref()) {
        match serde_json::from_str::<serde_json::Value>(data) {
            Ok(serde_json::Value::Object(_)) => {}
            _ => return Err(format!("the patch's data is not a JSON object: {data}")),
        }
    }
    Ok(())
}
