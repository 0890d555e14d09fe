//! The HTTP front end's transport: the client address behind trusted proxies, and HTTPS without one. In
//! herald.toml the `[http]` table (docs/behaviour.md#https-and-proxies).

use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;

use clap::Args;
use serde::{Deserialize, Deserializer};

use super::ConfigError;

#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    /// Reverse proxies whose `X-Forwarded-For` or `Forwarded` header names the client: comma-separated
    /// addresses or CIDR blocks, IPv4 or IPv6 (in herald.toml a string or a list) [default: none, the
    /// peer is the client]
    #[arg(long, env = "HERALD_TRUSTED_PROXIES")]
    #[serde(default, deserialize_with = "string_or_list")]
    pub trusted_proxies: Option<String>,
    /// PEM certificate chain: the HTTP listener serves HTTPS (with the key), reloaded when the files
    /// change [default: plain HTTP]
    #[arg(long, env = "HERALD_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of that certificate
    #[arg(long, env = "HERALD_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
}

/// The resolved settings.
#[derive(Debug, Clone, Default)]
pub struct HttpConfig {
    /// Peers whose forwarding headers are believed.
    pub trusted_proxies: Vec<Cidr>,
    /// (certificate chain, private key) PEM files of HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
}

impl HttpSettings {
    /// Fills every unset field of `self` from `other`.
    pub(super) fn or(self, o: HttpSettings) -> HttpSettings {
        HttpSettings {
            trusted_proxies: self.trusted_proxies.or(o.trusted_proxies),
            tls_cert: self.tls_cert.or(o.tls_cert),
            tls_key: self.tls_key.or(o.tls_key),
        }
    }

    /// The scheme of the default public URL: https when the listener has a certificate.
    pub(super) fn scheme(&self) -> &'static str {
        if self.tls_cert.is_some() { "https" } else { "http" }
    }

    pub(super) fn resolve(self) -> Result<HttpConfig, ConfigError> {
        let tls = match (self.tls_cert, self.tls_key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            (Some(_), None) => return Err(ConfigError::Invalid("tls_cert needs tls_key (both or neither)".into())),
            (None, Some(_)) => return Err(ConfigError::Invalid("tls_key needs tls_cert (both or neither)".into())),
        };
        let mut trusted_proxies = Vec::new();
        for part in self.trusted_proxies.as_deref().unwrap_or("").split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let cidr = part.parse().map_err(|_| {
                ConfigError::Invalid(format!(
                    "trusted_proxies: {part:?} is not an address or a CIDR block (10.0.0.0/8, fd00::/8, 127.0.0.1)"
                ))
            })?;
            trusted_proxies.push(cidr);
        }
        Ok(HttpConfig { trusted_proxies, tls })
    }
}

/// `trusted_proxies` in herald.toml: `"10.0.0.0/8, ::1"` or `["10.0.0.0/8", "::1"]`.
fn string_or_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        One(String),
        Many(Vec<String>),
    }
    Ok(Some(match Either::deserialize(d)? {
        Either::One(s) => s,
        Either::Many(v) => v.join(","),
    }))
}

/// A block of addresses: an address and how many leading bits of it count. A bare address is /32 or /128.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => mask32(u32::from(ip), self.prefix) == u32::from(net),
            (IpAddr::V6(net), IpAddr::V6(ip)) => mask128(u128::from(ip), self.prefix) == u128::from(net),
            _ => false,
        }
    }
}

fn mask32(v: u32, prefix: u8) -> u32 {
    v.checked_shr(32 - u32::from(prefix)).and_then(|x| x.checked_shl(32 - u32::from(prefix))).unwrap_or(0)
}

fn mask128(v: u128, prefix: u8) -> u128 {
    v.checked_shr(128 - u32::from(prefix)).and_then(|x| x.checked_shl(128 - u32::from(prefix))).unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = ();

    /// `10.0.0.0/8`, `fd00::/8`, `127.0.0.1` (/32), `::1` (/128); bits past the prefix are cleared.
    fn from_str(s: &str) -> Result<Cidr, ()> {
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| ())?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) if !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u8>().map_err(|_| ())?
            }
            Some(_) => return Err(()),
        };
        if prefix > max {
            return Err(());
        }
        let addr = match addr {
            IpAddr::V4(a) => IpAddr::V4(mask32(u32::from(a), prefix).into()),
            IpAddr::V6(a) => IpAddr::V6(mask128(u128::from(a), prefix).into()),
        };
        Ok(Cidr { addr, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn blocks_parse_and_contain_their_addresses() {
        let c: Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(c.to_string(), "10.0.0.0/8");
        assert!(c.contains(ip("10.255.0.1")) && !c.contains(ip("11.0.0.1")) && !c.contains(ip("::1")));
        assert!(c.contains(ip("::ffff:10.0.0.9")), "an IPv4-mapped address is its IPv4 address");
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert_eq!(one.to_string(), "127.0.0.1/32");
        assert!(one.contains(ip("127.0.0.1")) && !one.contains(ip("127.0.0.2")));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
        assert_eq!("::1".parse::<Cidr>().unwrap().to_string(), "::1/128");
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")) && !all.contains(ip("2001:db8::1")));
        assert!("::/0".parse::<Cidr>().unwrap().contains(ip("2001:db8::1")));
        for bad in
            ["", "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/-1", "10.0.0/8", "host", "10.0.0.0/8/8", "1.2.3.4/+8"]
        {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn the_settings_resolve_to_blocks_and_a_certificate_pair() {
        let s = HttpSettings { trusted_proxies: Some(" 127.0.0.1/32, ::1 ,,10.0.0.0/8".into()), ..Default::default() };
        let c = s.resolve().unwrap();
        let shown: Vec<String> = c.trusted_proxies.iter().map(Cidr::to_string).collect();
        assert_eq!(shown, ["127.0.0.1/32", "::1/128", "10.0.0.0/8"]);
        assert!(c.tls.is_none());
        let bad = HttpSettings { trusted_proxies: Some("127.0.0.1, nope".into()), ..Default::default() };
        assert!(bad.resolve().unwrap_err().to_string().contains("\"nope\""));
        let half = HttpSettings { tls_cert: Some("c.pem".into()), ..Default::default() };
        assert!(half.resolve().unwrap_err().to_string().contains("both or neither"));
        let half = HttpSettings { tls_key: Some("k.pem".into()), ..Default::default() };
        assert!(half.resolve().unwrap_err().to_string().contains("both or neither"));
        let both = HttpSettings { tls_cert: Some("c.pem".into()), tls_key: Some("k.pem".into()), ..Default::default() };
        assert_eq!(both.scheme(), "https");
        assert_eq!(both.resolve().unwrap().tls, Some(("c.pem".into(), "k.pem".into())));
    }

    #[test]
    fn the_toml_table_takes_a_string_or_a_list() {
        #[derive(Deserialize)]
        struct File {
            http: HttpSettings,
        }
        let one: File =
            toml::from_str("[http]\ntrusted_proxies = \"10.0.0.0/8\"\ntls_cert = \"c\"\ntls_key = \"k\"\n").unwrap();
        assert_eq!(one.http.trusted_proxies.as_deref(), Some("10.0.0.0/8"));
        let many: File = toml::from_str("[http]\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\"]\n").unwrap();
        assert_eq!(many.http.resolve().unwrap().trusted_proxies.len(), 2);
    }
}
