//! Outbound webhooks (docs/behaviour.md#webhooks): a project's events sent to endpoints its people own,
//! signed the Standard Webhooks way. The fan-out subscribes to the event stream and writes, for each
//! event an enabled endpoint wants, one delivery and the job of its first attempt (one transaction per
//! batch, nothing twice when an event is handed out again). The `webhook.deliver` job makes an attempt
//! under the outbound policy (no private, loopback or link-local address unless the operator allows
//! them), records it with the job of the next one (5 s, 5 min, 30 min, 2 h, 5 h, 8 h, 8 h), and disables an
//! endpoint that has failed every attempt for three days.
//!
//! Must not import: salvo, surrealdb.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;

use crate::domain::status::DeliveryStatus;
use crate::domain::webhooks::{
    self as rules, DISABLE_AFTER_MS, MAX_ENDPOINTS, MAX_EVENT_PATTERNS, pattern_problem, retry_after, wants,
};
use crate::error::Error;
use crate::infra::clock::{SharedClock, rfc3339};
use crate::infra::dkim;
use crate::infra::jobs::{JobContext, JobError, JobWake, Registry};
use crate::plugins::http::{FetchError, FetchRequest, Outbound};
use crate::services::events::{BatchFuture, Subscriber, SubscriberFuture};
use crate::store::events::Event;
use crate::store::jobs::NewJob;
use crate::store::webhooks::{Attempt, AttemptRecord, Delivery, Endpoint, EndpointPatch, NewDelivery, attempt_payload};
use crate::store::{Store, StoreError};

/// The job of one attempt of a delivery.
pub const DELIVER_JOB: &str = "webhook.deliver";
/// Attempts claimed and made at once by one worker (16 gave 665 deliveries/s, 64 gave 1,161:
/// docs/performance.md, Webhooks).
const DELIVER_BATCH: usize = 64;
/// How long one attempt may take, answer included.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// The event name of a test delivery.
pub const TEST_EVENT: &str = "webhook.test";
/// Most deliveries a page lists.
pub const MAX_PAGE: usize = 100;
/// Longest description kept.
pub const MAX_DESCRIPTION: usize = 500;
/// Most characters of an endpoint's answer or error kept with an attempt.
const MAX_ERROR_CHARS: usize = 300;

/// How much of an endpoint's answer is read (its first [`MAX_ERROR_CHARS`] characters are kept): attempts
/// in flight cannot hold megabytes of answers each.
const ANSWER_PREFIX: usize = 4 * 1024;

/// Outbound webhooks: the store, the clock, the key sealing the signing secrets and the HTTP client with
/// the outbound policy.
pub struct Webhooks {
    store: Store,
    clock: SharedClock,
    sealing_key: [u8; 32],
    outbound: Outbound,
    allow_private: bool,
    /// The job worker's wake-up, set once it exists.
    pub wake: OnceLock<JobWake>,
}

/// What a new endpoint is given.
#[derive(Debug, Clone)]
pub struct NewEndpoint {
    pub url: String,
    pub events: Vec<String>,
    pub description: Option<String>,
    pub enabled: bool,
}

/// A change of an endpoint (None: left as it is).
#[derive(Debug, Clone, Default)]
pub struct Change {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub description: Option<Option<String>>,
    pub enabled: Option<bool>,
}

#[derive(Deserialize)]
struct AttemptJob {
    project: String,
    webhook: String,
    event: String,
    /// A manual retry: one attempt, no schedule after it.
    #[serde(default)]
    once: bool,
}

impl Webhooks {
    pub fn new(store: Store, clock: SharedClock, server_secret: &str, allow_private: bool) -> Result<Webhooks, String> {
        let d = crate::infra::security::derive_key(server_secret, "herald-webhook-secrets-v1");
        let mut sealing_key = [0u8; 32];
        sealing_key.copy_from_slice(&d[..32]);
        let outbound = Outbound::new(vec!["*".into()], allow_private, ATTEMPT_TIMEOUT)?.answer_prefix(ANSWER_PREFIX);
        Ok(Webhooks { store, clock, sealing_key, outbound, allow_private, wake: OnceLock::new() })
    }

    fn wake(&self) {
        if let Some(w) = self.wake.get() {
            w.kind(DELIVER_JOB);
        }
    }

    fn seal(&self, key: &[u8]) -> Result<String, Error> {
        dkim::seal(&self.sealing_key, key).map_err(|e| Error::Internal(format!("cannot seal a webhook secret: {e}")))
    }

