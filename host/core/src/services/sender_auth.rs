//! Who really sent a received message (docs/behaviour.md#receiving-mail): SPF for the envelope sender and
//! the client's address, DKIM signatures, and DMARC for the author's (From) domain, checked with mail-auth
//! through the host's resolver. A reply records the results; one whose From domain publishes DMARC
//! `p=reject` and fails it is dropped (a forged sender the domain's owner asked receivers to refuse).
//!
//! Must not import: salvo, surrealdb.

use std::net::IpAddr;

use mail_auth::dmarc::Policy;
use mail_auth::{
    AuthenticatedMessage, DkimResult, DmarcResult, MessageAuthenticator, SpfResult, dmarc::verify::DmarcParameters,
    spf::verify::SpfParameters,
};
use serde_json::{Map, Value};

/// What the checks found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Results {
    /// The author's domain is vouched for: DMARC passes, or (with no DMARC record) SPF or DKIM passes for
    /// a domain of the same organisation as the From domain.
    pub authenticated: bool,
    /// `pass`, `fail`, `softfail`, `neutral`, `none`, `temperror` or `permerror`.
    pub spf: &'static str,
    /// `pass` when a signature holds, else the first one's result (`fail`, `neutral`, `permerror`,
    /// `temperror`), `none` without signatures.
    pub dkim: &'static str,
    /// `pass`, `fail`, `none` (no record), `temperror` or `permerror`.
    pub dmarc: &'static str,
    /// DMARC failed and the domain's policy is `reject`.
    pub reject: bool,
}

impl Results {
    /// Nothing could be checked (no resolver, or a message that does not parse).
    pub fn unchecked() -> Results {
        Results { authenticated: false, spf: "none", dkim: "none", dmarc: "none", reject: false }
    }

    /// The fields a reply's event carries.
    pub fn write_into(&self, data: &mut Map<String, Value>) {
        data.insert("authenticated".into(), self.authenticated.into());
        data.insert("spf".into(), self.spf.into());
        data.insert("dkim".into(), self.dkim.into());
        data.insert("dmarc".into(), self.dmarc.into());
    }
}

/// The organisational domain of `domain`, approximately: its last two labels, or three under a short
/// second-level label of a two-letter country domain (`shop.example.co.uk` is `example.co.uk`). Herald
/// carries no public suffix list; docs/behaviour.md#receiving-mail says so.
pub fn organisational(domain: &str) -> &str {
    let labels: Vec<&str> = domain.trim_end_matches('.').rsplit('.').collect();
    let keep = match labels.as_slice() {
        [tld, sld, _, ..] if tld.len() == 2 && sld.len() <= 3 => 3,
        _ => 2,
    };
    if labels.len() <= keep {
        return domain;
    }
    let cut: usize = labels[..keep].iter().map(|l| l.len() + 1).sum::<usize>() - 1;
    &domain[domain.len() - cut..]
}

fn spf_word(r: SpfResult) -> &'static str {
    match r {
        SpfResult::Pass => "pass",
        SpfResult::Fail => "fail",
        SpfResult::SoftFail => "softfail",
        SpfResult::Neutral => "neutral",
        SpfResult::TempError => "temperror",
        SpfResult::PermError => "permerror",
        SpfResult::None => "none",
    }
}

fn dkim_word(r: &DkimResult) -> &'static str {
    match r {
        DkimResult::Pass => "pass",
        DkimResult::Neutral(_) => "neutral",
        DkimResult::Fail(_) => "fail",
        DkimResult::PermError(_) => "permerror",
        DkimResult::TempError(_) => "temperror",
        DkimResult::None => "none",
    }
}

/// Checks a received message: `peer` the client's address, `helo` the name it gave, `mail_from` the
/// envelope sender ("" for the null sender), `host` the name Herald's server greets with.
pub async fn check(
    auth: &MessageAuthenticator,
    raw: &[u8],
    peer: IpAddr,
    helo: &str,
    mail_from: &str,
    host: &str,
) -> Results {
    let Some(message) = AuthenticatedMessage::parse(raw) else { return Results::unchecked() };
    let dkim = auth.verify_dkim(&message).await;
    // The null sender is checked as postmaster of the HELO name (RFC 7208 section 2.4).
    let sender = if mail_from.contains('@') { mail_from.to_string() } else { format!("postmaster@{helo}") };
    let spf = auth.verify_spf(SpfParameters::verify_mail_from(peer, helo, host, &sender)).await;
    let mail_from_domain = sender.rsplit_once('@').map_or("", |(_, d)| d).to_ascii_lowercase();
    let dmarc = auth
        .verify_dmarc(
            DmarcParameters::new(&message, &dkim, &mail_from_domain, &spf).with_domain_suffix_fn(organisational),
        )
        .await;
    let dkim_summary = if dkim.iter().any(|o| o.result() == &DkimResult::Pass) {
        "pass"
    } else {
        dkim.first().map_or("none", |o| dkim_word(o.result()))
    };
    let from_domain = dmarc.domain().to_ascii_lowercase();
    let (dmarc_word, authenticated, reject) = match (dmarc.spf_result(), dmarc.dkim_result()) {
        (DmarcResult::TempError(_), _) | (_, DmarcResult::TempError(_)) => ("temperror", false, false),
        (DmarcResult::PermError(_), _) | (_, DmarcResult::PermError(_)) => ("permerror", false, false),
        _ if dmarc.dmarc_record().is_some() => {
            let pass = dmarc.spf_result() == &DmarcResult::Pass || dmarc.dkim_result() == &DmarcResult::Pass;
            (if pass { "pass" } else { "fail" }, pass, !pass && dmarc.policy() == Policy::Reject)
        }
        _ => {
            // No DMARC record: vouched for when a passing identity is of the From domain's organisation.
            let org = organisational(&from_domain);
            let spf_aligned = spf.result() == SpfResult::Pass && organisational(&mail_from_domain) == org;
            let dkim_aligned = dkim.iter().any(|o| {
                o.result() == &DkimResult::Pass
                    && o.signature().is_some_and(|s| organisational(&s.d.to_ascii_lowercase()) == org)
            });
            ("none", !from_domain.is_empty() && (spf_aligned || dkim_aligned), false)
        }
    };
    Results { authenticated, spf: spf_word(spf.result()), dkim: dkim_summary, dmarc: dmarc_word, reject }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_organisational_domain_keeps_two_labels_or_three_under_a_country_domains_short_second_level() {
        assert_eq!(organisational("mail.shop.example.com"), "example.com");
        assert_eq!(organisational("example.com"), "example.com");
        assert_eq!(organisational("com"), "com");
        assert_eq!(organisational("shop.example.co.uk"), "example.co.uk");
        assert_eq!(organisational("example.co.uk"), "example.co.uk");
        assert_eq!(organisational("news.example.de"), "example.de");
    }
}
