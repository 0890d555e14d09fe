//! Users, projects and members as the dashboard and the command line manage them, with the role rules
//! (docs/behaviour.md#keys-and-authentication): OWNER and ADMIN manage members, settings and keys; only an
//! OWNER deletes a project, grants OWNER or touches an OWNER; a project always keeps one OWNER (the store
//! refuses the change that would leave none).
//!
//! Must not import: salvo, surrealdb.

use crate::context::Context;
use crate::error::{Code, Error};
use crate::infra::security;
use crate::store::StoreError;
use crate::store::accounts::{Member, Project, ProjectWithRole, Role, User};

fn project_not_found(id: &str) -> Error {
    Error::not_found("PROJECT_NOT_FOUND", format!("Project {id} not found"))
}

fn member_not_found(user: &str) -> Error {
    Error::not_found("MEMBER_NOT_FOUND", format!("User {user} is not a member of this project"))
}

pub use super::roles::need;
pub use super::throttles::{LOGIN_FAILURES, LOGIN_WINDOW_MS};

/// Creates a user with a password (hashed off the async threads); 409 when the email is taken.
pub async fn create_user(st: &Context, email: &str, password: &str, name: Option<&str>) -> Result<User, Error> {
    let hash = st.passwords.hash(password.to_string()).await.map_err(Error::Internal)?;
    let id = uuid::Uuid::now_v7().to_string();
    match st.store.create_user(&id, email, name, &hash, st.clock.now_ms()).await {
        Ok(u) => Ok(u),
        Err(StoreError::Conflict(_)) => Err(Error::Conflict(format!("A user with the email {email} already exists"))),
        Err(e) => Err(e.into()),
    }
}

/// The user with this (normalised) email.
pub async fn user_by_email(st: &Context, email: &str) -> Result<Option<User>, Error> {
    Ok(st.store.user_by_email(email).await?)
}

/// Logs a session out: its id is refused until the token would have expired anyway.
pub async fn revoke_session(st: &Context, sid: &str, expires_at_ms: i64) -> Result<(), Error> {
    Ok(st.store.revoke_session(sid, expires_at_ms).await?)
}

/// The user behind a verified session token (`sid`, `sub`, issued at session epoch `epoch`): 401 when it
/// was logged out, the user's password was reset since, or the user is gone.
pub async fn session_user(st: &Context, sid: &str, user: &str, epoch: i64) -> Result<User, Error> {
    if st.store.session_revoked(sid).await? {
        return Err(Error::Unauthenticated("The session was logged out; log in again".into()));
    }
    let u = st
        .store
        .user(user)
        .await?
        .ok_or_else(|| Error::Unauthenticated("The session's user no longer exists".into()))?;
    if u.session_epoch.unwrap_or(0) > epoch {
        return Err(Error::Unauthenticated("The password was reset since this session began; log in again".into()));
    }
    Ok(u)
}

/// The project whose public or secret key has this digest, and whether it is the secret one.
pub async fn project_by_key(st: &Context, digest: &str) -> Result<Option<(Project, bool)>, Error> {
    Ok(st.store.project_by_key_hash(digest).await?)
}

/// The user's role in a project; 404 when they are not a member (a project they cannot see).
pub async fn role_in(st: &Context, project: &str, user: &str) -> Result<Role, Error> {
    st.store.membership(project, user).await?.map(|m| m.role).ok_or_else(|| project_not_found(project))
}

/// Projects the user belongs to, newest membership first, with the user's role.
pub async fn projects_of_user(st: &Context, user: &str) -> Result<Vec<ProjectWithRole>, Error> {
    Ok(st.store.projects_of_user(user).await?)
}

/// With `HERALD_REQUIRE_EMAIL_VERIFICATION` on, a user whose email is not verified may log in but not
/// create projects: 403 `EMAIL_NOT_VERIFIED`.
pub fn may_create_projects(st: &Context, user: &User) -> Result<(), Error> {
    if st.config.require_email_verification && user.email_verified_at.is_none() {
        return Err(Error::refused(
            Code::EmailNotVerified,
            "Verify your email address before creating a project: follow the link we mailed you, or ask for a \
             new one with POST /auth/request-verification",
        ));
    }
    Ok(())
}

