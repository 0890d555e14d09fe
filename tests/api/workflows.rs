//! Workflows as the user edits them (docs/behaviour.md#workflows): the workflow and its trigger, steps
//! with their config checks, transitions under the graph rules, deleting steps, project isolation.

use std::sync::Arc;

use herald_host::config::Config;
use serde_json::{Value, json};

use crate::harness::*;
use crate::plugin_kit;

/// A project with a verified sender domain and one template; answers it and the template's id.
async fn with_template(s: &Server, email: &str) -> (Proj, String) {
    let p = proj(s, email).await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let r = p
        .secret
        .post(
            "/templates",
            json!({ "name": "Welcome", "subject": "Hi", "body": "<p>Hi</p>", "from": "news@shop.test" }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    let t = r.json["id"].as_str().unwrap().to_string();
    (p, t)
}

async fn workflow(p: &Proj, event: &str) -> (String, String) {
    let r = p.secret.post("/workflows", json!({ "name": "Onboarding", "eventName": event })).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let trigger = r.json["steps"][0]["id"].as_str().unwrap().to_string();
    (r.json["id"].as_str().unwrap().to_string(), trigger)
}

async fn step(p: &Proj, wf: &str, body: Value) -> String {
    let r = p.secret.post(&format!("/workflows/{wf}/steps"), body.clone()).await;
    assert_eq!(r.status, 201, "{body}: {}", r.json);
    r.json["id"].as_str().unwrap().to_string()
}

fn delay(name: &str) -> Value {
    json!({ "type": "DELAY", "name": name, "config": { "amount": 1, "unit": "hours" }, "autoConnect": false })
}

async fn link(p: &Proj, wf: &str, body: Value) -> Resp {
    p.secret.post(&format!("/workflows/{wf}/transitions"), body).await
}

#[tokio::test]
async fn create_list_get_patch_delete() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let r = p
        .secret
        .post(
            "/workflows",
            json!({ "name": "Welcome series", "description": "new users", "eventName": " signup ", "enabled": true }),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.json);
    assert_eq!(r.json["enabled"], false, "a new workflow starts disabled");
    assert_eq!(r.json["triggerType"], "EVENT");
    assert_eq!(r.json["triggerConfig"], json!({ "eventName": "signup" }));
    assert_eq!(r.json["allowReentry"], false);
    assert_eq!(r.json["steps"].as_array().unwrap().len(), 1);
    assert_eq!(r.json["steps"][0]["type"], "TRIGGER");
    assert_eq!(r.json["steps"][0]["config"], json!({ "eventName": "signup" }));
    let id = r.json["id"].as_str().unwrap().to_string();
    p.secret.post("/workflows", json!({ "name": "Re-engage", "eventName": "churn", "allowReentry": true })).await;

    let list = p.secret.get("/workflows").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.json["total"], 2);
    assert_eq!(list.json["data"][0]["name"], "Re-engage", "newest first");
    assert_eq!(list.json["data"][1]["_count"], json!({ "steps": 1, "executions": 0 }));
    assert_eq!(p.secret.get("/workflows?search=NEW%20USERS").await.json["total"], 1);
    assert_eq!(p.secret.get("/workflows?pageSize=1&page=2").await.json["data"][0]["name"], "Welcome series");
    assert_envelope(&p.secret.get("/workflows?enabled=maybe").await, 400, "BAD_REQUEST");

    let r = p
        .secret
        .patch(&format!("/workflows/{id}"), json!({ "enabled": true, "description": null, "name": "Welcome" }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!((r.json["enabled"].clone(), r.json["description"].clone()), (json!(true), Value::Null));
    assert_eq!(p.secret.get("/workflows?enabled=true").await.json["total"], 1);

    // The trigger: MANUAL, then a new event (the TRIGGER step follows).
    let r = p.secret.patch(&format!("/workflows/{id}"), json!({ "triggerType": "MANUAL" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["triggerConfig"], Value::Null);
    let r = p
        .secret
        .patch(&format!("/workflows/{id}"), json!({ "triggerType": "EVENT", "triggerConfig": { "eventName": "paid" } }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["steps"][0]["config"], json!({ "eventName": "paid" }));
    assert_eq!(r.json["steps"][0]["name"], "Trigger: paid");
    let r = p.secret.patch(&format!("/workflows/{id}"), json!({ "triggerConfig": { "eventName": "" } })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "triggerConfig");
    let r = p.secret.patch(&format!("/workflows/{id}"), json!({ "triggerType": "HOURLY" })).await;
    assert_eq!(r.json["error"]["errors"][0]["field"], "triggerType");

    let r = p.secret.post("/workflows", json!({ "name": "" , "eventName": "x"})).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let r = p.secret.post("/workflows", json!({ "name": "x".repeat(101), "eventName": "x" })).await;
    assert_eq!(r.json["error"]["errors"][0]["field"], "name");
    let r = p.secret.post("/workflows", json!({ "name": "x" })).await;
    assert_eq!(r.json["error"]["errors"][0]["field"], "eventName");

    assert_eq!(p.secret.delete(&format!("/workflows/{id}")).await.status, 204);
    assert_envelope(&p.secret.get(&format!("/workflows/{id}")).await, 404, "WORKFLOW_NOT_FOUND");
    assert_envelope(&p.secret.delete(&format!("/workflows/{id}")).await, 404, "WORKFLOW_NOT_FOUND");
    // The public key cannot manage workflows.
    assert_eq!(p.public.get("/workflows").await.status, 401);
    s.stop().await;
}

#[tokio::test]
async fn each_builtin_step_is_saved_with_its_config_checked() {
    let s = Server::start().await;
    let (p, template) = with_template(&s, "o@example.com").await;
    let (wf, trigger) = workflow(&p, "signup").await;
    // autoConnect (the default) chains each step after the newest open leaf.
    let send = step(&p, &wf, json!({ "type": "SEND_EMAIL", "name": "Welcome", "templateId": template, "config": {}, "position": {"x": 10, "y": 200} })).await;
    let wait = step(
        &p,
        &wf,
        json!({ "type": "WAIT_FOR_EVENT", "name": "Bought?", "config": { "eventName": "purchase", "timeout": 86400 } }),
    )
    .await;
    let cond = step(&p, &wf, json!({ "type": "CONDITION", "name": "Pro?", "config": { "field": "data.plan", "operator": "equals", "value": "pro" } })).await;
    let exit = step(&p, &wf, json!({ "type": "EXIT", "name": "Done", "config": { "reason": "pro" } })).await;
    let g = p.secret.get(&format!("/workflows/{wf}")).await.json;
    let links: Vec<(String, String, Value, Value)> = g["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["fromStepId"].as_str().unwrap().into(),
                t["toStepId"].as_str().unwrap().into(),
                t["condition"].clone(),
                t["waitOutcome"].clone(),
            )
        })
        .collect();
    assert_eq!(
        links,
        vec![
            (trigger.clone(), send.clone(), Value::Null, Value::Null),
            (send.clone(), wait.clone(), Value::Null, Value::Null),
            (wait.clone(), cond.clone(), Value::Null, json!("EVENT")),
            (cond.clone(), exit.clone(), json!({ "branch": "yes" }), Value::Null),
        ]
    );
    let send_step = &g["steps"][1];
    assert_eq!(send_step["config"], json!({ "recipient": { "type": "CONTACT" } }), "the default recipient is stored");
    assert_eq!(send_step["templateId"], template.as_str());
    assert_eq!(send_step["position"], json!({ "x": 10.0, "y": 200.0 }));
    assert_eq!(send_step["incomingTransitions"][0]["fromStepId"], trigger.as_str());
    assert_eq!(send_step["outgoingTransitions"][0]["toStepId"], wait.as_str());

    // Each config problem is a 422 naming the field.
    let cases = [
        (json!({ "type": "DELAY", "name": "d", "config": { "amount": 366, "unit": "days" } }), "config.amount"),
        (json!({ "type": "DELAY", "name": "d", "config": { "amount": 2, "unit": "weeks" } }), "config.unit"),
        (json!({ "type": "WAIT_FOR_EVENT", "name": "w", "config": { "eventName": "" } }), "config.eventName"),
        (
            json!({ "type": "WAIT_FOR_EVENT", "name": "w", "config": { "eventName": "a", "timeout": "soon" } }),
            "config.timeout",
        ),
        (
            json!({ "type": "CONDITION", "name": "c", "config": { "field": "data.plan", "operator": "resembles" } }),
            "config",
        ),
        (json!({ "type": "SEND_EMAIL", "name": "s", "config": {} }), "templateId"),
        (
            json!({ "type": "SEND_EMAIL", "name": "s", "templateId": template, "config": { "recipient": { "type": "CUSTOM" } } }),
            "config.recipient.customEmail",
        ),
        (json!({ "type": "EXIT", "name": "x", "config": { "reason": 7 } }), "config.reason"),
        (json!({ "type": "TRIGGER", "name": "t", "config": {} }), "type"),
        (json!({ "type": "TELEPORT", "name": "t", "config": {} }), "type"),
        (json!({ "type": "DELAY", "name": "d", "config": [1] }), "config"),
        (
            json!({ "type": "DELAY", "name": "d", "config": { "amount": 1, "unit": "hours", "pad": "x".repeat(20_000) } }),
            "config",
        ),
        (json!({ "type": "DELAY", "config": { "amount": 1, "unit": "hours" } }), "name"),
        (
            json!({ "type": "DELAY", "name": "d", "position": { "x": "left" }, "config": { "amount": 1, "unit": "hours" } }),
            "position",
        ),
    ];
    for (body, field) in cases {
        let r = p.secret.post(&format!("/workflows/{wf}/steps"), body.clone()).await;
        assert_envelope(&r, 422, "VALIDATION_ERROR");
        assert_eq!(r.json["error"]["errors"][0]["field"], field, "{body}: {}", r.json);
    }
    let r = p.secret.post(&format!("/workflows/{wf}/steps"), json!({ "type": "TELEPORT", "name": "t" })).await;
    assert!(r.json["error"]["errors"][0]["message"].as_str().unwrap().contains("SEND_EMAIL, DELAY"), "{}", r.json);
    // A template of nobody's (or another project's) is 404.
    let r = p
        .secret
        .post(&format!("/workflows/{wf}/steps"), json!({ "type": "SEND_EMAIL", "name": "s", "templateId": "nope" }))
        .await;
    assert_envelope(&r, 404, "TEMPLATE_NOT_FOUND");
    // A segment that does not exist is refused in a CONDITION.
    let r = p
        .secret
        .post(&format!("/workflows/{wf}/steps"), json!({ "type": "CONDITION", "name": "c", "config": { "field": "segment.nope", "operator": "memberOfSegment" } }))
        .await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(g["steps"].as_array().unwrap().len(), 5, "nothing refused was saved");
    assert_eq!(p.secret.get(&format!("/workflows/{wf}")).await.json["steps"].as_array().unwrap().len(), 5);

    // PATCH: layout always, config re-checked; the TRIGGER step's config only through the workflow.
    let r = p
        .secret
        .patch(
            &format!("/workflows/{wf}/steps/{cond}"),
            json!({ "name": "Plan is pro?", "position": { "x": 1, "y": 2 } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["name"], "Plan is pro?");
    let r = p
        .secret
        .patch(
            &format!("/workflows/{wf}/steps/{cond}"),
            json!({ "config": { "field": "data.plan", "operator": "equals" } }),
        )
        .await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let r = p
        .secret
        .patch(
            &format!("/workflows/{wf}/steps/{cond}"),
            json!({ "config": { "field": "event.total", "operator": "greaterThan", "value": 100 } }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["config"]["field"], "event.total");
    let r = p
        .secret
        .patch(&format!("/workflows/{wf}/steps/{trigger}"), json!({ "config": { "eventName": "other" } }))
        .await;
    assert_envelope(&r, 400, "BAD_REQUEST");
    assert_envelope(
        &p.secret.patch(&format!("/workflows/{wf}/steps/nope"), json!({ "name": "x" })).await,
        404,
        "STEP_NOT_FOUND",
    );
    s.stop().await;
}

#[tokio::test]
async fn every_graph_rule_is_a_400_that_names_the_steps() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let (wf, trigger) = workflow(&p, "signup").await;
    let a = step(&p, &wf, delay("A")).await;
    let b = step(&p, &wf, delay("B")).await;
    let cond = step(&p, &wf, json!({ "type": "CONDITION", "name": "C", "config": { "field": "contact.subscribed", "operator": "equals", "value": true }, "autoConnect": false })).await;
    let wait = step(
        &p,
        &wf,
        json!({ "type": "WAIT_FOR_EVENT", "name": "W", "config": { "eventName": "paid" }, "autoConnect": false }),
    )
    .await;
    let exit = step(&p, &wf, json!({ "type": "EXIT", "name": "X", "autoConnect": false })).await;

    let ok = link(&p, &wf, json!({ "fromStepId": trigger, "toStepId": a })).await;
    assert_eq!(ok.status, 201, "{}", ok.json);
    assert_eq!(ok.json["fromStepId"], trigger.as_str());
    assert_eq!(link(&p, &wf, json!({ "fromStepId": a, "toStepId": b })).await.status, 201);

    let rules: Vec<(Value, &str)> = vec![
        (json!({ "fromStepId": a, "toStepId": a }), "\"A\""),
        (json!({ "fromStepId": b, "toStepId": trigger }), "nothing may link into the TRIGGER step"),
        (json!({ "fromStepId": b, "toStepId": a }), "cycle: \"A\""),
        (json!({ "fromStepId": exit, "toStepId": a }), "the EXIT step \"X\""),
        (json!({ "fromStepId": a, "toStepId": cond }), "step \"A\""),
        (json!({ "fromStepId": cond, "toStepId": exit }), "needs condition.branch yes or no"),
        (json!({ "fromStepId": wait, "toStepId": exit }), "needs waitOutcome EVENT or TIMEOUT"),
        (json!({ "fromStepId": b, "toStepId": exit, "condition": { "branch": "yes" } }), "cannot have a branch"),
    ];
    for (body, want) in rules {
        let r = link(&p, &wf, body.clone()).await;
        assert_envelope(&r, 400, "BAD_REQUEST");
        let m = r.json["error"]["message"].as_str().unwrap();
        assert!(m.contains(want), "{body}: {m}");
    }
    // A CONDITION takes one yes and one no; a WAIT_FOR_EVENT one EVENT and one TIMEOUT.
    assert_eq!(link(&p, &wf, json!({ "fromStepId": b, "toStepId": cond })).await.status, 201);
    assert_eq!(
        link(&p, &wf, json!({ "fromStepId": cond, "toStepId": wait, "condition": { "branch": "yes" } })).await.status,
        201
    );
    let r = link(&p, &wf, json!({ "fromStepId": cond, "toStepId": exit, "condition": { "branch": "yes" } })).await;
    assert!(r.json["error"]["message"].as_str().unwrap().contains("already has a \"yes\" link"));
    assert_eq!(
        link(&p, &wf, json!({ "fromStepId": cond, "toStepId": exit, "condition": { "branch": "no" } })).await.status,
        201
    );
    let ev = link(&p, &wf, json!({ "fromStepId": wait, "toStepId": exit, "waitOutcome": "EVENT" })).await;
    assert_eq!(ev.status, 201, "{}", ev.json);
    let r = link(&p, &wf, json!({ "fromStepId": wait, "toStepId": exit, "waitOutcome": "EVENT" })).await;
    assert!(r.json["error"]["message"].as_str().unwrap().contains("already has a EVENT link"));
    let r = link(&p, &wf, json!({ "fromStepId": wait, "toStepId": exit, "waitOutcome": "TIMEOUT" })).await;
    assert_envelope(&r, 400, "BAD_REQUEST");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("has no timeout"), "{}", r.json);
    let r = link(&p, &wf, json!({ "fromStepId": wait, "toStepId": exit, "waitOutcome": "LATER" })).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    // Unknown steps are 404; so is a transition of nobody's.
    assert_envelope(&link(&p, &wf, json!({ "fromStepId": a, "toStepId": "nope" })).await, 404, "STEP_NOT_FOUND");
    assert_envelope(&link(&p, &wf, json!({ "fromStepId": a })).await, 422, "VALIDATION_ERROR");
    let tid = ev.json["id"].as_str().unwrap();
    assert_eq!(p.secret.delete(&format!("/workflows/{wf}/transitions/{tid}")).await.status, 204);
    assert_envelope(&p.secret.delete(&format!("/workflows/{wf}/transitions/{tid}")).await, 404, "TRANSITION_NOT_FOUND");
    s.stop().await;
}

#[tokio::test]
async fn deleting_a_step_splices_or_takes_what_only_it_leads_to() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let (wf, trigger) = workflow(&p, "signup").await;
    let a = step(&p, &wf, json!({ "type": "DELAY", "name": "A", "config": { "amount": 1, "unit": "hours" } })).await;
    let c = step(&p, &wf, json!({ "type": "CONDITION", "name": "C", "config": { "field": "contact.subscribed", "operator": "equals", "value": true } })).await;
    let yes = step(&p, &wf, json!({ "type": "DELAY", "name": "Y", "config": { "amount": 1, "unit": "days" } })).await;
    let no = step(&p, &wf, delay("N")).await;
    assert_eq!(
        link(&p, &wf, json!({ "fromStepId": c, "toStepId": no, "condition": { "branch": "no" } })).await.status,
        201
    );

    // Splice A: the trigger now leads to C.
    assert_eq!(p.secret.delete(&format!("/workflows/{wf}/steps/{a}?splice=true")).await.status, 204);
    let g = p.secret.get(&format!("/workflows/{wf}")).await.json;
    assert_eq!(g["steps"][0]["outgoingTransitions"][0]["toStepId"], c.as_str());
    // C has two children: splice is refused and nothing changes.
    let r = p.secret.delete(&format!("/workflows/{wf}/steps/{c}?splice=true")).await;
    assert_envelope(&r, 400, "BAD_REQUEST");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("\"C\""), "{}", r.json);
    // The TRIGGER step cannot go.
    assert_envelope(&p.secret.delete(&format!("/workflows/{wf}/steps/{trigger}")).await, 400, "BAD_REQUEST");
    // Without splice, C goes with Y and N (only C leads to them).
    assert_eq!(p.secret.delete(&format!("/workflows/{wf}/steps/{c}")).await.status, 204);
    let g = p.secret.get(&format!("/workflows/{wf}")).await.json;
    let ids: Vec<&str> = g["steps"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![trigger.as_str()]);
    assert_eq!(g["transitions"], json!([]));
    assert_envelope(&p.secret.delete(&format!("/workflows/{wf}/steps/{yes}")).await, 404, "STEP_NOT_FOUND");
    assert_envelope(&p.secret.delete(&format!("/workflows/{wf}/steps/{c}?splice=maybe")).await, 400, "BAD_REQUEST");
    s.stop().await;
}

#[tokio::test]
async fn plugin_steps_are_checked_by_their_plugin() {
    let config = Config::for_tests();
    plugin_kit::install(&config.plugins_dir, plugin_kit::WEBHOOK);
    plugin_kit::install(&config.plugins_dir, plugin_kit::UPDATE_CONTACT);
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "o@example.com").await;
    let (wf, _) = workflow(&p, "signup").await;
    let hook = step(&p, &wf, json!({ "type": "WEBHOOK", "name": "Tell CRM", "config": { "url": "https://crm.example/hook", "method": "POST" } })).await;
    let r = p
        .secret
        .post(
            &format!("/workflows/{wf}/steps"),
            json!({ "type": "WEBHOOK", "name": "Bad", "config": { "method": "POST" } }),
        )
        .await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "config");
    assert!(r.json["error"]["errors"][0]["message"].as_str().unwrap().contains("url"), "{}", r.json);
    let r = p
        .secret
        .post(
            &format!("/workflows/{wf}/steps"),
            json!({ "type": "UPDATE_CONTACT", "name": "Tag", "config": { "subscriptionAction": "maybe" } }),
        )
        .await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let tag = step(
        &p,
        &wf,
        json!({ "type": "UPDATE_CONTACT", "name": "Tag", "config": { "updates": { "onboarded": true } } }),
    )
    .await;
    let g = p.secret.get(&format!("/workflows/{wf}")).await.json;
    assert_eq!(g["steps"][1]["id"], hook.as_str());
    assert_eq!(g["steps"][2]["outgoingTransitions"], json!([]));
    assert_eq!(g["steps"][2]["incomingTransitions"][0]["fromStepId"], hook.as_str(), "{}", tag);
    s.stop().await;
}

