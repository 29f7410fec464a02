//! A publisher's last route, remembered.
//!
//! A publisher usually sends message after message with the same routing key
//! to the same exchange. Routing each one again takes the exchange's binding
//! lock and walks its index (for the default exchange: the vhost's queue lock
//! and a hash of the name). [`RouteCache`] keeps the queues of the last route
//! until the routing key or exchange changes or what the route was computed
//! from changes: the exchange's bindings (and alternate exchange), counted by
//! [`crate::core::exchange::Exchange::route_generation`], or for the default
//! exchange the vhost's queues, counted by the vhost (see
//! [`crate::core::vhost::VHost::route_cached`]).
//!
//! Generations are drawn from one process-wide counter, so the pair of an
//! exchange's address and its generation never repeats, even when a deleted
//! exchange's memory is reused for a new one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use smallvec::SmallVec;

use super::queue::Queue;
use crate::wire::shortstr::same_bytes;

/// The source of generations for everything a route is computed from.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

/// A generation no route was computed in before: for a change of bindings,
/// queues or alternate exchange.
pub(crate) fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, Ordering::Relaxed)
}

/// One publisher's last route: where it was looked up (`source`: an
/// exchange's address, 0 for the default exchange), the routing key, the
/// generation it was valid in, and the queues it reached (possibly none).
/// Weak: a publisher's memory of a queue does not keep a deleted one alive.
#[derive(Debug, Default)]
pub struct RouteCache {
    source: usize,
    generation: u64,
    key: String,
    queues: SmallVec<[Weak<Queue>; 2]>,
    valid: bool,
}

impl RouteCache {
    /// Appends the remembered queues of `key` from `source` in `generation`
    /// to `out`; false (with `out` unchanged) when the route has to be
    /// computed again.
    pub(crate) fn get(&self, source: usize, key: &str, generation: u64, out: &mut Vec<Arc<Queue>>) -> bool {
        // `same_bytes`: a fanout publish's key is empty, and comparing empty
        // strings with `memcmp` stalls (see its doc).
        if !self.valid
            || self.source != source
            || self.generation != generation
            || !same_bytes(self.key.as_bytes(), key.as_bytes())
        {
            return false;
        }
        let before = out.len();
        for q in &self.queues {
            match q.upgrade() {
                Some(q) => out.push(q),
                // A queue gone since (its removal is a new generation, so this
                // is only a race with the removal): route again.
                None => {
                    out.truncate(before);
                    return false;
                }
            }
        }
        true
    }

    /// Remembers that `key` from `source` reached `queues` in `generation`.
    pub(crate) fn set(&mut self, source: usize, key: &str, generation: u64, queues: &[Arc<Queue>]) {
        self.key.clear();
        self.key.push_str(key);
        self.source = source;
        self.generation = generation;
        self.queues.clear();
        self.queues.extend(queues.iter().map(Arc::downgrade));
        self.valid = true;
    }
}
