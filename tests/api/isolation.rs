//! Tenant isolation, generated from the OpenAPI document: every operation whose path takes an id (or a
//! name) of something a project owns, called with project A's value and project B's credentials,
//! answers 404 and changes nothing of A's. An operation the document adds without a value here fails
//! the test, so no new endpoint is left out.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::harness::*;
use crate::workflow_kit::contact;

/// Paths whose parameter is not something a project owns: public content-addressed files, provider
/// webhooks named by transport, sign-in providers.
const NOT_PROJECT_SCOPED: &[&str] = &[
    "/uploads/{name}",
    "/webhooks/notifications/{transport}",
    "/auth/oauth/{provider}",
    "/auth/oauth/{provider}/callback",
];

/// Paths whose parameter is a name in the caller's own project (a contact field, an event name), not an
/// id: B gets its own (empty) view of that name, never A's, and changes nothing of A's.
const NAMES: &[&str] = &[
    "/contacts/fields/{field}",
    "/contacts/fields/{field}/usage",
    "/contacts/fields/{field}/values",
    "/events/{event_name}",
    "/events/{event_name}/usage",
];

/// What A owns, read with A's key, to compare before and after B's calls.
async fn snapshot(a: &Proj, v: &BTreeMap<&str, String>) -> Vec<Value> {
    let mut paths = vec![
        format!("/contacts/{}", v["contact"]),
        format!("/templates/{}", v["template"]),
        format!("/segments/{}", v["segment"]),
        format!("/campaigns/{}", v["campaign"]),
        format!("/workflows/{}", v["workflow"]),
        format!("/workflows/{}/executions/{}", v["workflow"], v["execution"]),
        format!("/webhooks/{}", v["webhook"]),
        format!("/webhooks/{}/deliveries", v["webhook"]),
        format!("/domains/project/{}", a.id),
        "/suppressions".to_string(),
        format!("/events/contact/{}", v["contact"]),
        "/contacts/fields".to_string(),
        format!("/contacts/bulk/{}", v["bulk"]),
        format!("/contacts/import/{}", v["import"]),
    ];
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let r = a.secret.get(&p).await;
        assert_eq!(r.status, 200, "A reads its own {p}: {}", r.json);
        out.push(json!({ "path": p, "body": r.json }));
    }
    for p in [format!("/projects/{}/members", a.id), format!("/projects/{}/invitations", a.id), "/users/@me".into()] {
        let r = a.session.get(&p).await;
        assert_eq!(r.status, 200, "A reads its own {p}: {}", r.json);
        out.push(json!({ "path": p, "body": r.json }));
    }
    let r = a.session.get(&format!("/users/@me/projects/{}/billing-limits", a.id)).await;
    out.push(json!({ "path": "billing-limits", "body": r.json }));
    out
}

