//! The tidy check: the layering rules of ARCHITECTURE.md ("Invariants") that Cargo cannot hold, enforced
//! on the source of the core (`host/core/src`, paths as `store/…`) and of the server (`host/src`, paths
//! as `api/…`, `lib.rs`, `main.rs`). Cargo holds the first rule: the core's manifest has no salvo, so
//! nothing of it can name the server.
//!
//! - only `api/` imports salvo; only `store/` imports surrealdb or writes SurrealQL; nothing below the API
//!   reaches up into `api/` (`lib.rs` and `main.rs` wire it);
//! - inside the core, layers import only downwards: `domain/` nothing of `store/`, `services/` or the
//!   services' handle (`state.rs`), `store/` nothing of `services/` or `state.rs`, `infra/` nothing of
//!   `services/` or `state.rs`, `error.rs` nothing of `services/`;
//! - no file of the core names the server's error type or an HTTP status type (`ApiError`, `StatusCode`):
//!   the core's errors say what went wrong, the server's table (`api/errors.rs`) chooses the status;
//! - only the clock (`infra/clock.rs`, and the plugin runtime's `clock.rs`) reads the wall clock (everything else asks the injected clock, so tests can move time);
//! - handlers in `api/` call services, never the store (they may hand it to a service);
//! - statuses are named by their enums (`domain/status.rs`), never as string literals (SurrealQL aside);
//! - `domain/` does no I/O (no async runtime, files, network, processes, mail, DNS, plugins or database);
//! - no source file has more than [`MAX_LINES`] lines before its tests.
//!
//! The plugin runtime (`host/plugin-runtime`, checked as `plugin-runtime/…`) keeps the same rules, so it imports
//! neither salvo nor surrealdb and reads the wall clock only in its `clock.rs`; its manifest and the SDK test
//! kit's depend on neither (a plugin author's `cargo test` must not compile the database).
//!
//! Comments are not checked (they may name what a module must not import), nor are test modules.

use std::path::{Path, PathBuf};

/// Most lines a source file may have before its `#[cfg(test)]` module.
const MAX_LINES: usize = 800;

/// Statement openings that make a string literal SurrealQL.
const SURREALQL: &[&str] = &[
    "BEGIN TRANSACTION",
    "COMMIT TRANSACTION",
    "INSERT INTO ",
    "UPSERT ",
    "RELATE ",
    "DEFINE TABLE",
    "DEFINE FIELD",
    "DEFINE INDEX",
    "LET $",
];

/// Crates and modules that do I/O, refused in `domain/`.
const IO: &[&str] = &[
    "tokio",
    "std::fs",
    "std::net",
    "std::process",
    "reqwest",
    "lettre",
    "hickory",
    "wasmtime",
    "surrealdb",
    "salvo",
    "notify",
];

/// The string forms of the statuses (`domain/status.rs`), refused as literals anywhere else: code names a
/// status by its enum variant.
const STATUS_FORMS: &[&str] = &[
    "PENDING",
    "SENDING",
    "SENT",
    "UNCERTAIN",
    "DELIVERED",
    "OPENED",
    "CLICKED",
    "BOUNCED",
    "COMPLAINED",
    "FAILED",
    "CANCELLED",
    "DRAFT",
    "SCHEDULED",
    "VERIFIED",
    "RUNNING",
    "WAITING",
    "COMPLETED",
    "EXITED",
    "SKIPPED",
    "queued",
    "running",
    "completed",
    "dead",
];

/// Whether a line has a string literal that is exactly a status's string form.
fn has_status_literal(text: &str) -> bool {
    text.split('"').skip(1).step_by(2).any(|lit| STATUS_FORMS.contains(&lit))
}

/// Whether a line calls a method of the store (`st.store.contact(..)`, or a chain that starts with a
/// line of its own, `st.store` / `.store`); handing the store to a service (`&st.store,`) is not a call.
fn calls_the_store(text: &str) -> bool {
    let t = text.trim_end();
    t.match_indices(".store.").any(|(i, _)| t[i + 7..].starts_with(|c: char| c.is_ascii_lowercase()))
        || t.ends_with("st.store")
        || t == ".store"
}

/// Wall-clock reads, refused outside `clock.rs`.
const WALL_CLOCK: &[&str] = &["SystemTime::now", "Utc::now", "Local::now", "OffsetDateTime::now"];

