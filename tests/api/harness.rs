//! Test harness: a real server per test, and a small HTTP client that returns `(status, json)`.

#![allow(dead_code)]

use std::sync::Arc;

use herald_host::config::Config;
use herald_host::infra::clock::{ManualClock, SharedClock, SystemClock};
use herald_host::{App, Running};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

#[allow(unused_imports)]
use herald_host::infra::clock::Clock;

pub struct Server {
    pub base: String,
    pub running: Option<Running>,
    pub clock: Option<ManualClock>,
    pub worker: herald_host::infra::jobs::Worker,
    pub state: Arc<herald_host::state::AppState>,
}

pub struct Resp {
    pub status: u16,
    pub json: Value,
    pub headers: HeaderMap,
}

impl Resp {
    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
    }
}

impl Server {
    pub async fn start() -> Server {
        Self::start_with(Config::for_tests(), None).await
    }

    /// A server whose clock only moves when the test says so.
    pub async fn start_manual() -> Server {
        let clock = ManualClock::new(1_800_000_000_000);
        Self::start_with(Config::for_tests(), Some(clock)).await
    }

    pub async fn start_with(config: Config, clock: Option<ManualClock>) -> Server {
        let shared: SharedClock = match &clock {
            Some(c) => Arc::new(c.clone()),
            None => Arc::new(SystemClock),
        };
        let app =
            App::build_with(config, shared, herald_host::infra::jobs::builtin_registry()).await.expect("build app");
        Self::serve(app, clock).await
    }

    /// Serves an application built by the test.
    pub async fn serve(app: App, clock: Option<ManualClock>) -> Server {
        let worker = app.worker.clone();
        let state = app.state.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let running = app.start(listener).await.expect("start");
        Server { base: format!("http://{}", running.addr), running: Some(running), clock, worker, state }
    }

    /// A manual-clock server whose job workers do not run: the test steps them with `self.worker`.
    pub async fn start_stepped() -> Server {
        let mut config = Config::for_tests();
        config.run_jobs = false;
        Self::start_with(config, Some(ManualClock::new(1_800_000_000_000))).await
    }

    pub fn clock(&self) -> &ManualClock {
        self.clock.as_ref().expect("a manual clock")
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }

    /// A client with its own cookie jar (one dashboard session).
    pub fn client(&self) -> Client {
        let jar = Arc::new(reqwest::cookie::Jar::default());
        Client {
            base: self.base.clone(),
            http: reqwest::Client::builder().cookie_provider(jar.clone()).build().expect("client"),
            jar,
            bearer: None,
            project: None,
        }
    }

    /// A client whose requests come from another loopback address (`127.0.0.x`): another client to the
    /// per-address throttles.
    pub fn client_from(&self, ip: &str) -> Client {
        let jar = Arc::new(reqwest::cookie::Jar::default());
        let local: std::net::IpAddr = ip.parse().expect("an IP address");
        Client {
            base: self.base.clone(),
            http: reqwest::Client::builder().cookie_provider(jar.clone()).local_address(local).build().expect("client"),
            jar,
            bearer: None,
            project: None,
        }
    }

    /// A client authenticated with an API key.
    pub fn with_key(&self, key: &str) -> Client {
        let mut c = self.client();
        c.bearer = Some(key.to_string());
        c
    }
}

#[derive(Clone)]
pub struct Client {
    pub base: String,
    pub http: reqwest::Client,
    /// The cookies `http` keeps (a test may put a session in it).
    pub jar: Arc<reqwest::cookie::Jar>,
    pub bearer: Option<String>,
    pub project: Option<String>,
}

impl Client {
    pub async fn send(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut rb = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(k) = &self.bearer {
            rb = rb.bearer_auth(k);
        }
        if let Some(p) = &self.project {
            rb = rb.header("X-Project-Id", p);
        }
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let res = rb.send().await.expect("request");
        Self::read(res).await
    }

    pub async fn raw(&self, method: &str, path: &str, body: Vec<u8>, content_type: &str) -> Resp {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut rb = self.http.request(method, format!("{}{}", self.base, path)).header("content-type", content_type);
        if let Some(k) = &self.bearer {
            rb = rb.bearer_auth(k);
        }
        let res = rb.body(body).send().await.expect("request");
        Self::read(res).await
    }

    async fn read(res: reqwest::Response) -> Resp {
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let text = res.text().await.unwrap_or_default();
        let json = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Resp { status, json, headers }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send("GET", path, None).await
    }
    pub async fn post(&self, path: &str, body: Value) -> Resp {
        self.send("POST", path, Some(body)).await
    }
    pub async fn patch(&self, path: &str, body: Value) -> Resp {
        self.send("PATCH", path, Some(body)).await
    }
    pub async fn put(&self, path: &str, body: Value) -> Resp {
        self.send("PUT", path, Some(body)).await
    }
    pub async fn delete(&self, path: &str) -> Resp {
        self.send("DELETE", path, None).await
    }
}

/// The argon2 hash of `password123`, computed once per test process.
static PASSWORD123: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| herald_host::infra::security::hash_password("password123").expect("hash"));

