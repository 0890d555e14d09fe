//! The public subscription pages behind `unsubscribeUrl`, `subscribeUrl` and `manageUrl`, and the
//! RFC 8058 one-click unsubscribe. Links carry a signed token naming the contact; GET shows a page with
//! a button (so link scanners that prefetch pages change nothing), POST acts, including the one-click
//! `List-Unsubscribe=One-Click` POST of mail clients. Each real flip writes its event.

use salvo::http::StatusCode;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;

use super::state;
use crate::api::errors::ApiError;
use crate::infra::security::open_contact_token;
use crate::services::tracking;
use crate::state::AppState;

pub fn router() -> Router {
    Router::new()
        .push(Router::with_path("unsubscribe/{token}").get(unsubscribe_page).post(unsubscribe_now))
        .push(Router::with_path("subscribe/{token}").get(subscribe_page).post(subscribe_now))
        .push(Router::with_path("manage/{token}").get(manage_page))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A contact page in the dashboard's look (its stylesheet, its security headers).
fn page(res: &mut Response, status: StatusCode, title: &str, body: &str) {
    super::dashboard::secure(res);
    res.status_code(status);
    res.render(Text::Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"stylesheet\" href=\"/assets/app.css\"><link rel=\"icon\" href=\"/assets/favicon.svg\">\
         <title>{t}</title></head><body class=\"public\"><main class=\"card narrow\"><h1>{t}</h1>{body}</main></body></html>",
        t = esc(title)
    )));
}

fn invalid(res: &mut Response) {
    page(
        res,
        StatusCode::BAD_REQUEST,
        "Invalid link",
        "<p>This link is not valid. Use the link from your most recent email.</p>",
    );
}

/// What a valid link names: its project, contact, the contact's address and subscription state, and the
/// email the link came in (None for links made before links named their email).
struct Linked {
    project: String,
    contact: String,
    address: String,
    subscribed: bool,
    email: Option<String>,
}

/// The contact a link names, or None for an invalid link.
async fn contact_of(st: &AppState, token: &str) -> Result<Option<Linked>, ApiError> {
    let Some((project, contact, email)) = open_contact_token(&st.links_key, token) else { return Ok(None) };
    Ok(tracking::linked_contact(&st.store, &project, &contact).await?.map(|c| Linked {
        project,
        contact,
        address: c.email,
        subscribed: c.subscribed,
        email,
    }))
}

fn form(token: &str, action: &str, label: &str) -> String {
    format!(
        "<form method=\"post\" action=\"/{action}/{}\"><button type=\"submit\" class=\"primary\">{label}</button></form>",
        esc(token)
    )
}

async fn show(depot: &mut Depot, res: &mut Response, token: &str, action: &str) -> Result<(), ApiError> {
    let st = state(depot)?;
    let Some(Linked { address: email, subscribed, .. }) = contact_of(&st, token).await? else {
        invalid(res);
        return Ok(());
    };
    let status = if subscribed { "subscribed" } else { "unsubscribed" };
    let body = match action {
        "unsubscribe" => {
            format!("<p>Stop emails to <b>{}</b>?</p>{}", esc(&email), form(token, "unsubscribe", "Unsubscribe"))
        }
        "subscribe" => {
            format!("<p>Receive emails at <b>{}</b> again?</p>{}", esc(&email), form(token, "subscribe", "Subscribe"))
        }
        _ => format!(
            "<p><b>{}</b> is currently <b>{status}</b>.</p>{}",
            esc(&email),
            if subscribed { form(token, "unsubscribe", "Unsubscribe") } else { form(token, "subscribe", "Subscribe") }
        ),
    };
    let title = match action {
        "unsubscribe" => "Unsubscribe",
        "subscribe" => "Subscribe",
        _ => "Your email preferences",
    };
    page(res, StatusCode::OK, title, &body);
    Ok(())
}

async fn act(depot: &mut Depot, res: &mut Response, token: &str, subscribe: bool) -> Result<(), ApiError> {
    let st = state(depot)?;
    let Some(Linked { project, contact, address: email, subscribed: was, email: via }) = contact_of(&st, token).await?
    else {
        invalid(res);
        return Ok(());
    };
    tracking::change_by_link(&st.store, &st.clock, &project, &contact, subscribe, was, via.as_deref()).await?;
    let (title, text) = if subscribe {
        ("Subscribed", format!("<p><b>{}</b> will receive our emails again.</p>", esc(&email)))
    } else {
        ("Unsubscribed", format!("<p><b>{}</b> will not receive these emails any more.</p>", esc(&email)))
    };
    page(res, StatusCode::OK, title, &text);
    Ok(())
}

/// Unsubscribe page (a button; GET changes nothing).
#[handler]
pub async fn unsubscribe_page(token: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => { show(depot, res, &token.into_inner(), "unsubscribe").await })
}

/// Unsubscribes: the page's button and the RFC 8058 one-click POST.
#[handler]
pub async fn unsubscribe_now(token: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => { act(depot, res, &token.into_inner(), false).await })
}

/// Subscribe page.
#[handler]
pub async fn subscribe_page(token: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => { show(depot, res, &token.into_inner(), "subscribe").await })
}

/// Subscribes again.
#[handler]
pub async fn subscribe_now(token: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => { act(depot, res, &token.into_inner(), true).await })
}

/// The preferences page.
#[handler]
pub async fn manage_page(token: PathParam<String>, depot: &mut Depot, res: &mut Response) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => { show(depot, res, &token.into_inner(), "manage").await })
}
