//! A marketer's hour, in the browser: build a segment in the condition builder and watch its live
//! count, send a campaign to it behind a confirmation that names the count, to the loopback SMTP sink,
//! and watch the stats and the chart of opens move after a recipient opens it.

use std::sync::Arc;
use std::time::Duration;

use herald_host::config::Config;
use serde_json::json;

use crate::driver::Browser;
use crate::harness::{Server, proj};
use crate::smtp_sink::{SmtpSink, html_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marketer_builds_a_segment_sends_a_campaign_and_sees_the_stats_move_after_an_open() {
    tokio::time::timeout(Duration::from_secs(300), marketer()).await.expect("the campaign took over 5 minutes");
}

async fn marketer() {
    let sink = SmtpSink::start(0).await;
    let mut c = Config::for_tests();
    c.smtp_url = Some(sink.url());
    let s = Server::start_with(c, None).await;
    // A project with a trusted sender domain and contacts: 12 on the pro plan (c5 unsubscribed), 8 free.
    let p = proj(&s, "mia@shop.test").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    for i in 0..20 {
        let plan = if i < 12 { "pro" } else { "free" };
        let body =
            json!({ "email": format!("c{i}@example.com"), "subscribed": i != 5, "data": { "plan": plan, "seats": i } });
        assert!(p.secret.post("/contacts", body).await.status < 300);
    }

    let b = Browser::start(&s.base).await;
    b.log_in("mia@shop.test", "password123").await;
    b.wait_text("#setup-checklist", "Create a campaign").await;

    // The segment: data.plan is "pro" and seats ≥ 3, counted live as the condition is built.
    b.click_text("nav a", "Segments").await;
    b.click_text("a", "New segment").await;
    b.fill("input[name=name]", "Pro teams").await;
    b.wait_text("#segment-count", "20 contacts").await;
    b.find("#condition-builder select[data-role=field]").await.select_by_value("data.plan").await.unwrap();
    b.find("#condition-builder select[data-role=operator]").await.select_by_value("equals").await.unwrap();
    b.fill("#condition-builder input[data-role=value]", "pro").await;
    b.wait_text("#segment-count", "12 contacts").await;
    b.click_text("#condition-builder button", "+ Filter").await;
    let fields =
        b.client.find_all(fantoccini::Locator::Css("#condition-builder select[data-role=field]")).await.unwrap();
    fields[1].select_by_value("data.seats").await.unwrap();
    let ops =
        b.client.find_all(fantoccini::Locator::Css("#condition-builder select[data-role=operator]")).await.unwrap();
    ops[1].select_by_value("greaterThanOrEqual").await.unwrap();
    let values =
        b.client.find_all(fantoccini::Locator::Css("#condition-builder input[data-role=value]")).await.unwrap();
    values[1].send_keys("3").await.unwrap();
    b.wait_text("#segment-count", "9 contacts").await;
    b.shots("segment-editor").await;
    b.click_text("button", "Create segment").await;
    b.until("the saved segment", "/^\\/app\\/segments\\/[0-9a-f-]{36}$/.test(location.pathname)").await;
    b.wait_text("#segment-members", "9 members").await;

    // The campaign to that segment: the audience counts subscribed members only (c5 is not).
    b.click_text("nav a", "Campaigns").await;
    b.click_text("a", "New campaign").await;
    b.fill("input[name=name]", "Spring").await;
    b.fill("input[name=from]", "news@shop.test").await;
    b.fill("input[name=subject]", "Spring news for {{plan}}").await;
    b.click("input[name=audienceType][value=SEGMENT]").await;
    b.wait_text("#audience-count", "8 contacts").await;
    b.click("input[name=audienceType][value=FILTERED]").await;
    b.wait_text("#audience-count", "19 contacts").await;
    b.click("input[name=audienceType][value=SEGMENT]").await;
    b.wait_text("#audience-count", "8 contacts").await;
    b.click_text("button", "Create campaign").await;
    b.until("the saved campaign", "/^\\/app\\/campaigns\\/[0-9a-f-]{36}$/.test(location.pathname)").await;
    b.shots("campaign-editor").await;

    // Sending asks first, naming the count; cancelling the dialog sends nothing.
    b.click("#send-campaign").await;
    b.wait_text("dialog p", "8 subscribed contacts").await;
    b.click_text("dialog button", "Cancel").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sink.received().len(), 0, "a cancelled confirmation sent something");
    b.click("#send-campaign").await;
    b.click_text("dialog button", "Send to 8").await;
    let got = sink.wait_for(8).await;
    assert_eq!(got.len(), 8);
    b.wait_text("h1 + .badge, .head .badge", "SENT").await;
    b.wait_text("[data-stat=sent] .value", "8").await;
    b.wait_text("[data-stat=opened] .value", "0").await;

    // One recipient opens it (the pixel in the mail, fetched from this server): the stats follow.
    let html = html_of(&got[0]);
    let base = s.state.config.public_url.clone();
    let at = html.find(&format!("{base}/t/o/")).expect("a tracking pixel");
    let pixel = html[at..].split('"').next().unwrap().trim_start_matches(base.as_str()).to_string();
    assert_eq!(reqwest::get(format!("{}{pixel}", s.base)).await.unwrap().status(), 200);
    b.wait_text("[data-stat=opened] .value", "1").await;
    b.wait_text("[data-stat=opened] .label", "12.5%").await;
    b.wait_text("#campaign-chart [data-total=opened]", "opened: 1").await;
    b.wait_text("#campaign-chart [data-total=clicked]", "clicked: 0").await;
    let points = b.js("document.querySelector('#campaign-chart polyline[data-metric=opened]').getAttribute('points').split(' ').length").await;
    assert!(points.as_i64().unwrap() >= 1, "the chart draws the series");
    b.shots("campaign-stats").await;

    b.click_text("nav a", "Campaigns").await;
    b.wait_text("main table", "Spring").await;
    b.shots("campaigns").await;
    b.close().await;
}
