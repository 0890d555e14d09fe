//! The SMTP relay with a real SMTP client (lettre) on loopback (docs/behaviour.md#smtp-relay): STARTTLS
//! and AUTH with the project's secret key, the same rules as `/v1/send`, and its refusals.

use std::sync::Arc;
use std::time::Duration;

use herald_host::config::Config;
use lettre::message::{Mailbox, MultiPart, SinglePart, header};
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::harness::*;
use crate::smtp_sink::{SmtpSink, header as header_of};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/api/fixtures/smtp-tls");

struct Relay {
    s: Server,
    p: Proj,
    sink: SmtpSink,
    port: u16,
    secret: String,
}

async fn relay(configure: impl FnOnce(&mut Config)) -> Relay {
    let sink = SmtpSink::start(0).await;
    let mut config = Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.smtp.submission_listen = Some("127.0.0.1:0".parse().unwrap());
    config.smtp.tls = Some((format!("{FIXTURES}/cert.pem").into(), format!("{FIXTURES}/key.pem").into()));
    configure(&mut config);
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let port = s.running.as_ref().and_then(|r| r.submission_addr).expect("the relay listens").port();
    let secret = p.json["secret"].as_str().unwrap().to_string();
    Relay { s, p, sink, port, secret }
}

/// A client that requires STARTTLS, trusting the test CA.
fn client(port: u16, password: &str, mechanism: Mechanism) -> AsyncSmtpTransport<Tokio1Executor> {
    let ca = std::fs::read(format!("{FIXTURES}/ca.pem")).unwrap();
    let tls = TlsParameters::builder("localhost".into())
        .add_root_certificate(Certificate::from_pem(&ca).unwrap())
        .build_rustls()
        .unwrap();
    AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
        .port(port)
        .tls(Tls::Required(tls))
        .credentials(Credentials::new("api".into(), password.into()))
        .authentication(vec![mechanism])
        .timeout(Some(Duration::from_secs(10)))
        .build()
}

fn message(from: &str, size: usize) -> Message {
    Message::builder()
        .from(from.parse::<Mailbox>().unwrap())
        .to("Ann <ann@example.org>".parse().unwrap())
        .bcc("bob@example.org".parse().unwrap())
        .subject("Order {{number}} shipped")
        .header(XOrder("42".into()))
        .multipart(
            MultiPart::alternative()
                .singlepart(SinglePart::plain("Shipped {{today}}.".to_string()))
                .singlepart(SinglePart::html(format!("<p>Shipped {{{{today}}}}.</p>{}", "x".repeat(size)))),
        )
        .unwrap()
}

#[derive(Clone)]
struct XOrder(String);

impl header::Header for XOrder {
    fn name() -> header::HeaderName {
        header::HeaderName::new_from_ascii_str("X-Order")
    }
    fn parse(s: &str) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(XOrder(s.into()))
    }
    fn display(&self) -> header::HeaderValue {
        header::HeaderValue::new(Self::name(), self.0.clone())
    }
}

fn code(e: &lettre::transport::smtp::Error) -> String {
    e.status().map(|c| c.to_string()).unwrap_or_else(|| format!("no status: {e}"))
}

#[tokio::test]
async fn a_message_submitted_over_starttls_with_the_secret_key_is_sent_as_v1_send_sends() {
    let r = relay(|_| {}).await;
    let reply =
        client(r.port, &r.secret, Mechanism::Plain).send(message("Shop <hi@shop.test>", 0)).await.expect("accepted");
    let said = reply.message().collect::<Vec<_>>().join(" ");
    assert!(said.contains("queued as"), "{said}");
    let got = r.sink.wait_for(2).await;
    let mut to: Vec<String> = got.iter().flat_map(|m| m.to.clone()).collect();
    to.sort();
    assert_eq!(to, vec!["ann@example.org", "bob@example.org"], "the envelope's recipients, Bcc included");
    let ann = got.iter().find(|m| m.to == ["ann@example.org"]).unwrap();
    assert_eq!(header_of(&ann.data, "Subject").as_deref(), Some("Order {{number}} shipped"), "not a template");
    assert_eq!(header_of(&ann.data, "X-Order").as_deref(), Some("42"), "the caller's own header is kept");
    assert!(header_of(&ann.data, "From").unwrap().contains("hi@shop.test"));
    assert!(header_of(&ann.data, "DKIM-Signature").is_some(), "signed like any send");
    assert!(header_of(&ann.data, "Message-ID").unwrap().contains("@shop.test"), "Herald's Message-ID");
    assert!(!ann.data.contains("bob@example.org"), "a Bcc is not shown to the others");
    // The recipients are contacts, as after /v1/send, and the emails are the project's.
    let list = r.p.secret.get("/contacts?search=ann%40example.org").await;
    assert_eq!(list.json["data"].as_array().map(Vec::len), Some(1), "{}", list.json);
    // LOGIN works the same.
    client(r.port, &r.secret, Mechanism::Login).send(message("hi@shop.test", 0)).await.expect("accepted with LOGIN");
    r.s.stop().await;
}

