//! HTTPS and reverse proxies (docs/behaviour.md#https-and-proxies): the client address behind a trusted
//! proxy, through a real forwarding proxy on loopback; HTTPS with a certificate reloaded when its files
//! change; a certificate that cannot be used at start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_host::config::Config;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_rustls::rustls;

use crate::binary::{free_port, herald};
use crate::harness::*;

/// Where the proxy connects to Herald from (the address Herald is told to trust, or not).
const PROXY_SIDE: &str = "127.0.0.2";

/// A reverse proxy on 127.0.0.1 that forwards each request to `upstream` from [`PROXY_SIDE`], appending
/// the address of its client to `X-Forwarded-For` as nginx's `$proxy_add_x_forwarded_for` does. Every
/// client of a test is 127.0.0.1, so a test names the address it plays in `X-Test-Client`, which the
/// proxy takes as its client's address and removes. One request per connection.
async fn proxy(upstream: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, peer)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = forward(client, peer, upstream).await;
            });
        }
    });
    addr
}

async fn forward(mut client: TcpStream, peer: SocketAddr, upstream: SocketAddr) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut chunk = [0u8; 4096];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        assert!(buf.len() < 64 * 1024, "a request head under 64 KiB");
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let mut body = buf[head_end + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let (mut kept, mut forwarded, mut playing, mut length) = (Vec::new(), Vec::new(), None, 0usize);
    for line in lines {
        let (name, value) = line.split_once(':').unwrap();
        match name.trim().to_ascii_lowercase().as_str() {
            "x-test-client" => playing = Some(value.trim().to_string()),
            "x-forwarded-for" => forwarded.push(value.trim().to_string()),
            "connection" => {}
            other => {
                if other == "content-length" {
                    length = value.trim().parse().unwrap();
                }
                kept.push(line.to_string());
            }
        }
    }
    forwarded.push(playing.unwrap_or_else(|| peer.ip().to_string()));
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let mut out = format!("{request_line}\r\n");
    for line in kept {
        out.push_str(&format!("{line}\r\n"));
    }
    out.push_str(&format!("X-Forwarded-For: {}\r\nConnection: close\r\n\r\n", forwarded.join(", ")));
    let socket = TcpSocket::new_v4()?;
    socket.bind(format!("{PROXY_SIDE}:0").parse().unwrap())?;
    let mut up = socket.connect(upstream).await?;
    up.write_all(out.as_bytes()).await?;
    up.write_all(&body).await?;
    tokio::io::copy(&mut up, &mut client).await?;
    client.shutdown().await
}

/// A login with a wrong password, as `client` (through the proxy) with these extra headers.
async fn failed_login(http: &reqwest::Client, base: &str, email: &str, headers: &[(&str, &str)]) -> u16 {
    let mut req = http.post(format!("{base}/auth/login")).json(&json!({"email": email, "password": "wrong-password"}));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    req.send().await.unwrap().status().as_u16()
}

fn no_pool() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap()
}

async fn server_trusting(trusted: &str) -> Server {
    let mut config = Config::for_tests();
    config.http.trusted_proxies = trusted.split(',').filter(|s| !s.is_empty()).map(|c| c.parse().unwrap()).collect();
    Server::start_with(config, None).await
}

#[tokio::test]
async fn behind_a_trusted_proxy_failed_logins_lock_out_the_forwarded_address_and_no_other() {
    let s = server_trusting(&format!("{PROXY_SIDE}/32")).await;
    let via = format!("http://{}", proxy(s.running.as_ref().unwrap().addr).await);
    let http = no_pool();
    let (a, b) = ("203.0.113.10", "2001:db8::20");
    for i in 0..10 {
        let status = failed_login(&http, &via, &format!("u{i}@example.com"), &[("x-test-client", a)]).await;
        assert_eq!(status, 401, "failure {i}");
    }
    // The address is locked out, whichever account it tries and whatever it claims to forward.
    assert_eq!(failed_login(&http, &via, "other@example.com", &[("x-test-client", a)]).await, 429);
    let forged = [("x-test-client", a), ("x-forwarded-for", b)];
    assert_eq!(failed_login(&http, &via, "other@example.com", &forged).await, 429, "the right-most untrusted hop");
    // Another visitor of the same proxy is not.
    assert_eq!(failed_login(&http, &via, "other@example.com", &[("x-test-client", b)]).await, 401);
    s.stop().await;
}

