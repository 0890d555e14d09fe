//! `/v1/send` and delivery through a real SMTP server on loopback (docs/behaviour.md#sending,
//! docs/behaviour.md#limits, docs/behaviour.md#delivery-and-email-statuses).

use std::sync::Arc;
use std::time::Duration;

use herald_host::config::Config;
use mail_auth::hickory_resolver::config::{NameServerConfig, ProtocolConfig, ResolverConfig, ResolverOpts};
use serde_json::{Value, json};

use crate::dns_server::DnsServer;
use crate::harness::*;
use crate::smtp_sink::{SmtpSink, header, html_of};

struct Env {
    s: Server,
    p: Proj,
    sink: SmtpSink,
    dns: DnsServer,
}

async fn env(tempfails: usize, run_jobs: bool) -> Env {
    let sink = SmtpSink::start(tempfails).await;
    let dns = DnsServer::start().await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.dns_servers = vec![dns.addr];
    config.dns_timeout_ms = 1000;
    config.run_jobs = run_jobs;
    // A relay that refuses for now defers its emails for a minute or more: those tests move the clock.
    let clock =
        (tempfails > 0).then(|| herald_host::infra::clock::ManualClock::new(herald_host::infra::clock::wall_now_ms()));
    let s = Server::start_with(config, clock).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    let d = st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    // Publish the key so an independent verifier can check signatures.
    dns.txt(&format!("herald._domainkey.{}", d.name), &herald_host::infra::dkim::txt_value(&d.dkim_public));
    Env { s, p, sink, dns }
}

async fn email_status(e: &Env, id: &str) -> String {
    e.s.state.store.email(&e.p.id, id).await.unwrap().unwrap().status.to_string()
}

