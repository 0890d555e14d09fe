//! Address verification for `POST /v1/verify` (docs/behaviour.md#address-verification): syntax,
//! disposable, alias, plus-addressing, personal provider, typo suggestion, and DNS facts (NS, A/AAAA, MX
//! with RFC 7505 null MX) looked up in parallel through the host resolver. A DNS failure becomes a reason,
//! never an error.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashSet;
use std::sync::LazyLock;

use serde::Serialize;

use crate::domain::domains::{PERSONAL_PROVIDERS, is_alias_domain, is_null_mx, typo_of};
use crate::infra::dns::{Dns, Lookup};

/// Disposable domains from the `mailchecker` data set (about 55,000 domains, kept up to date upstream).
static DISPOSABLE: LazyLock<HashSet<&'static str>> = LazyLock::new(|| mailchecker::blacklist().into_iter().collect());

/// The domain or any parent of it is a disposable provider.
pub fn is_disposable(domain: &str) -> bool {
    let mut d = domain;
    loop {
        if DISPOSABLE.contains(d) {
            return true;
        }
        match d.split_once('.') {
            Some((_, rest)) if rest.contains('.') => d = rest,
            _ => return false,
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    pub email: String,
    pub valid: bool,
    pub is_disposable: bool,
    pub is_alias: bool,
    pub is_typo: bool,
    pub is_plus_addressed: bool,
    pub is_personal_email: bool,
    pub domain_exists: bool,
    pub has_website: bool,
    pub has_mx_records: bool,
    pub reasons: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggested_email: Option<String>,
}

pub async fn verify(dns: &Dns, input: &str) -> Verification {
    let email = crate::domain::contacts::normalize_email(input);
    let mut v = Verification {
        email: email.clone(),
        valid: false,
        is_disposable: false,
        is_alias: false,
        is_typo: false,
        is_plus_addressed: false,
        is_personal_email: false,
        domain_exists: false,
        has_website: false,
        has_mx_records: false,
        reasons: vec![],
        suggested_email: None,
    };
    if !crate::domain::contacts::is_email(&email) {
        v.reasons.push("The address is not valid email syntax".into());
        return v;
    }
    let Some((local, domain)) = email.rsplit_once('@') else { return v };
    v.is_plus_addressed = local.contains('+');
    v.is_disposable = is_disposable(domain);
    v.is_alias = is_alias_domain(domain);
    v.is_personal_email = PERSONAL_PROVIDERS.contains(&domain);
    if let Some(fix) = typo_of(domain) {
        v.is_typo = true;
        v.suggested_email = Some(format!("{local}@{fix}"));
        v.reasons.push(format!("The domain looks like a typo of {fix}"));
    }
    if v.is_disposable {
        v.reasons.push("The domain is a disposable email provider".into());
    }

    let (ns, ip, mx) = tokio::join!(dns.ns(domain), dns.ip(domain), dns.mx(domain));
    let mut failed = Vec::new();
    for (name, l) in [
        ("NS", matches!(ns, Lookup::Failed(_))),
        ("A/AAAA", matches!(ip, Lookup::Failed(_))),
        ("MX", matches!(mx, Lookup::Failed(_))),
    ] {
        if l {
            failed.push(name);
        }
    }
    v.has_website = ip.found().is_some();
    let null_mx = mx.found().is_some_and(|m| is_null_mx(m));
    v.has_mx_records = mx.found().is_some_and(|m| !m.is_empty()) && !null_mx;
    // A name exists when it has NS records, or any other answer (subdomains rarely carry NS).
    v.domain_exists = ns.found().is_some() || ip.found().is_some() || mx.found().is_some();
    if !failed.is_empty() {
        v.reasons.push(format!("DNS lookups failed for {} (the answer is unknown)", failed.join(", ")));
    }
    if !v.domain_exists && failed.is_empty() {
        v.reasons.push("The domain does not exist".into());
    }
    if null_mx {
        v.reasons.push("The domain accepts no email (null MX, RFC 7505)".into());
    } else if v.domain_exists && !v.has_mx_records && !matches!(mx, Lookup::Failed(_)) {
        v.reasons.push("The domain has no MX records".into());
    }
    v.valid = v.has_mx_records && !v.is_disposable && !v.is_typo;
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disposable_domains_and_their_subdomains() {
        assert!(is_disposable("10minutemail.com"));
        assert!(is_disposable("x.10minutemail.com"));
        assert!(!is_disposable("gmail.com"));
        assert!(!is_disposable("example.com"));
    }
}
