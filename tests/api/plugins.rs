//! The plugin platform through the real wasmtime runtime with built components: loading and listing,
//! limits (trap, infinite loop, memory hog, panic), ABI refusal, hot reload under load, outbound HTTP
//! policy, and a project delivering through a transport plugin.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use herald_host::config::{Config, PluginGrant};
use herald_host::plugins::{CallError, Execution, StepContact, StepInput, Value};
use serde_json::json;

use crate::harness::{Server, proj};
use crate::http_sink;
use crate::plugin_kit::{self, Artifact};

fn config_with(plugins: &[Artifact]) -> Config {
    let config = Config::for_tests();
    for p in plugins {
        plugin_kit::install(&config.plugins_dir, *p);
    }
    config
}

fn grant(config: &mut Config, name: &str, g: PluginGrant) {
    config.plugin_grants.insert(name.to_string(), g);
}

fn texts(v: &[&str]) -> Vec<Value> {
    v.iter().map(|s| Value::Text(s.to_string())).collect()
}

fn step_input(step_type: &str, config: serde_json::Value) -> StepInput {
    StepInput {
        step_type: step_type.into(),
        config: config.to_string(),
        contact: StepContact {
            id: "c1".into(),
            email: "ada@example.com".into(),
            subscribed: true,
            data: json!({"plan": "pro", "firstName": "Ada"}).to_string(),
        },
        execution: Execution {
            project_id: "p1".into(),
            workflow_id: "w1".into(),
            execution_id: "x1".into(),
            step_id: "s1".into(),
            attempt: 1,
            now_ms: 1_800_000_000_000,
            event: None,
        },
    }
}

#[tokio::test]
async fn plugins_load_list_and_a_wrong_abi_is_refused_with_the_supported_versions() {
    let s = Server::start_with(config_with(&[plugin_kit::OPERATORS, plugin_kit::WRONG_ABI, plugin_kit::ABI_1_0]), None)
        .await;
    let p = proj(&s, "plugins@example.com").await;
    assert_eq!(s.client().get("/plugins").await.status, 401, "needs a session or a key");
    let r = p.secret.get("/plugins").await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["supportedAbi"], json!(["1.0.0", "1.1.0"]));
    let list = r.json["plugins"].as_array().unwrap();
    let ops = list.iter().find(|p| p["name"] == "operators").expect("operators listed");
    assert_eq!(ops["status"], "loaded", "{ops}");
    assert_eq!(ops["kind"], "operator");
    assert_eq!(ops["abiVersion"], "1.1.0", "the SDK builds against the newest 1.x");
    let old = list.iter().find(|p| p["name"] == "abi-1-0").expect("abi-1-0 listed");
    assert_eq!((&old["status"], &old["abiVersion"]), (&json!("loaded"), &json!("1.0.0")), "{old}");
    let got = s.state.plugins.evaluate("oldAbi", &Value::Null, &[Value::Null, Value::Integer(2)]).await;
    assert_eq!(got.unwrap(), vec![true, true], "a guest built against 1.0.0 runs on a host whose newest is 1.1.0");
    for name in ["matchesRegex", "domainIs", "semverAtLeast", "anniversaryWithin"] {
        assert!(ops["provides"].as_array().unwrap().iter().any(|v| v == name), "{name} in {ops}");
    }
    let wrong = list.iter().find(|p| p["name"] == "wrong-abi").expect("wrong-abi listed");
    assert_eq!(wrong["status"], "failed", "{wrong}");
    let err = wrong["error"].as_str().unwrap();
    assert!(err.contains("herald:plugin@2.0.0") && err.contains("supported: 1.0.0, 1.1.0"), "{err}");

    // the operators evaluate in batches, one result per value
    let got = s.state.plugins.evaluate("matchesRegex", &Value::Text("^a.*z$".into()), &texts(&["abcz", "nope"])).await;
    assert_eq!(got.unwrap(), vec![true, false]);
    let got = s
        .state
        .plugins
        .evaluate("domainIs", &Value::Text("Example.com".into()), &[Value::Text("x@example.com".into()), Value::Null])
        .await;
    assert_eq!(got.unwrap(), vec![true, false], "missing values are false");
    let bad = s.state.plugins.validate_operand("matchesRegex", &Value::Text("(".into())).await.unwrap();
    assert!(bad.is_err(), "an invalid regex is refused when a condition is saved");

    let metrics = reqwest::get(format!("{}/metrics", s.base)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("herald_plugin_calls_total{plugin=\"operators\"} 3"), "{metrics}");
    assert!(metrics.contains("herald_plugin_loaded{plugin=\"wrong-abi\"} 0"), "{metrics}");
    let r = p.secret.get("/plugins").await;
    let ops = r.json["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "operators").unwrap().clone();
    assert_eq!(ops["calls"], 3);
    s.stop().await;
}

