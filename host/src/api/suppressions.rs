//! The suppression list (docs/behaviour.md#suppressions): addresses and whole domains no email of the
//! project is sent to. List (cursor-paginated in value order, filtered by reason), add, read one,
//! remove.

use salvo::http::StatusCode;
use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;
use serde_json::{Value, json};

use super::auth::{ApiKeyAuth, KeyRule, project};
use super::body::{Fields, Reply, json_object};
use super::pagination::{decode_cursor, encode_cursor, finish_page, limit, query_str, typed_query};
use super::state;
use crate::api::errors::ApiError;
use crate::domain::suppressions::{Entry, Reason};
use crate::error::Error;
use crate::infra::clock::rfc3339;
use crate::services::suppressions;
use crate::store::suppressions::Suppression;

/// The longest note kept with an entry.
const MAX_DETAIL: usize = 500;

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct SuppressionOut {
    /// the address or domain
    value: String,
    /// `address` or `domain` (every address at the domain)
    #[serde(rename = "type")]
    #[salvo(schema(rename = "type"))]
    kind: String,
    /// `bounce`, `complaint` or `manual`
    reason: String,
    /// what caused it: the refusal's text, or the note given
    detail: Option<String>,
    /// the email whose bounce or complaint added it
    email_id: Option<String>,
    created_at: String,
}

impl From<&Suppression> for SuppressionOut {
    fn from(s: &Suppression) -> Self {
        SuppressionOut {
            value: s.value.clone(),
            kind: s.kind.clone(),
            reason: s.reason.as_str().to_string(),
            detail: s.detail.clone(),
            email_id: s.email.clone(),
            created_at: rfc3339(s.created_at),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct SuppressionPage {
    data: Vec<SuppressionOut>,
    cursor: String,
    has_more: bool,
    total: i64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
#[allow(dead_code)]
pub struct SuppressionBody {
    /// an address to suppress (give this or `domain`)
    #[salvo(schema(format = Email, max_length = 254))]
    email: Option<String>,
    /// a domain: every address at it (give this or `email`)
    #[salvo(schema(min_length = 1, max_length = 253))]
    domain: Option<String>,
    /// `manual` (default), `bounce` or `complaint`
    #[salvo(schema(pattern = "^(manual|bounce|complaint)$"))]
    reason: Option<String>,
    /// a note, up to 500 characters
    #[salvo(schema(max_length = 500))]
    detail: Option<String>,
}

pub fn router() -> Router {
    Router::with_path("suppressions")
        .hoop(ApiKeyAuth(KeyRule::SecretOnly))
        .get(list_suppressions)
        .post(add_suppression)
        .push(Router::with_path("{value}").get(get_suppression).delete(delete_suppression))
}

/// The entry a path names: an address or a domain; anything else is 400.
fn entry_of(value: &str) -> Result<Entry, ApiError> {
    Entry::parse(value)
        .ok_or_else(|| Error::Invalid(format!("{value:?} is neither an email address nor a domain")).into())
}

/// The project's list in address and domain order, cursor-paginated; `reason` filters.
#[endpoint(
    tags("suppressions"),
    security(("bearer" = [])),
    parameters(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "cursor of the previous page"),
        ("reason" = Option<String>, Query, pattern = "^(bounce|complaint|manual)$", description = "bounce, complaint or manual"),
    ),
    responses((status_code = 200, body = SuppressionPage))
)]
pub async fn list_suppressions(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let limit = limit(req, 20, suppressions::MAX_PAGE as i64)?;
        let reason = match typed_query(req, "reason")? {
            None => None,
            Some(r) => Some(Reason::parse(&r).ok_or_else(|| {
                Error::Invalid(format!("reason must be one of bounce, complaint, manual, got {r:?}"))
            })?),
        };
        let after = match query_str(req, "cursor").as_deref().map(decode_cursor).transpose()? {
            None => None,
            Some((Value::String(v), _)) => Some(v),
            Some(_) => return Err(Error::Invalid("Invalid cursor".into()).into()),
        };
        let (rows, total) = suppressions::list(&st.store, &ctx.project_id, after.as_deref(), reason, limit + 1).await?;
        let (rows, next, has_more) = finish_page(rows, limit, |s| encode_cursor(&json!(s.value), ""));
        Reply::ok(&SuppressionPage {
            data: rows.iter().map(SuppressionOut::from).collect(),
            cursor: next,
            has_more,
            total,
        })
    })
}

