//! The HTTP API: routing, cross-cutting middleware (request id, logging, metrics, error catcher,
//! authentication, rate limit) and one file per resource. Only this module knows salvo.
//!
//! Must not import: surrealdb.

/// A handler's body, run as one [`HandlerFuture`] boxed in the handler's own function (see there why):
/// `boxed!({ ... })` for a body that answers `Result<Reply, ApiError>`, `boxed!(T => { ... })` for
/// another output `T`.
macro_rules! boxed {
    ($out:ty => { $($body:tt)* }) => {{
        let fut: $crate::api::HandlerFuture<'_, $out> = Box::pin(async move { $($body)* });
        fut.await
    }};
    ({ $($body:tt)* }) => {
        boxed!(Result<$crate::api::body::Reply, $crate::api::errors::ApiError> => { $($body)* })
    };
}

pub mod account_mail;
pub mod accounts;
pub mod activity;
pub mod analytics;
pub mod auth;
pub mod billing;
pub mod body;
pub mod campaigns;
pub mod client_addr;
pub mod contact_jobs;
pub mod contacts;
pub mod dashboard;
pub mod delivery;
pub mod document;
pub mod domains;
pub mod errors;
pub mod events;
pub mod idempotency;
pub mod methods;
pub mod notifications;
pub mod oauth;
pub mod pages;
pub mod pagination;
pub mod plugins;
pub mod project_state;
pub mod segments;
pub mod send;
pub mod serve;
pub mod suppressions;
pub mod system;
pub mod templates;
pub mod tracking;
pub mod uploads;
pub mod webhooks;
pub mod workflow_executions;
pub mod workflows;

use std::sync::Arc;
use std::time::Instant;

use salvo::catcher::Catcher;
use salvo::http::StatusCode;
use salvo::oapi::OpenApi;
use salvo::oapi::security::{ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityScheme};
use salvo::oapi::swagger_ui::SwaggerUi;
use salvo::prelude::*;

use crate::api::errors::ApiError;
use crate::error::Error;
use crate::state::AppState;

/// What every handler body runs as: a boxed `Send` future, built in the handler's own function.
///
/// Salvo wraps each handler in an `#[async_trait]` method, whose lifetime where-clauses make rustc prove
/// `Send` for the whole future tree (the handler and everything it awaits, down to the store) without its
/// global cache, again for every handler: a `cargo check` of this crate ran over 26 CPU minutes, mostly
/// there (9.5 with the boxes). Proved here, in a function without where-clauses, the wrapper sees a box.
pub(crate) type HandlerFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Depot key of the request id.
pub const REQUEST_ID: &str = "request_id";

/// Puts the shared state into the depot of every request.
struct InjectState(Arc<AppState>);

#[async_trait]
impl Handler for InjectState {
    async fn handle(&self, _req: &mut Request, depot: &mut Depot, _res: &mut Response, _ctrl: &mut FlowCtrl) {
        depot.insert_typed(self.0.clone());
    }
}

/// The shared state of a request.
pub fn state(depot: &Depot) -> Result<Arc<AppState>, ApiError> {
    depot.get_typed::<Arc<AppState>>().cloned().map_err(|_| Error::Internal("application state missing".into()).into())
}

/// Request id, `X-Request-ID` header, one log line and metrics per request.
#[handler]
async fn request_context(req: &mut Request, depot: &mut Depot, res: &mut Response, ctrl: &mut FlowCtrl) {
    boxed!(() => {
        let started = Instant::now();
        let incoming: Option<String> = req.header("x-request-id");
        let id = incoming
            .filter(|s| !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic()))
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        depot.insert(REQUEST_ID, id.clone());
        if let Ok(v) = id.parse() {
            res.headers_mut().insert("x-request-id", v);
        }
        ctrl.call_next(req, depot, res).await;
        let status = res.status_code.unwrap_or(StatusCode::OK).as_u16();
        let route = match req.matched_path() {
            "" => "(unmatched)".to_string(),
            p => format!("/{}", p.trim_start_matches('/')),
        };
        let elapsed = started.elapsed();
        crate::infra::metrics::request_finished(req.method().as_str(), &route, status, elapsed);
        tracing::info!(
            method = %req.method(),
            route = %route,
            status,
            latency_ms = elapsed.as_secs_f64() * 1000.0,
            request_id = %id,
            "request"
        );
    })
}

