//! Sender domains (docs/behaviour.md#domains) and address verification (`POST /v1/verify`,
//! docs/behaviour.md#address-verification).
//!
//! Domain endpoints take a secret key (the project comes from the key) or a dashboard session; with a
//! session the project comes from `X-Project-Id`, the body's `projectId` (create) or the path (listing),
//! and membership is checked.

use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::Value;

use super::auth::{ApiKeyAuth, COOKIE, KeyRule, apply_rate_limit, authenticate, project, session_user};
use super::body::{Fields, Reply, json_object, json_object_max};
use super::state;
use crate::api::errors::ApiError;
use crate::domain::domains::DnsRecord;
use crate::error::Error;
use crate::infra::clock::rfc3339;
use crate::services::sending_domains::{self, DomainError, Removal, parse_records};
use crate::state::AppState;
use crate::store::domains::DomainRow;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct DomainOut {
    pub id: String,
    pub domain: String,
    pub project_id: String,
    /// PENDING or VERIFIED
    pub status: String,
    pub selector: String,
    /// true when an operator marked it verified without DNS
    pub trusted: bool,
    /// DNS records to publish, each with its status from the last check
    #[salvo(schema(value_type = Vec<Object>))]
    pub records: Vec<DnsRecord>,
    pub verified_at: Option<String>,
    pub last_checked_at: Option<String>,
    pub created_at: String,
    /// whether the domain takes mail on Herald's SMTP listener (its replies); off until turned on with
    /// PATCH /domains/:id
    pub inbound: bool,
    /// the MX record that brings the domain's mail to Herald, when the server receives mail
    #[salvo(schema(value_type = Option<Object>))]
    pub inbound_record: Option<Value>,
}

impl DomainOut {
    /// The domain as answered by `st`'s server (the MX record names its SMTP host name).
    fn of(st: &AppState, d: &DomainRow) -> Self {
        let mut out = DomainOut::from(d);
        if st.config.smtp.listen.is_some() {
            out.inbound_record = Some(serde_json::json!({
                "type": "MX",
                "name": format!("inbound.{}", d.name),
                "value": st.config.smtp.hostname,
                "priority": 10,
                "purpose": "inbound",
            }));
        }
        out
    }
}

