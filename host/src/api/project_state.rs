//! A project's onboarding checklist and sending standing (docs/behaviour.md#project-setup-and-security):
//! `GET /projects/:id/setup-state`, `GET /projects/:id/security` and `GET
//! /users/@me/projects/:id/security`. Dashboard session; any member of the project.

use salvo::oapi::ToSchema;
use salvo::oapi::extract::PathParam;
use salvo::prelude::*;
use serde::Serialize;

use super::auth::{require_session, role_in, user};
use super::body::Reply;
use super::state;
use crate::api::errors::ApiError;
use crate::infra::clock::rfc3339;
use crate::services::projects::{self, Window};

pub fn router() -> Router {
    Router::new()
        .push(
            Router::with_path("projects/{id}")
                .hoop(require_session)
                .push(Router::with_path("setup-state").get(setup_state))
                .push(Router::with_path("security").get(security)),
        )
        .push(Router::with_path("users/@me/projects/{id}/security").hoop(require_session).get(account_security))
        .push(Router::with_path("users/@me/projects/{id}/unsuspend").hoop(require_session).post(unsuspend))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct SetupStateOut {
    has_verified_domain: bool,
    has_template: bool,
    has_contacts: bool,
    has_sent_email: bool,
    has_campaign: bool,
    has_workflow: bool,
    /// every step above done
    completed: bool,
}

/// What the project has set up so far (the onboarding checklist).
#[endpoint(tags("projects"), security(("session" = [])), responses((status_code = 200, body = SetupStateOut)))]
pub async fn setup_state(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let id = id.into_inner();
        role_in(&st, &id, &user(depot)?).await?;
        let s = projects::setup_state(&st, &id).await?;
        Reply::ok(&SetupStateOut {
            has_verified_domain: s.verified_domain,
            has_template: s.template,
            has_contacts: s.contacts,
            has_sent_email: s.sent_email,
            has_campaign: s.campaign,
            has_workflow: s.workflow,
            completed: s.verified_domain && s.template && s.contacts && s.sent_email && s.campaign && s.workflow,
        })
    })
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct WindowOut {
    sent: i64,
    bounced: i64,
    complained: i64,
    /// percent of `sent`, two decimals
    bounce_rate: f64,
    complaint_rate: f64,
}

impl From<Window> for WindowOut {
    fn from(w: Window) -> Self {
        WindowOut {
            sent: w.sent,
            bounced: w.bounced,
            complained: w.complained,
            bounce_rate: w.bounce_rate(),
            complaint_rate: w.complaint_rate(),
        }
    }
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct ThresholdsOut {
    bounce_rate: f64,
    complaint_rate: f64,
    minimum_sent: u64,
}

/// A suspension: why, when, and when and by whom it was lifted.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct SuspensionOut {
    reason: String,
    suspended_at: String,
    lifted_at: Option<String>,
    /// the OWNER's email, or `operator`
    lifted_by: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct SecurityOut {
    /// ACTIVE; WARNING when a 7-day rate is at or above half its threshold; SUSPENDED
    status: String,
    last7_days: WindowOut,
    last30_days: WindowOut,
    thresholds: ThresholdsOut,
    /// the reason of the current suspension, null when not suspended
    suspension_reason: Option<String>,
    /// the latest suspensions, newest first (10 at most)
    suspensions: Vec<SuspensionOut>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[salvo(schema(rename_all = "camelCase"))]
pub struct UnsuspendOut {
    success: bool,
    /// held delivery jobs put back in the queue
    released_jobs: u64,
}

async fn security_of(id: String, depot: &mut Depot) -> Result<Reply, ApiError> {
    let st = state(depot)?;
    role_in(&st, &id, &user(depot)?).await?;
    let s = projects::security(&st, &id).await?;
    let c = &st.config;
    Reply::ok(&SecurityOut {
        status: s.standing.as_str().into(),
        last7_days: s.last7.into(),
        last30_days: s.last30.into(),
        thresholds: ThresholdsOut {
            bounce_rate: c.suspend_bounce_percent,
            complaint_rate: c.suspend_complaint_percent,
            minimum_sent: c.suspend_min_sent,
        },
        suspension_reason: s.suspended.map(|x| x.reason),
        suspensions: s
            .suspensions
            .into_iter()
            .map(|x| SuspensionOut {
                reason: x.reason,
                suspended_at: rfc3339(x.at),
                lifted_at: x.lifted_at.map(rfc3339),
                lifted_by: x.lifted_by,
            })
            .collect(),
    })
}

/// Lifts the project's suspension (OWNER only, and only where the operator allows it, a cool-down
/// after it began: 403 `UNSUSPEND_NOT_ALLOWED` otherwise; 409 when it is not suspended): sending works
/// again and the held deliveries go out.
#[endpoint(tags("account"), security(("session" = [])), responses((status_code = 200, body = UnsuspendOut)))]
pub async fn unsuspend(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({
        let st = state(depot)?;
        let u = user(depot)?;
        let id = id.into_inner();
        let role = role_in(&st, &id, &u).await?;
        let released_jobs = crate::services::suspension::unsuspend(&st, &id, role, &u).await?;
        Reply::ok(&UnsuspendOut { success: true, released_jobs })
    })
}

/// Bounce and complaint rates over the last 7 and 30 days against the project's thresholds.
#[endpoint(tags("projects"), security(("session" = [])), responses((status_code = 200, body = SecurityOut)))]
pub async fn security(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({ security_of(id.into_inner(), depot).await })
}

/// The same as `GET /projects/:id/security`, under the account's projects.
#[endpoint(tags("account"), security(("session" = [])), responses((status_code = 200, body = SecurityOut)))]
pub async fn account_security(id: PathParam<String>, depot: &mut Depot) -> Result<Reply, ApiError> {
    boxed!({ security_of(id.into_inner(), depot).await })
}
