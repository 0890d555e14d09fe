//! Account endpoints with a dashboard session: the current user, their projects, key regeneration and
//! project members (docs/behaviour.md#keys-and-authentication). OWNER and ADMIN manage members and keys;
//! only an OWNER deletes a project or makes someone OWNER; a project always keeps at least one OWNER.

use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;

use super::auth::{UserOut, require_session, role_in, user};
use super::body::{Fields, Reply, json_object};
use super::state;
use crate::api::errors::ApiError;
use crate::error::Error;
use crate::infra::clock::rfc3339;
use crate::infra::security;
use crate::services::{accounts, invitations};
use crate::store::accounts::{Member, Project, Role};

/// A project. `public` and `secret` appear only when a project is created and when its keys are
/// regenerated; the store keeps only their digests.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ProjectOut {
    pub id: String,
    pub name: String,
    pub disabled: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Open and click tracking: ENABLED, DISABLED or MARKETING_ONLY (default)
    pub tracking: String,
    /// Delivery transport: `smtp`, `file` or a transport plugin's name; null means the server's default
    pub transport: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

impl ProjectOut {
    pub fn new(p: &Project, role: Option<Role>, keys: Option<&security::KeyPair>) -> Self {
        ProjectOut {
            id: p.id.clone(),
            name: p.name.clone(),
            disabled: p.disabled,
            role: role.map(|r| r.as_str().to_string()),
            tracking: p.tracking.clone().unwrap_or_else(|| "MARKETING_ONLY".into()),
            transport: p.transport.clone(),
            public: keys.map(|k| k.public.clone()),
            secret: keys.map(|k| k.secret.clone()),
            created_at: rfc3339(p.created_at),
            updated_at: rfc3339(p.updated_at),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct MemberOut {
    pub user_id: String,
    pub email: Option<String>,
    pub name: Option<String>,
    /// OWNER, ADMIN or MEMBER
    pub role: String,
    pub created_at: String,
}

impl From<&Member> for MemberOut {
    fn from(m: &Member) -> Self {
        MemberOut {
            user_id: m.user.clone(),
            email: m.email.clone(),
            name: m.name.clone(),
            role: m.role.as_str().to_string(),
            created_at: rfc3339(m.created_at),
        }
    }
}

/// An invitation by email to join a project.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct InvitationOut {
    /// always true: the address was invited, not added
    pub invited: bool,
    pub email: String,
    /// OWNER, ADMIN or MEMBER: the role on joining
    pub role: String,
    pub created_at: String,
    pub expires_at: String,
}

impl From<&invitations::Invitation> for InvitationOut {
    fn from(i: &invitations::Invitation) -> Self {
        InvitationOut {
            invited: true,
            email: i.email.clone(),
            role: i.role.as_str().to_string(),
            created_at: rfc3339(i.created_at),
            expires_at: rfc3339(i.expires_at),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ProjectBody {
    /// 1 to 100 characters
    #[salvo(schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    name: String,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ProjectPatchBody {
    /// 1 to 100 characters
    #[salvo(schema(
        min_length = 1,
        max_length = 100,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    name: Option<String>,
    /// ENABLED, DISABLED or MARKETING_ONLY
    #[salvo(schema(pattern = "^(ENABLED|DISABLED|MARKETING_ONLY)$"))]
    tracking: Option<String>,
    /// `smtp` (when configured), `file`, a loaded transport plugin's name, or null for the server's default
    transport: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct InviteBody {
    /// an existing Herald user's email (added at once, 201) or any other address (invited by mail, 202)
    #[salvo(schema(format = Email, max_length = 254))]
    email: String,
    /// OWNER, ADMIN or MEMBER (default MEMBER)
    #[salvo(schema(pattern = "^(OWNER|ADMIN|MEMBER)$"))]
    role: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct RoleBody {
    /// OWNER, ADMIN or MEMBER
    #[salvo(schema(pattern = "^(OWNER|ADMIN|MEMBER)$"))]
    role: String,
}

#[derive(Serialize, ToSchema)]
pub struct DeletedOut {
    success: bool,
}

pub fn router() -> Router {
    Router::new()
        .push(
            Router::with_path("users/@me").hoop(require_session).get(me).push(
                Router::with_path("projects")
                    .get(list_projects)
                    .post(create_project)
                    .push(Router::with_path("{id}").patch(update_project).delete(delete_project))
                    .push(Router::with_path("{id}/regenerate-keys").post(regenerate_keys))
                    .push(Router::with_path("{id}/reset").post(reset_project)),
            ),
        )
        .push(
            Router::with_path("projects/{id}/members")
                .hoop(require_session)
                .get(list_members)
                .post(add_member)
                .push(Router::with_path("{user_id}").patch(update_member).delete(remove_member)),
        )
        .push(
            Router::with_path("projects/{id}/invitations")
                .hoop(require_session)
                .get(list_invitations)
                .push(Router::with_path("{email}").delete(withdraw_invitation)),
        )
}

/// The logged-in user.
#[endpoint(tags("account"), security(("session" = [])), responses((status_code = 200, body = UserOut)))]
pub async fn me(depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({ Reply::ok(&UserOut::from(&user(depot)?)) })
}

/// Projects the user belongs to, newest membership first, with the user's role.
#[endpoint(tags("account"), security(("session" = [])), responses((status_code = 200, body = Vec<ProjectOut>)))]
pub async fn list_projects(depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let list = accounts::projects_of_user(&st, &u.id).await?;
        let out: Vec<ProjectOut> = list.iter().map(|p| ProjectOut::new(&p.project, Some(p.role), None)).collect();
        Reply::ok(&out)
    })
}

/// Creates a project with the user as OWNER; the answer carries the new key pair, shown only now.
#[endpoint(tags("account"), security(("session" = [])), request_body = ProjectBody, responses((status_code = 201, body = ProjectOut)))]
pub async fn create_project(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let name = f.text("name", true, 100);
        f.finish()?;
        let name = name.ok_or_else(|| Error::Internal("validated name missing".into()))?;
        accounts::may_create_projects(&st, &u)?;
        crate::services::quotas::room_for_project(&st.store, &st.quotas, &u.id).await?;
        let (project, keys) = accounts::create_project(&st, &name, Some(&u.id)).await?;
        Reply::created(&ProjectOut::new(&project, Some(Role::Owner), Some(&keys)))
    })
}

/// Changes a project's name, tracking mode or delivery transport (OWNER or ADMIN).
#[endpoint(tags("account"), security(("session" = [])), request_body = ProjectPatchBody, responses((status_code = 200, body = ProjectOut)))]
pub async fn update_project(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let id = id.into_inner();
        let role = role_in(&st, &id, &u).await?;
        accounts::need(role, Role::Admin, "change project settings")?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let name = f.text("name", false, 100);
        let tracking = f.one_of("tracking", false, &["ENABLED", "DISABLED", "MARKETING_ONLY"]);
        let transport = match body.get("transport") {
            None => None,
            Some(serde_json::Value::Null) => Some(None),
            Some(serde_json::Value::String(t)) => {
                let available = accounts::available_transports(&st);
                if available.iter().any(|a| a == t) {
                    Some(Some(t.clone()))
                } else {
                    f.error(
                        "transport",
                        "invalid_transport",
                        format!("Unknown transport {t:?}; available: {}", available.join(", ")),
                    );
                    None
                }
            }
            Some(_) => {
                f.error("transport", "invalid_type", "transport must be a string or null");
                None
            }
        };
        f.finish()?;
        let change = accounts::ProjectChange { name, tracking, transport };
        let project = accounts::update_project(&st, &id, role, change).await?;
        Reply::ok(&ProjectOut::new(&project, Some(role), None))
    })
}

/// Deletes a project and its data (OWNER only). Its keys stop working at once.
#[endpoint(tags("account"), security(("session" = [])), responses((status_code = 200, body = DeletedOut)))]
pub async fn delete_project(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let id = id.into_inner();
        let role = role_in(&st, &id, &u).await?;
        accounts::delete_project(&st, &id, role).await?;
        Reply::ok(&DeletedOut { success: true })
    })
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ResetBody {
    /// the project's name, exactly
    #[salvo(schema(
        min_length = 1,
        max_length = 200,
        pattern = r"^[^\u0000-\u001f\u007f-\u009f]*[^ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\u0000-\u001f\u007f-\u009f][^\u0000-\u001f\u007f-\u009f]*$"
    ))]
    confirm: String,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ResetOut {
    success: bool,
    /// the queue job that deletes the data
    job_id: String,
}

