//! The promises of campaign delivery under a throttled transport: a cancel stops it (served by the
//! delivering process or another one sharing the database), and a `kill -9` mid-send re-sends nothing.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_host::config::Config;
use herald_host::infra::clock::SharedClock;
use herald_host::store::contacts::Contact;
use serde_json::{Value, json};

use crate::binary::Serving;
use crate::harness::*;
use crate::smtp_sink::SmtpSink;

/// Contacts `k0000@example.org`... written straight through the store.
async fn seed(store: &herald_host::store::Store, project: &str, n: usize, now: i64) {
    let rows: Vec<Contact> = (0..n)
        .map(|i| Contact {
            id: uuid::Uuid::now_v7().to_string(),
            email: format!("k{i:04}@example.org"),
            subscribed: true,
            data: Default::default(),
            version: 1,
            created_at: now,
            updated_at: now,
        })
        .collect();
    for chunk in rows.chunks(500) {
        store.write_contact_batch(project, chunk, &[], &[], &[]).await.unwrap();
    }
}

fn campaign() -> Value {
    json!({
        "name": "Wrong link",
        "subject": "Sale",
        "body": "<p>Hi, <a href=\"https://example.org/wrong\">sale</a></p>",
        "from": "news@shop.test",
        "audienceType": "ALL",
    })
}

fn per_recipient(sink: &SmtpSink) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for m in sink.received() {
        for t in m.to {
            *n.entry(t).or_insert(0) += 1;
        }
    }
    n
}

