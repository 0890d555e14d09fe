//! Campaign sending (docs/behaviour.md#campaigns), on the durable job queue:
//!
//! - `send` (DRAFT → SENDING) or `schedule` (DRAFT → SCHEDULED, and a `campaign.start` job at the time)
//!   start a new *run* of the campaign and enqueue its `campaign.resolve` job in the same transaction.
//! - `campaign.resolve` evaluates the audience (subscribed contacts of ALL, a segment, or a condition)
//!   once through the segment engine, fixes `totalRecipients`, and writes one `campaign.batch` job per
//!   100 contacts (`campaign_batch_size`), in one transaction.
//! - `campaign.batch` renders its contacts' emails and writes them with their delivery jobs, its batch
//!   marker and one fewer batch left, in one transaction. A campaign email's record id is derived from
//!   (campaign, contact), so whatever is retried, restarted or run twice, a contact gets one email.
//! - `campaigns.progress` (recurring) recounts every sending campaign's counters from its email records
//!   and moves it to SENT once every batch is written and no email is PENDING, SENDING or DEFERRED.
//! - `cancel` cancels every email not handed over yet (delivery claims each campaign email right before
//!   its transport conversation, `delivery::ledger`); nothing handed over → DRAFT, else CANCELLED.
//!
//! Every job carries the run it belongs to and every write is conditioned on the campaign still being
//! in that run's state, so a job of an earlier run (before a cancel back to DRAFT) does nothing.
//!
//! Must not import: salvo, surrealdb.

pub mod manage;
pub mod recount;

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::domain::campaigns::{audience_tree, email_id};
use crate::domain::status::{CampaignStatus, EmailStatus};
use crate::domain::templating::{Mode, Prepared};
use crate::domain::tracking::tracked;
use crate::infra::clock::SharedClock;
use crate::infra::jobs::{JobContext, JobError, Registry};
use crate::services::compose::{Composer, Message, Recipient};
use crate::services::delivery::{DELIVER_ATTEMPTS, DELIVER_CAMPAIGN_JOB, DELIVER_JOB};
use crate::services::segments::{self, SegmentError};
use crate::store::campaigns::{CampaignChange, CampaignMove, CampaignRow, Cancelled, EmailCounts};
use crate::store::jobs::NewJob;
use crate::store::{Store, StoreError};

pub const START_JOB: &str = "campaign.start";
pub const RESOLVE_JOB: &str = "campaign.resolve";
pub const BATCH_JOB: &str = "campaign.batch";
pub const PROGRESS_JOB: &str = "campaigns.progress";