#[tokio::test]
async fn forwarding_headers_from_a_peer_that_is_not_trusted_are_ignored() {
    // Nothing trusted: everyone behind the proxy is the proxy.
    let s = server_trusting("").await;
    let via = format!("http://{}", proxy(s.running.as_ref().unwrap().addr).await);
    let http = no_pool();
    for i in 0..10 {
        let status =
            failed_login(&http, &via, &format!("u{i}@example.com"), &[("x-test-client", "203.0.113.10")]).await;
        assert_eq!(status, 401, "failure {i}");
    }
    assert_eq!(failed_login(&http, &via, "other@example.com", &[("x-test-client", "203.0.113.20")]).await, 429);
    s.stop().await;

    // The proxy trusted, a client connecting directly forges the header: each request claims another
    // address, and all of them count against its own.
    let s = server_trusting(&format!("{PROXY_SIDE}/32")).await;
    let direct = s.client_from("127.0.0.3");
    for i in 0..10 {
        let r = direct
            .http
            .post(format!("{}/auth/login", s.base))
            .header("x-forwarded-for", format!("198.51.100.{i}"))
            .header("forwarded", format!("for=198.51.100.{i}"))
            .json(&json!({"email": format!("u{i}@example.com"), "password": "wrong-password"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 401, "failure {i}");
    }
    let r = direct
        .http
        .post(format!("{}/auth/login", s.base))
        .header("x-forwarded-for", "198.51.100.200")
        .json(&json!({"email": "other@example.com", "password": "wrong-password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429, "the forged header was ignored");
    // The proxy's own visitors are untouched, one of them claiming the forger's address included.
    let via = format!("http://{}", proxy(s.running.as_ref().unwrap().addr).await);
    assert_eq!(failed_login(&no_pool(), &via, "other@example.com", &[("x-test-client", "198.51.100.200")]).await, 401);
    s.stop().await;
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/api/fixtures/https");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

fn der(pem: &[u8]) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem).next().unwrap().unwrap().to_vec()
}

/// `GET path` over TLS, trusting the fixtures' CA: the status line and the certificate served.
async fn https_get(addr: SocketAddr, path: &str) -> (String, Vec<u8>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(&fixture("ca.pem")) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap();
    let served = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response);
    (text.lines().next().unwrap_or_default().to_string(), served)
}

fn scratch(name: &str) -> PathBuf {
    let dir = Config::test_scratch().join(format!("{name}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `bytes` to `path` through a temporary name and a rename, as certificate tools do.
fn replace(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn https_serves_the_certificate_and_the_one_that_replaces_it_but_not_one_that_cannot_be_used() {
    let dir = scratch("https");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, fixture("a.pem")).unwrap();
    std::fs::write(&key, fixture("a.key")).unwrap();
    let mut config = Config::for_tests();
    config.http.tls = Some((cert.clone(), key.clone()));
    let s = Server::start_with(config, None).await;
    let addr = s.running.as_ref().unwrap().addr;
    let (status, served) = https_get(addr, "/health").await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert_eq!(served, der(&fixture("a.pem")));
    // Plain HTTP on the port gets no answer.
    assert!(reqwest::get(format!("http://{addr}/health")).await.is_err());

    // A new certificate whose key has not been written yet cannot be used: the old one stays.
    replace(&cert, &fixture("b.pem"));
    tokio::time::sleep(herald_host::api::serve::TLS_RELOAD_EVERY * 2 + Duration::from_millis(500)).await;
    let (status, served) = https_get(addr, "/health").await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    assert_eq!(served, der(&fixture("a.pem")), "a certificate without its key is not served");

    // With its key, it is served within a few seconds.
    replace(&key, &fixture("b.key"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, served) = https_get(addr, "/health").await;
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        if served == der(&fixture("b.pem")) {
            break;
        }
        assert!(Instant::now() < deadline, "the new certificate was not served within 20 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_certificate_that_cannot_be_used_stops_start_up_with_a_clear_line() {
    let dir = scratch("https-bad");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, b"not a certificate").unwrap();
    std::fs::write(&key, fixture("a.key")).unwrap();
    let run = |c: &mut std::process::Command| {
        let out = c.arg("serve").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        (out.status.code(), stderr.lines().last().unwrap_or_default().to_string())
    };
    let (code, said) =
        run(herald(&dir.join("db"), free_port()).env("HERALD_TLS_CERT", &cert).env("HERALD_TLS_KEY", &key));
    assert_eq!(code, Some(4), "{said}");
    assert!(said.contains("HTTPS certificate") && said.contains(&cert.display().to_string()), "{said}");
    // A key that is not the certificate's.
    std::fs::write(&cert, fixture("a.pem")).unwrap();
    std::fs::write(&key, fixture("b.key")).unwrap();
    let (code, said) =
        run(herald(&dir.join("db"), free_port()).env("HERALD_TLS_CERT", &cert).env("HERALD_TLS_KEY", &key));
    assert_eq!(code, Some(4), "{said}");
    assert!(said.contains("HTTPS certificate"), "{said}");
    // One without the other is a settings error.
    let (code, said) = run(herald(&dir.join("db"), free_port()).env("HERALD_TLS_CERT", &cert));
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("both or neither"), "{said}");
    let _ = std::fs::remove_dir_all(dir);
}