    fn key_of(&self, e: &Endpoint) -> Result<Vec<u8>, String> {
        dkim::open(&self.sealing_key, &e.secret).map_err(|_| "the endpoint's signing secret cannot be opened".into())
    }

    /// The URL's problems: its form, and an address the outbound policy refuses when it is written as one.
    fn check_url(&self, url: &str) -> Result<(), Error> {
        if let Some(why) = url_problem(url) {
            return Err(Error::field("url", "invalid_string", &why, json!(url)));
        }
        let host = reqwest::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_string)).unwrap_or_default();
        let literal = host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>();
        if !self.allow_private && literal.is_ok_and(|ip| !crate::plugins::http::is_public(ip)) {
            return Err(Error::field(
                "url",
                "private_address",
                "url is a private, loopback or link-local address; the operator has not allowed those \
                 (HERALD_WEBHOOKS_ALLOW_PRIVATE)",
                json!(url),
            ));
        }
        Ok(())
    }

    /// Adds an endpoint; answers it with its signing secret (shown this once).
    pub async fn create(&self, project: &str, new: NewEndpoint) -> Result<(Endpoint, String), Error> {
        self.check_url(&new.url)?;
        check_events(&new.events)?;
        let key = rules::new_key();
        let sealed = self.seal(&key)?;
        let e = self
            .store
            .create_webhook(
                project,
                &new.url,
                &new.events,
                new.description.as_deref(),
                new.enabled,
                &sealed,
                MAX_ENDPOINTS,
                self.clock.now_ms(),
            )
            .await?
            .ok_or_else(|| Error::Conflict(format!("A project has at most {MAX_ENDPOINTS} webhook endpoints")))?;
        Ok((e, rules::secret_of(&key)))
    }

    pub async fn list(&self, project: &str) -> Result<Vec<Endpoint>, Error> {
        Ok(self.store.webhooks(project).await?)
    }

    pub async fn get(&self, project: &str, id: &str) -> Result<Endpoint, Error> {
        self.store.webhook(project, id).await?.ok_or_else(not_found)
    }

    /// Changes an endpoint. Enabling one Herald disabled clears its reason and its run of failures.
    pub async fn update(&self, project: &str, id: &str, change: Change) -> Result<Endpoint, Error> {
        if let Some(url) = &change.url {
            self.check_url(url)?;
        }
        if let Some(events) = &change.events {
            check_events(events)?;
        }
        let patch = EndpointPatch {
            url: change.url,
            events: change.events,
            description: change.description,
            enabled: change.enabled,
            secret: None,
        };
        self.store.update_webhook(project, id, &patch, self.clock.now_ms()).await?.ok_or_else(not_found)
    }

    /// A new signing secret for an endpoint (the old one stops signing at once); answers it, shown once.
    pub async fn rotate(&self, project: &str, id: &str) -> Result<(Endpoint, String), Error> {
        let key = rules::new_key();
        let patch = EndpointPatch { secret: Some(self.seal(&key)?), ..Default::default() };
        let e = self.store.update_webhook(project, id, &patch, self.clock.now_ms()).await?.ok_or_else(not_found)?;
        Ok((e, rules::secret_of(&key)))
    }

    /// Deletes an endpoint and its deliveries (attempts queued for it find it gone and stop).
    pub async fn delete(&self, project: &str, id: &str) -> Result<(), Error> {
        if !self.store.delete_webhook(project, id).await? {
            return Err(not_found());
        }
        while self.store.delete_deliveries(id, 1000).await? > 0 {}
        Ok(())
    }

    /// A page of an endpoint's deliveries, newest first.
    pub async fn deliveries(
        &self,
        project: &str,
        id: &str,
        before: Option<&str>,
        status: Option<DeliveryStatus>,
        limit: usize,
    ) -> Result<Vec<Delivery>, Error> {
        self.get(project, id).await?;
        Ok(self.store.deliveries_page(id, before, status, limit.min(MAX_PAGE + 1)).await?)
    }

    /// Queues one more attempt of a delivery that succeeded or failed (409 while it waits for one).
    pub async fn retry(&self, project: &str, id: &str, event: &str) -> Result<Delivery, Error> {
        self.get(project, id).await?;
        let now = self.clock.now_ms();
        let job = NewJob::new(DELIVER_JOB, attempt_payload(project, id, event, true), now).doc(now);
        let (d, queued) = self
            .store
            .requeue_delivery(id, event, job, now)
            .await?
            .filter(|(d, _)| d.project == project)
            .ok_or_else(|| Error::not_found("DELIVERY_NOT_FOUND", "This endpoint has no such delivery"))?;
        if !queued {
            return Err(Error::Conflict("This delivery is waiting for its next attempt already".into()));
        }
        self.wake();
        Ok(d)
    }

    /// Sends a `webhook.test` event to the endpoint now, whether or not it is enabled: one attempt, made
    /// before answering, recorded as a delivery of its own.
    pub async fn test(&self, project: &str, id: &str) -> Result<Delivery, Error> {
        let e = self.get(project, id).await?;
        let now = self.clock.now_ms();
        let event = uuid::Uuid::now_v7().to_string();
        let body = json!({
            "type": TEST_EVENT,
            "timestamp": rfc3339(now),
            "data": { "id": event, "webhook": id, "message": "A test delivery from Herald" },
        })
        .to_string();
        let row = NewDelivery {
            webhook: id.into(),
            event: event.clone(),
            project: project.into(),
            event_type: TEST_EVENT.into(),
            body,
            test: true,
            job: None,
        };
        self.store.add_deliveries(&[row], now).await?;
        let d = self.store.delivery(id, &event).await?.ok_or_else(not_found)?;
        self.attempt(&e, &d, true).await?;
        self.store.delivery(id, &event).await?.ok_or_else(not_found)
    }

    /// Makes one attempt of a delivery and records it (with the next attempt's job when one is due).
    async fn attempt(&self, e: &Endpoint, d: &Delivery, once: bool) -> Result<(), StoreError> {
        let record = self.try_once(e, d, once).await;
        self.record(&[record]).await
    }

    /// Records attempts in one transaction, and says which endpoints they disabled.
    async fn record(&self, records: &[AttemptRecord]) -> Result<(), StoreError> {
        let disabled = self.store.record_attempts(records, DISABLE_AFTER_MS, self.clock.now_ms()).await?;
        for id in disabled {
            tracing::warn!(webhook = %id, "webhook endpoint disabled: every attempt failed for three days");
        }
        Ok(())
    }

    /// Makes one attempt of a delivery: what to record of it, with the next attempt when one is due.
    async fn try_once(&self, e: &Endpoint, d: &Delivery, once: bool) -> AttemptRecord {
        let now = self.clock.now_ms();
        let started = Instant::now();
        let outcome = match self.key_of(e) {
            Ok(key) => self.post(e, d, &key, now).await,
            Err(why) => Err((None, why)),
        };
        let duration_ms = started.elapsed().as_millis() as i64;
        let (status_code, error) = match outcome {
            Ok(code) => (Some(code), None),
            Err((code, why)) => (code, Some(why)),
        };
        let done = d.attempts.len() + 1;
        let next = match &error {
            None => None,
            Some(_) if once || d.test => None,
            Some(_) => retry_after(done, now).map(|at| {
                let job = NewJob::new(DELIVER_JOB, attempt_payload(&d.project, &e.id, &d.id, false), at).doc(now);
                (at, job)
            }),
        };
        let status = match (&error, &next) {
            (None, _) => DeliveryStatus::Succeeded,
            (Some(_), Some(_)) => DeliveryStatus::Pending,
            (Some(_), None) => DeliveryStatus::Failed,
        };
        let reason = format!(
            "Every attempt failed for {} days (the last: {})",
            DISABLE_AFTER_MS / 86_400_000,
            error.as_deref().unwrap_or_default()
        );
        let (next_at, job) = next.unzip();
        AttemptRecord {
            webhook: e.id.clone(),
            event: d.id.clone(),
            ok: error.is_none(),
            attempt: Attempt { at: now, status_code, error, duration_ms },
            status,
            next_at,
            job,
            reason,
        }
    }

    /// Posts a delivery: the endpoint's status when it answered 2xx, else that status (if any) and why.
    async fn post(&self, e: &Endpoint, d: &Delivery, key: &[u8], now: i64) -> Result<u16, (Option<u16>, String)> {
        let ts = now.div_euclid(1000);
        let req = FetchRequest {
            method: "POST".into(),
            url: e.url.clone(),
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("webhook-id".into(), d.id.clone()),
                ("webhook-timestamp".into(), ts.to_string()),
                ("webhook-signature".into(), rules::signature(key, &d.id, ts, d.body.as_bytes())),
            ],
            body: Some(d.body.as_bytes().to_vec()),
            timeout_ms: None,
        };
        match self.outbound.fetch(req).await {
            Ok(r) if (200..300).contains(&r.status) => Ok(r.status),
            Ok(r) => {
                let text: String = String::from_utf8_lossy(&r.body).chars().take(MAX_ERROR_CHARS).collect();
                Err((Some(r.status), format!("the endpoint answered {}: {}", r.status, text.trim())))
            }
            Err(FetchError::Timeout) => Err((None, format!("no answer within {} seconds", ATTEMPT_TIMEOUT.as_secs()))),
            Err(FetchError::TooLarge) => Err((None, "the answer was too large".into())),
            Err(FetchError::Denied(m) | FetchError::Connect(m) | FetchError::Other(m)) => {
                Err((None, m.chars().take(MAX_ERROR_CHARS).collect()))
            }
        }
    }

    /// Runs a batch of attempt jobs: their deliveries and endpoints read in one query each, the attempts
    /// made at once, their outcomes recorded in one transaction.
    async fn run_batch(self: Arc<Self>, jobs: Vec<JobContext>) -> Vec<Result<(), JobError>> {
        let parsed: Vec<Result<AttemptJob, JobError>> = jobs.iter().map(|ctx| ctx.payload()).collect();
        let pairs: Vec<(String, String)> =
            parsed.iter().flatten().map(|j| (j.webhook.clone(), j.event.clone())).collect();
        let mut ids: Vec<String> = pairs.iter().map(|(w, _)| w.clone()).collect();
        ids.sort_unstable();
        ids.dedup();
        let read = async {
            let deliveries = self.store.deliveries_of(&pairs).await?;
            let endpoints = self.store.webhooks_of(&ids).await?;
            Ok::<_, StoreError>((deliveries, endpoints))
        };
        let (deliveries, endpoints) = match read.await {
            Ok(r) => r,
            Err(e) => return jobs.iter().map(|_| Err(JobError::Retry(e.to_string()))).collect(),
        };
        let deliveries: HashMap<(&str, &str), &Delivery> =
            deliveries.iter().map(|d| ((d.webhook.as_str(), d.id.as_str()), d)).collect();
        let endpoints: HashMap<&str, &Endpoint> = endpoints.iter().map(|e| (e.id.as_str(), e)).collect();
        let mut tries = Vec::new();
        let mut results: Vec<Result<(), JobError>> = Vec::with_capacity(jobs.len());
        for job in &parsed {
            let job = match job {
                Ok(j) => j,
                Err(e) => {
                    results.push(Err(e.clone()));
                    continue;
                }
            };
            results.push(Ok(()));
            let d = deliveries.get(&(job.webhook.as_str(), job.event.as_str()));
            let e = endpoints.get(job.webhook.as_str()).filter(|e| e.project == job.project);
            let (Some(d), Some(e)) = (d, e) else { continue };
            if d.status != DeliveryStatus::Pending {
                continue;
            }
            if !e.enabled && !job.once {
                if let Err(err) = self.store.fail_delivery(&e.id, &d.id, self.clock.now_ms()).await {
                    results.pop();
                    results.push(Err(err.into()));
                }
                continue;
            }
            tries.push(self.try_once(e, d, job.once));
        }
        let records = futures_util::future::join_all(tries).await;
        if let Err(e) = self.record(&records).await {
            return jobs.iter().map(|_| Err(JobError::Retry(e.to_string()))).collect();
        }
        results
    }

    /// Registers the attempt job.
    pub fn register(self: &Arc<Self>, registry: &mut Registry) {
        let me = self.clone();
        registry.register_batch(DELIVER_JOB, DELIVER_BATCH, move |jobs: Vec<JobContext>| me.clone().run_batch(jobs));
    }

    /// The deliveries of a batch of events: for each event, one per enabled endpoint of its project that
    /// wants it, with the job of its first attempt.
    async fn fan_out(&self, events: &[Event]) -> Result<usize, StoreError> {
        let projects: Vec<String> =
            events.iter().map(|e| e.project.clone()).collect::<HashSet<_>>().into_iter().collect();
        if projects.is_empty() {
            return Ok(0);
        }
        let endpoints = self.store.enabled_webhooks(&projects).await?;
        if endpoints.is_empty() {
            return Ok(0);
        }
        let mut by_project: HashMap<&str, Vec<&Endpoint>> = HashMap::new();
        for e in &endpoints {
            by_project.entry(e.project.as_str()).or_default().push(e);
        }
        let wanted: Vec<(&Event, &Endpoint)> = events
            .iter()
            .flat_map(|ev| {
                by_project
                    .get(ev.project.as_str())
                    .into_iter()
                    .flatten()
                    .filter(|e| wants(&e.events, &ev.name))
                    .map(move |e| (ev, *e))
            })
            .collect();
        if wanted.is_empty() {
            return Ok(0);
        }
        // The contacts' addresses, one read per project.
        let mut emails: HashMap<(String, String), String> = HashMap::new();
        let mut contacts: HashMap<&str, Vec<String>> = HashMap::new();
        for (ev, _) in &wanted {
            if !ev.contact.is_empty() {
                contacts.entry(ev.project.as_str()).or_default().push(ev.contact.clone());
            }
        }
        for (project, mut ids) in contacts {
            ids.sort();
            ids.dedup();
            for (id, email) in self.store.contact_emails(project, &ids).await? {
                emails.insert((project.to_string(), id), email);
            }
        }
        let now = self.clock.now_ms();
        let rows: Vec<NewDelivery> = wanted
            .iter()
            .map(|(ev, e)| {
                let email = emails.get(&(ev.project.clone(), ev.contact.clone())).map(String::as_str);
                let body =
                    rules::body(&ev.id, &ev.name, &rfc3339(ev.created_at), &ev.contact, email, &ev.source, &ev.data);
                let job = NewJob::new(DELIVER_JOB, attempt_payload(&ev.project, &e.id, &ev.id, false), now).doc(now);
                NewDelivery {
                    webhook: e.id.clone(),
                    event: ev.id.clone(),
                    project: ev.project.clone(),
                    event_type: ev.name.clone(),
                    body,
                    test: false,
                    job: Some(job),
                }
            })
            .collect();
        let added = self.store.add_deliveries(&rows, now).await?;
        if added > 0 {
            self.wake();
        }
        Ok(added)
    }
}

