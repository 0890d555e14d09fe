//! The `UPDATE_CONTACT` workflow step: changes the contact the execution runs for.
//!
//! Config: `{"updates"?: {…}, "subscriptionAction"?: "none" | "subscribe" | "unsubscribe"}`, with
//! at least one real change (a non-empty `updates` or a subscribe/unsubscribe action).
//!
//! `updates` is handed to the host as the patch's data unchanged: the host merges it with the data
//! rules of the API (`null` deletes a key, an empty string is ignored, reserved keys are
//! filtered out). The step's output lists the keys it sent and the subscription it set.
#![warn(missing_docs)]

use herald_sdk::serde_json::{Map, Value as Json, json};
use herald_sdk::{ContactPatch, Metadata, PluginError, PluginKind, Step, StepInput, StepOutcome, StepTypeInfo};

/// The `update-contact` plugin.
pub struct UpdateContact;

const STEP_TYPE: &str = "UPDATE_CONTACT";
const ACTIONS: [&str; 3] = ["none", "subscribe", "unsubscribe"];

impl Step for UpdateContact {
    fn metadata() -> Metadata {
        Metadata::new("update-contact", env!("CARGO_PKG_VERSION"), PluginKind::Step)
            .description("UPDATE_CONTACT: merges data into the contact and subscribes or unsubscribes it")
            .provides([STEP_TYPE])
    }

    fn step_types() -> Vec<StepTypeInfo> {
        vec![StepTypeInfo::new(STEP_TYPE, "Merges data into the contact and subscribes or unsubscribes it").config_schema(
            json!({
                "type": "object",
                "properties": {
                    "updates": {"type": "object", "description": "merged into the contact's data; null deletes a key"},
                    "subscriptionAction": {"enum": ACTIONS, "default": "none"}
                }
            }),
        )]
    }

    fn validate_config(step_type: &str, config: &Json) -> Result<(), Vec<String>> {
        if step_type != STEP_TYPE {
            return Err(vec![format!("unknown step type {step_type:?}")]);
        }
        Config::parse(config).map(|_| ())
    }

    fn execute(input: &StepInput) -> Result<StepOutcome, PluginError> {
        let config = Config::parse(&input.config)
            .map_err(|problems| PluginError::permanent("bad_config", problems.join("; ")))?;
        let keys: Vec<&String> = config.updates.as_ref().map(|u| u.keys().collect()).unwrap_or_default();
        let output = json!({"updated": keys, "subscribed": config.subscribed});
        Ok(StepOutcome::next()
            .patch(ContactPatch { data: config.updates.clone(), subscribed: config.subscribed })
            .output(output))
    }
}

/// A checked UPDATE_CONTACT config.
struct Config {
    /// `None` when there is nothing to merge.
    updates: Option<Map<String, Json>>,
    subscribed: Option<bool>,
}

impl Config {
    fn parse(config: &Json) -> Result<Config, Vec<String>> {
        let Some(obj) = config.as_object() else {
            return Err(vec!["the UPDATE_CONTACT config must be a JSON object".into()]);
        };
        let mut problems = Vec::new();
        let updates = match obj.get("updates") {
            None | Some(Json::Null) => None,
            Some(Json::Object(u)) if u.is_empty() => None,
            Some(Json::Object(u)) => Some(u.clone()),
            Some(_) => {
                problems.push("updates must be an object of contact data keys to values".to_owned());
                None
            }
        };
        let subscribed = match obj.get("subscriptionAction") {
            None | Some(Json::Null) => None,
            Some(Json::String(a)) if a == "none" => None,
            Some(Json::String(a)) if a == "subscribe" => Some(true),
            Some(Json::String(a)) if a == "unsubscribe" => Some(false),
            Some(other) => {
                problems.push(format!("subscriptionAction must be one of {} (got {other})", ACTIONS.join(", ")));
                None
            }
        };
        if problems.is_empty() && updates.is_none() && subscribed.is_none() {
            problems.push(
                "the step changes nothing: give updates or a subscriptionAction of subscribe or unsubscribe".into(),
            );
        }
        if problems.is_empty() { Ok(Config { updates, subscribed }) } else { Err(problems) }
    }
}

herald_sdk::export_step!(UpdateContact);

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(config: Json) -> Result<(), Vec<String>> {
        UpdateContact::validate_config(STEP_TYPE, &config)
    }

    #[test]
    fn compliance() {
        herald_sdk::compliance::check_step::<UpdateContact>();
        herald_sdk::compliance::check_manifest(include_str!("../manifest.toml"), &UpdateContact::metadata());
    }

    #[test]
    fn validates_config() {
        assert!(validate(json!({"updates": {"plan": "pro"}})).is_ok());
        assert!(validate(json!({"subscriptionAction": "unsubscribe"})).is_ok());
        assert!(validate(json!({"updates": {"a": null}, "subscriptionAction": "none"})).is_ok());
        for bad in [
            json!({}),
            json!({"updates": {}}),
            json!({"subscriptionAction": "none"}),
            json!({"updates": [1]}),
            json!({"updates": "x"}),
            json!({"updates": {"a": 1}, "subscriptionAction": "maybe"}),
            json!(null),
        ] {
            assert!(validate(bad.clone()).is_err(), "{bad}");
        }
        assert!(UpdateContact::validate_config("WEBHOOK", &json!({"updates": {"a": 1}})).is_err());
    }

    #[test]
    fn passes_updates_through_unchanged() {
        // The host applies the data rules (null deletes, "" is ignored, reserved keys are filtered).
        let updates = json!({"plan": "pro", "old": null, "empty": "", "email": "x@y.z", "tmp": {"value": 1, "persistent": false}});
        let input = StepInput::new(STEP_TYPE, json!({"updates": updates, "subscriptionAction": "subscribe"}));
        let outcome = UpdateContact::execute(&input).expect("runs");
        let patch = outcome.patch.expect("patch");
        assert_eq!(patch.data.map(Json::Object), Some(updates));
        assert_eq!(patch.subscribed, Some(true));
        assert_eq!(outcome.branch, None);
        let output = outcome.output.expect("output");
        assert_eq!(output["subscribed"], true);
        assert_eq!(output["updated"].as_array().map(Vec::len), Some(5));
    }

    #[test]
    fn unsubscribe_only() {
        let input = StepInput::new(STEP_TYPE, json!({"subscriptionAction": "unsubscribe"}));
        let patch = UpdateContact::execute(&input).expect("runs").patch.expect("patch");
        assert_eq!(patch, ContactPatch { data: None, subscribed: Some(false) });
    }

    #[test]
    fn a_bad_config_is_a_permanent_error() {
        let err = UpdateContact::execute(&StepInput::new(STEP_TYPE, json!({"updates": 3}))).expect_err("bad");
        assert_eq!(err.code, "bad_config");
        assert!(!err.retryable);
    }
}
