//! Test kit for Herald plugins: test the **built** `.wasm` in the **real** plugin runtime.
//!
//! `herald_sdk::mock::MockHost` tests a plugin's Rust code natively; this crate tests what the operator
//! installs: the component, its manifest, the host's limits, grants, HTTP policy and ABI checks.
//!
//! - [`Harness`] loads one component with its manifest and a [`PluginGrant`] (the operator's
//!   `[plugin.<name>]` settings) into a real [`herald_plugin_runtime::PluginHost`] in a private plugins
//!   folder, and calls it: [`Harness::evaluate`], [`Harness::validate_operand`],
//!   [`Harness::validate_step_config`], [`Harness::execute_step`], [`Harness::send`],
//!   [`Harness::parse_notifications`]. The clock is the system's or a settable [`ManualClock`]
//!   ([`HarnessBuilder::manual_clock`]).
//! - [`FakeEndpoint`] stands in for a provider's API or a webhook receiver on `127.0.0.1`: it records
//!   requests and answers from a queue, a closure or a default, optionally late.
//! - [`compliance`] has the suites every plugin of a kind should pass, run against the real artifact.
//! - [`artifacts`] builds components from a test with Cargo.
//!
//! ```no_run
//! use herald_plugin_testkit::compliance::{self, TransportProfile};
//! use herald_plugin_testkit::{HarnessBuilder, PluginGrant, Reply};
//!
//! #[tokio::test]
//! async fn my_transport_complies() {
//!     let plugin = HarnessBuilder::new("target/wasm32-wasip2/release/my_transport.wasm", "manifest.toml");
//!     let profile = TransportProfile::new(|endpoint| PluginGrant {
//!         http: Some(vec![endpoint.authority()]),
//!         allow_private: true, // the fake endpoint is on loopback
//!         config: [("url".to_string(), endpoint.url())].into(),
//!         ..PluginGrant::default()
//!     })
//!     .permanent(Reply::new(422).body("recipient rejected"));
//!     compliance::transport(&plugin, &profile).await.assert_passed();
//! }
//! # fn main() {}
//! ```
//!
//! The calls are async (Tokio); a `#[tokio::test]` of either flavour works.
#![warn(missing_docs)]

pub mod artifacts;
pub mod compliance;
mod endpoint;
mod harness;

pub use endpoint::{FakeEndpoint, Handler, ReceivedRequest, Reply};
pub use harness::{Harness, HarnessBuilder, ManifestSource, TestClock};

/// The plugin runtime, for anything not re-exported here.
pub use herald_plugin_runtime;
pub use herald_plugin_runtime::clock::{ManualClock, SystemClock};
pub use herald_plugin_runtime::manifest::PluginGrant;
pub use herald_plugin_runtime::{
    Address, CallError, ContactPatch, Execution, Notification, NotificationKind, OutAttachment, Outgoing, PluginStatus,
    SendOutcome, StepContact, StepInput, StepOutcome, TriggerEvent, Value,
};

/// A message for a transport: one recipient, text and HTML, two tags, and its raw RFC 5322 form.
pub fn sample_message() -> Outgoing {
    let message_id = "testkit-1@herald.test";
    let raw = format!(
        "From: Herald News <news@herald.test>\r\nTo: Ada <ada@example.org>\r\nSubject: Hello from the test kit\r\n\
         Message-ID: <{message_id}>\r\nDate: Tue, 14 Nov 2023 22:13:20 +0000\r\nMIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\r\nHi Ada\r\n"
    );
    Outgoing {
        mail_from: "bounces@herald.test".into(),
        rcpt_to: vec!["ada@example.org".into()],
        message_id: message_id.into(),
        from: Address { email: "news@herald.test".into(), name: Some("Herald News".into()) },
        reply_to: None,
        to: vec![Address { email: "ada@example.org".into(), name: Some("Ada".into()) }],
        cc: vec![],
        subject: "Hello from the test kit".into(),
        html: Some("<p>Hi Ada</p>".into()),
        text: Some("Hi Ada".into()),
        headers: vec![],
        attachments: vec![],
        tags: vec![("projectId".into(), "p-1".into()), ("emailId".into(), "e-1".into())],
        raw: raw.into_bytes(),
    }
}

/// A step input: contact `c-1` (`ada@example.org`, subscribed, data `{"name": "Ada", "plan": "pro"}`),
/// event `signup` (data `{"source": "web"}`), attempt 1, project `p-1`, workflow `w-1`, execution
/// `x-1`, step `s-1`.
pub fn sample_step_input(step_type: &str, config: &str, now_ms: i64) -> StepInput {
    StepInput {
        step_type: step_type.into(),
        config: config.into(),
        contact: StepContact {
            id: "c-1".into(),
            email: "ada@example.org".into(),
            subscribed: true,
            data: r#"{"name":"Ada","plan":"pro"}"#.into(),
        },
        execution: Execution {
            project_id: "p-1".into(),
            workflow_id: "w-1".into(),
            execution_id: "x-1".into(),
            step_id: "s-1".into(),
            attempt: 1,
            now_ms,
            event: Some(TriggerEvent { name: "signup".into(), data: r#"{"source":"web"}"#.into() }),
        },
    }
}
