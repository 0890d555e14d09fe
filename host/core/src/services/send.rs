//! A transactional send (docs/behaviour.md#sending): the one entry point every front end calls with a
//! parsed [`SendCommand`]. It holds all of a send's rules: the template and its checks, the sender and
//! its domain, marketing mail only to subscribed contacts, the contacts quota, suspension, the monthly
//! limit, the suppression list, then the recipients' contacts, emails and delivery jobs written before it returns
//! ([`crate::services::accept`]).
//!
//! Must not import: salvo, surrealdb.

use serde_json::Value;

use crate::context::Context;
use crate::domain::billing::Category;
use crate::domain::contacts::DataPatch;
use crate::domain::templating::{Mode, TemplateIssue};
use crate::domain::tracking::tracked;
use crate::error::Error;
use crate::services::accept::{self, AcceptError, Accepted, SendRequest};
use crate::services::delivery::StoredAttachment;

/// The largest message: subject, body and attachments together.
pub const MAX_MESSAGE_BYTES: usize = 40 * 1024 * 1024;

/// Attachments one send may carry.
pub const MAX_ATTACHMENTS: usize = 10;
/// The attachments of one send, decoded, at most (whether given to `/v1/send` or to the SMTP relay).
pub const MAX_ATTACHMENT_BYTES: usize = 10 * 1024 * 1024;

/// Headers Herald writes itself on every email; a send cannot set them (`/v1/send` refuses them by
/// field, the SMTP relay drops the caller's).
pub const RESERVED_HEADERS: &[&str] = &[
    "from",
    "to",
    "cc",
    "bcc",
    "subject",
    "date",
    "message-id",
    "reply-to",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
    "dkim-signature",
    "return-path",
    "sender",
];

/// The one-click unsubscribe pair: Herald's own on marketing mail; transactional and headless mail may
/// set its own (the caller then owns both).
const LIST_UNSUBSCRIBE: &[&str] = &["list-unsubscribe", "list-unsubscribe-post"];

/// A send whose fields each parsed (addresses valid and folded, headers not reserved, attachments
/// decoded); what depends on the project is checked by [`send`].
pub struct SendCommand {
    pub project: String,
    /// (email, display name), in request order.
    pub recipients: Vec<(String, Option<String>)>,
    /// (email, display name); the template's sender without one.
    pub from: Option<(String, Option<String>)>,
    /// The deprecated sender name, used when `from` has none.
    pub legacy_name: Option<String>,
    pub reply_to: Option<String>,
    pub subscribed: Option<bool>,
    pub patch: DataPatch,
    pub template: Option<String>,
    pub subject: Option<String>,
    pub html: Option<String>,
    pub headers: Vec<(String, String)>,
    pub attachments: Vec<StoredAttachment>,
    /// The attachments' decoded size.
    pub attachment_bytes: usize,
    /// Subject and body are the caller's text, not templates (the SMTP relay).
    pub literal: bool,
}