async fn wait_status(e: &Env, id: &str, want: &str) {
    for _ in 0..400 {
        if email_status(e, id).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("email {id} is {} not {want}", email_status(e, id).await);
}

#[tokio::test]
async fn a_send_arrives_with_headers_both_parts_attachments_and_a_valid_dkim_signature() {
    let e = env(0, true).await;
    let png = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b"\x89PNG fake image");
    let r = e
        .p
        .secret
        .post(
            "/v1/send",
            json!({
                "to": ["ada@example.org", { "name": "Bob B", "email": "Bob@Example.org" }],
                "from": { "name": "Shop", "email": "news@shop.test" },
                "subject": "Hello {{name ?? \"friend\"}}",
                "body": "<p>Hi {{name}}, code {{code}}</p><img src=\"cid:logo\">",
                "reply": "help@shop.test",
                "data": { "name": "Ada", "code": { "value": "X1", "persistent": false } },
                "headers": { "X-Campaign": "spring" },
                "attachments": [
                    { "filename": "terms.txt", "content": "VGVybXM=", "contentType": "text/plain" },
                    { "filename": "logo.png", "content": png, "contentType": "image/png", "contentId": "logo", "disposition": "inline" }
                ]
            }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["success"], true);
    let emails = r.json["data"]["emails"].as_array().unwrap();
    assert_eq!(emails.len(), 2);
    assert_eq!(emails[1]["contact"]["email"], "bob@example.org");
    let got = e.sink.wait_for(2).await;
    let m = got.iter().find(|m| m.to == ["ada@example.org"]).unwrap();
    assert_eq!(m.from, "news@shop.test");
    assert_eq!(header(&m.data, "From").as_deref(), Some("Shop <news@shop.test>"));
    assert_eq!(header(&m.data, "To").as_deref(), Some("ada@example.org"));
    assert_eq!(header(&m.data, "Subject").as_deref(), Some("Hello Ada"));
    assert_eq!(header(&m.data, "Reply-To").as_deref(), Some("help@shop.test"));
    assert_eq!(header(&m.data, "X-Campaign").as_deref(), Some("spring"));
    assert!(header(&m.data, "Message-ID").unwrap().ends_with("@shop.test>"));
    assert!(m.data.contains("multipart/alternative") && m.data.contains("text/plain") && m.data.contains("text/html"));
    assert!(m.data.contains("multipart/related") && m.data.contains("multipart/mixed"));
    assert!(m.data.contains("Hi Ada, code X1"), "the text part is derived from the HTML");
    assert!(m.data.contains("terms.txt") && m.data.contains("Content-ID: <logo>"));
    let bob = got.iter().find(|m| m.to == ["bob@example.org"]).unwrap();
    assert_eq!(header(&bob.data, "To").as_deref(), Some("\"Bob B\" <bob@example.org>"));

    // The DKIM signature verifies against the published key.
    let mut config = ResolverConfig::from_parts(None, vec![], Vec::<NameServerConfig>::new());
    config.add_name_server(NameServerConfig::new(e.dns.addr, ProtocolConfig::Udp));
    let verifier = mail_auth::MessageAuthenticator::new(config, ResolverOpts::default()).unwrap();
    let parsed = mail_auth::AuthenticatedMessage::parse(m.data.as_bytes()).unwrap();
    let out = verifier.verify_dkim(&parsed).await;
    assert_eq!(
        out[0].result(),
        &mail_auth::DkimResult::Pass,
        "{}",
        header(&m.data, "DKIM-Signature").unwrap_or_default()
    );
    assert!(header(&m.data, "List-Unsubscribe").is_none(), "transactional mail has no List-Unsubscribe");

    // Records, contacts and events.
    let id = emails[0]["email"].as_str().unwrap();
    wait_status(&e, id, "SENT").await;
    let c = e.p.secret.get(&format!("/contacts/{}", emails[0]["contact"]["id"].as_str().unwrap())).await;
    assert_eq!(c.json["subscribed"], false, "new contacts from /v1/send default to unsubscribed");
    assert_eq!(c.json["data"], json!({ "name": "Ada" }), "one-off values are not stored");
    let names = e.p.secret.get("/events?name=email.sent").await;
    assert_eq!(names.json["total"], 2);
    e.s.stop().await;
}

#[tokio::test]
async fn every_send_validation_rule_has_its_field_error() {
    let e = env(0, false).await;
    let ok = json!({ "to": "a@example.org", "from": "news@shop.test", "subject": "s", "body": "b" });
    let with = |patch: Value| {
        let mut b = ok.clone();
        for (k, v) in patch.as_object().unwrap() {
            if v.is_null() {
                b.as_object_mut().unwrap().remove(k);
            } else {
                b[k] = v.clone();
            }
        }
        b
    };
    let many: Vec<String> = (0..101).map(|i| format!("u{i}@example.org")).collect();
    let att = |extra: Value| {
        let mut a = json!({ "filename": "a.txt", "content": "YQ==" });
        for (k, v) in extra.as_object().unwrap() {
            a[k] = v.clone();
        }
        a
    };
    let cases = [
        (json!({ "to": null }), "to", "required"),
        (json!({ "to": many }), "to", "too_big"),
        (json!({ "to": ["a@example.org", { "email": "nope" }] }), "to.1.email", "invalid_string"),
        (json!({ "to": 5 }), "to", "invalid_type"),
        (json!({ "subject": "a\r\nBcc: x@example.org" }), "subject", "invalid_string"),
        (json!({ "subject": "x".repeat(999) }), "subject", "too_big"),
        (json!({ "subject": null }), "subject", "required"),
        (json!({ "body": null }), "body", "required"),
        (json!({ "body": "" }), "body", "too_small"),
        (json!({ "from": "bad" }), "from", "invalid_string"),
        (json!({ "reply": "bad" }), "reply", "invalid_string"),
        (json!({ "headers": { "X-A": "ok\r\nBcc: evil@example.org" } }), "headers.X-A", "invalid_string"),
        (json!({ "headers": { "Bad:Name": "v" } }), "headers.Bad:Name", "invalid_string"),
        (json!({ "headers": { "Subject": "v" } }), "headers.Subject", "reserved_header"),
        (json!({ "headers": { "X-Long": "v".repeat(999) } }), "headers.X-Long", "too_big"),
        (json!({ "attachments": vec![att(json!({})); 11] }), "attachments", "too_big"),
        (json!({ "attachments": [att(json!({ "content": "!!!" }))] }), "attachments.0.content", "invalid_string"),
        (json!({ "attachments": [att(json!({ "disposition": "inline" }))] }), "attachments.0.contentId", "required"),
        (json!({ "attachments": [att(json!({ "filename": "" }))] }), "attachments.0.filename", "invalid_string"),
        (json!({ "data": "x" }), "data", "invalid_type"),
        (json!({ "subscribed": "yes" }), "subscribed", "invalid_type"),
    ];
    for (patch, field, code) in cases {
        let r = e.p.secret.post("/v1/send", with(patch.clone())).await;
        assert_eq!(r.status, 422, "{patch}: {}", r.json);
        let errors = r.json["error"]["errors"].as_array().unwrap();
        assert!(
            errors.iter().any(|er| er["field"] == field && er["code"] == code),
            "{patch}: expected {field}/{code} in {errors:?}"
        );
    }
    let big = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, vec![0u8; 6 * 1024 * 1024]);
    let r =
        e.p.secret
            .post(
                "/v1/send",
                with(json!({ "attachments": [att(json!({ "content": big })), att(json!({ "content": big }))] })),
            )
            .await;
    assert_eq!(r.json["error"]["errors"][0]["field"], "attachments", "over 10 MB in total: {}", r.json["error"]);
    // Sender, template and key checks.
    let r = e.p.secret.post("/v1/send", with(json!({ "from": "news@other.test" }))).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json["error"]["details"]["reason"], "DOMAIN_NOT_REGISTERED");
    let r =
        e.p.secret
            .post("/v1/send", with(json!({ "template": "no-such-template", "subject": null, "body": null })))
            .await;
    assert_envelope(&r, 404, "TEMPLATE_NOT_FOUND");
    assert_envelope(&e.p.public.post("/v1/send", ok.clone()).await, 401, "INVALID_API_KEY");
    assert_eq!(e.p.secret.get("/contacts").await.json["total"], 0, "nothing was stored by refused requests");
    e.s.stop().await;
}

