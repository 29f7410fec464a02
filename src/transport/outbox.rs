//! The outgoing side of a connection, whatever its protocol: one buffer that the
//! connection task and every consumer task append frames (or packets) to, and one
//! writer task that moves whatever has accumulated to the socket in a single
//! write. Many frames ride on one syscall.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

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

/// Frames waiting to be written to one connection's socket.
pub struct Outbox {
    buf: Mutex<BytesMut>,
    wake_writer: Notify,
    drained: Notify,
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
            buf: Mutex::new(BytesMut::new()),
            wake_writer: Notify::new(),
            drained: Notify::new(),
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
        let mut buf = self.buf.lock();
        f(&mut buf);
        self.buffered.store(buf.len(), Ordering::Release);
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

    /// Wakes the writer so that it sends what is buffered.
    pub fn flush(&self) {
        self.wake_writer.notify_one();
    }

    /// True once the connection is gone; producers should stop.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Marks the connection gone and wakes everyone waiting on it.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake_writer.notify_one();
        self.drained.notify_waiters();
    }

    /// Completes once the connection is gone (the writer failed or someone
    /// closed the outbox).
    pub async fn closed(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.is_closed() {
                return;
            }
            drained.await;
        }
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
    /// closes the outbox when it ends.
    pub fn spawn_writer<W>(
        self: &Arc<Self>,
        sink: W,
        heartbeat: Option<Heartbeat>,
        entry: Arc<ConnectionEntry>,
    ) -> tokio::task::JoinHandle<()>
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
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
                let mut buf = self.buf.lock();
                std::mem::swap(&mut *buf, &mut spare);
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
                        write_heartbeat(&mut self.buf.lock());
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
        let mut buf = self.buf.lock();
        if buf.is_empty() && buf.capacity() > KEEP_WHEN_IDLE {
            *buf = BytesMut::new();
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
            if outbox.buf.lock().capacity() <= KEEP_WHEN_IDLE {
                given_back = true;
                break;
            }
        }
        assert!(given_back, "capacity still {}", outbox.buf.lock().capacity());
        burst(&outbox);
        tokio::io::AsyncReadExt::read_exact(&mut server, &mut got)
            .await
            .expect("later burst arrives");
        assert!(got.iter().all(|&b| b == 7));
        outbox.close();
        writer.await.expect("writer task").expect("writer ends cleanly");
    }
}
