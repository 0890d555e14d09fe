//! The runtime's own checks that need no plugin: the clock, the outbound HTTP policy and manifests.
//! (An integration test rather than `#[cfg(test)]` modules: the crate is compiled once, not a second
//! time with its test harness, which cost a cold CI run about a minute of CPU.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use herald_plugin_runtime::clock::{Clock, ManualClock, rfc3339};
use herald_plugin_runtime::http::{FetchError, FetchRequest, Outbound, is_public};
use herald_plugin_runtime::manifest::{Grants, Manifest, PluginGrant};

// ---- clock

#[test]
fn rfc3339_has_milliseconds_and_z() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
}

#[test]
fn manual_clock_moves_only_when_told() {
    let c = ManualClock::new(1000);
    assert_eq!(c.now_ms(), 1000);
    c.advance(500);
    assert_eq!(c.now_ms(), 1500);
}

// ---- http

#[test]
fn private_addresses_are_not_public() {
    for ip in [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "0.0.0.0",
        "100.64.0.1",
        "::1",
        "fe80::1",
        "fd00::1",
        "::ffff:127.0.0.1",
        "::127.0.0.1",
        "::10.0.0.1",
        "fec0::1",
        "2002:7f00:1::1",
        "2002:a00:1::",
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    ] {
        assert!(!is_public(ip.parse().unwrap()), "{ip}");
    }
    for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
        assert!(is_public(ip.parse().unwrap()), "{ip}");
    }
}

#[test]
fn host_patterns() {
    let o = Outbound::new(
        vec!["*.amazonaws.com".into(), "api.example.com".into(), "127.0.0.1:8080".into()],
        false,
        Duration::from_secs(1),
    )
    .unwrap();
    assert!(o.host_allowed("email.us-east-1.amazonaws.com", 443));
    assert!(!o.host_allowed("amazonaws.com.evil.net", 443));
    assert!(o.host_allowed("API.example.com", 443));
    assert!(!o.host_allowed("other.example.com", 443));
    assert!(o.host_allowed("127.0.0.1", 8080));
    assert!(!o.host_allowed("127.0.0.1", 8081));
    let any = Outbound::new(vec!["*".into()], false, Duration::from_secs(1)).unwrap();
    assert!(any.host_allowed("anything.net", 80));
}

#[tokio::test]
async fn loopback_is_denied_unless_allowed() {
    let o = Outbound::new(vec!["*".into()], false, Duration::from_secs(1)).unwrap();
    for url in ["http://127.0.0.1:9/", "http://localhost:9/"] {
        let get = FetchRequest { method: "GET".into(), url: url.into(), headers: vec![], body: None, timeout_ms: None };
        let r = o.fetch(get).await;
        assert!(matches!(r, Err(FetchError::Denied(_))), "{url}: {r:?}");
    }
}

/// A one-request-at-a-time HTTP server on `ip`: `/go` redirects (302) to `to`, anything else answers
/// 200; every request's head is recorded.
async fn http_server(ip: &str, to: Option<String>) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let mut buf = vec![0u8; 16 * 1024];
            let n = sock.read(&mut buf).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            let answer = match (&to, head.starts_with("GET /go") || head.starts_with("POST /go")) {
                (Some(to), true) => {
                    format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                }
                _ => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok".to_string(),
            };
            log.lock().unwrap().push(head.to_ascii_lowercase());
            let _ = sock.write_all(answer.as_bytes()).await;
        }
    });
    (base, seen)
}

#[tokio::test]
async fn a_redirect_to_another_origin_carries_no_credentials_cookies_or_custom_headers() {
    let o = Outbound::new(vec!["*".into()], true, Duration::from_secs(5)).unwrap();
    let headers = vec![
        ("Authorization".to_string(), "Bearer secret-token".to_string()),
        ("Cookie".to_string(), "session=abc".to_string()),
        ("X-Api-Key".to_string(), "k-123".to_string()),
        ("Accept".to_string(), "application/json".to_string()),
    ];
    // Another host (127.0.0.2 is loopback too, but another origin).
    let (elsewhere, theirs) = http_server("127.0.0.2", None).await;
    let (here, ours) = http_server("127.0.0.1", Some(format!("{elsewhere}/landing"))).await;
    let get = FetchRequest {
        method: "GET".into(),
        url: format!("{here}/go"),
        headers: headers.clone(),
        body: None,
        timeout_ms: None,
    };
    assert_eq!(o.fetch(get).await.unwrap().status, 200);
    let first = ours.lock().unwrap()[0].clone();
    assert!(first.contains("authorization: bearer secret-token") && first.contains("x-api-key"), "{first}");
    let second = theirs.lock().unwrap()[0].clone();
    assert!(second.starts_with("get /landing"), "{second}");
    for gone in ["authorization", "cookie", "x-api-key"] {
        assert!(!second.contains(&format!("{gone}:")), "{gone} reached the other origin: {second}");
    }
    assert!(second.contains("accept: application/json"), "{second}");

    // A redirect within the origin (a relative Location) keeps them.
    let (same, log) = http_server("127.0.0.1", Some("/landing".into())).await;
    let get = FetchRequest { method: "GET".into(), url: format!("{same}/go"), headers, body: None, timeout_ms: None };
    assert_eq!(o.fetch(get).await.unwrap().status, 200);
    let log = log.lock().unwrap().clone();
    assert!(log[1].starts_with("get /landing") && log[1].contains("authorization: bearer secret-token"), "{log:?}");
}

// ---- manifest

#[test]
fn manifest_parses_and_grants_layer() {
    let m = Manifest::parse(
        "name = \"ses\"\nabi = \"1.0.0\"\nkind = \"transport\"\n[capabilities]\nhttp = [\"*.amazonaws.com\"]\n\
         secrets = [\"key\"]\n[limits]\ntimeout_ms = 500\n[config]\nregion = \"eu-west-1\"\n",
    )
    .unwrap();
    let grant = PluginGrant {
        allow_private: true,
        secrets: [("key".to_string(), "s3cr3t".to_string()), ("other".to_string(), "x".to_string())].into(),
        config: [("region".to_string(), "us-east-1".to_string())].into(),
        ..Default::default()
    };
    let g = Grants::resolve(Some(&m), "ses", Some(&grant));
    assert_eq!(g.http_hosts, vec!["*.amazonaws.com"]);
    assert!(g.allow_private);
    assert_eq!(g.secrets.get("key").map(String::as_str), Some("s3cr3t"));
    assert!(!g.secrets.contains_key("other"), "a secret the manifest does not name stays hidden");
    assert_eq!(g.config.get("region").map(String::as_str), Some("us-east-1"));
    assert_eq!(g.timeout, Duration::from_millis(500));
    assert_eq!(g.memory_bytes, 64 << 20);
}

#[test]
fn bad_manifests_are_refused() {
    assert!(Manifest::parse("name = \"Bad Name\"\nabi = \"1.0.0\"\nkind = \"step\"").is_err());
    assert!(Manifest::parse("name = \"x\"\nabi = \"1.0.0\"\nkind = \"bogus\"").is_err());
    assert!(Manifest::parse("name = \"x\"\nabi = \"1.0.0\"\nkind = \"step\"\nsurprise = 1").is_err());
}
