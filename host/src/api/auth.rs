//! Authentication: dashboard sessions (`/auth/*`, the `herald_token` cookie) and API keys
//! (`Authorization: Bearer pk_…|sk_…`), see docs/behaviour.md#keys-and-authentication, plus the
//! per-project rate limit (docs/behaviour.md#limits) applied once the caller is known.

use salvo::http::cookie::{Cookie, SameSite, time::Duration as CookieDuration};
use salvo::oapi::ToSchema;
use salvo::prelude::*;
use serde::Serialize;

use super::body::{Fields, Reply, json_object_max};
use super::state;
use crate::api::errors::ApiError;
use crate::error::Error;
use crate::infra::ratelimit::Decision;
use crate::infra::security::{self, KeyKind, PASSWORD_CHARS, SessionClaims};
use crate::services::accounts;
use crate::state::{AppState, KeyEntry};
use crate::store::accounts::{Role, User};

pub const COOKIE: &str = "herald_token";
const SESSION_DAYS: i64 = 7;

/// A user as the API shows it.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct UserOut {
    pub id: String,
    pub email: String,
    pub name: Option<String>,
    /// Whether the user followed a verification link sent to `email`
    pub email_verified: bool,
    pub created_at: String,
}

impl From<&User> for UserOut {
    fn from(u: &User) -> Self {
        UserOut {
            id: u.id.clone(),
            email: u.email.clone(),
            name: u.name.clone(),
            email_verified: u.email_verified_at.is_some(),
            created_at: crate::infra::clock::rfc3339(u.created_at),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct SignupBody {
    #[salvo(schema(format = Email, max_length = 254))]
    email: String,
    /// 8 to 256 characters
    #[salvo(schema(min_length = 8, max_length = 256))]
    password: String,
    #[salvo(schema(max_length = 100, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$"))]
    name: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct LoginBody {
    #[salvo(schema(format = Email, max_length = 254))]
    email: String,
    #[salvo(schema(min_length = 1, max_length = 256))]
    password: String,
}

#[derive(Serialize, ToSchema)]
pub struct OkOut {
    success: bool,
}

impl OkOut {
    pub fn yes() -> Self {
        OkOut { success: true }
    }
}

/// `/auth/...`, throttled per client address; `api_router` adds the account-mail and OAuth routes under it.
pub fn router() -> Router {
    Router::with_path("auth")
        .hoop(rate_limit_by_ip)
        .push(Router::with_path("signup").post(signup))
        .push(Router::with_path("login").post(login))
        .push(Router::with_path("logout").get(logout).post(logout))
}

/// A new session of `user`, under the user's current session epoch.
pub fn session_cookie(st: &AppState, user: &User) -> Cookie<'static> {
    let now = st.clock.now_ms() / 1000;
    let claims = SessionClaims {
        sub: user.id.clone(),
        iat: now,
        exp: now + SESSION_DAYS * 86_400,
        sid: uuid::Uuid::new_v4().to_string(),
        ep: user.session_epoch.unwrap_or(0),
    };
    let token = security::sign_jwt(&st.session_key, &claims);
    Cookie::build((COOKIE, token))
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(st.config.public_url.starts_with("https://"))
        .path("/")
        .max_age(CookieDuration::days(SESSION_DAYS))
        .build()
}

/// Sign up: answers 202 for every valid address, whether or not an account has it, and mails the
/// address either a link that creates the account (followed with this password:
/// `POST /auth/verify-email`) or a note that it has one already. No session is set. 403 when the
/// deployment disabled sign-ups; 429 for a client that asked too often.
#[endpoint(tags("auth"), request_body = SignupBody, responses((status_code = 202, body = OkOut)))]
pub async fn signup(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        if st.config.disable_signups {
            return Err(Error::Forbidden("Sign-ups are disabled on this Herald server".into()).into());
        }
        let body = json_object_max(req, AUTH_MAX_BODY).await?;
        let mut f = Fields::new(&body);
        let email = f.email("email", true);
        let password = f.string("password", true, PASSWORD_CHARS.0, PASSWORD_CHARS.1);
        let name = f.line("name", false, 0, 100).map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        f.finish()?;
        let (Some(email), Some(password)) = (email, password) else {
            return Err(Error::Internal("validated fields missing".into()).into());
        };
        let send = crate::services::account_mail::throttle(&st, &email, &client_ip(req)).await?;
        crate::services::account_mail::sign_up(&st, &email, &password, name.as_deref(), send).await?;
        Reply::with(StatusCode::ACCEPTED, &OkOut::yes())
    })
}

/// Log in with email and password; sets the session cookie.
#[endpoint(tags("auth"), request_body = LoginBody, responses((status_code = 200, body = UserOut)))]
pub async fn login(req: &mut Request, depot: &mut Depot, res: &mut Response) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let body = json_object_max(req, AUTH_MAX_BODY).await?;
        let mut f = Fields::new(&body);
        let email = f.email("email", true);
        let password = f.string("password", true, 1, PASSWORD_CHARS.1);
        f.finish()?;
        let (Some(email), Some(password)) = (email, password) else {
            return Err(Error::Internal("validated fields missing".into()).into());
        };
        // Repeated failures slow down, per account and per address (docs/security.md).
        let (account, address) = (format!("email:{email}"), format!("ip:{}", client_ip(req)));
        let waits = [st.login_failures.blocked(&account).await?, st.login_failures.blocked(&address).await?];
        if let Some(wait) = waits.into_iter().flatten().max() {
            return Err(Error::RateLimited { limit: LOGIN_FAILURES, retry_after_secs: wait }.into());
        }
        let user = accounts::user_by_email(&st, &email).await?;
        // Verify against a dummy hash when the user does not exist, so timing does not reveal accounts.
        let hash = user.as_ref().map(|u| u.password_hash.clone()).unwrap_or_else(|| DUMMY_HASH.clone());
        let ok = st.passwords.verify(password, hash).await;
        match user {
            Some(u) if ok => {
                st.login_failures.succeeded(&account).await?;
                res.add_cookie(session_cookie(&st, &u));
                Reply::ok(&UserOut::from(&u))
            }
            _ => {
                st.login_failures.failed(&account).await?;
                st.login_failures.failed(&address).await?;
                Err(Error::Unauthenticated("Invalid email or password".into()).into())
            }
        }
    })
}

