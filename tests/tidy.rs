//! The tidy check: the layering rules of ARCHITECTURE.md ("Layering") that Cargo cannot hold, enforced
//! on the source of the core (`host/core/src`, paths as `store/…`) and of the server (`host/src`, paths
//! as `api/…`, `lib.rs`, `main.rs`). Cargo holds the first rule: the core's manifest has no salvo, so
//! nothing of it can name the server.
//!
//! - only `api/` imports salvo; only `store/` imports surrealdb or writes SurrealQL; nothing below the API
//!   reaches up into `api/` (`lib.rs` and `main.rs` wire it);
//! - inside the core, layers import only downwards: `domain/` nothing of `store/`, `services/` or the
//!   services' handle (`state.rs`), `store/` nothing of `services/` or `state.rs`, `infra/` nothing of
//!   `services/` or `state.rs`, `error.rs` nothing of `services/`; `services/` and the context they stand on
//!   (`context.rs`) nothing of the front ends' handle (`state.rs`), which holds the services;
//! - no file of the core names the server's error type or an HTTP status type (`ApiError`, `StatusCode`):
//!   the core's errors say what went wrong, the server's table (`api/errors.rs`) chooses the status;
//! - the wall clock is read only in the clock (the plugin runtime's `clock.rs`; everything else asks the
//!   injected clock, so tests can move time): clippy holds that (`disallowed-methods` in clippy.toml, which
//!   [`WALL_CLOCK`] checks lists each read), and here no file but a `clock.rs` silences it;
//! - handlers in `api/` call services, never the store (they may hand it to a service);
//! - statuses are named by their enums (`domain/status.rs`), never as string literals (SurrealQL aside);
//! - `domain/` does no I/O (no async runtime, files, network, processes, mail, DNS, plugins or database);
//! - no source file has more than [`MAX_LINES`] lines outside its test modules;
//! - no import cycles between modules: in the graph whose nodes are the modules directly under a layer
//!   (`store/emails.rs`, the folder `services/campaigns/`) and the files at a crate's top (`state.rs`,
//!   `error.rs`), an edge is a path one names in another (`crate::…`, `super::…`, `self::…`, a declared
//!   child); a parent naming its own children (a folder's `mod.rs`, the crate root wiring the layers) is
//!   not an import. The files of one node may name each other (they split one capability).
//!
//! The plugin runtime (`host/plugin-runtime`, checked as `plugin-runtime/…`) keeps the same rules, so it imports
//! neither salvo nor surrealdb and silences clippy's clock rule only in its `clock.rs`; its manifest and the SDK test
//! kit's depend on neither (a plugin author's `cargo test` must not compile the database).
//!
//! ARCHITECTURE.md's code map names every module of those three trees (in the part that lists the tree's
//! files) and every test and bench target of the workspace, and every folder of `tests/`.
//!
//! Comments are not checked (they may name what a module must not import), nor are inline test modules
//! (`#[cfg(test)] mod tests { … }`); the rest of a file is read whole, after its test modules too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Most lines a source file may have outside its inline test modules.
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

/// Wall-clock reads, which clippy.toml's `disallowed-methods` must list (each with a reason): only the
/// clock reads them, under `#[expect(clippy::disallowed_methods)]`.
const WALL_CLOCK: &[&str] = &[
    "std::time::SystemTime::now",
    "chrono::Utc::now",
    "chrono::Local::now",
    "time::OffsetDateTime::now_utc",
    "time::OffsetDateTime::now_local",
];

/// The lines of a source file outside its inline test modules, each with its number (from 1). A
/// `#[cfg(test)]` that opens `mod name {` skips that module through its closing brace (found by matching
/// braces past strings, characters and comments), or the rest of the file if none closes it; any other
/// `#[cfg(test)]` item is read, a module declared in a file of its own (`mod properties;`) included.
fn code_lines(source: &str) -> Vec<(usize, &str)> {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = Vec::new();
    let mut n = 0;
    while n < lines.len() {
        if let Some(last) = test_module_end(&lines, n) {
            n = last + 1;
            continue;
        }
        out.push((n + 1, lines[n]));
        n += 1;
    }
    out
}

