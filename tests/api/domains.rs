//! Sender domains, DNS verification, the sender check, DKIM signing and /v1/verify, against a real DNS
//! server on loopback (docs/behaviour.md#domains, docs/behaviour.md#errors for the sender check,
//! docs/behaviour.md#address-verification).

use std::sync::Arc;

use herald_host::config::Config;
use hickory_proto::rr::RecordType;
use mail_auth::hickory_resolver::config::{NameServerConfig, ProtocolConfig, ResolverConfig, ResolverOpts};
use serde_json::{Value, json};

use crate::dns_server::DnsServer;
use crate::harness::*;

fn config_with(dns: &DnsServer) -> Config {
    let mut c = Config::for_tests();
    c.dns_servers = vec![dns.addr];
    c.dns_timeout_ms = 1000;
    c
}

fn record<'a>(domain: &'a Value, purpose: &str) -> &'a Value {
    domain["records"].as_array().unwrap().iter().find(|r| r["purpose"] == purpose).unwrap()
}

/// Publishes the DKIM and SPF records a domain asks for.
fn publish(dns: &DnsServer, domain: &Value) {
    let dkim = record(domain, "dkim");
    dns.txt(dkim["name"].as_str().unwrap(), dkim["value"].as_str().unwrap());
    let spf = record(domain, "spf");
    dns.txt(spf["name"].as_str().unwrap(), spf["value"].as_str().unwrap());
}

#[tokio::test]
async fn adding_a_domain_answers_its_dns_records() {
    let dns = DnsServer::start().await;
    let s = Server::start_with(config_with(&dns), None).await;
    let p = proj(&s, "o@example.com").await;
    let r = p.secret.post("/domains", json!({ "domain": "Mail.Example.COM" })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let d = &r.json;
    assert_eq!(d["domain"], "mail.example.com");
    assert_eq!(d["status"], "PENDING");
    assert_eq!(d["projectId"], p.id.as_str());
    assert_eq!(d["selector"], "herald");
    let dkim = record(d, "dkim");
    assert_eq!(dkim["type"], "TXT");
    assert_eq!(dkim["name"], "herald._domainkey.mail.example.com");
    assert!(dkim["value"].as_str().unwrap().starts_with("v=DKIM1; k=rsa; p=MII"), "{dkim}");
    assert_eq!(dkim["status"], "PENDING");
    assert_eq!(record(d, "spf")["value"], "v=spf1 a mx ~all");
    assert_eq!(record(d, "spf")["name"], "mail.example.com");
    assert_eq!(record(d, "dmarc")["name"], "_dmarc.mail.example.com");
    assert_eq!(record(d, "dmarc")["required"], false);
    assert!(
        d.get("dkimPrivate").is_none() && !d.to_string().contains("PRIVATE"),
        "the private key never leaves the server"
    );

    // Names are validated; a project adds a name once.
    for bad in ["localhost", "-x.com", "a..b", "exa mple.com", ""] {
        let r = p.secret.post("/domains", json!({ "domain": bad })).await;
        assert_envelope(&r, 422, "VALIDATION_ERROR");
    }
    assert_envelope(&p.secret.post("/domains", json!({ "domain": "mail.example.com" })).await, 409, "CONFLICT");
    let q = proj(&s, "q@example.com").await;
    let r = q.secret.post("/domains", json!({ "domain": "MAIL.example.com." })).await;
    assert_eq!(r.status, 201, "another project's pending domain blocks nobody: {}", r.json);
    assert_envelope(&p.public.post("/domains", json!({ "domain": "x.example.com" })).await, 401, "INVALID_API_KEY");
    s.stop().await;
}

#[tokio::test]
async fn a_domain_goes_verified_when_its_records_are_served_and_pending_when_withdrawn() {
    let dns = DnsServer::start().await;
    let s = Server::start_with(config_with(&dns), None).await;
    let p = proj(&s, "o@example.com").await;
    let d = p.secret.post("/domains", json!({ "domain": "example.net" })).await.json;
    let id = d["id"].as_str().unwrap();
    let path = format!("/domains/{id}/verify");

    let r = p.secret.get(&path).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["status"], "PENDING");
    assert!(r.json["lastCheckedAt"].is_string());
    assert!(r.json["verifiedAt"].is_null());

    // Only SPF: still pending.
    let spf = record(&d, "spf");
    dns.txt("example.net", "google-site-verification=abc");
    dns.txt(spf["name"].as_str().unwrap(), spf["value"].as_str().unwrap());
    let r = p.secret.get(&path).await;
    assert_eq!(r.json["status"], "PENDING");
    assert_eq!(record(&r.json, "spf")["status"], "VERIFIED");
    assert_eq!(record(&r.json, "dkim")["status"], "PENDING");

    // A DKIM record with another key: mismatch.
    dns.txt("herald._domainkey.example.net", "v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAwrongkey");
    let r = p.secret.get(&path).await;
    assert_eq!(record(&r.json, "dkim")["status"], "MISMATCH");

    // The right key: verified.
    dns.remove("herald._domainkey.example.net", RecordType::TXT);
    let dkim = record(&d, "dkim");
    dns.txt(dkim["name"].as_str().unwrap(), dkim["value"].as_str().unwrap());
    let r = p.secret.get(&path).await;
    assert_eq!(r.json["status"], "VERIFIED", "{}", r.json);
    assert_eq!(record(&r.json, "dkim")["status"], "VERIFIED");
    assert_eq!(record(&r.json, "dmarc")["status"], "PENDING", "DMARC is only recommended");
    assert!(r.json["verifiedAt"].is_string());
    let listed = p.secret.get(&format!("/domains/project/{}", p.id)).await;
    assert_eq!(listed.json[0]["status"], "VERIFIED");

    // Withdrawn: back to pending.
    dns.remove("herald._domainkey.example.net", RecordType::TXT);
    let r = p.secret.get(&path).await;
    assert_eq!(r.json["status"], "PENDING");
    assert!(r.json["verifiedAt"].is_null());
    s.stop().await;
}

