//! Deliveries to an MQTT client: the consumers a connection attaches to its
//! session's queue and to the queues of its shared subscriptions, and the
//! messages it has sent with QoS 1 or 2 and not yet seen acknowledged.
//!
//! A queue runs delivery under its lock and hands each message to
//! [`MqttConsumer::deliver`], which writes a PUBLISH straight from the mapped
//! segment into the connection's outbox. The QoS of a delivery is the lower of
//! the message's QoS and the highest QoS among the subscriptions that match
//! its topic [MQTT-3.3.5-1]. QoS 0 deliveries are settled on the spot; QoS 1
//! and 2 deliveries stay in their queue, unacknowledged, until PUBACK (or
//! PUBREC) names their packet identifier, so a lost connection puts them back
//! for the next one (with DUP set) or, for a shared subscription, for another
//! member of the group.
//!
//! Packet identifiers and the client's receive maximum are per connection,
//! so every consumer of a connection shares one [`Deliveries`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use bytes::BytesMut;
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use rustc_hash::FxHashMap;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::codec::properties::{put_subscription_identifier, put_topic_alias, varint_len};
use super::codec::topic::matches;
use super::codec::{Properties, ProtocolVersion, PublishHead, QoS, write_publish_head};
use super::inflight::Inflight;
use super::message_props::{origin_of, stored_origin};
use super::property_map::{delivery_properties, has_mapped_properties};
use super::session_registry::SessionState;
use super::topic_map::write_topic;
use crate::core::BasicProperties;
use crate::core::consumer::Consumer;
use crate::core::message::Message;
use crate::core::queue::Queue;
use crate::store::SegPos;
use crate::store::record::RecordView;
use crate::transport::outbox::Outbox;

/// One subscription of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The topic filter.
    pub filter: String,
    /// Highest QoS granted.
    pub qos: QoS,
    /// MQTT 5: the client's own publishes are not delivered to it.
    pub no_local: bool,
    /// MQTT 5: live messages keep the RETAIN flag they were published with.
    pub retain_as_published: bool,
    /// MQTT 5: the subscription identifier, sent with each delivery.
    pub id: Option<u32>,
}

/// The subscriptions of a session, in subscription order, with a count of
/// changes so that a delivery can tell whether what it worked out for the
/// previous message's topic still holds.
#[derive(Default)]
pub struct Subscriptions {
    list: RwLock<Vec<Subscription>>,
    changes: AtomicU64,
}

impl Subscriptions {
    /// The subscriptions `list`.
    pub fn new(list: Vec<Subscription>) -> Self {
        Subscriptions {
            list: RwLock::new(list),
            changes: AtomicU64::new(0),
        }
    }

    /// Reads the subscriptions.
    pub fn read(&self) -> RwLockReadGuard<'_, Vec<Subscription>> {
        self.list.read()
    }

    /// Changes the subscriptions with `f`.
    pub fn change<T>(&self, f: impl FnOnce(&mut Vec<Subscription>) -> T) -> T {
        let mut list = self.list.write();
        let out = f(&mut list);
        // Counted under the write lock: a reader sees the count and the list
        // of the same moment.
        self.changes.fetch_add(1, Ordering::Release);
        out
    }

    /// Changes so far. Read without the lock, it counts every change that
    /// completed before; read under [`Subscriptions::read`]'s lock, exactly
    /// those in the list read.
    fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }
}

/// Which subscriptions a consumer's queue serves.
pub enum Source {
    /// The session's own queue: every non-shared subscription.
    Session(Arc<Subscriptions>),
    /// A shared subscription's queue: one subscription of a group.
    Shared(Subscription),
}

/// What the consumers of one connection share: packet identifiers, the
/// limits the client set, scratch buffers.
pub struct Deliveries {
    outbox: Arc<Outbox>,
    state: Arc<SessionState>,
    version: ProtocolVersion,
    /// Deliveries awaiting PUBACK or PUBREC, by packet identifier.
    inflight: Mutex<Inflight<(Arc<Queue>, SegPos)>>,
    /// Packet ids in use: inflight deliveries, the session's released ids,
    /// and slots reserved for a delivery about to happen.
    in_use: AtomicUsize,
    max_inflight: usize,
    /// The client's maximum packet size (MQTT 5), if it set one.
    max_packet_size: Option<usize>,
    /// How many topic aliases the client accepts (MQTT 5).
    topic_alias_maximum: u16,
    scratch: Mutex<Scratch>,
    consumers: Mutex<Vec<Arc<MqttConsumer>>>,
}

/// Buffers reused across deliveries, and the topic aliases given out.
#[derive(Default)]
struct Scratch {
    /// What the previous delivery worked out for its routing key.
    last: LastTopic,
    properties: BytesMut,
    /// Topic aliases this connection set up with the client, by topic.
    aliases: FxHashMap<String, u16>,
}

