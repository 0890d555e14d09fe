//! `/v1/track`, idempotency keys, the event endpoints and the event stream (docs/behaviour.md#events,
//! docs/behaviour.md#idempotency, docs/behaviour.md#keys-and-authentication).

use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use herald_host::services::events::{Subscriber, SubscriberFuture};
use herald_host::store::events::Event;
use serde_json::json;

use crate::harness::*;

#[tokio::test]
async fn track_creates_the_contact_and_records_the_event_with_one_off_values() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let r = p
        .public
        .post(
            "/v1/track",
            json!({ "email": "New@Example.com", "event": "signed-up", "data": { "plan": "pro", "coupon": { "value": "X1", "persistent": false }, "id": "dropped" } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["success"], true);
    let contact = r.json["data"]["contact"].as_str().unwrap().to_string();
    let event = r.json["data"]["event"].as_str().unwrap().to_string();
    assert!(r.json["data"]["timestamp"].as_str().unwrap().ends_with('Z'));

    let c = p.secret.get(&format!("/contacts/{contact}")).await;
    assert_eq!(c.json["email"], "new@example.com");
    assert_eq!(c.json["subscribed"], true, "track creates subscribed contacts");
    assert_eq!(c.json["data"], json!({ "plan": "pro" }), "one-off values are not stored");

    let e = p.secret.get("/events").await;
    assert_eq!(e.json["data"][0]["id"], event.as_str());
    assert_eq!(e.json["data"][0]["name"], "signed-up");
    assert_eq!(e.json["data"][0]["contactId"], contact.as_str());
    assert_eq!(e.json["data"][0]["contactEmail"], "new@example.com", "the contact's email beside its id");
    assert_eq!(
        p.secret.get(&format!("/events/contact/{contact}")).await.json["data"][0]["contactEmail"],
        "new@example.com"
    );
    assert_eq!(e.json["data"][0]["source"], "api");
    assert_eq!(e.json["data"][0]["data"], json!({ "plan": "pro", "coupon": "X1" }));

    // Re-tracking the same event creates a new record.
    let r2 = p.secret.post("/v1/track", json!({ "email": "new@example.com", "event": "signed-up" })).await;
    assert_eq!(r2.status, 200);
    assert_ne!(r2.json["data"]["event"], event.as_str());
    assert_eq!(r2.json["data"]["contact"], contact.as_str());
    assert_eq!(p.secret.get("/events?name=signed-up").await.json["total"], 2);
    s.stop().await;
}

#[tokio::test]
async fn track_validation_and_reserved_names() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    for name in [
        "email.sent",
        "email.open",
        "contact.subscribed",
        "contact.unsubscribed",
        "segment.vip.entry",
        "segment.vip.exit",
        "workflow.started",
        "workflow.custom",
    ] {
        let r = p.public.post("/v1/track", json!({ "email": "a@example.com", "event": name })).await;
        assert_envelope(&r, 422, "VALIDATION_ERROR");
        assert_eq!(r.json["error"]["errors"][0]["field"], "event");
        assert_eq!(r.json["error"]["errors"][0]["code"], "reserved_event", "{name}");
    }
    let r = p.public.post("/v1/track", json!({ "event": "x" })).await;
    assert_eq!(
        r.json["error"]["errors"][0],
        json!({ "field": "email", "code": "required", "message": "email is required", "received": null })
    );
    let r = p.public.post("/v1/track", json!({ "email": "a@example.com", "event": "  " })).await;
    assert_eq!(r.json["error"]["errors"][0]["field"], "event");
    let r = p.public.post("/v1/track", json!({ "email": "a@example.com", "event": "x", "data": "str" })).await;
    assert_eq!(r.json["error"]["errors"][0]["code"], "invalid_type");
    assert_eq!(p.secret.get("/contacts").await.json["total"], 0, "nothing stored on a refused request");
    s.stop().await;
}

