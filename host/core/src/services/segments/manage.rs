//! Segments as the user manages them: create, change and delete (with the rules that keep references
//! whole), and the members of static segments (docs/behaviour.md#segments-and-conditions).
//!
//! Must not import: salvo, surrealdb.

use serde_json::{Value, json};

use crate::context::Context;
use crate::domain::conditions::Tree;
use crate::domain::contacts::DataPatch;
use crate::error::Error;
use crate::services::ingest::{Upsert, upsert};
use crate::store::segments::{Segment, SegmentWrite};

fn not_found(id: &str) -> Error {
    Error::not_found("SEGMENT_NOT_FOUND", format!("Segment {id} not found"))
}

/// One segment of the project (404 otherwise).
pub async fn get(st: &Context, project: &str, id: &str) -> Result<Segment, Error> {
    st.store.segment(project, id).await?.ok_or_else(|| not_found(id))
}

/// Every segment of the project, newest first.
pub async fn list(st: &Context, project: &str) -> Result<Vec<Segment>, Error> {
    Ok(st.store.list_segments(project).await?)
}

/// The references of a condition, stored with the segment for usage queries and cycle checks.
fn write_of(
    name: String,
    description: Option<String>,
    kind: &str,
    condition: Option<(Value, Tree)>,
    track: bool,
) -> SegmentWrite {
    let (condition, rf, re, rs) = match condition {
        Some((v, t)) => (Some(v), t.data_keys(), t.events(), t.segments()),
        None => (None, vec![], vec![], vec![]),
    };
    SegmentWrite {
        name,
        description,
        kind: kind.to_string(),
        condition,
        track,
        ref_fields: rf,
        ref_events: re,
        ref_segments: rs,
    }
}

/// A new segment, its body checked.
pub struct NewSegment {
    pub name: String,
    pub description: Option<String>,
    /// DYNAMIC or STATIC
    pub kind: String,
    /// the condition of a DYNAMIC segment (a STATIC segment's is ignored)
    pub condition: Option<Value>,
    pub track: bool,
}

/// Creates a segment and counts its members. A DYNAMIC segment's condition is checked first (400 naming
/// the filter).
pub async fn create(st: &Context, segments: &super::Engine, project: &str, new: NewSegment) -> Result<Segment, Error> {
    crate::services::quotas::room_for_segment(&st.store, &st.quotas, project).await?;
    let condition = match (new.kind.as_str(), new.condition) {
        ("DYNAMIC", Some(v)) => {
            let tree = segments.check(project, &v, None).await?;
            Some((v, tree))
        }
        _ => None,
    };
    let id = uuid::Uuid::now_v7().to_string();
    let now = st.clock.now_ms();
    let w = write_of(new.name, new.description, &new.kind, condition, new.track);
    st.store.create_segment(project, &id, &w, now).await?;
    let s = get(st, project, &id).await?;
    let n = segments.refresh(&s, now).await?;
    Ok(Segment { member_count: n, ..s })
}

/// What a PATCH changes; None leaves a field as it is.
#[derive(Default)]
pub struct SegmentPatch {
    pub name: Option<String>,
    /// Some(None) clears the description.
    pub description: Option<Option<String>>,
    pub track: Option<bool>,
    /// Some(Null) clears a static segment's (ignored) condition; an object replaces a dynamic one's.
    pub condition: Option<Value>,
}

/// Changes a segment (as read by [`get`]). A static segment takes no condition (400); a dynamic segment's new condition is
/// checked, must not reference the segment itself (directly or through others), and recounts it.
pub async fn update(
    st: &Context,
    segments: &super::Engine,
    project: &str,
    s: Segment,
    patch: SegmentPatch,
) -> Result<Segment, Error> {
    let id = s.id.as_str();
    let name = patch.name.unwrap_or_else(|| s.name.clone());
    let description = patch.description.unwrap_or_else(|| s.description.clone());
    let track = patch.track.unwrap_or(s.track);
    let changed_condition = patch.condition.is_some();
    let w = match patch.condition {
        None => SegmentWrite {
            name,
            description,
            kind: s.kind.clone(),
            condition: s.condition.clone(),
            track,
            ref_fields: s.ref_fields.clone(),
            ref_events: s.ref_events.clone(),
            ref_segments: s.ref_segments.clone(),
        },
        Some(Value::Null) if !s.is_dynamic() => write_of(name, description, &s.kind, None, track),
        Some(_) if !s.is_dynamic() => {
            return Err(Error::Invalid("A static segment has no condition; manage its members instead".into()));
        }
        Some(v @ Value::Object(_)) => {
            let tree = segments.check(project, &v, Some(id)).await?;
            write_of(name, description, &s.kind, Some((v, tree)), track)
        }
        Some(_) => return Err(Error::Invalid("condition must be a condition object".into())),
    };
    let now = st.clock.now_ms();
    if !st.store.update_segment(project, id, &w, now).await? {
        return Err(not_found(id));
    }
    let mut s = get(st, project, id).await?;
    if changed_condition {
        s.member_count = segments.refresh(&s, now).await?;
    }
    Ok(s)
}