#[tokio::test]
async fn one_projects_key_never_reaches_anothers_workflows() {
    let s = Server::start().await;
    let a = proj(&s, "a@example.com").await;
    let b = proj(&s, "b@example.com").await;
    let (wf, trigger) = workflow(&a, "signup").await;
    let d = step(&a, &wf, delay("D")).await;
    assert_envelope(&b.secret.get(&format!("/workflows/{wf}")).await, 404, "WORKFLOW_NOT_FOUND");
    assert_envelope(
        &b.secret.patch(&format!("/workflows/{wf}"), json!({ "name": "mine" })).await,
        404,
        "WORKFLOW_NOT_FOUND",
    );
    assert_envelope(&b.secret.delete(&format!("/workflows/{wf}")).await, 404, "WORKFLOW_NOT_FOUND");
    assert_envelope(&b.secret.post(&format!("/workflows/{wf}/steps"), delay("x")).await, 404, "WORKFLOW_NOT_FOUND");
    assert_envelope(
        &b.secret.patch(&format!("/workflows/{wf}/steps/{d}"), json!({ "name": "x" })).await,
        404,
        "WORKFLOW_NOT_FOUND",
    );
    assert_envelope(&b.secret.delete(&format!("/workflows/{wf}/steps/{d}")).await, 404, "WORKFLOW_NOT_FOUND");
    let r = link(&b, &wf, json!({ "fromStepId": trigger, "toStepId": d })).await;
    assert_envelope(&r, 404, "WORKFLOW_NOT_FOUND");
    assert_eq!(b.secret.get("/workflows").await.json["total"], 0);
    // A step of another workflow is not this workflow's.
    let (other, _) = workflow(&b, "signup").await;
    let r = link(&b, &other, json!({ "fromStepId": trigger, "toStepId": d })).await;
    assert_envelope(&r, 404, "STEP_NOT_FOUND");
    assert_eq!(a.secret.get(&format!("/workflows/{wf}")).await.json["name"], "Onboarding", "untouched");
    s.stop().await;
}

