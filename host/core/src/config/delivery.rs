//! Delivery control's settings (issue 77): named transports (`[transports.<name>]`), routes (`[[routes]]`,
//! first match wins), fixed limits per recipient domain (`[destinations."<domain>"]`) and how long delivery
//! keeps trying (`delivery_give_up_after_secs`), resolved together with the older `smtp_url`, `transport`
//! and `mail_dir` into one [`DeliveryConfig`]. A configuration that names no transport and no route
//! resolves to what Herald did before: one catch-all route to the default transport.
//!
//! Every mistake is refused at start-up with one line naming its key, rather than found by an email
//! that cannot be delivered. Matching an email to a route is pure (`domain::routes`).
//!
//! Must not import: salvo, surrealdb.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::ConfigError;
use crate::domain::domains::normalize_domain;
use crate::domain::routes::{DomainPattern, MailClass, Route};
use herald_plugin_runtime::manifest::valid_name as valid_plugin_name;

/// Default of `delivery_give_up_after_secs`: 72 hours.
pub const GIVE_UP_AFTER_SECS: u64 = crate::domain::deferral::DEFAULT_GIVE_UP_AFTER_SECS as u64;
/// Longest `delivery_give_up_after_secs`: 30 days.
pub const MAX_GIVE_UP_AFTER_SECS: u64 = 30 * 24 * 3600;

/// The transports every server has whatever the settings say: `file` (the `.eml` files in `mail_dir`).
/// `smtp` is one too when `smtp_url` is set.
pub const FILE: &str = "file";
pub const SMTP: &str = "smtp";

/// One `[transports.<name>]` table: exactly one of `url` or `plugin`, and optional limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransportSettings {
    /// An SMTP relay: `smtp://user:pass@host:port` (add `?tls=required` for STARTTLS) or `smtps://`.
    pub url: Option<String>,
    /// A transport plugin's name.
    pub plugin: Option<String>,
    pub max_per_second: Option<u32>,
    pub max_connections: Option<u32>,
}

/// One `[[routes]]` entry; the values stay text here so that a mistake is told in Herald's words.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSettings {
    /// `transactional`, `campaign`, `workflow` or `system`
    pub class: Option<String>,
    /// A project id
    pub project: Option<String>,
    /// `example.com` or `*.example.com`
    pub from_domain: Option<String>,
    /// `example.com` or `*.example.com`
    pub recipient_domain: Option<String>,
    /// Transport names in failover order (required, non-empty)
    pub transports: Option<Vec<String>>,
}

/// Fixed limits of a transport or of a recipient domain (`[destinations."<domain>"]` is one of these).
/// None: no limit of this kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Messages handed over per second.
    pub max_per_second: Option<u32>,
    /// Connections (SMTP sessions) open at once.
    pub max_connections: Option<u32>,
}

/// The delivery settings as read, before [`DeliverySettings::resolve`].
#[derive(Debug, Clone, Default)]
pub struct DeliverySettings {
    pub give_up_after_secs: Option<u64>,
    pub transports: Option<BTreeMap<String, TransportSettings>>,
    pub routes: Option<Vec<RouteSettings>>,
    pub destinations: Option<BTreeMap<String, Limits>>,
}

/// Where a transport hands messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportTarget {
    /// An SMTP relay, by its URL as written.
    Smtp(String),
    /// `.eml` files in the `mail_dir` folder.
    File,
    /// A transport plugin, by name (loaded at run time, so it may be missing).
    Plugin(String),
}

/// A named transport: where it delivers and its own limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportSpec {
    pub target: TransportTarget,
    pub limits: Limits,
}

/// The resolved delivery settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryConfig {
    /// How long after its acceptance an email's delivery stops retrying.
    pub give_up_after_ms: i64,
    /// Every transport by name, the built-in ones included.
    pub transports: BTreeMap<String, TransportSpec>,
    /// The operator's routes, then the catch-all route to the default transport (always last, so every
    /// email has a route).
    pub routes: Vec<Route>,
    /// Lowercase recipient domain -> limits.
    pub destinations: BTreeMap<String, Limits>,
}

fn invalid(message: String) -> ConfigError {
    ConfigError::Invalid(message)
}

