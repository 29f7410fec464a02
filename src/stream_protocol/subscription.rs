//! A subscription: a consumer of a stream queue that sends what it reads
//! in chunks, one chunk per unit of credit the client granted, each message
//! encoded as AMQP 1.0 as the stream clients expect. Deliveries are settled
//! when sent: a subscriber acknowledges nothing, it stores its offset.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::codec::chunk::ChunkWriter;
use super::codec::{code, reply};
use crate::core::consumer::Consumer;
use crate::core::queue::Queue;
use crate::core::stream::pos_offset;
use crate::store::SegPos;
use crate::store::record::RecordView;
use crate::transport::outbox::Outbox;
use crate::wire::BasicProperties;

/// Most messages in one chunk.
const CHUNK_ENTRIES: u16 = 512;
/// A chunk is closed once its data reaches this size.
const CHUNK_BYTES: usize = 512 * 1024;

/// What deliveries change, under one lock.
#[derive(Default)]
struct Sending {
    /// Chunks the client will still take.
    credit: u32,
    /// The chunk being filled.
    chunk: Option<ChunkWriter>,
    /// Finished (and the open) chunks, moved to the outbox on flush.
    out: BytesMut,
    /// The last `reserve()` took a credit for a new chunk.
    took_credit: bool,
}

/// A stream-protocol subscription.
pub struct Subscription {
    /// Broker-wide consumer id.
    pub id: u64,
    /// The client's id for the subscription.
    pub subscription_id: u8,
    /// The consumer tag shown in the management API.
    pub tag: String,
    /// The stream it reads.
    pub queue: Arc<Queue>,
    outbox: Arc<Outbox>,
    sending: Mutex<Sending>,
    wake: Notify,
    cancelled: AtomicBool,
}

impl Subscription {
    /// A subscription with `credit` chunks granted; start it with
    /// [`Subscription::spawn`] after adding it to the queue.
    pub fn new(
        id: u64,
        subscription_id: u8,
        tag: String,
        queue: Arc<Queue>,
        outbox: Arc<Outbox>,
        credit: u16,
    ) -> Arc<Self> {
        Arc::new(Subscription {
            id,
            subscription_id,
            tag,
            queue,
            outbox,
            sending: Mutex::new(Sending {
                credit: u32::from(credit),
                ..Sending::default()
            }),
            wake: Notify::new(),
            cancelled: AtomicBool::new(false),
        })
    }

    /// Starts the task that runs the queue's delivery for it.
    pub fn spawn(self: &Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move {
            crate::transport::delivery_loop::run(&me.queue, &me.outbox, &me.wake, &me.cancelled).await;
        });
    }

    /// Adds credit (chunks) and wakes deliveries.
    pub fn grant(&self, credit: u16) {
        {
            let mut s = self.sending.lock();
            s.credit = s.credit.saturating_add(u32::from(credit));
        }
        self.wake.notify_one();
    }

    /// Stops deliveries and leaves the queue.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        self.wake.notify_one();
        self.queue.detach_consumer(self.id);
    }

    /// True once it stopped (unsubscribed, or its stream was deleted).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Room in the open chunk for one more message.
    fn chunk_has_room(s: &Sending) -> bool {
        s.chunk
            .as_ref()
            .is_some_and(|c| c.entries() < CHUNK_ENTRIES && c.data_len(&s.out) < CHUNK_BYTES)
    }

    /// Closes the open chunk, if any.
    fn finish_chunk(s: &mut Sending) {
        if let Some(c) = s.chunk.take() {
            let Sending { out, .. } = s;
            if c.entries() == 0 {
                c.abandon(out);
            } else {
                c.finish(out);
            }
        }
    }
}

impl Consumer for Subscription {
    fn tag(&self) -> &str {
        &self.tag
    }

    fn priority(&self) -> i32 {
        0
    }

    fn has_capacity(&self) -> bool {
        if self.is_cancelled() || self.outbox.is_full() {
            return false;
        }
        let s = self.sending.lock();
        s.credit > 0 || Self::chunk_has_room(&s)
    }

    fn waits_for_client(&self) -> bool {
        !self.is_cancelled() && self.outbox.is_full()
    }

    fn reserve(&self) -> bool {
        let mut s = self.sending.lock();
        if Self::chunk_has_room(&s) {
            s.took_credit = false;
            return true;
        }
        if s.credit == 0 {
            return false;
        }
        s.credit -= 1;
        s.took_credit = true;
        true
    }

    fn unreserve(&self) {
        let mut s = self.sending.lock();
        if std::mem::take(&mut s.took_credit) {
            s.credit += 1;
        }
    }

    fn wants_offset_header(&self) -> bool {
        false
    }

    fn deliver(&self, m: &RecordView<'_>, pos: SegPos, _redelivered: bool) -> bool {
        let offset = pos_offset(pos);
        let props = BasicProperties::decode(&mut Bytes::copy_from_slice(m.properties)).unwrap_or_default();
        let mut guard = self.sending.lock();
        let s = &mut *guard;
        // A chunk holds consecutive offsets only: a gap (filtered messages)
        // starts a new one.
        let fits = s
            .chunk
            .as_ref()
            .is_some_and(|c| c.next_offset() == offset && !s.took_credit);
        if !fits {
            Self::finish_chunk(s);
            if !s.took_credit {
                // The gap needs a chunk the reservation did not pay for.
                s.credit = s.credit.saturating_sub(1);
            }
            s.chunk = Some(ChunkWriter::begin(
                &mut s.out,
                self.subscription_id,
                offset,
                m.timestamp,
            ));
        }
        s.took_credit = false;
        let Sending { chunk, out, .. } = s;
        if let Some(c) = chunk.as_mut() {
            c.begin_entry(out);
            crate::amqp1::message::write_stored(out, m.exchange, m.routing_key, &props, m.body, false);
            c.end_entry(out);
        }
        if !Self::chunk_has_room(s) {
            Self::finish_chunk(s);
        }
        true
    }

    fn flush(&self) {
        let out = {
            let mut s = self.sending.lock();
            Self::finish_chunk(&mut s);
            if s.out.is_empty() {
                return;
            }
            s.out.split()
        };
        self.outbox.write(|b| b.extend_from_slice(&out));
        self.outbox.flush();
    }

    fn notify(&self) {
        self.wake.notify_one();
    }

    /// The client learns of it as RabbitMQ tells it: a metadata update
    /// saying the stream is no longer available.
    fn queue_deleted(&self) {
        self.cancelled.store(true, Ordering::Release);
        self.wake.notify_one();
        self.outbox
            .send(|b| reply::metadata_update(b, code::STREAM_NOT_AVAILABLE, &self.queue.name));
    }

    fn id(&self) -> u64 {
        self.id
    }
}
