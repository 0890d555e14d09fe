//! Stripe's REST API as Herald uses it (form-encoded requests, JSON answers, 10 s timeout) and the
//! signature of its webhook deliveries (`Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
//! "<t>.<payload>">`). The base URL is a setting, so tests point it at a stub on loopback.

use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::config::StripeConfig;

/// Seconds a webhook signature's timestamp may be away from now.
pub const TOLERANCE_SECS: i64 = 300;

pub struct Stripe {
    http: reqwest::Client,
    key: String,
    base: String,
}

impl Stripe {
    pub fn new(c: &StripeConfig) -> Result<Stripe, String> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the Stripe client: {e}"))?;
        Ok(Stripe { http, key: c.secret_key.clone(), base: c.api_base.clone() })
    }

    async fn call(&self, rb: reqwest::RequestBuilder) -> Result<Value, String> {
        let res = rb.bearer_auth(&self.key).send().await.map_err(|e| format!("Stripe did not answer: {e}"))?;
        let status = res.status();
        let body: Value = res.json().await.map_err(|e| format!("Stripe answered something unreadable: {e}"))?;
        if status.is_success() {
            Ok(body)
        } else {
            let msg = body.pointer("/error/message").and_then(Value::as_str).unwrap_or("no message");
            Err(format!("Stripe refused the request ({status}): {msg}"))
        }
    }

    async fn post(&self, path: &str, form: &[(&str, String)]) -> Result<Value, String> {
        self.call(self.http.post(format!("{}{path}", self.base)).form(form)).await
    }

    /// Creates the customer of a project; answers its id.
    pub async fn create_customer(&self, project: &str, email: &str) -> Result<String, String> {
        let v = self
            .post("/v1/customers", &[("email", email.to_string()), ("metadata[project]", project.to_string())])
            .await?;
        id_of(&v)
    }

    /// A Checkout Session subscribing `customer` to `price`; answers (id, url).
    pub async fn checkout_session(
        &self,
        customer: &str,
        price: &str,
        project: &str,
        success_url: &str,
        cancel_url: &str,
    ) -> Result<(String, String), String> {
        let v = self
            .post(
                "/v1/checkout/sessions",
                &[
                    ("mode", "subscription".into()),
                    ("customer", customer.into()),
                    ("line_items[0][price]", price.into()),
                    ("line_items[0][quantity]", "1".into()),
                    ("client_reference_id", project.into()),
                    ("metadata[project]", project.into()),
                    ("subscription_data[metadata][project]", project.into()),
                    ("success_url", success_url.into()),
                    ("cancel_url", cancel_url.into()),
                ],
            )
            .await?;
        Ok((id_of(&v)?, url_of(&v)?))
    }

    /// A billing portal session of `customer`; answers its URL.
    pub async fn portal_session(&self, customer: &str, return_url: &str) -> Result<String, String> {
        let v = self
            .post("/v1/billing_portal/sessions", &[("customer", customer.into()), ("return_url", return_url.into())])
            .await?;
        url_of(&v)
    }

    /// The customer's latest invoices (at most 24), newest first as Stripe lists them.
    pub async fn invoices(&self, customer: &str) -> Result<Vec<Value>, String> {
        let rb = self.http.get(format!("{}/v1/invoices", self.base)).query(&[("customer", customer), ("limit", "24")]);
        let v = self.call(rb).await?;
        Ok(v.get("data").and_then(Value::as_array).cloned().unwrap_or_default())
    }
}

fn id_of(v: &Value) -> Result<String, String> {
    v.get("id").and_then(Value::as_str).map(str::to_string).ok_or_else(|| "Stripe's answer has no id".into())
}

fn url_of(v: &Value) -> Result<String, String> {
    v.get("url").and_then(Value::as_str).map(str::to_string).ok_or_else(|| "Stripe's answer has no url".into())
}

/// Checks a `Stripe-Signature` header against the payload: a `v1` signature made with `secret` over
/// `"<t>.<payload>"`, `t` within [`TOLERANCE_SECS`] of `now_secs`. Answers the matching signature in
/// lower-case hex, whatever case it came in (a delivery is known by its event's id, not by this text:
/// docs/behaviour.md#billing).
pub fn verify_signature(secret: &str, header: &str, payload: &[u8], now_secs: i64) -> Result<String, String> {
    let mut t = None;
    let mut sigs = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => sigs.push(v.to_string()),
            _ => {}
        }
    }
    let t = t.ok_or("the Stripe-Signature header has no timestamp")?;
    if (now_secs - t).abs() > TOLERANCE_SECS {
        return Err(format!("the signature's timestamp is more than {TOLERANCE_SECS} seconds from now"));
    }
    for sig in sigs {
        let Ok(bytes) = hex::decode(&sig) else { continue };
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).map_err(|e| e.to_string())?;
        mac.update(t.to_string().as_bytes());
        mac.update(b".");
        mac.update(payload);
        if mac.verify_slice(&bytes).is_ok() {
            return Ok(hex::encode(bytes));
        }
    }
    Err("no v1 signature of the Stripe-Signature header matches the payload".into())
}

/// The `Stripe-Signature` header for `payload` at `t` (tests and tools).
pub fn sign(secret: &str, t: i64, payload: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_checked_for_secret_payload_and_time() {
        let body = br#"{"id":"evt_1"}"#;
        let header = sign("whsec_a", 1_000, body);
        assert!(verify_signature("whsec_a", &header, body, 1_100).is_ok());
        assert!(verify_signature("whsec_b", &header, body, 1_100).is_err(), "another secret");
        assert!(verify_signature("whsec_a", &header, br#"{"id":"evt_2"}"#, 1_100).is_err(), "another payload");
        assert!(verify_signature("whsec_a", &header, body, 1_000 + TOLERANCE_SECS + 1).is_err(), "too old");
        assert!(verify_signature("whsec_a", "v1=abc", body, 1_000).is_err(), "no timestamp");
        // Several v1 signatures (a secret being rolled): any one that matches will do.
        let both = format!("{header},v1={}", "00".repeat(32));
        assert!(verify_signature("whsec_a", &both, body, 1_000).is_ok());
    }
}
