//! Credentials: API keys, password hashing (argon2) and the dashboard session token (an HS256 JWT); the
//! rules are in docs/behaviour.md#keys-and-authentication. Pure functions apart from drawing random bytes.
//!
//! Must not import: salvo, surrealdb.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyKind {
    Public,
    Secret,
}

/// A freshly generated key pair, shown once.
#[derive(Debug, Clone)]
pub struct KeyPair {
    pub public: String,
    pub secret: String,
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    rand::rng().fill_bytes(&mut b);
    b
}

/// `pk_` / `sk_` followed by 32 random bytes in hex.
pub fn generate_key_pair() -> KeyPair {
    KeyPair {
        public: format!("pk_{}", hex::encode(random_bytes::<32>())),
        secret: format!("sk_{}", hex::encode(random_bytes::<32>())),
    }
}

/// The kind of a key, judged by its prefix and shape; `None` when it cannot be one of ours.
pub fn key_kind(key: &str) -> Option<KeyKind> {
    let (kind, rest) = if let Some(rest) = key.strip_prefix("pk_") {
        (KeyKind::Public, rest)
    } else if let Some(rest) = key.strip_prefix("sk_") {
        (KeyKind::Secret, rest)
    } else {
        return None;
    };
    (rest.len() == 64 && rest.bytes().all(|b| b.is_ascii_hexdigit())).then_some(kind)
}

/// The SHA-256 digest the store keeps instead of the key.
pub fn key_digest(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A token for a link in a mail: 32 random bytes, base64url (the store keeps its [`key_digest`]).
pub fn generate_token() -> String {
    URL_SAFE_NO_PAD.encode(random_bytes::<32>())
}

/// A random secret for signing, when the operator did not configure one.
pub fn generate_secret() -> String {
    hex::encode(random_bytes::<32>())
}

/// Characters a new password has, at least and at most (sign-up and the `project create` command alike).
pub const PASSWORD_CHARS: (usize, usize) = (8, 256);

/// Why a new password is refused, if it is.
pub fn password_problem(password: &str) -> Option<String> {
    let n = password.chars().count();
    let (min, max) = PASSWORD_CHARS;
    (n < min || n > max).then(|| format!("The password must be {min} to {max} characters"))
}

pub fn hash_password(password: &str) -> Result<String, String> {
    let salt = SaltString::encode_b64(&random_bytes::<16>()).map_err(|e| e.to_string())?;
    Argon2::default().hash_password(password.as_bytes(), &salt).map(|h| h.to_string()).map_err(|e| e.to_string())
}

/// Where the server computes password hashes: on the blocking pool, at most two at once (argon2 takes
/// about 19 MiB and tens of milliseconds of a core each, so a burst of logins waits its turn instead of
/// taking memory without bound), counting the hashes it computed and checked.
pub struct Passwords {
    slots: tokio::sync::Semaphore,
    computed: std::sync::atomic::AtomicU64,
}

impl Default for Passwords {
    fn default() -> Self {
        Passwords { slots: tokio::sync::Semaphore::new(2), computed: Default::default() }
    }
}

impl Passwords {
    /// [`hash_password`], bounded.
    pub async fn hash(&self, password: String) -> Result<String, String> {
        let _slot = self.slots.acquire().await.map_err(|e| e.to_string())?;
        self.computed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::task::spawn_blocking(move || hash_password(&password)).await.map_err(|e| e.to_string())?
    }

    /// [`verify_password`], bounded.
    pub async fn verify(&self, password: String, hash: String) -> bool {
        let Ok(_slot) = self.slots.acquire().await else { return false };
        self.computed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::task::spawn_blocking(move || verify_password(&password, &hash)).await.unwrap_or(false)
    }

    /// Hashes computed or checked so far.
    pub fn computed(&self) -> u64 {
        self.computed.load(std::sync::atomic::Ordering::Relaxed)
    }
}

pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|parsed| Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok())
}

/// Claims of the session token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionClaims {
    /// user id
    pub sub: String,
    /// issued at, seconds
    pub iat: i64,
    /// expires, seconds
    pub exp: i64,
    /// the session's own random id, which logout revokes
    pub sid: String,
    /// the user's session epoch when it was issued (a password reset raises the user's, ending it)
    #[serde(default)]
    pub ep: i64,
}

/// Derives a purpose-specific key from the server secret, so one secret can sign several kinds of token
/// without one kind being replayable as another.
pub fn derive_key(secret: &str, purpose: &str) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).unwrap_or_else(|_| unreachable_hmac());
    mac.update(purpose.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// A purpose-specific key derived from another derived key (for keys made after start-up, where only
/// the derived keys are at hand).
pub fn derive_key_from(key: &[u8], purpose: &str) -> Vec<u8> {
    let mut mac = HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable_hmac());
    mac.update(purpose.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

fn unreachable_hmac() -> HmacSha256 {
    // HMAC accepts keys of any length; this is never reached.
    HmacSha256::new_from_slice(b"herald").unwrap_or_else(|_| unreachable!("HMAC takes any key length"))
}

/// Signs claims as a compact HS256 JWT.
pub fn sign_jwt<C: Serialize>(key: &[u8], claims: &C) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).unwrap_or_default());
    let signing_input = format!("{header}.{payload}");
    let mut mac = HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable_hmac());
    mac.update(signing_input.as_bytes());
    let sig = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{signing_input}.{sig}")
}

