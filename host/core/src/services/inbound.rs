//! Receiving mail (docs/behaviour.md#receiving-mail): which recipients Herald takes mail for, the durable
//! acceptance of a message (stored with its job before the SMTP front end answers 250), and the job that
//! applies it: a bounce or a delay to the email its return-path token (or Message-ID) names, a complaint
//! likewise, any other mail to a project's domain as an `email.received` event for the sender's contact.
//!
//! Must not import: salvo, surrealdb.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::domain::billing::Category;
use crate::domain::contacts::{DataPatch, is_email, normalize_email};
use crate::domain::inbound::{self, Kind};
use crate::domain::return_path;
use crate::domain::status::DomainStatus;
use crate::error::Error;
use crate::infra::clock::SharedClock;
use crate::infra::jobs::{JobContext, JobError, JobWake, Registry};
use crate::infra::metrics;
use crate::infra::spool::{Draft, Spool, SpoolError};
use crate::plugins::{Notification, NotificationKind};
use crate::services::ingest::{Upsert, plan};
use crate::services::quotas::Ceilings;
use crate::services::sender_auth::Results;
use crate::store::contacts::WriteResult;
use crate::store::emails::EmailKey;
use crate::store::inbound::NewInbound;
use crate::store::jobs::NewJob;
use crate::store::{Store, StoreError};

/// The job that applies one received message.
pub const PROCESS_JOB: &str = "inbound.process";

/// Jobs of [`PROCESS_JOB`] claimed together.
pub const PROCESS_BATCH: usize = 32;

/// KiB of received messages read and parsed at once in a process, whatever their number: the jobs of a
/// batch read their files in turn when they are large (docs/behaviour.md#receiving-mail).
const READING_BUDGET_KIB: u32 = 32 * 1024;

/// The event a reply or other mail becomes.
pub const RECEIVED_EVENT: &str = "email.received";

/// Where a recipient's mail goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The return-path host: bounces and complaints about Herald's own emails.
    ReturnPath,
    /// A verified domain of this project, or its `inbound.` subdomain.
    Project(String),
}

/// What the SMTP front end answers a RCPT TO with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accept(Route),
    /// Not a domain Herald receives mail for (550).
    Unknown,
    /// The project's monthly inbound limit is reached (a temporary refusal: 452).
    OverLimit,
}

/// Receiving mail: the return-path host and key, and the project ceilings new contacts are held to.
pub struct Inbound {
    store: Store,
    clock: SharedClock,
    /// The return-path host and the key of its tokens (docs/behaviour.md#return-path).
    return_path: Option<(String, Vec<u8>)>,
    quotas: Arc<Ceilings>,
    /// The files of received messages (None when this process does not receive mail).
    spool: Option<Arc<Spool>>,
    /// Checks the senders of replies (SPF, DKIM, DMARC) with this resolver, as the server named here.
    senders: Option<(mail_auth::MessageAuthenticator, String)>,
    /// KiB of messages the jobs may hold at once ([`READING_BUDGET_KIB`]).
    reading: tokio::sync::Semaphore,
    /// Set once the worker exists (it is built after the job handlers).
    pub wake: std::sync::OnceLock<JobWake>,
}

impl Inbound {
    pub fn new(
        store: Store,
        clock: SharedClock,
        return_path: Option<(String, Vec<u8>)>,
        quotas: Arc<Ceilings>,
        spool: Option<Arc<Spool>>,
        senders: Option<(mail_auth::MessageAuthenticator, String)>,
    ) -> Inbound {
        let reading = tokio::sync::Semaphore::new(READING_BUDGET_KIB as usize);
        Inbound { store, clock, return_path, quotas, spool, senders, reading, wake: Default::default() }
    }

    /// Starts a message in the spool, written as it arrives.
    pub async fn draft(&self) -> Result<Draft, SpoolError> {
        match &self.spool {
            Some(s) => s.draft().await,
            None => Err(SpoolError::Io(std::io::Error::other("this process does not receive mail"))),
        }
    }

    /// Bytes of received messages in this process's spool (not applied yet, or arriving).
    pub fn spooled_bytes(&self) -> u64 {
        self.spool.as_ref().map_or(0, |s| s.used())
    }

