//! The compliance suites against every first-party plugin's real artifact, and the 1.1.0 fixture.
//!
//! `cargo plugins` runs once per test binary into `$HERALD_WASM_TARGET_DIR`, or
//! `<CARGO_TARGET_TMPDIR>/../wasm-plugins` (the convention of the host's API tests).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use herald_plugin_testkit::compliance::{
    self, InboundCall, OperatorCase, OperatorProfile, StepCase, StepProfile, TransportProfile,
};
use herald_plugin_testkit::{
    FakeEndpoint, Harness, HarnessBuilder, ManualClock, Notification, NotificationKind, PluginGrant, Reply, Value,
    artifacts,
};
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

fn repo_root() -> PathBuf {
    manifest_dir().join("../..")
}

/// The folder holding the built components, building them once.
fn release_dir() -> &'static Path {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let target = std::env::var_os("HERALD_WASM_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("..").join("wasm-plugins"));
        artifacts::build(&repo_root(), &target, &["plugins"])
    });
    match built {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// A first-party plugin: its package and its folder under `plugins/`.
fn plugin(package: &str, folder: &str) -> HarnessBuilder {
    HarnessBuilder::new(
        release_dir().join(artifacts::wasm_file_name(package)),
        repo_root().join("plugins").join(folder).join("manifest.toml"),
    )
}

fn grant_for(endpoint: &FakeEndpoint, config: &[(&str, String)], secrets: &[(&str, &str)]) -> PluginGrant {
    PluginGrant {
        http: Some(vec![endpoint.authority()]),
        allow_private: true,
        config: config.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        secrets: secrets.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        ..PluginGrant::default()
    }
}

// ---------------------------------------------------------------------------------------------------
// http

const HTTP_KEY: &str = "k3y";

fn http_sign(key: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).expect("any key length");
    mac.update(format!("{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1={}", hex::encode(mac.finalize().into_bytes()))
}

fn http_notification(key: &str, now_ms: i64) -> InboundCall {
    let body = br#"{"type":"bounce","messageId":"testkit-1@herald.test","reason":"mailbox full","permanent":true}"#;
    let ts = now_ms.div_euclid(1000);
    InboundCall::new(body.to_vec())
        .header("X-Herald-Timestamp", ts.to_string())
        .header("X-Herald-Signature", http_sign(key, ts, body))
}

fn http_profile() -> TransportProfile {
    TransportProfile::new(|ep| grant_for(ep, &[("url", format!("{}/in", ep.url()))], &[("signing_key", HTTP_KEY)]))
        .accepted(Reply::new(202).json(&json!({"id": "prov-1"})), Some("prov-1"))
        .received(|req, msg, ctx| {
            if (req.method.as_str(), req.path()) != ("POST", "/in") {
                return Err(format!("{} {}", req.method, req.target));
            }
            let body = req.json().ok_or("the body is not JSON")?;
            if body["messageId"] != msg.message_id.as_str() {
                return Err(format!("messageId {}", body["messageId"]));
            }
            let raw = BASE64.decode(body["raw"].as_str().unwrap_or_default()).map_err(|e| e.to_string())?;
            if raw != msg.raw {
                return Err("raw is not the message's bytes".into());
            }
            let ts: i64 = req.header("x-herald-timestamp").and_then(|t| t.parse().ok()).ok_or("no timestamp")?;
            let key = ctx.secret("signing_key").ok_or("no key")?;
            if req.header("x-herald-signature") != Some(http_sign(key, ts, &req.body).as_str()) {
                return Err("the signature does not verify".into());
            }
            Ok(())
        })
        .temporary(Reply::new(503).body("down"))
        .temporary(Reply::new(401).body("bad token"))
        .temporary(Reply::new(403))
        .temporary(Reply::new(404).body("no such path"))
        .temporary(Reply::new(408))
        .permanent(Reply::new(422).body("recipient rejected"))
        .permanent(Reply::new(400).body("malformed address"))
        .rate_limited(Reply::new(429).header("Retry-After", "2"), Some(2000))
        .unconfigured("no url", |ep| grant_for(ep, &[], &[("signing_key", HTTP_KEY)]))
        .notification(
            |ctx| http_notification(ctx.secret("signing_key").unwrap_or_default(), ctx.now_ms),
            vec![Notification {
                kind: NotificationKind::Bounce,
                message_id: Some("testkit-1@herald.test".into()),
                provider_message_id: None,
                permanent: true,
                reason: Some("mailbox full".into()),
            }],
        )
        .forged_notification(|ctx| http_notification("not-the-key", ctx.now_ms))
        .forged_notification(|ctx| {
            http_notification(ctx.secret("signing_key").unwrap_or_default(), ctx.now_ms - 3_600_000)
        })
}

#[tokio::test]
async fn http_transport_complies() {
    let report = compliance::transport(&plugin("herald-plugin-http", "http"), &http_profile()).await;
    println!("{report}");
    report.assert_passed();
    assert!(report.passed.len() >= 18, "{report}\n{:?}", report.passed);
}

#[tokio::test]
async fn http_transport_under_a_manual_clock() {
    // Notifications are checked against the plugin's clock, which a ManualClock moves.
    let clock = ManualClock::new(1_700_000_000_000);
    let plugin = plugin("herald-plugin-http", "http").manual_clock(clock.clone());
    let endpoint = FakeEndpoint::start().unwrap();
    let grant = grant_for(&endpoint, &[("url", endpoint.url())], &[("signing_key", HTTP_KEY)]);
    let harness = plugin.load(grant).await.unwrap();
    assert_eq!(harness.now_ms(), 1_700_000_000_000);
    let call = http_notification(HTTP_KEY, 1_700_000_000_000);
    let parsed = harness.parse_notifications(call.headers.clone(), call.body.clone()).await.unwrap();
    assert_eq!(parsed.map(|n| n.len()), Ok(1));
    clock.advance(10 * 60 * 1000);
    let parsed = harness.parse_notifications(call.headers, call.body).await.unwrap();
    assert!(parsed.is_err_and(|e| e.contains("5 minutes")));
    // and the request is signed with the plugin's time
    endpoint.push(Reply::ok());
    harness.send(&herald_plugin_testkit::sample_message()).await.unwrap();
    let sent = endpoint.take_requests();
    assert_eq!(sent[0].header("x-herald-timestamp"), Some("1700000600"));
}

/// The suite catches a plugin that does not behave as its profile says.
#[tokio::test]
async fn the_transport_suite_reports_what_fails() {
    let profile = http_profile().without_timeout_check().permanent(Reply::new(401).body("wrong on purpose"));
    let report = compliance::transport(&plugin("herald-plugin-http", "http"), &profile).await;
    assert!(!report.is_ok());
    assert_eq!(report.failed.len(), 1, "{report}");
    let problem = report.failure("permanent failure (401, wrong on purpose)").expect("the failed check");
    assert!(problem.contains("Temporary"), "{problem}");
    let text = report.to_string();
    assert!(text.contains("1 failed"), "{text}");
}

// ---------------------------------------------------------------------------------------------------
// ses

fn ses_error(status: u16, code: &str, message: &str) -> Reply {
    Reply::new(status).header("x-amzn-ErrorType", code).json(&json!({"message": message}))
}

fn ses_sns(token: &str) -> InboundCall {
    let event = json!({
        "eventType": "Bounce",
        "mail": {"messageId": "0100-abc", "commonHeaders": {"messageId": "<testkit-1@herald.test>"}},
        "bounce": {"bounceType": "Permanent", "bounceSubType": "General",
                   "bouncedRecipients": [{"emailAddress": "ada@example.org", "diagnosticCode": "550 5.1.1 unknown"}]}
    });
    let body = json!({"Type": "Notification", "MessageId": "sns-1", "Message": event.to_string()});
    InboundCall::new(body.to_string()).header("X-Herald-Token", token)
}

fn ses_grant(ep: &FakeEndpoint, credentials: bool) -> PluginGrant {
    let mut secrets = vec![("notification_token", "tok")];
    if credentials {
        secrets.extend([("access_key_id", "AKIDEXAMPLE"), ("secret_access_key", "wJalrXUtnFEMI/K7MDENG")]);
    }
    grant_for(ep, &[("endpoint", ep.url()), ("region", "eu-west-1".into())], &secrets)
}

fn ses_profile() -> TransportProfile {
    TransportProfile::new(|ep| ses_grant(ep, true))
        .accepted(Reply::new(200).json(&json!({"MessageId": "0100-abc"})), Some("0100-abc"))
        .received(|req, msg, _| {
            if (req.method.as_str(), req.path()) != ("POST", "/v2/email/outbound-emails") {
                return Err(format!("{} {}", req.method, req.target));
            }
            let auth = req.header("authorization").unwrap_or_default();
            if !auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/") || !auth.contains("/eu-west-1/ses/") {
                return Err(format!("authorization {auth:?}"));
            }
            let body = req.json().ok_or("the body is not JSON")?;
            let raw = BASE64.decode(body["Content"]["Raw"]["Data"].as_str().unwrap_or_default());
            if raw.ok().as_ref() != Some(&msg.raw) {
                return Err("Content.Raw.Data is not the message".into());
            }
            if body["Destination"]["ToAddresses"] != json!(msg.rcpt_to) {
                return Err(format!("Destination {}", body["Destination"]));
            }
            Ok(())
        })
        .temporary(Reply::new(503).body("Service Unavailable"))
        .temporary(ses_error(403, "InvalidClientTokenId", "The security token included in the request is invalid."))
        .temporary(ses_error(403, "SignatureDoesNotMatch", "The request signature we calculated does not match."))
        .temporary(ses_error(400, "AccountSuspendedException", "sending is disabled"))
        .temporary(ses_error(404, "NotFoundException", "Configuration set does not exist."))
        .permanent(ses_error(400, "MessageRejected", "Email address is not verified."))
        .permanent(ses_error(400, "BadRequestException", "Illegal address"))
        .rate_limited(ses_error(429, "TooManyRequestsException", "slow down").header("Retry-After", "3"), Some(3000))
        .rate_limited(ses_error(400, "Throttling", "Daily message quota exceeded."), Some(3_600_000))
        .unconfigured("no credentials", |ep| ses_grant(ep, false))
        .notification(
            |_| ses_sns("tok"),
            vec![Notification {
                kind: NotificationKind::Bounce,
                message_id: Some("testkit-1@herald.test".into()),
                provider_message_id: Some("0100-abc".into()),
                permanent: true,
                reason: Some("Permanent/General: 550 5.1.1 unknown".into()),
            }],
        )
        .forged_notification(|_| ses_sns("forged"))
        .forged_notification(|_| {
            let mut call = ses_sns("tok");
            call.headers = vec![("Authorization".into(), format!("Basic {}", BASE64.encode("herald:nope")))];
            call
        })
}