#[tokio::test]
async fn templates_supply_fields_that_the_request_overrides_and_marketing_respects_subscriptions() {
    let e = env(0, true).await;
    let t = e
        .p
        .secret
        .post("/templates", json!({ "name": "Promo", "subject": "Sale for {{name}}", "body": "<p>{{name}}</p>", "from": "deals@shop.test", "fromName": "Deals", "type": "MARKETING" }))
        .await;
    let tid = t.json["id"].as_str().unwrap();
    // A new contact is unsubscribed by default: marketing is refused.
    let r = e.p.secret.post("/v1/send", json!({ "to": "new@example.org", "template": tid })).await;
    assert_envelope(&r, 400, "BAD_REQUEST");
    assert_eq!(e.p.secret.get("/contacts").await.json["total"], 0, "refused before any write");
    let r = e.p.secret.post("/v1/send", json!({ "to": "new@example.org", "template": tid, "subscribed": true, "subject": "Override {{name}}", "data": { "name": "Nia" } })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let m = &e.sink.wait_for(1).await[0];
    assert_eq!(header(&m.data, "Subject").as_deref(), Some("Override Nia"), "the request's subject wins");
    assert_eq!(header(&m.data, "From").as_deref(), Some("Deals <deals@shop.test>"), "the template's from and fromName");
    assert!(m.data.contains("<p>Nia</p>"));
    // Unsubscribed contact: marketing refused, transactional allowed.
    let cid = r.json["data"]["emails"][0]["contact"]["id"].as_str().unwrap();
    e.p.secret.patch(&format!("/contacts/{cid}"), json!({ "subscribed": false })).await;
    let r = e.p.secret.post("/v1/send", json!({ "to": "new@example.org", "template": tid })).await;
    assert_envelope(&r, 400, "BAD_REQUEST");
    let r = e
        .p
        .secret
        .post(
            "/v1/send",
            json!({ "to": "new@example.org", "from": "news@shop.test", "subject": "Receipt", "body": "<p>Paid</p>" }),
        )
        .await;
    assert_eq!(r.status, 200, "transactional mail goes regardless");
    let c = e.p.secret.get(&format!("/contacts/{cid}")).await;
    assert_eq!(c.json["subscribed"], false, "omitting subscribed keeps an existing contact's state");
    e.s.stop().await;
}

#[tokio::test]
async fn a_temporary_failure_defers_the_email_which_is_tried_again_a_minute_later_and_succeeds() {
    let e = env(1, true).await;
    let r =
        e.p.secret
            .post(
                "/v1/send",
                json!({ "to": "tempfail@example.org", "from": "news@shop.test", "subject": "s", "body": "b" }),
            )
            .await;
    let id = r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string();
    wait_status(&e, &id, "DEFERRED").await;
    let row = e.s.state.store.email(&e.p.id, &id).await.unwrap().unwrap();
    assert_eq!(row.attempts, Some(1));
    assert_eq!(
        row.next_attempt_at,
        Some(herald_host::infra::clock::Clock::now_ms(e.s.clock()) + 60_000),
        "the first retry a minute later"
    );
    assert!(row.error.as_deref().unwrap_or("").contains("Try again later"), "{:?}", row.error);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(e.sink.received().is_empty(), "not before its time");
    e.s.clock().advance(60_000);
    e.sink.wait_for(1).await;
    wait_status(&e, &id, "SENT").await;
    assert_eq!(e.sink.received().len(), 1, "delivered once");
    e.s.stop().await;
}

#[tokio::test]
async fn a_permanent_failure_bounces_and_unsubscribes_the_contact() {
    let e = env(0, true).await;
    let r = e.p.secret.post("/v1/send", json!({ "to": "bounce@example.org", "from": "news@shop.test", "subject": "s", "body": "b", "subscribed": true })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let id = r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string();
    let cid = r.json["data"]["emails"][0]["contact"]["id"].as_str().unwrap().to_string();
    wait_status(&e, &id, "BOUNCED").await;
    let c = e.p.secret.get(&format!("/contacts/{cid}")).await;
    assert_eq!(c.json["subscribed"], false);
    let names: Vec<String> = e.p.secret.get(&format!("/events/contact/{cid}")).await.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        names.contains(&"email.bounce".to_string()) && names.contains(&"contact.unsubscribed".to_string()),
        "{names:?}"
    );
    assert!(e.sink.received().is_empty());
    e.s.stop().await;
}

#[tokio::test]
async fn an_email_accepted_before_a_crash_is_delivered_once_after_the_restart() {
    let e = env(0, false).await;
    let r =
        e.p.secret
            .post("/v1/send", json!({ "to": "a@example.org", "from": "news@shop.test", "subject": "s", "body": "b" }))
            .await;
    assert_eq!(r.status, 200);
    let id = r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string();
    assert_eq!(email_status(&e, &id).await, "PENDING", "written before the answer");
    // The process dies; another starts on the same database and runs the queue.
    let store = e.s.state.store.clone();
    let mut config = Config::for_tests();
    config.smtp_url = Some(e.sink.url());
    config.run_jobs = false;
    let app = herald_host::App::from_store(
        config,
        store,
        Arc::new(herald_host::infra::clock::SystemClock),
        herald_host::infra::jobs::builtin_registry(),
    )
    .await
    .unwrap();
    for _ in 0..3 {
        app.worker.run_once(20).await.unwrap();
    }
    assert_eq!(e.sink.received().len(), 1, "delivered exactly once");
    assert_eq!(email_status(&e, &id).await, "SENT");
}

#[tokio::test]
async fn send_idempotency_keys_conflict_on_reuse() {
    let e = env(0, false).await;
    let go = || async {
        e.p.secret
            .http
            .post(format!("{}/v1/send", e.s.base))
            .bearer_auth(e.p.secret.bearer.as_deref().unwrap())
            .header("Idempotency-Key", "order-7")
            .json(&json!({ "to": "a@example.org", "from": "news@shop.test", "subject": "s", "body": "b" }))
            .send()
            .await
            .unwrap()
    };
    assert_eq!(go().await.status(), 200);
    let r = go().await;
    assert_eq!(r.status(), 409);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["details"]["originalRequest"], "POST /v1/send");
    assert_eq!(
        e.s.state.store.query("SELECT count() AS n FROM email GROUP ALL", json!({})).await.unwrap().value(0).unwrap()
            [0]["n"],
        1
    );
    e.s.stop().await;
}

