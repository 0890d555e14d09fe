//! The suppression list's rules (docs/behaviour.md#suppressions): what an entry is, how it is written,
//! and which entries stop mail to an address.

use serde::{Deserialize, Serialize};

use super::contacts::{is_email, normalize_email};
use super::domains::normalize_domain;

/// Why an address or domain is suppressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// A permanent failure: the SMTP peer's 5xx, or a bounce notification.
    Bounce,
    /// The recipient marked an email as spam.
    Complaint,
    /// Added by hand, through the API or the dashboard.
    Manual,
}

impl Reason {
    pub const ALL: [Reason; 3] = [Reason::Bounce, Reason::Complaint, Reason::Manual];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Bounce => "bounce",
            Reason::Complaint => "complaint",
            Reason::Manual => "manual",
        }
    }

    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// An entry of the list: one address, or a whole domain (every address at it, not its subdomains).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Address(String),
    Domain(String),
}

impl Entry {
    /// Reads an entry as a person writes it: an address (lowercased as contacts are), or a domain name
    /// (`example.com`, or `@example.com`). None when it is neither.
    pub fn parse(input: &str) -> Option<Entry> {
        let s = input.trim();
        if let Some(domain) = s.strip_prefix('@') {
            return normalize_domain(domain).map(Entry::Domain);
        }
        if s.contains('@') {
            return is_email(s).then(|| Entry::Address(normalize_email(s)));
        }
        normalize_domain(s).map(Entry::Domain)
    }

    /// The stored form: the address, or the domain name.
    pub fn value(&self) -> &str {
        match self {
            Entry::Address(a) | Entry::Domain(a) => a,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Entry::Address(_) => "address",
            Entry::Domain(_) => "domain",
        }
    }
}

/// The entries that would stop mail to `address` (already lowercased): the address itself and its
/// domain.
pub fn keys_of(address: &str) -> Vec<String> {
    let mut keys = vec![address.to_string()];
    if let Some((_, domain)) = address.rsplit_once('@') {
        keys.push(domain.to_string());
    }
    keys
}

/// The error an email record carries when its recipient was suppressed.
pub fn record_error(reason: Reason, value: &str) -> String {
    format!("not sent: {value} is on the project's suppression list ({})", reason.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_addresses_or_domains_written_as_contacts_are() {
        assert_eq!(Entry::parse(" Ann@Example.COM "), Some(Entry::Address("ann@example.com".into())));
        assert_eq!(Entry::parse("Example.com."), Some(Entry::Domain("example.com".into())));
        assert_eq!(Entry::parse("@mail.example.com"), Some(Entry::Domain("mail.example.com".into())));
        for bad in ["", "@", "ann@", "not a domain", "localhost", "a@b@c.com", "@ann@example.com", "exa mple.com"] {
            assert_eq!(Entry::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_address_is_stopped_by_itself_and_its_domain_not_by_a_parent_domain() {
        assert_eq!(keys_of("ann@mail.example.com"), vec!["ann@mail.example.com", "mail.example.com"]);
        assert!(!keys_of("ann@mail.example.com").contains(&"example.com".to_string()));
    }

    #[test]
    fn reasons_have_one_string_form() {
        for r in Reason::ALL {
            assert_eq!(Reason::parse(r.as_str()), Some(r));
        }
        assert_eq!(Reason::parse("Bounce"), None);
    }
}
