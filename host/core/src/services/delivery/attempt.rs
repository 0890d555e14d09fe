//! One email's hand-over: the throttle, a hand-over slot and a claim for campaign mail, then its route's
//! transports in order (failover: a transport that defers it or is down passes it to the next at once),
//! and its outcome: SENT, BOUNCED, UNCERTAIN, or DEFERRED with its next attempt (docs/delivery.md), FAILED
//! once its give-up window has ended.
//!
//! Must not import: salvo, surrealdb.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Map;

use super::{Delivery, Done, GATE_POLL, INTERRUPTED, SendError, StoredAttachment, Transport, handover, ledger, smtp};
use crate::domain::deferral::{self, Next};
use crate::domain::status::EmailStatus;
use crate::store::emails::{DeliveryOutcome, EmailRow};
use crate::store::events::Event;

/// An outcome for the ledger.
pub(super) fn outcome(
    e: &EmailRow,
    status: EmailStatus,
    error: Option<String>,
    pid: Option<String>,
) -> DeliveryOutcome {
    let mut o = DeliveryOutcome::new(&e.id, e.campaign.clone(), status, error);
    o.provider_message_id = pid;
    o
}

/// A deferral for the ledger: tried again at `next` (None: when its transport is back); `attempted`
/// when an attempt failed (it counts in the email's attempts).
pub(super) fn deferral(e: &EmailRow, reason: &str, next: Option<i64>, attempted: bool) -> DeliveryOutcome {
    let mut o = DeliveryOutcome::new(&e.id, e.campaign.clone(), EmailStatus::Deferred, Some(reason.to_string()));
    o.next_attempt_at = next;
    o.attempted = attempted;
    o
}

/// An event of an email's delivery (none for a test send, which has no contact).
pub(super) fn event(e: &EmailRow, name: &str, reason: Option<&str>, now: i64) -> Vec<Event> {
    if e.contact.is_empty() {
        return vec![];
    }
    let mut data = Map::new();
    data.insert("emailId".into(), e.id.clone().into());
    data.insert("subject".into(), e.subject.clone().into());
    if let Some(c) = &e.campaign {
        data.insert("campaignId".into(), c.clone().into());
    }
    if let Some(r) = reason {
        data.insert("reason".into(), r.into());
    }
    vec![Event::new(&e.project, &e.contact, name, data, "system", now).at_depth(e.depth)]
}

/// `email.deferred`, written at an email's first deferral only: the reason, the failed attempts, the
/// next attempt (null while it waits for its transport) and when Herald gives up.
pub(super) fn deferred_event(e: &EmailRow, o: &DeliveryOutcome, deadline: i64, now: i64) -> Vec<Event> {
    let mut events = event(e, "email.deferred", o.error.as_deref(), now);
    for ev in &mut events {
        let attempts = e.attempts.unwrap_or(0) + i64::from(o.attempted);
        ev.data.insert("attempts".into(), attempts.into());
        let next = o.next_attempt_at.map(crate::infra::clock::rfc3339);
        ev.data.insert("nextAttemptAt".into(), next.into());
        ev.data.insert("giveUpAt".into(), crate::infra::clock::rfc3339(deadline).into());
    }
    events
}

/// How an email came to be deferred.
pub(super) enum Deferred {
    /// An attempt failed: the next comes on the schedule.
    Attempted,
    /// Not attempted: it waits for its transports (its window's end at the latest).
    Waiting,
    /// Not attempted: its destination is paused until this moment (ms).
    Until(i64),
}

/// The outcome of an email whose hand-over failed for now, at `now`: DEFERRED to its next attempt, or
/// FAILED when its window has ended. `waits`: the signals that also bring it forward
/// (`breaker::signal`, `breaker::back_signal`). The first deferral writes `email.deferred`.
pub(super) fn defer_or_fail(
    e: &EmailRow,
    reason: &str,
    how: Deferred,
    waits: Vec<String>,
    deadline: i64,
    now: i64,
) -> (DeliveryOutcome, Vec<Event>, Done) {
    let attempted = matches!(how, Deferred::Attempted);
    let next = match how {
        Deferred::Attempted => deferral::after_failure(e.attempts.unwrap_or(0) + 1, now, deadline),
        Deferred::Waiting => Next::At(deadline),
        Deferred::Until(at) => Next::At(at.min(deadline)),
    };
    match next {
        Next::GiveUp => {
            let o = outcome(e, EmailStatus::Failed, Some(reason.to_string()), None);
            (o, event(e, "email.failed", Some(reason), now), Done::Settled)
        }
        Next::At(at) => {
            // Waiting for a transport: no time of its own, but the window's end.
            let next = if waits.is_empty() || attempted { Some(at) } else { None };
            let o = deferral(e, reason, next, attempted);
            let first = e.status != EmailStatus::Deferred;
            let events = if first { deferred_event(e, &o, deadline, now) } else { vec![] };
            (o, events, Done::Deferred { at, waits })
        }
    }
}

