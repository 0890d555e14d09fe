//! Workflow step types (world `step`): the [`Step`] trait, its input and outcome, and its export adapter.

use std::marker::PhantomData;

use herald_sdk_bindings_step::exports::herald::plugin::{plugin as wit_plugin, steps as wit};
use herald_sdk_bindings_step::herald::plugin::types as wit_types;
use serde_json::{Map, Value as Json};

use crate::types::{Metadata, PluginError, convert_shared_types};

convert_shared_types!(herald_sdk_bindings_step::herald::plugin::types);

/// One step type a plugin provides (WIT `step-type-info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepTypeInfo {
    /// As used in a workflow step's `type`, e.g. `"WEBHOOK"`.
    pub name: String,
    /// For people.
    pub description: String,
    /// JSON Schema (as text) of the step's config, if published.
    pub config_schema: Option<String>,
}

impl StepTypeInfo {
    /// A step type without a config schema.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        StepTypeInfo { name: name.into(), description: description.into(), config_schema: None }
    }

    /// Publishes a JSON Schema of the config.
    pub fn config_schema(mut self, schema: Json) -> Self {
        self.config_schema = Some(schema.to_string());
        self
    }
}

/// The contact a workflow execution runs for.
#[derive(Debug, Clone, PartialEq)]
pub struct Contact {
    /// The contact's id.
    pub id: String,
    /// The contact's email address.
    pub email: String,
    /// Whether the contact is subscribed.
    pub subscribed: bool,
    /// The contact's data, a JSON object.
    pub data: Json,
}

/// The event that started an execution.
#[derive(Debug, Clone, PartialEq)]
pub struct TriggerEvent {
    /// The event's name.
    pub name: String,
    /// The event's data, a JSON object.
    pub data: Json,
}

/// Where in a workflow the step runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    /// The project's id.
    pub project_id: String,
    /// The workflow's id.
    pub workflow_id: String,
    /// The execution's id.
    pub execution_id: String,
    /// The step's id.
    pub step_id: String,
    /// 1 on the first try.
    pub attempt: u32,
    /// Frozen per call: use this, not the wall clock.
    pub now_ms: i64,
    /// The event that started the execution, if any.
    pub event: Option<TriggerEvent>,
}

/// Everything a step gets when it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct StepInput {
    /// Which of the plugin's step types runs.
    pub step_type: String,
    /// The step's config, accepted earlier by [`Step::validate_config`].
    pub config: Json,
    /// The contact.
    pub contact: Contact,
    /// The execution.
    pub execution: Execution,
}

impl StepInput {
    /// An input for tests: `step_type` with `config`, for contact `contact-1`
    /// (`contact@example.com`, subscribed, empty data) in execution `execution-1` of workflow
    /// `workflow-1`, step `step-1`, project `project-1`, first attempt, no event, `now_ms` 0.
    /// Change the public fields as a test needs.
    pub fn new(step_type: impl Into<String>, config: Json) -> Self {
        StepInput {
            step_type: step_type.into(),
            config,
            contact: Contact {
                id: "contact-1".into(),
                email: "contact@example.com".into(),
                subscribed: true,
                data: Json::Object(Map::new()),
            },
            execution: Execution {
                project_id: "project-1".into(),
                workflow_id: "workflow-1".into(),
                execution_id: "execution-1".into(),
                step_id: "step-1".into(),
                attempt: 1,
                now_ms: 0,
                event: None,
            },
        }
    }
}

/// A change to the contact. The host applies it with the data rules of the API: `null` deletes a
/// key, empty strings are ignored, reserved keys are filtered out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContactPatch {
    /// Merged into the contact's data.
    pub data: Option<Map<String, Json>>,
    /// Subscribes (`true`) or unsubscribes (`false`) the contact.
    pub subscribed: Option<bool>,
}

/// What a step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepOutcome {
    /// The transition to follow; `None` follows the default one.
    pub branch: Option<String>,
    /// A change to the contact.
    pub patch: Option<ContactPatch>,
    /// Recorded with the execution step.
    pub output: Option<Json>,
}

impl StepOutcome {
    /// Continue on the default transition, changing nothing and recording nothing.
    pub fn next() -> Self {
        StepOutcome::default()
    }

    /// Follows the transition named `branch`.
    pub fn branch(mut self, branch: impl Into<String>) -> Self {
        self.branch = Some(branch.into());
        self
    }

    /// Applies `patch` to the contact.
    pub fn patch(mut self, patch: ContactPatch) -> Self {
        self.patch = Some(patch);
        self
    }

    /// Records `output` with the execution step.
    pub fn output(mut self, output: Json) -> Self {
        self.output = Some(output);
        self
    }
}

/// A plugin that provides workflow step types.
///
/// Export it with [`export_step!`](crate::export_step). Steps may use every host import, including
/// [`http`](crate::http).
pub trait Step {
    /// What the plugin is; `kind` must be [`PluginKind::Step`](crate::PluginKind::Step) and
    /// `provides` the step types.
    fn metadata() -> Metadata;

    /// The step types this plugin provides.
    fn step_types() -> Vec<StepTypeInfo>;

    /// Checks a step's config when a workflow is saved; each string names one problem. Config that
    /// is not JSON is refused before this is called.
    fn validate_config(step_type: &str, config: &Json) -> Result<(), Vec<String>>;

    /// Runs the step. A [`PluginError`] with `retryable` set is tried again later; otherwise the
    /// execution fails.
    fn execute(input: &StepInput) -> Result<StepOutcome, PluginError>;
}

