//! Helpers the workflow test files share.

use serde_json::{Value, json};

use crate::harness::*;

/// Runs the job queue until nothing is due (bounded).
pub async fn drain(s: &Server) {
    for _ in 0..50 {
        if s.worker.run_once(50).await.unwrap().is_empty() {
            return;
        }
    }
    panic!("the queue did not drain");
}

/// A contact of the project; answers its id.
pub async fn contact(p: &Proj, email: &str, subscribed: bool, data: Value) -> String {
    let r = p.secret.post("/contacts", json!({ "email": email, "subscribed": subscribed, "data": data })).await;
    assert!(r.status == 200 || r.status == 201, "{}", r.json);
    r.json["id"].as_str().unwrap().to_string()
}

/// An enabled workflow on `event` built from steps (each `(type, config)` linked after the previous one);
/// answers its id and the step ids in order (the TRIGGER first).
pub async fn enabled_workflow(p: &Proj, event: &str, reentry: bool, steps: &[(&str, Value)]) -> (String, Vec<String>) {
    let r = p.secret.post("/workflows", json!({ "name": event, "eventName": event, "allowReentry": reentry })).await;
    let wf = r.json["id"].as_str().unwrap().to_string();
    let mut ids = vec![r.json["steps"][0]["id"].as_str().unwrap().to_string()];
    for (i, (kind, config)) in steps.iter().enumerate() {
        let r = p
            .secret
            .post(&format!("/workflows/{wf}/steps"), json!({ "type": kind, "name": format!("s{i}"), "config": config }))
            .await;
        assert_eq!(r.status, 201, "{}", r.json);
        ids.push(r.json["id"].as_str().unwrap().to_string());
    }
    assert_eq!(p.secret.patch(&format!("/workflows/{wf}"), json!({ "enabled": true })).await.status, 200);
    (wf, ids)
}