/// When line `at` is a `#[cfg(test)]` that opens an inline module, the index of the module's last line.
fn test_module_end(lines: &[&str], at: usize) -> Option<usize> {
    let mut item = lines[at].trim_start().strip_prefix("#[cfg(test)]")?.trim_start();
    // The item the attribute applies to: after any further attributes and comments.
    let mut n = at;
    while item.is_empty() || item.starts_with("#[") || item.starts_with("//") {
        n += 1;
        item = lines.get(n)?.trim_start();
    }
    let rest = item.strip_prefix("pub(crate) ").or_else(|| item.strip_prefix("pub ")).unwrap_or(item);
    let rest = rest.strip_prefix("mod ")?.trim_start();
    let name = rest.bytes().take_while(|b| is_ident(*b)).count();
    if name == 0 || !rest[name..].trim_start().starts_with('{') {
        return None;
    }
    // From the module's `{`: the lines up to the brace that closes it.
    let open = lines[n].find('{').expect("the module's brace");
    let body = lines[n..].join("\n");
    Some(match closing_brace(&body[open..]) {
        Some(end) => n + body[..open + end].matches('\n').count(),
        None => lines.len() - 1,
    })
}

/// Where the brace that closes the `{` at the start of `code` is (a byte offset), reading past string,
/// raw string and character literals and comments.
fn closing_brace(code: &str) -> Option<usize> {
    let b = code.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            b'/' if b.get(i + 1) == Some(&b'/') => i += b[i..].iter().position(|c| *c == b'\n').unwrap_or(b.len() - i),
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut nested = 0usize;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        nested += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        nested -= 1;
                        i += 2;
                        if nested == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                continue;
            }
            b'r' if (i == 0 || !is_ident(b[i - 1]) || b[i - 1] == b'b')
                && matches!(b.get(i + 1), Some(b'#' | b'"')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
                if b.get(i + 1 + hashes) == Some(&b'"') {
                    let close = format!("\"{}", "#".repeat(hashes));
                    let from = i + 2 + hashes;
                    i = code[from..].find(&close).map_or(b.len(), |e| from + e + close.len());
                    continue;
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'\'' => {
                // A character literal ('{', '\'', '\u{7b}'), or a lifetime or label ('a) left as it is.
                let quote = if b.get(i + 1) == Some(&b'\\') {
                    b.get(i + 3..).and_then(|r| r.iter().position(|c| *c == b'\'')).map(|e| i + 3 + e)
                } else {
                    code[i + 1..].chars().next().map(|c| i + 1 + c.len_utf8()).filter(|e| b.get(*e) == Some(&b'\''))
                };
                if let Some(q) = quote {
                    i = q;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// What is wrong with one source file (`rel`: its path under `host/src`, with `/`).
fn violations(rel: &str, source: &str) -> Vec<String> {
    let mut found = Vec::new();
    let code = code_lines(source);
    if code.len() > MAX_LINES {
        found.push(format!(
            "{rel}: {} lines outside its test modules (at most {MAX_LINES}): split it by role",
            code.len()
        ));
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
        // The front ends' handle holds the services; they stand on the context beneath it.
        ("services/", &["crate::state"]),
        ("context.rs", &["crate::state"]),
    ];
    for &(n, line) in &code {
        let at = format!("{rel}:{n}");
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
        if !matches!(rel, "infra/clock.rs" | "plugin-runtime/clock.rs") && text.contains("clippy::disallowed_methods") {
            found.push(format!("{at}: clippy's clock rule silenced outside the clock (use the injected clock)"));
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

/// The wall-clock reads of [`WALL_CLOCK`] that a clippy.toml does not refuse: its `disallowed-methods`
/// has no entry with that `path` and a `reason`.
fn clock_reads_clippy_allows(clippy_toml: &str) -> Vec<&'static str> {
    let list = clippy_toml.split_once("disallowed-methods = [").map_or("", |(_, rest)| rest);
    let list = list.split_once("\n]").map_or(list, |(l, _)| l);
    let refused: Vec<&str> = list
        .split('{')
        .skip(1)
        .filter(|entry| entry.contains("reason = \""))
        .filter_map(|entry| entry.split_once("path = \"")?.1.split_once('"').map(|(p, _)| p))
        .collect();
    WALL_CLOCK.iter().copied().filter(|read| !refused.contains(read)).collect()
}

#[test]
fn clippy_refuses_the_wall_clock_outside_the_clock() {
    let text = std::fs::read_to_string(manifest_dir().join("../clippy.toml")).expect("read clippy.toml");
    assert_eq!(clock_reads_clippy_allows(&text), Vec::<&str>::new(), "clippy.toml's disallowed-methods misses these");
    // The check itself: an entry missing, or without its reason, is caught.
    let sample = concat!(
        "allow-unwrap-in-tests = true\n",
        "disallowed-methods = [\n",
        "    { path = \"std::time::SystemTime::now\", reason = \"the clock\" },\n",
        "    { path = \"chrono::Local::now\", reason = \"the clock\", allow-invalid = true },\n",
        "    { path = \"time::OffsetDateTime::now_utc\" },\n",
        "    \"time::OffsetDateTime::now_local\",\n",
        "]\n",
        "disallowed-types = [{ path = \"chrono::Utc::now\", reason = \"not a method list\" }]\n",
    );
    assert_eq!(
        clock_reads_clippy_allows(sample),
        ["chrono::Utc::now", "time::OffsetDateTime::now_utc", "time::OffsetDateTime::now_local"]
    );
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
        ("services/delivery/mod.rs", "#[allow(clippy::disallowed_methods)]", "clock rule silenced outside the clock"),
        ("api/send.rs", "    #[expect(clippy::disallowed_methods)]", "clock rule silenced outside the clock"),
        ("plugin-runtime/lib.rs", "#![allow(clippy::disallowed_methods)]", "clock rule silenced outside the clock"),
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
        ("services/billing.rs", "use crate::state::AppState;", "services/ imports crate::state"),
        (
            "services/workflows/manage.rs",
            "pub async fn get(st: &crate::state::AppState) {",
            "services/ imports crate::state",
        ),
        ("context.rs", "use crate::state::AppState;", "context.rs imports crate::state"),
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
    assert!(violations("big.rs", &long).iter().any(|f| f.contains("lines outside its test modules")));
    // A test module declared in a file of its own stops nothing: what follows it is read.
    let declared = "pub mod store;\n#[cfg(test)]\nmod properties;\n\nuse salvo::Server;\n";
    assert_eq!(violations("services/x.rs", declared), ["services/x.rs:5: salvo outside api/"]);
    let long = format!("#[cfg(test)]\nmod properties;\n{}", "let x = 1;\n".repeat(MAX_LINES));
    assert!(violations("big.rs", &long).iter().any(|f| f.contains("lines outside its test modules")));
    // An inline test module ends at its closing brace, past braces in strings, characters and comments;
    // what follows it is read, numbered as in the file.
    let after = concat!(
        "fn f() {}\n",
        "#[cfg(test)]\n",
        "mod tests {\n",
        "    use salvo::Server;\n",
        "    const A: &str = \"}\"; const B: char = '}'; const C: &str = r#\"\"}\"#; // }\n",
        "    /* } */ fn g<'a>(x: &'a str) -> char { let _ = '\\''; 'x' }\n",
        "}\n",
        "\n",
        "use surrealdb::Surreal;\n",
    );
    assert_eq!(violations("services/x.rs", after), ["services/x.rs:9: surrealdb outside store/"]);
    let unicode = "#[cfg(test)]\nmod tests {\n    /* é } */ const E: char = 'é'; // ü }\n}\nuse salvo::Server;\n";
    assert_eq!(violations("services/x.rs", unicode), ["services/x.rs:5: salvo outside api/"]);
    let attributed =
        "#[cfg(test)]\n#[allow(unused)]\npub(crate) mod tests {\n    use salvo::Server;\n}\nuse salvo::Router;\n";
    assert_eq!(violations("services/x.rs", attributed), ["services/x.rs:6: salvo outside api/"]);
    // A `#[cfg(test)]` item that is not a module is read.
    assert_eq!(
        violations("services/x.rs", "#[cfg(test)]\nuse salvo::Server;\n"),
        ["services/x.rs:2: salvo outside api/"]
    );
    // What each rule allows.
    let allowed: &[(&str, &str)] = &[
        ("api/send.rs", "use salvo::prelude::*;"),
        ("store/emails.rs", r#"self.query("DELETE email WHERE id = $id", v)"#),
        ("store/mod.rs", "use surrealdb::Surreal;"),
        ("plugin-runtime/clock.rs", "#[expect(clippy::disallowed_methods)]"),
        ("services/send.rs", "// clippy::disallowed_methods keeps the wall clock in the clock"),
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
        ("services/send.rs", "use crate::context::Context;"),
        ("state.rs", "use crate::services::events::EventBus;"),
        (
            "big.rs",
            &format!(
                "{}#[cfg(test)]\nmod tests {{\n{}}}\n",
                "let x = 1;\n".repeat(MAX_LINES),
                "let y = 2;\n".repeat(50)
            ),
        ),
        ("services/x.rs", "fn f() {}\n\n#[cfg(test)]\nmod tests {\n    use salvo::Server;\n"),
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

/// The module a source file is, as its path segments (`services/billing/mod.rs` → `services::billing`;
/// the crate root is empty).
fn module_of(rel: &str) -> Vec<String> {
    let mut segs: Vec<String> = rel.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    if segs.last().is_some_and(|s| matches!(s.as_str(), "mod" | "lib" | "main")) {
        segs.pop();
    }
    segs
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The identifier that starts at `at`, and where it ends.
fn ident(code: &str, at: usize) -> (&str, usize) {
    let end = code[at..].bytes().position(|b| !is_ident(b)).map_or(code.len(), |n| at + n);
    (&code[at..end], end)
}

/// The paths written from `at` on (`a::b`, `a::{b, c::{d, e}}`, `a::*`), each as its segments, and where
/// they end.
fn expand(code: &str, mut at: usize) -> (Vec<Vec<String>>, usize) {
    let mut base = Vec::new();
    loop {
        if code[at..].starts_with('{') {
            at += 1;
            let mut out = Vec::new();
            loop {
                at += code[at..].bytes().take_while(|b| b.is_ascii_whitespace() || *b == b',').count();
                if at >= code.len() || code[at..].starts_with('}') {
                    return (out, (at + 1).min(code.len()));
                }
                let (subs, end) = expand(code, at);
                if end == at {
                    // Nothing this parser reads (a glob, an attribute): step over it.
                    at += 1;
                    continue;
                }
                out.extend(subs.into_iter().map(|s| base.iter().cloned().chain(s).collect()));
                at = end;
                // `x as y`: the name it is given is not a path.
                if let Some(alias) = code[at..].trim_start().strip_prefix("as ") {
                    at = ident(code, code.len() - alias.trim_start().len()).1;
                }
            }
        }
        let (word, end) = ident(code, at);
        if word.is_empty() {
            break;
        }
        if word != "self" {
            base.push(word.to_string());
        }
        at = end;
        if code[at..].starts_with("::") {
            at += 2;
        } else {
            break;
        }
    }
    (vec![base], at)
}

/// The modules' paths one file names, each resolved against the file's module `here`: `crate::…`,
/// `super::…`, `self::…` and the children it declares (`mod x;` then `x::…`).
fn named_paths(here: &[String], source: &str) -> Vec<Vec<String>> {
    let code: String = code_lines(source)
        .into_iter()
        .map(|(_, l)| l)
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let children: Vec<&str> = code
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("pub(crate) ").or_else(|| l.strip_prefix("pub ")).unwrap_or(l);
            l.strip_prefix("mod ")?.strip_suffix(';')
        })
        .collect();
    let parent = &here[..here.len().saturating_sub(1)];
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        if !is_ident(bytes[i]) || (i > 0 && (is_ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let (word, end) = ident(&code, i);
        i = end;
        if !code[end..].starts_with("::") {
            continue;
        }
        let base: Vec<String> = match word {
            "crate" => vec![],
            "super" => parent.to_vec(),
            "self" => here.to_vec(),
            w if children.contains(&w) => here.iter().cloned().chain([w.to_string()]).collect(),
            _ => continue,
        };
        let (paths, after) = expand(&code, end + 2);
        for path in paths {
            let mut segs = base.clone();
            for s in path {
                if s == "super" {
                    segs.pop();
                } else {
                    segs.push(s);
                }
            }
            out.push(segs);
        }
        i = after.max(end);
    }
    out
}

/// The node a module belongs to: the module directly under its layer (`services::campaigns::send` →
/// `services::campaigns`), or the crate root (`crate`).
fn node(module: &[String]) -> String {
    if module.is_empty() { "crate".to_string() } else { module[..module.len().min(2)].join("::") }
}

/// The import graph of one crate's sources (`rel` path with `/`, source): for each node, the nodes it
/// names, a parent's naming of its own descendants left out.
fn module_graph(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(rel, _)| module_of(rel)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, source) in files {
        let here = module_of(rel);
        let from = node(&here);
        graph.entry(from.clone()).or_default();
        for path in named_paths(&here, source) {
            // The longest prefix that is a module (an item of the crate root otherwise).
            let target = (0..=path.len()).rev().map(|n| &path[..n]).find(|p| modules.contains(*p)).unwrap_or(&[]);
            let to = node(target);
            if to == from || from == "crate" || to.starts_with(&format!("{from}::")) {
                continue;
            }
            graph.entry(from.clone()).or_default().insert(to);
        }
    }
    graph
}

/// The import cycles of a graph: each strongly connected set of more than one node, sorted.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let n = w.index.len();
        w.index.insert(v, (n, n));
        w.stack.push(v);
        let graph = w.graph;
        for to in graph.get(v).into_iter().flatten() {
            let to = to.as_str();
            match w.index.get(to) {
                None => {
                    visit(w, to);
                    let low = w.index[to].1;
                    w.index.get_mut(v).expect("visited").1 = w.index[v].1.min(low);
                }
                Some(&(i, _)) if w.stack.contains(&to) => w.index.get_mut(v).expect("visited").1 = w.index[v].1.min(i),
                Some(_) => {}
            }
        }
        if w.index[v].0 == w.index[v].1 {
            let at = w.stack.iter().rposition(|s| *s == v).expect("on the stack");
            let mut set: Vec<String> = w.stack.split_off(at).into_iter().map(str::to_string).collect();
            if set.len() > 1 {
                set.sort();
                w.found.push(set);
            }
        }
    }
    let mut w = Walk { graph, index: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for v in graph.keys() {
        if !w.index.contains_key(v.as_str()) {
            visit(&mut w, v);
        }
    }
    w.found.sort();
    w.found
}

/// The sources under `root`, as (path under it with `/`, text).
fn read_tree(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    sources(root, &mut files);
    files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(root).expect("under the root").to_string_lossy().replace('\\', "/");
            (rel, std::fs::read_to_string(f).expect("read a source file"))
        })
        .collect()
}

#[test]
fn the_modules_form_no_import_cycles() {
    let host = &manifest_dir();
    let mut found = Vec::new();
    for (dir, at_least) in [("core/src", 60), ("src", 20), ("plugin-runtime/src", 4)] {
        let graph = module_graph(&read_tree(&host.join(dir)));
        assert!(graph.len() >= at_least, "{dir}: only {} modules found", graph.len());
        found.extend(cycles(&graph).into_iter().map(|c| (dir, c)));
    }
    assert!(found.is_empty(), "import cycles (each a set of modules that import each other): {found:#?}");
}

#[test]
fn the_module_graph_sees_what_it_should() {
    let files = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter().map(|(r, s)| (r.to_string(), s.to_string())).collect()
    };
    // Two stores naming each other through `super::` and `crate::`: a cycle.
    let pair = files(&[
        ("store/mod.rs", "pub mod a;\npub mod b;\npub struct Store;\nuse a::Row;"),
        ("store/a.rs", "use super::{Store, b::Other};"),
        ("store/b.rs", "fn f(r: crate::store::a::Row) {}"),
    ]);
    assert_eq!(cycles(&module_graph(&pair)), vec![vec!["store::a".to_string(), "store::b".to_string()]]);
    // A parent wiring its children and children naming the parent: no cycle; the files of one folder
    // naming each other: no cycle.
    let tree = files(&[
        ("lib.rs", "pub mod store;\npub mod services;\nuse services::x::run;"),
        ("store/mod.rs", "pub mod a;\npub struct Store;\nuse self::a::Row;"),
        ("store/a.rs", "use super::Store;\n// use crate::services::x; in a comment"),
        ("services/mod.rs", "pub mod x;"),
        ("services/x/mod.rs", "mod y;\nuse y::Helper;\nuse crate::{store::{Store, a::Row}};"),
        ("services/x/y.rs", "use super::super::x::Thing;"),
    ]);
    let graph = module_graph(&tree);
    assert_eq!(cycles(&graph), Vec::<Vec<String>>::new());
    assert_eq!(graph["services::x"], ["store".to_string(), "store::a".to_string()].into_iter().collect());
    assert!(graph["store::a"].contains("store") && !graph["store"].contains("store::a"));
    // The state a service takes, holding that service: a cycle through a grouped import.
    let locator = files(&[
        ("state.rs", "pub struct AppState { pub s: crate::services::s::Svc }"),
        ("services/s.rs", "use crate::{error::Error, state::AppState};"),
        ("error.rs", ""),
    ]);
    assert_eq!(cycles(&module_graph(&locator)), vec![vec!["services::s".to_string(), "state".to_string()]]);
}

/// The source trees whose files ARCHITECTURE.md's code map lists, each in a part of its own that opens
/// with a line `` `<tree>`: ``.
const SOURCE_TREES: &[&str] = &["host/core/src", "host/src", "host/plugin-runtime/src"];

/// The part of ARCHITECTURE.md that lists the files of `tree`: from its line `` `<tree>`: `` to the
/// next tree's or the next heading.
fn code_map_part<'a>(doc: &'a str, tree: &str) -> &'a str {
    let marker = |t: &str| format!("\n`{t}`:");
    let Some(start) = doc.find(&marker(tree)) else { return "" };
    let rest = &doc[start + 1..];
    let end = SOURCE_TREES.iter().map(|t| marker(t)).chain(["\n## ".to_string()]).filter_map(|m| rest.find(&m)).min();
    &rest[..end.unwrap_or(rest.len())]
}

/// What a text writes in backticks, in order (code fences left out).
fn ticked(text: &str) -> Vec<&str> {
    text.split("```").step_by(2).flat_map(|t| t.split('`').skip(1).step_by(2)).collect()
}

/// The name a backticked token gives: its last path segment without `.rs` (`` `config/smtp.rs` `` →
/// `smtp`, `` `delivery/` `` → `delivery`, `` `domain::inbound::bounces` `` → `bounces`).
fn name_in(token: &str) -> &str {
    let t = token.trim_end_matches('/');
    let last = t.rsplit(['/', ':']).next().unwrap_or(t);
    last.strip_suffix(".rs").unwrap_or(last)
}

/// The name a source file's module goes by: its file's stem, or its folder's for a `mod.rs`
/// (`services/delivery/mod.rs` → `delivery`; the crate roots `lib` and `main`).
fn module_name(rel: &str) -> &str {
    let path = rel.strip_suffix("/mod.rs").unwrap_or(rel);
    let file = path.rsplit('/').next().unwrap_or(path);
    file.strip_suffix(".rs").unwrap_or(file)
}

/// The modules of `tree` (its files' paths under it) that its part of ARCHITECTURE.md's code map does
/// not name. A file at the tree's top is named anywhere in the part; a file inside a top folder (`store/`)
/// after that folder's `` `store/` `` and before the next top folder's, or by a path into the folder
/// (`` `store/throttles.rs` ``) anywhere in the part: `throttles` listed among the services does not
/// name `store/throttles.rs`.
fn unnamed_modules(doc: &str, tree: &str, files: &[String]) -> Vec<String> {
    // The top folder a module is inside (none for `lib.rs`, `store/mod.rs`).
    let folder_of = |rel: &str| rel.strip_suffix("/mod.rs").unwrap_or(rel).split_once('/').map(|(f, _)| f.to_string());
    let folders: BTreeSet<String> = files.iter().filter_map(|rel| folder_of(rel)).collect();
    let mut anywhere = BTreeSet::new();
    let mut inside: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut current = None;
    for token in ticked(code_map_part(doc, tree)) {
        let name = name_in(token);
        anywhere.insert(name);
        if token.strip_suffix('/').is_some_and(|f| folders.contains(f)) {
            current = Some(name);
            continue;
        }
        let first = token.split('/').next().unwrap_or_default();
        let into = if token.contains('/') && folders.contains(first) { Some(first) } else { current };
        if let Some(folder) = into {
            inside.entry(folder).or_default().insert(name);
        }
    }
    files
        .iter()
        .filter(|rel| {
            let name = module_name(rel);
            match folder_of(rel) {
                None => !anywhere.contains(name),
                Some(f) => !inside.get(f.as_str()).is_some_and(|n| n.contains(name)),
            }
        })
        .map(|rel| format!("{tree}/{rel}: ARCHITECTURE.md's code map of `{tree}` does not name `{}`", module_name(rel)))
        .collect()
}

/// A path with its `..` segments resolved (`host/../tests/api/main.rs` → `tests/api/main.rs`).
fn normalise(path: &str) -> String {
    let mut segs: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            ".." => {
                segs.pop();
            }
            "." | "" => {}
            s => segs.push(s),
        }
    }
    segs.join("/")
}

