//! Delivery: the `email.deliver` jobs. Each email's message is built and DKIM-signed (`message.rs`) and
//! handed to the transports of its route (`attempt.rs`; `transport.rs`: Herald's SMTP session pools or
//! `.eml` files; or a transport plugin, which receives the structured message and the signed raw bytes);
//! the claims and outcomes of campaign hand-overs go through the ledger (`ledger.rs`).
//! Outcomes (docs/behaviour.md#delivery-and-email-statuses, docs/delivery.md): accepted → SENT and
//! `email.sent`; a temporary failure (4xx, a connection, a transport that is down) → DEFERRED, tried again
//! on its schedule or when its transport is back (`breaker.rs`), FAILED only when its give-up window
//! ends; a permanent failure (5xx) → BOUNCED, the contact unsubscribed, `email.bounce` and
//! `contact.unsubscribed`.
//!
//! Must not import: salvo, surrealdb.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::domain::deferral;
use crate::domain::status::EmailStatus;
use crate::infra::jobs::{JobContext, JobError, Registry};
use crate::services::sending_domains::Domains;
use crate::store::emails::{DeliveryOutcome, EmailRow};
use crate::store::events::Event;

pub const DELIVER_JOB: &str = "email.deliver";
/// Deliveries of campaign emails: the same work, claimed after `email.deliver`, so a campaign's long
/// queue never holds up transactional mail.
pub const DELIVER_CAMPAIGN_JOB: &str = "email.deliver.campaign";
/// Attempts of a delivery job that failed itself (the database, building a message). A deferred email
/// does not spend them: its job waits (`JobError::Wait`).
pub const DELIVER_ATTEMPTS: i64 = 6;

mod attempt;
pub mod breaker;
pub mod handover;
pub mod ledger;
mod message;
pub mod pacing;
pub mod routing;
pub mod smtp;
mod transport;

use attempt::{Deferred, defer_or_fail, event, outcome};
pub use message::{StoredAttachment, build_message};
pub use transport::{SendError, Transport};

/// A verified domain's project and its DKIM signer.
pub type SignerEntry = (String, Arc<crate::infra::dkim::Signer>);

/// Delivery with its dependencies.
pub struct Delivery {
    /// The transports by name (`routing::transports`): `file`, `smtp` when the server has an SMTP URL,
    /// the named ones of `herald.toml`. A name not here is a transport plugin's.
    pub transports: BTreeMap<String, Transport>,
    /// The routes and each transport's limits.
    pub routing: routing::Routing,
    /// Each recipient domain's pace (`pacing.rs`).
    pub pacing: Arc<pacing::Pacing>,
    /// `smtp`, `file` or a transport plugin's name, for projects that have not picked one.
    pub default_transport: String,
    pub plugins: Arc<crate::plugins::PluginHost>,
    /// Each sender domain's signer (None: not verified), read at most every few seconds.
    pub signers: std::sync::Mutex<HashMap<String, (Option<SignerEntry>, std::time::Instant)>>,
    pub domains: Arc<Domains>,
    /// Messages per second per project handed to the transport.
    pub throttle: crate::infra::ratelimit::SendThrottle,
    /// Sign with the sender domain's DKIM key.
    pub sign: bool,
    /// Claims and outcomes, group-committed (`ledger.rs`).
    pub ledger: ledger::Ledger,
    /// Campaign hand-overs in flight in this process (claimed, outcome not yet written): at most
    /// [`HANDOVERS`], so a crash leaves at most that many emails UNCERTAIN.
    pub handovers: Arc<handover::Handovers>,
    /// The return-path host and the key of its tokens: each email's envelope sender is then
    /// `b+<token>@<host>` (`domain::return_path`), else its From address.
    pub return_path: Option<(String, Vec<u8>)>,
    /// The transports this process found down (`breaker.rs`).
    pub breakers: breaker::Breakers,
    /// How long after it was written a deferred email is given up (FAILED), in ms.
    pub give_up_after_ms: i64,
    /// Wakes the job worker when a transport is back (set once the worker exists).
    pub wake: std::sync::OnceLock<crate::infra::jobs::JobWake>,
}

/// How often a delivery batch re-reads the gates of its campaigns (a cancel reaches the emails waiting
/// for the throttle within this time; one that reaches its claim first is cancelled by the claim).
const GATE_POLL: Duration = Duration::from_millis(100);

/// Campaign emails in a hand-over at once in one process (claimed, outcome not yet written): one per
/// SMTP session. A slot's outcome is written with the next claim of the slot (`handover.rs`), so a
/// session goes on to its next message without waiting for a round of its own.
pub const HANDOVERS: usize = smtp::SESSIONS;

