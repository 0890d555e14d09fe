//! docs/api.md against the OpenAPI document the server serves: the reference names every operation of
//! the document (its method and path), and its table names no operation the document lacks. An endpoint
//! added without its line in docs/api.md fails here.

use std::collections::BTreeSet;

use serde_json::Value;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// `/contacts/{id}` and `/contacts/:id` alike: each parameter as `{}`, without a query.
fn normal(path: &str) -> String {
    let path = path.split('?').next().unwrap_or(path);
    path.split('/')
        .map(|seg| if seg.starts_with(':') || (seg.starts_with('{') && seg.ends_with('}')) { "{}" } else { seg })
        .collect::<Vec<_>>()
        .join("/")
}

/// Every (method, path) of the OpenAPI document.
fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            if item.get(method.to_lowercase()).is_some() {
                ops.insert((method.to_string(), normal(path)));
            }
        }
    }
    ops
}

/// The (method, path) pairs a Markdown text names in code spans (`GET /contacts`,
/// `GET/PATCH/DELETE /contacts/:id`), outside fenced code blocks; a path without a method before it in its
/// span is also kept with an empty method. With `table_only`, only what the lines of tables name.
fn named(text: &str, table_only: bool) -> BTreeSet<(String, String)> {
    let mut prose: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && (!table_only || line.trim_start().starts_with('|')) {
            prose.push(line.to_string());
        }
    }
    // A table row is a line of its own; elsewhere a code span may run over a line break.
    if !table_only {
        prose = vec![prose.join("\n")];
    }
    let mut ops = BTreeSet::new();
    for text in &prose {
        for span in text.split('`').skip(1).step_by(2) {
            let mut methods: Vec<&str> = Vec::new();
            for word in span.split_whitespace() {
                let word = word.trim_end_matches([',', ';', ')']);
                if !word.is_empty() && word.split('/').all(|m| METHODS.contains(&m)) {
                    methods = word.split('/').collect();
                } else if word.starts_with('/') {
                    for m in &methods {
                        ops.insert((m.to_string(), normal(word)));
                    }
                    ops.insert((String::new(), normal(word)));
                    methods.clear();
                }
            }
        }
    }
    ops
}

/// The operations of the document that the text does not name, and the operations its tables name that
/// the document does not have.
fn mismatches(text: &str, ops: &BTreeSet<(String, String)>) -> (Vec<String>, Vec<String>) {
    let all = named(text, false);
    let missing = ops.iter().filter(|op| !all.contains(*op)).map(|(m, p)| format!("{m} {p}")).collect();
    let paths: BTreeSet<&String> = ops.iter().map(|(_, p)| p).collect();
    let unknown = named(text, true)
        .into_iter()
        .filter(|(m, p)| if m.is_empty() { !paths.contains(p) } else { !ops.contains(&(m.clone(), p.clone())) })
        .map(|(m, p)| format!("{m} {p}").trim().to_string())
        .collect();
    (missing, unknown)
}

#[test]
fn the_api_reference_names_every_operation_of_the_openapi_document() {
    let api = herald_host::api::api_router();
    let doc = herald_host::api::document::finish(&herald_host::api::openapi(&api));
    let ops = operations(&doc);
    assert!(ops.len() > 100, "the document has {} operations", ops.len());
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (missing, unknown) = mismatches(&text, &ops);
    assert!(missing.is_empty(), "docs/api.md does not name {missing:#?}");
    assert!(unknown.is_empty(), "docs/api.md's tables name {unknown:#?}, which the OpenAPI document lacks");
}

#[test]
fn the_check_catches_an_operation_left_out_and_one_that_does_not_exist() {
    let ops: BTreeSet<(String, String)> =
        [("GET", "/contacts/{id}"), ("PATCH", "/contacts/{id}"), ("POST", "/v1/track")]
            .iter()
            .map(|(m, p)| (m.to_string(), normal(p)))
            .collect();
    // A code span may run over a line break; a fenced block is an example, not a reference.
    let good = "| Contacts | `GET/PATCH /contacts/:id` | secret key |\n\nTracking: `POST\n/v1/track {email}`.\n";
    let fenced = "| Contacts | `GET/PATCH /contacts/:id` | secret key |\n```\ncurl `POST /v1/track`\n```\n";
    assert_eq!(mismatches(fenced, &ops).0, ["POST /v1/track"]);
    assert_eq!(mismatches(good, &ops), (vec![], vec![]));
    // PATCH left out, and a DELETE the server does not have.
    let bad = "| Contacts | `GET/DELETE /contacts/:id` | secret key |\n| Tracking | `POST /v1/track` | key |\n";
    let (missing, unknown) = mismatches(bad, &ops);
    assert_eq!(missing, ["PATCH /contacts/{}"]);
    assert_eq!(unknown, ["DELETE /contacts/{}"]);
    // A path named without its method does not count for an operation.
    let (missing, _) = mismatches("| Tracking | `/v1/track` | key |\n| | `GET/PATCH /contacts/{id}` | |\n", &ops);
    assert_eq!(missing, ["POST /v1/track"]);
}
