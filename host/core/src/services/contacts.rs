//! Contacts as the API manages them one by one: read, change (the email stays unique, a subscription
//! flip records its event), delete, and the custom fields of a project's contacts
//! (docs/behaviour.md#contacts-and-data). Upserts by email are `services::ingest`.
//!
//! Must not import: salvo, surrealdb.

use std::collections::{BTreeMap, HashSet};

use serde_json::{Map, Value};

use crate::context::Context;
use crate::domain::contacts::{DataPatch, subscription};
use crate::error::Error;
use crate::infra::clock::{is_date_only, parse_rfc3339};
use crate::services::tallies;
use crate::store::StoreError;
use crate::store::contacts::{Contact, ContactQuery, ContactWrite, WriteResult};
use crate::store::events::Event;
use crate::store::tallies::Scope;

fn not_found(id: &str) -> Error {
    Error::not_found("CONTACT_NOT_FOUND", format!("Contact {id} not found"))
}

fn email_taken(email: &str) -> Error {
    Error::Conflict(format!("Another contact in this project already has the email {email}"))
}

/// A page of contacts (the query's limit), and the number that match (only when `count`).
pub async fn list(st: &Context, project: &str, q: &ContactQuery, count: bool) -> Result<(Vec<Contact>, i64), Error> {
    let rows = st.store.list_contacts(project, q).await?;
    let total = match (count, &q.search, q.subscribed) {
        (false, _, _) => 0,
        (true, None, None) => tallies::count(st, project, Scope::Contacts).await?,
        (true, search, subscribed) => st.store.count_contacts(project, search.as_deref(), subscribed).await?,
    };
    Ok((rows, total))
}

/// One contact of the project (404 otherwise).
pub async fn get(st: &Context, project: &str, id: &str) -> Result<Contact, Error> {
    st.store.contact(project, id).await?.ok_or_else(|| not_found(id))
}

/// What a PATCH of a contact asks for.
pub struct ContactChange {
    pub email: Option<String>,
    pub subscribed: Option<bool>,
    pub patch: DataPatch,
}

/// Changes a contact: its email (409 when another contact has it), its subscription (a flip records
/// `contact.subscribed` / `contact.unsubscribed`) and its data; again on a fresh read when it changed
/// meanwhile. Answers the contact as it now is.
pub async fn update(st: &Context, project: &str, id: &str, change: &ContactChange) -> Result<Contact, Error> {
    for _ in 0..16 {
        let now = st.clock.now_ms();
        let c = get(st, project, id).await?;
        let (subscribed, flip) = subscription(Some(c.subscribed), change.subscribed, true);
        let data = change.patch.apply(&c.data);
        let new_email = change.email.clone().unwrap_or_else(|| c.email.clone());
        if new_email != c.email && st.store.contact_by_email(project, &new_email).await?.is_some() {
            return Err(email_taken(&new_email));
        }
        let updated = Contact {
            email: new_email.clone(),
            subscribed,
            data: data.clone(),
            updated_at: now,
            version: c.version + 1,
            ..c.clone()
        };
        if updated.email == c.email && updated.subscribed == c.subscribed && updated.data == c.data {
            return Ok(c);
        }
        let events: Vec<Event> =
            flip.iter().map(|name| Event::new(project, &c.id, name, Map::new(), "system", now)).collect();
        let write = ContactWrite::Update {
            id: c.id.clone(),
            version: c.version,
            email: new_email.clone(),
            subscribed,
            data,
            now,
        };
        match st.store.write_contact(project, &write, &events).await {
            Ok(WriteResult::Done) => return Ok(updated),
            Ok(WriteResult::Stale) => continue,
            Err(StoreError::Conflict(_)) => return Err(email_taken(&new_email)),
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Internal("the contact kept changing; giving up after 16 attempts".into()))
}

/// Deletes a contact and its events (404 when it is not the project's).
pub async fn delete(st: &Context, project: &str, id: &str) -> Result<(), Error> {
    if !st.store.delete_contact(project, id).await? {
        return Err(not_found(id));
    }
    Ok(())
}

/// Which of these (normalised) emails have a contact in the project.
pub async fn existing_emails(st: &Context, project: &str, emails: &[String]) -> Result<HashSet<String>, Error> {
    Ok(st.store.existing_emails(project, emails).await?.into_iter().collect())
}

/// The type a custom value counts as (`/contacts/fields`, `/workflows/fields`): a date-time or a
/// date-only string is a `date`.
pub fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(s) if parse_rfc3339(s).is_some() || is_date_only(s) => "date",
        Value::String(_) => "string",
        Value::Object(_) | Value::Array(_) => "object",
        Value::Null => "string",
    }
}

