//! Accounts, sessions, projects, keys and members (docs/behaviour.md#keys-and-authentication).

use serde_json::json;

use crate::harness::*;

#[tokio::test]
async fn login_logout_and_me() {
    let s = Server::start().await;
    signup(&s, "ada@example.com").await;
    let c = s.client();
    let r = c.post("/auth/login", json!({ "email": "  Ada@Example.COM ", "password": "password123" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["email"], "ada@example.com", "emails are trimmed and lowercased");
    let cookie = r.header("set-cookie").unwrap();
    assert!(cookie.starts_with("herald_token="), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Max-Age=604800"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "not Secure on an http public URL");

    let me = c.get("/users/@me").await;
    assert_eq!(me.status, 200);
    assert_eq!(me.json["email"], "ada@example.com");
    assert_eq!(me.json["name"], "Test");
    assert!(me.json.get("passwordHash").is_none() && me.json.get("password_hash").is_none());

    let r = c.get("/auth/logout").await;
    assert_eq!(r.status, 200);
    assert_envelope(&c.get("/users/@me").await, 401, "UNAUTHORIZED");

    let r = c.post("/auth/login", json!({ "email": "ada@example.com", "password": "wrong-password" })).await;
    assert_envelope(&r, 401, "UNAUTHORIZED");
    let r = c.post("/auth/login", json!({ "email": "nobody@example.com", "password": "password123" })).await;
    assert_envelope(&r, 401, "UNAUTHORIZED");
    let r = c.post("/auth/login", json!({ "email": "ADA@example.com", "password": "password123" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(c.get("/users/@me").await.status, 200);
    s.stop().await;
}

#[tokio::test]
async fn signup_validation_and_no_duplicate_is_revealed() {
    let s = Server::start().await;
    let c = s.client();
    let r = c.post("/auth/signup", json!({ "email": "not-an-email", "password": "short" })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let errors = r.json["error"]["errors"].as_array().unwrap();
    let by_field = |f: &str| errors.iter().find(|e| e["field"] == f).cloned().unwrap_or_default();
    assert_eq!(by_field("email")["code"], "invalid_string");
    assert_eq!(by_field("email")["received"], "not-an-email");
    assert_eq!(by_field("password")["code"], "too_small");
    let r = c.post("/auth/signup", json!({ "password": 12345678 })).await;
    let errors = r.json["error"]["errors"].as_array().unwrap();
    assert!(errors.iter().any(|e| e["field"] == "email" && e["code"] == "required"));
    assert!(errors.iter().any(|e| e["field"] == "password" && e["code"] == "invalid_type"));

    // A taken address is answered like a free one (the mails differ: tests/api/account_mail.rs).
    signup(&s, "dup@example.com").await;
    let taken = s.client().post("/auth/signup", json!({ "email": "DUP@example.com", "password": "password123" })).await;
    let free = s.client().post("/auth/signup", json!({ "email": "new@example.com", "password": "password123" })).await;
    assert_eq!((taken.status, &taken.json), (202, &free.json), "{}", taken.json);
    s.stop().await;
}

#[tokio::test]
async fn addresses_are_checked_before_case_folding() {
    let s = Server::start().await;
    signup(&s, "kate@example.com").await;
    // U+212A KELVIN SIGN lowercases to an ASCII `k`: taken as it is, it would spell kate@example.com.
    let kelvin = "\u{212A}ate@example.com";
    for (path, body) in [
        ("/auth/signup", json!({ "email": kelvin, "password": "password123" })),
        ("/auth/login", json!({ "email": kelvin, "password": "password123" })),
        ("/auth/request-password-reset", json!({ "email": kelvin })),
    ] {
        let r = s.client().post(path, body).await;
        assert_envelope(&r, 422, "VALIDATION_ERROR");
        assert_eq!(r.json["error"]["errors"][0]["field"], "email", "{path}: {}", r.json);
    }
    let (owner, p) = project(&s, "owner@example.com", "Team").await;
    let r = owner.post(&format!("/projects/{}/members", p["id"].as_str().unwrap()), json!({ "email": kelvin })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let cli =
        herald_host::services::accounts::create_project_for(&s.state, "P", Some(kelvin), Some("password123")).await;
    assert!(cli.is_err(), "the project command refuses it too: {cli:?}");
    s.stop().await;
}

#[tokio::test]
async fn the_project_command_and_sign_up_refuse_the_same_passwords() {
    let s = Server::start().await;
    let long = "p".repeat(257);
    for (i, pw) in ["short", "seven77", long.as_str()].into_iter().enumerate() {
        let email = format!("pw{i}@example.com");
        let r = s.client().post("/auth/signup", json!({ "email": email, "password": pw })).await;
        assert_eq!(r.status, 422, "sign-up with a {}-character password: {}", pw.len(), r.json);
        let cli = herald_host::services::accounts::create_project_for(&s.state, "P", Some(&email), Some(pw)).await;
        let err = cli.expect_err("the project command takes the password sign-up refuses");
        assert!(err.to_string().contains("8 to 256 characters"), "{err}");
    }
    for pw in ["eight888", &"p".repeat(256)] {
        let email = format!("ok{}@example.com", pw.len());
        let r = s.client().post("/auth/signup", json!({ "email": email, "password": pw })).await;
        assert_eq!(r.status, 202, "{}", r.json);
        let cli =
            herald_host::services::accounts::create_project_for(&s.state, "P", Some(&format!("cli-{email}")), Some(pw))
                .await;
        assert!(cli.is_ok(), "{cli:?}");
    }
    s.stop().await;
}

#[tokio::test]
async fn signups_can_be_disabled() {
    let mut config = herald_host::config::Config::for_tests();
    config.disable_signups = true;
    let s = Server::start_with(config, None).await;
    let r = s.client().post("/auth/signup", json!({ "email": "a@example.com", "password": "password123" })).await;
    assert_envelope(&r, 403, "FORBIDDEN");
    assert_eq!(s.client().get("/config").await.json["features"]["signups"], false);
    s.stop().await;
}

#[tokio::test]
async fn project_creation_answers_the_keys_once_and_lists_without_them() {
    let s = Server::start().await;
    let (c, p) = project(&s, "owner@example.com", "Shop").await;
    assert_eq!(p["name"], "Shop");
    assert_eq!(p["role"], "OWNER");
    let public = p["public"].as_str().unwrap();
    let secret = p["secret"].as_str().unwrap();
    assert!(public.starts_with("pk_") && public.len() == 67, "{public}");
    assert!(secret.starts_with("sk_") && secret.len() == 67, "{secret}");
    let list = c.get("/users/@me/projects").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.json.as_array().unwrap().len(), 1);
    assert!(list.json[0].get("secret").is_none() && list.json[0].get("public").is_none());
    assert_eq!(list.json[0]["role"], "OWNER");

    let r = c.post("/users/@me/projects", json!({ "name": "  " })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let r = c.post("/users/@me/projects", json!({ "name": "x".repeat(101) })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let r = s.client().post("/users/@me/projects", json!({ "name": "anon" })).await;
    assert_envelope(&r, 401, "UNAUTHORIZED");

    let id = p["id"].as_str().unwrap();
    let r = c.patch(&format!("/users/@me/projects/{id}"), json!({ "name": "Shop 2" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["name"], "Shop 2");
    s.stop().await;
}

#[tokio::test]
async fn members_and_roles_follow_the_rules() {
    let s = Server::start().await;
    let (owner, p) = project(&s, "owner@example.com", "Team").await;
    let id = p["id"].as_str().unwrap();
    let admin = signup(&s, "admin@example.com").await;
    let member = signup(&s, "member@example.com").await;
    let outsider = signup(&s, "outsider@example.com").await;
    let admin_id = admin.get("/users/@me").await.json["id"].as_str().unwrap().to_string();
    let member_id = member.get("/users/@me").await.json["id"].as_str().unwrap().to_string();
    let owner_id = owner.get("/users/@me").await.json["id"].as_str().unwrap().to_string();
    let members = format!("/projects/{id}/members");

    // Every address is invited by mail, an account or not (the invitation is accepted in
    // tests/api/account_mail.rs); here the invitations are taken as accepted.
    let r = owner.post(&members, json!({ "email": "admin@example.com", "role": "ADMIN" })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    assert_eq!((&r.json["invited"], &r.json["role"]), (&json!(true), &json!("ADMIN")));
    let r = owner.post(&members, json!({ "email": "ghost@example.com" })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    join(&s, id, "admin@example.com", "ADMIN").await;
    let r = owner.post(&members, json!({ "email": "admin@example.com" })).await;
    assert_envelope(&r, 409, "CONFLICT");
    let r = owner.post(&members, json!({ "email": "member@example.com", "role": "KING" })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    // An ADMIN invites but cannot grant OWNER.
    let r = admin.post(&members, json!({ "email": "member@example.com", "role": "OWNER" })).await;
    assert_envelope(&r, 403, "FORBIDDEN");
    let r = admin.post(&members, json!({ "email": "member@example.com" })).await;
    assert_eq!(r.status, 202);
    assert_eq!(r.json["role"], "MEMBER");
    join(&s, id, "member@example.com", "MEMBER").await;

    // Any member lists; outsiders do not even learn the project exists.
    assert_eq!(member.get(&members).await.json.as_array().unwrap().len(), 3);
    assert_envelope(&outsider.get(&members).await, 404, "PROJECT_NOT_FOUND");
    // A MEMBER cannot manage members or keys.
    let r = member.post(&members, json!({ "email": "outsider@example.com" })).await;
    assert_envelope(&r, 403, "FORBIDDEN");
    // ... and learns that before any check of what it sent.
    assert_envelope(&member.post(&members, json!({ "role": "KING" })).await, 403, "FORBIDDEN");
    assert_envelope(&member.patch(&format!("{members}/{admin_id}"), json!({})).await, 403, "FORBIDDEN");
    let r = member.post(&format!("/users/@me/projects/{id}/regenerate-keys"), json!({})).await;
    assert_envelope(&r, 403, "FORBIDDEN");
    // An ADMIN cannot demote the OWNER; the last OWNER cannot step down or leave.
    let r = admin.patch(&format!("{members}/{owner_id}"), json!({ "role": "MEMBER" })).await;
    assert_envelope(&r, 403, "FORBIDDEN");
    let r = owner.patch(&format!("{members}/{owner_id}"), json!({ "role": "ADMIN" })).await;
    assert_envelope(&r, 409, "CONFLICT");
    assert_eq!(r.json["error"]["message"], "A project must keep at least one OWNER", "{}", r.json);
    let r = owner.delete(&format!("{members}/{owner_id}")).await;
    assert_envelope(&r, 409, "CONFLICT");
    assert_eq!(r.json["error"]["message"], "A project must keep at least one OWNER", "{}", r.json);
    // With a second OWNER the first may leave.
    let r = owner.patch(&format!("{members}/{admin_id}"), json!({ "role": "OWNER" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["role"], "OWNER");
    let r = owner.delete(&format!("{members}/{owner_id}")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_envelope(&owner.get(&members).await, 404, "PROJECT_NOT_FOUND");
    // A member may leave on their own.
    assert_eq!(member.delete(&format!("{members}/{member_id}")).await.status, 200);
    // Only an OWNER deletes the project.
    let r = admin.delete(&format!("/users/@me/projects/{id}")).await;
    assert_eq!(r.status, 200, "admin was promoted to OWNER: {}", r.json);
    s.stop().await;
}

#[tokio::test]
async fn an_address_registered_first_inherits_no_role_a_project_later_grants_it() {
    let s = Server::start().await;
    let (owner, p) = project(&s, "owner@example.com", "Team").await;
    let id = p["id"].as_str().unwrap();
    // The attacker registers the address of the future hire before the owner adds it.
    let attacker = s.client();
    let r = attacker.post("/auth/signup", json!({ "email": "hire@example.com", "password": "attacker-pass" })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    let r = attacker.post("/auth/login", json!({ "email": "hire@example.com", "password": "attacker-pass" })).await;
    assert_envelope(&r, 401, "UNAUTHORIZED");
    // The owner adds the address as ADMIN: an invitation, answered as for any address.
    let r =
        owner.post(&format!("/projects/{id}/members"), json!({ "email": "hire@example.com", "role": "ADMIN" })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    let ghost =
        owner.post(&format!("/projects/{id}/members"), json!({ "email": "ghost@example.com", "role": "ADMIN" })).await;
    let strip = |v: &serde_json::Value| {
        let mut v = v.clone();
        for k in ["email", "createdAt", "expiresAt"] {
            v.as_object_mut().unwrap().remove(k);
        }
        v
    };
    assert_eq!(strip(&r.json), strip(&ghost.json), "the answer does not tell whether an account exists");
    let list = owner.get(&format!("/projects/{id}/members")).await.json;
    assert_eq!(list.as_array().unwrap().len(), 1, "nobody joined: {list}");
    // Nor does an account that exists but whose address nobody verified join at once (accounts from
    // before sign-ups waited for their address).
    let mut squatter = unverified_user(&s, "early@example.com", None).await;
    let r =
        owner.post(&format!("/projects/{id}/members"), json!({ "email": "early@example.com", "role": "ADMIN" })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    assert_envelope(&squatter.get(&format!("/projects/{id}/members")).await, 404, "PROJECT_NOT_FOUND");
    squatter.project = Some(id.to_string());
    assert_envelope(&squatter.get("/contacts").await, 403, "FORBIDDEN");
    let r = squatter.post(&format!("/users/@me/projects/{id}/regenerate-keys"), json!({})).await;
    assert_envelope(&r, 404, "PROJECT_NOT_FOUND");
    s.stop().await;
}

#[tokio::test]
async fn an_admin_cannot_delete_a_project() {
    let s = Server::start().await;
    let (_owner, p) = project(&s, "owner@example.com", "Team").await;
    let id = p["id"].as_str().unwrap();
    let admin = signup(&s, "admin@example.com").await;
    join(&s, id, "admin@example.com", "ADMIN").await;
    assert_envelope(&admin.delete(&format!("/users/@me/projects/{id}")).await, 403, "FORBIDDEN");
    s.stop().await;
}
