//! Payments against a stub of the Stripe API on loopback (docs/behaviour.md#billing): checkout, the
//! billing portal and invoices through the provider, and the signed webhook that applies subscription
//! changes to the project's plan and limits (forged, stale and replayed signatures refused).

use std::sync::Arc;

use herald_host::config::{Config, Plan, StripeConfig};
use serde_json::{Value, json};

use crate::harness::*;
use crate::http_sink::{self, HttpSink};

const WHSEC: &str = "whsec_test_herald";

async fn env() -> (Server, HttpSink) {
    let stub = http_sink::start_with(Arc::new(|method: &str, path: &str| {
        let (status, body) = match (method, path.split('?').next().unwrap_or_default()) {
            ("POST", "/v1/customers") => (200, json!({ "id": "cus_test1" })),
            ("POST", "/v1/checkout/sessions") => {
                (200, json!({ "id": "cs_test1", "url": "https://checkout.stripe.test/c/cs_test1" }))
            }
            ("POST", "/v1/billing_portal/sessions") => (200, json!({ "url": "https://billing.stripe.test/p/bps_1" })),
            ("GET", "/v1/invoices") => (
                200,
                json!({ "data": [{
                    "id": "in_1", "number": "HRLD-0001", "status": "paid", "amount_due": 1900, "amount_paid": 1900,
                    "currency": "usd", "created": 1_800_000_000, "hosted_invoice_url": "https://invoice.stripe.test/in_1",
                    "invoice_pdf": "https://invoice.stripe.test/in_1.pdf",
                }] }),
            ),
            _ => (404, json!({ "error": { "message": "no such route" } })),
        };
        (status, body.to_string())
    }))
    .await;
    let mut c = Config::for_tests();
    c.stripe = Some(StripeConfig {
        secret_key: "sk_test_herald".into(),
        webhook_secret: WHSEC.into(),
        api_base: stub.url(""),
    });
    let pro = Plan {
        price: Some("price_pro".into()),
        transactional: Some(50_000),
        campaigns: Some(100_000),
        ..Default::default()
    };
    let free = Plan { transactional: Some(100), campaigns: Some(100), workflows: Some(100), ..Default::default() };
    c.plans = [("pro".to_string(), pro), ("free".to_string(), free)].into_iter().collect();
    (Server::start_with(c, None).await, stub)
}

fn form(body: &[u8]) -> String {
    String::from_utf8_lossy(body).replace("%40", "@").replace("%5B", "[").replace("%5D", "]")
}

