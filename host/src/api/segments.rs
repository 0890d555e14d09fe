//! Segments (docs/behaviour.md#segments-and-conditions): list, create, get, patch, delete, the live
//! contacts of a segment, static members, compute (tracked memberships with entry and exit events) and
//! refresh (count only).

use salvo::http::StatusCode;
use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::auth::{ApiKeyAuth, KeyRule, project};
use super::body::{Fields, Reply, is_email, json_object};
use super::contacts::ContactOut;
use super::state;
use crate::api::errors::ApiError;
use crate::domain::contacts::normalize_email;
use crate::error::Error;
use crate::infra::clock::rfc3339;
use crate::services::segments::manage;
use crate::store::segments::Segment;

/// Most emails one members call takes.
pub const MAX_MEMBER_EMAILS: usize = 1000;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct SegmentOut {
    id: String,
    name: String,
    description: Option<String>,
    /// DYNAMIC or STATIC
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    kind: String,
    /// the condition tree (null for static segments)
    #[salvo(schema(value_type = Option<Object>))]
    condition: Value,
    track_membership: bool,
    /// cached count (see refresh)
    member_count: i64,
    project_id: String,
    created_at: String,
    updated_at: String,
}

impl From<&Segment> for SegmentOut {
    fn from(s: &Segment) -> Self {
        SegmentOut {
            id: s.id.clone(),
            name: s.name.clone(),
            description: s.description.clone(),
            kind: s.kind.clone(),
            condition: s.condition.clone().unwrap_or(Value::Null),
            track_membership: s.track,
            member_count: s.member_count,
            project_id: s.project.clone(),
            created_at: rfc3339(s.created_at),
            updated_at: rfc3339(s.updated_at),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct SegmentBody {
    #[salvo(schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    name: String,
    #[salvo(schema(max_length = 500))]
    description: Option<String>,
    /// DYNAMIC (default) or STATIC
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    #[salvo(schema(pattern = "^(DYNAMIC|STATIC)$"))]
    kind: Option<String>,
    /// `{logic, groups: [{filters, conditions?}]}`; required for DYNAMIC, ignored for STATIC
    #[salvo(schema(value_type = Object))]
    condition: Option<Value>,
    track_membership: Option<bool>,
}

/// The body of a segment update: any of these, each checked as on create; the type cannot change.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct SegmentPatchBody {
    #[salvo(schema(
        nullable = false,
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    name: Option<String>,
    #[salvo(schema(max_length = 500))]
    description: Option<String>,
    /// `{logic, groups: [{filters, conditions?}]}`, for a DYNAMIC segment
    #[serde(default)]
    #[salvo(schema(value_type = Object))]
    condition: Option<Value>,
    track_membership: Option<bool>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct SegmentContactsOut {
    data: Vec<ContactOut>,
    total: i64,
    page: usize,
    page_size: usize,
    total_pages: i64,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct MembersBody {
    /// at most 1000
    #[salvo(schema(max_items = 1000))]
    emails: Vec<String>,
    /// create contacts for unknown emails (default false)
    create_missing: Option<bool>,
    /// subscription state of created contacts (default true)
    subscribed: Option<bool>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct MembersOut {
    /// contacts that became members (add) or stopped being members (remove)
    changed: usize,
    /// emails that were already members (add) or were not members (remove)
    unchanged: Vec<String>,
    /// emails without a contact (and not created)
    not_found: Vec<String>,
    /// contacts created for unknown emails (createMissing)
    created: Vec<String>,
    member_count: i64,
}

impl From<manage::MembersChange> for MembersOut {
    fn from(c: manage::MembersChange) -> Self {
        MembersOut {
            changed: c.changed,
            unchanged: c.unchanged,
            not_found: c.not_found,
            created: c.created,
            member_count: c.member_count,
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ComputeOut {
    id: String,
    member_count: i64,
    /// contacts that joined (an entry event each)
    entered: i64,
    /// contacts that left (an exit event each)
    exited: i64,
    computed_at: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct RefreshOut {
    id: String,
    member_count: i64,
    refreshed_at: String,
}

pub fn router() -> Router {
    Router::with_path("segments")
        .hoop(ApiKeyAuth(KeyRule::SecretOnly))
        .get(list_segments)
        .post(create_segment)
        .push(Router::with_path("count").post(count_condition))
        .push(Router::with_path("{id}/contacts").get(segment_contacts))
        .push(Router::with_path("{id}/members").post(add_members).delete(remove_members))
        .push(Router::with_path("{id}/compute").post(compute))
        .push(Router::with_path("{id}/refresh").post(refresh))
        .push(Router::with_path("{id}").get(get_segment).patch(patch_segment).delete(delete_segment))
}

#[derive(Serialize, ToSchema)]
pub struct CountOut {
    count: i64,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct CountBody {
    /// a condition tree, as a dynamic segment's
    condition: Value,
}

/// How many contacts a condition matches now, without saving it (the live count of a condition being
/// built). 400 for a condition a segment could not have.
#[endpoint(tags("segments"), security(("bearer" = [])), request_body = CountBody, responses((status_code = 200, body = CountOut)))]
pub async fn count_condition(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        let condition = match body.get("condition") {
            Some(v @ Value::Object(_)) => v.clone(),
            None | Some(Value::Null) => {
                return Err(Error::field("condition", "required", "condition is required", Value::Null).into());
            }
            Some(other) => {
                return Err(Error::field(
                    "condition",
                    "invalid_type",
                    "condition must be a condition tree",
                    other.clone(),
                )
                .into());
            }
        };
        let count = st.segments.count_condition(&ctx.project_id, &condition, st.clock.now_ms()).await?;
        Reply::ok(&CountOut { count })
    })
}

async fn load(st: &crate::state::AppState, project_id: &str, id: &str) -> Result<Segment, ApiError> {
    Ok(manage::get(st, project_id, id).await?)
}

/// Every segment of the project, newest first (a bare array).
#[endpoint(tags("segments"), security(("bearer" = [])), responses((status_code = 200, body = Vec<SegmentOut>)))]
pub async fn list_segments(depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let list = manage::list(&st, &ctx.project_id).await?;
        Reply::ok(&list.iter().map(SegmentOut::from).collect::<Vec<_>>())
    })
}

/// Creates a segment (201). A DYNAMIC segment needs an object condition (else a bare 400); a STATIC
/// segment's condition is ignored (stored as null). An invalid condition is a 400 naming the filter.
#[endpoint(
    tags("segments"),
    security(("bearer" = [])),
    request_body = SegmentBody,
    responses((status_code = 201, body = SegmentOut), (status_code = 400, description = "a missing condition object of a DYNAMIC segment: the bare `{\"error\": \"...\"}` (docs/behaviour.md#errors); other refusals: the envelope", body = crate::api::errors::BareErrorOrEnvelope))
)]
pub async fn create_segment(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let name = f.text("name", true, 100);
        let description = f.string("description", false, 0, 500);
        let kind = f.one_of("type", false, &["DYNAMIC", "STATIC"]).unwrap_or_else(|| "DYNAMIC".into());
        let track = f.boolean("trackMembership").unwrap_or(false);
        let dynamic = kind == "DYNAMIC";
        if dynamic && !matches!(body.get("condition"), Some(Value::Object(_))) && f.errors.is_empty() {
            return Err(Error::Plain("A dynamic segment needs a condition object".into()).into());
        }
        f.finish()?;
        let name = name.ok_or_else(|| Error::Internal("validated name missing".into()))?;
        let condition = if dynamic { body.get("condition").cloned() } else { None };
        let new = manage::NewSegment { name, description, kind, condition, track };
        let s = manage::create(&st, &st.segments, &ctx.project_id, new).await?;
        Reply::created(&SegmentOut::from(&s))
    })
}

/// One segment with its cached `memberCount`.
#[endpoint(tags("segments"), security(("bearer" = [])), responses((status_code = 200, body = SegmentOut)))]
pub async fn get_segment(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let s = load(&st, &ctx.project_id, &id.into_inner()).await?;
        Reply::ok(&SegmentOut::from(&s))
    })
}