#[tokio::test]
async fn every_operation_on_an_id_of_another_project_answers_404_and_changes_nothing() {
    let s = Server::start_stepped().await;
    let a = proj(&s, "a@example.com").await;
    let b = proj(&s, "b@example.com").await;
    let st = std::sync::Arc::clone(&s.state);

    // One of everything A can own.
    let mut v: BTreeMap<&str, String> = BTreeMap::new();
    let d = st.domains.add(&st.store, &a.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    v.insert("domain", d.id);
    v.insert("contact", contact(&a, "ann@example.org", true, json!({ "onlyInA": "x" })).await);
    let r = a.secret.post("/v1/track", json!({ "email": "ann@example.org", "event": "only-in-a" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let r = a
        .secret
        .post("/templates", json!({ "name": "T", "type": "TRANSACTIONAL", "subject": "S", "body": "<p>B</p>", "from": "news@shop.test" }))
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    v.insert("template", id_of(&r));
    let r = a.secret.post("/segments", json!({ "name": "VIP", "type": "STATIC" })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    v.insert("segment", id_of(&r));
    let r = a.secret.post("/campaigns", crate::campaigns::campaign("C")).await;
    assert_eq!(r.status, 201, "{}", r.json);
    v.insert("campaign", id_of(&r));
    let r = a.secret.post("/workflows", json!({ "name": "W", "eventName": "only-in-a" })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let wf = id_of(&r);
    let trigger = r.json["steps"][0]["id"].as_str().or(r.json["data"]["steps"][0]["id"].as_str()).unwrap().to_string();
    let r = a
        .secret
        .post(
            &format!("/workflows/{wf}/steps"),
            json!({ "type": "DELAY", "name": "d", "config": { "amount": 1, "unit": "hours" } }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    let step = id_of(&r);
    // A new step is linked after the last one: that link is the transition.
    let r = a.secret.get(&format!("/workflows/{wf}")).await;
    let links =
        r.json["transitions"].as_array().or(r.json["data"]["transitions"].as_array()).cloned().unwrap_or_default();
    let link = links.iter().find(|l| l["fromStepId"] == trigger.as_str()).unwrap_or_else(|| panic!("{}", r.json));
    v.insert("transition", link["id"].as_str().unwrap().into());
    assert_eq!(a.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await.status, 200);
    let r = a.secret.post(&format!("/workflows/{wf}/executions"), json!({ "contactId": v["contact"] })).await;
    assert!(r.status == 200 || r.status == 201, "{}", r.json);
    v.insert("execution", id_of(&r));
    v.insert("workflow", wf);
    v.insert("step", step);
    let r = a.secret.post("/webhooks", json!({ "url": "https://hooks.example.org/in", "events": ["*"] })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let hook = id_of(&r);
    let r = a.secret.post(&format!("/webhooks/{hook}/test"), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    v.insert("delivery", id_of(&r));
    v.insert("webhook", hook);
    assert_eq!(a.secret.post("/suppressions", json!({ "email": "gone@example.org" })).await.status, 201);
    let r = a.secret.post("/contacts/bulk-unsubscribe", json!({ "contactIds": [v["contact"]] })).await;
    assert_eq!(r.status, 202, "{}", r.json);
    v.insert("bulk", id_of(&r));
    let r = a.secret.post("/contacts/import", json!({ "csv": "email\nzed@example.org\n" })).await;
    let import = match r.status {
        202 => id_of(&r),
        _ => {
            let body = b"--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"c.csv\"\r\nContent-Type: text/csv\r\n\r\nemail\nzed@example.org\n\r\n--x--\r\n".to_vec();
            let r = a.secret.raw("POST", "/contacts/import", body, "multipart/form-data; boundary=x").await;
            assert_eq!(r.status, 202, "{}", r.json);
            id_of(&r)
        }
    };
    v.insert("import", import);
    let r = a.session.post(&format!("/projects/{}/members", a.id), json!({ "email": "invitee@example.org" })).await;
    assert!(r.status == 201 || r.status == 202, "{}", r.json);
    let me = a.session.get("/users/@me").await;
    v.insert("user", id_of(&me));

    // The value of each path parameter, by the path it is in.
    let value = |path: &str, param: &str| -> Option<String> {
        let resource = path.trim_start_matches('/').split('/').next().unwrap_or("");
        Some(match (resource, param) {
            ("campaigns", "id") => v["campaign"].clone(),
            ("contacts", "id") | (_, "contact_id") => v["contact"].clone(),
            ("contacts", "job_id") if path.contains("/bulk/") => v["bulk"].clone(),
            ("contacts", "job_id") => v["import"].clone(),
            ("contacts", "field") => "onlyInA".into(),
            ("domains", "id") => v["domain"].clone(),
            (_, "project_id") => a.id.clone(),
            ("events", "event_name") => "only-in-a".into(),
            ("projects", "id") | ("users", "id") => a.id.clone(),
            ("projects", "user_id") => v["user"].clone(),
            ("projects", "email") => "invitee@example.org".into(),
            ("segments", "id") => v["segment"].clone(),
            ("suppressions", "value") => "gone@example.org".into(),
            ("templates", "id") => v["template"].clone(),
            ("webhooks", "id") => v["webhook"].clone(),
            ("webhooks", "delivery") => v["delivery"].clone(),
            ("workflows", "id") => v["workflow"].clone(),
            ("workflows", "execution_id") => v["execution"].clone(),
            ("workflows", "step_id") => v["step"].clone(),
            ("workflows", "transition_id") => v["transition"].clone(),
            _ => return None,
        })
    };

    let before = snapshot(&a, &v).await;
    let doc = s.client().get("/openapi.json").await.json;
    let mut called = 0;
    let mut wrong = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        if !path.contains('{') || NOT_PROJECT_SCOPED.contains(&path.as_str()) {
            continue;
        }
        let mut concrete = String::new();
        for part in path.split('/').skip(1) {
            concrete.push('/');
            match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                Some(param) => {
                    let value = value(path, param).unwrap_or_else(|| panic!("no value of A for {{{param}}} in {path}"));
                    concrete.push_str(&urlencode(&value));
                }
                None => concrete.push_str(part),
            }
        }
        // Session routes are called with B's session; the rest with B's secret key.
        let session = path.starts_with("/users/") || path.starts_with("/projects/");
        let client = if session { &b.session } else { &b.secret };
        for method in ["get", "post", "put", "patch", "delete"] {
            if ops.get(method).is_none() {
                continue;
            }
            // A body that passes validation, so the refusal is about the id, not the body.
            let body = match (method, path.as_str()) {
                ("get" | "delete", _) => None,
                (_, "/campaigns/{id}/test") => Some(json!({ "email": "b-tester@example.org" })),
                (_, "/workflows/{id}/executions") => Some(json!({ "contactId": v["contact"] })),
                (_, "/workflows/{id}/steps") => {
                    Some(json!({ "type": "DELAY", "name": "x", "config": { "amount": 1, "unit": "hours" } }))
                }
                (_, "/workflows/{id}/transitions") => Some(json!({ "fromStepId": v["step"], "toStepId": v["step"] })),
                _ => Some(json!({})),
            };
            let r = client.send(&method.to_uppercase(), &concrete, body).await;
            called += 1;
            let leaked = r.json.to_string().contains(&v["contact"]) || r.json.to_string().contains("ann@example.org");
            let fine = if NAMES.contains(&path.as_str()) { r.status == 200 && !leaked } else { r.status == 404 };
            if !fine {
                wrong.push(format!("{} {path} -> {} {}", method.to_uppercase(), r.status, r.json));
            }
        }
    }
    assert!(wrong.is_empty(), "B reached A's data:\n{}", wrong.join("\n"));
    assert!(called >= 60, "only {called} operations were called");
    let after = snapshot(&a, &v).await;
    assert_eq!(before, after, "B's calls changed what A owns");
    // B's own key still works (the calls were refused for A's ids, not for B).
    assert_eq!(b.secret.get("/contacts").await.status, 200);
    s.stop().await;
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (c as char).to_string(),
            _ => format!("%{c:02X}"),
        })
        .collect()
}

/// The id a creating call answered (bare, or in `data`; `jobId` for jobs).
fn id_of(r: &Resp) -> String {
    let j = &r.json;
    [&j["id"], &j["data"]["id"], &j["jobId"], &j["data"]["jobId"], &j["user"]["id"]]
        .iter()
        .find_map(|v| v.as_str())
        .unwrap_or_else(|| panic!("no id in {j}"))
        .to_string()
}
