//! Messages received over SMTP, from the moment they are accepted until they are applied
//! (docs/behaviour.md#receiving-mail): an `inbound_message` row and the job that reads it, written in
//! one transaction before the SMTP server answers 250. The message's bytes are a file of the spool
//! (`infra::spool`); rows from before the spool hold them themselves.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Store, StoreError};
use crate::domain::billing::{Category, month_key};
use crate::vars;

/// A received message as stored.
#[derive(Debug, Clone, Deserialize)]
pub struct InboundRow {
    pub id: String,
    pub mail_from: String,
    pub rcpts: Vec<String>,
    raw: Option<String>,
    encoding: String,
    pub peer: String,
    /// The name the client gave in HELO or EHLO (rows from before have none).
    #[serde(default)]
    pub helo: Option<String>,
    pub received_at: i64,
}

impl InboundRow {
    /// The message's bytes when the row holds them (rows from before the spool); None: in the spool.
    pub fn take_raw(&mut self) -> Option<Vec<u8>> {
        let raw = self.raw.take()?;
        Some(match self.encoding.as_str() {
            "base64" => base64::engine::general_purpose::STANDARD.decode(&raw).unwrap_or_default(),
            _ => raw.into_bytes(),
        })
    }
}

/// A message to store: its id (its spool file's), envelope, size and the client's address.
pub struct NewInbound<'a> {
    pub id: &'a str,
    pub mail_from: &'a str,
    pub rcpts: &'a [String],
    pub size: u64,
    pub peer: &'a str,
    pub helo: &'a str,
}

impl Store {
    /// Stores a received message with `job` (a job document that will apply it), in one transaction.
    pub async fn store_inbound(&self, m: NewInbound<'_>, job: Value, now: i64) -> Result<(), StoreError> {
        let NewInbound { id, mail_from, rcpts, size, peer, helo } = m;
        let doc = json!({
            "mail_from": mail_from, "rcpts": rcpts, "encoding": "spool", "size": size, "peer": peer,
            "helo": helo, "received_at": now,
        });
        self.write(|| async {
            self.query(
                "BEGIN TRANSACTION;
                 CREATE type::record('inbound_message', $id) CONTENT $doc RETURN NONE;
                 INSERT INTO job [$job] RETURN NONE;
                 COMMIT TRANSACTION;",
                vars! { "id": id, "doc": doc.clone(), "job": job.clone() },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// A stored received message.
    pub async fn inbound_message(&self, id: &str) -> Result<Option<InboundRow>, StoreError> {
        self.query(
            "SELECT record::id(id) AS id, mail_from, rcpts, raw, encoding, peer, helo, received_at
             FROM ONLY type::record('inbound_message', $id)",
            vars! { "id": id },
        )
        .await?
        .first(0)
    }

    /// Deletes an applied message and counts it in the inbound usage of the month of each project it was
    /// mail for, in one transaction (so a message counts once however often its job runs).
    pub async fn finish_inbound(&self, id: &str, counted_for: &[String], now: i64) -> Result<(), StoreError> {
        let usage: Vec<Value> = counted_for
            .iter()
            .map(|p| json!({ "project": p, "month": month_key(now), "category": Category::Inbound.as_str(), "shard": 0 }))
            .collect();
        self.write(|| async {
            self.query(
                "BEGIN TRANSACTION;
                 IF record::exists(type::record('inbound_message', $id)) {
                    FOR $u IN $usage {
                        UPSERT type::record('usage_month', [$u.project, $u.month, $u.category, $u.shard])
                            SET project = $u.project, month = $u.month, category = $u.category, n += 1 RETURN NONE;
                    };
                 };
                 DELETE type::record('inbound_message', $id) RETURN NONE;
                 COMMIT TRANSACTION;",
                vars! { "id": id, "usage": usage.clone() },
            )
            .await
        })
        .await
        .map(|_| ())
    }

    /// Received messages not applied yet.
    pub async fn count_inbound(&self) -> Result<i64, StoreError> {
        let v = self.query("SELECT count() AS n FROM inbound_message GROUP ALL", vars! {}).await?.value(0)?;
        Ok(v.get(0).and_then(|r| r.get("n")).and_then(Value::as_i64).unwrap_or(0))
    }

    /// Whether a received message's row exists (the spool's sweep keeps its file).
    pub async fn inbound_exists(&self, id: &str) -> Result<bool, StoreError> {
        let v = self
            .query("RETURN record::exists(type::record('inbound_message', $id))", vars! { "id": id })
            .await?
            .value_last()?;
        Ok(v.as_bool().unwrap_or(false))
    }

    /// Whether an event with this id was stored (an inbound message's event is written once).
    pub async fn event_exists(&self, id: &str) -> Result<bool, StoreError> {
        let v =
            self.query("RETURN record::exists(type::record('event', $id))", vars! { "id": id }).await?.value_last()?;
        Ok(v.as_bool().unwrap_or(false))
    }
}
