//! The outgoing side of a connection, whatever its protocol: one buffer that the
//! connection task and every consumer task append frames (or packets) to, and one
//! writer task that moves whatever has accumulated to the socket in a single
//! write. Many frames ride on one syscall.
//!
//! Coalescing adapts to the load. On a plain TCP connection (see
//! [`super::shared_tcp`]) a flush finding the writer task idle writes the buffer
//! itself, at once, without waking the task: a lone reply or delivery costs one
//! `write` instead of a task wake-up (often a thread wake-up) plus the `write`.
//! Once the socket's send buffer is full, or while the writer task is busy with
//! earlier bytes, flushes only wake the task, and frames accumulate behind it
//! into large writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use super::shared_tcp::DirectSocket;
use crate::core::connections::ConnectionEntry;

/// Above this many buffered bytes, deliveries wait for the writer to catch up.
pub const HIGH_WATER: usize = 1 << 20;

/// How long a writer with nothing to write waits before it gives back the
/// buffers a burst grew: an idle connection, of thousands, should not keep
/// one sized for its busiest moment.
const IDLE_GIVE_BACK: Duration = Duration::from_secs(2);

/// Buffers up to this size are kept by an idle writer (replies to the
/// occasional request fit in them without a new allocation).
const KEEP_WHEN_IDLE: usize = 4096;

/// A protocol's keep-alive: how long the connection may stay silent, and how
/// to write the frame that breaks the silence.
pub type Heartbeat = (Duration, fn(&mut BytesMut));

/// Frames waiting to be written, and who is writing.
#[derive(Default)]
struct Pending {
    bytes: BytesMut,
    /// The writer task has taken earlier bytes and not yet written them all:
    /// nobody else may write before it finishes.
    writer_busy: bool,
    /// Set by [`Outbox::spawn_writer`] for plain TCP connections, dropped
    /// when the outbox closes (it holds the socket open).
    direct: Option<Direct>,
}

/// A socket that flushes may write to themselves, and where to count it.
struct Direct {
    socket: DirectSocket,
    entry: Arc<ConnectionEntry>,
}

/// Frames waiting to be written to one connection's socket.
pub struct Outbox {
    buf: Mutex<Pending>,
    /// A direct socket was set: flushes may write themselves.
    direct_writes: AtomicBool,
    wake_writer: Notify,
    /// Notified whenever bytes leave the buffer (and at close), for
    /// producers waiting for room.
    drained: Notify,
    /// Notified at close only: a connection task waits on it beside its
    /// reads, and must not be woken by every write made for it.
    closing: Notify,
    closed: AtomicBool,
    /// Bytes buffered, as of the last append or write-out (read without the lock).
    buffered: AtomicUsize,
    /// [`IDLE_GIVE_BACK`], shorter in tests.
    give_back_after: Duration,
}

impl Default for Outbox {
    fn default() -> Self {
        Outbox {
            // Both buffers (this and the writer's spare) start empty, grow
            // with the traffic and are given back when the writer goes idle:
            // an idle connection, of thousands, holds no buffer pages.
            buf: Mutex::new(Pending::default()),
            direct_writes: AtomicBool::new(false),
            wake_writer: Notify::new(),
            drained: Notify::new(),
            closing: Notify::new(),
            closed: AtomicBool::new(false),
            buffered: AtomicUsize::new(0),
            give_back_after: IDLE_GIVE_BACK,
        }
    }
}

impl Outbox {
    /// Appends frames written by `f` without waking the writer: the connection task
    /// answers a whole read buffer's worth of frames, then flushes once.
    pub fn write(&self, f: impl FnOnce(&mut BytesMut)) {
        let mut pending = self.buf.lock();
        f(&mut pending.bytes);
        self.buffered.store(pending.bytes.len(), Ordering::Release);
    }

    /// True while the buffer holds more than [`HIGH_WATER`] bytes.
    pub fn is_full(&self) -> bool {
        self.buffered.load(Ordering::Acquire) >= HIGH_WATER
    }

    /// Appends frames written by `f` and wakes the writer; for writers outside the
    /// connection's own task.
    pub fn send(&self, f: impl FnOnce(&mut BytesMut)) {
        self.write(f);
        self.flush();
    }

    /// Sends what is buffered: at once, on the calling thread, when the
    /// connection allows direct writes and the writer task is idle; otherwise
    /// (or for what the socket did not take) by waking the writer task.
    pub fn flush(&self) {
        if self.direct_writes.load(Ordering::Relaxed) && self.write_directly() {
            return;
        }
        self.wake_writer.notify_one();
    }

