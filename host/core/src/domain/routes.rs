//! Delivery routes (issue 77): which transports, in failover order, carry an email, chosen by its class,
//! project, sender domain and recipient domain. The operator's routes come from `[[routes]]` in
//! herald.toml (`config::delivery` checks and resolves them); the first route that matches wins, and the
//! resolved list always ends with a catch-all route to the default transport, so every email has one.
//!
//! Must not import: salvo, surrealdb.

use crate::domain::domains::normalize_domain;

/// What kind of email is being delivered, as a route's `class` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MailClass {
    /// `/v1/send` and the SMTP relay
    Transactional,
    /// a campaign's emails (and its test sends)
    Campaign,
    /// emails of workflow SEND_EMAIL steps
    Workflow,
    /// Herald's own mail: verification, password reset, invitations, notifications
    System,
}

impl MailClass {
    /// Every class, in declaration order.
    pub const ALL: [MailClass; 4] =
        [MailClass::Transactional, MailClass::Campaign, MailClass::Workflow, MailClass::System];

    /// The class's one string form, a lowercase word.
    pub const fn as_str(self) -> &'static str {
        match self {
            MailClass::Transactional => "transactional",
            MailClass::Campaign => "campaign",
            MailClass::Workflow => "workflow",
            MailClass::System => "system",
        }
    }

    /// The class with this string form (lowercase only, as the settings write it).
    pub fn parse(s: &str) -> Option<MailClass> {
        MailClass::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl std::fmt::Display for MailClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A route's condition on a domain: one domain, or every subdomain of one (`*.example.com` matches
/// `mail.example.com` and `a.b.example.com`, not `example.com` itself). Held lowercase; an email's domain
/// is compared without regard to ASCII case.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DomainPattern {
    Exact(String),
    /// The suffix, without the `*.`.
    Subdomains(String),
}

impl DomainPattern {
    /// Reads `example.com` (a domain name of at least two labels) or `*.suffix` (the suffix may be one
    /// label: `*.de`), lowercased; None when it is neither.
    pub fn parse(s: &str) -> Option<DomainPattern> {
        match s.strip_prefix("*.") {
            // The suffix is checked as the domain it would end: one more label makes it a full name.
            Some(suffix) => {
                normalize_domain(&format!("x.{suffix}")).map(|d| DomainPattern::Subdomains(d["x.".len()..].to_string()))
            }
            None => normalize_domain(s).map(DomainPattern::Exact),
        }
    }

    /// Whether `domain` (an email's domain, any case) is this domain or one of these subdomains.
    pub fn matches(&self, domain: &str) -> bool {
        match self {
            DomainPattern::Exact(d) => domain.eq_ignore_ascii_case(d),
            DomainPattern::Subdomains(suffix) => is_strictly_under(domain, suffix),
        }
    }

    /// Whether every domain `other` matches, this matches too.
    pub fn covers(&self, other: &DomainPattern) -> bool {
        match (self, other) {
            (DomainPattern::Exact(a), DomainPattern::Exact(b)) => a == b,
            (DomainPattern::Exact(_), DomainPattern::Subdomains(_)) => false,
            (DomainPattern::Subdomains(s), DomainPattern::Exact(d)) => is_strictly_under(d, s),
            (DomainPattern::Subdomains(s), DomainPattern::Subdomains(t)) => t == s || is_strictly_under(t, s),
        }
    }
}

impl std::fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DomainPattern::Exact(d) => f.write_str(d),
            DomainPattern::Subdomains(s) => write!(f, "*.{s}"),
        }
    }
}

/// Whether `domain` ends with `.suffix` (ASCII case ignored) after at least one character: a subdomain
/// of `suffix`, not `suffix` itself. Compared as bytes, so a non-ASCII domain is never cut mid-character.
fn is_strictly_under(domain: &str, suffix: &str) -> bool {
    let (d, s) = (domain.as_bytes(), suffix.as_bytes());
    d.len() > s.len() + 1 && d[d.len() - s.len() - 1] == b'.' && d[d.len() - s.len()..].eq_ignore_ascii_case(s)
}

/// One route: the conditions an email must meet (each absent one meets every email) and the transports
/// that carry it, in failover order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub class: Option<MailClass>,
    /// A project id, compared exactly.
    pub project: Option<String>,
    /// The sender's domain (the From address).
    pub from_domain: Option<DomainPattern>,
    pub recipient_domain: Option<DomainPattern>,
    /// Transport names, tried in order; never empty in a resolved configuration.
    pub transports: Vec<String>,
}

