//! Campaigns (docs/behaviour.md#campaigns) against a real SMTP server on loopback: the
//! endpoints and their errors, the state machine, audiences, scheduling with a controlled clock, cancel
//! before and during sending, test sends, stats, and exactly-once sending across a restart, retried
//! batches and two workers sharing one database.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use herald_host::config::Config;
use herald_host::infra::clock::ManualClock;
use herald_host::store::contacts::Contact;
use serde_json::{Value, json};

use crate::harness::*;
use crate::smtp_sink::{Received, SmtpSink, header, html_of};

struct Env {
    s: Server,
    p: Proj,
    sink: SmtpSink,
}

const T0: i64 = 1_800_000_000_000;

/// A server with a verified sender domain `shop.test` and an SMTP sink. `stepped`: a manual clock and
/// no job workers (the test runs the queue with `s.worker.run_once`).
async fn env(stepped: bool) -> Env {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.run_jobs = !stepped;
    // The send throttle waits on the clock, which a stepped test does not move.
    config.send_rate_per_second = if stepped { 0 } else { 100 };
    config.campaign_batch_size = 50;
    // A stepped test counts deliveries job by job: one email per delivery job.
    if stepped {
        config.campaign_delivery_chunk = 1;
    }
    let clock = stepped.then(|| ManualClock::new(T0));
    let s = Server::start_with(config, clock).await;
    let p = proj(&s, "owner@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    if stepped {
        // The sign-up's verification mail goes first, so the tests step only campaign jobs.
        drain(&s.worker).await;
    }
    Env { s, p, sink }
}

pub(crate) fn campaign(name: &str) -> Value {
    json!({
        "name": name,
        "subject": "Hello {{name ?? \"friend\"}}",
        "body": "<html><body><p>Hi {{name ?? \"friend\"}}, <a href=\"https://example.org/sale\">sale</a></p></body></html>",
        "from": "news@shop.test",
        "audienceType": "ALL",
    })
}

/// Adds contacts straight through the store (the API is not what these tests are about).
async fn seed(e: &Env, people: &[(&str, bool, Value)]) -> Vec<String> {
    let now = e.s.state.clock.now_ms();
    let rows: Vec<Contact> = people
        .iter()
        .map(|(email, subscribed, data)| Contact {
            id: uuid::Uuid::now_v7().to_string(),
            email: email.to_string(),
            subscribed: *subscribed,
            data: data.as_object().cloned().unwrap_or_default(),
            version: 1,
            created_at: now,
            updated_at: now,
        })
        .collect();
    for chunk in rows.chunks(500) {
        e.s.state.store.write_contact_batch(&e.p.id, chunk, &[], &[], &[]).await.unwrap();
    }
    rows.into_iter().map(|c| c.id).collect()
}

async fn status(e: &Env, id: &str) -> String {
    e.p.secret.get(&format!("/campaigns/{id}")).await.json["status"].as_str().unwrap_or("").to_string()
}