/// A transport's name: 1 to 40 lowercase letters, digits, `-` and `_`.
fn valid_transport_name(name: &str) -> bool {
    (1..=40).contains(&name.len())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// Refuses a limit of 0 (`key`: where it was set); leaving a limit out is how to have none.
fn check_limits(key: &str, l: &Limits) -> Result<(), ConfigError> {
    for (name, value) in [("max_per_second", l.max_per_second), ("max_connections", l.max_connections)] {
        if value == Some(0) {
            return Err(invalid(format!("{key}.{name} = 0: at least 1 (leave it out for no limit)")));
        }
    }
    Ok(())
}

/// Where a `[transports.<name>]` table delivers (`key`: `transports.<name>`).
fn target(key: &str, t: &TransportSettings) -> Result<TransportTarget, ConfigError> {
    match (&t.url, &t.plugin) {
        (Some(url), None) => {
            // The URL is never repeated: it may hold a password.
            let u = reqwest::Url::parse(url).map_err(|e| invalid(format!("{key}.url: not a URL ({e})")))?;
            if !matches!(u.scheme(), "smtp" | "smtps") {
                return Err(invalid(format!("{key}.url: scheme {:?}, use smtp:// or smtps://", u.scheme())));
            }
            if u.host_str().is_none_or(str::is_empty) {
                return Err(invalid(format!("{key}.url: no host (smtp://HOST:PORT)")));
            }
            Ok(TransportTarget::Smtp(url.clone()))
        }
        (None, Some(plugin)) if valid_plugin_name(plugin) => Ok(TransportTarget::Plugin(plugin.clone())),
        (None, Some(plugin)) => Err(invalid(format!(
            "{key}.plugin: {plugin:?} is not a plugin name (lowercase letters, digits and hyphens)"
        ))),
        _ => Err(invalid(format!("{key}: set exactly one of url (an SMTP relay) or plugin (a transport plugin)"))),
    }
}

/// `routes[i]` checked against the transports there are: a route that could never carry an email is a
/// mistake, refused.
fn route(key: &str, r: RouteSettings, transports: &BTreeMap<String, TransportSpec>) -> Result<Route, ConfigError> {
    let class = match r.class {
        Some(c) => Some(MailClass::parse(&c).ok_or_else(|| {
            invalid(format!("{key}.class: unknown class {c:?} (transactional, campaign, workflow or system)"))
        })?),
        None => None,
    };
    // Project ids are UUIDs; written in another form (upper case, no hyphens) they are read as the id.
    let project = match r.project {
        Some(p) => Some(
            uuid::Uuid::try_parse(&p)
                .map_err(|_| invalid(format!("{key}.project: {p:?} is not a project id (a UUID)")))?
                .to_string(),
        ),
        None => None,
    };
    let domain = |name: &str, d: Option<String>| match d {
        Some(d) => DomainPattern::parse(&d)
            .map(Some)
            .ok_or_else(|| invalid(format!("{key}.{name}: {d:?} is not a domain name or *.domain"))),
        None => Ok(None),
    };
    let from_domain = domain("from_domain", r.from_domain)?;
    let recipient_domain = domain("recipient_domain", r.recipient_domain)?;
    let names = r.transports.unwrap_or_default();
    if names.is_empty() {
        return Err(invalid(format!("{key}.transports: name at least one transport")));
    }
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(invalid(format!("{key}.transports: {name:?} is named twice")));
        }
        if !transports.contains_key(name) {
            let known: Vec<&str> = transports.keys().map(String::as_str).collect();
            return Err(invalid(format!(
                "{key}.transports: unknown transport {name:?} (configured: {})",
                known.join(", ")
            )));
        }
    }
    Ok(Route { class, project, from_domain, recipient_domain, transports: names })
}