/// What routing knows of one email.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteKey<'a> {
    pub class: MailClass,
    pub project: &'a str,
    /// The sender's domain, any case (see [`domain_of`]).
    pub from_domain: &'a str,
    /// The recipient's domain, any case.
    pub recipient_domain: &'a str,
}

impl Route {
    /// A route with no conditions: it matches every email.
    pub fn catch_all(transports: Vec<String>) -> Route {
        Route { class: None, project: None, from_domain: None, recipient_domain: None, transports }
    }

    /// Whether the route has no conditions, so it matches every email.
    pub fn is_catch_all(&self) -> bool {
        self.class.is_none() && self.project.is_none() && self.from_domain.is_none() && self.recipient_domain.is_none()
    }

    /// Whether the email meets every condition of the route.
    pub fn matches(&self, key: &RouteKey) -> bool {
        self.class.is_none_or(|c| c == key.class)
            && self.project.as_deref().is_none_or(|p| p == key.project)
            && self.from_domain.as_ref().is_none_or(|d| d.matches(key.from_domain))
            && self.recipient_domain.as_ref().is_none_or(|d| d.matches(key.recipient_domain))
    }

    /// Whether every email `later` matches, this route matches too: placed before `later`, it leaves
    /// `later` nothing (first match wins).
    pub fn shadows(&self, later: &Route) -> bool {
        fn covers<T>(earlier: &Option<T>, later: &Option<T>, wider: impl Fn(&T, &T) -> bool) -> bool {
            match (earlier, later) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(a), Some(b)) => wider(a, b),
            }
        }
        covers(&self.class, &later.class, |a, b| a == b)
            && covers(&self.project, &later.project, |a, b| a == b)
            && covers(&self.from_domain, &later.from_domain, DomainPattern::covers)
            && covers(&self.recipient_domain, &later.recipient_domain, DomainPattern::covers)
    }
}

/// The transports of the first route that matches the email, in failover order; None when no route
/// does (never with a resolved configuration, whose last route is a catch-all).
pub fn route<'a>(routes: &'a [Route], key: &RouteKey) -> Option<&'a [String]> {
    routes.iter().find(|r| r.matches(key)).map(|r| r.transports.as_slice())
}

