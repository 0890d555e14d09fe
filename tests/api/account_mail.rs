//! Account mail end to end through a real SMTP server on loopback (docs/behaviour.md#account-mail):
//! sign-up, verification, password reset and invitations; tokens single use, superseded by newer ones,
//! expiring; no account enumeration; the mail requests throttled without locking out an address's
//! owner; invitations that cannot be turned into a relay (docs/security.md).

use herald_host::config::Config;
use herald_host::infra::clock::ManualClock;
use serde_json::json;

use crate::harness::{Server, assert_envelope, join, signup, unverified_user};
use crate::smtp_sink::{Received, SmtpSink, decoded, token_in};

async fn env(config: impl FnOnce(&mut Config)) -> (Server, SmtpSink) {
    let sink = SmtpSink::start(0).await;
    let mut c = Config::for_tests();
    c.smtp_url = Some(sink.url());
    config(&mut c);
    let s = Server::start_with(c, Some(ManualClock::new(1_800_000_000_000))).await;
    (s, sink)
}

/// The system mails to `to`, oldest first, once there are `n` in all.
async fn mails_to(sink: &SmtpSink, n: usize, to: &str) -> Vec<Received> {
    sink.wait_for_system(n).await.into_iter().filter(|m| m.to == [to.to_string()]).collect()
}