impl From<&DomainRow> for DomainOut {
    fn from(d: &DomainRow) -> Self {
        DomainOut {
            id: d.id.clone(),
            domain: d.name.clone(),
            project_id: d.project.clone(),
            status: d.status.to_string(),
            selector: d.selector.clone(),
            trusted: d.trusted,
            records: parse_records(d),
            verified_at: d.verified_at.map(rfc3339),
            last_checked_at: d.last_checked_at.map(rfc3339),
            created_at: rfc3339(d.created_at),
            inbound: d.inbound,
            inbound_record: None,
        }
    }
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct DomainBody {
    #[salvo(schema(min_length = 1, max_length = 253))]
    domain: String,
    /// with a dashboard session: the project to add it to
    #[serde(rename = "projectId")]
    #[salvo(schema(rename = "projectId"))]
    project_id: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct DomainDeletedOut {
    id: String,
    deleted: bool,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct VerifyBody {
    #[salvo(schema(format = Email, max_length = 254))]
    email: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct VerificationOut {
    email: String,
    valid: bool,
    is_disposable: bool,
    is_alias: bool,
    is_typo: bool,
    is_plus_addressed: bool,
    is_personal_email: bool,
    domain_exists: bool,
    has_website: bool,
    has_mx_records: bool,
    reasons: Vec<String>,
    suggested_email: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct VerifyOut {
    success: bool,
    data: VerificationOut,
}

pub fn router() -> Router {
    Router::new().push(Router::with_path("v1/verify").hoop(ApiKeyAuth(KeyRule::SecretOnly)).post(verify_email)).push(
        Router::with_path("domains")
            .post(add_domain)
            .push(Router::with_path("project/{project_id}").get(list_domains))
            .push(
                Router::new()
                    .hoop(ApiKeyAuth(KeyRule::SecretOnly))
                    .push(Router::with_path("{id}/verify").get(verify_domain))
                    .push(Router::with_path("{id}").patch(update_domain).delete(delete_domain)),
            ),
    )
}

/// The project a domain request acts on: the key's project, or with a session the named project
/// (membership checked). `wanted` is the project the request names, if any.
async fn domain_project(
    req: &Request,
    res: &mut Response,
    st: &AppState,
    wanted: Option<&str>,
) -> Result<String, ApiError> {
    let session_only = req.headers().get("authorization").is_none() && req.cookie(COOKIE).is_some();
    if session_only && req.headers().get("x-project-id").is_none() {
        let user = session_user(req, st).await?;
        apply_rate_limit(st, &format!("user:{}", user.id), res)?;
        let p = wanted.ok_or_else(|| {
            Error::field("projectId", "required", "projectId is required with a dashboard session", Value::Null)
        })?;
        crate::services::accounts::membership(st, p, &user.id)
            .await?
            .ok_or_else(|| Error::not_found("PROJECT_NOT_FOUND", format!("Project {p} not found")))?;
        return Ok(p.to_string());
    }
    let ctx = authenticate(req, st, KeyRule::SecretOnly).await?;
    apply_rate_limit(st, &format!("project:{}", ctx.project_id), res)?;
    match wanted {
        Some(p) if p != ctx.project_id => {
            Err(Error::not_found("PROJECT_NOT_FOUND", format!("Project {p} not found")).into())
        }
        _ => Ok(ctx.project_id),
    }
}

fn domain_error(e: DomainError) -> Error {
    match e {
        DomainError::InvalidName(n) => {
            Error::field("domain", "invalid_string", "domain must be a valid domain name", Value::String(n))
        }
        DomainError::Taken(n) => Error::Conflict(format!("The domain {n} is already registered to a project")),
        DomainError::Store(e) => e.into(),
        DomainError::Dkim(e) => Error::Internal(e.to_string()),
    }
}

/// Adds a sender domain: creates its DKIM key pair and answers the DNS records to publish.
#[endpoint(
    tags("domains"),
    security(("bearer" = []), ("session" = [])),
    request_body = DomainBody,
    responses((status_code = 201, body = DomainOut))
)]
pub async fn add_domain(req: &mut Request, depot: &mut Depot, res: &mut Response) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        // Credentials first, and a small body: nothing large is read for a caller who is not let in.
        if req.headers().contains_key("authorization") {
            authenticate(req, &st, KeyRule::SecretOnly).await?;
        } else {
            session_user(req, &st).await?;
        }
        let body = json_object_max(req, 16 * 1024).await?;
        let wanted = body.get("projectId").and_then(Value::as_str).map(str::to_string);
        let project_id = domain_project(req, res, &st, wanted.as_deref()).await?;
        let mut f = Fields::new(&body);
        let name = f.string("domain", true, 1, 253);
        f.finish()?;
        let name = name.ok_or_else(|| Error::Internal("validated domain missing".into()))?;
        let d = st.domains.add(&st.store, &project_id, &name, false, st.clock.now_ms()).await.map_err(domain_error)?;
        Reply::created(&DomainOut::of(&st, &d))
    })
}

/// The project's domains, verified and pending, newest first.
#[endpoint(tags("domains"), security(("bearer" = []), ("session" = [])), responses((status_code = 200, body = Vec<DomainOut>)))]
pub async fn list_domains(
    project_id: PathParam<String>,
    req: &mut Request,
    depot: &mut Depot,
    res: &mut Response,
) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let wanted = project_id.into_inner();
        let project_id = domain_project(req, res, &st, Some(&wanted)).await?;
        let list = sending_domains::list(&st.store, &project_id).await?;
        Reply::ok(&list.iter().map(|d| DomainOut::of(&st, d)).collect::<Vec<_>>())
    })
}

