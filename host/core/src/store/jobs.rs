//! The durable job queue's rows. A job is claimed under a lease inside one transaction, so several
//! Herald processes on one database never run a job at the same time; a lease that expires (its worker
//! died) makes the job claimable again.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Store, StoreError};
use crate::domain::status::JobStatus;
use crate::vars;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Job {
    pub id: String,
    pub kind: String,
    pub payload: String,
    pub status: JobStatus,
    pub priority: i64,
    pub run_at: i64,
    pub attempts: i64,
    pub max_attempts: i64,
    pub lease_owner: Option<String>,
    pub lease_expires: Option<i64>,
    pub last_error: Option<String>,
    pub unique_key: Option<String>,
    pub interval_ms: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    /// Attempts whose lease expired while they ran (the process died or hung).
    #[serde(default)]
    pub interrupted: Option<i64>,
}

/// Attempts that never finished after which a job is dead-lettered instead of claimed again: a handler
/// that takes the process down must not do it after every restart.
pub const MAX_INTERRUPTED: i64 = 3;

/// The statements that take the expired leases of the jobs matching `$filter` (a fixed fragment): jobs
/// interrupted [`MAX_INTERRUPTED`] times are dead-lettered, the rest counted and left in `$stale`.
fn take_stale(filter: &str) -> String {
    format!(
        "LET $expired = (SELECT id, interrupted FROM job WHERE status = 'running' AND lease_expires <= $now {filter}
            LIMIT $limit);
         LET $crashed = (SELECT VALUE id FROM $expired WHERE interrupted >= $last_interruption);
         UPDATE $crashed SET status = 'dead', lease_owner = NONE, lease_expires = NONE, finished_at = $now,
            updated_at = $now, interrupted = (interrupted ?? 0) + 1,
            last_error = 'interrupted {MAX_INTERRUPTED} times: the attempts never finished (the process stopped or hung while running it)'
            RETURN NONE;
         LET $stale = (SELECT VALUE id FROM $expired WHERE !(interrupted >= $last_interruption));
         UPDATE $stale SET interrupted = (interrupted ?? 0) + 1 RETURN NONE;"
    )
}

/// A failed attempt of a batch job: retried at `retry_at`, or dead-lettered when None.
#[derive(Debug, Clone)]
pub struct FailedJob {
    pub id: String,
    pub error: String,
    pub retry_at: Option<i64>,
    /// Whether the attempt counts against the job's attempts (false: its work waits, nothing failed).
    pub counted: bool,
    /// Signals that bring the job forward to the moment they are given ([`Store::signal_jobs`]).
    pub signals: Vec<String>,
}

/// Jobs a signal brings forward per transaction.
const SIGNAL_CHUNK: usize = 1000;

/// What to enqueue.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub kind: String,
    pub payload: Value,
    pub run_at: i64,
    /// Higher runs first.
    pub priority: i64,
    pub max_attempts: i64,
    /// At most one job with this key exists (recurring jobs, de-duplicated work).
    pub unique_key: Option<String>,
    /// A recurring job is queued again this long after each run.
    pub interval_ms: Option<i64>,
}

impl NewJob {
    /// The job's row as a document with a fresh id, for writing it in another write's transaction
    /// (`INSERT INTO job $jobs`).
    pub fn doc(&self, now: i64) -> Value {
        strip_nulls(serde_json::json!({
            "id": uuid::Uuid::now_v7().to_string(), "kind": self.kind, "payload": self.payload.to_string(),
            "status": JobStatus::Queued, "priority": self.priority, "run_at": self.run_at, "attempts": 0,
            "max_attempts": self.max_attempts.max(1), "unique_key": self.unique_key, "interval_ms": self.interval_ms,
            "created_at": now, "updated_at": now,
        }))
    }

    pub fn new(kind: &str, payload: Value, run_at: i64) -> Self {
        NewJob {
            kind: kind.to_string(),
            payload,
            run_at,
            priority: 0,
            max_attempts: 5,
            unique_key: None,
            interval_ms: None,
        }
    }
}

const JOB_FIELDS: &str = "record::id(id) AS id, kind, payload, status, priority, run_at, attempts, max_attempts, \
     lease_owner, lease_expires, last_error, unique_key, interval_ms, created_at, updated_at, finished_at, interrupted";