/// Creates a project and its keys, with `owner` as OWNER (none for an operator's project). The keys are
/// returned in full only here; the store keeps their digests.
pub async fn create_project(
    st: &Context,
    name: &str,
    owner: Option<&str>,
) -> Result<(Project, security::KeyPair), Error> {
    let keys = security::generate_key_pair();
    let id = uuid::Uuid::now_v7().to_string();
    let public = security::key_digest(&keys.public);
    let secret = security::key_digest(&keys.secret);
    // With payments configured a project starts with the `free` plan's limits (docs/behaviour.md#billing).
    let limits = crate::services::billing::starting_limits(&st.config);
    let project =
        st.store.create_project(&id, name, &public, &secret, owner, limits.as_ref(), st.clock.now_ms()).await?;
    Ok((project, keys))
}

/// `herald project create NAME [--owner EMAIL --password PW]`: the project, and its owner user when that
/// user does not exist yet (then the password must be given and pass the password rule).
pub async fn create_project_for(
    st: &Context,
    name: &str,
    owner: Option<&str>,
    password: Option<&str>,
) -> Result<(Project, security::KeyPair), Error> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(Error::Invalid(
            "The project name must be 1 to 100 characters on one line, without control characters".into(),
        ));
    }
    let owner_id = match owner {
        None => None,
        Some(email) => {
            // Checked before case folding: folding can turn a character no address may hold into one
            // that looks like another user's (the Kelvin sign folds to `k`).
            let email = email.trim();
            if !crate::domain::contacts::is_email(email) {
                return Err(Error::Invalid(format!("{email} is not a valid email address")));
            }
            let email = email.to_ascii_lowercase();
            match user_by_email(st, &email).await? {
                Some(u) => Some(u.id),
                None => {
                    let pw = password.ok_or_else(|| {
                        Error::Invalid(format!("User {email} does not exist yet: give --password to create it"))
                    })?;
                    if let Some(problem) = security::password_problem(pw) {
                        return Err(Error::Invalid(problem));
                    }
                    // The operator vouches for the address.
                    let id = create_user(st, &email, pw, None).await?.id;
                    st.store.set_email_verified(&id, st.clock.now_ms()).await?;
                    Some(id)
                }
            }
        }
    };
    create_project(st, name, owner_id.as_deref()).await
}

/// A project's row from the short read cache (settings a send applies: name, tracking, transport).
pub async fn project_settings(st: &Context, id: &str) -> Result<Option<Project>, Error> {
    Ok(st.store.project_cached(id).await?)
}

/// Whether the user is a member of the project, and with which role.
pub async fn membership(st: &Context, project: &str, user: &str) -> Result<Option<Role>, Error> {
    Ok(st.store.membership(project, user).await?.map(|m| m.role))
}

/// Transports a project may pick: the built-ins this server can use and the loaded transport plugins.
pub fn available_transports(st: &Context) -> Vec<String> {
    let mut t: Vec<String> = st.config.delivery.transports.keys().cloned().collect();
    if st.config.smtp_url.is_some() {
        t.push(crate::config::SMTP.to_string());
    }
    t.push(crate::config::FILE.to_string());
    t.extend(st.plugins.transports());
    t.sort_unstable();
    t.dedup();
    t
}

/// What a project settings change sets; None leaves a setting as it is.
#[derive(Default)]
pub struct ProjectChange {
    pub name: Option<String>,
    /// ENABLED, DISABLED or MARKETING_ONLY
    pub tracking: Option<String>,
    /// Some(None) goes back to the server's default transport.
    pub transport: Option<Option<String>>,
}

/// Changes a project's settings (OWNER or ADMIN).
pub async fn update_project(st: &Context, id: &str, role: Role, change: ProjectChange) -> Result<Project, Error> {
    need(role, Role::Admin, "change project settings")?;
    let now = st.clock.now_ms();
    if let Some(t) = change.tracking {
        st.store.set_project_tracking(id, &t, now).await?;
    }
    if let Some(t) = change.transport {
        st.store.set_project_transport(id, t.as_deref(), now).await?;
    }
    match change.name {
        Some(n) => st.store.rename_project(id, &n, now).await?,
        None => st.store.project(id).await?,
    }
    .ok_or_else(|| project_not_found(id))
}

