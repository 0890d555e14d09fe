//! Receiving mail over real SMTP on loopback (docs/behaviour.md#receiving-mail): delivery status
//! notifications to the return path, feedback-loop complaints, replies to a project's domain, what is
//! refused before DATA, the size limit, and a message accepted just before a `kill -9`.

use std::sync::Arc;
use std::time::Duration;

use herald_host::config::Config;
use lettre::address::Envelope;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde_json::{Value, json};

use crate::harness::*;
use crate::smtp_sink::SmtpSink;

const RP: &str = "bounces.herald.test";

struct Inbox {
    s: Server,
    p: Proj,
    sink: SmtpSink,
    port: u16,
}

async fn inbox(configure: impl FnOnce(&mut Config)) -> Inbox {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.return_path_host = Some(RP.into());
    config.smtp.listen = Some("127.0.0.1:0".parse().unwrap());
    configure(&mut config);
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    let d = st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let r = p.secret.patch(&format!("/domains/{}", d.id), json!({ "inbound": true })).await;
    assert_eq!(r.json["inbound"], true, "{}", r.json);
    let port = s.running.as_ref().and_then(|r| r.smtp_addr).expect("the SMTP server listens").port();
    Inbox { s, p, sink, port }
}

/// A second project on the same server (owner b@example.com) with the trusted domain `domain`, taking
/// mail on it when `receiving`; answers the project and the domain's id.
async fn tenant(i: &Inbox, domain: &str, receiving: bool) -> (Proj, String) {
    let st = &i.s.state;
    let b = proj(&i.s, "b@example.com").await;
    let d = st.domains.add(&st.store, &b.id, domain, true, st.clock.now_ms()).await.unwrap();
    st.store.set_domain_inbound(&b.id, &d.id, receiving, st.clock.now_ms()).await.unwrap();
    (b, d.id)
}

/// Sends `raw` over SMTP from `from` (None: the null sender) to `to`.
async fn deliver(
    port: u16,
    from: Option<&str>,
    to: &[&str],
    raw: &str,
) -> Result<String, lettre::transport::smtp::Error> {
    let t = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1").port(port).build();
    let envelope = Envelope::new(from.map(|f| f.parse().unwrap()), to.iter().map(|t| t.parse().unwrap()).collect())
        .expect("an envelope");
    t.send_raw(&envelope, raw.as_bytes()).await.map(|r| r.message().collect::<Vec<_>>().join(" "))
}

fn code(e: &lettre::transport::smtp::Error) -> String {
    e.status().map(|c| c.to_string()).unwrap_or_else(|| format!("no status: {e}"))
}