impl DeliverySettings {
    /// Resolves the delivery settings with the older ones: `smtp_url` (makes the `smtp` transport) and
    /// `transport`, the default transport (`smtp`, `file`, a configured transport or a plugin's name; None:
    /// `smtp` when there is an `smtp_url`, else `file`).
    pub fn resolve(self, smtp_url: Option<&str>, default: Option<&str>) -> Result<DeliveryConfig, ConfigError> {
        let secs = self.give_up_after_secs.unwrap_or(GIVE_UP_AFTER_SECS);
        if !(1..=MAX_GIVE_UP_AFTER_SECS).contains(&secs) {
            return Err(invalid(format!(
                "delivery_give_up_after_secs = {secs}: 1 to {MAX_GIVE_UP_AFTER_SECS} seconds (30 days)"
            )));
        }
        let mut transports = BTreeMap::new();
        let builtin = |target| TransportSpec { target, limits: Limits::default() };
        transports.insert(FILE.to_string(), builtin(TransportTarget::File));
        if let Some(url) = smtp_url {
            transports.insert(SMTP.to_string(), builtin(TransportTarget::Smtp(url.to_string())));
        }
        for (name, t) in self.transports.unwrap_or_default() {
            if !valid_transport_name(&name) {
                return Err(invalid(format!(
                    "transports.{name:?}: a transport's name is 1 to 40 lowercase letters, digits, - and _"
                )));
            }
            let key = format!("transports.{name}");
            if transports.contains_key(&name) {
                let why = if name == FILE { "the file transport (mail_dir)" } else { "the transport of smtp_url" };
                return Err(invalid(format!("{key}: the name {name:?} is taken by {why}; choose another")));
            }
            let limits = Limits { max_per_second: t.max_per_second, max_connections: t.max_connections };
            check_limits(&key, &limits)?;
            transports.insert(name, TransportSpec { target: target(&key, &t)?, limits });
        }
        let default = match default {
            Some(name) => name,
            None if smtp_url.is_some() => SMTP,
            None => FILE,
        };
        // A name that is no transport is a plugin's: plugins load at run time, so it cannot be checked here.
        if !transports.contains_key(default) {
            if !valid_plugin_name(default) {
                let known: Vec<&str> = transports.keys().map(String::as_str).collect();
                return Err(invalid(format!(
                    "transport = {default:?}: neither a transport (configured: {}) nor a plugin name (lowercase \
                     letters, digits and hyphens)",
                    known.join(", ")
                )));
            }
            transports.insert(default.to_string(), builtin(TransportTarget::Plugin(default.to_string())));
        }
        let mut routes: Vec<Route> = Vec::new();
        for (i, r) in self.routes.unwrap_or_default().into_iter().enumerate() {
            let key = format!("routes[{i}]");
            let r = route(&key, r, &transports)?;
            if let Some(j) = routes.iter().position(|earlier| earlier.shadows(&r)) {
                let how = if routes[j].is_catch_all() {
                    "has no condition, so it takes every email"
                } else {
                    "takes every email this one would (the first route that matches wins)"
                };
                return Err(invalid(format!("{key}: never used: routes[{j}] before it {how}")));
            }
            routes.push(r);
        }
        routes.push(Route::catch_all(vec![default.to_string()]));
        let mut destinations = BTreeMap::new();
        // Each domain's key as written, to name the first of two spellings of one domain.
        let mut written: BTreeMap<String, String> = BTreeMap::new();
        for (domain, limits) in self.destinations.unwrap_or_default() {
            let key = format!("destinations.{domain:?}");
            let Some(name) = normalize_domain(&domain) else {
                return Err(invalid(format!("{key}: not a domain name")));
            };
            check_limits(&key, &limits)?;
            if let Some(first) = written.insert(name.clone(), domain) {
                return Err(invalid(format!("{key}: the same domain as destinations.{first:?}; set it once")));
            }
            destinations.insert(name, limits);
        }
        Ok(DeliveryConfig { give_up_after_ms: (secs * 1000) as i64, transports, routes, destinations })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Settings};

    /// `toml` as herald.toml, resolved as `herald serve --config <it>` would (no flags).
    fn from_toml(toml: &str) -> Result<Config, ConfigError> {
        with_toml(Settings::default(), toml)
    }

