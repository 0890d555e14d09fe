//! OAuth sign-in (docs/behaviour.md#oauth-sign-in): GitHub and any OpenID Connect provider, by the
//! authorization-code flow with `state` and PKCE (S256) through the `oauth2` crate. The flow's secrets
//! (state, PKCE verifier, OIDC nonce) ride in a short-lived cookie sealed with a key derived from the
//! server secret. The callback exchanges the code, learns the user's verified email (GitHub's emails
//! API; an OIDC ID token checked against the provider's keys, issuer, audience and nonce), and signs in
//! the account with that email, creating it unless sign-ups are disabled.
//!
//! Must not import: salvo, surrealdb.

use jsonwebtoken::{DecodingKey, Validation, decode, decode_header, jwk::JwkSet};
use oauth2::basic::{
    BasicErrorResponse, BasicRevocationErrorResponse, BasicTokenIntrospectionResponse, BasicTokenType,
};
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet, EndpointSet, ExtraTokenFields,
    PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, StandardRevocableToken, StandardTokenResponse,
    TokenResponse, TokenUrl,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::OAuthProvider;
use crate::context::Context;
use crate::error::{Code, Error};
use crate::infra::security;
use crate::services::oauth_documents::{failed, http};
use crate::store::accounts::User;

/// How long a sign-in may take between the redirect and the callback.
pub const FLOW_TTL_MS: i64 = 10 * 60_000;

/// The `id_token` of an OpenID Connect token response.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdTokenField {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_token: Option<String>,
}

impl ExtraTokenFields for IdTokenField {}

type Client = oauth2::Client<
    BasicErrorResponse,
    StandardTokenResponse<IdTokenField, BasicTokenType>,
    BasicTokenIntrospectionResponse,
    StandardRevocableToken,
    BasicRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointSet,
>;

fn mismatch() -> Error {
    Error::refused(
        Code::OauthStateMismatch,
        "This sign-in did not start here, or took longer than 10 minutes: start it again",
    )
}

/// A configured provider as `/auth/oauth-config` lists it: (key, display name, kind).
pub fn providers(st: &Context) -> Vec<(String, String, String)> {
    st.config
        .oauth
        .iter()
        .map(|(k, p)| {
            let name = p.name.clone().unwrap_or_else(|| if p.kind == "github" { "GitHub".into() } else { k.clone() });
            (k.clone(), name, p.kind.clone())
        })
        .collect()
}

fn provider<'a>(st: &'a Context, key: &str) -> Result<&'a OAuthProvider, Error> {
    st.config
        .oauth
        .get(key)
        .ok_or_else(|| Error::not_found("OAUTH_PROVIDER_NOT_FOUND", format!("No sign-in provider is called {key}")))
}

/// A provider's endpoints: configured, GitHub's, or from the OIDC discovery document.
struct Endpoints {
    authorize: String,
    token: String,
    userinfo: Option<String>,
    jwks: Option<String>,
    /// What an ID token's `iss` must be: the configured issuer (OIDC only).
    issuer: Option<String>,
}

/// How long a discovery document or a key set is used before it is fetched again.
pub const DOCUMENT_TTL_MS: i64 = 3_600_000;
/// A key set is fetched again early for a key id it lacks (a provider rotated its keys), at most this
/// often, so ID tokens naming made-up keys cannot make Herald fetch it on every callback.
pub const JWKS_REFRESH_MS: i64 = 60_000;