async fn own_domain(st: &AppState, project_id: &str, id: &str) -> Result<DomainRow, ApiError> {
    sending_domains::get(&st.store, project_id, id)
        .await?
        .ok_or_else(|| Error::not_found("DOMAIN_NOT_FOUND", format!("Domain {id} not found")).into())
}

/// Checks the domain's DNS records now and answers the domain with each record's status.
#[endpoint(tags("domains"), security(("bearer" = [])), responses((status_code = 200, body = DomainOut)))]
pub async fn verify_domain(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let d = own_domain(&st, &ctx.project_id, &id.into_inner()).await?;
        let checked = st.domains.check(&st.store, &d, st.clock.now_ms()).await.map_err(domain_error)?;
        Reply::ok(&DomainOut::of(&st, &checked))
    })
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct DomainPatch {
    /// turn receiving on (replies to the domain, or to inbound.<domain>, become email.received events)
    /// or off (refused with 550 at RCPT)
    inbound: bool,
}

/// Changes a domain's settings: whether it takes mail on Herald's SMTP listener.
#[endpoint(
    tags("domains"),
    security(("bearer" = [])),
    request_body = DomainPatch,
    responses((status_code = 200, body = DomainOut))
)]
pub async fn update_domain(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        own_domain(&st, &ctx.project_id, &id).await?;
        let body = json_object_max(req, 16 * 1024).await?;
        let mut f = Fields::new(&body);
        let inbound = f.boolean("inbound");
        if inbound.is_none() && !body.contains_key("inbound") {
            f.error("inbound", "required", "inbound is required (true or false)");
        }
        f.only(&["inbound"]);
        f.finish()?;
        let on = inbound.unwrap_or(false);
        let d = sending_domains::set_inbound(&st.store, &ctx.project_id, &id, on, st.clock.now_ms())
            .await?
            .ok_or_else(|| Error::not_found("DOMAIN_NOT_FOUND", format!("Domain {id} not found")))?;
        Reply::ok(&DomainOut::of(&st, &d))
    })
}

/// Removes a domain; 409 while a template or a campaign not sent yet (DRAFT, SCHEDULED or SENDING) sends
/// from it.
#[endpoint(tags("domains"), security(("bearer" = [])), responses((status_code = 200, body = DomainDeletedOut)))]
pub async fn delete_domain(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let id = id.into_inner();
        let d = own_domain(&st, &ctx.project_id, &id).await?;
        match sending_domains::remove(&st.store, &ctx.project_id, &id).await? {
            Removal::Removed => {}
            Removal::NotFound => {
                return Err(Error::not_found("DOMAIN_NOT_FOUND", format!("Domain {id} not found")).into());
            }
            Removal::InUse(users) => {
                return Err(Error::Conflict(format!("The domain {} is used by {}", d.name, users.join(", "))).into());
            }
        }
        Reply::ok(&DomainDeletedOut { id, deleted: true })
    })
}

/// Verifies an email address: syntax, disposable, alias, typo, and DNS (NS, A/AAAA, MX).
#[endpoint(tags("verify"), security(("bearer" = [])), request_body = VerifyBody, responses((status_code = 200, body = VerifyOut)))]
pub async fn verify_email(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let email = f.string("email", true, 1, 320);
        f.finish()?;
        let email = email.ok_or_else(|| Error::Internal("validated email missing".into()))?;
        if !super::body::is_email(&crate::domain::contacts::normalize_email(&email)) {
            return Err(Error::field(
                "email",
                "invalid_string",
                "email must be a valid email address",
                Value::String(email),
            )
            .into());
        }
        let v = crate::services::verify::verify(&st.domains.dns, &email).await;
        Reply::ok(&serde_json::json!({ "success": true, "data": v }))
    })
}
