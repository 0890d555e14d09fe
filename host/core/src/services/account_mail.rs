//! Account mail (docs/behaviour.md#account-mail): sign-up, email verification and password reset, each
//! a single-use link sent through Herald's own mail (`system_mail.rs`); invitations are
//! `invitations.rs`. Tokens are 32 random bytes; the store keeps their SHA-256 only, a newer token
//! replaces an older one, and taking a token deletes it in the transaction that applies it.
//!
//! No account exists that its address did not confirm: a sign-up is a token carrying the password's
//! hash, and the account is created when its link is followed with that password. Every endpoint here
//! answers the same whether or not an account has the address, and the throttle holds back the sender,
//! never the owner of the address (docs/security.md#sessions).
//!
//! Must not import: salvo, surrealdb.

use crate::context::Context;
use crate::error::{Code, Error};
use crate::infra::security;
use crate::store::StoreError;
use crate::store::account_tokens::{AccountToken, NewToken, Purpose};
use crate::store::accounts::User;

/// How long a sign-up link works.
pub const SIGNUP_TTL_MS: i64 = 24 * 3_600_000;
/// How long a verification link works.
pub const VERIFY_TTL_MS: i64 = 24 * 3_600_000;
/// How long a password-reset link works.
pub const RESET_TTL_MS: i64 = 3_600_000;
pub use super::throttles::{
    MAIL_WINDOW_MS, MAILS_PER_ADDRESS, MAILS_PER_CLIENT, MAILS_PER_CLIENT_AND_ADDRESS, Throttles,
};

fn invalid_token() -> Error {
    Error::refused(
        Code::InvalidToken,
        "This link is not valid: it was used already, a newer one replaced it, or it expired. Ask for a new one",
    )
}

/// A new token and its digest.
pub(super) fn new_token() -> (String, String) {
    let token = security::generate_token();
    let digest = security::key_digest(&token);
    (token, digest)
}

/// Stores a new token of `purpose` for `user` (replacing the older one) and answers it.
async fn issue_user_token(st: &Context, user: &User, purpose: Purpose, ttl_ms: i64) -> Result<String, Error> {
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
        password_hash: None,
        name: None,
        expires_at: now + ttl_ms,
    };
    st.store.issue_token(&t, now).await?;
    Ok(token)
}

pub(super) fn link(st: &Context, page: &str, token: &str) -> String {
    format!("{}/account/{page}?token={token}", st.config.public_url)
}

/// Counts one mail request of client `ip` about `email`: 429 once the client asked too often (about
/// this address or about any); false when the address itself was sent enough mail lately, in which
/// case the caller answers as usual and sends nothing.
pub async fn throttle(st: &Context, email: &str, ip: &str) -> Result<bool, Error> {
    let t = &st.account_mail;
    let (client, pair, address) = (format!("ip:{ip}"), format!("ip:{ip}:{email}"), format!("mail:{email}"));
    let waits = [t.by_client.blocked(&client).await?, t.by_client_address.blocked(&pair).await?];
    if let Some(wait) = waits.into_iter().flatten().max() {
        return Err(Error::RateLimited { limit: MAILS_PER_CLIENT_AND_ADDRESS, retry_after_secs: wait });
    }
    t.by_client.failed(&client).await?;
    t.by_client_address.failed(&pair).await?;
    if t.by_address.blocked(&address).await?.is_some() {
        return Ok(false);
    }
    t.by_address.failed(&address).await?;
    Ok(true)
}

pub(super) async fn queue(st: &Context, to: &str, subject: &str, text: &str) -> Result<(), Error> {
    st.system_mail.queue(&st.store, st.clock.now_ms(), to, subject, text).await.map_err(Error::Internal)?;
    st.job_wake.kind(crate::services::system_mail::SYSTEM_MAIL_JOB);
    Ok(())
}

/// `POST /auth/signup`: the same answer and the same work (a password hash) for every address. An
/// address without an account gets a link that creates it (with this password and name); one with an
/// account gets a note saying so. `send` is the throttle's answer: false sends nothing.
pub async fn sign_up(st: &Context, email: &str, password: &str, name: Option<&str>, send: bool) -> Result<(), Error> {
    if st.config.disable_signups {
        return Err(Error::Forbidden("Sign-ups are disabled on this Herald server".into()));
    }
    let hash = st.passwords.hash(password.to_string()).await.map_err(Error::Internal)?;
    if !send {
        return Ok(());
    }
    let public = &st.config.public_url;
    if st.store.user_by_email(email).await?.is_some() {
        let text = format!(
            "Hello,\n\nsomeone asked to create an account on the Herald server at {public} with this address, \
             {email}. There is one already, so nothing was created.\n\nIf it was you, log in at {public}, or \
             reset your password if you forgot it. If it was not you, you can ignore this message.\n",
        );
        return queue(st, email, "You already have a Herald account", &text).await;
    }
    let (token, digest) = new_token();
    let now = st.clock.now_ms();
    let t = NewToken {
        digest: &digest,
        purpose: Purpose::Signup,
        user: None,
        email,
        project: None,
        role: None,
        invited_by: None,
        password_hash: Some(&hash),
        name,
        expires_at: now + SIGNUP_TTL_MS,
    };
    st.store.issue_token(&t, now).await?;
    let text = format!(
        "Hello,\n\nto finish creating your account on the Herald server at {public}, open this link within \
         24 hours and enter the password you chose:\n\n{url}\n\n\
         If you did not sign up, you can ignore this message: no account is created without the link.\n",
        url = link(st, "verify-email", &token),
    );
    queue(st, email, "Confirm your email address", &text).await
}

