//! Which address a request comes from, the key of every per-client limit (sign-up and account mail,
//! failed logins, the rate limit of unauthenticated routes). It is the peer, unless the peer is one of the
//! trusted proxies (`--trusted-proxies`): then the forwarding header (`X-Forwarded-For`, else RFC 7239
//! `Forwarded`) is read from the right, skipping trusted hops, and the right-most untrusted hop is the
//! client; when every hop is trusted, the left-most one. A hop that names no address (`unknown`, an
//! obfuscated identifier, anything malformed) ends the walk at the last address seen: what is left of it
//! was written by a party no trusted proxy vouches for. Nothing here fails a request, and the work is
//! bounded: at most [`MAX_HOPS`] hops and the right-most [`MAX_HEADER_BYTES`] of a header
//! (docs/behaviour.md#https-and-proxies).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use salvo::http::HeaderMap;
use salvo::prelude::*;

use crate::config::Cidr;

/// Hops of a forwarding header examined at most, from the right.
pub const MAX_HOPS: usize = 32;
/// Bytes of a forwarding header (its lines together) examined at most, from the right.
pub const MAX_HEADER_BYTES: usize = 4096;

/// The client address of a request, put in its extensions by [`Resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// The middleware that works out [`ClientAddr`] once per request.
pub struct Resolve {
    trusted: Arc<[Cidr]>,
}

impl Resolve {
    pub fn new(trusted: &[Cidr]) -> Resolve {
        Resolve { trusted: trusted.into() }
    }
}

#[async_trait]
impl Handler for Resolve {
    async fn handle(&self, req: &mut Request, _depot: &mut Depot, _res: &mut Response, _ctrl: &mut FlowCtrl) {
        if let Some(peer) = req.remote_addr().ip() {
            let client = choose(peer, &self.trusted, req.headers());
            req.extensions_mut().insert(ClientAddr(client));
        }
    }
}

/// The client address of `req` as a string: what [`Resolve`] found, else the peer's address, else "".
pub fn of(req: &Request) -> String {
    match req.extensions().get::<ClientAddr>() {
        Some(ClientAddr(ip)) => ip.to_string(),
        None => req.remote_addr().ip().map(|ip| ip.to_canonical().to_string()).unwrap_or_default(),
    }
}

/// The client address of a request from `peer` with `headers`, given the trusted proxies.
pub fn choose(peer: IpAddr, trusted: &[Cidr], headers: &HeaderMap) -> IpAddr {
    let peer = peer.to_canonical();
    if !is_trusted(trusted, peer) {
        return peer;
    }
    let (lines, forwarded) = match headers.get_all("x-forwarded-for").iter().next() {
        Some(_) => (headers.get_all("x-forwarded-for"), false),
        None => (headers.get_all("forwarded"), true),
    };
    // Bytes, not text: a byte outside ASCII spoils only the hop it is in.
    let lines: Vec<&[u8]> = lines.iter().rev().take(MAX_HOPS).map(|v| v.as_bytes()).collect();
    walk(peer, trusted, &hops(&lines), forwarded)
}

/// The hops of a header's lines (given last line first), right to left, at most [`MAX_HOPS`] of them
/// within [`MAX_HEADER_BYTES`]; an element cut by that bound is left out.
fn hops<'a>(lines_last_first: &[&'a [u8]]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut budget = MAX_HEADER_BYTES;
    for line in lines_last_first {
        let (text, cut) = match line.len() > budget {
            true => (line.get(line.len() - budget..).unwrap_or_default(), true),
            false => (*line, false),
        };
        budget -= text.len();
        let mut elements = split_unquoted_rev(text, b',').peekable();
        while let Some(e) = elements.next() {
            if cut && elements.peek().is_none() {
                return out;
            }
            out.push(e);
            if out.len() == MAX_HOPS {
                return out;
            }
        }
        if cut || budget == 0 {
            break;
        }
    }
    out
}

/// Walks `hops` (right to left) from a trusted `peer`: the first untrusted address, else the last address
/// seen when the hops run out or one names no address.
fn walk(peer: IpAddr, trusted: &[Cidr], hops: &[&[u8]], forwarded: bool) -> IpAddr {
    let mut last = peer;
    for hop in hops {
        let ip = match forwarded {
            true => forwarded_for(hop),
            false => std::str::from_utf8(hop).ok().and_then(node),
        };
        let Some(ip) = ip.map(|ip| ip.to_canonical()) else { return last };
        if !is_trusted(trusted, ip) {
            return ip;
        }
        last = ip;
    }
    last
}

fn is_trusted(trusted: &[Cidr], ip: IpAddr) -> bool {
    trusted.iter().any(|c| c.contains(ip))
}

