//! Campaigns and their state changes. Every change of status is one transaction conditioned on the state
//! it starts from (status and run), so two processes, a retried job and a user's cancel can race without
//! a campaign ever being in two states or a contact getting two emails. Every query filters by project.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::emails::EmailRow;
use super::jobs::NewJob;
use super::{Store, StoreError};
use crate::domain::status::CampaignStatus;
use crate::vars;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CampaignRow {
    pub id: String,
    pub project: String,
    pub name: String,
    pub description: Option<String>,
    pub subject: String,
    pub body: String,
    pub from: String,
    pub from_name: Option<String>,
    pub reply_to: Option<String>,
    #[serde(rename = "type")]
    pub kind: String,
    pub status: CampaignStatus,
    pub audience_type: String,
    pub segment: Option<String>,
    pub audience_condition: Option<Value>,
    pub scheduled_for: Option<i64>,
    #[serde(default)]
    pub run: i64,
    #[serde(default)]
    pub resolved: bool,
    #[serde(default)]
    pub batches_left: i64,
    #[serde(default)]
    pub total_recipients: i64,
    #[serde(default)]
    pub sent_count: i64,
    #[serde(default)]
    pub delivered_count: i64,
    #[serde(default)]
    pub opened_count: i64,
    #[serde(default)]
    pub clicked_count: i64,
    #[serde(default)]
    pub bounced_count: i64,
    pub sent_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl CampaignRow {
    /// A new DRAFT of `project` at `now` with no content, no run and zero counters.
    pub fn draft(id: String, project: &str, now: i64) -> CampaignRow {
        CampaignRow {
            id,
            project: project.to_string(),
            name: String::new(),
            description: None,
            subject: String::new(),
            body: String::new(),
            from: String::new(),
            from_name: None,
            reply_to: None,
            kind: "MARKETING".into(),
            status: CampaignStatus::Draft,
            audience_type: "ALL".into(),
            segment: None,
            audience_condition: None,
            scheduled_for: None,
            run: 0,
            resolved: false,
            batches_left: 0,
            total_recipients: 0,
            sent_count: 0,
            delivered_count: 0,
            opened_count: 0,
            clicked_count: 0,
            bounced_count: 0,
            sent_at: None,
            created_at: now,
            updated_at: now,
        }
    }

    /// SCHEDULED or SENDING: the campaign has work in flight.
    pub fn is_active(&self) -> bool {
        matches!(self.status, CampaignStatus::Scheduled | CampaignStatus::Sending)
    }

    /// Whether the audience names this segment (as SEGMENT, or in a FILTERED condition).
    pub fn uses_segment(&self, segment: &str) -> bool {
        let needle = format!("segment.{segment}");
        self.segment.as_deref() == Some(segment)
            || self.audience_condition.as_ref().is_some_and(|c| c.to_string().contains(&format!("\"{needle}\"")))
    }

    /// Whether the campaign sends from this domain.
    pub fn uses_domain(&self, domain: &str) -> bool {
        self.from.rsplit_once('@').is_some_and(|(_, d)| d.eq_ignore_ascii_case(domain))
    }
}

/// Filters and order of a campaign list.
#[derive(Debug, Clone, Default)]
pub struct CampaignQuery {
    pub status: Option<CampaignStatus>,
    /// lowercase
    pub search: Option<String>,
    /// `name`, `created_at` or `updated_at`
    pub sort: &'static str,
    pub ascending: bool,
    pub offset: usize,
    pub limit: usize,
}

/// A campaign's email records counted by outcome.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct EmailCounts {
    pub total: i64,
    pub pending: i64,
    pub sending: i64,
    /// waiting to be tried again (docs/delivery.md#deferral)
    #[serde(default)]
    pub deferred: i64,
    /// handed to a transport and accepted (`sent_at` set)
    pub sent: i64,
    /// DELIVERED or further (opened, clicked, complained)
    pub delivered: i64,
    pub opened: i64,
    pub clicked: i64,
    pub bounced: i64,
    pub complained: i64,
    pub failed: i64,
    pub cancelled: i64,
    /// hand-overs a crash interrupted: maybe sent, never sent again
    #[serde(default)]
    pub uncertain: i64,
    /// contacts who unsubscribed through a link of one of these emails
    #[serde(default)]
    pub unsubscribed: i64,
}

