//! The API (and WebSocket connections) over TLS on `[mgmt] tls_port`.
//!
//! Handshakes run in their own tasks, so a slow or broken client never holds
//! up the others; finished ones are handed to axum through [`TlsListener`].
//! Each request carries the connection's [`Peer`] as `ConnectInfo<Peer>` and
//! its address as `ConnectInfo<SocketAddr>`, like the plain listener's.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request};
use axum::middleware::Next;
use axum::response::Response;
use axum::serve::{IncomingStream, Listener};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::HttpState;
use crate::transport::accept;
use crate::transport::peer::Peer;
use crate::transport::socket_options::SocketOptions;
use crate::transport::tls::{ServerStream, TlsAcceptor};

/// Handshaken connections waiting for axum to take them.
const BACKLOG: usize = 64;

/// A listener whose connections have completed the TLS handshake.
pub struct TlsListener {
    ready: mpsc::Receiver<(ServerStream, Peer)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` until `shutdown`, handshaking each connection
    /// in its own task.
    pub fn spawn(
        listener: TcpListener,
        tls: Arc<TlsAcceptor>,
        socket: SocketOptions,
        shutdown: CancellationToken,
    ) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(BACKLOG);
        tokio::spawn(accept::accept_loop(listener, socket, shutdown, move |tcp, peer| {
            let (tx, tls) = (tx.clone(), tls.clone());
            tokio::spawn(async move {
                if let Some(done) = tls.handshake(tcp, peer).await {
                    let _ = tx.send(done).await;
                }
            });
        }));
        Ok(TlsListener { ready, local })
    }
}

impl Listener for TlsListener {
    type Io = ServerStream;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop stopped: shutdown, which ends the server too.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(Peer::plain(self.local, self.local))
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// Adds the client's address as `ConnectInfo<SocketAddr>`, which
/// authentication (loopback-only users) and the WebSocket upgrade read.
async fn peer_address(mut req: Request, next: Next) -> Response {
    if let Some(ConnectInfo(peer)) = req.extensions().get::<ConnectInfo<Peer>>() {
        let addr = peer.addr;
        req.extensions_mut().insert(ConnectInfo(addr));
    }
    next.run(req).await
}

/// Serves the API over TLS on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<TlsAcceptor>,
    socket: SocketOptions,
    state: Arc<HttpState>,
    shutdown: CancellationToken,
) {
    let listener = match TlsListener::spawn(listener, tls, socket, shutdown.clone()) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("HTTPS server failed: {e}");
            return;
        }
    };
    let app = super::app(state)
        .layer(axum::middleware::from_fn(peer_address))
        .into_make_service_with_connect_info::<Peer>();
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
    if let Err(e) = result {
        tracing::error!("HTTPS server failed: {e}");
    }
}