/// The domain of an address: what follows its last `@`, or "" when it has none.
pub fn domain_of(address: &str) -> &str {
    address.rsplit_once('@').map_or("", |(_, d)| d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A route from words `class=`, `project=`, `from=`, `to=` (each optional) and the transports after
    /// `->`: `"class=campaign to=*.example.com -> a b"`.
    fn r(spec: &str) -> Route {
        let (conditions, transports) = spec.split_once("->").expect("a route spec has ->");
        let mut route = Route::catch_all(transports.split_whitespace().map(str::to_string).collect());
        for word in conditions.split_whitespace() {
            let (k, v) = word.split_once('=').expect("key=value");
            let domain = || Some(DomainPattern::parse(v).unwrap_or_else(|| panic!("not a pattern: {v}")));
            match k {
                "class" => route.class = Some(MailClass::parse(v).expect("a class")),
                "project" => route.project = Some(v.to_string()),
                "from" => route.from_domain = domain(),
                "to" => route.recipient_domain = domain(),
                _ => panic!("unknown key {k}"),
            }
        }
        route
    }

    /// A key from four words: class, project, sender address, recipient address.
    fn key(spec: &str) -> RouteKey<'_> {
        let w: Vec<&str> = spec.split_whitespace().collect();
        let [class, project, from, to] = w[..] else { panic!("four words: {spec}") };
        RouteKey {
            class: MailClass::parse(class).expect("a class"),
            project,
            from_domain: domain_of(from),
            recipient_domain: domain_of(to),
        }
    }

    #[test]
    fn mail_classes_have_one_lowercase_form_each() {
        for c in MailClass::ALL {
            assert_eq!(MailClass::parse(c.as_str()), Some(c));
            assert_eq!(c.to_string(), c.as_str());
        }
        for bad in ["Campaign", "CAMPAIGN", "campaigns", "marketing", "", " system"] {
            assert_eq!(MailClass::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn domain_patterns_parse() {
        fn check(input: &str, expect: Option<&str>) {
            let got = DomainPattern::parse(input).map(|p| p.to_string());
            assert_eq!(got.as_deref(), expect, "{input:?}");
        }
        check("gmail.com", Some("gmail.com"));
        check("Gmail.COM", Some("gmail.com"));
        check("mail.example.co.uk", Some("mail.example.co.uk"));
        check("*.example.com", Some("*.example.com"));
        check("*.Example.COM", Some("*.example.com"));
        check("*.de", Some("*.de"));
        check("*.example", Some("*.example"));
        check("localhost", None);
        check("", None);
        check("*", None);
        check("*.", None);
        check("*example.com", None);
        check("**.example.com", None);
        check("*.*.example.com", None);
        check("a.*.example.com", None);
        check("*.123", None);
        check("exa mple.com", None);
        check("user@example.com", None);
        check("-a.com", None);
        check("bücher.de", None);
    }

    #[test]
    fn domain_patterns_match() {
        fn check(pattern: &str, domain: &str, expect: bool) {
            let p = DomainPattern::parse(pattern).unwrap();
            assert_eq!(p.matches(domain), expect, "{pattern} on {domain:?}");
        }
        check("gmail.com", "gmail.com", true);
        check("gmail.com", "GMail.Com", true);
        check("gmail.com", "mail.gmail.com", false);
        check("gmail.com", "gmail.co", false);
        check("gmail.com", "xgmail.com", false);
        check("gmail.com", "", false);
        check("*.example.com", "mail.example.com", true);
        check("*.example.com", "a.b.example.com", true);
        check("*.example.com", "MAIL.EXAMPLE.COM", true);
        check("*.example.com", "example.com", false);
        check("*.example.com", ".example.com", false);
        check("*.example.com", "badexample.com", false);
        check("*.example.com", "example.com.evil.net", false);
        check("*.example", "mail.example", true);
        check("*.example", "example", false);
        check("*.de", "shop.de", true);
        check("*.de", "de", false);
        check("*.de", "bücher.de", true);
        check("*.de", "ü", false);
        check("*.de", "", false);
    }

    #[test]
    fn a_pattern_covers_what_it_matches_all_of() {
        fn check(wide: &str, narrow: &str, expect: bool) {
            let (a, b) = (DomainPattern::parse(wide).unwrap(), DomainPattern::parse(narrow).unwrap());
            assert_eq!(a.covers(&b), expect, "{wide} covers {narrow}");
        }
        check("gmail.com", "gmail.com", true);
        check("gmail.com", "mail.gmail.com", false);
        check("gmail.com", "*.gmail.com", false);
        check("*.example.com", "mail.example.com", true);
        check("*.example.com", "example.com", false);
        check("*.example.com", "*.example.com", true);
        check("*.example.com", "*.eu.example.com", true);
        check("*.eu.example.com", "*.example.com", false);
        check("*.com", "*.example.com", true);
        check("*.com", "example.com", true);
        check("*.com", "example.net", false);
    }

    #[test]
    fn a_route_matches_when_every_condition_it_has_holds() {
        fn check(route: &str, email: &str, expect: bool) {
            assert_eq!(r(route).matches(&key(email)), expect, "{route:?} on {email:?}");
        }
        check("-> a", "campaign p1 x@acme.com y@gmail.com", true);
        check("-> a", "system p2 x@herald.test y@localhost", true);
        check("class=campaign -> a", "campaign p1 x@acme.com y@gmail.com", true);
        check("class=campaign -> a", "transactional p1 x@acme.com y@gmail.com", false);
        check("class=workflow -> a", "workflow p1 x@acme.com y@gmail.com", true);
        check("class=system -> a", "campaign p1 x@acme.com y@gmail.com", false);
        check("project=p1 -> a", "campaign p1 x@acme.com y@gmail.com", true);
        check("project=p1 -> a", "campaign p10 x@acme.com y@gmail.com", false);
        check("project=p1 -> a", "campaign P1 x@acme.com y@gmail.com", false);
        check("from=acme.com -> a", "campaign p1 x@ACME.com y@gmail.com", true);
        check("from=acme.com -> a", "campaign p1 x@news.acme.com y@gmail.com", false);
        check("from=*.acme.com -> a", "campaign p1 x@news.acme.com y@gmail.com", true);
        check("from=*.acme.com -> a", "campaign p1 x@acme.com y@gmail.com", false);
        check("to=gmail.com -> a", "campaign p1 x@acme.com y@Gmail.Com", true);
        check("to=gmail.com -> a", "campaign p1 x@acme.com y@googlemail.com", false);
        check("to=gmail.com -> a", "campaign p1 x@acme.com gmail.com", false);
        check("to=*.example -> a", "campaign p1 x@acme.com y@mx.example", true);
        check("to=*.example -> a", "campaign p1 x@acme.com y@example", false);
        check("to=gmail.com -> a", "campaign p1 x@gmail.com y@acme.com", false);
        check("from=gmail.com -> a", "campaign p1 x@gmail.com y@acme.com", true);
        let all = "class=campaign project=p1 from=acme.com to=*.example -> a";
        check(all, "campaign p1 x@acme.com y@mx.example", true);
        check(all, "workflow p1 x@acme.com y@mx.example", false);
        check(all, "campaign p2 x@acme.com y@mx.example", false);
        check(all, "campaign p1 x@acme.org y@mx.example", false);
        check(all, "campaign p1 x@acme.com y@example", false);
    }

    #[test]
    fn the_first_route_that_matches_wins() {
        let routes = [
            r("class=campaign to=gmail.com -> bulk-gmail"),
            r("class=campaign -> bulk backup"),
            r("to=*.example -> lab"),
            r("project=p9 -> p9-relay"),
            r("-> smtp"),
        ];
        fn check(routes: &[Route], email: &str, expect: &[&str]) {
            assert_eq!(route(routes, &key(email)).unwrap(), expect, "{email:?}");
        }
        check(&routes, "campaign p1 x@acme.com y@gmail.com", &["bulk-gmail"]);
        check(&routes, "campaign p1 x@acme.com y@yahoo.com", &["bulk", "backup"]);
        check(&routes, "campaign p9 x@acme.com y@mx.example", &["bulk", "backup"]);
        check(&routes, "transactional p9 x@acme.com y@mx.example", &["lab"]);
        check(&routes, "transactional p9 x@acme.com y@gmail.com", &["p9-relay"]);
        check(&routes, "workflow p1 x@acme.com y@gmail.com", &["smtp"]);
        check(&routes, "system p1 x@herald.test y@example", &["smtp"]);
        assert_eq!(route(&routes[..2], &key("system p1 x@a.com y@b.com")), None, "no catch-all, no route");
        assert_eq!(route(&[], &key("system p1 x@a.com y@b.com")), None);
    }

    #[test]
    fn a_catch_all_has_no_conditions() {
        assert!(r("-> a").is_catch_all());
        assert!(Route::catch_all(vec!["a".into()]).is_catch_all());
        for spec in ["class=system -> a", "project=p -> a", "from=a.com -> a", "to=*.de -> a"] {
            assert!(!r(spec).is_catch_all(), "{spec}");
        }
    }

    #[test]
    fn a_route_shadows_a_later_one_it_matches_every_email_of() {
        fn check(earlier: &str, later: &str, expect: bool) {
            assert_eq!(r(earlier).shadows(&r(later)), expect, "{earlier:?} before {later:?}");
        }
        check("-> a", "-> b", true);
        check("-> a", "class=campaign project=p from=*.a.com to=b.com -> b", true);
        check("class=campaign -> a", "class=campaign to=gmail.com -> b", true);
        check("class=campaign -> a", "class=workflow to=gmail.com -> b", false);
        check("class=campaign -> a", "to=gmail.com -> b", false);
        check("class=campaign to=gmail.com -> a", "class=campaign -> b", false);
        check("to=gmail.com -> a", "to=gmail.com -> b", true);
        check("to=*.example -> a", "to=mx.example -> b", true);
        check("to=*.example.com -> a", "to=example.com -> b", false);
        check("to=mx.example -> a", "to=*.example -> b", false);
        check("project=p1 -> a", "project=p1 from=acme.com -> b", true);
        check("project=p1 -> a", "project=p2 from=acme.com -> b", false);
        check("from=*.acme.com -> a", "from=news.acme.com to=*.de -> b", true);
        check("from=*.acme.com to=*.de -> a", "from=news.acme.com -> b", false);
    }

    #[test]
    fn the_domain_of_an_address_follows_its_last_at() {
        fn check(address: &str, expect: &str) {
            assert_eq!(domain_of(address), expect, "{address:?}");
        }
        check("ann@example.com", "example.com");
        check("\"a@b\"@example.com", "example.com");
        check("Ann@Example.COM", "Example.COM");
        check("ann@", "");
        check("ann", "");
        check("", "");
        check("@example.com", "example.com");
    }
}