/// What is wrong with one source file (`rel`: its path under `host/src`, with `/`).
fn violations(rel: &str, source: &str) -> Vec<String> {
    let mut found = Vec::new();
    let code: Vec<&str> = source.lines().take_while(|l| !l.trim_start().starts_with("#[cfg(test)]")).collect();
    if code.len() > MAX_LINES {
        found.push(format!("{rel}: {} lines before its tests (at most {MAX_LINES}): split it by role", code.len()));
    }
    let in_api = rel.starts_with("api/");
    let in_store = rel.starts_with("store/");
    let in_domain = rel.starts_with("domain/");
    let in_server = in_api || matches!(rel, "lib.rs" | "main.rs");
    // The plugin runtime is an HTTP client and reads the statuses of the answers it fetches.
    let in_core = !in_server && !rel.starts_with("plugin-runtime/");
    // What each layer of the core may not import: (layer, modules, what to say).
    let below: &[(&str, &[&str])] = &[
        ("domain/", &["crate::store", "crate::services", "crate::state"]),
        ("store/", &["crate::services", "crate::state"]),
        ("infra/", &["crate::services", "crate::state"]),
        ("error.rs", &["crate::services"]),
    ];
    for (n, line) in code.iter().enumerate() {
        let at = format!("{rel}:{}", n + 1);
        let text = line.trim_start();
        if text.starts_with("//") {
            continue;
        }
        if !in_api && (text.contains("salvo::") || text.contains("salvo_oapi") || text.starts_with("use salvo")) {
            found.push(format!("{at}: salvo outside api/"));
        }
        if !in_store && (text.contains("surrealdb::") || text.starts_with("use surrealdb")) {
            found.push(format!("{at}: surrealdb outside store/"));
        }
        if !in_api && !matches!(rel, "lib.rs" | "main.rs") && text.contains("crate::api") {
            found.push(format!("{at}: reaches up into api/ (only lib.rs and main.rs wire it)"));
        }
        if !in_store && is_surrealql(text) {
            found.push(format!("{at}: SurrealQL outside store/"));
        }
        if !matches!(rel, "infra/clock.rs" | "plugin-runtime/clock.rs") && WALL_CLOCK.iter().any(|w| text.contains(w)) {
            found.push(format!("{at}: the wall clock outside the clock (use the injected clock)"));
        }
        if rel != "domain/status.rs" && has_status_literal(text) {
            found.push(format!("{at}: a status as a string literal (name it by its enum in domain::status)"));
        }
        if in_api && calls_the_store(text) {
            found.push(format!("{at}: a handler calls the store (call a service in services/)"));
        }
        if in_domain && IO.iter().any(|c| uses_path(text, c)) {
            found.push(format!("{at}: I/O in domain/"));
        }
        for (layer, above) in below {
            if rel.starts_with(layer)
                && let Some(m) =
                    above.iter().find(|m| text.contains(&format!("{m}::")) || text.contains(&format!("{m};")))
            {
                found.push(format!("{at}: {layer} imports {m} (layers import only downwards)"));
            }
        }
        if in_core && (uses_path(text, "ApiError") || text.contains("ApiError") || text.contains("StatusCode")) {
            found
                .push(format!("{at}: the server's error or an HTTP status in the core (return a crate::error::Error)"));
        }
    }
    found
}

/// Whether a line holds a string literal that opens a SurrealQL statement (`"SELECT ... FROM`,
/// `"UPDATE $x SET`, `"DELETE table WHERE`, or one of [`SURREALQL`]).
fn is_surrealql(text: &str) -> bool {
    text.split('"').skip(1).step_by(2).any(|lit| {
        let lit = lit.trim_start();
        SURREALQL.iter().any(|k| lit.starts_with(k))
            || (lit.starts_with("SELECT ") && lit.contains(" FROM "))
            || ((lit.starts_with("UPDATE ") || lit.starts_with("DELETE ") || lit.starts_with("CREATE "))
                && lit[7..].starts_with(|c: char| c.is_ascii_lowercase() || c == '$'))
    })
}

/// Whether `text` names the crate or module `path` (as `path::`, `use path` or `path;`).
fn uses_path(text: &str, path: &str) -> bool {
    text.match_indices(path).any(|(i, _)| {
        let before = text[..i].chars().last();
        let after = &text[i + path.len()..];
        before.is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
            && (after.starts_with("::") || after.starts_with(';') || after.starts_with(" as "))
    })
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the source folder").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The violations of every source file under `root`, each path prefixed with `prefix`.
fn check_tree(root: &Path, prefix: &str, at_least: usize) -> Vec<String> {
    let mut files = Vec::new();
    sources(root, &mut files);
    assert!(files.len() >= at_least, "found only {} source files under {}", files.len(), root.display());
    let mut found = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(root).expect("under the root").to_string_lossy().replace('\\', "/");
        let source = std::fs::read_to_string(file).expect("read a source file");
        found.extend(violations(&format!("{prefix}{rel}"), &source));
    }
    found
}