/// The quoted strings of a manifest's `key = [ ... ]` list (the workspace's `members`).
fn quoted_list(manifest: &str, key: &str) -> Vec<String> {
    let Some(start) = manifest.find(&format!("\n{key} = [")) else { return Vec::new() };
    let list = &manifest[start..];
    let list = &list[..list.find(']').unwrap_or(list.len())];
    list.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

/// The test and bench targets of the package in `dir` (a path from the repository's root), each as the
/// path of its source from the root: its manifest's `[[test]]` and `[[bench]]` tables, and what Cargo
/// finds by itself (`tests/*.rs`, `tests/*/main.rs`, the same under `benches/`).
fn targets(root: &Path, dir: &str) -> BTreeSet<String> {
    let manifest = std::fs::read_to_string(root.join(dir).join("Cargo.toml")).expect("read a manifest");
    let mut out = BTreeSet::new();
    let mut table: Option<(&str, Option<String>, Option<String>)> = None;
    let close = |t: Option<(&str, Option<String>, Option<String>)>, out: &mut BTreeSet<String>| {
        if let Some((folder, name, path)) = t {
            let path = path.unwrap_or_else(|| format!("{folder}/{}.rs", name.unwrap_or_default()));
            out.insert(normalise(&format!("{dir}/{path}")));
        }
    };
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            close(table.take(), &mut out);
            table = match line {
                "[[test]]" => Some(("tests", None, None)),
                "[[bench]]" => Some(("benches", None, None)),
                _ => None,
            };
        } else if let Some((_, name, path)) = table.as_mut()
            && let Some((key, value)) = line.split_once('=')
        {
            let value = Some(value.trim().trim_matches('"').to_string());
            match key.trim() {
                "name" => *name = value,
                "path" => *path = value,
                _ => {}
            }
        }
    }
    close(table.take(), &mut out);
    for folder in ["tests", "benches"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(folder)) else { continue };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            let path = entry.path();
            if path.is_dir() && path.join("main.rs").exists() {
                out.insert(normalise(&format!("{dir}/{folder}/{name}/main.rs")));
            } else if name.ends_with(".rs") {
                out.insert(normalise(&format!("{dir}/{folder}/{name}")));
            }
        }
    }
    out
}

