//! Composing email records: one message rendered for one recipient, the way `/v1/send`, campaigns and
//! test sends all do it. Variables are the contact's `data`, the request's one-off values, `id`, `email`
//! and the three subscription links (docs/behaviour.md#templates); marketing mail gets the RFC 8058
//! one-click unsubscribe headers (docs/behaviour.md#tracking-and-unsubscribe); tracked mail gets its links
//! rewritten and the pixel.
//!
//! Must not import: salvo, surrealdb.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::domain::templating::{Engine, Prepared, TemplateIssue};
use crate::domain::text::html_to_text;
use crate::domain::tracking::instrument;
use crate::infra::security::{contact_token, seal_token};
use crate::store::emails::EmailRow;

/// Largest rendered subject or body.
pub const MAX_RENDER_BYTES: usize = 20 * 1024 * 1024;

/// Rendered bytes (subjects, HTML and text parts, over all recipients) one request may produce: the
/// 40 MB limit of a whole message holds for the request, not per recipient (docs/behaviour.md#limits),
/// so a small request with a template that multiplies its data cannot make the server store gigabytes.
pub const MAX_REQUEST_RENDER_BYTES: usize = 40 * 1024 * 1024;

/// Runs composing work on tokio's blocking pool: rendering a large message (or one whose loops use their
/// whole budget) takes milliseconds to seconds of CPU, which on an async worker thread would stall every
/// other request that thread serves (`/health` among them).
pub async fn off_async<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(work).await.map_err(|e| format!("composing failed: {e}"))
}

/// The three links of a contact.
pub struct Links {
    pub unsubscribe: String,
    pub subscribe: String,
    pub manage: String,
}

/// What a tracking token carries.
#[derive(Serialize, Deserialize)]
pub struct TrackingClaim {
    /// project
    pub p: String,
    /// email record
    pub e: String,
    /// the link, for clicks
    #[serde(skip_serializing_if = "Option::is_none")]
    pub u: Option<String>,
}

/// Renders email records. Holds the keys that sign subscription links and tracking tokens.
pub struct Composer {
    pub templates: Engine,
    pub links_key: Vec<u8>,
    pub tracking_key: Vec<u8>,
    pub public_url: String,
}

/// What every recipient of one message shares.
pub struct Message<'a> {
    pub project: &'a str,
    pub from: &'a str,
    pub from_name: Option<&'a str>,
    pub reply_to: Option<&'a str>,
    pub subject: &'a Prepared,
    pub html: &'a Prepared,
    /// TRANSACTIONAL, MARKETING or HEADLESS
    pub kind: &'a str,
    pub template: Option<&'a str>,
    pub campaign: Option<&'a str>,
    pub headers: &'a [(String, String)],
    /// JSON array of stored attachments, shared by every recipient's email
    pub attachments: std::sync::Arc<str>,
    /// Rewrite links and add the open pixel.
    pub track: bool,
    /// One-off values of the request (they win over the contact's data).
    pub request_vars: &'a [(String, Value)],
    /// Put before the rendered subject (`[TEST] `).
    pub subject_prefix: &'a str,
    /// Bulk mail (campaigns, and marketing workflow mail): `Precedence: bulk`, `Auto-Submitted:
    /// auto-generated` and `X-Auto-Response-Suppress: All`, so auto-responders stay quiet.
    pub bulk: bool,
}

/// The headers that keep out-of-office robots from answering bulk mail.
pub const BULK_HEADERS: &[(&str, &str)] =
    &[("Precedence", "bulk"), ("Auto-Submitted", "auto-generated"), ("X-Auto-Response-Suppress", "All")];

/// One recipient.
pub struct Recipient<'a> {
    pub contact_id: &'a str,
    pub email: &'a str,
    pub name: Option<&'a str>,
    pub data: &'a Map<String, Value>,
}

impl Composer {
    /// The subscription links of a contact, naming the email they come in (so an unsubscribe is
    /// attributed to it, and two emails carry different links).
    pub fn links(&self, project: &str, contact: &str, email: &str) -> Links {
        let t = contact_token(&self.links_key, project, contact, Some(email));
        let base = &self.public_url;
        Links {
            unsubscribe: format!("{base}/unsubscribe/{t}"),
            subscribe: format!("{base}/subscribe/{t}"),
            manage: format!("{base}/manage/{t}"),
        }
    }

    fn tracking_url(&self, path: &str, claim: &TrackingClaim) -> String {
        format!(
            "{}/t/{path}/{}",
            self.public_url,
            seal_token(&self.tracking_key, &serde_json::to_string(claim).unwrap_or_default())
        )
    }

    pub fn pixel_url(&self, project: &str, email: &str) -> String {
        self.tracking_url("o", &TrackingClaim { p: project.into(), e: email.into(), u: None })
    }