#[tokio::test]
async fn marketing_mail_carries_signed_one_click_unsubscribe_and_the_pages_flip_the_contact() {
    let e = env(0, true).await;
    let t = e
        .p
        .secret
        .post("/templates", json!({ "name": "News", "subject": "News", "body": "<a href=\"{{unsubscribeUrl}}\">stop</a> <a href=\"{{manageUrl}}\">prefs</a>", "from": "news@shop.test" }))
        .await;
    let r =
        e.p.secret
            .post("/v1/send", json!({ "to": "reader@example.org", "template": t.json["id"], "subscribed": true }))
            .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let cid = r.json["data"]["emails"][0]["contact"]["id"].as_str().unwrap().to_string();
    let m = &e.sink.wait_for(1).await[0];
    let lu = header(&m.data, "List-Unsubscribe").expect("marketing mail has List-Unsubscribe");
    assert_eq!(header(&m.data, "List-Unsubscribe-Post").as_deref(), Some("List-Unsubscribe=One-Click"));
    let url = lu.trim_matches(['<', '>']).to_string();
    assert!(url.starts_with(&format!("{}/unsubscribe/", e.s.state.config.public_url)), "{url}");
    assert!(m.data.contains(&url), "the body's {{{{unsubscribeUrl}}}} is the same link");
    let dkim = header(&m.data, "DKIM-Signature").unwrap().to_lowercase();
    assert!(
        dkim.contains("list-unsubscribe") && dkim.contains("list-unsubscribe-post"),
        "both headers are signed: {dkim}"
    );
    let mut config = ResolverConfig::from_parts(None, vec![], Vec::<NameServerConfig>::new());
    config.add_name_server(NameServerConfig::new(e.dns.addr, ProtocolConfig::Udp));
    let verifier = mail_auth::MessageAuthenticator::new(config, ResolverOpts::default()).unwrap();
    let parsed = mail_auth::AuthenticatedMessage::parse(m.data.as_bytes()).unwrap();
    assert_eq!(verifier.verify_dkim(&parsed).await[0].result(), &mail_auth::DkimResult::Pass);

    let path = url.trim_start_matches(&e.s.state.config.public_url).to_string();
    let page_url = format!("{}{path}", e.s.base);
    let http = reqwest::Client::new();
    let subscribed = || async { e.p.secret.get(&format!("/contacts/{cid}")).await.json["subscribed"].clone() };
    // GET shows a button and changes nothing (link scanners prefetch).
    let r = http.get(&page_url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("<form method=\"post\""));
    assert_eq!(subscribed().await, true);
    // The RFC 8058 one-click POST unsubscribes, once.
    let r = http
        .post(&page_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("List-Unsubscribe=One-Click")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(subscribed().await, false);
    http.post(&page_url).send().await.unwrap();
    let secret = e.p.secret.clone();
    let events_path = format!("/events/contact/{cid}");
    let events = |name: &'static str| {
        let (secret, path) = (secret.clone(), events_path.clone());
        async move { secret.get(&path).await.json["data"].as_array().unwrap().iter().filter(|v| v["name"] == name).count() }
    };
    assert_eq!(events("contact.unsubscribed").await, 1, "no event without a flip");
    // Subscribe again, and the manage page shows the state.
    let sub_url = page_url.replace("/unsubscribe/", "/subscribe/");
    http.post(&sub_url).send().await.unwrap();
    assert_eq!(subscribed().await, true);
    assert_eq!(events("contact.subscribed").await, 1);
    let manage = http.get(page_url.replace("/unsubscribe/", "/manage/")).send().await.unwrap().text().await.unwrap();
    assert!(manage.contains("reader@example.org") && manage.contains("subscribed"));
    // Tampered or foreign tokens do nothing.
    let bad = http.post(format!("{page_url}x")).send().await.unwrap();
    assert_eq!(bad.status(), 400);
    let bad = http.post(format!("{}/unsubscribe/not-a-token", e.s.base)).send().await.unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(subscribed().await, true);
    e.s.stop().await;
}

