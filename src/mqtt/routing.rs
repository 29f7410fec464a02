//! Publishing an MQTT message into the core: the message built from the
//! publish (QoS, RETAIN, MQTT 5 properties), the retained store, and the
//! queues `amq.topic` routes it to. Shared by client publishes and wills,
//! which may be published after their connection is gone.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::codec::{Properties, QoS};
use super::context::MqttContext;
use super::message_props::{Origin, encoded, message_with, origin_properties, topic_message};
use super::property_map::apply_publish_properties;
use super::topic_map::topic_to_routing_key;
use crate::core::exchange::Exchange;
use crate::core::message::Message;
use crate::core::queue::Queue;
use crate::core::route_cache::RouteCache;
use crate::core::vhost::VHost;
use crate::wire::ShortStr;

/// Why a message could not be published.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The topic maps to a routing key longer than AMQP allows.
    #[error("topic names longer than 255 bytes are not supported ({0} bytes)")]
    TopicTooLong(usize),
    /// The retained store refused the message.
    #[error("cannot store the retained message: {0}")]
    Retained(String),
}

/// What a publish did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Routed {
    /// A durable queue took it: its acknowledgement waits for a sync.
    pub durable: bool,
    /// How many queues took it.
    pub queues: usize,
}

/// One message to publish on `topic`.
pub struct Outgoing<'a> {
    /// The topic name.
    pub topic: &'a str,
    /// QoS of the publish.
    pub qos: QoS,
    /// The RETAIN flag.
    pub retain: bool,
    /// MQTT 5 properties.
    pub properties: Option<&'a Properties>,
    /// The application message.
    pub payload: Bytes,
}

impl Outgoing<'_> {
    /// How this publish is recorded in the message's properties.
    fn origin(&self) -> Origin {
        Origin {
            qos: self.qos,
            retained_copy: false,
            retain_published: self.retain,
        }
    }
}

/// A message to `amq.topic` recording `origin` and mapping MQTT 5
/// `properties` onto the core's.
pub fn core_message(routing_key: ShortStr, origin: Origin, properties: Option<&Properties>, payload: Bytes) -> Message {
    match properties {
        None => topic_message(routing_key, origin, payload),
        Some(p) => {
            let mut props = origin_properties(origin);
            apply_publish_properties(&mut props, p);
            let (props, raw) = encoded(props);
            message_with(routing_key, props, raw, payload)
        }
    }
}

/// Reusable buffers of a publisher, and what it published last: a client
/// that publishes to one topic again and again has its topic translated and
/// routed once.
#[derive(Default)]
pub struct Publisher {
    queues: Vec<Arc<Queue>>,
    scratch: BytesMut,
    /// The last topic published to, and its routing key.
    last_topic: String,
    last_routing_key: ShortStr,
    route: RouteCache,
    /// The last plain message (QoS 0 or 1, no RETAIN, no MQTT 5 properties)
    /// with its QoS, kept to publish the next plain one without allocating
    /// its properties again.
    spare: Option<(QoS, Message)>,
    /// Queues that got their first ready message; the caller wakes them.
    pub wakes: Vec<Arc<Queue>>,
}

impl Publisher {
    /// Publishes `m` through `exchange` (`amq.topic` of `vhost`), keeping it
    /// as the topic's retained message when asked, leaving out the queues
    /// `skip` names. The message is taken, so that its payload moves into the
    /// stored message rather than being shared with it.
    pub fn publish(
        &mut self,
        ctx: &MqttContext,
        vhost: &Arc<VHost>,
        exchange: &Exchange,
        mut m: Outgoing<'_>,
        skip: impl Fn(&Arc<Queue>) -> bool,
    ) -> Result<Routed, RouteError> {
        if self.last_topic != m.topic || self.last_topic.is_empty() {
            let routing_key = topic_to_routing_key(m.topic);
            if routing_key.len() > 255 {
                return Err(RouteError::TopicTooLong(routing_key.len()));
            }
            self.last_routing_key = ShortStr::from(routing_key.into_owned());
            self.last_topic.clear();
            self.last_topic.push_str(m.topic);
        }
        if m.retain {
            let properties = m.properties.filter(|p| p.check().is_ok()).map(|p| {
                let mut out = BytesMut::new();
                p.put_body(&mut out);
                out.freeze()
            });
            ctx.retained
                .of(vhost, ctx.broker.sync.enabled())
                .and_then(|store| store.set(m.topic, m.qos, m.payload.clone(), properties))
                .map_err(|e| RouteError::Retained(e.to_string()))?;
        }
        let plain = m.properties.is_none() && m.origin().only_delivery_mode();
        let msg = match self.spare.take() {
            Some((qos, mut msg)) if plain && qos == m.qos => {
                msg.timestamp = Message::coarse_now_ms();
                // The same bytes when the topic did not change: the spare
                // holds them, so they cannot have been freed and reallocated.
                if !std::ptr::eq(msg.routing_key.as_str(), self.last_routing_key.as_str()) {
                    msg.routing_key = self.last_routing_key.clone();
                }
                msg.body = std::mem::take(&mut m.payload);
                msg
            }
            _ => core_message(
                self.last_routing_key.clone(),
                m.origin(),
                m.properties,
                std::mem::take(&mut m.payload),
            ),
        };
        let mut queues = std::mem::take(&mut self.queues);
        vhost.route_cached(exchange, &msg, &[], &mut queues, Some(&mut self.route));
        let mut routed = Routed::default();
        for q in queues.iter().filter(|q| !skip(q)) {
            match q.publish(&msg, &mut self.scratch) {
                Ok(p) => {
                    routed.durable |= q.durable;
                    routed.queues += 1;
                    if p.woke && !self.wakes.iter().any(|w| Arc::ptr_eq(w, q)) {
                        self.wakes.push(q.clone());
                    }
                }
                Err(e) => tracing::error!(queue = %q.name, "publish failed: {e}"),
            }
        }
        queues.clear();
        self.queues = queues;
        if plain {
            // The payload is a slice of the read buffer: not kept past the publish.
            let mut msg = msg;
            msg.body = Bytes::new();
            self.spare = Some((m.qos, msg));
        }
        Ok(routed)
    }

    /// Wakes the consumers of the queues that got their first messages.
    pub fn wake(&mut self) {
        for q in self.wakes.drain(..) {
            q.deliver_or_wake();
        }
    }
}
