//! Outbound webhooks (docs/behaviour.md#webhooks): a project's events sent to endpoints its people own,
//! signed the Standard Webhooks way. The fan-out subscribes to the event stream and writes, for each
//! event an enabled endpoint wants, one delivery and the job of its first attempt (one transaction per
//! batch, nothing twice when an event is handed out again). The `webhook.deliver` job makes an attempt
//! under the outbound policy (no private, loopback or link-local address unless the operator allows
//! them), records it with the job of the next one (5 s, 5 min, 30 min, 2 h, 5 h, 8 h, 8 h), and disables an
//! endpoint that has failed every attempt for three days. Attempts to one endpoint in flight are capped
//! per process, and a batch waits for its attempts at most [`HOLD`]: one endpoint that never answers
//! slows only its own deliveries.
//!
//! Must not import: salvo, surrealdb.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

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
use crate::store::webhooks::{
    Attempt, AttemptRecord, Delivery, Endpoint, EndpointPatch, NewDelivery, Payload, attempt_payload,
};
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

/// Attempts to one endpoint in flight at once in a process; the next wait for one of them to end.
pub const PER_ENDPOINT: usize = 64;
/// How long a batch of attempts waits for them. Attempts still running then go on without it (their jobs
/// wait until they must have ended and been recorded), and those still waiting for their endpoint are
/// deferred: a worker's batch slot is never held by slow endpoints for longer (docs/behaviour.md#webhooks).
pub const HOLD: Duration = Duration::from_secs(1);
/// How long an attempt deferred because its endpoint had [`PER_ENDPOINT`] attempts in flight waits before
/// it is claimed again: about as long as one of those may still take.
const BUSY_WAIT_MS: i64 = ATTEMPT_TIMEOUT.as_millis() as i64;
/// What an attempt that went on after its batch is given, past its timeout, to be recorded before its job
/// comes back (and finds it recorded).
const RECORD_GRACE_MS: i64 = 5_000;

/// An endpoint's attempts in flight in this process.
struct Gate {
    slots: Arc<Semaphore>,
    /// When one of its attempts last ended (or the gate was made).
    freed: Mutex<Instant>,
}

impl Gate {
    /// Every slot taken and none freed for [`HOLD`]: its attempts are slow, waiting for one is pointless.
    fn stalled(&self) -> bool {
        self.slots.available_permits() == 0 && self.freed.lock().unwrap_or_else(|p| p.into_inner()).elapsed() >= HOLD
    }

    fn freed(&self) {
        *self.freed.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }
}

/// The gates of the endpoints attempted in this process.
#[derive(Default)]
struct Gates(Mutex<HashMap<String, Arc<Gate>>>);

impl Gates {
    /// Gates kept before idle ones are dropped.
    const KEPT: usize = 4096;

    fn of(&self, endpoint: &str) -> Arc<Gate> {
        let mut gates = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if gates.len() >= Self::KEPT && !gates.contains_key(endpoint) {
            gates.retain(|_, g| Arc::strong_count(g) > 1 || g.slots.available_permits() < PER_ENDPOINT);
        }
        let new =
            || Arc::new(Gate { slots: Arc::new(Semaphore::new(PER_ENDPOINT)), freed: Mutex::new(Instant::now()) });
        gates.entry(endpoint.to_string()).or_insert_with(new).clone()
    }
}

/// Where an attempt of a batch stands: waiting for its endpoint, running, or deferred by its batch.
const WAITING: u8 = 0;
const RUNNING: u8 = 1;
const DEFERRED: u8 = 2;