#[tokio::test]
async fn a_wrong_key_an_unverified_sender_and_an_oversize_message_are_refused() {
    let r = relay(|c| c.smtp.max_message_bytes = 64 * 1024).await;
    let e = client(r.port, "sk_wrong", Mechanism::Plain).send(message("hi@shop.test", 0)).await.expect_err("refused");
    assert_eq!(code(&e), "535", "{e}");
    let public = r.p.json["public"].as_str().unwrap().to_string();
    let e = client(r.port, &public, Mechanism::Plain).send(message("hi@shop.test", 0)).await.expect_err("refused");
    assert_eq!(code(&e), "535", "a public key is not a password: {e}");
    let e = client(r.port, &r.secret, Mechanism::Plain)
        .send(message("hi@other.test", 0))
        .await
        .expect_err("refused at MAIL FROM");
    assert_eq!(code(&e), "550", "{e}");
    let e = client(r.port, &r.secret, Mechanism::Plain)
        .send(message("hi@shop.test", 100 * 1024))
        .await
        .expect_err("too big");
    assert_eq!(code(&e), "552", "{e}");
    assert!(r.sink.received().is_empty(), "nothing refused was sent");
    // A suspended project sends nothing over SMTP either.
    let now = r.s.state.clock.now_ms();
    assert!(r.s.state.store.suspend_project(&r.p.id, "too many bounces", now).await.unwrap());
    let e = client(r.port, &r.secret, Mechanism::Plain).send(message("hi@shop.test", 0)).await.expect_err("suspended");
    assert_eq!(code(&e), "550", "{e}");
    r.s.stop().await;
}

#[tokio::test]
async fn auth_needs_starttls_unless_the_operator_allows_plain_on_loopback() {
    let plain = |port: u16, secret: &str| {
        AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous("127.0.0.1")
            .port(port)
            .credentials(Credentials::new("api".into(), secret.into()))
            .authentication(vec![Mechanism::Plain])
            .timeout(Some(Duration::from_secs(10)))
            .build()
    };
    let r = relay(|_| {}).await;
    let e = plain(r.port, &r.secret).send(message("hi@shop.test", 0)).await.expect_err("no AUTH in the clear");
    assert!(!e.to_string().is_empty());
    assert!(r.sink.received().is_empty());
    r.s.stop().await;

    let r = relay(|c| c.smtp.submission_allow_plain = true).await;
    plain(r.port, &r.secret).send(message("hi@shop.test", 0)).await.expect("allowed on loopback");
    assert_eq!(r.sink.wait_for(2).await.len(), 2);
    r.s.stop().await;
}

#[tokio::test]
async fn a_session_stops_sending_once_its_key_is_regenerated() {
    use lettre::address::Envelope;
    use lettre::transport::smtp::client::AsyncSmtpConnection;
    use lettre::transport::smtp::extension::ClientId;
    let r = relay(|_| {}).await;
    let ca = std::fs::read(format!("{FIXTURES}/ca.pem")).unwrap();
    let tls = TlsParameters::builder("localhost".into())
        .add_root_certificate(Certificate::from_pem(&ca).unwrap())
        .build_rustls()
        .unwrap();
    let hello = ClientId::Domain("client.test".into());
    let mut conn =
        AsyncSmtpConnection::connect_tokio1(("127.0.0.1", r.port), Some(Duration::from_secs(10)), &hello, None, None)
            .await
            .unwrap();
    conn.starttls(tls, &hello).await.unwrap();
    conn.auth(&[Mechanism::Plain], &Credentials::new("api".into(), r.secret.clone())).await.unwrap();
    let envelope =
        Envelope::new(Some("hi@shop.test".parse().unwrap()), vec!["ann@example.org".parse().unwrap()]).unwrap();
    let raw =
        |subject: &str| format!("From: hi@shop.test\r\nTo: ann@example.org\r\nSubject: {subject}\r\n\r\nhello\r\n");
    conn.send(&envelope, raw("before").as_bytes()).await.expect("sent while the key holds");

    // The owner regenerates the keys while the session stays open.
    let k = r.p.session.post(&format!("/users/@me/projects/{}/regenerate-keys", r.p.id), serde_json::json!({})).await;
    assert_eq!(k.status, 200, "{}", k.json);
    assert!(conn.test_connected().await, "the session is still open");
    let e = conn.send(&envelope, raw("after").as_bytes()).await.expect_err("refused once the key is revoked");
    assert!(code(&e).starts_with("535"), "{e}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(conn);
    let subjects: Vec<String> = r.sink.received().iter().filter_map(|m| header_of(&m.data, "Subject")).collect();
    assert!(!subjects.iter().any(|s| s != "before"), "{subjects:?}");
    r.s.stop().await;
}
