//! Herald plugin SDK: write condition operators, workflow step types and delivery transports in plain
//! Rust, build them as WebAssembly components for `wasm32-wasip2`, and unit-test them with `cargo test`.
//!
//! A plugin is one crate (`crate-type = ["cdylib", "rlib"]`) that implements one of the three traits
//! — [`Operator`], [`Step`] or [`Transport`] — on a type and hands that type to the matching macro —
//! [`export_operator!`], [`export_step!`] or [`export_transport!`]. The macro wires the type into the
//! exports of the `herald:plugin@1.1.0` WIT world of that kind ([`ABI_VERSION`]).
//!
//! ```
//! use herald_sdk::{Metadata, Operator, OperatorInfo, PluginError, PluginKind, Value};
//!
//! struct IsEven;
//!
//! impl Operator for IsEven {
//!     fn metadata() -> Metadata {
//!         Metadata::new("is-even", "1.0.0", PluginKind::Operator)
//!             .description("isEven: the field is an even integer")
//!             .provides(["isEven"])
//!     }
//!     fn operators() -> Vec<OperatorInfo> {
//!         vec![OperatorInfo::new("isEven", "true when the field is an even integer")]
//!     }
//!     fn validate_operand(_operator: &str, _operand: &Value) -> Result<(), String> {
//!         Ok(())
//!     }
//!     fn evaluate(_operator: &str, _operand: &Value, values: &[Value]) -> Result<Vec<bool>, PluginError> {
//!         Ok(values.iter().map(|v| v.as_integer().is_some_and(|n| n % 2 == 0)).collect())
//!     }
//! }
//!
//! herald_sdk::export_operator!(IsEven);
//! # fn main() {}
//! ```
//!
//! Plugins reach the host only through the typed imports: [`log`], [`config`], [`clock`], [`metrics`]
//! (new in 1.1.0) and (steps and transports) [`http`]. In a `wasm32` build they call the host; in a native build (`cargo test`)
//! they go to the thread-local [`mock::MockHost`], so plugin logic is tested without a Herald server.
//! [`compliance`] has the checks every plugin of a kind should pass.
//!
//! # Testing the built component
//!
//! [`mock::MockHost`] and [`compliance`] test the plugin's Rust code natively. To test the `.wasm` the
//! operator installs — in the real plugin runtime, with its manifest, grants, limits, timeouts and HTTP
//! policy — use the test kit `herald-plugin-testkit` (`sdk/testkit/` in Herald's repository) as a
//! dev-dependency: its `Harness` loads the component into Herald's plugin host, its `FakeEndpoint`
//! plays a provider or webhook receiver on loopback, and its `compliance::{operator, step, transport}`
//! suites check the artifact against its kind's rules.
//!
//! # Building
//!
//! `cargo build --release --target wasm32-wasip2` produces `target/wasm32-wasip2/release/<crate>.wasm`,
//! a component. Copy it into Herald's plugins directory as `<name>.wasm` next to its manifest
//! `<name>.toml` (see [`compliance::check_manifest`] for the format).
#![warn(missing_docs)]

#[cfg(target_arch = "wasm32")]
mod backend;
#[cfg(not(target_arch = "wasm32"))]
use mock as backend;
pub mod clock;
#[cfg(not(target_arch = "wasm32"))]
pub mod compliance;
pub mod config;
pub mod http;
pub mod log;
pub mod metrics;
#[cfg(not(target_arch = "wasm32"))]
pub mod mock;
mod operator;
mod step;
pub mod time;
mod transport;
mod types;

pub use operator::{Operator, OperatorInfo};
pub use step::{Contact, ContactPatch, Execution, Step, StepInput, StepOutcome, StepTypeInfo, TriggerEvent};
pub use transport::{
    Accepted, Address, Attachment, Envelope, InboundRequest, Message, Notification, NotificationKind, Outgoing,
    SendError, Transport,
};
pub use types::{Metadata, PluginError, PluginKind, Value};

/// Re-exported so plugins use the same `serde_json` as the SDK's types.
pub use serde_json;

/// The version of the `herald:plugin` WIT package this SDK builds plugins against: the newest 1.x, so
/// every 1.x import is reachable. A plugin's manifest states it as `abi = "1.1.0"`; it loads on any Herald
/// whose supported versions include 1.1.0 (wit-component keeps only the imports a plugin calls, but the
/// exports carry this version).
pub const ABI_VERSION: &str = "1.1.0";

/// Exports `$plugin` (a type implementing [`Operator`]) as the plugin of this crate, for the
/// `herald:plugin/operator@1.1.0` world. Use it once per crate, at module level.
///
/// ```ignore
/// herald_sdk::export_operator!(MyOperators);
/// ```
#[macro_export]
macro_rules! export_operator {
    ($plugin:ty) => {
        // Native builds only check the trait: the export symbols exist for wasm32 alone (their WIT
        // names are not valid in a native linker's export list).
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            fn __herald_implements<T: $crate::Operator>() {}
            let _ = __herald_implements::<$plugin>;
        };
        // The generated export functions are `unsafe extern "C"`; the unsafe stays inside this block.
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)]
        const _: () = {
            type __HeraldOperatorExport = $crate::__private::OperatorExport<$plugin>;
    $crate::__private::operator::export!(__HeraldOperatorExport with_types_in $crate::__private::operator);
        };
    };
}

/// Exports `$plugin` (a type implementing [`Step`]) as the plugin of this crate, for the
/// `herald:plugin/step@1.1.0` world. Use it once per crate, at module level.
///
/// ```ignore
/// herald_sdk::export_step!(Webhook);
/// ```
#[macro_export]
macro_rules! export_step {
    ($plugin:ty) => {
        // Native builds only check the trait: the export symbols exist for wasm32 alone (their WIT
        // names are not valid in a native linker's export list).
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            fn __herald_implements<T: $crate::Step>() {}
            let _ = __herald_implements::<$plugin>;
        };
        // The generated export functions are `unsafe extern "C"`; the unsafe stays inside this block.
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)]
        const _: () = {
            type __HeraldStepExport = $crate::__private::StepExport<$plugin>;
    $crate::__private::step::export!(__HeraldStepExport with_types_in $crate::__private::step);
        };
    };
}

/// Exports `$plugin` (a type implementing [`Transport`]) as the plugin of this crate, for the
/// `herald:plugin/transport@1.1.0` world. Use it once per crate, at module level.
///
/// ```ignore
/// herald_sdk::export_transport!(HttpTransport);
/// ```
#[macro_export]
macro_rules! export_transport {
    ($plugin:ty) => {
        // Native builds only check the trait: the export symbols exist for wasm32 alone (their WIT
        // names are not valid in a native linker's export list).
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            fn __herald_implements<T: $crate::Transport>() {}
            let _ = __herald_implements::<$plugin>;
        };
        // The generated export functions are `unsafe extern "C"`; the unsafe stays inside this block.
        #[cfg(target_arch = "wasm32")]
        #[allow(unsafe_code)]
        const _: () = {
            type __HeraldTransportExport = $crate::__private::TransportExport<$plugin>;
    $crate::__private::transport::export!(__HeraldTransportExport with_types_in $crate::__private::transport);
        };
    };
}

/// Implementation details of the export macros. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::operator::OperatorExport;
    pub use crate::step::StepExport;
    pub use crate::transport::TransportExport;
    pub use herald_sdk_bindings_operator as operator;
    pub use herald_sdk_bindings_step as step;
    pub use herald_sdk_bindings_transport as transport;
}
