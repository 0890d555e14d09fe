//! Outbound webhooks (docs/behaviour.md#webhooks): endpoints with their errors and limits, one
//! project's key never reaching another's endpoints, events delivered signed the Standard Webhooks way
//! (checked with the specification's own library), retried on the schedule until the endpoint answers,
//! marked FAILED after the last attempt, an endpoint failing for three days disabled, manual retries and
//! test deliveries, and private addresses refused unless the operator allows them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use herald_host::config::Config;
use herald_host::infra::clock::ManualClock;
use serde_json::{Value, json};
use standardwebhooks::Webhook;

use crate::harness::*;
use crate::http_sink::{self, HttpSink, Received};
use crate::workflow_kit::drain;

/// A server whose webhooks may call loopback, with a manual clock and no job workers.
async fn stepped() -> Server {
    let mut config = Config::for_tests();
    config.run_jobs = false;
    config.webhooks_allow_private = true;
    Server::start_with(config, Some(ManualClock::new(1_800_000_000_000))).await
}

/// Lets the event dispatch come due and runs the queue until nothing is due.
async fn settle(s: &Server) {
    for _ in 0..3 {
        s.clock().advance(1_000);
        drain(s).await;
    }
}

async fn track(p: &Proj, email: &str, event: &str) {
    let r = p.secret.post("/v1/track", json!({ "email": email, "event": event, "data": { "plan": "pro" } })).await;
    assert_eq!(r.status, 200, "{}", r.json);
}

