//! Account mail end to end through a real SMTP server on loopback (docs/behaviour.md#account-mail):
//! verification, password reset and invitations; tokens single use, superseded by newer ones, expiring;
//! no account enumeration; the mail requests throttled.

use herald_host::config::Config;
use herald_host::infra::clock::ManualClock;
use serde_json::json;

use crate::harness::{Server, assert_envelope, signup};
use crate::smtp_sink::{Received, SmtpSink};

async fn env(config: impl FnOnce(&mut Config)) -> (Server, SmtpSink) {
    let sink = SmtpSink::start(0).await;
    let mut c = Config::for_tests();
    c.smtp_url = Some(sink.url());
    config(&mut c);
    let s = Server::start_with(c, Some(ManualClock::new(1_800_000_000_000))).await;
    (s, sink)
}

/// A quoted-printable body decoded (the mails are ASCII with lines longer than 76 characters).
fn decoded(m: &Received) -> String {
    let body = m.data.split_once("\r\n\r\n").map_or("", |(_, b)| b).replace("=\r\n", "");
    let (mut out, mut rest) = (Vec::new(), body.as_bytes());
    while let Some((&b, tail)) = rest.split_first() {
        match (b, tail.get(..2).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())) {
            (b'=', Some(v)) => {
                out.push(v);
                rest = &tail[2..];
            }
            _ => {
                out.push(b);
                rest = tail;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// The token of the `/account/<page>` link in a mail.
fn token_in(m: &Received, page: &str) -> String {
    let text = decoded(m);
    let marker = format!("/account/{page}?token=");
    let at = text.find(&marker).unwrap_or_else(|| panic!("no {page} link in {text}")) + marker.len();
    text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').collect()
}

/// The system mails to `to`, oldest first, once there are `n` in all.
async fn mails_to(sink: &SmtpSink, n: usize, to: &str) -> Vec<Received> {
    sink.wait_for_system(n).await.into_iter().filter(|m| m.to == [to.to_string()]).collect()
}

#[tokio::test]
async fn verification_links_work_once_are_replaced_by_newer_ones_and_expire() {
    let (s, sink) = env(|_| {}).await;
    let alice = s.client();
    let r = alice.post("/auth/signup", json!({ "email": "alice@example.com", "password": "password123" })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(r.json["emailVerified"], false);
    // Signing up mails a verification link from the system sender.
    let first = mails_to(&sink, 1, "alice@example.com").await;
    assert!(first[0].data.contains("Subject: Verify your email address"), "{}", first[0].data);
    assert!(first[0].data.contains("Auto-Submitted: auto-generated"));
    let old = token_in(&first[0], "verify-email");
    assert_eq!(old.len(), 43, "32 random bytes, base64url: {}", first[0].data);

    // Asking again (with the session) sends a new link, which replaces the first.
    let r = alice.post("/auth/request-verification", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let new = token_in(&mails_to(&sink, 2, "alice@example.com").await[1], "verify-email");
    assert_ne!(old, new);
    let anon = s.client();
    let r = anon.post("/auth/verify-email", json!({ "token": old })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    let r = anon.post("/auth/verify-email", json!({ "token": new })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["emailVerified"], true);
    assert_eq!(alice.get("/users/@me").await.json["emailVerified"], true);
    // Single use.
    let r = anon.post("/auth/verify-email", json!({ "token": new })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    // A verified account gets no more links.
    let r = alice.post("/auth/request-verification", json!({})).await;
    assert_eq!(r.status, 200);

    // Bob's link, asked for by address, expires after 24 hours.
    let bob = signup(&s, "bob@example.com").await;
    let r = anon.post("/auth/request-verification", json!({ "email": "bob@example.com" })).await;
    assert_eq!(r.status, 200);
    let bobs = mails_to(&sink, 4, "bob@example.com").await;
    assert_eq!(bobs.len(), 2, "signing up and asking: two links");
    let token = token_in(&bobs[1], "verify-email");
    s.clock().advance(24 * 3_600_000 + 1_000);
    let r = anon.post("/auth/verify-email", json!({ "token": token })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    assert_eq!(bob.get("/users/@me").await.json["emailVerified"], false);
    // Alice's verified account got nothing more: four system mails in all.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(sink.system_received().len(), 4);
    // Garbage and missing tokens.
    let r = anon.post("/auth/verify-email", json!({ "token": "x".repeat(500) })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let r = anon.post("/auth/verify-email", json!({ "token": "not-a-token" })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    let r = anon.post("/auth/request-verification", json!({})).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
}

#[tokio::test]
async fn a_password_reset_ends_every_earlier_session_and_its_link_works_once_within_an_hour() {
    let (s, sink) = env(|_| {}).await;
    let laptop = signup(&s, "carol@example.com").await;
    let phone = s.client();
    let r = phone.post("/auth/login", json!({ "email": "carol@example.com", "password": "password123" })).await;
    assert_eq!(r.status, 200);
    let anon = s.client();
    // Two requests: the second link replaces the first.
    for _ in 0..2 {
        let r = anon.post("/auth/request-password-reset", json!({ "email": "Carol@Example.com" })).await;
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let mails = mails_to(&sink, 3, "carol@example.com").await;
    let resets: Vec<&Received> = mails.iter().filter(|m| m.data.contains("Subject: Reset your password")).collect();
    assert_eq!(resets.len(), 2);
    let (old, new) = (token_in(resets[0], "reset-password"), token_in(resets[1], "reset-password"));
    let r = anon.post("/auth/reset-password", json!({ "token": old, "password": "brand-new-pass" })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    let r = anon.post("/auth/reset-password", json!({ "token": new, "password": "short" })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "password");
    // The refused password did not use the token up.
    let fresh = s.client();
    let r = fresh.post("/auth/reset-password", json!({ "token": new, "password": "brand-new-pass" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["email"], "carol@example.com");
    // The reset logged this client in; every session from before ended.
    assert_eq!(fresh.get("/users/@me").await.status, 200);
    for old_session in [&laptop, &phone] {
        let r = old_session.get("/users/@me").await;
        assert_envelope(&r, 401, "UNAUTHORIZED");
    }
    let r = anon.post("/auth/login", json!({ "email": "carol@example.com", "password": "password123" })).await;
    assert_envelope(&r, 401, "UNAUTHORIZED");
    let r = anon.post("/auth/login", json!({ "email": "carol@example.com", "password": "brand-new-pass" })).await;
    assert_eq!(r.status, 200);
    // Single use.
    let r = anon.post("/auth/reset-password", json!({ "token": new, "password": "another-pass-1" })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");

    // A link older than an hour is refused, and the password stays.
    let r = anon.post("/auth/request-password-reset", json!({ "email": "carol@example.com" })).await;
    assert_eq!(r.status, 200);
    let mails = mails_to(&sink, 4, "carol@example.com").await;
    let late = token_in(mails.last().unwrap(), "reset-password");
    s.clock().advance(3_600_000 + 1_000);
    let r = anon.post("/auth/reset-password", json!({ "token": late, "password": "another-pass-1" })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    let r = anon.post("/auth/login", json!({ "email": "carol@example.com", "password": "brand-new-pass" })).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn the_request_endpoints_do_not_reveal_accounts_and_are_throttled_per_address() {
    let (s, sink) = env(|_| {}).await;
    signup(&s, "dave@example.com").await;
    let anon = s.client();
    for path in ["/auth/request-password-reset", "/auth/request-verification"] {
        let known = anon.post(path, json!({ "email": "dave@example.com" })).await;
        let unknown = anon.post(path, json!({ "email": "nobody@example.com" })).await;
        assert_eq!((known.status, unknown.status), (200, 200));
        assert_eq!(known.json, unknown.json, "{path} answers the same whether or not the account exists");
    }
    // Dave: the sign-up link, then the reset and the new verification link; nobody: nothing, and no token.
    let all = sink.wait_for_system(3).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(sink.system_received().len(), 3, "{all:?}");
    assert!(sink.system_received().iter().all(|m| m.to == ["dave@example.com".to_string()]));

    // Five requests per address an hour; the sixth waits, for a known and an unknown address alike.
    for email in ["dave@example.com", "nobody@example.com"] {
        for _ in 0..3 {
            assert_eq!(anon.post("/auth/request-password-reset", json!({ "email": email })).await.status, 200);
        }
        let r = anon.post("/auth/request-password-reset", json!({ "email": email })).await;
        assert_envelope(&r, 429, "RATE_LIMIT_EXCEEDED");
    }
    // Another address is not held up by them.
    let r = anon.post("/auth/request-password-reset", json!({ "email": "erin@example.com" })).await;
    assert_eq!(r.status, 200);
    s.clock().advance(3_600_000 + 1_000);
    let r = anon.post("/auth/request-password-reset", json!({ "email": "dave@example.com" })).await;
    assert_eq!(r.status, 200, "the window passed");
}

#[tokio::test]
async fn with_verification_required_an_unverified_user_logs_in_but_creates_no_project() {
    let (s, sink) = env(|c| c.require_email_verification = true).await;
    assert_eq!(s.client().get("/config").await.json["features"]["emailVerification"], true);
    let frank = signup(&s, "frank@example.com").await;
    let r = frank.post("/users/@me/projects", json!({ "name": "Shop" })).await;
    assert_envelope(&r, 403, "EMAIL_NOT_VERIFIED");
    let token = token_in(&mails_to(&sink, 1, "frank@example.com").await[0], "verify-email");
    let r = s.client().post("/auth/verify-email", json!({ "token": token })).await;
    assert_eq!(r.status, 200);
    let r = frank.post("/users/@me/projects", json!({ "name": "Shop" })).await;
    assert_eq!(r.status, 201, "{}", r.json);
}

#[tokio::test]
async fn an_invitation_by_mail_adds_the_user_who_signs_up_with_that_address() {
    let (s, sink) = env(|_| {}).await;
    let (owner, p) = crate::harness::project(&s, "olga@example.com", "Team").await;
    let id = p["id"].as_str().unwrap();
    let (_other_owner, other) = crate::harness::project(&s, "oscar@example.com", "Other").await;
    let other_id = other["id"].as_str().unwrap();

    let r =
        owner.post(&format!("/projects/{id}/members"), json!({ "email": "Nina@Example.com", "role": "ADMIN" })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    assert_eq!(r.json["invited"], true);
    assert_eq!(r.json["email"], "nina@example.com");
    assert_eq!(r.json["role"], "ADMIN");
    let mail = mails_to(&sink, 3, "nina@example.com").await;
    assert!(mail[0].data.contains("Subject: You are invited to Team on Herald"), "{}", mail[0].data);
    let token = token_in(&mail[0], "accept-invitation");
    let r = owner.get(&format!("/projects/{id}/invitations")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json.as_array().unwrap().len(), 1);
    assert_eq!(r.json[0]["email"], "nina@example.com");
    // Another project's owner sees neither the invitations nor the project.
    let outsider = signup(&s, "mallory@example.com").await;
    assert_envelope(&outsider.get(&format!("/projects/{id}/invitations")).await, 404, "PROJECT_NOT_FOUND");

    // Only the invited address may accept; the token stays good for it.
    let r = outsider.post("/auth/accept-invitation", json!({ "token": token })).await;
    assert_envelope(&r, 403, "FORBIDDEN");
    let nina = signup(&s, "nina@example.com").await;
    let r = nina.post("/auth/accept-invitation", json!({ "token": token })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json, json!({ "projectId": id, "role": "ADMIN" }));
    // She is a member now (her address counts as verified), of that project only.
    let members = owner.get(&format!("/projects/{id}/members")).await.json;
    assert!(members.as_array().unwrap().iter().any(|m| m["email"] == "nina@example.com" && m["role"] == "ADMIN"));
    let projects = nina.get("/users/@me/projects").await.json;
    assert_eq!(projects.as_array().unwrap().len(), 1);
    assert_eq!(projects[0]["id"], id);
    assert_ne!(projects[0]["id"], other_id);
    assert_eq!(nina.get("/users/@me").await.json["emailVerified"], true);
    assert_eq!(owner.get(&format!("/projects/{id}/invitations")).await.json, json!([]));
    let r = nina.post("/auth/accept-invitation", json!({ "token": token })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");

    // A withdrawn invitation's link stops working; a MEMBER can neither invite nor withdraw.
    let r = owner.post(&format!("/projects/{id}/members"), json!({ "email": "paul@example.com" })).await;
    assert_eq!(r.status, 202);
    let paul_token = token_in(&mails_to(&sink, 6, "paul@example.com").await[0], "accept-invitation");
    let r = owner.delete(&format!("/projects/{id}/invitations/paul@example.com")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let r = owner.delete(&format!("/projects/{id}/invitations/paul@example.com")).await;
    assert_envelope(&r, 404, "INVITATION_NOT_FOUND");
    let paul = signup(&s, "paul@example.com").await;
    let r = paul.post("/auth/accept-invitation", json!({ "token": paul_token })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    let r = owner.patch(&format!("/projects/{id}/members/{}", nina_id(&nina).await), json!({ "role": "MEMBER" })).await;
    assert_eq!(r.status, 200);
    let r = nina.post(&format!("/projects/{id}/members"), json!({ "email": "quinn@example.com" })).await;
    assert_envelope(&r, 403, "FORBIDDEN");

    // An invitation expires after 7 days.
    let r = owner.post(&format!("/projects/{id}/members"), json!({ "email": "rita@example.com" })).await;
    assert_eq!(r.status, 202);
    let rita_token = token_in(&mails_to(&sink, 8, "rita@example.com").await[0], "accept-invitation");
    s.clock().advance(7 * 24 * 3_600_000 + 1_000);
    let rita = signup(&s, "rita@example.com").await;
    let r = rita.post("/auth/accept-invitation", json!({ "token": rita_token })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
}

async fn nina_id(c: &crate::harness::Client) -> String {
    c.get("/users/@me").await.json["id"].as_str().unwrap().to_string()
}
