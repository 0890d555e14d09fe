//! Campaigns as the user edits them: create, replace, copy and delete, with the checks that keep a
//! campaign sendable (its segment exists, its condition is valid, its sender passes the sender check)
//! and the state rules of docs/behaviour.md#campaigns.
//!
//! Must not import: salvo, surrealdb.

use serde_json::Value;

use crate::context::Context;
use crate::domain::campaigns::{Action, allowed};
use crate::error::Error;
use crate::services::campaigns::CampaignError;
use crate::services::segments::SegmentError;
use crate::services::sending_domains::require_sender;
use crate::store::campaigns::{CampaignQuery, CampaignRow};

/// Longest campaign name, in characters.
const MAX_NAME_CHARS: usize = 200;

fn not_found(id: &str) -> Error {
    Error::not_found("CAMPAIGN_NOT_FOUND", format!("Campaign {id} not found"))
}

impl From<CampaignError> for Error {
    fn from(e: CampaignError) -> Self {
        match e {
            CampaignError::State(m) => Error::Conflict(m),
            CampaignError::NotFound(id) => not_found(&id),
            CampaignError::Field(field, m) => Error::field(field, "invalid", &m, Value::Null),
            CampaignError::Billing(refusal) => refusal,
            CampaignError::Store(s) => s.into(),
            CampaignError::Segment(s) => s.into(),
            CampaignError::Job(e) => Error::Internal(e.to_string()),
        }
    }
}

/// Sends a DRAFT campaign now (`at` none) or schedules it: the state rule, the project's suspension and
/// the sender check first (docs/behaviour.md#campaigns).
pub async fn send(
    st: &Context,
    campaigns: &super::Campaigns,
    project: &str,
    id: &str,
    at: Option<i64>,
) -> Result<CampaignRow, Error> {
    let c = get(st, project, id).await?;
    allowed(Action::Send, c.status).map_err(Error::Conflict)?;
    crate::services::suspension::ensure_active(&st.store, project).await?;
    require_sender(&st.store, project, &c.from).await?;
    Ok(match at {
        None => campaigns.send_now(project, id).await?,
        Some(at) => campaigns.schedule(project, id, at).await?,
    })
}

/// Sends the campaign once to `to` (a member of the project who verified their address): the
/// project's suspension and the sender check first. Returns the email's id.
pub async fn test_send(
    st: &Context,
    campaigns: &super::Campaigns,
    project: &str,
    id: &str,
    to: &str,
) -> Result<String, Error> {
    let c = get(st, project, id).await?;
    crate::services::suspension::ensure_active(&st.store, project).await?;
    require_sender(&st.store, project, &c.from).await?;
    Ok(campaigns.test_send(project, id, to).await?)
}

/// One campaign of the project (404 otherwise).
pub async fn get(st: &Context, project: &str, id: &str) -> Result<CampaignRow, Error> {
    st.store.campaign(project, id).await?.ok_or_else(|| not_found(id))
}

/// A page of the project's campaigns and the total that match.
pub async fn list(st: &Context, project: &str, q: &CampaignQuery) -> Result<(Vec<CampaignRow>, i64), Error> {
    Ok(st.store.list_campaigns(project, q).await?)
}

/// The checks a campaign's fields pass before it is saved: the audience's segment exists in the project,
/// its condition is valid, and the sender passes the sender check (403).
pub async fn check(st: &Context, campaigns: &super::Campaigns, project: &str, c: &CampaignRow) -> Result<(), Error> {
    if let Some(seg) = &c.segment
        && st.store.segment(project, seg).await?.is_none()
    {
        return Err(Error::field(
            "segmentId",
            "not_found",
            &format!("segment {seg} does not exist in this project"),
            Value::String(seg.clone()),
        ));
    }
    if let Some(cond) = &c.audience_condition
        && let Err(e) = campaigns.segments.check(project, cond, None).await
    {
        return Err(match e {
            SegmentError::Invalid(m) => Error::field("audienceCondition", "invalid_condition", &m, cond.clone()),
            SegmentError::TooLarge(m) => Error::field("audienceCondition", "too_big", &m, Value::Null),
            other => other.into(),
        });
    }
    require_sender(&st.store, project, &c.from).await?;
    Ok(())
}

/// Saves a new DRAFT campaign (its fields read into `c` by the caller) after [`check`].
pub async fn create(st: &Context, campaigns: &super::Campaigns, project: &str, c: &CampaignRow) -> Result<(), Error> {
    check(st, campaigns, project, c).await?;
    Ok(st.store.create_campaign(c).await?)
}

/// Replaces a campaign's fields (`c` as read by [`get`], found [`replaceable`], then changed): 409 when
/// its state moved meanwhile.
pub async fn replace(
    st: &Context,
    campaigns: &super::Campaigns,
    project: &str,
    c: &mut CampaignRow,
) -> Result<(), Error> {
    check(st, campaigns, project, c).await?;
    c.updated_at = st.clock.now_ms();
    if !st.store.replace_campaign(c).await? {
        let now = get(st, project, &c.id).await?;
        allowed(Action::Replace, now.status).map_err(Error::Conflict)?;
        return Err(Error::Conflict("the campaign changed meanwhile; read it again".into()));
    }
    Ok(())
}

/// Whether a campaign may be replaced in its current state (checked before its new fields are read).
pub fn replaceable(c: &CampaignRow) -> Result<(), Error> {
    allowed(Action::Replace, c.status).map_err(Error::Conflict)
}

/// Deletes a campaign; 409 while it is SCHEDULED or SENDING.
pub async fn delete(st: &Context, project: &str, id: &str) -> Result<(), Error> {
    match st.store.delete_campaign(project, id).await? {
        None => Err(not_found(id)),
        Some(false) => {
            let c = get(st, project, id).await?;
            Err(Error::Conflict(
                allowed(Action::Delete, c.status)
                    .err()
                    .unwrap_or_else(|| "the campaign has active executions; cancel it before deleting it".into()),
            ))
        }
        Some(true) => Ok(()),
    }
}

/// Copies a campaign as a DRAFT named `<name> (Copy)`: content and audience carry over; status, schedule,
/// run and counters start afresh.
pub async fn duplicate(st: &Context, project: &str, id: &str) -> Result<CampaignRow, Error> {
    let c = get(st, project, id).await?;
    let now = st.clock.now_ms();
    let name = crate::domain::text::copy_name(&c.name, MAX_NAME_CHARS);
    let copy = CampaignRow {
        name,
        subject: c.subject,
        body: c.body,
        description: c.description,
        from: c.from,
        from_name: c.from_name,
        reply_to: c.reply_to,
        kind: c.kind,
        audience_type: c.audience_type,
        segment: c.segment,
        audience_condition: c.audience_condition,
        ..CampaignRow::draft(uuid::Uuid::now_v7().to_string(), project, now)
    };
    st.store.create_campaign(&copy).await?;
    Ok(copy)
}
