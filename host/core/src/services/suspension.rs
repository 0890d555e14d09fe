//! Automatic suspension (docs/behaviour.md#project-setup-and-security): a recurring check suspends a
//! project whose bounce or complaint rate over the last 7 days passes its threshold over enough sent
//! mail. A suspended project's sending endpoints answer 403 `PROJECT_DISABLED` with the reason, and its
//! delivery jobs wait as `held` (`services/delivery`) until the operator lifts the suspension (or its
//! OWNER, when the operator allows that after a cool-down), which puts them back in the queue in the
//! same transaction: nothing is lost.
//!
//! Must not import: salvo, surrealdb.

use crate::config::Config;
use crate::context::Context;
use crate::domain::activity::{DAY_MS, HOUR_MS, bucket};
use crate::error::{Code, Error};
use crate::infra::jobs::{JobContext, Registry};
use crate::services::projects::Window;
use crate::store::accounts::{Role, User};
use crate::store::{Store, StoreError};

pub const CHECK_JOB: &str = "projects.suspension-check";
/// How often the check runs.
pub const CHECK_EVERY_MS: i64 = 60_000;

/// The thresholds a project is held to.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// percent of sent
    pub bounce: f64,
    pub complaint: f64,
    pub min_sent: u64,
}

impl Thresholds {
    pub fn of(c: &Config) -> Thresholds {
        Thresholds {
            bounce: c.suspend_bounce_percent,
            complaint: c.suspend_complaint_percent,
            min_sent: c.suspend_min_sent,
        }
    }
}

/// Why a project with these 7-day figures is suspended, if it is: a rate above its threshold over at
/// least the minimum sent.
pub fn verdict(w: &Window, t: &Thresholds) -> Option<String> {
    if w.sent < t.min_sent as i64 {
        return None;
    }
    let figures = |what: &str, n: i64, rate: f64, limit: f64| {
        format!("the {what} rate of the last 7 days, {rate}% ({n} of {} sent), is above the {limit}% threshold", w.sent)
    };
    if w.bounce_rate() > t.bounce {
        return Some(figures("bounce", w.bounced, w.bounce_rate(), t.bounce));
    }
    if w.complaint_rate() > t.complaint {
        return Some(figures("complaint", w.complained, w.complaint_rate(), t.complaint));
    }
    None
}

pub fn register(registry: &mut Registry, t: Thresholds) {
    registry.every(CHECK_JOB, CHECK_EVERY_MS);
    registry.register(CHECK_JOB, move |ctx: JobContext| async move {
        check_all(&ctx.store, ctx.clock.now_ms(), &t).await.map(|_| ()).map_err(|e| e.to_string())
    });
}

/// Checks the projects with bounces or complaints counted in the current or the previous hour, and
/// suspends those past a threshold. Answers how many it suspended.
pub async fn check_all(store: &Store, now: i64, t: &Thresholds) -> Result<usize, StoreError> {
    let mut suspended = 0;
    for project in store.projects_with_trouble(bucket(now, HOUR_MS) - HOUR_MS).await? {
        let Some(p) = store.project(&project).await? else { continue };
        if p.suspended.is_some() {
            continue;
        }
        let w = last_7_days(store, &project, now).await?;
        if let Some(reason) = verdict(&w, t)
            && store.suspend_project(&project, &reason, now).await?
        {
            tracing::warn!(project = %project, reason = %reason, "project suspended");
            suspended += 1;
        }
    }
    Ok(suspended)
}

/// A project's figures over the 7 days up to the current hour, from the hour after its last suspension
/// was lifted when that is later (what was counted before the lift does not suspend it again).
pub async fn last_7_days(store: &Store, project: &str, now: i64) -> Result<Window, StoreError> {
    let to = bucket(now, HOUR_MS) + HOUR_MS;
    let lifted = store.suspensions(project, 1).await?.first().and_then(|s| s.lifted_at);
    let from = lifted.map_or(to - 7 * DAY_MS, |l| (bucket(l, HOUR_MS) + HOUR_MS).max(to - 7 * DAY_MS));
    let mut w = Window::default();
    for (_, c) in store.hour_counts(project, from, to).await? {
        w.add(&c);
    }
    Ok(w)
}

