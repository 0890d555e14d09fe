//! The activity feed and analytics (docs/behaviour.md#activity-and-analytics) over a known set of
//! campaign mail: sent to a real SMTP sink on loopback, opened and clicked through the tracking links,
//! delivered, bounced and complained through signed notifications, unsubscribed through the one-click link.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use herald_host::config::Config;
use serde_json::{Value, json};

use crate::campaigns::campaign;
use crate::harness::*;
use crate::smtp_sink::{Received, SmtpSink, header, html_of};

struct Env {
    s: Server,
    p: Proj,
    sink: SmtpSink,
}

async fn env() -> Env {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.send_rate_per_second = 100;
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "owner@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    Env { s, p, sink }
}

/// Sends a campaign to the subscribed contacts and waits until it is SENT; answers its id.
async fn send_campaign(e: &Env, name: &str) -> String {
    let c = &e.p.secret;
    let id = c.post("/campaigns", campaign(name)).await.json["data"]["id"].as_str().unwrap().to_string();
    assert_eq!(c.post(&format!("/campaigns/{id}/send"), json!({})).await.status, 200);
    for _ in 0..400 {
        if c.get(&format!("/campaigns/{id}")).await.json["status"] == "SENT" {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("campaign {name} did not finish");
}

/// Waits until every stored event has been dispatched (and so counted).
async fn settled(e: &Env) {
    for _ in 0..400 {
        if e.s.state.store.undispatched_events(10).await.unwrap().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("events are not dispatched");
}

fn mail_to<'a>(got: &'a [Received], to: &str) -> &'a Received {
    got.iter().find(|m| m.to == [to.to_string()]).unwrap_or_else(|| panic!("no mail to {to}"))
}

/// The local address of a link Herald wrote with its public URL.
fn local(e: &Env, url: &str) -> String {
    format!("{}{}", e.s.base, url.trim_start_matches(e.s.state.config.public_url.as_str()))
}

fn link(html: &str, prefix: &str) -> String {
    html[html.find(prefix).unwrap()..].split('"').next().unwrap().to_string()
}

async fn notify(e: &Env, body: Value) {
    let ts = herald_host::infra::clock::wall_now_ms() / 1000;
    assert_eq!(notification(&e.s, &body, ts, None).await.status, 200);
}

async fn message_id(e: &Env, to: &str) -> String {
    let id = e.s.state.store.query("SELECT VALUE message_id FROM email WHERE recipient = $r", json!({ "r": to })).await;
    id.unwrap().value(0).unwrap()[0].as_str().unwrap().to_string()
}

fn names(items: &Value) -> Vec<String> {
    items.as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap().to_string()).collect()
}

/// Walks the whole feed `limit` items at a time; answers every item.
async fn walk(c: &Client, query: &str, limit: usize) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor = String::new();
    for _ in 0..100 {
        let r = c.get(&format!("/activity?limit={limit}{query}&cursor={cursor}")).await;
        assert_eq!(r.status, 200, "{}", r.json);
        let page = r.json["data"].as_array().unwrap().clone();
        assert!(page.len() <= limit);
        all.extend(page);
        if r.json["hasMore"] != true {
            assert_eq!(r.json["cursor"], "");
            return all;
        }
        cursor = r.json["cursor"].as_str().unwrap().to_string();
    }
    panic!("the feed does not end");
}

