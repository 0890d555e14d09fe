//! Who sent a reply (docs/behaviour.md#receiving-mail): SPF, DKIM and DMARC checked against a real DNS
//! server on loopback; each recorded reply says what they found, and a forged sender whose domain
//! publishes DMARC `p=reject` is dropped without an event, a contact or a count.

use std::sync::Arc;
use std::time::Duration;

use herald_host::config::Config;
use lettre::address::Envelope;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde_json::{Value, json};

use crate::dns_server::DnsServer;
use crate::harness::*;
use crate::smtp_sink::SmtpSink;

async fn deliver(port: u16, from: &str, raw: &str) -> String {
    let t = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1").port(port).build();
    let envelope = Envelope::new(Some(from.parse().unwrap()), vec!["support@shop.test".parse().unwrap()]).unwrap();
    t.send_raw(&envelope, raw.as_bytes()).await.map(|r| r.message().collect::<Vec<_>>().join(" ")).expect("accepted")
}

fn reply(from: &str, subject: &str) -> String {
    format!(
        "From: {from}\r\nTo: support@shop.test\r\nSubject: {subject}\r\nMessage-ID: <{subject}@x.test>\r\n\
         Date: Mon, 07 Dec 2026 10:00:00 +0000\r\nMIME-Version: 1.0\r\nContent-Type: text/plain\r\n\r\nHello there.\r\n"
    )
}

/// The `email.received` events of the contact with `email`, if it exists.
async fn received(p: &Proj, email: &str) -> Vec<Value> {
    let c = p.secret.get(&format!("/contacts?search={}", email.replace('@', "%40"))).await;
    let Some(id) = c.json["data"][0]["id"].as_str().map(String::from) else { return Vec::new() };
    let events =
        p.secret.get(&format!("/events/contact/{id}")).await.json["data"].as_array().cloned().unwrap_or_default();
    events.into_iter().filter(|e| e["name"] == "email.received").collect()
}

#[tokio::test]
async fn each_reply_says_who_vouched_for_its_sender_and_a_forged_sender_under_dmarc_reject_is_dropped() {
    let dns = DnsServer::start().await;
    // good.test: SPF lets this machine send, DMARC asks to reject failures.
    dns.txt("good.test", "v=spf1 ip4:127.0.0.1 -all");
    dns.txt("_dmarc.good.test", "v=DMARC1; p=reject");
    // strict.test: only another address may send, and failures are to be rejected.
    dns.txt("strict.test", "v=spf1 ip4:192.0.2.1 -all");
    dns.txt("_dmarc.strict.test", "v=DMARC1; p=reject");
    // signed.test: no SPF, a DKIM key, DMARC reject.
    let key = herald_host::infra::dkim::generate().unwrap();
    dns.txt("s1._domainkey.signed.test", &herald_host::infra::dkim::txt_value(&key.public_b64));
    dns.txt("_dmarc.signed.test", "v=DMARC1; p=reject");
    // loose.test publishes nothing.
    dns.txt("loose.test", "not a policy");

    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.smtp.listen = Some("127.0.0.1:0".parse().unwrap());
    config.dns_servers = vec![dns.addr];
    config.dns_timeout_ms = 1000;
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    let d = st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    p.secret.patch(&format!("/domains/{}", d.id), json!({ "inbound": true })).await;
    let port = s.running.as_ref().and_then(|r| r.smtp_addr).unwrap().port();

    deliver(port, "alice@good.test", &reply("Alice <alice@good.test>", "good")).await;
    deliver(port, "ceo@strict.test", &reply("CEO <ceo@strict.test>", "forged")).await;
    deliver(port, "bob@loose.test", &reply("Bob <bob@loose.test>", "loose")).await;
    let signer = herald_host::infra::dkim::Signer::new("signed.test", "s1", key.private_pkcs8).unwrap();
    let message = reply("Carol <carol@signed.test>", "signed");
    let signed = format!("{}{message}", signer.sign(message.as_bytes(), &[]).unwrap());
    deliver(port, "bounce@elsewhere.test", &signed).await;

    let started = std::time::Instant::now();
    while st.store.count_inbound().await.unwrap() > 0 {
        assert!(started.elapsed() < Duration::from_secs(20), "the replies were applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Events are written before a message's row goes; give the last ones a moment all the same.
    let started = std::time::Instant::now();
    while received(&p, "carol@signed.test").await.is_empty() && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let auth = |e: &Value| {
        let d = &e["data"];
        (d["authenticated"].clone(), d["spf"].clone(), d["dkim"].clone(), d["dmarc"].clone())
    };
    let good = received(&p, "alice@good.test").await;
    assert_eq!(good.len(), 1, "{good:?}");
    assert_eq!(auth(&good[0]), (json!(true), json!("pass"), json!("none"), json!("pass")));
    let loose = received(&p, "bob@loose.test").await;
    assert_eq!(loose.len(), 1, "{loose:?}");
    assert_eq!(auth(&loose[0]), (json!(false), json!("none"), json!("none"), json!("none")));
    let signed = received(&p, "carol@signed.test").await;
    assert_eq!(signed.len(), 1, "{signed:?}");
    assert_eq!(auth(&signed[0]), (json!(true), json!("none"), json!("pass"), json!("pass")));
    // The forged one: no event, no contact, and not counted against the inbound allowance.
    assert!(received(&p, "ceo@strict.test").await.is_empty());
    let contacts = p.secret.get("/contacts?search=ceo%40strict.test").await;
    assert_eq!(contacts.json["data"], json!([]), "no contact for the forged sender");
    let inbound = herald_host::domain::billing::Category::Inbound;
    assert_eq!(st.store.usage_of(&p.id, inbound, st.clock.now_ms()).await.unwrap(), 3, "three replies counted");
    s.stop().await;
}