#[tokio::test]
async fn track_subscription_rules() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let t = |sub: Option<bool>| {
        let mut b = json!({ "email": "a@example.com", "event": "visit" });
        if let Some(v) = sub {
            b["subscribed"] = json!(v);
        }
        b
    };
    let r = p.public.post("/v1/track", t(Some(false))).await;
    let id = r.json["data"]["contact"].as_str().unwrap().to_string();
    let path = format!("/contacts/{id}");
    let get = || p.secret.get(&path);
    assert_eq!(get().await.json["subscribed"], false, "a new contact takes subscribed=false");
    p.public.post("/v1/track", t(None)).await;
    assert_eq!(get().await.json["subscribed"], false, "omitted keeps the state");
    p.public.post("/v1/track", t(Some(false))).await;
    assert_eq!(get().await.json["subscribed"], false, "false never resubscribes");
    let names = |r: Resp| -> Vec<String> {
        r.json["data"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(names(p.secret.get(&format!("/events/contact/{id}")).await), vec!["visit"; 3]);
    p.public.post("/v1/track", t(Some(true))).await;
    assert_eq!(get().await.json["subscribed"], false, "the public key never re-subscribes");
    p.secret.post("/v1/track", t(Some(true))).await;
    assert_eq!(get().await.json["subscribed"], true, "the secret key does");
    let got = names(p.secret.get(&format!("/events/contact/{id}")).await);
    assert!(got.contains(&"contact.subscribed".to_string()), "{got:?}");
    assert_eq!(got.len(), 6);
    s.stop().await;
}

#[tokio::test]
async fn keys_missing_wrong_type_invalid_and_revoked_get_401() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    // Public key: only track.
    assert_eq!(p.public.post("/v1/track", json!({ "email": "a@example.com", "event": "x" })).await.status, 200);
    let r = p.public.get("/contacts").await;
    assert_envelope(&r, 401, "INVALID_API_KEY");
    assert!(
        r.json["error"]["message"].as_str().unwrap().contains("secret key is required")
            || r.json["error"]["message"].as_str().unwrap().contains("requires a secret key")
    );
    assert_envelope(&p.public.get("/events").await, 401, "INVALID_API_KEY");
    // Secret key: everything, including track (docs/behaviour.md#keys-and-authentication).
    assert_eq!(p.secret.post("/v1/track", json!({ "email": "a@example.com", "event": "x" })).await.status, 200);
    // Missing and malformed keys.
    assert_envelope(&s.client().get("/contacts").await, 401, "MISSING_AUTH");
    assert_envelope(&s.client().post("/v1/track", json!({})).await, 401, "MISSING_AUTH");
    assert_envelope(&s.with_key("sk_nope").get("/contacts").await, 401, "INVALID_API_KEY");
    let unknown = format!("sk_{}", "0".repeat(64));
    assert_envelope(&s.with_key(&unknown).get("/contacts").await, 401, "INVALID_API_KEY");
    // Regeneration revokes both old keys at once.
    let r = p.session.post(&format!("/users/@me/projects/{}/regenerate-keys", p.id), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let (new_pk, new_sk) = (r.json["public"].as_str().unwrap(), r.json["secret"].as_str().unwrap());
    assert_ne!(new_sk, p.json["secret"].as_str().unwrap());
    assert_envelope(&p.secret.get("/contacts").await, 401, "INVALID_API_KEY");
    assert_envelope(
        &p.public.post("/v1/track", json!({ "email": "a@example.com", "event": "x" })).await,
        401,
        "INVALID_API_KEY",
    );
    assert_eq!(s.with_key(new_sk).get("/contacts").await.status, 200);
    assert_eq!(
        s.with_key(new_pk).post("/v1/track", json!({ "email": "a@example.com", "event": "x" })).await.status,
        200
    );
    // A deleted project's keys stop working.
    p.session.delete(&format!("/users/@me/projects/{}", p.id)).await;
    assert_envelope(&s.with_key(new_sk).get("/contacts").await, 401, "INVALID_API_KEY");
    s.stop().await;
}

#[tokio::test]
async fn a_dashboard_session_with_x_project_id_reaches_project_resources() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let other = proj(&s, "other@example.com").await;
    p.secret.post("/contacts", json!({ "email": "a@example.com" })).await;
    let mut c = p.session.clone();
    c.project = Some(p.id.clone());
    assert_eq!(c.get("/contacts").await.json["total"], 1);
    assert_eq!(c.post("/events/track", json!({ "email": "a@example.com", "event": "x" })).await.status, 200);
    c.project = Some(other.id.clone());
    assert_envelope(&c.get("/contacts").await, 403, "FORBIDDEN");
    s.stop().await;
}

