//! A consumer on a channel and the task that runs its queue's delivery.
//!
//! Delivery itself is the queue's ([`Queue::deliver_ready`]): under the queue lock
//! it hands messages round-robin to every consumer with capacity, and each
//! consumer writes deliver, header and body frames straight from the mapped
//! segment into its connection's outbox. A consumer's task only decides when to
//! run that: when woken by a publish, an ack, or the socket draining.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use tokio::sync::Notify;

use super::channel::ChannelShared;
use super::codec::{write_basic_deliver, write_body, write_header_raw};
use super::unacked::Unacked;
use crate::core::consumer::Consumer;
use crate::core::queue::Queue;
use crate::store::SegPos;
use crate::store::record::RecordView;
use crate::wire::properties::without_private_headers;

/// How basic.consume asked for a consumer.
#[derive(Debug, Clone, Copy)]
pub struct ConsumerSettings {
    /// Messages are acked on delivery.
    pub no_ack: bool,
    /// The only consumer of its queue.
    pub exclusive: bool,
    /// Consumer priority.
    pub priority: i32,
    /// Per-consumer prefetch (0 = unlimited).
    pub prefetch: u32,
}

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
    /// Per-consumer prefetch (0 = unlimited); the management API may change it.
    pub prefetch: AtomicU32,
    /// The only consumer of its queue.
    pub exclusive: bool,
    /// Deliveries not yet acked.
    pub unacked: AtomicU32,
    wake: Notify,
    /// Set by [`AmqpConsumer::spawn`], after basic.consume-ok is queued: the
    /// queue sees the consumer from `add_consumer` on, and a publisher's task
    /// must not deliver to it before the client has its consumer tag.
    started: AtomicBool,
    cancelled: AtomicBool,
    me: std::sync::Weak<AmqpConsumer>,
}

impl AmqpConsumer {
    /// Creates a consumer; start its task with [`AmqpConsumer::spawn`].
    pub fn new(
        id: u64,
        tag: String,
        channel: Arc<ChannelShared>,
        queue: Arc<Queue>,
        settings: ConsumerSettings,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| AmqpConsumer {
            id,
            tag,
            channel,
            queue,
            no_ack: settings.no_ack,
            priority: settings.priority,
            prefetch: AtomicU32::new(settings.prefetch),
            exclusive: settings.exclusive,
            unacked: AtomicU32::new(0),
            wake: Notify::new(),
            started: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            me: me.clone(),
        })
    }

    /// Starts deliveries: call it once basic.consume-ok is in the outbox.
    pub fn spawn(self: &Arc<Self>) {
        self.started.store(true, Ordering::Release);
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
        crate::transport::delivery_loop::run(&self.queue, &self.channel.outbox, &self.wake, &self.cancelled).await;
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
        if !self.started.load(Ordering::Acquire)
            || self.is_cancelled()
            || !self.channel.flow_active()
            || self.channel.outbox.is_full()
        {
            return false;
        }
        if self.no_ack {
            return true;
        }
        let prefetch = self.prefetch.load(Ordering::Relaxed);
        (prefetch == 0 || self.unacked.load(Ordering::Acquire) < prefetch) && self.channel.global_capacity()
    }

    fn waits_for_client(&self) -> bool {
        if !self.channel.outbox.is_full() || self.is_cancelled() || !self.channel.flow_active() {
            return false;
        }
        let prefetch = self.prefetch.load(Ordering::Relaxed);
        self.no_ack || prefetch == 0 || self.unacked.load(Ordering::Acquire) < prefetch
    }

    fn settles_on_delivery(&self) -> bool {
        self.no_ack
    }

    /// Counts the delivery in the channel's unacked total before it is made,
    /// refusing when a channel-wide prefetch is reached: consumers of the
    /// channel on other queues deliver in parallel.
    fn reserve(&self) -> bool {
        if self.no_ack {
            return true;
        }
        let limit = self.channel.global_prefetch.load(Ordering::Acquire);
        self.channel
            .global_unacked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (limit == 0 || n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    fn unreserve(&self) {
        if !self.no_ack {
            self.channel.global_unacked.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn deliver(&self, m: &RecordView<'_>, pos: SegPos, redelivered: bool) -> bool {
        let ch = self.channel.number;
        // An AMQP 1.0 message's original sections are not for 0-9-1.
        let stripped = without_private_headers(m.properties);
        let properties = stripped.as_deref().unwrap_or(m.properties);
        let mut unacked = self.channel.unacked.lock();
        let tag = unacked.next_tag();
        self.channel.outbox.write(|out| {
            let _ = write_basic_deliver(out, ch, &self.tag, tag, redelivered, m.exchange, m.routing_key);
            let _ = write_header_raw(out, ch, m.body.len() as u64, properties);
            write_body(out, ch, m.body, self.channel.frame_max);
        });
        let counters = &self.channel.counters;
        if redelivered {
            counters.redeliver.incr();
        }
        if self.no_ack {
            counters.deliver_no_ack.incr();
        } else {
            counters.deliver.incr();
            // The channel-wide count was taken by `reserve`.
            self.unacked.fetch_add(1, Ordering::AcqRel);
            let timeout = self.queue.consumer_timeout().or(self.channel.consumer_timeout);
            unacked.push(Unacked {
                tag,
                queue: self.queue.clone(),
                pos,
                consumer: self.me.upgrade(),
                delivered_at: crate::core::message::Message::coarse_now_ms(),
                timeout,
            });
        }
        if self.channel.outbox.is_full() {
            // This task must wait for the socket to drain and then resume delivery.
            self.wake.notify_one();
        }
        self.no_ack
    }

    fn flush(&self) {
        self.channel.outbox.flush();
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