/// A real hash of a random password: login against an unknown email costs the same as a wrong password.
static DUMMY_HASH: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| security::hash_password(&security::generate_secret()).unwrap_or_default());

/// Log out: clears the session cookie and revokes its token. `POST` is what the dashboard uses; `GET`
/// (the interface's form) is refused from another site like any cookie write, so a link or an image
/// elsewhere cannot log a user out (docs/security.md#sessions).
#[endpoint(tags("auth"), responses((status_code = 200, body = OkOut), (status_code = 403, description = "from another site")))]
pub async fn logout(req: &mut Request, depot: &mut Depot, res: &mut Response) -> Result<Reply, ApiError> {
    boxed!({
        if let Some(why) = from_another_site(req) {
            return Err(Error::Forbidden(why).into());
        }
        // The token dies with the logout, not only the cookie: a copy of it is refused from now on.
        let st = state(depot)?;
        let token = req.cookie(COOKIE).map(|c| c.value().to_string());
        if let Some(claims) =
            token.and_then(|t| security::verify_session(&st.session_key, &t, st.clock.now_ms() / 1000))
        {
            accounts::revoke_session(&st, &claims.sid, claims.exp * 1000).await?;
        }
        let expired = Cookie::build((COOKIE, "")).http_only(true).path("/").max_age(CookieDuration::ZERO).build();
        res.add_cookie(expired);
        Reply::ok(&OkOut { success: true })
    })
}

/// The logged-in user, from the session cookie; 401 `UNAUTHORIZED` without a valid one, 403 for a
/// cross-origin request that changes state ([`cross_origin`]): the cookie alone never authorizes a
/// forged write (docs/security.md#sessions).
pub async fn session_user(req: &Request, st: &AppState) -> Result<User, ApiError> {
    if let Some(why) = cross_origin(req) {
        return Err(Error::Forbidden(why).into());
    }
    let token = req
        .cookie(COOKIE)
        .map(|c| c.value().to_string())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::Unauthenticated("Log in first: this endpoint needs a dashboard session".into()))?;
    let claims = security::verify_session(&st.session_key, &token, st.clock.now_ms() / 1000)
        .ok_or_else(|| Error::Unauthenticated("The session is invalid or expired; log in again".into()))?;
    Ok(accounts::session_user(st, &claims.sid, &claims.sub, claims.ep).await?)
}

