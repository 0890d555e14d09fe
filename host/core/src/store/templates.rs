//! Email templates. Every query filters by project.

use serde::{Deserialize, Serialize};

use super::{Store, StoreError};
use crate::vars;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TemplateRow {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub subject: String,
    pub body: String,
    pub from: String,
    pub from_name: Option<String>,
    pub reply_to: Option<String>,
    #[serde(rename = "type")]
    pub kind: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Filters and order of a template list.
#[derive(Debug, Clone, Default)]
pub struct TemplateQuery {
    pub kind: Option<String>,
    /// lowercase
    pub search: Option<String>,
    /// `name`, `created_at` or `updated_at`
    pub sort: &'static str,
    pub ascending: bool,
    pub offset: usize,
    pub limit: usize,
}

const FIELDS: &str =
    "record::id(id) AS id, name, description, subject, body, from, from_name, reply_to, type, created_at, updated_at";

impl Store {
    /// Creates or replaces a template of the project.
    pub async fn save_template(&self, project: &str, t: &TemplateRow) -> Result<(), StoreError> {
        let doc = super::jobs::strip_nulls(vars! {
            "project": project, "name": t.name, "description": t.description, "subject": t.subject, "body": t.body,
            "from": t.from, "from_name": t.from_name, "reply_to": t.reply_to, "type": t.kind,
            "created_at": t.created_at, "updated_at": t.updated_at,
        });
        self.write(|| async {
            self.query(
                "IF record::exists(type::record('template', $id)) {
                    UPDATE type::record('template', $id) CONTENT $doc WHERE project = $p RETURN NONE;
                 } ELSE {
                    CREATE type::record('template', $id) CONTENT $doc RETURN NONE;
                 };",
                vars! { "id": t.id, "p": project, "doc": doc.clone() },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// How many emails of the project were rendered from the template (index `email_project_template`).
    pub async fn template_emails(&self, project: &str, id: &str) -> Result<i64, StoreError> {
        let v = self
            .query(
                "RETURN count(SELECT VALUE id FROM email WHERE project = $p AND template = $t)",
                vars! { "p": project, "t": id },
            )
            .await?
            .value(0)?;
        Ok(v.as_i64().unwrap_or(0))
    }

    pub async fn template(&self, project: &str, id: &str) -> Result<Option<TemplateRow>, StoreError> {
        self.query(
            &format!("SELECT {FIELDS} FROM template WHERE id = type::record('template', $id) AND project = $p"),
            vars! { "p": project, "id": id },
        )
        .await?
        .first(0)
    }

    fn template_filter(q: &TemplateQuery) -> String {
        let mut sql = String::from(" WHERE project = $p");
        if q.kind.is_some() {
            sql.push_str(" AND type = $kind");
        }
        if q.search.is_some() {
            sql.push_str(
                " AND (string::contains(string::lowercase(name), $q) OR string::contains(string::lowercase(subject), $q)
                   OR string::contains(string::lowercase(description ?? ''), $q))",
            );
        }
        sql
    }

    /// One page of the project's templates and the total matching.
    pub async fn list_templates(
        &self,
        project: &str,
        q: &TemplateQuery,
    ) -> Result<(Vec<TemplateRow>, i64), StoreError> {
        let filter = Self::template_filter(q);
        let dir = if q.ascending { "ASC" } else { "DESC" };
        let sort = match q.sort {
            "name" => "name",
            "updated_at" => "updated_at",
            _ => "created_at",
        };
        let mut rows = self
            .query(
                &format!(
                    "SELECT {FIELDS} FROM template{filter} ORDER BY {sort} {dir}, id {dir} LIMIT $limit START $offset;
                     SELECT count() AS n FROM template{filter} GROUP ALL;"
                ),
                vars! { "p": project, "kind": q.kind, "q": q.search, "limit": q.limit, "offset": q.offset },
            )
            .await?;
        let list = rows.all(0)?;
        let total = rows.value(1)?.get(0).and_then(|r| r.get("n")).and_then(serde_json::Value::as_i64).unwrap_or(0);
        Ok((list, total))
    }

    pub async fn delete_template(&self, project: &str, id: &str) -> Result<bool, StoreError> {
        self.delete_scoped("template", project, id).await
    }
}