/// Waits (real clock) until the campaign has `want` status.
async fn wait_status(e: &Env, id: &str, want: &str) -> Value {
    for _ in 0..400 {
        let r = e.p.secret.get(&format!("/campaigns/{id}")).await;
        if r.json["status"] == want {
            return r.json;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let jobs =
        e.s.state
            .store
            .query("SELECT kind, status, attempts, last_error FROM job WHERE kind != 'email.deliver'", json!({}))
            .await
            .unwrap()
            .value(0)
            .unwrap();
    let c = e.s.state.store.query("SELECT * FROM campaign", json!({})).await.unwrap().value(0).unwrap();
    panic!("campaign {id} is {} not {want}; jobs {jobs:#}; campaign {c:#}", status(e, id).await);
}

/// Runs the queue (stepped servers) until nothing is left to do now.
async fn drain(w: &herald_host::infra::jobs::Worker) {
    for _ in 0..200 {
        if w.run_once(50).await.unwrap().is_empty() {
            return;
        }
    }
    panic!("the queue does not drain");
}

fn subject(m: &Received) -> String {
    mail_parser::MessageParser::default().parse(m.data.as_bytes()).unwrap().subject().unwrap_or("").to_string()
}

fn recipients(sink: &SmtpSink) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for m in sink.received() {
        for t in m.to {
            *n.entry(t).or_insert(0) += 1;
        }
    }
    n
}

#[tokio::test]
async fn create_get_replace_list_duplicate_and_delete_with_their_errors() {
    let e = env(true).await;
    let c = &e.p.secret;
    // Create: the wrapped envelope, a DRAFT with zero counters.
    let r = c.post("/campaigns", campaign("Spring sale")).await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(r.json["success"], true);
    let d = &r.json["data"];
    assert_eq!(
        (d["status"].as_str(), d["type"].as_str(), d["audienceType"].as_str()),
        (Some("DRAFT"), Some("MARKETING"), Some("ALL"))
    );
    assert_eq!((d["totalRecipients"].clone(), d["sentCount"].clone()), (json!(0), json!(0)));
    assert_eq!(d["projectId"], e.p.id);
    let id = d["id"].as_str().unwrap().to_string();

    // Validation: every missing field is named, and the audience's requirements.
    let r = c.post("/campaigns", json!({})).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let fields: Vec<&str> =
        r.json["error"]["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    for f in ["name", "subject", "body", "from", "audienceType"] {
        assert!(fields.contains(&f), "{f} in {fields:?}");
    }
    let mut b = campaign("x");
    b["audienceType"] = json!("SEGMENT");
    let r = c.post("/campaigns", b.clone()).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "segmentId");
    b["segmentId"] = json!("00000000-0000-0000-0000-000000000000");
    let r = c.post("/campaigns", b).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "segmentId");
    let mut b = campaign("x");
    b["audienceType"] = json!("FILTERED");
    let r = c.post("/campaigns", b.clone()).await;
    assert_eq!(r.json["error"]["errors"][0]["field"], "audienceCondition", "{}", r.json);
    b["audienceCondition"] =
        json!({"logic": "AND", "groups": [{"filters": [{"field": "data.plan", "operator": "bogus", "value": 1}]}]});
    let r = c.post("/campaigns", b).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "audienceCondition");
    assert!(r.json["error"]["errors"][0]["message"].as_str().unwrap().contains("bogus"), "{}", r.json);
    let mut b = campaign("x");
    b["type"] = json!("PROMO");
    b["subject"] = json!("a\nb");
    b["body"] = json!("{{#if x}}unclosed");
    let r = c.post("/campaigns", b).await;
    let fields: Vec<&str> =
        r.json["error"]["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert_eq!(fields.len(), 3, "{fields:?}");
    for f in ["type", "subject", "body"] {
        assert!(fields.contains(&f), "{f} in {fields:?}");
    }
    // An unverified sender domain: 403 with the code the interface names (docs/behaviour.md#errors).
    let mut b = campaign("x");
    b["from"] = json!("news@elsewhere.test");
    let r = c.post("/campaigns", b).await;
    assert_envelope(&r, 403, "INTERNAL_SERVER_ERROR");

    // Get, replace.
    let r = c.get(&format!("/campaigns/{id}")).await;
    assert_eq!((r.status, r.json["name"].as_str()), (200, Some("Spring sale")));
    let mut b = campaign("Spring sale v2");
    b["type"] = json!("TRANSACTIONAL");
    b["description"] = json!("second take");
    let r = c.put(&format!("/campaigns/{id}"), b).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!((r.json["name"].as_str(), r.json["type"].as_str()), (Some("Spring sale v2"), Some("TRANSACTIONAL")));
    assert_eq!(c.get(&format!("/campaigns/{id}")).await.json["description"], "second take");
    let r = c.put(&format!("/campaigns/{id}"), json!({"name": "only a name"})).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");

    // Duplicate: a DRAFT copy.
    let r = c.post(&format!("/campaigns/{id}/duplicate"), json!({})).await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!((r.json["name"].as_str(), r.json["status"].as_str()), (Some("Spring sale v2 (Copy)"), Some("DRAFT")));
    assert_ne!(r.json["id"], json!(id));
    let copy = r.json["id"].as_str().unwrap().to_string();
    for n in ["Autumn", "Winter"] {
        let mut b = campaign(n);
        b["subject"] = json!(format!("{n} news"));
        assert_eq!(c.post("/campaigns", b).await.status, 201);
    }

    // List: offset pages, status filter (400 when unknown), search, sort.
    let r = c.get("/campaigns?pageSize=2").await;
    assert_eq!(
        (r.json["total"].clone(), r.json["totalPages"].clone(), r.json["page"].clone()),
        (json!(4), json!(2), json!(1))
    );
    assert_eq!(r.json["data"].as_array().unwrap().len(), 2);
    assert_eq!(r.json["data"][0]["name"], "Winter", "newest first by default");
    let r = c.get("/campaigns?sort=name&dir=asc").await;
    let names: Vec<&str> = r.json["data"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Autumn", "Spring sale v2", "Spring sale v2 (Copy)", "Winter"]);
    assert_eq!(c.get("/campaigns?search=AUTUMN%20NEWS").await.json["total"], 1, "search covers the subject");
    assert_eq!(c.get("/campaigns?search=news@shop").await.json["total"], 4, "search covers the sender");
    assert_eq!(c.get("/campaigns?status=DRAFT").await.json["total"], 4);
    assert_eq!(c.get("/campaigns?status=SENT").await.json["total"], 0);
    assert_envelope(&c.get("/campaigns?status=PAUSED").await, 400, "BAD_REQUEST");

    // Delete a DRAFT: 204, then 404.
    let r = c.delete(&format!("/campaigns/{copy}")).await;
    assert_eq!(r.status, 204);
    assert_envelope(&c.get(&format!("/campaigns/{copy}")).await, 404, "CAMPAIGN_NOT_FOUND");
    assert_envelope(&c.delete(&format!("/campaigns/{copy}")).await, 404, "CAMPAIGN_NOT_FOUND");

    // Another project's key reaches none of it.
    let other = proj(&e.s, "other@example.com").await;
    let o = &other.secret;
    assert_eq!(o.get("/campaigns").await.json["total"], 0);
    for r in [
        o.get(&format!("/campaigns/{id}")).await,
        o.put(&format!("/campaigns/{id}"), campaign("stolen")).await,
        o.post(&format!("/campaigns/{id}/send"), json!({})).await,
        o.post(&format!("/campaigns/{id}/cancel"), json!({})).await,
        o.post(&format!("/campaigns/{id}/duplicate"), json!({})).await,
        o.post(&format!("/campaigns/{id}/test"), json!({"email": "other@example.com"})).await,
        o.get(&format!("/campaigns/{id}/stats")).await,
        o.delete(&format!("/campaigns/{id}")).await,
    ] {
        assert_eq!(r.status, 404, "{}", r.json);
    }
    assert_eq!(c.get(&format!("/campaigns/{id}")).await.json["name"], "Spring sale v2");
    // A public key is not enough.
    assert_envelope(&e.p.public.get("/campaigns").await, 401, "INVALID_API_KEY");
    e.s.stop().await;
}

#[tokio::test]
async fn an_immediate_send_reaches_every_subscribed_contact_once_then_completes_with_counts() {
    let e = env(false).await;
    seed(
        &e,
        &[
            ("ada@example.org", true, json!({"name": "Ada"})),
            ("bob@example.org", true, json!({})),
            ("cy@example.org", true, json!({"name": "Cy"})),
            ("dee@example.org", false, json!({"name": "Dee"})),
        ],
    )
    .await;
    let c = &e.p.secret;
    let id = c.post("/campaigns", campaign("Launch")).await.json["data"]["id"].as_str().unwrap().to_string();
    let r = c.post(&format!("/campaigns/{id}/send"), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["success"], true);
    assert_eq!((r.json["data"]["id"].as_str(), r.json["data"]["name"].as_str()), (Some(id.as_str()), Some("Launch")));
    assert_eq!(r.json["data"]["status"], "SENDING");
    assert!(r.json["data"]["scheduledFor"].is_null());
    assert!(r.json["message"].as_str().is_some_and(|m| !m.is_empty()));
    // While it sends, nothing about it can change.
    let done = wait_status(&e, &id, "SENT").await;
    assert_eq!(done["totalRecipients"], 3);
    assert_eq!(done["sentCount"], 3);
    assert!(done["sentAt"].is_string());

    let got = e.sink.received();
    assert_eq!(got.len(), 3);
    let mut to: Vec<String> = got.iter().flat_map(|m| m.to.clone()).collect();
    to.sort();
    assert_eq!(to, ["ada@example.org", "bob@example.org", "cy@example.org"], "never the unsubscribed contact");
    let ada = got.iter().find(|m| m.to == ["ada@example.org"]).unwrap();
    assert_eq!(subject(ada), "Hello Ada");
    let bob = got.iter().find(|m| m.to == ["bob@example.org"]).unwrap();
    assert_eq!(subject(bob), "Hello friend");
    // Marketing: one-click unsubscribe headers, tracked links and the pixel.
    assert!(header(&ada.data, "List-Unsubscribe").is_some_and(|v| v.contains("/unsubscribe/")));
    assert_eq!(header(&ada.data, "List-Unsubscribe-Post").as_deref(), Some("List-Unsubscribe=One-Click"));
    let html = html_of(ada);
    let base = e.s.state.config.public_url.clone();
    assert!(html.contains(&format!("{base}/t/c/")) && html.contains(&format!("{base}/t/o/")), "{html}");

    // Every transition out of SENT is refused.
    assert_envelope(&c.post(&format!("/campaigns/{id}/send"), json!({})).await, 409, "CONFLICT");
    assert_envelope(&c.post(&format!("/campaigns/{id}/cancel"), json!({})).await, 409, "CONFLICT");
    assert_envelope(&c.put(&format!("/campaigns/{id}"), campaign("again")).await, 409, "CONFLICT");

    // Counters are recounted from the email records: opening twice is one opened email.
    let pixel = html[html.find(&format!("{base}/t/o/")).unwrap()..].split('"').next().unwrap().to_string();
    let local = format!("{}{}", e.s.base, pixel.trim_start_matches(base.as_str()));
    for _ in 0..2 {
        assert_eq!(reqwest::get(&local).await.unwrap().status(), 200);
    }
    let s = c.get(&format!("/campaigns/{id}/stats")).await;
    assert_eq!(s.status, 200, "{}", s.json);
    assert_eq!((s.json["sentCount"].clone(), s.json["openedCount"].clone()), (json!(3), json!(1)));
    assert_eq!((s.json["clickedCount"].clone(), s.json["bouncedCount"].clone()), (json!(0), json!(0)));
    assert_eq!(s.json["openRate"], 33.33);
    assert_eq!(s.json["pendingCount"], 0);
    assert_eq!(c.get(&format!("/campaigns/{id}")).await.json["openedCount"], 1);
    assert_eq!(c.get("/campaigns?status=SENT").await.json["total"], 1);
    // Over time: the first open of one email, in the hour it happened (opening twice is one).
    let t = c.get(&format!("/campaigns/{id}/timeseries")).await;
    assert_eq!(t.status, 200, "{}", t.json);
    assert_eq!(t.json["interval"], "hour");
    let series = t.json["series"].as_array().unwrap();
    let total = |k: &str| series.iter().map(|b| b[k].as_i64().unwrap()).sum::<i64>();
    assert_eq!((total("opened"), total("clicked")), (1, 0), "{}", t.json);
    assert_eq!(series.last().unwrap()["opened"], 1, "the open is in the current hour: {}", t.json);
    let other = proj(&e.s, "timeseries-other@x.test").await;
    assert_envelope(&other.secret.get(&format!("/campaigns/{id}/timeseries")).await, 404, "CAMPAIGN_NOT_FOUND");
    // The campaign's email events name it (for the activity feed, analytics and workflow conditions).
    for name in ["email.sent", "email.open"] {
        let evs = c.get(&format!("/events?name={name}&limit=100")).await.json["data"].clone();
        let evs = evs.as_array().unwrap();
        assert!(!evs.is_empty(), "{name}");
        assert!(evs.iter().all(|ev| ev["data"]["campaignId"] == json!(id)), "{name}: {evs:?}");
    }
    // A finished campaign can be deleted.
    assert_eq!(c.delete(&format!("/campaigns/{id}")).await.status, 204);
    e.s.stop().await;
}

#[tokio::test]
async fn segment_and_filtered_audiences_reach_only_their_subscribed_contacts() {
    let e = env(false).await;
    seed(
        &e,
        &[
            ("pro1@example.org", true, json!({"plan": "pro"})),
            ("pro2@example.org", false, json!({"plan": "pro"})),
            ("free@example.org", true, json!({"plan": "free"})),
            ("vip@example.org", true, json!({"plan": "free"})),
        ],
    )
    .await;
    let c = &e.p.secret;
    // A static segment with a subscribed and an unsubscribed member.
    let seg = c.post("/segments", json!({"name": "VIP", "type": "STATIC"})).await;
    assert_eq!(seg.status, 201, "{}", seg.json);
    let seg_id = seg.json["id"].as_str().unwrap().to_string();
    let r = c
        .post(&format!("/segments/{seg_id}/members"), json!({"emails": ["vip@example.org", "pro2@example.org"]}))
        .await;
    assert!(r.status < 300, "{}", r.json);
    let mut b = campaign("VIP");
    b["audienceType"] = json!("SEGMENT");
    b["segmentId"] = json!(seg_id);
    let vip = c.post("/campaigns", b).await.json["data"]["id"].as_str().unwrap().to_string();
    let mut b = campaign("Pro");
    b["audienceType"] = json!("FILTERED");
    b["audienceCondition"] = json!({"logic": "AND", "groups": [{"filters": [{"field": "data.plan", "operator": "equals", "value": "pro"}]}]});
    let pro = c.post("/campaigns", b).await.json["data"]["id"].as_str().unwrap().to_string();

    assert_eq!(c.post(&format!("/campaigns/{vip}/send"), json!({})).await.status, 200);
    assert_eq!(wait_status(&e, &vip, "SENT").await["totalRecipients"], 1);
    assert_eq!(c.post(&format!("/campaigns/{pro}/send"), json!({})).await.status, 200);
    assert_eq!(wait_status(&e, &pro, "SENT").await["totalRecipients"], 1);
    let n = recipients(&e.sink);
    assert_eq!(n.len(), 2, "{n:?}");
    assert_eq!((n.get("vip@example.org"), n.get("pro1@example.org")), (Some(&1), Some(&1)), "{n:?}");
    e.s.stop().await;
}

#[tokio::test]
async fn a_scheduled_send_fires_at_its_time_and_can_be_changed_until_then() {
    let e = env(true).await;
    seed(&e, &[("ada@example.org", true, json!({})), ("bob@example.org", true, json!({}))]).await;
    let c = &e.p.secret;
    let id = c.post("/campaigns", campaign("Later")).await.json["data"]["id"].as_str().unwrap().to_string();
    // Unparseable dates: 400, and the campaign stays a DRAFT.
    for bad in [json!("tomorrow-ish"), json!("2030-02-30"), json!(true)] {
        let r = c.post(&format!("/campaigns/{id}/send"), json!({"scheduledFor": bad})).await;
        assert_envelope(&r, 400, "BAD_REQUEST");
    }
    assert_eq!(status(&e, &id).await, "DRAFT");
    // Any form the date parser accepts; the response names the time.
    let at = T0 + 3_600_000;
    let when = "2027-01-15 08:00:00"; // 1,800,000,000,000 ms is 2027-01-15T08:00:00Z
    let r = c.post(&format!("/campaigns/{id}/send"), json!({"scheduledFor": when})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["data"]["status"], "SCHEDULED");
    assert_eq!(r.json["data"]["scheduledFor"], "2027-01-15T08:00:00.000Z");
    assert!(r.json["message"].as_str().unwrap().contains("2027-01-15T08:00:00.000Z"), "{}", r.json);
    // That was "now": cancel it back to DRAFT and schedule an hour ahead instead.
    let r = c.post(&format!("/campaigns/{id}/cancel"), json!({})).await;
    assert_eq!((r.status, r.json["status"].as_str()), (200, Some("DRAFT")), "{}", r.json);
    assert!(r.json["scheduledFor"].is_null());
    let r = c.post(&format!("/campaigns/{id}/send"), json!({"scheduledFor": "2027-01-15T10:00:00+01:00"})).await;
    assert_eq!(r.json["data"]["scheduledFor"], "2027-01-15T09:00:00.000Z");
    drain(&e.s.worker).await;
    assert_eq!(status(&e, &id).await, "SCHEDULED", "nothing happens before the time");
    assert!(e.sink.received().is_empty());
    // While SCHEDULED it can be replaced but neither deleted nor sent again.
    let mut b = campaign("Later, edited");
    b["subject"] = json!("Edited subject");
    let r = c.put(&format!("/campaigns/{id}"), b).await;
    assert_eq!((r.status, r.json["status"].as_str()), (200, Some("SCHEDULED")), "{}", r.json);
    assert_envelope(&c.delete(&format!("/campaigns/{id}")).await, 409, "CONFLICT");
    assert_envelope(&c.post(&format!("/campaigns/{id}/send"), json!({})).await, 409, "CONFLICT");

    e.s.clock().set(at - 1);
    drain(&e.s.worker).await;
    assert_eq!(status(&e, &id).await, "SCHEDULED");
    e.s.clock().set(at);
    drain(&e.s.worker).await;
    e.s.clock().advance(60_000); // the progress job's next turn
    drain(&e.s.worker).await;
    let done = e.p.secret.get(&format!("/campaigns/{id}")).await.json;
    assert_eq!(done["status"], "SENT", "{done}");
    assert_eq!(done["totalRecipients"], 2);
    let got = e.sink.received();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|m| subject(m) == "Edited subject"), "the replaced content is what goes out");
    e.s.stop().await;
}

