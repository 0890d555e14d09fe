//! The one DNS resolver of the host. Its nameservers come from `HERALD_DNS_SERVERS` (default: the
//! system's), every lookup has a timeout, and answers are not cached (verification must see changes).
//! Lookups distinguish "no such record" from "the lookup failed", so callers can degrade with a clear
//! reason instead of an error.
//!
//! Must not import: salvo, surrealdb.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ProtocolConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::ProtoError as ResolveError;

/// The outcome of one lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<T> {
    Found(T),
    /// The name or the record type does not exist.
    None,
    /// The lookup itself failed (timeout, refused, network): the answer is unknown.
    Failed(String),
}

impl<T> Lookup<T> {
    pub fn found(&self) -> Option<&T> {
        match self {
            Lookup::Found(t) => Some(t),
            _ => None,
        }
    }
}

#[derive(Clone)]
pub struct Dns {
    resolver: TokioResolver,
    timeout: Duration,
}

fn classify<T>(r: Result<T, ResolveError>) -> Lookup<T> {
    match r {
        Ok(t) => Lookup::Found(t),
        Err(e) if e.is_no_records_found() || e.is_nx_domain() => Lookup::None,
        Err(e) => Lookup::Failed(e.to_string()),
    }
}

impl Dns {
    /// `servers` empty: the system configuration.
    pub fn new(servers: &[SocketAddr], timeout: Duration) -> Result<Dns, String> {
        let mut opts = ResolverOpts::default();
        opts.timeout = timeout;
        opts.attempts = 1;
        opts.cache_size = 0;
        opts.edns0 = true;
        let builder = if servers.is_empty() {
            let mut b =
                TokioResolver::builder_tokio().map_err(|e| format!("cannot read the system DNS configuration: {e}"))?;
            let sys = b.options_mut();
            sys.timeout = timeout;
            sys.attempts = 1;
            sys.cache_size = 0;
            b
        } else {
            let mut config = ResolverConfig::from_parts(None, vec![], Vec::<NameServerConfig>::new());
            for s in servers {
                config.add_name_server(NameServerConfig::new(*s, ProtocolConfig::Udp));
                config.add_name_server(NameServerConfig::new(*s, ProtocolConfig::Tcp));
            }
            TokioResolver::builder_with_config(config, TokioConnectionProvider::default()).with_options(opts)
        };
        Ok(Dns { resolver: builder.build(), timeout })
    }

    /// The underlying resolver (for mail-auth's verifier in tests and tools).
    pub fn resolver(&self) -> &TokioResolver {
        &self.resolver
    }

    fn fqdn(name: &str) -> String {
        if name.ends_with('.') { name.to_string() } else { format!("{name}.") }
    }

    async fn bounded<T>(&self, f: impl Future<Output = Lookup<T>>) -> Lookup<T> {
        match tokio::time::timeout(self.timeout + Duration::from_millis(250), f).await {
            Ok(r) => r,
            Err(_) => Lookup::Failed("timed out".into()),
        }
    }

    /// TXT records, each with its strings joined.
    pub async fn txt(&self, name: &str) -> Lookup<Vec<String>> {
        self.bounded(async {
            match classify(self.resolver.txt_lookup(Self::fqdn(name)).await) {
                Lookup::Found(l) => Lookup::Found(
                    l.iter()
                        .map(|t| {
                            t.txt_data().iter().map(|d| String::from_utf8_lossy(d).into_owned()).collect::<String>()
                        })
                        .collect(),
                ),
                Lookup::None => Lookup::None,
                Lookup::Failed(e) => Lookup::Failed(e),
            }
        })
        .await
    }

    /// MX records as (preference, exchange without the trailing dot).
    pub async fn mx(&self, name: &str) -> Lookup<Vec<(u16, String)>> {
        self.bounded(async {
            match classify(self.resolver.mx_lookup(Self::fqdn(name)).await) {
                Lookup::Found(l) => Lookup::Found(
                    l.iter()
                        .map(|m| (m.preference(), m.exchange().to_ascii().trim_end_matches('.').to_string()))
                        .collect(),
                ),
                Lookup::None => Lookup::None,
                Lookup::Failed(e) => Lookup::Failed(e),
            }
        })
        .await
    }

    /// NS records.
    pub async fn ns(&self, name: &str) -> Lookup<Vec<String>> {
        self.bounded(async {
            match classify(self.resolver.ns_lookup(Self::fqdn(name)).await) {
                Lookup::Found(l) => Lookup::Found(l.iter().map(|n| n.0.to_ascii()).collect()),
                Lookup::None => Lookup::None,
                Lookup::Failed(e) => Lookup::Failed(e),
            }
        })
        .await
    }

    /// A and AAAA addresses.
    pub async fn ip(&self, name: &str) -> Lookup<Vec<std::net::IpAddr>> {
        self.bounded(async {
            match classify(self.resolver.lookup_ip(Self::fqdn(name)).await) {
                Lookup::Found(l) => {
                    let v: Vec<_> = l.iter().collect();
                    if v.is_empty() { Lookup::None } else { Lookup::Found(v) }
                }
                Lookup::None => Lookup::None,
                Lookup::Failed(e) => Lookup::Failed(e),
            }
        })
        .await
    }

    /// CNAME target (without the trailing dot).
    pub async fn cname(&self, name: &str) -> Lookup<String> {
        use hickory_resolver::proto::rr::{RData, RecordType};
        self.bounded(async {
            match classify(self.resolver.lookup(Self::fqdn(name), RecordType::CNAME).await) {
                Lookup::Found(l) => {
                    match l.iter().find_map(|r| if let RData::CNAME(c) = r { Some(c.0.to_ascii()) } else { None }) {
                        Some(t) => Lookup::Found(t.trim_end_matches('.').to_string()),
                        None => Lookup::None,
                    }
                }
                Lookup::None => Lookup::None,
                Lookup::Failed(e) => Lookup::Failed(e),
            }
        })
        .await
    }
}