/// Deletes the project's data for good (OWNER only; `confirm` is the project's name): contacts, events,
/// emails, templates, campaigns, segments, workflows and jobs, in batches as a job. Domains, members and
/// keys stay. 409 while a campaign is sending.
#[endpoint(tags("account"), security(("session" = [])), request_body = ResetBody, responses((status_code = 202, body = ResetOut)))]
pub async fn reset_project(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let id = id.into_inner();
        let role = role_in(&st, &id, &u).await?;
        accounts::need(role, Role::Owner, "reset a project")?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let confirm = f.text("confirm", true, 200);
        f.finish()?;
        let confirm = confirm.ok_or_else(|| Error::Internal("validated confirm missing".into()))?;
        let job_id = crate::services::projects::reset(&st, &id, role, &confirm).await?;
        Reply::with(salvo::http::StatusCode::ACCEPTED, &ResetOut { success: true, job_id })
    })
}

/// Replaces both keys (OWNER or ADMIN). The old pair stops working immediately, with no grace period.
#[endpoint(tags("account"), security(("session" = [])), responses((status_code = 200, body = ProjectOut)))]
pub async fn regenerate_keys(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let id = id.into_inner();
        let role = role_in(&st, &id, &u).await?;
        let (project, keys) = accounts::regenerate_keys(&st, &id, role).await?;
        Reply::ok(&ProjectOut::new(&project, Some(role), Some(&keys)))
    })
}