fn attr_urls(html: &str, prefix: &str) -> Vec<String> {
    html.match_indices(prefix).map(|(i, _)| html[i..].split(['"', '\'']).next().unwrap().to_string()).collect()
}

#[tokio::test]
async fn opens_and_clicks_are_tracked_on_marketing_mail_with_signed_links() {
    let e = env(0, true).await;
    let t = e
        .p
        .secret
        .post("/templates", json!({ "name": "News", "subject": "News", "body": "<html><body><a href=\"https://example.org/sale?a=1&amp;b=2\">Sale</a></body></html>", "from": "news@shop.test" }))
        .await;
    let r =
        e.p.secret
            .post("/v1/send", json!({ "to": "reader@example.org", "template": t.json["id"], "subscribed": true }))
            .await;
    let id = r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string();
    let cid = r.json["data"]["emails"][0]["contact"]["id"].as_str().unwrap().to_string();
    let m = &e.sink.wait_for(1).await[0];
    let html = html_of(m);
    let base = &e.s.state.config.public_url;
    let pixels = attr_urls(&html, &format!("{base}/t/o/"));
    let clicks = attr_urls(&html, &format!("{base}/t/c/"));
    assert_eq!((pixels.len(), clicks.len()), (1, 1), "{html}");
    assert!(!html.contains("href=\"https://example.org"), "links are rewritten");
    let text =
        mail_parser::MessageParser::default().parse(m.data.as_bytes()).unwrap().body_text(0).unwrap().to_string();
    assert!(text.contains("https://example.org/sale?a=1&b=2"), "the text part keeps the original link: {text}");
    wait_status(&e, &id, "SENT").await;

    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let local = |u: &str| format!("{}{}", e.s.base, u.trim_start_matches(base.as_str()));
    let r = http.get(local(&pixels[0])).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/gif");
    assert_eq!(email_status(&e, &id).await, "OPENED");
    let r = http.get(local(&clicks[0])).send().await.unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "https://example.org/sale?a=1&b=2");
    assert_eq!(email_status(&e, &id).await, "CLICKED");
    // A later open counts but never moves the status down.
    http.get(local(&pixels[0])).send().await.unwrap();
    let row =
        e.s.state
            .store
            .query("SELECT open_count, click_count, opened_at, clicked_at FROM email", json!({}))
            .await
            .unwrap()
            .value(0)
            .unwrap();
    assert_eq!((row[0]["open_count"].clone(), row[0]["click_count"].clone()), (json!(2), json!(1)));
    assert_eq!(email_status(&e, &id).await, "CLICKED");
    let names: Vec<String> = e.p.secret.get(&format!("/events/contact/{cid}?limit=100")).await.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.iter().filter(|n| *n == "email.open").count(), 2);
    assert_eq!(names.iter().filter(|n| *n == "email.click").count(), 1);
    // No open redirect: a tampered or foreign token goes nowhere.
    let r = http.get(format!("{}x", local(&clicks[0]))).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.headers().get("location").is_none());
    let r = http.get(format!("{}/t/c/eyJ1IjoiaHR0cHM6Ly9ldmlsLmV4YW1wbGUifQ.c2ln", e.s.base)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    e.s.stop().await;
}