/// A delivery job's payload: one email (a test send) or several: the emails of one `/v1/send`
/// transaction, or a chunk of a campaign's emails.
#[derive(Deserialize)]
struct Payload {
    #[serde(default)]
    email: Option<String>,
    #[serde(default)]
    emails: Vec<String>,
    project: String,
}

/// Jobs of `email.deliver` claimed and delivered together (each carries up to
/// [`crate::store::emails::SEND_JOB_CHUNK`] emails).
pub const DELIVER_BATCH: usize = 16;

/// How one email of a batch ended.
#[derive(Debug, Clone)]
enum Done {
    /// Handed over and accepted, or decided without a hand-over (cancelled, uncertain, failed).
    Settled,
    /// Refused permanently (the peer's reply): its contact is unsubscribed and its address suppressed
    /// once the batch is recorded.
    Bounced(String),
    /// Deferred: its job runs again at `at` (its next attempt, or its window's end), or sooner on one
    /// of the signals it `waits` for (its transports back, `breaker.rs`).
    Deferred { at: i64, waits: Vec<String> },
}

/// Why a campaign email found SENDING when its job runs again is not sent again.
pub const INTERRUPTED: &str =
    "interrupted during hand-over: the transport may or may not have taken it, so it is not sent again";

/// The ids of the emails among `todo` (test sends aside) whose recipient is on their project's
/// suppression list, each with the error its record takes: one read per project.
async fn suppressed_among(
    store: &crate::store::Store,
    todo: &[Option<&EmailRow>],
) -> Result<HashMap<String, String>, String> {
    let mut by_project: HashMap<&str, Vec<String>> = HashMap::new();
    for e in todo.iter().flatten().filter(|e| !e.contact.is_empty()) {
        by_project.entry(e.project.as_str()).or_default().push(e.recipient.to_ascii_lowercase());
    }
    let mut out = HashMap::new();
    for (project, recipients) in by_project {
        let found =
            crate::services::suppressions::among(store, project, &recipients).await.map_err(|e| e.to_string())?;
        if found.is_empty() {
            continue;
        }
        for e in todo.iter().flatten().filter(|e| e.project == project) {
            if let Some(why) = found.get(&e.recipient.to_ascii_lowercase()) {
                out.insert(e.id.clone(), why.clone());
            }
        }
    }
    Ok(out)
}

/// What a job's emails came to: done, failed (retried with backoff), or waiting for the earliest
/// deferred email's time or its transports' signals.
fn job_result(results: &[&Result<Done, String>]) -> Result<(), JobError> {
    if let Some(Err(msg)) = results.iter().find(|r| r.is_err()) {
        return Err(JobError::Retry(msg.clone()));
    }
    let mut until: Option<i64> = None;
    let mut signals: Vec<String> = Vec::new();
    for r in results {
        if let Ok(Done::Deferred { at, waits }) = r {
            until = Some(until.map_or(*at, |u| u.min(*at)));
            for s in waits {
                if !signals.contains(s) {
                    signals.push(s.clone());
                }
            }
        }
    }
    match until {
        None => Ok(()),
        Some(until) => {
            let reason = "deferred: its emails are tried again later (docs/delivery.md#deferral)".to_string();
            Err(JobError::Wait { until, signals, reason })
        }
    }
}

impl Delivery {
    /// The envelope sender of an email: its VERP return path when a return-path host is configured
    /// (docs/behaviour.md#return-path), else its From address.
    fn envelope_sender(&self, e: &EmailRow) -> String {
        self.return_path
            .as_ref()
            .and_then(|(host, key)| crate::domain::return_path::address(key, &e.id, host))
            .unwrap_or_else(|| e.from.clone())
    }