/// Sends `user` a verification link (replacing any earlier one); nothing when the email is verified.
pub async fn send_verification(st: &Context, user: &User) -> Result<(), Error> {
    if user.email_verified_at.is_some() {
        return Ok(());
    }
    let token = issue_user_token(st, user, Purpose::Verify, VERIFY_TTL_MS).await?;
    let text = format!(
        "Hello,\n\nplease confirm that {email} is your address by opening this link within 24 hours and \
         entering your password:\n\n{url}\n\n\
         If you did not create an account on the Herald server at {public}, you can ignore this message.\n",
        email = user.email,
        url = link(st, "verify-email", &token),
        public = st.config.public_url,
    );
    queue(st, &user.email, "Verify your email address", &text).await
}

/// `POST /auth/request-verification`: a new link for the account with this address, when it has one
/// that is not verified yet. Answers the same either way.
pub async fn request_verification(st: &Context, email: &str) -> Result<(), Error> {
    match st.store.user_by_email(email).await? {
        Some(u) => send_verification(st, &u).await,
        None => Ok(()),
    }
}

/// A stored token of one of `purposes` that has not expired.
async fn live_token(st: &Context, digest: &str, purposes: &[Purpose]) -> Result<AccountToken, Error> {
    let now = st.clock.now_ms();
    let t = st.store.token(digest).await?.filter(|t| purposes.iter().any(|p| p.as_str() == t.purpose));
    live(t, now).ok_or_else(invalid_token)
}

/// `POST /auth/verify-email {token, password}`: a sign-up link creates its account, a verification
/// link marks its account's address verified; either needs the account's password, so the person who
/// chose it is the one who reads the mailbox (a link followed by someone else does nothing). Wrong
/// passwords count like failed logins of the address. Answers the user, for a new session.
pub async fn verify_email(st: &Context, token: &str, password: &str) -> Result<User, Error> {
    let digest = security::key_digest(token);
    let t = live_token(st, &digest, &[Purpose::Signup, Purpose::Verify]).await?;
    let failures = format!("email:{}", t.email);
    if let Some(wait) = st.login_failures.blocked(&failures).await? {
        return Err(Error::RateLimited { limit: crate::services::throttles::LOGIN_FAILURES, retry_after_secs: wait });
    }
    let signup = t.purpose == Purpose::Signup.as_str();
    let user = match (signup, &t.user) {
        (true, _) => None,
        (false, Some(id)) => Some(st.store.user(id).await?.ok_or_else(invalid_token)?),
        (false, None) => return Err(invalid_token()),
    };
    let hash = match &user {
        Some(u) => u.password_hash.clone(),
        None => t.password_hash.clone().unwrap_or_default(),
    };
    if !st.passwords.verify(password.to_string(), hash).await {
        st.login_failures.failed(&failures).await?;
        return Err(Error::Unauthenticated(
            "That is not the password of this account: enter the password chosen when it was signed up".into(),
        ));
    }
    st.login_failures.succeeded(&failures).await?;
    let now = st.clock.now_ms();
    let id = match user {
        Some(u) => {
            let taken = st.store.take_verify_token(&digest, now).await?;
            live(taken, now).ok_or_else(invalid_token)?;
            u.id
        }
        None => {
            let id = uuid::Uuid::now_v7().to_string();
            match st.store.take_signup_token(&digest, &id, now).await {
                Ok(taken) => live(taken, now).map(|_| id).ok_or_else(invalid_token)?,
                Err(StoreError::Conflict(_)) => {
                    return Err(Error::Conflict(format!(
                        "An account with the address {} exists already: log in, or reset its password",
                        t.email
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    st.store.user(&id).await?.ok_or_else(invalid_token)
}

/// A taken token that had not expired.
pub(super) fn live(t: Option<AccountToken>, now: i64) -> Option<AccountToken> {
    t.filter(|t| t.expires_at > now)
}

/// `POST /auth/request-password-reset`: a reset link for the account with this address, when there is
/// one. Answers the same either way.
pub async fn request_password_reset(st: &Context, email: &str) -> Result<(), Error> {
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
/// every session of the user issued before; answers the user, for a new session. The token is looked
/// up before the password is hashed, so a bogus reset costs no hash.
pub async fn reset_password(st: &Context, token: &str, password: &str) -> Result<User, Error> {
    if let Some(problem) = security::password_problem(password) {
        return Err(Error::field("password", "invalid", &problem, serde_json::Value::Null));
    }
    let digest = security::key_digest(token);
    live_token(st, &digest, &[Purpose::Reset]).await?;
    let hash = st.passwords.hash(password.to_string()).await.map_err(Error::Internal)?;
    let now = st.clock.now_ms();
    let t = st.store.take_reset_token(&digest, &hash, now).await?;
    let t = live(t, now).ok_or_else(invalid_token)?;
    let user = st.store.user(t.user.as_deref().unwrap_or_default()).await?.ok_or_else(invalid_token)?;
    // The mailbox answered, so the address is the user's.
    st.store.set_email_verified(&user.id, now).await?;
    st.login_failures.succeeded(&format!("email:{}", user.email)).await?;
    Ok(user)
}
