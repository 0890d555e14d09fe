//! Bindings for the `herald:plugin@1.x` ABI, generated from the newest 1.x WIT (plugin-api/wit/1.1.0), and
//! the conversions between its types and the runtime's own ([`super::types`]).
//!
//! Minor versions only add interfaces, and wasmtime resolves semver-compatible names in both directions
//! (a guest's `herald:plugin/log@1.0.0` import is served by the host's `@1.1.0`, and the host's lookup of
//! `operators@1.1.0` finds a 1.0.0 guest's `operators@1.0.0` export), so one module serves every 1.x
//! guest. A new major version gets a module of its own beside this one.

// The generated bindings use `unsafe` internally (typed function handles); nothing else here does.
#![allow(unsafe_code)]

wasmtime::component::bindgen!({
    path: "../../plugin-api/wit/1.1.0",
    inline: "
        package herald:host-v1;
        world all {
            import herald:plugin/log@1.1.0;
            import herald:plugin/config@1.1.0;
            import herald:plugin/metrics@1.1.0;
            import herald:plugin/clock@1.1.0;
            import herald:plugin/http@1.1.0;
            export herald:plugin/plugin@1.1.0;
            export herald:plugin/operators@1.1.0;
            export herald:plugin/steps@1.1.0;
            export herald:plugin/transports@1.1.0;
        }
    ",
    world: "all",
    imports: { "herald:plugin/http.fetch": async },
    exports: { default: async },
});

use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::component::{HasSelf, InstancePre, Linker};
use wasmtime::{Engine, Store};

use self::exports::herald::plugin::{operators, plugin, steps, transports};
use self::herald::plugin::{clock, config, http as wit_http, log, metrics, types as wit};
use super::http::{FetchError, FetchRequest};
use super::types as t;
use super::{CallError, CallState, Loaded, PluginEnv, PluginHost};

/// Grace beyond a plugin's own deadline before the host abandons a call that is stuck in a host import.
const HOST_GRACE: Duration = Duration::from_millis(250);
/// Warm operator instances kept per plugin.
const WARM_MAX: usize = 8;

impl wit::Host for CallState {}

impl log::Host for CallState {
    fn write(&mut self, level: wit::LogLevel, message: String, fields: wit::KeyValues) {
        let plugin = self.env.name.as_str();
        let fields = fields.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        match level {
            wit::LogLevel::Trace => tracing::trace!(plugin, fields, "{message}"),
            wit::LogLevel::Debug => tracing::debug!(plugin, fields, "{message}"),
            wit::LogLevel::Info => tracing::info!(plugin, fields, "{message}"),
            wit::LogLevel::Warn => tracing::warn!(plugin, fields, "{message}"),
            wit::LogLevel::Error => tracing::error!(plugin, fields, "{message}"),
        }
    }
}

impl config::Host for CallState {
    fn get(&mut self, key: String) -> Option<String> {
        self.env.grants.config.get(&key).cloned()
    }

    fn secret(&mut self, name: String) -> Option<String> {
        self.env.grants.secrets.get(&name).cloned()
    }
}

impl metrics::Host for CallState {
    fn counter(&mut self, name: String, delta: u64) {
        let valid = !name.is_empty()
            && name.len() <= 64
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            tracing::debug!(plugin = %self.env.name, counter = %name, "ignoring a counter with an invalid name");
            return;
        }
        let mut counters = self.env.counters.lock().unwrap_or_else(|p| p.into_inner());
        if counters.len() >= super::MAX_COUNTERS && !counters.contains_key(&(self.env.name.clone(), name.clone())) {
            return;
        }
        let c = counters.entry((self.env.name.clone(), name)).or_default();
        *c = c.saturating_add(delta);
    }
}

impl clock::Host for CallState {
    fn now_ms(&mut self) -> i64 {
        self.env.clock.now_ms()
    }
}

