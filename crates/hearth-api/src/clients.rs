//! Clients: who a request comes from, and what one client may hold and
//! send.
//!
//! A client is an IP address, an IPv6 one by its /64 (what one host is
//! usually given: a client cannot become many by cycling the addresses
//! of its own network). Behind a proxy the listener's peer is the proxy:
//! a request from a peer in `--trusted-proxies` is the client's that its
//! `X-Forwarded-For` names, the rightmost address there that is not
//! itself trusted (what the proxy saw; the addresses left of it are
//! whatever the client wrote).
//!
//! What one client may do, beside the node's own bounds:
//!
//! - open connections (`--max-connections-per-client`); a trusted proxy's
//!   connections carry many clients and are counted only in the node's;
//! - hold unfinished request bodies: a share of `--max-buffered-mib`;
//! - send request bodies at a rate (`--client-body-mib-per-sec`), a token
//!   bucket per client (GCRA from `governor`, in KiB). A body that
//!   declares its length pays it before it is read, and one the bucket
//!   cannot pay for is refused (429, with the wait in `Retry-After`)
//!   unread: a client posting megabytes as fast as it can costs the node
//!   the head of each request, not a copy of every byte and the tape of
//!   every answer. A body without a length pays as it arrives. The burst
//!   is a second's rate plus one largest body, so a client that has been
//!   quiet always gets one whole body through. Streamed bodies, which go
//!   to the function as they arrive, are not charged: the function reads
//!   them at its own pace, on its tenant's CPU share.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::http::HeaderMap;
use governor::clock::{Clock, DefaultClock};
use hearth_host::rates::Buckets;
use parking_lot::Mutex;
use tokio::sync::Semaphore;

use crate::ApiError;

/// What one client may hold and send (see the module's docs).
#[derive(Debug, Clone)]
pub struct ClientLimits {
    /// Open connections from one client.
    pub max_connections: usize,
    /// Bytes of unfinished request bodies one client may hold.
    pub buffered_bytes: usize,
    /// Bytes of request bodies a second one client may send; 0: any.
    pub body_bytes_per_sec: u64,
    /// The largest request body (`--max-body-bytes`): the bucket holds a
    /// second's rate and one of these.
    pub max_body_bytes: usize,
    /// Proxies whose `X-Forwarded-For` names the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            max_connections: 512,
            buffered_bytes: 256 << 20,
            body_bytes_per_sec: 0,
            max_body_bytes: 6 << 20,
            trusted_proxies: Vec::new(),
        }
    }
}

/// The node's clients: their open connections and held bodies, and their
/// body rates. Cheap to clone.
#[derive(Clone)]
pub struct Clients(Arc<Inner>);

struct Inner {
    limits: ClientLimits,
    /// Clients with a connection open or a body being read, by key. An
    /// entry lives only while one of those holds it, so the map is no
    /// larger than the connections and requests are many.
    held: Mutex<HashMap<IpAddr, Held>>,
    rates: Option<BodyRates>,
    /// Bodies refused for their client's rate since the node started.
    refused: AtomicU64,
}

struct Held {
    /// Connections and forwarded requests holding the entry.
    holders: usize,
    /// Connections among them (what `max_connections` counts).
    connections: usize,
    /// The client's share of the body budget, a permit per KiB.
    body: Arc<Semaphore>,
}

/// What a new connection is.
#[derive(Clone)]
pub enum Connection {
    /// A client's own: its requests are that client's.
    Client(ClientShare),
    /// A trusted proxy's (`peer`): each request names its client.
    Proxy { clients: Clients, peer: IpAddr },
}

impl Connection {
    /// The client a request on this connection is from, held while the
    /// returned share is.
    pub fn client_of(&self, headers: &HeaderMap) -> ClientShare {
        match self {
            Connection::Client(share) => share.clone(),
            Connection::Proxy { clients, peer } => clients.forwarded(*peer, headers),
        }
    }
}

/// Why a connection was not taken.
#[derive(Debug, PartialEq, Eq)]
pub struct TooManyConnections;

impl Clients {
    pub fn new(limits: ClientLimits) -> Clients {
        let rates = (limits.body_bytes_per_sec > 0).then(|| {
            BodyRates::new(
                limits.body_bytes_per_sec,
                limits.body_bytes_per_sec + limits.max_body_bytes as u64,
                DefaultClock::default(),
            )
        });
        Clients(Arc::new(Inner {
            limits,
            held: Mutex::default(),
            rates,
            refused: AtomicU64::new(0),
        }))
    }

