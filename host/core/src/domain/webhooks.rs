//! Outbound webhooks (docs/behaviour.md#webhooks), the pure part: which events an endpoint wants, the
//! Standard Webhooks signature, the retry schedule, the body of a delivery and the check of an endpoint's
//! event names.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use serde_json::{Map, Value, json};
use sha2::Sha256;

/// Most endpoints one project may have.
pub const MAX_ENDPOINTS: usize = 20;
/// Most event names or prefixes one endpoint may list.
pub const MAX_EVENT_PATTERNS: usize = 50;
/// Longest event name or prefix.
pub const MAX_PATTERN_CHARS: usize = 100;
/// Longest endpoint URL.
pub const MAX_URL_CHARS: usize = 2048;
/// Prefix of a signing secret (the Standard Webhooks form: `whsec_` and the key in base64).
pub const SECRET_PREFIX: &str = "whsec_";
/// Bytes of a signing key.
pub const SECRET_BYTES: usize = 24;

/// Waits before each retry, after the first attempt: 5 s, 5 min, 30 min, 2 h, 5 h, 8 h and 8 h, so a
/// delivery is tried eight times over about a day (23 h 35 min) before it is marked FAILED.
pub const RETRY_DELAYS_MS: [i64; 7] = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 28_800_000, 28_800_000];
/// How long an endpoint may fail every attempt before Herald disables it.
pub const DISABLE_AFTER_MS: i64 = 3 * 24 * 3_600_000;

/// When the attempt after attempt number `done` (1-based) runs, or None when it was the last.
pub fn retry_after(done: usize, now: i64) -> Option<i64> {
    RETRY_DELAYS_MS.get(done.checked_sub(1)?).map(|d| now + d)
}

/// Whether an endpoint listing `patterns` wants an event named `name`: an exact name, a prefix ending in
/// `.*` (`email.*` matches `email.sent` and `email.open`), or `*` for every event.
pub fn wants(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| {
        p == "*"
            || p == name
            || p.strip_suffix(".*").is_some_and(|prefix| {
                name.len() > prefix.len() + 1 && name.starts_with(prefix) && name.as_bytes()[prefix.len()] == b'.'
            })
    })
}

/// Why an event name or prefix is refused, if it is: 1 to 100 characters of letters, digits and `._-:`,
/// optionally ending in `.*`, or `*` alone.
pub fn pattern_problem(p: &str) -> Option<String> {
    if p == "*" {
        return None;
    }
    let base = p.strip_suffix(".*").unwrap_or(p);
    if base.is_empty() || p.chars().count() > MAX_PATTERN_CHARS {
        return Some(format!(
            "{p:?} must be an event name or a prefix like email.*, up to {MAX_PATTERN_CHARS} characters"
        ));
    }
    if !base.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')) {
        return Some(format!("{p:?} may hold only letters, digits and . _ - : (and end in .* for a prefix)"));
    }
    None
}

/// A new signing key.
pub fn new_key() -> [u8; SECRET_BYTES] {
    let mut k = [0u8; SECRET_BYTES];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut k);
    k
}

/// A key as the secret a person copies: `whsec_` and its base64.
pub fn secret_of(key: &[u8]) -> String {
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// The `webhook-signature` header value: `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` with the
/// endpoint's key (the Standard Webhooks scheme).
pub fn signature(key: &[u8], id: &str, timestamp_secs: i64, body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(key) {
        Ok(m) => m,
        // HMAC takes keys of any length; this arm is never taken.
        Err(_) => return String::new(),
    };
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp_secs.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// What a delivery of an event says: `{type, timestamp, data}`, where `data` holds the event's id, its
/// contact (id and address), where it came from and the event's own data.
pub fn body(
    event_id: &str,
    name: &str,
    created_at_rfc3339: &str,
    contact_id: &str,
    contact_email: Option<&str>,
    source: &str,
    data: &Map<String, Value>,
) -> String {
    json!({
        "type": name,
        "timestamp": created_at_rfc3339,
        "data": {
            "id": event_id,
            "contact": { "id": contact_id, "email": contact_email },
            "source": source,
            "data": data,
        },
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_exact_names_prefixes_and_everything() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(wants(&p(&["email.*"]), "email.sent"));
        assert!(wants(&p(&["email.*"]), "email.open"));
        assert!(!wants(&p(&["email.*"]), "email"));
        assert!(!wants(&p(&["email.*"]), "emails.sent"));
        assert!(!wants(&p(&["email.*"]), "contact.subscribed"));
        assert!(wants(&p(&["signup"]), "signup"));
        assert!(!wants(&p(&["signup"]), "signup.done"));
        assert!(wants(&p(&["*"]), "anything"));
        assert!(!wants(&p(&[]), "signup"));
    }

    #[test]
    fn patterns_and_urls_are_checked() {
        assert_eq!(pattern_problem("email.*"), None);
        assert_eq!(pattern_problem("*"), None);
        assert_eq!(pattern_problem("user-signed_up:v2"), None);
        assert!(pattern_problem("").is_some());
        assert!(pattern_problem(".*").is_some());
        assert!(pattern_problem("a b").is_some());
        assert!(pattern_problem("email.**").is_some());
        assert!(pattern_problem(&"a".repeat(101)).is_some());
    }

    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        // The example of the Standard Webhooks specification's reference libraries.
        let key = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        assert_eq!(secret_of(&key), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    }

    #[test]
    fn retries_last_about_a_day() {
        assert_eq!(retry_after(1, 0), Some(5_000));
        assert_eq!(retry_after(7, 0), Some(28_800_000));
        assert_eq!(retry_after(8, 0), None);
        assert_eq!(retry_after(0, 0), None);
        let total: i64 = RETRY_DELAYS_MS.iter().sum();
        assert!((22 * 3_600_000..=26 * 3_600_000).contains(&total), "{total}");
    }
}
