//! Queues: an ordered message store plus the consumers attached to it, obeying
//! the queue's settings (TTL, length limits, dead-lettering, priorities, single
//! active consumer, delivery limit).
//!
//! The state sits behind one mutex that is never held across an `.await`:
//! publishers append under it, and consumers pull from it in batches. Messages the
//! queue drops while locked are collected and dead-lettered after the lock is
//! released, so that a dead-letter cycle between two queues cannot deadlock.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bytes::{Bytes, BytesMut};
use parking_lot::{Mutex, MutexGuard, RwLock};
use rustc_hash::FxHashMap;
use serde_json::{Map, Value};
use tokio::sync::Notify;

use super::connections::ConnectionEntry;
use super::consumer::Consumer;
use super::dead_letter::{self, DeadLetter, Reason};
use super::dedup::{DedupCache, DedupSettings};
use super::message::Message;
use super::queue_settings::{Overflow, QueueSettings, QueueType};
use super::stats::{ChurnCounters, QueueCounts, Rates};
use super::stream::{self, ConsumerOptions, StreamState};
use super::vhost::VHost;
use super::{BasicProperties, Error, FieldTable, FieldValue, Result};
use crate::store::record::RecordView;
use crate::store::{QueueStore, SegPos};
use crate::wire::properties::raw_expiration;

/// Messages delivered per acquisition of the queue lock.
const DELIVERY_BATCH: usize = 256;

/// The position given to a consumer with a message handed over without being
/// stored (see [`Queue::hand_over`]); such consumers never use it.
const NEVER_STORED: SegPos = SegPos {
    seg: u32::MAX,
    pos: u32::MAX,
};

/// Delivery batches a publisher runs itself after its read batch (see
/// [`Queue::deliver_or_wake`]).
const PUBLISHER_DELIVERY_ROUNDS: usize = 16;

/// How often a stream with a compaction key looks for newly sealed segments
/// to compact (a pass runs only when there is one). Publishing starts a pass
/// as soon as it seals a segment; this catches a seal made during a pass.
const COMPACTION_CHECK_MS: i64 = 30_000;

/// The longest a publisher waits after a read batch for consumers that cannot
/// keep up (see [`Queue::deliver_or_wake`]): it is slowed to their pace,
/// never stopped by one that stalls.
const PACE_LIMIT: std::time::Duration = std::time::Duration::from_millis(5);

/// How a delivery batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Batch {
    /// At the batch limit, with more to deliver.
    More,
    /// Nothing left to deliver (or the queue is deleted).
    Done,
    /// Messages are ready but no consumer could take them.
    Stuck,
    /// As `Stuck`, with every consumer waiting for its client to read:
    /// publishers should wait.
    Backlogged,
}

/// Identity of the connection that owns an exclusive queue.
pub type ConnectionId = u64;

/// How a queue is declared: everything but its messages.
#[derive(Debug, Clone)]
pub struct QueueSpec {
    /// Queue name.
    pub name: String,
    /// Survives a restart.
    pub durable: bool,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// The owning connection of an exclusive queue.
    pub exclusive_owner: Option<ConnectionId>,
    /// Declaration arguments, verbatim.
    pub arguments: FieldTable,
    /// What the arguments ask for.
    pub declared: QueueSettings,
}

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
    /// The queue type, fixed at declaration.
    pub queue_type: QueueType,
    /// The declaration arguments and what they ask for; replaced only through
    /// [`Queue::redeclare`] (an MQTT session changing its expiry).
    declaration: RwLock<Declaration>,
    vhost_ref: Weak<VHost>,
    me: Weak<Queue>,
    state: Mutex<QueueState>,
    /// Wakes the task that expires messages and the queue itself.
    housekeeping: Notify,
    /// Wakes publishers paced by this queue once its backlog has drained (see
    /// [`Queue::pace_publisher`]).
    backlog_shrunk: Notify,
    housekeeping_started: AtomicBool,
    /// The effective consumer timeout in ms (`u64::MAX`: none), readable
    /// without the lock on every delivery.
    consumer_timeout_ms: AtomicU64,
    /// Per-second rates of the counts, sampled by the broker.
    pub rates: Rates,
}

/// A queue's declaration arguments with the settings they ask for, before
/// policies.
struct Declaration {
    arguments: FieldTable,
    settings: QueueSettings,
}

/// The mutable part of a queue.
pub struct QueueState {
    /// Messages on disk.
    pub store: QueueStore,
    /// Effective settings: arguments merged with policies.
    pub settings: QueueSettings,
    /// Names of the policy and operator policy in force, if any.
    pub policies: (Option<String>, Option<String>),
    consumers: Vec<Arc<dyn Consumer>>,
    next_consumer: usize,
    exclusive_consumer: bool,
    had_consumers: bool,
    /// With a single active consumer: the active one left with messages still
    /// unacknowledged; its successor waits until they are settled, so that
    /// requeued messages reach it first and in order.
    sac_draining: bool,
    /// Delivered, not yet acknowledged messages.
    pub unacked: u64,
    /// Set once the queue is deleted; nothing may be added after that.
    pub deleted: bool,
    /// Why the queue's files could not be opened: the queue keeps its
    /// definition and its files but refuses messages and consumers until an
    /// operator restarts it (LavinMQ's "closed" state).
    pub closed: Option<String>,
    /// Times each returned message was requeued (with a delivery limit only).
    delivery_counts: FxHashMap<SegPos, u32>,
    /// Last use (declare, get, consumer change), for `x-expires`.
    last_used_ms: i64,
    /// Dropped messages waiting to be dead-lettered once the lock is released.
    dead: Vec<DeadLetter>,
    /// Properties re-encoded with an `x-delivery-count` header.
    props_scratch: BytesMut,
    /// Recently seen message ids, with `x-message-deduplication`.
    dedup: Option<DedupCache>,
    /// The log and readers of a stream queue.
    pub stream: Option<StreamState>,
    /// Message counts since the queue was opened.
    pub counts: QueueCounts,
    /// Deliveries are paused by an operator (kept across restarts).
    paused: bool,
    /// Publishers were told to wait for the backlog to shrink.
    pacing: bool,
    /// Attached consumers that settle a message by taking it (see
    /// [`Consumer::settles_on_delivery`]). When every consumer does, a
    /// message for an empty queue is handed over without being stored.
    settling_consumers: usize,
    /// Consumers handed a message by a publisher (see [`Queue::hand_over`])
    /// since the last delivery batch, which sends what they buffered.
    handed_over: smallvec::SmallVec<[Arc<dyn Consumer>; 1]>,
    /// The policy and operator policy keys in force, merged.
    effective_policy: Map<String, Value>,
}

/// The keys of a policy and an operator policy in force together, as RabbitMQ
/// shows them: a number both set takes the smaller value (the operator's
/// limit caps the user's), otherwise the policy's value wins.
fn merged_policy(policy: Option<&Map<String, Value>>, operator: Option<&Map<String, Value>>) -> Map<String, Value> {
    let mut out = policy.cloned().unwrap_or_default();
    for (k, v) in operator.into_iter().flatten() {
        match (out.get(k).and_then(Value::as_f64), v.as_f64()) {
            (Some(mine), Some(theirs)) if theirs < mine => {
                out.insert(k.clone(), v.clone());
            }
            (Some(_), _) => {}
            (None, _) => {
                out.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
    out
}

/// Marker file in a queue's directory while the queue is paused.
const PAUSED_MARKER: &str = "paused";

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.name)
            .field("vhost", &self.vhost)
            .finish()
    }
}

/// A queue's figures at one moment; cheap to take (no allocation), as the
/// statistics sampler and metrics take it for every queue.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueStats {
    /// Messages ready for delivery.
    pub ready: u64,
    /// Delivered, not yet acknowledged.
    pub unacked: u64,
    /// Attached consumers.
    pub consumers: usize,
    /// Message counts since the queue was opened.
    pub counts: QueueCounts,
    /// Deliveries are paused.
    pub paused: bool,
    /// The queue's files could not be opened (see [`Queue::closed_reason`]).
    pub closed: bool,
}

