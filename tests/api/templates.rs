//! Templates (docs/behaviour.md#templates, and the sender check of docs/behaviour.md#errors).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::harness::*;

/// A project with a verified (trusted) sender domain `shop.test`.
async fn with_sender(s: &Server, email: &str) -> Proj {
    let p = proj(s, email).await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    p
}

fn tpl(name: &str) -> Value {
    json!({ "name": name, "subject": "Hello {{name ?? \"there\"}}", "body": "<p>Hi {{name}}</p>", "from": "news@shop.test" })
}

#[tokio::test]
async fn create_get_patch_delete() {
    let s = Server::start().await;
    let p = with_sender(&s, "o@example.com").await;
    let mut body = tpl("Welcome");
    body["description"] = json!("first mail");
    body["fromName"] = json!("Shop");
    body["replyTo"] = json!("Help@Shop.test");
    let r = p.secret.post("/templates", body).await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(r.json["type"], "MARKETING", "default type");
    assert_eq!(r.json["replyTo"], "help@shop.test");
    assert_eq!(r.json["fromName"], "Shop");
    assert_eq!(r.json["projectId"], p.id.as_str());
    let id = r.json["id"].as_str().unwrap().to_string();
    assert_eq!(p.secret.get(&format!("/templates/{id}")).await.json["name"], "Welcome");

    let r = p
        .secret
        .patch(&format!("/templates/{id}"), json!({ "type": "TRANSACTIONAL", "description": null, "subject": "New" }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["type"], "TRANSACTIONAL");
    assert_eq!(r.json["description"], Value::Null);
    assert_eq!(r.json["subject"], "New");
    assert_eq!(r.json["body"], "<p>Hi {{name}}</p>", "untouched fields stay");

    let r = p.secret.delete(&format!("/templates/{id}")).await;
    assert_eq!(r.status, 204);
    assert_envelope(&p.secret.get(&format!("/templates/{id}")).await, 404, "TEMPLATE_NOT_FOUND");
    assert_envelope(&p.secret.delete(&format!("/templates/{id}")).await, 404, "TEMPLATE_NOT_FOUND");
    s.stop().await;
}

#[tokio::test]
async fn validation_syntax_and_sender_checks() {
    let s = Server::start().await;
    let p = with_sender(&s, "o@example.com").await;
    // Missing from: a bare `{"error"}` 400 (docs/behaviour.md#errors).
    let r = p.secret.post("/templates", json!({ "name": "x", "subject": "s", "body": "b" })).await;
    assert_eq!(r.status, 400);
    assert!(r.json["error"].is_string(), "{}", r.json);
    let r = p.secret.post("/templates", json!({ "from": "news@shop.test" })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let fields: Vec<&str> =
        r.json["error"]["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert_eq!(fields, vec!["name", "subject", "body"]);
    let mut bad = tpl("x");
    bad["subject"] = json!("Hi\r\nBcc: evil@example.com");
    bad["type"] = json!("SPAM");
    bad["replyTo"] = json!("nope");
    let r = p.secret.post("/templates", bad).await;
    let codes: Vec<(&str, &str)> = r.json["error"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["field"].as_str().unwrap(), e["code"].as_str().unwrap()))
        .collect();
    assert!(codes.contains(&("subject", "invalid_string")), "{codes:?}");
    assert!(codes.contains(&("type", "invalid_enum_value")), "{codes:?}");
    assert!(codes.contains(&("replyTo", "invalid_string")), "{codes:?}");
    // A template that does not compile: 422 naming the line.
    let mut bad = tpl("x");
    bad["body"] = json!("<p>ok</p>\n<p>{{#if vip}}VIP</p>");
    let r = p.secret.post("/templates", bad).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "body");
    assert_eq!(r.json["error"]["errors"][0]["code"], "invalid_template");
    assert!(r.json["error"]["errors"][0]["message"].as_str().unwrap().contains("line"), "{}", r.json);
    let mut bad = tpl("x");
    bad["body"] = json!("{{> recursive}}");
    assert_envelope(&p.secret.post("/templates", bad).await, 422, "VALIDATION_ERROR");
    // Sender domains: unregistered, foreign, unverified.
    let q = proj(&s, "q@example.com").await;
    q.secret.post("/domains", json!({ "domain": "pending.test" })).await;
    let st = std::sync::Arc::clone(&s.state);
    st.domains.add(&st.store, &q.id, "foreign.test", true, st.clock.now_ms()).await.unwrap();
    for (from, reason) in [
        ("a@unknown.test", "DOMAIN_NOT_REGISTERED"),
        // Another project's pending domain says nothing; its verified one is foreign.
        ("a@pending.test", "DOMAIN_NOT_REGISTERED"),
        ("a@foreign.test", "DOMAIN_OF_OTHER_PROJECT"),
    ] {
        let mut b = tpl("x");
        b["from"] = json!(from);
        let r = p.secret.post("/templates", b).await;
        assert_eq!(r.status, 403, "{}", r.json);
        assert_eq!(r.json["error"]["code"], "INTERNAL_SERVER_ERROR");
        assert_eq!(r.json["error"]["details"]["reason"], reason);
    }
    let mut b = tpl("x");
    b["from"] = json!("a@pending.test");
    let r = q.secret.post("/templates", b).await;
    assert_eq!(r.json["error"]["details"]["reason"], "DOMAIN_NOT_VERIFIED");
    // Patching to a bad sender is refused too.
    let id = p.secret.post("/templates", tpl("ok")).await.json["id"].as_str().unwrap().to_string();
    let r = p.secret.patch(&format!("/templates/{id}"), json!({ "from": "a@unknown.test" })).await;
    assert_eq!(r.status, 403);
    s.stop().await;
}

#[tokio::test]
async fn listing_pages_filters_searches_and_sorts() {
    let s = Server::start_manual().await;
    let p = with_sender(&s, "o@example.com").await;
    for (i, (name, kind)) in [
        ("Welcome", "TRANSACTIONAL"),
        ("Receipt", "TRANSACTIONAL"),
        ("Newsletter May", "MARKETING"),
        ("Newsletter June", "MARKETING"),
        ("Ping", "HEADLESS"),
    ]
    .iter()
    .enumerate()
    {
        s.clock().advance(1000);
        let mut b = tpl(name);
        b["type"] = json!(kind);
        if i == 1 {
            b["description"] = json!("sent after a NEWSLETTER signup");
        }
        assert_eq!(p.secret.post("/templates", b).await.status, 201);
    }
    let r = p.secret.get("/templates?pageSize=2").await;
    assert_eq!(
        (r.json["total"].clone(), r.json["page"].clone(), r.json["pageSize"].clone(), r.json["totalPages"].clone()),
        (json!(5), json!(1), json!(2), json!(3))
    );
    assert_eq!(r.json["data"][0]["name"], "Ping", "newest first");
    let r = p.secret.get("/templates?pageSize=2&page=3").await;
    assert_eq!(r.json["data"].as_array().unwrap().len(), 1);
    assert_eq!(r.json["data"][0]["name"], "Welcome");
    let r = p.secret.get("/templates?page=9").await;
    assert_eq!(r.json["data"], json!([]));
    let r = p.secret.get("/templates?type=MARKETING").await;
    assert_eq!(r.json["total"], 2);
    let r = p.secret.get("/templates?search=newsletter&sort=name&dir=asc").await;
    let names: Vec<&str> = r.json["data"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["Newsletter June", "Newsletter May", "Receipt"], "search covers the description");
    let r = p.secret.get("/templates?sort=bogus&dir=bogus&pageSize=0&page=0").await;
    assert_eq!(r.json["pageSize"], 1, "pageSize minimum 1");
    assert_eq!(r.json["page"], 1);
    assert_eq!(r.json["data"][0]["name"], "Ping", "fallbacks: createdAt desc");
    assert_envelope(&p.secret.get("/templates?type=OTHER").await, 400, "BAD_REQUEST");
    assert_envelope(&p.secret.get("/templates?page=x").await, 400, "BAD_REQUEST");
    s.stop().await;
}

#[tokio::test]
async fn duplicate_usage_and_project_isolation() {
    let s = Server::start().await;
    let p = with_sender(&s, "o@example.com").await;
    let id = p.secret.post("/templates", tpl("Welcome")).await.json["id"].as_str().unwrap().to_string();
    let r = p.secret.post(&format!("/templates/{id}/duplicate"), json!({})).await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(r.json["name"], "Welcome (Copy)");
    assert_ne!(r.json["id"], id.as_str());
    assert_eq!(r.json["body"], "<p>Hi {{name}}</p>");
    assert_eq!(p.secret.get("/templates").await.json["total"], 2);
    let r = p.secret.get(&format!("/templates/{id}/usage")).await;
    assert_eq!(r.json, json!({ "campaigns": [], "workflowSteps": [], "emailsSent": 0 }));
    // Every recipient rendered from the template counts; another template's sends do not.
    let to = json!(["a@example.org", "b@example.org", "c@example.org"]);
    let send = |to: Value| p.secret.post("/v1/send", json!({ "to": to, "template": id, "subscribed": true }));
    assert_eq!(send(to).await.status, 200);
    assert_eq!(send(json!("a@example.org")).await.status, 200);
    let r = p.secret.get(&format!("/templates/{id}/usage")).await;
    assert_eq!(r.json["emailsSent"], 4, "{}", r.json);

    let q = proj(&s, "q@example.com").await;
    assert_envelope(&q.secret.get(&format!("/templates/{id}")).await, 404, "TEMPLATE_NOT_FOUND");
    assert_envelope(&q.secret.get(&format!("/templates/{id}/usage")).await, 404, "TEMPLATE_NOT_FOUND");
    assert_envelope(
        &q.secret.patch(&format!("/templates/{id}"), json!({ "name": "x" })).await,
        404,
        "TEMPLATE_NOT_FOUND",
    );
    assert_envelope(&q.secret.delete(&format!("/templates/{id}")).await, 404, "TEMPLATE_NOT_FOUND");
    assert_envelope(&q.secret.post(&format!("/templates/{id}/duplicate"), json!({})).await, 404, "TEMPLATE_NOT_FOUND");
    assert_eq!(q.secret.get("/templates").await.json["total"], 0);
    assert_envelope(&p.public.get("/templates").await, 401, "INVALID_API_KEY");
    s.stop().await;
}

#[tokio::test]
async fn preview_renders_as_a_send_would_and_names_the_line_of_an_error() {
    let s = Server::start().await;
    let p = proj(&s, "preview@x.test").await;
    // The session with the project header, as the dashboard calls it.
    let mut dash = p.session.clone();
    dash.project = Some(p.id.clone());
    let body = "<p>Hi {{name}}</p>\n<p>{{plan ?? \"free\"}}</p>";
    let r = dash
        .post(
            "/templates/preview",
            json!({ "subject": "Hello {{name}}", "body": body, "data": { "name": "<b>Ada</b>" } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    // Subjects render as text, bodies escape variables, defaults apply.
    assert_eq!(r.json["subject"], "Hello <b>Ada</b>");
    assert_eq!(r.json["body"], "<p>Hi &lt;b&gt;Ada&lt;/b&gt;</p>\n<p>free</p>");

    let r = dash.post("/templates/preview", json!({ "body": "<p>ok</p>\n<p>{{#if x}}unclosed</p>" })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let e = &r.json["error"]["errors"][0];
    assert_eq!(e["field"], "body");
    assert!(e["message"].as_str().unwrap().contains("line 2"), "{e}");

    let r = dash.post("/templates/preview", json!({ "body": "x", "data": [1] })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "data");
    let r = p.secret.post("/templates/preview", json!({ "subject": "" })).await;
    assert_eq!(r.json["error"]["errors"][0]["field"], "body", "{}", r.json);
    // The public key renders nothing.
    let r = p.public.post("/templates/preview", json!({ "body": "x" })).await;
    assert_eq!(r.status, 401, "{}", r.json);
}