impl wit_http::Host for CallState {
    fn fetch(
        &mut self,
        req: wit_http::Request,
    ) -> impl Future<Output = Result<wit_http::Response, wit_http::HttpError>> + Send {
        let env = self.env.clone();
        async move {
            let r = env
                .outbound
                .fetch(FetchRequest {
                    method: req.method,
                    url: req.url,
                    headers: req.headers,
                    body: req.body,
                    timeout_ms: req.timeout_ms,
                })
                .await;
            match r {
                Ok(r) => Ok(wit_http::Response { status: r.status, headers: r.headers, body: r.body }),
                Err(FetchError::Denied(m)) => Err(wit_http::HttpError::Denied(m)),
                Err(FetchError::Timeout) => Err(wit_http::HttpError::Timeout),
                Err(FetchError::Connect(m)) => Err(wit_http::HttpError::Connect(m)),
                Err(FetchError::TooLarge) => Err(wit_http::HttpError::ResponseTooLarge),
                Err(FetchError::Other(m)) => Err(wit_http::HttpError::Other(m)),
            }
        }
    }
}

/// The host imports of every world (calls are asynchronous: `http.fetch` awaits I/O).
pub fn add_imports(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    wit::add_to_linker::<CallState, HasSelf<CallState>>(linker, |s| s)?;
    log::add_to_linker::<CallState, HasSelf<CallState>>(linker, |s| s)?;
    config::add_to_linker::<CallState, HasSelf<CallState>>(linker, |s| s)?;
    clock::add_to_linker::<CallState, HasSelf<CallState>>(linker, |s| s)?;
    metrics::add_to_linker::<CallState, HasSelf<CallState>>(linker, |s| s)?;
    wit_http::add_to_linker::<CallState, HasSelf<CallState>>(linker, |s| s)
}

/// Which plugin kinds a component exports.
pub fn exported_kinds(engine: &Engine, component: &wasmtime::component::Component) -> Vec<t::Kind> {
    let mut kinds = Vec::new();
    for (name, _) in component.component_type().exports(engine) {
        let iface = name.strip_prefix("herald:plugin/").and_then(|r| r.split('@').next());
        match iface {
            Some("operators") => kinds.push(t::Kind::Operator),
            Some("steps") => kinds.push(t::Kind::Step),
            Some("transports") => kinds.push(t::Kind::Transport),
            _ => {}
        }
    }
    kinds
}

/// Export lookups done once per loaded plugin.
struct Indices {
    plugin: plugin::GuestIndices,
    operators: Option<operators::GuestIndices>,
    steps: Option<steps::GuestIndices>,
    transports: Option<transports::GuestIndices>,
}

impl Indices {
    fn new(pre: &InstancePre<CallState>, kind: t::Kind) -> wasmtime::Result<Indices> {
        Ok(Indices {
            plugin: plugin::GuestIndices::new(pre)?,
            operators: if kind == t::Kind::Operator { Some(operators::GuestIndices::new(pre)?) } else { None },
            steps: if kind == t::Kind::Step { Some(steps::GuestIndices::new(pre)?) } else { None },
            transports: if kind == t::Kind::Transport { Some(transports::GuestIndices::new(pre)?) } else { None },
        })
    }
}

/// What a plugin loaded through this ABI keeps for its calls: its export lookups and, for an operator
/// plugin, the pool of warm instances.
pub struct Bound {
    indices: Indices,
    warm: Mutex<Vec<WarmOperator>>,
}

/// Links a loaded 1.x plugin: looks its exports up once and asks it what it provides.
pub async fn bind(
    host: &PluginHost,
    pre: &InstancePre<CallState>,
    kind: t::Kind,
    env: &Arc<PluginEnv>,
) -> Result<(Bound, Probe), String> {
    let indices = Indices::new(pre, kind).map_err(|e| format!("ABI mismatch: {e:#}"))?;
    let probe = describe(host, pre, &indices, env).await?;
    Ok((Bound { indices, warm: Mutex::new(Vec::new()) }, probe))
}

/// A warm operator instance with its store.
pub struct WarmOperator {
    store: Store<CallState>,
    guest: operators::Guest,
}

async fn new_warm(host: &PluginHost, p: &Loaded, b: &Bound) -> Result<WarmOperator, CallError> {
    let mut store = host.store(&p.env, Some(p.env.grants.fuel));
    let started = async {
        let instance = p.pre.instantiate_async(&mut store).await?;
        match &b.indices.operators {
            Some(i) => i.load(&mut store, &instance),
            None => Err(wasmtime::format_err!("the plugin exports no operators")),
        }
    }
    .await;
    match started {
        Ok(guest) => Ok(WarmOperator { store, guest }),
        Err(e) => Err(CallError::Instantiate { plugin: p.env.name.clone(), message: format!("{e:#}") }),
    }
}

