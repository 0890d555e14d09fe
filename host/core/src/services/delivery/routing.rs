//! Where an email goes (docs/delivery.md#transports-and-routes): the project's own transport when it
//! picked one, else the transports of the first route of `herald.toml` that matches the email's class,
//! project, sender domain and recipient domain, in failover order (the last route, always there, takes
//! everything else to the server's default transport). And each transport's own limits: at most
//! `max_per_second` messages a second and `max_connections` at once, per process.
//!
//! Must not import: salvo, surrealdb.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{Transport, smtp};
use crate::config::{Config, Limits, TransportTarget};
use crate::domain::routes::{self, MailClass, Route, RouteKey};
use crate::infra::clock::SharedClock;
use crate::infra::ratelimit::SendThrottle;
use crate::store::emails::EmailRow;

/// The routes and each transport's limits.
pub struct Routing {
    routes: Vec<Route>,
    limits: BTreeMap<String, Limits>,
    /// Buckets of the transports with `max_per_second`, keyed by name.
    pacer: SendThrottle,
    /// Slots of the transports with `max_connections` that are not SMTP pools (a pool has its own).
    slots: HashMap<String, Arc<Semaphore>>,
}

/// The transports of the settings by name, but plugins named as themselves (a name that is not here
/// is a transport plugin's): `file`, `smtp` when `smtp_url` is set (also when a caller set it after the
/// settings were read), and the named transports of `herald.toml`.
pub fn transports(config: &Config) -> Result<BTreeMap<String, Transport>, String> {
    let mut out = BTreeMap::new();
    for (name, spec) in &config.delivery.transports {
        let t = match &spec.target {
            TransportTarget::Smtp(url) => {
                let sessions = spec.limits.max_connections.map_or(smtp::SESSIONS, |n| (n as usize).min(smtp::SESSIONS));
                Transport::Smtp(Box::new(smtp::Pool::with_sessions(smtp::Relay::parse(url)?, sessions)))
            }
            TransportTarget::File => Transport::File(config.mail_dir.clone()),
            TransportTarget::Plugin(p) if p == name => continue,
            TransportTarget::Plugin(p) => Transport::Plugin(p.clone()),
        };
        out.insert(name.clone(), t);
    }
    out.entry(crate::config::FILE.to_string()).or_insert_with(|| Transport::File(config.mail_dir.clone()));
    if let (Some(url), false) = (&config.smtp_url, out.contains_key(crate::config::SMTP)) {
        out.insert(crate::config::SMTP.to_string(), Transport::smtp(url)?);
    }
    Ok(out)
}

impl Routing {
    pub fn new(config: &Config, clock: SharedClock) -> Routing {
        let mut routes = config.delivery.routes.clone();
        // The settings end with the catch-all to the default transport; the default is read again here,
        // so a configuration changed after it was read (the tests') still routes where it says.
        match routes.last_mut() {
            Some(last) if last.is_catch_all() => last.transports = vec![config.default_transport()],
            _ => routes.push(Route::catch_all(vec![config.default_transport()])),
        }
        let limits: BTreeMap<String, Limits> =
            config.delivery.transports.iter().map(|(n, s)| (n.clone(), s.limits)).collect();
        let slots = config
            .delivery
            .transports
            .iter()
            .filter(|(_, s)| !matches!(s.target, TransportTarget::Smtp(_)))
            .filter_map(|(n, s)| Some((n.clone(), Arc::new(Semaphore::new(s.limits.max_connections? as usize)))))
            .collect();
        Routing { routes, limits, pacer: SendThrottle::new(0, clock), slots }
    }

    /// The class of an email for the routes.
    pub fn class_of(e: &EmailRow) -> MailClass {
        match (&e.campaign, e.depth) {
            (Some(_), _) => MailClass::Campaign,
            (None, Some(_)) => MailClass::Workflow,
            (None, None) => MailClass::Transactional,
        }
    }

    /// The transports of an email in failover order: the project's own choice, else its route's.
    pub fn transports_of(&self, e: &EmailRow, project_choice: Option<String>) -> Vec<String> {
        if let Some(t) = project_choice {
            return vec![t];
        }
        let key = RouteKey {
            class: Self::class_of(e),
            project: &e.project,
            from_domain: routes::domain_of(&e.from),
            recipient_domain: routes::domain_of(&e.recipient),
        };
        routes::route(&self.routes, &key).map(<[String]>::to_vec).unwrap_or_default()
    }

    /// The transports of Herald's own mail (the `system` class).
    pub fn system_transports(&self) -> Vec<String> {
        let key = RouteKey { class: MailClass::System, project: "", from_domain: "", recipient_domain: "" };
        routes::route(&self.routes, &key).map(<[String]>::to_vec).unwrap_or_default()
    }