async fn endpoints(st: &Context, p: &OAuthProvider) -> Result<Endpoints, Error> {
    if p.kind == "github" {
        return Ok(Endpoints {
            authorize: p.authorize_url.clone().unwrap_or_else(|| "https://github.com/login/oauth/authorize".into()),
            token: p.token_url.clone().unwrap_or_else(|| "https://github.com/login/oauth/access_token".into()),
            userinfo: None,
            jwks: None,
            issuer: None,
        });
    }
    // The configuration requires an issuer for OpenID Connect.
    let issuer = p.issuer.as_deref().unwrap_or_default().trim_end_matches('/').to_string();
    let discovered: Value = match (&p.authorize_url, &p.token_url, &p.jwks_url) {
        (Some(_), Some(_), Some(_)) => Value::Null,
        _ => {
            let url = format!("{issuer}/.well-known/openid-configuration");
            let doc = st.oauth_documents.get(st.clock.now_ms(), &url, DOCUMENT_TTL_MS).await?;
            // OpenID Connect Discovery: the document's issuer is the one it was fetched for, exactly, so a
            // document served elsewhere cannot speak for this provider.
            let named = doc.get("issuer").and_then(Value::as_str).map(|i| i.trim_end_matches('/'));
            if named != Some(issuer.as_str()) {
                return Err(failed(format!(
                    "{url} names the issuer {}, not {issuer}",
                    named.map_or_else(|| "(none)".to_string(), |i| format!("{i:?}"))
                )));
            }
            doc
        }
    };
    let pick = |set: &Option<String>, key: &str| {
        set.clone().or_else(|| discovered.get(key).and_then(Value::as_str).map(str::to_string))
    };
    Ok(Endpoints {
        authorize: pick(&p.authorize_url, "authorization_endpoint")
            .ok_or_else(|| failed("the provider has no authorization endpoint"))?,
        token: pick(&p.token_url, "token_endpoint").ok_or_else(|| failed("the provider has no token endpoint"))?,
        userinfo: pick(&p.userinfo_url, "userinfo_endpoint"),
        jwks: pick(&p.jwks_url, "jwks_uri"),
        issuer: Some(issuer),
    })
}

fn client(st: &Context, key: &str, p: &OAuthProvider, e: &Endpoints) -> Result<Client, Error> {
    let redirect = format!("{}/auth/oauth/{key}/callback", st.config.public_url);
    let bad = |what: &str, err: oauth2::url::ParseError| failed(format!("the provider's {what} is not a URL: {err}"));
    Ok(oauth2::Client::new(ClientId::new(p.client_id.clone()))
        .set_client_secret(ClientSecret::new(p.client_secret.clone()))
        .set_auth_uri(AuthUrl::new(e.authorize.clone()).map_err(|x| bad("authorization endpoint", x))?)
        .set_token_uri(TokenUrl::new(e.token.clone()).map_err(|x| bad("token endpoint", x))?)
        .set_redirect_uri(RedirectUrl::new(redirect).map_err(|x| bad("redirect URL", x))?))
}

/// What the flow cookie holds.
#[derive(Serialize, Deserialize)]
struct Flow {
    /// provider key
    p: String,
    /// state
    s: String,
    /// PKCE verifier
    v: String,
    /// OIDC nonce
    n: String,
    exp: i64,
}

fn flow_key(st: &Context) -> [u8; 32] {
    let mut k = [0u8; 32];
    let d = security::derive_key_from(&st.session_key, "herald-oauth-flow-v1");
    k.copy_from_slice(&d[..32]);
    k
}

/// Where to send the browser to sign in with `key`, and the flow cookie to set.
pub async fn start(st: &Context, key: &str) -> Result<(String, String), Error> {
    let p = provider(st, key)?;
    let e = endpoints(st, p).await?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let nonce = security::generate_token();
    let c = client(st, key, p, &e)?;
    let mut req = c.authorize_url(CsrfToken::new_random).set_pkce_challenge(challenge);
    let scopes = p.scopes.clone().unwrap_or_else(|| match p.kind.as_str() {
        "github" => vec!["read:user".into(), "user:email".into()],
        _ => vec!["openid".into(), "email".into(), "profile".into()],
    });
    for s in scopes {
        req = req.add_scope(Scope::new(s));
    }
    if p.kind == "oidc" {
        req = req.add_extra_param("nonce", nonce.clone());
    }
    let (url, state) = req.url();
    let flow = Flow {
        p: key.into(),
        s: state.secret().clone(),
        v: verifier.secret().clone(),
        n: nonce,
        exp: st.clock.now_ms() + FLOW_TTL_MS,
    };
    let plain = serde_json::to_vec(&flow).map_err(|e| Error::Internal(e.to_string()))?;
    let cookie = crate::infra::dkim::seal(&flow_key(st), &plain).map_err(|e| Error::Internal(e.to_string()))?;
    Ok((url.to_string(), cookie))
}

