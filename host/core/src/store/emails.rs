//! Email records (one per recipient) and their delivery jobs.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Store, StoreError};
use crate::domain::status::EmailStatus;
use crate::vars;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EmailRow {
    pub id: String,
    pub project: String,
    pub contact: String,
    pub recipient: String,
    pub recipient_name: Option<String>,
    pub from: String,
    pub from_name: Option<String>,
    pub reply_to: Option<String>,
    pub subject: String,
    /// The message (html, text, JSON headers and attachments) is stored once in `email_body`, apart from
    /// the status fields that each delivery step rewrites; reads that need it fill it in.
    #[serde(default)]
    pub html: String,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub headers: String,
    /// The JSON list of attachments; shared (not copied) by the emails of one request.
    #[serde(default)]
    pub attachments: std::sync::Arc<str>,
    pub kind: String,
    pub template: Option<String>,
    /// The campaign this email belongs to (None: transactional sends, test sends).
    #[serde(default)]
    pub campaign: Option<String>,
    pub message_id: String,
    pub status: EmailStatus,
    pub error: Option<String>,
    pub sent_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    /// A workflow email's: the depth of the execution that wrote it, carried into the events its
    /// delivery, opens, clicks and notifications cause (docs/security.md#workflows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<i64>,
    /// A deferred email's failed attempts so far (docs/delivery.md#deferral).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<i64>,
    /// When a deferred email is tried next; None while it waits for its transport to come back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<i64>,
    /// When a FAILED campaign email was sent again (its give-up window counts from then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resent_at: Option<i64>,
}

impl EmailRow {
    /// When the email's give-up window began: when it was written, or sent again.
    pub fn window_start(&self) -> i64 {
        self.resent_at.unwrap_or(self.created_at).max(self.created_at)
    }
}

/// The recorded outcome of one delivery.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryOutcome {
    pub id: String,
    /// The email's campaign (a deferral checks its gate).
    pub campaign: Option<String>,
    pub status: EmailStatus,
    pub error: Option<String>,
    pub provider_message_id: Option<String>,
    /// DEFERRED: when it is tried next (None: when its transport is back).
    pub next_attempt_at: Option<i64>,
    /// DEFERRED: whether an attempt failed (counted in the email's attempts) or it was deferred without
    /// one (its transport or destination was known to be unavailable).
    pub attempted: bool,
}

impl DeliveryOutcome {
    /// An outcome that is not a deferral.
    pub fn new(id: &str, campaign: Option<String>, status: EmailStatus, error: Option<String>) -> DeliveryOutcome {
        DeliveryOutcome {
            id: id.to_string(),
            campaign,
            status,
            error,
            provider_message_id: None,
            next_attempt_at: None,
            attempted: false,
        }
    }
}

/// Emails per delivery job written by one `/v1/send` transaction: a group-committed batch of sends
/// makes one job per this many emails instead of one each (a job row is written when queued, claimed and
/// finished, each time with its three indexes). A job's re-run delivers only what is still PENDING or
/// SENDING, so a chunk retries safely.
pub const SEND_JOB_CHUNK: usize = 32;

/// Why a campaign email was not handed over after all.
pub const CANCELLED_REASON: &str = "the campaign was cancelled before this email was handed over";

const FIELDS: &str = "record::id(id) AS id, project, contact, recipient, recipient_name, from, from_name, reply_to, \
     subject, kind, template, campaign, message_id, status, error, sent_at, created_at, updated_at, depth, attempts, \
     next_attempt_at, resent_at";

/// An email's message, kept in `email_body` under the email's id (written once, never updated).
#[derive(Serialize, Deserialize)]
struct EmailBody {
    id: String,
    html: String,
    text: String,
    headers: String,
    /// The attachment list, or `@set:<id>` naming the `attachment_set` row that holds it.
    attachments: String,
}
const BODY: &str = "record::id(id) AS id, html, text, headers, attachments";

