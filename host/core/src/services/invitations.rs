//! Invitations to a project (docs/behaviour.md#account-mail): the only way a project gains a member by
//! address. A link is mailed to the address; the user with that address who follows it while logged in
//! joins with the invited role. Whether an account has the address changes nothing in the answer.
//!
//! The mail goes out from the operator's system sender, so what a stranger can put in it is held down
//! (docs/security.md#invitations): only a verified account invites, invitations are throttled per
//! inviter, per project and per invited address, and the inviter's and the project's names are quoted
//! as plain text after fixed sentences, one line each, control characters stripped.
//!
//! Must not import: salvo, surrealdb.

use super::account_mail::{link, live, new_token, queue};
use crate::context::Context;
use crate::error::{Code, Error};
use crate::infra::security;
use crate::store::account_tokens::{AccountToken, NewToken, Purpose};
use crate::store::accounts::{Role, User};

/// How long an invitation works.
pub const INVITE_TTL_MS: i64 = 7 * 24 * 3_600_000;
pub use super::throttles::{DAY_MS, INVITER_WINDOW_MS, PER_ADDRESS, PER_INVITER, PER_PROJECT};
/// Longest name quoted in an invitation.
const QUOTED_CHARS: usize = 100;

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

fn invalid_token() -> Error {
    Error::refused(
        Code::InvalidToken,
        "This link is not valid: it was used already, a newer one replaced it, or it expired. Ask for a new one",
    )
}

/// A name as an invitation quotes it: one line (control characters and runs of white space made one
/// space), at most [`QUOTED_CHARS`] characters, double quotes made single.
pub fn quoted(name: &str) -> String {
    let spaced: String = name
        .chars()
        .map(|c| {
            if c.is_control() {
                ' '
            } else if c == '"' {
                '\''
            } else {
                c
            }
        })
        .collect();
    let one_line = spaced.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut q: String = one_line.chars().take(QUOTED_CHARS).collect();
    if one_line.chars().count() > QUOTED_CHARS {
        q.push('…');
    }
    format!("\"{q}\"")
}

/// Counts an invitation against its three throttles; 429 when one of them is spent.
async fn throttle(st: &Context, inviter: &str, project: &str, email: &str) -> Result<(), Error> {
    let t = &st.account_mail;
    let keys = [
        (&t.invites_by_inviter, format!("inviter:{inviter}"), PER_INVITER),
        (&t.invites_by_project, format!("project:{project}"), PER_PROJECT),
        (&t.invites_to_address, format!("to:{email}"), PER_ADDRESS),
    ];
    for (throttle, key, limit) in &keys {
        if let Some(wait) = throttle.blocked(key).await? {
            return Err(Error::RateLimited { limit: *limit, retry_after_secs: wait });
        }
    }
    for (throttle, key, _) in &keys {
        throttle.failed(key).await?;
    }
    Ok(())
}

/// Invites an address to a project (the caller checked the inviter's role and that the address is not
/// a member): a link that adds the logged-in user with that address, with `role`. A second invitation
/// of the address to the project replaces the first. 403 `EMAIL_NOT_VERIFIED` for an inviter whose own
/// address is not verified.
pub async fn invite(st: &Context, project: &str, inviter: &User, email: &str, role: Role) -> Result<Invitation, Error> {
    if inviter.email_verified_at.is_none() {
        return Err(Error::refused(
            Code::EmailNotVerified,
            "Verify your email address before inviting anyone: follow the link we mailed you, or ask for a new \
             one with POST /auth/request-verification",
        ));
    }
    let p = st
        .store
        .project(project)
        .await?
        .ok_or_else(|| Error::not_found("PROJECT_NOT_FOUND", format!("Project {project} not found")))?;
    throttle(st, &inviter.id, project, email).await?;
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
        password_hash: None,
        name: None,
        expires_at: now + INVITE_TTL_MS,
    };
    st.store.issue_token(&t, now).await?;
    let inviter_name = inviter.name.as_deref().map_or_else(|| "(none given)".to_string(), quoted);
    let text = format!(
        "Hello,\n\nyou are invited to join a project on the Herald server at {public}, with the role {role}. \
         To accept, sign up or log in with this address, {email}, then open this link within 7 days:\n\n{url}\n\n\
         The invitation was sent by the Herald account {from}. The names below are quoted as that account \
         gave them; Herald has not checked them:\n\n  Inviter's name: {inviter_name}\n  Project's name: \
         {project_name}\n\n\
         If you do not know the sender, ignore this message: nothing happens unless you open the link.\n",
        public = st.config.public_url,
        role = role.as_str(),
        url = link(st, "accept-invitation", &token),
        from = inviter.email,
        project_name = quoted(&p.name),
    );
    queue(st, email, "You are invited to a project on Herald", &text).await?;
    Ok(Invitation { email: email.to_string(), role, created_at: now, expires_at: now + INVITE_TTL_MS })
}

/// `POST /auth/accept-invitation`: the logged-in user joins the project the token invites their
/// address to. 403 when the invitation is for another address (the token stays valid for its owner).
pub async fn accept(st: &Context, user: &User, token: &str) -> Result<(String, Role), Error> {
    let digest = security::key_digest(token);
    let now = st.clock.now_ms();
    let t = st.store.token(&digest).await?.filter(|t| t.purpose == Purpose::Invite.as_str());
    let t = live(t, now).ok_or_else(invalid_token)?;
    if t.email != user.email {
        return Err(Error::Forbidden(
            "This invitation was sent to another address: log in as the user with that address".into(),
        ));
    }
    let taken = st.store.take_invite_token(&digest, &user.id, &user.email, now).await?;
    let t = live(taken, now).ok_or_else(invalid_token)?;
    let project = t.project.clone().ok_or_else(invalid_token)?;
    let role = st.store.membership(&project, &user.id).await?.map(|m| m.role).ok_or_else(|| {
        Error::not_found("PROJECT_NOT_FOUND", "The project of this invitation no longer exists".to_string())
    })?;
    Ok((project, role))
}

/// A project's open invitations.
pub async fn list(st: &Context, project: &str) -> Result<Vec<Invitation>, Error> {
    Ok(st.store.invitations(project, st.clock.now_ms()).await?.iter().map(Invitation::from).collect())
}

/// Withdraws the invitation of an address (OWNER or ADMIN); 404 when there is none.
pub async fn withdraw(st: &Context, project: &str, role: Role, email: &str) -> Result<(), Error> {
    crate::services::roles::need(role, Role::Admin, "withdraw invitations")?;
    if st.store.withdraw_invitation(project, email).await? {
        Ok(())
    } else {
        Err(Error::not_found("INVITATION_NOT_FOUND", format!("No open invitation for {email}")))
    }
}

#[cfg(test)]
mod tests {
    use super::quoted;

    #[test]
    fn names_are_quoted_on_one_line_and_cut() {
        assert_eq!(quoted("Acme"), "\"Acme\"");
        assert_eq!(
            quoted("Acme\r\n\r\nACTION REQUIRED: http://evil.test"),
            "\"Acme ACTION REQUIRED: http://evil.test\""
        );
        assert_eq!(quoted("say \"hi\"\u{7}"), "\"say 'hi'\"");
        let long = "x".repeat(150);
        assert_eq!(quoted(&long), format!("\"{}…\"", "x".repeat(100)));
    }
}