#[tokio::test]
async fn one_projects_key_never_reaches_another_projects_data() {
    let s = Server::start().await;
    let a = proj(&s, "a@example.com").await;
    let b = proj(&s, "b@example.com").await;
    let r = b
        .secret
        .post("/v1/track", json!({ "email": "secret@example.com", "event": "b-only", "data": { "x": 1 } }))
        .await;
    let b_contact = r.json["data"]["contact"].as_str().unwrap().to_string();
    // Reads.
    assert_envelope(&a.secret.get(&format!("/contacts/{b_contact}")).await, 404, "CONTACT_NOT_FOUND");
    assert_eq!(a.secret.get("/contacts").await.json["total"], 0);
    assert_eq!(a.secret.get("/events").await.json["total"], 0);
    assert_envelope(&a.secret.get(&format!("/events/contact/{b_contact}")).await, 404, "CONTACT_NOT_FOUND");
    assert_eq!(a.secret.get("/events/names").await.json["count"], 0);
    assert_eq!(a.secret.get("/events/stats").await.json["total"], 0);
    assert_eq!(
        a.secret.post("/contacts/lookup", json!({ "emails": ["secret@example.com"] })).await.json["found"],
        json!([])
    );
    assert_eq!(a.secret.get("/contacts/fields").await.json["count"], 4);
    assert_eq!(a.secret.get("/contacts/fields/x/values").await.json["count"], 0);
    // Writes.
    assert_envelope(
        &a.secret.patch(&format!("/contacts/{b_contact}"), json!({ "data": { "x": 2 } })).await,
        404,
        "CONTACT_NOT_FOUND",
    );
    assert_envelope(&a.secret.delete(&format!("/contacts/{b_contact}")).await, 404, "CONTACT_NOT_FOUND");
    assert_eq!(a.secret.delete("/events/b-only").await.json["deleted"], 0);
    assert_eq!(a.secret.delete("/contacts/fields/x").await.json["contactsUpdated"], 0);
    // Upserting the same email in A makes A's own contact.
    let r = a.secret.post("/contacts", json!({ "email": "secret@example.com" })).await;
    assert_eq!(r.status, 201);
    assert_ne!(r.json["id"], b_contact.as_str());
    // B's data is intact.
    let r = b.secret.get(&format!("/contacts/{b_contact}")).await;
    assert_eq!(r.json["data"], json!({ "x": 1 }));
    assert_eq!(b.secret.get("/events?name=b-only").await.json["total"], 1);
    s.stop().await;
}