#[tokio::test]
async fn a_past_schedule_starts_at_once() {
    let e = env(true).await;
    seed(&e, &[("ada@example.org", true, json!({}))]).await;
    let c = &e.p.secret;
    let id = c.post("/campaigns", campaign("Past")).await.json["data"]["id"].as_str().unwrap().to_string();
    let r = c.post(&format!("/campaigns/{id}/send"), json!({"scheduledFor": "2020-01-01T00:00:00Z"})).await;
    assert_eq!(r.json["data"]["status"], "SCHEDULED", "{}", r.json);
    drain(&e.s.worker).await;
    e.s.clock().advance(60_000);
    drain(&e.s.worker).await;
    assert_eq!(status(&e, &id).await, "SENT");
    assert_eq!(e.sink.received().len(), 1);
    e.s.stop().await;
}

#[tokio::test]
async fn cancel_before_anything_left_returns_to_draft_and_during_sending_cancels_the_rest() {
    let e = env(true).await;
    seed(
        &e,
        &[("a@example.org", true, json!({})), ("b@example.org", true, json!({})), ("c@example.org", true, json!({}))],
    )
    .await;
    let c = &e.p.secret;
    let id = c.post("/campaigns", campaign("Oops")).await.json["data"]["id"].as_str().unwrap().to_string();
    assert_envelope(&c.post(&format!("/campaigns/{id}/cancel"), json!({})).await, 409, "CONFLICT");

    // Sent, resolved and written, but nothing handed to the transport: back to DRAFT, nothing ever goes.
    assert_eq!(c.post(&format!("/campaigns/{id}/send"), json!({})).await.json["data"]["status"], "SENDING");
    e.s.worker.run_once(1).await.unwrap(); // resolve
    e.s.worker.run_once(1).await.unwrap(); // the one batch: three PENDING emails
    assert_eq!(c.get(&format!("/campaigns/{id}/stats")).await.json["pendingCount"], 3);
    let r = c.post(&format!("/campaigns/{id}/cancel"), json!({})).await;
    assert_eq!((r.status, r.json["status"].as_str()), (200, Some("DRAFT")), "{}", r.json);
    assert_eq!(r.json["totalRecipients"], 0);
    // The run's email records went, and their stored messages with them.
    let left =
        e.s.state
            .store
            .query("RETURN [array::len(SELECT id FROM email), array::len(SELECT id FROM email_body)]", json!({}));
    assert_eq!(left.await.unwrap().value(0).unwrap(), json!([0, 0]));
    drain(&e.s.worker).await;
    assert!(e.sink.received().is_empty(), "cancelled emails are never sent");
    assert_eq!(status(&e, &id).await, "DRAFT");

    // Sent again (the earlier run's jobs do nothing); one email goes out, then cancel.
    assert_eq!(c.post(&format!("/campaigns/{id}/send"), json!({})).await.json["data"]["status"], "SENDING");
    e.s.worker.run_once(1).await.unwrap(); // resolve
    e.s.worker.run_once(1).await.unwrap(); // batch
    e.s.worker.run_once(1).await.unwrap(); // one delivery
    assert_eq!(e.sink.received().len(), 1);
    let r = c.post(&format!("/campaigns/{id}/cancel"), json!({})).await;
    assert_eq!((r.status, r.json["status"].as_str()), (200, Some("CANCELLED")), "{}", r.json);
    assert_eq!(r.json["sentCount"], 1);
    drain(&e.s.worker).await;
    e.s.clock().advance(60_000);
    drain(&e.s.worker).await;
    assert_eq!(e.sink.received().len(), 1, "the rest never goes");
    assert_eq!(status(&e, &id).await, "CANCELLED");
    let s = c.get(&format!("/campaigns/{id}/stats")).await.json;
    assert_eq!(
        (s["sentCount"].clone(), s["cancelledCount"].clone(), s["pendingCount"].clone()),
        (json!(1), json!(2), json!(0))
    );
    // CANCELLED is final.
    assert_envelope(&c.post(&format!("/campaigns/{id}/send"), json!({})).await, 409, "CONFLICT");
    assert_envelope(&c.post(&format!("/campaigns/{id}/cancel"), json!({})).await, 409, "CONFLICT");
    assert_envelope(&c.put(&format!("/campaigns/{id}"), campaign("x")).await, 409, "CONFLICT");
    assert_eq!(c.delete(&format!("/campaigns/{id}")).await.status, 204);
    e.s.stop().await;
}

