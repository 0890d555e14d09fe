//! Delivery: the `email.deliver` jobs. Each email's message is built and DKIM-signed (`message.rs`) and
//! handed to the project's transport (`transport.rs`: Herald's SMTP session pool or `.eml` files; or a
//! transport plugin, which receives the structured message and the signed raw bytes); the claims and
//! outcomes of campaign hand-overs go through the ledger (`ledger.rs`).
//! Outcomes (docs/behaviour.md#delivery-and-email-statuses): accepted → SENT and `email.sent`; a
//! temporary failure (4xx, connection) → retried with backoff, then FAILED; a permanent failure (5xx) →
//! BOUNCED, the contact unsubscribed, `email.bounce` and `contact.unsubscribed`.
//!
//! Must not import: salvo, surrealdb.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::Map;

use crate::domain::status::EmailStatus;
use crate::infra::jobs::{JobContext, JobError, Registry};
use crate::services::sending_domains::Domains;
use crate::store::emails::EmailRow;
use crate::store::events::Event;

pub const DELIVER_JOB: &str = "email.deliver";
/// Deliveries of campaign emails: the same work, claimed after `email.deliver`, so a campaign's long
/// queue never holds up transactional mail.
pub const DELIVER_CAMPAIGN_JOB: &str = "email.deliver.campaign";
pub const DELIVER_ATTEMPTS: i64 = 6;

pub mod handover;
pub mod ledger;
mod message;
pub mod smtp;
mod transport;

pub(crate) use message::build_signed;
pub use message::{StoredAttachment, build_message};
use transport::envelope;
pub use transport::{SendError, Transport};

/// The machine's cores (read once).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map(usize::from).unwrap_or(1))
}

/// A verified domain's project and its DKIM signer.
pub type SignerEntry = (String, Arc<crate::infra::dkim::Signer>);

