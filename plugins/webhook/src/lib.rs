//! The `WEBHOOK` workflow step (docs/behaviour.md#workflows): calls an HTTP endpoint and continues.
//!
//! Config: `{"url": "https://…", "method"?: "POST", "headers"?: {"Name": "value"}, "body"?: "text" | JSON}`.
//!
//! `{{path}}` placeholders in the URL, header values and body are rendered from
//! `{contact: {id, email, subscribed, data}, event: {name, data}, workflowId, executionId, stepId,
//! projectId}` — dotted paths such as `{{contact.email}}`, `{{contact.data.plan}}`,
//! `{{event.data.order.id}}`. A missing path renders as nothing. Values inserted into the URL are
//! percent-encoded; line breaks are dropped from header values. In a JSON body, a string that is
//! exactly one placeholder keeps the value's JSON type (`"{{contact.data}}"` inserts the object).
//!
//! Every request carries `Idempotency-Key: <executionId>:<stepId>` (unless the config sets that header),
//! the same on every attempt of the step. The request times out after 10 s. Any HTTP response, 2xx or not, is recorded in the step's output
//! (`{"status", "ok", "body", "truncated"}`, body cut at 1 KiB) and the flow continues. A timeout or
//! connection failure is a retryable error; a request the host refuses (a private or loopback address,
//! a host the operator did not allow) is a non-retryable `denied` error.
#![warn(missing_docs)]

use herald_sdk::http::{self, HttpError, Request};
use herald_sdk::serde_json::{Map, Value as Json, json};
use herald_sdk::{Metadata, PluginError, PluginKind, Step, StepInput, StepOutcome, StepTypeInfo, log};

/// The `webhook` plugin.
pub struct Webhook;

const STEP_TYPE: &str = "WEBHOOK";
const TIMEOUT_MS: u32 = 10_000;
const METHODS: [&str; 6] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];
/// How much of the response body the output keeps, in bytes.
const MAX_OUTPUT_BODY: usize = 1024;

impl Step for Webhook {
    fn metadata() -> Metadata {
        Metadata::new("webhook", env!("CARGO_PKG_VERSION"), PluginKind::Step)
            .description("WEBHOOK: calls an HTTP endpoint with {{placeholders}} rendered, records the response")
            .provides([STEP_TYPE])
    }

    fn step_types() -> Vec<StepTypeInfo> {
        vec![
            StepTypeInfo::new(STEP_TYPE, "Calls an HTTP endpoint; any response is recorded and the flow continues")
                .config_schema(json!({
                    "type": "object",
                    "required": ["url"],
                    "properties": {
                        "url": {"type": "string", "description": "http(s) URL; {{placeholders}} allowed"},
                        "method": {"enum": METHODS, "default": "POST"},
                        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                        "body": {"description": "text, or JSON whose strings may hold {{placeholders}}"}
                    }
                })),
        ]
    }

    fn validate_config(step_type: &str, config: &Json) -> Result<(), Vec<String>> {
        if step_type != STEP_TYPE {
            return Err(vec![format!("unknown step type {step_type:?}")]);
        }
        Config::parse(config).map(|_| ())
    }

