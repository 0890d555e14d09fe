//! OAuth sign-in against a stub provider on loopback (docs/behaviour.md#oauth-sign-in): an OpenID
//! Connect provider (discovery document, token endpoint, keys, ID tokens signed RS256) and GitHub's
//! endpoints. State, PKCE and nonce are checked; accounts are linked by verified email.

use std::sync::{Arc, Mutex};

use base64::Engine;
use herald_host::config::{Config, OAuthProvider};
use jsonwebtoken::{EncodingKey, Header, encode};
use serde_json::json;
use sha2::Digest;

use crate::harness::*;
use crate::http_sink::{self, HttpSink};

const PROVIDER_KEY: &str = include_str!("fixtures/oauth_provider_key.pem");
const FORGER_KEY: &str = include_str!("fixtures/oauth_forger_key.pem");
/// The modulus of the provider key (base64url), as its key set publishes it.
const PROVIDER_N: &str = concat!(
    "m4txlo5D_kYh4thr__5KVqg6jE8Ti5EiU3pgphGSBKzbN5fHN1FxiiNBBtC1ANBAnvuQrbsimkcq32efVxwXOHo7zV",
    "MFoljMaFKqwFkFF7g9DKzG4PyPTKbokUjox0xTDyN_1ulUbF6CrR2P4x0n0TZbdMIQeLGRAMue_ZEx8JRq9WT293RM",
    "PdoBMN1eussytgWuP48GrXsB40cRf8INDfD5rs0RcuJxnwQNGImHZItN_7YM36pIuxg8gc4iYKWWr0qEqMuKcPNNrK",
    "DO0nwYuPBJN7LelJYTcQU44AfDV7oqajSCdqZsFME1ZmrdU1vMnHEpVfxHmGqqXwyJWZIP_Q",
);

/// What the stub provider says about the next sign-in.
#[derive(Clone)]
struct Who {
    issuer: String,
    nonce: String,
    email: String,
    verified: bool,
    forged: bool,
}

async fn provider(who: Arc<Mutex<Who>>) -> HttpSink {
    let answer = move |method: &str, path: &str| {
        let w = who.lock().unwrap().clone();
        let iss = w.issuer.clone();
        let body = match (method, path.split('?').next().unwrap_or_default()) {
            ("GET", "/.well-known/openid-configuration") => json!({
                "issuer": iss, "authorization_endpoint": format!("{iss}/authorize"),
                "token_endpoint": format!("{iss}/token"), "userinfo_endpoint": format!("{iss}/userinfo"),
                "jwks_uri": format!("{iss}/jwks"),
            }),
            ("GET", "/jwks") => json!({ "keys": [{
                "kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256", "n": PROVIDER_N, "e": "AQAB",
            }] }),
            ("POST", "/token") => {
                // The server checks the token's times against its real clock.
                #[expect(clippy::disallowed_methods)]
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
                let claims = json!({
                    "iss": iss, "aud": "herald-client", "sub": "user-1", "iat": now, "exp": now + 600,
                    "nonce": w.nonce, "email": w.email, "email_verified": w.verified, "name": "Sam Sso",
                });
                let mut header = Header::new(jsonwebtoken::Algorithm::RS256);
                header.kid = Some("k1".into());
                let pem = if w.forged { FORGER_KEY } else { PROVIDER_KEY };
                let id_token = encode(&header, &claims, &EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap()).unwrap();
                json!({ "access_token": "at_1", "token_type": "Bearer", "expires_in": 600, "id_token": id_token })
            }
            ("POST", "/login/oauth/access_token") => json!({ "access_token": "gho_1", "token_type": "bearer" }),
            ("GET", "/user/emails") => json!([
                { "email": "old@example.com", "primary": false, "verified": true },
                { "email": "Octo@Example.com", "primary": true, "verified": true },
            ]),
            ("GET", "/user") => json!({ "login": "octo", "name": "Octo Cat" }),
            _ => return (404, json!({ "error": "no such route" }).to_string()),
        };
        (200, body.to_string())
    };
    http_sink::start_with(Arc::new(answer)).await
}

async fn server(who: &Arc<Mutex<Who>>, stub: &HttpSink, configure: impl FnOnce(&mut Config)) -> Server {
    who.lock().unwrap().issuer = stub.url("");
    let mut c = Config::for_tests();
    c.oauth.insert(
        "acme".into(),
        OAuthProvider {
            kind: "oidc".into(),
            name: Some("Acme SSO".into()),
            client_id: "herald-client".into(),
            client_secret: "s3cret".into(),
            issuer: Some(stub.url("")),
            ..Default::default()
        },
    );
    c.oauth.insert(
        "github".into(),
        OAuthProvider {
            kind: "github".into(),
            client_id: "gh-client".into(),
            client_secret: "gh-secret".into(),
            authorize_url: Some(stub.url("/login/oauth/authorize")),
            token_url: Some(stub.url("/login/oauth/access_token")),
            api_base: Some(stub.url("")),
            ..Default::default()
        },
    );
    configure(&mut c);
    Server::start_with(c, None).await
}