/// What one transport made of a message, with the pool slot held until its outcome is written.
type Tried<'a> = (Result<Option<String>, SendError>, Option<smtp::SessionSlot<'a>>);

impl Delivery {
    /// Hands one built message to the transports of its route, in order, and writes its outcome. A
    /// campaign email waits for the throttle, a hand-over slot and a transport session first, and only
    /// then is claimed (a cancel before that moment reaches it); its slot is held until its outcome is
    /// written. Answers an error only when the outcome could not be written (the job retries).
    pub(super) async fn deliver_one(
        &self,
        clock: &crate::infra::clock::SharedClock,
        e: &EmailRow,
        raw: Vec<u8>,
        transports: &[String],
        gate: Option<&AtomicBool>,
    ) -> Result<Done, String> {
        let id = e.message_id.trim_matches(['<', '>']).to_string();
        let campaign = e.campaign.is_some();
        let closed = || gate.is_some_and(|g| g.load(Ordering::SeqCst));
        // The throttle, given up as soon as the campaign's gate is seen closed.
        while !closed() {
            match self.throttle.try_take(&e.project) {
                Ok(()) => break,
                Err(ms) => tokio::time::sleep(Duration::from_millis(ms).min(GATE_POLL)).await,
            }
        }
        // Its destination's pace: a share of hand-overs at once and a rate, or a pause after repeated
        // refusals, which defers it without an attempt (`pacing.rs`).
        let domain = crate::domain::routes::domain_of(&e.recipient).to_ascii_lowercase();
        let deadline = deferral::deadline(e.window_start(), self.give_up_after_ms);
        let _pace = match self.pacing.admit(&domain, closed).await {
            super::pacing::Admit::Go(permit) => permit,
            super::pacing::Admit::Paused(until) => {
                let why = format!("{domain} is paused after repeated temporary refusals");
                let why = match &e.error {
                    Some(last) => format!("{why} ({last})"),
                    None => why,
                };
                let (o, ev, done) = defer_or_fail(e, &why, Deferred::Until(until), vec![], deadline, clock.now_ms());
                self.ledger.record(vec![o], ev, false).await?;
                return Ok(done);
            }
        };
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
        let mut sent: Option<Result<Option<String>, SendError>> = None;
        let mut raw = Some(raw);
        for (n, t) in transports.iter().enumerate() {
            let more = n + 1 < transports.len();
            if let Some(why) = self.breakers.down(t) {
                sent = Some(Err(SendError::Unreachable(why)));
                continue;
            }
            // The transport's own limits; a cancel seen meanwhile stops the wait (the claim cancels it).
            let _admitted = self.routing.admit(t, closed).await;
            let session = match self.session(t).await {
                Ok(s) => s,
                Err(err) => {
                    self.note_failure(t, &err, clock.now_ms());
                    sent = Some(Err(err));
                    continue;
                }
            };
            if let (Some(c), false) = (&e.campaign, claimed) {
                let carried = slot.as_mut().and_then(handover::Slot::take_carried);
                match self.ledger.claim(&e.id, c, carried).await? {
                    ledger::Claim::Sending => claimed = true,
                    ledger::Claim::Cancelled | ledger::Claim::Gone => return Ok(Done::Settled),
                }
            }
            // The last transport takes the message itself; the others a copy, for the next one.
            let message = if more { raw.clone() } else { raw.take() }.unwrap_or_default();
            let (result, held) = self.hand_over(t, session, e, &id, message).await;
            if let Err(err) = &result {
                self.note_failure(t, err, clock.now_ms());
            }
            session_slot = held;
            // Refused for now, or the transport is down: the next transport takes it at once (nothing was
            // taken, so it is never handed over twice).
            let next = more && matches!(result, Err(SendError::Transient(_) | SendError::Unreachable(_)));
            sent = Some(result);
            if !next {
                break;
            }
            session_slot = None;
        }
        match &sent {
            Some(Ok(_)) => self.pacing.accepted(&domain),
            Some(Err(SendError::Transient(_))) => {
                self.pacing.refused(&domain);
            }
            _ => {}
        }
        let now = clock.now_ms();
        let parked = || transports.iter().map(|t| super::breaker::signal(t)).collect::<Vec<_>>();
        let back = || transports.iter().map(|t| super::breaker::back_signal(t)).collect::<Vec<_>>();
        let (outcome, events, done) = match sent {
            Some(Ok(pid)) => {
                (outcome(e, EmailStatus::Sent, None, pid), event(e, "email.sent", None, now), Done::Settled)
            }
            // A test send (no contact) records its outcome only.
            Some(Err(SendError::Permanent(msg))) if e.contact.is_empty() => {
                (outcome(e, EmailStatus::Bounced, Some(msg), None), vec![], Done::Settled)
            }
            Some(Err(SendError::Permanent(msg))) => {
                let events = event(e, "email.bounce", Some(&msg), now);
                (outcome(e, EmailStatus::Bounced, Some(msg.clone()), None), events, Done::Bounced(msg))
            }
            Some(Err(SendError::Uncertain(msg))) if campaign => {
                let why = format!("{INTERRUPTED} ({msg})");
                (outcome(e, EmailStatus::Uncertain, Some(why), None), vec![], Done::Settled)
            }
            // Every transport down: the email waits for them, its attempts not counted.
            None => defer_or_fail(e, "no transport is up", Deferred::Waiting, parked(), deadline, now),
            Some(Err(SendError::Unreachable(msg) | SendError::RateLimited(msg, _))) => {
                defer_or_fail(e, &msg, Deferred::Waiting, parked(), deadline, now)
            }
            // The connection broke: tried on its schedule, or as soon as the transport is back from being
            // down.
            Some(Err(SendError::Broken(msg))) => defer_or_fail(e, &msg, Deferred::Attempted, back(), deadline, now),
            // Refused for now (or an uncertain transactional hand-over, sent again with its Message-ID).
            Some(Err(SendError::Transient(msg) | SendError::Uncertain(msg))) => {
                defer_or_fail(e, &msg, Deferred::Attempted, vec![], deadline, now)
            }
        };
        let outcomes = vec![outcome];
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
        Ok(done)
    }