/// The policies in force on a queue, as the management API shows them.
#[derive(Debug, Clone, Default)]
pub struct QueuePolicies {
    /// The policy in force.
    pub policy: Option<String>,
    /// The operator policy in force.
    pub operator_policy: Option<String>,
    /// The policy and operator policy keys in force, merged.
    pub effective: Map<String, Value>,
}

/// What became of a message offered to a queue.
#[derive(Debug, Clone, Copy, Default)]
pub struct Published {
    /// The queue had no ready message before: call [`Queue::wake_consumers`]
    /// (possibly after publishing more, so that consumers wake once per burst).
    pub woke: bool,
    /// The queue refused it (`reject-publish` overflow): a confirm must be a nack.
    pub rejected: bool,
    /// Its consumers cannot keep up: the publisher should call
    /// [`Queue::pace_publisher`] before it reads more.
    pub pace: bool,
}

/// Messages for a stream that share all but their bodies (no exchange),
/// as a stream-protocol publisher's frame of plain messages, stored
/// without building a [`Message`] for each.
pub struct PlainBatch<'a> {
    /// When they were published, ms since the epoch.
    pub timestamp: i64,
    /// Their routing key.
    pub routing_key: &'a str,
    /// Their encoded properties.
    pub properties: &'a [u8],
    /// Their bodies, in order.
    pub bodies: &'a [&'a [u8]],
}

/// When the message in `view` expires (ms since the epoch), if it has a TTL.
fn expires_at(settings: &QueueSettings, view: &RecordView<'_>) -> Option<i64> {
    let per_message = raw_expiration(view.properties).and_then(|s| s.parse::<u64>().ok());
    let ttl = match (settings.message_ttl, per_message) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b)?,
    };
    Some(view.timestamp.saturating_add(ttl.min(i64::MAX as u64) as i64))
}

/// Opens the files of a queue: its message store and, for a stream, its log.
fn open_storage(spec: &QueueSpec, dir: &Path, segment_size: u64) -> Result<(QueueStore, Option<StreamState>)> {
    let name = &spec.name;
    let store = QueueStore::open(dir, name, segment_size, spec.declared.max_priority)
        .map_err(|e| Error::Internal(format!("cannot open queue '{name}' at {}: {e}", dir.display())))?;
    if spec.declared.queue_type != QueueType::Stream {
        return Ok((store, None));
    }
    // RabbitMQ's `x-stream-max-segment-size-bytes` sets the segment size.
    let size = spec
        .arguments
        .get("x-stream-max-segment-size-bytes")
        .and_then(|v| v.as_i64())
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(segment_size);
    let s = StreamState::open(dir, name, size)
        .map_err(|e| Error::Internal(format!("cannot open stream '{name}' at {}: {e}", dir.display())))?;
    Ok((store, Some(s)))
}

fn decode_properties(raw: &[u8]) -> BasicProperties {
    BasicProperties::decode(&mut Bytes::copy_from_slice(raw)).unwrap_or_default()
}

impl Queue {
    /// Opens a queue of `vhost` whose messages live in `dir` (recovered if present).
    pub fn open(
        spec: QueueSpec,
        vhost: &VHost,
        vhost_ref: Weak<VHost>,
        dir: &Path,
        segment_size: u64,
    ) -> Result<Arc<Self>> {
        let (store, stream) = open_storage(&spec, dir, segment_size)?;
        Ok(Self::build(spec, vhost, vhost_ref, dir, store, stream, None))
    }

    /// Opens a restored queue; when its files cannot be opened, the queue is
    /// still there, closed with the reason, its definition and files kept as
    /// they are until [`Queue::restart`].
    pub fn open_or_closed(
        spec: QueueSpec,
        vhost: &VHost,
        vhost_ref: Weak<VHost>,
        dir: &Path,
        segment_size: u64,
    ) -> Arc<Self> {
        match open_storage(&spec, dir, segment_size) {
            Ok((store, stream)) => Self::build(spec, vhost, vhost_ref, dir, store, stream, None),
            Err(e) => {
                let reason = e.text().to_string();
                tracing::error!(queue = %spec.name, vhost = %vhost.name, "queue closed: {reason}");
                let store = QueueStore::closed(dir, &spec.name, segment_size);
                Self::build(spec, vhost, vhost_ref, dir, store, None, Some(reason))
            }
        }
    }

    fn build(
        spec: QueueSpec,
        vhost: &VHost,
        vhost_ref: Weak<VHost>,
        dir: &Path,
        store: QueueStore,
        stream: Option<StreamState>,
        closed: Option<String>,
    ) -> Arc<Self> {
        let consumer_timeout = spec.declared.consumer_timeout.unwrap_or(u64::MAX);
        // Declaration validated the arguments; bad ones restored from disk are ignored.
        let dedup = DedupSettings::from_arguments(&spec.arguments)
            .ok()
            .flatten()
            .map(DedupCache::new);
        let q = Arc::new_cyclic(|me| Queue {
            name: spec.name.clone(),
            vhost: vhost.name.clone(),
            durable: spec.durable,
            auto_delete: spec.auto_delete,
            exclusive_owner: spec.exclusive_owner,
            queue_type: spec.declared.queue_type,
            declaration: RwLock::new(Declaration {
                arguments: spec.arguments,
                settings: spec.declared.clone(),
            }),
            vhost_ref,
            me: me.clone(),
            state: Mutex::new(QueueState {
                store,
                settings: spec.declared,
                policies: (None, None),
                consumers: Vec::new(),
                next_consumer: 0,
                exclusive_consumer: false,
                had_consumers: false,
                sac_draining: false,
                unacked: 0,
                deleted: false,
                closed,
                delivery_counts: FxHashMap::default(),
                last_used_ms: Message::now_ms(),
                dead: Vec::new(),
                props_scratch: BytesMut::new(),
                dedup,
                stream,
                settling_consumers: 0,
                handed_over: smallvec::SmallVec::new(),
                counts: QueueCounts::default(),
                paused: dir.join(PAUSED_MARKER).exists(),
                pacing: false,
                effective_policy: Map::new(),
            }),
            housekeeping: Notify::new(),
            backlog_shrunk: Notify::new(),
            housekeeping_started: AtomicBool::new(false),
            consumer_timeout_ms: AtomicU64::new(consumer_timeout),
            rates: Rates::default(),
        });
        q.start_timers();
        q
    }

    /// Why the queue is closed, if it is.
    pub fn closed_reason(&self) -> Option<String> {
        self.state.lock().closed.clone()
    }

    /// Fails with NOT_FOUND (as RabbitMQ answers for a queue it cannot reach)
    /// while the queue is closed, naming the reason.
    pub fn check_open(&self) -> Result<()> {
        match &self.state.lock().closed {
            Some(reason) => Err(self.closed_error(reason)),
            None => Ok(()),
        }
    }

    fn closed_error(&self, reason: &str) -> Error {
        Error::NotFound(format!(
            "queue '{}' in vhost '{}' is closed: {reason}",
            self.name, self.vhost
        ))
    }