impl Store {
    /// Writes email records and their delivery jobs in one transaction, so an accepted email is never
    /// without the job that delivers it.
    pub async fn create_emails(
        &self,
        emails: &[EmailRow],
        job_kind: &str,
        priority: i64,
        max_attempts: i64,
        category: Option<crate::domain::billing::Category>,
    ) -> Result<(), StoreError> {
        let counted = match (category, emails.first()) {
            (Some(c), Some(e)) => Some(self.counted(&e.project, c).await?),
            _ => None,
        };
        let docs = email_docs(emails, job_kind, priority, max_attempts, 1, counted);
        let v = vars! {
            "emails": docs.rows, "bodies": docs.bodies, "jobs": docs.jobs, "sets": docs.sets, "usage": docs.usage,
            "cap": docs.cap,
        };
        self.write(|| async {
            self.query(&format!("BEGIN TRANSACTION;\n{}COMMIT TRANSACTION;", EmailDocs::INSERTS), v.clone()).await
        })
        .await
        .map(|_| ())
    }
}

/// The SQL of [`EmailDocs::RECORDS`], as a literal for `concat!`.
macro_rules! email_records_sql {
    () => {
        "INSERT INTO email $emails RETURN NONE;
         INSERT INTO email_body $bodies RETURN NONE;
         INSERT IGNORE INTO attachment_set $sets RETURN NONE;
         IF $cap != NONE AND $cap != NULL {
            FOR $u IN $usage {
                LET $used = math::sum((SELECT VALUE n FROM usage_month
                    WHERE project = $u.project AND month = $u.month AND category = $u.category));
                IF $used + $u.n > $cap {
                    THROW 'BILLING_LIMIT_EXCEEDED: ' + <string> $cap + '/' + <string> math::max([0, $cap - $used]);
                };
            };
         };
         FOR $u IN $usage {
            UPSERT type::record('usage_month', [$u.project, $u.month, $u.category, $u.shard])
                SET project = $u.project, month = $u.month, category = $u.category, n += $u.n RETURN NONE;
         };\n"
    };
}

/// What writing email records inserts: the records (`id` in each), their bodies, and their delivery jobs.
#[derive(Default)]
pub(crate) struct EmailDocs {
    pub rows: Vec<Value>,
    pub bodies: Vec<Value>,
    pub jobs: Vec<Value>,
    /// Attachment lists, each once (see [`attachment_sets`]).
    pub sets: Vec<Value>,
    /// Billing usage to add (see [`super::billing::usage_docs`]).
    pub usage: Vec<Value>,
    /// The limit the usage is held to in the writing transaction (`$cap`; None: unlimited).
    pub cap: Option<i64>,
}

impl EmailDocs {
    /// The statements that insert `$emails`, `$bodies` and `$sets` and add `$usage` to the billing
    /// counters (inside the caller's transaction), first checking it against the limit `$cap` when
    /// there is one (see `store/billing.rs`). A set already stored (the same list sent before) is kept as
    /// it is.
    pub const RECORDS: &str = email_records_sql!();
    /// [`EmailDocs::RECORDS`] and the delivery jobs `$jobs`.
    pub const INSERTS: &str = concat!(email_records_sql!(), "INSERT INTO job $jobs RETURN NONE;\n");

    pub fn extend(&mut self, other: EmailDocs) {
        self.rows.extend(other.rows);
        self.bodies.extend(other.bodies);
        self.jobs.extend(other.jobs);
        self.sets.extend(other.sets);
        self.usage.extend(other.usage);
        self.cap = self.cap.or(other.cap);
    }
}