/// The targets (paths of their sources) that ARCHITECTURE.md does not name. A target is named by its
/// path in backticks (its folder's, `` `tests/api/` ``, for a `main.rs`), or by its file in backticks on
/// a line that names its folder (`` | `host/benches/` | … `track`, `send` … | ``).
fn unnamed_targets(doc: &str, targets: &BTreeSet<String>) -> Vec<String> {
    let ticked = |s: &str| format!("`{s}`");
    targets
        .iter()
        .filter(|path| {
            let (folder, file) = path.rsplit_once('/').unwrap_or(("", path));
            let by_path = if file == "main.rs" { ticked(&format!("{folder}/")) } else { ticked(path) };
            let stem = file.trim_end_matches(".rs");
            let in_folder_line = doc.lines().any(|l| {
                l.contains(&ticked(&format!("{folder}/"))) && (l.contains(&ticked(stem)) || l.contains(&ticked(file)))
            });
            !doc.contains(&by_path) && (file == "main.rs" || !in_folder_line)
        })
        .map(|path| format!("{path}: a test or bench target ARCHITECTURE.md does not name"))
        .collect()
}

#[test]
fn the_architecture_names_every_module_and_test_target() {
    let root = &manifest_dir().join("..");
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("read ARCHITECTURE.md");
    let mut found = Vec::new();
    for tree in SOURCE_TREES {
        let files: Vec<String> = read_tree(&root.join(tree)).into_iter().map(|(rel, _)| rel).collect();
        assert!(files.len() >= 8, "{tree}: only {} source files found", files.len());
        found.extend(unnamed_modules(&doc, tree, &files));
    }
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).expect("read the workspace manifest");
    let members = quoted_list(&workspace, "members");
    assert!(members.len() >= 10, "the workspace's members were not found");
    let mut all = BTreeSet::new();
    for member in &members {
        all.extend(targets(root, member));
    }
    assert!(all.contains("tests/tidy.rs") && all.contains("host/benches/track.rs"), "targets not found: {all:?}");
    // Each folder of `tests/`, a target or not (`tests/surreal-server/` is a package of its own).
    for entry in std::fs::read_dir(root.join("tests")).expect("read tests/").flatten() {
        if entry.path().is_dir() {
            all.insert(format!("tests/{}/main.rs", entry.file_name().to_string_lossy()));
        }
    }
    found.extend(unnamed_targets(&doc, &all));
    assert!(found.is_empty(), "ARCHITECTURE.md's code map is missing:\n{}", found.join("\n"));
}