/// What a cancel did (docs/behaviour.md#campaigns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// Nothing had reached a transport: back to DRAFT.
    Draft,
    /// Some emails had gone: CANCELLED, the rest CANCELLED too.
    Cancelled,
    /// The campaign was not in the state read (changed meanwhile).
    Stale,
}

const FIELDS: &str = "record::id(id) AS id, project, name, description, subject, body, from, from_name, reply_to, type, \
     status, audience_type, segment, audience_condition, scheduled_for, run, resolved, batches_left, total_recipients, \
     sent_count, delivered_count, opened_count, clicked_count, bounced_count, sent_at, created_at, updated_at";

/// The error a conditioned transaction throws when the campaign is not in the expected state.
const STATE: &str = "CAMPAIGN_STATE";

fn is_state_error(e: &StoreError) -> bool {
    e.thrown(STATE)
}

/// A campaign's move from one state to the next, with the jobs that carry it on (see
/// [`Store::transition_campaign`]).
#[derive(Debug, Clone)]
pub struct CampaignMove<'a> {
    /// The states it may move from.
    pub from: &'a [CampaignStatus],
    /// The run it must be at.
    pub run: i64,
    /// Only while the run's audience is not resolved yet.
    pub unresolved: bool,
    pub change: CampaignChange,
    /// Enqueued in the same transaction.
    pub jobs: Vec<NewJob>,
    pub now: i64,
}

/// What a campaign's move changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CampaignChange {
    /// A DRAFT's new run `run`: SENDING now, or SCHEDULED for `scheduled_for`; counters from zero.
    Start { run: i64, scheduled_for: Option<i64> },
    /// A SCHEDULED campaign's time came: SENDING.
    Sending,
    /// The run's audience is resolved: its size and its batches (jobs of the same move).
    Resolved { recipients: usize, batches: usize },
    /// Every email of the run is settled: SENT.
    Sent,
}

impl CampaignChange {
    /// The status it moves to, if it changes the status.
    pub fn status(&self) -> Option<CampaignStatus> {
        match self {
            CampaignChange::Start { scheduled_for: Some(_), .. } => Some(CampaignStatus::Scheduled),
            CampaignChange::Start { scheduled_for: None, .. } | CampaignChange::Sending => {
                Some(CampaignStatus::Sending)
            }
            CampaignChange::Resolved { .. } => None,
            CampaignChange::Sent => Some(CampaignStatus::Sent),
        }
    }

    /// The fields it writes (merged into the campaign's row) at `now`.
    fn fields(&self, now: i64) -> Value {
        let mut set = match *self {
            CampaignChange::Start { run, scheduled_for } => {
                let mut set = vars! {
                    "run": run, "resolved": false, "batches_left": 0, "total_recipients": 0, "sent_count": 0,
                    "delivered_count": 0, "opened_count": 0, "clicked_count": 0, "bounced_count": 0,
                };
                match scheduled_for {
                    Some(at) => set["scheduled_for"] = at.into(),
                    None => set["sent_at"] = now.into(),
                }
                set
            }
            CampaignChange::Sending => vars! { "sent_at": now },
            CampaignChange::Resolved { recipients, batches } => {
                vars! { "resolved": true, "total_recipients": recipients, "batches_left": batches }
            }
            CampaignChange::Sent => vars! {},
        };
        if let Some(status) = self.status() {
            set["status"] = serde_json::to_value(status).unwrap_or(Value::Null);
        }
        set["updated_at"] = now.into();
        set
    }
}

