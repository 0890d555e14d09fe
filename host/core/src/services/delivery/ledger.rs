//! The delivery ledger: what the pipeline writes around each hand-over, group-committed.
//!
//! A campaign email is *claimed* (PENDING → SENDING) right before its transport conversation starts,
//! after it waited for the throttle, for a connection and for signing; a cancel turns every PENDING email
//! CANCELLED in one transaction, so after the cancel answers only emails already claimed can reach a
//! transport. Every outcome is written right after its transport answers. Both go through one task per
//! process that writes whatever is waiting in one transaction (a *round*), so many concurrent
//! hand-overs share each write: throughput stays that of batch-sized writes while each email's state is
//! durable at once. After a crash, a campaign email still SENDING was inside a conversation: it is marked
//! UNCERTAIN, never sent again (see `docs/delivery.md`).
//!
//! Must not import: salvo, surrealdb.

use tokio::sync::{mpsc, oneshot};

use crate::domain::status::EmailStatus;
use crate::infra::clock::SharedClock;
use crate::store::Store;
use crate::store::emails::DeliveryOutcome;
use crate::store::events::Event;

/// Most entries written in one round.
const ROUND_ENTRIES: usize = 512;
/// Rounds being written at once.
const ROUNDS_IN_FLIGHT: usize = 2;
/// How long a round of outcomes nobody waits on gathers more before it is written.
const GATHER: std::time::Duration = std::time::Duration::from_millis(5);

/// What a claim answered for one email.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// SENDING now: hand it over.
    Sending,
    /// Its campaign was cancelled: it is CANCELLED now.
    Cancelled,
    /// Not PENDING any more (cancelled, decided or claimed elsewhere): leave it alone.
    Gone,
}

/// The outcome of a hand-over that rides with the next claim of its slot (`handover.rs`): written in
/// the claim's round, its writer answered when that round commits.
pub struct Carried {
    pub outcomes: Vec<DeliveryOutcome>,
    pub events: Vec<Event>,
    pub reply: oneshot::Sender<Result<(), String>>,
}

enum Entry {
    /// (email, campaign, the outcome it carries)
    Claim(String, String, Option<Carried>, oneshot::Sender<Result<Claim, String>>),
    /// Outcomes, their events, and whether a hand-over slot waits for them (campaign mail).
    Record(Vec<DeliveryOutcome>, Vec<Event>, bool, oneshot::Sender<Result<(), String>>),
}

impl Entry {
    fn is_claim(&self) -> bool {
        matches!(self, Entry::Claim(..))
    }

    /// Whether someone holds a hand-over slot until this is written.
    fn urgent(&self) -> bool {
        match self {
            Entry::Claim(..) => true,
            Entry::Record(_, _, urgent, _) => *urgent,
        }
    }
}

/// The handle of the ledger task (cheap to clone).
#[derive(Clone)]
pub struct Ledger {
    tx: mpsc::UnboundedSender<Entry>,
}

impl Ledger {
    /// Starts the ledger task on the current runtime; it ends when the last handle is dropped.
    pub fn start(store: Store, clock: SharedClock) -> Ledger {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(store, clock, rx));
        Ledger { tx }
    }

    /// Claims one email of a campaign for its hand-over (durable when this answers), writing in the
    /// same transaction the outcome `carried` from the slot's previous hand-over.
    pub async fn claim(&self, id: &str, campaign: &str, carried: Option<Carried>) -> Result<Claim, String> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Entry::Claim(id.to_string(), campaign.to_string(), carried, reply))
            .map_err(|_| "the delivery ledger stopped".to_string())?;
        answer.await.map_err(|_| "the delivery ledger stopped".to_string())?
    }

    /// Writes outcomes and their events (durable when this answers). `urgent`: a hand-over slot is held
    /// until then, so the round starts at once; otherwise it may wait up to [`GATHER`] for company.
    pub async fn record(&self, outcomes: Vec<DeliveryOutcome>, events: Vec<Event>, urgent: bool) -> Result<(), String> {
        if outcomes.is_empty() && events.is_empty() {
            return Ok(());
        }
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Entry::Record(outcomes, events, urgent, reply))
            .map_err(|_| "the delivery ledger stopped".to_string())?;
        answer.await.map_err(|_| "the delivery ledger stopped".to_string())?
    }
}

