//! Queues: an ordered message store plus the consumers attached to it.
//!
//! The state sits behind one mutex that is never held across an `.await`: publishers
//! append under it, and consumers pull from it in batches.

use std::path::Path;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::consumer::Consumer;
use super::message::Message;
use super::{Error, FieldTable, Result};
use crate::store::{MessageStore, SegPos};

/// Messages delivered per acquisition of the queue lock.
const DELIVERY_BATCH: usize = 256;

/// Identity of the connection that owns an exclusive queue.
pub type ConnectionId = u64;

/// A declared queue.
pub struct Queue {
    /// Queue name.
    pub name: String,
    /// Name of the vhost it lives in.
    pub vhost: String,
    /// Survives a restart.
    pub durable: bool,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// The owning connection of an exclusive queue.
    pub exclusive_owner: Option<ConnectionId>,
    /// Declaration arguments.
    pub arguments: FieldTable,
    state: Mutex<QueueState>,
}

/// The mutable part of a queue.
pub struct QueueState {
    /// Messages on disk.
    pub store: MessageStore,
    consumers: Vec<Arc<dyn Consumer>>,
    next_consumer: usize,
    exclusive_consumer: bool,
    had_consumers: bool,
    /// Delivered, not yet acknowledged messages.
    pub unacked: u64,
    /// Set once the queue is deleted; nothing may be added after that.
    pub deleted: bool,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.name)
            .field("vhost", &self.vhost)
            .finish()
    }
}