/// Verifies an HS256 JWT's signature and expiry (`now_secs`) and returns its claims.
pub fn verify_session(key: &[u8], token: &str, now_secs: i64) -> Option<SessionClaims> {
    let mut parts = token.split('.');
    let (header, payload, sig) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let header_json: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
    if header_json.get("alg")?.as_str()? != "HS256" {
        return None;
    }
    let mut mac = HmacSha256::new_from_slice(key).ok()?;
    mac.update(header.as_bytes());
    mac.update(b".");
    mac.update(payload.as_bytes());
    mac.verify_slice(&URL_SAFE_NO_PAD.decode(sig).ok()?).ok()?;
    let claims: SessionClaims = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    (claims.exp > now_secs).then_some(claims)
}

/// A signed, URL-safe token carrying `payload`: base64url(payload) "." base64url(HMAC-SHA256).
pub fn seal_token(key: &[u8], payload: &str) -> String {
    let body = URL_SAFE_NO_PAD.encode(payload);
    let mut mac = HmacSha256::new_from_slice(key).unwrap_or_else(|_| unreachable_hmac());
    mac.update(body.as_bytes());
    format!("{body}.{}", URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()))
}

/// The payload of an unaltered token signed with `key`.
pub fn open_token(key: &[u8], token: &str) -> Option<String> {
    let (body, sig) = token.split_once('.')?;
    let mut mac = HmacSha256::new_from_slice(key).ok()?;
    mac.update(body.as_bytes());
    mac.verify_slice(&URL_SAFE_NO_PAD.decode(sig).ok()?).ok()?;
    String::from_utf8(URL_SAFE_NO_PAD.decode(body).ok()?).ok()
}

/// A token naming a contact of a project, and the email it came in when there is one, for the public
/// subscription pages.
pub fn contact_token(key: &[u8], project: &str, contact: &str, email: Option<&str>) -> String {
    match email {
        Some(e) => seal_token(key, &format!("{project}/{contact}/{e}")),
        None => seal_token(key, &format!("{project}/{contact}")),
    }
}

/// The (project, contact, email) of a valid contact token (tokens made before links named their email
/// have none).
pub fn open_contact_token(key: &[u8], token: &str) -> Option<(String, String, Option<String>)> {
    let text = open_token(key, token)?;
    let mut parts = text.splitn(3, '/');
    let (p, c) = (parts.next()?, parts.next()?);
    Some((p.to_string(), c.to_string(), parts.next().map(str::to_string)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_have_prefix_and_64_hex_chars_and_differ() {
        let a = generate_key_pair();
        let b = generate_key_pair();
        assert_eq!(key_kind(&a.public), Some(KeyKind::Public));
        assert_eq!(key_kind(&a.secret), Some(KeyKind::Secret));
        assert_ne!(a.secret, b.secret);
        assert_eq!(key_kind("sk_short"), None);
        assert_eq!(key_kind("xx_0000000000000000000000000000000000000000000000000000000000000000"), None);
        assert_eq!(key_digest("abc").len(), 64);
    }

    #[test]
    fn passwords_verify_only_with_the_right_password() {
        let h = hash_password("correct horse").unwrap();
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("wrong horse", &h));
        assert!(!verify_password("correct horse", "not-a-hash"));
    }

    #[test]
    fn contact_tokens_open_only_unchanged_and_with_the_same_key() {
        let key = derive_key("0123456789abcdef", "links");
        let t = contact_token(&key, "p1", "c1", None);
        assert_eq!(open_contact_token(&key, &t), Some(("p1".into(), "c1".into(), None)));
        let with_email = contact_token(&key, "p1", "c1", Some("e1"));
        assert_ne!(with_email, t);
        assert_eq!(open_contact_token(&key, &with_email), Some(("p1".into(), "c1".into(), Some("e1".into()))));
        assert_eq!(open_contact_token(&derive_key("0123456789abcdef", "other"), &t), None);
        let forged = format!("{}.{}", URL_SAFE_NO_PAD.encode("p1/c2"), t.split_once('.').unwrap().1);
        assert_eq!(open_contact_token(&key, &forged), None);
        assert_eq!(open_contact_token(&key, "garbage"), None);
    }

    #[test]
    fn session_tokens_check_signature_and_expiry() {
        let key = derive_key("0123456789abcdef", "session");
        let claims = SessionClaims { sub: "u1".into(), iat: 100, exp: 200, sid: "s1".into(), ep: 0 };
        let t = sign_jwt(&key, &claims);
        assert_eq!(verify_session(&key, &t, 150), Some(claims));
        assert_eq!(verify_session(&key, &t, 200), None, "expired");
        let other = derive_key("0123456789abcdef", "other");
        assert_eq!(verify_session(&other, &t, 150), None, "wrong key");
        let mut tampered = t.clone();
        tampered.replace_range(t.len() - 3.., "AAA");
        assert_eq!(verify_session(&key, &tampered, 150), None);
    }
}