/// Deletes a project (OWNER only): its row, memberships and domains at once and a purge job for the rest
/// (`services::projects`). Its keys stop working at once, in every process within the key-cache check.
pub async fn delete_project(st: &Context, id: &str, role: Role) -> Result<(), Error> {
    need(role, Role::Owner, "delete a project")?;
    let now = st.clock.now_ms();
    st.store.delete_project(id, &crate::services::projects::purge_job(id, now), now).await?;
    st.job_wake.kind(crate::services::projects::PURGE_PROJECT_JOB);
    st.keys.invalidate_project(id);
    st.store.bump_keys_epoch().await?;
    Ok(())
}

/// Replaces both keys (OWNER or ADMIN); the old pair stops working at once.
pub async fn regenerate_keys(st: &Context, id: &str, role: Role) -> Result<(Project, security::KeyPair), Error> {
    need(role, Role::Admin, "regenerate keys")?;
    let keys = security::generate_key_pair();
    let (public, secret) = (security::key_digest(&keys.public), security::key_digest(&keys.secret));
    let project = st.store.set_project_keys(id, &public, &secret, st.clock.now_ms()).await?;
    st.keys.invalidate_project(id);
    st.store.bump_keys_epoch().await?;
    Ok((project.ok_or_else(|| project_not_found(id))?, keys))
}

/// The members of a project.
pub async fn members(st: &Context, id: &str) -> Result<Vec<Member>, Error> {
    Ok(st.store.members(id).await?)
}

/// Adds a member by email (OWNER or ADMIN; only an OWNER grants OWNER): always by a mailed invitation,
/// whether or not a Herald account has the address (the answer is the same either way), so nobody
/// inherits a role by having signed up with an address first. 409 when the address belongs to a member
/// already (the inviter can list the members anyway).
pub async fn add_member(
    st: &Context,
    id: &str,
    role: Role,
    inviter: &User,
    email: &str,
    new_role: Role,
) -> Result<crate::services::invitations::Invitation, Error> {
    need(role, Role::Admin, "add members")?;
    if new_role == Role::Owner {
        need(role, Role::Owner, "make someone OWNER")?;
    }
    if let Some(user) = user_by_email(st, email).await?
        && st.store.membership(id, &user.id).await?.is_some()
    {
        return Err(Error::Conflict(format!("{email} is already a member of this project")));
    }
    crate::services::invitations::invite(st, id, inviter, email, new_role).await
}

/// Changes a member's role (OWNER or ADMIN; an ADMIN cannot touch an OWNER or grant OWNER; the last
/// OWNER cannot be demoted: 409).
pub async fn change_role(st: &Context, id: &str, role: Role, target: &str, new_role: Role) -> Result<Member, Error> {
    need(role, Role::Admin, "change roles")?;
    let current = st.store.membership(id, target).await?.ok_or_else(|| member_not_found(target))?;
    if current.role == Role::Owner || new_role == Role::Owner {
        need(role, Role::Owner, "change an OWNER or grant OWNER")?;
    }
    st.store.set_member_role(id, target, new_role).await?;
    members(st, id).await?.into_iter().find(|m| m.user == target).ok_or_else(|| member_not_found(target))
}

/// Removes a member. Anyone may leave; OWNER or ADMIN remove others (only an OWNER removes an OWNER);
/// the last OWNER cannot leave (409).
pub async fn remove_member(st: &Context, id: &str, actor: &str, role: Role, target: &str) -> Result<(), Error> {
    let current = st.store.membership(id, target).await?.ok_or_else(|| member_not_found(target))?;
    if target != actor {
        need(role, Role::Admin, "remove members")?;
        if current.role == Role::Owner {
            need(role, Role::Owner, "remove an OWNER")?;
        }
    }
    Ok(st.store.remove_member(id, target).await?)
}
