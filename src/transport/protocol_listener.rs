//! The listeners of a protocol adapter: plain TCP, TLS and Unix socket
//! connections accepted until shutdown, each served in its own task that
//! shutdown waits for. The adapters (AMQP, MQTT) implement [`Protocol`];
//! everything else is shared.

use std::future::Future;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::accept::{accept_loop, accept_unix_loop};
use super::peer::Peer;
use super::proxy_protocol::ProxyPolicy;
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

/// How a protocol's TCP listeners treat what they accept.
#[derive(Debug, Clone, Default)]
pub struct TcpEdge {
    /// Set on every accepted socket.
    pub socket: SocketOptions,
    /// When set, every connection starts with a PROXY protocol header from
    /// a trusted load balancer (read before any TLS handshake).
    pub proxy: Option<Arc<ProxyPolicy>>,
}

impl TcpEdge {
    /// The peer a new connection stands for: its own, or the one its PROXY
    /// header names. `None` when the header is missing, bad or from an
    /// untrusted source; the connection is then dropped and the reason
    /// logged.
    async fn peer(&self, tcp: &mut TcpStream, peer: Peer) -> Option<Peer> {
        let Some(policy) = &self.proxy else {
            return Some(peer);
        };
        match policy.receive(tcp, peer.clone()).await {
            Ok(proxied) => Some(proxied),
            Err(e) => {
                tracing::warn!(peer = %peer.addr, "connection refused: {e}");
                None
            }
        }
    }
}

/// Accepts plain TCP connections for `protocol` until shutdown.
pub async fn serve_plain<P: Protocol>(listener: TcpListener, edge: TcpEdge, protocol: Arc<P>) {
    let shutdown = protocol.shutdown().clone();
    let edge = Arc::new(edge);
    accept_loop(listener, edge.socket, shutdown, |mut tcp, peer| {
        if edge.proxy.is_none() {
            protocol.tasks().spawn(protocol.clone().serve(tcp, peer));
            return;
        }
        let (protocol2, edge) = (protocol.clone(), edge.clone());
        protocol.tasks().spawn(async move {
            if let Some(peer) = edge.peer(&mut tcp, peer).await {
                protocol2.serve(tcp, peer).await;
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
