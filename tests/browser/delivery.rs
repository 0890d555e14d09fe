//! The suppression list and outbound webhooks in the browser: an address suppressed and removed, a
//! reason filter; an endpoint added (its secret shown once), a test delivery that reaches a receiver on
//! loopback and shows in the deliveries, the endpoint disabled. Each step is checked through the API.

use std::time::Duration;

use herald_host::config::Config;
use serde_json::json;

use crate::driver::Browser;
use crate::harness::{Server, proj};
use crate::http_sink;

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