#[test]
fn the_architecture_check_catches_what_is_missing() {
    let doc = concat!(
        "## Code map\n\n| `host/benches/` | | programs: `track`, `send.rs` |\n| `tests/api/`, `tests/tidy.rs` | | |\n\n",
        "`host/core/src`:\n\n- `lib.rs` (`Core`), `store/`: `mod.rs`, `emails`, `segments/` (`translate`).\n",
        "- `services/`: `throttles`, `tallies` (its counts in `store/tallies.rs`).\n\n",
        "`host/src`: `lib.rs`, `api/`: `mod.rs`, `context`.\n\n## Layering\n\n`backup`\n",
    );
    let core = |files: &[&str]| files.iter().map(|f| f.to_string()).collect::<Vec<_>>();
    let files = core(&[
        "lib.rs",
        "store/mod.rs",
        "store/emails.rs",
        "store/segments/mod.rs",
        "store/segments/translate.rs",
        "store/tallies.rs",
        "services/mod.rs",
        "services/throttles.rs",
    ]);
    assert_eq!(unnamed_modules(doc, "host/core/src", &files), Vec::<String>::new());
    // Named under another folder, outside the code map or in another tree's part is not named.
    let files = core(&["lib.rs", "store/throttles.rs", "store/backup.rs", "context.rs", "services/throttles.rs"]);
    let missing = |tree: &str, rel: &str| {
        format!("{tree}/{rel}: ARCHITECTURE.md's code map of `{tree}` does not name `{}`", module_name(rel))
    };
    assert_eq!(
        unnamed_modules(doc, "host/core/src", &files),
        [
            missing("host/core/src", "store/throttles.rs"),
            missing("host/core/src", "store/backup.rs"),
            missing("host/core/src", "context.rs")
        ]
    );
    assert_eq!(
        unnamed_modules(doc, "host/src", &core(&["api/throttles.rs"])),
        [missing("host/src", "api/throttles.rs")]
    );
    let all: BTreeSet<String> = [
        "host/benches/track.rs",
        "host/benches/send.rs",
        "host/benches/soak.rs",
        "tests/api/main.rs",
        "tests/tidy.rs",
        "tests/browser/main.rs",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    assert_eq!(
        unnamed_targets(doc, &all),
        [
            "host/benches/soak.rs: a test or bench target ARCHITECTURE.md does not name",
            "tests/browser/main.rs: a test or bench target ARCHITECTURE.md does not name",
        ]
    );
    let manifest = "[package]\nname = \"x\"\n\n[[test]]\nname = \"api\"\npath = \"../tests/api/main.rs\"\n\n[[bench]]\nname = \"track\"\nharness = false\n\n[dependencies]\nname = \"y\"\n";
    let dir = std::env::temp_dir().join(format!("herald-tidy-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("host/tests")).expect("a scratch folder");
    std::fs::write(dir.join("host/Cargo.toml"), manifest).expect("write a manifest");
    std::fs::write(dir.join("host/tests/units.rs"), "").expect("write a test");
    let found = targets(&dir, "host");
    std::fs::remove_dir_all(&dir).expect("remove the scratch folder");
    assert_eq!(found, ["host/benches/track.rs", "host/tests/units.rs", "tests/api/main.rs"].map(str::to_string).into());
}