async fn endpoint(p: &Proj, url: &str, events: Value) -> (String, String) {
    let r = p.secret.post("/webhooks", json!({ "url": url, "events": events })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    (r.json["id"].as_str().unwrap().to_string(), r.json["secret"].as_str().unwrap().to_string())
}

async fn deliveries(p: &Proj, id: &str) -> Vec<Value> {
    let r = p.secret.get(&format!("/webhooks/{id}/deliveries")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["data"].as_array().unwrap().clone()
}

/// Whether the Standard Webhooks library, given the secret, signs `got` as Herald did.
fn signed_by(secret: &str, got: &Received) -> bool {
    let wh = Webhook::new(secret).unwrap();
    let id = got.header("webhook-id").unwrap();
    let ts: i64 = got.header("webhook-timestamp").unwrap().parse().unwrap();
    got.header("webhook-signature") == Some(wh.sign(id, ts, &got.body).unwrap().as_str())
}

/// A receiver that answers `status` while `failing` holds, else 200, counting requests.
async fn receiver(failing: Arc<AtomicBool>, status: u16) -> HttpSink {
    http_sink::start_with(Arc::new(move |_: &str, _: &str| {
        if failing.load(Ordering::SeqCst) { (status, r#"{"error":"down"}"#.into()) } else { (200, "{}".into()) }
    }))
    .await
}

#[tokio::test]
async fn endpoints_are_managed_with_errors_by_field_and_one_projects_key_never_reaches_anothers() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let other = proj(&s, "x@example.com").await;
    let c = &p.secret;
    for (body, field) in [
        (json!({ "events": ["email.*"] }), "url"),
        (json!({ "url": "ftp://hooks.example.com/", "events": ["email.*"] }), "url"),
        (json!({ "url": "https://u:p@hooks.example.com/", "events": ["email.*"] }), "url"),
        (json!({ "url": "http://127.0.0.1:9/", "events": ["email.*"] }), "url"),
        (json!({ "url": "http://[::1]/", "events": ["email.*"] }), "url"),
        (json!({ "url": "http://10.1.2.3/", "events": ["email.*"] }), "url"),
        (json!({ "url": "https://hooks.example.com/" }), "events"),
        (json!({ "url": "https://hooks.example.com/", "events": [] }), "events"),
        (json!({ "url": "https://hooks.example.com/", "events": "email.*" }), "events"),
        (json!({ "url": "https://hooks.example.com/", "events": ["a b"] }), "events"),
        (json!({ "url": "https://hooks.example.com/", "events": ["x"], "enabled": "yes" }), "enabled"),
    ] {
        let r = c.post("/webhooks", body.clone()).await;
        assert_eq!(r.status, 422, "{body}: {}", r.json);
        assert_eq!(r.json["error"]["errors"][0]["field"], field, "{body}: {}", r.json);
    }
    for url in [
        "http://127.0.0.1:9/",
        // IPv4-translated (SIIT), the 6to4 relay anycast, the discard-only prefix, Azure's wire server
        "http://[::ffff:0:7f00:1]/",
        "http://192.88.99.1/",
        "http://[100::1]/",
        "http://168.63.129.16/",
    ] {
        let r = c.post("/webhooks", json!({ "url": url, "events": ["x"] })).await;
        assert_eq!(r.status, 422, "{url}: {}", r.json);
        assert_eq!(r.json["error"]["errors"][0]["code"], "private_address", "{url}: {}", r.json);
    }

    let r = c
        .post(
            "/webhooks",
            json!({ "url": "https://hooks.example.com/herald", "events": ["email.*", "signup"], "description": "CRM" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    let id = r.json["id"].as_str().unwrap().to_string();
    let secret = r.json["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_") && Webhook::new(&secret).is_ok(), "{secret}");
    assert_eq!(r.json["enabled"], true);
    assert_eq!(r.json["events"], json!(["email.*", "signup"]));

    let r = c.get(&format!("/webhooks/{id}")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert!(r.json.get("secret").is_none(), "the secret is shown once: {}", r.json);
    assert_eq!(r.json["description"], "CRM");
    let r = c.get("/webhooks").await;
    assert_eq!(r.json["data"].as_array().map(Vec::len), Some(1), "{}", r.json);
    assert!(r.json["data"][0].get("secret").is_none());

    let r =
        c.patch(&format!("/webhooks/{id}"), json!({ "events": ["*"], "description": null, "enabled": false })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["events"], json!(["*"]));
    assert_eq!(r.json["description"], Value::Null);
    assert_eq!(r.json["enabled"], false);
    let r = c.patch(&format!("/webhooks/{id}"), json!({ "url": "gopher://x" })).await;
    assert_eq!(r.status, 422, "{}", r.json);
    let r = c.post(&format!("/webhooks/{id}/rotate-secret"), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let rotated = r.json["secret"].as_str().unwrap();
    assert!(rotated.starts_with("whsec_") && rotated != secret, "{rotated}");

    // Another project's key finds none of it.
    let o = &other.secret;
    assert_eq!(o.get("/webhooks").await.json["data"], json!([]));
    for (method, path) in [
        ("GET", format!("/webhooks/{id}")),
        ("PATCH", format!("/webhooks/{id}")),
        ("DELETE", format!("/webhooks/{id}")),
        ("POST", format!("/webhooks/{id}/rotate-secret")),
        ("POST", format!("/webhooks/{id}/test")),
        ("GET", format!("/webhooks/{id}/deliveries")),
        ("POST", format!("/webhooks/{id}/deliveries/{id}/retry")),
    ] {
        let r = o.send(method, &path, Some(json!({ "enabled": true }))).await;
        assert_eq!(r.status, 404, "{method} {path}: {}", r.json);
        assert_eq!(r.json["error"]["code"], "WEBHOOK_NOT_FOUND", "{method} {path}: {}", r.json);
    }
    assert_eq!(c.get(&format!("/webhooks/{id}")).await.json["enabled"], false, "another key changed it");
    let r = c.get(&format!("/webhooks/{id}/deliveries?status=LOST")).await;
    assert_eq!(r.status, 400, "{}", r.json);
    let r = c.post(&format!("/webhooks/{id}/deliveries/nothing/retry"), json!({})).await;
    assert_eq!(r.json["error"]["code"], "DELIVERY_NOT_FOUND", "{}", r.json);

    // At most twenty per project.
    for i in 1..20 {
        let r = c.post("/webhooks", json!({ "url": format!("https://h{i}.example.com/"), "events": ["x"] })).await;
        assert_eq!(r.status, 201, "{}", r.json);
    }
    let r = c.post("/webhooks", json!({ "url": "https://h21.example.com/", "events": ["x"] })).await;
    assert_eq!(r.status, 409, "{}", r.json);

    let r = c.delete(&format!("/webhooks/{id}")).await;
    assert_eq!(r.status, 204);
    assert_eq!(c.get(&format!("/webhooks/{id}")).await.status, 404);
}

#[tokio::test]
async fn an_event_is_delivered_signed_and_retried_on_the_schedule_until_the_endpoint_answers() {
    let s = stepped().await;
    let p = proj(&s, "o@example.com").await;
    let failing = Arc::new(AtomicBool::new(true));
    let sink = receiver(failing.clone(), 500).await;
    let (id, secret) = endpoint(&p, &sink.url("/hook"), json!(["signup", "contact.*"])).await;
    track(&p, "ann@example.com", "signup").await;
    track(&p, "ann@example.com", "page_view").await;
    settle(&s).await;

    let got = sink.requests();
    assert_eq!(got.len(), 1, "one wanted event, one attempt");
    assert_eq!(got[0].method, "POST");
    assert_eq!(got[0].path, "/hook");
    assert!(signed_by(&secret, &got[0]), "the signature does not verify");
    let body: Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body["type"], "signup");
    assert_eq!(body["data"]["contact"]["email"], "ann@example.com");
    assert_eq!(body["data"]["data"]["plan"], "pro");
    let event = got[0].header("webhook-id").unwrap().to_string();
    assert_eq!(body["data"]["id"], event.as_str());

    let d = deliveries(&p, &id).await;
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0]["id"], event.as_str());
    assert_eq!(d[0]["status"], "PENDING");
    assert_eq!(d[0]["attempts"][0]["statusCode"], 500);
    assert!(d[0]["nextAttemptAt"].is_string(), "{}", d[0]);
    let r = p.secret.post(&format!("/webhooks/{id}/deliveries/{event}/retry"), json!({})).await;
    assert_eq!(r.status, 409, "a waiting delivery is retried by hand: {}", r.json);

    // Not before its time: the second attempt comes 5 s after the first, the third 5 min later.
    drain(&s).await;
    assert_eq!(sink.requests().len(), 1);
    s.clock().advance(5_000);
    drain(&s).await;
    assert_eq!(sink.requests().len(), 2);
    failing.store(false, Ordering::SeqCst);
    s.clock().advance(299_000);
    drain(&s).await;
    assert_eq!(sink.requests().len(), 2, "the third attempt came early");
    s.clock().advance(1_000);
    drain(&s).await;
    let got = sink.requests();
    assert_eq!(got.len(), 3);
    for g in &got {
        assert_eq!(g.header("webhook-id"), Some(event.as_str()), "every attempt carries the event's id");
        assert_eq!(g.body, got[0].body, "every attempt sends the same body");
        assert!(signed_by(&secret, g));
    }
    assert_ne!(got[0].header("webhook-timestamp"), got[2].header("webhook-timestamp"));
    let d = deliveries(&p, &id).await;
    assert_eq!(d[0]["status"], "SUCCEEDED", "{}", d[0]);
    assert_eq!(d[0]["attempts"].as_array().map(Vec::len), Some(3));
    assert_eq!(d[0]["attempts"][2]["statusCode"], 200);
    assert_eq!(d[0]["nextAttemptAt"], Value::Null);

    // The event handed out again adds no delivery.
    settle(&s).await;
    assert_eq!(deliveries(&p, &id).await.len(), 1);
    assert_eq!(sink.requests().len(), 3);
}

#[tokio::test]
async fn deleting_an_endpoint_with_attempts_waiting_loses_no_other_tenants_delivery() {
    let s = stepped().await;
    let (a, b) = (proj(&s, "a@example.com").await, proj(&s, "b@example.com").await);
    let down = receiver(Arc::new(AtomicBool::new(true)), 500).await;
    let b_failing = Arc::new(AtomicBool::new(true));
    let up = receiver(b_failing.clone(), 500).await;
    let (a_hook, _) = endpoint(&a, &down.url("/a"), json!(["*"])).await;
    let (b_hook, _) = endpoint(&b, &up.url("/b"), json!(["*"])).await;
    // Both endpoints fail their first attempts: A's five retries and B's three come due together.
    for n in 0..5 {
        track(&a, &format!("a{n}@example.com"), "ping").await;
    }
    for n in 0..3 {
        track(&b, &format!("b{n}@example.com"), "ping").await;
    }
    settle(&s).await;
    assert_eq!((down.requests().len(), up.requests().len()), (5, 3));
    let r = a.secret.delete(&format!("/webhooks/{a_hook}")).await;
    assert_eq!(r.status, 204, "{}", r.json);
    b_failing.store(false, Ordering::SeqCst);
    // B's retries are claimed with A's orphaned ones.
    s.clock().advance(5_000);
    drain(&s).await;
    settle(&s).await;
    assert_eq!(up.requests().len(), 6, "each of B's events arrives at its second attempt");
    let d = deliveries(&b, &b_hook).await;
    assert_eq!(d.len(), 3, "{d:?}");
    assert!(d.iter().all(|d| d["status"] == "SUCCEEDED" && d["attempts"].as_array().map(Vec::len) == Some(2)), "{d:?}");
    assert_eq!(down.requests().len(), 5, "a deleted endpoint is not called");
}

#[tokio::test]
async fn a_failing_endpoint_gives_up_after_a_day_and_is_disabled_after_three() {
    let s = stepped().await;
    let p = proj(&s, "o@example.com").await;
    let failing = Arc::new(AtomicBool::new(true));
    let sink = receiver(failing.clone(), 503).await;
    let (id, _) = endpoint(&p, &sink.url("/"), json!(["*"])).await;
    track(&p, "ann@example.com", "first").await;
    settle(&s).await;
    for delay in [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 28_800_000, 28_800_000] {
        s.clock().advance(delay);
        drain(&s).await;
    }
    assert_eq!(sink.requests().len(), 8, "eight attempts over a day");
    let d = deliveries(&p, &id).await;
    assert_eq!(d[0]["status"], "FAILED", "{}", d[0]);
    assert_eq!(d[0]["nextAttemptAt"], Value::Null);
    let first = d[0]["id"].as_str().unwrap().to_string();
    let w = p.secret.get(&format!("/webhooks/{id}")).await.json;
    assert_eq!(w["enabled"], true, "disabled before three days: {w}");
    assert!(w["failingSince"].is_string(), "{w}");

    // Two and a half days later, another failure: failing for over three days, it is disabled.
    s.clock().advance(60 * 3_600_000);
    track(&p, "ann@example.com", "second").await;
    settle(&s).await;
    let w = p.secret.get(&format!("/webhooks/{id}")).await.json;
    assert_eq!(w["enabled"], false, "{w}");
    assert!(w["disabledReason"].as_str().is_some_and(|r| r.contains("3 days") && r.contains("503")), "{w}");
    // Its waiting delivery fails without an attempt; new events make none.
    s.clock().advance(5_000);
    drain(&s).await;
    let n = sink.requests().len();
    assert_eq!(n, 9);
    track(&p, "ann@example.com", "third").await;
    settle(&s).await;
    let d = deliveries(&p, &id).await;
    assert_eq!(d.len(), 2, "a disabled endpoint got a delivery: {d:?}");
    assert!(d.iter().all(|d| d["status"] == "FAILED"), "{d:?}");

    // A retry by hand is one attempt, even while disabled; enabling clears the failure.
    failing.store(false, Ordering::SeqCst);
    let r = p.secret.post(&format!("/webhooks/{id}/deliveries/{first}/retry"), json!({})).await;
    assert_eq!(r.status, 202, "{}", r.json);
    assert_eq!(r.json["status"], "PENDING");
    drain(&s).await;
    assert_eq!(sink.requests().len(), n + 1);
    let d = deliveries(&p, &id).await;
    let again = d.iter().find(|d| d["id"] == first.as_str()).unwrap();
    assert_eq!(again["status"], "SUCCEEDED", "{again}");
    assert_eq!(again["attempts"].as_array().map(Vec::len), Some(9));
    let r = p.secret.patch(&format!("/webhooks/{id}"), json!({ "enabled": true })).await;
    assert_eq!(r.json["enabled"], true, "{}", r.json);
    assert_eq!(r.json["disabledReason"], Value::Null);
    assert_eq!(r.json["failingSince"], Value::Null);
}

#[tokio::test]
async fn deliveries_verify_with_the_specifications_library_and_a_test_is_sent_at_once() {
    let mut config = Config::for_tests();
    config.webhooks_allow_private = true;
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let sink = http_sink::start_with(Arc::new(move |_: &str, _: &str| {
        counted.fetch_add(1, Ordering::SeqCst);
        (204, String::new())
    }))
    .await;
    let (id, secret) = endpoint(&p, &sink.url("/in"), json!(["signup"])).await;
    track(&p, "bo@example.com", "signup").await;
    let mut got = Vec::new();
    for _ in 0..200 {
        got = sink.requests();
        if !got.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(got.len(), 1, "the event was not delivered");
    let mut headers = reqwest::header::HeaderMap::new();
    for (k, v) in &got[0].headers {
        if let (Ok(k), Ok(v)) =
            (reqwest::header::HeaderName::from_bytes(k.as_bytes()), reqwest::header::HeaderValue::from_str(v))
        {
            headers.insert(k, v);
        }
    }
    Webhook::new(&secret).unwrap().verify(&got[0].body, &headers).expect("the library verifies the delivery");

    // A rotated secret signs from then on; the old one no longer verifies.
    let r = p.secret.post(&format!("/webhooks/{id}/rotate-secret"), json!({})).await;
    let rotated = r.json["secret"].as_str().unwrap().to_string();
    let r = p.secret.post(&format!("/webhooks/{id}/test"), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["status"], "SUCCEEDED", "{}", r.json);
    assert_eq!(r.json["eventType"], "webhook.test");
    assert_eq!(r.json["attempts"][0]["statusCode"], 204);
    let got = sink.requests();
    assert_eq!(got.len(), 2);
    assert!(signed_by(&rotated, &got[1]) && !signed_by(&secret, &got[1]));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn without_the_operators_leave_a_name_that_resolves_to_loopback_is_not_called() {
    let mut config = Config::for_tests();
    config.run_jobs = false;
    let s = Server::start_with(config, Some(ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "o@example.com").await;
    let sink = http_sink::start(200, "{}").await;
    let (id, _) = endpoint(&p, &format!("http://localhost:{}/", sink.addr.port()), json!(["*"])).await;
    let r = p.secret.post(&format!("/webhooks/{id}/test"), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["status"], "FAILED", "{}", r.json);
    let why = r.json["attempts"][0]["error"].as_str().unwrap_or_default();
    assert!(why.contains("private"), "{why}");
    assert!(sink.requests().is_empty(), "a private address was called");
}

#[tokio::test]
async fn deliveries_in_flight_when_the_process_is_killed_arrive_after_the_restart() {
    const N: usize = 30;
    let dir = Config::test_scratch().join(format!("webhook-crash-{}", uuid::Uuid::new_v4()));
    let port = crate::binary::free_port();
    let herald = || {
        let mut c = crate::binary::herald(&dir, port);
        c.env("HERALD_SECRET", "a test secret of the webhook suite")
            .env("HERALD_WEBHOOKS_ALLOW_PRIVATE", "true")
            .env("HERALD_JOB_LEASE_SECS", "2");
        c
    };
    let serve = || crate::binary::serve(herald());
    let (_, secret) = crate::binary::project_with(herald, None);
    let hang = Arc::new(AtomicBool::new(true));
    let receiver = http_sink::start_holding(hang.clone()).await;
    let ids = || -> Vec<String> {
        receiver.requests().iter().filter_map(|r| r.header("webhook-id").map(str::to_string)).collect()
    };

    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let mut server = serve();
    assert!(crate::binary::wait_until_up(&base).await);
    let r = http
        .post(format!("{base}/webhooks"))
        .bearer_auth(&secret)
        .json(&json!({ "url": receiver.url("/in"), "events": ["signup"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let webhook = r.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    for i in 0..N {
        let r = http
            .post(format!("{base}/v1/track"))
            .bearer_auth(&secret)
            .json(&json!({ "email": format!("p{i}@example.com"), "event": "signup" }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // Attempts reach the receiver and hang there; then the process dies mid-attempt.
    let deliveries = |http: reqwest::Client, status: &'static str| {
        let (base, secret, webhook) = (base.clone(), secret.clone(), webhook.clone());
        async move {
            let url = format!("{base}/webhooks/{webhook}/deliveries?limit=100&status={status}");
            let v = crate::binary::get_json(&http, &url, &secret).await;
            v["data"].as_array().map(Vec::len).unwrap_or(0)
        }
    };
    let started = std::time::Instant::now();
    while deliveries(http.clone(), "PENDING").await < N {
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "the deliveries were written");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    crate::binary::signal(&mut server, "-KILL");
    assert!(ids().is_empty(), "nothing was answered before the kill");

    // Restarted, with the receiver answering: every event arrives.
    hang.store(false, Ordering::SeqCst);
    let _server = serve();
    assert!(crate::binary::wait_until_up(&base).await);
    let started = std::time::Instant::now();
    loop {
        let mut got = ids();
        got.sort();
        got.dedup();
        if got.len() == N {
            break;
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(90), "{} of {N} events arrived", got.len());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let started = std::time::Instant::now();
    while deliveries(http.clone(), "SUCCEEDED").await < N {
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "every delivery is SUCCEEDED");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn only_the_start_of_an_endpoints_answer_is_read() {
    let s = stepped().await;
    let p = proj(&s, "o@example.com").await;
    // 11 MiB of answer: more than any attempt reads (past 10 MiB it was refused as too large).
    let sink = http_sink::start_with(Arc::new(|_: &str, _: &str| (500, "x".repeat(11 << 20)))).await;
    let (id, _) = endpoint(&p, &sink.url("/big"), json!(["*"])).await;
    track(&p, "ann@example.com", "ping").await;
    settle(&s).await;
    let d = deliveries(&p, &id).await;
    let error = d[0]["attempts"][0]["error"].as_str().unwrap_or_default().to_string();
    assert!(error.starts_with("the endpoint answered 500: xxx"), "{error}");
    assert!(error.len() < 400, "{} characters kept", error.len());
}

/// How many deliveries of the project's the store holds.
async fn stored_deliveries(s: &Server, project: &str) -> i64 {
    let mut r = s
        .state
        .store
        .query("SELECT count() AS n FROM webhook_delivery WHERE project = $p GROUP ALL", json!({ "p": project }))
        .await
        .unwrap();
    r.value(0).unwrap()[0]["n"].as_i64().unwrap_or(0)
}

#[tokio::test]
async fn one_tenants_endpoints_that_never_answer_do_not_hold_up_another_tenants_events() {
    let mut config = Config::for_tests();
    config.webhooks_allow_private = true;
    let s = Server::start_with(config, None).await;
    let (a, b) = (proj(&s, "a@example.com").await, proj(&s, "b@example.com").await);
    // A tarpit: takes connections and never says a word.
    let tarpit = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tarpit.local_addr().unwrap().port();
    let held = Arc::new(AtomicUsize::new(0));
    let holding = held.clone();
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((c, _)) = tarpit.accept().await {
            holding.fetch_add(1, Ordering::SeqCst);
            open.push(c);
        }
    });
    for n in 0..20 {
        endpoint(&a, &format!("http://127.0.0.1:{port}/{n}"), json!(["*"])).await;
    }
    let fine = receiver(Arc::new(AtomicBool::new(false)), 500).await;
    endpoint(&b, &fine.url("/b"), json!(["order.paid"])).await;
    // A's 30 events make 600 attempts, each held for the attempt's whole timeout (15 s): taken in
    // order, 256 at once, the last of them would start after 30 s.
    for n in 0..30 {
        track(&a, &format!("a{n}@example.com"), "ping").await;
    }
    let fanned = std::time::Instant::now();
    while stored_deliveries(&s, &a.id).await < 600 {
        assert!(fanned.elapsed() < std::time::Duration::from_secs(60), "A's deliveries were written");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // A's attempts hold the tarpit; B's event comes after all of them.
    while held.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let started = std::time::Instant::now();
    track(&b, "buyer@example.com", "order.paid").await;
    while fine.requests().is_empty() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "B's event waited behind A's endpoints ({} connections to the tarpit so far)",
            held.load(Ordering::SeqCst)
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    eprintln!("B's event arrived {:?} after it was tracked", started.elapsed());
    let connections = held.load(Ordering::SeqCst);
    assert!(connections <= 20 * herald_host::services::webhooks::PER_ENDPOINT, "{connections} connections at once");
    s.stop().await;
}

#[tokio::test]
async fn many_attempts_to_one_quick_endpoint_are_all_made_by_their_batch() {
    let s = stepped().await;
    let p = proj(&s, "o@example.com").await;
    let sink = receiver(Arc::new(AtomicBool::new(false)), 500).await;
    let (id, _) = endpoint(&p, &sink.url("/quick"), json!(["*"])).await;
    for n in 0..64 {
        track(&p, &format!("p{n}@example.com"), "ping").await;
    }
    // The clock stands still while the queue runs (jobs of 50): an attempt deferred because others to
    // its endpoint were in flight would not come back.
    settle(&s).await;
    assert_eq!(sink.requests().len(), 64, "every attempt was made by its batch");
    let d = deliveries(&p, &id).await;
    assert!(d.iter().all(|d| d["status"] == "SUCCEEDED"), "{d:?}");
}

/// The bytes the store holds for the project's webhook deliveries and their bodies.
async fn stored_delivery_bytes(s: &Server, project: &str) -> usize {
    let mut total = 0;
    for table in ["webhook_delivery", "webhook_payload"] {
        let sql = format!("SELECT * FROM {table} WHERE project = $p");
        if let Ok(mut r) = s.state.store.query(&sql, json!({ "p": project })).await {
            let rows = r.value(0).ok().and_then(|v| v.as_array().cloned()).unwrap_or_default();
            total += rows.iter().map(|row| row.to_string().len()).sum::<usize>();
        }
    }
    total
}

#[tokio::test]
async fn an_event_sent_to_twenty_endpoints_is_stored_once_and_goes_with_its_last_delivery() {
    let s = stepped().await;
    let p = proj(&s, "o@example.com").await;
    let sink = receiver(Arc::new(AtomicBool::new(false)), 500).await;
    let mut ids = Vec::new();
    for n in 0..20 {
        ids.push(endpoint(&p, &sink.url(&format!("/{n}")), json!(["*"])).await.0);
    }
    let note = "x".repeat(50_000);
    let r = p
        .secret
        .post("/v1/track", json!({ "email": "ann@example.com", "event": "ping", "data": { "note": note } }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    settle(&s).await;
    let got = sink.requests();
    assert_eq!(got.len(), 20);
    assert!(got.iter().all(|r| r.body == got[0].body && r.body.len() > 50_000), "every endpoint got the same body");
    let stored = stored_delivery_bytes(&s, &p.id).await;
    assert!(stored < 2 * 50_000, "{stored} bytes stored for 20 deliveries of one event of 50 KB");

    // A retry sends the same bytes.
    let event = got[0].header("webhook-id").unwrap().to_string();
    let r = p.secret.post(&format!("/webhooks/{}/deliveries/{event}/retry", ids[0]), json!({})).await;
    assert_eq!(r.status, 202, "{}", r.json);
    settle(&s).await;
    let again = sink.requests();
    assert_eq!(again.len(), 21);
    assert_eq!(again[20].body, got[0].body, "the retry's body");

    // Deleting the endpoints one by one keeps the body while a delivery shares it, and none after.
    for id in &ids[..19] {
        assert_eq!(p.secret.delete(&format!("/webhooks/{id}")).await.status, 204);
    }
    let d = deliveries(&p, &ids[19]).await;
    assert_eq!(d[0]["payload"]["data"]["data"]["note"].as_str().map(str::len), Some(50_000), "{}", d[0]["payload"]);
    assert_eq!(p.secret.delete(&format!("/webhooks/{}", ids[19])).await.status, 204);
    assert_eq!(stored_delivery_bytes(&s, &p.id).await, 0, "nothing is left of the deliveries");

    // A project reset deletes the deliveries with their bodies.
    for n in 0..2 {
        endpoint(&p, &sink.url(&format!("/r{n}")), json!(["*"])).await;
    }
    track(&p, "bob@example.com", "ping").await;
    settle(&s).await;
    assert!(stored_delivery_bytes(&s, &p.id).await > 0);
    let r = p.session.post(&format!("/users/@me/projects/{}/reset", p.id), json!({ "confirm": "P" })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    settle(&s).await;
    assert_eq!(stored_delivery_bytes(&s, &p.id).await, 0, "a reset leaves nothing of the deliveries");
}
