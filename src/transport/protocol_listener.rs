//! The listeners of a protocol adapter: plain TCP and TLS connections accepted
//! until shutdown, each served in its own task that shutdown waits for. The
//! adapters (AMQP, MQTT) implement [`Protocol`]; everything else is shared.

use std::future::Future;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::accept::accept_loop;
use super::peer::Peer;
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

/// Accepts plain TCP connections for `protocol` until shutdown.
pub async fn serve_plain<P: Protocol>(listener: TcpListener, protocol: Arc<P>) {
    let shutdown = protocol.shutdown().clone();
    accept_loop(listener, shutdown, |stream, peer| {
        protocol.tasks().spawn(protocol.clone().serve(stream, peer));
    })
    .await
}

/// Accepts TLS connections for `protocol` until shutdown; each task runs the
/// handshake, then the protocol over it.
pub async fn serve_tls<P: Protocol>(listener: TcpListener, tls: Arc<TlsAcceptor>, protocol: Arc<P>) {
    let shutdown = protocol.shutdown().clone();
    accept_loop(listener, shutdown, |tcp, peer| {
        let (protocol2, tls) = (protocol.clone(), tls.clone());
        protocol.tasks().spawn(async move {
            if let Some((stream, peer)) = tls.handshake(tcp, peer).await {
                protocol2.serve(stream, peer).await;
            }
        });
    })
    .await
}
