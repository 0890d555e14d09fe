//! The dashboard from the keyboard alone, in the dark colour scheme the system asks for: the skip link
//! comes first, and a person logs in by typing and pressing Enter, then reaches a page of the side bar with Shift+Tab and Enter.

use std::time::Duration;

use fantoccini::key::Key;
use serde_json::json;

use crate::driver::Browser;
use crate::harness::{Server, proj};

async fn press(b: &Browser, keys: &str) {
    b.client.active_element().await.unwrap().send_keys(keys).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_logs_in_with_the_keyboard_alone_and_the_pages_follow_dark_mode() {
    tokio::time::timeout(Duration::from_secs(180), keyboard()).await.expect("over 3 minutes");
}

async fn keyboard() {
    let s = Server::start().await;
    proj(&s, "kim@shop.test").await;
    let b = Browser::start_with(&s.base, &["--force-dark-mode"]).await;
    b.goto("/account/login").await;
    b.wait_text("h1", "Log in").await;

    // Dark mode: the system asks for it, the page's colours follow.
    assert_eq!(b.js("matchMedia('(prefers-color-scheme: dark)').matches").await, json!(true));
    assert_eq!(b.js("getComputedStyle(document.body).backgroundColor").await, json!("rgb(18, 21, 28)"));
    b.shots("login-dark").await;

    // Tab: the skip link first; Enter on it keeps the page and moves to its content.
    press(&b, &Key::Tab.to_string()).await;
    assert_eq!(b.js("document.activeElement.className").await, json!("skip"));
    press(&b, &Key::Enter.to_string()).await;
    b.until(
        "the content to be the target",
        "location.hash === '#main' && document.querySelector('h1')?.textContent === 'Log in'",
    )
    .await;

    // Into the form by Tab, typing, Enter to submit.
    b.click("input[name=email]").await;
    press(&b, "kim@shop.test").await;
    press(&b, &Key::Tab.to_string()).await;
    assert_eq!(b.js("document.activeElement.name").await, json!("password"));
    press(&b, "password123").await;
    press(&b, &Key::Enter.to_string()).await;
    b.wait_text("#setup-checklist", "Verify a sending domain").await;

    // The navigation is reachable by Tab and Enter follows a link.
    b.until("focus on the page", "document.activeElement && document.activeElement.id === 'main'").await;
    // The side bar comes before the content: Shift+Tab walks back to it.
    let back = format!("{}{}", Key::Shift, Key::Tab);
    let mut reached = false;
    for _ in 0..20 {
        press(&b, &back).await;
        if b.js("document.activeElement.textContent").await == json!("Contacts") {
            reached = true;
            break;
        }
    }
    assert!(reached, "the Contacts link is not reachable by Tab");
    press(&b, &Key::Enter.to_string()).await;
    b.wait_text("h1", "Contacts").await;
    assert_eq!(
        b.js("getComputedStyle(document.querySelector('.side')).backgroundColor").await,
        json!("rgb(27, 31, 41)")
    );
    b.shots("contacts-dark").await;
    b.close().await;
}
