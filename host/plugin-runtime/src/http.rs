//! Outbound HTTP for plugins (`herald:plugin/http.fetch`): only to hosts the plugin was granted, never to
//! private, loopback or link-local addresses unless the operator allowed those, every redirect re-checked
//! (and one to another origin stripped of credentials, cookies and custom headers),
//! a deadline on the whole exchange and a cap on the response size. The client's resolver filters
//! addresses too, so a name that re-resolves to a private address between check and connect is refused.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Name, Resolve, Resolving};

/// Largest response body a plugin receives.
pub const MAX_RESPONSE_BYTES: usize = 10 << 20;
const MAX_REDIRECTS: usize = 5;

#[derive(Debug, Clone)]
pub struct FetchRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    pub timeout_ms: Option<u32>,
}

#[derive(Debug, Clone)]
pub struct FetchResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FetchError {
    Denied(String),
    Timeout,
    Connect(String),
    TooLarge,
    Other(String),
}

/// Whether an address is on the public internet.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || v4.is_multicast()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || (o[0] == 198 && (o[1] & 0xfe) == 18)
                // the 6to4 relay anycast: reaches whatever IPv6 address it is handed
                || (o[0] == 192 && o[1] == 88 && o[2] == 99)
                // Azure's host endpoint (wire server), answering every VM of the cloud
                || o == [168, 63, 129, 16]
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let s = v6.segments();
            // IPv4-translated `::ffff:0:a.b.c.d` (SIIT) reaches the IPv4 address through a translator.
            if s[..4].iter().all(|x| *x == 0) && s[4] == 0xffff && s[5] == 0 {
                return false;
            }
            // The discard-only prefix `100::/64`.
            if s[0] == 0x100 && s[1..4].iter().all(|x| *x == 0) {
                return false;
            }
            // IPv4-compatible `::a.b.c.d` (deprecated, still routed by some stacks to the IPv4 address).
            if s[..6].iter().all(|x| *x == 0) && !v6.is_loopback() && !v6.is_unspecified() {
                return false;
            }
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                // site-local (deprecated, still private)
                || (s[0] & 0xffc0) == 0xfec0
                || (s[0] == 0x2001 && s[1] == 0x0db8)
                // 6to4 and Teredo embed an IPv4 address and reach it through a relay
                || s[0] == 0x2002
                || (s[0] == 0x2001 && s[1] == 0)
                || (s[0] == 0x64 && s[1] == 0xff9b))
        }
    }
}

/// A plugin's HTTP policy and its client.
pub struct Outbound {
    hosts: Vec<String>,
    allow_private: bool,
    timeout: Duration,
    client: reqwest::Client,
    /// Read at most this much of an answer and keep only that (None: the whole answer, refused past
    /// [`MAX_RESPONSE_BYTES`]).
    answer_prefix: Option<usize>,
}

struct FilteringResolver {
    allow_private: bool,
}

