//! Account mail (docs/behaviour.md#account-mail): email verification, password reset and invitations to
//! a project, each a single-use link sent through Herald's own mail (`system_mail.rs`). Tokens are 32
//! random bytes; the store keeps their SHA-256 only, a newer token replaces an older one, and taking a
//! token deletes it in the transaction that applies it. The request endpoints answer the same whether or
//! not an account has the address, and are throttled per address and per client address.
//!
//! Must not import: salvo, surrealdb.

use crate::error::ApiError;
use crate::infra::security;
use crate::state::AppState;
use crate::store::account_tokens::{AccountToken, NewToken, Purpose};
use crate::store::accounts::{Role, User};

/// How long a verification link works.
pub const VERIFY_TTL_MS: i64 = 24 * 3_600_000;
/// How long a password-reset link works.
pub const RESET_TTL_MS: i64 = 3_600_000;
/// How long an invitation works.
pub const INVITE_TTL_MS: i64 = 7 * 24 * 3_600_000;
/// Account mails one address may be sent, and one client address may ask for, per [`MAIL_WINDOW_MS`].
pub const MAILS_PER_ADDRESS: u32 = 5;
pub const MAILS_PER_IP: u32 = 30;
pub const MAIL_WINDOW_MS: i64 = 3_600_000;

fn invalid_token() -> ApiError {
    ApiError::coded(
        400,
        "INVALID_TOKEN",
        "This link is not valid: it was used already, a newer one replaced it, or it expired. Ask for a new one",
    )
}

/// A new token and its digest.
fn new_token() -> (String, String) {
    let token = security::generate_token();
    let digest = security::key_digest(&token);
    (token, digest)
}

/// Stores a new token of `purpose` for `user` (replacing the older one) and answers it.
async fn issue_user_token(st: &AppState, user: &User, purpose: Purpose, ttl_ms: i64) -> Result<String, ApiError> {
    let (token, digest) = new_token();
    let now = st.clock.now_ms();
    let t = NewToken {
        digest: &digest,
        purpose,
        user: Some(&user.id),
        email: &user.email,
        project: None,
        role: None,
        invited_by: None,
        expires_at: now + ttl_ms,
    };
    st.store.issue_token(&t, now).await?;
    Ok(token)
}

fn link(st: &AppState, page: &str, token: &str) -> String {
    format!("{}/account/{page}?token={token}", st.config.public_url)
}

/// Counts one mail request against the address and the client; 429 once either asked too often.
pub fn throttle(st: &AppState, email: &str, ip: &str) -> Result<(), ApiError> {
    let (address, client) = (format!("mail:{email}"), format!("ip:{ip}"));
    let waits = [st.account_mail_by_address.blocked(&address), st.account_mail_by_ip.blocked(&client)];
    if let Some(wait) = waits.into_iter().flatten().max() {
        return Err(ApiError::RateLimited { limit: MAILS_PER_ADDRESS, retry_after_secs: wait });
    }
    st.account_mail_by_address.failed(&address);
    st.account_mail_by_ip.failed(&client);
    Ok(())
}

async fn queue(st: &AppState, to: &str, subject: &str, text: &str) -> Result<(), ApiError> {
    st.system_mail.queue(&st.store, st.clock.now_ms(), to, subject, text).await.map_err(ApiError::Internal)?;
    st.job_wake.kind(crate::services::system_mail::SYSTEM_MAIL_JOB);
    Ok(())
}

/// Sends `user` a verification link (replacing any earlier one); nothing when the email is verified.
pub async fn send_verification(st: &AppState, user: &User) -> Result<(), ApiError> {
    if user.email_verified_at.is_some() {
        return Ok(());
    }
    let token = issue_user_token(st, user, Purpose::Verify, VERIFY_TTL_MS).await?;
    let text = format!(
        "Hello,\n\nplease confirm that {email} is your address by opening this link within 24 hours:\n\n{url}\n\n\
         If you did not create an account on the Herald server at {public}, you can ignore this message.\n",
        email = user.email,
        url = link(st, "verify-email", &token),
        public = st.config.public_url,
    );
    queue(st, &user.email, "Verify your email address", &text).await
}

/// `POST /auth/request-verification`: a new link for the account with this address, when it has one
/// that is not verified yet. Answers the same either way.
pub async fn request_verification(st: &AppState, email: &str) -> Result<(), ApiError> {
    match st.store.user_by_email(email).await? {
        Some(u) => send_verification(st, &u).await,
        None => Ok(()),
    }
}

/// `POST /auth/verify-email`: takes the token and marks its user's email verified.
pub async fn verify_email(st: &AppState, token: &str) -> Result<User, ApiError> {
    let now = st.clock.now_ms();
    let t = st.store.take_verify_token(&security::key_digest(token), now).await?;
    let user = live(t, now).and_then(|t| t.user).ok_or_else(invalid_token)?;
    st.store.user(&user).await?.ok_or_else(invalid_token)
}

/// A taken token that had not expired.
fn live(t: Option<AccountToken>, now: i64) -> Option<AccountToken> {
    t.filter(|t| t.expires_at > now)
}

