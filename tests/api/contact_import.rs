//! CSV import (docs/behaviour.md#bulk-changes-and-import): rows to contacts by the data rules, bad rows
//! by line, the options, the file checks, progress while it runs, a resume after a crash, isolation.

use serde_json::{Value, json};

use crate::harness::{Proj, Resp, Server, assert_envelope, proj};
use crate::workflow_kit::contact;

const BOUNDARY: &str = "herald-test-boundary";

/// A multipart body with the file (when given) and plain fields.
fn form(file: Option<&[u8]>, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").bytes(),
        );
    }
    if let Some(f) = file {
        body.extend(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"contacts.csv\"\r\n\
                 Content-Type: text/csv\r\n\r\n"
            )
            .bytes(),
        );
        body.extend_from_slice(f);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{BOUNDARY}--\r\n").bytes());
    body
}

async fn upload(p: &Proj, file: Option<&[u8]>, fields: &[(&str, &str)]) -> Resp {
    let ct = format!("multipart/form-data; boundary={BOUNDARY}");
    p.secret.raw("POST", "/contacts/import", form(file, fields), &ct).await
}

async fn queued(p: &Proj, file: &[u8], fields: &[(&str, &str)]) -> String {
    let r = upload(p, Some(file), fields).await;
    assert_eq!(r.status, 202, "{}", r.json);
    r.json["jobId"].as_str().unwrap().to_string()
}

async fn job(p: &Proj, id: &str) -> Value {
    let r = p.secret.get(&format!("/contacts/import/{id}")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json
}

async fn by_email(p: &Proj, email: &str) -> Value {
    let r = p.secret.get(&format!("/contacts?search={email}")).await;
    r.json["data"].as_array().unwrap().iter().find(|c| c["email"] == email).cloned().unwrap_or(Value::Null)
}

#[tokio::test]
async fn an_import_upserts_by_the_data_rules_and_reports_bad_rows_by_line() {
    let s = Server::start_stepped().await;
    let (p, q) = (proj(&s, "import-a@example.com").await, proj(&s, "import-b@example.com").await);
    contact(&p, "old@example.com", true, json!({ "plan": "free", "seats": 2 })).await;
    let csv = "\u{FEFF}email;name;age;plan;subscribed;plunk_id\n\
               new1@example.com;Ann;30;pro;;x\n\
               OLD@example.com;;;team;;\n\
               ;nobody;1;x;;\n\
               bad-address;x;1;x;;\n\
               short@example.com;1\n\
               new2@example.com;\"Bo; Jr\";41;;true;\n\
               new1@example.com;Ann B;;;;\n";
    let id = queued(&p, csv.as_bytes(), &[("subscribed", "false")]).await;
    let before = job(&p, &id).await;
    assert_eq!(before["state"], "queued");
    assert_eq!(before["kind"], "import");
    assert_eq!(before["progress"], json!({ "done": 0, "total": 7, "percent": 0 }));
    assert_envelope(&q.secret.get(&format!("/contacts/import/{id}")).await, 404, "JOB_NOT_FOUND");
    assert_envelope(&p.secret.get(&format!("/contacts/bulk/{id}")).await, 404, "JOB_NOT_FOUND");

    crate::workflow_kit::drain(&s).await;
    let done = job(&p, &id).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["progress"], json!({ "done": 7, "total": 7, "percent": 100 }));
    let r = &done["result"];
    assert_eq!(
        (&r["created"], &r["updated"], &r["skipped"], &r["failed"]),
        (&json!(2), &json!(2), &json!(0), &json!(3))
    );
    let errors: Vec<(u64, String, String)> = r["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (e["line"].as_u64().unwrap(), e["email"].as_str().unwrap().into(), e["reason"].as_str().unwrap().into())
        })
        .collect();
    assert_eq!(errors[0], (4, String::new(), "no email".to_string()));
    assert_eq!(errors[1], (5, "bad-address".to_string(), "invalid email".to_string()));
    assert_eq!((errors[2].0, errors[2].1.as_str()), (6, "short@example.com"));
    assert!(errors[2].2.contains("expected 6 columns, found 2"), "{errors:?}");

    // Typed data, reserved columns dropped, the later row of one email applied over the earlier.
    let new1 = by_email(&p, "new1@example.com").await;
    assert_eq!(new1["data"], json!({ "name": "Ann B", "age": 30, "plan": "pro" }));
    assert_eq!(new1["subscribed"], false, "the form's subscribed for new contacts");
    let new2 = by_email(&p, "new2@example.com").await;
    assert_eq!(new2["data"], json!({ "name": "Bo; Jr", "age": 41 }));
    assert_eq!(new2["subscribed"], true, "the row's subscribed column wins");
    let old = by_email(&p, "old@example.com").await;
    assert_eq!(old["data"], json!({ "plan": "team", "seats": 2 }), "existing data merged, empty cells keep it");
    assert_eq!(old["subscribed"], true, "the form's subscribed is for new contacts only");
    assert_eq!(q.secret.get("/contacts").await.json["data"], json!([]), "nothing reached another project");
}

