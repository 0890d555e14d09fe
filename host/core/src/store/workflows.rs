//! Workflows and their executions. A workflow's graph lives in its row; each edit writes the whole row
//! only over the version it was made from. Every query filters by project.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::jobs::NewJob;
use super::{Store, StoreError};
use crate::domain::workflows::Graph;
use crate::vars;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorkflowRow {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub enabled: bool,
    pub trigger_type: String,
    pub trigger_config: Option<Value>,
    pub allow_reentry: bool,
    pub graph: Graph,
    pub version: i64,
    pub created_at: i64,
    pub updated_at: i64,
    /// when an enabled SCHEDULE workflow is due next
    #[serde(default)]
    pub next_at: Option<i64>,
}

/// A workflow in a list: its fields without the graph, and counts.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct WorkflowItem {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub enabled: bool,
    pub trigger_type: String,
    pub trigger_config: Option<Value>,
    pub allow_reentry: bool,
    pub step_count: i64,
    pub execution_count: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

/// What a workflow's graph uses, kept beside it for usage reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Refs {
    pub events: Vec<String>,
    pub fields: Vec<String>,
    pub templates: Vec<String>,
    pub segments: Vec<String>,
}

/// Filters of a workflow list.
#[derive(Debug, Clone, Default)]
pub struct WorkflowQuery {
    /// lowercase
    pub search: Option<String>,
    pub enabled: Option<bool>,
    pub offset: usize,
    pub limit: usize,
}

const FIELDS: &str = "record::id(id) AS id, name, description, enabled, trigger_type, trigger_config, allow_reentry, \
                      graph, version, created_at, updated_at, next_at";

const ACTIVE: &str = "count(SELECT VALUE id FROM workflow_execution WHERE workflow = $id AND project = $p AND status IN ['RUNNING', 'WAITING'])";

impl Store {
    fn workflow_doc(project: &str, w: &WorkflowRow, refs: &Refs) -> Value {
        let event_name = match (w.trigger_type.as_str(), &w.trigger_config) {
            ("EVENT", Some(c)) => c.get("eventName").cloned(),
            _ => None,
        };
        super::jobs::strip_nulls(vars! {
            "project": project, "name": w.name, "description": w.description, "enabled": w.enabled,
            "trigger_type": w.trigger_type, "trigger_config": w.trigger_config, "event_name": event_name,
            "allow_reentry": w.allow_reentry, "graph": w.graph, "version": w.version,
            "ref_events": refs.events, "ref_fields": refs.fields, "ref_templates": refs.templates,
            "ref_segments": refs.segments, "created_at": w.created_at, "updated_at": w.updated_at,
            "next_at": w.next_at,
        })
    }

