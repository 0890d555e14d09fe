//! Accepting `/v1/send` requests: each recipient's contact upsert, the rendered email record and its
//! delivery job, written before the answer.
//!
//! [`accept_one`] does one request: read each recipient's contact, apply the rules of
//! `domain::contacts`, render, and write contacts, events, emails and jobs in one transaction; when a
//! contact changed meanwhile (or a concurrent request created it), everything is planned and rendered
//! again.
//!
//! [`Accepter`] groups concurrent requests through the group-commit engine ([`crate::infra::batching`], as
//! [`crate::services::ingest::Ingester`] does for tracking): a batch reads all its contacts in one query, applies
//! the requests in arrival order, and writes the lot in one transaction. A request whose message cannot
//! be rendered fails alone (its contact changes are not written). A failed batch forgets its contacts,
//! so the engine's second attempt reads them; after that it falls back to [`accept_one`] per request, so
//! nothing is lost or written twice.
//!
//! Must not import: salvo, surrealdb.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::domain::billing::Category;
use crate::domain::contacts::DataPatch;
use crate::domain::templating::Prepared;
use crate::infra::batching::{Batch, GroupCommit, Options};
use crate::infra::clock::SharedClock;
use crate::services::compose::{Composer, MAX_REQUEST_RENDER_BYTES, Message, Recipient};
use crate::services::delivery::{DELIVER_ATTEMPTS, DELIVER_JOB};
use crate::services::ingest::{Upsert, plan};
use crate::store::contacts::{Contact, WriteResult};
use crate::store::emails::EmailRow;
use crate::store::events::Event;
use crate::store::{Store, StoreError};

/// A validated `/v1/send` request, everything owned so a lane can take it.
pub struct SendRequest {
    pub project: String,
    /// (email, display name), in request order.
    pub recipients: Vec<(String, Option<String>)>,
    pub subscribed: Option<bool>,
    pub patch: DataPatch,
    pub from: String,
    pub from_name: Option<String>,
    pub reply_to: Option<String>,
    pub subject: Prepared,
    pub html: Prepared,
    /// TRANSACTIONAL, MARKETING or HEADLESS
    pub kind: String,
    pub template: Option<String>,
    pub headers: Vec<(String, String)>,
    /// JSON array of stored attachments (one copy for every recipient)
    pub attachments: Arc<str>,
    pub track: bool,
    pub request_vars: Vec<(String, Value)>,
    /// Priority of the delivery jobs.
    pub priority: i64,
    /// The recipients on the project's suppression list, each with the error its email record carries:
    /// their emails are written SUPPRESSED, without a delivery job (docs/behaviour.md#suppressions).
    pub suppressed: HashMap<String, String>,
}

impl SendRequest {
    fn message(&self) -> Message<'_> {
        Message {
            project: &self.project,
            from: &self.from,
            from_name: self.from_name.as_deref(),
            reply_to: self.reply_to.as_deref(),
            subject: &self.subject,
            html: &self.html,
            kind: &self.kind,
            template: self.template.as_deref(),
            campaign: None,
            headers: &self.headers,
            attachments: self.attachments.clone(),
            track: self.track,
            request_vars: &self.request_vars,
            subject_prefix: "",
            bulk: false,
        }
    }

    fn upsert(&self, email: &str) -> Upsert {
        Upsert {
            email: email.to_string(),
            subscribed: self.subscribed,
            default_subscribed: false,
            patch: self.patch.clone(),
            event: None,
        }
    }
}

/// One recipient's outcome: its contact and its email record.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub contact_id: String,
    pub contact_email: String,
    pub email: String,
    /// Why the email is not sent: its recipient is on the suppression list.
    pub suppressed: Option<String>,
}

/// Marks a composed email of a suppressed recipient: SUPPRESSED with the entry in its error, so the
/// store writes no delivery job for it.
fn suppress(req: &SendRequest, email: &str, row: &mut EmailRow) -> Option<String> {
    let why = req.suppressed.get(email)?;
    row.status = crate::domain::status::EmailStatus::Suppressed;
    row.error = Some(why.clone());
    Some(why.clone())
}