#[test]
fn the_host_keeps_its_layering_rules() {
    let host = &manifest_dir();
    let mut found = check_tree(&host.join("core/src"), "", 100);
    found.extend(check_tree(&host.join("src"), "", 30));
    found.extend(check_tree(&host.join("plugin-runtime/src"), "plugin-runtime/", 7));
    assert!(found.is_empty(), "the layering rules of ARCHITECTURE.md are broken:\n{}", found.join("\n"));
}

/// The `[dependencies]` table of a Cargo manifest: the crate names it lists.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[dependencies]";
        } else if inside && let Some((name, _)) = line.split_once('=') {
            // `tokio.workspace = true` names the crate before the dot.
            names.push(name.trim().split('.').next().unwrap_or_default().to_string());
        }
    }
    names
}

/// Dependencies the plugin runtime and the test kit must not have.
const NOT_FOR_PLUGIN_AUTHORS: &[&str] = &["surrealdb", "salvo", "salvo-oapi", "herald-host", "herald-core"];

/// Dependencies the core must not have: it names no front end.
const NOT_FOR_THE_CORE: &[&str] = &["salvo", "salvo-oapi", "herald-host"];

#[test]
fn the_core_depends_on_no_front_end() {
    let text = std::fs::read_to_string(manifest_dir().join("core/Cargo.toml")).expect("read the core's manifest");
    let deps = dependencies(&text);
    assert!(deps.iter().any(|d| d == "surrealdb"), "core/Cargo.toml: its [dependencies] were not found");
    let bad: Vec<_> = deps.iter().filter(|d| NOT_FOR_THE_CORE.contains(&d.as_str())).collect();
    assert!(bad.is_empty(), "core/Cargo.toml depends on {bad:?}");
}

#[test]
fn the_plugin_runtime_and_test_kit_need_no_database_or_server() {
    let host = &manifest_dir();
    for manifest in ["plugin-runtime/Cargo.toml", "../sdk/testkit/Cargo.toml"] {
        let text = std::fs::read_to_string(host.join(manifest)).expect("read a manifest");
        let deps = dependencies(&text);
        assert!(!deps.is_empty(), "{manifest}: no [dependencies] found");
        let bad: Vec<_> = deps.iter().filter(|d| NOT_FOR_PLUGIN_AUTHORS.contains(&d.as_str())).collect();
        assert!(bad.is_empty(), "{manifest} depends on {bad:?}");
    }
    // The check itself: a manifest that pulls the host in is caught.
    let sample = "[package]\nname = \"x\"\n\n[dependencies]\nherald-host = { path = \"../host\" }\ntokio = \"1\"\nsalvo.workspace = true\n";
    assert_eq!(dependencies(sample), ["herald-host", "tokio", "salvo"]);
}