    /// Reopens a closed queue from its files (LavinMQ's restart), once an
    /// operator has fixed them. False when the queue was not closed; an error
    /// (and the queue still closed, with the new reason) when the files still
    /// cannot be opened.
    pub fn restart(&self, segment_size: u64) -> Result<bool> {
        let mut st = self.state.lock();
        if st.closed.is_none() || st.deleted {
            return Ok(false);
        }
        let spec = {
            let d = self.declaration.read();
            QueueSpec {
                name: self.name.clone(),
                durable: self.durable,
                auto_delete: self.auto_delete,
                exclusive_owner: self.exclusive_owner,
                arguments: d.arguments.clone(),
                declared: d.settings.clone(),
            }
        };
        let dir = st.store.dir().to_path_buf();
        let (store, stream) = match open_storage(&spec, &dir, segment_size) {
            Ok(opened) => opened,
            Err(e) => {
                st.closed = Some(e.text().to_string());
                return Err(e);
            }
        };
        st.store = store;
        st.stream = stream;
        st.closed = None;
        st.paused = dir.join(PAUSED_MARKER).exists();
        st.counts = QueueCounts::default();
        st.last_used_ms = Message::now_ms();
        tracing::info!(queue = %self.name, vhost = %self.vhost, "queue restarted");
        // Limits a policy set apply to the recovered messages.
        self.drop_over_limit(&mut st);
        st.notify_consumers();
        self.unlock_and_route(st);
        self.start_timers();
        self.housekeeping.notify_one();
        Ok(true)
    }