#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// The message cannot be rendered for a recipient (say, the output is too large).
    #[error("cannot render the template: {0}")]
    Render(String),
    /// The request's recipients do not fit under the project's transactional limit (402).
    #[error("{0}")]
    Billing(crate::error::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A write refused by the transactional limit it checks (docs/behaviour.md#billing) as its 402.
fn billing_or_store(e: StoreError) -> AcceptError {
    match crate::services::billing::refused(Category::Transactional, &e) {
        Some(refusal) => AcceptError::Billing(refusal),
        None => AcceptError::Store(e),
    }
}

/// Marketing mail never goes to an unsubscribed contact (docs/behaviour.md#sending): checked for every
/// recipient before anything is written. `subscribed` is the request's own setting, which applies to
/// the contacts as they are upserted; a new contact without it counts as unsubscribed.
pub async fn check_marketing_recipients(
    store: &Store,
    project: &str,
    recipients: &[(String, Option<String>)],
    subscribed: Option<bool>,
) -> Result<(), crate::error::Error> {
    for (email, _) in recipients {
        let current = store.contact_by_email(project, email).await?.map(|c| c.subscribed);
        if !subscribed.or(current).unwrap_or(false) {
            return Err(crate::error::Error::Invalid(format!(
                "{email} is not subscribed: marketing email is only sent to subscribed contacts"
            )));
        }
    }
    Ok(())
}

/// One request, on its own: planned, rendered and written in one transaction, again when a contact
/// changed meanwhile. Rendering runs on the blocking pool ([`crate::services::compose::off_async`]).
pub async fn accept_one(
    store: &Store,
    clock: &SharedClock,
    composer: &Arc<Composer>,
    req: &Arc<SendRequest>,
) -> Result<Vec<Accepted>, AcceptError> {
    for _ in 0..16 {
        let now = clock.now_ms();
        let mut writes = Vec::new();
        let mut events = Vec::new();
        let mut planned: HashMap<String, Contact> = HashMap::new();
        let mut recipients: Vec<(Contact, String, Option<String>)> = Vec::new();
        for (email, name) in &req.recipients {
            let contact = match planned.get(email) {
                Some(c) => c.clone(),
                None => {
                    let p = plan(store, clock, &req.project, &req.upsert(email)).await?;
                    writes.push(p.write);
                    events.extend(p.events);
                    planned.insert(email.clone(), p.contact.clone());
                    p.contact
                }
            };
            recipients.push((contact, email.clone(), name.clone()));
        }
        let (composer, owned) = (composer.clone(), req.clone());
        let (rows, out) = crate::services::compose::off_async(move || -> Result<_, AcceptError> {
            let message = owned.message();
            let mut budget = MAX_REQUEST_RENDER_BYTES;
            let mut rows = Vec::with_capacity(recipients.len());
            let mut out = Vec::with_capacity(recipients.len());
            for (contact, email, name) in &recipients {
                let id = uuid::Uuid::now_v7().to_string();
                let r = Recipient { contact_id: &contact.id, email, name: name.as_deref(), data: &contact.data };
                let mut row = composer
                    .compose_within(&message, &r, &id, now, &mut budget)
                    .map_err(|i| AcceptError::Render(i.to_string()))?;
                let suppressed = suppress(&owned, email, &mut row);
                rows.push(row);
                let (contact_id, contact_email) = (contact.id.clone(), contact.email.clone());
                out.push(Accepted { contact_id, contact_email, email: id, suppressed });
            }
            Ok((rows, out))
        })
        .await
        .map_err(AcceptError::Render)??;
        let written = store
            .write_contacts_and_emails(
                &req.project,
                &writes,
                &events,
                &rows,
                DELIVER_JOB,
                req.priority,
                DELIVER_ATTEMPTS,
            )
            .await
            .map_err(billing_or_store)?;
        if matches!(written, WriteResult::Done) {
            return Ok(out);
        }
        // A contact changed, or another writer of a limited project committed first: again, a moment
        // later, so writers that conflicted do not meet again in step.
        tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 8)).await;
    }
    Err(StoreError::Busy("the contacts kept changing; gave up after 16 attempts".into()).into())
}

/// The group-commit writer of send requests (see [`crate::infra::batching`]).
struct Sends {
    store: Store,
    clock: SharedClock,
    composer: Arc<Composer>,
}

impl Batch for Sends {
    type Request = SendRequest;
    type Output = Vec<Accepted>;
    type Error = AcceptError;

    fn project(r: &SendRequest) -> &str {
        &r.project
    }

    fn lane_key<H: Hasher>(r: &SendRequest, state: &mut H) {
        (r.project.as_str(), r.recipients.first().map(|r| r.0.as_str())).hash(state);
    }

    async fn together(
        &self,
        project: &str,
        requests: &[Arc<SendRequest>],
    ) -> Result<Vec<Result<Vec<Accepted>, AcceptError>>, StoreError> {
        grouped(self, project, requests).await
    }

    async fn one(&self, r: &Arc<SendRequest>) -> Result<Vec<Accepted>, AcceptError> {
        accept_one(&self.store, &self.clock, &self.composer, r).await
    }
}

/// Group-commit front of [`accept_one`].
pub struct Accepter(GroupCommit<Sends>);

impl Accepter {
    /// Starts `lanes` lane tasks on the current runtime.
    pub fn start(store: Store, clock: SharedClock, composer: Arc<Composer>, lanes: usize) -> Accepter {
        let options = Options { name: "accept", lanes, max_batch: 128, linger: Duration::from_micros(1500) };
        Accepter(GroupCommit::start(Sends { store, clock, composer }, options))
    }

