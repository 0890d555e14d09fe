//! The account-mail endpoints under `/auth` (docs/behaviour.md#account-mail): verification, password
//! reset and accepting an invitation. They share `/auth`'s per-address rate limit; the two that send
//! mail are also throttled per email address.

use salvo::oapi::ToSchema;
use salvo::prelude::*;
use serde::Serialize;

use super::auth::{AUTH_MAX_BODY, COOKIE, OkOut, UserOut, client_ip, session_cookie, session_user};
use super::body::{Fields, Reply, json_object_max};
use super::state;
use crate::api::errors::ApiError;
use crate::error::Error;
use crate::infra::security::PASSWORD_CHARS;
use crate::services::{account_mail, invitations};

/// Longest token accepted (a real one is 43 characters).
const TOKEN_CHARS: usize = 200;

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct EmailBody {
    /// the account's address (not needed with a session for request-verification)
    #[salvo(schema(nullable = false, format = Email, max_length = 254))]
    email: Option<String>,
}

/// The body of a password-reset request: the address is required (there is no session to name it).
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ResetRequestBody {
    /// the account's address
    #[salvo(schema(format = Email, max_length = 254))]
    email: String,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct TokenBody {
    /// the token of the link
    #[salvo(schema(min_length = 1, max_length = 200))]
    token: String,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct VerifyBody {
    /// the token of the link
    #[salvo(schema(min_length = 1, max_length = 200))]
    token: String,
    /// the account's password: the one chosen at sign-up
    #[salvo(schema(min_length = 1, max_length = 256))]
    password: String,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ResetBody {
    #[salvo(schema(min_length = 1, max_length = 200))]
    token: String,
    /// 8 to 256 characters
    #[salvo(schema(min_length = 8, max_length = 256))]
    password: String,
}

/// The project an accepted invitation joined.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct JoinedOut {
    pub project_id: String,
    /// OWNER, ADMIN or MEMBER
    pub role: String,
}

pub fn router() -> Router {
    Router::new()
        .push(Router::with_path("request-verification").post(request_verification))
        .push(Router::with_path("verify-email").post(verify_email))
        .push(Router::with_path("request-password-reset").post(request_password_reset))
        .push(Router::with_path("reset-password").post(reset_password))
        .push(Router::with_path("accept-invitation").post(accept_invitation))
}

fn token_of(f: &mut Fields) -> Option<String> {
    f.string("token", true, 1, TOKEN_CHARS)
}

/// Mails a new verification link: to the logged-in user, or to the account with `email`. Answers 200
/// whether or not such an account exists (and sends nothing when its email is verified already).
#[endpoint(tags("auth"), request_body = EmailBody, responses((status_code = 200, body = OkOut)))]
pub async fn request_verification(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let body = json_object_max(req, AUTH_MAX_BODY).await?;
        let session = match req.cookie(COOKIE) {
            Some(_) => Some(session_user(req, &st).await?),
            None => None,
        };
        let mut f = Fields::new(&body);
        let email = f.email("email", session.is_none());
        f.finish()?;
        let email = match (&session, email) {
            (Some(u), _) => u.email.clone(),
            (None, Some(e)) => e,
            (None, None) => return Err(Error::Internal("validated email missing".into()).into()),
        };
        if account_mail::throttle(&st, &email, &client_ip(req)).await? {
            account_mail::request_verification(&st, &email).await?;
        }
        Reply::ok(&OkOut::yes())
    })
}

/// Follows a sign-up or verification link, with the account's password: a sign-up link creates the
/// account (its address verified), a verification link marks the address verified; either logs the
/// user in (sets the session cookie). 400 `INVALID_TOKEN` when the link was used, replaced by a newer
/// one or expired (24 hours); 401 for a password that is not the account's (the link keeps working);
/// 409 when the address got an account since the sign-up.
#[endpoint(tags("auth"), request_body = VerifyBody, responses((status_code = 200, body = UserOut)))]
pub async fn verify_email(req: &mut Request, depot: &mut Depot, res: &mut Response) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let body = json_object_max(req, AUTH_MAX_BODY).await?;
        let mut f = Fields::new(&body);
        let token = token_of(&mut f);
        let password = f.string("password", true, 1, PASSWORD_CHARS.1);
        f.finish()?;
        let (Some(token), Some(password)) = (token, password) else {
            return Err(Error::Internal("validated fields missing".into()).into());
        };
        let user = account_mail::verify_email(&st, &token, &password).await?;
        res.add_cookie(session_cookie(&st, &user));
        Reply::ok(&UserOut::from(&user))
    })
}

/// Mails a password-reset link (valid one hour) to the account with `email`. Answers 200 whether or
/// not such an account exists.
#[endpoint(tags("auth"), request_body = ResetRequestBody, responses((status_code = 200, body = OkOut)))]
pub async fn request_password_reset(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let body = json_object_max(req, AUTH_MAX_BODY).await?;
        let mut f = Fields::new(&body);
        let email = f.email("email", true);
        f.finish()?;
        let email = email.ok_or_else(|| Error::Internal("validated email missing".into()))?;
        if account_mail::throttle(&st, &email, &client_ip(req)).await? {
            account_mail::request_password_reset(&st, &email).await?;
        }
        Reply::ok(&OkOut::yes())
    })
}

/// Sets a new password with the token of a reset link; every earlier session of the user ends, and
/// this answer logs the user in (sets the session cookie).
#[endpoint(tags("auth"), request_body = ResetBody, responses((status_code = 200, body = UserOut)))]
pub async fn reset_password(req: &mut Request, depot: &mut Depot, res: &mut Response) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let body = json_object_max(req, AUTH_MAX_BODY).await?;
        let mut f = Fields::new(&body);
        let token = token_of(&mut f);
        let password = f.string("password", true, PASSWORD_CHARS.0, PASSWORD_CHARS.1);
        f.finish()?;
        let (Some(token), Some(password)) = (token, password) else {
            return Err(Error::Internal("validated fields missing".into()).into());
        };
        let user = account_mail::reset_password(&st, &token, &password).await?;
        res.add_cookie(session_cookie(&st, &user));
        Reply::ok(&UserOut::from(&user))
    })
}

/// Joins the project an invitation link was sent for; the logged-in user must have the invited address
/// (403 otherwise). 400 `INVALID_TOKEN` when it was used, withdrawn, replaced or expired (7 days).
#[endpoint(tags("auth"), security(("session" = [])), request_body = TokenBody, responses((status_code = 200, body = JoinedOut)))]
pub async fn accept_invitation(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let user = session_user(req, &st).await?;
        let body = json_object_max(req, AUTH_MAX_BODY).await?;
        let mut f = Fields::new(&body);
        let token = token_of(&mut f);
        f.finish()?;
        let token = token.ok_or_else(|| Error::Internal("validated token missing".into()))?;
        let (project_id, role) = invitations::accept(&st, &user, &token).await?;
        Reply::ok(&JoinedOut { project_id, role: role.as_str().to_string() })
    })
}