#[tokio::test]
async fn test_sends_go_only_to_members_marked_untracked_and_uncounted() {
    let e = env(false).await;
    let c = &e.p.secret;
    seed(&e, &[("owner@example.com", true, json!({"name": "Olive"}))]).await;
    let id = c.post("/campaigns", campaign("Preview")).await.json["data"]["id"].as_str().unwrap().to_string();
    let r = c.post(&format!("/campaigns/{id}/test"), json!({"email": "stranger@example.org"})).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "email");
    assert_envelope(&c.post(&format!("/campaigns/{id}/test"), json!({})).await, 422, "VALIDATION_ERROR");
    // Test sends go to members whose address is verified (billing.rs tests the refusals).
    let owner = e.s.state.store.user_by_email("owner@example.com").await.unwrap().unwrap();
    e.s.state.store.set_email_verified(&owner.id, T0).await.unwrap();
    let r = c.post(&format!("/campaigns/{id}/test"), json!({"email": "Owner@Example.com"})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["success"], true);
    let mut got = Vec::new();
    for _ in 0..400 {
        got = e.sink.received();
        if !got.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!(m.to, ["owner@example.com"]);
    assert_eq!(subject(m), "[TEST] Hello Olive");
    assert_eq!(header(&m.data, "X-Herald-Test").as_deref(), Some("true"));
    let html = html_of(m);
    assert!(!html.contains("/t/o/") && !html.contains("/t/c/"), "no tracking: {html}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = c.get(&format!("/campaigns/{id}")).await.json;
    assert_eq!((after["status"].as_str(), after["sentCount"].clone()), (Some("DRAFT"), json!(0)), "not counted");
    let s = c.get(&format!("/campaigns/{id}/stats")).await.json;
    assert_eq!(s["sentCount"], 0);
    e.s.stop().await;
}

#[tokio::test]
async fn segments_and_domains_in_use_by_a_campaign_not_sent_yet_cannot_be_deleted() {
    let e = env(true).await;
    let c = &e.p.secret;
    let seg = c
        .post("/segments", json!({"name": "Pros", "condition": {"logic": "AND", "groups": [{"filters": [{"field": "data.plan", "operator": "equals", "value": "pro"}]}]}}))
        .await
        .json["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut b = campaign("To pros");
    b["audienceType"] = json!("SEGMENT");
    b["segmentId"] = json!(seg);
    let id = c.post("/campaigns", b).await.json["data"]["id"].as_str().unwrap().to_string();
    // A DRAFT holds its segment and its sender domain, and the message counts the campaigns.
    let r = c.delete(&format!("/segments/{seg}")).await;
    assert_envelope(&r, 409, "CONFLICT");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("1 campaign not sent yet"), "{}", r.json);
    let domains = c.get(&format!("/domains/project/{}", e.p.id)).await.json;
    let domain_id = domains[0]["id"].as_str().unwrap().to_string();
    let r = c.delete(&format!("/domains/{domain_id}")).await;
    assert_envelope(&r, 409, "CONFLICT");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("(DRAFT)"), "{}", r.json);
    let r = c.post(&format!("/campaigns/{id}/send"), json!({"scheduledFor": "2030-01-01T00:00:00Z"})).await;
    assert_eq!(r.json["data"]["status"], "SCHEDULED");
    assert_envelope(&c.delete(&format!("/segments/{seg}")).await, 409, "CONFLICT");
    assert_envelope(&c.delete(&format!("/domains/{domain_id}")).await, 409, "CONFLICT");
    assert_eq!(c.post(&format!("/campaigns/{id}/cancel"), json!({})).await.json["status"], "DRAFT");
    assert_envelope(&c.delete(&format!("/segments/{seg}")).await, 409, "CONFLICT");
    // Once the campaign is gone, so is the hold; a template sending from the domain holds it too.
    assert_eq!(c.delete(&format!("/campaigns/{id}")).await.status, 204);
    assert_eq!(c.delete(&format!("/segments/{seg}")).await.status, 204);
    let t = c.post("/templates", json!({"name": "t", "subject": "s", "body": "b", "from": "x@shop.test"})).await;
    assert_eq!(t.status, 201);
    assert_envelope(&c.delete(&format!("/domains/{domain_id}")).await, 409, "CONFLICT");
    assert_eq!(c.delete(&format!("/templates/{}", t.json["id"].as_str().unwrap())).await.status, 204);
    assert_eq!(c.delete(&format!("/domains/{domain_id}")).await.status, 200);
    e.s.stop().await;
}