impl Store {
    /// Adds a job. With a `unique_key` that another job already holds, nothing is added and the existing
    /// job's id is returned.
    pub async fn enqueue(&self, job: &NewJob, now: i64) -> Result<String, StoreError> {
        let id = uuid::Uuid::now_v7().to_string();
        let doc = vars! {
            "kind": job.kind, "payload": job.payload.to_string(), "status": JobStatus::Queued,
            "priority": job.priority, "run_at": job.run_at, "attempts": 0, "max_attempts": job.max_attempts.max(1),
            "unique_key": job.unique_key, "interval_ms": job.interval_ms, "created_at": now, "updated_at": now,
        };
        let doc = strip_nulls(doc);
        let created = self
            .write(|| async {
                self.query(
                    "CREATE type::record('job', $id) CONTENT $doc RETURN NONE",
                    vars! { "id": id, "doc": doc.clone() },
                )
                .await
            })
            .await;
        match created {
            Ok(_) => Ok(id),
            Err(StoreError::Conflict(_)) if job.unique_key.is_some() => {
                let existing: Option<Job> = self
                    .query(
                        &format!("SELECT {JOB_FIELDS} FROM job WHERE unique_key = $k LIMIT 1"),
                        vars! { "k": job.unique_key },
                    )
                    .await?
                    .first(0)?;
                existing.map(|j| j.id).ok_or_else(|| StoreError::Conflict("job key taken".into()))
            }
            Err(e) => Err(e),
        }
    }

    /// Registers a recurring job (idempotent): creates it if missing, updates its interval, and brings
    /// it back to the queue if it had been dead-lettered.
    pub async fn ensure_recurring(&self, kind: &str, interval_ms: i64, now: i64) -> Result<String, StoreError> {
        let key = format!("recurring:{kind}");
        let mut job = NewJob::new(kind, Value::Null, now);
        job.unique_key = Some(key.clone());
        job.interval_ms = Some(interval_ms);
        let id = self.enqueue(&job, now).await?;
        self.write(|| async {
            self.query(
                "UPDATE job SET interval_ms = $i, updated_at = $now WHERE unique_key = $k;
                 UPDATE job SET status = 'queued', attempts = 0, run_at = $now, updated_at = $now
                    WHERE unique_key = $k AND status IN ['dead', 'completed'];",
                vars! { "k": key, "i": interval_ms, "now": now },
            )
            .await
        })
        .await?;
        Ok(id)
    }

    /// Brings a queued recurring job's next run forward to `now`. False when it is not queued (it runs
    /// now: bring it forward again once it is back).
    pub async fn hurry_recurring(&self, kind: &str, now: i64) -> Result<bool, StoreError> {
        let key = format!("recurring:{kind}");
        let v = self
            .write(|| async {
                self.query(
                    // Found through the unique key's index alone: left to choose, SurrealDB 3.3 intersects
                    // it with a scan of `job_ready` over every queued job still to come (EXPLAIN shows a
                    // BitmapAnd), ~4.5 ms of CPU with a workflow benchmark's timers queued against ~1 ms.
                    "LET $j = (SELECT VALUE id FROM job WITH INDEX job_unique WHERE unique_key = $k);
                     UPDATE $j SET run_at = $now WHERE status = 'queued' AND run_at > $now RETURN NONE;
                     SELECT VALUE status FROM $j;",
                    vars! { "k": key, "now": now },
                )
                .await?
                .value(2)
            })
            .await?;
        Ok(v.get(0).and_then(Value::as_str).and_then(JobStatus::parse) == Some(JobStatus::Queued))
    }

