//! The transport suite.

use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_plugin_runtime::manifest::PluginGrant;
use herald_plugin_runtime::{CallError, Notification, Outgoing, SendOutcome};

use super::{Report, metadata_matches};
use crate::endpoint::{FakeEndpoint, ReceivedRequest, Reply};
use crate::harness::{Harness, HarnessBuilder};

type GrantFn = Arc<dyn Fn(&FakeEndpoint) -> PluginGrant + Send + Sync>;
type ReceivedFn = Arc<dyn Fn(&ReceivedRequest, &Outgoing, &NotificationContext) -> Result<(), String> + Send + Sync>;
type InboundFn = Arc<dyn Fn(&NotificationContext) -> InboundCall + Send + Sync>;

/// A provider's webhook call, as the transport's `parse-notifications` receives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InboundCall {
    /// Header names and values.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl InboundCall {
    /// A call with this body and no headers.
    pub fn new(body: impl Into<Vec<u8>>) -> InboundCall {
        InboundCall { headers: Vec::new(), body: body.into() }
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> InboundCall {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What a profile's closures get to build requests and check what was sent: the plugin's clock and the
/// grant it was loaded with (its config and secrets).
#[derive(Debug, Clone)]
pub struct NotificationContext {
    /// "Now" as the plugin sees it, in milliseconds since the Unix epoch.
    pub now_ms: i64,
    /// The grant the plugin was loaded with.
    pub grant: PluginGrant,
}

impl NotificationContext {
    /// A secret of the grant.
    pub fn secret(&self, name: &str) -> Option<&str> {
        self.grant.secrets.get(name).map(String::as_str)
    }

    /// A config value of the grant.
    pub fn config(&self, name: &str) -> Option<&str> {
        self.grant.config.get(name).map(String::as_str)
    }
}

/// How to run the [`transport`] suite against one transport plugin: how to point it at the
/// [`FakeEndpoint`] standing in for its provider, and what the provider answers.
///
/// The grant closure receives the endpoint; it sets the plugin's config and secrets, grants the
/// endpoint's host (`http: Some(vec![endpoint.authority()])`) and `allow_private: true` (the endpoint
/// is on loopback). The suite turns `allow_private` off itself to check a denied endpoint.
#[derive(Clone)]
pub struct TransportProfile {
    grant: GrantFn,
    message: Outgoing,
    accepted: Reply,
    provider_message_id: Option<String>,
    temporary: Vec<Reply>,
    permanent: Vec<Reply>,
    rate_limited: Vec<(Reply, Option<u64>)>,
    received: Option<ReceivedFn>,
    unconfigured: Vec<(String, GrantFn)>,
    timeout: Option<Duration>,
    valid_notification: Option<(InboundFn, Vec<Notification>)>,
    forged_notifications: Vec<InboundFn>,
}

impl TransportProfile {
    /// A profile whose plugin is configured by `grant`. Defaults: the message is
    /// [`crate::sample_message`], `200` accepts, `503` is a temporary failure, no permanent rejection
    /// (the suite reports that as missing until [`TransportProfile::permanent`] names one), a timeout
    /// check at 1 s, no notifications.
    pub fn new(grant: impl Fn(&FakeEndpoint) -> PluginGrant + Send + Sync + 'static) -> TransportProfile {
        TransportProfile {
            grant: Arc::new(grant),
            message: crate::sample_message(),
            accepted: Reply::ok(),
            provider_message_id: None,
            temporary: vec![],
            permanent: vec![],
            rate_limited: vec![],
            received: None,
            unconfigured: vec![],
            timeout: Some(Duration::from_secs(1)),
            valid_notification: None,
            forged_notifications: vec![],
        }
    }

    /// The message the suite sends.
    pub fn message(mut self, message: Outgoing) -> TransportProfile {
        self.message = message;
        self
    }

    /// The provider's answer that accepts the message, and the provider id the plugin must report.
    pub fn accepted(mut self, reply: Reply, provider_message_id: Option<&str>) -> TransportProfile {
        self.accepted = reply;
        self.provider_message_id = provider_message_id.map(str::to_owned);
        self
    }

    /// An answer that must be a temporary failure (repeatable; `503` when none is given).
    pub fn temporary(mut self, reply: Reply) -> TransportProfile {
        self.temporary.push(reply);
        self
    }

    /// An answer that rejects the message or its recipient for good: a permanent failure (repeatable;
    /// at least one is required).
    pub fn permanent(mut self, reply: Reply) -> TransportProfile {
        self.permanent.push(reply);
        self
    }

    /// An answer that must be rate limiting, with the retry delay expected (if it is known).
    pub fn rate_limited(mut self, reply: Reply, retry_after_ms: Option<u64>) -> TransportProfile {
        self.rate_limited.push((reply, retry_after_ms));
        self
    }

    /// Checks the request the provider received for the accepted message (method, path, body, auth).
    pub fn received(
        mut self,
        check: impl Fn(&ReceivedRequest, &Outgoing, &NotificationContext) -> Result<(), String> + Send + Sync + 'static,
    ) -> TransportProfile {
        self.received = Some(Arc::new(check));
        self
    }

    /// A grant that leaves the plugin misconfigured (no endpoint, no credentials, ...): sending must be
    /// a temporary failure, never a bounce (repeatable).
    pub fn unconfigured(
        mut self,
        label: impl Into<String>,
        grant: impl Fn(&FakeEndpoint) -> PluginGrant + Send + Sync + 'static,
    ) -> TransportProfile {
        self.unconfigured.push((label.into(), Arc::new(grant)));
        self
    }

    /// The plugin's timeout (its grant's `timeout_ms`) in the timeout check (default 1 s).
    pub fn timeout(mut self, timeout: Duration) -> TransportProfile {
        self.timeout = Some(timeout);
        self
    }

    /// Skips the timeout check (it takes about the timeout plus a second).
    pub fn without_timeout_check(mut self) -> TransportProfile {
        self.timeout = None;
        self
    }

    /// A valid provider notification and what it must parse into.
    pub fn notification(
        mut self,
        request: impl Fn(&NotificationContext) -> InboundCall + Send + Sync + 'static,
        expected: Vec<Notification>,
    ) -> TransportProfile {
        self.valid_notification = Some((Arc::new(request), expected));
        self
    }

    /// A forged or unauthenticated notification the plugin must refuse (repeatable). The suite also
    /// refuses the valid notification's body sent without any headers.
    pub fn forged_notification(
        mut self,
        request: impl Fn(&NotificationContext) -> InboundCall + Send + Sync + 'static,
    ) -> TransportProfile {
        self.forged_notifications.push(Arc::new(request));
        self
    }
}

fn context(harness: &Harness, grant: &PluginGrant) -> NotificationContext {
    NotificationContext { now_ms: harness.now_ms(), grant: grant.clone() }
}

fn describe(r: &Result<SendOutcome, CallError>) -> String {
    match r {
        Ok(o) => format!("{o:?}"),
        Err(e) => format!("call error: {e}"),
    }
}

/// Sends once with this reply queued; returns the result and what the endpoint received.
async fn send_with(
    harness: &Harness,
    endpoint: &FakeEndpoint,
    message: &Outgoing,
    reply: Option<&Reply>,
) -> (Result<SendOutcome, CallError>, Vec<ReceivedRequest>) {
    endpoint.reset();
    if let Some(r) = reply {
        endpoint.push(r.clone());
    }
    let result = harness.send(message).await;
    (result, endpoint.take_requests())
}

/// Runs the transport suite: see the [module documentation](super).
pub async fn transport(plugin: &HarnessBuilder, profile: &TransportProfile) -> Report {
    let mut report = Report::new("transport", plugin);
    let endpoint = match FakeEndpoint::start() {
        Ok(e) => e,
        Err(e) => {
            report.record("fake endpoint starts", Err(e.to_string()));
            return report;
        }
    };
    let grant = (profile.grant)(&endpoint);
    let harness = match plugin.load(grant.clone()).await {
        Ok(h) => h,
        Err(e) => {
            report.record("loads", Err(e));
            return report;
        }
    };
    let transport = harness.transport_name();
    report.record(
        "loads",
        match &transport {
            Some(_) => Ok(()),
            None => Err("the plugin loaded but provides no transport".into()),
        },
    );
    let listed: Vec<String> = transport.iter().cloned().collect();
    report.record("metadata", metadata_matches(&harness, "transport", &listed));
    let message = &profile.message;

    // accepted
    let (result, received) = send_with(&harness, &endpoint, message, Some(&profile.accepted)).await;
    let accepted = match &result {
        Ok(SendOutcome::Accepted { provider_message_id }) => match &profile.provider_message_id {
            Some(expected) if provider_message_id.as_ref() != Some(expected) => {
                Err(format!("accepted with provider id {provider_message_id:?}, expected {expected:?}"))
            }
            _ => Ok(()),
        },
        other => Err(format!("a {} answer gave {}", profile.accepted.status, describe(other))),
    }
    .and_then(|()| match received.as_slice() {
        [one] => match &profile.received {
            Some(check) => check(one, message, &context(&harness, &grant)),
            None => Ok(()),
        },
        many => Err(format!("the endpoint received {} requests for one message", many.len())),
    });
    report.record("accepts (2xx: accepted, and the provider received the message)", accepted);

    // temporary failures
    let default_temporary = [Reply::new(503).body("service unavailable")];
    let temporary = if profile.temporary.is_empty() { &default_temporary[..] } else { &profile.temporary[..] };
    for reply in temporary {
        let (result, _) = send_with(&harness, &endpoint, message, Some(reply)).await;
        let check = match &result {
            Ok(SendOutcome::Temporary(m)) if !m.trim().is_empty() => Ok(()),
            Ok(SendOutcome::Temporary(_)) => Err("a temporary failure without a message".into()),
            other => Err(format!("expected a temporary failure, got {}", describe(other))),
        };
        report.record(format!("temporary failure ({})", label(reply)), check);
    }

    // permanent failures
    if profile.permanent.is_empty() {
        report.record(
            "permanent failure",
            Err("the profile names no answer that rejects a message for good (TransportProfile::permanent)".into()),
        );
    }
    for reply in &profile.permanent {
        let (result, _) = send_with(&harness, &endpoint, message, Some(reply)).await;
        let check = match &result {
            Ok(SendOutcome::Permanent(m)) if !m.trim().is_empty() => Ok(()),
            Ok(SendOutcome::Permanent(_)) => Err("a permanent failure without a message".into()),
            other => Err(format!("expected a permanent failure, got {}", describe(other))),
        };
        report.record(format!("permanent failure ({})", label(reply)), check);
    }

    // rate limiting
    for (reply, expected) in &profile.rate_limited {
        let (result, _) = send_with(&harness, &endpoint, message, Some(reply)).await;
        let check = match &result {
            Ok(SendOutcome::RateLimited { retry_after_ms }) => match expected {
                Some(ms) if ms != retry_after_ms => Err(format!("retry after {retry_after_ms} ms, expected {ms}")),
                _ if *retry_after_ms == 0 => Err("retry after 0 ms".into()),
                _ => Ok(()),
            },
            other => Err(format!("expected rate limiting, got {}", describe(other))),
        };
        report.record(format!("rate limited ({})", label(reply)), check);
    }

    // a denied endpoint is the operator's configuration problem: temporary, never a bounce
    let denied = PluginGrant { allow_private: false, ..grant.clone() };
    let check = match plugin.load(denied).await {
        Err(e) => Err(format!("did not load without allow_private: {e}")),
        Ok(h) => {
            let (result, received) = send_with(&h, &endpoint, message, Some(&profile.accepted)).await;
            match &result {
                _ if !received.is_empty() => Err("the host let the plugin reach a loopback address".into()),
                Ok(SendOutcome::Temporary(_)) => Ok(()),
                other => Err(format!("expected a temporary failure, got {}", describe(other))),
            }
        }
    };
    report.record("denied endpoint is a temporary failure", check);

    for (what, grant_fn) in &profile.unconfigured {
        let check = match plugin.load(grant_fn(&endpoint)).await {
            Err(e) => Err(format!("did not load: {e}")),
            Ok(h) => {
                let (result, _) = send_with(&h, &endpoint, message, Some(&profile.accepted)).await;
                match &result {
                    Ok(SendOutcome::Temporary(_)) => Ok(()),
                    other => Err(format!("expected a temporary failure, got {}", describe(other))),
                }
            }
        };
        report.record(format!("unconfigured ({what}) is a temporary failure"), check);
    }

    // timeouts
    if let Some(timeout) = profile.timeout {
        let grant = PluginGrant { timeout_ms: Some(timeout.as_millis() as u64), ..grant.clone() };
        let check = match plugin.load(grant).await {
            Err(e) => Err(format!("did not load with timeout_ms: {e}")),
            Ok(h) => timeout_check(&h, &endpoint, message, &profile.accepted, timeout).await,
        };
        report.record("timeout (temporary or a timeout error, and the host keeps serving)", check);
    }

    // notifications
    let ctx = context(&harness, &grant);
    if let Some((request, expected)) = &profile.valid_notification {
        let call = request(&ctx);
        let check = match harness.parse_notifications(call.headers.clone(), call.body.clone()).await {
            Ok(Ok(parsed)) if &parsed == expected => Ok(()),
            Ok(Ok(parsed)) => Err(format!("parsed {parsed:?}, expected {expected:?}")),
            Ok(Err(reason)) => Err(format!("refused: {reason}")),
            Err(e) => Err(format!("call error: {e}")),
        };
        report.record("notification parses", check);
        let check = refused(&harness, InboundCall::new(call.body)).await;
        report.record("unauthenticated notification is refused", check);
    }
    for (i, forged) in profile.forged_notifications.iter().enumerate() {
        let check = refused(&harness, forged(&ctx)).await;
        report.record(format!("forged notification {} is refused", i + 1), check);
    }
    report
}

async fn refused(harness: &Harness, call: InboundCall) -> Result<(), String> {
    match harness.parse_notifications(call.headers, call.body).await {
        Ok(Err(reason)) if !reason.trim().is_empty() => Ok(()),
        Ok(Err(_)) => Err("refused without a reason".into()),
        Ok(Ok(parsed)) => Err(format!("accepted: {parsed:?}")),
        Err(e) => Err(format!("call error instead of a refusal: {e}")),
    }
}

async fn timeout_check(
    harness: &Harness,
    endpoint: &FakeEndpoint,
    message: &Outgoing,
    accepted: &Reply,
    timeout: Duration,
) -> Result<(), String> {
    let delay = timeout + Duration::from_secs(2);
    let started = Instant::now();
    let (result, _) = send_with(harness, endpoint, message, Some(&accepted.clone().delay(delay))).await;
    let took = started.elapsed();
    match &result {
        Ok(SendOutcome::Temporary(_)) | Err(CallError::Timeout { .. }) => {}
        other => return Err(format!("an endpoint slower than the timeout gave {}", describe(other))),
    }
    if took >= delay {
        return Err(format!("the call took {took:?}: it waited for the endpoint instead of timing out"));
    }
    let (result, _) = send_with(harness, endpoint, message, Some(accepted)).await;
    match &result {
        Ok(SendOutcome::Accepted { .. }) => Ok(()),
        other => Err(format!("after the timeout, a prompt answer gave {}", describe(other))),
    }
}

/// `status, headers besides Content-Type, the start of the body`: names a reply in a check.
fn label(reply: &Reply) -> String {
    let mut parts = vec![reply.status.to_string()];
    for (name, value) in reply.headers.iter().filter(|(n, _)| !n.eq_ignore_ascii_case("content-type")) {
        parts.push(format!("{name}: {value}"));
    }
    let snippet: String = String::from_utf8_lossy(&reply.body).chars().take(40).collect();
    if !snippet.is_empty() {
        parts.push(snippet);
    }
    parts.join(", ")
}
