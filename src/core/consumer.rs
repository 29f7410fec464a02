//! What a queue needs to know about whoever consumes from it. Protocol adapters
//! implement this; the queue never learns how messages reach the client.

use crate::store::SegPos;
use crate::store::record::RecordView;

/// A consumer attached to a queue.
pub trait Consumer: Send + Sync {
    /// The consumer tag, unique per channel.
    fn tag(&self) -> &str;
    /// Consumer priority (`x-priority`); higher goes first while it has capacity.
    fn priority(&self) -> i32;
    /// True while the consumer may take another message (prefetch, flow, a full
    /// socket buffer). Called under the queue lock: must not lock the queue.
    fn has_capacity(&self) -> bool;
    /// True when the consumer would take more messages (no prefetch limit or
    /// acknowledgement holds it back) but what it was sent waits for its
    /// client to read it. Queues whose every consumer is in this state pace
    /// their publishers (see [`crate::core::queue::Queue::deliver_or_wake`]).
    /// Called under the queue lock.
    fn waits_for_client(&self) -> bool {
        false
    }
    /// True when every message this consumer takes is settled by the taking
    /// (no-ack AMQP consumers, pre-settled AMQP 1.0 links): its `deliver`
    /// always returns true and ignores the position. Fixed for the
    /// consumer's life. A queue whose consumers all settle on delivery hands
    /// a publisher's message over without storing it when nothing waits
    /// before it.
    fn settles_on_delivery(&self) -> bool {
        false
    }
    /// Takes a delivery slot just before [`Consumer::deliver`]. Consumers of
    /// different queues can share a limit (AMQP's channel-wide prefetch), and
    /// their queues deliver in parallel: `has_capacity()` is only a look, so
    /// both could see the last free slot. False when the slot is gone;
    /// [`Consumer::unreserve`] gives it back when no message follows.
    fn reserve(&self) -> bool {
        true
    }
    /// Returns a slot taken by [`Consumer::reserve`] that no delivery used.
    fn unreserve(&self) {}
    /// True when stream messages should carry their offset in an
    /// `x-stream-offset` header (AMQP consumers); protocols that carry the
    /// offset otherwise skip the re-encoding.
    fn wants_offset_header(&self) -> bool {
        true
    }
    /// True when it takes stream messages as runs (see
    /// [`crate::core::stream_runs`]) through [`Consumer::deliver_runs`]: a
    /// stream keeps runs only while it has such a consumer.
    fn takes_runs(&self) -> bool {
        false
    }
    /// Takes runs of stream messages, encoded when they were published, as
    /// one delivery settled by the taking: as many of `runs` (which follow
    /// one another without a gap) as it wants, from the first on. Returns
    /// how many it took; 0 when it cannot now (it then gets the messages one
    /// by one). Called under the queue lock, without `reserve()`, only when
    /// it reads the first run's first offset next and filters nothing.
    fn deliver_runs(&self, runs: &mut dyn Iterator<Item = &crate::core::stream_runs::EncodedRun>) -> usize {
        let _ = runs;
        0
    }
    /// Hands a stored message to the consumer. Called under the queue lock, only
    /// after `reserve()` succeeded; the consumer buffers it for sending.
    /// Returns true when the message is settled by the delivery itself (no-ack
    /// consumers, MQTT QoS 0): no ack will come for it.
    fn deliver(&self, msg: &RecordView<'_>, pos: SegPos, redelivered: bool) -> bool;
    /// Sends what `deliver` buffered; called after the queue lock is released.
    fn flush(&self);
    /// Messages may be available: the consumer should run the queue's delivery.
    fn notify(&self);
    /// The queue was deleted under the consumer.
    fn queue_deleted(&self);
    /// Identity of the consumer, to find it again among the queue's consumers.
    fn id(&self) -> u64;
}
