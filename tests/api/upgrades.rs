//! Data written under an older schema opens under the current binary and reads the same (docs/upgrading.md):
//! for several points K across the history, a database is made with the first K migrations only, rows are
//! written in the shape the code of that time wrote them (SurrealQL fixtures), and the current `herald`
//! migrates it and serves it.

use std::time::Duration;

use herald_host::config::Config;
use herald_host::infra::security::{generate_key_pair, key_digest};
use herald_host::store::Store;
use herald_host::store::migrate::{MIGRATIONS, apply_list};
use serde_json::{Value, json};

use crate::binary::{free_port, get_json, herald, serve, wait_until_up};

/// Rows as the first releases wrote them: a project, two contacts, their events and a sent email. Later
/// migrations add fields with defaults or optional ones; `extra` adds what a point of the history required.
const FIXTURE: &str = "
    CREATE project:p1 SET name = 'Old project', public_key_hash = $pk, secret_key_hash = $sk, disabled = false,
        created_at = 1000, updated_at = 1000;
    CREATE contact:c1 SET project = 'p1', email = 'old@example.org', subscribed = true,
        data = { plan: 'pro', seats: 3, tags: ['a', 'b'], nested: { since: '2024-01-01' } }, version = 2,
        created_at = 1000, updated_at = 2000;
    CREATE contact:c2 SET project = 'p1', email = 'gone@example.org', subscribed = false, data = {}, version = 1,
        created_at = 1100, updated_at = 1100;
    CREATE event:e1 SET project = 'p1', contact = 'c1', name = 'signup', data = { from: 'old' }, source = 'api',
        created_at = 1000, dispatched = true;
    CREATE event:e2 SET project = 'p1', contact = 'c1', name = 'upgrade', data = {}, source = 'api',
        created_at = 1500, dispatched = true;
";

/// Makes a database at `dir` with the first `k` migrations and the fixture; answers the secret key.
/// From the outbox on (0015), an event's dispatch is a row of its own, no longer a field of the event.
async fn old_database(dir: &std::path::Path, k: usize) -> String {
    let outbox = MIGRATIONS[..k].iter().any(|(n, _)| n.starts_with("0015"));
    let fixture = match outbox {
        true => FIXTURE.replace(", dispatched = true", ""),
        false => FIXTURE.to_string(),
    };
    let config = Config { db: format!("surrealkv://{}", dir.display()), ..Config::for_tests() };
    let store = Store::connect_only(&config).await.unwrap();
    apply_list(&store, &MIGRATIONS[..k]).await.unwrap();
    let keys = generate_key_pair();
    let vars = json!({ "pk": key_digest(&keys.public), "sk": key_digest(&keys.secret) });
    store.query(&fixture, vars).await.unwrap_or_else(|e| panic!("the fixture at {}: {e}", MIGRATIONS[k - 1].0));
    store.close_last(Duration::from_secs(5)).await;
    keys.secret
}

async fn reads(http: &reqwest::Client, base: &str, key: &str) -> Value {
    let list = get_json(http, &format!("{base}/contacts?limit=10"), key).await;
    let mut contacts: Vec<Value> = list["contacts"]
        .as_array()
        .or(list["data"].as_array())
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|c| json!({ "email": c["email"], "subscribed": c["subscribed"], "data": c["data"] }))
        .collect();
    contacts.sort_by_key(|c| c["email"].as_str().unwrap_or_default().to_string());
    let mut events: Vec<Value> = Vec::new();
    for c in list["contacts"].as_array().or(list["data"].as_array()).unwrap() {
        let got = get_json(http, &format!("{base}/events/contact/{}", c["id"].as_str().unwrap()), key).await;
        let all = got["events"].as_array().or(got["data"].as_array()).cloned().unwrap_or_default();
        events.extend(all.iter().map(|e| json!({ "name": e["name"], "data": e["data"] })));
    }
    events.sort_by_key(|e| e["name"].as_str().unwrap_or_default().to_string());
    json!({ "total": list["total"], "contacts": contacts, "events": events })
}

#[tokio::test]
async fn databases_made_by_older_schemas_open_under_this_binary_and_read_the_same() {
    let want = json!({
        "total": 2,
        "contacts": [
            { "email": "gone@example.org", "subscribed": false, "data": {} },
            { "email": "old@example.org", "subscribed": true,
              "data": { "plan": "pro", "seats": 3, "tags": ["a", "b"], "nested": { "since": "2024-01-01" } } },
        ],
        "events": [ { "name": "signup", "data": { "from": "old" } }, { "name": "upgrade", "data": {} } ],
    });
    let names: Vec<&str> = MIGRATIONS.iter().map(|(n, _)| *n).collect();
    let k_of = |prefix: &str| names.iter().position(|n| n.starts_with(prefix)).unwrap() + 1;
    // After contacts and emails; before the outbox and workflows; before tallies and inbound; the last but one.
    let points = [k_of("0005"), k_of("0014"), k_of("0039"), MIGRATIONS.len() - 1];
    let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    for k in points {
        let dir = Config::test_scratch().join(format!("upgrade-{k}-{}", uuid::Uuid::new_v4()));
        let key = old_database(&dir, k).await;
        let port = free_port();
        let cmd = || {
            let mut c = herald(&dir, port);
            c.env("HERALD_SECRET", "a test secret of the upgrade suite");
            c
        };
        let out = cmd().args(["migrate", "--dry-run"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(plan["pending"], json!(names[k..]), "at {}", names[k - 1]);
        let _server = serve(cmd());
        let base = format!("http://127.0.0.1:{port}");
        assert!(wait_until_up(&base).await, "the binary starts on data of {}", names[k - 1]);
        assert_eq!(reads(&http, &base, &key).await, want, "data written at {}", names[k - 1]);
        // And it keeps working: a new event on an old contact.
        let r = http
            .post(format!("{base}/v1/track"))
            .bearer_auth(&key)
            .json(&json!({ "email": "old@example.org", "event": "after-upgrade" }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    }
}
