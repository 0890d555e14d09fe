//! `GET /workflows/fields` (docs/behaviour.md#workflows): what a CONDITION step can ask about. Contact
//! fields come from the same source as `/contacts/fields`; event fields are the data keys of the
//! project's most recent events, each with the event names it was seen in.
//!
//! Must not import: salvo, surrealdb.

use std::collections::{BTreeMap, BTreeSet};

use crate::context::Context;
use crate::error::Error;
use crate::services::contacts::{fields as contact_fields, type_of};
use crate::store::events::EventQuery;

/// How many recent events the event fields are sampled from.
pub const SAMPLE: usize = 1000;

/// One field a CONDITION can read.
pub struct WorkflowField {
    /// `contact.email`, `data.plan`, `event.total`, ...
    pub field: String,
    /// string, number, boolean, date or object (the most frequent type seen)
    pub kind: &'static str,
    /// Contact Fields, Custom Data or Event Data
    pub category: &'static str,
    /// for event fields: the event names the key was seen in
    pub events: Vec<String>,
}

/// The contact fields, then the event fields (of events named `event` only, when given), sorted.
pub async fn fields(st: &Context, project: &str, event: Option<&str>) -> Result<Vec<WorkflowField>, Error> {
    let mut out: Vec<WorkflowField> = contact_fields(st, project)
        .await?
        .into_iter()
        .map(|f| {
            let custom = f.field.starts_with("data.");
            WorkflowField {
                field: if custom { f.field } else { format!("contact.{}", f.field) },
                kind: f.kind,
                category: if custom { "Custom Data" } else { "Contact Fields" },
                events: vec![],
            }
        })
        .collect();
    let q = EventQuery { name: event.map(str::to_string), limit: SAMPLE, ..Default::default() };
    // key -> (types seen with counts, event names)
    let mut seen: BTreeMap<String, (BTreeMap<&'static str, usize>, BTreeSet<String>)> = BTreeMap::new();
    for e in st.store.list_events(project, &q).await? {
        for (k, v) in &e.data {
            let entry = seen.entry(k.clone()).or_default();
            *entry.0.entry(type_of(v)).or_default() += 1;
            entry.1.insert(e.name.clone());
        }
    }
    for (k, (types, names)) in seen {
        let kind = types.iter().max_by_key(|(_, c)| **c).map(|(t, _)| *t).unwrap_or("string");
        out.push(WorkflowField {
            field: format!("event.{k}"),
            kind,
            category: "Event Data",
            events: names.into_iter().collect(),
        });
    }
    out.sort_by(|a, b| a.field.cmp(&b.field));
    Ok(out)
}
