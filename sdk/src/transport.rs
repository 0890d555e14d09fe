//! Delivery transports (world `transport`): the [`Transport`] trait, the message it sends, the
//! notifications it parses, and its export adapter.

use std::fmt;
use std::marker::PhantomData;

use herald_sdk_bindings_transport::exports::herald::plugin::{plugin as wit_plugin, transports as wit};
use herald_sdk_bindings_transport::herald::plugin::types as wit_types;

use crate::types::{Metadata, convert_shared_types};

convert_shared_types!(herald_sdk_bindings_transport::herald::plugin::types);

/// An email address with an optional display name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// The address, e.g. `ada@example.com`.
    pub email: String,
    /// The display name, e.g. `Ada Lovelace`.
    pub name: Option<String>,
}

impl Address {
    /// An address without a display name.
    pub fn new(email: impl Into<String>) -> Self {
        Address { email: email.into(), name: None }
    }
}

/// An attachment or inline part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// The file name.
    pub filename: String,
    /// The MIME type.
    pub content_type: String,
    /// The bytes.
    pub content: Vec<u8>,
    /// Set for inline parts.
    pub content_id: Option<String>,
}

/// The message as structured fields, for providers whose API takes JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Herald's Message-ID (without angle brackets); stable across retries, an idempotency key.
    pub message_id: String,
    /// The sender.
    pub from: Address,
    /// The Reply-To address.
    pub reply_to: Option<Address>,
    /// The To recipients.
    pub to: Vec<Address>,
    /// The Cc recipients.
    pub cc: Vec<Address>,
    /// The subject.
    pub subject: String,
    /// The HTML body.
    pub html: Option<String>,
    /// The plain-text body.
    pub text: Option<String>,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// Attachments and inline parts.
    pub attachments: Vec<Attachment>,
    /// Project, email, campaign and workflow ids, for provider-side tagging.
    pub tags: Vec<(String, String)>,
}

/// The SMTP envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The return path.
    pub mail_from: String,
    /// Every recipient, including Bcc.
    pub rcpt_to: Vec<String>,
}

/// One message to deliver: envelope, structured fields, and the raw RFC 5322 bytes Herald built and
/// DKIM-signed (for raw-send APIs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The SMTP envelope.
    pub envelope: Envelope,
    /// The message as structured fields.
    pub message: Message,
    /// The complete message.
    pub raw: Vec<u8>,
}

impl Outgoing {
    /// A plain-text message for tests, with matching envelope and raw bytes. Its Message-ID is
    /// `test-1@herald.invalid`.
    pub fn simple(from: &str, to: &str, subject: &str, text: &str) -> Self {
        let message_id = "test-1@herald.invalid".to_owned();
        let raw = format!(
            "From: {from}\r\nTo: {to}\r\nSubject: {subject}\r\nMessage-ID: <{message_id}>\r\n\
             MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{text}\r\n"
        );
        Outgoing {
            envelope: Envelope { mail_from: from.to_owned(), rcpt_to: vec![to.to_owned()] },
            message: Message {
                message_id,
                from: Address::new(from),
                reply_to: None,
                to: vec![Address::new(to)],
                cc: Vec::new(),
                subject: subject.to_owned(),
                html: None,
                text: Some(text.to_owned()),
                headers: Vec::new(),
                attachments: Vec::new(),
                tags: Vec::new(),
            },
            raw: raw.into_bytes(),
        }
    }
}

/// The provider took the message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accepted {
    /// The provider's id for the message, echoed later in its notifications.
    pub provider_message_id: Option<String>,
}

/// Why a send failed. A failed send is data for the host (it retries or bounces the email), not a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// Try again later: connection trouble, a 5xx from an API, throttling without a hint, and the
    /// sender's own configuration problems (they never bounce an email).
    Temporary(String),
    /// The provider asked to slow down: retry after this many milliseconds.
    RateLimited(u64),
    /// The provider rejected this message or its recipient for good: the email bounces and the contact
    /// is unsubscribed. Configuration problems (missing settings, bad credentials, an endpoint the host
    /// refuses) are [`SendError::Temporary`] instead.
    Permanent(String),
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::Temporary(m) => write!(f, "temporary failure: {m}"),
            SendError::RateLimited(ms) => write!(f, "rate limited: retry after {ms} ms"),
            SendError::Permanent(m) => write!(f, "permanent failure: {m}"),
        }
    }
}