    /// Queues a request and waits for its outcome. Requests for the same first recipient take the same
    /// lane, so repeated sends to one contact do not conflict with each other.
    pub async fn submit(&self, req: SendRequest) -> Result<Vec<Accepted>, AcceptError> {
        self.0.submit(req).await
    }
}

/// Applies the requests of one project in order against one read of their contacts, renders every
/// email, and writes the lot in one transaction. A request that cannot be rendered gets its error and
/// leaves no trace; the others are written.
async fn grouped(
    deps: &Sends,
    project: &str,
    items: &[Arc<SendRequest>],
) -> Result<Vec<Result<Vec<Accepted>, AcceptError>>, StoreError> {
    let mut emails: Vec<String> = items.iter().flat_map(|r| r.recipients.iter().map(|r| r.0.clone())).collect();
    emails.sort();
    emails.dedup();
    let read = deps.store.group_contacts(project, &emails).await?;
    let original: HashMap<String, Contact> = read.contacts.iter().map(|c| (c.email.clone(), c.clone())).collect();
    let now = deps.clock.now_ms();
    let refusals = within_limit(deps, project, items, now).await?;
    let reqs: Vec<Arc<SendRequest>> = items.to_vec();
    let (composer, project_id, start) = (deps.composer.clone(), project.to_string(), original.clone());
    // Planning is cheap, rendering is not: the whole loop runs on the blocking pool.
    let (current, events, rows, results) = crate::services::compose::off_async(move || {
        let mut current = start;
        let mut events: Vec<Event> = Vec::new();
        let mut rows: Vec<(i64, EmailRow)> = Vec::new();
        let mut results = Vec::with_capacity(reqs.len());
        for (req, refusal) in reqs.iter().zip(refusals) {
            if let Some(refusal) = refusal {
                results.push(Err(AcceptError::Billing(refusal)));
                continue;
            }
            let message = req.message();
            // What this request changes, kept apart until all its emails are rendered.
            let mut touched: HashMap<String, Contact> = HashMap::new();
            let mut own_events = Vec::new();
            let mut own_rows = Vec::new();
            let mut out = Vec::new();
            let mut failed = None;
            let mut budget = MAX_REQUEST_RENDER_BYTES;
            for (email, name) in &req.recipients {
                if !touched.contains_key(email) {
                    let a = crate::services::ingest::apply(&project_id, current.get(email), &req.upsert(email), now);
                    own_events.extend(a.events);
                    touched.insert(email.clone(), a.contact);
                }
                let Some(contact) = touched.get(email) else { continue };
                let id = uuid::Uuid::now_v7().to_string();
                let r = Recipient { contact_id: &contact.id, email, name: name.as_deref(), data: &contact.data };
                let suppressed = match composer.compose_within(&message, &r, &id, now, &mut budget) {
                    Ok(mut row) => {
                        let suppressed = suppress(req, email, &mut row);
                        own_rows.push((req.priority, row));
                        suppressed
                    }
                    Err(issue) => {
                        failed = Some(AcceptError::Render(issue.to_string()));
                        break;
                    }
                };
                let (contact_id, contact_email) = (contact.id.clone(), contact.email.clone());
                out.push(Accepted { contact_id, contact_email, email: id, suppressed });
            }
            match failed {
                Some(e) => results.push(Err(e)),
                None => {
                    current.extend(touched);
                    events.extend(own_events);
                    rows.extend(own_rows);
                    results.push(Ok(out));
                }
            }
        }
        (current, events, rows, results)
    })
    .await
    .map_err(StoreError::Db)?;
    let (created, updated) = crate::services::ingest::batch_changes(&original, &current, now);
    let unchanged = read.unchanged_remembered(&updated);
    // Refused by the limit in the transaction (another writer counted first): the engine falls back to
    // one request at a time, each checked on its own.
    deps.store
        .write_send_batch(project, &created, &updated, &unchanged, &events, &rows, DELIVER_JOB, DELIVER_ATTEMPTS)
        .await?;
    Ok(results)
}

/// Under a transactional limit, which requests of a batch do not fit (in order, each taking its
/// recipients from what is left), as their 402; all fit without a limit, and nothing is read then.
async fn within_limit(
    deps: &Sends,
    project: &str,
    items: &[Arc<SendRequest>],
    now: i64,
) -> Result<Vec<Option<crate::error::Error>>, StoreError> {
    let category = Category::Transactional;
    let (mut left, limit) =
        crate::services::billing::room(&deps.store, project, category, i64::MAX as usize, now).await?;
    Ok(items
        .iter()
        .map(|r| {
            let limit = limit?;
            // Suppressed recipients' emails are not sent, so they take no room.
            let n = r.recipients.iter().filter(|(e, _)| !r.suppressed.contains_key(e)).count();
            if n <= left {
                left -= n;
                None
            } else {
                Some(crate::services::billing::exceeded(category, limit, left))
            }
        })
        .collect())
}
