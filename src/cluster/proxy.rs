//! A follower's client ports: it binds the same AMQP, MQTT, stream and HTTP
//! ports (and their TLS twins) it would serve as leader, and forwards every
//! connection to the leader's, so that any node's address works for clients
//! and load balancers. TLS is forwarded as bytes and ends at the leader.
//!
//! AMQP and AMQPS connections are preceded by a PROXY protocol header naming
//! the client, which the leader takes from its followers' addresses, so its
//! logs, connection list and loopback-only logins see the client rather than
//! the follower. (With `tcp_proxy_protocol` on, the client's balancer sent
//! one already and it is passed on as it is.)
//!
//! During a failover no leader can take a connection: the follower holds it
//! (up to `client_hold_timeout`) and forwards it once a leader is known, so a
//! client that reconnects at once sees one error per failover, the one that
//! ended its connection to the old leader. When this node is the one elected,
//! it stops accepting ([`Proxies::stop_accepting`]) to free the ports for its
//! own listeners and hands what it holds to itself
//! ([`Proxies::set_target`] with its own ports).

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::follower::LeaderInfo;
use crate::config::Config;

/// How soon a held connection tries the leader again after it could not
/// reach it (a leader that died but whose lease has not expired yet).
const RETRY: Duration = Duration::from_millis(200);

/// The longest one attempt to reach the leader may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Where the leader's client ports are (`None` while no leader is known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderTarget {
    /// The leader's host, from its advertised URI.
    pub host: String,
    /// Its ports.
    pub info: LeaderInfo,
}

/// The addresses this node's own proxies reach its leader from when they
/// hand held connections over to it: the leader trusts the PROXY headers
/// they send, as it trusts its followers'. They are this host's own
/// addresses, so trusting them lets no one else in.
#[derive(Debug, Clone, Default)]
pub struct OwnSources(Arc<parking_lot::RwLock<HashSet<IpAddr>>>);

impl OwnSources {
    /// Whether `ip` is one this node's proxies connected from.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.read().contains(&ip.to_canonical())
    }

    /// Records the addresses a connection to `to` (this node's own client
    /// address) leaves from, before any such connection is made: the address
    /// itself and the source the kernel picks for it (a host name on
    /// 127.0.1.1 is reached from 127.0.0.1, for one).
    pub fn learn_route_to(&self, to: SocketAddr) {
        let mut ips = self.0.write();
        ips.insert(to.ip().to_canonical());
        let unspecified: SocketAddr = match to {
            SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        // Connecting a UDP socket sends nothing; it only picks the route.
        let source = std::net::UdpSocket::bind(unspecified).and_then(|s| s.connect(to).and_then(|()| s.local_addr()));
        if let Ok(source) = source {
            ips.insert(source.ip().to_canonical());
        }
    }
}

#[derive(Clone, Copy)]
enum Port {
    Amqp,
    Mqtt,
    Stream,
    Http,
    Amqps,
    Mqtts,
    Https,
    StreamTls,
}

impl Port {
    /// Whether forwarded connections get a PROXY header (AMQP's listeners
    /// read one; MQTT's, the stream protocol's and HTTP's do not).
    fn takes_proxy_header(self) -> bool {
        matches!(self, Port::Amqp | Port::Amqps)
    }

    fn of(self, info: &LeaderInfo) -> Option<u16> {
        match self {
            Port::Amqp => Some(info.amqp_port),
            Port::Mqtt => Some(info.mqtt_port),
            Port::Stream => info.stream_port,
            Port::Http => Some(info.http_port),
            Port::Amqps => info.amqps_port,
            Port::Mqtts => info.mqtts_port,
            Port::Https => info.https_port,
            Port::StreamTls => info.stream_tls_port,
        }
    }
}

/// The follower's forwarding listeners and the connections they forward or
/// hold.
pub struct Proxies {
    target: watch::Sender<Option<LeaderTarget>>,
    /// Stops the accept loops (frees the ports).
    accepting: CancellationToken,
    /// Ends every forwarded or held connection.
    cancel: CancellationToken,
    listeners: Vec<JoinHandle<()>>,
}

/// What each forwarded connection needs.
#[derive(Clone)]
struct Forwarding {
    target: watch::Receiver<Option<LeaderTarget>>,
    hold: Duration,
}