/// Adapts a [`Step`] to the generated `Guest` traits. Used by [`export_step!`](crate::export_step).
#[doc(hidden)]
pub struct StepExport<T>(PhantomData<T>);

impl<T: Step> wit_plugin::Guest for StepExport<T> {
    fn metadata() -> wit_types::PluginMetadata {
        T::metadata().into()
    }
}

impl<T: Step> wit::Guest for StepExport<T> {
    fn step_types() -> Vec<wit::StepTypeInfo> {
        T::step_types()
            .into_iter()
            .map(|s| wit::StepTypeInfo { name: s.name, description: s.description, config_schema: s.config_schema })
            .collect()
    }

    fn validate_config(step_type: String, config: String) -> Result<(), Vec<String>> {
        let config: Json =
            serde_json::from_str(&config).map_err(|e| vec![format!("the step's config is not valid JSON: {e}")])?;
        T::validate_config(&step_type, &config)
    }

    fn execute(input: wit::StepInput) -> Result<wit::StepOutcome, wit_types::PluginError> {
        let input = StepInput::try_from(input).map_err(wit_types::PluginError::from)?;
        let outcome = T::execute(&input)?;
        Ok(outcome.into())
    }
}

fn parse_json(what: &str, text: &str) -> Result<Json, PluginError> {
    serde_json::from_str(text)
        .map_err(|e| PluginError::permanent("bad_input", format!("{what} is not valid JSON: {e}")))
}

impl TryFrom<wit::StepInput> for StepInput {
    type Error = PluginError;

    fn try_from(input: wit::StepInput) -> Result<Self, PluginError> {
        let e = input.execution;
        let event = match e.event {
            Some(ev) => Some(TriggerEvent { data: parse_json("the event's data", &ev.data)?, name: ev.name }),
            None => None,
        };
        Ok(StepInput {
            config: parse_json("the step's config", &input.config)?,
            step_type: input.step_type,
            contact: Contact {
                data: parse_json("the contact's data", &input.contact.data)?,
                id: input.contact.id,
                email: input.contact.email,
                subscribed: input.contact.subscribed,
            },
            execution: Execution {
                project_id: e.project_id,
                workflow_id: e.workflow_id,
                execution_id: e.execution_id,
                step_id: e.step_id,
                attempt: e.attempt,
                now_ms: e.now_ms,
                event,
            },
        })
    }
}

impl From<StepOutcome> for wit::StepOutcome {
    fn from(o: StepOutcome) -> Self {
        wit::StepOutcome {
            branch: o.branch,
            patch: o.patch.map(|p| wit::ContactPatch {
                data: p.data.map(|d| Json::Object(d).to_string()),
                subscribed: p.subscribed,
            }),
            output: o.output.map(|j| j.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PluginKind;
    use serde_json::json;
    use wit::Guest as _;

    struct Echo;

    impl Step for Echo {
        fn metadata() -> Metadata {
            Metadata::new("echo", "1.0.0", PluginKind::Step).provides(["ECHO"])
        }
        fn step_types() -> Vec<StepTypeInfo> {
            vec![StepTypeInfo::new("ECHO", "echoes")]
        }
        fn validate_config(_: &str, config: &Json) -> Result<(), Vec<String>> {
            if config.is_object() { Ok(()) } else { Err(vec!["config must be an object".into()]) }
        }
        fn execute(input: &StepInput) -> Result<StepOutcome, PluginError> {
            let mut data = Map::new();
            data.insert("seen".into(), input.contact.data.clone());
            Ok(StepOutcome::next()
                .branch("yes")
                .patch(ContactPatch { data: Some(data), subscribed: Some(false) })
                .output(json!({"event": input.execution.event.as_ref().map(|e| e.data.clone())})))
        }
    }

    fn wit_input(config: &str, data: &str) -> wit::StepInput {
        wit::StepInput {
            step_type: "ECHO".into(),
            config: config.into(),
            contact: wit::Contact { id: "c".into(), email: "a@b.c".into(), subscribed: true, data: data.into() },
            execution: wit::Execution {
                project_id: "p".into(),
                workflow_id: "w".into(),
                execution_id: "e".into(),
                step_id: "s".into(),
                attempt: 1,
                now_ms: 5,
                event: Some(wit::TriggerEvent { name: "signup".into(), data: "{\"plan\":\"pro\"}".into() }),
            },
        }
    }

    #[test]
    fn adapter_parses_and_serializes_json() {
        let out = StepExport::<Echo>::execute(wit_input("{}", "{\"a\":1}")).expect("runs");
        assert_eq!(out.branch.as_deref(), Some("yes"));
        let patch = out.patch.expect("patch");
        assert_eq!(patch.data.as_deref(), Some("{\"seen\":{\"a\":1}}"));
        assert_eq!(patch.subscribed, Some(false));
        assert_eq!(out.output.as_deref(), Some("{\"event\":{\"plan\":\"pro\"}}"));
    }

    #[test]
    fn adapter_refuses_bad_json() {
        let err = StepExport::<Echo>::execute(wit_input("{}", "not json")).expect_err("bad data");
        assert_eq!(err.code, "bad_input");
        assert!(!err.retryable);
        let errs = StepExport::<Echo>::validate_config("ECHO".into(), "{".into()).expect_err("bad config");
        assert!(errs[0].contains("not valid JSON"), "{errs:?}");
        assert!(StepExport::<Echo>::validate_config("ECHO".into(), "[]".into()).is_err());
        assert!(StepExport::<Echo>::validate_config("ECHO".into(), "{}".into()).is_ok());
    }
}
