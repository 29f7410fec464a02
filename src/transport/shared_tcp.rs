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
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use super::quick_ack::QuickAck;

/// The socket every writer shares, and whether the client still waits for
/// an acknowledgement of bytes read from it.
struct Socket {
    stream: TcpStream,
    /// Bytes were read that the [`QuickAck`] policy wants acknowledged at
    /// once, and nothing was sent on the socket since (anything sent carries
    /// the acknowledgement). Settled when the reader goes back to waiting.
    ack_owed: AtomicBool,
}

impl Socket {
    /// Records that bytes went out: they acknowledge everything read so far.
    fn sent(&self) {
        if self.ack_owed.load(Ordering::Relaxed) {
            self.ack_owed.store(false, Ordering::Relaxed);
        }
    }
}

/// The socket of a [`SharedTcp`], for writes that never wait.
#[derive(Clone)]
pub struct DirectSocket(Arc<Socket>);

impl DirectSocket {
    /// Writes what the socket takes now, without waiting: the number of bytes
    /// written, or `WouldBlock` when its send buffer is full.
    pub fn try_write(&self, bytes: &[u8]) -> io::Result<usize> {
        let written = self.0.stream.try_write(bytes)?;
        self.0.sent();
        Ok(written)
    }
}

/// A plain TCP stream whose socket can also be written through a
/// [`DirectSocket`]. Its reads follow the [`QuickAck`] policy.
pub struct SharedTcp {
    socket: Arc<Socket>,
    quick_ack: QuickAck,
}

impl SharedTcp {
    /// Wraps an accepted stream.
    pub fn new(stream: TcpStream) -> SharedTcp {
        SharedTcp {
            socket: Arc::new(Socket {
                stream,
                ack_owed: AtomicBool::new(false),
            }),
            quick_ack: QuickAck::new(),
        }
    }

    /// A handle for writes from other tasks.
    pub fn direct(&self) -> DirectSocket {
        DirectSocket(self.socket.clone())
    }

    /// Before the reader waits for more bytes: acknowledges at once what it
    /// read, unless a reply has carried the acknowledgement meanwhile.
    ///
    /// Deferred to this point rather than done right after the read because
    /// most reads are answered (a confirm, a PUBACK, a delivery to a consumer
    /// on the same connection) before the reader comes back: asking for the
    /// acknowledgement at the read sent a bare ACK packet of its own ahead of
    /// the reply, a system call and a packet per message on a request/reply
    /// connection.
    fn settle_owed_ack(&self) {
        if self.socket.ack_owed.swap(false, Ordering::Relaxed) {
            let _ = socket2::SockRef::from(&self.socket.stream).set_tcp_quickack(true);
        }
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
            match this.socket.stream.poll_read_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    this.settle_owed_ack();
                    return Poll::Pending;
                }
            }
            // Reads into the buffer's uninitialised room, as tokio's own
            // TcpStream does: zeroing it first would cost a memset of up to
            // 64 KiB per read.
            // SAFETY: `read` only writes into the slice and reports how many
            // bytes it wrote; exactly those are marked initialised below.
            let room = unsafe { buf.unfilled_mut() };
            let wanted = room.len();
            let mut got = 0;
            let read = this.socket.stream.try_io(Interest::READABLE, || {
                got = rustix::io::read(&this.socket.stream, &mut *room)
                    .map(|(got, _)| got.len())
                    .map_err(io::Error::from)?;
                // A read that did not fill the room emptied the socket's
                // receive queue: clear the readiness now, as tokio's own
                // stream does, rather than with one more read that would
                // only say `WouldBlock`. Bytes that arrive after it bring a
                // new readiness event, which this clearing cannot erase.
                if got > 0 && got < wanted {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(got)
            });
            match read {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => {}
                // Readiness was cleared: wait for the next event.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
            // SAFETY: the read above initialised these `got` bytes.
            unsafe { buf.assume_init(got) };
            buf.advance(got);
            if got > 0 {
                match this.quick_ack.after_read(got) {
                    Some(true) => this.socket.ack_owed.store(true, Ordering::Relaxed),
                    Some(false) => {
                        this.socket.ack_owed.store(false, Ordering::Relaxed);
                        let _ = socket2::SockRef::from(&this.socket.stream).set_tcp_quickack(false);
                    }
                    None => {}
                }
            }
            return Poll::Ready(Ok(()));
        }
    }
}

impl AsyncWrite for SharedTcp {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        let socket = &self.socket;
        loop {
            ready!(socket.stream.poll_write_ready(cx))?;
            match socket.stream.try_write(bytes) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                r => {
                    if r.is_ok() {
                        socket.sent();
                    }
                    return Poll::Ready(r);
                }
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(socket2::SockRef::from(&self.socket.stream).shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A client connected over loopback, and the server's end of it.
    async fn connected() -> (TcpStream, SharedTcp) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (client.unwrap(), SharedTcp::new(accepted.unwrap().0))
    }

    /// Bytes written through the stream and through its direct handle both
    /// arrive, in the order written; reads see what the peer sent; shutdown
    /// ends the peer's reads.
    #[tokio::test]
    async fn reads_writes_and_direct_writes_share_one_socket() {
        let (mut client, mut shared) = connected().await;
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

    /// A read that leaves the socket empty clears its readiness without a
    /// second read, and bytes that arrive afterwards still wake the reader:
    /// every byte of many small writes arrives, in order.
    #[tokio::test]
    async fn short_reads_lose_no_wakeup() {
        let (mut client, mut shared) = connected().await;
        let writer = tokio::spawn(async move {
            for i in 0..2000u32 {
                client.write_all(&i.to_be_bytes()).await.unwrap();
                if i % 7 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            client
        });
        let mut got = bytes::BytesMut::with_capacity(8192);
        let deadline = std::time::Duration::from_secs(20);
        while got.len() < 8000 {
            let n = tokio::time::timeout(deadline, shared.read_buf(&mut got))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "the peer closed early");
        }
        for (i, chunk) in got.chunks(4).enumerate() {
            assert_eq!(chunk, (i as u32).to_be_bytes());
        }
        drop(writer.await.unwrap());
    }

    /// A slow connection's read leaves an acknowledgement owed until bytes
    /// are sent back on the socket, from either writer.
    #[tokio::test]
    async fn a_reply_settles_the_acknowledgement_owed() {
        let (mut client, mut shared) = connected().await;
        let mut got = bytes::BytesMut::with_capacity(64);
        client.write_all(b"ping").await.unwrap();
        shared.read_buf(&mut got).await.unwrap();
        assert!(shared.socket.ack_owed.load(Ordering::Relaxed));
        shared.direct().try_write(b"pong").unwrap();
        assert!(!shared.socket.ack_owed.load(Ordering::Relaxed));
        client.write_all(b"ping").await.unwrap();
        shared.read_buf(&mut got).await.unwrap();
        assert!(shared.socket.ack_owed.load(Ordering::Relaxed));
        shared.write_all(b"pong").await.unwrap();
        assert!(!shared.socket.ack_owed.load(Ordering::Relaxed));
        client.write_all(b"ping").await.unwrap();
        shared.read_buf(&mut got).await.unwrap();
        // Nothing sent back: waiting for more bytes settles it.
        let wait = tokio::time::timeout(std::time::Duration::from_millis(50), shared.read_buf(&mut got)).await;
        assert!(wait.is_err());
        assert!(!shared.socket.ack_owed.load(Ordering::Relaxed));
    }
}