/// The topic of the previous delivery and what its consumer's subscriptions
/// grant it. Consecutive messages nearly always share their topic, and
/// translating the routing key and matching it against every subscription
/// would otherwise cost as much as writing the PUBLISH.
#[derive(Default)]
struct LastTopic {
    /// The routing key it was worked out for (empty: nothing yet).
    routing_key: String,
    /// The consumer it was worked out for.
    consumer: u64,
    /// [`Subscriptions::changes`] when it was worked out (session consumers).
    changes: u64,
    /// The MQTT topic of the routing key.
    topic: String,
    /// The highest QoS granted and whether a matching subscription keeps
    /// the RETAIN flag as published; `None` when no subscription matches.
    granted: Option<(QoS, bool)>,
    /// The identifiers of the matching subscriptions.
    ids: Vec<u32>,
}

/// The limits an MQTT 5 client set in CONNECT for what it receives.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientLimits {
    /// Maximum packet size.
    pub max_packet_size: Option<u32>,
    /// Highest topic alias it accepts (0: none).
    pub topic_alias_maximum: u16,
}

impl Deliveries {
    /// The delivery state of a connection speaking `version`, allowing
    /// `max_inflight` unacknowledged deliveries, within the client's `limits`.
    pub fn new(
        outbox: Arc<Outbox>,
        state: Arc<SessionState>,
        version: ProtocolVersion,
        max_inflight: u16,
        limits: ClientLimits,
    ) -> Arc<Self> {
        let released = state.released.lock().len();
        Arc::new(Deliveries {
            outbox,
            state,
            version,
            inflight: Mutex::default(),
            in_use: AtomicUsize::new(released),
            max_inflight: usize::from(max_inflight.max(1)),
            max_packet_size: limits.max_packet_size.map(|m| m as usize),
            topic_alias_maximum: limits.topic_alias_maximum,
            scratch: Mutex::default(),
            consumers: Mutex::default(),
        })
    }

    /// Creates a consumer of `queue` for this connection and starts its
    /// delivery task once [`MqttConsumer::spawn`] is called.
    pub fn consumer(self: &Arc<Self>, id: u64, tag: String, queue: Arc<Queue>, source: Source) -> Arc<MqttConsumer> {
        let consumer = Arc::new(MqttConsumer {
            id,
            tag,
            queue,
            source,
            deliveries: self.clone(),
            wake: Notify::new(),
            cancelled: AtomicBool::new(false),
            queue_gone: CancellationToken::new(),
        });
        self.consumers.lock().push(consumer.clone());
        consumer
    }

    /// Forgets a consumer (its shared subscription ended).
    pub fn remove(&self, id: u64) {
        self.consumers.lock().retain(|c| c.id != id);
    }

    fn wake_all(&self) {
        for c in self.consumers.lock().iter() {
            c.wake.notify_one();
        }
    }

    /// PUBACK (QoS 1) or PUBREC (QoS 2) for `packet_id`: the message is settled.
    /// With `released`, the id stays in use until PUBCOMP. False when no
    /// delivery has that id.
    pub fn acknowledged(&self, packet_id: u16, released: bool) -> bool {
        let taken = {
            let mut inflight = self.inflight.lock();
            if released {
                inflight.take(packet_id)
            } else {
                inflight.remove(packet_id)
            }
        };
        let Some((queue, pos)) = taken else {
            return false;
        };
        if released {
            self.state.released.lock().insert(packet_id);
            queue.ack([pos]);
        } else {
            queue.ack([pos]);
            self.release_id();
        }
        true
    }

    /// PUBACK for `packet_id`: frees the id and moves the delivery into
    /// `settled`, for [`Deliveries::ack_settled`] to remove from its queue with
    /// the other PUBACKs of the same read (one queue lock per batch rather than
    /// per message). False when no delivery has that id.
    pub fn puback(&self, packet_id: u16, settled: &mut Vec<(Arc<Queue>, SegPos)>) -> bool {
        let Some(delivery) = self.inflight.lock().remove(packet_id) else {
            return false;
        };
        settled.push(delivery);
        self.release_id();
        true
    }

    /// Removes the deliveries collected by [`Deliveries::puback`] from their
    /// queues, a run of the same queue at a time.
    pub fn ack_settled(settled: &mut Vec<(Arc<Queue>, SegPos)>) {
        for run in settled.chunk_by(|a, b| Arc::ptr_eq(&a.0, &b.0)) {
            run[0].0.ack(run.iter().map(|(_, pos)| *pos));
        }
        settled.clear();
    }