impl Proxies {
    /// Binds the client ports of `config`; a port that cannot be bound is
    /// logged and left out.
    pub async fn bind(config: &Config) -> Proxies {
        let (target, _) = watch::channel(None);
        let accepting = CancellationToken::new();
        let cancel = CancellationToken::new();
        let mut wanted = vec![
            ("AMQP", config.amqp.bind.as_str(), Some(config.amqp.port), Port::Amqp),
            ("MQTT", config.mqtt.bind.as_str(), Some(config.mqtt.port), Port::Mqtt),
            ("HTTP", config.mgmt.bind.as_str(), Some(config.mgmt.port), Port::Http),
        ];
        if let Some(port) = config.stream.port.filter(|p| *p != 0) {
            wanted.push(("stream", config.stream.bind.as_str(), Some(port), Port::Stream));
        }
        if config.main.tls_cert.is_some() {
            wanted.push(("AMQPS", config.amqp.bind.as_str(), config.amqp.tls_port, Port::Amqps));
            wanted.push(("MQTTS", config.mqtt.bind.as_str(), config.mqtt.tls_port, Port::Mqtts));
            wanted.push(("HTTPS", config.mgmt.bind.as_str(), config.mgmt.tls_port, Port::Https));
            let stream_tls = config.stream.tls_port.filter(|p| *p != 0);
            wanted.push(("stream TLS", config.stream.bind.as_str(), stream_tls, Port::StreamTls));
        }
        let mut listeners = Vec::new();
        let add_header = !config.amqp.tcp_proxy_protocol;
        let forwarding = Forwarding {
            target: target.subscribe(),
            hold: config.clustering.client_hold_timeout,
        };
        for (what, bind, port, which) in wanted {
            let header = add_header && which.takes_proxy_header();
            let Some(port) = port else { continue };
            let addr = crate::transport::listen_address(bind, port);
            match TcpListener::bind(&addr).await {
                Ok(listener) => {
                    tracing::info!("{what} on {addr} forwards to the leader");
                    listeners.push(tokio::spawn(accept_loop(
                        listener,
                        which,
                        header,
                        forwarding.clone(),
                        accepting.clone(),
                        cancel.clone(),
                    )));
                }
                Err(e) => tracing::error!("cannot bind {what} proxy to {addr}: {e}"),
            }
        }
        Proxies {
            target,
            accepting,
            cancel,
            listeners,
        }
    }

    /// Points the proxies at a (new) leader; `None` holds new connections.
    pub fn set_target(&self, target: Option<LeaderTarget>) {
        self.target.send_if_modified(|t| {
            let changed = *t != target;
            *t = target;
            changed
        });
    }

    /// Stops accepting and frees the ports (for this node's own listeners
    /// once it leads); connections already accepted stay, forwarded or held.
    pub async fn stop_accepting(&mut self) {
        self.accepting.cancel();
        for t in self.listeners.drain(..) {
            let _ = t.await;
        }
    }

    /// Stops forwarding: frees the ports and ends every connection.
    pub async fn close(mut self) {
        self.stop_accepting().await;
        self.cancel.cancel();
    }
}

async fn accept_loop(
    listener: TcpListener,
    which: Port,
    header: bool,
    forwarding: Forwarding,
    accepting: CancellationToken,
    cancel: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = accepting.cancelled() => return,
        };
        let Ok((client, peer)) = accepted else { continue };
        let (forwarding, cancel) = (forwarding.clone(), cancel.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = forward(client, peer, which, header, forwarding) => {}
                _ = cancel.cancelled() => {}
            }
        });
    }
}

/// Reaches the leader for a connection accepted at `peer`: waits while no
/// leader is known and retries one that cannot be reached, until one takes
/// it or `hold` has passed.
async fn reach_leader(peer: SocketAddr, which: Port, forwarding: &mut Forwarding) -> Option<(TcpStream, String, u16)> {
    let deadline = Instant::now() + forwarding.hold;
    loop {
        let known = {
            let wait = forwarding
                .target
                .wait_for(|t| t.as_ref().is_some_and(|t| which.of(&t.info).is_some()));
            match tokio::time::timeout_at(deadline, wait).await {
                Ok(Ok(t)) => t.clone(),
                _ => None,
            }
        };
        let Some(t) = known else {
            tracing::warn!(client = %peer, "no leader to forward the connection to");
            return None;
        };
        let port = which.of(&t.info)?;
        let attempt = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((t.host.as_str(), port)));
        match attempt.await {
            Ok(Ok(upstream)) => return Some((upstream, t.host, port)),
            Ok(Err(e)) => tracing::debug!(client = %peer, "cannot reach the leader at {}:{port}: {e}", t.host),
            Err(_) => tracing::debug!(client = %peer, "no answer from the leader at {}:{port}", t.host),
        }
        // The leader died (its lease has not run out yet) or is not
        // listening yet: try again when another is known, or shortly.
        forwarding.target.borrow_and_update();
        let retry = Instant::now() + RETRY;
        let _ = tokio::time::timeout_at(retry.min(deadline), forwarding.target.changed()).await;
        if Instant::now() >= deadline {
            tracing::warn!(client = %peer, "cannot reach the leader at {}:{port}", t.host);
            return None;
        }
    }
}

