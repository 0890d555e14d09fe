//! A real DNS server on loopback for tests: UDP and TCP on one port, answering from records the test
//! publishes and withdraws. Names it does not know get NXDOMAIN; known names without the asked type
//! get an empty NOERROR answer.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::{A, CNAME, MX, NS, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Zone = Arc<Mutex<HashMap<String, Vec<RData>>>>;

pub struct DnsServer {
    pub addr: SocketAddr,
    zone: Zone,
}

fn key(name: &str) -> String {
    name.trim_end_matches('.').to_lowercase()
}

fn answer(zone: &Zone, query: &[u8]) -> Option<Vec<u8>> {
    let req = Message::from_vec(query).ok()?;
    let mut res = Message::response(req.id(), req.op_code());
    res.set_recursion_desired(true).set_recursion_available(true).set_authoritative(true);
    for q in req.queries() {
        res.add_query(q.clone());
        let z = zone.lock().unwrap();
        match z.get(&key(&q.name().to_ascii())) {
            None => {
                res.set_response_code(ResponseCode::NXDomain);
            }
            Some(list) => {
                for r in list.iter().filter(|r| r.record_type() == q.query_type()) {
                    res.add_answer(Record::from_rdata(q.name().clone(), 30, r.clone()));
                }
            }
        }
    }
    res.to_vec().ok()
}

impl DnsServer {
    pub async fn start() -> DnsServer {
        // The UDP port is picked by the system; its TCP twin may be taken (say, by an outgoing connection's
        // ephemeral port), so try again with another port until both bind.
        let (udp, tcp, addr) = {
            let mut tries = 0;
            loop {
                let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
                let addr = udp.local_addr().unwrap();
                match tokio::net::TcpListener::bind(addr).await {
                    Ok(tcp) => break (udp, tcp, addr),
                    Err(e) if tries < 50 => {
                        tries += 1;
                        let _ = e;
                    }
                    Err(e) => panic!("cannot bind the DNS server's TCP port: {e}"),
                }
            }
        };
        let zone: Zone = Arc::default();
        let z = zone.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, peer)) = udp.recv_from(&mut buf).await {
                if let Some(out) = answer(&z, &buf[..n]) {
                    let _ = udp.send_to(&out, peer).await;
                }
            }
        });
        let z = zone.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = tcp.accept().await {
                let z = z.clone();
                tokio::spawn(async move {
                    loop {
                        let Ok(len) = s.read_u16().await else { return };
                        let mut msg = vec![0u8; len as usize];
                        if s.read_exact(&mut msg).await.is_err() {
                            return;
                        }
                        let Some(out) = answer(&z, &msg) else { return };
                        if s.write_u16(out.len() as u16).await.is_err() || s.write_all(&out).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        DnsServer { addr, zone }
    }

    fn add(&self, name: &str, r: RData) {
        self.zone.lock().unwrap().entry(key(name)).or_default().push(r);
    }

    pub fn txt(&self, name: &str, value: &str) {
        // Long values are split into 255-byte strings, as DNS requires.
        let chunks: Vec<String> =
            value.as_bytes().chunks(255).map(|c| String::from_utf8_lossy(c).into_owned()).collect();
        self.add(name, RData::TXT(TXT::new(chunks)));
    }
    pub fn mx(&self, name: &str, pref: u16, exchange: &str) {
        let ex = if exchange.is_empty() { Name::root() } else { Name::from_str(&format!("{exchange}.")).unwrap() };
        self.add(name, RData::MX(MX::new(pref, ex)));
    }
    pub fn ns(&self, name: &str, host: &str) {
        self.add(name, RData::NS(NS(Name::from_str(&format!("{host}.")).unwrap())));
    }
    pub fn a(&self, name: &str, ip: [u8; 4]) {
        self.add(name, RData::A(A(Ipv4Addr::from(ip))));
    }
    pub fn cname(&self, name: &str, target: &str) {
        self.add(name, RData::CNAME(CNAME(Name::from_str(&format!("{target}.")).unwrap())));
    }
    /// Withdraws every record of `name` of this type (the name stays known).
    pub fn remove(&self, name: &str, kind: RecordType) {
        if let Some(list) = self.zone.lock().unwrap().get_mut(&key(name)) {
            list.retain(|r| r.record_type() != kind);
        }
    }
    /// Makes the name unknown (NXDOMAIN).
    pub fn forget(&self, name: &str) {
        self.zone.lock().unwrap().remove(&key(name));
    }
}