/// `POST /auth/request-password-reset`: a reset link for the account with this address, when there is
/// one. Answers the same either way.
pub async fn request_password_reset(st: &AppState, email: &str) -> Result<(), ApiError> {
    let Some(user) = st.store.user_by_email(email).await? else { return Ok(()) };
    let token = issue_user_token(st, &user, Purpose::Reset, RESET_TTL_MS).await?;
    let text = format!(
        "Hello,\n\nsomeone asked to reset the password of the Herald account {email}. To choose a new \
         password, open this link within one hour:\n\n{url}\n\n\
         If it was not you, ignore this message: your password stays as it is.\n",
        email = user.email,
        url = link(st, "reset-password", &token),
    );
    queue(st, &user.email, "Reset your password", &text).await
}

/// `POST /auth/reset-password`: sets the new password (checked first: 422 naming `password`) and ends
/// every session of the user issued before; answers the user, for a new session.
pub async fn reset_password(st: &AppState, token: &str, password: &str) -> Result<User, ApiError> {
    if let Some(problem) = security::password_problem(password) {
        return Err(ApiError::field("password", "invalid", &problem, serde_json::Value::Null));
    }
    let hash = security::hash_password_bounded(password.to_string()).await.map_err(ApiError::Internal)?;
    let now = st.clock.now_ms();
    let t = st.store.take_reset_token(&security::key_digest(token), &hash, now).await?;
    let t = live(t, now).ok_or_else(invalid_token)?;
    let user = st.store.user(t.user.as_deref().unwrap_or_default()).await?.ok_or_else(invalid_token)?;
    // The mailbox answered, so the address is the user's.
    st.store.set_email_verified(&user.id, now).await?;
    st.login_failures.succeeded(&format!("email:{}", user.email));
    Ok(user)
}

/// An invitation as the API shows it.
pub struct Invitation {
    pub email: String,
    pub role: Role,
    pub created_at: i64,
    pub expires_at: i64,
}

impl From<&AccountToken> for Invitation {
    fn from(t: &AccountToken) -> Self {
        Invitation {
            email: t.email.clone(),
            role: t.role.as_deref().and_then(Role::parse).unwrap_or(Role::Member),
            created_at: t.created_at,
            expires_at: t.expires_at,
        }
    }
}

/// Invites an address that has no account yet (the caller checked the inviter's role): a link that
/// adds the user who signs up with that address, with `role`. A second invitation replaces the first.
pub async fn invite(
    st: &AppState,
    project: &str,
    inviter: &User,
    email: &str,
    role: Role,
) -> Result<Invitation, ApiError> {
    let p = st
        .store
        .project(project)
        .await?
        .ok_or_else(|| ApiError::not_found("PROJECT_NOT_FOUND", format!("Project {project} not found")))?;
    let (token, digest) = new_token();
    let now = st.clock.now_ms();
    let t = NewToken {
        digest: &digest,
        purpose: Purpose::Invite,
        user: None,
        email,
        project: Some(project),
        role: Some(role.as_str()),
        invited_by: Some(&inviter.id),
        expires_at: now + INVITE_TTL_MS,
    };
    st.store.issue_token(&t, now).await?;
    let who = inviter.name.as_deref().map_or(inviter.email.clone(), |n| format!("{n} ({})", inviter.email));
    let text = format!(
        "Hello,\n\n{who} invited you to the project \"{project}\" on the Herald server at {public}, as {role}.\n\n\
         Sign up (or log in) with this address, {email}, then open this link within 7 days to join:\n\n{url}\n\n\
         If you do not know the sender, you can ignore this message.\n",
        project = p.name,
        public = st.config.public_url,
        role = role.as_str(),
        url = link(st, "accept-invitation", &token),
    );
    queue(st, email, &format!("You are invited to {} on Herald", p.name), &text).await?;
    Ok(Invitation { email: email.to_string(), role, created_at: now, expires_at: now + INVITE_TTL_MS })
}

/// `POST /auth/accept-invitation`: the logged-in user joins the project the token invites their
/// address to. 403 when the invitation is for another address (the token stays valid for its owner).
pub async fn accept_invitation(st: &AppState, user: &User, token: &str) -> Result<(String, Role), ApiError> {
    let digest = security::key_digest(token);
    let now = st.clock.now_ms();
    let t = st.store.token(&digest).await?.filter(|t| t.purpose == Purpose::Invite.as_str());
    let t = live(t, now).ok_or_else(invalid_token)?;
    if t.email != user.email {
        return Err(ApiError::Forbidden(
            "This invitation was sent to another address: log in as the user with that address".into(),
        ));
    }
    let taken = st.store.take_invite_token(&digest, &user.id, &user.email, now).await?;
    let t = live(taken, now).ok_or_else(invalid_token)?;
    let project = t.project.clone().ok_or_else(invalid_token)?;
    let role = st.store.membership(&project, &user.id).await?.map(|m| m.role).ok_or_else(|| {
        ApiError::not_found("PROJECT_NOT_FOUND", "The project of this invitation no longer exists".to_string())
    })?;
    Ok((project, role))
}

/// A project's open invitations.
pub async fn invitations(st: &AppState, project: &str) -> Result<Vec<Invitation>, ApiError> {
    Ok(st.store.invitations(project, st.clock.now_ms()).await?.iter().map(Invitation::from).collect())
}

/// Withdraws the invitation of an address (OWNER or ADMIN); 404 when there is none.
pub async fn withdraw(st: &AppState, project: &str, role: Role, email: &str) -> Result<(), ApiError> {
    crate::services::accounts::need(role, Role::Admin, "withdraw invitations")?;
    if st.store.withdraw_invitation(project, email).await? {
        Ok(())
    } else {
        Err(ApiError::not_found("INVITATION_NOT_FOUND", format!("No open invitation for {email}")))
    }
}