#[tokio::test]
async fn the_recurring_check_verifies_domains_in_the_background() {
    let dns = DnsServer::start().await;
    let mut config = config_with(&dns);
    config.run_jobs = false;
    let s = Server::start_with(config, Some(herald_host::infra::clock::ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "o@example.com").await;
    let d = p.secret.post("/domains", json!({ "domain": "bg.example" })).await.json;
    publish(&dns, &d);
    let ran = s.worker.run_once(20).await.unwrap();
    assert!(ran.iter().any(|(j, _)| j.kind == "domains.check"));
    let list = p.secret.get(&format!("/domains/project/{}", p.id)).await;
    assert_eq!(list.json[0]["status"], "VERIFIED", "{}", list.json);
    // Five minutes later the records are gone: the next run notices.
    dns.forget("herald._domainkey.bg.example");
    s.clock().advance(299_000);
    s.worker.run_once(20).await.unwrap();
    assert_eq!(
        p.secret.get(&format!("/domains/project/{}", p.id)).await.json[0]["status"],
        "VERIFIED",
        "not before 5 minutes"
    );
    s.clock().advance(1_000);
    s.worker.run_once(20).await.unwrap();
    assert_eq!(p.secret.get(&format!("/domains/project/{}", p.id)).await.json[0]["status"], "PENDING");
    s.stop().await;
}

#[tokio::test]
async fn listing_deleting_and_sessions_are_scoped_to_the_project() {
    let dns = DnsServer::start().await;
    let s = Server::start_with(config_with(&dns), None).await;
    let a = proj(&s, "a@example.com").await;
    let b = proj(&s, "b@example.com").await;
    let bd = b.secret.post("/domains", json!({ "domain": "b.example" })).await.json;
    let b_id = bd["id"].as_str().unwrap();
    // With a session, the project comes from the body and membership is checked.
    let r = a.session.post("/domains", json!({ "domain": "a.example", "projectId": a.id })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let r = a.session.post("/domains", json!({ "domain": "c.example", "projectId": b.id })).await;
    assert_envelope(&r, 404, "PROJECT_NOT_FOUND");
    let r = a.session.post("/domains", json!({ "domain": "c.example" })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(a.session.get(&format!("/domains/project/{}", a.id)).await.json.as_array().unwrap().len(), 1);
    assert_envelope(&a.session.get(&format!("/domains/project/{}", b.id)).await, 404, "PROJECT_NOT_FOUND");
    // A key reaches only its own project.
    assert_envelope(&a.secret.get(&format!("/domains/project/{}", b.id)).await, 404, "PROJECT_NOT_FOUND");
    assert_envelope(&a.secret.get(&format!("/domains/{b_id}/verify")).await, 404, "DOMAIN_NOT_FOUND");
    assert_envelope(&a.secret.delete(&format!("/domains/{b_id}")).await, 404, "DOMAIN_NOT_FOUND");
    let r = b.secret.delete(&format!("/domains/{b_id}")).await;
    assert_eq!(r.json, json!({ "id": b_id, "deleted": true }));
    assert_envelope(&b.secret.delete(&format!("/domains/{b_id}")).await, 404, "DOMAIN_NOT_FOUND");
    // Once removed, another project may add it.
    assert_eq!(a.secret.post("/domains", json!({ "domain": "b.example" })).await.status, 201);
    s.stop().await;
}

#[tokio::test]
async fn the_sender_check_refuses_unregistered_foreign_and_unverified_domains() {
    let dns = DnsServer::start().await;
    let s = Server::start_with(config_with(&dns), None).await;
    let a = proj(&s, "a@example.com").await;
    let b = proj(&s, "b@example.com").await;
    let pending = a.secret.post("/domains", json!({ "domain": "pending.example" })).await.json;
    let verified = a.secret.post("/domains", json!({ "domain": "ok.example" })).await.json;
    publish(&dns, &verified);
    a.secret.get(&format!("/domains/{}/verify", verified["id"].as_str().unwrap())).await;
    let theirs = b.secret.post("/domains", json!({ "domain": "theirs.example" })).await.json;
    publish(&dns, &theirs);
    b.secret.get(&format!("/domains/{}/verify", theirs["id"].as_str().unwrap())).await;
    b.secret.post("/domains", json!({ "domain": "theirs-pending.example" })).await;
    let _ = pending;

    let check = |from: &'static str| {
        let st = s.state.clone();
        let project = a.id.clone();
        async move { herald_host::services::sending_domains::require_sender(&st.store, &project, from).await }
    };
    for (from, reason) in [
        ("news@unknown.example", "DOMAIN_NOT_REGISTERED"),
        ("news@theirs.example", "DOMAIN_OF_OTHER_PROJECT"),
        // Another project's pending domain says nothing about this one.
        ("news@theirs-pending.example", "DOMAIN_NOT_REGISTERED"),
        ("news@pending.example", "DOMAIN_NOT_VERIFIED"),
    ] {
        let err = herald_host::api::errors::ApiError::from(check(from).await.unwrap_err());
        assert_eq!(err.status_code(), 403, "{from}");
        let body = err.body("rid");
        assert_eq!(body["error"]["code"], "INTERNAL_SERVER_ERROR", "the exception the interface names");
        assert_eq!(body["error"]["statusCode"], 403);
        assert_eq!(body["error"]["details"]["reason"], reason, "{from}");
    }
    assert_eq!(check("News@OK.example").await.unwrap().name, "ok.example");
    s.stop().await;
}

#[tokio::test]
async fn a_dkim_signature_verifies_against_the_published_record_with_an_independent_verifier() {
    let dns = DnsServer::start().await;
    let s = Server::start_with(config_with(&dns), None).await;
    let p = proj(&s, "o@example.com").await;
    let d = p.secret.post("/domains", json!({ "domain": "signed.example" })).await.json;
    publish(&dns, &d);
    p.secret.get(&format!("/domains/{}/verify", d["id"].as_str().unwrap())).await;
    let row = s.state.store.domain(&p.id, d["id"].as_str().unwrap()).await.unwrap().unwrap();
    let signer = s.state.domains.signer(&row).unwrap();
    let message = "From: Shop <news@signed.example>\r\nTo: jane@example.org\r\nSubject: Hello\r\n\
                   Date: Sat, 21 Nov 2026 10:00:00 +0000\r\nMessage-ID: <1@signed.example>\r\n\
                   MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nHi Jane.\r\n";
    let header = signer.sign(message.as_bytes(), &[]).unwrap();
    let signed = format!("{header}{message}");

    let mut config = ResolverConfig::from_parts(None, vec![], Vec::<NameServerConfig>::new());
    config.add_name_server(NameServerConfig::new(dns.addr, ProtocolConfig::Udp));
    let verifier = mail_auth::MessageAuthenticator::new(config, ResolverOpts::default()).unwrap();
    let parsed = mail_auth::AuthenticatedMessage::parse(signed.as_bytes()).unwrap();
    let out = verifier.verify_dkim(&parsed).await;
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].result(), &mail_auth::DkimResult::Pass);

    // A changed body no longer matches the signed body hash.
    let tampered = signed.replace("Hi Jane.", "Hi Joan.");
    let parsed = mail_auth::AuthenticatedMessage::parse(tampered.as_bytes()).unwrap();
    let out = verifier.verify_dkim(&parsed).await;
    assert_ne!(out[0].result(), &mail_auth::DkimResult::Pass, "{:?}", out[0].result());
    // A changed signed header fails the signature.
    let tampered = signed.replace("Subject: Hello", "Subject: Hellp");
    let parsed = mail_auth::AuthenticatedMessage::parse(tampered.as_bytes()).unwrap();
    let out = verifier.verify_dkim(&parsed).await;
    assert!(matches!(out[0].result(), mail_auth::DkimResult::Fail(_)), "{:?}", out[0].result());
    s.stop().await;
}

