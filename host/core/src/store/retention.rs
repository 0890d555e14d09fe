//! Retention's deletes (docs/behaviour.md#retention): each call removes at most one batch, in one
//! transaction, of what is older than a time, read oldest first as an index range with one bound and a
//! limit (`field >= $from ORDER BY field LIMIT $n`: SurrealDB 3.3.5 stops such a scan at its limit, where a
//! range bounded on both sides reads the whole index prefix; see `store/activity.rs`). The rows past the
//! time that the batch reads are left alone, and the caller goes on from the batch's last time
//! ([`Step::next`]), so a purge never walks back over the index entries it deleted.
//!
//! Email bodies go but their emails stay, so that range never empties: how far it has gone is kept per
//! project (`retention_mark:['email_body', project]`, migration 0048).

use serde::Deserialize;
use serde_json::Value;

use super::{Store, StoreError};
use crate::domain::status::{EmailStatus, JobStatus};
use crate::vars;

/// What one batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Step {
    /// Rows deleted (for email bodies: bodies).
    pub deleted: usize,
    /// Where the next batch starts (its `from`) when this one was full; None when nothing older is left.
    pub next: Option<i64>,
}

/// How far the purge of one project's email bodies has gone: every email written before `at` is done,
/// and of those written at `at`, the ids up to `after` (None: none of them yet).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct BodyMark {
    pub at: i64,
    pub after: Option<String>,
}

/// The answer of a batch statement: `{ deleted, last, full }`.
fn step(v: &Value) -> Step {
    let deleted = v["deleted"].as_u64().unwrap_or(0) as usize;
    let next = if v["full"].as_bool().unwrap_or(false) { v["last"].as_i64() } else { None };
    Step { deleted, next }
}

/// The end of a batch statement: of `$rows` (read with the limit `$n`), `$old` are those it deleted.
/// `last` is the time the next batch starts from (`$t`, the field read); `full` says whether there may
/// be more (every row read was old).
macro_rules! batch_answer {
    () => {
        "RETURN { deleted: array::len($old), last: array::last($old)[$t], \
                  full: array::len($rows) = $n AND array::len($old) = $n };"
    };
}

/// An email read for the body purge.
#[derive(Debug, Deserialize)]
struct Candidate {
    id: String,
    created_at: i64,
}