/// Outbound webhooks: the store, the clock, the key sealing the signing secrets and the HTTP client with
/// the outbound policy.
pub struct Webhooks {
    store: Store,
    clock: SharedClock,
    sealing_key: [u8; 32],
    outbound: Outbound,
    allow_private: bool,
    gates: Gates,
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
        Ok(Webhooks {
            store,
            clock,
            sealing_key,
            outbound,
            allow_private,
            gates: Gates::default(),
            wake: OnceLock::new(),
        })
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
        while self.store.delete_deliveries(project, id, 1000).await? > 0 {}
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
            test: true,
            job: None,
        };
        let payload = Payload { event: event.clone(), project: project.into(), body };
        self.store.add_deliveries(&[row], &[payload], now).await?;
        let d = self.store.delivery(id, &event).await?.ok_or_else(not_found)?;
        self.attempt(&e, &d, true).await?;
        self.store.delivery(id, &event).await?.ok_or_else(not_found)
    }

    /// Makes one attempt of a delivery and records it (with the next attempt's job when one is due).
    async fn attempt(&self, e: &Endpoint, d: &Delivery, once: bool) -> Result<(), StoreError> {
        let record = self.try_once(e, d, once, None).await;
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

    /// Makes one attempt of a delivery: what to record of it (with the job that made it), with the next
    /// attempt when one is due.
    async fn try_once(&self, e: &Endpoint, d: &Delivery, once: bool, made_by: Option<String>) -> AttemptRecord {
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
            attempt: Attempt { at: now, status_code, error, duration_ms, job: made_by },
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
    /// made at once (at most [`PER_ENDPOINT`] to one endpoint), and those that ended within [`HOLD`]
    /// recorded in one transaction. An attempt still running then goes on and is recorded when it ends;
    /// its job waits until it must have been, and then finds it made. One still waiting for its endpoint
    /// is deferred without counting as an attempt.
    async fn run_batch(self: Arc<Self>, jobs: Vec<JobContext>) -> Vec<Result<(), JobError>> {
        let deadline = tokio::time::Instant::now() + HOLD;
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
        let deliveries: HashMap<(String, String), Arc<Delivery>> =
            deliveries.into_iter().map(|d| ((d.webhook.clone(), d.id.clone()), Arc::new(d))).collect();
        let endpoints: HashMap<String, Arc<Endpoint>> =
            endpoints.into_iter().map(|e| (e.id.clone(), Arc::new(e))).collect();
        let mut results: Vec<Result<(), JobError>> = Vec::with_capacity(jobs.len());
        let mut started = Vec::new();
        for (i, (ctx, job)) in jobs.iter().zip(&parsed).enumerate() {
            let job = match job {
                Ok(j) => j,
                Err(e) => {
                    results.push(Err(e.clone()));
                    continue;
                }
            };
            results.push(Ok(()));
            let d = deliveries.get(&(job.webhook.clone(), job.event.clone()));
            let e = endpoints.get(job.webhook.as_str()).filter(|e| e.project == job.project);
            let (Some(d), Some(e)) = (d, e) else { continue };
            if d.status != DeliveryStatus::Pending {
                continue;
            }
            // This job's attempt went on after its batch and has been recorded.
            if d.attempts.last().and_then(|a| a.job.as_deref()) == Some(ctx.id.as_str()) {
                continue;
            }
            if !e.enabled && !job.once {
                if let Err(err) = self.store.fail_delivery(&e.id, &d.id, self.clock.now_ms()).await {
                    results[i] = Err(err.into());
                }
                continue;
            }
            let state = Arc::new(AtomicU8::new(WAITING));
            let attempt = self.clone().gated(e.clone(), d.clone(), job.once, ctx.id.clone(), state.clone(), deadline);
            started.push((i, state, tokio::spawn(attempt)));
        }
        let now = self.clock.now_ms();
        let busy = || JobError::Wait {
            until: now + BUSY_WAIT_MS,
            signals: vec![],
            reason: format!("{PER_ENDPOINT} attempts to this endpoint are in flight"),
        };
        let (mut records, mut recorded, mut going_on) = (Vec::new(), Vec::new(), Vec::new());
        for (i, state, mut task) in started {
            match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(Ok(Some(record))) => {
                    records.push(record);
                    recorded.push(i);
                }
                Ok(Ok(None)) => results[i] = Err(busy()),
                Ok(Err(e)) => results[i] = Err(JobError::Retry(format!("the attempt did not end: {e}"))),
                Err(_) if state.compare_exchange(WAITING, DEFERRED, Ordering::SeqCst, Ordering::SeqCst).is_ok() => {
                    task.abort();
                    results[i] = Err(busy());
                }
                Err(_) => {
                    going_on.push(task);
                    results[i] = Err(JobError::Wait {
                        until: now + ATTEMPT_TIMEOUT.as_millis() as i64 + RECORD_GRACE_MS,
                        signals: vec![],
                        reason: "the attempt is in flight".into(),
                    });
                }
            }
        }
        if !going_on.is_empty() {
            tokio::spawn(self.clone().record_as_they_end(going_on));
        }
        if let Err(e) = self.record(&records).await {
            for i in recorded {
                results[i] = Err(JobError::Retry(e.to_string()));
            }
        }
        results
    }

    /// One attempt of a batch: waits for a slot of its endpoint until `deadline` (none when the endpoint
    /// is stalled), unless its batch defers it meanwhile. None when it was not made.
    async fn gated(
        self: Arc<Self>,
        e: Arc<Endpoint>,
        d: Arc<Delivery>,
        once: bool,
        job: String,
        state: Arc<AtomicU8>,
        deadline: tokio::time::Instant,
    ) -> Option<AttemptRecord> {
        let gate = self.gates.of(&e.id);
        let slot = match gate.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) if gate.stalled() => return None,
            Err(_) => tokio::time::timeout_at(deadline, gate.slots.clone().acquire_owned()).await.ok()?.ok()?,
        };
        if state.compare_exchange(WAITING, RUNNING, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            return None;
        }
        let record = self.try_once(&e, &d, once, Some(job)).await;
        drop(slot);
        gate.freed();
        Some(record)
    }

    /// Records attempts that went on after their batch, each as it ends. One that cannot be recorded is
    /// made again when its job comes back.
    async fn record_as_they_end(self: Arc<Self>, attempts: Vec<JoinHandle<Option<AttemptRecord>>>) {
        let mut attempts: FuturesUnordered<_> = attempts.into_iter().collect();
        while let Some(ended) = attempts.next().await {
            if let Ok(Some(record)) = ended
                && let Err(e) = self.record(std::slice::from_ref(&record)).await
            {
                tracing::warn!(webhook = %record.webhook, error = %e, "cannot record a webhook attempt");
            }
        }
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
                let job = NewJob::new(DELIVER_JOB, attempt_payload(&ev.project, &e.id, &ev.id, false), now).doc(now);
                NewDelivery {
                    webhook: e.id.clone(),
                    event: ev.id.clone(),
                    project: ev.project.clone(),
                    event_type: ev.name.clone(),
                    test: false,
                    job: Some(job),
                }
            })
            .collect();
        // One body per event, whatever the number of endpoints that want it.
        let mut seen = HashSet::new();
        let payloads: Vec<Payload> = wanted
            .iter()
            .filter(|(ev, _)| seen.insert(ev.id.as_str()))
            .map(|(ev, _)| {
                let email = emails.get(&(ev.project.clone(), ev.contact.clone())).map(String::as_str);
                let body =
                    rules::body(&ev.id, &ev.name, &rfc3339(ev.created_at), &ev.contact, email, &ev.source, &ev.data);
                Payload { event: ev.id.clone(), project: ev.project.clone(), body }
            })
            .collect();
        let added = self.store.add_deliveries(&rows, &payloads, now).await?;
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