/// Accepts a send: every rule checked before anything is written, then each recipient's contact,
/// email record and delivery job written together. Returns one [`Accepted`] per recipient, in order.
pub async fn send(
    st: &Context,
    composer: &std::sync::Arc<crate::services::compose::Composer>,
    accepter: &crate::services::accept::Accepter,
    cmd: SendCommand,
) -> Result<Vec<Accepted>, Error> {
    let project = cmd.project.as_str();
    let template = match &cmd.template {
        Some(id) => Some(crate::services::templates::get(st, project, id).await?),
        None => None,
    };
    let subject_src = cmd.subject.or_else(|| template.as_ref().map(|t| t.subject.clone())).unwrap_or_default();
    let html_src = cmd.html.or_else(|| template.as_ref().map(|t| t.body.clone())).unwrap_or_default();
    // The size first: an oversized message costs no compile.
    if subject_src.len() + html_src.len() + cmd.attachment_bytes > MAX_MESSAGE_BYTES {
        return Err(Error::field("body", "too_big", "the message is larger than 40 MB", Value::Null));
    }
    // Checked and compiled once, on the blocking pool (a large template's compile is CPU work).
    let composer = composer.clone();
    let literal = cmd.literal;
    let (subject, html) = crate::services::compose::off_async(move || {
        let t = &composer.templates;
        if literal {
            return (Ok(t.literal(&subject_src, Mode::Text)), Ok(t.literal(&html_src, Mode::Html)));
        }
        (t.prepare(&subject_src, Mode::Text), t.prepare(&html_src, Mode::Html))
    })
    .await
    .map_err(Error::Internal)?;
    let invalid = |field: &str, issue: TemplateIssue| {
        Error::field(field, "invalid_template", &format!("{field} is not a valid template: {issue}"), Value::Null)
    };
    let subject = subject.map_err(|i| invalid("subject", i))?;
    let html = html.map_err(|i| invalid("body", i))?;
    let (from, from_name) = match (cmd.from, &template) {
        (Some((e, n)), _) => (e, n),
        (None, Some(t)) => (t.from.clone(), None),
        (None, None) => {
            return Err(Error::field(
                "from",
                "required",
                "from is required without a template that has one",
                Value::Null,
            ));
        }
    };
    let settings = crate::services::accounts::project_settings(st, project).await?;
    let from_name = from_name
        .or(cmd.legacy_name.filter(|n| !n.trim().is_empty()))
        .or_else(|| template.as_ref().and_then(|t| t.from_name.clone()))
        .or_else(|| settings.as_ref().map(|p| p.name.clone()));
    let reply_to = cmd.reply_to.or_else(|| template.as_ref().and_then(|t| t.reply_to.clone()));
    let kind = template.as_ref().map(|t| t.kind.clone()).unwrap_or_else(|| "TRANSACTIONAL".into());
    let marketing = kind == "MARKETING";
    if marketing
        && let Some((name, value)) =
            cmd.headers.iter().find(|(n, _)| LIST_UNSUBSCRIBE.contains(&n.to_lowercase().as_str()))
    {
        return Err(Error::field(
            &format!("headers.{name}"),
            "reserved_header",
            &format!("{name} is set by Herald on marketing mail"),
            Value::String(value.clone()),
        ));
    }
    crate::services::sending_domains::require_sender(&st.store, project, &from).await?;
    // Marketing mail never goes to an unsubscribed contact: checked for all before any write.
    if marketing {
        accept::check_marketing_recipients(&st.store, project, &cmd.recipients, cmd.subscribed).await?;
    }
    let now = st.clock.now_ms();
    let emails: Vec<String> = cmd.recipients.iter().map(|(e, _)| e.clone()).collect();
    crate::services::quotas::room_for_contacts(&st.store, &st.quotas, project, &emails, now).await?;
    // A suspended project sends nothing.
    crate::services::suspension::ensure_active(&st.store, project).await?;
    // Recipients on the suppression list get an email record that says so, and nothing is sent to them.
    let suppressed = crate::services::suppressions::among(&st.store, project, &emails).await?;
    // The monthly transactional limit, before anything is written (the write checks it again).
    let sending = emails.iter().filter(|e| !suppressed.contains_key(*e)).count();
    crate::services::billing::check(&st.store, project, Category::Transactional, sending, now).await?;
    let tracking_mode = settings.as_ref().and_then(|p| p.tracking.clone());
    let request = SendRequest {
        project: cmd.project.clone(),
        recipients: cmd.recipients,
        subscribed: cmd.subscribed,
        request_vars: cmd.patch.request_values().into_iter().collect(),
        patch: cmd.patch,
        from,
        from_name,
        reply_to,
        subject,
        html,
        track: tracked(tracking_mode.as_deref(), &kind),
        priority: if marketing { 10 } else { 100 },
        kind,
        template: template.as_ref().map(|t| t.id.clone()),
        headers: cmd.headers,
        attachments: serde_json::to_string(&cmd.attachments).unwrap_or_else(|_| "[]".into()).into(),
        suppressed,
    };
    let accepted = accepter.submit(request).await.map_err(|e| match e {
        AcceptError::Render(issue) => Error::Invalid(format!("cannot render the template: {issue}")),
        AcceptError::Billing(refusal) => refusal,
        AcceptError::Store(e) => e.into(),
    })?;
    st.job_wake.kind(crate::services::delivery::DELIVER_JOB);
    Ok(accepted)
}
