//! A headless Chromium session for one test: its own chromedriver on a free loopback port, its own
//! profile directory, and helpers that wait for what the page shows instead of sleeping.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// How long a step may take before the test fails with what the page shows.
const STEP: Duration = Duration::from_secs(30);

pub struct Browser {
    pub client: Client,
    pub base: String,
    driver: Child,
    profile: PathBuf,
}

fn binary(var: &str, candidates: &[&str]) -> String {
    if let Ok(v) = std::env::var(var) {
        return v;
    }
    for c in candidates {
        if Path::new(c).exists() {
            return (*c).to_string();
        }
    }
    panic!(
        "{} not found: install Debian's chromium and chromium-driver (`apt-get install -y chromium \
         chromium-driver`, as .ci/run does) or set {var}",
        candidates[0]
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Where screenshots go: `<target>/screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().join("screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Browser {
    /// Starts chromedriver and a headless Chromium at 1440 x 900 speaking to `base`.
    pub async fn start(base: &str) -> Browser {
        Self::start_with(base, &[]).await
    }

    /// As [`Browser::start`], with more Chromium flags (`--force-dark-mode`: the system asks for dark).
    pub async fn start_with(base: &str, extra: &[&str]) -> Browser {
        let driver_bin = binary("HERALD_CHROMEDRIVER", &["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]);
        let chromium = binary("HERALD_CHROMIUM", &["/usr/lib/chromium/chromium", "/usr/bin/chromium"]);
        let port = free_port();
        let log = std::fs::File::create(screenshot_dir().join(format!("chromedriver-{port}.log"))).unwrap();
        let driver = Command::new(driver_bin)
            .args([format!("--port={port}"), "--allowed-ips=127.0.0.1".into()])
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let profile = std::env::temp_dir().join(format!("herald-chromium-{}-{port}", std::process::id()));
        let mut args: Vec<String> = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--window-size=1440,900",
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": args,
            },
        });
        let caps = match caps {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector).capabilities(caps.clone()).connect(&url).await {
                Ok(c) => break c,
                Err(e) if started.elapsed() < STEP => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("no WebDriver session: {e}"),
            }
        };
        Browser { client, base: base.to_string(), driver, profile }
    }

    pub async fn goto(&self, path: &str) {
        self.client.goto(&format!("{}{}", self.base, path)).await.unwrap();
    }

    pub async fn path(&self) -> String {
        let u = self.client.current_url().await.unwrap();
        match u.query() {
            Some(q) => format!("{}?{q}", u.path()),
            None => u.path().to_string(),
        }
    }

    /// Runs a JavaScript expression in the page and answers its value.
    pub async fn js(&self, expr: &str) -> Value {
        self.client.execute(&format!("return ({expr});"), vec![]).await.unwrap()
    }

    /// Waits until `expr` is truthy in the page and answers its value; fails with the page's text.
    pub async fn until(&self, what: &str, expr: &str) -> Value {
        self.until_within(what, expr, STEP).await
    }

    /// [`Browser::until`] for work that may take longer than a step (`limit`).
    pub async fn until_within(&self, what: &str, expr: &str, limit: Duration) -> Value {
        let started = Instant::now();
        loop {
            let v =
                self.client.execute(&format!("try {{ return ({expr}); }} catch (e) {{ return null; }}"), vec![]).await;
            if let Ok(v) = v
                && !matches!(&v, Value::Null | Value::Bool(false))
                && v != json!(0)
                && v != json!("")
            {
                return v;
            }
            if started.elapsed() > limit {
                self.shot("failure").await;
                let text = self.js("document.body.innerText").await;
                panic!("waited {limit:?} for {what} ({expr}) at {}: the page says:\n{text}", self.path().await);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the first element matching `css` whose text contains `text` ("" for any).
    pub async fn wait_text(&self, css: &str, text: &str) {
        self.wait_text_within(css, text, STEP).await;
    }

    /// [`Browser::wait_text`] for work that may take longer than a step (`limit`).
    pub async fn wait_text_within(&self, css: &str, text: &str, limit: Duration) {
        let expr = format!(
            "[...document.querySelectorAll({})].some(e => e.textContent.includes({}))",
            json!(css),
            json!(text)
        );
        self.until_within(&format!("{css} with {text:?}"), &expr, limit).await;
    }

    /// Logs in through the login page and waits for the project's overview.
    pub async fn log_in(&self, email: &str, password: &str) {
        self.goto("/account/login").await;
        self.fill("input[name=email]", email).await;
        self.fill("input[name=password]", password).await;
        self.click_text("button", "Log in").await;
        self.wait_text("#setup-checklist", "").await;
    }

    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        let started = Instant::now();
        loop {
            match self.client.find(Locator::Css(css)).await {
                Ok(e) => return e,
                Err(_) if started.elapsed() < STEP => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => {
                    self.shot("failure").await;
                    panic!("no {css} at {}: {e}", self.path().await)
                }
            }
        }
    }

    /// Types into the field matching `css` (cleared first).
    pub async fn fill(&self, css: &str, text: &str) {
        let el = self.find(css).await;
        el.clear().await.unwrap();
        el.send_keys(text).await.unwrap();
    }

    /// Clicks the button or link whose visible text is `text` (inside `scope`, a CSS selector).
    pub async fn click_text(&self, scope: &str, text: &str) {
        let started = Instant::now();
        loop {
            let found = self.client.find_all(Locator::Css(scope)).await.unwrap_or_default();
            for el in found {
                if el.text().await.unwrap_or_default().trim() == text
                    && el.is_displayed().await.unwrap_or(false)
                    && el.click().await.is_ok()
                {
                    return;
                }
            }
            if started.elapsed() > STEP {
                self.shot("failure").await;
                panic!("nothing to click named {text:?} in {scope} at {}", self.path().await);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Clicks the element matching `css`, once it is there and nothing covers it.
    pub async fn click(&self, css: &str) {
        let started = Instant::now();
        loop {
            match self.find(css).await.click().await {
                Ok(()) => return,
                Err(_) if started.elapsed() < STEP => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => {
                    self.shot("failure").await;
                    panic!("cannot click {css} at {}: {e}", self.path().await)
                }
            }
        }
    }

    /// Saves a screenshot as `<target>/screenshots/<name>.png`.
    pub async fn shot(&self, name: &str) {
        if let Ok(png) = self.client.screenshot().await {
            std::fs::write(screenshot_dir().join(format!("{name}.png")), png).ok();
        }
    }

    /// Screenshots of the page at 1440 and at 375 px wide (`<name>-1440.png`, `<name>-375.png`), and
    /// at each width nothing is wider than the window: the page reflows instead of scrolling sideways.
    pub async fn shots(&self, name: &str) {
        for (w, h) in [(1440, 900), (375, 812)] {
            self.client.set_window_size(w, h).await.unwrap();
            tokio::time::sleep(Duration::from_millis(150)).await;
            let over = self.js("document.documentElement.scrollWidth - document.documentElement.clientWidth").await;
            assert!(over.as_i64().unwrap_or(0) <= 1, "{name} at {w} px is {over} px wider than the window");
            self.shot(&format!("{name}-{w}")).await;
        }
        self.client.set_window_size(1440, 900).await.unwrap();
    }

    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        self.stop();
    }

    fn stop(&mut self) {
        // chromedriver and the browser it started share its process group.
        let _ = Command::new("kill").args(["-s", "KILL", "--", &format!("-{}", self.driver.id())]).status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if matches!(self.driver.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}