#[tokio::test]
async fn checkout_portal_and_invoices_go_through_the_provider() {
    let (s, stub) = env().await;
    assert_eq!(s.client().get("/config").await.json["features"]["billing"], true);
    let p = proj(&s, "owner@example.com").await;
    let base = format!("/users/@me/projects/{}", p.id);
    let owner = &p.session;

    // Before any checkout: no portal, no invoices, and nothing asked of the provider.
    assert_envelope(&owner.post(&format!("{base}/billing-portal"), json!({})).await, 409, "CONFLICT");
    assert_eq!(owner.get(&format!("{base}/billing-invoices")).await.json, json!({ "data": [] }));
    assert!(stub.requests().is_empty());
    // Only a plan with a price can be bought.
    for plan in ["gold", "free"] {
        let r = owner.post(&format!("{base}/checkout"), json!({ "plan": plan })).await;
        assert_envelope(&r, 422, "VALIDATION_ERROR");
        assert_eq!(r.json["error"]["errors"][0]["field"], "plan");
    }

    let r = owner.post(&format!("{base}/checkout"), json!({ "plan": "pro" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json, json!({ "url": "https://checkout.stripe.test/c/cs_test1", "sessionId": "cs_test1" }));
    let got = stub.requests();
    assert_eq!(got.len(), 2, "a customer, then the session");
    assert_eq!(got[0].path, "/v1/customers");
    assert_eq!(got[0].header("authorization"), Some("Bearer sk_test_herald"));
    let customer = form(&got[0].body);
    assert!(customer.contains("email=owner@example.com") && customer.contains(&format!("metadata[project]={}", p.id)));
    let session = form(&got[1].body);
    for part in ["mode=subscription", "customer=cus_test1", "line_items[0][price]=price_pro"] {
        assert!(session.contains(part), "{part} in {session}");
    }
    assert!(session.contains(&format!("client_reference_id={}", p.id)), "{session}");
    // The customer is made once.
    assert_eq!(owner.post(&format!("{base}/checkout"), json!({ "plan": "pro" })).await.status, 200);
    assert_eq!(stub.requests().iter().filter(|r| r.path == "/v1/customers").count(), 1);

    let r = owner.post(&format!("{base}/billing-portal"), json!({})).await;
    assert_eq!(r.json, json!({ "url": "https://billing.stripe.test/p/bps_1" }), "{}", r.json);
    let portal = form(&stub.requests().last().unwrap().body);
    assert!(portal.contains("customer=cus_test1"), "{portal}");
    let r = owner.get(&format!("{base}/billing-invoices")).await;
    assert_eq!(r.json["data"][0]["id"], "in_1", "{}", r.json);
    assert_eq!(r.json["data"][0]["amountDue"], 1900);
    assert_eq!(r.json["data"][0]["createdAt"], "2027-01-15T08:00:00.000Z");
    assert_eq!(r.json["data"][0]["pdfUrl"], "https://invoice.stripe.test/in_1.pdf");
    assert!(stub.requests().last().unwrap().path.contains("customer=cus_test1"));

    // An ADMIN may not pay; another project's owner does not see this one.
    let admin = signup(&s, "admin@example.com").await;
    join(&s, &p.id, "admin@example.com", "ADMIN").await;
    assert_envelope(&admin.post(&format!("{base}/checkout"), json!({ "plan": "pro" })).await, 403, "FORBIDDEN");
    let other = proj(&s, "other@example.com").await;
    assert_envelope(&other.session.get(&format!("{base}/billing-invoices")).await, 404, "PROJECT_NOT_FOUND");
}

// The server checks a notification's signed time against its real clock.
#[expect(clippy::disallowed_methods)]
fn now_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

async fn deliver(s: &Server, body: &Value, signature: Option<String>) -> Resp {
    let raw = serde_json::to_vec(body).unwrap();
    let sig = signature.unwrap_or_else(|| herald_host::infra::stripe::sign(WHSEC, now_secs(), &raw));
    deliver_raw(s, raw, Some(sig)).await
}

async fn deliver_raw(s: &Server, raw: Vec<u8>, sig: Option<String>) -> Resp {
    let mut rb = reqwest::Client::new()
        .post(format!("{}/webhooks/incoming/payments", s.base))
        .header("content-type", "application/json")
        .body(raw);
    if let Some(sig) = sig {
        rb = rb.header("Stripe-Signature", sig);
    }
    let res = rb.send().await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let json = res.json().await.unwrap_or(Value::Null);
    Resp { status, json, headers }
}

fn subscription(kind: &str, project: Option<&str>, status: &str, price: &str) -> Value {
    let mut obj = json!({
        "id": "sub_1", "object": "subscription", "customer": "cus_test1", "status": status,
        "items": { "data": [{ "price": { "id": price } }] },
    });
    if let Some(p) = project {
        obj["metadata"] = json!({ "project": p });
    }
    json!({ "id": format!("evt_{}", uuid::Uuid::new_v4()), "type": kind, "data": { "object": obj } })
}

#[tokio::test]
async fn the_webhook_applies_subscriptions_and_refuses_forged_stale_and_replayed_signatures() {
    let (s, _stub) = env().await;
    let p = proj(&s, "owner@example.com").await;
    let q = proj(&s, "q@example.com").await;
    let limits = format!("/users/@me/projects/{}/billing-limits", p.id);
    let started = subscription("customer.subscription.created", Some(&p.id), "active", "price_pro");

    // Forged, stale and unsigned deliveries change nothing.
    let raw = serde_json::to_vec(&started).unwrap();
    let forged = herald_host::infra::stripe::sign("whsec_someone_else", now_secs(), &raw);
    assert_envelope(&deliver(&s, &started, Some(forged)).await, 400, "INVALID_SIGNATURE");
    let stale = herald_host::infra::stripe::sign(WHSEC, now_secs() - 600, &raw);
    assert_envelope(&deliver(&s, &started, Some(stale)).await, 400, "INVALID_SIGNATURE");
    assert_envelope(&deliver_raw(&s, raw.clone(), None).await, 400, "INVALID_SIGNATURE");
    let mut tampered = started.clone();
    tampered["data"]["object"]["items"]["data"][0]["price"]["id"] = json!("price_free_lunch");
    let sig = herald_host::infra::stripe::sign(WHSEC, now_secs(), &raw);
    assert_envelope(
        &deliver_raw(&s, serde_json::to_vec(&tampered).unwrap(), Some(sig.clone())).await,
        400,
        "INVALID_SIGNATURE",
    );
    // (A project starts with the free plan's limits.)
    assert_eq!(p.session.get(&limits).await.json["transactional"], 100);

    // A subscription to the pro plan gives the project its limits.
    let r = deliver_raw(&s, raw.clone(), Some(sig.clone())).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json, json!({ "received": true }));
    let l = p.session.get(&limits).await.json;
    assert_eq!(l, json!({ "transactional": 50_000, "campaigns": 100_000, "workflows": null, "inbound": null }));
    // The same delivery again is a replay.
    assert_envelope(&deliver_raw(&s, raw, Some(sig)).await, 400, "INVALID_SIGNATURE");

    // Past due: the free plan's limits; the customer alone identifies the project from now on.
    let r = deliver(&s, &subscription("customer.subscription.updated", None, "past_due", "price_pro"), None).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let free = json!({ "transactional": 100, "campaigns": 100, "workflows": 100, "inbound": null });
    assert_eq!(p.session.get(&limits).await.json, free);
    deliver(&s, &subscription("customer.subscription.updated", None, "active", "price_pro"), None).await;
    assert_eq!(p.session.get(&limits).await.json["transactional"], 50_000);
    let r = deliver(&s, &subscription("customer.subscription.deleted", None, "canceled", "price_pro"), None).await;
    assert_eq!(r.status, 200);
    assert_eq!(p.session.get(&limits).await.json, free);

    // Events about no known project, or of other kinds, are acknowledged and ignored.
    let stranger = json!({ "id": "evt_x", "type": "customer.subscription.created", "data": { "object": {
        "id": "sub_9", "customer": "cus_unknown", "status": "active", "items": { "data": [{ "price": { "id": "price_pro" } }] } } } });
    assert_eq!(deliver(&s, &stranger, None).await.status, 200);
    assert_eq!(
        deliver(&s, &json!({ "id": "evt_y", "type": "invoice.paid", "data": { "object": {} } }), None).await.status,
        200
    );
    // The other project never changed: it keeps the free plan's limits it started with.
    let ql = q.session.get(&format!("/users/@me/projects/{}/billing-limits", q.id)).await.json;
    assert_eq!(ql, free);
}

/// `event` with its `created` time (seconds).
fn created(mut event: Value, at: i64) -> Value {
    event["created"] = json!(at);
    event
}

#[tokio::test]
async fn a_replay_is_known_by_its_event_id_whatever_the_signature_looks_like() {
    let (s, _stub) = env().await;
    let p = proj(&s, "owner@example.com").await;
    let limits = format!("/users/@me/projects/{}/billing-limits", p.id);
    let started =
        created(subscription("customer.subscription.created", Some(&p.id), "active", "price_pro"), now_secs());
    let raw = serde_json::to_vec(&started).unwrap();
    let sig = herald_host::infra::stripe::sign(WHSEC, now_secs(), &raw);
    assert_eq!(deliver_raw(&s, raw.clone(), Some(sig.clone())).await.status, 200);

    // The same signature in capitals is the same signature.
    let (t, v1) = sig.split_once(",v1=").unwrap();
    let shouting = format!("{t},v1={}", v1.to_uppercase());
    assert_envelope(&deliver_raw(&s, raw.clone(), Some(shouting)).await, 400, "INVALID_SIGNATURE");
    // The same event signed again (a fresh timestamp, so a new signature) is a replay too.
    let again = herald_host::infra::stripe::sign(WHSEC, now_secs() + 1, &raw);
    assert_envelope(&deliver_raw(&s, raw, Some(again)).await, 400, "INVALID_SIGNATURE");

    // Meanwhile the subscription ended: a replay of its start must not bring the paid plan back.
    let ended = created(subscription("customer.subscription.deleted", None, "canceled", "price_pro"), now_secs() + 5);
    assert_eq!(deliver(&s, &ended, None).await.status, 200);
    let free = json!({ "transactional": 100, "campaigns": 100, "workflows": 100, "inbound": null });
    assert_eq!(p.session.get(&limits).await.json, free);
}

#[tokio::test]
async fn an_event_older_than_the_last_applied_to_its_subscription_is_ignored() {
    let (s, _stub) = env().await;
    let p = proj(&s, "owner@example.com").await;
    let limits = format!("/users/@me/projects/{}/billing-limits", p.id);
    let t = now_secs();
    let pro = json!({ "transactional": 50_000, "campaigns": 100_000, "workflows": null, "inbound": null });
    let free = json!({ "transactional": 100, "campaigns": 100, "workflows": 100, "inbound": null });
    let active = created(subscription("customer.subscription.updated", Some(&p.id), "active", "price_pro"), t - 60);
    assert_eq!(deliver(&s, &active, None).await.status, 200);
    assert_eq!(p.session.get(&limits).await.json, pro);
    let deleted = created(subscription("customer.subscription.deleted", Some(&p.id), "canceled", "price_pro"), t - 10);
    assert_eq!(deliver(&s, &deleted, None).await.status, 200);
    assert_eq!(p.session.get(&limits).await.json, free);

    // An `active` created before the deletion (another event id, delivered late or replayed) changes
    // nothing, and is acknowledged so the provider stops sending it.
    let late = created(subscription("customer.subscription.updated", Some(&p.id), "active", "price_pro"), t - 30);
    let r = deliver(&s, &late, None).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(p.session.get(&limits).await.json, free);
    // A newer one applies.
    let renewed = created(subscription("customer.subscription.created", Some(&p.id), "active", "price_pro"), t);
    assert_eq!(deliver(&s, &renewed, None).await.status, 200);
    assert_eq!(p.session.get(&limits).await.json, pro);

    // What is remembered of the subscription goes with its project.
    let kept = || async {
        let q = "SELECT count() AS n FROM payment_subscription WHERE project = $p GROUP ALL";
        let v = s.state.store.query(q, json!({ "p": p.id })).await.unwrap().value(0).unwrap();
        v[0]["n"].as_i64().unwrap_or(0)
    };
    assert_eq!(kept().await, 1);
    assert_eq!(p.session.delete(&format!("/users/@me/projects/{}", p.id)).await.status, 200);
    for _ in 0..200 {
        if kept().await == 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the deleted project's subscription records stayed");
}

#[tokio::test]
async fn checkout_while_a_subscription_is_active_is_409_with_the_portal_link() {
    let (s, stub) = env().await;
    let p = proj(&s, "owner@example.com").await;
    let base = format!("/users/@me/projects/{}", p.id);
    assert_eq!(p.session.post(&format!("{base}/checkout"), json!({ "plan": "pro" })).await.status, 200);
    let active = created(subscription("customer.subscription.created", Some(&p.id), "active", "price_pro"), now_secs());
    assert_eq!(deliver(&s, &active, None).await.status, 200);
    let sessions = |stub: &HttpSink| stub.requests().iter().filter(|r| r.path == "/v1/checkout/sessions").count();
    assert_eq!(sessions(&stub), 1);

    let r = p.session.post(&format!("{base}/checkout"), json!({ "plan": "pro" })).await;
    assert_envelope(&r, 409, "SUBSCRIPTION_ACTIVE");
    assert_eq!(r.json["error"]["details"]["portalUrl"], "https://billing.stripe.test/p/bps_1", "{}", r.json);
    assert_eq!(sessions(&stub), 1, "no second subscription was started");

    // Once it ended, a new checkout is possible.
    let ended = created(subscription("customer.subscription.deleted", None, "canceled", "price_pro"), now_secs() + 1);
    assert_eq!(deliver(&s, &ended, None).await.status, 200);
    assert_eq!(p.session.post(&format!("{base}/checkout"), json!({ "plan": "pro" })).await.status, 200);
}

#[tokio::test]
async fn the_plan_is_the_ceiling_of_a_projects_limits() {
    let (s, _stub) = env().await;
    let p = proj(&s, "owner@example.com").await;
    let limits = format!("/users/@me/projects/{}/billing-limits", p.id);

    // A new project has the free plan's limits from the start.
    let free = json!({ "transactional": 100, "campaigns": 100, "workflows": 100, "inbound": null });
    assert_eq!(p.session.get(&limits).await.json, free);
    // An OWNER may lower them, not raise them past the plan, nor lift them.
    let r = p.session.put(&limits, json!({ "transactional": 40, "inbound": 5 })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json, json!({ "transactional": 40, "campaigns": 100, "workflows": 100, "inbound": 5 }));
    for body in [json!({ "transactional": 101 }), json!({ "campaigns": null })] {
        let field = body.as_object().unwrap().keys().next().unwrap().clone();
        let r = p.session.put(&limits, body).await;
        assert_envelope(&r, 422, "VALIDATION_ERROR");
        assert_eq!(r.json["error"]["errors"][0]["field"], field.as_str());
        let m = r.json["error"]["errors"][0]["message"].as_str().unwrap();
        assert!(m.contains("free") && m.contains("100"), "{m}");
    }
    // The project's sending is held to what the OWNER set.
    assert_eq!(p.session.put(&limits, json!({ "transactional": 2 })).await.status, 200);
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let body = json!({ "to": ["a@example.org", "b@example.org", "c@example.org"], "from": "hi@shop.test",
        "subject": "Hi", "body": "<p>Hi</p>" });
    assert_envelope(&p.secret.post("/v1/send", body).await, 402, "BILLING_LIMIT_EXCEEDED");
    // Back up to the plan's limit is allowed.
    assert_eq!(p.session.put(&limits, json!({ "transactional": 100 })).await.status, 200);

    // A paid plan raises the ceiling to its own limits.
    let active = created(subscription("customer.subscription.created", Some(&p.id), "active", "price_pro"), now_secs());
    assert_eq!(deliver(&s, &active, None).await.status, 200);
    assert_eq!(p.session.put(&limits, json!({ "workflows": 7 })).await.status, 200);
    let r = p.session.put(&limits, json!({ "transactional": 50_001 })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert!(r.json["error"]["errors"][0]["message"].as_str().unwrap().contains("pro"), "{}", r.json);
    assert_eq!(p.session.put(&limits, json!({ "transactional": 50_000 })).await.status, 200);
}