#[tokio::test]
async fn idempotency_key_reuse_conflicts_and_a_4xx_frees_the_key() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let send = |key: &str, body: serde_json::Value| {
        let c = p.secret.clone();
        let key = key.to_string();
        async move {
            let res = c
                .http
                .post(format!("{}/v1/track", c.base))
                .bearer_auth(c.bearer.as_deref().unwrap())
                .header("Idempotency-Key", key)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = res.status().as_u16();
            (status, res.json::<serde_json::Value>().await.unwrap())
        }
    };
    let ok = json!({ "email": "a@example.com", "event": "paid" });
    let (st1, _) = send("order-1", ok.clone()).await;
    assert_eq!(st1, 200);
    let (st2, body) = send("order-1", ok.clone()).await;
    assert_eq!(st2, 409);
    assert_eq!(body["error"]["code"], "IDEMPOTENCY_KEY_REUSED");
    let d = &body["error"]["details"];
    assert_eq!(d["key"], "order-1");
    assert_eq!(d["originalRequest"], "POST /v1/track");
    assert_eq!(d["originalStatusCode"], 200);
    assert!(d["originalRequestAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(p.secret.get("/events?name=paid").await.json["total"], 1, "the reuse did not run");

    // A 4xx frees the key.
    let (st3, _) = send("order-2", json!({ "email": "bad", "event": "paid" })).await;
    assert_eq!(st3, 422);
    let (st4, _) = send("order-2", ok.clone()).await;
    assert_eq!(st4, 200);
    // Keys are scoped to the project.
    let q = proj(&s, "q@example.com").await;
    let res = q
        .secret
        .http
        .post(format!("{}/v1/track", s.base))
        .bearer_auth(q.secret.bearer.as_deref().unwrap())
        .header("Idempotency-Key", "order-1")
        .json(&ok)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    // Bad keys: 400.
    let (st5, body) = send(&"k".repeat(256), ok.clone()).await;
    assert_eq!(st5, 400, "{body}");
    let (st6, _) = send("", ok.clone()).await;
    assert_eq!(st6, 400);
    s.stop().await;
}

#[tokio::test]
async fn two_concurrent_requests_with_one_key_run_exactly_once() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let c = p.secret.clone();
        tasks.push(tokio::spawn(async move {
            c.http
                .post(format!("{}/v1/track", c.base))
                .bearer_auth(c.bearer.as_deref().unwrap())
                .header("Idempotency-Key", "same")
                .json(&json!({ "email": "a@example.com", "event": "charge" }))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.unwrap());
    }
    assert_eq!(codes.iter().filter(|c| **c == 200).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 409).count(), 9, "{codes:?}");
    assert_eq!(p.secret.get("/events?name=charge").await.json["total"], 1);
    s.stop().await;
}

#[tokio::test]
async fn idempotency_keys_expire_after_the_configured_time() {
    let s = Server::start_manual().await;
    let p = proj(&s, "o@example.com").await;
    let go = || async {
        p.secret
            .http
            .post(format!("{}/v1/track", s.base))
            .bearer_auth(p.secret.bearer.as_deref().unwrap())
            .header("Idempotency-Key", "k")
            .json(&json!({ "email": "a@example.com", "event": "e" }))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(go().await, 200);
    s.clock().advance(24 * 3_600_000 - 1);
    assert_eq!(go().await, 409);
    s.clock().advance(1);
    assert_eq!(go().await, 200, "expired after 24 h");
    s.stop().await;
}

#[tokio::test]
async fn event_endpoints_list_stats_names_usage_and_delete() {
    let s = Server::start_manual().await;
    let p = proj(&s, "o@example.com").await;
    let day = 86_400_000;
    for (i, name) in ["open", "open", "click", "open", "buy"].iter().enumerate() {
        s.clock().advance(day);
        p.secret.post("/v1/track", json!({ "email": format!("u{i}@example.com"), "event": name })).await;
    }
    let r = p.secret.get("/events?limit=2").await;
    assert_eq!(r.json["total"], 5);
    assert_eq!(r.json["data"][0]["name"], "buy", "newest first");
    assert_eq!(r.json["hasMore"], true);
    let next = p.secret.get(&format!("/events?limit=2&cursor={}", r.json["cursor"].as_str().unwrap())).await;
    assert_eq!(r.json["data"][1]["name"], "open");
    assert_eq!(next.json["data"][0]["name"], "click");
    assert_eq!(next.json["data"][1]["name"], "open");
    assert_eq!(next.json["total"], 0);

    let r = p.secret.get("/events/stats?days=3").await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["total"], 3, "{}", r.json);
    assert_eq!(r.json["byName"][0], json!({ "name": "buy", "count": 1 }));
    assert_eq!(r.json["byDay"].as_array().unwrap().iter().map(|d| d["count"].as_i64().unwrap()).sum::<i64>(), 3);
    let r = p.secret.get("/events/stats?days=30").await;
    assert_eq!(r.json["byName"][0], json!({ "name": "open", "count": 3 }));
    assert_envelope(&p.secret.get("/events/stats?from=yesterday").await, 400, "BAD_REQUEST");

    let r = p.secret.get("/events/names").await;
    assert_eq!(r.json["count"], 3);
    assert_eq!(r.json["names"][0]["name"], "open");
    assert_eq!(r.json["names"][0]["count"], 3);

    let r = p.secret.get("/events/open/usage").await;
    assert_eq!(
        r.json,
        json!({ "event": "open", "usedInSegments": [], "usedInWorkflows": [], "usedInCampaigns": [], "eventCount": 3 })
    );
    let r = p.secret.delete("/events/open").await;
    assert_eq!(r.json, json!({ "event": "open", "deleted": 3 }));
    assert_eq!(p.secret.get("/events").await.json["total"], 2);
    s.stop().await;
}