/// A campaign to 150 contacts through a transport throttled to 25 messages per second, cancelled
/// through `cancel_on` once some have arrived.
async fn cancel_mid_send(second_process: bool) {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.send_rate_per_second = 25;
    config.campaign_batch_size = 50;
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "owner@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    seed(&st.store, &p.id, 150, st.clock.now_ms()).await;

    // The cancel is served by this process, or by a second one on the same database that delivers
    // nothing itself (its own caches, its own delivery pipeline, no job worker).
    let other = if second_process {
        let mut config = Config::for_tests();
        config.run_jobs = false;
        let clock: SharedClock = Arc::new(herald_host::infra::clock::SystemClock);
        let app = herald_host::App::from_store(
            config,
            st.store.sibling(),
            clock,
            herald_host::infra::jobs::builtin_registry(),
        )
        .await
        .unwrap();
        Some(Server::serve(app, None).await)
    } else {
        None
    };
    let key = p.json["secret"].as_str().unwrap();
    let canceller = match &other {
        Some(o) => o.with_key(key),
        None => p.secret.clone(),
    };

    let c = &p.secret;
    let id = c.post("/campaigns", campaign()).await.json["data"]["id"].as_str().unwrap().to_string();
    assert_eq!(c.post(&format!("/campaigns/{id}/send"), json!({})).await.status, 200);
    let started = Instant::now();
    while sink.received().len() < 10 {
        assert!(started.elapsed() < Duration::from_secs(30), "delivery started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = sink.received().len();
    let t = Instant::now();
    let r = canceller.post(&format!("/campaigns/{id}/cancel"), json!({})).await;
    let answered = sink.received().len();
    eprintln!("cancel answered in {:?}: {before} had arrived before it, {answered} after", t.elapsed());
    assert_eq!((r.status, r.json["status"].as_str()), (200, Some("CANCELLED")), "{}", r.json);
    assert!(answered < 100, "the cancel stopped delivery early: {answered} of 150 had gone");

    // Nothing more arrives afterwards, although delivery batches had claimed emails waiting for the
    // throttle (150 at 25 per second would take six seconds).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = sink.received().len();
    assert_eq!(after, answered, "no email of a cancelled campaign reaches the transport after the cancel");
    assert!(per_recipient(&sink).values().all(|n| *n == 1));

    // The counters are exact: sent is what arrived, cancelled the rest, nothing pending.
    assert_eq!(r.json["sentCount"], json!(after), "the cancel's answer counts what was sent: {}", r.json);
    for reader in [&p.secret, &canceller] {
        let stats = reader.get(&format!("/campaigns/{id}/stats")).await.json;
        assert_eq!(stats["status"], "CANCELLED");
        assert_eq!(stats["sentCount"], json!(after), "{stats}");
        assert_eq!(stats["cancelledCount"], json!(150 - after), "{stats}");
        assert_eq!(stats["pendingCount"], 0, "{stats}");
        assert_eq!(stats["uncertainCount"], 0, "{stats}");
        let got = reader.get(&format!("/campaigns/{id}")).await.json;
        assert_eq!((got["status"].as_str(), got["sentCount"].clone()), (Some("CANCELLED"), json!(after)));
    }
    if let Some(o) = other {
        o.stop().await;
    }
    s.stop().await;
}

#[tokio::test]
async fn a_cancel_stops_a_throttled_campaign_and_its_counters_are_exact() {
    cancel_mid_send(false).await;
}

#[tokio::test]
async fn a_cancel_served_by_another_process_stops_the_delivering_one() {
    cancel_mid_send(true).await;
}

fn herald(dir: &std::path::Path, port: u16, sink: &SmtpSink) -> Command {
    let mut c = crate::binary::herald(dir, port);
    c.env("HERALD_SECRET", "a test secret of the campaign delivery suite")
        .env("HERALD_SMTP_URL", sink.url())
        .env("HERALD_SEND_RATE_PER_SECOND", "400")
        .env("HERALD_JOB_LEASE_SECS", "2")
        .env("HERALD_CAMPAIGN_PROGRESS_MS", "200");
    c
}

/// `herald serve` on `dir`, killed when dropped.
fn serve(dir: &std::path::Path, port: u16, sink: &SmtpSink) -> Serving {
    crate::binary::serve(herald(dir, port, sink))
}

#[tokio::test]
async fn a_campaign_killed_mid_send_and_restarted_sends_nobody_anything_twice() {
    const N: usize = 3_000;
    let sink = SmtpSink::start(0).await;
    let dir = herald_host::config::Config::test_scratch().join(format!("crash-{}", uuid::Uuid::new_v4()));
    let port = crate::binary::free_port();
    let (pid, secret) = crate::binary::project_with(|| herald(&dir, port, &sink), Some("shop.test"));
    {
        let mut config = Config::for_tests();
        config.db = format!("surrealkv://{}", dir.display());
        let store = herald_host::store::Store::connect(&config).await.unwrap();
        seed(&store, &pid, N, 1_800_000_000_000).await;
        store.close().await;
    }

    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let mut server = serve(&dir, port, &sink);
    assert!(crate::binary::wait_until_up(&base).await);
    let r: Value = http
        .post(format!("{base}/campaigns"))
        .bearer_auth(&secret)
        .json(&campaign())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = r["data"]["id"].as_str().unwrap().to_string();
    let r =
        http.post(format!("{base}/campaigns/{id}/send")).bearer_auth(&secret).json(&json!({})).send().await.unwrap();
    assert_eq!(r.status(), 200);

    // Killed while delivering: about a third has gone.
    let started = Instant::now();
    while sink.received().len() < N / 3 {
        assert!(started.elapsed() < Duration::from_secs(120), "delivery started ({} so far)", sink.received().len());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    crate::binary::signal(&mut server, "-KILL");
    let at_kill = sink.received().len();
    assert!(at_kill < N, "the kill landed mid-send ({at_kill} of {N})");

    // Restarted on the same data: it finishes the campaign.
    let mut server = serve(&dir, port, &sink);
    assert!(crate::binary::wait_until_up(&base).await);
    let started = Instant::now();
    let stats = loop {
        let s = crate::binary::get_json(&http, &format!("{base}/campaigns/{id}/stats"), &secret).await;
        if s["status"] == "SENT" {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(180), "the campaign completes after the restart: {s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    crate::binary::signal(&mut server, "-TERM");
    eprintln!("killed at {at_kill} of {N} received; after the restart: {stats}");

    let got = per_recipient(&sink);
    let twice: Vec<_> = got.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "{} contacts got the campaign twice: {:?}", twice.len(), &twice[..twice.len().min(5)]);
    let uncertain = stats["uncertainCount"].as_u64().unwrap() as usize;
    assert!(
        uncertain <= herald_host::services::delivery::HANDOVERS,
        "at most one uncertain hand-over per slot: {stats}"
    );
    assert_eq!(stats["sentCount"], json!(N - uncertain), "{stats}");
    assert_eq!(stats["pendingCount"], 0, "{stats}");
    assert!(
        got.len() >= N - uncertain && got.len() <= N,
        "{} of {N} contacts got it; {uncertain} uncertain",
        got.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_interrupted_hand_over_resends_transactional_mail_with_its_message_id_and_never_campaign_mail() {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.run_jobs = false;
    config.send_rate_per_second = 0;
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "owner@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let c = &p.secret;
    let requeue = |kind: &'static str| {
        let store = st.store.clone();
        async move {
            store
                .query(
                    "UPDATE job SET status = 'queued', attempts = 0, run_at = 0 WHERE kind = $k",
                    json!({ "k": kind }),
                )
                .await
                .unwrap();
        }
    };

    // Transactional: delivered, then the crash is replayed as it strikes between the transport's accept
    // and the outcome's write (the record still PENDING, the job run again).
    let r =
        c.post("/v1/send", json!({"to": "t@example.org", "from": "hi@shop.test", "subject": "s", "body": "b"})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let email = r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string();
    s.worker.run_once(10).await.unwrap();
    assert_eq!(sink.received().len(), 1);
    st.store.set_email_status(&email, herald_host::domain::status::EmailStatus::Pending, None, None, 0).await.unwrap();
    requeue("email.deliver").await;
    s.worker.run_once(10).await.unwrap();
    let got = sink.received();
    assert_eq!(got.len(), 2, "at least once: sent again");
    let id = |m: &crate::smtp_sink::Received| crate::smtp_sink::header(&m.data, "Message-ID");
    assert!(id(&got[0]).is_some());
    assert_eq!(id(&got[0]), id(&got[1]), "with the same Message-ID, so the receiver can drop the repeat");
    assert_eq!(st.store.email(&p.id, &email).await.unwrap().unwrap().status.as_str(), "SENT");

    // Campaign: its email claimed (SENDING) when the process died; the re-run never sends it.
    assert_eq!(c.post("/contacts", json!({"email": "k@example.org", "subscribed": true})).await.status, 201);
    let id = c.post("/campaigns", campaign()).await.json["data"]["id"].as_str().unwrap().to_string();
    assert_eq!(c.post(&format!("/campaigns/{id}/send"), json!({})).await.status, 200);
    s.worker.run_once(1).await.unwrap(); // resolve
    s.worker.run_once(1).await.unwrap(); // the batch
    st.store.query("UPDATE email SET status = 'SENDING' WHERE campaign = $c", json!({ "c": id })).await.unwrap();
    for _ in 0..5 {
        s.worker.run_once(10).await.unwrap();
    }
    assert_eq!(sink.received().len(), 2, "the interrupted campaign email is not sent again");
    let stats = c.get(&format!("/campaigns/{id}/stats")).await.json;
    assert_eq!((stats["uncertainCount"].clone(), stats["sentCount"].clone()), (json!(1), json!(0)), "{stats}");
    assert_eq!(stats["pendingCount"], 0, "{stats}");
    let row = st
        .store
        .query("SELECT status, error FROM email WHERE campaign = $c", json!({ "c": id }))
        .await
        .unwrap()
        .value(0)
        .unwrap();
    assert_eq!(row[0]["status"], "UNCERTAIN");
    assert!(row[0]["error"].as_str().unwrap().contains("interrupted during hand-over"), "{row}");
    s.stop().await;
}