/// The address of one `Forwarded` element's `for=` (RFC 7239): a token or a quoted string holding
/// `1.2.3.4`, `1.2.3.4:port`, `[v6]` or `[v6]:port`; None for `unknown`, an obfuscated `_name`, a
/// missing or repeated `for`, or anything else.
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    let mut found = None;
    for pair in split_unquoted_rev(element, b';') {
        let pair = std::str::from_utf8(pair).ok()?;
        if pair.trim().is_empty() {
            continue;
        }
        let (name, value) = pair.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("for") {
            continue;
        }
        if found.is_some() {
            return None;
        }
        found = Some(value.trim());
    }
    let value = found?;
    let value = match value.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"').filter(|v| !v.contains(['"', '\\']))?,
        None => value,
    };
    node(value)
}

/// One hop's address: `1.2.3.4`, `1.2.3.4:port`, `2001:db8::1`, `[2001:db8::1]` or `[2001:db8::1]:port`.
fn node(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim_matches([' ', '\t']);
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = hop.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        return match after {
            "" => inside.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6),
            _ => format!("[{inside}]{after}").parse::<SocketAddr>().ok().map(|s| s.ip()),
        };
    }
    let (host, port) = hop.split_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The pieces of `s` between `sep`s outside double quotes, right to left. A backslash inside quotes
