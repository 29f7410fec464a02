//! The default exchange's route, remembered per publisher.
//!
//! A publisher to the default exchange usually sends message after message to
//! the same queue. Looking the queue up by name each time takes the vhost's
//! queue lock and hashes the name; [`DefaultRoute`] keeps the answer until the
//! routing key changes or any queue of the vhost is added or removed (the
//! vhost counts those changes, see [`crate::core::vhost::VHost::route_cached`]).

use std::sync::{Arc, Weak};

use super::queue::Queue;

/// One publisher's last default-exchange lookup: the routing key, the queue
/// of that name (or none), and the vhost's queue generation it was valid in.
/// Weak: a publisher's memory of a queue does not keep a deleted one alive.
#[derive(Debug, Default)]
pub struct DefaultRoute {
    generation: u64,
    key: String,
    queue: Option<Weak<Queue>>,
    valid: bool,
}

impl DefaultRoute {
    /// The remembered answer for `key` in queue generation `generation`:
    /// `Some(None)` when no queue had that name, `None` when the lookup has to
    /// be made again.
    pub(crate) fn get(&self, key: &str, generation: u64) -> Option<Option<Arc<Queue>>> {
        if !self.valid || self.generation != generation || self.key != key {
            return None;
        }
        match &self.queue {
            None => Some(None),
            // A queue gone since (its removal is a new generation, so this is
            // only a race with the removal): look again.
            Some(q) => q.upgrade().map(Some),
        }
    }

    /// Remembers the answer of a lookup of `key` made in `generation`.
    pub(crate) fn set(&mut self, key: &str, generation: u64, queue: Option<&Arc<Queue>>) {
        self.key.clear();
        self.key.push_str(key);
        self.generation = generation;
        self.queue = queue.map(Arc::downgrade);
        self.valid = true;
    }
}
