//! A new user's first hour, in the browser: sign up through the mailed link, create a project and keep
//! its keys, add a domain and verify it against DNS, write a template with a live preview, import a
//! CSV and watch the progress bar finish with the bad rows listed; then a contact whose data, name and
//! email subject carry script payloads is shown on every page that shows it, as text, and no script
//! runs.

use std::time::Duration;

use herald_host::config::Config;
use serde_json::{Value, json};

use crate::dns_server::DnsServer;
use crate::driver::Browser;
use crate::harness::Server;
use crate::smtp_sink::{SmtpSink, token_in};

/// Payloads that would run if any page put contact data into HTML.
const NAME: &str = "<img src=x onerror=\"window.__pwned='name'\">";
const PLAN: &str = "<script>window.__pwned='plan'</script>";
const SUBJECT: &str = "Hi <svg onload=\"window.__pwned='subject'\"> there";

async fn env() -> (Server, SmtpSink, DnsServer) {
    let sink = SmtpSink::start(0).await;
    let dns = DnsServer::start().await;
    let mut c = Config::for_tests();
    c.smtp_url = Some(sink.url());
    c.dns_servers = vec![dns.addr];
    c.dns_timeout_ms = 1000;
    (Server::start_with(c, None).await, sink, dns)
}

/// Nothing of the payloads ran, and none of them became an element.
async fn no_script_ran(b: &Browser, page: &str) {
    let pwned = b.js("window.__pwned ?? null").await;
    assert_eq!(pwned, Value::Null, "a payload ran on {page}");
    let injected = b.js("document.querySelectorAll('img[src=\"x\"], svg[onload], script:not([src])').length").await;
    assert_eq!(injected, json!(0), "a payload became an element on {page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_user_signs_up_sets_up_a_project_and_imports_contacts_in_the_browser() {
    tokio::time::timeout(Duration::from_secs(300), journey()).await.expect("the journey took over 5 minutes");
}

async fn journey() {
    let (s, sink, dns) = env().await;
    let b = Browser::start(&s.base).await;

    // Signing up: `/` sends a stranger to the login page, which links to sign-up.
    b.goto("/").await;
    b.wait_text("h1", "Log in").await;
    assert!(b.path().await.starts_with("/account/login"), "{}", b.path().await);
    b.shots("login").await;
    b.click_text("a", "Create an account").await;
    b.wait_text("h1", "Create your account").await;
    b.fill("input[name=name]", "Ada").await;
    b.fill("input[name=email]", "ada@shop.test").await;
    b.fill("input[name=password]", "short").await;
    b.click_text("button", "Sign up").await;
    // The API's field error shows next to the field it names.
    b.wait_text(".error[data-for=password]", "password").await;
    b.fill("input[name=password]", "correct horse battery").await;
    b.click_text("button", "Sign up").await;
    b.wait_text("h1", "Check your inbox").await;

    // The mailed link opens the dashboard's verification page, which asks for the password.
    let mail = sink.wait_for_system(1).await.pop().unwrap();
    let token = token_in(&mail, "verify-email");
    b.goto(&format!("/account/verify-email?token={token}")).await;
    b.wait_text("h1", "Confirm your email").await;
    b.fill("input[name=password]", "correct horse battery").await;
    b.click_text("button", "Confirm").await;

    // No project yet: the dashboard asks for one, then shows its keys once.
    b.wait_text("h1", "New project").await;
    b.fill("input[name=name]", "Shop").await;
    b.click_text("button", "Create project").await;
    let secret = b.until("the secret key", "document.getElementById('secret-key')?.textContent").await;
    let secret = secret.as_str().unwrap().to_string();
    assert!(secret.starts_with("sk_"), "{secret}");
    let public = b.js("document.getElementById('public-key').textContent").await;
    assert!(public.as_str().unwrap().starts_with("pk_"), "{public}");
    let api = s.with_key(&secret);
    b.shots("keys").await;
    b.click_text("a", "Go to the project").await;
    b.wait_text("#setup-checklist", "Verify a sending domain").await;
    let pending = b.js("document.querySelectorAll('#setup-checklist li.done').length").await;
    assert_eq!(pending, json!(0));

    // Regenerating the keys asks first; the old secret key stops working at once.
    b.click_text("nav a", "API keys").await;
    b.click("#regenerate-keys").await;
    b.wait_text("dialog h2", "Regenerate the API keys?").await;
    b.click_text("dialog button", "Regenerate").await;
    let fresh = b
        .until(
            "new keys",
            &format!("(t => t && t !== {secret:?} && t)(document.getElementById('secret-key')?.textContent)"),
        )
        .await;
    assert_eq!(api.get("/contacts").await.status, 401, "the old key still works");
    let api = s.with_key(fresh.as_str().unwrap());
    assert_eq!(api.get("/contacts").await.status, 200);

    // A domain: its records are shown to copy; once published, "Verify now" verifies it.
    b.click_text("nav a", "Domains").await;
    b.fill("input[name=domain]", "shop.test").await;
    b.click_text("button", "Add domain").await;
    b.wait_text("section[data-domain='shop.test'] h2", "PENDING").await;
    let domains = api
        .get(&format!("/domains/project/{}", b.js("localStorage.getItem('herald.project')").await.as_str().unwrap()))
        .await;
    let records = domains.json[0]["records"].as_array().unwrap().clone();
    for r in &records {
        let shown = b
            .js(&format!(
                "document.querySelector(\"section[data-domain='shop.test']\").textContent.includes({})",
                json!(r["name"])
            ))
            .await;
        assert_eq!(shown, json!(true), "record {} not shown", r["name"]);
        if r["type"] == "TXT" {
            dns.txt(r["name"].as_str().unwrap(), r["value"].as_str().unwrap());
        }
    }
    b.shots("domains").await;
    b.click("button[data-verify='shop.test']").await;
    b.wait_text("section[data-domain='shop.test'] h2", "VERIFIED").await;

    // A template: the preview renders as a send would, and an error names its line.
    b.goto("/app/templates/new").await;
    b.fill("input[name=name]", "Welcome").await;
    b.fill("input[name=from]", "hello@shop.test").await;
    b.fill("input[name=subject]", "Welcome {{firstName}}").await;
    b.fill("textarea[name=body]", "<h1>Hello {{firstName}}</h1>\n<p>Your plan: {{plan ?? \"free\"}}</p>").await;
    b.until("the preview", "document.getElementById('template-preview').srcdoc.includes('Hello Ada')").await;
    b.wait_text("#preview-subject", "Welcome Ada").await;
    b.wait_text("#template-variables", "plan").await;
    b.fill("textarea[name=body]", "<p>ok</p>\n{{#if firstName}}\n<p>never closed</p>").await;
    b.wait_text("#preview-error", "line").await;
    b.fill("textarea[name=body]", "<h1>Hello {{firstName}}</h1>").await;
    b.until("the preview to recover", "document.getElementById('preview-error').textContent === ''").await;
    b.shots("template-editor").await;
    b.click_text("button", "Create template").await;
    b.until("the saved template's page", "/^\\/app\\/templates\\/[0-9a-f-]{36}$/.test(location.pathname)").await;

    // A CSV import of 3,000 rows with two bad ones and the payload contact.
    let mut csv = String::from("email,firstName,plan\n");
    for i in 0..3000 {
        csv.push_str(&format!("user{i}@example.com,User {i},basic\n"));
    }
    csv.push_str("not-an-email,Bad,basic\n,Empty,basic\n");
    csv.push_str(&format!("mallory@example.com,\"{}\",\"{}\"\n", NAME.replace('"', "\"\""), PLAN.replace('"', "\"\"")));
    let file = std::env::temp_dir().join(format!("herald-import-{}.csv", std::process::id()));
    std::fs::write(&file, csv).unwrap();
    b.goto("/app/contacts/import").await;
    b.find("input[type=file]").await.send_keys(file.to_str().unwrap()).await.unwrap();
    b.click_text("button", "Import").await;
    b.until("a progress bar", "document.querySelector('#import-progress [role=progressbar]')").await;
    // 3,003 rows: longer than a step when the suite's other browsers share a 2-core machine.
    b.wait_text_within("#import-result", "Import finished", Duration::from_secs(120)).await;
    let done =
        b.js("document.querySelector('#import-progress [role=progressbar]').getAttribute('aria-valuenow')").await;
    assert_eq!(done, json!("100"));
    let result = b.js("document.getElementById('import-result').innerText").await;
    let result = result.as_str().unwrap();
    assert!(result.contains("3,001") && result.contains("Rows not imported"), "{result}");
    assert!(result.contains("not-an-email"), "the bad row is not listed: {result}");
    b.shots("import").await;
    std::fs::remove_file(&file).ok();

    // The payload contact gets an email whose subject is a payload, and an event whose data is one.
    let r = api
        .post(
            "/v1/send",
            json!({ "to": "mallory@example.com", "from": "hello@shop.test", "subject": SUBJECT, "body": "<p>hi</p>" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    let r = api
        .post("/v1/track", json!({ "email": "mallory@example.com", "event": "visited", "data": { "page": PLAN } }))
        .await;
    assert_eq!(r.status, 200, "{}", r.json);
    sink.wait_for(1).await;

    b.goto("/app/contacts").await;
    b.wait_text("#contacts-results", "3,001 contacts").await;
    b.shots("contacts").await;
    b.fill("input[type=search]", "mallory").await;
    b.wait_text("#contacts-results", "1 contact").await;
    no_script_ran(&b, "the contacts list").await;
    b.click_text("#contacts-results a", "mallory@example.com").await;
    b.wait_text("#contact-data", NAME).await;
    b.wait_text("#contact-data", PLAN).await;
    b.wait_text("main", SUBJECT).await;
    b.wait_text("main", "visited").await;
    no_script_ran(&b, "the contact's page").await;
    b.shots("contact").await;
    b.click("nav a[href='/app/activity']").await;
    b.wait_text("#activity-list", SUBJECT).await;
    no_script_ran(&b, "the activity feed").await;
    b.shots("activity").await;
    b.click_text("nav a", "Events").await;
    b.wait_text("main", PLAN).await;
    no_script_ran(&b, "the events").await;
    b.click_text("nav a", "Overview").await;
    b.until("the checklist to fill in", "document.querySelectorAll('#setup-checklist li.done').length >= 3").await;
    b.shots("overview").await;
    for page in ["Analytics", "Plugins", "Settings"] {
        b.click_text("nav a", page).await;
        b.wait_text("h1", page).await;
        b.until("the page to load", "!document.querySelector('main').textContent.includes('Loading')").await;
        no_script_ran(&b, page).await;
        b.shots(&page.to_lowercase()).await;
    }

    // Logging out ends the session: the dashboard is behind the login page again.
    b.click_text("button", "Log out").await;
    b.wait_text("h1", "Log in").await;
    b.goto("/app/contacts").await;
    b.wait_text("h1", "Log in").await;
    b.close().await;
}