/// Who the provider says signed in.
struct Identity {
    email: String,
    name: Option<String>,
}

/// The callback: checks the flow, exchanges the code and signs in (or up) the user with the verified
/// email the provider reports.
pub async fn finish(st: &Context, key: &str, code: &str, state: &str, cookie: Option<&str>) -> Result<User, Error> {
    let p = provider(st, key)?;
    let flow: Flow = cookie
        .and_then(|c| crate::infra::dkim::open(&flow_key(st), c).ok())
        .and_then(|plain| serde_json::from_slice(&plain).ok())
        .ok_or_else(mismatch)?;
    if flow.p != key || flow.s != state || flow.exp < st.clock.now_ms() {
        return Err(mismatch());
    }
    let e = endpoints(st, p).await?;
    let token = client(st, key, p, &e)?
        .exchange_code(AuthorizationCode::new(code.to_string()))
        .set_pkce_verifier(PkceCodeVerifier::new(flow.v.clone()))
        .request_async(&http()?)
        .await
        .map_err(|x| failed(format!("the provider did not exchange the code: {x}")))?;
    let access = token.access_token().secret().clone();
    let who = match p.kind.as_str() {
        "github" => github_identity(p, &access).await?,
        _ => oidc_identity(st, p, &e, token.extra_fields().id_token.as_deref(), &access, &flow.n).await?,
    };
    sign_in(st, who).await
}

async fn get_json(url: &str, bearer: &str) -> Result<Value, Error> {
    let res = http()?
        .get(url)
        .bearer_auth(bearer)
        .header("accept", "application/json")
        .send()
        .await
        .map_err(|e| failed(format!("{url} did not answer: {e}")))?;
    if !res.status().is_success() {
        return Err(failed(format!("{url} answered {}", res.status())));
    }
    res.json().await.map_err(|e| failed(format!("{url} answered something unreadable: {e}")))
}

/// GitHub: the primary, verified address of the account's emails.
async fn github_identity(p: &OAuthProvider, access: &str) -> Result<Identity, Error> {
    let api = p.api_base.clone().unwrap_or_else(|| "https://api.github.com".into());
    let api = api.trim_end_matches('/');
    let emails = get_json(&format!("{api}/user/emails"), access).await?;
    let email = emails
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["primary"] == true && m["verified"] == true)
        .and_then(|m| m["email"].as_str())
        .ok_or_else(unverified)?;
    let user = get_json(&format!("{api}/user"), access).await.unwrap_or(Value::Null);
    let name = user["name"].as_str().or(user["login"].as_str());
    identity(email, name)
}

fn unverified() -> Error {
    Error::refused(Code::OauthEmailUnverified, "The provider does not report a verified email address for this account")
}

/// The claims Herald reads from an ID token.
#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    nonce: Option<String>,
    #[serde(default)]
    email: Option<String>,
    #[serde(default)]
    email_verified: Option<Value>,
    #[serde(default)]
    name: Option<String>,
}