#[tokio::test]
async fn a_misbehaving_operator_fails_only_its_own_call() {
    let mut config = config_with(&[plugin_kit::BAD_OPERATOR]);
    grant(&mut config, "misbehaving-operator", PluginGrant { timeout_ms: Some(300), ..Default::default() });
    let s = Server::start_with(config, None).await;
    let plugins = &s.state.plugins;
    let yes = texts(&["yes", "no"]);

    let e = plugins.evaluate("trap", &Value::Null, &yes).await.unwrap_err();
    assert!(matches!(e, CallError::Trap { .. }), "{e:?}");
    assert!(e.to_string().contains("misbehaving-operator"), "{e}");

    let started = Instant::now();
    let e = plugins.evaluate("spin", &Value::Null, &yes).await.unwrap_err();
    assert!(matches!(e, CallError::Timeout { .. } | CallError::OutOfFuel { .. }), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "an infinite loop is stopped");

    let e = plugins.evaluate("hog", &Value::Null, &yes).await.unwrap_err();
    assert!(matches!(e, CallError::OutOfMemory { mb: 16, .. }), "{e:?}");
    assert_eq!(e.to_string(), "plugin `misbehaving-operator` exceeded its memory limit of 16 MiB");

    let e = plugins.evaluate("panic", &Value::Null, &yes).await.unwrap_err();
    match &e {
        CallError::Panic { message, .. } => assert!(message.contains("fixture panic"), "{e}"),
        other => panic!("expected a panic, got {other:?}"),
    }

    // the plugin and the host keep serving
    assert_eq!(plugins.evaluate("ok", &Value::Null, &yes).await.unwrap(), vec![true, false]);
    let health = reqwest::get(format!("{}/health", s.base)).await.unwrap();
    assert_eq!(health.status(), 200);
    s.stop().await;
}