#[tokio::test]
async fn tracking_follows_the_project_mode() {
    let e = env(0, true).await;
    let send = |kind: &'static str| {
        let c = e.p.secret.clone();
        async move {
            let t = c
                .post("/templates", json!({ "name": kind, "subject": "s", "body": "<a href=\"https://example.org\">x</a>", "from": "news@shop.test", "type": kind }))
                .await;
            c.post("/v1/send", json!({ "to": "r@example.org", "template": t.json["id"], "subscribed": true })).await
        }
    };
    // Default MARKETING_ONLY: transactional mail is not tracked.
    send("TRANSACTIONAL").await;
    let m = e.sink.wait_for(1).await;
    assert!(!html_of(&m[0]).contains("/t/o/"), "transactional mail has no pixel by default");
    let r = e.p.session.patch(&format!("/users/@me/projects/{}", e.p.id), json!({ "tracking": "DISABLED" })).await;
    assert_eq!(r.json["tracking"], "DISABLED", "{}", r.json);
    send("MARKETING").await;
    let m = e.sink.wait_for(2).await;
    assert!(!html_of(&m[1]).contains("/t/o/"), "tracking disabled");
    e.p.session.patch(&format!("/users/@me/projects/{}", e.p.id), json!({ "tracking": "ENABLED" })).await;
    send("TRANSACTIONAL").await;
    let m = e.sink.wait_for(3).await;
    assert!(html_of(&m[2]).contains("/t/o/"), "tracking enabled for all mail");
    assert_envelope(
        &e.p.session.patch(&format!("/users/@me/projects/{}", e.p.id), json!({ "tracking": "SOMETIMES" })).await,
        422,
        "VALIDATION_ERROR",
    );
    e.s.stop().await;
}

async fn notify(e: &Env, body: &Value, ts: i64, sig: Option<String>) -> Resp {
    notification(&e.s, body, ts, sig).await
}