/// Forwards one client connection, holding it until a leader takes it.
///
/// A leader that is being killed may still complete the handshake of a
/// connection (its listening socket closes a moment after the connections it
/// served), then reset it. Every protocol forwarded has the server answer
/// before anything is settled, so a leader that closes before its first
/// byte is tried again, with what the client sent so far, rather than
/// making the client see a second error in one failover.
async fn forward(mut client: TcpStream, peer: SocketAddr, which: Port, header: bool, mut forwarding: Forwarding) {
    let _ = client.set_nodelay(true);
    let mut sent = Vec::new();
    let mut attempts = 0;
    let (mut upstream, first) = loop {
        let Some((mut upstream, host, port)) = reach_leader(peer, which, &mut forwarding).await else {
            return;
        };
        let _ = upstream.set_nodelay(true);
        let mut prelude = Vec::new();
        if header && let Ok(local) = client.local_addr() {
            prelude.extend_from_slice(proxy_header_v1(peer, local).as_bytes());
        }
        prelude.extend_from_slice(&sent);
        let answer = match upstream.write_all(&prelude).await {
            Ok(()) => first_answer(&mut client, &mut upstream, &mut sent).await,
            Err(_) => Answer::LeaderClosed,
        };
        match answer {
            Answer::Leader(first) => break (upstream, first),
            Answer::ClientClosed => return,
            Answer::LeaderClosed if attempts < ANSWER_RETRIES && sent.len() <= MAX_REPLAYED => {
                attempts += 1;
                tracing::debug!(client = %peer, "the leader at {host}:{port} closed before answering; trying again");
                tokio::time::sleep(RETRY).await;
            }
            Answer::LeaderClosed => {
                tracing::warn!(client = %peer, "the leader at {host}:{port} closed the connection before answering");
                return;
            }
        }
    };
    if client.write_all(&first).await.is_err() {
        return;
    }
    if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        tracing::debug!(client = %peer, "forwarded connection ended: {e}");
    }
    let _ = client.shutdown().await;
}

/// Times a connection is offered again to a leader that closed it before
/// answering (see [`forward`]).
const ANSWER_RETRIES: u32 = 5;

/// Most bytes of a client kept to offer again: protocol headers and a first
/// request are far smaller; a client that sent more before any answer is
/// not retried.
const MAX_REPLAYED: usize = 64 * 1024;

/// How the exchange before the leader's first byte ended.
enum Answer {
    /// The leader's first bytes.
    Leader(Vec<u8>),
    /// The leader closed (or reset) the connection without a byte.
    LeaderClosed,
    /// The client went away.
    ClientClosed,
}

/// Relays what the client sends (keeping a copy in `sent`) until the leader
/// sends its first bytes.
async fn first_answer(client: &mut TcpStream, upstream: &mut TcpStream, sent: &mut Vec<u8>) -> Answer {
    use tokio::io::AsyncReadExt;
    let mut from_client = [0u8; 4096];
    let mut from_leader = vec![0u8; 4096];
    loop {
        tokio::select! {
            n = upstream.read(&mut from_leader) => {
                return match n {
                    Ok(n) if n > 0 => {
                        from_leader.truncate(n);
                        Answer::Leader(from_leader)
                    }
                    _ => Answer::LeaderClosed,
                };
            }
            n = client.read(&mut from_client) => {
                let n = match n {
                    Ok(n) if n > 0 => n,
                    _ => return Answer::ClientClosed,
                };
                if sent.len() <= MAX_REPLAYED {
                    sent.extend_from_slice(&from_client[..n]);
                }
                if upstream.write_all(&from_client[..n]).await.is_err() {
                    return Answer::LeaderClosed;
                }
            }
        }
    }
}

/// A PROXY protocol version 1 header: `client` connected to `local`.
fn proxy_header_v1(client: SocketAddr, local: SocketAddr) -> String {
    let (client_ip, local_ip) = (client.ip().to_canonical(), local.ip().to_canonical());
    let family = match (client_ip.is_ipv4(), local_ip.is_ipv4()) {
        (true, true) => "TCP4",
        (false, false) => "TCP6",
        // Mixed families cannot be expressed: say nothing about the addresses.
        _ => return "PROXY UNKNOWN\r\n".to_string(),
    };
    format!(
        "PROXY {family} {client_ip} {local_ip} {} {}\r\n",
        client.port(),
        local.port()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_headers_name_the_client_and_where_it_connected() {
        let h = proxy_header_v1("10.0.0.7:51000".parse().unwrap(), "10.0.0.1:5672".parse().unwrap());
        assert_eq!(h, "PROXY TCP4 10.0.0.7 10.0.0.1 51000 5672\r\n");
        let h = proxy_header_v1(
            "[::ffff:10.0.0.7]:51000".parse().unwrap(),
            "10.0.0.1:5672".parse().unwrap(),
        );
        assert_eq!(h, "PROXY TCP4 10.0.0.7 10.0.0.1 51000 5672\r\n");
        let h = proxy_header_v1(
            "[2001:db8::7]:51000".parse().unwrap(),
            "[2001:db8::1]:5672".parse().unwrap(),
        );
        assert_eq!(h, "PROXY TCP6 2001:db8::7 2001:db8::1 51000 5672\r\n");
        let h = proxy_header_v1("[2001:db8::7]:51000".parse().unwrap(), "10.0.0.1:5672".parse().unwrap());
        assert_eq!(h, "PROXY UNKNOWN\r\n");
    }
}
