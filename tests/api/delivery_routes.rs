//! Named transports, routes and failover (docs/delivery.md#transports-and-routes), against relays in
//! processes of their own: routes by class and recipient domain, failover to a second transport (once
//! each), a transport's `max_per_second`, the give-up window ending in FAILED with the relay's words, and
//! a transport plugin's `temporary` and `rate-limited` taking the path SMTP's refusals take.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use herald_host::config::{Config, PluginGrant, Settings};
use serde_json::json;

use crate::harness::*;
use crate::relay_process::{Relay, Rules};
use crate::{http_sink, plugin_kit};

/// A running server whose delivery settings are `toml` (as in `herald.toml`), with `extra` settings.
async fn server(toml: &str, extra: impl FnOnce(&mut Config)) -> (Server, Proj) {
    let dir = Config::test_scratch().join(format!("routes-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("herald.toml");
    std::fs::write(&path, toml).unwrap();
    let file = Settings { config: Some(path), db: Some("mem://".into()), ..Default::default() }.resolve().unwrap();
    let mut config = Config::for_tests();
    config.smtp_url = file.smtp_url;
    config.delivery = file.delivery;
    extra(&mut config);
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    (s, p)
}

async fn send_to(p: &Proj, to: &str) -> String {
    let r = p
        .secret
        .post("/v1/send", json!({ "to": to, "from": "hi@shop.test", "subject": "s", "body": "<p>b</p>" }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string()
}

async fn email(s: &Server, p: &Proj, id: &str) -> herald_host::store::emails::EmailRow {
    s.state.store.email(&p.id, id).await.unwrap().unwrap()
}

/// Waits (up to `secs`) until `done` holds.
async fn until<F: std::future::Future<Output = bool>>(secs: u64, what: &str, mut done: impl FnMut() -> F) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < Duration::from_secs(secs), "{what} within {secs} s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn rcpts(r: &Relay) -> Vec<String> {
    let mut v: Vec<String> = r.accepted().into_iter().map(|a| a.rcpt).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_send_each_class_and_recipient_domain_through_its_transport() {
    let (default, vip, bulk) = (
        Relay::start(Rules::default()).await,
        Relay::start(Rules::default()).await,
        Relay::start(Rules::default()).await,
    );
    let toml = format!(
        "smtp_url = \"{}\"\n[transports.vip]\nurl = \"{}\"\n[transports.bulk]\nurl = \"{}\"\n\
         [[routes]]\nrecipient_domain = \"*.vip.test\"\ntransports = [\"vip\"]\n\
         [[routes]]\nclass = \"campaign\"\ntransports = [\"bulk\"]\n",
        default.url(),
        vip.url(),
        bulk.url()
    );
    let (s, p) = server(&toml, |_| {}).await;
    send_to(&p, "a@mail.vip.test").await;
    send_to(&p, "b@other.test").await;
    p.secret.post("/contacts", json!({ "email": "c@other.test", "subscribed": true })).await;
    let c = p
        .secret
        .post(
            "/campaigns",
            json!({ "name": "n", "subject": "s", "body": "<p>b</p>", "from": "news@shop.test", "audienceType": "ALL" }),
        )
        .await;
    let cid = c.json["data"]["id"].as_str().unwrap().to_string();
    assert_eq!(p.secret.post(&format!("/campaigns/{cid}/send"), json!({})).await.status, 200);
    until(20, "three emails delivered", || async {
        default.accepted().len() + vip.accepted().len() + bulk.accepted().len() >= 3
    })
    .await;
    assert_eq!(rcpts(&vip), ["a@mail.vip.test"]);
    assert_eq!(rcpts(&default), ["b@other.test"]);
    assert_eq!(rcpts(&bulk), ["c@other.test"]);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_email_the_first_transport_defers_or_cannot_reach_goes_to_the_next_at_once_and_only_there() {
    let mut primary = Relay::start(Rules { tempfail_domains: vec!["busy.test".into()], ..Default::default() }).await;
    let backup = Relay::start(Rules::default()).await;
    let toml = format!(
        "[transports.primary]\nurl = \"{}?timeout_secs=2\"\n[transports.backup]\nurl = \"{}\"\n\
         [[routes]]\ntransports = [\"primary\", \"backup\"]\n",
        primary.url(),
        backup.url()
    );
    let (s, p) = server(&toml, |_| {}).await;
    // The first transport refuses these for now (451): the second takes them at once.
    let mut deferred_by_primary = Vec::new();
    for i in 0..5 {
        deferred_by_primary.push(send_to(&p, &format!("d{i}@busy.test")).await);
    }
    let ok = send_to(&p, "fine@ok.test").await;
    until(15, "all six delivered", || async { primary.accepted().len() + backup.accepted().len() >= 6 }).await;
    for id in &deferred_by_primary {
        until(5, "SENT", || async { email(&s, &p, id).await.status.to_string() == "SENT" }).await;
    }
    assert_eq!(rcpts(&primary), ["fine@ok.test"], "the first transport takes what it accepts");
    assert_eq!(rcpts(&backup), ["d0@busy.test", "d1@busy.test", "d2@busy.test", "d3@busy.test", "d4@busy.test"]);
    assert_eq!(email(&s, &p, &ok).await.status.to_string(), "SENT");

    // The first transport is down: the second takes everything, each email once.
    primary.kill();
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(send_to(&p, &format!("k{i}@ok.test")).await);
    }
    until(20, "ten more at the backup", || async { backup.accepted().len() >= 15 }).await;
    for id in &ids {
        until(5, "SENT", || async { email(&s, &p, id).await.status.to_string() == "SENT" }).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(backup.accepted().len(), 15, "each email handed over once");
    let counts = backup.counts();
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
    assert_eq!(primary.accepted().len(), 1);
    assert!(s.state.delivery.breakers.down("primary").is_some(), "the first transport is known down");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transports_max_per_second_paces_what_it_is_handed() {
    let relay = Relay::start(Rules::default()).await;
    let toml = format!(
        "[transports.paced]\nurl = \"{}\"\nmax_per_second = 5\n[[routes]]\ntransports = [\"paced\"]\n",
        relay.url()
    );
    let (s, p) = server(&toml, |_| {}).await;
    let tos: Vec<String> = (0..20).map(|i| format!("r{i}@ok.test")).collect();
    futures_util::future::join_all(tos.iter().map(|to| send_to(&p, to))).await;
    let started = Instant::now();
    until(30, "twenty delivered", || async { relay.accepted().len() >= 20 }).await;
    let took = started.elapsed();
    eprintln!("20 emails through a transport of 5 a second took {took:?}");
    // A bucket of one second's worth (5) at once, then 5 a second: the other 15 take 3 s at least.
    assert!(took >= Duration::from_millis(2500), "{took:?}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_email_refused_until_its_window_ends_is_failed_then_with_the_relays_words() {
    let relay = Relay::start(Rules { tempfail_domains: vec!["grey.test".into()], ..Default::default() }).await;
    let toml = format!("smtp_url = \"{}\"\ndelivery_give_up_after_secs = 3\n", relay.url());
    let (s, p) = server(&toml, |_| {}).await;
    let id = send_to(&p, "x@grey.test").await;
    until(10, "deferred", || async { email(&s, &p, &id).await.status.to_string() == "DEFERRED" }).await;
    let row = email(&s, &p, &id).await;
    // The next attempt would be a minute away: the window's end comes first, and is when it fails.
    assert_eq!(row.next_attempt_at, Some(row.created_at + 3000), "{row:?}");
    until(10, "failed", || async { email(&s, &p, &id).await.status.to_string() == "FAILED" }).await;
    let row = email(&s, &p, &id).await;
    assert!(row.updated_at >= row.created_at + 3000, "not before the window ended");
    assert!(row.error.as_deref().unwrap_or("").contains("Greylisted"), "the relay's words: {:?}", row.error);
    let feed = p.secret.get("/activity?type=email.failed").await;
    assert!(feed.json["data"].to_string().contains(&id), "{}", feed.json);
    assert!(relay.accepted().is_empty());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transport_plugins_temporary_and_rate_limited_answers_defer_and_pause_like_smtp_refusals() {
    // The endpoint behind the `http` transport plugin: 503 (temporary), then 429 (rate limited), then 200.
    let mode = Arc::new(AtomicUsize::new(0));
    let m = mode.clone();
    let endpoint = http_sink::start_with(Arc::new(move |_: &str, _: &str| match m.load(Ordering::SeqCst) {
        0 => (503, r#"{"error":"down for maintenance"}"#.to_string()),
        1 => (429, r#"{"error":"slow down"}"#.to_string()),
        _ => (200, r#"{"id":"prov-1"}"#.to_string()),
    }))
    .await;
    let clock = herald_host::infra::clock::ManualClock::new(herald_host::infra::clock::wall_now_ms());
    let mut config = Config::for_tests();
    plugin_kit::install(&config.plugins_dir, plugin_kit::HTTP);
    let grant = PluginGrant {
        allow_private: true,
        config: [("url".to_string(), endpoint.url("/mail"))].into(),
        secrets: [("signing_key".to_string(), "k3y-k3y".to_string())].into(),
        ..Default::default()
    };
    config.plugin_grants.insert("http".into(), grant);
    config.transport = Some("http".into());
    config.delivery = Settings { transport: Some("http".into()), db: Some("mem://".into()), ..Default::default() }
        .resolve()
        .unwrap()
        .delivery;
    let s = Server::start_with(config, Some(clock.clone())).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let id = send_to(&p, "ada@example.org").await;

    // `temporary`: deferred on the schedule, the attempt counted.
    until(20, "deferred by the plugin", || async { email(&s, &p, &id).await.status.to_string() == "DEFERRED" }).await;
    let row = email(&s, &p, &id).await;
    assert_eq!(row.attempts, Some(1));
    assert!(row.error.as_deref().unwrap_or("").contains("503"), "{:?}", row.error);
    assert!(row.next_attempt_at.is_some());

    // `rate-limited`: the transport is paused (1 s without Retry-After) and the email waits for it.
    mode.store(1, Ordering::SeqCst);
    clock.advance(60_000);
    until(10, "paused by the plugin", || async { s.state.delivery.breakers.down("http").is_some() }).await;
    until(10, "the email waits for the plugin", || async { email(&s, &p, &id).await.next_attempt_at.is_none() }).await;
    let row = email(&s, &p, &id).await;
    assert_eq!(row.status.to_string(), "DEFERRED");
    assert!(row.error.as_deref().unwrap_or("").contains("rate limited"), "{:?}", row.error);

    // Once the pause is over the plugin is asked again, without the email's own schedule.
    mode.store(2, Ordering::SeqCst);
    until(15, "sent after the pause", || async { email(&s, &p, &id).await.status.to_string() == "SENT" }).await;
    assert_eq!(endpoint.requests().len(), 3, "one call each: the 503, the 429, the 200");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resend_failed_sends_a_campaign_again_to_each_contact_whose_email_failed_once() {
    let mut relay = Relay::start(Rules { tempfail_domains: vec!["gone.test".into()], ..Default::default() }).await;
    let toml = format!("smtp_url = \"{}\"\ndelivery_give_up_after_secs = 2\n", relay.url());
    let (s, p) = server(&toml, |_| {}).await;
    for to in ["a@ok.test", "b@ok.test", "c@gone.test", "d@gone.test", "e@gone.test"] {
        p.secret.post("/contacts", json!({ "email": to, "subscribed": true })).await;
    }
    let draft = p
        .secret
        .post(
            "/campaigns",
            json!({ "name": "n", "subject": "s", "body": "<p>b</p>", "from": "news@shop.test", "audienceType": "ALL" }),
        )
        .await;
    let cid = draft.json["data"]["id"].as_str().unwrap().to_string();
    let r = p.secret.post(&format!("/campaigns/{cid}/resend-failed"), json!({})).await;
    assert_envelope(&r, 409, "CONFLICT");
    assert_eq!(p.secret.post(&format!("/campaigns/{cid}/send"), json!({})).await.status, 200);
    let stats = || async { p.secret.get(&format!("/campaigns/{cid}/stats")).await.json };
    until(30, "the campaign SENT with three FAILED", || async {
        let st = stats().await;
        st["status"] == "SENT" && st["failedCount"] == 3 && st["sentCount"] == 2
    })
    .await;

    // The destination takes mail again: each contact whose email failed gets it once more.
    relay.kill();
    relay.set_rules(Rules::default());
    relay.up().await;
    let r = p.secret.post(&format!("/campaigns/{cid}/resend-failed"), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!((r.json["data"]["resent"].clone(), r.json["data"]["status"].clone()), (json!(3), json!("SENDING")));
    let again = p.secret.post(&format!("/campaigns/{cid}/resend-failed"), json!({})).await;
    assert_eq!(again.json["data"]["resent"], 0, "what goes again is not sent twice: {}", again.json);
    until(30, "the campaign SENT again with nothing failed", || async {
        let st = stats().await;
        st["status"] == "SENT" && st["failedCount"] == 0 && st["sentCount"] == 5
    })
    .await;
    assert_eq!(rcpts(&relay), ["a@ok.test", "b@ok.test", "c@gone.test", "d@gone.test", "e@gone.test"], "each once");
    s.stop().await;
}