    /// Takes a connection from `peer`: a trusted proxy's always (the
    /// node's own connection bound still applies), a client's while it
    /// has fewer open than it may.
    pub fn connect(&self, peer: IpAddr) -> Result<Connection, TooManyConnections> {
        if self.trusts(peer) {
            return Ok(Connection::Proxy {
                clients: self.clone(),
                peer,
            });
        }
        self.hold(key_of(peer), true)
            .map(Connection::Client)
            .ok_or(TooManyConnections)
    }

    /// The client a trusted proxy's request is from, held while the
    /// request is.
    pub fn forwarded(&self, peer: IpAddr, headers: &HeaderMap) -> ClientShare {
        let client = forwarded_client(peer, headers, |ip| self.trusts(ip));
        self.hold(key_of(client), false)
            .expect("a request is not a connection: it is not refused")
    }

    /// Bodies refused for their client's rate since the node started.
    pub fn refused(&self) -> u64 {
        self.0.refused.load(Ordering::Relaxed)
    }

    /// Clients with a connection open or a body being read.
    pub fn held(&self) -> usize {
        self.0.held.lock().len()
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0
            .limits
            .trusted_proxies
            .iter()
            .any(|n| n.contains(&ip))
    }

    fn hold(&self, key: IpAddr, connection: bool) -> Option<ClientShare> {
        let limits = &self.0.limits;
        let mut map = self.0.held.lock();
        let held = map.entry(key).or_insert_with(|| Held {
            holders: 0,
            connections: 0,
            body: Arc::new(Semaphore::new(
                (limits.buffered_bytes / 1024).min(Semaphore::MAX_PERMITS),
            )),
        });
        if connection && held.connections >= limits.max_connections {
            if held.holders == 0 {
                map.remove(&key);
            }
            return None;
        }
        held.holders += 1;
        held.connections += usize::from(connection);
        Some(ClientShare(Arc::new(Slot {
            clients: self.clone(),
            key,
            connection,
            body: held.body.clone(),
        })))
    }
}

/// One client's hold on the node, by a connection or a forwarded
/// request: its share of the body budget and its body rate. Put on
/// requests that carry a body; given back when the last clone is dropped.
#[derive(Clone)]
pub struct ClientShare(Arc<Slot>);

struct Slot {
    clients: Clients,
    key: IpAddr,
    connection: bool,
    body: Arc<Semaphore>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut map = self.clients.0.held.lock();
        if let Some(held) = map.get_mut(&self.key) {
            held.holders -= 1;
            held.connections -= usize::from(self.connection);
            if held.holders == 0 {
                map.remove(&self.key);
            }
        }
    }
}

impl ClientShare {
    /// The client's share of the body budget, a permit per KiB.
    pub(crate) fn body(&self) -> &Arc<Semaphore> {
        &self.0.body
    }

    /// The client (an IPv6 address by its /64).
    #[cfg(test)]
    fn key(&self) -> IpAddr {
        self.0.key
    }

    /// Pays for `bytes` of body from the client's bucket; past its rate,
    /// 429 with how long to wait.
    pub(crate) fn pay(&self, bytes: usize) -> Result<(), ApiError> {
        let inner = &self.0.clients.0;
        let Some(rates) = &inner.rates else {
            return Ok(());
        };
        rates.take(self.0.key, bytes).map_err(|wait| {
            inner.refused.fetch_add(1, Ordering::Relaxed);
            ApiError::RateLimited(
                format!(
                    "this client has sent request bodies faster than one client may \
                     ({} KiB/s, --client-body-mib-per-sec); try again in {} ms",
                    rates.per_second_kib(),
                    wait.as_millis()
                ),
                wait,
            )
        })
    }
}

/// The key a client is counted by: an IPv4 address (also written as
/// IPv4-mapped IPv6), or an IPv6 address's /64.
fn key_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(bits))
        }
        v4 => v4,
    }
}