/// Records what it sees; fails the first `fail` calls, and the first call for an event named `fail_on`.
pub(crate) struct Recorder {
    seen: Mutex<Vec<Event>>,
    fail: Mutex<usize>,
    fail_on: Mutex<Option<String>>,
}

impl Recorder {
    pub(crate) fn new(fail: usize) -> Arc<Recorder> {
        Arc::new(Recorder { seen: Mutex::new(vec![]), fail: Mutex::new(fail), fail_on: Mutex::new(None) })
    }

    pub(crate) fn failing_once_on(name: &str) -> Arc<Recorder> {
        Arc::new(Recorder { seen: Mutex::new(vec![]), fail: Mutex::new(0), fail_on: Mutex::new(Some(name.into())) })
    }

    /// The names of the events seen, in order.
    pub(crate) fn names(&self) -> Vec<String> {
        self.seen.lock().unwrap().iter().map(|e| e.name.clone()).collect()
    }
}

impl Subscriber for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn handle<'a>(&'a self, event: &'a Event) -> SubscriberFuture<'a> {
        Box::pin(async move {
            let mut f = self.fail.lock().unwrap();
            if *f > 0 {
                *f -= 1;
                return Err("not now".into());
            }
            let mut on = self.fail_on.lock().unwrap();
            if on.as_deref() == Some(event.name.as_str()) {
                *on = None;
                return Err("not this one now".into());
            }
            self.seen.lock().unwrap().push(event.clone());
            Ok(())
        })
    }
}

#[tokio::test]
async fn every_stored_event_reaches_subscribers_at_least_once_even_after_failures() {
    let s = Server::start_stepped().await;
    let rec = Recorder::new(1);
    s.state.bus.subscribe(rec.clone());
    let p = proj(&s, "o@example.com").await;
    let r = p.public.post("/v1/track", json!({ "email": "a@example.com", "event": "one", "subscribed": false })).await;
    let contact = r.json["data"]["contact"].as_str().unwrap().to_string();
    p.secret.post("/v1/track", json!({ "email": "a@example.com", "event": "two", "subscribed": true })).await;
    // First dispatch run: the subscriber fails, nothing is lost, the job is retried later.
    let ran = s.worker.run_once(10).await.unwrap();
    assert!(
        ran.iter().any(|(j, o)| j.kind == "events.dispatch" && matches!(o, herald_host::infra::jobs::Outcome::Retried { .. })),
        "{ran:?}"
    );
    assert!(rec.seen.lock().unwrap().is_empty());
    s.clock().advance(1_000);
    s.worker.run_once(10).await.unwrap();
    let seen: Vec<(String, String)> =
        rec.seen.lock().unwrap().iter().map(|e| (e.name.clone(), e.source.clone())).collect();
    assert_eq!(
        seen,
        vec![
            ("one".into(), "api".into()),
            ("contact.subscribed".into(), "system".into()),
            ("two".into(), "api".into())
        ],
        "tracked and emitted events, in order"
    );
    assert!(rec.seen.lock().unwrap().iter().all(|e| e.contact == contact && e.project == p.id));
    // Nothing is delivered twice once acknowledged.
    s.clock().advance(10_000);
    s.worker.run_once(10).await.unwrap();
    assert_eq!(rec.seen.lock().unwrap().len(), 3);
    // The failed dispatch counted nothing; the one that removed them from the outbox counted each once.
    assert_eq!(top_events(&p).await, [("contact.subscribed".into(), 1), ("one".into(), 1), ("two".into(), 1)]);
    s.stop().await;
}