    /// Waits until `transport` may take one more message (its `max_per_second`) and for one of its
    /// `max_connections` slots (None: it has no such limit, or its SMTP pool keeps it). `stop` gives up
    /// waiting (a cancelled campaign): None then too.
    pub async fn admit(&self, transport: &str, stop: impl Fn() -> bool) -> Option<OwnedSemaphorePermit> {
        if let Some(rate) = self.limits.get(transport).and_then(|l| l.max_per_second) {
            while !stop() {
                match self.pacer.try_take_at(transport, rate) {
                    Ok(()) => break,
                    Err(ms) => tokio::time::sleep(Duration::from_millis(ms).min(super::GATE_POLL)).await,
                }
            }
        }
        match self.slots.get(transport) {
            Some(s) => s.clone().acquire_owned().await.ok(),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    fn config(toml: &str) -> Config {
        let dir = Config::test_scratch().join(format!("routing-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("herald.toml");
        std::fs::write(&path, toml).unwrap();
        Settings { config: Some(path), db: Some("mem://".into()), ..Default::default() }.resolve().unwrap()
    }

    fn email(from: &str, to: &str, campaign: bool, workflow: bool) -> EmailRow {
        let row = serde_json::json!({
            "id": "e", "project": "0191f0a4-0000-7000-8000-000000000001", "contact": "c", "recipient": to,
            "from": from, "subject": "s", "kind": "TRANSACTIONAL", "message_id": "<m>", "status": "PENDING",
            "created_at": 0, "updated_at": 0,
        });
        let mut e: EmailRow = serde_json::from_value(row).unwrap();
        e.campaign = campaign.then(|| "c1".to_string());
        e.depth = workflow.then_some(1);
        e
    }

    #[test]
    fn an_email_takes_its_projects_choice_else_the_first_matching_route_else_the_default() {
        let c = config(
            r#"
            smtp_url = "smtp://127.0.0.1:2525"
            [transports.primary]
            url = "smtp://127.0.0.1:2526"
            max_per_second = 5
            [transports.backup]
            url = "smtp://127.0.0.1:2527"
            max_connections = 2
            [transports.api]
            plugin = "ses"
            [transports.ses]
            plugin = "ses"
            [[routes]]
            class = "campaign"
            transports = ["primary", "backup"]
            [[routes]]
            recipient_domain = "*.example"
            transports = ["api"]
            [[routes]]
            class = "system"
            transports = ["backup"]
            "#,
        );
        let clock: SharedClock = Arc::new(crate::infra::clock::ManualClock::new(0));
        let r = Routing::new(&c, clock);
        let t = |e: &EmailRow, choice: Option<&str>| r.transports_of(e, choice.map(str::to_string));
        assert_eq!(t(&email("a@shop.test", "x@gmail.com", true, false), None), ["primary", "backup"]);
        assert_eq!(t(&email("a@shop.test", "x@mail.example", false, false), None), ["api"]);
        assert_eq!(t(&email("a@shop.test", "x@example", false, true), None), ["smtp"], "the default");
        assert_eq!(t(&email("a@shop.test", "x@gmail.com", false, true), None), ["smtp"]);
        assert_eq!(t(&email("a@shop.test", "x@gmail.com", true, false), Some("file")), ["file"], "the project's");
        assert_eq!(r.system_transports(), ["backup"]);
        assert_eq!(Routing::class_of(&email("a@b.c", "d@e.f", false, true)), MailClass::Workflow);

        let ts = transports(&c).unwrap();
        let kinds: Vec<(&str, &str)> = ts
            .iter()
            .map(|(n, t)| {
                let kind = match t {
                    Transport::Smtp(_) => "smtp",
                    Transport::File(_) => "file",
                    Transport::Plugin(_) => "plugin",
                };
                (n.as_str(), kind)
            })
            .collect();
        // A plugin under its own name needs no entry: a name not in the map is a plugin's.
        assert_eq!(
            kinds,
            [("api", "plugin"), ("backup", "smtp"), ("file", "file"), ("primary", "smtp"), ("smtp", "smtp")]
        );
    }

    #[test]
    fn a_default_set_after_the_settings_were_read_still_takes_the_rest() {
        let mut c = Config::for_tests();
        c.smtp_url = Some("smtp://127.0.0.1:2525".into());
        let clock: SharedClock = Arc::new(crate::infra::clock::ManualClock::new(0));
        let r = Routing::new(&c, clock);
        assert_eq!(r.transports_of(&email("a@shop.test", "x@y.test", false, false), None), ["smtp"]);
        assert!(transports(&c).unwrap().contains_key("smtp"));
    }

    #[tokio::test]
    async fn a_transports_rate_is_kept_and_its_connections_bounded() {
        let c = config(
            r#"
            [transports.narrow]
            plugin = "ses"
            max_connections = 1
            [transports.slow]
            plugin = "ses"
            max_per_second = 2
            "#,
        );
        let clock = crate::infra::clock::ManualClock::new(0);
        let r = Routing::new(&c, Arc::new(clock.clone()));
        let first = r.admit("narrow", || false).await;
        assert!(first.is_some(), "a slot of its one connection");
        let second = tokio::time::timeout(Duration::from_millis(50), r.admit("narrow", || false)).await;
        assert!(second.is_err(), "the second waits for the first's connection");
        drop(first);
        assert!(r.admit("narrow", || false).await.is_some());
        // Two messages a second: the third waits for the clock, unless told to stop waiting.
        assert!(r.admit("slow", || false).await.is_none() && r.admit("slow", || false).await.is_none());
        assert!(r.pacer.try_take_at("slow", 2).is_err());
        assert!(tokio::time::timeout(Duration::from_secs(1), r.admit("slow", || true)).await.is_ok());
        clock.advance(500);
        assert!(r.pacer.try_take_at("slow", 2).is_ok());
        assert!(r.admit("unlimited", || false).await.is_none());
    }
}