/// The event stream's subscriber that writes the deliveries.
pub struct Fanout(pub Arc<Webhooks>);

impl Subscriber for Fanout {
    fn name(&self) -> &str {
        "webhooks"
    }

    fn handle<'a>(&'a self, event: &'a Event) -> SubscriberFuture<'a> {
        Box::pin(
            async move { self.0.fan_out(std::slice::from_ref(event)).await.map(|_| ()).map_err(|e| e.to_string()) },
        )
    }

    /// The whole batch in one write: all of it or none of it is handed out.
    fn handle_batch<'a>(&'a self, events: &'a [Event]) -> BatchFuture<'a> {
        Box::pin(async move { self.0.fan_out(events).await.map(|_| ()).map_err(|e| (0, e.to_string())) })
    }
}

fn not_found() -> Error {
    Error::not_found("WEBHOOK_NOT_FOUND", "Webhook endpoint not found")
}

/// The events list's problems: 1 to 50 names or prefixes, each well formed.
fn check_events(events: &[String]) -> Result<(), Error> {
    if events.is_empty() || events.len() > MAX_EVENT_PATTERNS {
        return Err(Error::field(
            "events",
            "invalid_array",
            &format!("events must list 1 to {MAX_EVENT_PATTERNS} event names or prefixes (email.*, or * for all)"),
            json!(events),
        ));
    }
    if let Some(why) = events.iter().find_map(|p| pattern_problem(p)) {
        return Err(Error::field("events", "invalid_string", &why, json!(events)));
    }
    Ok(())
}

/// Why an endpoint URL is refused, if it is: an absolute http or https URL with a host, without a user
/// name or password, up to 2,048 characters. Whether its address may be called is decided per attempt.
pub fn url_problem(url: &str) -> Option<String> {
    if url.len() > rules::MAX_URL_CHARS {
        return Some(format!("url must be at most {} characters", rules::MAX_URL_CHARS));
    }
    let Ok(u) = reqwest::Url::parse(url) else {
        return Some("url must be an absolute http or https URL".into());
    };
    if u.scheme() != "http" && u.scheme() != "https" {
        return Some("url must be an http or https URL".into());
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Some("url must name a host".into());
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Some("url must not carry a user name or password".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        assert_eq!(url_problem("https://hooks.example.com/herald?x=1"), None);
        assert!(url_problem("ftp://example.com/").is_some());
        assert!(url_problem("/relative").is_some());
        assert!(url_problem("https://user:pw@example.com/").is_some());
        assert!(url_problem(&format!("https://example.com/{}", "a".repeat(2048))).is_some());
    }
}