    pub fn click_url(&self, project: &str, email: &str, url: &str) -> String {
        self.tracking_url("c", &TrackingClaim { p: project.into(), e: email.into(), u: Some(url.into()) })
    }

    /// The email record `id` of `m` for `r`, PENDING, created at `now`.
    pub fn compose(&self, m: &Message<'_>, r: &Recipient<'_>, id: &str, now: i64) -> Result<EmailRow, TemplateIssue> {
        let mut budget = MAX_REQUEST_RENDER_BYTES;
        self.compose_within(m, r, id, now, &mut budget)
    }

    /// [`Composer::compose`] within what is left of a request's rendering budget (`budget` bytes),
    /// which it lowers by what it rendered; rendering stops early once the budget is spent.
    pub fn compose_within(
        &self,
        m: &Message<'_>,
        r: &Recipient<'_>,
        id: &str,
        now: i64,
        budget: &mut usize,
    ) -> Result<EmailRow, TemplateIssue> {
        let over = || TemplateIssue {
            line: None,
            column: None,
            message: format!("the rendered messages of one request exceed {} MB", MAX_REQUEST_RENDER_BYTES >> 20),
        };
        let mut vars = Value::Object(r.data.clone());
        for (k, v) in m.request_vars {
            vars[k] = v.clone();
        }
        vars["id"] = json!(r.contact_id);
        vars["email"] = json!(r.email);
        // The names the interface reserves for the same two values, so templates written for it work.
        vars["plunk_id"] = json!(r.contact_id);
        vars["plunk_email"] = json!(r.email);
        let links = self.links(m.project, r.contact_id, id);
        vars["unsubscribeUrl"] = json!(links.unsubscribe);
        vars["subscribeUrl"] = json!(links.subscribe);
        vars["manageUrl"] = json!(links.manage);
        let mut headers = m.headers.to_vec();
        if m.bulk {
            headers.extend(BULK_HEADERS.iter().map(|(n, v)| (n.to_string(), v.to_string())));
        }
        let room = |left: usize| left.min(MAX_RENDER_BYTES);
        let subject = self.templates.render_prepared(m.subject, &vars, room(*budget))?;
        *budget = budget.checked_sub(subject.len()).ok_or_else(over)?;
        let html = self
            .templates
            .render_prepared(m.html, &vars, room(*budget))
            .map_err(|e| if e.message.contains("exceeds") && *budget < MAX_RENDER_BYTES { over() } else { e })?;
        *budget = budget.checked_sub(html.len()).ok_or_else(over)?;
        let text = html_to_text(&html);
        *budget = budget.checked_sub(text.len()).ok_or_else(over)?;
        // RFC 8058 one-click unsubscribe (covered by the DKIM signature at delivery): on marketing mail
        // always, and on any mail whose body offers the unsubscribe or manage link, unless the caller set
        // its own List-Unsubscribe (only transactional and headless mail may).
        let caller_owned = || headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("List-Unsubscribe"));
        let offered = || html.contains(&links.unsubscribe) || html.contains(&links.manage);
        if m.kind == "MARKETING" || (!caller_owned() && offered()) {
            headers.retain(|(n, _)| {
                !n.eq_ignore_ascii_case("List-Unsubscribe") && !n.eq_ignore_ascii_case("List-Unsubscribe-Post")
            });
            headers.push(("List-Unsubscribe".into(), format!("<{}>", links.unsubscribe)));
            headers.push(("List-Unsubscribe-Post".into(), "List-Unsubscribe=One-Click".into()));
        }
        let html = if m.track {
            instrument(
                &html,
                &self.public_url,
                |url| self.click_url(m.project, id, url),
                &self.pixel_url(m.project, id),
            )
        } else {
            html
        };
        let from_domain = m.from.rsplit_once('@').map(|(_, d)| d).unwrap_or_default();
        Ok(EmailRow {
            id: id.to_string(),
            project: m.project.to_string(),
            contact: r.contact_id.to_string(),
            recipient: r.email.to_string(),
            recipient_name: r.name.map(str::to_string),
            from: m.from.to_string(),
            from_name: m.from_name.map(str::to_string),
            reply_to: m.reply_to.map(str::to_string),
            subject: format!("{}{}", m.subject_prefix, subject).replace(['\r', '\n'], " "),
            html,
            text,
            headers: serde_json::to_string(&headers).unwrap_or_else(|_| "[]".into()),
            attachments: m.attachments.clone(),
            kind: m.kind.to_string(),
            template: m.template.map(str::to_string),
            campaign: m.campaign.map(str::to_string),
            message_id: format!("<{id}@{from_domain}>"),
            status: crate::domain::status::EmailStatus::Pending,
            error: None,
            sent_at: None,
            created_at: now,
            updated_at: now,
            depth: None,
            attempts: None,
            next_attempt_at: None,
            resent_at: None,
        })
    }
}
