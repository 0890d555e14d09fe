//! OAuth sign-in endpoints under `/auth` (docs/behaviour.md#oauth-sign-in): the configured providers,
//! the redirect to one, and its callback, which sets the session cookie.

use salvo::http::cookie::{Cookie, SameSite, time::Duration as CookieDuration};
use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;

use super::auth::session_cookie;
use super::body::Reply;
use super::state;
use crate::api::errors::ApiError;
use crate::error::Error;
use crate::services::oauth;

/// The cookie that carries a sign-in's sealed state between the redirect and the callback.
const FLOW_COOKIE: &str = "herald_oauth";

/// A sign-in provider.
#[derive(Serialize, ToSchema)]
pub struct ProviderOut {
    /// the key in `/auth/oauth/{provider}`
    id: String,
    name: String,
    /// `github` or `oidc`
    r#type: String,
}

pub fn router() -> Router {
    Router::new()
        .push(Router::with_path("oauth-config").get(oauth_config))
        .push(Router::with_path("oauth/{provider}").get(begin).push(Router::with_path("callback").get(callback)))
}

/// The OAuth providers this server signs in with (`[]` when none is configured).
#[endpoint(tags("auth"), responses((status_code = 200, body = Vec<ProviderOut>)))]
pub async fn oauth_config(depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let out: Vec<ProviderOut> =
            oauth::providers(&st).into_iter().map(|(id, name, kind)| ProviderOut { id, name, r#type: kind }).collect();
        Reply::ok(&out)
    })
}

fn flow_cookie(value: String, max_age: CookieDuration, secure: bool) -> Cookie<'static> {
    Cookie::build((FLOW_COOKIE, value))
        .http_only(true)
        .same_site(SameSite::Lax)
        .secure(secure)
        .path("/auth/oauth")
        .max_age(max_age)
        .build()
}

/// Redirects (302) to the provider's sign-in page, with `state`, a PKCE challenge and, for OpenID
/// Connect, a nonce; 404 `OAUTH_PROVIDER_NOT_FOUND` for a provider that is not configured.
#[endpoint(tags("auth"), responses((status_code = 302, description = "to the provider")))]
pub async fn begin(provider: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let (url, flow) = oauth::start(&st, &provider.into_inner()).await?;
        let secure = st.config.public_url.starts_with("https://");
        res.add_cookie(flow_cookie(flow, CookieDuration::minutes(10), secure));
        res.render(Redirect::found(url));
        Ok(())
    })
}

/// The provider's callback: checks `state` against the flow cookie (400 `OAUTH_STATE_MISMATCH`),
/// exchanges the code, signs in the account with the provider's verified email (created unless
/// sign-ups are disabled), sets the session cookie and redirects to the public URL.
#[endpoint(tags("auth"), responses((status_code = 302, description = "signed in")))]
pub async fn callback(
    provider: PathParam<String>,
    req: &mut Request,
    depot: &mut Depot,
    res: &mut Response,
) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let key = provider.into_inner();
        if let Some(err) = req.query::<String>("error") {
            let detail = req.query::<String>("error_description").unwrap_or_default();
            return Err(Error::refused(
                crate::error::Code::OauthFailed,
                format!("The provider refused: {err} {detail}"),
            )
            .into());
        }
        let code: String = req.query("code").unwrap_or_default();
        let state_param: String = req.query("state").unwrap_or_default();
        if code.is_empty() || code.len() > 2048 || state_param.len() > 512 {
            return Err(Error::refused(
                crate::error::Code::OauthFailed,
                "The callback needs the provider's code and state",
            )
            .into());
        }
        let flow = req.cookie(FLOW_COOKIE).map(|c| c.value().to_string());
        let user = oauth::finish(&st, &key, &code, &state_param, flow.as_deref()).await?;
        let secure = st.config.public_url.starts_with("https://");
        res.add_cookie(flow_cookie(String::new(), CookieDuration::ZERO, secure));
        res.add_cookie(session_cookie(&st, &user));
        res.render(Redirect::found(format!("{}/", st.config.public_url)));
        Ok(())
    })
}