#[tokio::test]
async fn a_campaign_interrupted_by_a_restart_gives_every_subscribed_contact_exactly_one_email() {
    let e = env(true).await;
    const N: usize = 130; // three batches of 50 (the test servers' batch size)
    let people: Vec<(String, bool)> = (0..N + 50).map(|i| (format!("p{i:04}@example.org"), i < N)).collect();
    let refs: Vec<(&str, bool, Value)> = people.iter().map(|(m, s)| (m.as_str(), *s, json!({}))).collect();
    seed(&e, &refs).await;
    let c = &e.p.secret;
    let id = c.post("/campaigns", campaign("Big")).await.json["data"]["id"].as_str().unwrap().to_string();
    assert_eq!(c.post(&format!("/campaigns/{id}/send"), json!({})).await.status, 200);
    // The first process resolves the audience, writes one batch and delivers a few, then dies.
    e.s.worker.run_once(1).await.unwrap();
    e.s.worker.run_once(1).await.unwrap();
    e.s.worker.run_once(1).await.unwrap();
    let store = e.s.state.store.clone();
    assert!(e.sink.received().len() <= 1);

    // Two new processes on the same database run the rest side by side.
    let start = |store: herald_host::store::Store| {
        let mut config = Config::for_tests();
        config.smtp_url = Some(e.sink.url());
        config.run_jobs = false;
        config.send_rate_per_second = 0;
        config.campaign_batch_size = 50;
        let clock: herald_host::infra::clock::SharedClock = Arc::new(e.s.clock().clone());
        async move {
            herald_host::App::from_store(config, store, clock, herald_host::infra::jobs::builtin_registry())
                .await
                .unwrap()
        }
    };
    let (a, b) = (start(store.clone()).await, start(store.clone()).await);
    let run = |w: herald_host::infra::jobs::Worker| async move {
        for _ in 0..400 {
            if w.run_once(64).await.unwrap().is_empty() {
                return;
            }
        }
    };
    tokio::join!(run(a.worker.clone()), run(b.worker.clone()));
    // Every batch job runs once more, as after a lost lease: nothing new is written or sent.
    store
        .query("UPDATE job SET status = 'queued', attempts = 0 WHERE kind = 'campaign.batch'", json!({}))
        .await
        .unwrap();
    tokio::join!(run(a.worker.clone()), run(b.worker.clone()));
    e.s.clock().advance(60_000);
    tokio::join!(run(a.worker.clone()), run(b.worker.clone()));
    // The two new processes wrote the later batches with deliveries in chunks of 100; every delivery job
    // runs once more, as after a crash between handing over and recording: nothing is sent again.
    let before = e.sink.received().len();
    store
        .query(
            "UPDATE job SET status = 'queued', attempts = 0, run_at = 0 WHERE kind = 'email.deliver.campaign'",
            json!({}),
        )
        .await
        .unwrap();
    tokio::join!(run(a.worker.clone()), run(b.worker.clone()));
    assert_eq!(e.sink.received().len(), before, "a re-run delivery job sends nothing twice");

    let n = recipients(&e.sink);
    assert_eq!(n.len(), N, "every subscribed contact");
    assert!(n.values().all(|k| *k == 1), "exactly once each");
    assert!(n.keys().all(|m| m.as_str() < "p0130@example.org"), "never an unsubscribed one");
    let done = c.get(&format!("/campaigns/{id}")).await.json;
    assert_eq!(
        (done["status"].as_str(), done["totalRecipients"].clone(), done["sentCount"].clone()),
        (Some("SENT"), json!(N), json!(N))
    );
    let emails = store
        .query("SELECT count() AS n FROM email WHERE campaign = $c GROUP ALL", json!({"c": id}))
        .await
        .unwrap()
        .value(0)
        .unwrap();
    assert_eq!(emails[0]["n"], json!(N), "one email record per contact");
    e.s.stop().await;
}