/// OpenID Connect: the ID token, signed by one of the provider's keys, for this client, from this
/// issuer, unexpired, with this flow's nonce; its email when verified (else the userinfo endpoint's).
async fn oidc_identity(
    st: &Context,
    p: &OAuthProvider,
    e: &Endpoints,
    id_token: Option<&str>,
    access: &str,
    nonce: &str,
) -> Result<Identity, Error> {
    let token = id_token.ok_or_else(|| failed("the provider sent no ID token"))?;
    let header = decode_header(token).map_err(|x| failed(format!("the ID token is malformed: {x}")))?;
    let jwks_url = e.jwks.as_deref().ok_or_else(|| failed("the provider publishes no keys (jwks_uri)"))?;
    let key_set = |doc: Value| -> Result<JwkSet, Error> {
        serde_json::from_value(doc).map_err(|x| failed(format!("{jwks_url} is not a key set: {x}")))
    };
    let find = |keys: &JwkSet| match &header.kid {
        Some(kid) => keys.find(kid).cloned(),
        None => keys.keys.first().cloned(),
    };
    let mut jwk = find(&key_set(st.oauth_documents.get(st.clock.now_ms(), jwks_url, DOCUMENT_TTL_MS).await?)?);
    if jwk.is_none() {
        // Perhaps the provider rotated its keys since the set was fetched.
        jwk = find(&key_set(st.oauth_documents.get(st.clock.now_ms(), jwks_url, JWKS_REFRESH_MS).await?)?);
    }
    let jwk = jwk.ok_or_else(|| failed("the ID token names a key the provider does not publish"))?;
    let key = DecodingKey::from_jwk(&jwk).map_err(|x| failed(format!("the provider's key is unusable: {x}")))?;
    let mut v = Validation::new(header.alg);
    v.set_audience(&[p.client_id.as_str()]);
    v.set_issuer(&[e.issuer.as_deref().unwrap_or_default()]);
    v.set_required_spec_claims(&["exp", "aud", "iss"]);
    let claims =
        decode::<Claims>(token, &key, &v).map_err(|x| failed(format!("the ID token does not check out: {x}")))?.claims;
    if claims.nonce.as_deref() != Some(nonce) {
        return Err(failed("the ID token was not issued for this sign-in (nonce)"));
    }
    let verified =
        |v: &Option<Value>| matches!(v, Some(Value::Bool(true))) || v.as_ref().and_then(Value::as_str) == Some("true");
    let (email, ok, name) = match (claims.email, &e.userinfo) {
        (Some(m), _) => (m, verified(&claims.email_verified), claims.name),
        (None, Some(url)) => {
            let info = get_json(url, access).await?;
            let m = info["email"].as_str().map(str::to_string).ok_or_else(unverified)?;
            let ok = verified(&info.get("email_verified").cloned());
            (m, ok, info["name"].as_str().map(str::to_string).or(claims.name))
        }
        (None, None) => return Err(unverified()),
    };
    if !ok {
        return Err(unverified());
    }
    identity(&email, name.as_deref())
}

/// Who the provider vouches for: the address checked before case folding (folding can turn characters
/// no address holds into ones that spell another user's), the name on one line and cut to 100.
fn identity(email: &str, name: Option<&str>) -> Result<Identity, Error> {
    let email = email.trim();
    if !crate::domain::contacts::is_email(email) {
        return Err(unverified());
    }
    let name = name.map(|n| n.chars().filter(|c| !c.is_control()).take(100).collect::<String>());
    Ok(Identity { email: email.to_ascii_lowercase(), name: name.filter(|n| !n.trim().is_empty()) })
}

/// The account with this verified email, created (with an unusable random password; a password reset
/// sets one) unless sign-ups are disabled. An existing account whose address was verified is signed in;
/// one whose address nobody ever verified is taken over by the provider's identity: its password is
/// replaced and every earlier session ends, so whoever registered the address first (and knows that
/// password, or holds those sessions) is out (docs/security.md#sessions).
async fn sign_in(st: &Context, who: Identity) -> Result<User, Error> {
    let now = st.clock.now_ms();
    let user = match st.store.user_by_email(&who.email).await? {
        Some(u) if u.email_verified_at.is_some() => u,
        Some(u) => {
            let hash = st.passwords.hash(security::generate_secret()).await.map_err(Error::Internal)?;
            st.store.take_over_unverified(&u.id, &hash, now).await?;
            u
        }
        None if st.config.disable_signups => {
            return Err(Error::Forbidden(format!(
                "No Herald account has the email {} and sign-ups are disabled on this server",
                who.email
            )));
        }
        None => {
            crate::services::accounts::create_user(st, &who.email, &security::generate_secret(), who.name.as_deref())
                .await?
        }
    };
    st.store.set_email_verified(&user.id, now).await?;
    st.store.user(&user.id).await?.ok_or_else(|| Error::Internal("the user vanished".into()))
}