    /// Milliseconds a delivery from this queue may stay unacknowledged, if the
    /// queue (or its policy) limits it.
    pub fn consumer_timeout(&self) -> Option<u64> {
        let ms = self.consumer_timeout_ms.load(Ordering::Acquire);
        (ms != u64::MAX).then_some(ms)
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

    /// Republishes what the queue dropped to its dead-letter exchange.
    fn route_dead(&self, dead: Vec<DeadLetter>) {
        if dead.is_empty() {
            return;
        }
        if let Some(vhost) = self.vhost_ref.upgrade() {
            vhost.publish_dead_letters(dead);
        }
    }

    /// Takes the dead letters collected under the lock and releases it.
    fn unlock_and_route(&self, mut st: MutexGuard<'_, QueueState>) {
        let dead = std::mem::take(&mut st.dead);
        drop(st);
        self.route_dead(dead);
    }

    /// Appends a message, applying the length limit, TTL and overflow settings.
    pub fn publish(&self, msg: &Message, scratch: &mut BytesMut) -> Result<Published> {
        let mut st = self.state.lock();
        if st.deleted {
            return Ok(Published::default());
        }
        if st.closed.is_some() {
            // Not stored: a confirm is a nack.
            return Ok(Published {
                rejected: true,
                ..Published::default()
            });
        }
        if st.stream.is_some() {
            if let Some(cache) = st.dedup.as_mut()
                && cache.is_duplicate(msg.properties.headers.as_ref(), msg.timestamp)
            {
                st.counts.dedup += 1;
                return Ok(Published::default());
            }
            return self.append_to_stream(&mut st, msg, scratch);
        }
        let (overflow, max_length, max_bytes) = (
            st.settings.overflow,
            st.settings.max_length,
            st.settings.max_length_bytes,
        );
        if overflow != Overflow::DropHead && (max_length.is_some() || max_bytes.is_some()) {
            let len = st.store.ready_count() + 1;
            let over = max_length.is_some_and(|m| len > m)
                || max_bytes.is_some_and(|m| st.store.ready_bytes() + msg.body.len() as u64 > m);
            if over {
                if overflow == Overflow::RejectPublishDlx {
                    self.dead_letter_message(&mut st, msg, Reason::Maxlen);
                }
                self.unlock_and_route(st);
                return Ok(Published {
                    rejected: true,
                    ..Published::default()
                });
            }
        }
        // Remembered only once past the limit check: a publish refused there and
        // retried must not be taken for a duplicate.
        if let Some(cache) = st.dedup.as_mut()
            && cache.is_duplicate(msg.properties.headers.as_ref(), msg.timestamp)
        {
            st.counts.dedup += 1;
            return Ok(Published::default());
        }
        let per_message = msg.properties.expiration.as_ref().and_then(|e| e.parse::<u64>().ok());
        let ttl = match (st.settings.message_ttl, per_message) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if ttl == Some(0) && !(st.store.ready_count() == 0 && st.can_deliver_now()) {
            // Nobody can take it at once (the queue is not empty, or no consumer
            // is ready), and it may not wait.
            self.dead_letter_message(&mut st, msg, Reason::Expired);
            self.unlock_and_route(st);
            return Ok(Published::default());
        }
        if self.hand_over(&mut st, msg, scratch) {
            // The delivery batch the publisher runs next sends it.
            return Ok(Published {
                woke: true,
                ..Published::default()
            });
        }
        let was_empty = st.store.ready_count() == 0;
        let priority = msg.properties.priority.unwrap_or(0);
        msg.with_encoded_properties(scratch, |props| {
            st.store.push(
                priority,
                msg.timestamp,
                &msg.exchange,
                &msg.routing_key,
                props,
                &msg.body,
            )
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
        st.counts.publish += 1;
        if self.durable && msg.properties.is_persistent() {
            crate::store::group_sync::note_durable_write();
        }
        let limited = st.settings.max_length.is_some() || st.settings.max_length_bytes.is_some();
        if limited || ttl == Some(0) {
            // A consumer waiting right now takes the message before any limit
            // applies, as RabbitMQ hands it over without enqueueing it.
            let mut touched = Touched::new();
            if st.consumers.iter().any(|c| c.has_capacity()) {
                // As of just before the publish: a TTL-0 message is handed over,
                // not expired.
                self.deliver_locked(&mut st, &mut touched, msg.timestamp - 1);
            }
            if ttl == Some(0) {
                self.expire_head(&mut st, msg.timestamp);
            }
            self.drop_over_limit(&mut st);
            self.unlock_and_route(st);
            touched.flush();
            if ttl.is_some_and(|t| t > 0) {
                // A limited queue still expires what it keeps.
                self.start_housekeeping();
                self.housekeeping.notify_one();
            }
            return Ok(Published {
                woke: was_empty,
                ..Published::default()
            });
        }
        let pace = !was_empty && st.pace_publishers();
        if ttl.is_some() && was_empty {
            drop(st);
            self.start_housekeeping();
            self.housekeeping.notify_one();
        }
        Ok(Published {
            woke: was_empty,
            rejected: false,
            pace,
        })
    }

    /// Hands a message for an empty queue straight to a consumer that settles
    /// it by taking it (see [`Consumer::settles_on_delivery`]), without
    /// storing it: nothing would ever read it back, and writing it costs more
    /// than the delivery (a copy into the page cache, a fifth of the CPU for
    /// 64 KiB messages). RabbitMQ hands messages over the same way.
    ///
    /// Only when every consumer settles on delivery, so that the next one in
    /// turn is one; never for a persistent message in a durable queue, whose
    /// confirm promises it was written. False when the message must be
    /// stored.
    fn hand_over(&self, st: &mut QueueState, msg: &Message, scratch: &mut BytesMut) -> bool {
        if st.settling_consumers == 0
            || st.settling_consumers != st.consumers.len()
            || st.store.ready_count() > 0
            || (self.durable && msg.properties.is_persistent())
        {
            return false;
        }
        let Some(i) = st.pick_consumer() else { return false };
        let consumer = &st.consumers[i];
        if !consumer.reserve() {
            return false;
        }
        let settled = msg.with_encoded_properties(scratch, |properties| {
            let view = RecordView {
                timestamp: msg.timestamp,
                exchange: &msg.exchange,
                routing_key: &msg.routing_key,
                properties,
                body: &msg.body,
            };
            consumer.deliver(&view, NEVER_STORED, false)
        });
        debug_assert!(settled, "a consumer that settles on delivery kept a message");
        st.counts.publish += 1;
        st.counts.deliver_no_ack += 1;
        if !st.handed_over.iter().any(|c| Arc::ptr_eq(c, consumer)) {
            st.handed_over.push(consumer.clone());
        }
        true
    }

    fn append_to_stream(&self, st: &mut QueueState, msg: &Message, scratch: &mut BytesMut) -> Result<Published> {
        let Some(s) = st.stream.as_mut() else {
            return Ok(Published::default());
        };
        msg.with_encoded_properties(scratch, |props| {
            s.store
                .push(msg.timestamp, &msg.exchange, &msg.routing_key, props, &msg.body)
        })
        .map_err(|e| self.stream_write_failed(e))?;
        st.counts.publish += 1;
        if self.durable {
            crate::store::group_sync::note_durable_write();
        }
        self.after_stream_append(st, msg.timestamp);
        // Readers at the end wait for new messages: wake them all.
        Ok(Published {
            woke: true,
            ..Published::default()
        })
    }

    /// The error for a failed write to this stream's store.
    fn stream_write_failed(&self, e: std::io::Error) -> Error {
        Error::Internal(format!("cannot append to stream '{}': {e}", self.name))
    }

    /// Applies retention and schedules compaction after appending messages
    /// stored at `timestamp`.
    fn after_stream_append(&self, st: &mut QueueState, timestamp: i64) {
        let (max_len, max_bytes, max_age) = (
            st.settings.max_length,
            st.settings.max_length_bytes,
            st.settings.max_age,
        );
        let Some(s) = st.stream.as_mut() else {
            return;
        };
        if max_len.is_some() || max_bytes.is_some() || max_age.is_some() {
            s.store
                .apply_retention(max_len, max_bytes, max_age.map(|age| (timestamp, age)));
        }
        if st.settings.stream_compaction.is_some() && s.store.compaction_due() {
            // A segment was just sealed: compact it now rather than at the next check.
            self.housekeeping.notify_one();
        }
    }

    /// Appends a stream publisher's batch of messages that differ only in
    /// their bodies, under one lock, and, while a consumer takes runs,
    /// keeps `encode(first offset)` as their run (see
    /// [`crate::core::stream_runs`]). `dedup` names the publisher and the
    /// lowest and highest publishing ids of the batch. `None` when the
    /// batch must go message by message instead: the queue is not an open
    /// stream, deduplicates by header, or the batch holds a duplicate.
    pub fn publish_run(
        &self,
        batch: &PlainBatch<'_>,
        dedup: Option<(&str, u64, u64)>,
        encode: impl FnOnce(u64) -> Bytes,
    ) -> Result<Option<Published>> {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        if st.deleted || st.closed.is_some() || st.dedup.is_some() || batch.bodies.is_empty() {
            return Ok(None);
        }
        let Some(s) = st.stream.as_mut() else {
            return Ok(None);
        };
        if let Some((reference, lowest, _)) = dedup
            && s.is_duplicate(reference, lowest)
        {
            return Ok(None);
        }
        let (first, seg) = (s.store.next_offset(), s.store.write_segment());
        let stored = s
            .store
            .push_batch(batch.timestamp, "", batch.routing_key, batch.properties, batch.bodies);
        st.counts.publish += s.store.next_offset() - first;
        stored.map_err(|e| self.stream_write_failed(e))?;
        if self.durable {
            crate::store::group_sync::note_durable_write();
        }
        if let Some((reference, _, highest)) = dedup {
            s.track_publisher(reference, highest);
        }
        // A run that began a segment is not kept: readers pass from one
        // segment to the next by reading (see `StreamStore::read`).
        if !st.consumers.iter().any(|c| c.takes_runs()) {
            s.recent.clear();
        } else if s.store.write_segment() == seg {
            s.keep_run(first, batch.bodies.len() as u32, encode(first));
        }
        self.after_stream_append(st, batch.timestamp);
        Ok(Some(Published {
            woke: true,
            ..Published::default()
        }))
    }

    /// True for a stream queue.
    pub fn is_stream(&self) -> bool {
        self.queue_type == QueueType::Stream
    }

    /// A stream's next offset (the one its next message gets); `None` for
    /// other queues.
    pub fn stream_next_offset(&self) -> Option<u64> {
        self.lock().stream.as_ref().map(|st| st.store.next_offset())
    }

    /// The declaration arguments.
    pub fn arguments(&self) -> FieldTable {
        self.declaration.read().arguments.clone()
    }

    /// Replaces the declaration arguments with `arguments`, which ask for
    /// `settings`; the caller re-applies the policies. Only arguments that
    /// take effect at once may change this way (as `x-expires`): the queue
    /// type, priorities and storage stay as first declared.
    pub fn redeclare(&self, arguments: FieldTable, settings: QueueSettings) {
        *self.declaration.write() = Declaration { arguments, settings };
    }

    /// Attaches a stream consumer, starting where its arguments (or the offset
    /// tracked for its tag) say.
    pub fn add_stream_consumer(
        &self,
        consumer: Arc<dyn Consumer>,
        explicit_tag: bool,
        opts: &ConsumerOptions,
    ) -> Result<()> {
        let (id, tag) = (consumer.id(), consumer.tag().to_string());
        self.add_consumer(consumer, false)?;
        let mut st = self.state.lock();
        let single_active = st.settings.single_active_consumer;
        if let Some(s) = st.stream.as_mut() {
            s.add_reader(id, &tag, explicit_tag, opts, single_active);
        }
        Ok(())
    }

    /// Whether consumer `id` receives now: false for a single active
    /// consumer waiting for its turn.
    pub fn is_consumer_active(&self, id: u64) -> bool {
        let st = self.state.lock();
        if let Some(s) = &st.stream {
            return s.is_active(id);
        }
        !st.settings.single_active_consumer || st.active_consumer().is_some_and(|i| st.consumers[i].id() == id)
    }

    /// The offset a stream client stored under `reference`; `None` when it
    /// stored none, or the queue is not a stream.
    pub fn stored_stream_offset(&self, reference: &str) -> Option<u64> {
        self.state.lock().stream.as_ref()?.stored_offset(reference)
    }

    /// Stores a stream client's offset under `reference`.
    pub fn store_stream_offset(&self, reference: &str, offset: u64) {
        let mut st = self.state.lock();
        let Some(s) = st.stream.as_mut() else { return };
        let was_clean = s.offsets_deadline().is_none();
        s.store_offset(reference, offset, Message::now_ms());
        let dirty = s.offsets_deadline().is_some();
        drop(st);
        self.offsets_changed(was_clean && dirty);
    }

    /// Has the housekeeping write a stream's changed offsets by their
    /// deadline: woken once when they turn dirty, not per settlement.
    fn offsets_changed(&self, newly_dirty: bool) {
        if newly_dirty {
            self.start_housekeeping();
            self.housekeeping.notify_one();
        }
    }

    /// The last publishing id of the stream publisher named `reference`.
    pub fn stream_publisher_sequence(&self, reference: &str) -> u64 {
        let st = self.state.lock();
        st.stream.as_ref().map_or(0, |s| s.publisher_sequence(reference))
    }

    /// Publishes what a stream publisher sent under one publishing id (a
    /// message, or the messages of a sub-entry batch) unless it is a
    /// duplicate (its `publishing_id` is not above the last one of
    /// `reference`): `None` for a duplicate.
    pub fn publish_deduplicated(
        &self,
        msgs: &[Message],
        scratch: &mut BytesMut,
        reference: &str,
        publishing_id: u64,
    ) -> Result<Option<Published>> {
        {
            let st = self.state.lock();
            if st.deleted {
                return Err(Error::NotFound(format!(
                    "no queue '{}' in vhost '{}'",
                    self.name, self.vhost
                )));
            }
            if st
                .stream
                .as_ref()
                .is_some_and(|s| s.is_duplicate(reference, publishing_id))
            {
                return Ok(None);
            }
        }
        let published = self.publish_all(msgs, scratch)?;
        // Remembered only once stored: a failed or refused message may be
        // sent again with the same id.
        if !published.rejected
            && let Some(s) = self.state.lock().stream.as_mut()
        {
            s.track_publisher(reference, publishing_id);
        }
        Ok(Some(published))
    }

    /// Publishes `msgs` in order, as one: the messages of a stream
    /// client's sub-entry batch, which share a publishing id. Refused if
    /// any of them was.
    pub fn publish_all(&self, msgs: &[Message], scratch: &mut BytesMut) -> Result<Published> {
        let mut all = Published::default();
        for msg in msgs {
            let p = self.publish(msg, scratch)?;
            all.woke |= p.woke;
            all.rejected |= p.rejected;
            all.pace |= p.pace;
        }
        Ok(all)
    }

    /// Settles stream deliveries of consumer `id` (`acked`: ack, nack or reject;
    /// otherwise returned to the queue, which a stream ignores).
    pub fn settle_stream(&self, id: u64, positions: impl IntoIterator<Item = SegPos>, acked: bool) {
        let mut st = self.state.lock();
        let mut n = 0;
        let offsets: Vec<u64> = positions
            .into_iter()
            .inspect(|_| n += 1)
            .map(stream::pos_offset)
            .collect();
        st.unacked = st.unacked.saturating_sub(n);
        if acked {
            st.counts.ack += n;
        }
        let mut newly_dirty = false;
        if let Some(s) = st.stream.as_mut() {
            let was_clean = s.offsets_deadline().is_none();
            s.settle(id, offsets, acked, Message::now_ms());
            newly_dirty = was_clean && s.offsets_deadline().is_some();
        }
        st.notify_consumers();
        drop(st);
        self.offsets_changed(newly_dirty);
    }

    /// Delivers stream messages to consumers with capacity, each from its own
    /// place in the stream, with an `x-stream-offset` header.
    fn deliver_stream(&self, st: &mut QueueState, touched: &mut Touched) -> bool {
        if st.paused {
            return false;
        }
        let Some(s) = st.stream.as_mut() else { return false };
        let mut delivered = 0;
        let mut progress = true;
        while progress && delivered < DELIVERY_BATCH {
            progress = false;
            for c in &st.consumers {
                if delivered >= DELIVERY_BATCH || !c.has_capacity() || !s.has_next(c.id()) {
                    continue;
                }
                if c.takes_runs()
                    && let Some(n) = s.deliver_runs(c.as_ref())
                {
                    st.counts.deliver += u64::from(n);
                    delivered += n as usize;
                    progress = true;
                    touched.add(c);
                    continue;
                }
                if !c.reserve() {
                    continue;
                }
                let Some(next) = s.next_for(c.id()) else {
                    c.unreserve();
                    continue;
                };
                let Some(view) = s.view(c.id(), next.at) else {
                    c.unreserve();
                    continue;
                };
                let view = match c.wants_offset_header() {
                    true => with_header(view, "x-stream-offset", next.offset as i64, &mut st.props_scratch),
                    false => view,
                };
                if c.deliver(&view, stream::offset_pos(next.offset), false) {
                    // Settled by the delivery (a stream-protocol subscriber).
                    s.settle(c.id(), [next.offset], true, 0);
                } else {
                    st.unacked += 1;
                }
                st.counts.deliver += 1;
                delivered += 1;
                progress = true;
                touched.add(c);
            }
        }
        delivered >= DELIVERY_BATCH
    }

    /// Drops (dead-letters) messages from the head while over a length limit.
    fn drop_over_limit(&self, st: &mut QueueState) {
        if st.settings.overflow != Overflow::DropHead {
            return;
        }
        loop {
            let over = st.settings.max_length.is_some_and(|m| st.store.ready_count() > m)
                || st.settings.max_length_bytes.is_some_and(|m| st.store.ready_bytes() > m);
            if !over {
                return;
            }
            let Some((pos, _)) = st.store.shift() else { return };
            self.drop_stored(st, pos, Reason::Maxlen);
        }
    }

    /// Removes a stored message for good, dead-lettering it if the queue has a
    /// DLX or the message names its own.
    fn drop_stored(&self, st: &mut QueueState, pos: SegPos, reason: Reason) {
        let target = dead_letter::Target {
            queue: &self.name,
            exchange: st.settings.dead_letter_exchange.as_deref(),
            routing_key: st.settings.dead_letter_routing_key.as_deref(),
        };
        if let Some(view) = st.store.read_mapped(pos)
            && (target.exchange.is_some() || dead_letter::may_name_exchange(view.properties))
            && let Some(dl) = dead_letter::make(
                view.exchange,
                view.routing_key,
                decode_properties(view.properties),
                Bytes::copy_from_slice(view.body),
                target,
                reason,
                Message::now_ms(),
            )
        {
            st.dead.push(dl);
        }
        st.delivery_counts.remove(&pos);
        if let Err(e) = st.store.ack(pos) {
            tracing::error!(queue = %self.name, "cannot record removal: {e}");
        }
    }

    /// Dead-letters a message that never entered the queue.
    fn dead_letter_message(&self, st: &mut QueueState, msg: &Message, reason: Reason) {
        let target = dead_letter::Target {
            queue: &self.name,
            exchange: st.settings.dead_letter_exchange.as_deref(),
            routing_key: st.settings.dead_letter_routing_key.as_deref(),
        };
        if target.exchange.is_none() && !dead_letter::names_exchange(msg.properties.headers.as_ref()) {
            return;
        }
        if let Some(dl) = dead_letter::make(
            &msg.exchange,
            &msg.routing_key,
            (*msg.properties).clone(),
            msg.body.clone(),
            target,
            reason,
            Message::now_ms(),
        ) {
            st.dead.push(dl);
        }
    }

    /// Wakes every consumer so that those with capacity pull.
    pub fn wake_consumers(&self) {
        self.state.lock().notify_consumers();
    }

    /// Delivers ready messages to consumers with capacity, up to a batch; returns
    /// true when it stopped at the batch limit with more to do. Any consumer's task,
    /// or a publisher (see [`Queue::deliver_or_wake`]), may run this: it serves
    /// every consumer of the queue, in round-robin order.
    pub fn deliver_ready(&self) -> bool {
        self.deliver_batch() == Batch::More
    }

    /// One delivery batch, saying why it ended.
    fn deliver_batch(&self) -> Batch {
        let mut touched = Touched::new();
        let mut st = self.state.lock();
        for c in st.handed_over.drain(..) {
            touched.add(&c);
        }
        if st.deleted {
            drop(st);
            // What was handed over before the deletion still goes out.
            touched.flush();
            return Batch::Done;
        }
        let mut outcome = if self.deliver_locked(&mut st, &mut touched, Message::now_ms()) {
            Batch::More
        } else if st.stream.is_some() || st.store.ready_count() > 0 {
            Batch::Stuck
        } else {
            Batch::Done
        };
        let mut shrunk = false;
        if outcome == Batch::Stuck && st.stream.is_none() && st.pace_publishers() {
            outcome = Batch::Backlogged;
        } else if st.pacing && st.store.ready_count() == 0 {
            // Paced publishers go on once nothing is ready, so that their
            // next messages go straight to a consumer again.
            st.pacing = false;
            shrunk = true;
        }
        self.unlock_and_route(st);
        touched.flush();
        if shrunk {
            self.backlog_shrunk.notify_waiters();
        }
        outcome
    }

    /// Delivers what a publisher just made ready on the publisher's own
    /// thread, up to [`PUBLISHER_DELIVERY_ROUNDS`] batches, and wakes the
    /// consumers only for what is left.
    ///
    /// Handing the messages to a consumer's task instead costs a wake-up of
    /// another thread per read batch, and while that task delivers, the
    /// publisher's next messages wait for the queue lock that it holds: a
    /// futex wait and wake-up every few hundred messages, which at small
    /// message sizes cost more than the deliveries themselves.
    ///
    /// Returns true when the publisher should let the consumers catch up
    /// before it reads more (see [`Queue::pace_publisher`]): messages are
    /// ready and every consumer could take more but waits for its client to
    /// read what it was sent (its socket, or its link credit, already holds
    /// what keeps it busy). Publishing on would send every later message
    /// through the store (written, read back, checked) rather than straight
    /// to a consumer, and would only grow the backlog; when the clients
    /// share the broker's cores (a load generator, services on one host) it
    /// takes from the consumers the CPU they need to catch up. A consumer
    /// held back by its prefetch limit or its acknowledgements never paces
    /// anyone: a backlog is then what a queue is for.
    pub fn deliver_or_wake(&self) -> bool {
        let mut backlogged = false;
        for _ in 0..PUBLISHER_DELIVERY_ROUNDS {
            match self.deliver_batch() {
                Batch::More => {}
                Batch::Done => return false,
                // A consumer whose connection's outbox another queue filled
                // waits for exactly this wake-up before it waits for the
                // outbox to drain.
                Batch::Stuck => break,
                Batch::Backlogged => {
                    backlogged = true;
                    break;
                }
            }
        }
        self.wake_consumers();
        backlogged
    }

    /// Waits until this queue's backlog has drained after
    /// [`Queue::deliver_or_wake`] asked the publisher on connection `entry`
    /// to wait, or at most [`PACE_LIMIT`], so that a publisher is slowed,
    /// never stopped, by consumers that cannot keep up. The connection shows
    /// as `flow` meanwhile. False when the limit ended the wait: the
    /// consumers are not reading, and pacing the publisher again before its
    /// next read would only stop it.
    pub async fn pace_publisher(&self, entry: &ConnectionEntry) -> bool {
        entry.note_paced(Message::coarse_now_ms());
        let shrunk = self.backlog_shrunk.notified();
        tokio::pin!(shrunk);
        shrunk.as_mut().enable();
        if !self.state.lock().pacing {
            return true;
        }
        tokio::time::timeout(PACE_LIMIT, shrunk).await.is_ok()
    }

    fn deliver_locked(&self, st: &mut QueueState, touched: &mut Touched, now: i64) -> bool {
        if st.stream.is_some() {
            return self.deliver_stream(st, touched);
        }
        for _ in 0..DELIVERY_BATCH {
            if st.store.ready_count() == 0 {
                return false;
            }
            let Some(i) = st.pick_consumer() else { return false };
            if !st.consumers[i].reserve() {
                // Another queue took the consumer's last shared slot meanwhile.
                continue;
            }
            let Some((pos, redelivered)) = st.store.shift() else {
                st.consumers[i].unreserve();
                return false;
            };
            let Some(view) = st.store.read_at(pos) else {
                tracing::error!(queue = %self.name, "unreadable message at {pos:?} dropped");
                st.consumers[i].unreserve();
                let _ = st.store.ack(pos);
                continue;
            };
            if let Some(at) = expires_at(&st.settings, &view)
                && now >= at
            {
                st.consumers[i].unreserve();
                self.drop_stored(st, pos, Reason::Expired);
                continue;
            }
            let consumer = &st.consumers[i];
            // Most queues never requeue: no hashing per delivery for them.
            let count = if st.delivery_counts.is_empty() {
                0
            } else {
                st.delivery_counts.get(&pos).copied().unwrap_or(0)
            };
            let settled = if count > 0 {
                let view = with_delivery_count(view, count, &mut st.props_scratch);
                consumer.deliver(&view, pos, redelivered)
            } else {
                consumer.deliver(&view, pos, redelivered)
            };
            st.counts.redeliver += u64::from(redelivered);
            if settled {
                st.counts.deliver_no_ack += 1;
                if count > 0 {
                    st.delivery_counts.remove(&pos);
                }
                if let Err(e) = st.store.ack(pos) {
                    tracing::error!(queue = %self.name, "cannot record ack: {e}");
                }
            } else {
                st.counts.deliver += 1;
                st.unacked += 1;
            }
            touched.add(consumer);
        }
        true
    }

    /// basic.get: hands the next message to `f` (with its position, redelivered
    /// flag and the number of messages left), under the queue lock. Returns false
    /// when the queue is empty.
    pub fn get(&self, no_ack: bool, f: impl FnOnce(&RecordView<'_>, SegPos, bool, u32)) -> bool {
        let mut guard = self.state.lock();
        let st: &mut QueueState = &mut guard;
        let now = Message::now_ms();
        st.last_used_ms = now;
        let found = !st.paused
            && loop {
                let Some((pos, redelivered)) = st.store.shift() else {
                    break false;
                };
                let remaining = st.store.ready_count().min(u64::from(u32::MAX)) as u32;
                let Some(view) = st.store.read_at(pos) else {
                    let _ = st.store.ack(pos);
                    continue;
                };
                if expires_at(&st.settings, &view).is_some_and(|at| now >= at) {
                    self.drop_stored(st, pos, Reason::Expired);
                    continue;
                }
                let count = st.delivery_counts.get(&pos).copied().unwrap_or(0);
                if count > 0 {
                    f(
                        &with_delivery_count(view, count, &mut st.props_scratch),
                        pos,
                        redelivered,
                        remaining,
                    );
                } else {
                    f(&view, pos, redelivered, remaining);
                }
                st.counts.redeliver += u64::from(redelivered);
                if no_ack {
                    st.counts.get_no_ack += 1;
                    st.delivery_counts.remove(&pos);
                    let _ = st.store.ack(pos);
                } else {
                    st.counts.get += 1;
                    st.unacked += 1;
                }
                break true;
            };
        if !found {
            st.counts.get_empty += 1;
        }
        self.unlock_and_route(guard);
        self.housekeeping.notify_one();
        found
    }

    /// True when some consumer could take a message right now.
    pub fn has_ready_consumer(&self) -> bool {
        self.state.lock().consumers.iter().any(|c| c.has_capacity())
    }

    /// Ready messages and attached consumers (expired messages at the head are
    /// removed first, so that the count is what a consumer would get).
    pub fn counts(&self) -> (u64, u32) {
        let mut st = self.state.lock();
        if let Some(s) = &st.stream {
            return (s.store.len(), st.consumers.len() as u32);
        }
        self.expire_head(&mut st, Message::now_ms());
        let counts = (st.store.ready_count(), st.consumers.len() as u32);
        self.unlock_and_route(st);
        counts
    }

    /// Figures for the management API: ready and unacknowledged messages,
    /// consumers, and the policy and operator policy in force.
    pub fn stats(&self) -> QueueStats {
        let st = self.state.lock();
        QueueStats {
            ready: st.stream.as_ref().map_or(st.store.ready_count(), |s| s.store.len()),
            unacked: st.unacked,
            consumers: st.consumers.len(),
            counts: st.counts,
            paused: st.paused,
            closed: st.closed.is_some(),
        }
    }

    /// The policies in force.
    pub fn policies(&self) -> QueuePolicies {
        let st = self.state.lock();
        QueuePolicies {
            policy: st.policies.0.clone(),
            operator_policy: st.policies.1.clone(),
            effective: st.effective_policy.clone(),
        }
    }

    /// Marks the queue as used now (declared again), for `x-expires`.
    pub fn touch(&self) {
        self.state.lock().last_used_ms = Message::now_ms();
        self.housekeeping.notify_one();
    }

    /// Detaches consumer `id`; an auto-delete queue that lost its last consumer
    /// is deleted.
    pub fn detach_consumer(&self, id: u64) {
        if self.remove_consumer(id)
            && let (Some(vhost), Some(me)) = (self.vhost_ref.upgrade(), self.me.upgrade())
        {
            vhost.remove_queue(&me);
        }
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
        if let Some(reason) = &st.closed {
            return Err(self.closed_error(reason));
        }
        if st.exclusive_consumer || (exclusive && !st.consumers.is_empty()) {
            return Err(Error::AccessRefused(format!(
                "queue '{}' in vhost '{}' in exclusive use",
                self.name, self.vhost
            )));
        }
        st.exclusive_consumer = exclusive;
        st.had_consumers = true;
        st.last_used_ms = Message::now_ms();
        consumer.notify();
        st.settling_consumers += usize::from(consumer.settles_on_delivery());
        st.consumers.push(consumer);
        self.consumer_churn(|c| c.consumer_added.incr());
        Ok(())
    }

    /// Counts consumers attached or detached in the vhost's churn figures.
    fn consumer_churn(&self, count: impl FnOnce(&ChurnCounters)) {
        if let Some(vhost) = self.vhost_ref.upgrade() {
            count(&vhost.churn);
        }
    }

    /// Detaches a consumer; returns true when the queue should now be auto-deleted.
    pub fn remove_consumer(&self, id: u64) -> bool {
        let mut st = self.state.lock();
        let before = st.consumers.len();
        if st.classic_single_active()
            && st.unacked > 0
            && st.active_consumer().is_some_and(|i| st.consumers[i].id() == id)
        {
            st.sac_draining = true;
        }
        let mut settling_removed = 0;
        st.consumers.retain(|c| {
            let keep = c.id() != id;
            settling_removed += usize::from(!keep && c.settles_on_delivery());
            keep
        });
        st.settling_consumers -= settling_removed;
        if let Some(s) = st.stream.as_mut() {
            s.remove_reader(id);
        }
        if st.consumers.len() != before {
            let removed = (before - st.consumers.len()) as u64;
            self.consumer_churn(|c| c.consumer_removed.add(removed));
            st.exclusive_consumer = false;
            st.last_used_ms = Message::now_ms();
            // A departing consumer may leave messages others can now take (with a
            // single active consumer, the next one is promoted this way).
            st.notify_consumers();
            self.housekeeping.notify_one();
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
            if let Some(s) = st.stream.as_mut() {
                s.discard_tracking();
            }
            let count = st.store.ready_count();
            if let Err(e) = std::fs::remove_dir_all(st.store.dir()) {
                tracing::warn!(queue = %self.name, "cannot remove queue directory: {e}");
            }
            crate::store::replication::removed(st.store.dir());
            st.settling_consumers = 0;
            (std::mem::take(&mut st.consumers), count)
        };
        self.housekeeping.notify_one();
        self.consumer_churn(|c| c.consumer_removed.add(consumers.len() as u64));
        for c in consumers {
            c.queue_deleted();
        }
        count
    }

    /// Pauses (stops deliveries to consumers and basic.get; publishing goes
    /// on) or resumes the queue. Kept across restarts by a marker file.
    pub fn set_paused(&self, paused: bool) -> Result<()> {
        let mut st = self.state.lock();
        let marker = st.store.dir().join(PAUSED_MARKER);
        let written = if paused {
            std::fs::write(&marker, b"")
        } else {
            std::fs::remove_file(&marker).or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
        };
        if written.is_ok() {
            match paused {
                true => crate::store::replication::replaced(&marker, b""),
                false => crate::store::replication::removed(&marker),
            }
        }
        written.map_err(|e| {
            let what = if paused { "pause" } else { "resume" };
            Error::Internal(format!("cannot {what} queue '{}': {e}", self.name))
        })?;
        st.paused = paused;
        if !paused {
            st.notify_consumers();
        }
        Ok(())
    }

    /// Removes all ready messages.
    pub fn purge(&self) -> Result<u64> {
        let mut st = self.state.lock();
        if let Some(reason) = &st.closed {
            return Err(self.closed_error(reason));
        }
        if st.stream.is_some() {
            // A stream is a log, trimmed by retention only (RabbitMQ refuses too).
            return Err(Error::PreconditionFailed(format!(
                "purge not supported by stream queue '{}' in vhost '{}'",
                self.name, self.vhost
            )));
        }
        if !st.delivery_counts.is_empty() {
            let st = &mut *st;
            let counts = &mut st.delivery_counts;
            let mut n = 0;
            while let Some((p, _)) = st.store.shift() {
                counts.remove(&p);
                st.store.ack(p)?;
                n += 1;
            }
            return Ok(n);
        }
        st.store.purge().map_err(Error::from)
    }

    /// Acknowledges delivered messages.
    pub fn ack(&self, positions: impl IntoIterator<Item = SegPos>) {
        let mut st = self.state.lock();
        for p in positions {
            st.unacked = st.unacked.saturating_sub(1);
            st.counts.ack += 1;
            if !st.delivery_counts.is_empty() {
                st.delivery_counts.remove(&p);
            }
            if !st.deleted
                && let Err(e) = st.store.ack(p)
            {
                tracing::error!(queue = %self.name, "cannot record ack: {e}");
            }
        }
        st.settled();
    }

    /// Rejects delivered messages without requeueing: they are dead-lettered
    /// (reason `rejected`) when the queue has a dead-letter exchange.
    pub fn reject(&self, positions: impl IntoIterator<Item = SegPos>) {
        let mut st = self.state.lock();
        for p in positions {
            st.unacked = st.unacked.saturating_sub(1);
            if !st.deleted {
                self.drop_stored(&mut st, p, Reason::Rejected);
            }
        }
        st.settled();
        self.unlock_and_route(st);
    }

    /// Puts delivered messages back in their original order; with a delivery
    /// limit, a message returned once too often is dead-lettered instead.
    pub fn requeue(&self, positions: impl IntoIterator<Item = SegPos>) {
        let mut st = self.state.lock();
        for p in positions {
            st.unacked = st.unacked.saturating_sub(1);
            if st.deleted {
                continue;
            }
            if let Some(limit) = st.settings.delivery_limit {
                let count = st.delivery_counts.entry(p).or_insert(0);
                *count += 1;
                if u64::from(*count) > limit {
                    self.drop_stored(&mut st, p, Reason::DeliveryLimit);
                    continue;
                }
            }
            st.store.requeue(p);
        }
        st.sac_draining = st.sac_draining && st.unacked > 0;
        st.notify_consumers();
        self.unlock_and_route(st);
    }

    /// Applies the policy and operator policy (name and definition) that match
    /// this queue now; `None` removes one.
    pub fn apply_policies(
        &self,
        policy: Option<(&str, &Map<String, Value>)>,
        operator: Option<(&str, &Map<String, Value>)>,
    ) {
        let settings = {
            let d = self.declaration.read();
            d.settings
                .with_policies(&d.arguments, policy.map(|p| p.1), operator.map(|p| p.1))
        };
        let mut st = self.state.lock();
        st.policies = (policy.map(|p| p.0.to_string()), operator.map(|p| p.0.to_string()));
        st.effective_policy = merged_policy(policy.map(|p| p.1), operator.map(|p| p.1));
        if st.settings == settings {
            return;
        }
        self.consumer_timeout_ms
            .store(settings.consumer_timeout.unwrap_or(u64::MAX), Ordering::Release);
        st.settings = settings;
        self.drop_over_limit(&mut st);
        let timed = st.settings.message_ttl.is_some()
            || st.settings.expires.is_some()
            || st.settings.max_age.is_some()
            || st.settings.stream_compaction.is_some();
        st.notify_consumers();
        self.unlock_and_route(st);
        if timed {
            self.start_housekeeping();
        }
        self.housekeeping.notify_one();
    }

    /// Removes expired messages from the head; returns when the new head expires.
    fn expire_head(&self, st: &mut QueueState, now: i64) -> Option<i64> {
        loop {
            let (pos, _) = st.store.peek()?;
            let view = st.store.read_at(pos)?;
            let at = expires_at(&st.settings, &view)?;
            if now < at {
                return Some(at);
            }
            let _ = st.store.shift();
            self.drop_stored(st, pos, Reason::Expired);
        }
    }

    /// Starts the housekeeping task if the queue's settings or its recovered
    /// messages (which may carry a per-message TTL) need it.
    pub fn start_timers(&self) {
        let needed = {
            let st = self.state.lock();
            let s = &st.settings;
            s.message_ttl.is_some()
                || s.expires.is_some()
                || s.max_age.is_some()
                || s.stream_compaction.is_some()
                || st.store.ready_count() > 0
        };
        if needed {
            self.start_housekeeping();
        }
    }

    /// Starts the task that expires messages and the queue (once), when the
    /// vhost has finished restoring its definitions.
    fn start_housekeeping(&self) {
        if !self.vhost_ref.upgrade().is_some_and(|v| v.is_ready()) {
            return;
        }
        if self.housekeeping_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.housekeeping_started.store(false, Ordering::Release);
            return;
        };
        let me = self.me.clone();
        rt.spawn(housekeeping(me));
    }

    /// Runs a compaction pass of a stream with a compaction key when one of
    /// its segments was sealed since the last pass. The segments are read and
    /// rewritten on a blocking thread, outside the queue's lock; only the
    /// swap of the files happens under it.
    async fn compact_stream(&self) {
        let (plan, key) = {
            let mut st = self.state.lock();
            let Some(key) = st.settings.stream_compaction.clone() else {
                return;
            };
            let Some(plan) = st.stream.as_mut().and_then(|s| s.store.compaction_plan()) else {
                return;
            };
            (plan, key)
        };
        let done = tokio::task::spawn_blocking(move || plan.run(|v| key.of(v)))
            .await
            .unwrap_or_default();
        let mut st = self.state.lock();
        if st.deleted {
            return;
        }
        if let Some(s) = st.stream.as_mut() {
            let removed = s.store.install_compacted(done);
            // Positions changed: a run's end is found again only by a walk.
            s.recent.clear();
            if removed > 0 {
                tracing::info!(queue = %self.name, vhost = %self.vhost, removed, "stream compacted");
            }
        }
    }

    /// One round of housekeeping: expires messages, and returns the next
    /// deadline and whether the queue itself has expired.
    fn housekeeping_round(&self, now: i64) -> (Option<i64>, bool) {
        let mut st = self.state.lock();
        if st.deleted {
            return (None, false);
        }
        let next_message = match st.settings.max_age {
            Some(age) if st.stream.is_some() => {
                // Age-based retention also runs while nothing is published.
                if let Some(s) = st.stream.as_mut() {
                    s.store.apply_retention(None, None, Some((now, age)));
                }
                Some(now + age.clamp(1000, 60_000))
            }
            _ => self.expire_head(&mut st, now),
        };
        let expiry = match st.settings.expires {
            Some(ms) if st.consumers.is_empty() => Some(st.last_used_ms.saturating_add(ms as i64)),
            _ => None,
        };
        let next_compaction =
            (st.stream.is_some() && st.settings.stream_compaction.is_some()).then_some(now + COMPACTION_CHECK_MS);
        let next_offsets = st.stream.as_mut().and_then(|s| {
            s.save_offsets_due(now);
            s.offsets_deadline()
        });
        self.unlock_and_route(st);
        if expiry.is_some_and(|at| now >= at) {
            return (None, true);
        }
        let next = [next_message, expiry, next_compaction, next_offsets]
            .into_iter()
            .flatten()
            .min();
        (next, false)
    }
}

/// Expires messages when their TTL runs out, deletes the queue when its
/// `x-expires` time passes unused, and compacts a stream. Ends when the queue
/// is deleted.
async fn housekeeping(queue: Weak<Queue>) {
    loop {
        let Some(q) = queue.upgrade() else { return };
        let (next, expired) = q.housekeeping_round(Message::now_ms());
        q.compact_stream().await;
        if expired {
            if let Some(vhost) = q.vhost_ref.upgrade() {
                tracing::info!(queue = %q.name, vhost = %q.vhost, "queue expired");
                vhost.remove_queue(&q);
            }
            return;
        }
        if q.lock().deleted {
            return;
        }
        let wait = next.map(|at| std::time::Duration::from_millis((at - Message::now_ms()).clamp(1, 3_600_000) as u64));
        match wait {
            Some(d) => {
                tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = q.housekeeping.notified() => {}
                }
            }
            None => q.housekeeping.notified().await,
        }
    }
}

/// The record with an `x-delivery-count` header added to its properties.
fn with_delivery_count<'a>(view: RecordView<'a>, count: u32, scratch: &'a mut BytesMut) -> RecordView<'a> {
    with_header(view, "x-delivery-count", i64::from(count), scratch)
}

/// The record with header `name` set to `value` in its properties.
fn with_header<'a>(view: RecordView<'a>, name: &str, value: i64, scratch: &'a mut BytesMut) -> RecordView<'a> {
    let mut props = decode_properties(view.properties);
    props
        .headers
        .get_or_insert_with(FieldTable::new)
        .insert(name, FieldValue::I64(value));
    scratch.clear();
    let _ = props.encode(scratch);
    RecordView {
        properties: &scratch[..],
        ..view
    }
}

/// Consumers that got messages under the lock and must flush after it.
struct Touched(smallvec::SmallVec<[Arc<dyn Consumer>; 4]>);

impl Touched {
    fn new() -> Self {
        Touched(smallvec::SmallVec::new())
    }

    fn add(&mut self, c: &Arc<dyn Consumer>) {
        if !self.0.iter().any(|t| Arc::ptr_eq(t, c)) {
            self.0.push(c.clone());
        }
    }

    fn flush(self) {
        for c in self.0 {
            c.flush();
        }
    }
}

impl QueueState {
    /// Wakes every consumer so that those with capacity pull.
    pub fn notify_consumers(&self) {
        for c in &self.consumers {
            c.notify();
        }
    }

    /// After acks or rejects: a waiting single active consumer may start once
    /// nothing is unacknowledged.
    fn settled(&mut self) {
        if self.sac_draining && self.unacked == 0 {
            self.sac_draining = false;
            self.notify_consumers();
        }
    }

    /// True when messages are ready and every consumer waits for its client
    /// to read (see [`Queue::deliver_or_wake`]); then remembers to wake the
    /// publishers told to wait once the backlog has drained.
    fn pace_publishers(&mut self) -> bool {
        let backlogged = !self.paused
            && !self.consumers.is_empty()
            && self.store.ready_count() > 0
            && self.consumers.iter().all(|c| c.waits_for_client());
        self.pacing |= backlogged;
        backlogged
    }

    /// A single active consumer picked by the queue, among all its consumers.
    /// A stream's groups are its readers' instead (see `StreamState::add_reader`).
    fn classic_single_active(&self) -> bool {
        self.settings.single_active_consumer && self.stream.is_none()
    }

    /// True when a consumer could take a message right now (with a single
    /// active consumer: that one).
    fn can_deliver_now(&self) -> bool {
        if self.paused {
            return false;
        }
        if self.classic_single_active() {
            return !self.sac_draining && self.active_consumer().is_some_and(|i| self.consumers[i].has_capacity());
        }
        self.consumers.iter().any(|c| c.has_capacity())
    }

    /// The single active consumer: the first registered of the highest priority.
    fn active_consumer(&self) -> Option<usize> {
        let mut active: Option<(i32, usize)> = None;
        for (i, c) in self.consumers.iter().enumerate() {
            if active.is_none_or(|(p, _)| c.priority() > p) {
                active = Some((c.priority(), i));
            }
        }
        active.map(|(_, i)| i)
    }

    /// Picks the consumer for the next message: the highest priority among those
    /// with capacity, round-robin among equals (as RabbitMQ dispatches). With a
    /// single active consumer, only that one receives.
    fn pick_consumer(&mut self) -> Option<usize> {
        if self.paused {
            return None;
        }
        let n = self.consumers.len();
        if self.classic_single_active() {
            if self.sac_draining {
                return None;
            }
            let i = self.active_consumer()?;
            return self.consumers[i].has_capacity().then_some(i);
        }
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