    /// `email.deliver` jobs carry the emails of one `/v1/send` transaction (up to
    /// [`crate::store::emails::SEND_JOB_CHUNK`]; one for a test send) and are claimed [`DELIVER_BATCH`] at a time;
    /// `email.deliver.campaign` jobs carry a chunk of a campaign's emails (`campaign_delivery_chunk`) and
    /// are claimed one at a time. Re-running a job (a deferral, a crash) delivers only what is still
    /// PENDING or DEFERRED and due; a campaign email left SENDING becomes UNCERTAIN.
    pub fn register(self: &Arc<Self>, registry: &mut Registry) {
        for (kind, priority, jobs) in [(DELIVER_JOB, 100, DELIVER_BATCH), (DELIVER_CAMPAIGN_JOB, 1, 1)] {
            let d = self.clone();
            registry.register_batch(kind, jobs, move |ctxs: Vec<JobContext>| {
                let d = d.clone();
                async move {
                    // A job whose payload does not parse delivers nothing and is dead-lettered at once.
                    let malformed: Vec<Option<JobError>> = ctxs.iter().map(|c| c.payload::<Payload>().err()).collect();
                    let results = d.deliver_batch(ctxs).await;
                    results
                        .into_iter()
                        .zip(malformed)
                        .map(|(r, bad)| match bad {
                            Some(e) => Err(e),
                            None => r,
                        })
                        .collect::<Vec<_>>()
                }
            });
            registry.set_priority(kind, priority);
        }
    }

    /// The transports of an email, in failover order: the project's own transport when it picked one,
    /// else its route's (`routing.rs`).
    async fn transports_of(&self, store: &crate::store::Store, e: &EmailRow) -> Result<Vec<String>, String> {
        let choice = store.project_cached(&e.project).await.map_err(|e| e.to_string())?.and_then(|p| p.transport);
        Ok(self.routing.transports_of(e, choice))
    }

    /// The transport of Herald's own mail (no project): the first SMTP or file transport of the
    /// `system` route, else SMTP when the server has it, else the files.
    pub fn system_transport(&self) -> Option<&Transport> {
        let routed = self.routing.system_transports().into_iter().filter_map(|t| self.transports.get(&t));
        routed
            .into_iter()
            .find(|t| matches!(t, Transport::Smtp(_) | Transport::File(_)))
            .or_else(|| self.transports.get("smtp"))
            .or_else(|| self.transports.get("file"))
    }