#[tokio::test]
async fn a_contact_who_unsubscribes_while_the_campaign_is_queued_gets_nothing() {
    let e = env(true).await;
    let ids = seed(&e, &[("stay@example.org", true, json!({})), ("leave@example.org", true, json!({}))]).await;
    let c = &e.p.secret;
    let id = c.post("/campaigns", campaign("Queued")).await.json["data"]["id"].as_str().unwrap().to_string();
    assert_eq!(c.post(&format!("/campaigns/{id}/send"), json!({})).await.status, 200);
    e.s.worker.run_once(1).await.unwrap(); // resolve
    e.s.worker.run_once(1).await.unwrap(); // batch: both emails written
    assert_eq!(c.get(&format!("/campaigns/{id}/stats")).await.json["pendingCount"], 2);
    let r = c.patch(&format!("/contacts/{}", ids[1]), json!({"subscribed": false})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    drain(&e.s.worker).await;
    e.s.clock().advance(60_000);
    drain(&e.s.worker).await;
    let n = recipients(&e.sink);
    assert_eq!(n.keys().collect::<Vec<_>>(), ["stay@example.org"], "marketing mail: never to an unsubscribed contact");
    let s = c.get(&format!("/campaigns/{id}/stats")).await.json;
    assert_eq!(
        (s["status"].as_str(), s["sentCount"].clone(), s["cancelledCount"].clone()),
        (Some("SENT"), json!(1), json!(1))
    );
    e.s.stop().await;
}