#[tokio::test]
async fn ses_transport_complies() {
    let report = compliance::transport(&plugin("herald-plugin-ses", "ses"), &ses_profile()).await;
    println!("{report}");
    report.assert_passed();
    assert!(report.passed.len() >= 18, "{report}\n{:?}", report.passed);
}

// ---------------------------------------------------------------------------------------------------
// steps

#[tokio::test]
async fn webhook_step_complies() {
    let case = StepCase::new("WEBHOOK", |ep| {
        json!({
            "url": format!("{}/hook/{{{{contact.id}}}}", ep.url()),
            "headers": {"X-Step": "{{stepId}}"},
            "body": {"email": "{{contact.email}}", "plan": "{{contact.data.plan}}", "event": "{{event.name}}"}
        })
        .to_string()
    })
    .bad_config(r#"{"method": "POST"}"#)
    .bad_config(r#"{"url": 5}"#)
    .bad_config(r#"{"url": "https://example.com", "method": "TRACE"}"#)
    .bad_config(r#"{"url": "ftp://example.com"}"#)
    .bad_config(r#""not an object""#)
    .reply(Reply::new(200).json(&json!({"received": true})))
    .check(|run| {
        let [req] = run.requests else { return Err(format!("{} requests", run.requests.len())) };
        if req.path() != "/hook/c-1" || req.header("x-step") != Some("s-1") {
            return Err(format!("{} x-step={:?}", req.target, req.header("x-step")));
        }
        let body = req.json().ok_or("not JSON")?;
        if body != json!({"email": "ada@example.org", "plan": "pro", "event": "signup"}) {
            return Err(format!("body {body}"));
        }
        let output: serde_json::Value = serde_json::from_str(run.outcome.output.as_deref().unwrap_or("null")).unwrap();
        if output["status"] != 200 || output["ok"] != true {
            return Err(format!("output {output}"));
        }
        Ok(())
    });
    let report =
        compliance::step(&plugin("herald-plugin-webhook", "webhook"), &StepProfile::new().step_type(case)).await;
    report.assert_passed();
}

#[tokio::test]
async fn update_contact_step_complies() {
    let case = StepCase::new("UPDATE_CONTACT", |_| {
        json!({"updates": {"plan": "team"}, "subscriptionAction": "unsubscribe"}).to_string()
    })
    .bad_config("{}")
    .bad_config(r#"{"updates": 5}"#)
    .bad_config(r#"{"subscriptionAction": "maybe"}"#)
    .bad_config("[]")
    .check(|run| {
        let patch = run.outcome.patch.as_ref().ok_or("no patch")?;
        let data: serde_json::Value = serde_json::from_str(patch.data.as_deref().unwrap_or("null")).unwrap();
        if data != json!({"plan": "team"}) || patch.subscribed != Some(false) {
            return Err(format!("patch {patch:?}"));
        }
        if !run.requests.is_empty() {
            return Err("the step made HTTP requests".into());
        }
        Ok(())
    });
    let profile = StepProfile::new().step_type(case);
    let report = compliance::step(&plugin("herald-plugin-update-contact", "update-contact"), &profile).await;
    report.assert_passed();
}

// ---------------------------------------------------------------------------------------------------
// operators

/// 2024-03-01T00:00:00Z
const MARCH_1_2024: i64 = 1_709_251_200_000;
/// 1990-03-05T00:00:00Z and 1990-06-01T00:00:00Z
const MARCH_5_1990: i64 = 636_595_200_000;
const JUNE_1_1990: i64 = 644_198_400_000;

fn text(s: &str) -> Value {
    Value::Text(s.into())
}

#[tokio::test]
async fn operators_comply() {
    let plugin = plugin("herald-plugin-operators", "operators").manual_clock(ManualClock::new(MARCH_1_2024));
    let profile = OperatorProfile::new()
        .operator(
            OperatorCase::new("matchesRegex", text("^ada@"))
                .bad_operand(text("("))
                .bad_operand(Value::Integer(1))
                .true_for(text("ada@example.org"))
                .true_for(Value::TextList(vec!["bob@x".into(), "ada@y".into()]))
                .false_for(text("bob@example.org")),
        )
        .operator(
            OperatorCase::new("domainIs", Value::TextList(vec!["example.org".into()]))
                .bad_operand(text(""))
                .bad_operand(Value::Integer(1))
                .true_for(text("Ada@EXAMPLE.org"))
                .false_for(text("ada@example.com"))
                .false_for(text("not an address")),
        )
        .operator(
            OperatorCase::new("semverAtLeast", text("1.2.0"))
                .bad_operand(Value::Integer(1))
                .true_for(text("1.10.0"))
                .true_for(text("v1.2"))
                .false_for(text("1.1.9")),
        )
        .operator(
            // honours the plugin's clock: "today" is 2024-03-01
            OperatorCase::new("anniversaryWithin", Value::Integer(7))
                .bad_operand(Value::Integer(-1))
                .bad_operand(text("7"))
                .true_for(Value::Timestamp(MARCH_5_1990))
                .true_for(text("1990-03-05"))
                .false_for(Value::Timestamp(JUNE_1_1990)),
        );
    compliance::operator(&plugin, &profile).await.assert_passed();
}

// ---------------------------------------------------------------------------------------------------
// the herald:plugin@1.1.0 fixture

fn minor() -> HarnessBuilder {
    HarnessBuilder::new(
        release_dir().join(artifacts::wasm_file_name("herald-fixture-minor-1-1")),
        repo_root().join("plugins/fixtures/minor-1-1/manifest.toml"),
    )
}

#[tokio::test]
async fn a_1_1_0_guest_loads_and_counts() {
    let harness = minor().load(PluginGrant::default()).await.unwrap();
    let status = harness.status().unwrap();
    assert_eq!(status.abi_version.as_deref(), Some("1.1.0"));
    assert_eq!(status.provides, vec!["countCalls".to_string()]);
    assert_eq!(harness.loaded().map(|p| p.abi.clone()).as_deref(), Some("1.1.0"));
    let values = [Value::Null, Value::Integer(1), text("x")];
    assert_eq!(harness.evaluate("countCalls", &Value::Null, &values).await, Ok(vec![true; 3]));
    assert_eq!(harness.evaluate("countCalls", &Value::Null, &values[..2]).await, Ok(vec![true; 2]));
    assert_eq!(harness.counter("evaluations"), Some(5));
    let metrics = harness.render_metrics();
    assert!(metrics.contains("herald_plugin_counter_total{plugin=\"minor\",counter=\"evaluations\"} 5\n"), "{metrics}");
}

/// The fixture is true for everything, null included, and the operator suite says so.
#[tokio::test]
async fn the_operator_suite_flags_null_matching() {
    let profile = OperatorProfile::new().operator(OperatorCase::new("countCalls", Value::Null));
    let report = compliance::operator(&minor(), &profile).await;
    assert_eq!(report.failed.len(), 1, "{report}");
    assert!(report.failure("countCalls: null and missing values are false").is_some(), "{report}");
}

// ---------------------------------------------------------------------------------------------------
// the harness itself

#[tokio::test]
async fn a_plugin_that_does_not_load_says_why() {
    let wrong = HarnessBuilder::new(
        release_dir().join(artifacts::wasm_file_name("herald-fixture-wrong-abi")),
        repo_root().join("plugins/fixtures/wrong-abi/manifest.toml"),
    );
    let err = wrong.load(PluginGrant::default()).await.unwrap_err();
    assert!(err.contains("wrong-abi") && err.contains("2.0.0"), "{err}");
    // a manifest given as text, naming another kind
    let manifest = "name = \"operators\"\nabi = \"1.1.0\"\nkind = \"step\"\n";
    let err = Harness::load(release_dir().join("herald_plugin_operators.wasm"), manifest, PluginGrant::default())
        .await
        .unwrap_err();
    assert!(err.contains("kind step"), "{err}");
}

#[tokio::test]
async fn a_step_that_times_out_leaves_the_host_serving() {
    let endpoint = FakeEndpoint::start().unwrap();
    endpoint.push(Reply::ok().delay(Duration::from_secs(3)));
    let grant = PluginGrant { allow_private: true, timeout_ms: Some(500), ..PluginGrant::default() };
    let harness = plugin("herald-plugin-webhook", "webhook").load(grant).await.unwrap();
    let config = json!({"url": endpoint.url()}).to_string();
    let input = herald_plugin_testkit::sample_step_input("WEBHOOK", &config, harness.now_ms());
    let started = std::time::Instant::now();
    let result = harness.execute_step(&input).await;
    assert!(result.as_ref().is_err_and(|e| e.retryable()), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let outcome = harness.execute_step(&input).await.unwrap();
    assert!(outcome.output.unwrap_or_default().contains("\"status\":200"));
    assert_eq!(harness.status().map(|s| (s.calls, s.failures)), Some((2, 1)));
}

/// The package's folder, as cargo says when it runs the test (a test binary reused from another checkout
/// that shares the target directory still reads this checkout), else where it was built.
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
}