/// The attachment lists of `emails`, each stored once: the emails of one request share one `Arc`, so a
/// list is hashed once per request however many recipients it has. Answers the reference each email's
/// body stores (`[]` for none) and the `attachment_set` documents to insert.
fn attachment_sets(emails: &[EmailRow]) -> (Vec<String>, Vec<Value>) {
    use sha2::Digest;
    let mut seen: Vec<(&std::sync::Arc<str>, String)> = Vec::new();
    let mut sets = Vec::new();
    let refs = emails
        .iter()
        .map(|e| {
            let list = &e.attachments;
            if list.trim().is_empty() || list.trim() == "[]" {
                return "[]".to_string();
            }
            if let Some((_, r)) = seen.iter().find(|(a, _)| std::sync::Arc::ptr_eq(a, list)) {
                return r.clone();
            }
            let id = format!("{}-{}", e.project, hex::encode(sha2::Sha256::digest(list.as_bytes())));
            sets.push(vars! { "id": id, "project": e.project, "content": list.as_ref() });
            let r = format!("{SET_REF}{id}");
            seen.push((list, r.clone()));
            r
        })
        .collect();
    (refs, sets)
}

/// How an email body names its attachment set.
const SET_REF: &str = "@set:";

/// The documents of email records, their bodies and their delivery jobs: one job per email when `chunk`
/// is 1 (payload `{email, project}`), else one job per `chunk` emails of the list (payload
/// `{emails, project}`). A chunk's job re-run delivers only what is still PENDING or SENDING, so chunks
/// retry safely.
pub(crate) fn email_docs(
    emails: &[EmailRow],
    job_kind: &str,
    priority: i64,
    max_attempts: i64,
    chunk: usize,
    counted: Option<super::billing::Counted>,
) -> EmailDocs {
    let mut rows = Vec::with_capacity(emails.len());
    let mut bodies = Vec::with_capacity(emails.len());
    let (refs, sets) = attachment_sets(emails);
    for (e, attachments) in emails.iter().zip(refs) {
        let mut v = super::jobs::strip_nulls(serde_json::to_value(e).unwrap_or(Value::Null));
        if let Some(o) = v.as_object_mut() {
            o.retain(|k, _| !matches!(k.as_str(), "html" | "text" | "headers" | "attachments"));
        }
        rows.push(v);
        let body = EmailBody {
            id: e.id.clone(),
            html: e.html.clone(),
            text: e.text.clone(),
            headers: e.headers.clone(),
            attachments,
        };
        bodies.push(serde_json::to_value(body).unwrap_or(Value::Null));
    }
    // Only PENDING emails need delivering (a campaign batch also records unrenderable ones as FAILED).
    let pending: Vec<&EmailRow> = emails.iter().filter(|e| e.status == EmailStatus::Pending).collect();
    let jobs: Vec<Value> = pending
        .chunks(chunk.max(1))
        .filter_map(|part| {
            let first = part.first()?;
            let payload = if chunk <= 1 {
                vars! { "email": first.id, "project": first.project }
            } else {
                let ids: Vec<&str> = part.iter().map(|e| e.id.as_str()).collect();
                vars! { "emails": ids, "project": first.project }
            };
            Some(vars! {
                "id": uuid::Uuid::now_v7().to_string(), "kind": job_kind,
                "payload": payload.to_string(),
                "status": crate::domain::status::JobStatus::Queued, "priority": priority, "run_at": first.created_at, "attempts": 0,
                "max_attempts": max_attempts, "created_at": first.created_at, "updated_at": first.created_at,
            })
        })
        .collect();
    let pending =
        || emails.iter().filter(|r| r.status == EmailStatus::Pending).map(|r| (r.project.as_str(), r.created_at));
    let usage = match counted.map(|c| super::billing::usage_docs(pending(), c)) {
        Some(Value::Array(a)) => a,
        _ => vec![],
    };
    EmailDocs { rows, bodies, jobs, sets, usage, cap: counted.and_then(|c| c.limit) }
}

