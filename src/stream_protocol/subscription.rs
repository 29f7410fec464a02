//! A subscription: a consumer of a stream queue that sends what it reads
//! in chunks, one chunk per unit of credit the client granted, each message
//! encoded as AMQP 1.0 as the stream clients expect. Deliveries are settled
//! when sent: a subscriber acknowledges nothing, it stores its offset.
//! Messages published in a frame of plain messages arrive already encoded,
//! as a chunk made at publish time (see [`crate::core::stream_runs`]), and
//! go out as they are.
//!
//! No deliver frame is larger than the frame size the client tuned: a chunk
//! is closed before an entry that would take it past that size. A message
//! too large for a frame on its own is sent anyway, alone in its chunk, as
//! RabbitMQ sends its chunks whatever their size (it closed the connection
//! instead for a while, rabbitmq-server#17083, and reverted that in #17152).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::codec::chunk::{
    ChunkWriter, FRAME_OVERHEAD, JoinedChunks, can_join, chunk_data, chunk_data_len, chunk_entries,
};
use super::codec::{code, reply};
use super::publisher::{body_with_filter_value, original_payload};
use crate::core::consumer::Consumer;
use crate::core::queue::Queue;
use crate::core::stream::{ConsumerOptions, StartAt, pos_offset};
use crate::core::stream_clients::ConsumerStats;
use crate::core::stream_groups::GroupMember;
use crate::core::stream_runs::EncodedRun;
use crate::core::vhost::VHost;
use crate::store::SegPos;
use crate::store::record::RecordView;
use crate::transport::outbox::Outbox;
use crate::wire::BasicProperties;
use crate::wire::properties::delivery_mode_only;

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
    /// Where in `out` the last chunk starts when it was begun without a
    /// credit (a gap in the offsets, or an entry that did not fit the
    /// frame size), with none left: it is held back, and nothing more is
    /// delivered, until the client grants one.
    unpaid: Option<usize>,
}

/// A subscription in a single active consumer group: it reads only while
/// active, from where the client's answer to the consumer update says.
pub struct SingleActive {
    /// The group's (consumer) name.
    pub name: String,
    /// The stream's index among its super stream's partitions.
    pub partition: Option<usize>,
    /// Filter and options; the start comes with each activation.
    pub opts: ConsumerOptions,
    /// Correlation ids of the broker's requests on this connection.
    pub correlations: Arc<AtomicU32>,
    /// The consumer update whose answer starts deliveries.
    pending: Mutex<Option<u32>>,
    /// Attached to the queue (active and answered).
    attached: AtomicBool,
}

impl SingleActive {
    /// Group membership for a subscription named `name`.
    pub fn new(name: String, partition: Option<usize>, opts: ConsumerOptions, correlations: Arc<AtomicU32>) -> Self {
        SingleActive {
            name,
            partition,
            opts,
            correlations,
            pending: Mutex::new(None),
            attached: AtomicBool::new(false),
        }
    }
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
    /// Most bytes of entries in a chunk, so that its deliver frame stays
    /// within the frame size the client tuned.
    max_data: usize,
    sending: Mutex<Sending>,
    /// Whether `sending` has credit or room in its open chunk, kept beside
    /// it so that the queue's many capacity checks take no lock.
    can_take: AtomicBool,
    wake: Notify,
    cancelled: AtomicBool,
    spawned: AtomicBool,
    /// Its listing and counters in the management API.
    pub stats: Arc<ConsumerStats>,
    /// Set for a single active consumer.
    pub single_active: Option<SingleActive>,
    vhost: Arc<VHost>,
}