#[tokio::test]
async fn an_operator_can_trust_a_domain_without_dns() {
    let dns = DnsServer::start().await;
    let s = Server::start_with(config_with(&dns), None).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    let d = st.domains.add(&st.store, &p.id, "local.test", true, st.clock.now_ms()).await.unwrap();
    assert_eq!(d.status.as_str(), "VERIFIED");
    let r = p.secret.get(&format!("/domains/{}/verify", d.id)).await;
    assert_eq!(r.json["status"], "VERIFIED", "a trusted domain is not re-checked: {}", r.json);
    assert_eq!(r.json["trusted"], true);
    assert!(herald_host::services::sending_domains::require_sender(&st.store, &p.id, "hi@local.test").await.is_ok());
    s.stop().await;
}

async fn verify(c: &Client, email: &str) -> Value {
    let r = c.post("/v1/verify", json!({ "email": email })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["success"], true);
    r.json["data"].clone()
}

#[tokio::test]
async fn address_verification_answers_from_dns() {
    let dns = DnsServer::start().await;
    dns.ns("good.example", "ns1.good.example");
    dns.a("good.example", [192, 0, 2, 1]);
    dns.mx("good.example", 10, "mx.good.example");
    dns.ns("nomx.example", "ns1.nomx.example");
    dns.a("nomx.example", [192, 0, 2, 2]);
    dns.ns("nullmx.example", "ns1.nullmx.example");
    dns.mx("nullmx.example", 0, "");
    dns.a("nons.example", [192, 0, 2, 3]);
    dns.mx("nons.example", 10, "mx.nons.example");
    let s = Server::start_with(config_with(&dns), None).await;
    let p = proj(&s, "o@example.com").await;

    let v = verify(&p.secret, "Jane@Good.example").await;
    assert_eq!(v["email"], "jane@good.example");
    assert_eq!(v["valid"], true, "{v}");
    assert_eq!(
        (v["domainExists"].clone(), v["hasWebsite"].clone(), v["hasMxRecords"].clone()),
        (json!(true), json!(true), json!(true))
    );
    assert_eq!(v["reasons"], json!([]));
    for key in ["isDisposable", "isAlias", "isTypo", "isPlusAddressed", "isPersonalEmail"] {
        assert_eq!(v[key], false, "{key}");
    }

    let v = verify(&p.secret, "jane+news@good.example").await;
    assert_eq!(v["isPlusAddressed"], true);

    let v = verify(&p.secret, "x@nomx.example").await;
    assert_eq!(
        (v["valid"].clone(), v["domainExists"].clone(), v["hasMxRecords"].clone()),
        (json!(false), json!(true), json!(false))
    );
    assert!(v["reasons"].to_string().contains("no MX"), "{v}");

    let v = verify(&p.secret, "x@nullmx.example").await;
    assert_eq!(v["hasMxRecords"], false, "a null MX counts as none");
    assert!(v["reasons"].to_string().contains("null MX"), "{v}");

    let v = verify(&p.secret, "x@nons.example").await;
    assert_eq!(v["domainExists"], true, "no NS, but the name answers");
    assert_eq!(v["valid"], true);

    let v = verify(&p.secret, "x@missing.example").await;
    assert_eq!((v["domainExists"].clone(), v["valid"].clone()), (json!(false), json!(false)));
    assert!(v["reasons"].to_string().contains("does not exist"), "{v}");

    let v = verify(&p.secret, "x@mailinator.com").await;
    assert_eq!(v["isDisposable"], true);
    assert_eq!(v["valid"], false);

    let v = verify(&p.secret, "jane@gmial.com").await;
    assert_eq!(v["isTypo"], true);
    assert_eq!(v["suggestedEmail"], "jane@gmail.com");

    let v = verify(&p.secret, "jane@gmail.com").await;
    assert_eq!(v["isPersonalEmail"], true);
    assert_eq!(v["isTypo"], false);
    let v = verify(&p.secret, "me@duck.com").await;
    assert_eq!(v["isAlias"], true);

    assert_envelope(&p.secret.post("/v1/verify", json!({ "email": "not an email" })).await, 422, "VALIDATION_ERROR");
    assert_envelope(&p.secret.post("/v1/verify", json!({})).await, 422, "VALIDATION_ERROR");
    assert_envelope(&p.public.post("/v1/verify", json!({ "email": "a@good.example" })).await, 401, "INVALID_API_KEY");
    s.stop().await;
}