/// Gives every error response without a body the envelope: unknown routes (404), wrong methods (405),
/// panics (500).
#[handler]
async fn catch_errors(req: &mut Request, depot: &mut Depot, res: &mut Response) {
    boxed!(() => {
        let status = res.status_code.unwrap_or(StatusCode::NOT_FOUND);
        let err = match status {
            StatusCode::NOT_FOUND => {
                ApiError::RouteNotFound { method: req.method().to_string(), path: req.uri().path().to_string() }
            }
            StatusCode::METHOD_NOT_ALLOWED => {
                Error::Invalid(format!("Method {} is not allowed on {}", req.method(), req.uri().path())).into()
            }
            StatusCode::PAYLOAD_TOO_LARGE => Error::TooLarge { limit: body::size_label(body::MAX_BODY_BYTES) }.into(),
            s if s.is_server_error() => Error::Internal(format!("unhandled {s}")).into(),
            s => Error::Invalid(s.canonical_reason().unwrap_or("Bad request").to_string()).into(),
        };
        let mut json = err.body(&errors::request_id(depot));
        if status == StatusCode::METHOD_NOT_ALLOWED
            && let Some(e) = json.get_mut("error")
        {
            e["code"] = "METHOD_NOT_ALLOWED".into();
            e["statusCode"] = 405.into();
        }
        res.status_code(if status == StatusCode::METHOD_NOT_ALLOWED { status } else { errors::status(&err) });
        res.render(Json(json));
    })
}

/// All API routes (the ones that appear in the OpenAPI document).
pub fn api_router() -> Router {
    Router::new()
        .push(system::router())
        .push(auth::router().push(account_mail::router()).push(oauth::router()))
        .push(accounts::router())
        .push(project_state::router())
        .push(contacts::router())
        .push(events::router())
        .push(domains::router())
        .push(templates::router())
        .push(campaigns::router())
        .push(segments::router())
        .push(workflows::router())
        .push(send::router())
        .push(suppressions::router())
        .push(delivery::router())
        .push(notifications::router())
        .push(plugins::router())
        .push(uploads::router())
        .push(activity::router())
        .push(analytics::router())
        .push(billing::router())
        // After the provider notifications and payments under /webhooks/, whose paths come first.
        .push(webhooks::router())
}

/// The OpenAPI 3.1 document generated from the handlers.
pub fn openapi(router: &Router) -> OpenApi {
    OpenApi::new("Herald API", env!("CARGO_PKG_VERSION"))
        .add_security_scheme("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)))
        .add_security_scheme("session", SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new(auth::COOKIE))))
        .merge_router(router)
}

/// The whole service: routes, the OpenAPI document, the reference UI, the dashboard and the middleware.
pub fn service(state: Arc<AppState>) -> Service {
    let api = api_router();
    let doc = document::finish(&openapi(&api));
    let shadowed = methods::ShadowedMethods::from_document(&doc);
    let router = Router::new()
        .hoop(salvo::prelude::CatchPanic::new())
        .push(api)
        .push(pages::router())
        .push(dashboard::router())
        .push(tracking::router())
        .push(Router::with_path("openapi.json").get(document::Served::new(&doc)))
        .push(
            Router::new()
                .hoop(dashboard::docs_headers)
                .push(SwaggerUi::new("/openapi.json").title("Herald API reference").into_router("/docs")),
        );
    let client = client_addr::Resolve::new(&state.config.http.trusted_proxies);
    Service::new(router)
        .hoop(InjectState(state))
        .hoop(client)
        .hoop(request_context)
        .hoop(shadowed)
        .catcher(Catcher::new(catch_errors))
}
