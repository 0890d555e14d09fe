//! Contact upserts with their events, alone or grouped.
//!
//! [`upsert`] does one request: read the contact, apply the rules of `domain::contacts`, write the
//! contact and its events in one transaction, retry when the contact changed meanwhile.
//!
//! [`Ingester`] groups concurrent requests (group commit): requests queue on a few lanes (a contact's
//! email always maps to the same lane); a lane takes everything waiting, reads all the contacts in one
//! query, applies the requests in arrival order, and writes the lot in one transaction. Under load a
//! batch holds many requests, so the per-statement cost is shared; with no load a batch holds one
//! request and adds no wait. Contacts the store remembers from earlier batches are not read again; the
//! batch's transaction writes or checks each at its version. If the transaction fails (a contact changed
//! through another path), the batch runs once more on fresh reads, then falls back to [`upsert`] for
//! each of its requests, so nothing is lost or applied twice.
//!
//! Must not import: salvo, surrealdb.

use futures_util::FutureExt;
use serde_json::Map;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use tokio::sync::{mpsc, oneshot};

use crate::clock::SharedClock;
use crate::domain::contacts::{DataPatch, subscription};
use crate::store::contacts::{Contact, ContactWrite, Event, WriteResult};
use crate::store::ingest::VersionedUpdate;
use crate::store::{Store, StoreError};

/// What an upsert should do.
#[derive(Debug, Clone)]
pub struct Upsert {
    pub email: String,
    pub subscribed: Option<bool>,
    /// Subscription state of a new contact when `subscribed` is not given.
    pub default_subscribed: bool,
    pub patch: DataPatch,
    /// An event to record for the contact in the same transaction: (name, data).
    pub event: Option<(String, Map<String, serde_json::Value>)>,
}

#[derive(Debug, Clone)]
pub struct Upserted {
    pub contact: Contact,
    pub is_new: bool,
    /// Id of `Upsert::event`, when one was recorded.
    pub event_id: Option<String>,
}

/// The effect of one request on a contact state (None: the contact does not exist yet).
pub(crate) struct Applied {
    pub(crate) contact: Contact,
    pub(crate) is_new: bool,
    pub(crate) events: Vec<Event>,
    pub(crate) event_id: Option<String>,
}

pub(crate) fn apply(project: &str, current: Option<&Contact>, u: &Upsert, now: i64) -> Applied {
    let (subscribed, flip) = subscription(current.map(|c| c.subscribed), u.subscribed, u.default_subscribed);
    let contact = match current {
        None => Contact {
            id: uuid::Uuid::now_v7().to_string(),
            email: u.email.clone(),
            subscribed,
            data: u.patch.apply(&Map::new()),
            version: 1,
            created_at: now,
            updated_at: now,
        },
        Some(c) => {
            let data = u.patch.apply(&c.data);
            if data == c.data && subscribed == c.subscribed {
                c.clone()
            } else {
                Contact { subscribed, data, updated_at: now, ..c.clone() }
            }
        }
    };
    let mut events = Vec::new();
    if let Some(name) = flip {
        events.push(Event::new(project, &contact.id, name, Map::new(), "system", now));
    }
    let mut event_id = None;
    if let Some((name, data)) = &u.event {
        let e = Event::new(project, &contact.id, name, data.clone(), "api", now);
        event_id = Some(e.id.clone());
        events.push(e);
    }
    Applied { contact, is_new: current.is_none(), events, event_id }
}

pub(crate) fn changed(before: &Contact, after: &Contact) -> bool {
    before.subscribed != after.subscribed || before.data != after.data
}

/// A contact change worked out but not written yet: the caller writes it together with its own rows (see
/// `Store::write_contacts_and_emails`) and plans again when that reports the contact stale.
pub struct Planned {
    pub contact: Contact,
    pub write: ContactWrite,
    pub events: Vec<Event>,
    pub is_new: bool,
    /// Id of `Upsert::event`, when one is to be recorded.
    pub event_id: Option<String>,
}