#[test]
fn each_rule_catches_what_it_forbids() {
    let cases: &[(&str, &str, &str)] = &[
        ("lib.rs", "use salvo::Server;", "salvo outside api/"),
        ("error.rs", "    let s = salvo::http::StatusCode::OK;", "salvo outside api/"),
        ("state.rs", "use salvo_oapi::ToSchema;", "salvo outside api/"),
        ("infra/jobs/mod.rs", "use surrealdb::Surreal;", "surrealdb outside store/"),
        ("services/verify.rs", "if !crate::api::body::is_email(&e) {", "reaches up into api/"),
        ("infra/jobs/mod.rs", r#"store.query("DELETE seen WHERE at <= $now", v)"#, "SurrealQL outside store/"),
        ("services/campaigns.rs", r#"let q = "SELECT * FROM email";"#, "SurrealQL outside store/"),
        ("services/campaigns.rs", r#"q("BEGIN TRANSACTION; COMMIT TRANSACTION;")"#, "SurrealQL outside store/"),
        ("services/delivery/mod.rs", "let now = std::time::SystemTime::now();", "the wall clock outside the clock"),
        ("api/send.rs", "let t = chrono::Utc::now();", "the wall clock outside the clock"),
        ("plugin-runtime/lib.rs", "let t = chrono::Utc::now();", "the wall clock outside the clock"),
        ("plugin-runtime/loading.rs", "use surrealdb::Surreal;", "surrealdb outside store/"),
        ("plugin-runtime/http.rs", "use salvo::Router;", "salvo outside api/"),
        ("domain/tracking.rs", "use tokio::sync::Mutex;", "I/O in domain/"),
        ("domain/text.rs", "let f = std::fs::read(p);", "I/O in domain/"),
        ("api/segments.rs", "let s = st.store.segment(&p, &id).await?;", "a handler calls the store"),
        ("api/templates.rs", "        st.store", "a handler calls the store"),
        ("api/contacts.rs", "let c = st.store.contact(&p, &id).await?;", "a handler calls the store"),
        ("services/campaigns/mod.rs", r#"if c.status == "SENDING" {"#, "a status as a string literal"),
        ("store/jobs.rs", r#"vars! { "status": "queued" }"#, "a status as a string literal"),
        ("domain/contacts.rs", "use crate::store::contacts::Contact;", "domain/ imports crate::store"),
        ("domain/workflows/run.rs", "let n = crate::services::workflows::MAX;", "domain/ imports crate::services"),
        ("domain/billing.rs", "use crate::state;", "domain/ imports crate::state"),
        ("store/jobs.rs", "let j = crate::services::projects::purge_job(p, 1);", "store/ imports crate::services"),
        ("store/mod.rs", "use crate::state::AppState;", "store/ imports crate::state"),
        ("infra/jobs/mod.rs", "crate::services::projects::register(&mut r);", "infra/ imports crate::services"),
        (
            "error.rs",
            "impl From<crate::services::segments::SegmentError> for Error {",
            "error.rs imports crate::services",
        ),
        ("services/suspension.rs", "use crate::error::ApiError;", "the server's error or an HTTP status in the core"),
        (
            "services/payments.rs",
            "let s = http::StatusCode::CONFLICT;",
            "the server's error or an HTTP status in the core",
        ),
    ];
    for (rel, line, rule) in cases {
        let found = violations(rel, line);
        assert!(found.iter().any(|f| f.contains(rule)), "{rel}: {line:?} should break {rule:?}, found {found:?}");
    }
    let long = "let x = 1;\n".repeat(MAX_LINES + 1);
    assert!(violations("big.rs", &long).iter().any(|f| f.contains("lines before its tests")));
    // What each rule allows.
    let allowed: &[(&str, &str)] = &[
        ("api/send.rs", "use salvo::prelude::*;"),
        ("store/emails.rs", r#"self.query("DELETE email WHERE id = $id", v)"#),
        ("store/mod.rs", "use surrealdb::Surreal;"),
        ("infra/clock.rs", "let now = SystemTime::now();"),
        ("plugin-runtime/clock.rs", "Utc::now().timestamp_millis()"),
        ("infra/jobs/mod.rs", "//! Must not import: salvo, surrealdb."),
        ("api/contacts.rs", r#"#[endpoint(summary = "DELETE /contacts/:id removes a contact")]"#),
        ("domain/tracking.rs", "let tokio_like = 1; // tokio is fine in a comment"),
        ("api/segments.rs", "let c = manage::add_members(&st, &p, &id, &emails).await?;"),
        ("domain/status.rs", r#"Sending = "SENDING","#),
        ("store/campaigns.rs", r#"q("SELECT id FROM campaign WHERE status = 'SENDING'")"#),
        ("api/domains.rs", "let list = sending_domains::list(&st.store, &project_id).await?;"),
        ("api/errors.rs", "pub fn status(e: &ApiError) -> StatusCode {"),
        ("services/campaigns/manage.rs", "use crate::store::campaigns::CampaignRow;"),
        ("domain/conditions.rs", "use crate::infra::clock::parse_rfc3339;"),
        ("services/send.rs", "use crate::error::Error;"),
        ("big.rs", &format!("{}#[cfg(test)]\n{}", "let x = 1;\n".repeat(MAX_LINES), "let y = 2;\n".repeat(50))),
    ];
    for (rel, source) in allowed {
        assert_eq!(violations(rel, source), Vec::<String>::new(), "{rel}: {source:?} is allowed");
    }
}

/// The package's folder, as cargo says when it runs the test (a test binary reused from another checkout
/// that shares the target directory still reads this checkout), else where it was built.
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
}
