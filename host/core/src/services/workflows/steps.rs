//! The steps of a workflow that reach outside the engine (docs/behaviour.md#workflows): SEND_EMAIL
//! through the composer and the delivery pipeline, plugin steps through the plugin runtime, and the
//! CONDITION step's evaluation (in memory for the context, through the segment engine for the contact).
//! Each decides what its step comes to; the engine writes it.
//!
//! Must not import: salvo, surrealdb.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::engine::{Engine, Outcome, Seen, StepError, new_id};
use crate::domain::conditions::{Group, Logic, Op, Operand, Tree};
use crate::domain::workflows::Step;
use crate::domain::workflows::run;
use crate::domain::workflows::steps::{self, Source};
use crate::store::StoreError;
use crate::store::workflow_runs::{ContactChange, ExecutionRow};
use crate::store::workflows::WorkflowRow;

impl Engine {
    /// A SEND_EMAIL step: renders the step's template for its recipient (the contact, or a custom address
    /// rendered from `{{variables}}`) with the contact's data, the context (`{{event.x}}`,
    /// `{{workflow.x}}`, and its top-level keys where the contact has none) and the subscription links.
    /// A MARKETING template to an unsubscribed contact is skipped; an unverified sender or a template
    /// that cannot be rendered fails the step.
    pub(super) async fn send_email(
        &self,
        project: &str,
        e: &ExecutionRow,
        step: &Step,
        now: i64,
        seen: &Seen<'_>,
    ) -> Result<Outcome, StepError> {
        use crate::domain::templating::Mode;
        use crate::services::compose::{Message, Recipient};
        let retry = |e: StoreError| StepError::Retry(e.to_string());
        let failed = |error: String| Ok(Outcome::Failed { error });
        let Some(tid) = step.template_id.as_deref() else { return failed("the step has no template".into()) };
        let known = seen.templates.lock().unwrap_or_else(|p| p.into_inner()).get(tid).cloned();
        let t = match known {
            Some(t) => t,
            None => {
                let t = self.store.template(project, tid).await.map_err(retry)?.map(Arc::new);
                seen.templates.lock().unwrap_or_else(|p| p.into_inner()).insert(tid.to_string(), t.clone());
                t
            }
        };
        let Some(t) = t else {
            return failed(format!("template {tid} does not exist any more"));
        };
        let Some(contact) = seen.contact else {
            return failed("the contact does not exist any more".into());
        };
        let context = e.context.as_object().cloned().unwrap_or_default();
        let mut request_vars: Vec<(String, Value)> = context
            .iter()
            .filter(|(k, _)| !contact.data.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        request_vars.push(("event".into(), e.context.clone()));
        request_vars.push(("workflow".into(), e.context.clone()));
        let custom = step.config.pointer("/recipient/type").and_then(Value::as_str) == Some("CUSTOM");
        let to = if custom {
            let src = step.config.pointer("/recipient/customEmail").and_then(Value::as_str).unwrap_or_default();
            let mut vars = Value::Object(contact.data.clone());
            for (k, v) in &request_vars {
                vars[k] = v.clone();
            }
            vars["email"] = json!(contact.email);
            match self.composer.templates.render(src, &vars, Mode::Text, 1024) {
                Ok(a) if crate::domain::contacts::is_email(a.trim()) => crate::domain::contacts::normalize_email(&a),
                Ok(a) => {
                    return failed(format!("the custom recipient rendered to {a:?}, which is not an email address"));
                }
                Err(i) => return failed(format!("the custom recipient cannot be rendered: {i}")),
            }
        } else {
            contact.email.clone()
        };
        if t.kind == "MARKETING" && !custom && !contact.subscribed {
            return Ok(Outcome::Skipped { reason: "the contact is unsubscribed and the template is MARKETING".into() });
        }
        // The per-contact hourly budget of workflow emails (docs/security.md#workflows).
        if !seen.emails.take(project, &contact.id, self.budgets.emails) {
            return Ok(Outcome::Skipped { reason: super::limits::emails_reason(self.budgets.emails) });
        }
        // The monthly workflows limit: the step is skipped with the reason, nothing is sent. (The round's
        // write checks it again: when another round counted first, the execution is tried again.)
        let workflows = crate::domain::billing::Category::Workflows;
        if let Some(limit) = seen.allowance.take_one(&self.store, project, workflows, now).await.map_err(retry)? {
            return Ok(Outcome::Skipped { reason: crate::domain::billing::exceeded_reason(workflows, limit) });
        }
        if let Err(refused) = crate::services::sending_domains::require_sender(&self.store, project, &t.from).await {
            return match refused {
                crate::error::Error::SenderDomain { message, .. } => failed(message),
                other => Err(StepError::Retry(other.to_string())),
            };
        }
        let prepared = self
            .composer
            .templates
            .prepare(&t.subject, Mode::Text)
            .and_then(|s| Ok((s, self.composer.templates.prepare(&t.body, Mode::Html)?)));
        let (subject, html) = match prepared {
            Ok(p) => p,
            Err(i) => return failed(format!("template {tid} cannot be rendered: {i}")),
        };
        let p = self.store.project_cached(project).await.map_err(retry)?;
        let project_name = p.as_ref().map(|p| p.name.clone());
        let message = Message {
            project,
            from: &t.from,
            from_name: t.from_name.as_deref().or(project_name.as_deref()),
            reply_to: t.reply_to.as_deref(),
            subject: &subject,
            html: &html,
            kind: &t.kind,
            template: Some(&t.id),
            campaign: None,
            headers: &[],
            attachments: Arc::from("[]"),
            track: crate::domain::tracking::tracked(p.as_ref().and_then(|p| p.tracking.as_deref()), &t.kind),
            request_vars: &request_vars,
            subject_prefix: "",
            // Marketing mail from a workflow is bulk mail, like a campaign's.
            bulk: t.kind == "MARKETING",
        };
        let recipient = Recipient { contact_id: &contact.id, email: &to, name: None, data: &contact.data };
        let id = new_id();
        match self.composer.compose(&message, &recipient, &id, now) {
            Ok(row) => {
                let output = json!({ "emailId": id, "to": to, "templateId": t.id });
                Ok(Outcome::Sent { email: Box::new(row), output })
            }
            Err(i) => failed(format!("template {tid} cannot be rendered for this contact: {i}")),
        }
    }

    /// A plugin's step type, run through the plugin runtime with its limits. A retryable error (a
    /// timeout, the plugin's own retryable error, no plugin loaded) tries the step again with the job's
    /// backoff; a trap or a permanent error fails the execution with the reason. The contact change
    /// the plugin asks for is planned with the API's data rules and written with the step's completion.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn plugin_step(
        &self,
        project: &str,
        w: &WorkflowRow,
        e: &ExecutionRow,
        step: &Step,
        now: i64,
        attempt: i64,
        seen: &Seen<'_>,
    ) -> Result<Outcome, StepError> {
        use crate::plugins::{Execution, StepContact, StepInput, TriggerEvent};
        let Some(contact) = seen.contact else {
            return Ok(Outcome::Failed { error: "the contact does not exist any more".into() });
        };
        let event = e.trigger_event.as_ref().map(|_| TriggerEvent {
            name: w
                .trigger_config
                .as_ref()
                .and_then(|c| c.get("eventName"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            data: e.context.to_string(),
        });
        let input = StepInput {
            step_type: step.kind.clone(),
            config: step.config.to_string(),
            contact: StepContact {
                id: contact.id.clone(),
                email: contact.email.clone(),
                subscribed: contact.subscribed,
                data: Value::Object(contact.data.clone()).to_string(),
            },
            execution: Execution {
                project_id: project.to_string(),
                workflow_id: w.id.clone(),
                execution_id: e.id.clone(),
                step_id: step.id.clone(),
                attempt: u32::try_from(attempt.max(1)).unwrap_or(u32::MAX),
                now_ms: now,
                event,
            },
        };
        let out = match self.plugins.execute_step(&input).await {
            Ok(o) => o,
            Err(err) if err.retryable() => return Err(StepError::Retry(err.to_string())),
            Err(err) => return Ok(Outcome::Failed { error: err.to_string() }),
        };
        let output = out.output.as_deref().and_then(|o| serde_json::from_str(o).ok()).unwrap_or(json!({}));
        let Some(patch) = out.patch.filter(|p| p.data.is_some() || p.subscribed.is_some()) else {
            return Ok(Outcome::Done { branch: out.branch, wait: None, output });
        };
        let data = match patch.data.as_deref().map(serde_json::from_str::<Value>) {
            None => Map::new(),
            Some(Ok(Value::Object(m))) => m,
            Some(_) => return Ok(Outcome::Failed { error: "the plugin's contact change is not a JSON object".into() }),
        };
        let upsert = crate::services::ingest::Upsert {
            email: contact.email.clone(),
            subscribed: patch.subscribed,
            default_subscribed: true,
            patch: crate::domain::contacts::DataPatch::parse(&data, false),
            event: None,
        };
        // The change as the API's data rules make it, from the contact as the earlier steps left it.
        let a = crate::services::ingest::apply(project, Some(contact), &upsert, now);
        if a.contact.data == contact.data && a.contact.subscribed == contact.subscribed {
            return Ok(Outcome::Done { branch: out.branch, wait: None, output });
        }
        let change = ContactChange {
            id: contact.id.clone(),
            version: contact.version,
            email: contact.email.clone(),
            subscribed: a.contact.subscribed,
            data: a.contact.data,
            events: a.events,
        };
        Ok(Outcome::Patched { branch: out.branch, output, change: Box::new(change) })
    }

    /// Evaluates a CONDITION step for the execution's contact and context.
    pub(super) async fn condition(
        &self,
        project: &str,
        e: &ExecutionRow,
        config: &Value,
        now: i64,
    ) -> Result<bool, StepError> {
        let plugins = self.plugins.clone();
        let cond = match steps::parse_condition(config, &move |op| plugins.operator(op).is_some()) {
            Ok(c) => c,
            // A plugin operator whose plugin is gone, or a config saved by an older version.
            Err(m) => return Err(StepError::Retry(format!("the condition cannot be evaluated: {m}"))),
        };
        match &cond.source {
            Source::Context(path) => {
                let value = run::at_path(&e.context, path);
                if let Op::Plugin(op) = &cond.filter.op {
                    let operand = match &cond.filter.operand {
                        Operand::Raw(v) => crate::plugins::Value::from_json(v),
                        _ => crate::plugins::Value::Null,
                    };
                    let v = crate::plugins::Value::from_json(value.unwrap_or(&Value::Null));
                    let r =
                        self.plugins.evaluate(op, &operand, &[v]).await.map_err(|e| StepError::Retry(e.to_string()))?;
                    return Ok(r.first().copied().unwrap_or(false));
                }
                Ok(run::eval(&cond.filter, value, now))
            }
            Source::Contact => {
                let tree =
                    Tree { logic: Logic::And, groups: vec![Group { filters: vec![cond.filter], conditions: None }] };
                let compiled =
                    self.segments.compile(project, &tree, now).await.map_err(|e| StepError::Retry(e.to_string()))?;
                let ids = [e.contact.clone()];
                let found = self
                    .segments
                    .matching_among(project, &compiled, &ids)
                    .await
                    .map_err(|e| StepError::Retry(e.to_string()))?;
                Ok(!found.is_empty())
            }
        }
    }
}
