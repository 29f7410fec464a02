//! The accept loops every listener shares: accept until shutdown, set the
//! configured socket options, and hand each connection on with its
//! addresses.

use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use super::peer::Peer;
use super::socket_options::SocketOptions;

/// How long to back off after a failed accept (e.g. out of file descriptors),
/// so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Accepts connections on `listener` until `shutdown`, calling `on_accept`
/// with each; `on_accept` must not block (it spawns the connection's task).
pub async fn accept_loop(
    listener: TcpListener,
    options: SocketOptions,
    shutdown: CancellationToken,
    mut on_accept: impl FnMut(TcpStream, Peer),
) {
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, addr)) => {
                    options.apply(&stream);
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

/// [`accept_loop`] for a Unix socket, whose peers are [`Peer::unix`].
pub async fn accept_unix_loop(
    listener: UnixListener,
    shutdown: CancellationToken,
    mut on_accept: impl FnMut(UnixStream, Peer),
) {
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => on_accept(stream, Peer::unix()),
                Err(e) => {
                    tracing::warn!("accept on a unix socket failed: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            _ = shutdown.cancelled() => return,
        }
    }
}