    fn execute(input: &StepInput) -> Result<StepOutcome, PluginError> {
        let config = Config::parse(&input.config)
            .map_err(|problems| PluginError::permanent("bad_config", problems.join("; ")))?;
        let context = context(input);
        let url = render(&config.url, &context, Escape::Url);
        let mut request = Request::new(config.method, url).timeout_ms(TIMEOUT_MS);
        for (name, value) in &config.headers {
            request = request.header(name.clone(), render(value, &context, Escape::Header));
        }
        match &config.body {
            None => {}
            Some(Json::String(text)) => {
                if request.header_value("content-type").is_none() {
                    request = request.header("Content-Type", "text/plain; charset=utf-8");
                }
                request = request.body(render(text, &context, Escape::None));
            }
            Some(body) => {
                let rendered = render_json(body, &context);
                if request.header_value("content-type").is_none() {
                    request = request.header("Content-Type", "application/json");
                }
                request = request.body(rendered.to_string());
            }
        }
        // The same key on every attempt of this step of this execution: a receiver can drop the one repeat
        // a crash between the call and its record can cause.
        if request.header_value("idempotency-key").is_none() {
            let key = format!("{}:{}", input.execution.execution_id, input.execution.step_id);
            request = request.header("Idempotency-Key", key);
        }
        if request.header_value("user-agent").is_none() {
            request = request.header("User-Agent", concat!("Herald-Webhook/", env!("CARGO_PKG_VERSION")));
        }

        match http::fetch(&request) {
            Ok(response) => {
                let (body, truncated) = truncate(&response.body, MAX_OUTPUT_BODY);
                let status = response.status.to_string();
                if response.is_success() {
                    log::info("webhook called", &[("status", &status), ("step", &input.execution.step_id)]);
                } else {
                    log::warn(
                        "webhook answered with an error status",
                        &[("status", &status), ("step", &input.execution.step_id)],
                    );
                }
                Ok(StepOutcome::next().output(json!({
                    "status": response.status,
                    "ok": response.is_success(),
                    "body": body,
                    "truncated": truncated,
                })))
            }
            Err(HttpError::ResponseTooLarge) => {
                log::warn("webhook response too large", &[("step", &input.execution.step_id)]);
                Ok(StepOutcome::next().output(json!({"status": null, "ok": false, "error": "response_too_large"})))
            }
            Err(HttpError::Denied(reason)) => Err(PluginError::permanent(
                "denied",
                format!(
                    "the webhook URL is not allowed: {reason} (private, loopback and link-local addresses are \
                     refused unless the server's operator allows them)"
                ),
            )),
            Err(e @ HttpError::Timeout) => Err(PluginError::retryable("timeout", format!("the webhook {e}"))),
            Err(e) => Err(PluginError::retryable(e.code(), format!("the webhook {e}"))),
        }
    }
}

/// A checked WEBHOOK config.
struct Config {
    url: String,
    method: String,
    headers: Vec<(String, String)>,
    body: Option<Json>,
}

impl Config {
    fn parse(config: &Json) -> Result<Config, Vec<String>> {
        let Some(obj) = config.as_object() else {
            return Err(vec!["the WEBHOOK config must be a JSON object".into()]);
        };
        let mut problems = Vec::new();
        let url = match obj.get("url") {
            Some(Json::String(u)) if !u.trim().is_empty() => {
                let u = u.trim().to_owned();
                if let Err(p) = check_url(&u) {
                    problems.push(p);
                }
                u
            }
            Some(Json::String(_)) | None | Some(Json::Null) => {
                problems.push("url is required".into());
                String::new()
            }
            Some(_) => {
                problems.push("url must be a string".into());
                String::new()
            }
        };
        let method = match obj.get("method") {
            None | Some(Json::Null) => "POST".to_owned(),
            Some(Json::String(m)) if METHODS.contains(&m.trim().to_ascii_uppercase().as_str()) => {
                m.trim().to_ascii_uppercase()
            }
            Some(other) => {
                problems.push(format!("method must be one of {} (got {other})", METHODS.join(", ")));
                String::new()
            }
        };
        let mut headers = Vec::new();
        match obj.get("headers") {
            None | Some(Json::Null) => {}
            Some(Json::Object(h)) => {
                for (name, value) in h {
                    let valid_name = !name.is_empty()
                        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                    if !valid_name {
                        problems.push(format!("headers: {name:?} is not a valid header name"));
                    }
                    match value {
                        Json::String(v) if v.contains(['\r', '\n']) => {
                            problems.push(format!("headers: the value of {name:?} must not contain line breaks"))
                        }
                        Json::String(v) => headers.push((name.clone(), v.clone())),
                        Json::Number(_) | Json::Bool(_) => headers.push((name.clone(), value.to_string())),
                        _ => problems.push(format!("headers: the value of {name:?} must be a string")),
                    }
                }
            }
            Some(_) => problems.push("headers must be an object of header names to values".into()),
        }
        let body = match obj.get("body") {
            None | Some(Json::Null) => None,
            Some(b) => Some(b.clone()),
        };
        if problems.is_empty() { Ok(Config { url, method, headers, body }) } else { Err(problems) }
    }
}