    /// A transport's own failure trips its breaker; a plugin's pause pauses it.
    fn note_failure(&self, transport: &str, err: &SendError, now: i64) {
        match err {
            SendError::Unreachable(why) => self.breakers.trip(transport, why, now, None),
            SendError::RateLimited(why, ms) => {
                self.breakers.trip(transport, why, now, Some(Duration::from_millis(*ms)))
            }
            _ => {}
        }
    }

    /// A session of the transport's SMTP pool (None for the others, which need none).
    pub(super) async fn session(&self, transport: &str) -> Result<Option<smtp::Session<'_>>, SendError> {
        match self.transports.get(transport) {
            Some(Transport::Smtp(pool)) => pool.session().await.map(Some),
            _ => Ok(None),
        }
    }

    /// Offers the message to one transport.
    async fn hand_over<'a>(
        &'a self,
        transport: &str,
        session: Option<smtp::Session<'a>>,
        e: &EmailRow,
        id: &str,
        raw: Vec<u8>,
    ) -> Tried<'a> {
        if let Some(session) = session {
            return match super::transport::envelope(&self.envelope_sender(e), &e.recipient) {
                Ok(envelope) => {
                    let (sent, held) = session.send(&envelope, &raw).await;
                    (sent.map(|_| None), Some(held))
                }
                Err(err) => (Err(err), None),
            };
        }
        match self.transports.get(transport) {
            Some(t @ Transport::File(_)) => (t.send(&e.from, &e.recipient, id, &raw).await.map(|_| None), None),
            Some(Transport::Smtp(_)) => (Err(SendError::Unreachable("no SMTP session".into())), None),
            Some(Transport::Plugin(plugin)) => (self.send_plugin(plugin, e, id, raw).await, None),
            None => (self.send_plugin(transport, e, id, raw).await, None),
        }
    }

    /// Hands a message to a transport plugin. A plugin that is not loaded or cannot start is down (its
    /// mail waits, and a fixed or reloaded plugin takes it); `temporary` defers the email, `rate-limited`
    /// pauses the transport; one that stopped mid-call may have sent it (uncertain).
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
            Ok(SendOutcome::RateLimited { retry_after_ms }) => Err(SendError::RateLimited(
                format!("{name}: rate limited, retry after {retry_after_ms} ms"),
                retry_after_ms,
            )),
            Ok(SendOutcome::Permanent(m)) => Err(SendError::Permanent(format!("{name}: {m}"))),
            // A plugin stopped mid-call (timeout, trap, out of fuel or memory) may have made its request.
            Err(
                err @ (CallError::Timeout { .. }
                | CallError::OutOfFuel { .. }
                | CallError::OutOfMemory { .. }
                | CallError::Panic { .. }
                | CallError::Trap { .. }),
            ) => Err(SendError::Uncertain(err.to_string())),
            Err(err @ (CallError::NotFound(_) | CallError::Instantiate { .. })) => {
                Err(SendError::Unreachable(err.to_string()))
            }
            Err(err) => Err(SendError::Transient(err.to_string())),
        }
    }
}