/// A user with a verified address and the password `password123` (named "Test"), and a fresh client
/// logged in as that user. Sign-up over HTTP is tested in `accounts` and `account_mail`; here the user is
/// written straight to the store so that every test need not read a confirmation mail.
pub async fn signup(server: &Server, email: &str) -> Client {
    let st = &server.state;
    let now = st.clock.now_ms();
    let id = uuid::Uuid::now_v7().to_string();
    let email = email.trim().to_ascii_lowercase();
    st.store.create_user(&id, &email, Some("Test"), &PASSWORD123, now).await.expect("create user");
    st.store.set_email_verified(&id, now).await.expect("verify user");
    let user = st.store.user(&id).await.expect("read user").expect("user");
    let c = server.client();
    c.log_in_as(st, &user);
    c
}

/// A user whose address was never verified, as accounts created before sign-ups waited for their
/// address can be (password `password123`), and a client logged in as that user.
pub async fn unverified_user(server: &Server, email: &str, name: Option<&str>) -> Client {
    let st = &server.state;
    let id = uuid::Uuid::now_v7().to_string();
    st.store.create_user(&id, email, name, &PASSWORD123, st.clock.now_ms()).await.expect("create user");
    let user = st.store.user(&id).await.expect("read user").expect("user");
    let c = server.client();
    c.log_in_as(st, &user);
    c
}

impl Client {
    /// Puts a new session of `user` in this client's cookie jar.
    pub fn log_in_as(&self, st: &herald_host::state::AppState, user: &herald_host::store::accounts::User) {
        let cookie = herald_host::api::auth::session_cookie(st, user);
        let url = reqwest::Url::parse(&self.base).expect("base URL");
        self.jar.add_cookie_str(&format!("{}={}; Path=/", cookie.name(), cookie.value()), &url);
    }
}

/// A user with a project; returns (session client, project json with keys).
pub async fn project(server: &Server, email: &str, name: &str) -> (Client, Value) {
    let c = signup(server, email).await;
    let r = c.post("/users/@me/projects", json!({ "name": name })).await;
    assert_eq!(r.status, 201, "create project: {}", r.json);
    (c, r.json)
}

/// A project's secret-key client, public-key client and session client.
pub struct Proj {
    pub id: String,
    pub secret: Client,
    pub public: Client,
    pub session: Client,
    pub json: Value,
}

pub async fn proj(server: &Server, email: &str) -> Proj {
    let (session, p) = project(server, email, "P").await;
    Proj {
        id: p["id"].as_str().unwrap().to_string(),
        secret: server.with_key(p["secret"].as_str().unwrap()),
        public: server.with_key(p["public"].as_str().unwrap()),
        session,
        json: p,
    }
}

/// Asserts the standard error envelope (docs/behaviour.md#errors).
pub fn assert_envelope(r: &Resp, status: u16, code: &str) {
    assert_eq!(r.status, status, "status of {}", r.json);
    assert_eq!(r.json["success"], false, "{}", r.json);
    assert_eq!(r.json["error"]["code"], code, "{}", r.json);
    assert_eq!(r.json["error"]["statusCode"], status, "{}", r.json);
    let rid = r.json["error"]["requestId"].as_str().unwrap_or("");
    assert!(!rid.is_empty(), "requestId missing: {}", r.json);
    assert_eq!(r.header("x-request-id").as_deref(), Some(rid), "X-Request-ID must equal the envelope's requestId");
    assert!(r.json["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(r.json["timestamp"].as_str().is_some());
}

/// Posts a delivery notification to `/webhooks/notifications`, signed with the server's key at `ts`
/// (seconds) unless `sig` is given.
pub async fn notification(s: &Server, body: &Value, ts: i64, sig: Option<String>) -> Resp {
    let raw = serde_json::to_vec(body).unwrap();
    let sig = sig.unwrap_or_else(|| herald_host::api::notifications::sign(&s.state.notifications_key, ts, &raw));
    signed_post(s, "/webhooks/notifications", raw, ts, sig).await
}

/// Posts `raw` JSON to `path` with the notification signature headers (`ts` in seconds).
pub async fn signed_post(s: &Server, path: &str, raw: Vec<u8>, ts: i64, sig: String) -> Resp {
    let res = reqwest::Client::new()
        .post(format!("{}{path}", s.base))
        .header("X-Herald-Timestamp", ts.to_string())
        .header("X-Herald-Signature", sig)
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    Resp { status, json: res.json().await.unwrap_or(Value::Null), headers }
}

/// Makes the user with `email` a member of `project` with `role` (OWNER, ADMIN or MEMBER), as an
/// accepted invitation does (invitations themselves are tested in `account_mail`).
pub async fn join(s: &Server, project: &str, email: &str, role: &str) {
    let st = &s.state;
    let user = st.store.user_by_email(email).await.expect("read user").expect("a user with that address");
    let role = herald_host::store::accounts::Role::parse(role).expect("a role");
    st.store.add_member(project, &user.id, role, st.clock.now_ms()).await.expect("add member");
}