/// Deletes a segment and its memberships; 409 while another segment's condition or the audience of a
/// campaign that may still send (DRAFT, SCHEDULED or SENDING) references it.
pub async fn delete(st: &Context, project: &str, id: &str) -> Result<(), Error> {
    get(st, project, id).await?;
    let users = st.store.segments_referencing_segment(project, id).await?;
    if !users.is_empty() {
        let names: Vec<String> = users.iter().map(|s| format!("{} ({})", s.name, s.id)).collect();
        return Err(Error::Conflict(format!("Segment {id} is referenced by segment {}", names.join(", "))));
    }
    let campaigns: Vec<String> = st
        .store
        .unsent_campaigns(project)
        .await?
        .iter()
        .filter(|c| c.uses_segment(id))
        .map(|c| format!("{} ({}, {})", c.name, c.id, c.status))
        .collect();
    if !campaigns.is_empty() {
        let n = campaigns.len();
        return Err(Error::Conflict(format!(
            "Segment {id} is the audience of {n} campaign{} not sent yet: {}",
            if n == 1 { "" } else { "s" },
            campaigns.join(", ")
        )));
    }
    let workflows = st.store.workflows_referencing(project, "ref_segments", id, true).await?;
    if !workflows.is_empty() {
        let names: Vec<String> = workflows.iter().map(|w| format!("{} ({})", w.name, w.id)).collect();
        return Err(Error::Conflict(format!(
            "Segment {id} is read by a CONDITION step of {} enabled workflow{}: {}",
            workflows.len(),
            if workflows.len() == 1 { "" } else { "s" },
            names.join(", ")
        )));
    }
    if !st.store.delete_segment(project, id).await? {
        return Err(not_found(id));
    }
    Ok(())
}

/// Members are managed on static segments only (400 for a dynamic one).
pub fn static_only(s: &Segment) -> Result<(), Error> {
    if s.is_dynamic() {
        return Err(Error::Invalid(
            "Members are managed on static segments only; a dynamic segment's members follow its condition".into(),
        ));
    }
    Ok(())
}

/// The entry or exit event of a tracked static segment.
fn member_event(s: &Segment, entry: bool) -> Option<(String, Value)> {
    s.track.then(|| {
        let (e, x) = super::event_names(&s.name, &s.id);
        (if entry { e } else { x }, json!({ "segmentId": s.id, "segmentName": s.name }))
    })
}

/// What a members call changed.
pub struct MembersChange {
    /// contacts that became members (add) or stopped being members (remove)
    pub changed: usize,
    /// emails (as given) that were already members (add) or were not members (remove)
    pub unchanged: Vec<String>,
    /// emails without a contact (and not created)
    pub not_found: Vec<String>,
    /// contacts created for unknown emails
    pub created: Vec<String>,
    pub member_count: i64,
}

/// Adds contacts to a static segment (as read by [`get`]) by email: `emails` are (as given, normalised) pairs. With
/// `create_missing`, unknown emails become contacts (subscribed per `subscribed`, default true).
pub async fn add_members(
    st: &Context,
    project: &str,
    s: &Segment,
    emails: &[(String, String)],
    create_missing: bool,
    subscribed: Option<bool>,
) -> Result<MembersChange, Error> {
    static_only(s)?;
    let normalized: Vec<String> = emails.iter().map(|(_, n)| n.clone()).collect();
    let found = st.store.contacts_by_emails(project, &normalized).await?;
    if create_missing {
        let missing: Vec<String> =
            normalized.iter().filter(|n| !found.iter().any(|c| &c.email == *n)).cloned().collect();
        crate::services::quotas::room_for_contacts(&st.store, &st.quotas, project, &missing, st.clock.now_ms()).await?;
    }
    let mut ids = Vec::new();
    let (mut not_found, mut created) = (Vec::new(), Vec::new());
    for (orig, norm) in emails {
        if let Some(c) = found.iter().find(|c| &c.email == norm) {
            ids.push((orig.clone(), c.id.clone()));
        } else if create_missing {
            let new = Upsert {
                email: norm.clone(),
                subscribed,
                default_subscribed: true,
                patch: DataPatch::default(),
                event: None,
            };
            let up = upsert(&st.store, &st.clock, project, &new).await?;
            created.push(orig.clone());
            ids.push((orig.clone(), up.contact.id));
        } else {
            not_found.push(orig.clone());
        }
    }
    let contact_ids: Vec<String> = ids.iter().map(|(_, c)| c.clone()).collect();
    let ev = member_event(s, true);
    let now = st.clock.now_ms();
    let added =
        st.store.add_members(project, &s.id, &contact_ids, ev.as_ref().map(|(n, d)| (n.as_str(), d)), now).await?;
    let unchanged = ids.iter().filter(|(_, c)| !added.contains(c)).map(|(o, _)| o.clone()).collect();
    let member_count = st.store.count_members(project, &s.id).await?;
    Ok(MembersChange { changed: added.len(), unchanged, not_found, created, member_count })
}

/// Removes contacts from a static segment by email.
pub async fn remove_members(
    st: &Context,
    project: &str,
    s: &Segment,
    emails: &[(String, String)],
) -> Result<MembersChange, Error> {
    static_only(s)?;
    let normalized: Vec<String> = emails.iter().map(|(_, n)| n.clone()).collect();
    let found = st.store.contacts_by_emails(project, &normalized).await?;
    let mut ids = Vec::new();
    let mut not_found = Vec::new();
    for (orig, norm) in emails {
        match found.iter().find(|c| &c.email == norm) {
            Some(c) => ids.push((orig.clone(), c.id.clone())),
            None => not_found.push(orig.clone()),
        }
    }
    let contact_ids: Vec<String> = ids.iter().map(|(_, c)| c.clone()).collect();
    let ev = member_event(s, false);
    let now = st.clock.now_ms();
    let removed =
        st.store.remove_members(project, &s.id, &contact_ids, ev.as_ref().map(|(n, d)| (n.as_str(), d)), now).await?;
    let unchanged = ids.iter().filter(|(_, c)| !removed.contains(c)).map(|(o, _)| o.clone()).collect();
    let member_count = st.store.count_members(project, &s.id).await?;
    Ok(MembersChange { changed: removed.len(), unchanged, not_found, created: vec![], member_count })
}