    /// Writes the buffer to the socket without waiting, unless the writer
    /// task holds earlier bytes. True when nothing is left for the writer
    /// task to do. The lock is held across the (non-blocking) write, so that
    /// no other flush or the writer task can slip bytes in between.
    fn write_directly(&self) -> bool {
        let mut guard = self.buf.lock();
        let pending = &mut *guard;
        if pending.bytes.is_empty() {
            return true;
        }
        let Some(direct) = pending.direct.as_ref().filter(|_| !pending.writer_busy) else {
            return false;
        };
        let mut written = 0;
        let outcome = loop {
            match direct.socket.try_write(&pending.bytes[written..]) {
                Ok(n) => {
                    written += n;
                    if written == pending.bytes.len() || n == 0 {
                        break Ok(());
                    }
                }
                Err(e) => break Err(e),
            }
        };
        if written > 0 {
            direct.entry.count_write(written);
            if written == pending.bytes.len() {
                pending.bytes.clear();
            } else {
                bytes::Buf::advance(&mut pending.bytes, written);
            }
            self.buffered.store(pending.bytes.len(), Ordering::Release);
        }
        let done = pending.bytes.is_empty();
        drop(guard);
        if written > 0 {
            self.drained.notify_waiters();
        }
        match outcome {
            // A full send buffer: the writer task waits for room.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => done,
            // The writer task meets the same error and ends the connection.
            Err(_) => false,
            Ok(()) => done,
        }
    }

