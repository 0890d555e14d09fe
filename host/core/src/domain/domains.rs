//! Sender domains and address checks: pure rules (docs/behaviour.md#domains,
//! docs/behaviour.md#address-verification).

use serde::{Deserialize, Serialize};

/// Validates and lowercases a domain name: 1..253 characters, at least two labels, labels of 1..63
/// letters, digits and hyphens not at either end, a top-level label that is not all digits.
pub fn normalize_domain(input: &str) -> Option<String> {
    let d = input.trim().trim_end_matches('.').to_lowercase();
    if d.is_empty() || d.len() > 253 || !d.contains('.') {
        return None;
    }
    let ok = d.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    });
    let tld_ok = d.rsplit('.').next().is_some_and(|t| !t.chars().all(|c| c.is_ascii_digit()));
    (ok && tld_ok).then_some(d)
}

/// What a DNS record is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    Dkim,
    Spf,
    Dmarc,
    ReturnPath,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum RecordStatus {
    /// Not checked yet, or not found.
    Pending,
    Verified,
    /// Found, but with other content (for example another DKIM key).
    Mismatch,
    /// The lookup failed; the answer is unknown.
    Unknown,
}

/// One DNS record the domain owner publishes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsRecord {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub value: String,
    pub purpose: Purpose,
    /// Needed for the domain to count as verified.
    pub required: bool,
    pub status: RecordStatus,
}

/// Settings that shape the records.
#[derive(Debug, Clone)]
pub struct RecordSettings {
    pub selector: String,
    /// SPF mechanism to authorise Herald's sending hosts, e.g. `include:_spf.mail.example.net` or `a mx`.
    pub spf_mechanism: String,
    /// Host the return-path CNAME points to, when bounces come back to Herald.
    pub return_path_host: Option<String>,
}

pub fn return_path_name(domain: &str) -> String {
    format!("bounces.{domain}")
}

/// The records for a domain and its DKIM public key, all pending.
pub fn records(domain: &str, dkim_txt: &str, s: &RecordSettings) -> Vec<DnsRecord> {
    let mut v = vec![
        DnsRecord {
            kind: "TXT".into(),
            name: format!("{}._domainkey.{domain}", s.selector),
            value: dkim_txt.into(),
            purpose: Purpose::Dkim,
            required: true,
            status: RecordStatus::Pending,
        },
        DnsRecord {
            kind: "TXT".into(),
            name: domain.into(),
            value: format!("v=spf1 {} ~all", s.spf_mechanism),
            purpose: Purpose::Spf,
            required: true,
            status: RecordStatus::Pending,
        },
        DnsRecord {
            kind: "TXT".into(),
            name: format!("_dmarc.{domain}"),
            value: "v=DMARC1; p=none;".into(),
            purpose: Purpose::Dmarc,
            required: false,
            status: RecordStatus::Pending,
        },
    ];
    if let Some(host) = &s.return_path_host {
        v.push(DnsRecord {
            kind: "CNAME".into(),
            name: return_path_name(domain),
            value: host.clone(),
            purpose: Purpose::ReturnPath,
            required: false,
            status: RecordStatus::Pending,
        });
    }
    v
}

/// The `p=` value of a DKIM TXT record, whitespace removed.
fn dkim_key(txt: &str) -> Option<String> {
    txt.split(';').map(str::trim).find_map(|t| t.strip_prefix("p=")).map(|p| p.split_whitespace().collect())
}

/// DKIM: verified when a TXT at the selector carries our public key.
pub fn dkim_status(found: Option<&[String]>, failed: bool, expected_txt: &str) -> RecordStatus {
    if failed {
        return RecordStatus::Unknown;
    }
    let Some(txts) = found else { return RecordStatus::Pending };
    let want = dkim_key(expected_txt);
    if txts.iter().any(|t| dkim_key(t).is_some() && dkim_key(t) == want) {
        RecordStatus::Verified
    } else if txts.iter().any(|t| t.to_lowercase().contains("v=dkim1") || dkim_key(t).is_some()) {
        RecordStatus::Mismatch
    } else {
        RecordStatus::Pending
    }
}

/// SPF and DMARC: verified when a TXT with the version tag is present.
pub fn tag_status(found: Option<&[String]>, failed: bool, tag: &str) -> RecordStatus {
    if failed {
        return RecordStatus::Unknown;
    }
    match found {
        Some(txts) if txts.iter().any(|t| t.trim().to_lowercase().starts_with(tag)) => RecordStatus::Verified,
        _ => RecordStatus::Pending,
    }
}

/// A domain is verified when every required record is.
pub fn all_required_verified(records: &[DnsRecord]) -> bool {
    records.iter().filter(|r| r.required).all(|r| r.status == RecordStatus::Verified)
}

// ---- address checks (docs/behaviour.md#address-verification) ----

/// Large free mailbox providers.
pub const PERSONAL_PROVIDERS: &[&str] = &[
    "gmail.com",
    "googlemail.com",
    "yahoo.com",
    "yahoo.co.uk",
    "yahoo.fr",
    "yahoo.de",
    "ymail.com",
    "outlook.com",
    "hotmail.com",
    "hotmail.co.uk",
    "hotmail.fr",
    "live.com",
    "msn.com",
    "icloud.com",
    "me.com",
    "mac.com",
    "aol.com",
    "proton.me",
    "protonmail.com",
    "pm.me",
    "gmx.com",
    "gmx.de",
    "gmx.net",
    "web.de",
    "yandex.com",
    "yandex.ru",
    "mail.ru",
    "zoho.com",
    "qq.com",
    "163.com",
    "126.com",
    "fastmail.com",
    "tutanota.com",
    "tuta.io",
    "hey.com",
    "naver.com",
    "orange.fr",
    "free.fr",
    "libero.it",
    "t-online.de",
    "comcast.net",
];