impl Store {
    /// Creates a campaign.
    pub async fn create_campaign(&self, c: &CampaignRow) -> Result<(), StoreError> {
        let doc = doc_of(c);
        self.write(|| async {
            self.query(
                "CREATE type::record('campaign', $id) CONTENT $doc RETURN NONE",
                vars! { "id": c.id, "doc": doc.clone() },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Replaces a campaign read at its current status and run with `c` (the API keeps the fields it may
    /// not change), while it is DRAFT or SCHEDULED; false when it is not, or changed meanwhile.
    pub async fn replace_campaign(&self, c: &CampaignRow) -> Result<bool, StoreError> {
        let doc = doc_of(c);
        let v: Vec<Value> = self
            .write(|| async {
                self.query(
                    "UPDATE type::record('campaign', $id) CONTENT $doc
                     WHERE project = $p AND status = $status AND status IN ['DRAFT', 'SCHEDULED'] AND run = $run
                     RETURN VALUE record::id(id)",
                    vars! { "id": c.id, "p": c.project, "doc": doc.clone(), "status": c.status, "run": c.run },
                )
                .await?
                .all(0)
            })
            .await?;
        Ok(!v.is_empty())
    }

    pub async fn campaign(&self, project: &str, id: &str) -> Result<Option<CampaignRow>, StoreError> {
        self.query(
            &format!("SELECT {FIELDS} FROM campaign WHERE id = type::record('campaign', $id) AND project = $p"),
            vars! { "p": project, "id": id },
        )
        .await?
        .first(0)
    }

    /// One page of the project's campaigns and the total matching.
    pub async fn list_campaigns(
        &self,
        project: &str,
        q: &CampaignQuery,
    ) -> Result<(Vec<CampaignRow>, i64), StoreError> {
        let mut filter = String::from(" WHERE project = $p");
        if q.status.is_some() {
            filter.push_str(" AND status = $status");
        }
        if q.search.is_some() {
            filter.push_str(
                " AND (string::contains(string::lowercase(name), $q) OR string::contains(string::lowercase(subject), $q)
                   OR string::contains(string::lowercase(from), $q))",
            );
        }
        let dir = if q.ascending { "ASC" } else { "DESC" };
        let sort = match q.sort {
            "name" => "name",
            "updated_at" => "updated_at",
            _ => "created_at",
        };
        let mut rows = self
            .query(
                &format!(
                    "SELECT {FIELDS} FROM campaign{filter} ORDER BY {sort} {dir}, id {dir} LIMIT $limit START $offset;
                     SELECT count() AS n FROM campaign{filter} GROUP ALL;"
                ),
                vars! { "p": project, "status": q.status, "q": q.search, "limit": q.limit, "offset": q.offset },
            )
            .await?;
        let list = rows.all(0)?;
        let total = rows.value(1)?.get(0).and_then(|r| r.get("n")).and_then(Value::as_i64).unwrap_or(0);
        Ok((list, total))
    }

    /// Deletes a campaign unless it is SCHEDULED or SENDING. None: not found; Some(false): active.
    pub async fn delete_campaign(&self, project: &str, id: &str) -> Result<Option<bool>, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    "BEGIN TRANSACTION;
                     LET $c = (SELECT status FROM campaign WHERE id = type::record('campaign', $id) AND project = $p);
                     LET $out = IF array::len($c) == 0 { 'missing' }
                        ELSE IF $c[0].status IN ['SCHEDULED', 'SENDING'] { 'active' }
                        ELSE {
                            DELETE type::record('campaign', $id) RETURN NONE;
                            DELETE type::record('campaign_gate', $id) RETURN NONE;
                            DELETE campaign_batch WHERE campaign = $id;
                            'deleted'
                        };
                     RETURN $out;
                     COMMIT TRANSACTION;",
                    vars! { "p": project, "id": id },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(match v.as_str() {
            Some("deleted") => Some(true),
            Some("active") => Some(false),
            _ => None,
        })
    }

    /// Moves a campaign (docs/behaviour.md#campaigns) from one of `m.from` at run `m.run` (and, with
    /// `m.unresolved`, whose audience is not resolved yet) by `m.change`, and enqueues `m.jobs`, in one
    /// transaction. False when the campaign was not in that state.
    pub async fn transition_campaign(&self, project: &str, id: &str, m: &CampaignMove<'_>) -> Result<bool, StoreError> {
        let (from, run, jobs, unresolved) = (m.from, m.run, &m.jobs, m.unresolved);
        let set = m.change.fields(m.now);
        let jobs: Vec<Value> = jobs.iter().map(|j| j.doc(m.now)).collect();
        let mut sql = String::from(
            "BEGIN TRANSACTION;
             LET $r = (UPDATE type::record('campaign', $id) MERGE $set
                WHERE project = $p AND status IN $from AND run = $run AND (!$unresolved OR resolved = false)
                RETURN VALUE record::id(id));
             IF array::len($r) == 0 { THROW 'CAMPAIGN_STATE'; };\n",
        );
        if !jobs.is_empty() {
            sql.push_str("INSERT INTO job $jobs RETURN NONE;\n");
        }
        let status = m.change.status();
        // A run that starts sending opens the campaign's gate: its emails may be claimed for hand-over.
        if status == Some(CampaignStatus::Sending) {
            sql.push_str("UPSERT type::record('campaign_gate', $id) SET project = $p, open = true RETURN NONE;\n");
        }
        // A new status is a milestone of the activity feed.
        let milestone = status.filter(|s| !from.contains(s)).map(|s| {
            let mut data = Map::new();
            if let CampaignChange::Start { scheduled_for: Some(at), .. } = m.change {
                data.insert("scheduledFor".into(), crate::infra::clock::rfc3339(at).into());
            }
            super::activity::milestone(project, &format!("campaign.{}", s.as_str().to_lowercase()), id, data, m.now)
        });
        if milestone.is_some() {
            sql.push_str(super::activity::MILESTONE_INSERT);
        }
        sql.push_str("COMMIT TRANSACTION;");
        let v = vars! {
            "p": project, "id": id, "from": from, "run": run, "set": set, "jobs": jobs, "unresolved": unresolved,
            "milestone": milestone,
        };
        match self.write(|| async { self.query(&sql, v.clone()).await }).await {
            Ok(_) => Ok(true),
            Err(e) if is_state_error(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Writes one audience batch of a run: its marker, its email records and their delivery jobs (one per
    /// `chunk` emails), in one transaction. `Ok(false)`: the campaign is no longer sending this run, or
    /// the batch was written already (a retried job); nothing was written.
    #[allow(clippy::too_many_arguments)]
    pub async fn write_campaign_batch(
        &self,
        project: &str,
        campaign: &str,
        run: i64,
        batch_id: &str,
        emails: &[EmailRow],
        job_kind: &str,
        priority: i64,
        max_attempts: i64,
        chunk: usize,
        now: i64,
    ) -> Result<bool, StoreError> {
        let counted = self.counted(project, crate::domain::billing::Category::Campaigns).await?;
        let docs = super::emails::email_docs(emails, job_kind, priority, max_attempts, chunk, Some(counted));
        // The campaign row is only read here: concurrent batches of one campaign write disjoint rows and
        // never conflict with each other (a cancel, which writes the campaign row, conflicts with them).
        let mut sql = String::from(
            "BEGIN TRANSACTION;
             IF record::exists(type::record('campaign_batch', $batch)) { THROW 'CAMPAIGN_STATE: batch written'; };
             LET $r = (SELECT VALUE id FROM type::record('campaign', $c)
                WHERE project = $p AND status = 'SENDING' AND run = $run);
             IF array::len($r) == 0 { THROW 'CAMPAIGN_STATE'; };
             CREATE type::record('campaign_batch', $batch) SET campaign = $c, run = $run, created_at = $now RETURN NONE;\n",
        );
        if !docs.rows.is_empty() {
            sql.push_str(super::emails::EmailDocs::INSERTS);
        }
        sql.push_str("COMMIT TRANSACTION;");
        let v = vars! {
            "p": project, "c": campaign, "run": run, "batch": batch_id, "emails": docs.rows, "bodies": docs.bodies, "sets": docs.sets,
            "jobs": docs.jobs, "usage": docs.usage, "cap": docs.cap, "now": now,
        };
        match self.write(|| async { self.query(&sql, v.clone()).await }).await {
            Ok(_) => Ok(true),
            Err(e) if is_state_error(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The contacts of a campaign batch, by id (point reads of each record; missing ones left out).
    pub async fn batch_contacts(
        &self,
        project: &str,
        ids: &[String],
    ) -> Result<Vec<super::contacts::Contact>, StoreError> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        self.query(
            "SELECT record::id(id) AS id, email, subscribed, data, version, created_at, updated_at
             FROM array::map($ids, |$i| type::record('contact', $i)) WHERE project = $p",
            vars! { "p": project, "ids": ids },
        )
        .await?
        .all(0)
    }

    /// How many audience batches of a campaign's run are written.
    pub async fn campaign_batches_done(&self, campaign: &str, run: i64) -> Result<i64, StoreError> {
        let v = self
            .query(
                "SELECT count() AS n FROM campaign_batch WHERE campaign = $c AND run = $run GROUP ALL",
                vars! { "c": campaign, "run": run },
            )
            .await?
            .value(0)?;
        Ok(v.get(0).and_then(|r| r.get("n")).and_then(Value::as_i64).unwrap_or(0))
    }

    /// Of these email ids, the ones that exist.
    pub async fn existing_email_records(&self, ids: &[String]) -> Result<Vec<String>, StoreError> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let v = self
            // One set-wise read: a lookup per id inside a closure costs ~4x as much (~45 µs an id).
            .query(
                "SELECT VALUE record::id(id) FROM array::map($ids, |$i| type::record('email', $i)) WHERE id != NONE",
                vars! { "ids": ids },
            )
            .await?
            .value(0)?;
        Ok(v.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect())
    }

    /// Cancels a SCHEDULED or SENDING campaign read at `status` and `run`: its gate closes,
    /// so no email of it is claimed for hand-over from then on; when none had been handed over, the
    /// campaign goes back to DRAFT (its never-sent emails removed), else it is CANCELLED and every email
    /// not handed over becomes CANCELLED.
    ///
    /// The first transaction is small (the campaign row, its gate, one indexed probe) and conflicts with
    /// no claim: claims only read the gate (a locked read, so one that read it open before this commits
    /// fails and, retried, cancels its email). When it takes the DRAFT way it deletes the emails, which
    /// conflicts with any claim that committed meanwhile, so it is retried and sees that email handed
    /// over. The PENDING emails of a CANCELLED campaign are then cancelled a thousand per transaction (a
    /// claim of one meanwhile cancels it too).
    pub async fn cancel_campaign(
        &self,
        project: &str,
        id: &str,
        status: CampaignStatus,
        run: i64,
        now: i64,
    ) -> Result<Cancelled, StoreError> {
        let sql = "BEGIN TRANSACTION;
             LET $r = (UPDATE type::record('campaign', $id) SET updated_at = $now
                WHERE project = $p AND status = $status AND run = $run RETURN VALUE record::id(id));
             IF array::len($r) == 0 { THROW 'CAMPAIGN_STATE'; };
             UPSERT type::record('campaign_gate', $id) SET project = $p, open = false RETURN NONE;
             LET $handed = (SELECT VALUE id FROM email WHERE campaign = $id
                AND status NOT IN ['PENDING', 'DEFERRED', 'CANCELLED'] AND project = $p LIMIT 1);
             LET $out = IF array::len($handed) == 0 {
                LET $gone = (DELETE email WHERE campaign = $id AND project = $p RETURN BEFORE);
                DELETE array::map($gone, |$e| type::record('email_body', record::id($e.id))) RETURN NONE;
                DELETE campaign_batch WHERE campaign = $id RETURN NONE;
                UPDATE type::record('campaign', $id) SET status = 'DRAFT', scheduled_for = NONE, resolved = false,
                    batches_left = 0, total_recipients = 0, sent_count = 0, delivered_count = 0, opened_count = 0,
                    clicked_count = 0, bounced_count = 0, sent_at = NONE RETURN NONE;
                'DRAFT'
             } ELSE {
                UPDATE type::record('campaign', $id) SET status = 'CANCELLED' RETURN NONE;
                'CANCELLED'
             };
             {MILESTONE}RETURN $out;
             COMMIT TRANSACTION;";
        let sql = sql.replace("{MILESTONE}", super::activity::MILESTONE_INSERT);
        let milestone = super::activity::milestone(project, "campaign.cancelled", id, Map::new(), now);
        let v = vars! { "p": project, "id": id, "status": status, "run": run, "now": now, "milestone": milestone };
        let done = match self.write(|| async { self.query(&sql, v.clone()).await?.value_last() }).await {
            Ok(v) if v.as_str() == Some(CampaignStatus::Draft.as_str()) => return Ok(Cancelled::Draft),
            Ok(_) => Cancelled::Cancelled,
            Err(e) if is_state_error(&e) => return Ok(Cancelled::Stale),
            Err(e) => return Err(e),
        };
        let why = super::emails::CANCELLED_REASON;
        let v = vars! { "p": project, "id": id, "now": now, "why": why };
        loop {
            let n = self
                .write(|| async {
                    self.query(
                        "LET $r = array::concat(
                            (SELECT VALUE id FROM email WHERE campaign = $id AND status = 'PENDING' AND project = $p
                                LIMIT 1000),
                            (SELECT VALUE id FROM email WHERE campaign = $id AND status = 'DEFERRED' AND project = $p
                                LIMIT 1000));
                         UPDATE $r SET status = 'CANCELLED', error = $why, next_attempt_at = NONE, updated_at = $now
                            WHERE status IN ['PENDING', 'DEFERRED'] RETURN NONE;
                         RETURN array::len($r);",
                        v.clone(),
                    )
                    .await?
                    .value_last()
                })
                .await?;
            if n.as_i64().unwrap_or(0) == 0 {
                return Ok(done);
            }
        }
    }

    /// Of these campaigns, the ones whose gate is closed (cancelled, or never opened): their emails are
    /// not worth a throttle token, a slot or a session before their claim cancels them.
    pub async fn closed_gates(&self, campaigns: &[String]) -> Result<Vec<String>, StoreError> {
        if campaigns.is_empty() {
            return Ok(vec![]);
        }
        let v = self
            .query(
                "RETURN array::filter($c, |$i| (SELECT VALUE open FROM ONLY type::record('campaign_gate', $i)) != true)",
                vars! { "c": campaigns },
            )
            .await?
            .value(0)?;
        Ok(v.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect())
    }

    /// Counts a campaign's email records by outcome.
    pub async fn campaign_email_counts(&self, project: &str, id: &str) -> Result<EmailCounts, StoreError> {
        let v = self
            .query(
                "SELECT count() AS total,
                    count(status = 'PENDING') AS pending,
                    count(status = 'SENDING') AS sending,
                    count(status = 'DEFERRED') AS deferred,
                    count(sent_at != NONE) AS sent,
                    count(status IN ['DELIVERED', 'OPENED', 'CLICKED', 'COMPLAINED']) AS delivered,
                    count(opened_at != NONE OR clicked_at != NONE) AS opened,
                    count(clicked_at != NONE) AS clicked,
                    count(status = 'BOUNCED') AS bounced,
                    count(status = 'COMPLAINED') AS complained,
                    count(status = 'FAILED') AS failed,
                    count(status = 'CANCELLED') AS cancelled,
                    count(status = 'UNCERTAIN') AS uncertain,
                    count(unsubscribed_at != NONE) AS unsubscribed
                 FROM email WHERE campaign = $id AND project = $p GROUP ALL",
                vars! { "p": project, "id": id },
            )
            .await?
            .value(0)?;
        match v.get(0) {
            Some(row) => serde_json::from_value(row.clone()).map_err(|e| StoreError::Decode(e.to_string())),
            None => Ok(EmailCounts::default()),
        }
    }

    /// How many of a campaign's emails are inside a hand-over (SENDING) now.
    pub async fn campaign_sending(&self, project: &str, id: &str) -> Result<i64, StoreError> {
        let v = self
            .query(
                "RETURN array::len((SELECT VALUE id FROM email WHERE campaign = $id AND status = 'SENDING' AND project = $p))",
                vars! { "id": id, "p": project },
            )
            .await?
            .value(0)?;
        Ok(v.as_i64().unwrap_or(0))
    }

    /// The next emails of a campaign that delivery gave up on (FAILED with its attempts set; an email
    /// that could not be rendered has none): at most `limit` ids.
    pub async fn failed_deliveries(&self, project: &str, id: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        let v = self
            .query(
                "SELECT VALUE record::id(id) FROM email WHERE campaign = $id AND status = 'FAILED' AND project = $p
                    AND attempts != NONE LIMIT $limit",
                vars! { "p": project, "id": id, "limit": limit },
            )
            .await?
            .value(0)?;
        Ok(v.as_array().into_iter().flatten().filter_map(|i| i.as_str().map(str::to_string)).collect())
    }

    /// Sends FAILED emails of a SENDING or SENT campaign again, in one transaction: each back to PENDING
    /// with a fresh give-up window (`resent_at`), `jobs` to deliver them, and a SENT campaign back to
    /// SENDING (it is SENT again once nothing of it is left). Answers how many went back; an error
    /// [`Store::is_campaign_state`] when the campaign is in neither state.
    pub async fn resend_emails(
        &self,
        project: &str,
        id: &str,
        emails: &[String],
        jobs: &[NewJob],
        now: i64,
    ) -> Result<usize, StoreError> {
        let jobs: Vec<Value> = jobs.iter().map(|j| j.doc(now)).collect();
        let v = self
            .write(|| async {
                self.query(
                    "BEGIN TRANSACTION;
                     LET $c = (SELECT VALUE status FROM campaign WHERE id = type::record('campaign', $id) AND project = $p);
                     IF array::len($c) == 0 OR $c[0] NOT IN ['SENDING', 'SENT'] { THROW 'CAMPAIGN_STATE'; };
                     LET $back = (UPDATE array::map($emails, |$i| type::record('email', $i)) SET status = 'PENDING',
                        error = NONE, next_attempt_at = NONE, attempts = NONE, resent_at = $now, updated_at = $now
                        WHERE status = 'FAILED' AND campaign = $id AND project = $p RETURN VALUE id);
                     INSERT INTO job $jobs RETURN NONE;
                     UPDATE type::record('campaign', $id) SET status = 'SENDING', updated_at = $now
                        WHERE status = 'SENT' RETURN NONE;
                     RETURN array::len($back);
                     COMMIT TRANSACTION;",
                    vars! { "p": project, "id": id, "emails": emails, "jobs": jobs.clone(), "now": now },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_u64().unwrap_or(0) as usize)
    }

    /// Whether an error is the campaign's state refusing what was asked.
    pub fn is_campaign_state(e: &StoreError) -> bool {
        is_state_error(e)
    }

    /// Whether any of a campaign's email records is still PENDING, SENDING or DEFERRED (index lookups, no
    /// scan).
    pub async fn campaign_has_unsent(&self, id: &str) -> Result<bool, StoreError> {
        let v = self
            .query(
                "RETURN array::len((SELECT VALUE id FROM email WHERE campaign = $id AND status = 'PENDING' LIMIT 1))
                    + array::len((SELECT VALUE id FROM email WHERE campaign = $id AND status = 'SENDING' LIMIT 1))
                    + array::len((SELECT VALUE id FROM email WHERE campaign = $id AND status = 'DEFERRED' LIMIT 1));",
                vars! { "id": id },
            )
            .await?
            .value(0)?;
        Ok(v.as_i64().unwrap_or(1) > 0)
    }

    /// Stores a campaign's counters (recounted from its email records).
    pub async fn set_campaign_counts(&self, project: &str, id: &str, c: &EmailCounts) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE type::record('campaign', $id) SET sent_count = $c.sent, delivered_count = $c.delivered,
                    opened_count = $c.opened, clicked_count = $c.clicked, bounced_count = $c.bounced
                 WHERE project = $p RETURN NONE",
                vars! { "p": project, "id": id, "c": vars! {
                    "sent": c.sent, "delivered": c.delivered, "opened": c.opened, "clicked": c.clicked,
                    "bounced": c.bounced,
                } },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Every SENDING campaign (all projects: the progress job's work list).
    pub async fn sending_campaigns(&self) -> Result<Vec<CampaignRow>, StoreError> {
        self.query(&format!("SELECT {FIELDS} FROM campaign WHERE status = 'SENDING'"), vars! {}).await?.all(0)
    }

    /// The project's campaigns that may still send: DRAFT, SCHEDULED or SENDING. Their segment and
    /// sender domain cannot be deleted from under them.
    pub async fn unsent_campaigns(&self, project: &str) -> Result<Vec<CampaignRow>, StoreError> {
        self.query(
            &format!(
                "SELECT {FIELDS} FROM campaign WHERE project = $p AND status IN ['DRAFT', 'SCHEDULED', 'SENDING']"
            ),
            vars! { "p": project },
        )
        .await?
        .all(0)
    }

    /// Names of the project's templates that send from this domain.
    pub async fn templates_of_domain(&self, project: &str, domain: &str) -> Result<Vec<String>, StoreError> {
        let v: Vec<Value> = self
            .query(
                "SELECT VALUE name FROM template WHERE project = $p AND string::ends_with(string::lowercase(from), $d)",
                vars! { "p": project, "d": format!("@{}", domain.to_lowercase()) },
            )
            .await?
            .all(0)?;
        Ok(v.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
    }
}

fn doc_of(c: &CampaignRow) -> Value {
    let mut v = super::jobs::strip_nulls(serde_json::to_value(c).unwrap_or(Value::Null));
    if let Some(o) = v.as_object_mut() {
        o.remove("id");
    }
    v
}
