//! The dashboard in real headless Chromium (docs/dashboard.md): each test boots the real Herald server
//! in-process on loopback, with the loopback SMTP sink and DNS server of the API tests, and drives
//! Debian's `chromium` through `chromedriver` (WebDriver) the way a person would: typing, clicking,
//! waiting for what the page shows. Screenshots of each main page at 1440 and 375 px go to
//! `<target>/screenshots/`.
//!
//! Needs `chromium` and `chromium-driver` (`.ci/run` installs them). `HERALD_CHROMEDRIVER` and
//! `HERALD_CHROMIUM` name other binaries.

#![allow(clippy::unwrap_used)]

#[path = "../api/dns_server.rs"]
mod dns_server;
#[path = "../api/harness.rs"]
mod harness;
#[path = "../api/http_sink.rs"]
mod http_sink;
#[path = "../api/smtp_sink.rs"]
mod smtp_sink;

mod campaign;
mod chores;
mod delivery;
mod driver;
mod journey;
mod keyboard;
mod workflow;
