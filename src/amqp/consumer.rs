//! A consumer on a channel and the task that delivers to it.
//!
//! Each consumer pulls from its queue in batches: it locks the queue, takes up to a
//! batch of messages while it has prefetch capacity, writes deliver, header and body
//! frames straight from the mapped segment into the connection's outbox, and
//! releases the lock. It sleeps until the queue, an ack or the writer wakes it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use tokio::sync::Notify;

use super::channel::ChannelShared;
use super::codec::{write_basic_deliver, write_body, write_header_raw};
use super::outbox::HIGH_WATER;
use super::unacked::Unacked;
use crate::core::consumer::Consumer;
use crate::core::queue::Queue;

/// Messages delivered per queue lock acquisition.
const BATCH: usize = 256;

/// A consumer created by basic.consume.
pub struct AmqpConsumer {
    /// Broker-wide unique id.
    pub id: u64,
    /// Consumer tag.
    pub tag: String,
    /// Channel it belongs to.
    pub channel: Arc<ChannelShared>,
    /// Queue it consumes from.
    pub queue: Arc<Queue>,
    /// Messages are acked on delivery.
    pub no_ack: bool,
    /// Consumer priority.
    pub priority: i32,
    /// Per-consumer prefetch (0 = unlimited).
    pub prefetch: u32,
    /// Deliveries not yet acked.
    pub unacked: AtomicU32,
    wake: Notify,
    cancelled: AtomicBool,
}

enum Batch {
    Idle,
    More,
    OutboxFull,
}

impl AmqpConsumer {
    /// Creates a consumer; start its task with [`AmqpConsumer::spawn`].
    pub fn new(
        id: u64,
        tag: String,
        channel: Arc<ChannelShared>,
        queue: Arc<Queue>,
        no_ack: bool,
        priority: i32,
        prefetch: u32,
    ) -> Self {
        AmqpConsumer {
            id,
            tag,
            channel,
            queue,
            no_ack,
            priority,
            prefetch,
            unacked: AtomicU32::new(0),
            wake: Notify::new(),
            cancelled: AtomicBool::new(false),
        }
    }

    /// Starts the delivery task.
    pub fn spawn(self: &Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move { me.run().await });
    }

    /// Stops deliveries (cancel, channel close).
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// True after cancel.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Called when one of its deliveries was acked, rejected or requeued.
    pub fn settled(&self, n: u32) {
        self.unacked.fetch_sub(n, Ordering::AcqRel);
        self.wake.notify_one();
    }

    async fn run(self: Arc<Self>) {
        loop {
            if self.is_cancelled() || self.channel.outbox.is_closed() {
                return;
            }
            match self.deliver_batch() {
                Batch::Idle => self.wake.notified().await,
                Batch::More => tokio::task::yield_now().await,
                Batch::OutboxFull => self.channel.outbox.wait_for_space().await,
            }
        }
    }

    fn deliver_batch(self: &Arc<Self>) -> Batch {
        let mut q = self.queue.lock();
        if q.deleted || self.is_cancelled() {
            return Batch::Idle;
        }
        let ch = self.channel.number;
        let frame_max = self.channel.frame_max;
        let mut unacked = self.channel.unacked.lock();
        let mut out = self.channel.outbox.lock();
        let mut sent = 0;
        let result = loop {
            if sent == BATCH {
                break Batch::More;
            }
            if out.len() >= HIGH_WATER {
                break Batch::OutboxFull;
            }
            if !self.has_capacity() {
                if q.store.ready_count() > 0 {
                    q.notify_others(self.id);
                }
                break Batch::Idle;
            }
            if q.outranked(self.id, self.priority) {
                break Batch::Idle;
            }
            let Some((pos, redelivered)) = q.store.shift() else {
                break Batch::Idle;
            };
            let tag = unacked.next_tag();
            match q.store.read_at(pos) {
                Some(m) => {
                    let _ = write_basic_deliver(&mut out, ch, &self.tag, tag, redelivered, m.exchange, m.routing_key);
                    let _ = write_header_raw(&mut out, ch, m.body.len() as u64, m.properties);
                    write_body(&mut out, ch, m.body, frame_max);
                }
                None => {
                    tracing::error!(queue = %self.queue.name, "unreadable message at {pos:?} dropped");
                    let _ = q.store.ack(pos);
                    continue;
                }
            }
            sent += 1;
            if self.no_ack {
                if let Err(e) = q.store.ack(pos) {
                    tracing::error!(queue = %self.queue.name, "cannot record ack: {e}");
                }
            } else {
                q.unacked += 1;
                self.unacked.fetch_add(1, Ordering::AcqRel);
                self.channel.global_unacked.fetch_add(1, Ordering::AcqRel);
                unacked.push(Unacked {
                    tag,
                    queue: self.queue.clone(),
                    pos,
                    consumer: Some(self.clone()),
                });
            }
        };
        drop(out);
        drop(unacked);
        drop(q);
        if sent > 0 {
            self.channel.outbox.flush();
        }
        result
    }
}

impl Consumer for AmqpConsumer {
    fn tag(&self) -> &str {
        &self.tag
    }

    fn priority(&self) -> i32 {
        self.priority
    }

    fn has_capacity(&self) -> bool {
        if self.is_cancelled() || !self.channel.flow_active() {
            return false;
        }
        if self.no_ack {
            return true;
        }
        (self.prefetch == 0 || self.unacked.load(Ordering::Acquire) < self.prefetch) && self.channel.global_capacity()
    }

    fn notify(&self) {
        self.wake.notify_one();
    }

    fn queue_deleted(&self) {
        self.cancel();
        self.channel.server_cancel(&self.tag);
    }

    fn id(&self) -> u64 {
        self.id
    }
}
