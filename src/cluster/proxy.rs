//! A follower's client ports: it binds the same AMQP, MQTT and HTTP ports (and
//! their TLS twins) it would serve as leader, and forwards every connection to
//! the leader's, so that any node's address works for clients and load
//! balancers. TLS is forwarded as bytes and ends at the leader.

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
        for (what, bind, port, which) in wanted {
            let Some(port) = port else { continue };
            let addr = crate::transport::listen_address(bind, port);
            match TcpListener::bind(&addr).await {
                Ok(listener) => {
                    tracing::info!("{what} on {addr} forwards to the leader");
                    let rx = target.subscribe();
                    tasks.push(tokio::spawn(accept_loop(listener, which, rx, cancel.clone())));
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
                _ = forward(client, peer, which, target) => {}
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
    if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        tracing::debug!(client = %peer, "forwarded connection ended: {e}");
    }
    let _ = client.shutdown().await;
}