/// A browser: a cookie jar, redirects not followed.
fn browser(s: &Server) -> Client {
    let mut c = s.client();
    c.http = reqwest::Client::builder().cookie_store(true).redirect(reqwest::redirect::Policy::none()).build().unwrap();
    c
}

/// Starts a sign-in: the provider's URL and its query.
async fn begin(b: &Client, provider: &str) -> (reqwest::Url, std::collections::HashMap<String, String>) {
    let r = b.get(&format!("/auth/oauth/{provider}")).await;
    assert_eq!(r.status, 302, "{}", r.json);
    let url = reqwest::Url::parse(&r.header("location").unwrap()).unwrap();
    let q = url.query_pairs().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    (url, q)
}

/// A whole sign-in with `provider`: the callback's answer.
async fn sign_in(b: &Client, who: &Arc<Mutex<Who>>, provider: &str) -> Resp {
    let (_, q) = begin(b, provider).await;
    if let Some(n) = q.get("nonce") {
        who.lock().unwrap().nonce = n.clone();
    }
    b.get(&format!("/auth/oauth/{provider}/callback?code=c1&state={}", q["state"])).await
}

fn who() -> Arc<Mutex<Who>> {
    Arc::new(Mutex::new(Who {
        issuer: String::new(),
        nonce: String::new(),
        email: "sam@example.com".into(),
        verified: true,
        forged: false,
    }))
}

#[tokio::test]
async fn openid_connect_sign_in_checks_state_pkce_nonce_and_the_id_token() {
    let who = who();
    let stub = provider(who.clone()).await;
    let s = server(&who, &stub, |_| {}).await;
    assert_eq!(Server::start().await.client().get("/auth/oauth-config").await.json, json!([]), "none by default");
    let list = s.client().get("/auth/oauth-config").await.json;
    assert_eq!(
        list,
        json!([{ "id": "acme", "name": "Acme SSO", "type": "oidc" }, { "id": "github", "name": "GitHub", "type": "github" }])
    );
    assert_envelope(&s.client().get("/auth/oauth/nope").await, 404, "OAUTH_PROVIDER_NOT_FOUND");

    // The redirect carries the client, the callback, state, an S256 challenge and a nonce.
    let b = browser(&s);
    let (url, q) = begin(&b, "acme").await;
    assert_eq!(url.path(), "/authorize");
    assert_eq!(q["client_id"], "herald-client");
    assert_eq!(q["redirect_uri"], format!("{}/auth/oauth/acme/callback", s.state.config.public_url));
    assert_eq!(q["code_challenge_method"], "S256");
    assert!(q["scope"].split(' ').any(|x| x == "openid"));
    who.lock().unwrap().nonce = q["nonce"].clone();
    // A state that does not match the flow's, or no flow cookie at all, is refused.
    let r = b.get("/auth/oauth/acme/callback?code=c1&state=forged").await;
    assert_envelope(&r, 400, "OAUTH_STATE_MISMATCH");
    let r = browser(&s).get(&format!("/auth/oauth/acme/callback?code=c1&state={}", q["state"])).await;
    assert_envelope(&r, 400, "OAUTH_STATE_MISMATCH");
    // The right one signs in (a new account), sets the session and goes to the public URL.
    let r = b.get(&format!("/auth/oauth/acme/callback?code=c1&state={}", q["state"])).await;
    assert_eq!(r.status, 302, "{}", r.json);
    assert_eq!(r.header("location").unwrap(), format!("{}/", s.state.config.public_url));
    let me = b.get("/users/@me").await.json;
    assert_eq!((me["email"].as_str(), me["emailVerified"].as_bool()), (Some("sam@example.com"), Some(true)), "{me}");
    assert_eq!(me["name"], "Sam Sso");
    // The code was exchanged with the verifier of the challenge.
    let token = stub.requests().into_iter().find(|r| r.path == "/token").unwrap();
    let form: std::collections::HashMap<String, String> =
        reqwest::Url::parse(&format!("http://x/?{}", String::from_utf8_lossy(&token.body)))
            .unwrap()
            .query_pairs()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    let digest = sha2::Sha256::digest(form["code_verifier"].as_bytes());
    assert_eq!(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest), q["code_challenge"]);
    assert_eq!(form["code"], "c1");

    // An existing account with the same email is the one signed in.
    let alice = signup(&s, "alice@example.com").await;
    let alice_id = alice.get("/users/@me").await.json["id"].clone();
    who.lock().unwrap().email = "Alice@Example.com".into();
    let b = browser(&s);
    assert_eq!(sign_in(&b, &who, "acme").await.status, 302);
    assert_eq!(b.get("/users/@me").await.json["id"], alice_id);

    // An unverified email, a token signed by someone else, or one for another sign-in: refused.
    who.lock().unwrap().verified = false;
    assert_envelope(&sign_in(&browser(&s), &who, "acme").await, 403, "OAUTH_EMAIL_UNVERIFIED");
    who.lock().unwrap().verified = true;
    who.lock().unwrap().forged = true;
    assert_envelope(&sign_in(&browser(&s), &who, "acme").await, 400, "OAUTH_FAILED");
    who.lock().unwrap().forged = false;
    let b = browser(&s);
    let (_, q) = begin(&b, "acme").await;
    who.lock().unwrap().nonce = "another-sign-in".into();
    let r = b.get(&format!("/auth/oauth/acme/callback?code=c1&state={}", q["state"])).await;
    assert_envelope(&r, 400, "OAUTH_FAILED");
    // The provider's own refusal is passed on.
    let r = browser(&s).get("/auth/oauth/acme/callback?error=access_denied").await;
    assert_envelope(&r, 400, "OAUTH_FAILED");
}

