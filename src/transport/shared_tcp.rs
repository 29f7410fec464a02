//! A plain TCP connection that more than one task may write to: the
//! connection's writer task, through [`AsyncWrite`], and any task that has
//! just filled the connection's outbox, through [`DirectSocket::try_write`]
//! (see [`super::outbox`]), which sends small replies and deliveries in the
//! same turn instead of waking the writer task for them.
//!
//! Waking another task costs more than the write itself when the traffic is
//! light: often a futex wake-up of an idle worker thread, and on virtual
//! machines an inter-processor interrupt. Who may write when is the outbox's
//! business; this type only gives every writer the same socket.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use super::quick_ack::QuickAck;

/// The socket of a [`SharedTcp`], for writes that never wait.
#[derive(Clone)]
pub struct DirectSocket(Arc<TcpStream>);

impl DirectSocket {
    /// Writes what the socket takes now, without waiting: the number of bytes
    /// written, or `WouldBlock` when its send buffer is full.
    pub fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        self.0.try_write(bytes)
    }
}

/// A plain TCP stream whose socket can also be written through a
/// [`DirectSocket`]. Its reads follow the [`QuickAck`] policy.
pub struct SharedTcp {
    stream: Arc<TcpStream>,
    quick_ack: QuickAck,
}

impl SharedTcp {
    /// Wraps an accepted stream.
    pub fn new(stream: TcpStream) -> SharedTcp {
        SharedTcp {
            stream: Arc::new(stream),
            quick_ack: QuickAck::new(),
        }
    }

    /// A handle for writes from other tasks.
    pub fn direct(&self) -> DirectSocket {
        DirectSocket(self.stream.clone())
    }
}

/// The direct-write handle of `stream` when it is a [`SharedTcp`]; `None` for
/// every other transport (TLS, WebSocket, Unix sockets), whose writes must go
/// through their own buffering layers in order.
///
/// Protocol adapters serve any stream type; a type check at the start of a
/// connection is simpler than a trait every transport would implement.
pub fn direct_socket<S: 'static>(stream: &S) -> Option<DirectSocket> {
    (stream as &dyn std::any::Any)
        .downcast_ref::<SharedTcp>()
        .map(SharedTcp::direct)
}

impl AsyncRead for SharedTcp {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            ready!(this.stream.poll_read_ready(cx))?;
            // Reads into the buffer's uninitialised room, as tokio's own
            // TcpStream does: zeroing it first would cost a memset of up to
            // 64 KiB per read.
            // SAFETY: `read` only writes into the slice and reports how many
            // bytes it wrote; exactly those are marked initialised below.
            let room = unsafe { buf.unfilled_mut() };
            let read = this.stream.try_io(Interest::READABLE, || {
                rustix::io::read(&*this.stream, room)
                    .map(|(got, _)| got.len())
                    .map_err(io::Error::from)
            });
            match read {
                Ok(n) => {
                    // SAFETY: the read above initialised these `n` bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    if n > 0
                        && let Some(at_once) = this.quick_ack.after_read(n)
                    {
                        let _ = socket2::SockRef::from(&*this.stream).set_tcp_quickack(at_once);
                    }
                    return Poll::Ready(Ok(()));
                }
                // Readiness was cleared: wait for the next event.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for SharedTcp {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.stream.poll_write_ready(cx))?;
            match self.stream.try_write(bytes) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => return Poll::Ready(r),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(socket2::SockRef::from(&*self.stream).shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Bytes written through the stream and through its direct handle both
    /// arrive, in the order written; reads see what the peer sent; shutdown
    /// ends the peer's reads.
    #[tokio::test]
    async fn reads_writes_and_direct_writes_share_one_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let mut client = client.unwrap();
        let mut shared = SharedTcp::new(accepted.unwrap().0);
        assert!(direct_socket(&shared).is_some());
        assert!(direct_socket(&client).is_none());

        shared.write_all(b"one ").await.unwrap();
        let direct = shared.direct();
        assert_eq!(direct.try_write(b"two ").unwrap(), 4);
        shared.write_all(b"three").await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut got = bytes::BytesMut::with_capacity(16);
        while got.len() < 4 {
            shared.read_buf(&mut got).await.unwrap();
        }
        assert_eq!(&got[..], b"ping");
        shared.shutdown().await.unwrap();
        let mut all = Vec::new();
        client.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b"one two three");
    }
}