#[tokio::test]
async fn without_update_existing_rows_of_existing_contacts_are_skipped() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "import-skip@example.com").await;
    contact(&p, "kept@example.com", true, json!({ "plan": "free" })).await;
    let id =
        queued(&p, b"email,plan\nkept@example.com,pro\nfresh@example.com,pro\n", &[("updateExisting", "false")]).await;
    crate::workflow_kit::drain(&s).await;
    let r = job(&p, &id).await["result"].clone();
    assert_eq!(
        (&r["created"], &r["updated"], &r["skipped"], &r["failed"]),
        (&json!(1), &json!(0), &json!(1), &json!(0))
    );
    assert_eq!(by_email(&p, "kept@example.com").await["data"], json!({ "plan": "free" }));
    assert_eq!(by_email(&p, "fresh@example.com").await["data"], json!({ "plan": "pro" }));
}

#[tokio::test]
async fn a_file_that_cannot_be_imported_is_refused_with_the_reason() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "import-bad@example.com").await;
    let field_of = |r: &Resp| r.json["error"]["errors"][0]["field"].as_str().unwrap_or("").to_string();
    let message_of = |r: &Resp| r.json["error"]["errors"][0]["message"].as_str().unwrap_or("").to_string();
    let no_email = upload(&p, Some(b"name,plan\nAda,pro\n"), &[]).await;
    assert_envelope(&no_email, 422, "VALIDATION_ERROR");
    assert_eq!(field_of(&no_email), "file");
    assert!(message_of(&no_email).contains("no email column"), "{}", no_email.json);
    let binary = upload(&p, Some(b"email\n\x89PNG\r\n\x1a\n\xff\xfe"), &[]).await;
    assert_envelope(&binary, 422, "VALIDATION_ERROR");
    assert!(message_of(&binary).contains("not UTF-8"), "{}", binary.json);
    let missing = upload(&p, None, &[("subscribed", "true")]).await;
    assert_envelope(&missing, 422, "VALIDATION_ERROR");
    assert_eq!(field_of(&missing), "file");
    let option = upload(&p, Some(b"email\na@example.com\n"), &[("subscribed", "maybe")]).await;
    assert_envelope(&option, 422, "VALIDATION_ERROR");
    assert_eq!(field_of(&option), "subscribed");
    let json_body = p.secret.post("/contacts/import", json!({ "file": "email\na@example.com" })).await;
    assert_envelope(&json_body, 422, "VALIDATION_ERROR");
    let mut big = b"email,note\n".to_vec();
    while big.len() <= 5 * 1024 * 1024 {
        big.extend(b"someone@example.com,0123456789012345678901234567890123456789\n");
    }
    assert_envelope(&upload(&p, Some(&big), &[]).await, 413, "PAYLOAD_TOO_LARGE");
    assert_eq!(
        p.public
            .raw("POST", "/contacts/import", form(Some(b"email\n"), &[]), "multipart/form-data; boundary=x")
            .await
            .status,
        401
    );
    assert_envelope(&p.secret.get("/contacts/import/no-such-job").await, 404, "JOB_NOT_FOUND");
}

#[tokio::test]
async fn progress_climbs_while_an_import_runs_and_a_crash_resumes_it_without_duplicates() {
    let s = Server::start_stepped().await;
    let p = proj(&s, "import-resume@example.com").await;
    let rows = 1_500;
    let mut csv = String::from("email,n\n");
    for i in 0..rows {
        csv.push_str(&format!("c{i}@example.com,{i}\n"));
    }
    let id = queued(&p, csv.as_bytes(), &[]).await;
    // The worker runs the job in the background; once a chunk is in, the process "dies" (the task is
    // dropped mid-job, its lease left to expire).
    let worker = s.worker.clone();
    let running = tokio::spawn(async move { worker.run_once(10).await });
    let mut seen = json!(null);
    for _ in 0..2_000 {
        seen = job(&p, &id).await;
        if seen["progress"]["done"].as_i64().unwrap() > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    running.abort();
    let _ = running.await;
    let mid = job(&p, &id).await;
    let done = mid["progress"]["done"].as_i64().unwrap();
    assert_eq!(seen["state"], "active", "{seen}");
    assert!(done > 0 && done < rows, "stopped part-way: {mid}");
    assert_eq!(mid["result"]["created"], json!(done), "what is counted is what was written");

    s.clock().advance(120_000); // past the dead worker's lease
    crate::workflow_kit::drain(&s).await;
    let end = job(&p, &id).await;
    assert_eq!(end["state"], "completed", "{end}");
    assert_eq!(end["progress"]["done"], json!(rows));
    assert_eq!(end["result"]["created"], json!(rows), "each row created once: {end}");
    assert_eq!(end["result"]["updated"], json!(0), "no row was imported a second time: {end}");
    let total = p.secret.get("/contacts?limit=1").await;
    assert_eq!(total.json["total"], json!(rows), "one contact per row");
}