#[tokio::test]
async fn github_sign_in_uses_the_primary_verified_email_and_sign_ups_can_be_off() {
    let who = who();
    let stub = provider(who.clone()).await;
    let s = server(&who, &stub, |_| {}).await;
    let b = browser(&s);
    let (url, q) = begin(&b, "github").await;
    assert_eq!(url.path(), "/login/oauth/authorize");
    assert_eq!(q["scope"], "read:user user:email");
    assert!(!q.contains_key("nonce"));
    let r = b.get(&format!("/auth/oauth/github/callback?code=g1&state={}", q["state"])).await;
    assert_eq!(r.status, 302, "{}", r.json);
    let me = b.get("/users/@me").await.json;
    assert_eq!((me["email"].as_str(), me["name"].as_str()), (Some("octo@example.com"), Some("Octo Cat")));
    let emails = stub.requests().into_iter().find(|r| r.path == "/user/emails").unwrap();
    assert_eq!(emails.header("authorization"), Some("Bearer gho_1"));

    // With sign-ups disabled a new address is refused; an existing account still signs in.
    let closed = server(&who, &stub, |c| c.disable_signups = true).await;
    assert_envelope(&sign_in(&browser(&closed), &who, "acme").await, 403, "FORBIDDEN");
    assert_envelope(&sign_in(&browser(&closed), &who, "github").await, 403, "FORBIDDEN");
    herald_host::services::accounts::create_user(&closed.state, "octo@example.com", "password123", None).await.unwrap();
    let b = browser(&closed);
    assert_eq!(sign_in(&b, &who, "github").await.status, 302);
    assert_eq!(b.get("/users/@me").await.json["emailVerified"], true, "the provider vouched for the address");
}

#[tokio::test]
async fn an_account_nobody_verified_is_taken_over_by_the_provider_not_linked() {
    let who = who();
    let stub = provider(who.clone()).await;
    let s = server(&who, &stub, |_| {}).await;
    // Someone registered Sam's address before Sam (an account from before sign-ups waited for their
    // address): they know its password and hold a session.
    let squatter = unverified_user(&s, "sam@example.com", None).await;
    let squatted = squatter.get("/users/@me").await.json["id"].clone();
    let b = browser(&s);
    assert_eq!(sign_in(&b, &who, "acme").await.status, 302);
    let me = b.get("/users/@me").await.json;
    assert_eq!((&me["id"], &me["emailVerified"]), (&squatted, &json!(true)), "{me}");
    // The squatter's session ended and the password no longer opens the account.
    assert_envelope(&squatter.get("/users/@me").await, 401, "UNAUTHORIZED");
    let r = s.client().post("/auth/login", json!({ "email": "sam@example.com", "password": "password123" })).await;
    assert_envelope(&r, 401, "UNAUTHORIZED");
    assert_eq!(b.get("/users/@me").await.status, 200, "the provider's session lives on");

    // A verified account is linked as it is: its password and sessions stay.
    let alice = signup(&s, "alice@example.com").await;
    who.lock().unwrap().email = "alice@example.com".into();
    let b = browser(&s);
    assert_eq!(sign_in(&b, &who, "acme").await.status, 302);
    assert_eq!(b.get("/users/@me").await.json["email"], "alice@example.com");
    assert_eq!(alice.get("/users/@me").await.status, 200);
    let r = s.client().post("/auth/login", json!({ "email": "alice@example.com", "password": "password123" })).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn the_discovery_document_must_name_the_configured_issuer_and_both_documents_are_cached() {
    let who = who();
    let stub = provider(who.clone()).await;
    let s = server(&who, &stub, |_| {}).await;
    // A document that names another issuer does not speak for this provider.
    who.lock().unwrap().issuer = "https://elsewhere.example".into();
    let r = browser(&s).get("/auth/oauth/acme").await;
    assert_envelope(&r, 400, "OAUTH_FAILED");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("issuer"), "{}", r.json);

    let s = server(&who, &stub, |_| {}).await;
    let before = |path: &str| stub.requests().iter().filter(|r| r.path == path).count();
    let (discovery, keys) = (before("/.well-known/openid-configuration"), before("/jwks"));
    for _ in 0..3 {
        let b = browser(&s);
        assert_eq!(sign_in(&b, &who, "acme").await.status, 302);
    }
    let fetched = |path: &str, was: usize| stub.requests().iter().filter(|r| r.path == path).count() - was;
    assert_eq!(fetched("/.well-known/openid-configuration", discovery), 1, "discovery fetched once for three sign-ins");
    assert_eq!(fetched("/jwks", keys), 1, "the key set fetched once");
}