/// The client of a request `peer` sent: the rightmost `X-Forwarded-For`
/// address that `trusted` does not hold, else the leftmost trusted one
/// (every hop was a trusted proxy). An entry that is not an address ends
/// the walk at the last trusted hop: what lies left of it is unknowable.
fn forwarded_client(peer: IpAddr, headers: &HeaderMap, trusted: impl Fn(IpAddr) -> bool) -> IpAddr {
    let mut client = peer;
    let hops = headers
        .get_all("x-forwarded-for")
        .iter()
        .rev()
        .flat_map(|v| v.to_str().unwrap_or("?").rsplit(','));
    for hop in hops {
        let hop = hop.trim();
        // `[v6]:port` and `v4:port` are written by some proxies.
        let ip = hop
            .parse::<IpAddr>()
            .or_else(|_| hop.parse::<std::net::SocketAddr>().map(|a| a.ip()));
        let Ok(ip) = ip else { break };
        client = ip;
        if !trusted(ip) {
            break;
        }
    }
    client
}

/// A body bucket per client, in KiB ([`hearth_host::rates`]).
struct BodyRates<C: Clock = DefaultClock> {
    buckets: Buckets<IpAddr, C>,
}

impl<C: Clock + Clone> BodyRates<C> {
    fn new(per_second: u64, burst: u64, clock: C) -> BodyRates<C> {
        let kib = |n: u64| n.div_ceil(1024);
        BodyRates {
            buckets: Buckets::with_clock(kib(per_second), kib(burst), clock),
        }
    }

    fn per_second_kib(&self) -> u32 {
        self.buckets.per_second()
    }