/// A warm instance of an operator plugin with fresh fuel and deadline.
async fn take_warm(host: &PluginHost, p: &Loaded, b: &Bound) -> Result<WarmOperator, CallError> {
    let warm = b.warm.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let mut w = match warm {
        Some(w) => w,
        None => new_warm(host, p, b).await?,
    };
    let _ = w.store.set_fuel(p.env.grants.fuel);
    w.store.set_epoch_deadline(super::deadline_ticks(p.env.grants.timeout));
    w.store.data_mut().limits.hit = false;
    Ok(w)
}

/// Returns a healthy instance to the pool. An instance whose call failed is dropped instead (its state
/// is suspect).
fn put_warm(b: &Bound, w: WarmOperator) {
    let mut pool = b.warm.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len() < WARM_MAX {
        pool.push(w);
    }
}

fn timeout_error(env: &PluginEnv) -> CallError {
    CallError::Timeout { plugin: env.name.clone(), ms: env.grants.timeout.as_millis() as u64 }
}

pub async fn validate_operand(
    host: &PluginHost,
    p: &Loaded,
    b: &Bound,
    operator: &str,
    operand: &t::Value,
) -> Result<Result<(), String>, CallError> {
    let mut w = take_warm(host, p, b).await?;
    let operand = value_out(operand);
    let limit = p.env.grants.timeout + HOST_GRACE;
    let r = tokio::time::timeout(limit, w.guest.call_validate_operand(&mut w.store, operator, &operand)).await;
    match r {
        Err(_) => Err(timeout_error(&p.env)),
        Ok(Err(e)) => Err(PluginHost::classify(&p.env, Some(&w.store), e)),
        Ok(Ok(v)) => {
            put_warm(b, w);
            Ok(v)
        }
    }
}

pub async fn evaluate(
    host: &PluginHost,
    p: &Loaded,
    b: &Bound,
    operator: &str,
    operand: &t::Value,
    values: &[t::Value],
) -> Result<Result<Vec<bool>, t::GuestError>, CallError> {
    let mut w = take_warm(host, p, b).await?;
    let operand = value_out(operand);
    let values: Vec<wit::Value> = values.iter().map(value_out).collect();
    let limit = p.env.grants.timeout + HOST_GRACE;
    let r = tokio::time::timeout(limit, w.guest.call_evaluate(&mut w.store, operator, &operand, &values)).await;
    match r {
        Err(_) => Err(timeout_error(&p.env)),
        Ok(Err(e)) => Err(PluginHost::classify(&p.env, Some(&w.store), e)),
        Ok(Ok(v)) => {
            put_warm(b, w);
            Ok(v.map_err(guest_error))
        }
    }
}

enum Stage {
    Start(wasmtime::Error),
    Call(wasmtime::Error),
}

/// Instantiates a plugin in a fresh store and runs one async call on its `$iface` export.
macro_rules! fresh_call {
    ($host:expr, $p:expr, $b:expr, $iface:ident, |$store:ident, $guest:ident| $body:expr) => {{
        let env: &Arc<PluginEnv> = &$p.env;
        let mut $store = $host.store(env, None);
        let limit = env.grants.timeout + HOST_GRACE;
        let r = tokio::time::timeout(limit, async {
            let instance = $p.pre.instantiate_async(&mut $store).await.map_err(Stage::Start)?;
            let $guest = match &$b.indices.$iface {
                Some(i) => i.load(&mut $store, &instance).map_err(Stage::Start)?,
                None => return Err(Stage::Start(wasmtime::format_err!("missing export"))),
            };
            $body.await.map_err(Stage::Call)
        })
        .await;
        match r {
            Err(_) => Err(CallError::Timeout { plugin: env.name.clone(), ms: env.grants.timeout.as_millis() as u64 }),
            Ok(Err(Stage::Start(e))) => {
                Err(CallError::Instantiate { plugin: env.name.clone(), message: format!("{e:#}") })
            }
            Ok(Err(Stage::Call(e))) => Err(PluginHost::classify(env, Some(&$store), e)),
            Ok(Ok(v)) => Ok(v),
        }
    }};
}