/// Sends one email to `to` through `/v1/send`; answers (email id, contact id, Message-ID, return path).
async fn sent(i: &Inbox, to: &str) -> (String, String, String, String) {
    let r =
        i.p.secret
            .post(
                "/v1/send",
                json!({ "to": to, "from": "hi@shop.test", "subject": "s", "body": "<p>b</p>", "subscribed": true }),
            )
            .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let id = r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string();
    let contact = r.json["data"]["emails"][0]["contact"]["id"].as_str().unwrap().to_string();
    let started = std::time::Instant::now();
    let m = loop {
        if let Some(m) = i.sink.received().into_iter().find(|m| m.to.iter().any(|t| t == to)) {
            break m;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the email to {to} was delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let row = i.s.state.store.email(&i.p.id, &id).await.unwrap().unwrap();
    (id, contact, row.message_id, m.from)
}

async fn status(i: &Inbox, id: &str) -> String {
    i.s.state.store.email(&i.p.id, id).await.unwrap().unwrap().status.to_string()
}

async fn events(i: &Inbox, contact: &str) -> Vec<Value> {
    i.p.secret.get(&format!("/events/contact/{contact}")).await.json["data"].as_array().cloned().unwrap_or_default()
}

/// Polls until `f` holds (ten seconds at most).
async fn until<F: AsyncFn() -> bool>(what: &str, f: F) {
    let started = std::time::Instant::now();
    while !f().await {
        assert!(started.elapsed() < Duration::from_secs(10), "{what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn dsn(to: &str, action: &str, status: &str, message_id: &str) -> String {
    format!(
        "From: Mail Delivery System <MAILER-DAEMON@mx.example.org>\r\nTo: {to}\r\nSubject: Undelivered Mail Returned to Sender\r\n\
         MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=delivery-status; boundary=\"R\"\r\n\r\n\
         --R\r\nContent-Type: text/plain\r\n\r\nI'm sorry to have to inform you that your message could not be delivered.\r\n\
         --R\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.org\r\n\r\n\
         Final-Recipient: rfc822; someone@example.org\r\nAction: {action}\r\nStatus: {status}\r\n\
         Diagnostic-Code: smtp; 550 {status} mailbox unavailable\r\n\r\n\
         --R\r\nContent-Type: text/rfc822-headers\r\n\r\nMessage-ID: {message_id}\r\nSubject: s\r\n\r\n--R--\r\n"
    )
}

#[tokio::test]
async fn a_failure_report_to_the_return_path_bounces_its_email_and_a_delay_is_only_recorded() {
    let i = inbox(|_| {}).await;
    let (id, contact, mid, rp) = sent(&i, "gone@example.org").await;
    assert!(rp.ends_with(&format!("@{RP}")), "{rp}");
    assert_eq!(i.p.secret.get(&format!("/contacts/{contact}")).await.json["subscribed"], true);
    let reply = deliver(i.port, None, &[&rp], &dsn(&rp, "failed", "5.1.1", &mid)).await.expect("accepted");
    assert!(reply.contains("queued as"), "{reply}");
    until("the email is BOUNCED", async || status(&i, &id).await == "BOUNCED").await;
    let c = i.p.secret.get(&format!("/contacts/{contact}")).await;
    assert_eq!(c.json["subscribed"], false, "a hard bounce unsubscribes");
    let bounce = events(&i, &contact).await.into_iter().find(|e| e["name"] == "email.bounce").expect("email.bounce");
    assert_eq!(bounce["data"]["permanent"], true);
    assert_eq!(bounce["data"]["emailId"], id.as_str());
    assert!(bounce["data"]["reason"].as_str().unwrap().starts_with("5.1.1"), "{bounce}");
    let list = i.p.secret.get("/suppressions").await;
    assert!(list.json.to_string().contains("gone@example.org"), "{}", list.json);
    // The same report again (a retrying reporter, or a copy): applied, and nothing is recorded twice.
    deliver(i.port, None, &[&rp], &dsn(&rp, "failed", "5.1.1", &mid)).await.expect("accepted");
    until("the second report is applied", async || i.s.state.store.count_inbound().await.unwrap() == 0).await;
    let bounces = events(&i, &contact).await.into_iter().filter(|e| e["name"] == "email.bounce").count();
    assert_eq!(bounces, 1, "an email bounces once");

    // A delay: recorded on the email's contact as a soft bounce; the email and the contact stay as they were.
    let (id2, contact2, mid2, rp2) = sent(&i, "slow@example.org").await;
    deliver(i.port, None, &[&rp2], &dsn(&rp2, "delayed", "4.4.7", &mid2)).await.expect("accepted");
    until("the delay is recorded", async || events(&i, &contact2).await.iter().any(|e| e["name"] == "email.bounce"))
        .await;
    let e = events(&i, &contact2).await.into_iter().find(|e| e["name"] == "email.bounce").unwrap();
    assert_eq!(e["data"]["permanent"], false);
    assert_eq!(status(&i, &id2).await, "SENT");
    assert_eq!(i.p.secret.get(&format!("/contacts/{contact2}")).await.json["subscribed"], true);
    i.s.stop().await;
}

/// A feedback-loop complaint (ARF) about the email sent with return path `rp` and Message-ID `mid`.
fn arf(rp: &str, mid: &str) -> String {
    format!(
        "From: fbl@isp.example\r\nTo: fbl@{RP}\r\nSubject: Abuse report\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/report; report-type=feedback-report; boundary=\"F\"\r\n\r\n\
         --F\r\nContent-Type: text/plain\r\n\r\nA complaint about a message from your network.\r\n\
         --F\r\nContent-Type: message/feedback-report\r\n\r\nFeedback-Type: abuse\r\nUser-Agent: ISP-FBL/1.0\r\nVersion: 1\r\n\r\n\
         --F\r\nContent-Type: message/rfc822\r\n\r\nReturn-Path: <{rp}>\r\nFrom: hi@shop.test\r\nMessage-ID: {mid}\r\n\
         Subject: s\r\n\r\nb\r\n--F--\r\n"
    )
}

#[tokio::test]
async fn a_feedback_loop_report_marks_its_email_complained_and_a_forged_token_changes_nothing() {
    let i = inbox(|_| {}).await;
    let (id, contact, mid, rp) = sent(&i, "angry@example.org").await;
    let arf = arf(&rp, &mid);
    deliver(i.port, Some("fbl@isp.example"), &[&format!("fbl@{RP}")], &arf).await.expect("accepted");
    until("the email is COMPLAINED", async || status(&i, &id).await == "COMPLAINED").await;
    assert_eq!(i.p.secret.get(&format!("/contacts/{contact}")).await.json["subscribed"], false);
    assert!(events(&i, &contact).await.iter().any(|e| e["name"] == "email.complaint"));

    // A token made up for the email of another: dropped and counted, the email untouched.
    let (id2, _, mid2, rp2) = sent(&i, "fine@example.org").await;
    let (local, _) = rp2.split_once('@').unwrap();
    let mut forged = local.to_string();
    let last = forged.pop().unwrap();
    forged.push(if last == '0' { '1' } else { '0' });
    let forged = format!("{forged}@{RP}");
    let before = herald_host::infra::metrics::inbound_count("forged_token");
    // The report names no Message-ID Herald knows either.
    deliver(i.port, None, &[&forged], &dsn(&forged, "failed", "5.1.1", "<made-up@example.org>"))
        .await
        .expect("accepted");
    until("the forged report is counted", async || herald_host::infra::metrics::inbound_count("forged_token") > before)
        .await;
    assert_eq!(status(&i, &id2).await, "SENT", "{mid2}");
    i.s.stop().await;
}

#[tokio::test]
async fn copies_of_a_report_count_once_so_a_recipient_cannot_suspend_a_project_but_distinct_emails_still_do() {
    // Suspended above 30% complaints over at least 4 sent: one complaint in four emails is 25%.
    let i = inbox(|c| {
        c.suspend_complaint_percent = 30.0;
        c.suspend_min_sent = 4;
    })
    .await;
    let st = Arc::clone(&i.s.state);
    let mut mails = Vec::new();
    for n in 0..4 {
        mails.push(sent(&i, &format!("reader{n}@example.org")).await);
    }
    let thresholds = herald_host::services::suspension::Thresholds::of(&st.config);
    let figures =
        async || herald_host::services::suspension::last_7_days(&st.store, &i.p.id, st.clock.now_ms()).await.unwrap();
    until("the four emails are counted sent", async || figures().await.sent == 4).await;
    let (_, contact, mid, rp) = &mails[0];
    let fbl = format!("fbl@{RP}");
    // The recipient of one email sends its complaint three times, byte for byte.
    for _ in 0..3 {
        deliver(i.port, Some("someone@attacker.test"), &[&fbl], &arf(rp, mid)).await.expect("accepted");
    }
    until("the copies are applied", async || st.store.count_inbound().await.unwrap() == 0).await;
    until("the complaint is counted", async || figures().await.complained == 1).await;
    let complaints = events(&i, contact).await.into_iter().filter(|e| e["name"] == "email.complaint").count();
    assert_eq!(complaints, 1, "an email is complained about once");
    let now = st.clock.now_ms();
    assert_eq!(herald_host::services::suspension::check_all(&st.store, now, &thresholds).await.unwrap(), 0);
    assert!(st.store.project(&i.p.id).await.unwrap().unwrap().suspended.is_none(), "copies suspend nothing");
    assert_eq!(
        i.p.secret
            .post("/v1/send", json!({ "to": "x@example.org", "from": "hi@shop.test", "subject": "s", "body": "b" }))
            .await
            .status,
        200
    );

    // Complaints about two other emails: three of five sent, and the project is suspended.
    for (_, _, mid, rp) in &mails[1..3] {
        deliver(i.port, Some("fbl@isp.example"), &[&fbl], &arf(rp, mid)).await.expect("accepted");
    }
    until("three distinct complaints are counted", async || figures().await.complained == 3).await;
    let w = figures().await;
    assert_eq!((w.complained, w.sent), (3, 5), "the copies counted nowhere");
    let now = st.clock.now_ms();
    herald_host::services::suspension::check_all(&st.store, now, &thresholds).await.unwrap();
    let suspended = st.store.project(&i.p.id).await.unwrap().unwrap().suspended;
    assert!(
        suspended.is_some_and(|r| r.reason.contains("complaint rate")),
        "distinct complaints past the threshold suspend"
    );
    i.s.stop().await;
}

#[tokio::test]
async fn a_report_with_a_forged_token_or_sent_to_another_tenants_domain_changes_no_email() {
    let i = inbox(|_| {}).await;
    let st = Arc::clone(&i.s.state);
    let (b, _) = tenant(&i, "other.test", true).await;
    let r = b
        .secret
        .post("/v1/send", json!({ "to": "theirs@example.org", "from": "hi@other.test", "subject": "s", "body": "b" }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let id = r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string();
    until("B's email is handed over", async || {
        i.sink.received().iter().any(|m| m.to.iter().any(|t| t == "theirs@example.org"))
    })
    .await;
    let mid = st.store.email(&b.id, &id).await.unwrap().unwrap().message_id;
    let b_status = async || st.store.email(&b.id, &id).await.unwrap().unwrap().status.to_string();
    let applied = async || st.store.count_inbound().await.unwrap() == 0;

    // To A's domain and to a made-up token, quoting B's Message-ID.
    let forged = format!("b+{}@{RP}", "0".repeat(48));
    let before = herald_host::infra::metrics::inbound_count("forged_token");
    deliver(i.port, None, &["postmaster@shop.test", &forged], &dsn("postmaster@shop.test", "failed", "5.1.1", &mid))
        .await
        .expect("accepted");
    until("the forged report is counted", async || herald_host::infra::metrics::inbound_count("forged_token") > before)
        .await;
    // To A's domain alone, quoting B's Message-ID.
    deliver(i.port, None, &["postmaster@shop.test"], &dsn("postmaster@shop.test", "failed", "5.1.1", &mid))
        .await
        .expect("accepted");
    until("the reports are applied", applied).await;
    assert_eq!(b_status().await, "SENT", "another tenant's report changes nothing");
    assert_eq!(b.secret.get("/suppressions").await.json["data"], json!([]));

    // The same report to B's own domain is B's: its email bounces.
    deliver(i.port, None, &["postmaster@other.test"], &dsn("postmaster@other.test", "failed", "5.1.1", &mid))
        .await
        .expect("accepted");
    until("B's report bounces B's email", async || b_status().await == "BOUNCED").await;
    i.s.stop().await;
}

#[tokio::test]
async fn a_verified_domain_takes_mail_only_once_its_project_turns_receiving_on() {
    let i = inbox(|_| {}).await;
    let (b, d) = tenant(&i, "quiet.test", false).await;
    let reply = "From: Someone <someone@example.org>\r\nTo: help@quiet.test\r\nSubject: hello\r\n\r\nhi\r\n";
    // Verified, receiving off (the default): refused at RCPT, nothing stored or counted.
    for to in ["help@quiet.test", "help@inbound.quiet.test"] {
        let e = deliver(i.port, Some("someone@example.org"), &[to], reply).await.expect_err("refused");
        assert_eq!(code(&e), "550", "{to}: {e}");
    }
    let r = b.secret.get(&format!("/domains/project/{}", b.id)).await;
    assert_eq!(r.json[0]["inbound"], false, "{}", r.json);
    assert_eq!(r.json[0]["inboundRecord"]["type"], "MX", "{}", r.json);
    assert_eq!(r.json[0]["inboundRecord"]["name"], "inbound.quiet.test", "{}", r.json);

    // Only its own project turns it on, with a boolean.
    assert_eq!(i.p.secret.patch(&format!("/domains/{d}"), json!({ "inbound": true })).await.status, 404);
    for bad in [json!({ "inbound": "yes" }), json!({}), json!({ "inbound": true, "name": "x.test" })] {
        let r = b.secret.patch(&format!("/domains/{d}"), bad.clone()).await;
        assert_eq!(r.status, 422, "{bad}: {}", r.json);
    }
    let r = b.secret.patch(&format!("/domains/{d}"), json!({ "inbound": true })).await;
    assert_eq!((r.status, r.json["inbound"].clone()), (200, json!(true)), "{}", r.json);
    deliver(i.port, Some("someone@example.org"), &["help@quiet.test"], reply).await.expect("taken once on");
    until("the reply is recorded", async || {
        b.secret.get("/events?name=email.received").await.json.to_string().contains("someone@example.org")
    })
    .await;
    // And off again.
    let r = b.secret.patch(&format!("/domains/{d}"), json!({ "inbound": false })).await;
    assert_eq!(r.json["inbound"], false, "{}", r.json);
    let e = deliver(i.port, Some("someone@example.org"), &["help@quiet.test"], reply).await.expect_err("refused");
    assert_eq!(code(&e), "550", "{e}");
    i.s.stop().await;
}

#[tokio::test]
async fn a_reply_to_a_projects_domain_becomes_an_event_of_a_new_unsubscribed_contact() {
    let i = inbox(|_| {}).await;
    let (id, _, mid, _) = sent(&i, "customer@example.org").await;
    let reply = format!(
        "From: \"Ann Lee\" <ann@example.net>\r\nTo: support@inbound.shop.test\r\nSubject: Re: your order\r\n\
         Message-ID: <reply-1@example.net>\r\nIn-Reply-To: {mid}\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/alternative; boundary=\"A\"\r\n\r\n--A\r\nContent-Type: text/plain\r\n\r\nWhere is it?\r\n\
         --A\r\nContent-Type: text/html\r\n\r\n<p>Where is it?</p>\r\n--A--\r\n"
    );
    deliver(i.port, Some("ann@example.net"), &["support@inbound.shop.test"], &reply).await.expect("accepted");
    let contact = async || {
        let r = i.p.secret.get("/contacts?search=ann%40example.net").await;
        r.json["data"].as_array().and_then(|a| a.first().cloned())
    };
    until("the sender is a contact", async || contact().await.is_some()).await;
    let c = contact().await.unwrap();
    assert_eq!(c["subscribed"], false, "a sender is not subscribed by writing");
    let cid = c["id"].as_str().unwrap().to_string();
    until("the event is stored", async || events(&i, &cid).await.iter().any(|e| e["name"] == "email.received")).await;
    let e = events(&i, &cid).await.into_iter().find(|e| e["name"] == "email.received").unwrap();
    let d = &e["data"];
    assert_eq!(d["from"], "ann@example.net");
    assert_eq!(d["fromName"], "Ann Lee");
    assert_eq!(d["to"], json!(["support@inbound.shop.test"]));
    assert_eq!(d["subject"], "Re: your order");
    assert_eq!(d["text"].as_str().unwrap().trim(), "Where is it?");
    assert_eq!(d["html"].as_str().unwrap().trim(), "<p>Where is it?</p>");
    assert_eq!(d["autoReply"], false);
    assert_eq!(d["emailId"], id.as_str(), "a reply names the email it answers");
    let usage =
        i.s.state
            .store
            .usage_of(&i.p.id, herald_host::domain::billing::Category::Inbound, i.s.state.clock.now_ms())
            .await
            .unwrap();
    assert_eq!(usage, 1, "it counts in the inbound category");
    let feed = i.p.secret.get("/activity?type=email.received").await;
    assert_eq!(feed.status, 200, "{}", feed.json);
    assert_eq!(feed.json["data"][0]["type"], "email.received", "inbound mail is in the activity feed: {}", feed.json);

    // An out-of-office answer to the verified domain itself is marked as automatic.
    let away = "From: bob@example.net\r\nTo: hi@shop.test\r\nAuto-Submitted: auto-replied\r\nSubject: Out of office\r\n\r\nAway.\r\n";
    deliver(i.port, Some("bob@example.net"), &["hi@shop.test"], away).await.expect("accepted");
    let bob = async || {
        let r = i.p.secret.get("/contacts?search=bob%40example.net").await;
        r.json["data"].as_array().and_then(|a| a.first()).and_then(|c| c["id"].as_str()).map(str::to_string)
    };
    until("the auto-reply's sender is a contact", async || bob().await.is_some()).await;
    let bid = bob().await.unwrap();
    until("its event is stored", async || events(&i, &bid).await.iter().any(|e| e["name"] == "email.received")).await;
    let e = events(&i, &bid).await.into_iter().find(|e| e["name"] == "email.received").unwrap();
    assert_eq!(e["data"]["autoReply"], true);
    i.s.stop().await;
}

#[tokio::test]
async fn mail_for_an_unknown_domain_is_refused_at_rcpt_and_an_oversize_message_at_data() {
    // Jobs off: what is accepted stays stored, to be counted.
    let i = inbox(|c| {
        c.smtp.max_message_bytes = 100 * 1024;
        c.run_jobs = false;
    })
    .await;
    let stored = async || i.s.state.store.count_inbound().await.unwrap();
    let e = deliver(i.port, Some("x@example.net"), &["someone@elsewhere.test"], "Subject: hi\r\n\r\nhi\r\n")
        .await
        .expect_err("refused");
    assert_eq!(code(&e), "550", "{e}");
    // A domain another project has not verified is unknown too.
    let e = deliver(i.port, Some("x@example.net"), &["a@shop.test.evil.example"], "Subject: hi\r\n\r\nhi\r\n")
        .await
        .expect_err("refused");
    assert_eq!(code(&e), "550", "{e}");
    let big = format!("From: x@example.net\r\nSubject: big\r\n\r\n{}\r\n", "y".repeat(150 * 1024));
    let e = deliver(i.port, Some("x@example.net"), &["support@shop.test"], &big).await.expect_err("too big");
    assert_eq!(code(&e), "552", "{e}");
    assert_eq!(stored().await, 0, "nothing refused was stored");
    deliver(i.port, Some("x@example.net"), &["support@shop.test"], "From: x@example.net\r\nSubject: ok\r\n\r\nok\r\n")
        .await
        .expect("a small message is accepted");
    assert_eq!(stored().await, 1, "what was accepted is stored before the 250");
    i.s.stop().await;
}

#[tokio::test]
async fn a_message_accepted_just_before_a_kill_is_applied_after_the_restart() {
    let dir = Config::test_scratch().join(format!("inbound-crash-{}", uuid::Uuid::new_v4()));
    let port = crate::binary::free_port();
    let smtp_port = crate::binary::free_port();
    let herald = |run_jobs: bool| {
        let mut c = crate::binary::herald(&dir, port);
        c.env("HERALD_SECRET", "a test secret of the inbound suite")
            .env("HERALD_SMTP_LISTEN", format!("127.0.0.1:{smtp_port}"))
            .env("HERALD_RUN_JOBS", run_jobs.to_string());
        c
    };
    let (project, secret) = crate::binary::project_with(|| herald(true), Some("shop.test"));

    // Jobs off: the message is only stored when the 250 comes; then the process dies.
    let base = format!("http://127.0.0.1:{port}");
    let mut server = crate::binary::serve(herald(false));
    assert!(crate::binary::wait_until_up(&base).await);
    // The domain takes replies once its project turns receiving on.
    let http = reqwest::Client::new();
    let list = crate::binary::get_json(&http, &format!("{base}/domains/project/{project}"), &secret).await;
    let domain = list[0]["id"].as_str().expect("the domain");
    let on = http.patch(format!("{base}/domains/{domain}")).bearer_auth(&secret).json(&json!({ "inbound": true }));
    assert_eq!(on.send().await.unwrap().status(), 200);
    let msg = "From: carol@example.net\r\nTo: help@shop.test\r\nSubject: Hello after a crash\r\n\r\nHi\r\n";
    deliver(smtp_port, Some("carol@example.net"), &["help@shop.test"], msg).await.expect("250");
    crate::binary::signal(&mut server, "-KILL");

    let _server = crate::binary::serve(herald(true));
    assert!(crate::binary::wait_until_up(&base).await);
    let http = reqwest::Client::new();
    let started = std::time::Instant::now();
    loop {
        let v = crate::binary::get_json(&http, &format!("{base}/events?name=email.received"), &secret).await;
        let found =
            v["data"].as_array().map(|a| a.iter().filter(|e| e["data"]["subject"] == "Hello after a crash").count());
        if found == Some(1) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the message was applied after the restart: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn one_address_gets_few_connections_a_silent_client_is_cut_off_and_a_declared_size_is_checked() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let i = inbox(|c| {
        c.smtp.max_connections_per_ip = 2;
        c.smtp.timeout_secs = 1;
        c.smtp.max_message_bytes = 1 << 20;
    })
    .await;
    let connect = async || {
        let s = tokio::net::TcpStream::connect(("127.0.0.1", i.port)).await.unwrap();
        let (r, w) = s.into_split();
        (BufReader::new(r), w)
    };
    let line = async |r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>| {
        let mut l = String::new();
        tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut l)).await.expect("an answer in time").unwrap();
        l
    };
    let (mut a, _aw) = connect().await;
    assert!(line(&mut a).await.starts_with("220 "));
    let (mut b, mut bw) = connect().await;
    assert!(line(&mut b).await.starts_with("220 "));
    let (mut c, _cw) = connect().await;
    assert!(line(&mut c).await.starts_with("421 "), "a third connection from one address is turned away");
    // A declared size over the limit is refused at MAIL FROM (said within the one-second timeout).
    bw.write_all(b"EHLO client.test\r\n").await.unwrap();
    let mut ehlo = Vec::new();
    for _ in 0..20 {
        let l = line(&mut b).await;
        ehlo.push(l.clone());
        if !l.starts_with("250-") {
            break;
        }
    }
    assert!(ehlo.last().is_some_and(|l| l.starts_with("250 ")), "{ehlo:?}");
    assert!(ehlo.iter().any(|l| l.contains("SIZE 1048576")), "{ehlo:?}");
    bw.write_all(b"MAIL FROM:<x@example.net> SIZE=2000000\r\n").await.unwrap();
    assert!(line(&mut b).await.starts_with("552 5.3.4"));
    // A message far over the size it declared is refused at its end.
    bw.write_all(b"MAIL FROM:<x@example.net> SIZE=100\r\n").await.unwrap();
    assert!(line(&mut b).await.starts_with("250 "));
    bw.write_all(b"RCPT TO:<support@shop.test>\r\n").await.unwrap();
    assert!(line(&mut b).await.starts_with("250 "));
    bw.write_all(b"DATA\r\n").await.unwrap();
    assert!(line(&mut b).await.starts_with("354 "));
    let body = format!("Subject: x\r\n\r\n{}\r\n.\r\n", "z".repeat(20 * 1024));
    bw.write_all(body.as_bytes()).await.unwrap();
    assert!(line(&mut b).await.starts_with("552 5.3.4"), "held to its declared size");
    // A client that says nothing is cut off after the timeout.
    assert!(line(&mut a).await.starts_with("421 4.4.2"), "a silent client is closed");
    i.s.stop().await;
}

#[tokio::test]
async fn the_inbound_billing_limit_and_the_message_rate_hold_senders_off_for_later() {
    let i = inbox(|c| c.smtp.messages_per_minute = 3).await;
    let limits = herald_host::domain::billing::Limits { inbound: Some(1), ..Default::default() };
    i.s.state.store.set_billing_limits(&i.p.id, &limits, i.s.state.clock.now_ms()).await.unwrap();
    let msg = "From: x@example.net\r\nSubject: hello\r\n\r\nhi\r\n";
    deliver(i.port, Some("x@example.net"), &["support@shop.test"], msg).await.expect("the first fits");
    let inbound = herald_host::domain::billing::Category::Inbound;
    until("the first is counted", async || {
        i.s.state.store.usage_of(&i.p.id, inbound, i.s.state.clock.now_ms()).await.unwrap() == 1
    })
    .await;
    let e = deliver(i.port, Some("x@example.net"), &["support@shop.test"], msg).await.expect_err("over the limit");
    assert_eq!(code(&e), "452", "a temporary refusal, at RCPT: {e}");
    // Bounces to the return path are not the project's inbound mail: still taken.
    deliver(i.port, None, &[&format!("postmaster@{RP}")], msg).await.expect("the return path takes mail");
    // Three messages a minute from one address: the fourth is held off.
    let e = deliver(i.port, None, &[&format!("postmaster@{RP}")], msg).await.expect_err("rate");
    assert_eq!(code(&e), "451", "{e}");
    i.s.stop().await;
}