/// Reads the contact with this email and works out the change `u` makes, without writing.
pub async fn plan(store: &Store, clock: &SharedClock, project: &str, u: &Upsert) -> Result<Planned, StoreError> {
    let now = clock.now_ms();
    let existing = store.contact_by_email(project, &u.email).await?;
    let a = apply(project, existing.as_ref(), u, now);
    let write = match &existing {
        None => ContactWrite::Create {
            id: a.contact.id.clone(),
            email: a.contact.email.clone(),
            subscribed: a.contact.subscribed,
            data: a.contact.data.clone(),
            now,
        },
        Some(c) if changed(c, &a.contact) => ContactWrite::Update {
            id: c.id.clone(),
            version: c.version,
            email: c.email.clone(),
            subscribed: a.contact.subscribed,
            data: a.contact.data.clone(),
            now,
        },
        Some(_) => ContactWrite::None,
    };
    let mut contact = a.contact;
    if matches!(write, ContactWrite::Update { .. }) {
        contact.version += 1;
    }
    Ok(Planned { contact, write, events: a.events, is_new: a.is_new, event_id: a.event_id })
}

/// One request: creates or updates the contact with this email and records its events in one
/// transaction; retries when the contact changed meanwhile. Two concurrent upserts of one email make one
/// contact (the unique index refuses the second create, which then reads and updates).
pub async fn upsert(store: &Store, clock: &SharedClock, project: &str, u: &Upsert) -> Result<Upserted, StoreError> {
    for _ in 0..16 {
        let p = plan(store, clock, project, u).await?;
        match store.write_contact(project, &p.write, &p.events).await? {
            WriteResult::Done => return Ok(Upserted { contact: p.contact, is_new: p.is_new, event_id: p.event_id }),
            WriteResult::Stale => continue,
        }
    }
    Err(StoreError::Busy("the contact kept changing; gave up after 16 attempts".into()))
}

/// Sets a contact's subscription, writing the `contact.subscribed` / `contact.unsubscribed` event in the
/// same transaction when it really flips. Returns the new state, or None when the contact does not exist.
pub async fn set_subscribed(
    store: &Store,
    clock: &SharedClock,
    project: &str,
    contact_id: &str,
    subscribed: bool,
) -> Result<Option<bool>, StoreError> {
    for _ in 0..16 {
        let Some(c) = store.contact(project, contact_id).await? else { return Ok(None) };
        if c.subscribed == subscribed {
            return Ok(Some(subscribed));
        }
        let now = clock.now_ms();
        let write = ContactWrite::Update {
            id: c.id.clone(),
            version: c.version,
            email: c.email.clone(),
            subscribed,
            data: c.data.clone(),
            now,
        };
        let name = if subscribed {
            crate::domain::contacts::SUBSCRIBED_EVENT
        } else {
            crate::domain::contacts::UNSUBSCRIBED_EVENT
        };
        let ev = Event::new(project, &c.id, name, Map::new(), "system", now);
        match store.write_contact(project, &write, &[ev]).await? {
            WriteResult::Done => return Ok(Some(subscribed)),
            WriteResult::Stale => continue,
        }
    }
    Err(StoreError::Busy("the contact kept changing; gave up after 16 attempts".into()))
}

struct Pending {
    project: String,
    upsert: Upsert,
    reply: oneshot::Sender<Result<Upserted, StoreError>>,
}

/// Group-commit front of [`upsert`].
pub struct Ingester {
    lanes: Vec<mpsc::Sender<Pending>>,
}

/// Most requests one batch takes.
const MAX_BATCH: usize = 256;
/// How long a lane under load waits for more requests before writing a batch.
const LINGER_MICROS: u64 = 1500;

impl Ingester {
    /// Starts `lanes` lane tasks on the current runtime.
    pub fn start(store: Store, clock: SharedClock, lanes: usize) -> Ingester {
        let lanes = (0..lanes.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::channel::<Pending>(4096);
                tokio::spawn(lane(rx, store.clone(), clock.clone()));
                tx
            })
            .collect();
        Ingester { lanes }
    }

    /// Queues an upsert and waits for its outcome.
    pub async fn submit(&self, project: &str, upsert: Upsert) -> Result<Upserted, StoreError> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (project, upsert.email.as_str()).hash(&mut h);
        let lane = &self.lanes[(h.finish() % self.lanes.len() as u64) as usize];
        let (reply, rx) = oneshot::channel();
        lane.send(Pending { project: project.to_string(), upsert, reply })
            .await
            .map_err(|_| StoreError::Db("the ingest lane stopped".into()))?;
        rx.await.map_err(|_| StoreError::Db("the ingest lane dropped the request".into()))?
    }
}