impl std::error::Error for SendError {}

/// What a provider reported about a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotificationKind {
    /// The message was delivered.
    Delivery,
    /// The message bounced.
    Bounce,
    /// The recipient complained (marked it as spam).
    Complaint,
}

/// One delivery, bounce or complaint report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// What happened.
    pub kind: NotificationKind,
    /// Herald's Message-ID, when the provider echoes it.
    pub message_id: Option<String>,
    /// The provider's id, as returned in [`Accepted`].
    pub provider_message_id: Option<String>,
    /// Bounces: true for a permanent (hard) bounce.
    pub permanent: bool,
    /// The provider's explanation.
    pub reason: Option<String>,
}

/// A provider's webhook call, as Herald received it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InboundRequest {
    /// The request headers, names as sent.
    pub headers: Vec<(String, String)>,
    /// The request body.
    pub body: Vec<u8>,
}

impl InboundRequest {
    /// A request with `body` and no headers.
    pub fn new(body: impl Into<Vec<u8>>) -> Self {
        InboundRequest { headers: Vec::new(), body: body.into() }
    }

    /// Adds a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The first header called `name`, compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// A delivery transport: hands messages to a provider and parses the provider's notifications.
///
/// Export it with [`export_transport!`](crate::export_transport). Transports may use every host
/// import, including [`http`](crate::http).
pub trait Transport {
    /// What the plugin is; `kind` must be [`PluginKind::Transport`](crate::PluginKind::Transport) and
    /// `provides` the transport's name.
    fn metadata() -> Metadata;

    /// The transport's name, as a project's transport setting names it. Defaults to the plugin's name.
    fn name() -> String {
        Self::metadata().name
    }

    /// Sends one message.
    fn send(message: &Outgoing) -> Result<Accepted, SendError>;

    /// Parses and authenticates a provider's webhook call into notifications. An error refuses the
    /// call (unauthenticated or malformed); its text is for the host's log.
    fn parse_notifications(request: &InboundRequest) -> Result<Vec<Notification>, String>;
}

/// Adapts a [`Transport`] to the generated `Guest` traits. Used by [`export_transport!`](crate::export_transport).
#[doc(hidden)]
pub struct TransportExport<T>(PhantomData<T>);

impl<T: Transport> wit_plugin::Guest for TransportExport<T> {
    fn metadata() -> wit_types::PluginMetadata {
        T::metadata().into()
    }
}

impl<T: Transport> wit::Guest for TransportExport<T> {
    fn name() -> String {
        T::name()
    }

    fn send(msg: wit::Outgoing) -> Result<wit::Accepted, wit::SendError> {
        match T::send(&msg.into()) {
            Ok(a) => Ok(wit::Accepted { provider_message_id: a.provider_message_id }),
            Err(SendError::Temporary(m)) => Err(wit::SendError::Temporary(m)),
            Err(SendError::RateLimited(ms)) => Err(wit::SendError::RateLimited(ms)),
            Err(SendError::Permanent(m)) => Err(wit::SendError::Permanent(m)),
        }
    }