#[tokio::test]
async fn a_misbehaving_step_fails_only_its_own_call_and_loopback_needs_the_operators_consent() {
    let sink = http_sink::start(200, "{}").await;
    let mut config = config_with(&[plugin_kit::BAD_STEP, plugin_kit::WEBHOOK]);
    grant(&mut config, "misbehaving-step", PluginGrant { timeout_ms: Some(300), ..Default::default() });
    let s = Server::start_with(config, None).await;
    let plugins = &s.state.plugins;

    let e = plugins.execute_step(&step_input("TRAP", json!({}))).await.unwrap_err();
    assert!(matches!(e, CallError::Trap { .. }), "{e:?}");
    let e = plugins.execute_step(&step_input("SPIN", json!({}))).await.unwrap_err();
    assert!(matches!(e, CallError::Timeout { ms: 300, .. }), "{e:?}");
    let e = plugins.execute_step(&step_input("HOG", json!({}))).await.unwrap_err();
    assert!(matches!(e, CallError::OutOfMemory { .. }), "{e:?}");
    let ok = plugins.execute_step(&step_input("OK", json!({}))).await.unwrap();
    assert_eq!(ok.output.as_deref(), Some(r#"{"ok":true}"#));

    // outbound HTTP to loopback is refused without the operator's consent, from any step
    let e = plugins.execute_step(&step_input("FETCH", json!({"url": sink.url("/x")}))).await.unwrap_err();
    match &e {
        CallError::Guest { code, retryable, .. } => assert_eq!((code.as_str(), *retryable), ("denied", false)),
        other => panic!("expected denied, got {other:?}"),
    }
    let webhook = step_input("WEBHOOK", json!({"url": sink.url("/hook"), "body": {"email": "{{contact.email}}"}}));
    let e = plugins.execute_step(&webhook).await.unwrap_err();
    assert!(matches!(&e, CallError::Guest { retryable: false, .. }), "{e:?}");
    assert!(sink.requests().is_empty(), "nothing reached the loopback receiver");
    s.stop().await;

    // with allow_private the same webhook goes through, rendered
    let mut config = config_with(&[plugin_kit::WEBHOOK]);
    grant(&mut config, "webhook", PluginGrant { allow_private: true, ..Default::default() });
    let s = Server::start_with(config, None).await;
    // The step type is listed with the config schema the plugin publishes, for a form to be built from.
    let p = proj(&s, "schema@example.com").await;
    let r = p.secret.get("/plugins").await;
    let types = r.json["stepTypes"].as_array().unwrap();
    let t = types.iter().find(|t| t["name"] == "WEBHOOK").unwrap_or_else(|| panic!("{}", r.json));
    assert_eq!(t["configSchema"]["required"], json!(["url"]), "{t}");
    assert_eq!(t["configSchema"]["properties"]["url"]["type"], "string", "{t}");
    let out = s.state.plugins.execute_step(&webhook).await.unwrap();
    let output: serde_json::Value = serde_json::from_str(out.output.as_deref().unwrap()).unwrap();
    assert_eq!(output["status"], 200, "{output}");
    let got = sink.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/hook");
    let body: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(body["email"], "ada@example.com");
    s.stop().await;
}

#[tokio::test]
async fn a_webhook_redirected_to_another_host_sends_it_no_credentials_or_custom_headers() {
    let sink = http_sink::start(200, "{}").await;
    let redirector = http_sink::redirect_to(sink.url("/landing")).await;
    let mut config = config_with(&[plugin_kit::WEBHOOK]);
    grant(&mut config, "webhook", PluginGrant { allow_private: true, ..Default::default() });
    let s = Server::start_with(config, None).await;
    let webhook = step_input(
        "WEBHOOK",
        json!({ "url": format!("http://{redirector}/hook"), "method": "GET",
                "headers": { "Authorization": "Bearer crm-secret", "Cookie": "sid=1", "X-Api-Key": "k-1" } }),
    );
    let out = s.state.plugins.execute_step(&webhook).await.unwrap();
    let output: serde_json::Value = serde_json::from_str(out.output.as_deref().unwrap()).unwrap();
    assert_eq!(output["status"], 200, "{output}");
    let got = sink.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/landing");
    for gone in ["authorization", "cookie", "x-api-key"] {
        assert!(got[0].header(gone).is_none(), "{gone} followed the redirect to another origin: {:?}", got[0].headers);
    }
    s.stop().await;
}

#[tokio::test]
async fn update_contact_returns_a_patch() {
    let s = Server::start_with(config_with(&[plugin_kit::UPDATE_CONTACT]), None).await;
    let input = step_input("UPDATE_CONTACT", json!({"updates": {"plan": "team"}, "subscriptionAction": "unsubscribe"}));
    let out = s.state.plugins.execute_step(&input).await.unwrap();
    let patch = out.patch.expect("a patch");
    assert_eq!(patch.subscribed, Some(false));
    let data: serde_json::Value = serde_json::from_str(patch.data.as_deref().unwrap()).unwrap();
    assert_eq!(data, json!({"plan": "team"}));
    let problems = s.state.plugins.validate_step_config("UPDATE_CONTACT", r#"{"subscriptionAction":"maybe"}"#).await;
    assert!(problems.unwrap().is_err());
    s.stop().await;
}

async fn wait_until(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn hot_reload_swaps_versions_under_concurrent_calls_without_failures() {
    let config = config_with(&[plugin_kit::VERSION_A]);
    let dir = config.plugins_dir.clone();
    let s = Server::start_with(config, None).await;
    let plugins = s.state.plugins.clone();
    assert_eq!(plugins.evaluate("whichVersion", &Value::Null, &[Value::Null]).await.unwrap(), vec![true]);

    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let seen_b = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (plugins, stop, failures, seen_b) = (plugins.clone(), stop.clone(), failures.clone(), seen_b.clone());
        tasks.push(tokio::spawn(async move {
            let mut calls = 0usize;
            while !stop.load(Ordering::Relaxed) {
                match plugins.evaluate("whichVersion", &Value::Null, &[Value::Null]).await {
                    Ok(v) if v == vec![false] => {
                        seen_b.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("call failed during reload: {e}");
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
                calls += 1;
                tokio::task::yield_now().await;
            }
            calls
        }));
    }
    // drop version B over A, in place, as an operator would
    tokio::time::sleep(Duration::from_millis(100)).await;
    std::fs::write(dir.join("versioned.wasm"), plugin_kit::wasm(plugin_kit::VERSION_B)).unwrap();
    wait_until("version B to serve", async || seen_b.load(Ordering::Relaxed) > 100).await;
    let listed = s.state.plugins.list();
    let v = listed.iter().find(|p| p.name == "versioned").unwrap();
    assert_eq!(v.version.as_deref(), Some("2.0.0"));

    // a broken new version leaves B serving and reports the error
    let before_broken = seen_b.load(Ordering::Relaxed);
    std::fs::write(dir.join("versioned.wasm"), b"\0asm this is not a component").unwrap();
    wait_until("the load error to show", async || {
        s.state.plugins.list().iter().any(|p| p.name == "versioned" && p.error.is_some())
    })
    .await;
    let v = s.state.plugins.list().into_iter().find(|p| p.name == "versioned").unwrap();
    assert_eq!((v.status.as_str(), v.version.as_deref()), ("loaded", Some("2.0.0")), "{v:?}");
    assert_eq!(plugins.evaluate("whichVersion", &Value::Null, &[Value::Null]).await.unwrap(), vec![false]);
    // the concurrent callers keep being served by B across the failed load
    wait_until("calls to go on after the failed load", async || seen_b.load(Ordering::Relaxed) > before_broken + 20)
        .await;

    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let on_a = total - seen_b.load(Ordering::Relaxed);
    assert!(on_a > 0, "the callers ran before the reload too ({on_a} calls on A of {total})");
    assert_eq!(failures.load(Ordering::Relaxed), 0, "no call failed because of a reload");

    // removing the file unloads the plugin
    std::fs::remove_file(dir.join("versioned.wasm")).unwrap();
    wait_until("the plugin to unload", async || s.state.plugins.operator("whichVersion").is_none()).await;
    s.stop().await;
}

#[tokio::test]
async fn a_restart_loads_the_precompiled_artifact_from_the_cache() {
    let cache = herald_host::config::Config::test_scratch().join(format!("cache-test-{}", uuid::Uuid::new_v4()));
    let mut config = config_with(&[plugin_kit::OPERATORS]);
    config.plugin_cache_dir = cache.clone();
    let s = Server::start_with(config.clone(), None).await;
    assert_eq!(s.state.plugins.list()[0].status.as_str(), "loaded");
    s.stop().await;
    let artifacts: Vec<_> = std::fs::read_dir(&cache).unwrap().filter_map(|e| e.ok()).collect();
    assert_eq!(artifacts.len(), 1, "one precompiled artifact, named by content and engine");
    let written = artifacts[0].metadata().unwrap().modified().unwrap();
    let s = Server::start_with(config, None).await;
    assert_eq!(s.state.plugins.list()[0].status.as_str(), "loaded");
    let again: Vec<_> = std::fs::read_dir(&cache).unwrap().filter_map(|e| e.ok()).collect();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].metadata().unwrap().modified().unwrap(), written, "the restart did not recompile");
    s.stop().await;
}

async fn email_status(s: &Server, project: &str, id: &str) -> String {
    s.state.store.email(project, id).await.unwrap().unwrap().status.to_string()
}

async fn post_notification(s: &Server, transport: &str, body: &serde_json::Value, key: &[u8]) -> crate::harness::Resp {
    let raw = serde_json::to_vec(body).unwrap();
    let ts = herald_host::infra::clock::wall_now_ms() / 1000;
    let sig = herald_host::api::notifications::sign(key, ts, &raw);
    crate::harness::signed_post(s, &format!("/webhooks/notifications/{transport}"), raw, ts, sig).await
}

#[tokio::test]
async fn a_project_switched_to_the_http_transport_plugin_delivers_to_a_local_receiver() {
    use base64::Engine as _;
    let receiver = http_sink::start(200, r#"{"id":"prov-123"}"#).await;
    let mut config = config_with(&[plugin_kit::HTTP]);
    grant(
        &mut config,
        "http",
        PluginGrant {
            allow_private: true,
            config: [("url".to_string(), receiver.url("/mail"))].into(),
            secrets: [("signing_key".to_string(), "k3y-k3y".to_string())].into(),
            ..Default::default()
        },
    );
    let s = Server::start_with(config, None).await;
    let p = proj(&s, "transport@example.com").await;
    let st = s.state.clone();
    st.domains.add(&st.store, &p.id, "shop.test", true, st.clock.now_ms()).await.unwrap();

    let path = format!("/users/@me/projects/{}", p.id);
    let r = p.session.patch(&path, json!({"transport": "carrier-pigeon"})).await;
    crate::harness::assert_envelope(&r, 422, "VALIDATION_ERROR");
    assert_eq!(r.json["error"]["errors"][0]["field"], "transport", "{}", r.json);
    let r = p.session.patch(&path, json!({"transport": "http"})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["transport"], "http");

    let r = p
        .secret
        .post(
            "/v1/send",
            json!({"to": "ada@example.org", "from": "news@shop.test", "subject": "Plugged in", "body": "<p>Hi</p>"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let id = r.json["data"]["emails"][0]["email"].as_str().unwrap().to_string();
    for _ in 0..400 {
        if email_status(&s, &p.id, &id).await == "SENT" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(email_status(&s, &p.id, &id).await, "SENT");
    let got = receiver.requests();
    assert_eq!(got.len(), 1, "one POST per message");
    assert_eq!((got[0].method.as_str(), got[0].path.as_str()), ("POST", "/mail"));
    // signed with the plugin's secret, in Herald's notification signature scheme
    let ts: i64 = got[0].header("x-herald-timestamp").unwrap().parse().unwrap();
    let expected = herald_host::api::notifications::sign(b"k3y-k3y", ts, &got[0].body);
    assert_eq!(got[0].header("x-herald-signature"), Some(expected.as_str()));
    let msg: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(msg["subject"], "Plugged in");
    assert_eq!(msg["to"][0]["email"], "ada@example.org");
    assert_eq!(msg["tags"]["project"], p.id.as_str());
    let raw = base64::engine::general_purpose::STANDARD.decode(msg["raw"].as_str().unwrap()).unwrap();
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("DKIM-Signature:"), "the raw message is the DKIM-signed one: {raw}");
    assert!(raw.contains("Subject: Plugged in"));

    // the provider's notification, parsed and authenticated by the plugin, finds the email by its id
    let note = json!({"type": "delivery", "providerMessageId": "prov-123"});
    let r = post_notification(&s, "http", &note, b"k3y-k3y").await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["emails"], json!([id.clone()]));
    assert_eq!(email_status(&s, &p.id, &id).await, "DELIVERED");
    let again = post_notification(&s, "http", &note, b"k3y-k3y").await;
    assert_eq!((again.status, again.json["duplicate"].as_bool()), (200, Some(true)), "{}", again.json);
    let forged =
        post_notification(&s, "http", &json!({"type": "complaint", "providerMessageId": "prov-123"}), b"nope").await;
    crate::harness::assert_envelope(&forged, 401, "UNAUTHORIZED");
    assert_eq!(email_status(&s, &p.id, &id).await, "DELIVERED");
    let unknown = post_notification(&s, "nope", &note, b"k3y-k3y").await;
    crate::harness::assert_envelope(&unknown, 404, "TRANSPORT_NOT_FOUND");
    s.stop().await;
}