#[tokio::test]
async fn fields_list_contact_fields_and_the_data_keys_of_recent_events() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    p.secret.post("/contacts", json!({ "email": "a@example.com", "data": { "plan": "pro", "seats": 3 } })).await;
    p.secret
        .post(
            "/v1/track",
            json!({ "email": "a@example.com", "event": "purchase", "data": { "total": 30, "sku": "x" } }),
        )
        .await;
    p.secret.post("/v1/track", json!({ "email": "a@example.com", "event": "refund", "data": { "total": 5 } })).await;
    let r = p.secret.get("/workflows/fields").await;
    assert_eq!(r.status, 200, "{}", r.json);
    let names: Vec<&str> = r.json["fields"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    for want in ["contact.email", "contact.subscribed", "data.plan", "data.seats", "event.total", "event.sku"] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    assert_eq!(r.json["count"], names.len());
    let typed = r.json["typedFields"].as_array().unwrap();
    let total = typed.iter().find(|f| f["field"] == "event.total").unwrap();
    assert_eq!((total["type"].clone(), total["events"].clone()), (json!("number"), json!(["purchase", "refund"])));
    assert_eq!(typed.iter().find(|f| f["field"] == "data.seats").unwrap()["type"], "number");
    let only = p.secret.get("/workflows/fields?eventName=refund").await.json;
    let names: Vec<&str> = only["fields"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert!(names.contains(&"event.total") && !names.contains(&"event.sku"), "{names:?}");
    // Another project sees none of it.
    let q = proj(&s, "q@example.com").await;
    let theirs = q.secret.get("/workflows/fields").await.json;
    assert!(!theirs["fields"].as_array().unwrap().iter().any(|f| f == "event.total" || f == "data.plan"), "{theirs}");
    s.stop().await;
}

#[tokio::test]
async fn usage_reports_name_workflows_and_what_an_enabled_workflow_uses_cannot_go() {
    let s = Server::start().await;
    let (p, template) = with_template(&s, "o@example.com").await;
    let seg = p.secret.post("/segments", json!({ "name": "VIP", "type": "STATIC" })).await;
    assert_eq!(seg.status, 201, "{}", seg.json);
    let seg = seg.json["id"].as_str().unwrap().to_string();
    let (wf, _) = workflow(&p, "signup").await;
    step(&p, &wf, json!({ "type": "SEND_EMAIL", "name": "Welcome mail", "templateId": template })).await;
    step(&p, &wf, json!({ "type": "CONDITION", "name": "Pro?", "config": { "field": "data.plan", "operator": "equals", "value": "pro" } })).await;
    step(&p, &wf, json!({ "type": "CONDITION", "name": "VIP?", "config": { "field": "segment.".to_string() + &seg, "operator": "memberOfSegment" }, "autoConnect": false })).await;
    step(&p, &wf, json!({ "type": "WAIT_FOR_EVENT", "name": "Bought?", "config": { "eventName": "purchase" }, "autoConnect": false })).await;
    let named = |r: &Resp, key: &str| r.json[key].as_array().unwrap().iter().any(|w| w["id"] == wf.as_str());
    assert!(named(&p.secret.get("/events/signup/usage").await, "usedInWorkflows"), "the trigger");
    assert!(named(&p.secret.get("/events/purchase/usage").await, "usedInWorkflows"), "a wait");
    assert!(!named(&p.secret.get("/events/other/usage").await, "usedInWorkflows"));
    let field = p.secret.get("/contacts/fields/data.plan/usage").await;
    assert!(named(&field, "usedInWorkflows"), "{}", field.json);
    assert_eq!(field.json["canDelete"], false);
    let usage = p.secret.get(&format!("/templates/{template}/usage")).await;
    assert_eq!(usage.json["workflowSteps"][0]["workflowId"], wf.as_str(), "{}", usage.json);
    assert_eq!(usage.json["workflowSteps"][0]["stepName"], "Welcome mail");

    // Disabled, the workflow blocks nothing; enabled, its template and segment cannot go.
    p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await;
    let r = p.secret.delete(&format!("/templates/{template}")).await;
    assert_envelope(&r, 409, "CONFLICT");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("Welcome mail"), "{}", r.json);
    let r = p.secret.delete(&format!("/segments/{seg}")).await;
    assert_envelope(&r, 409, "CONFLICT");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("1 enabled workflow"), "{}", r.json);
    assert_eq!(p.secret.delete("/contacts/fields/data.plan").await.status, 409);
    // The trigger event's history may go.
    assert_eq!(p.secret.delete("/events/signup").await.status, 200);
    p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": false })).await;
    assert_eq!(p.secret.delete(&format!("/segments/{seg}")).await.status, 204);
    assert_eq!(p.secret.delete(&format!("/templates/{template}")).await.status, 204);
    s.stop().await;
}