#[tokio::test]
async fn the_feed_and_analytics_tell_a_known_set_of_campaign_mail_exactly() {
    let e = env().await;
    let c = &e.p.secret;
    let t0 = herald_host::infra::clock::wall_now_ms();
    let mut ids = Vec::new();
    for who in ["a", "b", "c", "bounce"] {
        ids.push(crate::workflow_kit::contact(&e.p, &format!("{who}@example.org"), true, json!({})).await);
    }
    let a = ids[0].clone();
    // (a contact created subscribed is no subscription change: no event)
    let launch = send_campaign(&e, "Launch").await;
    let got = e.sink.wait_for(3).await;
    assert_eq!(got.len(), 3, "the bounce address is refused at hand-over");
    let pause = || tokio::time::sleep(Duration::from_millis(5));

    // a: send → open, open → click → a hard bounce (which unsubscribes a).
    let html = html_of(mail_to(&got, "a@example.org"));
    let base = e.s.state.config.public_url.clone();
    for _ in 0..2 {
        pause().await;
        assert_eq!(reqwest::get(local(&e, &link(&html, &format!("{base}/t/o/")))).await.unwrap().status(), 200);
    }
    pause().await;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = http.get(local(&e, &link(&html, &format!("{base}/t/c/")))).send().await.unwrap();
    assert_eq!(r.status(), 302);
    pause().await;
    let mid = message_id(&e, "a@example.org").await;
    notify(&e, json!({ "type": "bounce", "messageId": mid, "permanent": true, "reason": "mailbox gone" })).await;
    // b: delivered, opened once, unsubscribed through the one-click link.
    notify(&e, json!({ "type": "delivery", "messageId": message_id(&e, "b@example.org").await })).await;
    let b_mail = mail_to(&got, "b@example.org");
    let pixel = link(&html_of(b_mail), &format!("{base}/t/o/"));
    assert_eq!(reqwest::get(local(&e, &pixel)).await.unwrap().status(), 200);
    let unsubscribe = header(&b_mail.data, "List-Unsubscribe").unwrap().trim_matches(['<', '>']).to_string();
    let r = http
        .post(local(&e, &unsubscribe))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // c: a complaint.
    notify(&e, json!({ "type": "complaint", "messageId": message_id(&e, "c@example.org").await })).await;
    // A second campaign to the one contact still subscribed (added now): sent, never opened.
    crate::workflow_kit::contact(&e.p, "e@example.org", true, json!({})).await;
    let quiet = send_campaign(&e, "Quiet").await;
    settled(&e).await;

    // The feed of a: newest first, in the order things happened.
    let r = c
        .get(&format!("/activity?contactId={a}&type=email.sent&type=email.opened,email.clicked&type=email.bounced"))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(
        names(&r.json["data"]),
        ["email.bounced", "email.clicked", "email.opened", "email.opened", "email.sent"]
    );
    let sent = &r.json["data"][4];
    assert_eq!(sent["contact"], json!({ "id": a, "email": "a@example.org" }));
    assert_eq!(sent["campaign"], json!({ "id": launch, "name": "Launch" }));
    assert_eq!(sent["email"]["subject"], "Hello friend");
    assert!(sent["occurredAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(r.json["data"][0]["data"]["reason"], "mailbox gone");
    let every = c.get(&format!("/activity?contactId={a}")).await;
    assert_eq!(names(&every.json["data"])[0], "contact.unsubscribed", "the bounce unsubscribed a last");

    // The whole feed, three at a time: every item once, newest first.
    let all = walk(c, "", 3).await;
    let keys: Vec<(String, String)> =
        all.iter().map(|i| (i["occurredAt"].as_str().unwrap().into(), i["id"].as_str().unwrap().into())).collect();
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), all.len(), "no item twice");
    assert!(keys.windows(2).all(|w| w[0].0 >= w[1].0), "newest first");
    let count = |kind: &str| all.iter().filter(|i| i["type"] == kind).count();
    let expected = [
        ("email.sent", 4),
        ("email.opened", 3),
        ("email.clicked", 1),
        ("email.delivered", 1),
        ("email.bounced", 2),
        ("email.complained", 1),
        ("contact.unsubscribed", 4),
        ("campaign.sending", 2),
        ("campaign.sent", 2),
    ];
    for (kind, n) in expected {
        assert_eq!(count(kind), n, "{kind}");
    }
    let total: usize = expected.iter().map(|(_, n)| n).sum();
    assert_eq!(all.len(), total);
    // One campaign's activity: its mail and its milestones, nothing of the other.
    let of_launch = walk(c, &format!("&campaignId={launch}"), 4).await;
    assert!(of_launch.iter().all(|i| i["campaign"]["id"] == json!(launch)));
    assert_eq!(of_launch.iter().filter(|i| i["type"] == "campaign.sent").count(), 1);
    assert_eq!(of_launch.iter().filter(|i| i["type"] == "email.sent").count(), 3);
    assert_eq!(of_launch.iter().filter(|i| i["type"] == "contact.unsubscribed").count(), 1, "b's link");
    // A window: nothing before the test began, everything after.
    let before = herald_host::infra::clock::rfc3339(t0 - 1);
    assert_eq!(walk(c, &format!("&to={before}"), 50).await.len(), 0);
    assert_eq!(walk(c, &format!("&from={before}"), 100).await.len(), total);

    // Counts per type, the live count and the types present.
    let s = c.get("/activity/stats").await;
    assert_eq!(s.status, 200, "{}", s.json);
    let stat =
        |kind: &str| s.json["types"].as_array().unwrap().iter().find(|t| t["type"] == kind).unwrap()["count"].clone();
    for (kind, n) in expected {
        assert_eq!(stat(kind), json!(n), "{kind}");
    }
    assert_eq!((stat("email.failed"), stat("campaign.cancelled")), (json!(0), json!(0)));
    assert_eq!(s.json["total"], json!(total));
    let recent = c.get(&format!("/activity/recent-count?since={before}")).await;
    assert_eq!((recent.json["count"].clone(), recent.json["capped"].clone()), (json!(total), json!(false)));
    let types = c.get("/activity/types").await.json["types"].clone();
    assert_eq!(types.as_array().unwrap().len(), expected.len(), "{types}");
    assert!(!types.as_array().unwrap().contains(&json!("email.failed")));

    // Analytics: the campaign's figures and rates (of the 3 emails sent).
    let r = c.get(&format!("/analytics/campaign-stats?campaignId={launch}")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let want = json!({
        "campaignId": launch, "name": "Launch", "sent": 3, "delivered": 1, "opened": 2, "clicked": 1, "opens": 3,
        "clicks": 1, "bounced": 2, "complained": 1, "unsubscribed": 1, "failed": 0, "deliveryRate": 33.33,
        "openRate": 66.67, "clickRate": 33.33, "bounceRate": 66.67, "complaintRate": 33.33, "unsubscribeRate": 33.33,
    });
    assert_eq!(r.json, want);
    let top = c.get("/analytics/top-campaigns?metric=opens").await.json["campaigns"].clone();
    let order: Vec<&str> = top.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(order, ["Launch", "Quiet"]);
    assert_eq!(top[1]["sent"], 1);
    let top = c.get("/analytics/top-campaigns?metric=clickRate&limit=1").await.json["campaigns"].clone();
    assert_eq!((top.as_array().unwrap().len(), top[0]["campaignId"].clone()), (1, json!(launch)));
    // The series: zero-filled hours, summing to what happened.
    let from = herald_host::infra::clock::rfc3339(t0 - 3 * 3_600_000);
    let r = c.get(&format!("/analytics/timeseries?interval=hour&from={from}")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let series = r.json["series"].as_array().unwrap();
    assert!((4..=5).contains(&series.len()), "{}", series.len());
    assert!(series.iter().all(|b| b["time"].as_str().unwrap().ends_with(":00:00.000Z")));
    let sum = |m: &str| series.iter().map(|b| b[m].as_i64().unwrap()).sum::<i64>();
    assert_eq!([sum("sent"), sum("delivered"), sum("opened"), sum("clicked"), sum("bounced")], [4, 1, 2, 1, 2]);
    assert_eq!(series[0]["sent"], 0, "the first hours are zero-filled");
    let r = c.get("/analytics/timeseries?metric=opens,unsubscribed&interval=day").await;
    let series = r.json["series"].as_array().unwrap();
    assert_eq!(series.len(), 31);
    assert_eq!(series.iter().map(|b| b["opens"].as_i64().unwrap()).sum::<i64>(), 3);
    assert!(series[0].get("sent").is_none(), "only the metrics asked for");
    let r = c.get("/analytics/top-events?limit=3").await;
    assert_eq!(
        r.json["events"],
        json!([
            { "name": "contact.unsubscribed", "count": 4 },
            { "name": "email.sent", "count": 4 },
            { "name": "email.open", "count": 3 },
        ])
    );

    // Another project sees none of it.
    let other = proj(&e.s, "other@example.com").await;
    assert_eq!(other.secret.get("/activity").await.json["data"], json!([]));
    assert_envelope(
        &other.secret.get(&format!("/analytics/campaign-stats?campaignId={launch}")).await,
        404,
        "CAMPAIGN_NOT_FOUND",
    );
    assert_eq!(other.secret.get("/analytics/top-campaigns").await.json["campaigns"], json!([]));
    assert_eq!(other.secret.get("/activity/recent-count?since=2020-01-01T00:00:00Z").await.json["count"], 0);
    assert_eq!(other.secret.get("/analytics/top-events").await.json["events"], json!([]));
    assert_eq!(other.secret.get(&format!("/activity?campaignId={quiet}")).await.json["data"], json!([]));
    e.s.stop().await;
}

#[tokio::test]
async fn bad_activity_and_analytics_queries_get_400_and_keys_are_checked() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let c = &p.secret;
    for path in [
        "/activity?type=email.opens",
        "/activity?from=yesterday",
        "/activity?cursor=nonsense",
        "/activity/stats?days=0",
        "/activity/stats?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z",
        "/activity/stats?from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z",
        "/activity/recent-count?since=soon",
        "/analytics/timeseries?interval=week",
        "/analytics/timeseries?metric=sent,views",
        "/analytics/timeseries?interval=hour&from=2026-01-01T00:00:00Z&to=2026-02-01T00:00:00Z",
        "/analytics/timeseries?from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z",
        "/analytics/top-campaigns?metric=bounces",
        "/analytics/campaign-stats",
        "/analytics/top-events?days=400",
    ] {
        assert_envelope(&c.get(path).await, 400, "BAD_REQUEST");
    }
    assert_envelope(&c.get("/analytics/campaign-stats?campaignId=nope").await, 404, "CAMPAIGN_NOT_FOUND");
    // 366 daily buckets are allowed; the secret key only.
    let r = c.get("/analytics/timeseries?interval=day&from=2025-01-01T00:00:00Z&to=2026-01-01T00:00:00Z").await;
    assert_eq!((r.status, r.json["series"].as_array().map(Vec::len)), (200, Some(365)));
    for path in ["/activity", "/activity/stats", "/activity/types", "/analytics/top-events"] {
        assert_envelope(&p.public.get(path).await, 401, "INVALID_API_KEY");
    }
    s.stop().await;
}

#[tokio::test]
async fn upcoming_lists_scheduled_campaigns_and_waiting_workflows_with_their_times() {
    let e = env().await;
    let c = &e.p.secret;
    for who in ["a", "b"] {
        crate::workflow_kit::contact(&e.p, &format!("{who}@example.org"), true, json!({})).await;
    }
    let id = c.post("/campaigns", campaign("Later")).await.json["data"]["id"].as_str().unwrap().to_string();
    let at = "2031-01-01T09:00:00.000Z";
    let r = c.post(&format!("/campaigns/{id}/send"), json!({ "scheduledFor": at })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let (wf, _) = crate::workflow_kit::enabled_workflow(
        &e.p,
        "signup",
        false,
        &[("DELAY", json!({ "amount": 2, "unit": "hours" }))],
    )
    .await;
    let before = herald_host::infra::clock::wall_now_ms();
    assert_eq!(c.post("/v1/track", json!({ "email": "a@example.org", "event": "signup" })).await.status, 200);
    let mut up = Value::Null;
    for _ in 0..200 {
        up = c.get("/activity/upcoming").await.json;
        if up["workflows"].as_array().is_some_and(|w| !w.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(up["campaigns"], json!([{ "id": id, "name": "Later", "scheduledFor": at, "audienceSize": 2 }]));
    let w = &up["workflows"][0];
    assert_eq!((w["id"].clone(), w["name"].clone(), w["waiting"].clone()), (json!(wf), json!("signup"), json!(1)));
    let next = herald_host::infra::clock::parse_rfc3339(w["nextResumeAt"].as_str().unwrap()).unwrap();
    assert!((before + 7_200_000 - 1_000..=before + 7_200_000 + 60_000).contains(&next), "{w}");
    // The feed shows the schedule and the start.
    settled(&e).await;
    let feed = c.get("/activity?type=campaign.scheduled&type=workflow.started").await.json["data"].clone();
    assert_eq!(names(&feed), ["workflow.started", "campaign.scheduled"]);
    assert_eq!(feed[0]["workflow"], json!({ "id": wf, "name": "signup" }));
    assert_eq!(feed[1]["data"]["scheduledFor"], json!(at));
    // Cancelled, the campaign leaves the list and the feed says so.
    assert_eq!(c.post(&format!("/campaigns/{id}/cancel"), json!({})).await.status, 200);
    assert_eq!(c.get("/activity/upcoming").await.json["campaigns"], json!([]));
    assert_eq!(names(&c.get("/activity?type=campaign.cancelled").await.json["data"]), ["campaign.cancelled"]);
    let other = proj(&e.s, "other@example.com").await;
    assert_eq!(other.secret.get("/activity/upcoming").await.json, json!({ "campaigns": [], "workflows": [] }));
    e.s.stop().await;
}

#[tokio::test]
async fn items_of_one_millisecond_are_paged_through_once_each() {
    // A manual clock that is not moved: every event of a batch gets the same time.
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    for round in 0..2 {
        for i in 0..7 {
            let email = format!("p{i}@example.org");
            p.secret.post("/v1/track", json!({ "email": email, "event": "x", "subscribed": false })).await;
            p.secret.post("/v1/track", json!({ "email": email, "event": "x", "subscribed": true })).await;
        }
        if round == 0 {
            s.clock().advance(1_000);
        }
    }
    // 7 subscription events in the first millisecond (a new contact's first state is no flip), 14 in the
    // second.
    for limit in [1, 3, 5, 100] {
        let all = walk(&p.secret, "", limit).await;
        let ids: HashSet<&str> = all.iter().map(|i| i["id"].as_str().unwrap()).collect();
        assert_eq!((all.len(), ids.len()), (21, 21), "limit {limit}");
        let times: Vec<&str> = all.iter().map(|i| i["occurredAt"].as_str().unwrap()).collect();
        assert!(times.windows(2).all(|w| w[0] >= w[1]));
    }
    let newest = walk(&p.secret, "&type=contact.subscribed", 4).await;
    assert_eq!(newest.len(), 14);
    let mut keys: Vec<(String, String)> =
        newest.iter().map(|i| (i["occurredAt"].as_str().unwrap().into(), i["id"].as_str().unwrap().into())).collect();
    let walked = keys.clone();
    keys.sort_by(|a, b| b.cmp(a));
    assert_eq!(walked, keys, "newest first, and by id within a millisecond");
    s.stop().await;
}
