//! The TCP accept loop every listener shares: accept until shutdown, turn off
//! Nagle's algorithm (the adapters coalesce their writes themselves), and hand
//! each connection on with its addresses.

use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::peer::Peer;

/// How long to back off after a failed accept (e.g. out of file descriptors),
/// so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Accepts connections on `listener` until `shutdown`, calling `on_accept`
/// with each; `on_accept` must not block (it spawns the connection's task).
pub async fn accept_loop(
    listener: TcpListener,
    shutdown: CancellationToken,
    mut on_accept: impl FnMut(TcpStream, Peer),
) {
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    let local = stream.local_addr().unwrap_or(addr);
                    on_accept(stream, Peer::plain(addr, local));
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            _ = shutdown.cancelled() => return,
        }
    }
}