/// Updates name, description, condition (dynamic segments only) and trackMembership. A condition that
/// references this segment, directly or through others, is refused.
#[endpoint(tags("segments"), security(("bearer" = [])), request_body = SegmentPatchBody, responses((status_code = 200, body = SegmentOut)))]
pub async fn patch_segment(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let s = load(&st, &ctx.project_id, &id).await?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let name = f.text("name", false, 100);
        let description = f.string("description", false, 0, 500);
        let track = f.boolean("trackMembership");
        if body.contains_key("type") && body.get("type") != Some(&Value::String(s.kind.clone())) {
            f.error("type", "invalid_enum_value", "the type of a segment cannot change");
        }
        f.finish()?;
        let patch = manage::SegmentPatch {
            name,
            description: body.contains_key("description").then_some(description),
            track,
            condition: body.get("condition").cloned(),
        };
        let s = manage::update(&st, &st.segments, &ctx.project_id, s, patch).await?;
        Reply::ok(&SegmentOut::from(&s))
    })
}

/// Deletes a segment and its memberships (204); 409 while another segment's condition or the audience
/// of a campaign that may still send (DRAFT, SCHEDULED or SENDING) references it.
#[endpoint(tags("segments"), security(("bearer" = [])), responses((status_code = 204, description = "deleted")))]
pub async fn delete_segment(id: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        manage::delete(&st, &ctx.project_id, &id).await?;
        res.status_code(StatusCode::NO_CONTENT);
        Ok(())
    })
}

fn page_param(req: &Request, name: &str, default: i64) -> Result<i64, ApiError> {
    match super::pagination::typed_query(req, name)? {
        None => Ok(default),
        Some(s) => {
            s.trim().parse::<i64>().map_err(|_| Error::Invalid(format!("{name} must be an integer, got {s:?}")).into())
        }
    }
}