    fn parse_notifications(req: wit::InboundRequest) -> Result<Vec<wit::Notification>, String> {
        let req = InboundRequest { headers: req.headers, body: req.body };
        let notifications = T::parse_notifications(&req)?;
        Ok(notifications
            .into_iter()
            .map(|n| wit::Notification {
                kind: match n.kind {
                    NotificationKind::Delivery => wit::NotificationKind::Delivery,
                    NotificationKind::Bounce => wit::NotificationKind::Bounce,
                    NotificationKind::Complaint => wit::NotificationKind::Complaint,
                },
                message_id: n.message_id,
                provider_message_id: n.provider_message_id,
                permanent: n.permanent,
                reason: n.reason,
            })
            .collect())
    }
}

impl From<wit::Address> for Address {
    fn from(a: wit::Address) -> Self {
        Address { email: a.email, name: a.name }
    }
}

impl From<wit::Outgoing> for Outgoing {
    fn from(o: wit::Outgoing) -> Self {
        let m = o.message;
        Outgoing {
            envelope: Envelope { mail_from: o.envelope.mail_from, rcpt_to: o.envelope.rcpt_to },
            message: Message {
                message_id: m.message_id,
                from: m.from.into(),
                reply_to: m.reply_to.map(Address::from),
                to: m.to.into_iter().map(Address::from).collect(),
                cc: m.cc.into_iter().map(Address::from).collect(),
                subject: m.subject,
                html: m.html,
                text: m.text,
                headers: m.headers,
                attachments: m
                    .attachments
                    .into_iter()
                    .map(|a| Attachment {
                        filename: a.filename,
                        content_type: a.content_type,
                        content: a.content,
                        content_id: a.content_id,
                    })
                    .collect(),
                tags: m.tags,
            },
            raw: o.raw,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PluginKind;
    use wit::Guest as _;

    struct Fake;

    impl Transport for Fake {
        fn metadata() -> Metadata {
            Metadata::new("fake", "1.0.0", PluginKind::Transport).provides(["fake"])
        }
        fn send(message: &Outgoing) -> Result<Accepted, SendError> {
            match message.message.subject.as_str() {
                "slow" => Err(SendError::RateLimited(1500)),
                _ => Ok(Accepted { provider_message_id: Some(message.envelope.rcpt_to.join(",")) }),
            }
        }
        fn parse_notifications(request: &InboundRequest) -> Result<Vec<Notification>, String> {
            if request.header("x-token") != Some("t") {
                return Err("bad token".into());
            }
            Ok(vec![Notification {
                kind: NotificationKind::Bounce,
                message_id: None,
                provider_message_id: Some("p".into()),
                permanent: true,
                reason: None,
            }])
        }
    }

    fn to_wit(o: Outgoing) -> wit::Outgoing {
        let addr = |a: Address| wit::Address { email: a.email, name: a.name };
        wit::Outgoing {
            envelope: wit::Envelope { mail_from: o.envelope.mail_from, rcpt_to: o.envelope.rcpt_to },
            message: wit::Message {
                message_id: o.message.message_id,
                from: addr(o.message.from),
                reply_to: None,
                to: o.message.to.into_iter().map(addr).collect(),
                cc: Vec::new(),
                subject: o.message.subject,
                html: None,
                text: o.message.text,
                headers: Vec::new(),
                attachments: Vec::new(),
                tags: Vec::new(),
            },
            raw: o.raw,
        }
    }

    #[test]
    fn adapter_maps_send_results() {
        assert_eq!(TransportExport::<Fake>::name(), "fake");
        let ok = TransportExport::<Fake>::send(to_wit(Outgoing::simple("a@x.test", "b@y.test", "hi", "body")));
        assert_eq!(ok.ok().and_then(|a| a.provider_message_id).as_deref(), Some("b@y.test"));
        let slow = TransportExport::<Fake>::send(to_wit(Outgoing::simple("a@x.test", "b@y.test", "slow", "body")));
        assert!(matches!(slow, Err(wit::SendError::RateLimited(1500))));
    }

    #[test]
    fn adapter_maps_notifications_and_headers_are_case_insensitive() {
        let req = wit::InboundRequest { headers: vec![("X-Token".into(), "t".into())], body: Vec::new() };
        let n = TransportExport::<Fake>::parse_notifications(req).expect("accepted");
        assert!(matches!(n[0].kind, wit::NotificationKind::Bounce));
        let req = wit::InboundRequest { headers: Vec::new(), body: Vec::new() };
        assert!(TransportExport::<Fake>::parse_notifications(req).is_err());
    }
}