    /// Takes `bytes` (rounded up to KiB) from `client`'s bucket, or says
    /// how long until it holds them.
    fn take(&self, client: IpAddr, bytes: usize) -> Result<(), Duration> {
        let kib = bytes.div_ceil(1024).min(u32::MAX as usize) as u32;
        // More than a bucket holds is not a body the node takes (larger
        // ones are refused as too large first): a second, to say something.
        self.buckets
            .take(&client, kib)
            .map_err(|wait| wait.unwrap_or(Duration::from_secs(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn limits(max_connections: usize) -> ClientLimits {
        ClientLimits {
            max_connections,
            buffered_bytes: 64 << 10,
            trusted_proxies: vec![
                "10.9.0.0/16".parse().unwrap(),
                "fd00::1/128".parse().unwrap(),
            ],
            ..ClientLimits::default()
        }
    }

    fn share(c: Connection) -> ClientShare {
        match c {
            Connection::Client(s) => s,
            Connection::Proxy { .. } => panic!("a client, not a proxy"),
        }
    }

    #[test]
    fn a_client_is_admitted_up_to_its_connections_and_forgotten_when_it_leaves() {
        let clients = Clients::new(limits(3));
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        let first: Vec<_> = (0..3).map(|_| share(clients.connect(a).unwrap())).collect();
        assert_eq!(
            clients.connect(a).err(),
            Some(TooManyConnections),
            "a fourth from a"
        );
        let other = share(clients.connect(b).expect("b has its own"));
        // One body budget per client, shared by its connections.
        assert!(Arc::ptr_eq(first[0].body(), first[2].body()));
        assert!(!Arc::ptr_eq(first[0].body(), other.body()));
        assert_eq!(other.body().available_permits(), 64);
        drop(first);
        assert_eq!(clients.held(), 1, "only b is remembered");
        drop(other);
        assert_eq!(clients.held(), 0);
        let none = Clients::new(limits(0));
        assert!(none.connect(a).is_err());
        assert_eq!(none.held(), 0, "a refusal leaves no entry");
    }

    #[test]
    fn an_ipv6_client_is_its_slash_64_and_a_mapped_ipv4_client_its_address() {
        let clients = Clients::new(limits(2));
        let _one = clients.connect(ip("2001:db8:1:2::1")).unwrap();
        let _two = clients.connect(ip("2001:db8:1:2:ffff::9")).unwrap();
        assert!(
            clients.connect(ip("2001:db8:1:2:abcd::1")).is_err(),
            "a third address of the same /64 is the same client"
        );
        assert!(
            clients.connect(ip("2001:db8:1:3::1")).is_ok(),
            "another /64"
        );
        let _v4 = clients.connect(ip("192.0.2.1")).unwrap();
        let _mapped = clients.connect(ip("::ffff:192.0.2.1")).unwrap();
        assert!(
            clients.connect(ip("192.0.2.1")).is_err(),
            "mapped is the same"
        );
    }

    #[test]
    fn a_trusted_proxy_is_not_a_client_and_its_requests_are_the_forwarded_clients() {
        let clients = Clients::new(limits(1));
        let proxy = ip("10.9.0.5");
        let conns: Vec<_> = (0..4).map(|_| clients.connect(proxy).unwrap()).collect();
        assert!(conns.iter().all(|c| matches!(c, Connection::Proxy { .. })));
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "198.51.100.7".parse().unwrap());
        let from = conns[0].client_of(&h);
        assert_eq!(from.key(), ip("198.51.100.7"));
        // The forwarded client's own connections still count to 1.
        let direct = clients.connect(ip("198.51.100.7")).unwrap();
        assert!(clients.connect(ip("198.51.100.7")).is_err());
        assert!(Arc::ptr_eq(share(direct).body(), from.body()), "one budget");
    }

    #[test]
    fn the_forwarded_client_is_the_rightmost_untrusted_hop() {
        let trusted = |ip: IpAddr| ip.to_string().starts_with("10.9.");
        let peer = ip("10.9.0.1");
        let with = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append("x-forwarded-for", v.parse().unwrap());
            }
            forwarded_client(peer, &h, trusted)
        };
        assert_eq!(with(&[]), peer, "no header: the proxy itself");
        // A client writing its own header cannot pick its address.
        assert_eq!(with(&["1.1.1.1, 203.0.113.9"]), ip("203.0.113.9"));
        assert_eq!(
            with(&["1.1.1.1, 203.0.113.9, 10.9.3.3"]),
            ip("203.0.113.9"),
            "a second trusted proxy is passed over"
        );
        assert_eq!(
            with(&["1.1.1.1", "203.0.113.9"]),
            ip("203.0.113.9"),
            "two header lines"
        );
        assert_eq!(with(&["[2001:db8::5]:443"]), ip("2001:db8::5"));
        assert_eq!(with(&["203.0.113.4:8080"]), ip("203.0.113.4"));
        assert_eq!(
            with(&["203.0.113.9, garbage, 10.9.3.3"]),
            ip("10.9.3.3"),
            "past a hop that is no address nothing is known: the last trusted hop"
        );
        assert_eq!(with(&["10.9.0.7"]), ip("10.9.0.7"), "every hop trusted");
    }

    #[test]
    fn a_client_past_its_rate_waits_and_another_does_not() {
        let clock = governor::clock::FakeRelativeClock::default();
        // 100 KiB/s, a burst of 300 KiB.
        let rates = BodyRates::new(100 << 10, 300 << 10, clock.clone());
        let (a, b) = (ip("10.0.0.1"), ip("10.0.0.2"));
        assert_eq!(rates.take(a, 300 << 10), Ok(()));
        let wait = rates.take(a, 50 << 10).unwrap_err();
        assert!(
            (Duration::from_millis(490)..=Duration::from_millis(510)).contains(&wait),
            "50 KiB at 100 KiB/s: {wait:?}"
        );
        assert_eq!(rates.take(b, 300 << 10), Ok(()), "b has its own bucket");
        clock.advance(wait);
        assert_eq!(rates.take(a, 50 << 10), Ok(()));
        assert_eq!(rates.take(a, 0), Ok(()), "an empty body costs nothing");
        assert!(rates.take(a, 301 << 10).is_err(), "more than the burst");
    }

    #[test]
    fn a_client_is_refused_only_when_the_node_has_a_rate() {
        let free = Clients::new(limits(4));
        let s = share(free.connect(ip("10.0.0.1")).unwrap());
        for _ in 0..100 {
            assert!(s.pay(6 << 20).is_ok());
        }
        let rated = Clients::new(ClientLimits {
            body_bytes_per_sec: 1 << 20,
            max_body_bytes: 1 << 20,
            ..limits(4)
        });
        let s = share(rated.connect(ip("10.0.0.1")).unwrap());
        assert!(s.pay(2 << 20).is_ok(), "the burst: a second and a body");
        let Err(ApiError::RateLimited(message, wait)) = s.pay(1 << 20) else {
            panic!("past the burst")
        };
        assert!(message.contains("--client-body-mib-per-sec"), "{message}");
        assert!(wait > Duration::from_millis(900), "{wait:?}");
        assert_eq!(rated.refused(), 1);
    }
}
