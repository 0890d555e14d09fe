//! Outbound webhooks (docs/behaviour.md#webhooks): endpoints (`webhook:<uuid>`, filtered by project in
//! every read and write) and their deliveries (`webhook_delivery:[webhook, event]`: one endpoint's
//! deliveries are one record-id range in event order, and writing one event's deliveries again adds
//! nothing). An event's body is stored once (`webhook_payload:<event>`), shared by its deliveries to
//! every endpoint and deleted with the last of them. A delivery's attempts are recorded with the job of
//! its next attempt in one transaction.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Store, StoreError};
use crate::domain::status::DeliveryStatus;
use crate::vars;

/// An endpoint.
#[derive(Debug, Clone, Deserialize)]
pub struct Endpoint {
    pub id: String,
    pub project: String,
    pub url: String,
    pub events: Vec<String>,
    pub description: Option<String>,
    pub enabled: bool,
    /// The signing secret, sealed (`services::webhooks` opens it).
    pub secret: String,
    pub disabled_reason: Option<String>,
    pub failing_since: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One attempt of a delivery.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Attempt {
    pub at: i64,
    /// The endpoint's HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// Why it failed, when it did (the status alone says it for an answer that is not 2xx).
    pub error: Option<String>,
    pub duration_ms: i64,
    /// The job that made it (none for a test delivery): its job, coming back after the attempt went on
    /// without it, finds it made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

/// A delivery of one event to one endpoint.
#[derive(Debug, Clone, Deserialize)]
pub struct Delivery {
    /// The event's id: the `webhook-id` header.
    #[serde(rename = "event")]
    pub id: String,
    pub webhook: String,
    pub project: String,
    pub event_type: String,
    pub body: String,
    pub status: DeliveryStatus,
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    pub next_at: Option<i64>,
    #[serde(default)]
    pub test: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

/// The fields of an endpoint a change sets (None: left as they are).
#[derive(Debug, Clone, Default)]
pub struct EndpointPatch {
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    /// Some(None) removes it.
    pub description: Option<Option<String>>,
    pub enabled: Option<bool>,
    /// A new sealed secret.
    pub secret: Option<String>,
}

/// A delivery to write, with the job of its first attempt. Its body is its event's [`Payload`].
#[derive(Debug, Clone, Serialize)]
pub struct NewDelivery {
    pub webhook: String,
    pub event: String,
    pub project: String,
    pub event_type: String,
    pub test: bool,
    /// The job's row (`NewJob::doc`); none for a delivery attempted by its caller (a test).
    pub job: Option<Value>,
}

/// The body every delivery of an event sends, stored once.
#[derive(Debug, Clone, Serialize)]
pub struct Payload {
    pub event: String,
    pub project: String,
    pub body: String,
}

/// An attempt of a delivery to record ([`Store::record_attempts`]).
#[derive(Debug, Clone, Serialize)]
pub struct AttemptRecord {
    pub webhook: String,
    pub event: String,
    pub attempt: Attempt,
    /// Whether it succeeded.
    pub ok: bool,
    /// The delivery's status after it.
    pub status: DeliveryStatus,
    /// When the next attempt runs, and its job's row.
    pub next_at: Option<i64>,
    pub job: Option<Value>,
    /// Why the endpoint is disabled, should this failure disable it.
    pub reason: String,
}

/// Most attempts a delivery keeps (the oldest are dropped first; manual retries add to them).
pub const MAX_ATTEMPTS_KEPT: usize = 20;

const ENDPOINT_FIELDS: &str = "record::id(id) AS id, project, url, events, description, enabled, secret, \
     disabled_reason, failing_since, created_at, updated_at";
/// A delivery's body is its event's payload (a delivery written before payloads were shared keeps its own).
const DELIVERY_FIELDS: &str = "record::id(id)[1] AS event, record::id(id)[0] AS webhook, project, event_type, \
     (body ?? type::record('webhook_payload', record::id(id)[1]).body ?? '') AS body, status, attempts, next_at, \
     test, created_at, updated_at";

/// A purge step (see [`Store::purge_project_batch`]): up to `$n` deliveries of the project `$p`, then up to
/// `$n` of its payloads.
pub(super) const PURGE_DELIVERIES: &str =
    "LET $d = (SELECT VALUE id FROM webhook_delivery WHERE project = $p LIMIT $n); DELETE $d RETURN NONE;
     LET $q = IF array::len($d) = 0 { (SELECT VALUE id FROM webhook_payload WHERE project = $p LIMIT $n) } ELSE { [] };
     DELETE $q RETURN NONE;
     LET $r = array::concat($d, $q);";
/// A purge step: up to `$n` endpoints of the project `$p`.
pub(super) const PURGE_WEBHOOKS: &str =
    "LET $r = (SELECT VALUE id FROM webhook WHERE project = $p LIMIT $n); DELETE $r RETURN NONE;";

impl Store {
    /// Adds an endpoint unless the project has `max` already (then None).
    #[allow(clippy::too_many_arguments)]
    pub async fn create_webhook(
        &self,
        project: &str,
        url: &str,
        events: &[String],
        description: Option<&str>,
        enabled: bool,
        sealed_secret: &str,
        max: usize,
        now: i64,
    ) -> Result<Option<Endpoint>, StoreError> {
        let id = uuid::Uuid::now_v7().to_string();
        let sql = format!(
            "{{
                IF array::len((SELECT VALUE id FROM webhook WHERE project = $p)) >= $max {{ RETURN NONE; }};
                CREATE type::record('webhook', $id) CONTENT {{ project: $p, url: $url, events: $events,
                    description: $description ?? NONE, enabled: $enabled, secret: $secret, created_at: $now,
                    updated_at: $now }} RETURN NONE;
                RETURN (SELECT {ENDPOINT_FIELDS} FROM ONLY type::record('webhook', $id));
            }}"
        );
        let v = self
            .write(|| async {
                self.query(
                    &sql,
                    vars! {
                        "p": project, "id": id, "url": url, "events": events, "description": description,
                        "enabled": enabled, "secret": sealed_secret, "max": max, "now": now,
                    },
                )
                .await?
                .value_last()
            })
            .await?;
        decode_opt(v)
    }

    /// The project's endpoints, oldest first.
    pub async fn webhooks(&self, project: &str) -> Result<Vec<Endpoint>, StoreError> {
        self.query(
            &format!("SELECT {ENDPOINT_FIELDS} FROM webhook WHERE project = $p ORDER BY id"),
            vars! { "p": project },
        )
        .await?
        .all(0)
    }

    /// One endpoint of the project.
    pub async fn webhook(&self, project: &str, id: &str) -> Result<Option<Endpoint>, StoreError> {
        self.query(
            &format!("SELECT {ENDPOINT_FIELDS} FROM type::record('webhook', $id) WHERE project = $p"),
            vars! { "p": project, "id": id },
        )
        .await?
        .first(0)
    }

    /// The enabled endpoints of these projects.
    pub async fn enabled_webhooks(&self, projects: &[String]) -> Result<Vec<Endpoint>, StoreError> {
        self.query(
            &format!("SELECT {ENDPOINT_FIELDS} FROM webhook WHERE project IN $ps AND enabled = true"),
            vars! { "ps": projects },
        )
        .await?
        .all(0)
    }

    /// Changes the fields `patch` gives. Enabling an endpoint clears why and since when it failed;
    /// disabling it clears the reason Herald gave (a person did it). None when the project has no such
    /// endpoint.
    pub async fn update_webhook(
        &self,
        project: &str,
        id: &str,
        patch: &EndpointPatch,
        now: i64,
    ) -> Result<Option<Endpoint>, StoreError> {
        let mut set = vec!["updated_at = $now"];
        if patch.url.is_some() {
            set.push("url = $url");
        }
        if patch.events.is_some() {
            set.push("events = $events");
        }
        if patch.description.is_some() {
            set.push("description = $description ?? NONE");
        }
        match patch.enabled {
            Some(true) => set.push("enabled = true, disabled_reason = NONE, failing_since = NONE"),
            Some(false) => set.push("enabled = false, disabled_reason = NONE"),
            None => {}
        }
        if patch.secret.is_some() {
            set.push("secret = $secret");
        }
        let sql = format!(
            "{{
                LET $w = type::record('webhook', $id);
                IF $w.project != $p {{ RETURN NONE; }};
                UPDATE $w SET {} RETURN NONE;
                RETURN (SELECT {ENDPOINT_FIELDS} FROM ONLY $w);
            }}",
            set.join(", ")
        );
        let v = self
            .write(|| async {
                self.query(
                    &sql,
                    vars! {
                        "p": project, "id": id, "now": now, "url": patch.url, "events": patch.events,
                        "description": patch.description.clone().flatten(), "secret": patch.secret,
                    },
                )
                .await?
                .value_last()
            })
            .await?;
        decode_opt(v)
    }

    /// Deletes an endpoint (its deliveries go with [`Store::delete_deliveries`]); false when the project
    /// has no such endpoint.
    pub async fn delete_webhook(&self, project: &str, id: &str) -> Result<bool, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    "{ LET $w = type::record('webhook', $id);
                       IF $w.project != $p { RETURN false; };
                       DELETE $w RETURN NONE;
                       RETURN true; }",
                    vars! { "p": project, "id": id },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_bool().unwrap_or(false))
    }

    /// Deletes up to `n` deliveries of an endpoint of `project` (deleted before), and the payloads no
    /// delivery to the project's other endpoints shares; answers how many deliveries.
    pub async fn delete_deliveries(&self, project: &str, webhook: &str, n: usize) -> Result<usize, StoreError> {
        let v = self
            .write(|| async {
                self.query(
                    "{ LET $r = (SELECT VALUE id FROM webhook_delivery:[$w, NONE]..[$w, {}] LIMIT $n);
                       DELETE $r RETURN NONE;
                       LET $others = (SELECT VALUE record::id(id) FROM webhook WHERE project = $p AND record::id(id) != $w);
                       LET $unshared = array::filter(array::map($r, |$d| record::id($d)[1]), |$e| array::len(
                           array::filter($others, |$o| record::exists(type::record('webhook_delivery', [$o, $e])))) = 0);
                       DELETE array::map($unshared, |$e| type::record('webhook_payload', $e)) RETURN NONE;
                       RETURN array::len($r); }",
                    vars! { "p": project, "w": webhook, "n": n },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_u64().unwrap_or(0) as usize)
    }

    /// Writes deliveries and the jobs of their first attempts, leaving out those already written (an
    /// event handed out again), with the payloads of their events that are not stored yet: one
    /// transaction. Answers how many deliveries were new.
    pub async fn add_deliveries(
        &self,
        rows: &[NewDelivery],
        payloads: &[Payload],
        now: i64,
    ) -> Result<usize, StoreError> {
        if rows.is_empty() {
            return Ok(0);
        }
        let v = self
            .write(|| async {
                self.query(
                    "{
                        LET $new = (SELECT * FROM $rows
                            WHERE !record::exists(type::record('webhook_delivery', [webhook, event])));
                        FOR $d IN $new {
                            CREATE type::record('webhook_delivery', [$d.webhook, $d.event]) CONTENT {
                                project: $d.project, event_type: $d.event_type,
                                status: $pending, attempts: [], test: $d.test, created_at: $now, updated_at: $now,
                                next_at: IF $d.job { $now } ELSE { NONE } } RETURN NONE;
                            IF $d.job { INSERT INTO job [$d.job] RETURN NONE; };
                        };
                        IF array::len($new) > 0 {
                            FOR $p IN $payloads {
                                IF !record::exists(type::record('webhook_payload', $p.event)) {
                                    CREATE type::record('webhook_payload', $p.event)
                                        CONTENT { project: $p.project, body: $p.body } RETURN NONE;
                                };
                            };
                        };
                        RETURN array::len($new);
                    }",
                    vars! { "rows": rows, "payloads": payloads, "now": now, "pending": DeliveryStatus::Pending.as_str() },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(v.as_u64().unwrap_or(0) as usize)
    }

    /// One delivery of an endpoint.
    pub async fn delivery(&self, webhook: &str, event: &str) -> Result<Option<Delivery>, StoreError> {
        self.query(
            &format!("SELECT {DELIVERY_FIELDS} FROM type::record('webhook_delivery', [$w, $e])"),
            vars! { "w": webhook, "e": event },
        )
        .await?
        .first(0)
    }

    /// Up to `limit` of an endpoint's deliveries, newest first, from the one before `before` (the previous
    /// page's last), of one status when `status` is given.
    pub async fn deliveries_page(
        &self,
        webhook: &str,
        before: Option<&str>,
        status: Option<DeliveryStatus>,
        limit: usize,
    ) -> Result<Vec<Delivery>, StoreError> {
        let filter = if status.is_some() { "WHERE status = $status" } else { "" };
        // The range ends before the previous page's last event (exclusive).
        let to = match before {
            Some(_) => "[$w, $before]",
            None => "[$w, {}]",
        };
        self.query(
            &format!(
                "SELECT {DELIVERY_FIELDS} FROM webhook_delivery:[$w, NONE]..{to} {filter} ORDER BY id DESC LIMIT $n"
            ),
            vars! { "w": webhook, "before": before, "status": status.map(DeliveryStatus::as_str), "n": limit },
        )
        .await?
        .all(0)
    }

    /// Records attempts of deliveries in one transaction: each delivery's status and next attempt (with
    /// that attempt's job), and on its endpoint whether it is failing: a success clears its run of
    /// failures, a failure starts one or, when the run began `disable_after_ms` or more ago, disables the
    /// endpoint with the record's reason. A record whose delivery or endpoint is gone writes nothing.
    /// Answers the endpoints this disabled.
    pub async fn record_attempts(
        &self,
        records: &[AttemptRecord],
        disable_after_ms: i64,
        now: i64,
    ) -> Result<Vec<String>, StoreError> {
        if records.is_empty() {
            return Ok(vec![]);
        }
        let v = self
            .write(|| async {
                self.query(
                    "{
                        LET $enabled = (SELECT VALUE record::id(id) FROM array::distinct(array::map($recs,
                            |$r| type::record('webhook', $r.webhook))) WHERE enabled = true);
                        FOR $r IN $recs {
                            LET $d = type::record('webhook_delivery', [$r.webhook, $r.event]);
                            LET $ep = type::record('webhook', $r.webhook);
                            IF record::exists($d) AND record::exists($ep) {
                                UPDATE $d SET attempts += $r.attempt, status = $r.status, next_at = $r.next_at ?? NONE,
                                    updated_at = $now RETURN NONE;
                                IF array::len($d.attempts) > $keep { UPDATE $d SET attempts = array::slice(attempts, 1) RETURN NONE; };
                                IF $r.job { INSERT INTO job [$r.job] RETURN NONE; };
                                IF $r.ok {
                                    UPDATE $ep SET failing_since = NONE RETURN NONE;
                                } ELSE {
                                    UPDATE $ep SET failing_since = failing_since ?? $now RETURN NONE;
                                    IF $ep.enabled AND $ep.failing_since <= $now - $after {
                                        UPDATE $ep SET enabled = false, disabled_reason = $r.reason, updated_at = $now
                                            RETURN NONE;
                                    };
                                };
                            };
                        };
                        RETURN (SELECT VALUE record::id(id) FROM array::map($enabled, |$i| type::record('webhook', $i))
                            WHERE enabled = false);
                    }",
                    vars! { "recs": records, "keep": MAX_ATTEMPTS_KEPT, "after": disable_after_ms, "now": now },
                )
                .await?
                .value_last()
            })
            .await?;
        Ok(serde_json::from_value(v).unwrap_or_default())
    }

    /// The deliveries of these (webhook, event) pairs that exist. A pair whose delivery is gone (its
    /// endpoint or project deleted) is skipped: it must not fail the read of the others, which may be
    /// other tenants' deliveries claimed in the same batch.
    pub async fn deliveries_of(&self, pairs: &[(String, String)]) -> Result<Vec<Delivery>, StoreError> {
        if pairs.is_empty() {
            return Ok(vec![]);
        }
        self.query(
            &format!(
                "SELECT {DELIVERY_FIELDS} FROM array::filter(
                    array::map($pairs, |$x| type::record('webhook_delivery', [$x[0], $x[1]])),
                    |$r| record::exists($r))"
            ),
            vars! { "pairs": pairs },
        )
        .await?
        .all(0)
    }

    /// The endpoints with these ids that exist (every project's: callers compare the project); a
    /// deleted one is skipped.
    pub async fn webhooks_of(&self, ids: &[String]) -> Result<Vec<Endpoint>, StoreError> {
        if ids.is_empty() {
            return Ok(vec![]);
        }
        self.query(
            &format!(
                "SELECT {ENDPOINT_FIELDS} FROM array::filter(array::map($ids, |$i| type::record('webhook', $i)),
                    |$r| record::exists($r))"
            ),
            vars! { "ids": ids },
        )
        .await?
        .all(0)
    }

    /// Marks a delivery FAILED without an attempt (its endpoint is disabled).
    pub async fn fail_delivery(&self, webhook: &str, event: &str, now: i64) -> Result<(), StoreError> {
        self.write(|| async {
            self.query(
                "UPDATE type::record('webhook_delivery', [$w, $e]) SET status = $failed, next_at = NONE, updated_at = $now
                 RETURN NONE",
                vars! { "w": webhook, "e": event, "failed": DeliveryStatus::Failed.as_str(), "now": now },
            )
            .await
            .map(|_| ())
        })
        .await
    }

    /// Queues one more attempt of a delivery that is not waiting for one (SUCCEEDED or FAILED): PENDING,
    /// with `job`. Answers the delivery as it now is, or None when the endpoint has no such delivery.
    pub async fn requeue_delivery(
        &self,
        webhook: &str,
        event: &str,
        job: Value,
        now: i64,
    ) -> Result<Option<(Delivery, bool)>, StoreError> {
        let sql = format!(
            "{{
                LET $d = type::record('webhook_delivery', [$w, $e]);
                IF !record::exists($d) {{ RETURN NONE; }};
                LET $queued = $d.status != $pending;
                IF $queued {{
                    UPDATE $d SET status = $pending, next_at = $now, updated_at = $now RETURN NONE;
                    INSERT INTO job [$job] RETURN NONE;
                }};
                RETURN {{ requeued: $queued, row: (SELECT {DELIVERY_FIELDS} FROM ONLY $d) }};
            }}"
        );
        let v = self
            .write(|| async {
                self.query(
                    &sql,
                    vars! { "w": webhook, "e": event, "job": job, "now": now, "pending": DeliveryStatus::Pending.as_str() },
                )
                .await?
                .value_last()
            })
            .await?;
        if v.is_null() {
            return Ok(None);
        }
        let queued = v["requeued"].as_bool().unwrap_or(false);
        let row = serde_json::from_value(v["row"].clone()).map_err(|e| StoreError::Decode(e.to_string()))?;
        Ok(Some((row, queued)))
    }
}