/// Delivery priority of campaign emails: after transactional (100) and workflow mail.
pub const EMAIL_PRIORITY: i64 = 1;
/// Priority of the campaign's own jobs (resolving, writing batches).
const JOB_PRIORITY: i64 = 5;
const JOB_ATTEMPTS: i64 = 20;
/// Priority of test sends: they are transactional.
const TEST_PRIORITY: i64 = 100;
/// How often a batch is re-marked against the campaigns limit when its write finds that another writer
/// counted first, before the job is tried again.
const BILLING_ROUNDS: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum CampaignError {
    /// The action is not allowed in the campaign's status.
    #[error("{0}")]
    State(String),
    #[error("campaign {0} not found")]
    NotFound(String),
    /// Bad input, naming the field.
    #[error("{1}")]
    Field(&'static str, String),
    /// The project's monthly campaigns limit is reached (a test send's refusal).
    #[error("{0}")]
    Billing(crate::error::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Segment(#[from] SegmentError),
    /// A job of the campaign that cannot run (its payload does not parse).
    #[error(transparent)]
    Job(#[from] JobError),
}

impl From<CampaignError> for JobError {
    fn from(e: CampaignError) -> Self {
        match e {
            CampaignError::Job(e) => e,
            other => JobError::Retry(other.to_string()),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RunPayload {
    campaign: String,
    project: String,
    run: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct BatchPayload {
    campaign: String,
    project: String,
    run: i64,
    index: usize,
    contacts: Vec<String>,
}

/// The campaign engine and its services.
pub struct Campaigns {
    pub store: Store,
    pub clock: SharedClock,
    pub composer: Arc<Composer>,
    pub segments: segments::Engine,
    /// Contacts per `campaign.batch` job.
    pub batch_size: usize,
    /// Emails per `email.deliver.campaign` job.
    pub delivery_chunk: usize,
    /// Wakes the job worker (set once the worker exists).
    pub wake: OnceLock<crate::infra::jobs::JobWake>,
    /// Each campaign's last recount in this process, which holds the next one back (`recount.rs`).
    pub recounted: recount::Recounts,
}

/// How long a cancel waits for the hand-overs in flight to finish before it answers (they end within
/// the transport's own timeout; the counters are recounted on every later read).
const CANCEL_SETTLE: std::time::Duration = std::time::Duration::from_secs(5);

/// How often the progress job recounts a sending campaign's counters from its email records (a read of
/// every record; longer for a big campaign, `recount.rs`); whether the campaign is finished is checked
/// on every run, through the index.
const RECOUNT_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// How old a SENDING campaign's counters may be when a read (`GET /campaigns/:id`, `/stats`) answers
/// them (longer for a big campaign, `recount.rs`): a recount reads every email record of the campaign,
/// and a dashboard polls.
const READ_RECOUNT_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// What every email of a campaign shares (untracked; its batches set `track` from the project's mode).
fn campaign_message<'a>(
    c: &'a CampaignRow,
    from_name: Option<&'a str>,
    subject: &'a Prepared,
    html: &'a Prepared,
) -> Message<'a> {
    Message {
        project: &c.project,
        from: &c.from,
        from_name,
        reply_to: c.reply_to.as_deref(),
        subject,
        html,
        kind: &c.kind,
        template: None,
        campaign: Some(&c.id),
        headers: &[],
        attachments: std::sync::Arc::from("[]"),
        track: false,
        request_vars: &[],
        subject_prefix: "",
        bulk: true,
    }
}

/// A campaign job of one run, unique by `unique_key`, due at `run_at`.
fn job(kind: &str, payload: Value, run_at: i64, unique_key: String) -> NewJob {
    NewJob {
        priority: JOB_PRIORITY,
        max_attempts: JOB_ATTEMPTS,
        unique_key: Some(unique_key),
        ..NewJob::new(kind, payload, run_at)
    }
}

impl Campaigns {
    /// Registers the campaign jobs; the progress job runs every `progress_ms`.
    pub fn register(self: &Arc<Self>, registry: &mut Registry, progress_ms: i64) {
        registry.every(PROGRESS_JOB, progress_ms);
        let c = self.clone();
        registry.register(START_JOB, move |ctx: JobContext| {
            let c = c.clone();
            async move { c.start_job(ctx).await }
        });
        let c = self.clone();
        registry.register(RESOLVE_JOB, move |ctx: JobContext| {
            let c = c.clone();
            async move { c.resolve_job(ctx).await }
        });
        let c = self.clone();
        registry.register(BATCH_JOB, move |ctx: JobContext| {
            let c = c.clone();
            async move { c.batch_job(ctx).await }
        });
        for kind in [START_JOB, RESOLVE_JOB, BATCH_JOB] {
            registry.set_priority(kind, JOB_PRIORITY);
        }
        let c = self.clone();
        registry.register(PROGRESS_JOB, move |_ctx: JobContext| {
            let c = c.clone();
            async move { c.progress().await.map(|_| ()).map_err(|e| e.to_string()) }
        });
    }

    /// Wakes the job worker for work of `kind` enqueued due now.
    fn wake(&self, kind: &str) {
        if let Some(w) = self.wake.get() {
            w.kind(kind);
        }
    }

    async fn load(&self, project: &str, id: &str) -> Result<CampaignRow, CampaignError> {
        self.store.campaign(project, id).await?.ok_or_else(|| CampaignError::NotFound(id.to_string()))
    }

    /// Immediate send: DRAFT → SENDING, a new run, and its resolve job. Answers the campaign after.
    pub async fn send_now(&self, project: &str, id: &str) -> Result<CampaignRow, CampaignError> {
        self.start_run(project, id, RESOLVE_JOB, None).await
    }

    /// Scheduled send: DRAFT → SCHEDULED, a new run, and its start job at `at` (at once when past).
    pub async fn schedule(&self, project: &str, id: &str, at: i64) -> Result<CampaignRow, CampaignError> {
        self.start_run(project, id, START_JOB, Some(at)).await
    }

    /// Starts a new run of a DRAFT campaign, sending now or scheduled for `at`, with the run's first job
    /// (`kind`, due now or at `at`) in the same transaction.
    async fn start_run(
        &self,
        project: &str,
        id: &str,
        kind: &str,
        at: Option<i64>,
    ) -> Result<CampaignRow, CampaignError> {
        let c = self.load(project, id).await?;
        crate::domain::campaigns::allowed(crate::domain::campaigns::Action::Send, c.status)
            .map_err(CampaignError::State)?;
        let now = self.clock.now_ms();
        let run = c.run + 1;
        let payload = json!(RunPayload { campaign: id.into(), project: project.into(), run });
        let first = job(kind, payload, at.unwrap_or(now), format!("campaign:{id}:{run}:{kind}"));
        let m = CampaignMove {
            from: &[CampaignStatus::Draft],
            run: c.run,
            unresolved: false,
            change: CampaignChange::Start { run, scheduled_for: at },
            jobs: vec![first],
            now,
        };
        if !self.store.transition_campaign(project, id, &m).await? {
            return Err(CampaignError::State("the campaign changed meanwhile; read it again".into()));
        }
        self.wake(kind);
        self.load(project, id).await
    }

    /// Cancel (docs/behaviour.md#campaigns). Answers the campaign after.
    pub async fn cancel(&self, project: &str, id: &str) -> Result<CampaignRow, CampaignError> {
        for _ in 0..8 {
            let c = self.load(project, id).await?;
            crate::domain::campaigns::allowed(crate::domain::campaigns::Action::Cancel, c.status)
                .map_err(CampaignError::State)?;
            let now = self.clock.now_ms();
            match self.store.cancel_campaign(project, id, c.status, c.run, now).await? {
                Cancelled::Stale => continue,
                Cancelled::Draft => return self.load(project, id).await,
                Cancelled::Cancelled => {
                    // Emails already inside a hand-over finish it (in this or another process): wait a
                    // little for their outcomes so the answer's counters are final.
                    let until = std::time::Instant::now() + CANCEL_SETTLE;
                    while self.store.campaign_sending(project, id).await? > 0 && std::time::Instant::now() < until {
                        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
                    }
                    self.recount(project, id, (CampaignStatus::Cancelled, c.run)).await?;
                    return self.load(project, id).await;
                }
            }
        }
        Err(CampaignError::State("the campaign keeps changing; try again".into()))
    }

    /// Sends the campaign's FAILED emails again (docs/delivery.md#resending-what-failed): each contact
    /// whose email delivery gave up on gets it once more (the same email, back to PENDING with a fresh
    /// give-up window), a thousand per transaction; a SENT campaign is SENDING until they settle.
    /// Answers the campaign after and how many went again. Only a SENDING or SENT campaign (409).
    pub async fn resend_failed(&self, project: &str, id: &str) -> Result<(CampaignRow, usize), CampaignError> {
        const CHUNK: usize = 1000;
        let c = self.load(project, id).await?;
        crate::domain::campaigns::allowed(crate::domain::campaigns::Action::ResendFailed, c.status)
            .map_err(CampaignError::State)?;
        let mut resent = 0;
        loop {
            let ids = self.store.failed_deliveries(project, id, CHUNK).await?;
            if ids.is_empty() {
                break;
            }
            let now = self.clock.now_ms();
            let jobs: Vec<NewJob> = ids
                .chunks(self.delivery_chunk.max(1))
                .map(|part| {
                    let mut job = NewJob::new(DELIVER_CAMPAIGN_JOB, json!({ "emails": part, "project": project }), now);
                    job.priority = EMAIL_PRIORITY;
                    job.max_attempts = DELIVER_ATTEMPTS;
                    job
                })
                .collect();
            resent += match self.store.resend_emails(project, id, &ids, &jobs, now).await {
                Ok(n) => n,
                Err(e) if crate::store::Store::is_campaign_state(&e) => {
                    return Err(CampaignError::State("the campaign changed meanwhile; try again".into()));
                }
                Err(e) => return Err(e.into()),
            };
            self.wake(DELIVER_CAMPAIGN_JOB);
            if ids.len() < CHUNK {
                break;
            }
        }
        self.recounted.forget(id);
        Ok((self.load(project, id).await?, resent))
    }

    /// Recounts a campaign's counters for `GET /campaigns/:id` unless the last recount in this process
    /// is recent enough (`recount.rs`: under [`READ_RECOUNT_EVERY`] old for a SENDING campaign, or held
    /// back by the cost of a big campaign's recount). Answers whether it recounted (then the stored
    /// counters changed).
    pub async fn recount_for_read(&self, c: &CampaignRow) -> Result<bool, CampaignError> {
        let base = match c.status {
            CampaignStatus::Sending => READ_RECOUNT_EVERY,
            _ => std::time::Duration::ZERO,
        };
        Ok(self.counts_within(c, base).await?.1)
    }

    /// A campaign's counters for `/stats`: recounted on every call, unless a big campaign's last
    /// recount holds the next one back (`recount.rs`).
    pub async fn counts_for_stats(&self, c: &CampaignRow) -> Result<EmailCounts, CampaignError> {
        Ok(self.counts_within(c, std::time::Duration::ZERO).await?.0)
    }

    async fn counts_within(
        &self,
        c: &CampaignRow,
        base: std::time::Duration,
    ) -> Result<(EmailCounts, bool), CampaignError> {
        if let Some(counts) = self.recounted.fresh(&c.id, (c.status, c.run), base) {
            return Ok((counts, false));
        }
        Ok((self.recount(&c.project, &c.id, (c.status, c.run)).await?, true))
    }

    /// Recounts a campaign's counters from its email records (the campaign in `state`) and stores them.
    pub async fn recount(&self, project: &str, id: &str, state: recount::State) -> Result<EmailCounts, CampaignError> {
        let counts = self.count(project, id, state).await?;
        self.store.set_campaign_counts(project, id, &counts).await?;
        Ok(counts)
    }

    /// Counts a campaign's email records (the campaign in `state`), remembering what it cost.
    async fn count(&self, project: &str, id: &str, state: recount::State) -> Result<EmailCounts, CampaignError> {
        let started = std::time::Instant::now();
        let counts = self.store.campaign_email_counts(project, id).await?;
        self.recounted.note(id, state, started.elapsed(), &counts);
        Ok(counts)
    }

    /// The campaign's subject and body, compiled once for all its recipients.
    fn prepare(&self, c: &CampaignRow) -> Result<(Prepared, Prepared), CampaignError> {
        let prepare = |src: &str, mode: Mode| {
            self.composer
                .templates
                .prepare(src, mode)
                .map_err(|i| CampaignError::Field("body", format!("the campaign cannot be rendered: {i}")))
        };
        Ok((prepare(&c.subject, Mode::Text)?, prepare(&c.body, Mode::Html)?))
    }

    /// `campaign.start`: a scheduled campaign's time has come.
    async fn start_job(&self, ctx: JobContext) -> Result<(), CampaignError> {
        let p: RunPayload = ctx.payload()?;
        let Some(c) = self.store.campaign(&p.project, &p.campaign).await? else { return Ok(()) };
        if c.status != CampaignStatus::Scheduled || c.run != p.run {
            return Ok(()); // cancelled or rescheduled meanwhile
        }
        let now = self.clock.now_ms();
        let payload = json!(RunPayload { campaign: c.id.clone(), project: c.project.clone(), run: c.run });
        let resolve = job(RESOLVE_JOB, payload, now, format!("campaign:{}:{}:{RESOLVE_JOB}", c.id, c.run));
        let m = CampaignMove {
            from: &[CampaignStatus::Scheduled],
            run: c.run,
            unresolved: false,
            change: CampaignChange::Sending,
            jobs: vec![resolve],
            now,
        };
        self.store.transition_campaign(&c.project, &c.id, &m).await?;
        self.wake(RESOLVE_JOB);
        Ok(())
    }

    /// The subscribed contacts a campaign goes to, sorted by id.
    pub async fn audience(&self, c: &CampaignRow, now: i64) -> Result<Vec<String>, CampaignError> {
        let tree = audience_tree(&c.audience_type, c.segment.as_deref(), c.audience_condition.as_ref());
        let tree = self.segments.parse(&tree)?;
        let compiled = self.segments.compile(&c.project, &tree, now).await?;
        let mut ids = self.segments.matching_ids(&c.project, &compiled).await?;
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// `campaign.resolve`: the audience, fixed once per run, split into batch jobs.
    async fn resolve_job(&self, ctx: JobContext) -> Result<(), CampaignError> {
        let p: RunPayload = ctx.payload()?;
        let Some(c) = self.store.campaign(&p.project, &p.campaign).await? else { return Ok(()) };
        if c.status != CampaignStatus::Sending || c.run != p.run || c.resolved {
            return Ok(());
        }
        let now = self.clock.now_ms();
        let ids = match self.audience(&c, now).await {
            Ok(ids) => ids,
            // The audience can no longer be evaluated (say, a plugin operator was removed): nobody is
            // sent anything, and the campaign completes empty rather than hanging in SENDING.
            Err(CampaignError::Segment(SegmentError::Invalid(msg) | SegmentError::TooLarge(msg))) => {
                tracing::warn!(campaign = %c.id, error = %msg, "campaign audience cannot be evaluated");
                vec![]
            }
            Err(e) => return Err(e),
        };
        let jobs: Vec<NewJob> = ids
            .chunks(self.batch_size.max(1))
            .enumerate()
            .map(|(index, chunk)| {
                let payload = json!(BatchPayload {
                    campaign: c.id.clone(),
                    project: c.project.clone(),
                    run: c.run,
                    index,
                    contacts: chunk.to_vec(),
                });
                job(BATCH_JOB, payload, now, format!("campaign:{}:{}:batch:{index}", c.id, c.run))
            })
            .collect();
        let m = CampaignMove {
            from: &[CampaignStatus::Sending],
            run: c.run,
            unresolved: true,
            change: CampaignChange::Resolved { recipients: ids.len(), batches: jobs.len() },
            jobs,
            now,
        };
        self.store.transition_campaign(&c.project, &c.id, &m).await?;
        self.wake(BATCH_JOB);
        Ok(())
    }

    /// `campaign.batch`: one batch of the audience rendered and written with its delivery jobs.
    async fn batch_job(&self, ctx: JobContext) -> Result<(), CampaignError> {
        let p: BatchPayload = ctx.payload()?;
        let Some(c) = self.store.campaign(&p.project, &p.campaign).await? else { return Ok(()) };
        if c.status != CampaignStatus::Sending || c.run != p.run {
            return Ok(());
        }
        let now = self.clock.now_ms();
        let contacts = self.store.batch_contacts(&c.project, &p.contacts).await?;
        // The audience is subscribed contacts only, checked again as each batch is written.
        let contacts: Vec<_> = contacts.into_iter().filter(|k| k.subscribed).collect();
        let ids: Vec<String> = contacts.iter().map(|k| email_id(&c.id, &k.id)).collect();
        let existing: std::collections::HashSet<String> =
            self.store.existing_email_records(&ids).await?.into_iter().collect();
        let project = self.store.project(&c.project).await?;
        let tracking_mode = project.as_ref().and_then(|p| p.tracking.clone());
        let project_name = project.as_ref().map(|p| p.name.clone());
        let (subject, html) = self.prepare(&c)?;
        let from_name = c.from_name.clone().or(project_name);
        let (composer, campaign) = (self.composer.clone(), c.clone());
        // Rendering a batch is CPU work: on the blocking pool, off the async worker threads.
        let rows = crate::services::compose::off_async(move || {
            let c = campaign;
            let message = Message {
                track: tracked(tracking_mode.as_deref(), &c.kind),
                ..campaign_message(&c, from_name.as_deref(), &subject, &html)
            };
            let mut rows = Vec::with_capacity(contacts.len());
            for (k, id) in contacts.iter().zip(&ids) {
                if existing.contains(id) {
                    continue;
                }
                let r = Recipient { contact_id: &k.id, email: &k.email, name: None, data: &k.data };
                match composer.compose(&message, &r, id, now) {
                    Ok(row) => rows.push(row),
                    Err(issue) => {
                        // This contact's data makes the message unrenderable (too large): recorded as FAILED.
                        let empty = Map::new();
                        let r = Recipient { data: &empty, ..r };
                        if let Ok(mut row) = composer.compose(&message, &r, id, now) {
                            row.status = EmailStatus::Failed;
                            row.error = Some(format!("cannot render the campaign for this contact: {issue}"));
                            rows.push(row);
                        }
                    }
                }
            }
            rows
        })
        .await
        .map_err(|e| CampaignError::Store(StoreError::Db(e)))?;
        let batch_id = format!("{}-{}-{}", c.id, c.run, p.index);
        let mut rows = rows;
        // Recipients on the suppression list are recorded SUPPRESSED, not delivered.
        crate::services::suppressions::mark(&self.store, &c.project, &mut rows).await?;
        // The limit is checked again where the batch is written: when another writer counted first, the
        // room is read again and the emails past it recorded as not sent (a few rounds at most, then
        // the job is tried again).
        for _ in 0..BILLING_ROUNDS {
            rows = self.within_billing_limit(&c.project, rows, now).await?;
            let written = self
                .store
                .write_campaign_batch(
                    &c.project,
                    &c.id,
                    c.run,
                    &batch_id,
                    &rows,
                    DELIVER_CAMPAIGN_JOB,
                    EMAIL_PRIORITY,
                    DELIVER_ATTEMPTS,
                    self.delivery_chunk,
                    now,
                )
                .await;
            match written {
                Err(e) if crate::store::billing::limit_reached(&e).is_some() => continue,
                written => {
                    written?;
                    self.wake(DELIVER_CAMPAIGN_JOB);
                    return Ok(());
                }
            }
        }
        Err(CampaignError::Store(StoreError::Busy("the campaigns limit kept moving; the batch is tried again".into())))
    }

    /// The emails of a batch with those beyond the project's monthly campaigns limit recorded as
    /// CANCELLED with the reason (`BILLING_LIMIT_EXCEEDED: ...`) instead of going to delivery. Run again
    /// over its own answer with a fresh read, it cancels more (the month's count only grows).
    async fn within_billing_limit(
        &self,
        project: &str,
        mut rows: Vec<crate::store::emails::EmailRow>,
        now: i64,
    ) -> Result<Vec<crate::store::emails::EmailRow>, CampaignError> {
        use crate::domain::billing::{Category, exceeded_reason};
        let wanted = rows.iter().filter(|r| r.status == EmailStatus::Pending).count();
        let (fits, limit) =
            crate::services::billing::room(&self.store, project, Category::Campaigns, wanted, now).await?;
        if let Some(limit) = limit.filter(|_| fits < wanted) {
            for r in rows.iter_mut().filter(|r| r.status == EmailStatus::Pending).skip(fits) {
                r.status = EmailStatus::Cancelled;
                r.error = Some(exceeded_reason(Category::Campaigns, limit));
            }
        }
        Ok(rows)
    }

    /// `campaigns.progress`: completes the finished sending campaigns (with their final counters) and
    /// recounts the others' counters every [`RECOUNT_EVERY`]. Returns how many became SENT.
    pub async fn progress(&self) -> Result<usize, CampaignError> {
        let mut done = 0;
        for c in self.store.sending_campaigns().await? {
            // Batches first: once every batch is written no email can appear, so no PENDING, SENDING or
            // DEFERRED email read after that means none will come. (`batches_left` holds the run's batch count;
            // each written batch left a marker row.)
            let written = c.resolved && self.store.campaign_batches_done(&c.id, c.run).await? >= c.batches_left;
            let finished = written && !self.store.campaign_has_unsent(&c.id).await?;
            if !finished && self.recounted.fresh(&c.id, (c.status, c.run), RECOUNT_EVERY).is_some() {
                continue;
            }
            let counts = self.count(&c.project, &c.id, (c.status, c.run)).await?;
            let stored = (c.sent_count, c.delivered_count, c.opened_count, c.clicked_count, c.bounced_count);
            if stored != (counts.sent, counts.delivered, counts.opened, counts.clicked, counts.bounced) {
                self.store.set_campaign_counts(&c.project, &c.id, &counts).await?;
            }
            if finished && counts.pending + counts.sending + counts.deferred == 0 {
                let now = self.clock.now_ms();
                let m = CampaignMove {
                    from: &[CampaignStatus::Sending],
                    run: c.run,
                    unresolved: false,
                    change: CampaignChange::Sent,
                    jobs: vec![],
                    now,
                };
                if self.store.transition_campaign(&c.project, &c.id, &m).await? {
                    self.recounted.forget(&c.id);
                    done += 1;
                }
            }
        }
        Ok(done)
    }

    /// A test send (docs/behaviour.md#campaigns) to a member of the project whose address is verified:
    /// `[TEST] ` subject, `X-Herald-Test: true`, no tracking, not in the campaign's counters, counted
    /// in billing as a campaign email (402 past the limit). Answers the email record's id.
    pub async fn test_send(&self, project: &str, id: &str, to: &str) -> Result<String, CampaignError> {
        use crate::domain::billing::Category;
        let c = self.load(project, id).await?;
        let members = self.store.members(project).await?;
        let member = members.iter().find(|m| m.email.as_deref().is_some_and(|e| e.eq_ignore_ascii_case(to)));
        // An address someone only signed up with (or was only invited at) is no way to mail it: the
        // member must have proved the address is theirs (verification link, accepted invitation, OAuth,
        // the operator's `project create`).
        let proved = match member {
            Some(m) => self.store.user(&m.user).await?.is_some_and(|u| u.email_verified_at.is_some()),
            None => false,
        };
        if !proved {
            return Err(CampaignError::Field(
                "email",
                "test sends go only to members of the project whose address is verified".into(),
            ));
        }
        let now = self.clock.now_ms();
        crate::services::billing::check(&self.store, project, Category::Campaigns, 1, now)
            .await
            .map_err(CampaignError::Billing)?;
        let data = match self.store.contact_by_email(project, to).await? {
            Some(k) => k.data,
            None => Map::new(),
        };
        let (subject, html) = self.prepare(&c)?;
        let project_name = self.store.project(project).await?.map(|p| p.name);
        let from_name = c.from_name.clone().or(project_name);
        let headers = vec![("X-Herald-Test".to_string(), "true".to_string())];
        // A test send is not in the campaign's counters (no campaign), not tracked, and marked as a
        // test; billing counts it as a campaign email.
        let message = Message {
            campaign: None,
            headers: &headers,
            subject_prefix: "[TEST] ",
            ..campaign_message(&c, from_name.as_deref(), &subject, &html)
        };
        let email = uuid::Uuid::now_v7().to_string();
        // No contact: a test send writes no events and never changes anyone's subscription.
        let r = Recipient { contact_id: "", email: to, name: None, data: &data };
        let row = self
            .composer
            .compose(&message, &r, &email, now)
            .map_err(|i| CampaignError::Field("body", format!("the campaign cannot be rendered: {i}")))?;
        let written = self
            .store
            .create_emails(&[row], DELIVER_JOB, TEST_PRIORITY, DELIVER_ATTEMPTS, Some(Category::Campaigns))
            .await;
        if let Err(e) = written {
            return Err(
                crate::services::billing::refused(Category::Campaigns, &e).map_or(e.into(), CampaignError::Billing)
            );
        }
        self.wake(DELIVER_JOB);
        Ok(email)
    }
}