/// Signs up over HTTP, follows the link mailed to `email` with the password and answers the logged-in
/// client. `before` is how many system mails the sink had received before.
async fn sign_up_over_http(s: &Server, sink: &SmtpSink, email: &str, before: usize) -> crate::harness::Client {
    let c = s.client();
    let r = c.post("/auth/signup", json!({ "email": email, "password": "password123" })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    let token = token_in(mails_to(sink, before + 1, email).await.last().unwrap(), "verify-email");
    let r = c.post("/auth/verify-email", json!({ "token": token, "password": "password123" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    c
}

#[tokio::test]
async fn a_sign_up_creates_its_account_only_when_the_mailed_link_is_followed_with_its_password() {
    let (s, sink) = env(|_| {}).await;
    let c = s.client();
    let r = c
        .post("/auth/signup", json!({ "email": "  Ada@Example.COM ", "password": "password123", "name": "Ada" }))
        .await;
    assert_eq!(r.status, 202, "{}", r.json);
    assert_eq!(r.json, json!({ "success": true }));
    assert!(r.header("set-cookie").is_none(), "no session before the address answered");
    // No account yet: nobody can log in with it, nor hold a role through it.
    let r = c.post("/auth/login", json!({ "email": "ada@example.com", "password": "password123" })).await;
    assert_envelope(&r, 401, "UNAUTHORIZED");
    let mail = &mails_to(&sink, 1, "ada@example.com").await[0];
    assert!(mail.data.contains("Subject: Confirm your email address"), "{}", mail.data);
    assert!(mail.data.contains("Auto-Submitted: auto-generated"));
    let token = token_in(mail, "verify-email");
    assert_eq!(token.len(), 43, "32 random bytes, base64url: {}", mail.data);

    // The link alone does nothing: whoever follows it must know the password chosen at sign-up.
    let stranger = s.client();
    let r = stranger.post("/auth/verify-email", json!({ "token": token, "password": "guess-guess" })).await;
    assert_envelope(&r, 401, "UNAUTHORIZED");
    assert!(r.header("set-cookie").is_none());
    let r = stranger.post("/auth/verify-email", json!({ "token": token })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let r = c.post("/auth/verify-email", json!({ "token": token, "password": "password123" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(
        (&r.json["email"], &r.json["name"], &r.json["emailVerified"]),
        (&json!("ada@example.com"), &json!("Ada"), &json!(true)),
        "emails are trimmed and lowercased"
    );
    let cookie = r.header("set-cookie").unwrap();
    assert!(cookie.starts_with("herald_token="), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Max-Age=604800"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "not Secure on an http public URL");
    assert_eq!(c.get("/users/@me").await.json["email"], "ada@example.com");
    // Single use; the account logs in with its password.
    let r = s.client().post("/auth/verify-email", json!({ "token": token, "password": "password123" })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    let r = s.client().post("/auth/login", json!({ "email": "ada@example.com", "password": "password123" })).await;
    assert_eq!(r.status, 200, "{}", r.json);

    // A sign-up link expires after 24 hours; a name must be one line.
    let r = s.client().post("/auth/signup", json!({ "email": "late@example.com", "password": "password123" })).await;
    assert_eq!(r.status, 202);
    let token = token_in(&mails_to(&sink, 2, "late@example.com").await[0], "verify-email");
    s.clock().advance(24 * 3_600_000 + 1_000);
    let r = s.client().post("/auth/verify-email", json!({ "token": token, "password": "password123" })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    let r = s
        .client()
        .post("/auth/signup", json!({ "email": "n@example.com", "password": "password123", "name": "A\r\nB" }))
        .await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "name");
    // Garbage and missing tokens.
    let r = s.client().post("/auth/verify-email", json!({ "token": "x".repeat(500), "password": "p" })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let r = s.client().post("/auth/verify-email", json!({ "token": "not-a-token", "password": "p" })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
}

#[tokio::test]
async fn sign_up_answers_alike_for_known_and_unknown_addresses_and_changes_no_account() {
    let (s, sink) = env(|_| {}).await;
    signup(&s, "kim@example.com").await;
    let known =
        s.client().post("/auth/signup", json!({ "email": "KIM@example.com", "password": "other-password" })).await;
    let unknown =
        s.client().post("/auth/signup", json!({ "email": "lee@example.com", "password": "other-password" })).await;
    assert_eq!((known.status, unknown.status), (202, 202), "{} {}", known.json, unknown.json);
    assert_eq!(known.json, unknown.json);
    assert_eq!(known.header("set-cookie"), unknown.header("set-cookie"));
    // Kim is told she has an account (no link in that mail); Lee gets the link that creates his.
    let kim = &mails_to(&sink, 2, "kim@example.com").await[0];
    assert!(kim.data.contains("Subject: You already have a Herald account"), "{}", kim.data);
    assert!(!decoded(kim).contains("token="), "{}", decoded(kim));
    token_in(&mails_to(&sink, 2, "lee@example.com").await[0], "verify-email");
    // Kim's account is as it was.
    let r = s.client().post("/auth/login", json!({ "email": "kim@example.com", "password": "other-password" })).await;
    assert_envelope(&r, 401, "UNAUTHORIZED");
    let r = s.client().post("/auth/login", json!({ "email": "kim@example.com", "password": "password123" })).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn an_unverified_accounts_verification_links_work_once_with_its_password_and_expire() {
    let (s, sink) = env(|_| {}).await;
    // Accounts created before sign-ups waited for their address may be unverified.
    let alice = unverified_user(&s, "alice@example.com", None).await;
    assert_eq!(alice.get("/users/@me").await.json["emailVerified"], false);
    let r = alice.post("/auth/request-verification", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let first = mails_to(&sink, 1, "alice@example.com").await;
    assert!(first[0].data.contains("Subject: Verify your email address"), "{}", first[0].data);
    let old = token_in(&first[0], "verify-email");
    // Asking again sends a new link, which replaces the first.
    let r = alice.post("/auth/request-verification", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let new = token_in(&mails_to(&sink, 2, "alice@example.com").await[1], "verify-email");
    assert_ne!(old, new);
    let anon = s.client();
    let r = anon.post("/auth/verify-email", json!({ "token": old, "password": "password123" })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    let r = anon.post("/auth/verify-email", json!({ "token": new, "password": "wrong-password" })).await;
    assert_envelope(&r, 401, "UNAUTHORIZED");
    let r = anon.post("/auth/verify-email", json!({ "token": new, "password": "password123" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["emailVerified"], true);
    assert!(r.header("set-cookie").is_some_and(|c| c.starts_with("herald_token=")), "the link logs in");
    assert_eq!(alice.get("/users/@me").await.json["emailVerified"], true);
    let r = anon.post("/auth/verify-email", json!({ "token": new, "password": "password123" })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    // A verified account gets no more links.
    let r = alice.post("/auth/request-verification", json!({})).await;
    assert_eq!(r.status, 200);

    // Bob's link, asked for by address, expires after 24 hours.
    let bob = unverified_user(&s, "bob@example.com", None).await;
    let anon = s.client();
    let r = anon.post("/auth/request-verification", json!({ "email": "bob@example.com" })).await;
    assert_eq!(r.status, 200);
    let token = token_in(&mails_to(&sink, 3, "bob@example.com").await[0], "verify-email");
    s.clock().advance(24 * 3_600_000 + 1_000);
    let r = anon.post("/auth/verify-email", json!({ "token": token, "password": "password123" })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    assert_eq!(bob.get("/users/@me").await.json["emailVerified"], false);
    // Alice's verified account got nothing more: three system mails in all.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(sink.system_received().len(), 3);
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
    let resets = mails_to(&sink, 2, "carol@example.com").await;
    assert!(resets.iter().all(|m| m.data.contains("Subject: Reset your password")));
    let (old, new) = (token_in(&resets[0], "reset-password"), token_in(&resets[1], "reset-password"));
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
    let mails = mails_to(&sink, 3, "carol@example.com").await;
    let late = token_in(mails.last().unwrap(), "reset-password");
    s.clock().advance(3_600_000 + 1_000);
    let r = anon.post("/auth/reset-password", json!({ "token": late, "password": "another-pass-1" })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    let r = anon.post("/auth/login", json!({ "email": "carol@example.com", "password": "brand-new-pass" })).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_reset_with_a_bogus_token_costs_no_password_hash() {
    let (s, sink) = env(|_| {}).await;
    signup(&s, "hugo@example.com").await;
    let before = s.state.passwords.computed();
    for i in 0..20 {
        let r = s
            .client()
            .post("/auth/reset-password", json!({ "token": format!("bogus-{i}"), "password": "new-password-1" }))
            .await;
        assert_envelope(&r, 400, "INVALID_TOKEN");
    }
    assert_eq!(s.state.passwords.computed(), before, "no hash was computed for a token that is not valid");
    // A real one is hashed once.
    let r = s.client().post("/auth/request-password-reset", json!({ "email": "hugo@example.com" })).await;
    assert_eq!(r.status, 200);
    let token = token_in(&mails_to(&sink, 1, "hugo@example.com").await[0], "reset-password");
    let r = s.client().post("/auth/reset-password", json!({ "token": token, "password": "new-password-1" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(s.state.passwords.computed(), before + 1);
}

#[tokio::test]
async fn the_request_endpoints_do_not_reveal_accounts_and_throttle_the_client_that_asks() {
    let (s, sink) = env(|_| {}).await;
    signup(&s, "dave@example.com").await;
    let anon = s.client();
    for path in ["/auth/request-password-reset", "/auth/request-verification", "/auth/signup"] {
        let body = |email: &str| json!({ "email": email, "password": "password123" });
        let known = anon.post(path, body("dave@example.com")).await;
        let unknown = anon.post(path, body("nobody@example.com")).await;
        assert!(known.status < 300 && known.status == unknown.status, "{path}: {} {}", known.status, unknown.status);
        assert_eq!(known.json, unknown.json, "{path} answers the same whether or not the account exists");
    }
    // Dave: the reset, and the note that he has an account (his address is verified: no new link);
    // nobody: the link of its sign-up only.
    sink.wait_for_system(3).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let to = |m: &Received| m.to[0].clone();
    let mut got: Vec<String> = sink.system_received().iter().map(to).collect();
    got.sort();
    assert_eq!(got, ["dave@example.com", "dave@example.com", "nobody@example.com"]);

    // One client asks about one address five times an hour (sign-ups count too); the sixth is 429,
    // known address or not.
    for email in ["dave@example.com", "nobody@example.com"] {
        for _ in 0..2 {
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
async fn strangers_asking_for_resets_cannot_keep_the_owner_from_a_working_link() {
    let (s, sink) = env(|_| {}).await;
    signup(&s, "vic@example.com").await;
    // One stranger asks until it is refused: that holds back the stranger, not Vic.
    let mallory = s.client_from("127.0.0.2");
    for _ in 0..5 {
        assert_eq!(
            mallory.post("/auth/request-password-reset", json!({ "email": "vic@example.com" })).await.status,
            200
        );
    }
    let r = mallory.post("/auth/request-password-reset", json!({ "email": "vic@example.com" })).await;
    assert_envelope(&r, 429, "RATE_LIMIT_EXCEEDED");
    let vic = s.client_from("127.0.0.3");
    assert_eq!(vic.post("/auth/request-password-reset", json!({ "email": "vic@example.com" })).await.status, 200);
    let mails = mails_to(&sink, 6, "vic@example.com").await;
    let token = token_in(mails.last().unwrap(), "reset-password");
    let r = vic.post("/auth/reset-password", json!({ "token": token, "password": "vics-new-pass" })).await;
    assert_eq!(r.status, 200, "{}", r.json);

    // Strangers from many addresses together reach the address's own cap (20 mails an hour): further
    // requests are answered alike but mail nothing, so the last link mailed keeps working.
    for i in 0..4 {
        let c = s.client_from(&format!("127.0.0.{}", 10 + i));
        for _ in 0..5 {
            assert_eq!(c.post("/auth/request-password-reset", json!({ "email": "vic@example.com" })).await.status, 200);
        }
    }
    let mails = mails_to(&sink, 20, "vic@example.com").await;
    assert_eq!(mails.len(), 20);
    let last = token_in(mails.last().unwrap(), "reset-password");
    assert_eq!(vic.post("/auth/request-password-reset", json!({ "email": "vic@example.com" })).await.status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(sink.system_received().len(), 20, "past the cap nothing more is mailed");
    let r = vic.post("/auth/reset-password", json!({ "token": last, "password": "vics-newer-pass" })).await;
    assert_eq!(r.status, 200, "the last link mailed still works: {}", r.json);
}

#[tokio::test]
async fn with_verification_required_an_unverified_user_logs_in_but_creates_no_project() {
    let (s, sink) = env(|c| c.require_email_verification = true).await;
    assert_eq!(s.client().get("/config").await.json["features"]["emailVerification"], true);
    let frank = unverified_user(&s, "frank@example.com", None).await;
    let r = frank.post("/users/@me/projects", json!({ "name": "Shop" })).await;
    assert_envelope(&r, 403, "EMAIL_NOT_VERIFIED");
    assert_eq!(frank.post("/auth/request-verification", json!({})).await.status, 200);
    let token = token_in(&mails_to(&sink, 1, "frank@example.com").await[0], "verify-email");
    let r = s.client().post("/auth/verify-email", json!({ "token": token, "password": "password123" })).await;
    assert_eq!(r.status, 200);
    let r = frank.post("/users/@me/projects", json!({ "name": "Shop" })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    // A user who signed up since is verified by the sign-up itself.
    let gina = sign_up_over_http(&s, &sink, "gina@example.com", 1).await;
    assert_eq!(gina.post("/users/@me/projects", json!({ "name": "Shop" })).await.status, 201);
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
    let mail = mails_to(&sink, 1, "nina@example.com").await;
    assert!(mail[0].data.contains("Subject: You are invited to a project on Herald"), "{}", mail[0].data);
    let text = decoded(&mail[0]);
    assert!(text.contains("Project's name: \"Team\"") && text.contains("olga@example.com"), "{text}");
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
    let nina = sign_up_over_http(&s, &sink, "nina@example.com", 1).await;
    let r = nina.post("/auth/accept-invitation", json!({ "token": token })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json, json!({ "projectId": id, "role": "ADMIN" }));
    // She is a member now, of that project only.
    let members = owner.get(&format!("/projects/{id}/members")).await.json;
    assert!(members.as_array().unwrap().iter().any(|m| m["email"] == "nina@example.com" && m["role"] == "ADMIN"));
    let projects = nina.get("/users/@me/projects").await.json;
    assert_eq!(projects.as_array().unwrap().len(), 1);
    assert_eq!(projects[0]["id"], id);
    assert_ne!(projects[0]["id"], other_id);
    assert_eq!(owner.get(&format!("/projects/{id}/invitations")).await.json, json!([]));
    let r = nina.post("/auth/accept-invitation", json!({ "token": token })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
    // A member's address again: 409, they are in already.
    let r = owner.post(&format!("/projects/{id}/members"), json!({ "email": "nina@example.com" })).await;
    assert_envelope(&r, 409, "CONFLICT");

    // A withdrawn invitation's link stops working; a MEMBER can neither invite nor withdraw.
    let r = owner.post(&format!("/projects/{id}/members"), json!({ "email": "paul@example.com" })).await;
    assert_eq!(r.status, 202);
    let paul_token = token_in(&mails_to(&sink, 3, "paul@example.com").await[0], "accept-invitation");
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
    let rita_token = token_in(&mails_to(&sink, 4, "rita@example.com").await[0], "accept-invitation");
    s.clock().advance(7 * 24 * 3_600_000 + 1_000);
    let rita = signup(&s, "rita@example.com").await;
    let r = rita.post("/auth/accept-invitation", json!({ "token": rita_token })).await;
    assert_envelope(&r, 400, "INVALID_TOKEN");
}

#[tokio::test]
async fn an_invitation_cannot_be_made_into_mail_a_stranger_writes() {
    let (s, sink) = env(|_| {}).await;
    let (owner, p) = crate::harness::project(&s, "owner@example.com", "Acme").await;
    let id = p["id"].as_str().unwrap().to_string();
    let members = format!("/projects/{id}/members");
    // An account whose address nobody verified does not invite anyone.
    let squatter = unverified_user(&s, "squatter@example.com", Some("Squatter")).await;
    join(&s, &id, "squatter@example.com", "ADMIN").await;
    let r = squatter.post(&members, json!({ "email": "victim@example.org" })).await;
    assert_envelope(&r, 403, "EMAIL_NOT_VERIFIED");

    // Names cannot carry line breaks, and one stored before that rule is quoted on one line after a
    // fixed sentence; the subject names nothing a user chose.
    let r = owner.patch(&format!("/users/@me/projects/{id}"), json!({ "name": "Acme\n\nACTION REQUIRED" })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    s.state.store.rename_project(&id, "Acme\r\n\r\nACTION REQUIRED: log in at http://evil.test", 1).await.unwrap();
    let eve = unverified_user(&s, "eve@example.com", Some("Eve\r\nURGENT: http://evil.test/login")).await;
    let eve_id = eve.get("/users/@me").await.json["id"].as_str().unwrap().to_string();
    s.state.store.set_email_verified(&eve_id, 1).await.unwrap();
    join(&s, &id, "eve@example.com", "ADMIN").await;
    let r = eve.post(&members, json!({ "email": "victim@example.org" })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    let mail = &mails_to(&sink, 1, "victim@example.org").await[0];
    assert!(mail.data.contains("Subject: You are invited to a project on Herald\r\n"), "{}", mail.data);
    let text = decoded(mail);
    assert!(
        text.contains("Project's name: \"Acme ACTION REQUIRED: log in at http://evil.test\""),
        "the name is quoted on one line: {text}"
    );
    assert!(text.contains("Inviter's name: \"Eve URGENT: http://evil.test/login\""), "{text}");
    assert!(!text.contains("\nACTION REQUIRED") && !text.contains("\nURGENT"), "{text}");

    // Throttled per invited address (5 a day), per inviter (20 an hour) and per project (50 a day).
    for i in 1..5 {
        let r = owner.post(&members, json!({ "email": "victim@example.org", "role": "MEMBER" })).await;
        assert_eq!(r.status, 202, "invitation {i}: {}", r.json);
    }
    let r = owner.post(&members, json!({ "email": "victim@example.org" })).await;
    assert_envelope(&r, 429, "RATE_LIMIT_EXCEEDED");
    assert!(r.header("retry-after").is_some());
    for i in 0..16 {
        let r = owner.post(&members, json!({ "email": format!("person{i}@example.org") })).await;
        assert_eq!(r.status, 202, "invitation to person{i}: {}", r.json);
    }
    let r = owner.post(&members, json!({ "email": "one-more@example.org" })).await;
    assert_envelope(&r, 429, "RATE_LIMIT_EXCEEDED");
    // Other verified inviters of the project go on until the project's own cap.
    let second = signup(&s, "second@example.com").await;
    join(&s, &id, "second@example.com", "ADMIN").await;
    for i in 0..20 {
        let r = second.post(&members, json!({ "email": format!("more{i}@example.org") })).await;
        assert_eq!(r.status, 202, "invitation to more{i}: {}", r.json);
    }
    let third = signup(&s, "third@example.com").await;
    join(&s, &id, "third@example.com", "ADMIN").await;
    for i in 0..9 {
        let r = third.post(&members, json!({ "email": format!("last{i}@example.org") })).await;
        assert_eq!(r.status, 202, "invitation to last{i}: {}", r.json);
    }
    let r = third.post(&members, json!({ "email": "past-the-cap@example.org" })).await;
    assert_envelope(&r, 429, "RATE_LIMIT_EXCEEDED");
    // 1 + 4 + 16 + 20 + 9 invitations went out, nothing past the caps.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    sink.wait_for_system(50).await;
    assert_eq!(sink.system_received().len(), 50);
}

async fn nina_id(c: &crate::harness::Client) -> String {
    c.get("/users/@me").await.json["id"].as_str().unwrap().to_string()
}