    /// PUBCOMP for `packet_id`: the QoS 2 exchange is complete and the id free.
    pub fn completed(&self, packet_id: u16) {
        if self.state.released.lock().remove(&packet_id) {
            self.inflight.lock().free(packet_id);
            self.release_id();
        }
    }

    /// One packet identifier less in use. The consumers are woken only when
    /// that ends a stall at `max_inflight`: below it they never wait for an
    /// acknowledgement, and a wake-up per PUBACK would switch tasks per message.
    fn release_id(&self) {
        if self.in_use.fetch_sub(1, Ordering::AcqRel) >= self.max_inflight {
            self.wake_all();
        }
    }

    /// Takes back the deliveries from `queue` (every queue with `None`) not
    /// yet acknowledged, in delivery order, so that they are handed out again.
    pub fn requeue_inflight(&self, queue: Option<&Arc<Queue>>) {
        let mut taken: Vec<(Arc<Queue>, SegPos)> = self
            .inflight
            .lock()
            .drain_where(|(q, _)| queue.is_none_or(|wanted| Arc::ptr_eq(wanted, q)))
            .into_iter()
            .map(|(_, delivery)| delivery)
            .collect();
        self.in_use.fetch_sub(taken.len(), Ordering::AcqRel);
        taken.sort_unstable_by_key(|(q, pos)| (Arc::as_ptr(q) as usize, *pos));
        for chunk in taken.chunk_by(|a, b| Arc::ptr_eq(&a.0, &b.0)) {
            chunk[0]
                .0
                .requeue(chunk.iter().map(|(_, pos)| *pos).collect::<Vec<_>>());
        }
    }

    /// Writes the MQTT 5 properties of a delivery into `out` (without their
    /// length): those mapped from the message's core properties, and the
    /// subscription identifiers.
    fn write_properties(m: &RecordView<'_>, props: Option<&BasicProperties>, ids: &[u32], out: &mut BytesMut) {
        out.clear();
        if let Some(props) = props {
            let mut mapped = Properties::default();
            delivery_properties(props, Message::now_ms().saturating_sub(m.timestamp), &mut mapped);
            if mapped.check().is_ok() {
                mapped.put_body(out);
            }
        }
        for &id in ids {
            put_subscription_identifier(out, id);
        }
    }
}

/// The consumer of one queue (the session's or a shared subscription's) for
/// one connection.
pub struct MqttConsumer {
    id: u64,
    tag: String,
    queue: Arc<Queue>,
    source: Source,
    deliveries: Arc<Deliveries>,
    wake: Notify,
    cancelled: AtomicBool,
    /// Cancelled when the queue is deleted under the connection.
    pub queue_gone: CancellationToken,
}

impl MqttConsumer {
    /// Starts the delivery task.
    pub fn spawn(self: &Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move { me.run().await });
    }

    /// Stops deliveries (the connection is closing or the subscription ended).
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// The queue being consumed.
    pub fn queue(&self) -> &Arc<Queue> {
        &self.queue
    }

    async fn run(self: Arc<Self>) {
        let d = &self.deliveries;
        crate::transport::delivery_loop::run(&self.queue, &d.outbox, &self.wake, &self.cancelled).await;
    }

    /// Works out `last` for `routing_key` (its topic, and what this
    /// consumer's subscriptions grant it) unless it already holds that for
    /// this consumer and its current subscriptions.
    fn work_out_topic(&self, routing_key: &str, last: &mut LastTopic) {
        // No lock for the check: a change completed before this delivery has
        // already moved the count.
        let changes = match &self.source {
            Source::Session(subs) => subs.changes(),
            Source::Shared(_) => 0,
        };
        if !last.routing_key.is_empty()
            && last.consumer == self.id
            && last.changes == changes
            && last.routing_key == routing_key
        {
            return;
        }
        last.routing_key.clear();
        last.routing_key.push_str(routing_key);
        last.consumer = self.id;
        last.changes = changes;
        write_topic(routing_key, &mut last.topic);
        let (topic, ids) = (last.topic.as_str(), &mut last.ids);
        ids.clear();
        last.granted = match &self.source {
            // The group's queue only gets what its filter routes, but `$`
            // topics still need the filter's own check [MQTT-4.7.2-1].
            Source::Shared(sub) if !matches(&sub.filter, topic) => None,
            Source::Shared(sub) => {
                ids.extend(sub.id);
                Some((sub.qos, sub.retain_as_published))
            }
            Source::Session(subs) => {
                let list = subs.read();
                // Counted again under the lock, to match the list read.
                last.changes = subs.changes();
                let mut best: Option<(QoS, bool)> = None;
                for sub in list.iter().filter(|s| matches(&s.filter, topic)) {
                    ids.extend(sub.id);
                    let (qos, rap) = best.unwrap_or((QoS::AtMostOnce, false));
                    best = Some((qos.max(sub.qos), rap || sub.retain_as_published));
                }
                best
            }
        };
    }
}