/// Members of a project (any member may list them).
#[endpoint(tags("members"), security(("session" = [])), responses((status_code = 200, body = Vec<MemberOut>)))]
pub async fn list_members(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let id = id.into_inner();
        role_in(&st, &id, &u).await?;
        let members = accounts::members(&st, &id).await?;
        Reply::ok(&members.iter().map(MemberOut::from).collect::<Vec<_>>())
    })
}

fn parse_role(f: &mut Fields, required: bool) -> Option<Role> {
    f.one_of("role", required, &["OWNER", "ADMIN", "MEMBER"]).and_then(|r| Role::parse(&r))
}

/// Invites an address to the project (OWNER or ADMIN; only an OWNER grants OWNER; the inviter's own
/// address must be verified): 202 with the invitation, mailed to the address and working for 7 days,
/// whether or not a Herald account has the address. The user with that address joins by following the
/// link while logged in. 409 when the address belongs to a member already; 429 past the invitation
/// throttles.
#[endpoint(tags("members"), security(("session" = [])), request_body = InviteBody, responses((status_code = 202, body = InvitationOut)))]
pub async fn add_member(id: PathParam<String>, req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let id = id.into_inner();
        let role = role_in(&st, &id, &u).await?;
        // Refused before the body is read, as before the service existed: a MEMBER gets 403, not 422.
        accounts::need(role, Role::Admin, "add members")?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let email = f.email("email", true);
        let new_role = parse_role(&mut f, false).unwrap_or(Role::Member);
        f.finish()?;
        let email = email.ok_or_else(|| Error::Internal("validated email missing".into()))?;
        let invited = accounts::add_member(&st, &id, role, &u, &email, new_role).await?;
        Reply::with(StatusCode::ACCEPTED, &InvitationOut::from(&invited))
    })
}

/// A project's open invitations, oldest first (any member may list them).
#[endpoint(tags("members"), security(("session" = [])), responses((status_code = 200, body = Vec<InvitationOut>)))]
pub async fn list_invitations(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let id = id.into_inner();
        role_in(&st, &id, &u).await?;
        let list = invitations::list(&st, &id).await?;
        Reply::ok(&list.iter().map(InvitationOut::from).collect::<Vec<_>>())
    })
}

/// Withdraws the open invitation of an address (OWNER or ADMIN): its link stops working.
#[endpoint(tags("members"), security(("session" = [])), responses((status_code = 200, body = DeletedOut)))]
pub async fn withdraw_invitation(
    id: PathParam<String>,
    email: PathParam<String>,
    depot: &mut Depot,
) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let id = id.into_inner();
        let role = role_in(&st, &id, &u).await?;
        invitations::withdraw(&st, &id, role, &email.into_inner().trim().to_ascii_lowercase()).await?;
        Reply::ok(&DeletedOut { success: true })
    })
}

/// Changes a member's role (OWNER or ADMIN; an ADMIN cannot touch an OWNER or grant OWNER; the last
/// OWNER cannot be demoted: 409).
#[endpoint(tags("members"), security(("session" = [])), request_body = RoleBody, responses((status_code = 200, body = MemberOut)))]
pub async fn update_member(
    id: PathParam<String>,
    user_id: PathParam<String>,
    req: &mut Request,
    depot: &mut Depot,
) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let (id, target) = (id.into_inner(), user_id.into_inner());
        let role = role_in(&st, &id, &u).await?;
        accounts::need(role, Role::Admin, "change roles")?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let new_role = parse_role(&mut f, true);
        f.finish()?;
        let new_role = new_role.ok_or_else(|| Error::Internal("validated role missing".into()))?;
        let m = accounts::change_role(&st, &id, role, &target, new_role).await?;
        Reply::ok(&MemberOut::from(&m))
    })
}

/// Removes a member. Anyone may leave; OWNER or ADMIN remove others (only an OWNER removes an OWNER);
/// the last OWNER cannot leave (409).
#[endpoint(tags("members"), security(("session" = [])), responses((status_code = 200, body = DeletedOut)))]
pub async fn remove_member(
    id: PathParam<String>,
    user_id: PathParam<String>,
    depot: &mut Depot,
) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let (id, target) = (id.into_inner(), user_id.into_inner());
        let role = role_in(&st, &id, &u).await?;
        accounts::remove_member(&st, &id, &u.id, role, &target).await?;
        Reply::ok(&DeletedOut { success: true })
    })
}
