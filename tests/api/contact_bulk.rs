//! Bulk changes of contacts (docs/behaviour.md#bulk-changes-and-import): subscribe, unsubscribe and
//! delete by id as a job, its status, the limits, and project isolation.

use serde_json::{Value, json};

use crate::harness::{Proj, Server, assert_envelope, proj};
use crate::workflow_kit::contact;

async fn queue(p: &Proj, op: &str, ids: &[&str]) -> String {
    let r = p.secret.post(&format!("/contacts/{op}"), json!({ "contactIds": ids })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    r.json["jobId"].as_str().unwrap().to_string()
}

async fn job(p: &Proj, id: &str) -> Value {
    let r = p.secret.get(&format!("/contacts/bulk/{id}")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json
}

async fn subscribed(p: &Proj, id: &str) -> bool {
    p.secret.get(&format!("/contacts/{id}")).await.json["subscribed"].as_bool().unwrap()
}

async fn event_names(p: &Proj, contact: &str) -> Vec<String> {
    let r = p.secret.get(&format!("/events/contact/{contact}?limit=100")).await;
    r.json["data"].as_array().into_iter().flatten().map(|e| e["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn bulk_unsubscribe_and_subscribe_change_what_differs_and_record_each_flip() {
    let s = Server::start_stepped().await;
    let (p, q) = (proj(&s, "bulk-a@example.com").await, proj(&s, "bulk-b@example.com").await);
    let a1 = contact(&p, "a1@example.com", true, json!({})).await;
    let a2 = contact(&p, "a2@example.com", true, json!({})).await;
    let a3 = contact(&p, "a3@example.com", false, json!({})).await;
    let b1 = contact(&q, "b1@example.com", true, json!({})).await;

    // A duplicate counts once; another project's contact and an unknown id count as not found.
    let id = queue(&p, "bulk-unsubscribe", &[&a1, &a2, &a3, &b1, "no-such-contact", &a1]).await;
    let queued = job(&p, &id).await;
    assert_eq!(queued["state"], "queued");
    assert_eq!(queued["kind"], "bulk-unsubscribe");
    assert_eq!(queued["progress"], json!({ "done": 0, "total": 5, "percent": 0 }));
    assert_eq!(queued["result"], json!({ "updated": 0, "unchanged": 0, "notFound": 0 }));
    assert!(queued["finishedAt"].is_null());
    assert_envelope(&q.secret.get(&format!("/contacts/bulk/{id}")).await, 404, "JOB_NOT_FOUND");

    crate::workflow_kit::drain(&s).await;
    let done = job(&p, &id).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["progress"], json!({ "done": 5, "total": 5, "percent": 100 }));
    assert_eq!(done["result"], json!({ "updated": 2, "unchanged": 1, "notFound": 2 }));
    assert!(done["finishedAt"].is_string() && done["error"].is_null(), "{done}");
    assert!(!subscribed(&p, &a1).await && !subscribed(&p, &a2).await && !subscribed(&p, &a3).await);
    assert!(subscribed(&q, &b1).await, "another project's contact is never touched");
    let unsubscribed = |names: Vec<String>| names.iter().filter(|n| *n == "contact.unsubscribed").count();
    assert_eq!(unsubscribed(event_names(&p, &a1).await), 1, "one event per real flip");
    assert_eq!(unsubscribed(event_names(&p, &a3).await), 0, "no event for an unchanged contact");
    assert!(event_names(&q, &b1).await.is_empty());

    let id = queue(&p, "bulk-subscribe", &[&a3, &a1]).await;
    crate::workflow_kit::drain(&s).await;
    assert_eq!(job(&p, &id).await["result"], json!({ "updated": 2, "unchanged": 0, "notFound": 0 }));
    assert!(subscribed(&p, &a3).await && subscribed(&p, &a1).await);
    assert!(event_names(&p, &a3).await.contains(&"contact.subscribed".to_string()));
}

#[tokio::test]
async fn bulk_delete_removes_the_projects_contacts_with_their_events_and_nothing_else() {
    let s = Server::start_stepped().await;
    let (p, q) = (proj(&s, "bulkdel-a@example.com").await, proj(&s, "bulkdel-b@example.com").await);
    for (pr, email) in [(&p, "gone@example.com"), (&p, "kept@example.com"), (&q, "other@example.com")] {
        let r = pr.secret.post("/v1/track", json!({ "email": email, "event": "visited" })).await;
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let id_of = |pr: &Proj, email: &'static str| {
        let c = pr.secret.clone();
        async move { c.get(&format!("/contacts?search={email}")).await.json["data"][0]["id"].as_str().unwrap().to_string() }
    };
    let (gone, kept, other) = (
        id_of(&p, "gone@example.com").await,
        id_of(&p, "kept@example.com").await,
        id_of(&q, "other@example.com").await,
    );
    let id = queue(&p, "bulk-delete", &[&gone, &other]).await;
    assert_eq!(job(&p, &id).await["result"], json!({ "deleted": 0, "notFound": 0 }));
    crate::workflow_kit::drain(&s).await;
    let done = job(&p, &id).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["result"], json!({ "deleted": 1, "notFound": 1 }));
    assert_envelope(&p.secret.get(&format!("/contacts/{gone}")).await, 404, "CONTACT_NOT_FOUND");
    assert!(event_names(&p, &gone).await.is_empty(), "the contact's events went with it");
    assert_eq!(p.secret.get(&format!("/contacts/{kept}")).await.status, 200);
    assert_eq!(event_names(&p, &kept).await, ["visited"]);
    assert_eq!(q.secret.get(&format!("/contacts/{other}")).await.status, 200, "another project's contact stays");
    assert_eq!(event_names(&q, &other).await, ["visited"]);
}

#[tokio::test]
async fn bulk_requests_are_checked_and_jobs_are_found_only_in_their_project() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "bulklimits@example.com").await;
    let field_of = |r: &crate::harness::Resp| r.json["error"]["errors"][0]["field"].as_str().unwrap_or("").to_string();
    for op in ["bulk-subscribe", "bulk-unsubscribe", "bulk-delete"] {
        let path = format!("/contacts/{op}");
        let empty = p.secret.post(&path, json!({ "contactIds": [] })).await;
        assert_envelope(&empty, 422, "VALIDATION_ERROR");
        assert_eq!(field_of(&empty), "contactIds");
        let many: Vec<String> = (0..1001).map(|i| format!("c{i}")).collect();
        let too_many = p.secret.post(&path, json!({ "contactIds": many })).await;
        assert_envelope(&too_many, 422, "VALIDATION_ERROR");
        assert_eq!(field_of(&too_many), "contactIds");
        let missing = p.secret.post(&path, json!({})).await;
        assert_envelope(&missing, 422, "VALIDATION_ERROR");
        let wrong = p.secret.post(&path, json!({ "contactIds": "c1" })).await;
        assert_envelope(&wrong, 422, "VALIDATION_ERROR");
        let not_string = p.secret.post(&path, json!({ "contactIds": ["c1", 7] })).await;
        assert_envelope(&not_string, 422, "VALIDATION_ERROR");
        assert_eq!(field_of(&not_string), "contactIds.1");
        let long = p.secret.post(&path, json!({ "contactIds": ["x".repeat(65)] })).await;
        assert_envelope(&long, 422, "VALIDATION_ERROR");
        // The public key cannot change contacts.
        assert_eq!(p.public.post(&path, json!({ "contactIds": ["c1"] })).await.status, 401);
    }
    let thousand: Vec<String> = (0..1000).map(|i| format!("c{i}")).collect();
    let r = p.secret.post("/contacts/bulk-delete", json!({ "contactIds": thousand })).await;
    assert_eq!(r.status, 202, "1,000 ids are taken: {}", r.json);
    assert_envelope(&p.secret.get("/contacts/bulk/no-such-job").await, 404, "JOB_NOT_FOUND");
}