    /// Deletes the spool files a crash left behind (see `infra::spool`); answers how many.
    pub async fn sweep(&self) -> usize {
        let Some(spool) = &self.spool else { return 0 };
        let stale = match spool.stale().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot sweep the spool of received messages");
                return 0;
            }
        };
        let mut n = 0;
        for file in stale {
            // A row that cannot be looked up now keeps its file.
            if self.store.inbound_exists(&file.id).await.unwrap_or(true) {
                continue;
            }
            if spool.discard(&file).await.is_ok() {
                n += 1;
            }
        }
        n
    }

    /// Messages are applied up to [`PROCESS_BATCH`] at a time, concurrently (each its own writes).
    pub fn register(self: &Arc<Self>, registry: &mut Registry) {
        let me = self.clone();
        registry.register_batch(PROCESS_JOB, PROCESS_BATCH, move |jobs: Vec<JobContext>| {
            let me = me.clone();
            async move { futures_util::future::join_all(jobs.iter().map(|ctx| me.process(ctx))).await }
        });
    }

    /// Where mail for `address` goes (`local@domain`, any case).
    pub async fn route(&self, address: &str) -> Result<Verdict, Error> {
        let Some((_, domain)) = address.rsplit_once('@') else { return Ok(Verdict::Unknown) };
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        if let Some((host, _)) = &self.return_path
            && domain.eq_ignore_ascii_case(host)
        {
            return Ok(Verdict::Accept(Route::ReturnPath));
        }
        let Some(project) = self.project_of(&domain).await? else { return Ok(Verdict::Unknown) };
        let now = self.clock.now_ms();
        let (room, _) = crate::services::billing::room(&self.store, &project, Category::Inbound, 1, now).await?;
        Ok(if room == 0 { Verdict::OverLimit } else { Verdict::Accept(Route::Project(project)) })
    }

    /// The project whose verified domain, with receiving turned on, is `domain` or `inbound.<domain>`
    /// (from the short read cache of domains the sender check uses: a domain verified, switched or
    /// removed here counts at once, elsewhere within seconds).
    async fn project_of(&self, domain: &str) -> Result<Option<String>, StoreError> {
        let verified = async |name: &str| -> Result<Option<String>, StoreError> {
            let rows = self.store.domains_named_cached(name).await?;
            Ok(rows.into_iter().find(|d| d.status == DomainStatus::Verified && d.inbound).map(|d| d.project))
        };
        if let Some(p) = verified(domain).await? {
            return Ok(Some(p));
        }
        match domain.strip_prefix("inbound.") {
            Some(parent) => verified(parent).await,
            None => Ok(None),
        }
    }

    /// Keeps a received message (its spool file made whole) with the job that will apply it; when this
    /// returns Ok the message survives a crash. Answers its id.
    pub async fn accept(
        &self,
        mail_from: &str,
        rcpts: &[String],
        message: Draft,
        peer: &str,
        helo: &str,
    ) -> Result<String, Error> {
        let size = message.len();
        let id = message.keep().await.map_err(|e| Error::StorageUnavailable(e.to_string()))?;
        let now = self.clock.now_ms();
        let mut job = NewJob::new(PROCESS_JOB, serde_json::json!({ "id": id }), now);
        job.max_attempts = 10;
        let m = NewInbound { id: &id, mail_from, rcpts, size, peer, helo };
        if let Err(e) = self.store.store_inbound(m, job.doc(now), now).await {
            if let Some(spool) = &self.spool
                && let Err(e) = spool.remove(&id).await
            {
                tracing::warn!(error = %e, "a refused message's spool file stays until the sweep");
            }
            return Err(e.into());
        }
        if let Some(w) = self.wake.get() {
            w.kind(PROCESS_JOB);
        }
        Ok(id)
    }

    async fn process(&self, ctx: &JobContext) -> Result<(), JobError> {
        #[derive(serde::Deserialize)]
        struct Payload {
            id: String,
        }
        let p: Payload = ctx.payload()?;
        let Some(mut row) = self.store.inbound_message(&p.id).await? else { return Ok(()) };
        let (raw, _reading) = match row.take_raw() {
            Some(raw) => (raw, None),
            None => {
                let spool = self.spool.as_ref().ok_or("this process does not receive mail: no spool to read")?;
                let size = spool.size(&row.id).await.unwrap_or(0);
                let kib = u32::try_from(size.div_ceil(1024)).unwrap_or(u32::MAX).min(READING_BUDGET_KIB);
                let permit = self.reading.acquire_many(kib).await.map_err(|e| e.to_string())?;
                match spool.read(&row.id).await.map_err(|e| e.to_string())? {
                    Some(raw) => (raw, Some(permit)),
                    None => {
                        return Err(JobError::Retry(format!(
                            "message {} is not in this process's spool folder (processes sharing a database \
                             share HERALD_SMTP_SPOOL_DIR)",
                            row.id
                        )));
                    }
                }
            }
        };
        let kind = inbound::classify(&raw, &row.mail_from);
        // Replies to a project: who really sent them.
        let projects = match &kind {
            Kind::Mail(_) => self.projects_of(&row.rcpts).await?,
            _ => Vec::new(),
        };
        let senders = match (&self.senders, projects.is_empty()) {
            (Some((auth, host)), false) => {
                let peer = row.peer.parse().unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
                let helo = row.helo.as_deref().unwrap_or("unknown");
                crate::services::sender_auth::check(auth, &raw, peer, helo, &row.mail_from, host).await
            }
            _ => Results::unchecked(),
        };
        drop(raw);
        // The event an application writes: one id per message (and project), so a second run writes
        // nothing twice.
        let event_id = |salt: &str| {
            uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, format!("herald-inbound:{}:{salt}", row.id).as_bytes())
                .to_string()
        };
        let mut counted = Vec::new();
        let outcome = match kind {
            Kind::Bounce(b) => match self.email_for(&row.rcpts, None, b.message_id.as_deref()).await? {
                Ok(key) => {
                    let reason = match &b.reason {
                        Some(r) => format!("{} {r}", b.status),
                        None => b.status.clone(),
                    };
                    let n = Notification {
                        kind: NotificationKind::Bounce,
                        message_id: None,
                        provider_message_id: None,
                        permanent: b.permanent,
                        reason: Some(reason),
                    };
                    crate::services::notifications::apply_to(&self.store, &self.clock, key, &n, Some(event_id("")))
                        .await?;
                    if b.permanent { "bounce" } else { "delay" }
                }
                Err(why) => why,
            },
            Kind::Complaint(c) => {
                match self.email_for(&row.rcpts, c.return_path.as_deref(), c.message_id.as_deref()).await? {
                    Ok(key) => {
                        let n = Notification {
                            kind: NotificationKind::Complaint,
                            message_id: None,
                            provider_message_id: None,
                            permanent: true,
                            reason: Some(format!("feedback-type: {}", c.feedback_type)),
                        };
                        crate::services::notifications::apply_to(&self.store, &self.clock, key, &n, Some(event_id("")))
                            .await?;
                        "complaint"
                    }
                    Err(why) => why,
                }
            }
            Kind::Mail(m) => {
                let mut outcome = "not_for_a_project";
                for project in projects {
                    outcome = self.record_received(&project, &m, &event_id(&project), &senders).await?;
                    if outcome == "received" {
                        counted.push(project);
                    }
                }
                outcome
            }
            Kind::Ignored(_) => "ignored",
        };
        metrics::inbound(outcome);
        self.store.finish_inbound(&row.id, &counted, self.clock.now_ms()).await?;
        if let Some(spool) = &self.spool
            && let Err(e) = spool.remove(&row.id).await
        {
            tracing::warn!(error = %e, "an applied message's spool file stays until the sweep");
        }
        Ok(())
    }

    /// The email a report is about: named by a return-path token among the recipients (or in the
    /// reported message's return path), else by the reported message's Message-ID. Err: why none was
    /// (a token that does not hold is forged).
    async fn email_for(
        &self,
        rcpts: &[String],
        reported_return_path: Option<&str>,
        message_id: Option<&str>,
    ) -> Result<Result<EmailKey, &'static str>, StoreError> {
        let mut forged = false;
        if let Some((host, key)) = &self.return_path {
            for address in rcpts.iter().map(String::as_str).chain(reported_return_path) {
                let address = address.trim().trim_matches(['<', '>']);
                let Some((local, domain)) = address.rsplit_once('@') else { continue };
                if !domain.eq_ignore_ascii_case(host) || !local.to_ascii_lowercase().starts_with(return_path::PREFIX) {
                    continue;
                }
                match return_path::email_of(key, local) {
                    Some(id) => {
                        return Ok(self.store.email_key(&id).await?.ok_or("unknown_email"));
                    }
                    None => forged = true,
                }
            }
        }
        // A token that does not hold: nothing else of the report is trusted (docs/security.md).
        if forged {
            return Ok(Err("forged_token"));
        }
        if let Some(m) = message_id
            && let Some(key) = self.store.email_by_message_id(m).await?
            && self.received_for(rcpts, &key.project).await?
        {
            return Ok(Ok(key));
        }
        Ok(Err("unknown_email"))
    }

    /// Whether a report found by its Message-ID may touch an email of `project`: it was sent to the
    /// return-path host, or to a domain of that same project (a report to one tenant's domain never
    /// reaches another tenant's email).
    async fn received_for(&self, rcpts: &[String], project: &str) -> Result<bool, StoreError> {
        for r in rcpts {
            let Some((_, domain)) = r.rsplit_once('@') else { continue };
            let domain = domain.to_ascii_lowercase();
            if self.return_path.as_ref().is_some_and(|(host, _)| host.eq_ignore_ascii_case(&domain)) {
                return Ok(true);
            }
            if self.project_of(&domain).await?.as_deref() == Some(project) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The projects the recipients' domains belong to, each once.
    async fn projects_of(&self, rcpts: &[String]) -> Result<Vec<String>, StoreError> {
        let mut out: Vec<String> = Vec::new();
        for r in rcpts {
            let Some((_, domain)) = r.rsplit_once('@') else { continue };
            if let Some(p) = self.project_of(&domain.to_ascii_lowercase()).await?
                && !out.contains(&p)
            {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// Records a received message as an `email.received` event of the sender's contact (created, not
    /// subscribed, when missing).
    async fn record_received(
        &self,
        project: &str,
        m: &inbound::Received,
        event_id: &str,
        senders: &Results,
    ) -> Result<&'static str, StoreError> {
        let email = normalize_email(&m.from);
        if !is_email(&email) {
            return Ok("no_sender");
        }
        // A forged sender whose domain asks receivers to refuse it: not recorded, not counted.
        if senders.reject {
            return Ok("dmarc_reject");
        }
        if self.store.event_exists(event_id).await? {
            return Ok("received");
        }
        let now = self.clock.now_ms();
        if crate::services::quotas::room_for_contacts(
            &self.store,
            &self.quotas,
            project,
            std::slice::from_ref(&email),
            now,
        )
        .await
        .is_err()
        {
            return Ok("contacts_quota");
        }
        let mut data = match serde_json::to_value(m) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        };
        senders.write_into(&mut data);
        // A reply to one of Herald's emails names it.
        if let Some(reply_to) = &m.in_reply_to
            && let Some(key) = self.store.email_by_message_id(reply_to).await?
            && key.project == project
        {
            data.insert("emailId".into(), key.id.into());
        }
        let upsert = Upsert {
            email,
            subscribed: None,
            default_subscribed: false,
            patch: DataPatch::default(),
            event: Some((RECEIVED_EVENT.to_string(), data)),
        };
        for _ in 0..16 {
            let mut p = plan(&self.store, &self.clock, project, &upsert).await?;
            for e in p.events.iter_mut().filter(|e| e.name == RECEIVED_EVENT) {
                e.id = event_id.to_string();
            }
            if self.store.write_contact(project, &p.write, &p.events).await? == WriteResult::Done {
                return Ok("received");
            }
        }
        Err(StoreError::Busy("the contact kept changing; gave up after 16 attempts".into()))
    }
}