    fn with_toml(flags: Settings, toml: &str) -> Result<Config, ConfigError> {
        let dir = Config::test_scratch().join(format!("delivery-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("herald.toml");
        std::fs::write(&path, toml).unwrap();
        Settings { config: Some(path), ..flags }.resolve()
    }

    /// `toml` is refused with exactly `expect` (after ConfigError's own "invalid setting ").
    fn refused(toml: &str, expect: &str) {
        match from_toml(toml) {
            Ok(_) => panic!("accepted:\n{toml}"),
            Err(e) => assert_eq!(e.to_string(), format!("invalid setting {expect}"), "\n{toml}"),
        }
    }

    fn names(c: &DeliveryConfig) -> Vec<&str> {
        c.transports.keys().map(String::as_str).collect()
    }

    fn spec(target: TransportTarget) -> TransportSpec {
        TransportSpec { target, limits: Limits::default() }
    }

    fn to(transports: &[&str]) -> Vec<String> {
        transports.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn with_nothing_set_every_email_goes_to_the_file_transport() {
        let d = from_toml("").unwrap().delivery;
        assert_eq!(d.transports, BTreeMap::from([("file".to_string(), spec(TransportTarget::File))]));
        assert_eq!(d.routes, [Route::catch_all(to(&["file"]))]);
        assert!(d.destinations.is_empty());
        assert_eq!(d.give_up_after_ms, 259_200_000, "72 hours");
        assert_eq!(Config::for_tests().delivery, d, "the tests' configuration too");
    }

    #[test]
    fn an_smtp_url_alone_makes_the_smtp_transport_the_catch_all() {
        let url = "smtp://user:pass@relay.test:587?tls=required";
        let d = from_toml(&format!("smtp_url = {url:?}\n")).unwrap().delivery;
        assert_eq!(names(&d), ["file", "smtp"]);
        assert_eq!(d.transports["smtp"], spec(TransportTarget::Smtp(url.into())));
        assert_eq!(d.routes, [Route::catch_all(to(&["smtp"]))]);
        // Set as a flag (or HERALD_SMTP_URL) it is the same.
        let flags = Settings { smtp_url: Some(url.into()), ..Default::default() };
        assert_eq!(with_toml(flags, "").unwrap().delivery, d);
    }

    #[test]
    fn the_transport_setting_picks_the_catch_all() {
        let c = |toml: &str| from_toml(toml).unwrap().delivery;
        // Neither configured nor built in: a transport plugin's, loaded at run time.
        let d = c("transport = \"ses\"\n");
        assert_eq!(names(&d), ["file", "ses"]);
        assert_eq!(d.transports["ses"], spec(TransportTarget::Plugin("ses".into())));
        assert_eq!(d.routes, [Route::catch_all(to(&["ses"]))]);
        let d = c("transport = \"file\"\nsmtp_url = \"smtp://relay.test\"\n");
        assert_eq!(names(&d), ["file", "smtp"]);
        assert_eq!(d.routes, [Route::catch_all(to(&["file"]))]);
        let d = c("transport = \"primary\"\n[transports.primary]\nurl = \"smtp://relay.test\"\n");
        assert_eq!(names(&d), ["file", "primary"], "a configured transport is no plugin");
        assert_eq!(d.routes, [Route::catch_all(to(&["primary"]))]);
        // Without smtp_url, `smtp` is a name like any other.
        let d = c(
            "[transports.smtp]\nurl = \"smtps://relay.test\"\n[[routes]]\nclass = \"system\"\ntransports = [\"smtp\"]\n",
        );
        assert_eq!(names(&d), ["file", "smtp"]);
        assert_eq!(d.routes[1], Route::catch_all(to(&["file"])));
        // The rule from before delivery control.
        let err = from_toml("transport = \"smtp\"\n").expect_err("no smtp_url");
        assert_eq!(err.to_string(), "invalid setting transport = \"smtp\" needs smtp_url");
    }

    #[test]
    fn a_full_settings_file_resolves_to_its_transports_routes_and_limits() {
        let project = "0195f0a2-6c1b-7c3e-9a4f-2b8d1e6f0a11";
        let toml = format!(
            r#"
smtp_url = "smtp://relay.internal:25"
delivery_give_up_after_secs = 86400

[transports.primary]
url = "smtp://relay-a:587?tls=required"
max_per_second = 200

[transports.backup]
url = "smtp://relay-b:25"
max_connections = 4

[transports.ses]
plugin = "ses"

[[routes]]
class = "campaign"
project = "{}"
from_domain = "Acme.com"
recipient_domain = "gmail.com"
transports = ["primary", "backup"]

[[routes]]
class = "campaign"
transports = ["ses", "primary"]

[[routes]]
recipient_domain = "*.example"
transports = ["file"]

[destinations."Gmail.com"]
max_per_second = 20
max_connections = 5

[destinations."yahoo.com"]
max_connections = 2
"#,
            project.to_uppercase()
        );
        let d = from_toml(&toml).unwrap().delivery;
        assert_eq!(d.give_up_after_ms, 86_400_000);
        assert_eq!(names(&d), ["backup", "file", "primary", "ses", "smtp"]);
        assert_eq!(
            d.transports["primary"],
            TransportSpec {
                target: TransportTarget::Smtp("smtp://relay-a:587?tls=required".into()),
                limits: Limits { max_per_second: Some(200), max_connections: None },
            }
        );
        assert_eq!(d.transports["backup"].limits, Limits { max_per_second: None, max_connections: Some(4) });
        assert_eq!(d.transports["ses"], spec(TransportTarget::Plugin("ses".into())));
        assert_eq!(d.transports["smtp"], spec(TransportTarget::Smtp("smtp://relay.internal:25".into())));
        assert_eq!(
            d.routes,
            [
                Route {
                    class: Some(MailClass::Campaign),
                    project: Some(project.into()),
                    from_domain: Some(DomainPattern::Exact("acme.com".into())),
                    recipient_domain: Some(DomainPattern::Exact("gmail.com".into())),
                    transports: to(&["primary", "backup"]),
                },
                Route { class: Some(MailClass::Campaign), ..Route::catch_all(to(&["ses", "primary"])) },
                Route {
                    recipient_domain: Some(DomainPattern::Subdomains("example".into())),
                    ..Route::catch_all(to(&["file"]))
                },
                Route::catch_all(to(&["smtp"])),
            ]
        );
        assert_eq!(
            d.destinations,
            BTreeMap::from([
                ("gmail.com".to_string(), Limits { max_per_second: Some(20), max_connections: Some(5) }),
                ("yahoo.com".to_string(), Limits { max_per_second: None, max_connections: Some(2) }),
            ])
        );
        // What the delivery engine will ask.
        use crate::domain::routes::{RouteKey, route};
        let key = |class, from, recipient| RouteKey { class, project, from_domain: from, recipient_domain: recipient };
        let via = |k: RouteKey| route(&d.routes, &k).unwrap().to_vec();
        assert_eq!(via(key(MailClass::Campaign, "acme.com", "GMAIL.com")), to(&["primary", "backup"]));
        assert_eq!(via(key(MailClass::Campaign, "other.org", "gmail.com")), to(&["ses", "primary"]));
        assert_eq!(via(key(MailClass::System, "acme.com", "mx.example")), to(&["file"]));
        assert_eq!(via(key(MailClass::Transactional, "acme.com", "gmail.com")), to(&["smtp"]));
    }

    #[test]
    fn the_give_up_flag_beats_the_file_and_is_held_to_30_days() {
        let flags = Settings { delivery_give_up_after_secs: Some(60), ..Default::default() };
        let c = with_toml(flags, "delivery_give_up_after_secs = 120\n").unwrap();
        assert_eq!(c.delivery.give_up_after_ms, 60_000);
        assert_eq!(from_toml("delivery_give_up_after_secs = 1\n").unwrap().delivery.give_up_after_ms, 1000);
        let most = from_toml("delivery_give_up_after_secs = 2592000\n").unwrap();
        assert_eq!(most.delivery.give_up_after_ms, 2_592_000_000);
        for secs in [0, 2_592_001, u64::MAX / 2] {
            refused(
                &format!("delivery_give_up_after_secs = {secs}\n"),
                &format!("delivery_give_up_after_secs = {secs}: 1 to 2592000 seconds (30 days)"),
            );
        }
    }

    #[test]
    fn a_route_that_could_never_carry_an_email_is_refused_naming_its_key() {
        let head = "smtp_url = \"smtp://relay.test\"\n[transports.primary]\nurl = \"smtp://relay-a\"\n";
        let check = |routes: &str, expect: &str| refused(&format!("{head}{routes}"), expect);
        check(
            "[[routes]]\ntransports = [\"primary\"]\nclass = \"system\"\n[[routes]]\ntransports = [\"backup2\"]\n",
            "routes[1].transports: unknown transport \"backup2\" (configured: file, primary, smtp)",
        );
        check(
            "[[routes]]\ntransports = [\"primary\", \"Primary\"]\n",
            "routes[0].transports: unknown transport \"Primary\" (configured: file, primary, smtp)",
        );
        check("[[routes]]\ntransports = []\n", "routes[0].transports: name at least one transport");
        check("[[routes]]\nclass = \"campaign\"\n", "routes[0].transports: name at least one transport");
        check(
            "[[routes]]\ntransports = [\"primary\", \"smtp\", \"primary\"]\n",
            "routes[0].transports: \"primary\" is named twice",
        );
        check(
            "[[routes]]\nclass = \"marketing\"\ntransports = [\"primary\"]\n",
            "routes[0].class: unknown class \"marketing\" (transactional, campaign, workflow or system)",
        );
        check(
            "[[routes]]\nclass = \"Campaign\"\ntransports = [\"primary\"]\n",
            "routes[0].class: unknown class \"Campaign\" (transactional, campaign, workflow or system)",
        );
        check(
            "[[routes]]\nproject = \"my-project\"\ntransports = [\"primary\"]\n",
            "routes[0].project: \"my-project\" is not a project id (a UUID)",
        );
        check(
            "[[routes]]\nrecipient_domain = \"gmail\"\ntransports = [\"primary\"]\n",
            "routes[0].recipient_domain: \"gmail\" is not a domain name or *.domain",
        );
        check(
            "[[routes]]\nrecipient_domain = \"@gmail.com\"\ntransports = [\"primary\"]\n",
            "routes[0].recipient_domain: \"@gmail.com\" is not a domain name or *.domain",
        );
        check(
            "[[routes]]\nfrom_domain = \"*acme.com\"\ntransports = [\"primary\"]\n",
            "routes[0].from_domain: \"*acme.com\" is not a domain name or *.domain",
        );
        check(
            "[[routes]]\nfrom_domain = \"\"\ntransports = [\"primary\"]\n",
            "routes[0].from_domain: \"\" is not a domain name or *.domain",
        );
    }

    #[test]
    fn a_route_an_earlier_one_leaves_nothing_is_refused_naming_that_one() {
        let check =
            |routes: &str, expect: &str| refused(&format!("smtp_url = \"smtp://relay.test\"\n{routes}"), expect);
        check(
            "[[routes]]\nclass = \"system\"\ntransports = [\"file\"]\n[[routes]]\ntransports = [\"smtp\"]\n\
             [[routes]]\nrecipient_domain = \"gmail.com\"\ntransports = [\"file\"]\n",
            "routes[2]: never used: routes[1] before it has no condition, so it takes every email",
        );
        check(
            "[[routes]]\nclass = \"campaign\"\ntransports = [\"file\"]\n\
             [[routes]]\nclass = \"campaign\"\nrecipient_domain = \"gmail.com\"\ntransports = [\"smtp\"]\n",
            "routes[1]: never used: routes[0] before it takes every email this one would (the first route that \
             matches wins)",
        );
        check(
            "[[routes]]\nrecipient_domain = \"*.example.com\"\ntransports = [\"file\"]\n\
             [[routes]]\nrecipient_domain = \"eu.example.com\"\nclass = \"workflow\"\ntransports = [\"smtp\"]\n",
            "routes[1]: never used: routes[0] before it takes every email this one would (the first route that \
             matches wins)",
        );
        check(
            "[[routes]]\nrecipient_domain = \"Gmail.com\"\ntransports = [\"file\"]\n\
             [[routes]]\nrecipient_domain = \"gmail.com\"\ntransports = [\"smtp\"]\n",
            "routes[1]: never used: routes[0] before it takes every email this one would (the first route that \
             matches wins)",
        );
        // The narrower route first is how to write it; an operator's catch-all last is fine.
        let d = from_toml(
            "smtp_url = \"smtp://relay.test\"\n\
             [[routes]]\nclass = \"campaign\"\nrecipient_domain = \"gmail.com\"\ntransports = [\"smtp\"]\n\
             [[routes]]\nclass = \"campaign\"\ntransports = [\"file\"]\n\
             [[routes]]\nrecipient_domain = \"example.com\"\ntransports = [\"file\"]\n\
             [[routes]]\ntransports = [\"file\", \"smtp\"]\n",
        )
        .unwrap()
        .delivery;
        assert_eq!(d.routes.len(), 5);
        assert_eq!(d.routes[3], Route::catch_all(to(&["file", "smtp"])));
        assert_eq!(d.routes[4], Route::catch_all(to(&["smtp"])), "the default's catch-all stays last");
    }

    #[test]
    fn a_transport_must_have_a_free_name_one_target_and_limits_of_at_least_one() {
        refused(
            "[transports.file]\nurl = \"smtp://relay.test\"\n",
            "transports.file: the name \"file\" is taken by the file transport (mail_dir); choose another",
        );
        refused(
            "smtp_url = \"smtp://relay.test\"\n[transports.smtp]\nurl = \"smtp://other.test\"\n",
            "transports.smtp: the name \"smtp\" is taken by the transport of smtp_url; choose another",
        );
        for bad in ["Primary", "relay.a", "relay a", "", &"a".repeat(41)] {
            refused(
                &format!("[transports.{bad:?}]\nurl = \"smtp://relay.test\"\n"),
                &format!("transports.{bad:?}: a transport's name is 1 to 40 lowercase letters, digits, - and _"),
            );
        }
        let ok = from_toml(&format!(
            "[transports.{}]\nplugin = \"p\"\n[transports.eu_relay-2]\nplugin = \"p\"\n",
            "a".repeat(40)
        ));
        assert_eq!(names(&ok.unwrap().delivery).len(), 3);
        let one = "transports.t: set exactly one of url (an SMTP relay) or plugin (a transport plugin)";
        refused("[transports.t]\nurl = \"smtp://relay.test\"\nplugin = \"ses\"\n", one);
        refused("[transports.t]\nmax_per_second = 5\n", one);
        refused(
            "[transports.t]\nplugin = \"Amazon SES\"\n",
            "transports.t.plugin: \"Amazon SES\" is not a plugin name (lowercase letters, digits and hyphens)",
        );
        refused(
            "[transports.t]\nurl = \"https://user:secret@relay.test\"\n",
            "transports.t.url: scheme \"https\", use smtp:// or smtps://",
        );
        refused("[transports.t]\nurl = \"smtp:relay.test\"\n", "transports.t.url: no host (smtp://HOST:PORT)");
        refused("[transports.t]\nurl = \"smtp://\"\n", "transports.t.url: no host (smtp://HOST:PORT)");
        refused(
            "[transports.t]\nurl = \"relay.test:25\"\n",
            "transports.t.url: scheme \"relay.test\", use smtp:// or smtps://",
        );
        refused(
            "[transports.t]\nurl = \"//relay.test\"\n",
            "transports.t.url: not a URL (relative URL without a base)",
        );
        refused(
            "[transports.t]\nurl = \"smtp://relay.test\"\nmax_per_second = 0\n",
            "transports.t.max_per_second = 0: at least 1 (leave it out for no limit)",
        );
        refused(
            "[transports.t]\nplugin = \"ses\"\nmax_connections = 0\n",
            "transports.t.max_connections = 0: at least 1 (leave it out for no limit)",
        );
        refused(
            "transport = \"Amazon SES\"\n",
            "transport = \"Amazon SES\": neither a transport (configured: file) nor a plugin name (lowercase \
             letters, digits and hyphens)",
        );
    }

    #[test]
    fn a_destination_is_one_domain_with_limits_of_at_least_one() {
        refused("[destinations.gmail]\nmax_per_second = 1\n", "destinations.\"gmail\": not a domain name");
        refused(
            "[destinations.\"*.gmail.com\"]\nmax_per_second = 1\n",
            "destinations.\"*.gmail.com\": not a domain name",
        );
        refused(
            "[destinations.\"gmail.com\"]\nmax_connections = 0\n",
            "destinations.\"gmail.com\".max_connections = 0: at least 1 (leave it out for no limit)",
        );
        refused(
            "[destinations.\"Gmail.com\"]\nmax_per_second = 1\n[destinations.\"gmail.com\"]\nmax_per_second = 2\n",
            "destinations.\"gmail.com\": the same domain as destinations.\"Gmail.com\"; set it once",
        );
        let d = from_toml("[destinations.\"GMAIL.com.\"]\n").unwrap().delivery;
        assert_eq!(d.destinations, BTreeMap::from([("gmail.com".to_string(), Limits::default())]));
    }

    #[test]
    fn an_unknown_or_mistyped_key_is_refused_by_the_parser_in_one_line_quoting_it() {
        for (toml, key) in [
            ("[[routes]]\nrecipient = \"gmail.com\"\ntransports = [\"file\"]\n", "recipient"),
            ("[transports.t]\nurl = \"smtp://relay.test\"\nmax_rate = 3\n", "max_rate"),
            ("[destinations.\"gmail.com\"]\nmax_per_minute = 3\n", "max_per_minute"),
            ("[transports.t]\nurl = \"smtp://relay.test\"\nmax_per_second = -1\n", "max_per_second"),
            ("delivery_give_up_after_secs = -1\n", "delivery_give_up_after_secs"),
        ] {
            match from_toml(toml) {
                Err(e @ ConfigError::Parse { .. }) => {
                    let said = e.to_string();
                    assert!(said.contains(&format!("(`{key}")) && !said.contains('\n'), "{key}: {said}");
                }
                other => panic!("{toml}: {other:?}"),
            }
        }
    }
}
