//! A follower's client ports: it binds the same AMQP, MQTT and HTTP ports (and
//! their TLS twins) it would serve as leader, and forwards every connection to
//! the leader's, so that any node's address works for clients and load
//! balancers. TLS is forwarded as bytes and ends at the leader.
//!
//! AMQP and AMQPS connections are preceded by a PROXY protocol header naming
//! the client, which the leader takes from its followers' addresses, so its
//! logs, connection list and loopback-only logins see the client rather than
//! the follower. (With `tcp_proxy_protocol` on, the client's balancer sent
//! one already and it is passed on as it is.)

use std::net::SocketAddr;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::follower::LeaderInfo;
use crate::config::Config;

/// Where the leader's client ports are (`None` while no leader is known).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderTarget {
    /// The leader's host, from its advertised URI.
    pub host: String,
    /// Its ports.
    pub info: LeaderInfo,
}

#[derive(Clone, Copy)]
enum Port {
    Amqp,
    Mqtt,
    Http,
    Amqps,
    Mqtts,
    Https,
}

impl Port {
    /// Whether forwarded connections get a PROXY header (AMQP's listeners
    /// read one; MQTT's and HTTP's do not).
    fn takes_proxy_header(self) -> bool {
        matches!(self, Port::Amqp | Port::Amqps)
    }

    fn of(self, info: &LeaderInfo) -> Option<u16> {
        match self {
            Port::Amqp => Some(info.amqp_port),
            Port::Mqtt => Some(info.mqtt_port),
            Port::Http => Some(info.http_port),
            Port::Amqps => info.amqps_port,
            Port::Mqtts => info.mqtts_port,
            Port::Https => info.https_port,
        }
    }
}

/// The follower's forwarding listeners; dropping [`Proxies::close`] frees the
/// ports (and ends forwarded connections) before the node serves as leader.
pub struct Proxies {
    target: watch::Sender<Option<LeaderTarget>>,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Proxies {
    /// Binds the client ports of `config`; a port that cannot be bound is
    /// logged and left out.
    pub async fn bind(config: &Config) -> Proxies {
        let (target, _) = watch::channel(None);
        let cancel = CancellationToken::new();
        let mut wanted = vec![
            ("AMQP", config.amqp.bind.as_str(), Some(config.amqp.port), Port::Amqp),
            ("MQTT", config.mqtt.bind.as_str(), Some(config.mqtt.port), Port::Mqtt),
            ("HTTP", config.mgmt.bind.as_str(), Some(config.mgmt.port), Port::Http),
        ];
        if config.main.tls_cert.is_some() {
            wanted.push(("AMQPS", config.amqp.bind.as_str(), config.amqp.tls_port, Port::Amqps));
            wanted.push(("MQTTS", config.mqtt.bind.as_str(), config.mqtt.tls_port, Port::Mqtts));
            wanted.push(("HTTPS", config.mgmt.bind.as_str(), config.mgmt.tls_port, Port::Https));
        }
        let mut tasks = Vec::new();
        let add_header = !config.amqp.tcp_proxy_protocol;
        for (what, bind, port, which) in wanted {
            let header = add_header && which.takes_proxy_header();
            let Some(port) = port else { continue };
            let addr = crate::transport::listen_address(bind, port);
            match TcpListener::bind(&addr).await {
                Ok(listener) => {
                    tracing::info!("{what} on {addr} forwards to the leader");
                    let rx = target.subscribe();
                    tasks.push(tokio::spawn(accept_loop(listener, which, header, rx, cancel.clone())));
                }
                Err(e) => tracing::error!("cannot bind {what} proxy to {addr}: {e}"),
            }
        }
        Proxies { target, cancel, tasks }
    }

    /// Points the proxies at a (new) leader.
    pub fn set_target(&self, target: Option<LeaderTarget>) {
        self.target.send_if_modified(|t| {
            let changed = *t != target;
            *t = target;
            changed
        });
    }

    /// Stops forwarding and frees the ports.
    pub async fn close(self) {
        self.cancel.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    which: Port,
    header: bool,
    target: watch::Receiver<Option<LeaderTarget>>,
    cancel: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = cancel.cancelled() => return,
        };
        let Ok((client, peer)) = accepted else { continue };
        let (target, cancel) = (target.clone(), cancel.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = forward(client, peer, which, header, target) => {}
                _ = cancel.cancelled() => {}
            }
        });
    }
}

/// Forwards one client connection, waiting briefly for a leader to be known.
async fn forward(
    mut client: TcpStream,
    peer: SocketAddr,
    which: Port,
    header: bool,
    mut target: watch::Receiver<Option<LeaderTarget>>,
) {
    let known = {
        let wait = target.wait_for(|t| t.as_ref().is_some_and(|t| which.of(&t.info).is_some()));
        match tokio::time::timeout(std::time::Duration::from_secs(10), wait).await {
            Ok(Ok(t)) => t.clone(),
            _ => None,
        }
    };
    let Some(t) = known else {
        tracing::warn!(client = %peer, "no leader to forward the connection to");
        return;
    };
    let Some(port) = which.of(&t.info) else { return };
    let mut upstream = match TcpStream::connect((t.host.as_str(), port)).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(client = %peer, "cannot reach the leader at {}:{port}: {e}", t.host);
            return;
        }
    };
    let _ = upstream.set_nodelay(true);
    let _ = client.set_nodelay(true);
    if header
        && let Ok(local) = client.local_addr()
        && let Err(e) = upstream.write_all(proxy_header_v1(peer, local).as_bytes()).await
    {
        tracing::warn!(client = %peer, "cannot reach the leader at {}:{port}: {e}", t.host);
        return;
    }
    if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        tracing::debug!(client = %peer, "forwarded connection ended: {e}");
    }
    let _ = client.shutdown().await;
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
