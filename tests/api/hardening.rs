//! Issue 29: no request may take Herald down or reach past its rights. Each test is a finding of the
//! attack review, replayed against the real server (the first one against the real binary).

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

/// Two inline partials calling each other: before the fix, rendering it overflowed the stack and the
/// process aborted (SIGABRT), for every tenant.
const MUTUAL_PARTIALS: &str = "{{~#*inline \"a\"}}{{\n> b}}{{/inline}}{{~#*inline \"b\"}}{{\n> a}}{{/inline}}{{\n> a}}";

fn herald(dir: &std::path::Path, port: u16) -> Command {
    let mut c = crate::binary::herald(dir, port);
    c.env("HERALD_SECRET", "a test secret of the hardening suite");
    c
}

#[tokio::test]
async fn a_template_of_mutually_recursive_partials_is_refused_and_the_binary_keeps_serving() {
    let dir = herald_host::config::Config::test_scratch().join(format!("hardening-{}", uuid::Uuid::new_v4()));
    let port = crate::binary::free_port();
    let out = herald(&dir, port)
        .args(["project", "create", "Target", "--owner", "t@example.com", "--password", "password123"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let project: Value = serde_json::from_slice(&out.stdout).unwrap();
    let secret = project["secret"].as_str().unwrap().to_string();
    let out = herald(&dir, port)
        .args(["domain", "add", "mail.hardening.test", "--project", project["id"].as_str().unwrap(), "--trust"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let mut server = crate::binary::Serving(
        herald(&dir, port).arg("serve").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap(),
    );
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    assert!(crate::binary::wait_until_up(&base).await, "herald serve answers /health");

    let post = |path: &str, body: Value| http.post(format!("{base}{path}")).bearer_auth(&secret).json(&body).send();
    let from = "hello@mail.hardening.test";
    let attempts = [
        ("/v1/send", json!({"to": "v@example.com", "from": from, "subject": "x", "body": MUTUAL_PARTIALS})),
        (
            "/v1/send",
            json!({"to": "v@example.com", "from": from, "subject": MUTUAL_PARTIALS.replace('\n', " "), "body": "x"}),
        ),
        (
            "/templates",
            json!({"name": "t", "subject": "s", "body": MUTUAL_PARTIALS, "from": from, "type": "TRANSACTIONAL"}),
        ),
        (
            "/campaigns",
            json!({"name": "c", "subject": "s", "body": MUTUAL_PARTIALS, "from": from, "audienceType": "ALL"}),
        ),
    ];
    for (path, body) in attempts {
        let r = post(path, body).await.expect("the server answers instead of dying");
        assert_eq!(r.status(), 422, "{path} refuses the template");
        let json: Value = r.json().await.unwrap();
        assert_eq!(json["error"]["code"], "VALIDATION_ERROR", "{json}");
        assert!(json.to_string().contains("partials"), "{json}");
    }
    // Deep nesting is refused the same way, before the parser recurses.
    let deep = format!("{}x{}", "{{#if a}}".repeat(100_000), "{{/if}}".repeat(100_000));
    let r = post("/v1/send", json!({"to": "v@example.com", "from": from, "subject": "x", "body": deep})).await.unwrap();
    assert_eq!(r.status(), 422);

    assert!(server.try_wait().unwrap().is_none(), "the process is still running");
    let r = http.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(r.status(), 200, "and still serving");
    let _ = Command::new("kill").args(["-TERM", &server.id().to_string()]).status();
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while server.try_wait().ok().flatten().is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let _ = server.kill();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_public_key_never_changes_an_existing_contacts_subscription() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let track = |c: &Client, email: &str, subscribed: bool| {
        let c = c.clone();
        let email = email.to_string();
        async move { c.post("/v1/track", json!({"email": email, "event": "visit", "subscribed": subscribed})).await }
    };
    let subscribed = |email: &str| {
        let c = p.secret.clone();
        let email = email.to_string();
        async move {
            let r = c.get(&format!("/contacts?search={email}")).await;
            let list = r.json["data"].as_array().or(r.json["contacts"].as_array()).cloned().unwrap_or_default();
            let found = list.iter().find(|c| c["email"] == email.as_str()).cloned();
            found.and_then(|c| c["subscribed"].as_bool())
        }
    };
    // A new contact takes the public key's state.
    assert_eq!(track(&p.public, "new@example.com", false).await.status, 200);
    assert_eq!(subscribed("new@example.com").await, Some(false));
    // An existing one keeps its state, either way.
    assert_eq!(track(&p.secret, "jane@example.com", true).await.status, 200);
    assert_eq!(track(&p.public, "jane@example.com", false).await.status, 200);
    assert_eq!(subscribed("jane@example.com").await, Some(true), "the public key cannot unsubscribe her");
    assert_eq!(track(&p.secret, "jane@example.com", false).await.status, 200);
    assert_eq!(track(&p.public, "jane@example.com", true).await.status, 200);
    assert_eq!(subscribed("jane@example.com").await, Some(false), "nor re-subscribe her after she opted out");
    // The secret key can.
    assert_eq!(track(&p.secret, "jane@example.com", true).await.status, 200);
    assert_eq!(subscribed("jane@example.com").await, Some(true));
}

#[tokio::test]
async fn plugins_need_the_secret_key_or_a_session() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    assert_envelope(&p.public.get("/plugins").await, 401, "INVALID_API_KEY");
    assert_eq!(p.secret.get("/plugins").await.status, 200);
    assert_eq!(p.session.get("/plugins").await.status, 200);
}

#[tokio::test]
async fn logout_revokes_the_session_token_itself() {
    let s = Server::start().await;
    let c = signup(&s, "o@example.com").await;
    let login = s.client().http.post(format!("{}/auth/login", s.base));
    let r = login.json(&json!({"email": "o@example.com", "password": "password123"})).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("herald_token="))
        .and_then(|v| v.split(';').next())
        .unwrap()
        .to_string();
    let me = |cookie: String| {
        let http = reqwest::Client::new();
        let url = format!("{}/users/@me", s.base);
        async move { http.get(url).header("cookie", cookie).send().await.unwrap().status().as_u16() }
    };
    assert_eq!(me(cookie.clone()).await, 200, "the copied cookie works while the session lives");
    let http = reqwest::Client::new();
    // A link or an image on another site cannot log the user out.
    for site in ["cross-site", "same-site"] {
        let r = http
            .get(format!("{}/auth/logout", s.base))
            .header("cookie", cookie.clone())
            .header("sec-fetch-site", site)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{site}");
        assert_eq!(me(cookie.clone()).await, 200, "a logout from {site} left the session alone");
    }
    let r = http
        .post(format!("{}/auth/logout", s.base))
        .header("cookie", cookie.clone())
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(me(cookie).await, 401, "a copy of the token dies with the logout");
    assert_eq!(c.get("/users/@me").await.status, 200, "another session of the same user lives on");
}

#[tokio::test]
async fn cookie_authenticated_writes_from_another_origin_are_refused() {
    let s = Server::start().await;
    let c = signup(&s, "o@example.com").await;
    let host = s.base.trim_start_matches("http://").to_string();
    let post = |headers: Vec<(&'static str, String)>, body: Option<&'static str>| {
        let mut r = c.http.post(format!("{}/users/@me/projects", s.base));
        for (k, v) in headers {
            r = r.header(k, v);
        }
        if let Some(b) = body {
            r = r.header("content-type", "application/json").body(b);
        }
        async move {
            let res = r.send().await.unwrap();
            let status = res.status().as_u16();
            (status, res.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let body = Some(r#"{"name": "forged"}"#);
    // What a page on another site (or a sibling subdomain, which SameSite=Lax lets the cookie reach) sends.
    for headers in [
        vec![("sec-fetch-site", "cross-site".to_string())],
        vec![("sec-fetch-site", "same-site".to_string())],
        vec![("origin", "http://evil.test".to_string())],
        vec![("origin", "null".to_string())],
        vec![("origin", format!("http://{host}.evil.test"))],
    ] {
        let (status, json) = post(headers.clone(), body).await;
        assert_eq!(status, 403, "{headers:?}: {json}");
        assert_eq!(json["error"]["code"], "FORBIDDEN", "{json}");
    }
    let list = c.get("/users/@me/projects").await;
    assert_eq!(list.json.as_array().map(Vec::len).or(list.json["data"].as_array().map(Vec::len)), Some(0));
    // The browser's own pages: same origin by Sec-Fetch-Site or by Origin, and tools that send neither.
    let (status, json) = post(vec![("sec-fetch-site", "same-origin".into())], Some(r#"{"name": "a"}"#)).await;
    assert_eq!(status, 201, "{json}");
    let (status, json) = post(vec![("origin", s.base.clone())], Some(r#"{"name": "b"}"#)).await;
    assert_eq!(status, 201, "{json}");
    assert_eq!(c.post("/users/@me/projects", json!({"name": "real"})).await.status, 201);
    // A same-origin POST without a body (the dashboard's regenerate-keys button) goes through.
    let id = json["id"].as_str().unwrap().to_string();
    let res = c
        .http
        .post(format!("{}/users/@me/projects/{id}/regenerate-keys", s.base))
        .header("sec-fetch-site", "same-origin")
        .header("origin", s.base.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let keys: Value = res.json().await.unwrap();
    assert!(keys["secret"].as_str().unwrap().starts_with("sk_"), "{keys}");
    // Reads are never refused: a cross-site GET changes nothing.
    let res = c.http.get(format!("{}/users/@me", s.base)).header("sec-fetch-site", "cross-site").send().await.unwrap();
    assert_eq!(res.status(), 200);
}

#[tokio::test]
async fn line_breaks_in_names_that_reach_mail_headers_are_refused_when_saved() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let r = p.session.post("/users/@me/projects", json!({"name": "Shop\r\nBcc: x@evil.test"})).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "name", "{}", r.json);
    let r = p.session.patch(&format!("/users/@me/projects/{}", p.id), json!({"name": "a\nb"})).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    let template = json!({"name": "t", "subject": "s", "body": "b", "from": "a@shop.test", "type": "TRANSACTIONAL",
        "fromName": "Shop\nX-Evil: 1"});
    let r = p.secret.post("/templates", template).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "fromName", "{}", r.json);
    let campaign = json!({"name": "c", "subject": "s", "body": "b", "from": "a@shop.test", "audienceType": "ALL",
        "fromName": "Shop\r"});
    let r = p.secret.post("/campaigns", campaign).await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert!(r.json.to_string().contains("fromName"), "{}", r.json);
    let r = p
        .secret
        .post(
            "/v1/send",
            json!({"to": "a@example.com", "from": "a@shop.test", "subject": "s", "body": "b",
            "name": "Shop\nBcc: x@evil.test"}),
        )
        .await;
    assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "name", "{}", r.json);
}

#[tokio::test]
async fn bodies_are_not_read_for_callers_who_are_not_let_in() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let big = vec![b' '; 2 * 1024 * 1024];
    let anonymous = s.client();
    let r = anonymous.raw("POST", "/domains", big.clone(), "application/json").await;
    assert_envelope(&r, 401, "UNAUTHORIZED");
    let r = p.secret.raw("POST", "/domains", big.clone(), "application/json").await;
    assert_envelope(&r, 413, "PAYLOAD_TOO_LARGE");
    let r = anonymous.raw("POST", "/auth/login", big, "application/json").await;
    assert_envelope(&r, 413, "PAYLOAD_TOO_LARGE");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("16 KB"), "{}", r.json);
}

#[tokio::test]
async fn repeated_wrong_passwords_slow_down_the_account() {
    let s = Server::start().await;
    signup(&s, "o@example.com").await;
    let c = s.client();
    for _ in 0..10 {
        let r = c.post("/auth/login", json!({"email": "o@example.com", "password": "wrong-password"})).await;
        assert_envelope(&r, 401, "UNAUTHORIZED");
    }
    // Even the right password waits now, and says how long.
    let r = c.post("/auth/login", json!({"email": "o@example.com", "password": "password123"})).await;
    assert_envelope(&r, 429, "RATE_LIMIT_EXCEEDED");
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(wait > 0 && wait <= 15 * 60, "{wait}");
}

#[tokio::test]
async fn a_small_send_cannot_make_the_server_render_and_store_far_more_than_it_was_sent() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let st = std::sync::Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let to: Vec<String> = (0..20).map(|i| format!("r{i}@example.com")).collect();
    // ~3 MB per recipient from a request of a few KB: 60 MB for the request, past the 40 MB limit.
    let body = "{{#each a}}{{#each ../b}}<p>amplified amplified amplified amplified</p>{{/each}}{{/each}}";
    let r = p
        .secret
        .post(
            "/v1/send",
            json!({"to": to, "from": "a@shop.test", "subject": "s", "body": body,
                "data": {"a": {"value": (0..700).collect::<Vec<_>>(), "persistent": false},
                         "b": {"value": (0..100).collect::<Vec<_>>(), "persistent": false}}}),
        )
        .await;
    assert_envelope(&r, 400, "BAD_REQUEST");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("one request exceed"), "{}", r.json);
    let emails = st.store.query("SELECT count() AS n FROM email GROUP ALL", json!({})).await.unwrap().value(0).unwrap();
    assert!(emails == json!([]) || emails == json!([{"n": 0}]), "nothing was stored: {emails}");
}

#[tokio::test]
async fn deleting_a_project_removes_everything_it_owns_and_sends_nothing_it_had_queued() {
    let sink = crate::smtp_sink::SmtpSink::start(0).await;
    let mut config = herald_host::config::Config::for_tests();
    config.smtp_url = Some(sink.url());
    config.run_jobs = false;
    let s = Server::start_with(config, Some(herald_host::infra::clock::ManualClock::new(1_800_000_000_000))).await;
    let p = proj(&s, "o@example.com").await;
    let other = proj(&s, "other@example.com").await;
    let st = std::sync::Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    st.domains.add(&st.store, &other.id, "other.test", true, st.clock.now_ms()).await.unwrap();
    for (c, from) in [(&p, "a@shop.test"), (&other, "a@other.test")] {
        assert_eq!(c.secret.post("/v1/track", json!({"email": "a@example.com", "event": "visit"})).await.status, 200);
        let t = json!({"name": "t", "subject": "s", "body": "b", "from": from, "type": "TRANSACTIONAL"});
        assert_eq!(c.secret.post("/templates", t).await.status, 201);
        let seg = json!({"name": "all", "condition": {"logic": "AND", "groups": []}, "trackMembership": true});
        assert_eq!(c.secret.post("/segments", seg).await.status, 201);
    }
    // Its events are counted for analytics first (the counters go with the project too).
    for _ in 0..20 {
        if st.store.undispatched_events(10).await.unwrap().is_empty() {
            break;
        }
        s.clock().advance(1_000);
        s.worker.run_once(1).await.unwrap();
    }
    let r =
        p.secret.post("/v1/send", json!({"to": "a@example.com", "from": "a@shop.test", "subject": "s", "body": "b"}));
    assert_eq!(r.await.status, 200, "an email waits in the queue (the worker is stepped)");

    // A contact's hourly workflow budget (written by workflow starts and emails).
    for id in [&p.id, &other.id] {
        let sql = "CREATE type::record('workflow_budget', [$p, 'c1']) SET project = $p, hour = 1, starts = 1";
        st.store.query(sql, json!({ "p": id })).await.unwrap();
    }
    let r = p.session.delete(&format!("/users/@me/projects/{}", p.id)).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_envelope(&p.secret.get("/contacts").await, 401, "INVALID_API_KEY");
    // Its domain name is free for another project at once.
    let r = other.secret.post("/domains", json!({"domain": "shop.test"})).await;
    assert_eq!(r.status, 201, "{}", r.json);

    for _ in 0..20 {
        if s.worker.run_once(50).await.unwrap().is_empty() {
            break;
        }
    }
    assert!(sink.received().is_empty(), "the queued email of the deleted project was not delivered");
    let count = |table: &'static str, project: String| {
        let st = st.clone();
        async move {
            let v = st
                .store
                .query(&format!("SELECT count() AS n FROM {table} WHERE project = $p GROUP ALL"), json!({"p": project}))
                .await
                .unwrap()
                .value(0)
                .unwrap();
            v[0]["n"].as_i64().unwrap_or(0)
        }
    };
    let tables = ["contact", "event", "email", "template", "segment", "domain", "membership", "idempotency"];
    for table in
        tables.into_iter().chain(["stat_event_day", "milestone", "contact_job", "usage_month", "workflow_budget"])
    {
        assert_eq!(count(table, p.id.clone()).await, 0, "{table} rows of the deleted project are gone");
    }
    let bodies = st.store.query("SELECT count() AS n FROM email_body GROUP ALL", json!({})).await.unwrap().value(0);
    assert_eq!(bodies.unwrap()[0]["n"].as_i64().unwrap_or(0), 0, "email bodies went with their emails");
    // The other project keeps everything.
    for table in ["contact", "event", "template", "segment", "stat_event_day", "workflow_budget"] {
        assert!(count(table, other.id.clone()).await >= 1, "{table} of the other project");
    }
}

#[tokio::test]
async fn an_attachment_is_stored_once_per_request_not_once_per_recipient() {
    use base64::Engine;
    let s = Server::start_stepped().await;
    let p = proj(&s, "o@example.com").await;
    let st = std::sync::Arc::clone(&s.state);
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();
    let content = base64::engine::general_purpose::STANDARD.encode(vec![7u8; 1024 * 1024]);
    let to: Vec<String> = (0..20).map(|i| format!("r{i}@example.com")).collect();
    let r = p
        .secret
        .post(
            "/v1/send",
            json!({"to": to, "from": "a@shop.test", "subject": "s", "body": "b",
                "attachments": [{"filename": "big.bin", "content": content, "contentType": "application/octet-stream"}]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let sizes = st
        .store
        .query(
            "RETURN [math::sum((SELECT VALUE string::len(attachments) FROM email_body)),
                     math::sum((SELECT VALUE string::len(content) FROM attachment_set)),
                     count((SELECT id FROM attachment_set))]",
            json!({}),
        )
        .await
        .unwrap()
        .value(0)
        .unwrap();
    let (bodies, sets, n) = (sizes[0].as_i64().unwrap(), sizes[1].as_i64().unwrap(), sizes[2].as_i64().unwrap());
    assert_eq!(n, 1, "one stored copy for the 20 recipients");
    assert!(sets > 1_300_000 && sets < 1_500_000, "the copy holds the attachment: {sets} bytes");
    assert!(bodies < 20 * 200, "the 20 email bodies only name it: {bodies} bytes");
    // Every email still carries the attachment when read for delivery.
    let id = r.json["data"]["emails"][7]["email"].as_str().unwrap();
    let email = st.store.email(&p.id, id).await.unwrap().unwrap();
    assert!(email.attachments.contains("big.bin") && email.attachments.len() > 1_300_000);
}

#[tokio::test]
async fn a_chain_of_segment_references_past_the_size_limit_is_refused_naming_it() {
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let plain = json!({"logic": "AND", "groups": [{"filters": [{"field": "data.plan", "operator": "equals", "value": "pro"}]}]});
    let r = p.secret.post("/segments", json!({"name": "level 5", "condition": plain})).await;
    assert_eq!(r.status, 201, "{}", r.json);
    let mut below = r.json["id"].as_str().unwrap().to_string();
    // Each level references the one below ten times: level 2 expands to 3,222 nodes, level 1 to 32,222.
    for level in (1..5).rev() {
        let filters: Vec<Value> =
            (0..10).map(|_| json!({"field": format!("segment.{below}"), "operator": "memberOfSegment"})).collect();
        let condition = json!({"logic": "OR", "groups": [{"filters": filters}]});
        let r = p.secret.post("/segments", json!({"name": format!("level {level}"), "condition": condition})).await;
        if level > 1 {
            assert_eq!(r.status, 201, "level {level}: {}", r.json);
            below = r.json["id"].as_str().unwrap().to_string();
        } else {
            assert_envelope(&r, 422, "VALIDATION_ERROR");
            assert_eq!(r.json["error"]["errors"][0]["field"], "condition", "{}", r.json);
            assert!(r.json.to_string().contains("20000 nodes"), "{}", r.json);
        }
    }
}

#[tokio::test]
async fn asking_the_count_of_an_event_name_nobody_tracked_stores_nothing() {
    use herald_host::store::tallies::Scope;
    let s = Server::start().await;
    let p = proj(&s, "o@example.com").await;
    let st = std::sync::Arc::clone(&s.state);
    for n in 0..20 {
        let r = p.secret.get(&format!("/events/never-{n}/usage")).await;
        assert_eq!(r.json["eventCount"], 0, "{}", r.json);
        assert_eq!(p.secret.get(&format!("/events?name=never-{n}")).await.status, 200);
    }
    for n in 0..20 {
        let name = format!("never-{n}");
        assert_eq!(st.store.tally(&p.id, Scope::EventName(&name)).await.unwrap(), None, "{name} stored a tally");
    }
    // A name that has events is counted (and its count kept), and stays right as events come.
    let r = p.secret.post("/v1/track", json!({ "email": "ann@example.com", "event": "signup" })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let usage = p.secret.get("/events/signup/usage").await;
    assert_eq!(usage.json["eventCount"], 1, "{}", usage.json);
    assert!(st.store.tally(&p.id, Scope::EventName("signup")).await.unwrap().is_some());
    p.secret.post("/v1/track", json!({ "email": "bob@example.com", "event": "signup" })).await;
    assert_eq!(p.secret.get("/events/signup/usage").await.json["eventCount"], 2);
    s.stop().await;
}

#[tokio::test]
async fn the_api_reference_carries_the_dashboards_security_headers() {
    let s = Server::start().await;
    let http = reqwest::Client::new();
    for path in ["/docs/", "/docs/index.html", "/docs/swagger-ui.css"] {
        let r = http.get(format!("{}{path}", s.base)).send().await.unwrap();
        let h = r.headers();
        let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        assert_eq!(get("x-frame-options"), "DENY", "{path}");
        assert_eq!(get("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(get("referrer-policy"), "no-referrer", "{path}");
        let csp = get("content-security-policy");
        assert!(csp.contains("frame-ancestors 'none'") && csp.contains("connect-src 'self'"), "{path}: {csp}");
    }
    s.stop().await;
}