/// Why a request authenticated by the cookie is refused as cross-origin, or None to let it through. Safe
/// methods (GET, HEAD, OPTIONS) always pass. Otherwise a browser's `Sec-Fetch-Site` decides: only
/// `same-origin` and `none` (typed by the user) pass, so a sibling subdomain (`same-site`, which
/// SameSite=Lax lets the cookie ride along with) is refused too. Without that header, an `Origin` must
/// name this host; a request with neither comes from no browser (or one from before 2020 that sends
/// the Lax cookie only from this site) and passes. The model is Go 1.25's `CrossOriginProtection`.
pub fn cross_origin(req: &Request) -> Option<String> {
    use salvo::http::Method;
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return None;
    }
    from_another_site(req)
}

/// Why a request comes from another site whatever its method ([`cross_origin`]'s rule), or None.
pub fn from_another_site(req: &Request) -> Option<String> {
    let header = |name: &str| req.headers().get(name).map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    if let Some(site) = header("sec-fetch-site") {
        return match site.as_str() {
            "same-origin" | "none" => None,
            other => Some(format!(
                "Cross-origin request refused: a request from another site ({other}) cannot change state with the session cookie"
            )),
        };
    }
    let origin = header("origin")?;
    let host = header("host").unwrap_or_default();
    let origin_host = origin.split_once("://").map(|(_, rest)| rest).unwrap_or("");
    if !host.is_empty() && origin_host == host {
        return None;
    }
    Some(format!("Cross-origin request refused: Origin {origin} is not this server ({host})"))
}

/// Applies the rate limit for `key` and writes the RateLimit headers.
pub fn apply_rate_limit(st: &AppState, key: &str, res: &mut Response) -> Result<(), ApiError> {
    if !st.limiter.enabled() {
        return Ok(());
    }
    let d: Decision = st.limiter.check(key);
    let h = res.headers_mut();
    for (name, v) in [
        ("ratelimit-limit", d.limit as u64),
        ("ratelimit-remaining", d.remaining as u64),
        ("ratelimit-reset", d.reset_secs),
    ] {
        if let Ok(v) = v.to_string().parse() {
            h.insert(name, v);
        }
    }
    if d.allowed {
        Ok(())
    } else {
        Err(Error::RateLimited { limit: d.limit, retry_after_secs: d.retry_after_secs }.into())
    }
}

pub use crate::services::accounts::LOGIN_FAILURES;
/// Largest body `/auth` reads: an email, a password and a name.
pub(crate) const AUTH_MAX_BODY: usize = 16 * 1024;

/// The client's address: the peer, or the one trusted proxies name ([`super::client_addr`]).
pub(crate) fn client_ip(req: &Request) -> String {
    super::client_addr::of(req)
}

/// Rate limit for unauthenticated account endpoints, per client address.
#[handler]
async fn rate_limit_by_ip(req: &mut Request, depot: &mut Depot, res: &mut Response, ctrl: &mut FlowCtrl) {
    boxed!(() => {
        let Ok(st) = state(depot) else { return };
        let key = format!("ip:{}", client_ip(req));
        if let Err(e) = apply_rate_limit(&st, &key, res) {
            e.write(req, depot, res).await;
            ctrl.skip_rest();
        }
    })
}

/// The project a request acts on, once authenticated.
#[derive(Debug, Clone)]
pub struct ProjectCtx {
    pub project_id: String,
    /// True for a secret key or a dashboard session; false for a public key.
    pub secret: bool,
    /// The dashboard user, when authenticated by session cookie.
    pub user_id: Option<String>,
}

/// Which keys an endpoint accepts.
#[derive(Clone, Copy)]
pub enum KeyRule {
    /// Only the secret key (every endpoint but track).
    SecretOnly,
    /// Public or secret key (`POST /v1/track`; docs/behaviour.md#keys-and-authentication).
    AnyKey,
}

/// Middleware: authenticates by API key (or by session cookie plus `X-Project-Id`), checks
/// the key type, applies the project's rate limit and puts a [`ProjectCtx`] in the depot.
pub struct ApiKeyAuth(pub KeyRule);

#[async_trait]
impl Handler for ApiKeyAuth {
    async fn handle(&self, req: &mut Request, depot: &mut Depot, res: &mut Response, ctrl: &mut FlowCtrl) {
        let result = authorize(req, depot, res, self.0).await;
        match result {
            Ok(ctx) => {
                depot.insert_typed(ctx);
            }
            Err(e) => {
                e.write(req, depot, res).await;
                ctrl.skip_rest();
            }
        }
    }
}

