//! What the SMTP servers share out among their clients (docs/security.md#receiving-mail): connections
//! and message bytes in flight, each counted per client network (an IPv4 address, an IPv6 /64) and over
//! all. Each server (received mail, submission) has its own, so neither can take the other's.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The network a client address counts under: an IPv4 address itself, an IPv6 address its /64 (one
/// subscriber's prefix; anyone holding one has 2^64 addresses). IPv4 written as IPv6 counts as IPv4.
pub fn network(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

/// Open connections of one server: at most `per_network` from a network (counting those waiting) and
/// `total` let in. A client arriving when all are taken waits a while for one to end (idle sessions end
/// at the command timeout), instead of being turned away at once.
pub struct Doors {
    counts: Mutex<Counts>,
    freed: Notify,
    per_network: u32,
    total: u32,
}

#[derive(Default)]
struct Counts {
    /// Connections of each network, let in or waiting.
    networks: HashMap<IpAddr, u32>,
    /// Connections let in.
    admitted: u32,
}

/// One connection of a network, counted until dropped; `admitted` once it was let in.
pub struct Slot {
    doors: Arc<Doors>,
    net: IpAddr,
    admitted: bool,
}

/// Why a connection was not let in.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its network holds its share.
    Network,
    /// The server is full and stayed so while the client waited.
    Full,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.doors.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = c.networks.get_mut(&self.net) {
            *n -= 1;
            if *n == 0 {
                c.networks.remove(&self.net);
            }
        }
        if self.admitted {
            c.admitted -= 1;
            drop(c);
            self.doors.freed.notify_one();
        }
    }
}

impl Doors {
    pub fn new(per_network: u32, total: u32) -> Arc<Doors> {
        Arc::new(Doors { counts: Mutex::default(), freed: Notify::new(), per_network, total })
    }

    /// Lets the slot in when there is room.
    fn admit(&self, slot: &mut Slot) -> bool {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if c.admitted >= self.total {
            return false;
        }
        c.admitted += 1;
        slot.admitted = true;
        true
    }

    /// A slot for a connection from `net`, waiting up to `wait` for one when the server is full.
    pub async fn enter(self: &Arc<Self>, net: IpAddr, wait: Duration) -> Result<Slot, Refused> {
        let mut slot = {
            let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
            // As many may wait as may be let in; past that a client is turned away at once.
            if c.networks.values().sum::<u32>() >= self.total.saturating_mul(2) {
                return Err(Refused::Full);
            }
            let mine = c.networks.entry(net).or_insert(0);
            if *mine >= self.per_network {
                return Err(Refused::Network);
            }
            *mine += 1;
            Slot { doors: self.clone(), net, admitted: false }
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before trying, so a slot freed in between is not missed.
            let freed = self.freed.notified();
            if self.admit(&mut slot) {
                return Ok(slot);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return if self.admit(&mut slot) { Ok(slot) } else { Err(Refused::Full) };
            }
        }
    }
}

/// Bytes of messages being received and not yet accepted, reserved as they arrive: at most
/// `per_network` for one network and `total` in all. A client trickling a message holds only what it
/// sent.
pub struct Budget {
    held: Mutex<(u64, HashMap<IpAddr, u64>)>,
    per_network: u64,
    total: u64,
}

/// Bytes reserved by one message, given back when dropped.
pub struct Held {
    budget: Arc<Budget>,
    net: IpAddr,
    bytes: u64,
}

impl Budget {
    pub fn new(per_network: u64, total: u64) -> Arc<Budget> {
        Arc::new(Budget { held: Mutex::default(), per_network, total })
    }

    /// An empty reservation for a message from `net`.
    pub fn hold(self: &Arc<Self>, net: IpAddr) -> Held {
        Held { budget: self.clone(), net, bytes: 0 }
    }
}

impl Held {
    /// Reserves `n` more bytes; false when the network or everyone holds too much.
    pub fn grow(&mut self, n: u64) -> bool {
        let mut held = self.budget.held.lock().unwrap_or_else(|p| p.into_inner());
        let (total, networks) = &mut *held;
        let mine = networks.get(&self.net).copied().unwrap_or(0);
        if mine + n > self.budget.per_network || *total + n > self.budget.total {
            return false;
        }
        *total += n;
        networks.insert(self.net, mine + n);
        self.bytes += n;
        true
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut held = self.budget.held.lock().unwrap_or_else(|p| p.into_inner());
        let (total, networks) = &mut *held;
        *total = total.saturating_sub(self.bytes);
        if let Some(n) = networks.get_mut(&self.net) {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                networks.remove(&self.net);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_client_counts_by_its_64_and_ipv4_by_its_address() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff:1:2:3".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(network(a), network(b));
        assert_ne!(network(a), network(c));
        assert_eq!(network("::ffff:192.0.2.7".parse().unwrap()), "192.0.2.7".parse::<IpAddr>().unwrap());
        assert_ne!(network("192.0.2.7".parse().unwrap()), network("192.0.2.8".parse().unwrap()));
    }

    #[test]
    fn a_network_holds_its_share_of_the_bytes_and_gives_them_back() {
        let budget = Budget::new(100, 150);
        let (x, y, z) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap(), "192.0.2.3".parse().unwrap());
        let mut a = budget.hold(x);
        assert!(a.grow(60));
        let mut a2 = budget.hold(x);
        assert!(!a2.grow(50), "past the network's share");
        assert!(a2.grow(40));
        let mut b = budget.hold(y);
        assert!(b.grow(50));
        assert!(!budget.hold(z).grow(1), "past the total");
        drop(a);
        assert!(budget.hold(z).grow(60), "given back");
    }

    #[tokio::test]
    async fn a_client_arriving_at_a_full_server_waits_for_a_slot() {
        let doors = Doors::new(2, 2);
        let (x, y): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let a = doors.enter(x, Duration::ZERO).await.unwrap();
        let _b = doors.enter(x, Duration::ZERO).await.unwrap();
        assert_eq!(doors.enter(x, Duration::ZERO).await.err(), Some(Refused::Network));
        assert_eq!(doors.enter(y, Duration::from_millis(20)).await.err(), Some(Refused::Full));
        let waiting = tokio::spawn({
            let doors = doors.clone();
            async move { doors.enter(y, Duration::from_secs(5)).await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(a);
        assert!(waiting.await.unwrap(), "let in once a slot was freed");
    }
}