#[tokio::test]
async fn signed_notifications_update_emails_and_replays_and_bad_signatures_are_refused() {
    let e = env(0, true).await;
    let send = |to: &'static str| {
        let c = e.p.secret.clone();
        async move {
            let r = c
                .post(
                    "/v1/send",
                    json!({ "to": to, "from": "news@shop.test", "subject": "s", "body": "b", "subscribed": true }),
                )
                .await;
            (
                r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string(),
                r.json["data"]["emails"][0]["contact"]["id"].as_str().unwrap().to_string(),
            )
        }
    };
    let (id, _) = send("a@example.org").await;
    wait_status(&e, &id, "SENT").await;
    let mid = e.s.state.store.email(&e.p.id, &id).await.unwrap().unwrap().message_id;
    let now = herald_host::infra::clock::wall_now_ms() / 1000;
    let delivery = json!({ "type": "delivery", "messageId": mid });
    let r = notify(&e, &delivery, now, None).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(email_status(&e, &id).await, "DELIVERED");
    // The same signed notification again is a replay.
    assert_envelope(&notify(&e, &delivery, now, None).await, 409, "CONFLICT");
    // Unsigned, wrongly signed, or stale input is refused.
    let other = json!({ "type": "complaint", "messageId": mid });
    assert_envelope(&notify(&e, &other, now, Some("v1=00".into())).await, 401, "UNAUTHORIZED");
    let forged = herald_host::api::notifications::sign(b"not the key", now, &serde_json::to_vec(&other).unwrap());
    assert_envelope(&notify(&e, &other, now, Some(forged)).await, 401, "UNAUTHORIZED");
    assert_envelope(&notify(&e, &other, now - 301, None).await, 401, "UNAUTHORIZED");
    let res =
        reqwest::Client::new().post(format!("{}/webhooks/notifications", e.s.base)).json(&other).send().await.unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(email_status(&e, &id).await, "DELIVERED", "nothing refused changed the email");
    // A complaint: COMPLAINED, the contact unsubscribed, events written.
    let (id2, cid2) = send("b@example.org").await;
    wait_status(&e, &id2, "SENT").await;
    let mid2 = e.s.state.store.email(&e.p.id, &id2).await.unwrap().unwrap().message_id;
    assert_eq!(notify(&e, &json!({ "type": "complaint", "messageId": mid2 }), now, None).await.status, 200);
    assert_eq!(email_status(&e, &id2).await, "COMPLAINED");
    assert_eq!(e.p.secret.get(&format!("/contacts/{cid2}")).await.json["subscribed"], false);
    // A delivery notice arriving late never moves the status down.
    assert_eq!(
        notify(&e, &json!({ "type": "delivery", "messageId": mid2, "reason": "late" }), now, None).await.status,
        200
    );
    assert_eq!(email_status(&e, &id2).await, "COMPLAINED");
    // A permanent bounce: BOUNCED and unsubscribed.
    let (id3, cid3) = send("c@example.org").await;
    wait_status(&e, &id3, "SENT").await;
    let mid3 = e.s.state.store.email(&e.p.id, &id3).await.unwrap().unwrap().message_id;
    assert_eq!(
        notify(&e, &json!({ "type": "bounce", "messageId": mid3, "permanent": true, "reason": "5.1.1" }), now, None)
            .await
            .status,
        200
    );
    assert_eq!(email_status(&e, &id3).await, "BOUNCED");
    assert_eq!(e.p.secret.get(&format!("/contacts/{cid3}")).await.json["subscribed"], false);
    let names: Vec<String> = e.p.secret.get(&format!("/events/contact/{cid3}")).await.json["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.contains(&"email.bounce".into()) && names.contains(&"contact.unsubscribed".into()), "{names:?}");
    assert_envelope(
        &notify(&e, &json!({ "type": "delivery", "messageId": "<nope@x>" }), now, None).await,
        404,
        "EMAIL_NOT_FOUND",
    );
    e.s.stop().await;
}