/// The key check of [`ApiKeyAuth`], boxed outside its `#[async_trait]` method (see
/// [`crate::api::HandlerFuture`]).
fn authorize<'a>(
    req: &'a Request,
    depot: &'a Depot,
    res: &'a mut Response,
    rule: KeyRule,
) -> crate::api::HandlerFuture<'a, Result<ProjectCtx, ApiError>> {
    Box::pin(async move {
        let st = state(depot)?;
        let ctx = authenticate(req, &st, rule).await?;
        apply_rate_limit(&st, &format!("project:{}", ctx.project_id), res)?;
        Ok(ctx)
    })
}

pub async fn authenticate(req: &Request, st: &AppState, rule: KeyRule) -> Result<ProjectCtx, ApiError> {
    let header: Option<String> = req.header("authorization");
    let Some(header) = header.filter(|h| !h.trim().is_empty()) else {
        // Dashboard session with an explicit project.
        if req.cookie(COOKIE).is_some() {
            let user = session_user(req, st).await?;
            let project: Option<String> = req.header("x-project-id");
            let project =
                project.ok_or_else(|| Error::MissingAuth("Send X-Project-Id with a dashboard session".into()))?;
            accounts::membership(st, &project, &user.id)
                .await?
                .ok_or_else(|| Error::Forbidden("You are not a member of this project".into()))?;
            return Ok(ProjectCtx { project_id: project, secret: true, user_id: Some(user.id) });
        }
        return Err(Error::MissingAuth("Missing API key: send Authorization: Bearer <key>".into()).into());
    };
    let key = header
        .strip_prefix("Bearer ")
        .or_else(|| header.strip_prefix("bearer "))
        .map(str::trim)
        .ok_or_else(|| Error::InvalidApiKey("The Authorization header must be: Bearer <API key>".into()))?;
    let kind = security::key_kind(key).ok_or_else(|| Error::InvalidApiKey("Invalid API key".into()))?;
    let digest = security::key_digest(key);
    let entry = match st.keys.get(&digest) {
        Some(e) => e,
        None => {
            let generation = st.keys.generation();
            let (project, is_secret) = accounts::project_by_key(st, &digest)
                .await?
                .ok_or_else(|| Error::InvalidApiKey("Invalid API key".into()))?;
            let e = KeyEntry { project_id: project.id, is_secret, disabled: project.disabled };
            st.keys.put(digest, e.clone(), generation);
            e
        }
    };
    // The prefix and the stored kind must agree (a pk_ string can never match a secret digest, but be strict).
    if entry.is_secret != (kind == KeyKind::Secret) {
        return Err(Error::InvalidApiKey("Invalid API key".into()).into());
    }
    if matches!(rule, KeyRule::SecretOnly) && !entry.is_secret {
        return Err(Error::InvalidApiKey(
            "This endpoint requires a secret key (sk_…); public keys only work on POST /v1/track".into(),
        )
        .into());
    }
    if entry.disabled {
        return Err(Error::ProjectDisabled.into());
    }
    Ok(ProjectCtx { project_id: entry.project_id, secret: entry.is_secret, user_id: None })
}

/// The authenticated project of this request (set by [`ApiKeyAuth`]).
pub fn project(depot: &Depot) -> Result<ProjectCtx, ApiError> {
    depot.get_typed::<ProjectCtx>().cloned().map_err(|_| Error::Internal("route is missing ApiKeyAuth".into()).into())
}

/// Middleware: requires a dashboard session and applies the rate limit per user.
#[handler]
pub async fn require_session(req: &mut Request, depot: &mut Depot, res: &mut Response, ctrl: &mut FlowCtrl) {
    boxed!(() => {
        let result = async {
            let st = state(depot)?;
            let user = session_user(req, &st).await?;
            apply_rate_limit(&st, &format!("user:{}", user.id), res)?;
            Ok::<_, ApiError>(user)
        }
        .await;
        match result {
            Ok(user) => {
                depot.insert_typed(user);
            }
            Err(e) => {
                e.write(req, depot, res).await;
                ctrl.skip_rest();
            }
        }
    })
}

/// The logged-in user of this request (set by [`require_session`]).
pub fn user(depot: &Depot) -> Result<User, ApiError> {
    depot.get_typed::<User>().cloned().map_err(|_| Error::Internal("route is missing require_session".into()).into())
}

/// The caller's role in a project; 404 when the caller is not a member (the project's existence is not
/// revealed to outsiders).
pub async fn role_in(st: &AppState, project: &str, user: &User) -> Result<Role, ApiError> {
    Ok(accounts::role_in(st, project, &user.id).await?)
}