fn decode_opt<T: serde::de::DeserializeOwned>(v: Value) -> Result<Option<T>, StoreError> {
    if v.is_null() {
        return Ok(None);
    }
    serde_json::from_value(v).map(Some).map_err(|e| StoreError::Decode(e.to_string()))
}

/// The job row's payload for a delivery's attempt: the project is in it, so deleting the project gives
/// its queued attempts up.
pub fn attempt_payload(project: &str, webhook: &str, event: &str, once: bool) -> Value {
    json!({ "project": project, "webhook": webhook, "event": event, "once": once })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store() -> Store {
        Store::connect(&crate::config::Config::for_tests()).await.expect("store")
    }

    fn row(webhook: &str, event: &str) -> NewDelivery {
        NewDelivery {
            webhook: webhook.into(),
            event: event.into(),
            project: "p".into(),
            event_type: "signup".into(),
            test: false,
            job: Some(crate::store::jobs::NewJob::new("webhook.deliver", json!({}), 5).doc(5)),
        }
    }

    fn payload(event: &str) -> Payload {
        Payload { event: event.into(), project: "p".into(), body: format!("{{\"id\":\"{event}\"}}") }
    }

    async fn payloads(s: &Store) -> Vec<String> {
        let mut r = s.query("SELECT VALUE record::id(id) FROM webhook_payload ORDER BY id", vars! {}).await.unwrap();
        serde_json::from_value(r.value(0).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn deliveries_are_written_once_paged_newest_first_and_their_attempts_recorded() {
        let s = store().await;
        let e = s.create_webhook("p", "https://h.example/", &["*".into()], None, true, "sealed", 2, 1).await.unwrap();
        let w = e.unwrap().id;
        assert!(s.webhook("other", &w).await.unwrap().is_none(), "another project reads it");
        let rows: Vec<NewDelivery> = ["e1", "e2", "e3"].iter().map(|e| row(&w, e)).collect();
        let bodies: Vec<Payload> = ["e1", "e2", "e3"].iter().map(|e| payload(e)).collect();
        assert_eq!(s.add_deliveries(&rows, &bodies, 5).await.unwrap(), 3);
        assert_eq!(s.add_deliveries(&rows, &bodies, 6).await.unwrap(), 0, "written twice");
        assert_eq!(s.delivery(&w, "e2").await.unwrap().unwrap().body, r#"{"id":"e2"}"#);
        let page = s.deliveries_page(&w, None, None, 2).await.unwrap();
        assert_eq!(page.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["e3", "e2"]);
        let page = s.deliveries_page(&w, Some("e2"), None, 2).await.unwrap();
        assert_eq!(page.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(), ["e1"]);
        let failed = Attempt { at: 10, status_code: Some(500), error: Some("500".into()), duration_ms: 3, job: None };
        let rec = |event: &str| AttemptRecord {
            webhook: w.clone(),
            event: event.into(),
            attempt: failed.clone(),
            ok: false,
            status: DeliveryStatus::Failed,
            next_at: None,
            job: None,
            reason: "failing".into(),
        };
        assert!(s.record_attempts(&[rec("e1")], 100, 10).await.unwrap().is_empty());
        let disabled = s.record_attempts(&[rec("e2"), rec("gone")], 100, 110).await.unwrap();
        assert_eq!(disabled, vec![w.clone()], "failing since 10, 100 ms allowed");
        let d = s.delivery(&w, "e1").await.unwrap().unwrap();
        assert_eq!((d.status, d.attempts.len()), (DeliveryStatus::Failed, 1));
        assert_eq!(d.attempts[0], failed);
        let failed_only = s.deliveries_page(&w, None, Some(DeliveryStatus::Failed), 10).await.unwrap();
        assert_eq!(failed_only.len(), 2);
        let e = s.webhook("p", &w).await.unwrap().unwrap();
        assert!(!e.enabled && e.disabled_reason.as_deref() == Some("failing"));
        let patch = EndpointPatch { enabled: Some(true), ..Default::default() };
        let e = s.update_webhook("p", &w, &patch, 120).await.unwrap().unwrap();
        assert!(e.enabled && e.disabled_reason.is_none() && e.failing_since.is_none());
        assert!(s.update_webhook("other", &w, &patch, 120).await.unwrap().is_none());
        let w2 = s.create_webhook("p", "https://h.example/2", &["*".into()], None, true, "x", 2, 1).await.unwrap();
        let w2 = w2.unwrap().id;
        let changed = Payload { body: "changed".into(), ..payload("e1") };
        assert_eq!(s.add_deliveries(&[row(&w2, "e1")], &[changed], 7).await.unwrap(), 1);
        assert_eq!(s.delivery(&w2, "e1").await.unwrap().unwrap().body, r#"{"id":"e1"}"#, "one body per event");
        assert!(
            s.create_webhook("p", "https://h.example/3", &["*".into()], None, true, "x", 2, 1).await.unwrap().is_none()
        );
        assert!(!s.delete_webhook("other", &w).await.unwrap());
        assert!(s.delete_webhook("p", &w).await.unwrap());
        assert_eq!(payloads(&s).await, ["e1", "e2", "e3"]);
        assert_eq!(s.delete_deliveries("p", &w, 100).await.unwrap(), 3);
        assert_eq!(payloads(&s).await, ["e1"], "the payload another endpoint's delivery shares is kept");
        assert_eq!(s.delivery(&w2, "e1").await.unwrap().unwrap().body, r#"{"id":"e1"}"#);
        assert!(s.delete_webhook("p", &w2).await.unwrap());
        assert_eq!(s.delete_deliveries("p", &w2, 100).await.unwrap(), 1);
        assert!(payloads(&s).await.is_empty(), "the last delivery's payload is deleted with it");
    }
}