async fn lane(mut rx: mpsc::Receiver<Pending>, store: Store, clock: SharedClock) {
    let mut last_size = 0;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        drain(&mut rx, &mut batch);
        // Under load (the previous batch was not a lone request), give concurrent requests a moment
        // to join: larger batches share the per-transaction cost. With no load there is no wait.
        if last_size >= 4 && batch.len() < MAX_BATCH / 2 {
            tokio::time::sleep(std::time::Duration::from_micros(LINGER_MICROS)).await;
            drain(&mut rx, &mut batch);
        }
        last_size = batch.len();
        // A panic while processing fails this batch's requests (their reply channels drop); the lane goes on.
        let run = std::panic::AssertUnwindSafe(process(batch, &store, &clock)).catch_unwind();
        if run.await.is_err() {
            tracing::error!("ingest batch panicked");
        }
    }
}

fn drain(rx: &mut mpsc::Receiver<Pending>, batch: &mut Vec<Pending>) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(p) => batch.push(p),
            Err(_) => break,
        }
    }
}

async fn process(batch: Vec<Pending>, store: &Store, clock: &SharedClock) {
    let mut by_project: HashMap<String, Vec<Pending>> = HashMap::new();
    for p in batch {
        by_project.entry(p.project.clone()).or_default().push(p);
    }
    for (project, items) in by_project {
        let started = std::time::Instant::now();
        let size = items.len();
        if items.len() == 1 {
            for p in items {
                let r = upsert(store, clock, &project, &p.upsert).await;
                let _ = p.reply.send(r);
            }
            crate::metrics::ingest_batch(size, false, started.elapsed());
            continue;
        }
        // A failed batch forgets its contacts (see `Store::write_contact_batch`), so a second attempt reads
        // them: a contact changed by another path or process costs one retry, not a request at a time.
        let mut outcome = grouped(store, clock, &project, &items).await;
        if matches!(outcome, Err(StoreError::Busy(_) | StoreError::Conflict(_))) {
            outcome = grouped(store, clock, &project, &items).await;
        }
        match outcome {
            Ok(results) => {
                crate::metrics::ingest_batch(size, false, started.elapsed());
                for (p, r) in items.into_iter().zip(results) {
                    let _ = p.reply.send(Ok(r));
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, size = items.len(), "batch write failed; applying one at a time");
                for p in items {
                    let r = upsert(store, clock, &project, &p.upsert).await;
                    let _ = p.reply.send(r);
                }
                crate::metrics::ingest_batch(size, true, started.elapsed());
            }
        }
    }
}

/// Applies the requests of one project in order against one read, and writes them in one transaction.
async fn grouped(
    store: &Store,
    clock: &SharedClock,
    project: &str,
    items: &[Pending],
) -> Result<Vec<Upserted>, StoreError> {
    let mut emails: Vec<String> = items.iter().map(|p| p.upsert.email.clone()).collect();
    emails.sort();
    emails.dedup();
    let read = store.group_contacts(project, &emails).await?;
    let original: HashMap<String, Contact> = read.contacts.iter().map(|c| (c.email.clone(), c.clone())).collect();
    let mut current: HashMap<String, Contact> = original.clone();
    let now = clock.now_ms();
    let mut events = Vec::new();
    let mut results = Vec::with_capacity(items.len());
    for p in items {
        let a = apply(project, current.get(&p.upsert.email), &p.upsert, now);
        events.extend(a.events);
        results.push(Upserted { contact: a.contact.clone(), is_new: a.is_new, event_id: a.event_id });
        current.insert(p.upsert.email.clone(), a.contact);
    }
    let mut created = Vec::new();
    let mut updated = Vec::new();
    for (email, c) in &current {
        match original.get(email) {
            None => created.push(c.clone()),
            Some(o) if changed(o, c) => updated.push(VersionedUpdate {
                id: o.id.clone(),
                version: o.version,
                email: o.email.clone(),
                created_at: o.created_at,
                subscribed: c.subscribed,
                data: c.data.clone(),
                now,
            }),
            Some(_) => {}
        }
    }
    let unchanged = read.unchanged_remembered(&updated);
    store.write_contact_batch(project, &created, &updated, &unchanged, &events).await?;
    for r in &mut results {
        if let Some(o) = original.get(&r.contact.email)
            && changed(o, &r.contact)
        {
            r.contact.version = o.version + 1;
        }
    }
    Ok(results)
}
