//! The listeners of a protocol adapter: plain TCP, TLS and Unix socket
//! connections accepted until shutdown, each served in its own task that
//! shutdown waits for. The adapters (AMQP, MQTT) implement [`Protocol`];
//! everything else is shared.

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::accept::{accept_loop, accept_unix_loop};
use super::peer::Peer;
use super::proxy_protocol::ProxyPolicy;
use super::shared_tcp::SharedTcp;
use super::socket_options::SocketOptions;
use super::tls::TlsAcceptor;

/// A protocol adapter that serves connections over any byte stream.
pub trait Protocol: Send + Sync + 'static {
    /// Serves one connection until it ends.
    fn serve<S>(self: Arc<Self>, stream: S, peer: Peer) -> impl Future<Output = ()> + Send
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The connection tasks, which shutdown waits for.
    fn tasks(&self) -> &TaskTracker;
    /// Cancelled when the server shuts down.
    fn shutdown(&self) -> &CancellationToken;
}

/// The cluster followers that forward client connections to this node (a
/// clustered leader): a connection from one of their addresses may start
/// with a PROXY protocol header naming the client it forwards.
#[derive(Clone)]
pub struct Forwarders(pub Arc<dyn Fn(IpAddr) -> bool + Send + Sync>);

impl Forwarders {
    fn include(&self, ip: IpAddr) -> bool {
        (self.0)(ip.to_canonical())
    }
}

impl std::fmt::Debug for Forwarders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Forwarders")
    }
}

/// How long a forwarder's connection may take to send its first byte before
/// it is served as it is.
const FORWARDED_FIRST_BYTE: Duration = Duration::from_secs(10);

/// How a protocol's TCP listeners treat what they accept.
#[derive(Debug, Clone, Default)]
pub struct TcpEdge {
    /// Set on every accepted socket.
    pub socket: SocketOptions,
    /// When set, every connection starts with a PROXY protocol header from
    /// a trusted load balancer (read before any TLS handshake).
    pub proxy: Option<Arc<ProxyPolicy>>,
    /// Clustered leader: followers whose connections may carry a header.
    pub forwarders: Option<Forwarders>,
}

impl TcpEdge {
    /// The peer a new connection stands for: its own, or the one its PROXY
    /// header names. `None` when the header is missing, bad or from an
    /// untrusted source; the connection is then dropped and the reason
    /// logged.
    async fn peer(&self, tcp: &mut TcpStream, peer: Peer) -> Option<Peer> {
        let ip = peer.addr.ip();
        let forwarded = self.forwarders.as_ref().is_some_and(|f| f.include(ip));
        let received = match &self.proxy {
            // A follower's header is trusted like a trusted balancer's.
            Some(_) if forwarded => ProxyPolicy::trusting_all().receive(tcp, peer.clone()).await,
            Some(policy) => policy.receive(tcp, peer.clone()).await,
            None if forwarded && starts_with_proxy_header(tcp).await => {
                ProxyPolicy::trusting_all().receive(tcp, peer.clone()).await
            }
            None => return Some(peer),
        };
        match received {
            Ok(proxied) => Some(proxied),
            Err(e) => {
                tracing::warn!(peer = %peer.addr, "connection refused: {e}");
                None
            }
        }
    }

    /// Whether connections need [`TcpEdge::peer`] before they are served.
    fn inspects(&self) -> bool {
        self.proxy.is_some() || self.forwarders.is_some()
    }
}

/// Whether a forwarder's connection starts with a PROXY header (v1 `P`, v2
/// `\r`; AMQP starts with `A`, TLS with 0x16), looked at without taking it.
async fn starts_with_proxy_header(tcp: &TcpStream) -> bool {
    let mut first = [0u8; 1];
    match tokio::time::timeout(FORWARDED_FIRST_BYTE, tcp.peek(&mut first)).await {
        Ok(Ok(1)) => first[0] == b'P' || first[0] == b'\r',
        _ => false,
    }
}

/// Accepts plain TCP connections for `protocol` until shutdown; each is served
/// as a [`SharedTcp`], so that its outbox may write to it directly.
pub async fn serve_plain<P: Protocol>(listener: TcpListener, edge: TcpEdge, protocol: Arc<P>) {
    let shutdown = protocol.shutdown().clone();
    let edge = Arc::new(edge);
    accept_loop(listener, edge.socket, shutdown, |mut tcp, peer| {
        if !edge.inspects() {
            protocol
                .tasks()
                .spawn(protocol.clone().serve(SharedTcp::new(tcp), peer));
            return;
        }
        let (protocol2, edge) = (protocol.clone(), edge.clone());
        protocol.tasks().spawn(async move {
            if let Some(peer) = edge.peer(&mut tcp, peer).await {
                protocol2.serve(SharedTcp::new(tcp), peer).await;
            }
        });
    })
    .await
}

/// Accepts TLS connections for `protocol` until shutdown; each task reads
/// the PROXY header if one is expected, runs the handshake, then the
/// protocol over it.
pub async fn serve_tls<P: Protocol>(listener: TcpListener, edge: TcpEdge, tls: Arc<TlsAcceptor>, protocol: Arc<P>) {
    let shutdown = protocol.shutdown().clone();
    let edge = Arc::new(edge);
    accept_loop(listener, edge.socket, shutdown, |mut tcp, peer| {
        let (protocol2, tls, edge) = (protocol.clone(), tls.clone(), edge.clone());
        protocol.tasks().spawn(async move {
            let Some(peer) = edge.peer(&mut tcp, peer).await else {
                return;
            };
            if let Some((stream, peer)) = tls.handshake(tcp, peer).await {
                protocol2.serve(stream, peer).await;
            }
        });
    })
    .await
}

/// Accepts Unix socket connections for `protocol` until shutdown.
pub async fn serve_unix<P: Protocol>(listener: UnixListener, protocol: Arc<P>) {
    let shutdown = protocol.shutdown().clone();
    accept_unix_loop(listener, shutdown, |stream, peer| {
        protocol.tasks().spawn(protocol.clone().serve(stream, peer));
    })
    .await
}