impl Subscription {
    /// A subscription with `credit` chunks granted, on a connection whose
    /// frames are at most `frame_max` bytes (0: no limit); start it with
    /// [`Subscription::spawn`] after adding it to the queue.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: u64,
        subscription_id: u8,
        tag: String,
        queue: Arc<Queue>,
        vhost: Arc<VHost>,
        outbox: Arc<Outbox>,
        frame_max: u32,
        credit: u16,
        single_active: Option<SingleActive>,
        stats: Arc<ConsumerStats>,
    ) -> Arc<Self> {
        stats.credits.store(u64::from(credit), Ordering::Relaxed);
        Arc::new(Subscription {
            id,
            subscription_id,
            tag,
            queue,
            outbox,
            max_data: match frame_max {
                0 => usize::MAX,
                n => (n as usize).saturating_sub(FRAME_OVERHEAD),
            },
            sending: Mutex::new(Sending {
                credit: u32::from(credit),
                ..Sending::default()
            }),
            can_take: AtomicBool::new(credit > 0),
            wake: Notify::new(),
            cancelled: AtomicBool::new(false),
            spawned: AtomicBool::new(false),
            stats,
            single_active,
            vhost,
        })
    }

    /// Starts the task that runs the queue's delivery for it (once).
    pub fn spawn(self: &Arc<Self>) {
        if self.spawned.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            crate::transport::delivery_loop::run(&me.queue, &me.outbox, &me.wake, &me.cancelled).await;
        });
    }

    /// Adds credit (chunks) and wakes deliveries; a chunk held back for
    /// want of credit takes the first and goes out.
    pub fn grant(&self, credit: u16) {
        let mut sent = false;
        {
            let mut s = self.sending.lock();
            s.credit = s.credit.saturating_add(u32::from(credit));
            if s.unpaid.is_some() && s.credit > 0 {
                s.credit -= 1;
                s.unpaid = None;
                // An open chunk goes out with the flush that follows its
                // delivery; a complete one goes now.
                if s.chunk.is_none() && !s.out.is_empty() {
                    self.outbox.write(|b| b.extend_from_slice(&s.out));
                    s.out.clear();
                    sent = true;
                }
            }
            self.mirror(&s);
        }
        if sent {
            self.outbox.flush();
        }
        self.wake.notify_one();
    }

    /// Stops deliveries and leaves the queue (and its group, whose next
    /// member takes over).
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        self.wake.notify_one();
        self.queue.detach_consumer(self.id);
        self.leave_group();
    }

    fn leave_group(&self) {
        if let Some(sa) = &self.single_active {
            self.vhost.stream_groups.leave(&self.queue.name, &sa.name, self.id);
        }
    }

    /// Joins its single active consumer group, if it has one.
    pub fn join_group(self: &Arc<Self>) {
        if let Some(sa) = &self.single_active {
            let member: Arc<dyn GroupMember> = self.clone();
            self.vhost
                .stream_groups
                .join(&self.queue.name, &sa.name, sa.partition, self.id, member);
        }
    }

    /// The client answered consumer update `correlation_id`: true when it
    /// was this subscription's activation, which now starts reading from
    /// `start` (the options' start when the client named none).
    pub fn activated(self: &Arc<Self>, correlation_id: u32, start: Option<StartAt>) -> bool {
        let Some(sa) = &self.single_active else {
            return false;
        };
        {
            let mut pending = sa.pending.lock();
            if *pending != Some(correlation_id) {
                return false;
            }
            *pending = None;
        }
        if self.is_cancelled() || sa.attached.swap(true, Ordering::AcqRel) {
            return true;
        }
        let mut opts = sa.opts.clone();
        if start.is_some() {
            opts.start = start;
        }
        if let Err(e) = self.queue.add_stream_consumer(self.clone(), false, &opts) {
            // Its stream is gone: the client learns it, the group forgets it.
            tracing::info!("activating a single active consumer failed: {e}");
            sa.attached.store(false, Ordering::Release);
            self.leave_group();
            self.stream_deleted();
            return true;
        }
        self.spawn();
        true
    }

    /// True once it stopped (unsubscribed, or its stream was deleted).
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Updates [`Subscription::can_take`] and the credit the management API
    /// shows after a change to `s`.
    fn mirror(&self, s: &Sending) {
        self.can_take
            .store(s.credit > 0 || self.chunk_has_room(s), Ordering::Release);
        self.stats.credits.store(u64::from(s.credit), Ordering::Relaxed);
    }

    /// Room in the open chunk for one more message, unless that message
    /// takes it past the frame size (it then moves to a chunk of its own).
    fn chunk_has_room(&self, s: &Sending) -> bool {
        s.unpaid.is_none()
            && s.chunk.as_ref().is_some_and(|c| {
                let data = c.data_len(&s.out);
                c.entries() < CHUNK_ENTRIES && data < CHUNK_BYTES && data < self.max_data
            })
    }

    /// Pays for a chunk begun at `frame` in `out` that no reservation paid
    /// for, or holds it back until the client grants a credit.
    fn pay_unreserved(s: &mut Sending, frame: usize) {
        match s.credit {
            0 => s.unpaid = Some(frame),
            _ => s.credit -= 1,
        }
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
        self.can_take.load(Ordering::Acquire)
    }

    fn waits_for_client(&self) -> bool {
        !self.is_cancelled() && self.outbox.is_full()
    }

    fn reserve(&self) -> bool {
        let mut s = self.sending.lock();
        if self.chunk_has_room(&s) {
            s.took_credit = false;
            return true;
        }
        if s.credit == 0 {
            return false;
        }
        s.credit -= 1;
        s.took_credit = true;
        self.mirror(&s);
        true
    }

    fn unreserve(&self) {
        let mut s = self.sending.lock();
        if std::mem::take(&mut s.took_credit) {
            s.credit += 1;
            self.mirror(&s);
        }
    }

    fn wants_offset_header(&self) -> bool {
        false
    }

    fn deliver(&self, m: &RecordView<'_>, pos: SegPos, _redelivered: bool) -> bool {
        let offset = pos_offset(pos);
        // A message that is only a body, as stream clients publish most,
        // goes back as they sent it: one data section, nothing decoded. One
        // they published with more sections, or not as AMQP 1.0, goes back
        // as the bytes they sent (kept in a header, see
        // `publisher::PAYLOAD_HEADER`); others are encoded from what is stored.
        let mut plain = m.properties == delivery_mode_only(2) && m.exchange.is_empty();
        let props = match plain {
            true => BasicProperties::default(),
            false => BasicProperties::decode(&mut Bytes::copy_from_slice(m.properties)).unwrap_or_default(),
        };
        let published = original_payload(&props);
        plain |= published.is_none() && m.exchange.is_empty() && body_with_filter_value(&props);
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
            let c = ChunkWriter::begin(&mut s.out, self.subscription_id, offset, m.timestamp);
            if !s.took_credit {
                // The gap needs a chunk the reservation did not pay for.
                Self::pay_unreserved(s, c.frame_start());
            }
            s.chunk = Some(c);
        }
        s.took_credit = false;
        if let Sending {
            chunk: Some(c), out, ..
        } = s
        {
            c.begin_entry(out);
            if let Some(payload) = published {
                out.extend_from_slice(payload);
            } else if plain {
                crate::amqp1::message::write_data_section(out, m.body);
            } else {
                crate::amqp1::message::write_stored(out, m.exchange, m.routing_key, &props, m.body, false);
            }
            c.end_entry(out);
        }
        // The entry's size is known once written: one that takes the frame
        // past the client's frame size moves to a chunk of its own (a copy,
        // at most once per chunk), so the chunk ends before it. Alone, it is
        // sent whatever its size (see the module's notes).
        let overflows = s
            .chunk
            .as_ref()
            .is_some_and(|c| c.entries() > 1 && c.data_len(&s.out) > self.max_data);
        if overflows && let Some(c) = s.chunk.take() {
            let c = c.split_before_last(&mut s.out, self.subscription_id, m.timestamp);
            Self::pay_unreserved(s, c.frame_start());
            s.chunk = Some(c);
        }
        if !self.chunk_has_room(s) {
            Self::finish_chunk(s);
        }
        self.mirror(s);
        drop(guard);
        self.stats.consumed.fetch_add(1, Ordering::Relaxed);
        self.stats.offset.store(offset, Ordering::Relaxed);
        true
    }

    fn takes_runs(&self) -> bool {
        true
    }

    /// A run is a chunk made when its messages were published. Runs join
    /// the chunk being filled when they follow it (no credit needed), or
    /// go out as they are, joined into one chunk, for one credit; either
    /// way up to the usual chunk size.
    fn deliver_runs(&self, runs: &mut dyn Iterator<Item = &EncodedRun>) -> usize {
        let mut runs = runs.peekable();
        let Some(first) = runs.peek().copied() else { return 0 };
        let limit = self.max_data.min(CHUNK_BYTES);
        let mut guard = self.sending.lock();
        let s = &mut *guard;
        if s.unpaid.is_some() {
            return 0;
        }
        let (mut taken, mut count) = (0, 0u64);
        if let Sending {
            chunk: Some(c), out, ..
        } = s
            && c.next_offset() == first.first_offset
        {
            while let Some(run) = runs.next_if(|r| can_join(c.entries(), c.data_len(out), &r.encoded, limit)) {
                c.append_entries(out, chunk_data(&run.encoded), chunk_entries(&run.encoded));
                (taken, count) = (taken + 1, count + u64::from(run.count));
            }
            if taken > 0 && !self.chunk_has_room(s) {
                Self::finish_chunk(s);
            }
        }
        if taken == 0 {
            if s.credit == 0 || chunk_data_len(&first.encoded) > self.max_data {
                return 0;
            }
            Self::finish_chunk(s);
            s.credit -= 1;
            let mut joined = JoinedChunks::begin(&mut s.out, self.subscription_id, &first.encoded);
            runs.next();
            (taken, count) = (1, u64::from(first.count));
            while let Some(run) = runs.next_if(|r| joined.fits(&r.encoded, limit)) {
                joined.add(&mut s.out, &run.encoded);
                (taken, count) = (taken + 1, count + u64::from(run.count));
            }
            joined.finish(&mut s.out);
        }
        self.mirror(s);
        drop(guard);
        self.stats.consumed.fetch_add(count, Ordering::Relaxed);
        self.stats
            .offset
            .store(first.first_offset + count - 1, Ordering::Relaxed);
        taken
    }

    /// Sends the chunks, all but one held back for want of credit. They
    /// go to the outbox under the lock, so that they keep their order
    /// whichever thread flushes or grants.
    fn flush(&self) {
        {
            let mut s = self.sending.lock();
            Self::finish_chunk(&mut s);
            let ready = s.unpaid.unwrap_or(s.out.len());
            if ready > 0 {
                self.outbox.write(|b| b.extend_from_slice(&s.out[..ready]));
                if ready == s.out.len() {
                    s.out.clear();
                    s.unpaid = None;
                } else {
                    bytes::Buf::advance(&mut s.out, ready);
                    s.unpaid = Some(0);
                }
            }
            self.mirror(&s);
            if ready == 0 {
                return;
            }
        }
        self.outbox.flush();
    }

    fn notify(&self) {
        self.wake.notify_one();
    }

    /// The client learns of it as RabbitMQ tells it: a metadata update
    /// saying the stream is no longer available.
    /// Its group is dropped with the stream (no other member is made
    /// active for a stream that is gone).
    fn queue_deleted(&self) {
        GroupMember::stream_deleted(self);
    }

    fn id(&self) -> u64 {
        self.id
    }
}

impl GroupMember for Subscription {
    /// Tells the client with a consumer update; an activation starts
    /// deliveries once the client answers it with the offset to read from.
    fn set_active(&self, active: bool) {
        let Some(sa) = &self.single_active else {
            return;
        };
        if self.is_cancelled() {
            return;
        }
        self.stats.active.store(active, Ordering::Relaxed);
        if !active && sa.attached.swap(false, Ordering::AcqRel) {
            self.queue.detach_consumer(self.id);
        }
        let correlation_id = sa.correlations.fetch_add(1, Ordering::Relaxed);
        *sa.pending.lock() = active.then_some(correlation_id);
        self.outbox
            .send(|b| reply::consumer_update(b, correlation_id, self.subscription_id, active));
    }

    /// Told as RabbitMQ tells it: a metadata update, once.
    fn stream_deleted(&self) {
        if self.cancelled.swap(true, Ordering::AcqRel) {
            return;
        }
        self.wake.notify_one();
        self.outbox
            .send(|b| reply::metadata_update(b, code::STREAM_NOT_AVAILABLE, &self.queue.name));
    }
}