#[tokio::test]
async fn concurrent_sends_to_one_new_recipient_make_one_contact_and_every_email_and_are_counted() {
    let e = env(0, false).await;
    let sends = (0..8).map(|i| {
        let c = e.p.secret.clone();
        async move {
            c.post(
                "/v1/send",
                json!({ "to": "same@example.org", "from": "news@shop.test", "subject": format!("s{i}"), "body": "b" }),
            )
            .await
        }
    });
    let results = futures_util::future::join_all(sends).await;
    let mut contacts = std::collections::HashSet::new();
    for r in &results {
        assert_eq!(r.status, 200, "{}", r.json);
        contacts.insert(r.json["data"]["emails"][0]["contact"]["id"].as_str().unwrap().to_string());
    }
    assert_eq!(contacts.len(), 1, "one contact for one email, whatever the concurrency");
    let list = e.p.secret.get("/contacts?search=same@example.org").await;
    assert_eq!(list.json["data"].as_array().map(Vec::len), Some(1), "{}", list.json);
    // Sends and tracks go through one group-commit engine, each counted under its own name.
    let tracks = (0..8).map(|i| {
        let c = e.p.secret.clone();
        async move { c.post("/v1/track", json!({ "email": format!("t{i}@example.org"), "event": "visit" })).await }
    });
    for r in futures_util::future::join_all(tracks).await {
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let metrics = e.s.client().http.get(format!("{}/metrics", e.s.base)).send().await.unwrap().text().await.unwrap();
    let count = |engine: &str| -> u64 {
        let prefix = format!("herald_group_commit_requests_total{{engine=\"{engine}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(prefix.as_str())).and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    assert!(count("accept") >= 8 && count("ingest") >= 8, "{metrics}");
    assert!(metrics.contains("herald_group_commit_batches_total{engine=\"accept\"}"), "{metrics}");
}

#[tokio::test]
async fn the_emails_of_one_send_share_a_delivery_job_whose_retry_sends_only_what_is_left() {
    let e = env(1, false).await;
    let r =
        e.p.secret
            .post(
                "/v1/send",
                json!({ "to": ["a@example.org", "tempfail@example.org", "bounce@example.org"], "from": "news@shop.test",
                    "subject": "s", "body": "b", "subscribed": true }),
            )
            .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let ids: Vec<String> =
        r.json["data"]["emails"].as_array().unwrap().iter().map(|m| m["email"].as_str().unwrap().to_string()).collect();
    let jobs = |status: &'static str| {
        let store = e.s.state.store.clone();
        async move {
            let v = store
                .query(
                    "SELECT VALUE payload FROM job WHERE kind = 'email.deliver' AND status = $s",
                    json!({ "s": status }),
                )
                .await
                .unwrap()
                .value(0)
                .unwrap();
            v.as_array()
                .unwrap()
                .iter()
                .map(|p| serde_json::from_str::<Value>(p.as_str().unwrap()).unwrap())
                .collect::<Vec<_>>()
        }
    };
    let queued = jobs("queued").await;
    assert_eq!(queued.len(), 1, "one delivery job for the three emails: {queued:?}");
    assert_eq!(queued[0]["emails"], json!(ids));
    // First run: the first is sent, the second is deferred (451), the third bounces (550).
    e.s.worker.run_once(20).await.unwrap();
    assert_eq!(email_status(&e, &ids[0]).await, "SENT");
    assert_eq!(email_status(&e, &ids[1]).await, "DEFERRED");
    assert_eq!(email_status(&e, &ids[2]).await, "BOUNCED");
    assert_eq!(jobs("queued").await.len(), 1, "the job waits for the one left");
    // Not before its next attempt; then the job sends only the one that was deferred.
    e.s.worker.run_once(20).await.unwrap();
    assert_eq!(email_status(&e, &ids[1]).await, "DEFERRED");
    e.s.clock().advance(60_000);
    e.s.worker.run_once(20).await.unwrap();
    assert_eq!(email_status(&e, &ids[1]).await, "SENT");
    let got: Vec<String> = e.sink.received().iter().map(|m| m.to.join(",")).collect();
    assert_eq!(got, vec!["a@example.org".to_string(), "tempfail@example.org".to_string()], "each delivered once");
    assert_eq!(jobs("completed").await.len(), 1);
}

/// Issue 30: templates written for the interface's reserved names render them (`plunk_id`, `plunk_email`
/// are the contact's id and email; docs/behaviour.md#templates).
#[tokio::test]
async fn the_reserved_contact_variables_render_the_contacts_id_and_email() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let r = p
        .secret
        .post(
            "/v1/send",
            json!({"to": "Ada@Example.org", "from": "a@shop.test", "subject": "For {{plunk_email}}",
                "body": "<p>{{plunk_id}}|{{plunk_email}}</p>"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let contact = r.json["data"]["emails"][0]["contact"]["id"].as_str().unwrap();
    let email = st.store.email(&p.id, r.json["data"]["emails"][0]["email"].as_str().unwrap()).await.unwrap().unwrap();
    assert!(email.html.contains(&format!("<p>{contact}|ada@example.org</p>")), "{}", email.html);
    assert_eq!(email.subject, "For ada@example.org");
}

#[tokio::test]
async fn with_a_return_path_host_each_email_goes_out_from_its_own_signed_bounce_address() {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.return_path_host = Some("bounces.herald.test".into());
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let r = p
        .secret
        .post("/v1/send", json!({ "to": ["a@example.com", "b@example.com"], "from": { "name": "Shop", "email": "hi@shop.test" }, "subject": "s", "body": "b" }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let mut ids: Vec<String> =
        r.json["data"]["emails"].as_array().unwrap().iter().map(|m| m["email"].as_str().unwrap().to_string()).collect();
    ids.sort();
    let key = herald_host::infra::security::derive_key("test-secret-test-secret", "herald-return-path-v1");
    let mut named: Vec<String> = sink
        .wait_for(2)
        .await
        .iter()
        .map(|m| {
            let (local, host) = m.from.split_once('@').unwrap();
            assert_eq!(host, "bounces.herald.test", "{}", m.from);
            assert!(header(&m.data, "From").unwrap().contains("hi@shop.test"), "the From header stays the sender's");
            herald_host::domain::return_path::email_of(&key, local)
                .unwrap_or_else(|| panic!("a forged token: {}", m.from))
        })
        .collect();
    named.sort();
    assert_eq!(named, ids, "each envelope sender names its own email");
}
