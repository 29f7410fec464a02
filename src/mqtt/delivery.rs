//! Deliveries to an MQTT client: the consumer a connection attaches to its
//! session's queue, and the messages it has sent with QoS 1 or 2 and not yet
//! seen acknowledged.
//!
//! The queue runs delivery under its lock and hands each message to
//! [`MqttConsumer::deliver`], which writes a PUBLISH straight from the mapped
//! segment into the connection's outbox. The QoS of a delivery is the lower of
//! the message's QoS and the highest QoS among the session's subscriptions that
//! match its topic [MQTT-3.3.5-1]. QoS 0 deliveries are settled on the spot;
//! QoS 1 and 2 deliveries stay in the queue, unacknowledged, until PUBACK
//! (or PUBREC) names their packet identifier, so a lost connection puts them
//! back for the next one, which sends them with DUP set.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::codec::topic::matches;
use super::codec::{QoS, write_publish};
use super::message_props::stored_qos;
use super::session_registry::SessionState;
use super::topic_map::write_topic;
use crate::core::consumer::Consumer;
use crate::core::queue::Queue;
use crate::store::SegPos;
use crate::store::record::RecordView;
use crate::transport::outbox::Outbox;

/// The topic filters of a session with their granted QoS, in subscription
/// order.
pub type Subscriptions = RwLock<Vec<(String, QoS)>>;

/// Deliveries awaiting PUBACK or PUBREC, by packet identifier.
#[derive(Default)]
struct Inflight {
    by_id: FxHashMap<u16, SegPos>,
    last_id: u16,
}

/// The consumer of one connection on its session's queue.
pub struct MqttConsumer {
    id: u64,
    tag: String,
    queue: Arc<Queue>,
    outbox: Arc<Outbox>,
    subscriptions: Arc<Subscriptions>,
    state: Arc<SessionState>,
    inflight: Mutex<Inflight>,
    /// The topic of the message being delivered, reused across deliveries.
    topic: Mutex<String>,
    /// Entries in `inflight` plus the session's released ids: packet ids in use.
    in_use: AtomicUsize,
    max_inflight: usize,
    wake: Notify,
    cancelled: AtomicBool,
    /// Cancelled when the queue is deleted under the session.
    pub queue_gone: CancellationToken,
}

impl MqttConsumer {
    /// Creates the consumer; attach it to the queue and start its task with
    /// [`MqttConsumer::spawn`].
    pub fn new(
        id: u64,
        client_id: &str,
        queue: Arc<Queue>,
        outbox: Arc<Outbox>,
        subscriptions: Arc<Subscriptions>,
        state: Arc<SessionState>,
        max_inflight: u16,
    ) -> Arc<Self> {
        let released = state.released.lock().len();
        Arc::new(MqttConsumer {
            id,
            tag: format!("mqtt-{client_id}"),
            queue,
            outbox,
            subscriptions,
            state,
            inflight: Mutex::default(),
            topic: Mutex::default(),
            in_use: AtomicUsize::new(released),
            max_inflight: usize::from(max_inflight.max(1)),
            wake: Notify::new(),
            cancelled: AtomicBool::new(false),
            queue_gone: CancellationToken::new(),
        })
    }

    /// Starts the delivery task.
    pub fn spawn(self: &Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move { me.run().await });
    }

    /// Stops deliveries (the connection is closing).
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

    /// PUBACK (QoS 1) or PUBREC (QoS 2) for `packet_id`: the message is settled.
    /// With `released`, the id stays in use until PUBCOMP. False when no
    /// delivery has that id.
    pub fn acknowledged(&self, packet_id: u16, released: bool) -> bool {
        let Some(pos) = self.inflight.lock().by_id.remove(&packet_id) else {
            return false;
        };
        if released {
            self.state.released.lock().insert(packet_id);
        } else {
            self.in_use.fetch_sub(1, Ordering::AcqRel);
        }
        self.queue.ack([pos]);
        self.wake.notify_one();
        true
    }

    /// PUBCOMP for `packet_id`: the QoS 2 exchange is complete and the id free.
    pub fn completed(&self, packet_id: u16) {
        if self.state.released.lock().remove(&packet_id) {
            self.in_use.fetch_sub(1, Ordering::AcqRel);
            self.wake.notify_one();
        }
    }

    /// Takes back every delivery not yet acknowledged, in delivery order, so
    /// that the queue hands them out again (with DUP) to the next connection.
    pub fn requeue_inflight(&self) {
        let mut positions: Vec<SegPos> = self.inflight.lock().by_id.drain().map(|(_, p)| p).collect();
        positions.sort_unstable();
        self.queue.requeue(positions);
    }

    /// A packet identifier not in use by this session.
    fn next_packet_id(&self, inflight: &mut Inflight) -> u16 {
        let released = self.state.released.lock();
        loop {
            inflight.last_id = inflight.last_id.checked_add(1).unwrap_or(1);
            let id = inflight.last_id;
            if !inflight.by_id.contains_key(&id) && !released.contains(&id) {
                return id;
            }
        }
    }

    /// The highest QoS among the subscriptions matching `topic`.
    fn granted_qos(&self, topic: &str) -> Option<QoS> {
        self.subscriptions
            .read()
            .iter()
            .filter(|(filter, _)| matches(filter, topic))
            .map(|(_, qos)| *qos)
            .max()
    }

    async fn run(self: Arc<Self>) {
        crate::transport::delivery_loop::run(&self.queue, &self.outbox, &self.wake, &self.cancelled).await;
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
        !self.is_cancelled() && !self.outbox.is_full() && self.in_use.load(Ordering::Acquire) < self.max_inflight
    }

    fn deliver(&self, m: &RecordView<'_>, pos: SegPos, redelivered: bool) -> bool {
        let mut topic = self.topic.lock();
        write_topic(m.routing_key, &mut topic);
        let Some(granted) = self.granted_qos(&topic) else {
            // Routed here by a binding that no subscription wants any more (or a
            // `$` topic reached through a wildcard): dropped.
            return true;
        };
        let (published, retain) = stored_qos(m.properties);
        let qos = granted.min(published);
        let packet_id = if qos == QoS::AtMostOnce {
            0
        } else {
            let mut inflight = self.inflight.lock();
            let id = self.next_packet_id(&mut inflight);
            inflight.by_id.insert(id, pos);
            self.in_use.fetch_add(1, Ordering::AcqRel);
            id
        };
        let dup = redelivered && packet_id != 0;
        self.outbox.write(|out| {
            // Topics come from routing keys (at most 255 bytes): always encodable.
            let _ = write_publish(out, &topic, m.body, qos, packet_id, retain, dup);
        });
        if self.outbox.is_full() {
            self.wake.notify_one();
        }
        packet_id == 0
    }

    fn flush(&self) {
        self.outbox.flush();
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