/// What a freshly loaded plugin says about itself.
pub struct Probe {
    pub metadata: t::Metadata,
    pub operators: Vec<t::OperatorInfo>,
    pub step_types: Vec<t::StepTypeInfo>,
    pub transport: Option<String>,
}

fn metadata_in(m: wit::PluginMetadata) -> t::Metadata {
    t::Metadata {
        name: m.name,
        version: m.version,
        kind: match m.kind {
            wit::PluginKind::Operator => t::Kind::Operator,
            wit::PluginKind::Step => t::Kind::Step,
            wit::PluginKind::Transport => t::Kind::Transport,
        },
        description: m.description,
        provides: m.provides,
    }
}

/// Instantiates a plugin once to read its metadata and what it provides.
async fn describe(
    host: &PluginHost,
    pre: &InstancePre<CallState>,
    indices: &Indices,
    env: &Arc<PluginEnv>,
) -> Result<Probe, String> {
    let fail = |e: wasmtime::Error| format!("describing the plugin failed: {e:#}");
    let mut store = host.store(env, Some(env.grants.fuel));
    let r = tokio::time::timeout(env.grants.timeout + HOST_GRACE, async {
        let instance = pre.instantiate_async(&mut store).await?;
        let meta = indices.plugin.load(&mut store, &instance)?;
        let m = meta.call_metadata(&mut store).await?;
        let mut probe = Probe { metadata: metadata_in(m), operators: vec![], step_types: vec![], transport: None };
        if let Some(i) = &indices.operators {
            let g = i.load(&mut store, &instance)?;
            probe.operators = g
                .call_operators(&mut store)
                .await?
                .into_iter()
                .map(|o| t::OperatorInfo { name: o.name, description: o.description, operand_schema: o.operand_schema })
                .collect();
        }
        if let Some(i) = &indices.steps {
            let g = i.load(&mut store, &instance)?;
            probe.step_types = g
                .call_step_types(&mut store)
                .await?
                .into_iter()
                .map(|s| t::StepTypeInfo { name: s.name, description: s.description, config_schema: s.config_schema })
                .collect();
        }
        if let Some(i) = &indices.transports {
            let g = i.load(&mut store, &instance)?;
            probe.transport = Some(g.call_name(&mut store).await?);
        }
        Ok::<_, wasmtime::Error>(probe)
    })
    .await;
    match r {
        Err(_) => Err(format!("describing the plugin timed out after {} ms", env.grants.timeout.as_millis())),
        Ok(r) => r.map_err(fail),
    }
}

pub async fn validate_step_config(
    host: &PluginHost,
    p: &Loaded,
    b: &Bound,
    step_type: &str,
    config: &str,
) -> Result<Result<(), Vec<String>>, CallError> {
    fresh_call!(host, p, b, steps, |store, guest| guest.call_validate_config(&mut store, step_type, config))
}

pub async fn execute_step(
    host: &PluginHost,
    p: &Loaded,
    b: &Bound,
    input: &t::StepInput,
) -> Result<t::StepOutcome, CallError> {
    let input = step_input_out(input);
    let r = fresh_call!(host, p, b, steps, |store, guest| guest.call_execute(&mut store, &input))?;
    match r {
        Ok(o) => Ok(t::StepOutcome {
            branch: o.branch,
            patch: o.patch.map(|p| t::ContactPatch { data: p.data, subscribed: p.subscribed }),
            output: o.output,
        }),
        Err(g) => {
            let g = guest_error(g);
            Err(CallError::Guest {
                plugin: p.env.name.clone(),
                code: g.code,
                message: g.message,
                retryable: g.retryable,
            })
        }
    }
}