/// Forwarding (alias) services: the mailbox behind them is hidden.
pub const ALIAS_SERVICES: &[&str] = &[
    "duck.com",
    "simplelogin.com",
    "simplelogin.co",
    "slmail.me",
    "aleeas.com",
    "anonaddy.com",
    "anonaddy.me",
    "addy.io",
    "mozmail.com",
    "privaterelay.appleid.com",
    "passmail.net",
    "passmail.com",
    "33mail.com",
    "erine.email",
    "relay.firefox.com",
];

/// Domains a typo is compared against.
pub const COMMON_DOMAINS: &[&str] = &[
    "gmail.com",
    "yahoo.com",
    "hotmail.com",
    "outlook.com",
    "icloud.com",
    "aol.com",
    "live.com",
    "msn.com",
    "proton.me",
    "protonmail.com",
    "gmx.com",
    "yandex.com",
    "mail.ru",
    "comcast.net",
    "googlemail.com",
];

/// Levenshtein distance (small strings only).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The common domain this one is probably a typo of (distance 1 or 2, not itself common).
pub fn typo_of(domain: &str) -> Option<&'static str> {
    if COMMON_DOMAINS.contains(&domain) || PERSONAL_PROVIDERS.contains(&domain) {
        return None;
    }
    let max = if domain.len() >= 8 { 2 } else { 1 };
    COMMON_DOMAINS
        .iter()
        .map(|c| (edit_distance(domain, c), *c))
        .filter(|(d, _)| *d <= max)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

pub fn is_alias_domain(domain: &str) -> bool {
    ALIAS_SERVICES.iter().any(|a| domain == *a || domain.ends_with(&format!(".{a}")))
}

/// A null MX (RFC 7505): a single MX with preference 0 and the root as exchange.
pub fn is_null_mx(mx: &[(u16, String)]) -> bool {
    mx.len() == 1 && mx[0].0 == 0 && (mx[0].1.is_empty() || mx[0].1 == ".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_names() {
        let cases = [
            ("Example.COM", Some("example.com")),
            (" mail.example.co.uk. ", Some("mail.example.co.uk")),
            ("a-b.io", Some("a-b.io")),
            ("localhost", None),
            ("-a.com", None),
            ("a-.com", None),
            ("a..com", None),
            ("exa mple.com", None),
            ("example.123", None),
            ("ex_ample.com", None),
            ("", None),
        ];
        for (input, want) in cases {
            assert_eq!(normalize_domain(input).as_deref(), want, "{input:?}");
        }
        assert!(normalize_domain(&format!("{}.com", "a".repeat(64))).is_none());
    }

    #[test]
    fn record_statuses() {
        let expected = "v=DKIM1; k=rsa; p=ABC123";
        let t = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(dkim_status(Some(&t(&["v=DKIM1; k=rsa; p=ABC123"])), false, expected), RecordStatus::Verified);
        assert_eq!(dkim_status(Some(&t(&["v=DKIM1;k=rsa;p=ABC 123"])), false, expected), RecordStatus::Verified);
        assert_eq!(dkim_status(Some(&t(&["v=DKIM1; k=rsa; p=OTHER"])), false, expected), RecordStatus::Mismatch);
        assert_eq!(dkim_status(None, false, expected), RecordStatus::Pending);
        assert_eq!(dkim_status(None, true, expected), RecordStatus::Unknown);
        assert_eq!(
            tag_status(Some(&t(&["google-site-verification=x", "v=spf1 a mx ~all"])), false, "v=spf1"),
            RecordStatus::Verified
        );
        assert_eq!(tag_status(Some(&t(&["google-site-verification=x"])), false, "v=spf1"), RecordStatus::Pending);
    }

    #[test]
    fn records_and_verification() {
        let s = RecordSettings { selector: "herald".into(), spf_mechanism: "a mx".into(), return_path_host: None };
        let mut r = records("example.com", "v=DKIM1; k=rsa; p=K", &s);
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].name, "herald._domainkey.example.com");
        assert_eq!(r[1].value, "v=spf1 a mx ~all");
        assert_eq!(r[2].name, "_dmarc.example.com");
        assert!(!all_required_verified(&r));
        r[0].status = RecordStatus::Verified;
        r[1].status = RecordStatus::Verified;
        assert!(all_required_verified(&r), "DMARC is recommended, not required");
        let s = RecordSettings { return_path_host: Some("bounces.herald.example".into()), ..s };
        let r = records("example.com", "x", &s);
        assert_eq!((r[3].kind.as_str(), r[3].name.as_str()), ("CNAME", "bounces.example.com"));
    }

    #[test]
    fn typos_aliases_and_null_mx() {
        assert_eq!(typo_of("gmial.com"), Some("gmail.com"));
        assert_eq!(typo_of("gmail.con"), Some("gmail.com"));
        assert_eq!(typo_of("hotmial.com"), Some("hotmail.com"));
        assert_eq!(typo_of("gmail.com"), None);
        assert_eq!(typo_of("example.com"), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert!(is_alias_domain("duck.com"));
        assert!(is_alias_domain("x.simplelogin.com"));
        assert!(!is_alias_domain("gmail.com"));
        assert!(is_null_mx(&[(0, String::new())]));
        assert!(!is_null_mx(&[(0, "mx.example.com".into())]));
        assert!(!is_null_mx(&[(10, String::new()), (20, "a".into())]));
    }
}
