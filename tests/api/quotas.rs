//! The operator's ceilings (docs/security.md#quotas): projects a user owns, a project's contacts,
//! workflows and segments, and a SCHEDULE tick's audience. Past one, what would add to it is 403
//! `QUOTA_EXCEEDED` naming it; what exists keeps working; other projects are not held to it.

use std::sync::Arc;

use herald_host::config::Config;
use herald_host::infra::clock::{Clock as _, ManualClock};
use serde_json::{Value, json};

use crate::harness::*;

fn config(set: impl FnOnce(&mut herald_host::config::Quotas)) -> Config {
    let mut c = Config::for_tests();
    set(&mut c.quotas);
    c
}

fn assert_quota(r: &Resp, quota: &str, limit: u64, setting: &str) {
    assert_envelope(r, 403, "QUOTA_EXCEEDED");
    let d = &r.json["error"]["details"];
    assert_eq!(
        (&d["quota"], &d["limit"], &d["setting"]),
        (&json!(quota), &json!(limit), &json!(setting)),
        "{}",
        r.json
    );
    assert!(r.json["error"]["message"].as_str().unwrap().contains(setting), "{}", r.json);
}

#[tokio::test]
async fn a_user_owns_at_most_so_many_projects() {
    let s = Server::start_with(config(|q| q.projects_per_user = 2), None).await;
    let owner = signup(&s, "many@example.com").await;
    for name in ["One", "Two"] {
        assert_eq!(owner.post("/users/@me/projects", json!({ "name": name })).await.status, 201);
    }
    let r = owner.post("/users/@me/projects", json!({ "name": "Three" })).await;
    assert_quota(&r, "projectsPerUser", 2, "HERALD_MAX_PROJECTS_PER_USER");
    // Another user is not held to the first one's count; the operator's command line is not held at all.
    let other = signup(&s, "other@example.com").await;
    assert_eq!(other.post("/users/@me/projects", json!({ "name": "Mine" })).await.status, 201);
    let cli =
        herald_host::services::accounts::create_project_for(&s.state, "Ops", Some("many@example.com"), None).await;
    assert!(cli.is_ok(), "{cli:?}");
    // The user owns three now (the operator's counts too): deleting one leaves two, still the most;
    // deleting another makes room.
    let list = owner.get("/users/@me/projects").await.json;
    let ids: Vec<String> = list.as_array().unwrap().iter().map(|p| p["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(owner.delete(&format!("/users/@me/projects/{}", ids[0])).await.status, 200);
    let r = owner.post("/users/@me/projects", json!({ "name": "Three" })).await;
    assert_quota(&r, "projectsPerUser", 2, "HERALD_MAX_PROJECTS_PER_USER");
    assert_eq!(owner.delete(&format!("/users/@me/projects/{}", ids[1])).await.status, 200);
    assert_eq!(owner.post("/users/@me/projects", json!({ "name": "Three" })).await.status, 201);
    s.stop().await;
}

#[tokio::test]
async fn a_project_has_at_most_so_many_workflows_and_segments() {
    let s = Server::start_with(
        config(|q| {
            q.workflows = 2;
            q.segments = 1;
        }),
        None,
    )
    .await;
    let p = proj(&s, "wf@example.com").await;
    let q = proj(&s, "wf2@example.com").await;
    let workflow = |c: &Client| {
        let c = c.clone();
        async move { c.post("/workflows", json!({ "name": "W", "eventName": "signup" })).await }
    };
    let first = workflow(&p.secret).await;
    assert_eq!(first.status, 201, "{}", first.json);
    assert_eq!(workflow(&p.secret).await.status, 201);
    assert_quota(&workflow(&p.secret).await, "workflows", 2, "HERALD_MAX_WORKFLOWS");
    assert_eq!(workflow(&q.secret).await.status, 201, "another project is not held to this one's count");
    let id = first.json["id"].as_str().unwrap();
    assert_eq!(p.secret.delete(&format!("/workflows/{id}")).await.status, 204);
    assert_eq!(workflow(&p.secret).await.status, 201, "a deleted one makes room");

    let segment = json!({ "name": "Static", "type": "STATIC" });
    assert_eq!(p.secret.post("/segments", segment.clone()).await.status, 201);
    assert_quota(&p.secret.post("/segments", segment.clone()).await, "segments", 1, "HERALD_MAX_SEGMENTS");
    assert_eq!(q.secret.post("/segments", segment).await.status, 201);
    s.stop().await;
}

#[tokio::test]
async fn a_project_at_its_contacts_ceiling_adds_none_by_any_path_and_keeps_using_the_ones_it_has() {
    let s = Server::start_with(config(|q| q.contacts = 3), None).await;
    let p = proj(&s, "c@example.com").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    for email in ["a@x.io", "b@x.io", "c@x.io"] {
        let r = p.secret.post("/v1/track", json!({ "email": email, "event": "seen" })).await;
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let limit = |r: &Resp| assert_quota(r, "contacts", 3, "HERALD_MAX_CONTACTS");
    limit(&p.secret.post("/v1/track", json!({ "email": "d@x.io", "event": "seen" })).await);
    limit(&p.public.post("/v1/track", json!({ "email": "d@x.io", "event": "seen" })).await);
    limit(&p.secret.post("/contacts", json!({ "email": "d@x.io" })).await);
    let send = json!({ "to": ["a@x.io", "d@x.io"], "from": "news@shop.test", "subject": "Hi", "body": "<p>Hi</p>" });
    limit(&p.secret.post("/v1/send", send).await);
    let seg = p.secret.post("/segments", json!({ "name": "S", "type": "STATIC" })).await;
    let members = format!("/segments/{}/members", seg.json["id"].as_str().unwrap());
    limit(&p.secret.post(&members, json!({ "emails": ["d@x.io"], "createMissing": true })).await);
    // The contacts it has keep working: tracked, updated, mailed, added to segments.
    assert_eq!(p.secret.post("/v1/track", json!({ "email": "a@x.io", "event": "seen" })).await.status, 200);
    assert_eq!(p.secret.post("/contacts", json!({ "email": "b@x.io", "data": { "plan": "pro" } })).await.status, 200);
    let send = json!({ "to": "c@x.io", "from": "news@shop.test", "subject": "Hi", "body": "<p>Hi</p>" });
    assert_eq!(p.secret.post("/v1/send", send).await.status, 200);
    assert_eq!(p.secret.post(&members, json!({ "emails": ["a@x.io"], "createMissing": true })).await.status, 200);
    // Another project is not held to this one's count.
    let q = proj(&s, "c2@example.com").await;
    assert_eq!(q.secret.post("/v1/track", json!({ "email": "d@x.io", "event": "seen" })).await.status, 200);
    let count = p.secret.get("/contacts").await.json;
    assert_eq!(count["total"].as_i64().or(count["count"].as_i64()), Some(3), "{count}");
    s.stop().await;
}

#[tokio::test]
async fn an_import_adds_contacts_up_to_the_ceiling_and_reports_the_rest_by_line() {
    let s = Server::start_with(config(|q| q.contacts = 3), None).await;
    let p = proj(&s, "imp@example.com").await;
    assert_eq!(p.secret.post("/v1/track", json!({ "email": "old@x.io", "event": "seen" })).await.status, 200);
    let csv = "email,plan\nold@x.io,gold\nn1@x.io,a\nn2@x.io,b\nn3@x.io,c\n";
    let boundary = "quota-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"c.csv\"\r\nContent-Type: text/csv\r\n\r\n"
    )
    .into_bytes();
    body.extend(csv.as_bytes());
    body.extend(format!("\r\n--{boundary}--\r\n").bytes());
    let r = p.secret.raw("POST", "/contacts/import", body, &format!("multipart/form-data; boundary={boundary}")).await;
    assert!(r.status == 200 || r.status == 202, "{}", r.json);
    let job = r.json["id"].as_str().or(r.json["jobId"].as_str()).unwrap().to_string();
    let mut result = Value::Null;
    for _ in 0..100 {
        result = p.secret.get(&format!("/contacts/import/{job}")).await.json;
        if result["state"] == "completed" || result["state"] == "failed" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(result["state"], "completed", "{result}");
    let res = &result["result"];
    assert_eq!((&res["created"], &res["updated"], &res["failed"]), (&json!(2), &json!(1), &json!(1)), "{result}");
    let errors = res["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{result}");
    assert_eq!((&errors[0]["line"], &errors[0]["email"]), (&json!(5), &json!("n3@x.io")), "{result}");
    assert!(errors[0]["reason"].as_str().unwrap().contains("HERALD_MAX_CONTACTS"), "{result}");
    s.stop().await;
}

#[tokio::test]
async fn a_schedule_tick_past_the_audience_ceiling_enrolls_nobody() {
    let mut config = config(|q| q.schedule_audience = 2);
    config.run_jobs = false;
    let clock = ManualClock::new(1_800_000_000_000);
    let s = Server::start_with(config, Some(clock.clone())).await;
    let p = proj(&s, "sch@example.com").await;
    for email in ["a@x.io", "b@x.io", "c@x.io"] {
        assert!(p.secret.post("/contacts", json!({ "email": email, "data": { "plan": "pro" } })).await.status < 300);
    }
    let (wf, _) = crate::workflow_kit::enabled_workflow(&p, "unused", true, &[("EXIT", json!({}))]).await;
    let pro = json!({ "groups": [{ "filters": [{ "field": "data.plan", "operator": "equals", "value": "pro" }] }] });
    let schedule = json!({ "cron": "0 9 * * *", "timezone": "UTC", "audience": { "condition": pro } });
    let r = p
        .secret
        .patch(&format!("/workflows/{wf}"), json!({ "triggerType": "SCHEDULE", "triggerConfig": schedule }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let run = async || {
        for _ in 0..50 {
            if s.worker.run_once(10).await.unwrap().is_empty() {
                return;
            }
        }
    };
    clock.advance(3_600_000);
    assert_eq!(s.state.workflows.fire_due(clock.now_ms()).await.unwrap(), 1);
    run().await;
    let runs = p.secret.get(&format!("/workflows/{wf}/executions")).await.json;
    assert_eq!(runs["data"], json!([]), "three contacts, two at most: nobody enrolled: {runs}");
    // Down to two, the next tick enrolls them.
    let c = p.secret.get("/contacts").await.json;
    let id = c["data"].as_array().or(c["contacts"].as_array()).unwrap()[0]["id"].as_str().unwrap().to_string();
    assert_eq!(p.secret.delete(&format!("/contacts/{id}")).await.status, 204);
    clock.advance(86_400_000);
    assert_eq!(s.state.workflows.fire_due(clock.now_ms()).await.unwrap(), 1);
    run().await;
    let runs = p.secret.get(&format!("/workflows/{wf}/executions")).await.json;
    assert_eq!(runs["data"].as_array().unwrap().len(), 2, "{runs}");
    s.stop().await;
}