#[tokio::test]
async fn dns_failures_degrade_to_a_reason_never_a_500() {
    // A resolver pointed at a port where nothing answers.
    let dead = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut config = Config::for_tests();
    config.dns_servers = vec![dead.local_addr().unwrap()];
    config.dns_timeout_ms = 200;
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let v = verify(&p.secret, "x@anything.example").await;
    assert_eq!(v["valid"], false);
    assert!(v["reasons"].to_string().contains("DNS lookups failed"), "{v}");
    let d = p.secret.post("/domains", json!({ "domain": "unreachable.example" })).await.json;
    let r = p.secret.get(&format!("/domains/{}/verify", d["id"].as_str().unwrap())).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["status"], "PENDING");
    assert_eq!(record(&r.json, "dkim")["status"], "UNKNOWN");
    drop(dead);
    s.stop().await;
}

/// Issue 29: a project that adds someone else's domain first cannot keep its owner out. Only the project
/// whose DKIM key is published in the name's DNS verifies (claims) it; then the name is refused to others,
/// and a pending domain that never verified expires after 7 days.
#[tokio::test]
async fn a_squatted_pending_domain_does_not_keep_its_owner_out() {
    let dns = DnsServer::start().await;
    let clock = herald_host::infra::clock::ManualClock::new(1_800_000_000_000);
    let s = Server::start_with(config_with(&dns), Some(clock.clone())).await;
    let squatter = proj(&s, "squatter@example.com").await;
    let owner = proj(&s, "owner@example.com").await;
    let late = proj(&s, "late@example.com").await;
    let taken = squatter.secret.post("/domains", json!({ "domain": "brand.example" })).await;
    assert_eq!(taken.status, 201);
    let mine = owner.secret.post("/domains", json!({ "domain": "brand.example" })).await;
    assert_eq!(mine.status, 201, "the owner can still add it: {}", mine.json);
    // The owner publishes its own key and SPF: verified, and the name is claimed.
    for purpose in ["dkim", "spf"] {
        let r = record(&mine.json, purpose);
        dns.txt(r["name"].as_str().unwrap(), r["value"].as_str().unwrap());
    }
    let r = owner.secret.get(&format!("/domains/{}/verify", mine.json["id"].as_str().unwrap())).await;
    assert_eq!(r.json["status"], "VERIFIED", "{}", r.json);
    // The squatter's copy never verifies (even were its key published too), and sending from it is refused.
    let theirs = record(&taken.json, "dkim");
    dns.txt(theirs["name"].as_str().unwrap(), theirs["value"].as_str().unwrap());
    let r = squatter.secret.get(&format!("/domains/{}/verify", taken.json["id"].as_str().unwrap())).await;
    assert_eq!(r.json["status"], "PENDING", "{}", r.json);
    let send = json!({"to": "a@example.com", "from": "hi@brand.example", "subject": "s", "body": "b"});
    let r = squatter.secret.post("/v1/send", send.clone()).await;
    assert_eq!((r.status, r.json["error"]["details"]["reason"].as_str()), (403, Some("DOMAIN_OF_OTHER_PROJECT")));
    assert_eq!(owner.secret.post("/v1/send", send).await.status, 200, "the owner sends from it");
    // A claimed name is refused to a newcomer.
    assert_envelope(&late.secret.post("/domains", json!({ "domain": "brand.example" })).await, 409, "CONFLICT");
    // A pending domain that never verified expires with the check job after 7 days; a verified one stays.
    dns.remove("herald._domainkey.brand.example", RecordType::TXT);
    clock.advance(herald_host::services::sending_domains::PENDING_DOMAIN_TTL_MS + 1);
    let st = std::sync::Arc::clone(&s.state);
    st.domains.check_all(&st.store, st.clock.now_ms()).await.unwrap();
    let listed = squatter.secret.get(&format!("/domains/project/{}", squatter.id)).await;
    assert_eq!(listed.json, json!([]), "the squatter's pending domain expired");
    let listed = owner.secret.get(&format!("/domains/project/{}", owner.id)).await;
    assert_eq!(listed.json[0]["domain"], "brand.example", "the owner's claimed domain stays, even pending again");
    s.stop().await;
}
