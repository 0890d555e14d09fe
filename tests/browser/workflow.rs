//! Building a workflow in the visual editor: a CONDITION after the trigger, a SEND_EMAIL on its `yes`
//! branch, an EXIT linked by hand to its `no` branch, a config the API refuses shown at its field, then
//! enabling it and watching an execution complete step by step after the trigger event is tracked.

use std::sync::Arc;
use std::time::Duration;

use herald_host::config::Config;
use serde_json::json;

use crate::driver::Browser;
use crate::harness::{Server, proj};
use crate::smtp_sink::SmtpSink;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_built_in_the_editor_runs_and_its_execution_shows_each_step() {
    tokio::time::timeout(Duration::from_secs(300), build()).await.expect("the workflow took over 5 minutes");
}

/// The number of edges drawn with `label` ("" for plain links).
async fn edges(b: &Browser, label: &str) -> i64 {
    let expr = format!("document.querySelectorAll('#workflow-canvas g.edge[data-label={}]').length", json!(label));
    b.js(&expr).await.as_i64().unwrap()
}

async fn add_step(b: &Browser, kind: &str) {
    b.find("#new-step-type").await.select_by_value(kind).await.unwrap();
    b.click("#add-step").await;
    b.find("#step-panel form[data-form=add]").await;
}

async fn build() {
    let sink = SmtpSink::start(0).await;
    let mut c = Config::for_tests();
    c.smtp_url = Some(sink.url());
    let s = Server::start_with(c, None).await;
    let p = proj(&s, "wes@shop.test").await;
    let st = Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let t = json!({ "name": "Welcome", "subject": "Welcome {{plan}}", "body": "<p>Hi</p>", "from": "hello@shop.test", "type": "TRANSACTIONAL" });
    assert_eq!(p.secret.post("/templates", t).await.status, 201);

    let b = Browser::start(&s.base).await;
    b.log_in("wes@shop.test", "password123").await;
    b.wait_text("#setup-checklist", "Build a workflow").await;
    b.click_text("nav a", "Workflows").await;
    b.fill("input[name=name]", "Onboarding").await;
    b.fill("input[name=eventName]", "signed-up").await;
    b.click_text("button", "Create workflow").await;
    b.until("the trigger node", "document.querySelector('#workflow-canvas g.node[data-type=TRIGGER]')").await;

    // CONDITION after the trigger: data.plan is "pro".
    add_step(&b, "CONDITION").await;
    b.fill("#step-panel input[name='config.field']", "data.plan").await;
    b.find("#step-panel select[name='config.operator']").await.select_by_value("equals").await.unwrap();
    b.fill("#step-panel input[name='config.value']", "pro").await;
    b.click_text("#step-panel button", "Add step").await;
    b.until("the condition node", "document.querySelector('#workflow-canvas g.node[data-type=CONDITION]')").await;
    assert_eq!(edges(&b, "").await, 1, "trigger → condition");

    // A config the API refuses shows its error at the field, and nothing is added.
    add_step(&b, "DELAY").await;
    b.fill("#step-panel input[name='config.amount']", "400").await;
    b.click_text("#step-panel button", "Add step").await;
    b.until(
        "the field's error",
        "document.querySelector(\"#step-panel .error[data-for='config.amount']\").textContent.length > 0",
    )
    .await;
    let steps = b.js("document.querySelectorAll('#workflow-canvas g.node').length").await;
    assert_eq!(steps, json!(2));

    // SEND_EMAIL, linked after the condition by its yes branch; EXIT added unlinked, then linked to no.
    add_step(&b, "SEND_EMAIL").await;
    b.click_text("#step-panel button", "Add step").await;
    b.until("the yes edge", "document.querySelector('#workflow-canvas g.edge[data-label=yes]')").await;
    add_step(&b, "EXIT").await;
    b.click("#step-panel input[name=autoConnect]").await;
    b.fill("#step-panel input[name='config.reason']", "not on the pro plan").await;
    b.click_text("#step-panel button", "Add step").await;
    b.until("the exit node", "document.querySelector('#workflow-canvas g.node[data-type=EXIT]')").await;
    assert_eq!(edges(&b, "no").await, 0);
    let exit = b.js("document.querySelector('#workflow-canvas g.node[data-type=EXIT]').dataset.step").await;
    b.click("#workflow-canvas g.node[data-type=CONDITION]").await;
    b.find("#step-panel select[name=toStepId]").await.select_by_value(exit.as_str().unwrap()).await.unwrap();
    b.find("#step-panel select[name=branch]").await.select_by_value("1").await.unwrap();
    b.click_text("#step-panel button", "Link").await;
    b.until("the no edge", "document.querySelector('#workflow-canvas g.edge[data-label=no]')").await;

    // The arrow keys move a focused step, and the position is saved.
    let exit_x = "Number(/translate\\(([-0-9.]+)/.exec(document.querySelector('#workflow-canvas g.node[data-type=EXIT]').getAttribute('transform'))[1])";
    let before = b.js(exit_x).await.as_f64().unwrap();
    b.find("#workflow-canvas g.node[data-type=EXIT]").await.send_keys("\u{E014}").await.unwrap(); // ArrowRight
    b.until("the step to move", &format!("{exit_x} === {}", before + 20.0)).await;
    b.shots("workflow-editor").await;

    // Enabled, the workflow runs for a tracked event and its execution shows each step.
    b.click("#workflow-toggle").await;
    b.wait_text(".head .badge", "ENABLED").await;
    let r = p
        .secret
        .post("/v1/track", json!({ "email": "ada@example.com", "event": "signed-up", "data": { "plan": "pro" } }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    b.until("an execution", "document.querySelector('#workflow-executions [data-execution]')").await;
    b.wait_text("#workflow-executions", "COMPLETED").await;
    b.click("#workflow-executions [data-execution]").await;
    b.wait_text("#execution-timeline", "Send email").await;
    let statuses = b.js("[...document.querySelectorAll('#execution-timeline li')].map(li => li.dataset.status)").await;
    assert_eq!(statuses, json!(["COMPLETED", "COMPLETED", "COMPLETED"]), "trigger, condition, send");
    assert_eq!(sink.wait_for(1).await[0].to, ["ada@example.com"]);
    b.shots("workflow-execution").await;
    b.close().await;
    // The position the arrow key gave is the one stored.
    let wf = p.secret.get("/workflows?pageSize=1").await;
    let id = wf.json["data"][0]["id"].as_str().unwrap().to_string();
    let w = p.secret.get(&format!("/workflows/{id}")).await;
    let exit = w.json["steps"].as_array().unwrap().iter().find(|s| s["type"] == "EXIT").unwrap().clone();
    assert_eq!(exit["position"]["x"].as_f64(), Some(before + 20.0), "{exit}");
    // The graph the editor built: trigger → condition; yes → send; no → exit.
    let steps = w.json["steps"].as_array().unwrap();
    let mut links: Vec<(String, String, String)> = w.json["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let kind = |id: &serde_json::Value| {
                steps.iter().find(|s| s["id"] == *id).unwrap()["type"].as_str().unwrap().to_string()
            };
            (kind(&t["fromStepId"]), kind(&t["toStepId"]), t["condition"]["branch"].as_str().unwrap_or("").to_string())
        })
        .collect();
    links.sort();
    let want = [("CONDITION", "EXIT", "no"), ("CONDITION", "SEND_EMAIL", "yes"), ("TRIGGER", "CONDITION", "")];
    assert_eq!(links, want.map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())), "{}", w.json);
}