impl Resolve for FilteringResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let ok: Vec<SocketAddr> = found.into_iter().filter(|a| allow_private || is_public(a.ip())).collect();
            if ok.is_empty() {
                let e = std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("{host} resolves only to private addresses"),
                );
                return Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(ok.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

impl Outbound {
    pub fn new(hosts: Vec<String>, allow_private: bool, timeout: Duration) -> Result<Outbound, String> {
        // No proxy from the environment (HTTP_PROXY and the like): a proxy would make the request from
        // its own network, past the address checks above.
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(FilteringResolver { allow_private }))
            .user_agent(concat!("herald-plugin/", env!("CARGO_PKG_VERSION")))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Outbound { hosts, allow_private, timeout, client, answer_prefix: None })
    }

    /// The same policy, reading at most `bytes` of each answer (the rest is not read: a caller that
    /// keeps a few hundred characters of it need not hold megabytes of every answer in memory).
    pub fn answer_prefix(mut self, bytes: usize) -> Outbound {
        self.answer_prefix = Some(bytes);
        self
    }

    pub fn host_allowed(&self, host: &str, port: u16) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts.iter().any(|p| {
            let p = p.trim().to_ascii_lowercase();
            let (pat, pat_port) = match p.rsplit_once(':') {
                Some((h, port_s)) if !h.contains(':') || h.starts_with('[') => {
                    (h.to_string(), port_s.parse::<u16>().ok())
                }
                _ => (p.clone(), None),
            };
            if pat_port.is_some_and(|pp| pp != port) {
                return false;
            }
            let pat = pat.trim_start_matches('[').trim_end_matches(']');
            pat == "*"
                || pat == host
                || pat.strip_prefix("*.").is_some_and(|suffix| host.ends_with(&format!(".{suffix}")))
        })
    }

    /// Checks a URL against the policy, resolving its host.
    async fn check(&self, url: &reqwest::Url) -> Result<(), FetchError> {
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(FetchError::Denied(format!("scheme {} is not allowed (http or https)", url.scheme())));
        }
        let host = url.host_str().ok_or_else(|| FetchError::Denied("the URL has no host".into()))?;
        let port = url.port_or_known_default().unwrap_or(80);
        if !self.host_allowed(host, port) {
            return Err(FetchError::Denied(format!("host {host} is not in this plugin's allowed hosts")));
        }
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<IpAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => tokio::net::lookup_host((bare, port))
                .await
                .map_err(|e| FetchError::Connect(format!("cannot resolve {host}: {e}")))?
                .map(|a| a.ip())
                .collect(),
        };
        if !self.allow_private && addrs.iter().any(|ip| !is_public(*ip)) {
            return Err(FetchError::Denied(format!(
                "{host} is a private, loopback or link-local address; the operator has not allowed those"
            )));
        }
        Ok(())
    }

    /// Performs one request (following up to five redirects, each checked) within the deadline.
    pub async fn fetch(&self, req: FetchRequest) -> Result<FetchResponse, FetchError> {
        let deadline = match req.timeout_ms {
            Some(ms) => self.timeout.min(Duration::from_millis(ms as u64)),
            None => self.timeout,
        };
        match tokio::time::timeout(deadline, self.fetch_inner(req)).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::Timeout),
        }
    }

    async fn fetch_inner(&self, req: FetchRequest) -> Result<FetchResponse, FetchError> {
        let mut url = reqwest::Url::parse(&req.url).map_err(|e| FetchError::Denied(format!("invalid URL: {e}")))?;
        let mut method = reqwest::Method::from_bytes(req.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| FetchError::Other(format!("invalid method {:?}", req.method)))?;
        let mut body = req.body;
        let mut headers = req.headers;
        let origin = url.origin();
        for _ in 0..=MAX_REDIRECTS {
            self.check(&url).await?;
            let mut b = self.client.request(method.clone(), url.clone());
            for (k, v) in &headers {
                b = b.header(k.as_str(), v.as_str());
            }
            if let Some(body) = &body {
                b = b.body(body.clone());
            }
            let mut resp = b.send().await.map_err(|e| {
                if e.is_timeout() {
                    FetchError::Timeout
                } else if e.is_connect() {
                    FetchError::Connect(error_chain(&e))
                } else {
                    FetchError::Other(error_chain(&e))
                }
            })?;
            let status = resp.status();
            if status.is_redirection()
                && let Some(loc) = resp.headers().get(reqwest::header::LOCATION).and_then(|l| l.to_str().ok())
            {
                url = url.join(loc).map_err(|e| FetchError::Other(format!("bad redirect location: {e}")))?;
                if status == reqwest::StatusCode::SEE_OTHER
                    || ((status == reqwest::StatusCode::MOVED_PERMANENTLY || status == reqwest::StatusCode::FOUND)
                        && method == reqwest::Method::POST)
                {
                    method = reqwest::Method::GET;
                    body = None;
                    headers.retain(|(k, _)| !is_body_header(k));
                }
                // Another origin gets none of what the request carried for the first one: credentials,
                // cookies and custom headers stay behind (for every later hop too).
                if url.origin() != origin {
                    headers.retain(|(k, _)| is_plain_header(k));
                }
                continue;
            }
            let headers = resp
                .headers()
                .iter()
                .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_string(), v.to_string())))
                .collect();
            let mut out = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(|e| FetchError::Other(error_chain(&e)))? {
                if let Some(prefix) = self.answer_prefix {
                    out.extend_from_slice(&chunk[..chunk.len().min(prefix - out.len())]);
                    if out.len() >= prefix {
                        break;
                    }
                    continue;
                }
                if out.len() + chunk.len() > MAX_RESPONSE_BYTES {
                    return Err(FetchError::TooLarge);
                }
                out.extend_from_slice(&chunk);
            }
            return Ok(FetchResponse { status: status.as_u16(), headers, body: out });
        }
        Err(FetchError::Other(format!("more than {MAX_REDIRECTS} redirects")))
    }
}

/// Headers that say nothing but how to read the exchange: the only ones a redirect to another origin
/// keeps.
fn is_plain_header(name: &str) -> bool {
    ["accept", "accept-language", "accept-encoding", "content-type", "content-language", "user-agent"]
        .iter()
        .any(|h| h.eq_ignore_ascii_case(name))
}

/// Headers that describe a body (dropped with it when a redirect turns the request into a GET).
fn is_body_header(name: &str) -> bool {
    ["content-type", "content-length", "content-encoding", "content-language"]
        .iter()
        .any(|h| h.eq_ignore_ascii_case(name))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