impl Store {
    /// Up to `n` events of `project` created before `before`, from `from` on.
    pub async fn purge_events(&self, project: &str, from: i64, before: i64, n: usize) -> Result<Step, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    concat!(
                        "{ LET $t = 'created_at';
                           LET $rows = (SELECT id, created_at FROM event WHERE project = $p AND created_at >= $from
                               ORDER BY created_at LIMIT $n);
                           LET $old = array::filter($rows, |$r| $r.created_at < $before);
                           DELETE array::map($old, |$r| $r.id) RETURN NONE;",
                        batch_answer!(),
                        "}"
                    ),
                    vars! { "p": project, "from": from, "before": before, "n": n },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(step(&v))
    }

    /// Up to `n` webhook deliveries (of every project) created before `before`, from `from` on, with the
    /// payloads no delivery of their event to another endpoint of its project still shares.
    pub async fn purge_webhook_deliveries(&self, from: i64, before: i64, n: usize) -> Result<Step, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    concat!(
                        "{ LET $t = 'created_at';
                           LET $rows = (SELECT record::id(id) AS key, project, created_at FROM webhook_delivery
                               WHERE created_at >= $from ORDER BY created_at LIMIT $n);
                           LET $old = array::filter($rows, |$r| $r.created_at < $before);
                           DELETE array::map($old, |$r| type::record('webhook_delivery', $r.key)) RETURN NONE;
                           FOR $p IN array::distinct(array::map($old, |$r| $r.project)) {
                               LET $ends = (SELECT VALUE record::id(id) FROM webhook WHERE project = $p);
                               LET $events = array::distinct(array::map(
                                   array::filter($old, |$r| $r.project = $p), |$r| $r.key[1]));
                               LET $unshared = array::filter($events, |$e| array::len(array::filter($ends,
                                   |$o| record::exists(type::record('webhook_delivery', [$o, $e])))) = 0);
                               DELETE array::map($unshared, |$e| type::record('webhook_payload', $e)) RETURN NONE;
                           };",
                        batch_answer!(),
                        "}"
                    ),
                    vars! { "from": from, "before": before, "n": n },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(step(&v))
    }

    /// Up to `n` received messages still unapplied that arrived before `before`, from `from` on. Answers
    /// the batch and the ids deleted (their spool files are the caller's).
    pub async fn purge_inbound(&self, from: i64, before: i64, n: usize) -> Result<(Step, Vec<String>), StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    concat!(
                        "{ LET $t = 'received_at';
                           LET $rows = (SELECT record::id(id) AS id, received_at FROM inbound_message
                               WHERE received_at >= $from ORDER BY received_at LIMIT $n);
                           LET $old = array::filter($rows, |$r| $r.received_at < $before);
                           DELETE array::map($old, |$r| type::record('inbound_message', $r.id)) RETURN NONE;
                           LET $ids = array::map($old, |$r| $r.id);",
                        "RETURN { deleted: array::len($old), last: array::last($old)[$t], ids: $ids,
                                  full: array::len($rows) = $n AND array::len($old) = $n };",
                        "}"
                    ),
                    vars! { "from": from, "before": before, "n": n },
                )
                .await?
                .value_last()
            })
            .await?;
        let ids = v["ids"].as_array().into_iter().flatten().filter_map(|i| i.as_str().map(str::to_string)).collect();
        Ok((step(&v), ids))
    }

    /// Up to `n` jobs finished (`status`: completed or dead) before `before`, read from the run time
    /// `from` on: a job finishes after it was due, so those due before `before` hold every one of them.
    pub async fn purge_finished_jobs_batch(
        &self,
        status: JobStatus,
        from: i64,
        before: i64,
        n: usize,
    ) -> Result<Step, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    concat!(
                        "{ LET $t = 'run_at';
                           LET $rows = (SELECT id, run_at, finished_at FROM job WITH INDEX job_ready
                               WHERE status = $s AND run_at >= $from ORDER BY run_at LIMIT $n);
                           LET $due = array::filter($rows, |$r| $r.run_at < $before);
                           LET $old = array::filter($due, |$r| $r.finished_at != NONE AND $r.finished_at < $before);
                           DELETE array::map($old, |$r| $r.id) WHERE status = $s RETURN NONE;",
                        // A job due before `before` that finished after it stays; the next batch goes on
                        // past it all the same.
                        "RETURN { deleted: array::len($old), last: array::last($due)[$t],
                                  full: array::len($rows) = $n AND array::len($due) = $n };",
                        "}"
                    ),
                    vars! { "s": status.as_str(), "from": from, "before": before, "n": n },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(step(&v))
    }

    /// Up to `n` idempotency keys expired at `now`, from the expiry `from` on.
    pub async fn purge_idempotency_batch(&self, from: i64, now: i64, n: usize) -> Result<Step, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    concat!(
                        "{ LET $t = 'expires_at';
                           LET $rows = (SELECT id, expires_at FROM idempotency WHERE expires_at >= $from
                               ORDER BY expires_at LIMIT $n);
                           LET $old = array::filter($rows, |$r| $r.expires_at <= $now);
                           DELETE array::map($old, |$r| $r.id) RETURN NONE;",
                        batch_answer!(),
                        "}"
                    ),
                    vars! { "from": from, "now": now, "n": n },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(step(&v))
    }

    /// Every project's id (the purges that go project by project, along their project's index).
    pub async fn retention_projects(&self) -> Result<Vec<String>, StoreError> {
        let v = self.query("SELECT VALUE record::id(id) FROM project", vars! {}).await?.value(0)?;
        Ok(v.as_array().into_iter().flatten().filter_map(|i| i.as_str().map(str::to_string)).collect())
    }

    /// How far the purge of `project`'s email bodies has gone (None: not begun).
    pub async fn body_mark(&self, project: &str) -> Result<Option<BodyMark>, StoreError> {
        self.query(
            "SELECT at, after FROM ONLY type::record('retention_mark', ['email_body', $p])",
            vars! { "p": project },
        )
        .await?
        .first(0)
    }

    /// Deletes the bodies of up to about `2 n` emails of `project` written before `before`, going on from
    /// the project's mark, and moves the mark on. The bodies of emails still on their way (PENDING,
    /// SENDING, DEFERRED) stay; a campaign's FAILED email whose body goes can no longer be sent again
    /// (its attempts are cleared: `Store::failed_deliveries` passes it). Answers the bodies deleted
    /// and whether more may be left.
    pub async fn purge_email_bodies(&self, project: &str, before: i64, n: usize) -> Result<(usize, bool), StoreError> {
        let mark = self.body_mark(project).await?.unwrap_or(BodyMark { at: 0, after: None });
        if mark.at >= before {
            return Ok((0, false));
        }
        // The rest of the mark's millisecond, in id order.
        let same_ms = match &mark.after {
            Some(_) => {
                "SELECT record::id(id) AS id, created_at FROM email WHERE project = $p AND created_at = $at
                    AND record::id(id) > $after ORDER BY id LIMIT $n"
            }
            None => {
                "SELECT record::id(id) AS id, created_at FROM email WHERE project = $p AND created_at = $at
                    ORDER BY id LIMIT $n"
            }
        };
        let mut rows: Vec<Candidate> =
            self.query(same_ms, vars! { "p": project, "at": mark.at, "after": mark.after, "n": n }).await?.all(0)?;
        let (ids, next, more): (Vec<String>, BodyMark, bool) = if rows.len() >= n {
            let last = rows.last().map(|r| r.id.clone());
            (rows.into_iter().map(|r| r.id).collect(), BodyMark { at: mark.at, after: last }, true)
        } else {
            // Then the milliseconds after it, a batch of rows; a millisecond the batch may have cut off
            // is left whole for the next call. The mark moves only over emails read, never to the time
            // itself: an email written later with an older time (another process's clock, a restore)
            // is still found.
            let later: Vec<Candidate> = self
                .query(
                    "SELECT record::id(id) AS id, created_at FROM email WHERE project = $p AND created_at > $at
                        ORDER BY created_at LIMIT $n",
                    vars! { "p": project, "at": mark.at, "n": n },
                )
                .await?
                .all(0)?;
            let full = later.len() >= n;
            let young = later.iter().find(|r| r.created_at >= before).map(|r| r.created_at);
            let (next, more) = match (young, later.last()) {
                (Some(y), _) => (BodyMark { at: y, after: None }, false),
                (None, Some(last)) if full => (BodyMark { at: last.created_at, after: None }, true),
                (None, Some(last)) => (BodyMark { at: last.created_at + 1, after: None }, false),
                (None, None) => match rows.last() {
                    Some(r) => (BodyMark { at: mark.at, after: Some(r.id.clone()) }, false),
                    None => (mark.clone(), false),
                },
            };
            rows.extend(later.into_iter().filter(|r| r.created_at < before && r.created_at < next.at));
            (rows.into_iter().map(|r| r.id).collect(), next, more)
        };
        let live = [EmailStatus::Pending, EmailStatus::Sending, EmailStatus::Deferred].map(EmailStatus::as_str);
        let v = self
            .write(|| async {
                self.query(
                    "BEGIN TRANSACTION;
                     LET $e = (SELECT record::id(id) AS id, status, campaign, attempts
                         FROM array::map($ids, |$i| type::record('email', $i)) WHERE project = $p);
                     LET $done = array::filter($e, |$r| $r.status NOT IN $live);
                     DELETE array::map($done, |$r| type::record('email_body', $r.id)) RETURN NONE;
                     UPDATE array::map(array::filter($done, |$r| $r.status = $failed AND $r.campaign != NONE
                         AND $r.attempts != NONE), |$r| type::record('email', $r.id)) SET attempts = NONE RETURN NONE;
                     UPSERT type::record('retention_mark', ['email_body', $p]) CONTENT { at: $at, after: $after ?? NONE }
                         RETURN NONE;
                     RETURN array::len($done);
                     COMMIT TRANSACTION;",
                    vars! {
                        "p": project, "ids": ids, "live": live, "failed": EmailStatus::Failed.as_str(),
                        "at": next.at, "after": next.after,
                    },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok((v.as_u64().unwrap_or(0) as usize, more))
    }

    /// Deletes the marks of projects that are gone.
    pub async fn purge_retention_marks(&self) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "DELETE retention_mark WHERE !record::exists(type::record('project', record::id(id)[1])) RETURN NONE",
                vars! {},
            )
            .await
        })
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::config::Config;
    use crate::store::Store;

    const DAY: i64 = 86_400_000;

    async fn store() -> Store {
        Store::connect(&Config::for_tests()).await.unwrap()
    }

    /// Emails of `project` (with their bodies) written at `at`, as `status`.
    async fn emails(s: &Store, project: &str, ids: &[String], at: i64, status: &str) {
        let rows: Vec<_> = ids
            .iter()
            .map(|id| {
                json!({ "id": id, "project": project, "contact": "c", "recipient": "r@example.org", "from": "f@example.com",
                    "subject": "s", "kind": "TRANSACTIONAL", "message_id": format!("<{id}@example.com>"), "status": status,
                    "created_at": at, "updated_at": at, "attempts": 2, "campaign": "camp" })
            })
            .collect();
        let bodies: Vec<_> = ids
            .iter()
            .map(|id| json!({ "id": id, "html": "<p>b</p>", "text": "b", "headers": "[]", "attachments": "[]" }))
            .collect();
        s.query(
            "INSERT INTO email $e RETURN NONE; INSERT INTO email_body $b RETURN NONE;",
            json!({ "e": rows, "b": bodies }),
        )
        .await
        .unwrap();
    }

    async fn bodies(s: &Store, ids: &[String]) -> usize {
        let v = s
            .query("SELECT VALUE id FROM array::map($ids, |$i| type::record('email_body', $i))", json!({ "ids": ids }))
            .await
            .unwrap()
            .value(0)
            .unwrap();
        v.as_array().map_or(0, |a| a.iter().filter(|x| !x.is_null()).count())
    }

    fn ids(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i:04}")).collect()
    }

    /// A millisecond holding more emails than a batch is gone through by id, batch after batch, and the
    /// mark never passes an email it has not done, nor one written at or after the time.
    #[tokio::test]
    async fn retention_email_bodies_go_batch_by_batch_across_a_crowded_millisecond() {
        let s = store().await;
        let t0 = 10 * DAY;
        let crowded = ids("a", 25);
        emails(&s, "p", &crowded, t0, "SENT").await;
        let spread: Vec<String> = ids("b", 12);
        for (k, id) in spread.iter().enumerate() {
            emails(&s, "p", std::slice::from_ref(id), t0 + 1 + k as i64 / 3, "DELIVERED").await;
        }
        let live = ids("c", 3);
        emails(&s, "p", &live, t0 + 5, "DEFERRED").await;
        let young = ids("d", 4);
        emails(&s, "p", &young, t0 + 100, "SENT").await;
        let other = ids("e", 5);
        emails(&s, "q", &other, t0, "SENT").await;
        let mut calls = 0;
        loop {
            let (_, more) = s.purge_email_bodies("p", t0 + 100, 4).await.unwrap();
            calls += 1;
            assert!(calls < 40, "the purge ends");
            if !more {
                break;
            }
        }
        assert!(calls > 5, "in batches: {calls}");
        assert_eq!(bodies(&s, &crowded).await, 0);
        assert_eq!(bodies(&s, &spread).await, 0);
        assert_eq!(bodies(&s, &live).await, 3, "the bodies of emails still on their way stay");
        assert_eq!(bodies(&s, &young).await, 4, "written at the time: kept");
        assert_eq!(bodies(&s, &other).await, 5, "another project's");
        // The records stay, and a FAILED campaign email would not be sent again.
        let n = s
            .query("SELECT count() AS n FROM email WHERE project = 'p' GROUP ALL", json!({}))
            .await
            .unwrap()
            .value(0)
            .unwrap();
        assert_eq!(n[0]["n"], 44);
        assert_eq!(s.body_mark("p").await.unwrap().unwrap().at, t0 + 100, "the mark stops at the first young email");
        // Nothing more until the time moves.
        assert_eq!(s.purge_email_bodies("p", t0 + 100, 4).await.unwrap(), (0, false));
        assert_eq!(s.purge_email_bodies("p", t0 + 101, 5).await.unwrap(), (4, false));
        // A project with nothing old yet keeps its mark where it is: emails written later with older
        // times (a restore, another process's clock) are found.
        assert_eq!(s.purge_email_bodies("r", t0 + 100, 4).await.unwrap(), (0, false));
        let late = ids("g", 3);
        emails(&s, "r", &late, t0 + 50, "SENT").await;
        assert_eq!(s.purge_email_bodies("r", t0 + 100, 4).await.unwrap(), (3, false));
        assert_eq!(bodies(&s, &late).await, 0);
    }

    #[tokio::test]
    async fn retention_a_failed_campaign_email_whose_body_goes_is_no_longer_sent_again() {
        let s = store().await;
        let failed = ids("f", 2);
        emails(&s, "p", &failed, DAY, "FAILED").await;
        assert_eq!(s.failed_deliveries("p", "camp", 10).await.unwrap().len(), 2);
        assert_eq!(s.purge_email_bodies("p", 2 * DAY, 10).await.unwrap(), (2, false));
        assert_eq!(s.failed_deliveries("p", "camp", 10).await.unwrap().len(), 0);
    }

    /// Events go oldest first in batches, the next starting where the last ended; newer ones and other
    /// projects' stay.
    #[tokio::test]
    async fn retention_event_batches_stop_at_the_time() {
        let s = store().await;
        let rows: Vec<_> = (0..30)
            .map(|i| {
                json!({ "id": format!("e{i}"), "project": if i % 10 == 9 { "q" } else { "p" }, "contact": "c",
                "name": "n", "data": {}, "source": "api", "created_at": DAY + i / 2 })
            })
            .collect();
        s.query("INSERT INTO event $r RETURN NONE", json!({ "r": rows })).await.unwrap();
        let before = DAY + 10; // events 0..=19 are older
        let mut from = 0;
        let mut deleted = 0;
        let mut calls = 0;
        loop {
            let step = s.purge_events("p", from, before, 4).await.unwrap();
            deleted += step.deleted;
            calls += 1;
            match step.next {
                Some(n) => from = n,
                None => break,
            }
        }
        assert_eq!(deleted, 18, "the 20 older events less project q's two");
        assert!(calls >= 5);
        let left = s
            .query("SELECT VALUE created_at FROM event WHERE project = 'p'", json!({}))
            .await
            .unwrap()
            .value(0)
            .unwrap();
        assert!(left.as_array().unwrap().iter().all(|t| t.as_i64().unwrap() >= before), "{left}");
        let q = s
            .query("SELECT count() AS n FROM event WHERE project = 'q' GROUP ALL", json!({}))
            .await
            .unwrap()
            .value(0)
            .unwrap();
        assert_eq!(q[0]["n"], 3);
    }
}