    /// Delivers a batch: one read of the emails, the messages built and signed, then each email handed
    /// over on its own (throttle, a transport session, a claim for campaign mail, the conversation, its
    /// outcome written through the ledger at once). A job fails (and retries) when an email's outcome
    /// could not be written; it waits (`JobError::Wait`) while some of its emails are deferred.
    async fn deliver_batch(&self, ctxs: Vec<JobContext>) -> Vec<Result<(), JobError>> {
        let n = ctxs.len();
        let Some(first) = ctxs.first() else { return vec![] };
        let (store, clock) = (first.store.clone(), first.clock.clone());
        let fail = |e: String| vec![Err(JobError::Retry(e)); n];
        // Every email of every job, with the index of its job.
        let mut items: Vec<(usize, String, String)> = Vec::new();
        for (i, c) in ctxs.iter().enumerate() {
            if let Ok(p) = serde_json::from_value::<Payload>(c.payload.clone()) {
                for email in p.email.into_iter().chain(p.emails) {
                    items.push((i, email, p.project.clone()));
                }
            }
        }
        let ids: Vec<String> = items.iter().map(|(_, e, _)| e.clone()).collect();
        let rows = match store.emails_by_ids(&ids).await {
            Ok(r) => r,
            Err(e) => return fail(e.to_string()),
        };
        let by_id: HashMap<&str, &EmailRow> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
        // A deleted project's mail is not sent (its purge job deletes the records).
        let mut live = HashMap::new();
        for (_, _, project) in &items {
            if !live.contains_key(project) {
                match store.project_cached(project).await {
                    Ok(p) => live.insert(project.clone(), p.is_some()),
                    Err(e) => return fail(e.to_string()),
                };
            }
        }
        // A suspended project's jobs wait, held, until the suspension is lifted (docs/behaviour.md,
        // project setup and security): their emails stay PENDING and nothing is lost.
        let held = match self.hold_suspended(&store, &ctxs, clock.now_ms()).await {
            Ok(h) => h,
            Err(e) => return fail(e),
        };
        // The email of each item, when it still needs delivering (and belongs to the job's project).
        let todo: Vec<Option<&EmailRow>> = items
            .iter()
            .map(|(job, email, project)| {
                let e = by_id.get(email.as_str())?;
                let wanted = held[*job].is_none()
                    && live.get(project).copied().unwrap_or(false)
                    && e.project == *project
                    && matches!(e.status, EmailStatus::Pending | EmailStatus::Sending | EmailStatus::Deferred);
                wanted.then_some(*e)
            })
            .collect();
        // Marketing mail never goes to an unsubscribed contact: a marketing campaign email whose contact
        // unsubscribed after it was written (say, through an earlier email's one-click link) is cancelled.
        let marketing: Vec<String> = todo
            .iter()
            .flatten()
            .filter(|e| e.campaign.is_some() && e.kind == "MARKETING")
            .map(|e| e.contact.clone())
            .collect();
        let gone: HashSet<String> = match store.unsubscribed_of(&marketing).await {
            Ok(ids) => ids.into_iter().collect(),
            Err(e) => return fail(e.to_string()),
        };
        // A recipient put on the suppression list after its email was written (a bounce of an earlier
        // email, an entry added by hand) is sent nothing: the email is SUPPRESSED
        // (docs/behaviour.md#suppressions).
        let suppressed = match suppressed_among(&store, &todo).await {
            Ok(s) => s,
            Err(e) => return fail(e),
        };
        // What each item came to without a hand-over (None: it is handed over below, or needs nothing).
        let mut early: Vec<Option<Done>> = vec![None; items.len()];
        let (mut settled, mut events): (Vec<DeliveryOutcome>, Vec<Event>) = (Vec::new(), Vec::new());
        let now = clock.now_ms();
        let deadline = |e: &EmailRow| deferral::deadline(e.window_start(), self.give_up_after_ms);
        let mut todo: Vec<Option<&EmailRow>> = todo
            .into_iter()
            .enumerate()
            .map(|(i, e)| match e {
                Some(e)
                    if matches!(e.status, EmailStatus::Pending | EmailStatus::Deferred)
                        && suppressed.contains_key(&e.id) =>
                {
                    settled.push(outcome(e, EmailStatus::Suppressed, suppressed.get(&e.id).cloned(), None));
                    None
                }
                // A campaign email still SENDING was inside a transport conversation when the run that
                // claimed it stopped (a crash, a lost lease): it may have gone, so it never goes again.
                Some(e) if e.campaign.is_some() && e.status == EmailStatus::Sending => {
                    settled.push(outcome(e, EmailStatus::Uncertain, Some(INTERRUPTED.into()), None));
                    None
                }
                Some(e) if e.campaign.is_some() && e.kind == "MARKETING" && gone.contains(&e.contact) => {
                    let why = "the contact unsubscribed before delivery".to_string();
                    settled.push(outcome(e, EmailStatus::Cancelled, Some(why), None));
                    None
                }
                // Its window has ended: FAILED with the last reason, without another attempt.
                Some(e) if e.status == EmailStatus::Deferred && deferral::due_to_fail(deadline(e), now) => {
                    let why = e.error.clone().unwrap_or_else(|| "deferred until its give-up window ended".into());
                    events.extend(event(e, "email.failed", Some(&why), now));
                    settled.push(outcome(e, EmailStatus::Failed, Some(why), None));
                    None
                }
                // Not its time yet (its job runs for another email of it).
                Some(e) if e.status == EmailStatus::Deferred && !deferral::due(e.next_attempt_at, now) => {
                    let at = e.next_attempt_at.unwrap_or(now).min(deadline(e));
                    early[i] = Some(Done::Deferred { at, waits: vec![] });
                    None
                }
                other => other,
            })
            .collect();
        // Each email's transports; one whose every transport is known down waits for them without an
        // attempt (and is not built or signed).
        let mut routes: Vec<Vec<String>> = vec![Vec::new(); items.len()];
        for (i, slot) in todo.iter_mut().enumerate() {
            let Some(e) = *slot else { continue };
            let transports = match self.transports_of(&store, e).await {
                Ok(t) => t,
                Err(err) => return fail(err),
            };
            let down: Vec<String> = transports.iter().filter_map(|t| self.breakers.down(t)).collect();
            if down.len() == transports.len() {
                let why = format!("its transport is down: {}", down.join("; "));
                // Already waiting for its transport: nothing to write.
                let waiting = e.status == EmailStatus::Deferred && e.next_attempt_at.is_none();
                let waits = transports.iter().map(|t| breaker::signal(t)).collect();
                let (o, ev, done) = defer_or_fail(e, &why, Deferred::Waiting, waits, deadline(e), now);
                if !waiting || o.status != EmailStatus::Deferred {
                    settled.push(o);
                    events.extend(ev);
                }
                early[i] = Some(done);
                *slot = None;
            } else {
                routes[i] = transports;
            }
        }
        if let Err(e) = self.ledger.record(settled, events, false).await {
            return fail(e);
        }
        // Campaigns cancelled meanwhile (their emails are cancelled by their claims, at once).
        let mut campaigns: Vec<String> = todo.iter().flatten().filter_map(|e| e.campaign.clone()).collect();
        campaigns.sort_unstable();
        campaigns.dedup();
        let closed: HashSet<String> = match store.closed_gates(&campaigns).await {
            Ok(c) => c.into_iter().collect(),
            Err(e) => return fail(e.to_string()),
        };
        // Each campaign's gate as this batch knows it, re-read while the batch runs: an email waiting
        // for the throttle learns of a cancel within [`GATE_POLL`] and is cancelled by its claim at once.
        let gates: HashMap<String, std::sync::atomic::AtomicBool> =
            campaigns.iter().map(|c| (c.clone(), std::sync::atomic::AtomicBool::new(closed.contains(c)))).collect();
        let watch = async {
            let open: Vec<String> = campaigns.iter().filter(|c| !closed.contains(*c)).cloned().collect();
            loop {
                tokio::time::sleep(GATE_POLL).await;
                if let Ok(now_closed) = store.closed_gates(&open).await {
                    for c in now_closed {
                        if let Some(g) = gates.get(&c) {
                            g.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                    }
                }
            }
        };
        // The emails of a cancelled campaign are not built or signed: their claim cancels them.
        let to_build: Vec<Option<&EmailRow>> =
            todo.iter().map(|e| e.filter(|e| e.campaign.as_ref().is_none_or(|c| !closed.contains(c)))).collect();
        let built = self.build_all(&store, clock.now_ms(), &to_build).await;
        let sends = todo.iter().zip(built).zip(&routes).zip(early).map(|(((e, raw), transports), early)| {
            let clock = &clock;
            let gates = &gates;
            async move {
                match (e, raw) {
                    (None, _) => Ok(early.unwrap_or(Done::Settled)),
                    (Some(_), Err(msg)) => Err(msg),
                    (Some(e), Ok(raw)) => {
                        let gate = e.campaign.as_ref().and_then(|c| gates.get(c));
                        self.deliver_one(clock, e, raw, transports, gate).await
                    }
                }
            }
        });
        let done = tokio::select! {
            done = futures_util::future::join_all(sends) => done,
            _ = watch => unreachable!("the gate watch never ends"),
        };
        // A permanent bounce unsubscribes the contact, with its event when it really flips, and suppresses
        // its address.
        for (e, r) in todo.iter().zip(&done) {
            let (Some(e), Ok(Done::Bounced(why))) = (e, r) else { continue };
            if let Err(err) =
                crate::services::ingest::set_subscribed(&store, &clock, &e.project, &e.contact, false).await
            {
                tracing::warn!(email = %e.id, error = %err, "cannot unsubscribe a bounced contact");
            }
            let now = clock.now_ms();
            let reason = crate::domain::suppressions::Reason::Bounce;
            crate::services::suppressions::after_refusal(
                &store,
                &e.project,
                &e.recipient,
                reason,
                Some(why),
                &e.id,
                now,
            )
            .await;
        }
        (0..n)
            .map(|job| match &held[job] {
                Some(r) => r.clone().map_err(JobError::Retry),
                None => {
                    let mine: Vec<&Result<Done, String>> =
                        items.iter().zip(&done).filter(|((j, _, _), _)| *j == job).map(|(_, r)| r).collect();
                    job_result(&mine)
                }
            })
            .collect()
    }

    /// Holds the jobs of suspended projects (see [`crate::services::suspension`]): for each job, None
    /// when it goes on, or its result when it was held (Ok) or could not be (the suspension was lifted
    /// meanwhile: it fails and is retried).
    async fn hold_suspended(
        &self,
        store: &crate::store::Store,
        ctxs: &[JobContext],
        now: i64,
    ) -> Result<Vec<Option<Result<(), String>>>, String> {
        let mut held = vec![None; ctxs.len()];
        let mut by_project: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
        for (i, c) in ctxs.iter().enumerate() {
            if let Some(p) = c.payload.get("project").and_then(serde_json::Value::as_str) {
                by_project.entry(p).or_default().push(i);
            }
        }
        for (project, jobs) in by_project {
            let row = store.project_cached(project).await.map_err(|e| e.to_string())?;
            if row.is_none_or(|p| p.suspended.is_none()) {
                continue;
            }
            let ids: Vec<String> = jobs.iter().map(|&i| ctxs[i].id.clone()).collect();
            let outcome = match store.hold_jobs(project, &ids, now).await {
                Ok(true) => Ok(()),
                Ok(false) => {
                    Err("the project's suspension was lifted meanwhile: delivering at the next attempt".into())
                }
                Err(e) => Err(e.to_string()),
            };
            for i in jobs {
                held[i] = Some(outcome.clone());
            }
        }
        Ok(held)
    }
}