/// The URL must be absolute http(s) with a host; placeholders may appear after the scheme.
fn check_url(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
        .ok_or_else(|| format!("url must start with http:// or https:// (got {url:?})"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() {
        return Err(format!("url has no host (got {url:?})"));
    }
    if render(url, &Json::Null, Escape::None).chars().any(char::is_whitespace) {
        return Err("url must not contain spaces".into());
    }
    Ok(())
}

/// The JSON that placeholders are resolved against.
fn context(input: &StepInput) -> Json {
    let event = input.execution.event.as_ref().map_or(Json::Null, |e| json!({"name": e.name, "data": e.data}));
    json!({
        "contact": {
            "id": input.contact.id,
            "email": input.contact.email,
            "subscribed": input.contact.subscribed,
            "data": input.contact.data,
        },
        "event": event,
        "workflowId": input.execution.workflow_id,
        "executionId": input.execution.execution_id,
        "stepId": input.execution.step_id,
        "projectId": input.execution.project_id,
    })
}

/// How a rendered value is made safe for where it goes.
#[derive(Clone, Copy)]
enum Escape {
    None,
    Url,
    Header,
}

/// Looks up a dotted path (`contact.data.plan`); array items by index (`items.0`).
fn lookup<'a>(context: &'a Json, path: &str) -> Option<&'a Json> {
    path.split('.').try_fold(context, |node, key| match node {
        Json::Object(map) => map.get(key),
        Json::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

fn as_text(value: &Json) -> String {
    match value {
        Json::Null => String::new(),
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Finds the next `{{ path }}` in `text`: (start, end, path).
fn next_placeholder(text: &str) -> Option<(usize, usize, &str)> {
    let start = text.find("{{")?;
    let close = text[start + 2..].find("}}")? + start + 2;
    Some((start, close + 2, text[start + 2..close].trim()))
}

/// Replaces every `{{path}}` in `template` with the value at that path.
fn render(template: &str, context: &Json, escape: Escape) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some((start, end, path)) = next_placeholder(rest) {
        out.push_str(&rest[..start]);
        let value = lookup(context, path).map(as_text).unwrap_or_default();
        match escape {
            Escape::None => out.push_str(&value),
            Escape::Url => percent_encode(&value, &mut out),
            Escape::Header => out.extend(value.chars().filter(|c| *c != '\r' && *c != '\n')),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Renders placeholders in every string of a JSON body (keys are left alone).
fn render_json(body: &Json, context: &Json) -> Json {
    match body {
        Json::String(s) => {
            if let Some((0, end, path)) = next_placeholder(s)
                && end == s.len()
            {
                return lookup(context, path).cloned().unwrap_or(Json::Null);
            }
            Json::String(render(s, context, Escape::None))
        }
        Json::Array(items) => Json::Array(items.iter().map(|i| render_json(i, context)).collect()),
        Json::Object(map) => {
            Json::Object(map.iter().map(|(k, v)| (k.clone(), render_json(v, context))).collect::<Map<_, _>>())
        }
        other => other.clone(),
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(value: &str, out: &mut String) {
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// The body as text, cut at `max` bytes on a character boundary; whether it was cut.
fn truncate(body: &[u8], max: usize) -> (String, bool) {
    let text = String::from_utf8_lossy(body);
    if text.len() <= max {
        return (text.into_owned(), false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_owned(), true)
}

herald_sdk::export_step!(Webhook);

#[cfg(test)]
mod tests {
    use super::*;
    use herald_sdk::http::Response;
    use herald_sdk::mock::MockHost;
    use herald_sdk::serde_json;
    use herald_sdk::{StepInput, TriggerEvent};

    fn input(config: Json) -> StepInput {
        let mut input = StepInput::new(STEP_TYPE, config);
        input.contact.email = "ada+news@example.com".into();
        input.contact.data = json!({"plan": "pro\r\nX-Evil: 1", "seats": 3, "tags": ["a", "b"]});
        input.execution.event = Some(TriggerEvent { name: "order.paid".into(), data: json!({"order": {"id": 42}}) });
        input
    }

    #[test]
    fn compliance() {
        herald_sdk::compliance::check_step::<Webhook>();
        herald_sdk::compliance::check_manifest(include_str!("../manifest.toml"), &Webhook::metadata());
    }

    #[test]
    fn validates_config() {
        let ok = |c: Json| Webhook::validate_config(STEP_TYPE, &c);
        assert!(ok(json!({"url": "https://hooks.example.com/{{contact.id}}"})).is_ok());
        assert!(
            ok(json!({"url": "HTTP://x.test", "method": "put", "headers": {"X-A": "1"}, "body": {"a": 1}})).is_ok()
        );
        let problems =
            ok(json!({"method": "FETCH", "headers": {"bad name": 1, "X": {}, "Y": "a\r\nb"}})).expect_err("bad");
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems[0].contains("url is required"));
        let bad_urls = [json!({"url": "ftp://x.test"}), json!({"url": "https:///p"}), json!({"url": "https://a b"})];
        for bad in bad_urls.into_iter().chain([json!({"url": 5}), json!([])]) {
            assert!(ok(bad.clone()).is_err(), "{bad}");
        }
        assert!(Webhook::validate_config("OTHER", &json!({"url": "https://x.test"})).is_err());
    }

    #[test]
    fn renders_placeholders_and_posts_json() {
        let host = MockHost::new().respond(Response::new(200).with_body("thanks")).install();
        let config = json!({
            "url": "https://hooks.example.com/c/{{ contact.id }}?email={{contact.email}}&missing={{nope.x}}",
            "headers": {"Authorization": "Bearer {{contact.data.plan}}"},
            "body": {"email": "{{contact.email}}", "seats": "{{contact.data.seats}}", "order": "#{{event.data.order.id}}",
                     "data": "{{contact.data}}", "ids": ["{{workflowId}}", "{{executionId}}", "{{stepId}}"],
                     "event": "{{event.name}}", "tag0": "{{contact.data.tags.0}}"}
        });
        let outcome = Webhook::execute(&input(config)).expect("runs");
        assert_eq!(outcome.branch, None);
        assert_eq!(outcome.output, Some(json!({"status": 200, "ok": true, "body": "thanks", "truncated": false})));
        let req = &host.requests()[0];
        assert_eq!(req.method, "POST");
        assert_eq!(req.url, "https://hooks.example.com/c/contact-1?email=ada%2Bnews%40example.com&missing=");
        assert_eq!(req.header_value("authorization"), Some("Bearer proX-Evil: 1"));
        assert_eq!(req.header_value("content-type"), Some("application/json"));
        assert_eq!(req.timeout_ms, Some(TIMEOUT_MS));
        let body: Json = serde_json::from_slice(req.body.as_deref().unwrap_or_default()).expect("json body");
        assert_eq!(
            body,
            json!({"email": "ada+news@example.com", "seats": 3, "order": "#42",
                   "data": {"plan": "pro\r\nX-Evil: 1", "seats": 3, "tags": ["a", "b"]},
                   "ids": ["workflow-1", "execution-1", "step-1"], "event": "order.paid", "tag0": "a"})
        );
    }

    #[test]
    fn text_body_and_method() {
        let host = MockHost::new().respond(Response::new(204)).install();
        let config = json!({"url": "http://x.test/", "method": "put", "body": "Hello {{contact.email}}!",
                            "headers": {"Content-Type": "text/markdown"}});
        Webhook::execute(&input(config)).expect("runs");
        let req = &host.requests()[0];
        assert_eq!(req.method, "PUT");
        assert_eq!(req.body_text(), "Hello ada+news@example.com!");
        assert_eq!(req.header_value("content-type"), Some("text/markdown"));
        assert!(req.header_value("user-agent").is_some_and(|ua| ua.starts_with("Herald-Webhook/")));
    }

    #[test]
    fn a_non_2xx_response_is_recorded_and_the_flow_continues() {
        let long = "x".repeat(5000);
        let host = MockHost::new().respond(Response::new(500).with_body(long)).install();
        let outcome = Webhook::execute(&input(json!({"url": "https://x.test"}))).expect("not an error");
        let output = outcome.output.expect("output");
        assert_eq!(output["status"], 500);
        assert_eq!(output["ok"], false);
        assert_eq!(output["truncated"], true);
        assert_eq!(output["body"].as_str().map(str::len), Some(MAX_OUTPUT_BODY));
        assert_eq!(host.logs()[0].field("status"), Some("500"));
    }

    #[test]
    fn transport_errors_are_retryable_and_denied_is_not() {
        let _host = MockHost::new()
            .respond_error(HttpError::Timeout)
            .respond_error(HttpError::Connect("refused".into()))
            .respond_error(HttpError::Denied("127.0.0.1 is a loopback address".into()))
            .install();
        let run = || Webhook::execute(&input(json!({"url": "https://x.test"}))).expect_err("fails");
        let timeout = run();
        assert_eq!((timeout.code.as_str(), timeout.retryable), ("timeout", true));
        let connect = run();
        assert_eq!((connect.code.as_str(), connect.retryable), ("connect", true));
        let denied = run();
        assert_eq!((denied.code.as_str(), denied.retryable), ("denied", false));
        assert!(denied.message.contains("loopback"), "{}", denied.message);
    }

    #[test]
    fn truncates_on_a_character_boundary() {
        let (t, cut) = truncate("é".repeat(600).as_bytes(), MAX_OUTPUT_BODY);
        assert!(cut);
        assert_eq!(t.len(), MAX_OUTPUT_BODY);
        let (t, cut) = truncate("ab".as_bytes(), 1);
        assert_eq!((t.as_str(), cut), ("a", true));
    }
}