/// A subscriber that fails in the middle of one transaction's events gets the rest of them on the retry,
/// and not the ones it already had.
#[tokio::test]
async fn a_failure_mid_transaction_resumes_at_the_failed_event() {
    let s = Server::start_stepped().await;
    let rec = Recorder::failing_once_on("two");
    s.state.bus.subscribe(rec.clone());
    let p = proj(&s, "o@example.com").await;
    p.public.post("/v1/track", json!({ "email": "a@example.com", "event": "one", "subscribed": false })).await;
    // One transaction stores the emitted `contact.subscribed` and `two`.
    p.secret.post("/v1/track", json!({ "email": "a@example.com", "event": "two", "subscribed": true })).await;
    s.worker.run_once(10).await.unwrap();
    assert_eq!(rec.names(), vec!["one", "contact.subscribed"]);
    s.clock().advance(10_000);
    s.worker.run_once(10).await.unwrap();
    assert_eq!(rec.names(), vec!["one", "contact.subscribed", "two"]);
    assert!(s.state.store.undispatched_events(10).await.unwrap().is_empty());
    // The part handed out before the failure was counted with the progress, the rest after: once each.
    assert_eq!(top_events(&p).await, [("contact.subscribed".into(), 1), ("one".into(), 1), ("two".into(), 1)]);
    s.stop().await;
}

/// `/analytics/top-events` as (name, count) pairs.
async fn top_events(p: &Proj) -> Vec<(String, i64)> {
    let r = p.secret.get("/analytics/top-events").await;
    r.json["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e["count"].as_i64().unwrap()))
        .collect()
}

/// While nothing subscribes, dispatching leaves the outbox alone: the first subscriber still gets every
/// event stored before it came. (The application's own bus always has the workflow engine; this is a bus
/// of its own over the same database.)
#[tokio::test]
async fn with_no_subscriber_the_outbox_is_kept_for_the_first_one() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    p.public.post("/v1/track", json!({ "email": "a@example.com", "event": "early" })).await;
    let bus = herald_host::services::events::EventBus::default();
    let ctx = herald_host::infra::jobs::JobContext {
        id: "dispatch".into(),
        kind: "events.dispatch".into(),
        payload: json!({}),
        attempt: 1,
        store: s.state.store.clone(),
        clock: s.state.clock.clone(),
    };
    assert_eq!(bus.dispatch(&ctx).await.unwrap(), 0);
    let pending = s.state.store.undispatched_events(10).await.unwrap();
    assert_eq!(pending.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), vec!["early"]);

    let rec = Recorder::new(0);
    bus.subscribe(rec.clone());
    p.public.post("/v1/track", json!({ "email": "a@example.com", "event": "late" })).await;
    bus.dispatch(&ctx).await.unwrap();
    assert_eq!(rec.names(), vec!["early", "late"]);
    assert!(s.state.store.undispatched_events(10).await.unwrap().is_empty());
    s.stop().await;
}

#[tokio::test]
async fn events_stored_before_a_crash_are_dispatched_after_the_restart() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    p.public.post("/v1/track", json!({ "email": "a@example.com", "event": "before-crash" })).await;
    // The process dies before dispatching: a new application on the same database takes over.
    let store = s.state.store.clone();
    let clock = s.clock().clone();
    let mut config = herald_host::config::Config::for_tests();
    config.run_jobs = false;
    drop(s);
    let app = herald_host::App::from_store(
        config,
        store,
        Arc::new(clock.clone()),
        herald_host::infra::jobs::builtin_registry(),
    )
    .await
    .unwrap();
    let rec = Recorder::new(0);
    app.state.bus.subscribe(rec.clone());
    clock.advance(60_000);
    app.worker.run_once(10).await.unwrap();
    assert_eq!(rec.names(), vec!["before-crash"]);
}