/// escapes the next character.
fn split_unquoted_rev(s: &[u8], sep: u8) -> impl Iterator<Item = &[u8]> {
    let mut pieces = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, &b) in s.iter().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            _ if b == sep && !quoted => {
                pieces.push(s.get(start..i).unwrap_or_default());
                start = i + 1;
            }
            _ => {}
        }
    }
    pieces.push(s.get(start..).unwrap_or_default());
    pieces.into_iter().rev()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn cidrs(list: &str) -> Vec<Cidr> {
        list.split(',').map(|c| c.parse().unwrap()).collect()
    }

    fn with(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(
                salvo::http::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                salvo::http::HeaderValue::from_bytes(value.as_bytes()).unwrap(),
            );
        }
        h
    }

    /// The client of a request from `peer` with `headers` behind 10.0.0.0/8 and fd00::/8.
    fn client(peer: &str, headers: &[(&str, &str)]) -> IpAddr {
        choose(ip(peer), &cidrs("10.0.0.0/8,fd00::/8"), &with(headers))
    }

    #[test]
    fn client_addr_is_the_peer_unless_the_peer_is_a_trusted_proxy() {
        let forged = [("x-forwarded-for", "198.51.100.7"), ("forwarded", "for=198.51.100.8")];
        assert_eq!(client("203.0.113.1", &forged), ip("203.0.113.1"));
        assert_eq!(client("10.0.0.1", &forged[..1]), ip("198.51.100.7"));
        assert_eq!(client("10.0.0.1", &forged[1..]), ip("198.51.100.8"));
        assert_eq!(client("10.0.0.1", &[]), ip("10.0.0.1"), "a trusted peer without a header is the client");
        assert_eq!(choose(ip("10.0.0.1"), &[], &with(&forged)), ip("10.0.0.1"), "nothing trusted");
        assert_eq!(client("::ffff:10.0.0.1", &forged[..1]), ip("198.51.100.7"), "a mapped peer is its IPv4");
    }

    #[test]
    fn client_addr_is_the_right_most_untrusted_hop() {
        let xff = |v: &str| client("10.0.0.1", &[("x-forwarded-for", v)]);
        // What the client wrote (left) is never taken over what the proxies saw.
        assert_eq!(xff("1.1.1.1, 203.0.113.9, 10.0.0.2"), ip("203.0.113.9"));
        assert_eq!(xff("1.1.1.1,203.0.113.9"), ip("203.0.113.9"));
        // All trusted: the left-most.
        assert_eq!(xff("10.0.0.3, 10.0.0.2"), ip("10.0.0.3"));
        // Ports and IPv6, bracketed or not.
        assert_eq!(xff("203.0.113.9:4711"), ip("203.0.113.9"));
        assert_eq!(xff("[2001:db8::1]:443, fd00::2"), ip("2001:db8::1"));
        assert_eq!(xff("2001:db8::1"), ip("2001:db8::1"));
        assert_eq!(xff("[2001:db8::1]"), ip("2001:db8::1"));
        // Several lines are one list, the last line right-most.
        let lines = [("x-forwarded-for", "203.0.113.1"), ("x-forwarded-for", "203.0.113.2, 10.0.0.9")];
        assert_eq!(client("10.0.0.1", &lines), ip("203.0.113.2"));
        let lines = [("x-forwarded-for", "203.0.113.1"), ("x-forwarded-for", "10.0.0.9")];
        assert_eq!(client("10.0.0.1", &lines), ip("203.0.113.1"));
        // X-Forwarded-For wins over Forwarded when both are sent.
        let both = [("forwarded", "for=198.51.100.1"), ("x-forwarded-for", "203.0.113.5")];
        assert_eq!(client("10.0.0.1", &both), ip("203.0.113.5"));
    }

    #[test]
    fn client_addr_reads_rfc_7239_forwarded() {
        let fwd = |v: &str| client("10.0.0.1", &[("forwarded", v)]);
        assert_eq!(fwd("for=192.0.2.60;proto=http;by=203.0.113.43"), ip("192.0.2.60"));
        assert_eq!(fwd("For=\"[2001:db8:cafe::17]:4711\""), ip("2001:db8:cafe::17"));
        assert_eq!(fwd("for=\"192.0.2.43:47011\""), ip("192.0.2.43"));
        assert_eq!(
            fwd("for=192.0.2.43, for=198.51.100.17;by=203.0.113.60;proto=http;host=example.com"),
            ip("198.51.100.17")
        );
        assert_eq!(fwd("for=192.0.2.43, for=\"[fd00::1]\""), ip("192.0.2.43"));
        assert_eq!(fwd("host=\"a,b;for=9.9.9.9\";for=192.0.2.1"), ip("192.0.2.1"), "quoted , and ; are data");
        // unknown, obfuscated, missing or repeated `for`: the walk ends at the last address seen.
        assert_eq!(fwd("for=192.0.2.43, for=unknown"), ip("10.0.0.1"));
        assert_eq!(fwd("for=192.0.2.43, for=_hidden, for=10.0.0.5"), ip("10.0.0.5"));
        assert_eq!(fwd("for=192.0.2.43, proto=https"), ip("10.0.0.1"));
        assert_eq!(fwd("for=192.0.2.43;for=192.0.2.44"), ip("10.0.0.1"));
        assert_eq!(fwd("for=\"192.0.2.43"), ip("10.0.0.1"));
        assert_eq!(fwd("for=\"192.0.2\\\".43\""), ip("10.0.0.1"));
    }

    #[test]
    fn client_addr_falls_back_on_malformed_headers_without_failing() {
        let xff = |v: &[u8]| {
            let mut h = HeaderMap::new();
            h.insert("x-forwarded-for", salvo::http::HeaderValue::from_bytes(v).unwrap());
            choose(ip("10.0.0.1"), &cidrs("10.0.0.0/8"), &h)
        };
        for bad in
            [&b""[..], b",", b"garbage", b"1.2.3", b"1.2.3.4:99999", b"[::1", b"[::1]x", b"\xff\xfe", b"\"1.2.3.4\""]
        {
            assert_eq!(xff(bad), ip("10.0.0.1"), "{:?}", String::from_utf8_lossy(bad));
        }
        // Garbage left of the right-most untrusted hop is never read, whatever its bytes.
        assert_eq!(xff(b"\xff garbage, [[, 203.0.113.9"), ip("203.0.113.9"));
        assert_eq!(xff(b"203.0.113.8, \xff1.2.3.4, 10.0.0.7"), ip("10.0.0.7"));
        // A malformed hop behind a trusted one: the trusted one.
        assert_eq!(xff(b"203.0.113.9, garbage, 10.0.0.7"), ip("10.0.0.7"));
    }

    #[test]
    fn client_addr_bounds_the_hops_and_bytes_it_reads() {
        let trusted = cidrs("10.0.0.0/8");
        let xff = |v: String| {
            let mut h = HeaderMap::new();
            h.insert("x-forwarded-for", v.parse().unwrap());
            choose(ip("10.0.0.1"), &trusted, &h)
        };
        // Padding on the left (what a client writes) changes nothing.
        let padded = format!("{}, 203.0.113.9", "1.1.1.1, ".repeat(50_000));
        assert_eq!(xff(padded), ip("203.0.113.9"));
        // 40 trusted hops: only MAX_HOPS are read; the left-most of those is taken.
        let chain: Vec<String> = (1..=40).map(|i| format!("10.0.0.{i}")).collect();
        assert_eq!(xff(chain.join(",")), ip(&format!("10.0.0.{}", 40 - MAX_HOPS + 1)));
        // A hop cut by the byte bound is left out.
        let long = format!("203.0.113.9,{}10.0.0.2", " ".repeat(MAX_HEADER_BYTES - 9));
        assert_eq!(xff(long), ip("10.0.0.2"));
        // Many lines: as many hops.
        let mut h = HeaderMap::new();
        for _ in 0..1000 {
            h.append("x-forwarded-for", "10.0.0.9".parse().unwrap());
        }
        assert_eq!(choose(ip("10.0.0.1"), &trusted, &h), ip("10.0.0.9"));
    }

    #[test]
    fn client_addr_splits_outside_quotes() {
        let v: Vec<&[u8]> = split_unquoted_rev(b"a,\"b,c\",d\\,e", b',').collect();
        assert_eq!(v, [&b"e"[..], b"d\\", b"\"b,c\"", b"a"]);
        let v: Vec<&[u8]> = split_unquoted_rev(b"x=\"a\\\"b,c\",y", b',').collect();
        assert_eq!(v, [&b"y"[..], b"x=\"a\\\"b,c\""]);
    }
}
