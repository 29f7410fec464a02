//! An MQTT session in the core's terms: one queue per client id, bound to
//! `amq.topic` once per subscription, as RabbitMQ's MQTT plugin does. A clean
//! session's queue belongs to its connection and goes with it; a persistent
//! session's queue is durable, so its subscriptions (the bindings) and the
//! messages queued while the client is away survive disconnects and restarts.
//!
//! The granted QoS of a subscription rides in its binding's arguments, so the
//! subscriptions of a resumed session are read back from the bindings.

use std::sync::Arc;

use bytes::BytesMut;

use super::codec::QoS;
use super::delivery::Subscriptions;
use super::message_props::topic_message;
use super::retained::RetainedStore;
use super::topic_map::{binding_key_to_filter, filter_to_binding_key, topic_to_routing_key};
use crate::core::exchange::{Destination, Exchange};
use crate::core::queue::Queue;
use crate::core::vhost::{QueueOptions, VHost};
use crate::core::{FieldTable, FieldValue};

/// The exchange MQTT topics are routed through.
pub const TOPIC_EXCHANGE: &str = "amq.topic";
/// Binding argument holding a subscription's granted QoS.
pub const QOS_ARGUMENT: &str = "x-mqtt-subscription-qos";
/// The longest queue name the core stores.
const MAX_QUEUE_NAME: usize = 255;

/// The queue of the session of `client_id` (RabbitMQ's name for it).
pub fn queue_name(client_id: &str) -> String {
    format!("mqtt-subscription-{client_id}qos1")
}

/// True when the client id makes a queue name the core can store.
pub fn client_id_fits(client_id: &str) -> bool {
    queue_name(client_id).len() <= MAX_QUEUE_NAME
}

/// The core objects behind one session while a connection holds it.
pub struct Session {
    /// The vhost the session lives in.
    pub vhost: Arc<VHost>,
    /// The session's queue.
    pub queue: Arc<Queue>,
    /// `amq.topic` of the vhost.
    pub exchange: Arc<Exchange>,
    /// Topic filters and their granted QoS; shared with the consumer.
    pub subscriptions: Arc<Subscriptions>,
    /// Discarded when the connection ends.
    pub clean: bool,
    conn_id: u64,
}

impl Session {
    /// Opens the session of `client_id` for connection `conn_id`: a clean
    /// session starts from nothing (a stored one is deleted), a persistent one
    /// resumes its queue and subscriptions if they exist. Returns the session
    /// and whether a stored session was resumed (CONNACK's session present).
    pub fn open(
        vhost: &Arc<VHost>,
        client_id: &str,
        clean: bool,
        conn_id: u64,
    ) -> crate::core::Result<(Session, bool)> {
        let name = queue_name(client_id);
        let exchange = vhost.get_exchange(TOPIC_EXCHANGE)?;
        let existing = vhost.queue(&name);
        if clean && existing.is_some() {
            vhost.delete_queue(&name, false, false, None)?;
        }
        let resumed = !clean && existing.as_ref().is_some_and(|q| q.exclusive_owner.is_none());
        if !resumed {
            let opts = QueueOptions {
                durable: !clean,
                exclusive: clean,
                ..QueueOptions::default()
            };
            vhost.declare_queue(&name, &opts, FieldTable::new(), conn_id)?;
        }
        let queue = vhost.get_queue(&name)?;
        let subscriptions = if resumed {
            stored_subscriptions(&exchange, &queue)
        } else {
            Vec::new()
        };
        let session = Session {
            vhost: vhost.clone(),
            queue,
            exchange,
            subscriptions: Arc::new(parking_lot::RwLock::new(subscriptions)),
            clean,
            conn_id,
        };
        Ok((session, resumed))
    }

    /// Subscribes to `filter` with `qos`, replacing an existing subscription
    /// to the same filter [MQTT-3.8.4-3].
    pub fn subscribe(&self, filter: &str, qos: QoS) -> crate::core::Result<()> {
        let key = filter_to_binding_key(filter);
        let same = self.subscriptions.read().iter().any(|(f, q)| f == filter && *q == qos);
        if !same {
            self.unbind(&key)?;
            let mut args = FieldTable::new();
            args.insert(QOS_ARGUMENT, FieldValue::U8(qos.bits()));
            self.vhost
                .bind_queue(&self.queue.name, TOPIC_EXCHANGE, &key, args, Some(self.conn_id))?;
        }
        let mut subs = self.subscriptions.write();
        match subs.iter_mut().find(|(f, _)| f == filter) {
            Some(entry) => entry.1 = qos,
            None => subs.push((filter.to_string(), qos)),
        }
        Ok(())
    }

    /// Drops the subscription to `filter`; an unknown filter is not an error.
    pub fn unsubscribe(&self, filter: &str) -> crate::core::Result<()> {
        self.unbind(&filter_to_binding_key(filter))?;
        self.subscriptions.write().retain(|(f, _)| f != filter);
        Ok(())
    }

    /// Removes the bindings of this queue with binding key `key`.
    fn unbind(&self, key: &str) -> crate::core::Result<()> {
        let me = Destination::Queue(self.queue.clone());
        for arguments in self.exchange.binding_arguments(&me, key) {
            self.vhost
                .unbind_queue(&self.queue.name, TOPIC_EXCHANGE, key, &arguments, self.conn_id)?;
        }
        Ok(())
    }

    /// Puts copies of the retained messages `filter` matches into the
    /// session's queue, marked retained, behind what is queued already
    /// [MQTT-3.3.1-6]. Returns true when the queue's consumers need waking.
    pub fn queue_retained(&self, retained: &RetainedStore, filter: &str, scratch: &mut BytesMut) -> bool {
        let mut wake = false;
        for r in retained.matching(filter) {
            let routing_key = topic_to_routing_key(&r.topic);
            if routing_key.len() > 255 {
                continue;
            }
            let msg = topic_message(routing_key.into_owned(), r.qos, true, r.payload);
            match self.queue.publish(&msg, scratch) {
                Ok(p) => wake |= p.woke,
                Err(e) => tracing::error!(queue = %self.queue.name, "cannot queue a retained message: {e}"),
            }
        }
        wake
    }

    /// The connection is done with the session: a clean session's queue is
    /// deleted.
    pub fn close(&self) {
        if self.clean {
            self.vhost.remove_queue(&self.queue);
        }
    }
}

fn is_queue(d: &Destination, q: &Arc<Queue>) -> bool {
    matches!(d, Destination::Queue(b) if Arc::ptr_eq(b, q))
}

/// The subscriptions of a stored session, from its queue's bindings.
fn stored_subscriptions(exchange: &Exchange, queue: &Arc<Queue>) -> Vec<(String, QoS)> {
    exchange
        .bindings()
        .into_iter()
        .filter(|b| is_queue(&b.destination, queue))
        .map(|b| {
            let qos = b
                .arguments
                .get(QOS_ARGUMENT)
                .and_then(FieldValue::as_i64)
                .and_then(|q| QoS::from_bits(q.clamp(0, 2) as u8))
                .unwrap_or(QoS::AtLeastOnce);
            (binding_key_to_filter(&b.routing_key).into_owned(), qos)
        })
        .collect()
}