async fn run(store: Store, clock: SharedClock, mut rx: mpsc::UnboundedReceiver<Entry>) {
    // Rounds in flight at once: each commit waits for the disk (SurrealKV syncs every commit, grouping
    // the syncs of concurrent commits), so while one round commits the next one gathers and starts.
    // Rounds never conflict with each other: they write different emails and only read the gates.
    let writers = std::sync::Arc::new(tokio::sync::Semaphore::new(ROUNDS_IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        let Ok(permit) = writers.clone().acquire_owned().await else { return };
        let mut entries = vec![first];
        while entries.len() < ROUND_ENTRIES {
            match rx.try_recv() {
                Ok(e) => entries.push(e),
                Err(_) => break,
            }
        }
        // Outcomes only: wait a little for a claim to ride along with (a busy campaign claims all the
        // time, so its outcomes take no round of their own), or, for outcomes nobody waits on
        // (transactional mail), for more outcomes. Every commit costs a disk sync and the database's
        // per-transaction work, so fewer, larger rounds leave more of both to the requests.
        if !entries.iter().any(Entry::is_claim) {
            let wait = if entries.iter().any(Entry::urgent) { std::time::Duration::ZERO } else { GATHER };
            let until = tokio::time::Instant::now() + wait;
            while entries.len() < ROUND_ENTRIES {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(e)) => {
                        let claim = e.is_claim();
                        entries.push(e);
                        if claim {
                            break;
                        }
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }
        let (store, now) = (store.clone(), clock.now_ms());
        tokio::spawn(async move {
            round(&store, entries, now).await;
            drop(permit);
        });
    }
}

/// Writes one round and answers its entries.
async fn round(store: &Store, entries: Vec<Entry>, now: i64) {
    match write(store, &entries, now).await {
        Ok(claimed) => answer(entries, &claimed),
        // One entry the database refuses must not fail the others: each is written alone.
        Err(_) if entries.len() > 1 => {
            for e in entries {
                let one = [e];
                match write(store, &one, now).await {
                    Ok(claimed) => answer(one, &claimed),
                    Err(err) => fail(one, &err),
                }
            }
        }
        Err(err) => fail(entries, &err),
    }
}

async fn write(store: &Store, entries: &[Entry], now: i64) -> Result<Vec<(String, String)>, String> {
    let mut claims = Vec::new();
    let mut outcomes = Vec::new();
    let mut events = Vec::new();
    for e in entries {
        match e {
            Entry::Claim(id, campaign, carried, _) => {
                claims.push((id.clone(), campaign.clone()));
                if let Some(c) = carried {
                    outcomes.extend(c.outcomes.iter().cloned());
                    events.extend(c.events.iter().cloned());
                }
            }
            Entry::Record(o, ev, _, _) => {
                outcomes.extend(o.iter().cloned());
                events.extend(ev.iter().cloned());
            }
        }
    }
    let result = store.delivery_round(&claims, &outcomes, &events, now).await.map_err(|e| e.to_string());
    if result.is_ok() {
        // A released claim (back to PENDING for a retry) is not an outcome.
        crate::infra::metrics::deliveries_recorded(
            outcomes.iter().map(|o| o.status).filter(|s| *s != EmailStatus::Pending).map(EmailStatus::as_str),
        );
    }
    result
}

fn answer(entries: impl IntoIterator<Item = Entry>, claimed: &[(String, String)]) {
    let claimed: std::collections::HashMap<&str, &str> =
        claimed.iter().map(|(id, status)| (id.as_str(), status.as_str())).collect();
    for e in entries {
        match e {
            Entry::Claim(id, _, carried, reply) => {
                if let Some(c) = carried {
                    let _ = c.reply.send(Ok(()));
                }
                let claim = match claimed.get(id.as_str()).map(|s| EmailStatus::parse(s)) {
                    Some(Some(EmailStatus::Sending)) => Claim::Sending,
                    Some(_) => Claim::Cancelled,
                    None => Claim::Gone,
                };
                let _ = reply.send(Ok(claim));
            }
            Entry::Record(_, _, _, reply) => {
                let _ = reply.send(Ok(()));
            }
        }
    }
}

fn fail(entries: impl IntoIterator<Item = Entry>, err: &str) {
    for e in entries {
        match e {
            Entry::Claim(_, _, carried, reply) => {
                if let Some(c) = carried {
                    let _ = c.reply.send(Err(err.to_string()));
                }
                let _ = reply.send(Err(err.to_string()));
            }
            Entry::Record(_, _, _, reply) => {
                let _ = reply.send(Err(err.to_string()));
            }
        }
    }
}
