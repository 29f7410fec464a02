//! What a queue needs to know about whoever consumes from it. Protocol adapters
//! implement this; the queue never learns how messages reach the client.

/// A consumer attached to a queue.
pub trait Consumer: Send + Sync {
    /// The consumer tag, unique per channel.
    fn tag(&self) -> &str;
    /// Consumer priority (`x-priority`); higher goes first while it has capacity.
    fn priority(&self) -> i32;
    /// True while the consumer may take another message (prefetch, flow).
    fn has_capacity(&self) -> bool;
    /// Messages may be available: the consumer should pull.
    fn notify(&self);
    /// The queue was deleted under the consumer.
    fn queue_deleted(&self);
    /// Identity of the consumer, to find it again among the queue's consumers.
    fn id(&self) -> u64;
}
