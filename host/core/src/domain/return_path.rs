//! The VERP return path (docs/behaviour.md#return-path): with a return-path host configured, each
//! email's envelope sender is `b+<token>@<host>`, where the token is the email's id (its 16 bytes in hex)
//! and the first 8 bytes of an HMAC-SHA256 of them with a key derived from the server secret, so a
//! bounce that comes back to that address names its email and cannot be forged for another.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The local part's prefix.
pub const PREFIX: &str = "b+";

fn tag(key: &[u8], id: &[u8; 16]) -> Option<[u8; 8]> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).ok()?;
    mac.update(id);
    let full = mac.finalize().into_bytes();
    let mut out = [0u8; 8];
    out.copy_from_slice(&full[..8]);
    Some(out)
}

/// The envelope sender of the email `email_id` (a UUID): None when the id is not one.
pub fn address(key: &[u8], email_id: &str, host: &str) -> Option<String> {
    let id = *uuid::Uuid::parse_str(email_id).ok()?.as_bytes();
    Some(format!("{PREFIX}{}{}@{host}", hex::encode(id), hex::encode(tag(key, &id)?)))
}

/// The email a return-path local part (`b+...`, any case) names, when its token holds.
pub fn email_of(key: &[u8], local_part: &str) -> Option<String> {
    let token = local_part
        .get(..PREFIX.len())
        .filter(|p| p.eq_ignore_ascii_case(PREFIX))
        .map(|_| &local_part[PREFIX.len()..])?;
    let raw = hex::decode(token.to_ascii_lowercase()).ok()?;
    if raw.len() != 24 {
        return None;
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&raw[..16]);
    let want = tag(key, &id)?;
    // Compared in constant time.
    let same = want.iter().zip(&raw[16..]).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    same.then(|| uuid::Uuid::from_bytes(id).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_email_and_holds_only_with_the_key() {
        let id = "01a24105-9cae-71ff-b97c-eda2011d93cf";
        let a = address(b"key", id, "bounces.herald.test").unwrap();
        let local = a.split('@').next().unwrap();
        assert!(local.starts_with("b+") && local.len() <= 64, "{a}");
        assert_eq!(email_of(b"key", local).as_deref(), Some(id));
        assert_eq!(email_of(b"key", &local.to_ascii_uppercase()).as_deref(), Some(id), "case is not kept by all MTAs");
        assert_eq!(email_of(b"other key", local), None, "another key");
        let mut forged = local.to_string();
        forged.replace_range(3..4, if &local[3..4] == "0" { "1" } else { "0" });
        assert_eq!(email_of(b"key", &forged), None, "another email's id with this tag");
        assert_eq!(email_of(b"key", "b+zz"), None);
        assert_eq!(email_of(b"key", "bounce"), None);
        assert_eq!(address(b"key", "not-a-uuid", "h"), None);
    }
}