    /// Creates a workflow.
    pub async fn create_workflow(&self, project: &str, w: &WorkflowRow, refs: &Refs) -> Result<(), StoreError> {
        let doc = Self::workflow_doc(project, w, refs);
        self.write(|| async {
            self.query(
                "CREATE type::record('workflow', $id) CONTENT $doc RETURN NONE;",
                vars! { "id": w.id, "doc": doc.clone() },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Writes a changed workflow (its `version` already moved past `from_version`) if the stored one is
    /// still at `from_version`: false when another edit came first. `guard`: refuse (THROW
    /// `WORKFLOW_ACTIVE: <n>`) when the stored workflow is enabled and has RUNNING or WAITING executions.
    pub async fn update_workflow(
        &self,
        project: &str,
        w: &WorkflowRow,
        refs: &Refs,
        from_version: i64,
        guard: bool,
    ) -> Result<bool, StoreError> {
        let doc = Self::workflow_doc(project, w, refs);
        let guard_sql = if guard {
            format!(
                "LET $active = IF $before.enabled THEN {ACTIVE} ELSE 0 END;
                 IF $active > 0 {{ THROW 'WORKFLOW_ACTIVE: ' + <string> $active; }};"
            )
        } else {
            String::new()
        };
        let v = self
            .write(|| async {
                self.query(
                    &format!(
                        "BEGIN TRANSACTION;
                         LET $before = (SELECT enabled, version FROM ONLY type::record('workflow', $id) WHERE project = $p);
                         {guard_sql}
                         LET $r = (UPDATE type::record('workflow', $id) CONTENT $doc WHERE project = $p AND version = $v
                            RETURN VALUE record::id(id));
                         RETURN array::len($r) > 0;
                         COMMIT TRANSACTION;"
                    ),
                    vars! { "id": w.id, "p": project, "v": from_version, "doc": doc.clone() },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_bool().unwrap_or(false))
    }

    pub async fn workflow(&self, project: &str, id: &str) -> Result<Option<WorkflowRow>, StoreError> {
        self.query(
            &format!("SELECT {FIELDS} FROM workflow WHERE id = type::record('workflow', $id) AND project = $p"),
            vars! { "p": project, "id": id },
        )
        .await?
        .first(0)
    }

    /// The event names any of the project's workflows listens for: the triggers of its enabled EVENT
    /// workflows and the events its steps wait for or ask about (any workflow: a disabled one's
    /// executions still wait).
    pub async fn workflow_event_names(&self, project: &str) -> Result<Vec<String>, StoreError> {
        let rows: Vec<Value> = self
            .query(
                "SELECT event_name, enabled, trigger_type, ref_events FROM workflow WHERE project = $p",
                vars! { "p": project },
            )
            .await?
            .all(0)?;
        let mut names = Vec::new();
        for r in rows {
            if r.get("enabled") == Some(&Value::Bool(true))
                && r.get("trigger_type").and_then(Value::as_str) == Some("EVENT")
                && let Some(n) = r.get("event_name").and_then(Value::as_str)
            {
                names.push(n.to_string());
            }
            names.extend(
                r.get("ref_events")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string)),
            );
        }
        Ok(names)
    }

    /// Enabled SCHEDULE workflows (of every project) due at `now`, at most `limit`.
    pub async fn due_workflows(&self, now: i64, limit: usize) -> Result<Vec<(String, WorkflowRow)>, StoreError> {
        let rows: Vec<Value> = self
            .query(
                &format!(
                    "SELECT project, {FIELDS} FROM workflow WHERE next_at <= $now AND enabled = true
                     AND trigger_type = 'SCHEDULE' LIMIT $limit"
                ),
                vars! { "now": now, "limit": limit },
            )
            .await?
            .all(0)?;
        Ok(rows
            .into_iter()
            .filter_map(|r| {
                let project = r.get("project")?.as_str()?.to_string();
                Some((project, serde_json::from_value(r).ok()?))
            })
            .collect())
    }

    /// Moves a schedule from `due` to `next` and queues its enrollment job in the same transaction (at
    /// `now`), if no other process moved it first: true when this call fired the tick.
    pub async fn fire_schedule(
        &self,
        project: &str,
        id: &str,
        due: i64,
        next: Option<i64>,
        job: &NewJob,
        now: i64,
    ) -> Result<bool, StoreError> {
        let job = job.doc(now);
        // A schedule that never comes due again keeps no time (NONE, not a bound null).
        let set = if next.is_some() { "next_at = $next" } else { "next_at = NONE" };
        let v = self
            .write(|| async {
                self.query(
                    &format!(
                        "BEGIN TRANSACTION;
                         LET $r = (UPDATE type::record('workflow', $id) SET {set}
                            WHERE project = $p AND next_at = $due AND enabled = true RETURN VALUE record::id(id));
                         IF array::len($r) > 0 {{ INSERT INTO job [$job] RETURN NONE; }};
                         RETURN array::len($r) > 0;
                         COMMIT TRANSACTION;"
                    ),
                    vars! { "p": project, "id": id, "due": due, "next": next, "job": job },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_bool().unwrap_or(false))
    }

    /// The project's enabled workflows with an EVENT trigger on `event`.
    pub async fn event_workflows(&self, project: &str, event: &str) -> Result<Vec<WorkflowRow>, StoreError> {
        self.query(
            &format!(
                "SELECT {FIELDS} FROM workflow WHERE project = $p AND event_name = $e AND enabled = true
                 AND trigger_type = 'EVENT'"
            ),
            vars! { "p": project, "e": event },
        )
        .await?
        .all(0)
    }

    /// One page of the project's workflows (newest first) and the total matching.
    pub async fn list_workflows(
        &self,
        project: &str,
        q: &WorkflowQuery,
    ) -> Result<(Vec<WorkflowItem>, i64), StoreError> {
        let mut filter = String::from(" WHERE project = $p");
        if q.enabled.is_some() {
            filter.push_str(" AND enabled = $enabled");
        }
        if q.search.is_some() {
            filter.push_str(
                " AND (string::contains(string::lowercase(name), $q) OR string::contains(string::lowercase(description ?? ''), $q))",
            );
        }
        let mut rows = self
            .query(
                &format!(
                    "SELECT record::id(id) AS id, name, description, enabled, trigger_type, trigger_config, allow_reentry,
                        array::len(graph.steps) AS step_count,
                        count(SELECT VALUE id FROM workflow_execution WHERE project = $p AND workflow = record::id($parent.id)) AS execution_count,
                        created_at, updated_at
                     FROM workflow{filter} ORDER BY created_at DESC, id DESC LIMIT $limit START $offset;
                     SELECT count() AS n FROM workflow{filter} GROUP ALL;"
                ),
                vars! { "p": project, "enabled": q.enabled, "q": q.search, "limit": q.limit, "offset": q.offset },
            )
            .await?;
        let list = rows.all(0)?;
        let total = rows.value(1)?.get(0).and_then(|r| r.get("n")).and_then(Value::as_i64).unwrap_or(0);
        Ok((list, total))
    }

    /// How many RUNNING or WAITING executions the workflow has.
    pub async fn active_executions(&self, project: &str, id: &str) -> Result<i64, StoreError> {
        let v = self.query(&format!("RETURN {ACTIVE}"), vars! { "p": project, "id": id }).await?.value(0)?;
        Ok(v.as_i64().unwrap_or(0))
    }

    /// Deletes a workflow that has no RUNNING or WAITING executions, with its executions: Ok(false) when
    /// it is not the project's; THROW `WORKFLOW_ACTIVE: <n>` when executions are active.
    pub async fn delete_workflow(&self, project: &str, id: &str) -> Result<bool, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    &format!(
                        "BEGIN TRANSACTION;
                         LET $active = {ACTIVE};
                         IF $active > 0 {{ THROW 'WORKFLOW_ACTIVE: ' + <string> $active; }};
                         LET $gone = (DELETE workflow WHERE id = type::record('workflow', $id) AND project = $p RETURN BEFORE);
                         IF array::len($gone) > 0 {{
                            DELETE workflow_execution WHERE project = $p AND workflow = $id RETURN NONE;
                            DELETE workflow_entry WHERE project = $p AND record::id(id)[0] = $id RETURN NONE;
                         }};
                         RETURN array::len($gone) > 0;
                         COMMIT TRANSACTION;"
                    ),
                    vars! { "p": project, "id": id },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_bool().unwrap_or(false))
    }

    /// The project's workflows whose graph uses `value` in `refs` (`ref_fields`, `ref_templates` or
    /// `ref_segments`, a name from the code), enabled ones only when `enabled_only`.
    pub async fn workflows_referencing(
        &self,
        project: &str,
        refs: &'static str,
        value: &str,
        enabled_only: bool,
    ) -> Result<Vec<WorkflowRow>, StoreError> {
        let enabled = if enabled_only { " AND enabled = true" } else { "" };
        self.query(
            &format!("SELECT {FIELDS} FROM workflow WHERE project = $p AND $v IN {refs}{enabled} ORDER BY created_at"),
            vars! { "p": project, "v": value },
        )
        .await?
        .all(0)
    }

    /// The names of the project's workflows whose trigger is `event` or whose steps wait for or ask
    /// about it (usage reports).
    pub async fn workflows_using_event(&self, project: &str, event: &str) -> Result<Vec<(String, String)>, StoreError> {
        let rows: Vec<Value> = self
            .query(
                "SELECT record::id(id) AS id, name FROM workflow WHERE project = $p AND (event_name = $e OR $e IN ref_events)
                 ORDER BY created_at",
                vars! { "p": project, "e": event },
            )
            .await?
            .all(0)?;
        Ok(pairs(rows))
    }
}

fn pairs(rows: Vec<Value>) -> Vec<(String, String)> {
    rows.into_iter()
        .filter_map(|r| Some((r.get("id")?.as_str()?.to_string(), r.get("name")?.as_str()?.to_string())))
        .collect()
}