impl Consumer for MqttConsumer {
    fn tag(&self) -> &str {
        &self.tag
    }

    fn priority(&self) -> i32 {
        0
    }

    fn has_capacity(&self) -> bool {
        let d = &self.deliveries;
        !self.is_cancelled() && !d.outbox.is_full() && d.in_use.load(Ordering::Acquire) < d.max_inflight
    }

    fn reserve(&self) -> bool {
        let d = &self.deliveries;
        d.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < d.max_inflight).then_some(n + 1)
            })
            .is_ok()
    }

    fn unreserve(&self) {
        self.deliveries.in_use.fetch_sub(1, Ordering::AcqRel);
    }

    fn deliver(&self, m: &RecordView<'_>, pos: SegPos, redelivered: bool) -> bool {
        let d = &self.deliveries;
        let mut scratch = d.scratch.lock();
        let Scratch {
            last,
            properties,
            aliases,
        } = &mut *scratch;
        self.work_out_topic(m.routing_key, last);
        let (topic, ids) = (&last.topic, &last.ids);
        let Some((granted, rap)) = last.granted else {
            // Routed here by a binding that no subscription wants any more (or a
            // `$` topic reached through a wildcard): dropped.
            d.in_use.fetch_sub(1, Ordering::AcqRel);
            return true;
        };
        // Only MQTT 5 deliveries of messages with more than a delivery mode
        // need the properties decoded.
        let decoded = (d.version.is_v5() && has_mapped_properties(m.properties))
            .then(|| BasicProperties::decode(&mut bytes::Bytes::copy_from_slice(m.properties)).ok())
            .flatten();
        let origin = match &decoded {
            Some(p) => origin_of(p),
            None => stored_origin(m.properties),
        };
        let qos = granted.min(origin.qos);
        let retain = origin.retained_copy || (rap && origin.retain_published);
        let mut send_topic = topic.as_str();
        let mut new_alias = None;
        let props = if d.version.is_v5() {
            Deliveries::write_properties(m, decoded.as_ref(), ids, properties);
            // A topic alias: set up on the first delivery of a topic, then
            // used instead of the topic while the client's maximum allows.
            // (A new alias is recorded only once the PUBLISH is sent.)
            let known = if d.topic_alias_maximum > 0 {
                aliases.get(topic.as_str()).copied()
            } else {
                None
            };
            new_alias = u16::try_from(aliases.len() + 1)
                .ok()
                .filter(|next| known.is_none() && *next <= d.topic_alias_maximum);
            if let Some(alias) = known.or(new_alias) {
                put_topic_alias(properties, alias);
                if known.is_some() {
                    send_topic = "";
                }
            }
            Some(&properties[..])
        } else {
            None
        };
        if let Some(max) = d.max_packet_size {
            let props_len = props.map_or(0, |p| varint_len(p.len()) + p.len());
            let body = 2 + send_topic.len() + 2 + props_len + m.body.len();
            if 1 + varint_len(body) + body > max {
                // Too large for the client: discarded as if delivered [MQTT-3.1.2-25].
                tracing::debug!(size = body, max, "message too large for the client dropped");
                d.in_use.fetch_sub(1, Ordering::AcqRel);
                return true;
            }
        }
        if let Some(alias) = new_alias {
            aliases.insert(topic.clone(), alias);
        }
        let packet_id = if qos == QoS::AtMostOnce {
            d.in_use.fetch_sub(1, Ordering::AcqRel);
            0
        } else {
            let entry = (self.queue.clone(), pos);
            // Identifiers of QoS 2 exchanges awaiting PUBCOMP stay taken.
            let released = &d.state.released;
            let id = d.inflight.lock().insert(entry, |id| released.lock().contains(&id));
            // `reserve` counted this delivery in `in_use`, which never exceeds
            // the 65535 identifiers, so one is free.
            id.unwrap_or(0)
        };
        let head = PublishHead {
            topic: send_topic,
            qos,
            packet_id,
            retain,
            dup: redelivered && packet_id != 0,
            properties: props,
        };
        d.outbox.write(|out| {
            // Topics come from routing keys (at most 255 bytes): always encodable.
            let _ = write_publish_head(out, &head, m.body);
        });
        if d.outbox.is_full() {
            self.wake.notify_one();
        }
        packet_id == 0
    }

    fn flush(&self) {
        self.deliveries.outbox.flush();
    }

    fn notify(&self) {
        self.wake.notify_one();
    }

    fn queue_deleted(&self) {
        self.cancel();
        self.queue_gone.cancel();
    }

    fn id(&self) -> u64 {
        self.id
    }
}