/// The contacts of a segment, page style (`page` from 1, `pageSize` 1 to 100, default 20); live for
/// dynamic segments, the stored members for static ones.
#[endpoint(
    tags("segments"),
    security(("bearer" = [])),
    parameters(
        ("page" = Option<i64>, Query, description = "1-based, default 1"),
        ("pageSize" = Option<i64>, Query, description = "1 to 100, default 20"),
    ),
    responses((status_code = 200, body = SegmentContactsOut))
)]
pub async fn segment_contacts(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let s = load(&st, &ctx.project_id, &id.into_inner()).await?;
        let page = page_param(req, "page", 1)?.max(1) as usize;
        let page_size = page_param(req, "pageSize", 20)?.clamp(1, 100) as usize;
        let (rows, total) =
            st.segments.contacts(&s, (page - 1).saturating_mul(page_size), page_size, st.clock.now_ms()).await?;
        let total_pages = (total + page_size as i64 - 1) / page_size as i64;
        Reply::ok(&SegmentContactsOut {
            data: rows.iter().map(ContactOut::from).collect(),
            total,
            page,
            page_size,
            total_pages,
        })
    })
}

/// The `emails` of a members body, checked and normalised (in order, without repeats).
fn emails_of(body: &Map<String, Value>) -> Result<Vec<(String, String)>, ApiError> {
    let list = match body.get("emails") {
        Some(Value::Array(a)) => a,
        None | Some(Value::Null) => {
            return Err(Error::field("emails", "required", "emails is required", Value::Null).into());
        }
        Some(v) => {
            return Err(Error::field("emails", "invalid_type", "emails must be an array of strings", v.clone()).into());
        }
    };
    if list.len() > MAX_MEMBER_EMAILS {
        return Err(Error::field(
            "emails",
            "too_big",
            &format!("at most {MAX_MEMBER_EMAILS} emails per call"),
            json!(list.len()),
        )
        .into());
    }
    let mut errors = Vec::new();
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, e) in list.iter().enumerate() {
        match e.as_str().map(normalize_email) {
            Some(n) if is_email(&n) => {
                if !out.iter().any(|(_, x)| *x == n) {
                    out.push((e.as_str().unwrap_or_default().to_string(), n));
                }
            }
            _ => errors.push(crate::error::FieldError::new(
                format!("emails.{i}"),
                "invalid_string",
                "must be a valid email address",
                e.clone(),
            )),
        }
    }
    if !errors.is_empty() {
        return Err(Error::Validation(errors).into());
    }
    Ok(out)
}

/// Adds contacts to a static segment by email; `createMissing` creates unknown contacts (with
/// `subscribed`, default true), otherwise they are reported in `notFound`.
#[endpoint(tags("segments"), security(("bearer" = [])), request_body = MembersBody, responses((status_code = 200, body = MembersOut)))]
pub async fn add_members(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let s = load(&st, &ctx.project_id, &id.into_inner()).await?;
        manage::static_only(&s)?;
        let body = json_object(req).await?;
        let emails = emails_of(&body)?;
        let mut f = Fields::new(&body);
        let create_missing = f.boolean("createMissing").unwrap_or(false);
        let subscribed = f.boolean("subscribed");
        f.finish()?;
        let c = manage::add_members(&st, &ctx.project_id, &s, &emails, create_missing, subscribed).await?;
        Reply::ok(&MembersOut::from(c))
    })
}

/// Removes contacts from a static segment by email.
#[endpoint(tags("segments"), security(("bearer" = [])), request_body = MembersBody, responses((status_code = 200, body = MembersOut)))]
pub async fn remove_members(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let s = load(&st, &ctx.project_id, &id.into_inner()).await?;
        manage::static_only(&s)?;
        let body = json_object(req).await?;
        let emails = emails_of(&body)?;
        let c = manage::remove_members(&st, &ctx.project_id, &s, &emails).await?;
        Reply::ok(&MembersOut::from(c))
    })
}

/// Recomputes a tracked dynamic segment's membership and emits `segment.<slug>.entry` / `.exit` for each
/// change (exactly once); other segments are only recounted.
#[endpoint(tags("segments"), security(("bearer" = [])), responses((status_code = 200, body = ComputeOut)))]
pub async fn compute(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let s = load(&st, &ctx.project_id, &id.into_inner()).await?;
        let now = st.clock.now_ms();
        let d = st.segments.compute(&s, now).await?;
        Reply::ok(&ComputeOut {
            id: s.id,
            member_count: d.count,
            entered: d.entered,
            exited: d.exited,
            computed_at: rfc3339(now),
        })
    })
}

/// Recounts `memberCount` only: no events, no membership writes.
#[endpoint(tags("segments"), security(("bearer" = [])), responses((status_code = 200, body = RefreshOut)))]
pub async fn refresh(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let s = load(&st, &ctx.project_id, &id.into_inner()).await?;
        let now = st.clock.now_ms();
        let n = st.segments.refresh(&s, now).await?;
        Reply::ok(&RefreshOut { id: s.id, member_count: n, refreshed_at: rfc3339(now) })
    })
}