pub async fn send(host: &PluginHost, p: &Loaded, b: &Bound, msg: &t::Outgoing) -> Result<t::SendOutcome, CallError> {
    let out = outgoing_out(msg);
    let r = fresh_call!(host, p, b, transports, |store, guest| guest.call_send(&mut store, &out))?;
    Ok(match r {
        Ok(a) => t::SendOutcome::Accepted { provider_message_id: a.provider_message_id },
        Err(transports::SendError::Temporary(m)) => t::SendOutcome::Temporary(m),
        Err(transports::SendError::RateLimited(ms)) => t::SendOutcome::RateLimited { retry_after_ms: ms },
        Err(transports::SendError::Permanent(m)) => t::SendOutcome::Permanent(m),
    })
}

pub async fn parse_notifications(
    host: &PluginHost,
    p: &Loaded,
    b: &Bound,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> Result<Result<Vec<t::Notification>, String>, CallError> {
    let req = transports::InboundRequest { headers, body };
    let r = fresh_call!(host, p, b, transports, |store, guest| guest.call_parse_notifications(&mut store, &req))?;
    Ok(r.map(|list| {
        list.into_iter()
            .map(|n| t::Notification {
                kind: match n.kind {
                    transports::NotificationKind::Delivery => t::NotificationKind::Delivery,
                    transports::NotificationKind::Bounce => t::NotificationKind::Bounce,
                    transports::NotificationKind::Complaint => t::NotificationKind::Complaint,
                },
                message_id: n.message_id,
                provider_message_id: n.provider_message_id,
                permanent: n.permanent,
                reason: n.reason,
            })
            .collect()
    }))
}

fn guest_error(e: wit::PluginError) -> t::GuestError {
    t::GuestError { code: e.code, message: e.message, retryable: e.retryable }
}

fn value_out(v: &t::Value) -> wit::Value {
    match v {
        t::Value::Null => wit::Value::Null,
        t::Value::Boolean(b) => wit::Value::Boolean(*b),
        t::Value::Integer(i) => wit::Value::Integer(*i),
        t::Value::Float(f) => wit::Value::Float(*f),
        t::Value::Text(s) => wit::Value::Text(s.clone()),
        t::Value::Timestamp(ms) => wit::Value::Timestamp(*ms),
        t::Value::TextList(l) => wit::Value::TextList(l.clone()),
        t::Value::Json(j) => wit::Value::Json(j.clone()),
    }
}

fn step_input_out(i: &t::StepInput) -> steps::StepInput {
    steps::StepInput {
        step_type: i.step_type.clone(),
        config: i.config.clone(),
        contact: steps::Contact {
            id: i.contact.id.clone(),
            email: i.contact.email.clone(),
            subscribed: i.contact.subscribed,
            data: i.contact.data.clone(),
        },
        execution: steps::Execution {
            project_id: i.execution.project_id.clone(),
            workflow_id: i.execution.workflow_id.clone(),
            execution_id: i.execution.execution_id.clone(),
            step_id: i.execution.step_id.clone(),
            attempt: i.execution.attempt,
            now_ms: i.execution.now_ms,
            event: i
                .execution
                .event
                .as_ref()
                .map(|e| steps::TriggerEvent { name: e.name.clone(), data: e.data.clone() }),
        },
    }
}

fn address_out(a: &t::Address) -> transports::Address {
    transports::Address { email: a.email.clone(), name: a.name.clone() }
}

fn outgoing_out(m: &t::Outgoing) -> transports::Outgoing {
    transports::Outgoing {
        envelope: transports::Envelope { mail_from: m.mail_from.clone(), rcpt_to: m.rcpt_to.clone() },
        message: transports::Message {
            message_id: m.message_id.clone(),
            from: address_out(&m.from),
            reply_to: m.reply_to.as_ref().map(address_out),
            to: m.to.iter().map(address_out).collect(),
            cc: m.cc.iter().map(address_out).collect(),
            subject: m.subject.clone(),
            html: m.html.clone(),
            text: m.text.clone(),
            headers: m.headers.clone(),
            attachments: m
                .attachments
                .iter()
                .map(|a| transports::Attachment {
                    filename: a.filename.clone(),
                    content_type: a.content_type.clone(),
                    content: a.content.clone(),
                    content_id: a.content_id.clone(),
                })
                .collect(),
            tags: m.tags.clone(),
        },
        raw: m.raw.clone(),
    }
}