impl Store {
    /// Fills in the messages of these emails from their `email_body` rows, reading each attachment set
    /// they name once.
    async fn fill_bodies(&self, rows: &mut [EmailRow], bodies: Vec<EmailBody>) -> Result<(), StoreError> {
        let mut set_ids: Vec<&str> = bodies.iter().filter_map(|b| b.attachments.strip_prefix(SET_REF)).collect();
        set_ids.sort_unstable();
        set_ids.dedup();
        #[derive(Deserialize)]
        struct Set {
            id: String,
            content: String,
        }
        let sets: std::collections::HashMap<String, std::sync::Arc<str>> = if set_ids.is_empty() {
            Default::default()
        } else {
            let found: Vec<Set> = self
                .query(
                    "SELECT record::id(id) AS id, content FROM array::map($ids, |$i| type::record('attachment_set', $i))",
                    vars! { "ids": set_ids },
                )
                .await?
                .all(0)?;
            found.into_iter().map(|s| (s.id, std::sync::Arc::from(s.content))).collect()
        };
        let mut by_id: std::collections::HashMap<String, EmailBody> =
            bodies.into_iter().map(|b| (b.id.clone(), b)).collect();
        for r in rows {
            if let Some(b) = by_id.remove(&r.id) {
                r.attachments = match b.attachments.strip_prefix(SET_REF) {
                    Some(id) => sets.get(id).cloned().unwrap_or_else(|| std::sync::Arc::from("[]")),
                    None => std::sync::Arc::from(b.attachments),
                };
                (r.html, r.text, r.headers) = (b.html, b.text, b.headers);
            }
        }
        Ok(())
    }
}

