//! SurrealDB's `surreal` command, as its own binary starts it: `surreal start --bind ADDR --user root
//! --pass root memory` (or `surrealkv://PATH`). Built only for the scale-out tests.

#![recursion_limit = "256"]

use std::process::ExitCode;

use surrealdb_server::core::CommunityComposer;

fn main() -> ExitCode {
    surrealdb_server::init(CommunityComposer())
}
