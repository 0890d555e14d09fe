//! Contact upserts with their events, alone or grouped.
//!
//! [`upsert`] does one request: read the contact, apply the rules of `domain::contacts`, write the
//! contact and its events in one transaction, retry when the contact changed meanwhile.
//!
//! [`Ingester`] groups concurrent requests through the group-commit engine ([`crate::infra::batching`]; a
//! contact's email always maps to the same lane): a batch reads all its contacts in one query, applies
//! the requests in arrival order, and writes the lot in one transaction. Contacts the store remembers
//! from earlier batches are not read again; the batch's transaction writes or checks each at its version.
//! A failed batch forgets its contacts (see `Store::write_contact_batch`), so the engine's second attempt
//! reads them: a contact changed by another path or process costs one retry, not a request at a time.
//!
//! Must not import: salvo, surrealdb.

use serde_json::{Map, Value};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use crate::domain::contacts::{DataPatch, subscription};
use crate::infra::batching::{Batch, GroupCommit, Options};
use crate::infra::clock::SharedClock;
use crate::store::contacts::{Contact, ContactWrite, WriteResult};
use crate::store::events::Event;
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

/// What a group-committed batch writes for its contacts, by email: `current` (after the batch's requests)
/// against `original` (as read): the new contacts to create, and the changed ones to update at the version
/// they were read at.
pub(crate) fn batch_changes(
    original: &HashMap<String, Contact>,
    current: &HashMap<String, Contact>,
    now: i64,
) -> (Vec<Contact>, Vec<VersionedUpdate>) {
    let mut created = Vec::new();
    let mut updated = Vec::new();
    for (email, c) in current {
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
    (created, updated)
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
    set_subscribed_with(store, clock, project, contact_id, subscribed, Map::new()).await
}

/// [`set_subscribed`], with `data` in the subscription event.
pub async fn set_subscribed_with(
    store: &Store,
    clock: &SharedClock,
    project: &str,
    contact_id: &str,
    subscribed: bool,
    data: Map<String, Value>,
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
        let ev = Event::new(project, &c.id, name, data.clone(), "system", now);
        match store.write_contact(project, &write, &[ev]).await? {
            WriteResult::Done => return Ok(Some(subscribed)),
            WriteResult::Stale => continue,
        }
    }
    Err(StoreError::Busy("the contact kept changing; gave up after 16 attempts".into()))
}

/// One upsert waiting on a group-commit lane.
pub struct Request {
    project: String,
    upsert: Upsert,
}

/// The group-commit writer of upserts (see [`crate::infra::batching`]).
struct Upserts {
    store: Store,
    clock: SharedClock,
}

impl Batch for Upserts {
    type Request = Request;
    type Output = Upserted;
    type Error = StoreError;

    fn project(r: &Request) -> &str {
        &r.project
    }

    fn lane_key<H: Hasher>(r: &Request, state: &mut H) {
        (r.project.as_str(), r.upsert.email.as_str()).hash(state);
    }

    async fn together(
        &self,
        project: &str,
        requests: &[Arc<Request>],
    ) -> Result<Vec<Result<Upserted, StoreError>>, StoreError> {
        let upserts: Vec<&Upsert> = requests.iter().map(|r| &r.upsert).collect();
        Ok(grouped(&self.store, &self.clock, project, &upserts).await?.into_iter().map(Ok).collect())
    }

    async fn one(&self, r: &Arc<Request>) -> Result<Upserted, StoreError> {
        upsert(&self.store, &self.clock, &r.project, &r.upsert).await
    }
}

/// Group-commit front of [`upsert`].
pub struct Ingester(GroupCommit<Upserts>);

impl Ingester {
    /// Starts `lanes` lane tasks on the current runtime.
    pub fn start(store: Store, clock: SharedClock, lanes: usize) -> Ingester {
        let options = Options { name: "ingest", lanes, max_batch: 256, linger: Duration::from_micros(1500) };
        Ingester(GroupCommit::start(Upserts { store, clock }, options))
    }

    /// Queues an upsert and waits for its outcome. Upserts of one email take the same lane.
    pub async fn submit(&self, project: &str, upsert: Upsert) -> Result<Upserted, StoreError> {
        self.0.submit(Request { project: project.to_string(), upsert }).await
    }
}

/// Applies the requests of one project in order against one read, and writes them in one transaction.
async fn grouped(
    store: &Store,
    clock: &SharedClock,
    project: &str,
    items: &[&Upsert],
) -> Result<Vec<Upserted>, StoreError> {
    let mut emails: Vec<String> = items.iter().map(|u| u.email.clone()).collect();
    emails.sort();
    emails.dedup();
    let read = store.group_contacts(project, &emails).await?;
    let original: HashMap<String, Contact> = read.contacts.iter().map(|c| (c.email.clone(), c.clone())).collect();
    let mut current: HashMap<String, Contact> = original.clone();
    let now = clock.now_ms();
    let mut events = Vec::new();
    let mut results = Vec::with_capacity(items.len());
    for u in items {
        let a = apply(project, current.get(&u.email), u, now);
        events.extend(a.events);
        results.push(Upserted { contact: a.contact.clone(), is_new: a.is_new, event_id: a.event_id });
        current.insert(u.email.clone(), a.contact);
    }
    let (created, updated) = batch_changes(&original, &current, now);
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
