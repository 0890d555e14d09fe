//! The dashboard's files and shell (docs/dashboard.md): every file of `host/dashboard/` is served from
//! the binary as it is in the repository, every dashboard path answers the shell, and both carry the
//! security headers.

use std::path::{Path, PathBuf};

use crate::harness::*;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() { files(&p, out) } else { out.push(p) }
    }
}

async fn fetch(s: &Server, path: &str, etag: Option<&str>) -> reqwest::Response {
    let mut rb = reqwest::Client::new().get(format!("{}{}", s.base, path));
    if let Some(t) = etag {
        rb = rb.header("if-none-match", t);
    }
    rb.send().await.unwrap()
}

fn assert_secure(r: &reqwest::Response, path: &str) {
    let csp = r.headers().get("content-security-policy").map(|v| v.to_str().unwrap().to_string());
    let csp = csp.unwrap_or_else(|| panic!("{path}: no CSP"));
    assert!(csp.contains("script-src 'self';"), "{path}: {csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
    assert!(!csp.contains("unsafe-eval"), "{path}: {csp}");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff", "{path}");
    assert_eq!(r.headers()["x-frame-options"], "DENY", "{path}");
}

#[tokio::test]
async fn every_dashboard_file_is_served_as_it_is_in_the_repository() {
    let s = Server::start().await;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboard");
    let mut all = Vec::new();
    files(&root, &mut all);
    let served = herald_host::api::dashboard::asset_paths();
    let mut seen = 0;
    for p in all {
        let rel = p.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
        let want = std::fs::read(&p).unwrap();
        let path = if rel == "index.html" { "/".to_string() } else { format!("/assets/{rel}") };
        assert!(rel == "index.html" || served.contains(&rel.as_str()), "{rel} is not embedded");
        let r = fetch(&s, &path, None).await;
        assert_eq!(r.status(), 200, "{path}");
        assert_secure(&r, &path);
        let tag = r.headers()["etag"].to_str().unwrap().to_string();
        assert_eq!(r.headers()["cache-control"], "no-cache", "{path}");
        let kind = r.headers()["content-type"].to_str().unwrap().to_string();
        let want_kind = match rel.rsplit('.').next().unwrap() {
            "js" => "text/javascript",
            "css" => "text/css",
            "svg" => "image/svg+xml",
            "html" => "text/html",
            other => panic!("{rel}: no content type for .{other}"),
        };
        assert!(kind.starts_with(want_kind), "{path}: {kind}");
        assert_eq!(r.bytes().await.unwrap().as_ref(), want.as_slice(), "{path} differs from {rel}");
        let again = fetch(&s, &path, Some(&tag)).await;
        assert_eq!(again.status(), 304, "{path} with its ETag");
        seen += 1;
    }
    assert_eq!(seen, served.len() + 1, "an embedded file is missing from host/dashboard");
}

#[tokio::test]
async fn dashboard_paths_answer_the_shell_and_api_paths_keep_theirs() {
    let s = Server::start().await;
    let shell = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboard/index.html")).unwrap();
    for path in ["/", "/app", "/app/contacts/123", "/account/verify-email?token=abc", "/account/login"] {
        let r = fetch(&s, path, None).await;
        assert_eq!(r.status(), 200, "{path}");
        assert_secure(&r, path);
        assert_eq!(r.headers()["referrer-policy"], "no-referrer", "{path}");
        assert_eq!(r.bytes().await.unwrap().as_ref(), shell.as_slice(), "{path}");
    }
    // No inline script in the shell: the CSP would refuse it anyway.
    let text = String::from_utf8(shell).unwrap();
    assert!(!text.contains("<script>") && text.contains("<script type=\"module\" src=\"/assets/js/app.js\">"));
    let r = fetch(&s, "/assets/js/missing.js", None).await;
    assert_eq!(r.status(), 404);
    let r = fetch(&s, "/assets/../Cargo.toml", None).await;
    assert_eq!(r.status(), 404);
    // API paths are unchanged.
    let r = s.client().get("/health").await;
    assert_eq!(r.status, 200);
    let r = s.client().get("/contacts").await;
    assert_eq!(r.status, 401, "{}", r.json);
}
