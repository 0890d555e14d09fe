//! The `herald` binary itself: the command line on the default embedded engine, `serve`, and a graceful
//! shutdown on SIGTERM.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The `herald` binary on an embedded database in `dir`, listening on `port`, without `HERALD_SECRET`.
pub fn herald(dir: &std::path::Path, port: u16) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_herald"));
    c.env("HERALD_DB", format!("surrealkv://{}", dir.display()))
        .env("HERALD_LISTEN", format!("127.0.0.1:{port}"))
        .env("HERALD_LOG", "warn")
        .env("HERALD_SMTP_SPOOL_DIR", format!("{}.spool", dir.display()))
        // No lookup leaves the machine (a port nothing answers on).
        .env("HERALD_DNS_SERVERS", "127.0.0.1:1")
        .env("HERALD_DNS_TIMEOUT_MS", "100")
        .env_remove("HERALD_SECRET");
    c
}

/// A spawned `herald` that is killed when the test ends, passing or failing (a panicking test must not
/// leave a server running).
pub struct Serving(pub std::process::Child);

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Serving {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Serving {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

/// `herald project create` (then `herald domain add DOMAIN --trust` when a domain is given) with
/// commands made by `c`: answers the project's id and secret key.
pub fn project_with(c: impl Fn() -> Command, domain: Option<&str>) -> (String, String) {
    let out = c()
        .args(["project", "create", "Crash", "--owner", "c@example.com", "--password", "password123"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let project: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = project["id"].as_str().unwrap().to_string();
    if let Some(d) = domain {
        let out = c().args(["domain", "add", d, "--project", &id, "--trust"]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    (id, project["secret"].as_str().unwrap().to_string())
}

/// `herald serve` from the command `c`, its output discarded, killed when dropped.
pub fn serve(mut c: Command) -> Serving {
    Serving(c.arg("serve").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap())
}

/// Sends `signal` (`-KILL`, `-TERM`) to the process and waits for it to end.
pub fn signal(server: &mut Serving, signal: &str) {
    let _ = Command::new("kill").args([signal, &server.0.id().to_string()]).status();
    let _ = server.0.wait();
}

/// The JSON body of `GET url` with a bearer key (Null when the request or its body fails: a server
/// starting up).
pub async fn get_json(http: &reqwest::Client, url: &str, key: &str) -> Value {
    match http.get(url).bearer_auth(key).send().await {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

/// Polls `/health` for up to ten seconds.
/// A CLI command that succeeded and closed the store as the last of its handles, inside its runtime:
/// the services' background tasks (group-commit lanes, the delivery ledger) had ended first, or the store
/// warns that it closes under live handles (`Store::close_last`; docs/behaviour.md#command-line).
fn closed_cleanly(out: &std::process::Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("other handles of it are still alive"), "closed under live handles: {stderr}");
    // The storage engine warns when its last handle goes after the runtime, unclosed.
    assert!(!stderr.contains("No runtime available"), "the store was dropped after the runtime: {stderr}");
}

pub async fn wait_until_up(base: &str) -> bool {
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if http.get(format!("{base}/health")).send().await.is_ok_and(|r| r.status().is_success()) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn the_cli_creates_a_project_and_a_trusted_domain_and_serve_shuts_down_gracefully() {
    let dir = herald_host::config::Config::test_scratch().join(format!("bin-{}", uuid::Uuid::new_v4()));
    let port = free_port();

    // A dry run lists every migration of a new database and applies none of them.
    let dry = |dir: &std::path::Path| {
        let out = herald(dir, port).args(["migrate", "--dry-run"]).output().unwrap();
        closed_cleanly(&out);
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let all = herald_host::store::migrate::MIGRATIONS.len();
    for _ in 0..2 {
        let plan = dry(&dir);
        assert_eq!(plan["pending"].as_array().map(Vec::len), Some(all), "{plan}");
        assert_eq!(plan["pending"][0], "0001_foundation.surql");
        assert_eq!(plan["changed"], serde_json::json!([]));
    }
    let out = herald(&dir, port).args(["migrate"]).output().unwrap();
    closed_cleanly(&out);
    let applied: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(applied["applied"].as_array().map(Vec::len), Some(all), "the dry runs applied nothing");
    assert_eq!(dry(&dir), serde_json::json!({ "pending": [], "changed": [] }), "nothing left to apply");
    let out = herald(&dir, port)
        .args(["project", "create", "CLI shop", "--owner", "cli@example.com", "--password", "password123"])
        .output()
        .unwrap();
    closed_cleanly(&out);
    let project: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(project["name"], "CLI shop");
    let secret = project["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("sk_") && project["public"].as_str().unwrap().starts_with("pk_"));

    let out = herald(&dir, port)
        .args(["domain", "add", "Mail.Local.Test", "--project", project["id"].as_str().unwrap(), "--trust"])
        .output()
        .unwrap();
    closed_cleanly(&out);
    let domain: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(domain["domain"], "mail.local.test");
    assert_eq!(domain["status"], "VERIFIED");
    let out = herald(&dir, port).args(["domain", "add", "x.test", "--project", "nope"]).output().unwrap();
    assert!(!out.status.success(), "an unknown project is refused");

    let mut server =
        Serving(herald(&dir, port).arg("serve").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    assert!(wait_until_up(&base).await, "herald serve answers /health");
    let r = http.get(format!("{base}/contacts")).bearer_auth(&secret).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .post(format!("{base}/auth/login"))
        .json(&serde_json::json!({"email": "cli@example.com", "password": "password123"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the owner created by the CLI can log in");

    let term = Command::new("kill").args(["-TERM", &server.id().to_string()]).status().unwrap();
    assert!(term.success());
    let mut exited = None;
    for _ in 0..100 {
        if let Some(status) = server.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = exited.expect("herald exits after SIGTERM");
    assert!(status.success(), "a graceful shutdown exits 0: {status:?}");

    // The operator lifts a suspension from the command line (the project is suspended here through the
    // store, as the bounce check would).
    let id = project["id"].as_str().unwrap();
    let mut config = herald_host::config::Config::for_tests();
    config.db = format!("surrealkv://{}", dir.display());
    let store = herald_host::store::Store::connect(&config).await.unwrap();
    assert!(store.suspend_project(id, "too many bounces", 1).await.unwrap());
    store.close().await;
    let out = herald(&dir, port).args(["project", "unsuspend", id]).output().unwrap();
    closed_cleanly(&out);
    let lifted: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(lifted["project"], id);
    let out = herald(&dir, port).args(["project", "unsuspend", id]).output().unwrap();
    assert!(!out.status.success(), "a project that is not suspended is refused");
    let store = herald_host::store::Store::connect(&config).await.unwrap();
    assert_eq!(store.project(id).await.unwrap().unwrap().suspended, None);
    assert_eq!(store.suspensions(id, 5).await.unwrap()[0].lifted_by.as_deref(), Some("operator"));
    store.close().await;

    // Without HERALD_SECRET the server secret lives in a file of its own beside the data, readable by
    // its owner only, and not in the database (a copy of the data alone opens nothing).
    let secret_file = std::path::PathBuf::from(format!("{}.secret", dir.display()));
    let meta = std::fs::metadata(&secret_file).expect("the secret file beside the data");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o600);
    assert!(std::fs::read_to_string(&secret_file).unwrap().trim().len() >= 32);
    let store = herald_host::store::Store::connect(&config).await.unwrap();
    assert_eq!(store.setting("secret").await.unwrap(), None, "the database holds no secret");
    store.close().await;
    let _ = std::fs::remove_file(secret_file);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_start_that_cannot_succeed_says_why_in_one_line_and_exits_with_its_code() {
    let dir = herald_host::config::Config::test_scratch().join(format!("bin-fail-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let fails = |c: &mut Command| {
        let out = c.arg("serve").env("HERALD_LOG", "warn").env("RUST_BACKTRACE", "1").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let last = stderr.lines().last().unwrap_or_default().to_string();
        assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"), "{stderr}");
        assert!(last.starts_with("herald: "), "{stderr}");
        (out.status.code(), last)
    };
    // The data directory held by a running process.
    let base = format!("http://127.0.0.1:{port}");
    let _first = Serving(
        herald(&dir.join("db"), port).arg("serve").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap(),
    );
    assert!(wait_until_up(&base).await);
    let other = free_port();
    let (code, said) = fails(&mut herald(&dir.join("db"), other));
    assert_eq!(code, Some(3), "{said}");
    assert!(said.contains("locked by another process"), "{said}");
    // A data directory that cannot be made (a file is in the way).
    std::fs::write(dir.join("file"), b"x").unwrap();
    let (code, said) = fails(&mut herald(&dir.join("file").join("db"), other));
    assert_eq!(code, Some(3), "{said}");
    assert!(said.contains("Not a directory"), "{said}");
    // The address is taken.
    let (code, said) = fails(&mut herald(&dir.join("db2"), port));
    assert_eq!(code, Some(4), "{said}");
    assert!(said.contains("cannot listen"), "{said}");
    // A setting that is not one.
    let (code, said) = fails(herald(&dir.join("db3"), other).env("HERALD_DB", "postgres://x"));
    assert_eq!(code, Some(2), "{said}");
    // Delivery routes that cannot work: the one line names the route's key and what is wrong with it.
    let settings = |toml: &str| {
        let path = dir.join(format!("herald-{}.toml", uuid::Uuid::new_v4()));
        std::fs::write(&path, toml).unwrap();
        let mut c = herald(&dir.join("db4"), other);
        c.env("HERALD_CONFIG", path);
        c
    };
    let unknown = "[transports.primary]\nurl = \"smtp://relay-a:587\"\n\
                   [[routes]]\nclass = \"campaign\"\ntransports = [\"primary\", \"backup2\"]\n";
    let (code, said) = fails(&mut settings(unknown));
    assert_eq!(code, Some(2), "{said}");
    assert_eq!(
        said,
        "herald: invalid setting routes[0].transports: unknown transport \"backup2\" (configured: file, primary)"
    );
    let shadowed =
        "[[routes]]\ntransports = [\"file\"]\n[[routes]]\nrecipient_domain = \"gmail.com\"\ntransports = [\"file\"]\n";
    let (code, said) = fails(&mut settings(shadowed));
    assert_eq!(code, Some(2), "{said}");
    assert_eq!(
        said,
        "herald: invalid setting routes[1]: never used: routes[0] before it has no condition, so it takes every email"
    );
    // A mistyped key is the parser's to refuse, in one line too.
    let (code, said) = fails(&mut settings("[[routes]]\nrecipient = \"gmail.com\"\ntransports = [\"file\"]\n"));
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("line 2 (`recipient = \"gmail.com\"`): unknown field `recipient`"), "{said}");
}

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `herald` for a kill test: a fresh scratch folder, a free port, and commands on the database in
/// `dir/db` with the crash suite's secret, a 2 s job lease (so a killed process's leases expire soon)
/// and the settings added with `env`.
pub struct Killable {
    pub dir: std::path::PathBuf,
    pub port: u16,
    pub base: String,
    envs: Vec<(String, std::ffi::OsString)>,
}

impl Killable {
    pub fn new(name: &str) -> Killable {
        let dir = herald_host::config::Config::test_scratch().join(format!("{name}-{}", uuid::Uuid::new_v4()));
        let port = free_port();
        Killable { dir, port, base: format!("http://127.0.0.1:{port}"), envs: Vec::new() }
    }

    pub fn env(mut self, key: &str, value: impl Into<std::ffi::OsString>) -> Killable {
        self.envs.push((key.to_string(), value.into()));
        self
    }

    pub fn db(&self) -> std::path::PathBuf {
        self.dir.join("db")
    }

    pub fn cmd(&self) -> Command {
        let mut c = herald(&self.db(), self.port);
        c.env("HERALD_SECRET", "a test secret of the crash suite").env("HERALD_JOB_LEASE_SECS", "2");
        c.envs(self.envs.iter().map(|(k, v)| (k, v)));
        c
    }

    /// A project (with `domain` trusted): its id and secret key.
    pub fn project(&self, domain: Option<&str>) -> (String, String) {
        project_with(|| self.cmd(), domain)
    }

    /// `herald serve`, once it answers `/health`.
    pub async fn serve(&self) -> Serving {
        let server = serve(self.cmd());
        assert!(wait_until_up(&self.base).await, "the server came up");
        server
    }
}