impl Store {
    /// Emails by id, in any project (the delivery batch checks each against its job's project).
    pub async fn emails_by_ids(&self, ids: &[String]) -> Result<Vec<EmailRow>, StoreError> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let mut r = self
            .query(
                &format!(
                    "SELECT {FIELDS} FROM array::map($ids, |$i| type::record('email', $i));
                     SELECT {BODY} FROM array::map($ids, |$i| type::record('email_body', $i));"
                ),
                vars! { "ids": ids },
            )
            .await?;
        let mut rows: Vec<EmailRow> = r.all(0)?;
        self.fill_bodies(&mut rows, r.all(1)?).await?;
        Ok(rows)
    }

    /// Of these contact ids, the ones that are unsubscribed now (or deleted).
    pub async fn unsubscribed_of(&self, ids: &[String]) -> Result<Vec<String>, StoreError> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let v = self
            .query(
                // The ids less the subscribed ones, read set-wise (a lookup per id inside a closure
                // costs ~10x as much).
                "RETURN array::complement($ids, (SELECT VALUE record::id(id)
                    FROM array::map($ids, |$i| type::record('contact', $i)) WHERE subscribed = true))",
                vars! { "ids": ids },
            )
            .await?
            .value(0)?;
        Ok(v.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect())
    }

    /// One round of the delivery ledger (`delivery::ledger`), in one transaction: the outcomes given
    /// with their events, then the claims (email id, campaign id). Answers each claimed email that was
    /// PENDING or DEFERRED with its new status: SENDING (it may be handed to its transport now), or
    /// CANCELLED when its campaign's gate is closed. An email not answered was neither (cancelled,
    /// decided, or claimed by another run) and must not be handed over.
    ///
    /// The round reads the gate of every campaign it claims or defers for with a locked read: a cancel
    /// that closes a gate after this round read it open makes this round fail to commit (it is retried
    /// and reads the gate closed), so no claim or deferral slips past a cancel, and claims never hold a
    /// cancel up.
    ///
    /// Outcomes never move an email down: SENT is written over PENDING, SENDING, DEFERRED or UNCERTAIN
    /// only (a provider's notification may have moved it further already), the other outcomes over
    /// PENDING, SENDING or DEFERRED only. A DEFERRED outcome (docs/delivery.md#deferral) keeps the
    /// reason and the next attempt, and counts the attempt when one failed; a campaign email whose
    /// campaign was cancelled meanwhile becomes CANCELLED instead.
    pub async fn delivery_round(
        &self,
        claims: &[(String, String)],
        outcomes: &[DeliveryOutcome],
        events: &[super::events::Event],
        now: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        if claims.is_empty() && outcomes.is_empty() && events.is_empty() {
            return Ok(vec![]);
        }
        // Every success takes one statement; the rest one each. A transport plugin's provider id goes to
        // `provider_message` only (the lookup reads it there; the email record keeps none).
        let sent: Vec<&str> =
            outcomes.iter().filter(|o| o.status == EmailStatus::Sent).map(|o| o.id.as_str()).collect();
        let sent_pid: Vec<Value> = outcomes
            .iter()
            .filter(|o| o.status == EmailStatus::Sent && o.provider_message_id.is_some())
            .map(|o| vars! { "id": o.id, "pid": o.provider_message_id })
            .collect();
        let deferred: Vec<Value> = outcomes
            .iter()
            .filter(|o| o.status == EmailStatus::Deferred)
            .map(|o| {
                super::jobs::strip_nulls(vars! { "id": o.id, "error": o.error, "next": o.next_attempt_at,
                "n": i64::from(o.attempted) })
            })
            .collect();
        let other: Vec<Value> = outcomes
            .iter()
            .filter(|o| !matches!(o.status, EmailStatus::Sent | EmailStatus::Deferred | EmailStatus::Pending))
            .map(|o| super::jobs::strip_nulls(vars! { "id": o.id, "status": o.status, "error": o.error }))
            .collect();
        let mut sql = String::from("BEGIN TRANSACTION;\n");
        if !sent.is_empty() {
            sql.push_str(
                "UPDATE array::map($sent, |$i| type::record('email', $i)) SET sent_at = $now,
                    status = IF status IN ['PENDING', 'SENDING', 'DEFERRED', 'UNCERTAIN'] THEN 'SENT' ELSE status END,
                    next_attempt_at = NONE, updated_at = $now RETURN NONE;\n",
            );
        }
        if !sent_pid.is_empty() {
            sql.push_str(
                "FOR $o IN $sent_pid { UPSERT type::record('provider_message', $o.id) SET pid = $o.pid RETURN NONE; };\n",
            );
        }
        if !other.is_empty() {
            sql.push_str(
                "FOR $o IN $other { UPDATE type::record('email', $o.id) SET status = $o.status, error = $o.error,
                    next_attempt_at = NONE, attempts = attempts ?? 0, updated_at = $now
                    WHERE status IN ['PENDING', 'SENDING', 'DEFERRED'] RETURN NONE; };\n",
            );
        }
        // The gates of the campaigns claimed or deferred for (a locked read, see above).
        let mut campaigns: Vec<&str> = claims.iter().map(|(_, c)| c.as_str()).collect();
        campaigns.extend(
            outcomes.iter().filter(|o| o.status == EmailStatus::Deferred).filter_map(|o| o.campaign.as_deref()),
        );
        campaigns.sort_unstable();
        campaigns.dedup();
        if !campaigns.is_empty() || !deferred.is_empty() {
            sql.push_str(
                "LET $open = array::filter($campaigns,
                    |$c| (SELECT VALUE open FROM ONLY type::record('campaign_gate', $c) FOR UPDATE) = true);\n",
            );
        }
        if !deferred.is_empty() {
            sql.push_str(
                "FOR $o IN $deferred {
                    UPDATE type::record('email', $o.id) SET attempts = (attempts ?? 0) + $o.n, updated_at = $now,
                        status = IF campaign = NONE OR campaign IN $open THEN 'DEFERRED' ELSE 'CANCELLED' END,
                        error = IF campaign = NONE OR campaign IN $open THEN $o.error ELSE $cancelled END,
                        next_attempt_at = IF campaign = NONE OR campaign IN $open THEN $o.next ELSE NONE END
                    WHERE status IN ['PENDING', 'SENDING', 'DEFERRED'] RETURN NONE; };\n",
            );
        }
        let outbox = super::events::outbox_row(events.iter().map(|e| e.id.as_str()));
        let events: Vec<Value> = events.iter().map(|e| e.row()).collect();
        if !events.is_empty() {
            sql.push_str("INSERT INTO event $events RETURN NONE;\n");
            sql.push_str(super::events::OUTBOX_INSERT);
        }
        if !claims.is_empty() {
            sql.push_str(
                "LET $claimed = (UPDATE array::map($claims, |$i| type::record('email', $i)) SET
                    status = IF campaign IN $open THEN 'SENDING' ELSE 'CANCELLED' END,
                    error = IF campaign IN $open THEN error ELSE $cancelled END,
                    updated_at = $now
                 WHERE status IN ['PENDING', 'DEFERRED'] RETURN record::id(id) AS id, status);
                 RETURN $claimed;\n",
            );
        }
        sql.push_str("COMMIT TRANSACTION;");
        let claim_ids: Vec<&str> = claims.iter().map(|(id, _)| id.as_str()).collect();
        let v = vars! {
            "sent": sent, "sent_pid": sent_pid, "other": other, "deferred": deferred, "events": events,
            "outbox": outbox, "claims": claim_ids, "campaigns": campaigns, "cancelled": CANCELLED_REASON, "now": now,
        };
        let claimed = self
            .write(|| async {
                let mut rows = self.query(&sql, v.clone()).await?;
                if claims.is_empty() { Ok(Value::Null) } else { rows.value_last() }
            })
            .await?;
        Ok(claimed
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| Some((r.get("id")?.as_str()?.to_string(), r.get("status")?.as_str()?.to_string())))
            .collect())
    }

    /// DEFERRED emails in the whole database, or of one project: the transactional ones and those of
    /// each sending campaign (a deferred campaign email keeps its campaign SENDING), each read through
    /// the (campaign, status) index rather than a walk over every email.
    pub async fn deferred_emails_of(&self, project: Option<&str>) -> Result<i64, StoreError> {
        // Fixed fragments only: the project is bound.
        let of_project = if project.is_some() { "AND project = $p" } else { "" };
        let v = self
            .query(
                &format!(
                    "LET $c = (SELECT VALUE record::id(id) FROM campaign WHERE status = 'SENDING' {of_project});
                     RETURN array::len(SELECT VALUE id FROM email WHERE campaign = NONE AND status = 'DEFERRED'
                            {of_project})
                        + math::sum(array::map($c, |$i| array::len(
                            SELECT VALUE id FROM email WHERE campaign = $i AND status = 'DEFERRED')));"
                ),
                vars! { "p": project.unwrap_or_default() },
            )
            .await?
            .value_last()?;
        Ok(v.as_i64().unwrap_or(0))
    }

    /// DEFERRED emails in the whole database.
    pub async fn deferred_emails(&self) -> Result<i64, StoreError> {
        self.deferred_emails_of(None).await
    }

    pub async fn email(&self, project: &str, id: &str) -> Result<Option<EmailRow>, StoreError> {
        let mut r = self
            .query(
                &format!(
                    "SELECT {FIELDS} FROM email WHERE id = type::record('email', $id) AND project = $p;
                     SELECT {BODY} FROM type::record('email_body', $id);"
                ),
                vars! { "p": project, "id": id },
            )
            .await?;
        let mut rows: Vec<EmailRow> = r.all(0)?;
        self.fill_bodies(&mut rows, r.all(1)?).await?;
        Ok(rows.pop())
    }

    /// First opens and first clicks of a campaign's emails, counted per bucket of `size` ms (bucket
    /// number = time / size): `(bucket, opened, clicked)`, buckets without either left out.
    pub async fn campaign_engagement(
        &self,
        project: &str,
        campaign: &str,
        size: i64,
    ) -> Result<Vec<(i64, i64, i64)>, StoreError> {
        let mut r = self
            .query(
                "SELECT math::floor(opened_at / $size) AS b, count() AS n FROM email
                    WHERE campaign = $c AND project = $p AND opened_at != NONE GROUP BY b;
                 SELECT math::floor(clicked_at / $size) AS b, count() AS n FROM email
                    WHERE campaign = $c AND project = $p AND clicked_at != NONE GROUP BY b;",
                vars! { "p": project, "c": campaign, "size": size },
            )
            .await?;
        let opens: Vec<Value> = r.all(0)?;
        let clicks: Vec<Value> = r.all(1)?;
        let mut by: std::collections::BTreeMap<i64, (i64, i64)> = std::collections::BTreeMap::new();
        let num = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(0.0) as i64;
        for o in &opens {
            by.entry(num(o, "b")).or_default().0 += num(o, "n");
        }
        for c in &clicks {
            by.entry(num(c, "b")).or_default().1 += num(c, "n");
        }
        Ok(by.into_iter().map(|(b, (o, c))| (b, o, c)).collect())
    }

    /// Records an open or a click: the first time, the counter, and the status moved up to `status` when
    /// it is one of `below` (the statuses ranked lower). Returns the contact and the email's campaign, or
    /// None for an unknown email.
    pub async fn record_engagement(
        &self,
        project: &str,
        id: &str,
        click: bool,
        below: &[EmailStatus],
        now: i64,
    ) -> Result<Option<Engagement>, StoreError> {
        let (first, count, status) = if click {
            ("clicked_at", "click_count", EmailStatus::Clicked)
        } else {
            ("opened_at", "open_count", EmailStatus::Opened)
        };
        let rows: Vec<Value> = self
            .write(|| async {
                self.query(
                    &format!(
                        "UPDATE type::record('email', $id) SET {count} = ({count} ?? 0) + 1, {first} = {first} ?? $now,
                            status = IF status IN $below THEN $status ELSE status END, updated_at = $now
                         WHERE project = $p RETURN contact, campaign, depth, $before.{first} = NONE AS first"
                    ),
                    vars! { "id": id, "p": project, "below": below, "status": status, "now": now },
                )
                .await?
                .all(0)
            })
            .await?;
        Ok(rows.first().and_then(|r| {
            let contact = r.get("contact")?.as_str()?.to_string();
            Some(Engagement {
                contact,
                campaign: r.get("campaign").and_then(Value::as_str).map(str::to_string),
                first: r.get("first").and_then(Value::as_bool).unwrap_or(false),
                depth: r.get("depth").and_then(Value::as_i64),
            })
        }))
    }

    /// The email with this Message-ID. Herald writes every Message-ID as
    /// `<{email id}@{domain}>`, so the id in it reads the record directly; the stored Message-ID must
    /// match exactly (a made-up one with a real id in it finds nothing).
    pub async fn email_by_message_id(&self, message_id: &str) -> Result<Option<EmailKey>, StoreError> {
        let Some((id, _)) = message_id.trim_start_matches('<').rsplit_once('@') else { return Ok(None) };
        if id.is_empty() {
            return Ok(None);
        }
        let rows: Vec<Value> = self
            .query(
                "SELECT project, record::id(id) AS id, contact, campaign, depth FROM type::record('email', $id)
                 WHERE message_id = $m",
                vars! { "id": id, "m": message_id },
            )
            .await?
            .all(0)?;
        Ok(rows.first().and_then(email_key))
    }

    /// The email with this id, in whichever project holds it (the id a return-path address names).
    pub async fn email_key(&self, id: &str) -> Result<Option<EmailKey>, StoreError> {
        let rows: Vec<Value> = self
            .query(
                "SELECT project, record::id(id) AS id, contact, campaign, depth FROM type::record('email', $id)",
                vars! { "id": id },
            )
            .await?
            .all(0)?;
        Ok(rows.first().and_then(email_key))
    }

    /// The email a transport plugin's provider knows by this id.
    pub async fn email_by_provider_message_id(&self, provider_id: &str) -> Result<Option<EmailKey>, StoreError> {
        let rows: Vec<Value> = self
            .query(
                "SELECT project, record::id(id) AS id, contact, campaign, depth FROM array::map(
                    (SELECT VALUE record::id(id) FROM provider_message WHERE pid = $p LIMIT 1),
                    |$i| type::record('email', $i))",
                vars! { "p": provider_id },
            )
            .await?
            .all(0)?;
        Ok(rows.first().and_then(email_key))
    }

    /// Records that the contact unsubscribed through a link of this email (the first time only); answers
    /// the email's campaign.
    pub async fn attribute_unsubscribe(
        &self,
        project: &str,
        contact: &str,
        email: &str,
        now: i64,
    ) -> Result<Option<String>, StoreError> {
        let rows: Vec<Value> = self
            .write(|| async {
                self.query(
                    "UPDATE type::record('email', $id) SET unsubscribed_at = unsubscribed_at ?? $now
                     WHERE project = $p AND contact = $c RETURN campaign",
                    vars! { "id": email, "p": project, "c": contact, "now": now },
                )
                .await?
                .all(0)
            })
            .await?;
        Ok(rows.first().and_then(|r| r.get("campaign")).and_then(Value::as_str).map(str::to_string))
    }

    /// Moves an email's status up to `status` when it is one of `below` (the order of
    /// docs/behaviour.md#delivery-and-email-statuses).
    pub async fn advance_email(
        &self,
        project: &str,
        id: &str,
        status: EmailStatus,
        below: &[EmailStatus],
        now: i64,
    ) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE type::record('email', $id) SET status = IF status IN $below THEN $s ELSE status END, updated_at = $now
                 WHERE project = $p RETURN NONE",
                vars! { "id": id, "p": project, "s": status, "below": below, "now": now },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Forgets the notification signatures that expired (the daily purge job).
    pub async fn purge_seen_notifications(&self, now: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query("DELETE notification_seen WHERE expires_at <= $now", vars! { "now": now }).await
        })
        .await
        .map(|_| ())
    }

    /// Remembers a notification signature until `expires_at`; false when it was seen already (a replay).
    pub async fn remember_notification(&self, signature: &str, expires_at: i64, now: i64) -> Result<bool, StoreError> {
        let r = self
            .query(
                "BEGIN TRANSACTION;
                 DELETE notification_seen WHERE expires_at <= $now;
                 CREATE notification_seen SET signature = $s, expires_at = $exp RETURN NONE;
                 COMMIT TRANSACTION;",
                vars! { "s": signature, "exp": expires_at, "now": now },
            )
            .await;
        match r {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Moves an email to `status` (with an error and sent time when given).
    pub async fn set_email_status(
        &self,
        id: &str,
        status: EmailStatus,
        error: Option<&str>,
        sent_at: Option<i64>,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut sets = String::from("status = $s, updated_at = $now");
        if error.is_some() {
            sets.push_str(", error = $err");
        }
        if sent_at.is_some() {
            sets.push_str(", sent_at = $sent");
        }
        self.write(|| async {
            self.query(
                &format!("UPDATE type::record('email', $id) SET {sets} RETURN NONE"),
                vars! { "id": id, "s": status, "err": error, "sent": sent_at, "now": now },
            )
            .await
        })
        .await
        .map(|_| ())
    }
}

/// (project, id, contact) of an email row read for a lookup.
fn email_key(r: &Value) -> Option<EmailKey> {
    Some(EmailKey {
        project: r.get("project")?.as_str()?.to_string(),
        id: r.get("id")?.as_str()?.to_string(),
        contact: r.get("contact")?.as_str()?.to_string(),
        campaign: r.get("campaign").and_then(Value::as_str).map(str::to_string),
        depth: r.get("depth").and_then(Value::as_i64),
    })
}

/// What an open or click found: the email's contact and campaign, and whether it is the email's first
/// open (or click).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Engagement {
    pub contact: String,
    pub campaign: Option<String>,
    pub first: bool,
    /// The depth of the workflow execution that wrote the email, if one did.
    pub depth: Option<i64>,
}

/// Where an email belongs: what a delivery notification needs to record its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmailKey {
    pub project: String,
    pub id: String,
    pub contact: String,
    /// The campaign it was sent for, if any.
    pub campaign: Option<String>,
    /// The depth of the workflow execution that wrote it, if one did.
    pub depth: Option<i64>,
}