impl Queue {
    /// Opens a queue whose messages live in `dir` (recovered if present).
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        name: &str,
        vhost: &str,
        durable: bool,
        auto_delete: bool,
        exclusive_owner: Option<ConnectionId>,
        arguments: FieldTable,
        dir: &Path,
        segment_size: u64,
    ) -> Result<Self> {
        let store = MessageStore::open(dir, name, segment_size)
            .map_err(|e| Error::Internal(format!("cannot open queue '{name}' at {}: {e}", dir.display())))?;
        Ok(Queue {
            name: name.to_string(),
            vhost: vhost.to_string(),
            durable,
            auto_delete,
            exclusive_owner,
            arguments,
            state: Mutex::new(QueueState {
                store,
                consumers: Vec::new(),
                next_consumer: 0,
                exclusive_consumer: false,
                had_consumers: false,
                unacked: 0,
                deleted: false,
            }),
        })
    }

    /// Locks the queue state; never hold the guard across an `.await`.
    pub fn lock(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock()
    }

    /// Fails with RESOURCE_LOCKED if `conn` may not use this exclusive queue.
    pub fn check_owner(&self, conn: ConnectionId) -> Result<()> {
        match self.exclusive_owner {
            Some(owner) if owner != conn => Err(Error::ResourceLocked(format!(
                "cannot obtain exclusive access to locked queue '{}' in vhost '{}'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.",
                self.name, self.vhost
            ))),
            _ => Ok(()),
        }
    }

    /// Appends a message. Returns true when the queue had no ready message before,
    /// in which case the caller must call [`Queue::wake_consumers`] (it may first
    /// publish more, so that consumers wake once for a burst).
    pub fn publish(&self, msg: &Message, scratch: &mut bytes::BytesMut) -> Result<bool> {
        let mut st = self.state.lock();
        if st.deleted {
            return Ok(false);
        }
        let was_empty = st.store.ready_count() == 0;
        msg.with_encoded_properties(scratch, |props| {
            st.store
                .push(msg.timestamp, &msg.exchange, &msg.routing_key, props, &msg.body)
        })
        .map_err(|e| {
            let text = format!(
                "cannot store message in queue '{}' in vhost '{}': {e}",
                self.name, self.vhost
            );
            if e.kind() == std::io::ErrorKind::StorageFull {
                // A full disk refuses this message; the connection and the stored
                // messages are unaffected.
                Error::ResourceError(text)
            } else {
                Error::Internal(text)
            }
        })?;
        Ok(was_empty)
    }

    /// Wakes every consumer so that those with capacity pull.
    pub fn wake_consumers(&self) {
        self.state.lock().notify_consumers();
    }

    /// Delivers ready messages to consumers with capacity, up to a batch; returns
    /// true when it stopped at the batch limit with more to do. Any consumer's task
    /// may run this: it serves every consumer of the queue, in round-robin order.
    pub fn deliver_ready(&self) -> bool {
        let mut touched: smallvec::SmallVec<[Arc<dyn Consumer>; 4]> = smallvec::SmallVec::new();
        let mut more = false;
        {
            let mut st = self.state.lock();
            if st.deleted {
                return false;
            }
            for n in 0..=DELIVERY_BATCH {
                if n == DELIVERY_BATCH {
                    more = true;
                    break;
                }
                if st.store.ready_count() == 0 {
                    break;
                }
                let Some(i) = st.pick_consumer() else { break };
                let Some((pos, redelivered)) = st.store.shift() else {
                    break;
                };
                let st = &mut *st;
                let consumer = &st.consumers[i];
                match st.store.read_at(pos) {
                    Some(view) => consumer.deliver(&view, pos, redelivered),
                    None => {
                        tracing::error!(queue = %self.name, "unreadable message at {pos:?} dropped");
                        let _ = st.store.ack(pos);
                        continue;
                    }
                }
                if consumer.no_ack() {
                    if let Err(e) = st.store.ack(pos) {
                        tracing::error!(queue = %self.name, "cannot record ack: {e}");
                    }
                } else {
                    st.unacked += 1;
                }
                if !touched.iter().any(|c| Arc::ptr_eq(c, consumer)) {
                    touched.push(consumer.clone());
                }
            }
        }
        for c in touched {
            c.flush();
        }
        more
    }

    /// True when some consumer could take a message right now.
    pub fn has_ready_consumer(&self) -> bool {
        self.state.lock().consumers.iter().any(|c| c.has_capacity())
    }

    /// Ready messages and attached consumers.
    pub fn counts(&self) -> (u64, u32) {
        let st = self.state.lock();
        (st.store.ready_count(), st.consumers.len() as u32)
    }

    /// Attaches a consumer.
    pub fn add_consumer(&self, consumer: Arc<dyn Consumer>, exclusive: bool) -> Result<()> {
        let mut st = self.state.lock();
        if st.deleted {
            return Err(Error::NotFound(format!(
                "no queue '{}' in vhost '{}'",
                self.name, self.vhost
            )));
        }
        if st.exclusive_consumer || (exclusive && !st.consumers.is_empty()) {
            return Err(Error::AccessRefused(format!(
                "queue '{}' in vhost '{}' in exclusive use",
                self.name, self.vhost
            )));
        }
        st.exclusive_consumer = exclusive;
        st.had_consumers = true;
        consumer.notify();
        st.consumers.push(consumer);
        Ok(())
    }

    /// Detaches a consumer; returns true when the queue should now be auto-deleted.
    pub fn remove_consumer(&self, id: u64) -> bool {
        let mut st = self.state.lock();
        let before = st.consumers.len();
        st.consumers.retain(|c| c.id() != id);
        if st.consumers.len() != before {
            st.exclusive_consumer = false;
            // A departing consumer may leave messages others can now take.
            st.notify_consumers();
        }
        self.auto_delete && st.had_consumers && st.consumers.is_empty() && !st.deleted
    }

    /// Marks the queue deleted, tells consumers, and removes its files.
    pub fn delete(&self) -> u64 {
        let (consumers, count) = {
            let mut st = self.state.lock();
            if st.deleted {
                return 0;
            }
            st.deleted = true;
            let count = st.store.ready_count();
            if let Err(e) = std::fs::remove_dir_all(st.store.dir()) {
                tracing::warn!(queue = %self.name, "cannot remove queue directory: {e}");
            }
            (std::mem::take(&mut st.consumers), count)
        };
        for c in consumers {
            c.queue_deleted();
        }
        count
    }

    /// Removes all ready messages.
    pub fn purge(&self) -> Result<u64> {
        self.state.lock().store.purge().map_err(Error::from)
    }

    /// Acknowledges delivered messages.
    pub fn ack(&self, positions: impl IntoIterator<Item = SegPos>) {
        let mut st = self.state.lock();
        for p in positions {
            st.unacked = st.unacked.saturating_sub(1);
            if !st.deleted
                && let Err(e) = st.store.ack(p)
            {
                tracing::error!(queue = %self.name, "cannot record ack: {e}");
            }
        }
    }

    /// Puts delivered messages back in their original order.
    pub fn requeue(&self, positions: impl IntoIterator<Item = SegPos>) {
        let mut st = self.state.lock();
        for p in positions {
            st.unacked = st.unacked.saturating_sub(1);
            if !st.deleted {
                st.store.requeue(p);
            }
        }
        st.notify_consumers();
    }
}

impl QueueState {
    /// Wakes every consumer so that those with capacity pull.
    pub fn notify_consumers(&self) {
        for c in &self.consumers {
            c.notify();
        }
    }

    /// Picks the consumer for the next message: the highest priority among those
    /// with capacity, round-robin among equals (as RabbitMQ dispatches).
    fn pick_consumer(&mut self) -> Option<usize> {
        let n = self.consumers.len();
        let mut best: Option<(i32, usize)> = None;
        for k in 0..n {
            let i = (self.next_consumer + k) % n;
            let c = &self.consumers[i];
            if best.is_none_or(|(p, _)| c.priority() > p) && c.has_capacity() {
                best = Some((c.priority(), i));
            }
        }
        let (_, i) = best?;
        self.next_consumer = (i + 1) % n;
        Some(i)
    }

    /// Number of attached consumers.
    pub fn consumer_count(&self) -> usize {
        self.consumers.len()
    }
}
