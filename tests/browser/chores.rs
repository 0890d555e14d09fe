//! An administrator's chores, in the browser: a bulk job on a selection of contacts, editing and
//! deleting one contact, a static segment's members added and removed, members invited, promoted,
//! removed and an invitation withdrawn, and the project reset behind a typed confirmation. Each step is
//! checked through the API, so the page is shown to have done what it says. And a forgotten password
//! reset from the mailed link.

use std::time::Duration;

use herald_host::config::Config;
use serde_json::json;

use crate::driver::Browser;
use crate::harness::{Server, proj, signup};
use crate::smtp_sink::{SmtpSink, token_in};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_runs_bulk_jobs_edits_contacts_manages_members_and_resets_the_project_in_the_browser() {
    tokio::time::timeout(Duration::from_secs(300), chores()).await.expect("the chores took over 5 minutes");
}

/// The id of the project's contact with `email`.
async fn contact_id(api: &crate::harness::Client, email: &str) -> String {
    let r = api.get(&format!("/contacts?search={email}")).await;
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["data"][0]["id"].as_str().unwrap_or_else(|| panic!("no contact {email}: {}", r.json)).to_string()
}

async fn chores() {
    let sink = SmtpSink::start(0).await;
    let mut c = Config::for_tests();
    c.smtp_url = Some(sink.url());
    let s = Server::start_with(c, None).await;
    let p = proj(&s, "ana@shop.test").await;
    for i in 0..6 {
        let body = json!({ "email": format!("c{i}@example.com"), "subscribed": true, "data": { "plan": "free" } });
        assert!(p.secret.post("/contacts", body).await.status < 300);
    }

    let b = Browser::start(&s.base).await;
    b.log_in("ana@shop.test", "password123").await;

    // A selection of two contacts unsubscribed by a bulk job, behind a confirmation naming the count.
    b.click_text("nav a", "Contacts").await;
    b.wait_text("#contacts-results", "6 contacts").await;
    let bulk = b.js("document.querySelector('button[data-bulk=bulk-unsubscribe]').disabled").await;
    assert_eq!(bulk, json!(true), "a bulk action is offered with nothing selected");
    for email in ["c1@example.com", "c2@example.com"] {
        b.click(&format!("#contacts-results input[aria-label='Select {email}']")).await;
    }
    b.click("button[data-bulk=bulk-unsubscribe]").await;
    b.wait_text("dialog h2", "Unsubscribe 2 contacts?").await;
    b.click_text("dialog button", "Unsubscribe").await;
    b.until(
        "both to show unsubscribed",
        "[...document.querySelectorAll('#contacts-results tr')].filter(r => r.textContent.includes('unsubscribed')).length === 2",
    )
    .await;
    for (email, subscribed) in [("c1@example.com", false), ("c2@example.com", false), ("c3@example.com", true)] {
        let id = contact_id(&p.secret, email).await;
        let r = p.secret.get(&format!("/contacts/{id}")).await;
        assert_eq!(r.json["subscribed"], subscribed, "{email}: {}", r.json);
    }
    b.shots("contacts-bulk").await;

    // One contact edited: data that is not JSON is refused on the form; good data is saved.
    let c3 = contact_id(&p.secret, "c3@example.com").await;
    b.goto(&format!("/app/contacts/{c3}")).await;
    b.wait_text("#contact-email", "c3@example.com").await;
    b.fill("textarea[name=data]", "{ not json").await;
    b.click_text("button", "Save").await;
    b.wait_text(".form-error", "not valid JSON").await;
    b.fill("textarea[name=data]", r#"{"plan": "pro", "seats": 4}"#).await;
    b.click_text("button", "Save").await;
    b.wait_text("#contact-data", "pro").await;
    let r = p.secret.get(&format!("/contacts/{c3}")).await;
    assert_eq!(r.json["data"]["plan"], "pro", "{}", r.json);
    assert_eq!(r.json["data"]["seats"], 4, "{}", r.json);

    // Deleted behind a confirmation: cancelling keeps it, confirming deletes it.
    b.click_text("button", "Delete contact").await;
    b.wait_text("dialog h2", "Delete c3@example.com?").await;
    b.click_text("dialog button", "Cancel").await;
    assert_eq!(p.secret.get(&format!("/contacts/{c3}")).await.status, 200, "a cancelled delete deleted");
    b.click_text("button", "Delete contact").await;
    b.click_text("dialog button", "Delete").await;
    b.wait_text("#contacts-results", "5 contacts").await;
    assert_eq!(p.secret.get(&format!("/contacts/{c3}")).await.status, 404);

    // A static segment: members added by email (an unknown one named), then one removed.
    b.click_text("nav a", "Segments").await;
    b.click_text("a", "New segment").await;
    b.fill("input[name=name]", "Hand-picked").await;
    b.find("select[name=type]").await.select_by_value("STATIC").await.unwrap();
    b.click_text("button", "Create segment").await;
    b.until("the saved segment", "/^\\/app\\/segments\\/[0-9a-f-]{36}$/.test(location.pathname)").await;
    b.wait_text("#segment-members", "0 members").await;
    b.fill("textarea[name=emails]", "c0@example.com, c4@example.com\nnobody@example.com").await;
    b.click_text("button", "Add members").await;
    b.wait_text(".toast", "nobody@example.com").await;
    b.wait_text("#segment-members", "2 members").await;
    let segment = b.js("location.pathname.split('/').pop()").await;
    let segment = segment.as_str().unwrap().to_string();
    let r = p.secret.get(&format!("/segments/{segment}/contacts")).await;
    assert_eq!(r.json["total"], 2, "{}", r.json);
    b.click_text("#segment-members button", "Remove").await;
    b.wait_text("#segment-members", "1 member").await;
    let r = p.secret.get(&format!("/segments/{segment}/contacts")).await;
    assert_eq!(r.json["total"], 1, "{}", r.json);
    b.shots("segment-static").await;

    // Members: an invitation mailed and accepted, the new member promoted, then removed; another
    // invitation withdrawn.
    let bob = signup(&s, "bob@shop.test").await;
    b.click_text("nav a", "Settings").await;
    b.wait_text("h1", "Settings").await;
    b.wait_text("h3", "Invite someone").await;
    b.fill("input[name=email][type=email]", "bob@shop.test").await;
    b.click_text("button", "Invite").await;
    b.wait_text("main table", "bob@shop.test").await;
    let mail = sink.wait_for_system(1).await;
    let token = token_in(mail.last().unwrap(), "accept-invitation");
    let r = bob.post("/auth/accept-invitation", json!({ "token": token })).await;
    assert_eq!(r.status, 200, "{}", r.json);
    b.goto("/app/settings").await;
    b.wait_text("h3", "Invite someone").await;
    b.find("select[aria-label='Role of bob@shop.test']").await.select_by_value("ADMIN").await.unwrap();
    b.wait_text(".toast", "Role changed").await;
    let members = p.session.get(&format!("/projects/{}/members", p.id)).await;
    let role = members
        .json
        .as_array()
        .and_then(|a| a.iter().find(|m| m["email"] == "bob@shop.test"))
        .map(|m| m["role"].clone());
    assert_eq!(role, Some(json!("ADMIN")), "{}", members.json);
    b.shots("settings").await;
    b.click_text("main table tr:has(select[aria-label='Role of bob@shop.test']) button", "Remove").await;
    b.click_text("dialog button", "Remove").await;
    b.until("bob to leave the table", "!document.querySelector(\"select[aria-label='Role of bob@shop.test']\")").await;
    let members = p.session.get(&format!("/projects/{}/members", p.id)).await;
    assert_eq!(members.json.as_array().map(|a| a.len()), Some(1), "{}", members.json);

    b.wait_text("h3", "Invite someone").await;
    b.fill("input[name=email][type=email]", "carol@elsewhere.test").await;
    b.click_text("button", "Invite").await;
    b.wait_text("main table", "carol@elsewhere.test").await;
    let invites = p.session.get(&format!("/projects/{}/invitations", p.id)).await;
    assert_eq!(invites.json.as_array().map(|a| a.len()), Some(1), "{}", invites.json);
    b.click_text("main table button", "Withdraw").await;
    b.until("the invitation to go", "!document.querySelector('main').textContent.includes('carol@elsewhere.test')")
        .await;
    let invites = p.session.get(&format!("/projects/{}/invitations", p.id)).await;
    assert_eq!(invites.json.as_array().map(|a| a.len()), Some(0), "{}", invites.json);

    // The reset asks for the project's name typed out; until then its button does nothing.
    b.click("#reset-project").await;
    b.wait_text("dialog h2", "Reset P?").await;
    let disabled = b.js("document.querySelector('dialog button.danger').disabled").await;
    assert_eq!(disabled, json!(true), "the reset is offered before the name is typed");
    b.fill("dialog input[type=text]", "Q").await;
    let disabled = b.js("document.querySelector('dialog button.danger').disabled").await;
    assert_eq!(disabled, json!(true), "a wrong name enables the reset");
    assert_eq!(p.secret.get("/contacts").await.json["total"], 5);
    b.fill("dialog input[type=text]", "P").await;
    b.click_text("dialog button", "Reset").await;
    b.wait_text(".toast", "reset").await;
    b.until("the overview", "location.pathname === '/app'").await;
    // The reset runs as a queue job (202 with its id): the contacts go within moments.
    let mut total = json!(null);
    for _ in 0..100 {
        total = p.secret.get("/contacts").await.json["total"].clone();
        if total == json!(0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(total, json!(0), "the reset left contacts behind");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_password_is_reset_from_the_mailed_link_in_the_browser() {
    tokio::time::timeout(Duration::from_secs(120), password_reset()).await.expect("the reset took over 2 minutes");
}

async fn password_reset() {
    let sink = SmtpSink::start(0).await;
    let mut c = Config::for_tests();
    c.smtp_url = Some(sink.url());
    let s = Server::start_with(c, None).await;
    let _p = proj(&s, "ana@shop.test").await;
    let before = sink.system_received().len();

    let b = Browser::start(&s.base).await;
    b.goto("/account/login").await;
    b.click_text("a", "Forgot your password?").await;
    b.wait_text("h1", "Reset your password").await;
    b.fill("input[name=email]", "ana@shop.test").await;
    b.click_text("button", "Send a reset link").await;
    b.wait_text("h1", "Check your inbox").await;
    let mail = sink.wait_for_system(before + 1).await;
    let token = token_in(mail.last().unwrap(), "reset-password");
    b.goto(&format!("/account/reset-password?token={token}")).await;
    b.wait_text("h1", "Choose a new password").await;
    b.fill("input[name=password]", "short").await;
    b.click_text("button", "Save password").await;
    b.wait_text(".error[data-for=password]", "password").await;
    b.fill("input[name=password]", "a brand new password").await;
    b.click_text("button", "Save password").await;
    b.until("the login page", "location.pathname === '/account/login'").await;
    b.log_in("ana@shop.test", "a brand new password").await;
    // The old password no longer logs in.
    let r = s.client().post("/auth/login", json!({ "email": "ana@shop.test", "password": "password123" })).await;
    assert_eq!(r.status, 401, "{}", r.json);
    b.close().await;
}