/// Delivery with its dependencies.
pub struct Delivery {
    /// The built-in SMTP transport, when the server has an SMTP URL.
    pub smtp: Option<Transport>,
    /// The built-in file transport.
    pub file: Transport,
    /// `smtp`, `file` or a transport plugin's name, for projects that have not picked one.
    pub default_transport: String,
    pub plugins: Arc<crate::plugins::PluginHost>,
    /// Each sender domain's signer (None: not verified), read at most every few seconds.
    pub signers: std::sync::Mutex<std::collections::HashMap<String, (Option<SignerEntry>, std::time::Instant)>>,
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
enum Done {
    /// Handed over and accepted, or decided without a hand-over (cancelled, uncertain, failed).
    Settled,
    /// Refused permanently (the peer's reply): its contact is unsubscribed and its address suppressed
    /// once the batch is recorded.
    Bounced(String),
}

/// Why a campaign email found SENDING when its job runs again is not sent again.
pub const INTERRUPTED: &str =
    "interrupted during hand-over: the transport may or may not have taken it, so it is not sent again";

/// An outcome for the ledger.
fn outcome(
    e: &EmailRow,
    status: EmailStatus,
    error: Option<String>,
    pid: Option<String>,
) -> crate::store::emails::DeliveryOutcome {
    crate::store::emails::DeliveryOutcome {
        id: e.id.clone(),
        campaign: e.campaign.clone(),
        status,
        error,
        provider_message_id: pid,
    }
}

/// The ids of the emails among `todo` (test sends aside) whose recipient is on their project's
/// suppression list, each with the error its record takes: one read per project.
async fn suppressed_among(
    store: &crate::store::Store,
    todo: &[Option<&EmailRow>],
) -> Result<std::collections::HashMap<String, String>, String> {
    let mut by_project: std::collections::HashMap<&str, Vec<String>> = std::collections::HashMap::new();
    for e in todo.iter().flatten().filter(|e| !e.contact.is_empty()) {
        by_project.entry(e.project.as_str()).or_default().push(e.recipient.to_ascii_lowercase());
    }
    let mut out = std::collections::HashMap::new();
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
    /// are claimed one at a time. Re-running a job (a temporary failure, a crash) delivers only what is
    /// still PENDING; a campaign email left SENDING becomes UNCERTAIN.
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
                            None => r.map_err(JobError::Retry),
                        })
                        .collect::<Vec<_>>()
                }
            });
            registry.set_priority(kind, priority);
        }
    }

    /// Delivers a batch: one read of the emails, the messages built and signed, then each email handed
    /// over on its own (throttle, a transport session, a claim for campaign mail, the conversation, its
    /// outcome written through the ledger at once). A job fails (and retries) when one of its emails
    /// failed temporarily before its last attempt.
    async fn deliver_batch(&self, ctxs: Vec<JobContext>) -> Vec<Result<(), String>> {
        let n = ctxs.len();
        let Some(first) = ctxs.first() else { return vec![] };
        let (store, clock) = (first.store.clone(), first.clock.clone());
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
            Err(e) => return vec![Err(e.to_string()); n],
        };
        let by_id: std::collections::HashMap<&str, &EmailRow> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
        // A deleted project's mail is not sent (its purge job deletes the records).
        let mut live = std::collections::HashMap::new();
        for (_, _, project) in &items {
            if !live.contains_key(project) {
                match store.project_cached(project).await {
                    Ok(p) => live.insert(project.clone(), p.is_some()),
                    Err(e) => return vec![Err(e.to_string()); n],
                };
            }
        }
        // A suspended project's jobs wait, held, until the suspension is lifted (docs/behaviour.md,
        // project setup and security): their emails stay PENDING and nothing is lost.
        let held = match self.hold_suspended(&store, &ctxs, clock.now_ms()).await {
            Ok(h) => h,
            Err(e) => return vec![Err(e); n],
        };
        // The email of each item, when it still needs delivering (and belongs to the job's project).
        let todo: Vec<Option<&EmailRow>> = items
            .iter()
            .map(|(job, email, project)| {
                let e = by_id.get(email.as_str())?;
                let wanted = held[*job].is_none()
                    && live.get(project).copied().unwrap_or(false)
                    && e.project == *project
                    && (e.status == EmailStatus::Pending || e.status == EmailStatus::Sending);
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
        let gone: std::collections::HashSet<String> = match store.unsubscribed_of(&marketing).await {
            Ok(ids) => ids.into_iter().collect(),
            Err(e) => return vec![Err(e.to_string()); n],
        };
        // A recipient put on the suppression list after its email was written (a bounce of an earlier
        // email, an entry added by hand) is sent nothing: the email is SUPPRESSED
        // (docs/behaviour.md#suppressions).
        let suppressed = match suppressed_among(&store, &todo).await {
            Ok(s) => s,
            Err(e) => return vec![Err(e); n],
        };
        let mut settled = Vec::new();
        let todo: Vec<Option<&EmailRow>> = todo
            .into_iter()
            .map(|e| match e {
                Some(e) if e.status == EmailStatus::Pending && suppressed.contains_key(&e.id) => {
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
                other => other,
            })
            .collect();
        if let Err(e) = self.ledger.record(settled, vec![], false).await {
            return vec![Err(e); n];
        }
        // Campaigns cancelled meanwhile (their emails are cancelled by their claims, at once).
        let mut campaigns: Vec<String> = todo.iter().flatten().filter_map(|e| e.campaign.clone()).collect();
        campaigns.sort_unstable();
        campaigns.dedup();
        let closed: std::collections::HashSet<String> = match store.closed_gates(&campaigns).await {
            Ok(c) => c.into_iter().collect(),
            Err(e) => return vec![Err(e.to_string()); n],
        };
        // Each campaign's gate as this batch knows it, re-read while the batch runs: an email waiting
        // for the throttle learns of a cancel within [`GATE_POLL`] and is cancelled by its claim at once.
        let gates: std::collections::HashMap<String, std::sync::atomic::AtomicBool> =
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
        let sends = items.iter().zip(&todo).zip(built).map(|(((job, _, _), e), raw)| {
            let (store, clock) = (&store, &clock);
            let last = ctxs[*job].attempt >= DELIVER_ATTEMPTS;
            let gates = &gates;
            async move {
                match (e, raw) {
                    (None, _) => Ok(None),
                    (Some(_), Err(msg)) => Err(msg),
                    (Some(e), Ok(raw)) => {
                        let gate = e.campaign.as_ref().and_then(|c| gates.get(c));
                        match self.deliver_one(store, clock, e, raw, last, gate).await {
                            Ok(Done::Bounced(why)) => Ok(Some((*e, why))),
                            Ok(Done::Settled) => Ok(None),
                            Err(msg) => Err(msg),
                        }
                    }
                }
            }
        });
        let done = tokio::select! {
            done = futures_util::future::join_all(sends) => done,
            _ = watch => unreachable!("the gate watch never ends"),
        };
        let mut results: Vec<Result<(), String>> = held.into_iter().map(|h| h.unwrap_or(Ok(()))).collect();
        let mut bounced = Vec::new();
        for ((job, _, _), r) in items.iter().zip(done) {
            match r {
                Ok(Some(e)) => bounced.push(e),
                Ok(None) => {}
                Err(msg) => results[*job] = Err(msg),
            }
        }
        // A permanent bounce unsubscribes the contact, with its event when it really flips, and suppresses
        // its address.
        for (e, why) in bounced {
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
                Some(&why),
                &e.id,
                now,
            )
            .await;
        }
        results
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

    /// Hands one built message to the project's transport and writes its outcome. A campaign email
    /// waits for the throttle, a hand-over slot and a transport session first, and only then is claimed
    /// (a cancel before that moment reaches it); its slot is held until its outcome is written.
    /// Answers an error for a temporary failure before the last attempt (the job retries).
    async fn deliver_one(
        &self,
        store: &crate::store::Store,
        clock: &crate::infra::clock::SharedClock,
        e: &EmailRow,
        raw: Vec<u8>,
        last: bool,
        gate: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<Done, String> {
        let id = e.message_id.trim_matches(['<', '>']).to_string();
        let campaign = e.campaign.is_some();
        let closed = || gate.is_some_and(|g| g.load(std::sync::atomic::Ordering::SeqCst));
        let transport = self.transport_for(store, &e.project).await?;
        // The throttle, given up as soon as the campaign's gate is seen closed.
        while !closed() {
            match self.throttle.try_take(&e.project) {
                Ok(()) => break,
                Err(ms) => tokio::time::sleep(Duration::from_millis(ms).min(GATE_POLL)).await,
            }
        }
        // An email of a cancelled campaign is claimed at once, which cancels it: no throttle token, slot or
        // session is spent on it. (Should the gate be open again, a new run of the campaign, the claim
        // holds and the email goes the normal way.)
        let mut claimed = false;
        if let (Some(c), true) = (&e.campaign, closed()) {
            match self.ledger.claim(&e.id, c, None).await? {
                ledger::Claim::Sending => claimed = true,
                ledger::Claim::Cancelled | ledger::Claim::Gone => return Ok(Done::Settled),
            }
        }
        // A campaign email holds a hand-over slot from its claim until its outcome is written or passed on
        // with the slot (`handover.rs`): its claim, made once it has a transport session, writes the
        // outcome of the slot's last hand-over in the same round.
        let mut slot = match campaign {
            true => Some(self.handovers.acquire().await),
            false => None,
        };
        // Transactional mail keeps its session's slot until its outcome is written, so a crash leaves at
        // most SESSIONS of them handed over without an outcome (each sent again with its Message-ID). A
        // campaign email's hand-over slot already bounds it, and its outcome may wait for the next claim,
        // which needs a session: its session slot is freed first.
        let mut session_slot = None;
        let sent = match self.session(&transport).await {
            Err(err) => Err(err),
            Ok(session) => {
                if let (Some(campaign), false) = (&e.campaign, claimed) {
                    let carried = slot.as_mut().and_then(handover::Slot::take_carried);
                    match self.ledger.claim(&e.id, campaign, carried).await? {
                        ledger::Claim::Sending => {}
                        ledger::Claim::Cancelled | ledger::Claim::Gone => return Ok(Done::Settled),
                    }
                }
                match session {
                    Some(session) => match envelope(&self.envelope_sender(e), &e.recipient) {
                        Ok(envelope) => {
                            let (sent, held) = session.send(&envelope, &raw).await;
                            session_slot = Some(held);
                            sent.map(|_| None)
                        }
                        Err(err) => Err(err),
                    },
                    None if transport == "file" => self.file.send(&e.from, &e.recipient, &id, &raw).await.map(|_| None),
                    None => self.send_plugin(&transport, e, &id, raw).await,
                }
            }
        };
        let now = clock.now_ms();
        let (outcome, events, done, retry) = match sent {
            Ok(pid) => {
                let events = if e.contact.is_empty() { vec![] } else { vec![event(e, "email.sent", None, now)] };
                (Some(outcome(e, EmailStatus::Sent, None, pid)), events, Done::Settled, None)
            }
            // A test send (no contact) records its outcome only.
            Err(SendError::Permanent(msg)) if e.contact.is_empty() => {
                (Some(outcome(e, EmailStatus::Bounced, Some(msg), None)), vec![], Done::Settled, None)
            }
            Err(SendError::Permanent(msg)) => {
                let events = vec![event(e, "email.bounce", Some(&msg), now)];
                (Some(outcome(e, EmailStatus::Bounced, Some(msg.clone()), None)), events, Done::Bounced(msg), None)
            }
            Err(SendError::Uncertain(msg)) if campaign => {
                let why = format!("{INTERRUPTED} ({msg})");
                (Some(outcome(e, EmailStatus::Uncertain, Some(why), None)), vec![], Done::Settled, None)
            }
            Err(SendError::Transient(msg) | SendError::Uncertain(msg)) if last => {
                let events =
                    if e.contact.is_empty() { vec![] } else { vec![event(e, "email.failed", Some(&msg), now)] };
                (Some(outcome(e, EmailStatus::Failed, Some(msg), None)), events, Done::Settled, None)
            }
            // Not taken: a claimed campaign email goes back to PENDING for the job's next attempt;
            // transactional mail is retried as it is (the same Message-ID, so a receiver can drop a repeat
            // of an uncertain hand-over).
            Err(SendError::Transient(msg) | SendError::Uncertain(msg)) => {
                let release = campaign.then(|| outcome(e, EmailStatus::Pending, Some(msg.clone()), None));
                (release, vec![], Done::Settled, Some(format!("temporary failure: {msg}")))
            }
        };
        let outcomes: Vec<_> = outcome.into_iter().collect();
        match slot {
            Some(slot) => {
                if let Some(held) = session_slot.take() {
                    held.free();
                }
                self.handovers.pass(slot, outcomes, events).await?
            }
            // Urgent while a session's slot waits for it: the round starts at once.
            None => self.ledger.record(outcomes, events, session_slot.is_some()).await?,
        }
        drop(session_slot);
        match retry {
            Some(msg) => Err(msg),
            None => Ok(done),
        }
    }

    /// A session of the SMTP pool when the transport is `smtp` (None for the others, which need none).
    async fn session(&self, transport: &str) -> Result<Option<smtp::Session<'_>>, SendError> {
        match transport {
            "smtp" => match &self.smtp {
                Some(Transport::Smtp(pool)) => pool.session().await.map(Some),
                Some(Transport::File(_)) | None => {
                    Err(SendError::Transient("SMTP is not configured on this server (set smtp_url)".into()))
                }
            },
            _ => Ok(None),
        }
    }

    /// Builds and signs the messages of a batch (an empty message for each `None`): in one blocking
    /// task per core, each building its share in turn. A blocking task per message grew tokio's blocking
    /// pool to ~120 threads under a campaign, each thread with its own allocator heap.
    async fn build_all(
        &self,
        store: &crate::store::Store,
        now: i64,
        todo: &[Option<&EmailRow>],
    ) -> Vec<Result<Vec<u8>, String>> {
        type Work = (usize, EmailRow, Option<Arc<crate::infra::dkim::Signer>>);
        // What a share that failed (a panic while building) leaves: its emails fail their jobs and retry.
        let mut out: Vec<Result<Vec<u8>, String>> =
            todo.iter().map(|e| if e.is_some() { Err("message building failed".into()) } else { Ok(vec![]) }).collect();
        let mut work: Vec<Work> = Vec::new();
        for (i, e) in todo.iter().enumerate() {
            let Some(e) = e else { continue };
            let from_domain = e.from.rsplit_once('@').map(|(_, d)| d.to_string()).unwrap_or_default();
            match if self.sign { self.signer_for(store, &from_domain, &e.project).await } else { Ok(None) } {
                Ok(signer) => work.push((i, (*e).clone(), signer)),
                Err(msg) => out[i] = Err(msg),
            }
        }
        let parts = cores().min(work.len()).max(1);
        let mut shares: Vec<Vec<Work>> = (0..parts).map(|_| Vec::new()).collect();
        for (k, w) in work.into_iter().enumerate() {
            shares[k % parts].push(w);
        }
        let tasks = shares.into_iter().map(|share| {
            tokio::task::spawn_blocking(move || {
                share
                    .into_iter()
                    .map(|(i, row, signer)| (i, build_signed(&row, signer.as_deref(), now)))
                    .collect::<Vec<(usize, Result<Vec<u8>, String>)>>()
            })
        });
        for done in futures_util::future::join_all(tasks).await {
            match done {
                Ok(built) => {
                    for (i, r) in built {
                        out[i] = r;
                    }
                }
                Err(e) => tracing::error!(error = %e, "message building failed"),
            }
        }
        out
    }

    /// The DKIM signer of a verified sender domain of this project (cached for a few seconds).
    async fn signer_for(
        &self,
        store: &crate::store::Store,
        domain: &str,
        project: &str,
    ) -> Result<Option<Arc<crate::infra::dkim::Signer>>, String> {
        const FRESH: Duration = Duration::from_secs(3);
        let cached = {
            let map = self.signers.lock().unwrap_or_else(|p| p.into_inner());
            map.get(domain).filter(|(_, at)| at.elapsed() < FRESH).map(|(s, _)| s.clone())
        };
        let entry = match cached {
            Some(entry) => entry,
            None => {
                let entry = match store.verified_domain(domain).await.map_err(|e| e.to_string())? {
                    Some(d) => Some((d.project.clone(), Arc::new(self.domains.signer(&d).map_err(|e| e.to_string())?))),
                    _ => None,
                };
                let mut map = self.signers.lock().unwrap_or_else(|p| p.into_inner());
                map.insert(domain.to_string(), (entry.clone(), std::time::Instant::now()));
                entry
            }
        };
        Ok(entry.filter(|(p, _)| p == project).map(|(_, s)| s))
    }
}

fn event(e: &EmailRow, name: &str, reason: Option<&str>, now: i64) -> Event {
    let mut data = Map::new();
    data.insert("emailId".into(), e.id.clone().into());
    data.insert("subject".into(), e.subject.clone().into());
    if let Some(c) = &e.campaign {
        data.insert("campaignId".into(), c.clone().into());
    }
    if let Some(r) = reason {
        data.insert("reason".into(), r.into());
    }
    Event::new(&e.project, &e.contact, name, data, "system", now).at_depth(e.depth)
}

impl Delivery {
    /// The project's transport (through the store's read cache), or the server's default.
    async fn transport_for(&self, store: &crate::store::Store, project: &str) -> Result<String, String> {
        let setting = store.project_cached(project).await.map_err(|e| e.to_string())?.and_then(|p| p.transport);
        Ok(setting.unwrap_or_else(|| self.default_transport.clone()))
    }

    /// Hands a message to a transport plugin. A plugin that is not loaded or refuses is a temporary
    /// failure (the job retries with backoff, and a fixed or reloaded plugin picks it up); one that
    /// stopped mid-call may have sent it (uncertain).
    async fn send_plugin(&self, name: &str, e: &EmailRow, id: &str, raw: Vec<u8>) -> Result<Option<String>, SendError> {
        use crate::plugins::{Address, CallError, OutAttachment, Outgoing, SendOutcome};
        let headers: Vec<(String, String)> = serde_json::from_str(&e.headers).unwrap_or_default();
        let stored: Vec<StoredAttachment> = serde_json::from_str(&e.attachments).unwrap_or_default();
        let mut attachments = Vec::with_capacity(stored.len());
        for a in stored {
            let content = STANDARD.decode(&a.content).map_err(|err| SendError::Permanent(err.to_string()))?;
            attachments.push(OutAttachment {
                filename: a.filename,
                content_type: a.content_type,
                content,
                content_id: a.content_id.filter(|_| a.inline),
            });
        }
        let mut tags = vec![("project".to_string(), e.project.clone()), ("email".to_string(), e.id.clone())];
        tags.push(("kind".to_string(), e.kind.clone()));
        if let Some(t) = &e.template {
            tags.push(("template".to_string(), t.clone()));
        }
        let msg = Outgoing {
            mail_from: e.from.clone(),
            rcpt_to: vec![e.recipient.clone()],
            message_id: id.to_string(),
            from: Address { email: e.from.clone(), name: e.from_name.clone() },
            reply_to: e.reply_to.clone().map(|r| Address { email: r, name: None }),
            to: vec![Address { email: e.recipient.clone(), name: e.recipient_name.clone() }],
            cc: vec![],
            subject: e.subject.clone(),
            html: Some(e.html.clone()).filter(|h| !h.is_empty()),
            text: Some(e.text.clone()).filter(|t| !t.is_empty()),
            headers,
            attachments,
            tags,
            raw,
        };
        match self.plugins.send(name, &msg).await {
            Ok(SendOutcome::Accepted { provider_message_id }) => Ok(provider_message_id),
            Ok(SendOutcome::Temporary(m)) => Err(SendError::Transient(format!("{name}: {m}"))),
            Ok(SendOutcome::RateLimited { retry_after_ms }) => {
                Err(SendError::Transient(format!("{name}: rate limited, retry after {retry_after_ms} ms")))
            }
            Ok(SendOutcome::Permanent(m)) => Err(SendError::Permanent(format!("{name}: {m}"))),
            // A plugin stopped mid-call (timeout, trap, out of fuel or memory) may have made its request.
            Err(
                err @ (CallError::Timeout { .. }
                | CallError::OutOfFuel { .. }
                | CallError::OutOfMemory { .. }
                | CallError::Panic { .. }
                | CallError::Trap { .. }),
            ) => Err(SendError::Uncertain(err.to_string())),
            Err(err) => Err(SendError::Transient(err.to_string())),
        }
    }
}
