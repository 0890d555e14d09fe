//! The web dashboard: one HTML shell and the static files it loads (`host/dashboard/`, embedded in the
//! binary), served at `/`, `/app/...` and the `/account/...` pages Herald's own mail links to. The
//! pages are plain JavaScript modules calling the same JSON API with the session cookie; nothing is
//! rendered here but the shell. Every response carries the dashboard's security headers
//! (docs/dashboard.md#security).

use salvo::http::StatusCode;
use salvo::http::header::{self, HeaderValue};
use salvo::prelude::*;

/// The Content-Security-Policy of the dashboard: scripts only from this server (no inline script, no
/// `eval`), no plugins, no framing by other sites. Inline styles are allowed so that the template
/// preview (a sandboxed `srcdoc` frame, which inherits this policy) shows an email as it is written.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
img-src 'self' data: https:; connect-src 'self'; frame-src 'self'; object-src 'none'; base-uri 'none'; \
form-action 'self'; frame-ancestors 'none'";

/// One embedded file: its path under `/assets/`, content type and bytes.
struct Asset {
    path: &'static str,
    mime: &'static str,
    bytes: &'static [u8],
}

macro_rules! assets {
    ($( $path:literal => $mime:literal ),* $(,)?) => {
        &[ $( Asset { path: $path, mime: $mime, bytes: include_bytes!(concat!("../../dashboard/", $path)) } ),* ]
    };
}

/// Every file of `host/dashboard/` but the shell (a test checks that none is left out).
static ASSETS: &[Asset] = assets![
    "app.css" => "text/css; charset=utf-8",
    "favicon.svg" => "image/svg+xml",
    "js/api.js" => "text/javascript; charset=utf-8",
    "js/app.js" => "text/javascript; charset=utf-8",
    "js/conditions.js" => "text/javascript; charset=utf-8",
    "js/dom.js" => "text/javascript; charset=utf-8",
    "js/views/account.js" => "text/javascript; charset=utf-8",
    "js/views/activity.js" => "text/javascript; charset=utf-8",
    "js/views/campaigns.js" => "text/javascript; charset=utf-8",
    "js/views/contacts.js" => "text/javascript; charset=utf-8",
    "js/views/delivery.js" => "text/javascript; charset=utf-8",
    "js/views/domains.js" => "text/javascript; charset=utf-8",
    "js/views/project.js" => "text/javascript; charset=utf-8",
    "js/views/segments.js" => "text/javascript; charset=utf-8",
    "js/views/settings.js" => "text/javascript; charset=utf-8",
    "js/views/templates.js" => "text/javascript; charset=utf-8",
    "js/views/workflows.js" => "text/javascript; charset=utf-8",
];

static SHELL: &[u8] = include_bytes!("../../dashboard/index.html");

/// The paths of every embedded file under `/assets/` (for the test that compares them with the folder).
pub fn asset_paths() -> Vec<&'static str> {
    ASSETS.iter().map(|a| a.path).collect()
}

/// A strong validator of the build's files: the same binary answers the same ETag.
fn etag(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(bytes);
    format!("\"{}\"", hex::encode(&d[..12]))
}

pub fn router() -> Router {
    Router::new()
        .hoop(security_headers)
        .push(Router::new().get(shell))
        .push(Router::with_path("app").get(shell))
        .push(Router::with_path("app/{**rest}").get(shell))
        .push(Router::with_path("account/{**rest}").get(shell))
        .push(Router::with_path("assets/{**path}").get(asset))
}

/// The headers every dashboard and contact page carries.
pub fn secure(res: &mut Response) {
    let h = res.headers_mut();
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    // Account links carry their token in the query: never hand it to another site.
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert("cross-origin-opener-policy", HeaderValue::from_static("same-origin"));
}

#[handler]
async fn security_headers(res: &mut Response) {
    secure(res);
}

/// The API reference (Swagger UI at `/docs`) shares the dashboard's origin and so its cookie: it carries
/// the same headers, with a policy of its own only where Swagger UI needs one (its page starts itself
/// with an inline script, and it fetches nothing but this server).
pub const DOCS_CSP: &str = "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; \
img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; \
frame-ancestors 'none'";

#[handler]
pub async fn docs_headers(req: &mut Request, depot: &mut Depot, res: &mut Response, ctrl: &mut FlowCtrl) {
    ctrl.call_next(req, depot, res).await;
    secure(res);
    res.headers_mut().insert("content-security-policy", HeaderValue::from_static(DOCS_CSP));
}

/// Answers `bytes`, or 304 when the browser holds this version already.
fn render(req: &Request, res: &mut Response, mime: &'static str, bytes: &'static [u8], cache: &'static str) {
    let tag = etag(bytes);
    let h = res.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(header::ETAG, v);
    }
    let fresh = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    if fresh {
        res.status_code(StatusCode::NOT_MODIFIED);
        return;
    }
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
    res.write_body(bytes.to_vec()).ok();
}

/// The shell: every dashboard path answers it, and the page's script routes by the path.
#[handler]
async fn shell(req: &mut Request, res: &mut Response) {
    render(req, res, "text/html; charset=utf-8", SHELL, "no-cache");
}

/// One embedded file; revalidated on each load (`no-cache` with an ETag), so an upgrade is seen at once.
#[handler]
async fn asset(req: &mut Request, res: &mut Response) {
    let path: String = req.param("path").unwrap_or_default();
    match ASSETS.iter().find(|a| a.path == path) {
        Some(a) => render(req, res, a.mime, a.bytes, "no-cache"),
        None => {
            res.status_code(StatusCode::NOT_FOUND);
        }
    }
}