/// 403 `PROJECT_DISABLED` with the reason while the project is suspended (sending endpoints).
pub async fn ensure_active(store: &Store, project: &str) -> Result<(), Error> {
    match store.project_cached(project).await?.and_then(|p| p.suspended) {
        None => Ok(()),
        Some(s) => Err(Error::refused(
            Code::ProjectSuspended,
            format!(
                "This project is suspended: {}. Its deliveries are held until the suspension is lifted: by the \
                 server's operator (herald project unsuspend), or where the operator allows it by an OWNER after \
                 a cool-down (POST /users/@me/projects/{project}/unsuspend)",
                s.reason
            ),
        )),
    }
}

/// Lifts a suspension for its OWNER, which the operator allows only after a cool-down
/// (`HERALD_SELF_UNSUSPEND_AFTER_HOURS`; unset: never): before it, or without it, 403
/// `UNSUSPEND_NOT_ALLOWED` saying who can lift it and from when. 409 when the project is not
/// suspended. Answers how many held delivery jobs went back to the queue.
pub async fn unsuspend(st: &Context, project: &str, role: Role, user: &User) -> Result<u64, Error> {
    crate::services::roles::need(role, Role::Owner, "lift a suspension")?;
    let Some(s) = st.store.project(project).await?.and_then(|p| p.suspended) else {
        return Err(not_suspended(project));
    };
    let refused = |m: String| Error::refused(Code::UnsuspendNotAllowed, m);
    let Some(hours) = st.config.self_unsuspend_after_hours else {
        return Err(refused(format!(
            "Only the server's operator can lift this suspension (herald project unsuspend {project}): ask them \
             once its cause is dealt with"
        )));
    };
    let cool_down = i64::try_from(hours).unwrap_or(i64::MAX / HOUR_MS).saturating_mul(HOUR_MS);
    let now = st.clock.now_ms();
    let from = s.at.saturating_add(cool_down);
    if now < from {
        return Err(refused(format!(
            "An OWNER can lift this suspension from {} ({hours} hours after it began); until then only the \
             server's operator can (herald project unsuspend {project})",
            crate::infra::clock::rfc3339(from)
        )));
    }
    // Only the suspension that began that long ago: one that began meanwhile stays.
    lift(st, project, &user.email, Some(now.saturating_sub(cool_down))).await
}

/// Lifts a suspension for the operator (`herald project unsuspend`), at any time.
pub async fn operator_unsuspend(st: &Context, project: &str) -> Result<u64, Error> {
    lift(st, project, "operator", None).await
}

fn not_suspended(project: &str) -> Error {
    Error::Conflict(format!("Project {project} is not suspended"))
}

async fn lift(st: &Context, project: &str, by: &str, began_by: Option<i64>) -> Result<u64, Error> {
    let released = st
        .store
        .unsuspend_project(project, by, began_by, st.clock.now_ms())
        .await?
        .ok_or_else(|| not_suspended(project))?;
    st.job_wake.any();
    Ok(released)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_above_its_threshold_over_enough_mail_suspends() {
        let t = Thresholds { bounce: 5.0, complaint: 0.1, min_sent: 500 };
        let w = |sent, bounced, complained| Window { sent, bounced, complained };
        assert_eq!(verdict(&w(499, 400, 0), &t), None, "too little sent");
        assert_eq!(verdict(&w(1000, 50, 1), &t), None, "5% is not above 5%; 0.1% not above 0.1%");
        let r = verdict(&w(1000, 51, 0), &t).unwrap();
        assert!(r.contains("bounce rate") && r.contains("5.1%") && r.contains("51 of 1000"), "{r}");
        let r = verdict(&w(1000, 0, 2), &t).unwrap();
        assert!(r.contains("complaint rate") && r.contains("0.2%"), "{r}");
    }
}