    /// Claims up to `limit` runnable jobs of any kind for `worker` until `now + lease_ms`, highest
    /// `priority` first: queued jobs whose time has come, and running jobs whose lease expired. One
    /// transaction; a concurrent claim of the same job conflicts and is retried against the new state, so
    /// each job goes to exactly one worker. (It sorts every due job: for stepping tests and tools; the
    /// worker loop claims through [`Store::claim_kinds`].)
    pub async fn claim_jobs(
        &self,
        worker: &str,
        now: i64,
        lease_ms: i64,
        limit: usize,
    ) -> Result<Vec<Job>, StoreError> {
        if limit == 0 {
            return Ok(vec![]);
        }
        self.write(|| async {
            self.query(
                &format!(
                    "{{
                        LET $ready = (SELECT VALUE id FROM job WHERE status = 'queued' AND run_at <= $now
                            ORDER BY priority DESC, run_at ASC LIMIT $limit);
                        {stale}
                        LET $ids = array::slice(array::concat($stale, $ready), 0, $limit);
                        UPDATE $ids SET status = 'running', lease_owner = $w, lease_expires = $now + $lease,
                            attempts += 1, updated_at = $now RETURN NONE;
                        RETURN (SELECT {JOB_FIELDS} FROM $ids ORDER BY priority DESC, run_at ASC);
                    }}",
                    stale = take_stale("")
                ),
                vars! { "w": worker, "now": now, "lease": lease_ms, "limit": limit,
                "last_interruption": MAX_INTERRUPTED - 1 },
            )
            .await?
            .value(0)
            .and_then(|v| serde_json::from_value::<Vec<Job>>(v).map_err(|e| StoreError::Decode(e.to_string())))
        })
        .await
    }

    /// Claims up to `limit` runnable jobs of `kinds`, taking the kinds in the order given (first kinds
    /// first) and, within a kind, the earliest `run_at` first: jobs whose lease expired, then queued jobs
    /// whose time has come. Each kind is read through the `job_claim` index (status, kind, run_at) and
    /// stops at the limit, so a claim costs the same with a hundred queued jobs or a million (an
    /// `ORDER BY priority` over every due job would sort them all on every claim).
    /// Which of `kinds` have a job to claim now: a queued one whose time has come, or a running one
    /// whose lease expired. One read (an index lookup per kind), so a worker asks this before claiming
    /// instead of running a claim transaction for every kind it serves; a hint only, the claim decides.
    pub async fn due_kinds(&self, kinds: &[String], now: i64) -> Result<Vec<String>, StoreError> {
        if kinds.is_empty() {
            return Ok(vec![]);
        }
        let v = self
            .query(
                "RETURN array::union(
                    array::filter($kinds, |$k| array::len(
                        SELECT VALUE id FROM job WHERE status = 'queued' AND kind = $k AND run_at <= $now LIMIT 1) > 0),
                    array::filter((SELECT VALUE kind FROM job WHERE status = 'running' AND lease_expires <= $now
                        LIMIT 64), |$k| $k IN $kinds));",
                vars! { "kinds": kinds, "now": now },
            )
            .await?
            .value(0)?;
        Ok(v.as_array().into_iter().flatten().filter_map(|k| k.as_str().map(str::to_string)).collect())
    }

    pub async fn claim_kinds(
        &self,
        worker: &str,
        now: i64,
        lease_ms: i64,
        limit: usize,
        kinds: &[String],
    ) -> Result<Vec<Job>, StoreError> {
        if limit == 0 || kinds.is_empty() {
            return Ok(vec![]);
        }
        // Fixed fragments only; the kinds are bound as $k0, $k1, ...
        let mut sql = format!("{{\n{}\nLET $got = $stale;\n", take_stale("AND kind IN $kinds"));
        let mut vars = vars! { "w": worker, "now": now, "lease": lease_ms, "limit": limit, "kinds": kinds,
        "last_interruption": MAX_INTERRUPTED - 1 };
        for (i, k) in kinds.iter().enumerate() {
            vars[format!("k{i}")] = Value::String(k.clone());
            sql.push_str(&format!(
                "LET $got = IF array::len($got) >= $limit {{ $got }} ELSE {{ array::concat($got,
                    (SELECT VALUE id FROM job WHERE status = 'queued' AND kind = $k{i} AND run_at <= $now
                        LIMIT $limit)) }};\n"
            ));
        }
        sql.push_str(&format!(
            "LET $ids = array::slice($got, 0, $limit);
                UPDATE $ids SET status = 'running', lease_owner = $w, lease_expires = $now + $lease,
                    attempts += 1, updated_at = $now RETURN NONE;
                RETURN (SELECT {JOB_FIELDS} FROM $ids);
            }}"
        ));
        self.write(|| async {
            self.query(&sql, vars.clone())
                .await?
                .value(0)
                .and_then(|v| serde_json::from_value::<Vec<Job>>(v).map_err(|e| StoreError::Decode(e.to_string())))
        })
        .await
    }

    /// Records the outcomes of many jobs a worker holds in one transaction: done, back to the queue at a
    /// time, or dead-lettered. Jobs whose lease the worker lost are left alone. (Batch kinds are never
    /// recurring.)
    pub async fn finish_jobs(
        &self,
        worker: &str,
        done: &[String],
        failed: &[FailedJob],
        now: i64,
    ) -> Result<(), StoreError> {
        if done.is_empty() && failed.is_empty() {
            return Ok(());
        }
        let retry: Vec<Value> = failed
            .iter()
            .filter_map(|f| {
                let uncounted = i64::from(!f.counted);
                f.retry_at.map(|at| serde_json::json!({ "id": f.id, "err": f.error, "at": at, "uncounted": uncounted }))
            })
            .collect();
        let waits: Vec<Value> = failed
            .iter()
            .filter(|f| f.retry_at.is_some())
            .flat_map(|f| f.signals.iter().map(|s| serde_json::json!({ "job": f.id, "signal": s })))
            .collect();
        let dead: Vec<Value> = failed
            .iter()
            .filter(|f| f.retry_at.is_none())
            .map(|f| serde_json::json!({ "id": f.id, "err": f.error }))
            .collect();
        self.write(|| async {
            self.query(
                "BEGIN TRANSACTION;
                 UPDATE array::map($done, |$i| type::record('job', $i)) SET status = 'completed', lease_owner = NONE,
                    lease_expires = NONE, finished_at = $now, updated_at = $now
                    WHERE status = 'running' AND lease_owner = $w RETURN NONE;
                 FOR $f IN $retry {
                    UPDATE type::record('job', $f.id) SET status = 'queued', run_at = $f.at, lease_owner = NONE,
                        lease_expires = NONE, last_error = $f.err, updated_at = $now,
                        attempts = math::max([attempts - $f.uncounted, 0])
                        WHERE status = 'running' AND lease_owner = $w RETURN NONE;
                 };
                 FOR $s IN $waits {
                    UPSERT type::record('job_wait', [$s.job, $s.signal]) SET job = $s.job, signal = $s.signal,
                        at = $now RETURN NONE;
                 };
                 FOR $f IN $given_up {
                    UPDATE type::record('job', $f.id) SET status = 'dead', lease_owner = NONE, lease_expires = NONE,
                        last_error = $f.err, finished_at = $now, updated_at = $now
                        WHERE status = 'running' AND lease_owner = $w RETURN NONE;
                 };
                 COMMIT TRANSACTION;",
                vars! { "w": worker, "now": now, "done": done, "retry": retry.clone(), "given_up": dead.clone(),
                "waits": waits.clone() },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Gives `signal`: every queued job waiting for it ([`FailedJob::signals`]) is brought forward to
    /// `now`, and its wait rows are gone. Answers how many jobs moved (a job that already ran or runs
    /// now is left alone).
    pub async fn signal_jobs(&self, signal: &str, now: i64) -> Result<usize, StoreError> {
        let mut moved = 0;
        loop {
            let v = self
                .write(|| async {
                    self.query(
                        "BEGIN TRANSACTION;
                         LET $w = (SELECT id, job FROM job_wait WHERE signal = $s LIMIT $chunk);
                         LET $moved = (UPDATE array::map($w.job, |$j| type::record('job', $j)) SET run_at = $now,
                            updated_at = $now WHERE status = 'queued' AND run_at > $now RETURN VALUE id);
                         DELETE $w.id RETURN NONE;
                         RETURN [array::len($w), array::len($moved)];
                         COMMIT TRANSACTION;",
                        vars! { "s": signal, "now": now, "chunk": SIGNAL_CHUNK },
                    )
                    .await?
                    .value_last()
                })
                .await?;
            let read = v.get(0).and_then(Value::as_u64).unwrap_or(0) as usize;
            moved += v.get(1).and_then(Value::as_u64).unwrap_or(0) as usize;
            if read < SIGNAL_CHUNK {
                return Ok(moved);
            }
        }
    }

    /// Which of `signals` some job waits for (an index lookup each).
    pub async fn awaited_signals(&self, signals: &[String]) -> Result<Vec<String>, StoreError> {
        if signals.is_empty() {
            return Ok(vec![]);
        }
        let v = self
            .query(
                "RETURN array::filter($signals, |$s| array::len(SELECT VALUE id FROM job_wait WHERE signal = $s LIMIT 1) > 0)",
                vars! { "signals": signals },
            )
            .await?
            .value(0)?;
        Ok(v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect())
    }

    /// Extends the leases of many jobs the worker still holds.
    pub async fn extend_leases(&self, ids: &[String], worker: &str, until: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE array::map($ids, |$i| type::record('job', $i)) SET lease_expires = $until
                 WHERE status = 'running' AND lease_owner = $w RETURN NONE",
                vars! { "ids": ids, "w": worker, "until": until },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Marks a job done. A recurring job goes back to the queue for its next run. Returns false when the
    /// worker no longer holds the lease (another worker took the job over).
    pub async fn complete_job(&self, id: &str, worker: &str, now: i64) -> Result<bool, StoreError> {
        self.write(|| async {
            self.query(
                "{
                    LET $j = (SELECT * FROM ONLY type::record('job', $id));
                    IF $j == NONE OR $j.status != 'running' OR $j.lease_owner != $w { RETURN false; };
                    IF $j.interval_ms != NONE {
                        UPDATE type::record('job', $id) SET status = 'queued', run_at = $now + $j.interval_ms,
                            attempts = 0, lease_owner = NONE, lease_expires = NONE, last_error = NONE,
                            interrupted = NONE, updated_at = $now RETURN NONE;
                    } ELSE {
                        UPDATE type::record('job', $id) SET status = 'completed', lease_owner = NONE,
                            lease_expires = NONE, finished_at = $now, updated_at = $now RETURN NONE;
                    };
                    RETURN true;
                }",
                vars! { "id": id, "w": worker, "now": now },
            )
            .await?
            .value(0)
        })
        .await
        .map(|v| v.as_bool().unwrap_or(false))
    }

    /// Records a failed attempt: back to the queue at `retry_at`, or dead-lettered with the error when
    /// `retry_at` is None (a recurring job is never dead-lettered; it waits for its next run).
    pub async fn fail_job(
        &self,
        id: &str,
        worker: &str,
        error: &str,
        retry_at: Option<i64>,
        now: i64,
    ) -> Result<bool, StoreError> {
        self.write(|| async {
            self.query(
                "{
                    LET $j = (SELECT * FROM ONLY type::record('job', $id));
                    IF $j == NONE OR $j.status != 'running' OR $j.lease_owner != $w { RETURN false; };
                    IF $retry != NONE AND $retry != NULL {
                        UPDATE type::record('job', $id) SET status = 'queued', run_at = $retry, lease_owner = NONE,
                            lease_expires = NONE, last_error = $err, updated_at = $now RETURN NONE;
                    } ELSE IF $j.interval_ms != NONE {
                        UPDATE type::record('job', $id) SET status = 'queued', run_at = $now + $j.interval_ms,
                            attempts = 0, lease_owner = NONE, lease_expires = NONE, last_error = $err,
                            updated_at = $now RETURN NONE;
                    } ELSE {
                        UPDATE type::record('job', $id) SET status = 'dead', lease_owner = NONE, lease_expires = NONE,
                            last_error = $err, finished_at = $now, updated_at = $now RETURN NONE;
                    };
                    RETURN true;
                }",
                vars! { "id": id, "w": worker, "err": error, "retry": retry_at, "now": now },
            )
            .await?
            .value(0)
        })
        .await
        .map(|v| v.as_bool().unwrap_or(false))
    }

    /// Extends the lease of a job the worker still holds.
    pub async fn extend_lease(&self, id: &str, worker: &str, until: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE type::record('job', $id) SET lease_expires = $until WHERE status = 'running' AND lease_owner = $w
                 RETURN NONE",
                vars! { "id": id, "w": worker, "until": until },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Gives back every job a worker holds (graceful shutdown): they are queued again at once, and the
    /// interrupted attempt is not counted.
    pub async fn release_leases(&self, worker: &str, now: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE job SET status = 'queued', lease_owner = NONE, lease_expires = NONE, run_at = $now,
                    attempts = math::max([attempts - 1, 0]), updated_at = $now
                 WHERE status = 'running' AND lease_owner = $w RETURN NONE",
                vars! { "w": worker, "now": now },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    pub async fn job(&self, id: &str) -> Result<Option<Job>, StoreError> {
        self.query(&format!("SELECT {JOB_FIELDS} FROM ONLY type::record('job', $id)"), vars! { "id": id })
            .await?
            .first(0)
    }

    /// Number of jobs in each state.
    pub async fn job_counts(&self) -> Result<Vec<(String, i64)>, StoreError> {
        #[derive(Deserialize)]
        struct Row {
            status: String,
            n: i64,
        }
        let rows: Vec<Row> =
            self.query("SELECT status, count() AS n FROM job GROUP BY status", vars! {}).await?.all(0)?;
        Ok(rows.into_iter().map(|r| (r.status, r.n)).collect())
    }

    /// Deletes the waits of jobs no longer queued (a job that ran at its time before its signal came).
    /// Finished jobs go with the retention purge (`Store::purge_finished_jobs_batch`).
    pub async fn purge_job_waits(&self) -> Result<(), StoreError> {
        self.write(|| async {
            self.query("DELETE job_wait WHERE type::record('job', job).status != 'queued';", vars! {}).await
        })
        .await
        .map(|_| ())
    }
}

/// SurrealDB's `option<T>` fields take NONE (absent), not NULL: drop null members of a document.
pub fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => other,
    }
}