    /// True once the connection is gone; producers should stop.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Marks the connection gone and wakes everyone waiting on it.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        // No more direct writes; the socket closes once its tasks end.
        self.buf.lock().direct = None;
        self.wake_writer.notify_one();
        self.drained.notify_waiters();
        self.closing.notify_waiters();
    }

    /// Completes once the connection is gone (the writer failed or someone
    /// closed the outbox).
    pub async fn closed(&self) {
        let closing = self.closing.notified();
        tokio::pin!(closing);
        closing.as_mut().enable();
        if self.is_closed() {
            return;
        }
        closing.await;
    }

    /// Waits until the buffer is below [`HIGH_WATER`] (or the connection closed).
    pub async fn wait_for_space(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if !self.is_full() || self.is_closed() {
                return;
            }
            drained.await;
        }
    }

    /// Starts the writer task of a registered connection: it writes until the
    /// outbox is closed (or the socket fails), counting writes on `entry`, and
    /// closes the outbox when it ends. With `direct`, the socket behind
    /// `sink`, flushes may write to it themselves while the task is idle.
    pub fn spawn_writer<W>(
        self: &Arc<Self>,
        sink: W,
        heartbeat: Option<Heartbeat>,
        entry: Arc<ConnectionEntry>,
        direct: Option<DirectSocket>,
    ) -> tokio::task::JoinHandle<()>
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        if let Some(socket) = direct {
            self.buf.lock().direct = Some(Direct {
                socket,
                entry: entry.clone(),
            });
            self.direct_writes.store(true, Ordering::Relaxed);
        }
        let outbox = self.clone();
        tokio::spawn(async move {
            if let Err(e) = outbox.run_writer(sink, heartbeat, |n| entry.count_write(n)).await {
                tracing::debug!("write failed: {e}");
            }
            outbox.close();
        })
    }

    /// Writes buffered frames to `sink` until the outbox is closed and empty; when
    /// `heartbeat` is given as `(interval, write)`, `write` appends a heartbeat
    /// whenever nothing was written for `interval`. `sent` is told the size of
    /// every write.
    pub async fn run_writer<W: AsyncWrite + Unpin>(
        &self,
        mut sink: W,
        heartbeat: Option<Heartbeat>,
        sent: impl Fn(usize),
    ) -> std::io::Result<()> {
        let mut spare = BytesMut::new();
        loop {
            {
                let mut pending = self.buf.lock();
                std::mem::swap(&mut pending.bytes, &mut spare);
                pending.writer_busy = !spare.is_empty();
                self.buffered.store(0, Ordering::Release);
            }
            if !spare.is_empty() {
                // The flush sends what buffered transports (WebSocket, TLS) hold;
                // on a plain socket it costs nothing.
                let r = match sink.write_all(&spare).await {
                    Ok(()) => sink.flush().await,
                    Err(e) => Err(e),
                };
                sent(spare.len());
                spare.clear();
                self.buf.lock().writer_busy = false;
                self.drained.notify_waiters();
                r?;
                continue;
            }
            if self.is_closed() {
                let _ = sink.flush().await;
                let _ = sink.shutdown().await;
                return Ok(());
            }
            // Nothing to write. Once idle for a while the writer gives back
            // what a burst grew; a heartbeat breaks a longer silence.
            let quiet = heartbeat.map_or(self.give_back_after, |(interval, _)| interval.min(self.give_back_after));
            if tokio::time::timeout(quiet, self.wake_writer.notified()).await.is_ok() {
                continue;
            }
            self.give_back(&mut spare);
            match heartbeat {
                Some((interval, write_heartbeat)) => {
                    let rest = interval.saturating_sub(quiet);
                    if rest.is_zero() || tokio::time::timeout(rest, self.wake_writer.notified()).await.is_err() {
                        write_heartbeat(&mut self.buf.lock().bytes);
                    }
                }
                None => self.wake_writer.notified().await,
            }
        }
    }

    /// Replaces the writer's `spare` buffer and the shared one, if empty, by
    /// unallocated ones when they grew beyond [`KEEP_WHEN_IDLE`].
    fn give_back(&self, spare: &mut BytesMut) {
        if spare.capacity() > KEEP_WHEN_IDLE {
            *spare = BytesMut::new();
        }
        let mut pending = self.buf.lock();
        if pending.bytes.is_empty() && pending.bytes.capacity() > KEEP_WHEN_IDLE {
            pending.bytes = BytesMut::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst grows the shared buffer; once the writer has written it and
    /// stayed idle, the buffer is given back, and the next burst still goes out.
    #[tokio::test]
    async fn an_idle_writer_gives_back_the_buffers_a_burst_grew() {
        let outbox = Arc::new(Outbox {
            give_back_after: Duration::from_millis(50),
            ..Outbox::default()
        });
        let (client, mut server) = tokio::io::duplex(1 << 20);
        let writer = {
            let outbox = outbox.clone();
            tokio::spawn(async move { outbox.run_writer(client, None, |_| {}).await })
        };
        let burst = |outbox: &Outbox| outbox.send(|b| b.extend_from_slice(&[7u8; 100_000]));
        // Two bursts, so that both buffers (shared and spare) have grown.
        let mut got = vec![0u8; 100_000];
        for _ in 0..2 {
            burst(&outbox);
            tokio::io::AsyncReadExt::read_exact(&mut server, &mut got)
                .await
                .expect("burst arrives");
        }
        let mut given_back = false;
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if outbox.buf.lock().bytes.capacity() <= KEEP_WHEN_IDLE {
                given_back = true;
                break;
            }
        }
        assert!(given_back, "capacity still {}", outbox.buf.lock().bytes.capacity());
        burst(&outbox);
        tokio::io::AsyncReadExt::read_exact(&mut server, &mut got)
            .await
            .expect("later burst arrives");
        assert!(got.iter().all(|&b| b == 7));
        outbox.close();
        writer.await.expect("writer task").expect("writer ends cleanly");
    }

    /// Flushes that write directly and the writer task that takes over when
    /// the socket is full share one socket: every byte arrives once, in the
    /// order appended, while the reader is slower than the writers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn direct_writes_and_the_writer_task_keep_the_order() {
        use crate::transport::shared_tcp::{SharedTcp, direct_socket};
        use tokio::io::AsyncReadExt;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        let mut client = client.unwrap();
        let accepted = accepted.unwrap().0;
        accepted.set_nodelay(true).unwrap();
        // A small send buffer, so that direct writes often find it full and
        // the writer task takes over. (A small receive buffer too would make
        // the kernel wait for its window probes.)
        socket2::SockRef::from(&accepted)
            .set_send_buffer_size(8 * 1024)
            .unwrap();
        let shared = SharedTcp::new(accepted);
        let direct = direct_socket(&shared);
        let (_rd, wr) = tokio::io::split(shared);
        let outbox = Arc::new(Outbox::default());
        let registry = Arc::new(crate::core::connections::ConnectionRegistry::default());
        let info = crate::core::connections::ConnectionInfo {
            id: 1,
            protocol: "test",
            user: "guest".into(),
            vhost: "/".into(),
            peer: addr,
            local: addr,
            auth_mechanism: "PLAIN".into(),
            client_properties: Default::default(),
            frame_max: 0,
            channel_max: 0,
            heartbeat: 0,
            tls: None,
        };
        let registration = registry.register(info, 0, Default::default()).unwrap();
        let entry = registration.entry.clone();
        let writer = outbox.spawn_writer(wr, None, entry.clone(), direct);

        // Two producers append numbered 8-byte records, flushing after each
        // small batch; each record says which producer wrote it.
        const PER_PRODUCER: u64 = 200_000;
        let producers: Vec<_> = (0..2u64)
            .map(|p| {
                let outbox = outbox.clone();
                tokio::spawn(async move {
                    for i in 0..PER_PRODUCER {
                        outbox.write(|b| b.extend_from_slice(&((p << 32) | i).to_be_bytes()));
                        if i % 64 == 63 {
                            outbox.flush();
                            if outbox.is_full() {
                                outbox.wait_for_space().await;
                            }
                            tokio::task::yield_now().await;
                        }
                    }
                    outbox.flush();
                })
            })
            .collect();
        let mut next = [0u64; 2];
        let mut buf = vec![0u8; 1024];
        let mut carry = Vec::new();
        while next.iter().any(|&n| n < PER_PRODUCER) {
            let n = client.read(&mut buf).await.unwrap();
            assert!(n > 0, "the socket closed early");
            carry.extend_from_slice(&buf[..n]);
            let whole = carry.len() / 8 * 8;
            for record in carry[..whole].chunks_exact(8) {
                let v = u64::from_be_bytes(record.try_into().unwrap());
                let (p, i) = ((v >> 32) as usize, v & 0xffff_ffff);
                assert_eq!(i, next[p], "producer {p}'s records out of order");
                next[p] += 1;
            }
            carry.drain(..whole);
        }
        for p in producers {
            p.await.unwrap();
        }
        outbox.close();
        writer.await.unwrap();
        assert_eq!(entry.send_oct.get(), 2 * PER_PRODUCER * 8);
    }
}
