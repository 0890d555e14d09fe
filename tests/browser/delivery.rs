//! The suppression list and outbound webhooks in the browser: an address suppressed and removed, a
//! reason filter; an endpoint added (its secret shown once), a test delivery that reaches a receiver on
//! loopback and shows in the deliveries, the endpoint disabled. Each step is checked through the API.

use std::time::Duration;

use herald_host::config::Config;
use serde_json::json;

use crate::driver::Browser;
use crate::harness::{Server, proj};
use crate::http_sink;
use crate::smtp_sink::SmtpSink;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suppressions_and_webhooks_are_managed_in_the_browser() {
    tokio::time::timeout(Duration::from_secs(300), delivery()).await.expect("took over 5 minutes");
}

async fn delivery() {
    let mut c = Config::for_tests();
    c.webhooks_allow_private = true;
    let s = Server::start_with(c, None).await;
    let p = proj(&s, "ana@shop.test").await;
    let receiver = http_sink::start(200, "{}").await;

    let b = Browser::start(&s.base).await;
    b.log_in("ana@shop.test", "password123").await;

    // An address suppressed by hand, shown with its reason, filtered, then removed.
    b.click_text("nav a", "Suppressions").await;
    b.wait_text("#suppression-list", "0 on the list").await;
    b.fill("input[name=value]", "Ann@Example.com").await;
    b.find("select[name=reason]").await.select_by_value("complaint").await.unwrap();
    b.fill("input[name=detail]", "asked by phone").await;
    b.click_text("button", "Suppress").await;
    b.wait_text("#suppression-list", "ann@example.com").await;
    let r = p.secret.get("/suppressions/ann@example.com").await;
    assert_eq!((r.status, r.json["reason"].clone()), (200, json!("complaint")), "{}", r.json);
    b.fill("input[name=value]", "spam.test").await;
    b.click_text("button", "Suppress").await;
    b.wait_text("#suppression-list", "2 on the list").await;
    b.find("select[aria-label=Reason]").await.select_by_value("bounce").await.unwrap();
    b.wait_text("#suppression-list", "Nobody is suppressed.").await;
    b.find("select[aria-label=Reason]").await.select_by_value("").await.unwrap();
    b.wait_text("#suppression-list", "spam.test").await;
    b.shots("suppressions").await;
    b.click("#suppression-list tr:has(code) button").await;
    b.click_text("dialog button", "Remove").await;
    b.wait_text("#suppression-list", "1 on the list").await;
    assert_eq!(p.secret.get("/suppressions/ann@example.com").await.status, 404);

    // An endpoint: its secret shown once, a test delivered to the receiver, then disabled.
    b.click_text("nav a", "Webhooks").await;
    b.wait_text("#webhook-list", "No endpoint yet.").await;
    b.fill("input[name=url]", &receiver.url("/hook")).await;
    b.fill("input[name=events]", "email.*, signup").await;
    b.click_text("button", "Add endpoint").await;
    b.wait_text("#webhook-secret", "whsec_").await;
    let list = p.secret.get("/webhooks").await.json;
    assert_eq!(list["data"][0]["events"], json!(["email.*", "signup"]), "{list}");
    b.wait_text("#webhook-list", "No deliveries yet.").await;
    b.click_text("#webhook-list button", "Send test").await;
    b.wait_text(".toast", "Test delivered").await;
    b.wait_text("#webhook-list", "webhook.test").await;
    let got = receiver.requests();
    assert_eq!(got.len(), 1, "the receiver got the test");
    assert!(got[0].header("webhook-signature").is_some_and(|v| v.starts_with("v1,")));
    b.shots("webhooks").await;
    b.click_text("#webhook-list button", "Disable").await;
    b.wait_text("#webhook-list", "DISABLED").await;
    let list = p.secret.get("/webhooks").await.json;
    assert_eq!(list["data"][0]["enabled"], false, "{list}");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_is_down_and_failed_campaign_mail_are_seen_and_handled_in_the_browser() {
    tokio::time::timeout(Duration::from_secs(300), relay_down()).await.expect("took over 5 minutes");
}

async fn relay_down() {
    // The relay is down when the email is sent: the delivery page shows its transport down and the
    // email deferred, and both change once it is back.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut c = Config::for_tests();
    c.smtp_url = Some(format!("smtp://127.0.0.1:{port}?timeout_secs=1"));
    c.delivery.give_up_after_ms = 15_000;
    let s = Server::start_with(c, None).await;
    let p = proj(&s, "ops@shop.test").await;
    let st = s.state.clone();
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();

    let b = Browser::start(&s.base).await;
    b.log_in("ops@shop.test", "password123").await;
    b.click_text("nav a", "Delivery").await;
    b.wait_text("#delivery-status", "smtp").await;
    let r = p
        .secret
        .post("/v1/send", json!({ "to": "a@example.org", "from": "hi@shop.test", "subject": "s", "body": "b" }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    b.wait_text("#delivery-status", "DOWN").await;
    b.wait_text("[data-stat=deferred] .value", "1").await;
    b.shots("delivery-down").await;
    let sink = SmtpSink::start_on(port, 2).await;
    b.wait_text("#delivery-status", "UP").await;
    b.wait_text("[data-stat=deferred] .value", "0").await;
    sink.wait_for(1).await;

    // A campaign whose two emails the relay refuses until their window ends: FAILED, then sent again
    // from the campaign's page.
    for to in ["tempfail1@example.org", "tempfail2@example.org", "ok@example.org"] {
        assert!(p.secret.post("/contacts", json!({ "email": to, "subscribed": true })).await.status < 300);
    }
    let body =
        json!({ "name": "Retry", "subject": "s", "body": "<p>b</p>", "from": "news@shop.test", "audienceType": "ALL" });
    let cid = p.secret.post("/campaigns", body).await.json["data"]["id"].as_str().unwrap().to_string();
    assert_eq!(p.secret.post(&format!("/campaigns/{cid}/send"), json!({})).await.status, 200);
    b.goto(&format!("/app/campaigns/{cid}")).await;
    b.wait_text("[data-stat=failed] .value", "2").await;
    b.wait_text("[data-stat=sent] .value", "1").await;
    b.shots("campaign-failed").await;
    b.click("#resend-failed").await;
    b.wait_text("dialog p", "Each contact whose email failed").await;
    b.click_text("dialog button", "Resend 2").await;
    b.wait_text("[data-stat=sent] .value", "3").await;
    b.wait_text("[data-stat=failed] .value", "0").await;
    let stats = p.secret.get(&format!("/campaigns/{cid}/stats")).await.json;
    assert_eq!((stats["sentCount"].clone(), stats["failedCount"].clone()), (json!(3), json!(0)), "{stats}");
    assert_eq!(sink.received().len(), 4, "the send, and the campaign's three once each");
    b.close().await;
}
