//! Contacts (docs/behaviour.md#contacts-and-data, docs/behaviour.md#pagination).

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::harness::*;

#[tokio::test]
async fn upsert_creates_with_201_then_updates_with_200_and_meta() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let r = p.secret.post("/contacts", json!({ "email": "  Jane@Example.com ", "data": { "plan": "free" } })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(r.json["email"], "jane@example.com");
    assert_eq!(r.json["subscribed"], true, "new contacts default to subscribed on POST /contacts");
    assert_eq!(r.json["_meta"], json!({ "isNew": true, "isUpdate": false }));
    assert_eq!(r.json["data"], json!({ "plan": "free" }));
    assert!(r.json["createdAt"].as_str().unwrap().ends_with('Z'));
    let id = r.json["id"].as_str().unwrap().to_string();

    let r = p.secret.post("/contacts", json!({ "email": "JANE@example.com", "data": { "seats": 3 } })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["_meta"], json!({ "isNew": false, "isUpdate": true }));
    assert_eq!(r.json["id"], id.as_str(), "one contact per email");
    assert_eq!(r.json["data"], json!({ "plan": "free", "seats": 3 }));

    let r = p.secret.get(&format!("/contacts/{id}")).await;
    assert_eq!(r.status, 200);
    assert!(r.json.get("_meta").is_none(), "_meta only in the POST response");
    s.stop().await;
}