/// One field of the project's contacts.
pub struct FieldInfo {
    /// `email`, …, or `data.<key>`
    pub field: String,
    /// string, number, boolean, date or object (a custom field's most frequent type)
    pub kind: &'static str,
    /// percentage of contacts that have the field, two decimals
    pub coverage: f64,
}

/// Contacts whose data the field list and a field's values are read from: a project's most recently
/// updated ones (all of a smaller project's), so that neither walks a large project's every contact.
pub const FIELD_SAMPLE: usize = 5_000;

/// The standard fields, then every custom field with its type and coverage, from the [`FIELD_SAMPLE`]
/// most recently updated contacts (docs/behaviour.md#contacts-and-data).
pub async fn fields(st: &Context, project: &str) -> Result<Vec<FieldInfo>, Error> {
    let all = st.store.recent_contact_data(project, FIELD_SAMPLE).await?;
    let total = all.len();
    // key -> (contacts having it, counts per type)
    let mut seen: BTreeMap<String, (usize, BTreeMap<&'static str, usize>)> = BTreeMap::new();
    for data in &all {
        for (k, v) in data {
            let e = seen.entry(k.clone()).or_default();
            e.0 += 1;
            *e.1.entry(type_of(v)).or_default() += 1;
        }
    }
    let pct = |n: usize| if total == 0 { 0.0 } else { ((n as f64) * 10_000.0 / total as f64).round() / 100.0 };
    let mut fields: Vec<FieldInfo> =
        [("email", "string"), ("subscribed", "boolean"), ("createdAt", "date"), ("updatedAt", "date")]
            .into_iter()
            .map(|(f, t)| FieldInfo { field: f.into(), kind: t, coverage: if total == 0 { 0.0 } else { 100.0 } })
            .collect();
    for (k, (n, types)) in seen {
        let kind = types.iter().max_by_key(|(_, c)| **c).map(|(t, _)| *t).unwrap_or("string");
        fields.push(FieldInfo { field: format!("data.{k}"), kind, coverage: pct(n) });
    }
    Ok(fields)
}

/// Distinct values of a custom field among the [`FIELD_SAMPLE`] most recently updated contacts, at most
/// `limit`.
pub async fn field_values(st: &Context, project: &str, name: &str, limit: usize) -> Result<Vec<Value>, Error> {
    let mut values: Vec<Value> = Vec::new();
    let mut seen = HashSet::new();
    for data in st.store.recent_contact_data(project, FIELD_SAMPLE).await? {
        if let Some(v) = data.get(name)
            && seen.insert(v.to_string())
        {
            values.push(v.clone());
            if values.len() >= limit {
                break;
            }
        }
    }
    Ok(values)
}

/// Where a custom field is used.
pub struct FieldUsage {
    /// (id, name) of the segments whose condition names it
    pub segments: Vec<(String, String)>,
    /// (id, name) of the workflows whose CONDITION steps read it
    pub workflows: Vec<(String, String)>,
    /// contacts that have it
    pub contact_count: usize,
}

impl FieldUsage {
    /// Nothing uses it (campaigns do not name custom fields).
    pub fn can_delete(&self) -> bool {
        self.segments.is_empty() && self.workflows.is_empty()
    }
}

/// Where a custom field is used and how many contacts have it.
pub async fn field_usage(st: &Context, project: &str, name: &str) -> Result<FieldUsage, Error> {
    let contact_count = st.store.all_contact_data(project).await?.iter().filter(|d| d.contains_key(name)).count();
    let segments = st.store.segments_using_field(project, name).await?;
    let workflows = st
        .store
        .workflows_referencing(project, "ref_fields", name, false)
        .await?
        .into_iter()
        .map(|w| (w.id, w.name))
        .collect();
    Ok(FieldUsage { segments, workflows, contact_count })
}

/// Deletes a custom field on every contact of the project; 409 while something uses it. Returns the
/// number of contacts changed.
pub async fn delete_field(st: &Context, project: &str, name: &str) -> Result<i64, Error> {
    if !field_usage(st, project, name).await?.can_delete() {
        return Err(Error::Conflict(format!("data.{name} is used by segments, campaigns or workflows")));
    }
    Ok(st.store.remove_data_field(project, name, st.clock.now_ms()).await?)
}