/// Adds an address or a whole domain: 201 with the entry, or 200 with the entry already there (its first
/// reason stands).
#[endpoint(
    tags("suppressions"),
    security(("bearer" = [])),
    request_body = SuppressionBody,
    responses((status_code = 201, body = SuppressionOut), (status_code = 200, body = SuppressionOut))
)]
pub async fn add_suppression(req: &mut Request, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let body = json_object(req).await?;
        let mut f = Fields::new(&body);
        let email = f.email("email", false);
        let domain = f.string("domain", false, 1, 253);
        let reason = f.one_of("reason", false, &["manual", "bounce", "complaint"]);
        let detail = f.string("detail", false, 0, MAX_DETAIL);
        let entry = match (&email, &domain, body.contains_key("email"), body.contains_key("domain")) {
            (_, _, true, true) => {
                f.error("domain", "invalid_combination", "give email or domain, not both");
                None
            }
            (Some(e), None, _, _) => {
                let entry = Entry::parse(e);
                if entry.is_none() {
                    f.error("email", "invalid_string", "must be a valid email address");
                }
                entry
            }
            (None, Some(d), _, _) => match Entry::parse(d.trim_start_matches('@')) {
                Some(e @ Entry::Domain(_)) => Some(e),
                _ => {
                    f.error("domain", "invalid_string", "domain must be a domain name such as example.com");
                    None
                }
            },
            _ => None,
        };
        // Neither given, or given as null (a field that failed its own check has its error already).
        if entry.is_none() && f.errors.is_empty() {
            f.error("email", "required", "give the email address or the domain to suppress");
        }
        f.finish()?;
        let entry = entry.ok_or_else(|| Error::Internal("validated entry missing".into()))?;
        let reason = reason.as_deref().and_then(Reason::parse).unwrap_or(Reason::Manual);
        let detail = detail.filter(|d| !d.trim().is_empty());
        let (row, added) =
            suppressions::add(&st.store, &ctx.project_id, &entry, reason, detail.as_deref(), st.clock.now_ms()).await?;
        let status = if added { StatusCode::CREATED } else { StatusCode::OK };
        Reply::with(status, &SuppressionOut::from(&row))
    })
}

/// The entry for an address or domain; 404 when it is not on the list.
#[endpoint(tags("suppressions"), security(("bearer" = [])), parameters(("value" = String, Path, max_length = 254, pattern = r#"^(?:@|(?=[^@]{1,64}@)[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@)?(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+(?![0-9]+$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"#, description = "an address (`jane@example.com`) or a domain (`example.com` or `@example.com`)")), responses((status_code = 200, body = SuppressionOut)))]
pub async fn get_suppression(value: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let ctx = project(depot)?;
        let entry = entry_of(&value.into_inner())?;
        let row = suppressions::get(&st.store, &ctx.project_id, &entry).await?;
        Reply::ok(&SuppressionOut::from(&row))
    })
}

/// Removes an address or domain from the list (mail to it goes out again): 204; 404 when it was not on it.
#[endpoint(tags("suppressions"), security(("bearer" = [])), parameters(("value" = String, Path, max_length = 254, pattern = r#"^(?:@|(?=[^@]{1,64}@)[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@)?(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+(?![0-9]+$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"#, description = "an address (`jane@example.com`) or a domain (`example.com` or `@example.com`)")), responses((status_code = 204, description = "removed")))]
pub async fn delete_suppression(
    value: PathParam<String>,
    depot: &mut Depot,
    res: &mut Response,
) -> Result<(), ApiError> {
    boxed!(Result<(), ApiError> => {
        let st = state(depot)?;
        let ctx = project(depot)?;
        let entry = entry_of(&value.into_inner())?;
        suppressions::remove(&st.store, &ctx.project_id, &entry).await?;
        res.status_code(StatusCode::NO_CONTENT);
        Ok(())
    })
}
