//! docs/configuration.md against the code: its table names every flag and environment variable that
//! `herald serve` accepts, read from the clap definition of [`Settings`] (what `herald serve --help`
//! prints), and names none that it does not accept. A setting added without its row fails here.

use clap::{Args, Command};

use super::Settings;

/// The package's folder, as cargo says when it runs the test (a test binary reused from another checkout
/// that shares the target directory still reads this checkout), else where it was built.
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
}

/// Every `--flag` and `HERALD_*` variable of `herald serve`, in the order clap declares them.
fn accepted() -> Vec<String> {
    let cmd = Settings::augment_args(Command::new("herald-serve"));
    let mut names = Vec::new();
    for arg in cmd.get_arguments() {
        if let Some(long) = arg.get_long() {
            names.push(format!("--{long}"));
        }
        if let Some(env) = arg.get_env() {
            names.push(env.to_string_lossy().into_owned());
        }
    }
    names
}

/// The names written in backticks in the first two cells (flag, environment) of the document's table rows.
fn documented(doc: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in doc.lines().filter(|l| l.trim_start().starts_with('|')) {
        for cell in line.split('|').skip(1).take(2) {
            for code in cell.split('`').skip(1).step_by(2) {
                let code = code.trim();
                if code.starts_with("--") || code.starts_with("HERALD_") {
                    names.push(code.to_string());
                }
            }
        }
    }
    names
}

/// What the document gets wrong: the accepted names it lacks, and the names it has that are not accepted.
fn mismatches(doc: &str, accepted: &[String]) -> (Vec<String>, Vec<String>) {
    let documented = documented(doc);
    let missing = accepted.iter().filter(|n| !documented.contains(n)).cloned().collect();
    let unknown = documented.iter().filter(|n| !accepted.contains(n)).cloned().collect();
    (missing, unknown)
}

#[test]
fn the_configuration_reference_names_every_flag_and_variable_herald_serve_accepts() {
    let path = manifest_dir().join("../../docs/configuration.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let accepted = accepted();
    assert!(accepted.len() > 100, "clap lists {} names: the flattened groups are missing", accepted.len());
    for name in ["--listen", "HERALD_LISTEN", "--smtp-listen", "HERALD_RETENTION_EVENT_DAYS", "--backup-dir"] {
        assert!(accepted.iter().any(|n| n == name), "{name} is not read from the clap definition");
    }
    let (missing, unknown) = mismatches(&doc, &accepted);
    assert!(missing.is_empty(), "docs/configuration.md has no row for {missing:?}: add one to its table");
    assert!(unknown.is_empty(), "docs/configuration.md names {unknown:?}, which herald serve does not accept");
}

#[test]
fn the_check_catches_a_missing_row_and_a_row_the_server_does_not_know() {
    let accepted: Vec<String> =
        ["--listen", "HERALD_LISTEN", "--db", "HERALD_DB"].iter().map(|s| s.to_string()).collect();
    let full = "| Flag | Environment | Default | Meaning |\n|---|---|---|---|\n\
        | `--listen` | `HERALD_LISTEN` | `127.0.0.1:3000` | address |\n\
        | `--db` | `HERALD_DB` | `surrealkv://herald-data` | `--db-namespace` in the meaning is not a row |\n";
    assert_eq!(mismatches(full, &accepted), (vec![], vec![]));
    // `--db` named only in prose, and `--db-cache` is not `--db`.
    let without_db = "`--db` alone in a sentence.\n\
        | `--listen` | `HERALD_LISTEN` | `127.0.0.1:3000` | address |\n| `--db-cache` | | | |\n";
    let (missing, unknown) = mismatches(without_db, &accepted);
    assert_eq!(missing, ["--db", "HERALD_DB"]);
    assert_eq!(unknown, ["--db-cache"]);
}