#[tokio::test]
async fn upsert_validation() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let r = p.secret.post("/contacts", json!({ "data": {} })).await;
    assert_eq!(r.status, 400);
    assert!(r.json["error"].is_string(), "missing email is a bare error: {}", r.json);
    assert!(r.json.get("success").is_none());
    let r = p.secret.post("/contacts", json!({ "email": "nope", "subscribed": "yes", "data": [1] })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let fields: Vec<&str> =
        r.json["error"]["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    assert_eq!(fields, vec!["email", "subscribed", "data"]);
    let big = "x".repeat(70 * 1024);
    let r = p.secret.post("/contacts", json!({ "email": "a@example.com", "data": { "big": big } })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["code"], "too_big");
    s.stop().await;
}

#[tokio::test]
async fn data_rules_null_deletes_empty_ignored_reserved_filtered() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let r = p
        .secret
        .post("/contacts", json!({ "email": "a@example.com", "data": { "a": 1, "b": "two", "c": { "nested": true } } }))
        .await;
    let id = r.json["id"].as_str().unwrap().to_string();
    let r = p
        .secret
        .patch(
            &format!("/contacts/{id}"),
            json!({ "data": { "a": null, "b": "", "id": "x", "email": "x@example.com", "unsubscribeUrl": "u", "plunk_id": 1, "d": false } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["data"], json!({ "b": "two", "c": { "nested": true }, "d": false }));
    assert_eq!(r.json["email"], "a@example.com", "data.email never changes the address");
    s.stop().await;
}

#[tokio::test]
async fn get_patch_delete_and_not_found() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    assert_envelope(&p.secret.get("/contacts/missing-id").await, 404, "CONTACT_NOT_FOUND");
    assert_envelope(&p.secret.patch("/contacts/missing-id", json!({})).await, 404, "CONTACT_NOT_FOUND");
    assert_envelope(&p.secret.delete("/contacts/missing-id").await, 404, "CONTACT_NOT_FOUND");
    let a =
        p.secret.post("/contacts", json!({ "email": "a@example.com" })).await.json["id"].as_str().unwrap().to_string();
    p.secret.post("/contacts", json!({ "email": "b@example.com" })).await;
    let r = p.secret.patch(&format!("/contacts/{a}"), json!({ "email": "B@example.com" })).await;
    assert_envelope(&r, 409, "CONFLICT");
    let r = p.secret.patch(&format!("/contacts/{a}"), json!({ "email": "c@example.com" })).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json["email"], "c@example.com");
    let r = p.secret.patch(&format!("/contacts/{a}"), json!({ "email": "bad" })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let r = p.secret.delete(&format!("/contacts/{a}")).await;
    assert_eq!(r.status, 204);
    assert_eq!(r.json, Value::String(String::new()), "empty body");
    assert_envelope(&p.secret.get(&format!("/contacts/{a}")).await, 404, "CONTACT_NOT_FOUND");
    s.stop().await;
}

async fn event_names(c: &Client, contact: &str) -> Vec<String> {
    let r = c.get(&format!("/events/contact/{contact}?limit=100")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["data"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn subscription_flips_on_patch_emit_events_only_when_the_state_changes() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let id =
        p.secret.post("/contacts", json!({ "email": "a@example.com" })).await.json["id"].as_str().unwrap().to_string();
    let path = format!("/contacts/{id}");
    assert_eq!(p.secret.patch(&path, json!({ "subscribed": true })).await.json["subscribed"], true);
    assert!(event_names(&p.secret, &id).await.is_empty(), "no flip, no event");
    assert_eq!(p.secret.patch(&path, json!({ "subscribed": false })).await.json["subscribed"], false);
    assert_eq!(event_names(&p.secret, &id).await, vec!["contact.unsubscribed"]);
    p.secret.patch(&path, json!({ "subscribed": false })).await;
    assert_eq!(event_names(&p.secret, &id).await.len(), 1);
    p.secret.patch(&path, json!({ "subscribed": true })).await;
    assert_eq!(event_names(&p.secret, &id).await, vec!["contact.subscribed", "contact.unsubscribed"]);
    // POST /contacts on an existing contact: omitted keeps the state, explicit flips.
    p.secret.post("/contacts", json!({ "email": "a@example.com", "subscribed": false })).await;
    let r = p.secret.post("/contacts", json!({ "email": "a@example.com" })).await;
    assert_eq!(r.json["subscribed"], false);
    assert_eq!(event_names(&p.secret, &id).await[0], "contact.unsubscribed");
    let r = p.secret.get("/events?name=contact.unsubscribed").await;
    assert_eq!(r.json["data"][0]["source"], "system");
    s.stop().await;
}

#[tokio::test]
async fn lookup_echoes_the_callers_strings() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    p.secret.post("/contacts", json!({ "email": "a@example.com" })).await;
    let r = p.secret.post("/contacts/lookup", json!({ "emails": [" A@Example.com", "b@example.com"] })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json, json!({ "found": [" A@Example.com"], "notFound": ["b@example.com"] }));
    let many: Vec<String> = (0..501).map(|i| format!("u{i}@example.com")).collect();
    assert_envelope(&p.secret.post("/contacts/lookup", json!({ "emails": many })).await, 422, "VALIDATION_ERROR");
    assert_envelope(&p.secret.post("/contacts/lookup", json!({ "emails": "a" })).await, 422, "VALIDATION_ERROR");
    let r = p.secret.post("/contacts/lookup", json!({ "emails": ["a@example.com", 7] })).await;
    assert_eq!(r.json["error"]["errors"][0]["field"], "emails.1");
    s.stop().await;
}

#[tokio::test]
async fn custom_fields_types_coverage_values_usage_and_delete() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    p.secret.post("/contacts", json!({ "email": "a@example.com", "data": { "plan": "pro", "seats": 3, "since": "2024-01-02T03:04:05.000Z" } })).await;
    p.secret.post("/contacts", json!({ "email": "b@example.com", "data": { "plan": "free", "vip": true, "birthday": "2026-01-15", "code": "2026-13-45" } })).await;
    p.secret
        .post("/contacts", json!({ "email": "c@example.com", "data": { "plan": "pro", "meta": { "x": 1 } } }))
        .await;
    p.secret.post("/contacts", json!({ "email": "d@example.com" })).await;
    let r = p.secret.get("/contacts/fields").await;
    assert_eq!(r.status, 200, "{}", r.json);
    let fields = r.json["fields"].as_array().unwrap();
    let f = |name: &str| fields.iter().find(|f| f["field"] == name).cloned().unwrap_or(Value::Null);
    assert_eq!(f("email"), json!({ "field": "email", "type": "string", "coverage": 100.0 }));
    assert_eq!(f("subscribed")["type"], "boolean");
    assert_eq!(f("createdAt")["type"], "date");
    assert_eq!(f("data.plan"), json!({ "field": "data.plan", "type": "string", "coverage": 75.0 }));
    assert_eq!(f("data.seats")["type"], "number");
    assert_eq!(f("data.seats")["coverage"], 25.0);
    assert_eq!(f("data.since")["type"], "date");
    assert_eq!(f("data.vip")["type"], "boolean");
    assert_eq!(f("data.birthday")["type"], "date", "a date without a time is a date too");
    assert_eq!(f("data.code")["type"], "string", "but not a string shaped like one");
    assert_eq!(f("data.meta")["type"], "object");
    assert_eq!(r.json["count"], 11);

    let r = p.secret.get("/contacts/fields/plan/values").await;
    assert_eq!(r.status, 200, "{}", r.json);
    let mut values: Vec<String> =
        r.json["values"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
    values.sort();
    assert_eq!(values, vec!["free", "pro"]);
    assert_eq!(r.json["count"], 2);
    assert_eq!(r.json["field"], "data.plan");

    let r = p.secret.get("/contacts/fields/data.plan/usage").await;
    assert_eq!(
        r.json,
        json!({ "field": "data.plan", "usedInSegments": [], "usedInCampaigns": [], "usedInWorkflows": [], "contactCount": 3, "canDelete": true })
    );
    let r = p.secret.delete("/contacts/fields/plan").await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["contactsUpdated"], 3);
    let r = p.secret.get("/contacts/fields").await;
    assert!(r.json["fields"].as_array().unwrap().iter().all(|f| f["field"] != "data.plan"));
    let r = p.secret.get("/contacts?search=a@").await;
    assert_eq!(r.json["data"][0]["data"], json!({ "seats": 3, "since": "2024-01-02T03:04:05.000Z" }));
    assert_envelope(&p.secret.delete("/contacts/fields/email").await, 400, "BAD_REQUEST");
    s.stop().await;
}

async fn all_pages(c: &Client, query: &str, limit: usize) -> (Vec<String>, i64) {
    let mut ids = Vec::new();
    let mut cursor = String::new();
    let mut first_total = -1;
    loop {
        let sep = if query.is_empty() { "?" } else { "&" };
        let q = if cursor.is_empty() {
            format!("/contacts{query}{sep}limit={limit}")
        } else {
            format!("/contacts{query}{sep}limit={limit}&cursor={cursor}")
        };
        let r = c.get(&q).await;
        assert_eq!(r.status, 200, "{}", r.json);
        if first_total < 0 {
            first_total = r.json["total"].as_i64().unwrap();
        } else {
            assert_eq!(r.json["total"], 0, "total only on the first page");
        }
        for item in r.json["data"].as_array().unwrap() {
            ids.push(item["email"].as_str().unwrap().to_string());
        }
        if !r.json["hasMore"].as_bool().unwrap() {
            assert_eq!(r.json["cursor"], "");
            break;
        }
        cursor = r.json["cursor"].as_str().unwrap().to_string();
    }
    (ids, first_total)
}

#[tokio::test]
async fn listing_filters_sorts_and_pages() {
    let s = Server::start_manual().await;
    let p = proj(&s, "o@example.com").await;
    for i in 0..25 {
        s.clock().advance(1000);
        let sub = i % 5 != 0;
        p.secret.post("/contacts", json!({ "email": format!("user{i:02}@Example.com"), "subscribed": sub })).await;
    }
    let (emails, total) = all_pages(&p.secret, "", 7).await;
    assert_eq!(total, 25);
    assert_eq!(emails.len(), 25);
    assert_eq!(emails[0], "user24@example.com", "default: createdAt desc");
    let (emails, _) = all_pages(&p.secret, "?sort=email&dir=asc", 10).await;
    let mut sorted = emails.clone();
    sorted.sort();
    assert_eq!(emails, sorted);
    let (emails, _) = all_pages(&p.secret, "?sort=bogus&dir=sideways", 10).await;
    assert_eq!(emails[0], "user24@example.com", "unrecognised sort and dir fall back");
    let (emails, total) = all_pages(&p.secret, "?subscribed=false", 2).await;
    assert_eq!(total, 5);
    assert_eq!(
        emails,
        vec![
            "user20@example.com",
            "user15@example.com",
            "user10@example.com",
            "user05@example.com",
            "user00@example.com"
        ]
    );
    let (emails, total) = all_pages(&p.secret, "?search=USER1", 100).await;
    assert_eq!(total, 10);
    assert!(emails.iter().all(|e| e.starts_with("user1")));

    let r = p.secret.get("/contacts?limit=1000").await;
    assert_eq!(r.json["data"].as_array().unwrap().len(), 25, "clamped to 100, 25 exist");
    let r = p.secret.get("/contacts?limit=0").await;
    assert_eq!(r.json["data"].as_array().unwrap().len(), 1, "clamped to 1");
    let r = p.secret.get("/contacts").await;
    assert_eq!(r.json["data"].as_array().unwrap().len(), 20, "default limit");
    assert_envelope(&p.secret.get("/contacts?limit=abc").await, 400, "BAD_REQUEST");
    assert_envelope(&p.secret.get("/contacts?cursor=!!!").await, 400, "BAD_REQUEST");
    assert_envelope(&p.secret.get("/contacts?subscribed=maybe").await, 400, "BAD_REQUEST");
    s.stop().await;
}

#[tokio::test]
async fn pagination_is_stable_under_concurrent_inserts_and_deletes() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    for i in 0..60 {
        p.secret.post("/contacts", json!({ "email": format!("orig{i}@example.com") })).await;
    }
    for (sort, n) in [("", 0), ("?sort=email&dir=asc", 1), ("?sort=email", 2)] {
        let writer = {
            let c = p.secret.clone();
            tokio::spawn(async move {
                for i in 0..40 {
                    c.post("/contacts", json!({ "email": format!("new{n}-{i}@example.com") })).await;
                }
            })
        };
        let mut seen = Vec::new();
        let mut cursor = String::new();
        let sep = if sort.is_empty() { "?" } else { "&" };
        loop {
            let q = format!(
                "/contacts{sort}{sep}limit=9{}",
                if cursor.is_empty() { String::new() } else { format!("&cursor={cursor}") }
            );
            let r = p.secret.get(&q).await;
            seen.extend(r.json["data"].as_array().unwrap().iter().map(|c| c["email"].as_str().unwrap().to_string()));
            if !r.json["hasMore"].as_bool().unwrap() {
                break;
            }
            cursor = r.json["cursor"].as_str().unwrap().to_string();
            tokio::task::yield_now().await;
        }
        writer.await.unwrap();
        let unique: HashSet<&String> = seen.iter().collect();
        assert_eq!(unique.len(), seen.len(), "no duplicates ({sort})");
        for i in 0..60 {
            assert!(unique.contains(&format!("orig{i}@example.com")), "no gaps: orig{i} missing ({sort})");
        }
    }
    s.stop().await;
}

#[tokio::test]
async fn concurrent_upserts_of_one_email_make_one_contact() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let mut tasks = Vec::new();
    for i in 0..12 {
        let c = p.secret.clone();
        tasks.push(tokio::spawn(async move {
            c.post("/contacts", json!({ "email": "same@example.com", "data": { format!("k{i}"): i } })).await
        }));
    }
    let mut ids = HashSet::new();
    let mut created = 0;
    for t in tasks {
        let r = t.await.unwrap();
        assert!(r.status == 200 || r.status == 201, "{}", r.json);
        if r.status == 201 {
            created += 1;
        }
        ids.insert(r.json["id"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len(), 1);
    assert_eq!(created, 1, "exactly one request created it");
    let r = p.secret.get("/contacts").await;
    assert_eq!(r.json["total"], 1);
    assert_eq!(r.json["data"][0]["data"].as_object().unwrap().len(), 12, "no update was lost");
    s.stop().await;
}