#[tokio::test]
async fn the_request_after_the_limit_gets_429_and_other_projects_are_unaffected() {
    let s = Server::start_manual().await;
    let a = proj(&s, "a@example.com").await;
    let b = proj(&s, "b@example.com").await;
    let r = a.secret.get("/contacts?limit=1").await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.header("ratelimit-limit").as_deref(), Some("1000"));
    assert_eq!(r.header("ratelimit-remaining").as_deref(), Some("999"));
    assert!(r.header("ratelimit-reset").is_some());
    // The other 999 of the minute's budget, 16 at a time (the limit counts requests, not their order).
    let statuses: Vec<u16> = futures_util::stream::iter(1..1000)
        .map(|_| async { a.secret.get("/contacts?limit=1").await.status })
        .buffer_unordered(16)
        .collect()
        .await;
    assert_eq!(statuses.len(), 999);
    assert!(statuses.iter().all(|s| *s == 200), "every request within the limit succeeds: {statuses:?}");
    let r = a.public.post("/v1/track", json!({ "email": "x@example.com", "event": "e" })).await;
    assert_envelope(&r, 429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(r.header("retry-after").as_deref(), Some("1"));
    assert_eq!(r.header("ratelimit-remaining").as_deref(), Some("0"));
    assert_eq!(b.secret.get("/contacts").await.status, 200, "another project is unaffected");
    s.clock().advance(60_000);
    assert_eq!(a.secret.get("/contacts").await.status, 200, "the bucket refills");
    s.stop().await;
}

#[tokio::test]
async fn concurrent_tracking_is_grouped_without_losing_or_duplicating_anything() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let mut tasks = Vec::new();
    // 8 emails, 25 requests each, all at once: batches hold several requests for one contact.
    for i in 0..200 {
        let c = p.public.clone();
        tasks.push(tokio::spawn(async move {
            let body =
                json!({ "email": format!("u{}@example.com", i % 8), "event": "hit", "data": { format!("k{i}"): i } });
            c.post("/v1/track", body).await
        }));
    }
    // Meanwhile, the dashboard path changes the same contacts (forces batch fallbacks).
    for i in 0..8 {
        let c = p.secret.clone();
        tasks.push(tokio::spawn(async move {
            c.post("/contacts", json!({ "email": format!("u{i}@example.com"), "data": { "dash": true } })).await
        }));
    }
    let mut event_ids = std::collections::HashSet::new();
    for t in tasks {
        let r = t.await.unwrap();
        assert!(r.status == 200 || r.status == 201, "{}", r.json);
        if let Some(id) = r.json["data"]["event"].as_str() {
            assert!(event_ids.insert(id.to_string()), "event ids are unique");
        }
    }
    assert_eq!(event_ids.len(), 200);
    assert_eq!(p.secret.get("/events?name=hit").await.json["total"], 200, "every event stored once");
    let r = p.secret.get("/contacts?limit=100").await;
    assert_eq!(r.json["total"], 8, "one contact per email");
    for c in r.json["data"].as_array().unwrap() {
        let data = c["data"].as_object().unwrap();
        assert_eq!(data.len(), 26, "25 tracked keys and the dashboard key on {}: {:?}", c["email"], data.keys());
    }
    s.stop().await;
}

#[tokio::test]
async fn keys_regenerated_through_one_process_stop_working_in_another() {
    let mut config = herald_host::config::Config::for_tests();
    config.key_cache_check_ms = 50;
    let a = Server::start_with(config.clone(), None).await;
    let p = proj(&a, "o@example.com").await;
    // Process B shares A's database.
    let app = herald_host::App::from_store(
        config,
        a.state.store.clone(),
        Arc::new(herald_host::infra::clock::SystemClock),
        herald_host::infra::jobs::builtin_registry(),
    )
    .await
    .unwrap();
    let b = Server::serve(app, None).await;
    let old = p.json["secret"].as_str().unwrap();
    assert_eq!(b.with_key(old).get("/contacts").await.status, 200, "B has the key cached now");
    let r = p.session.post(&format!("/users/@me/projects/{}/regenerate-keys", p.id), json!({})).await;
    assert_eq!(r.status, 200);
    assert_envelope(&a.with_key(old).get("/contacts").await, 401, "INVALID_API_KEY");
    let mut refused = false;
    for _ in 0..100 {
        if b.with_key(old).get("/contacts").await.status == 401 {
            refused = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(refused, "B stops accepting the old key once it sees the new key epoch");
    assert_eq!(b.with_key(r.json["secret"].as_str().unwrap()).get("/contacts").await.status, 200);
    b.stop().await;
    a.stop().await;
}
