//! An MQTT session in the core's terms: one queue per client id, bound to
//! `amq.topic` once per subscription, as RabbitMQ's MQTT plugin does. A clean
//! session's queue belongs to its connection and goes with it; a persistent
//! session's queue is durable, so its subscriptions (the bindings) and the
//! messages queued while the client is away survive disconnects and restarts.
//!
//! The granted QoS and MQTT 5 options of a subscription ride in its binding's
//! arguments, so the subscriptions of a resumed session are read back from the
//! bindings. An MQTT 5 session expiry interval is the queue's `x-expires`, as
//! RabbitMQ does it: the queue, and with it the session, goes once it has been
//! unused that long.

use std::sync::Arc;

use bytes::BytesMut;

use super::codec::properties::{Context, Properties};
use super::codec::{QoS, SubscriptionOptions};
use super::delivery::{Subscription, Subscriptions};
use super::message_props::Origin;
use super::retained::RetainedStore;
use super::routing::core_message;
use super::topic_map::{binding_key_to_filter, filter_to_binding_key, topic_to_routing_key};
use crate::core::exchange::{Destination, Exchange};
use crate::core::message::Message;
use crate::core::queue::Queue;
use crate::core::vhost::{QueueOptions, VHost};
use crate::core::{FieldTable, FieldValue};

/// The exchange MQTT topics are routed through.
pub const TOPIC_EXCHANGE: &str = "amq.topic";
/// Binding argument holding a subscription's granted QoS.
pub const QOS_ARGUMENT: &str = "x-mqtt-subscription-qos";
/// Binding argument holding MQTT 5's no-local option.
pub const NO_LOCAL_ARGUMENT: &str = "x-mqtt-no-local";
/// Binding argument holding MQTT 5's retain-as-published option.
pub const RAP_ARGUMENT: &str = "x-mqtt-retain-as-published";
/// Binding argument holding an MQTT 5 subscription identifier.
pub const ID_ARGUMENT: &str = "x-mqtt-subscription-id";
/// Session queue argument listing the session's shared subscriptions
/// (their groups' queues are not bound to the session's queue), so that a
/// resumed session rejoins its groups: one table per subscription, with its
/// full `$share/...` filter under [`SHARED_FILTER_KEY`] and its options as in
/// a binding's arguments.
pub const SHARED_ARGUMENT: &str = "x-mqtt-shared-subscriptions";
/// Key of the full filter in an entry of [`SHARED_ARGUMENT`].
const SHARED_FILTER_KEY: &str = "filter";

/// How long a session outlives its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionExpiry {
    /// It ends with the connection (MQTT 3.1.1's clean session, MQTT 5's
    /// interval 0).
    WithConnection,
    /// It is kept this many seconds after the connection ends.
    After(u32),
    /// It is kept until a clean start discards it (3.1.1's persistent
    /// session, MQTT 5's interval 0xFFFFFFFF).
    Never,
}

impl SessionExpiry {
    /// The expiry of an MQTT 5 session expiry interval.
    pub fn from_interval(secs: u32) -> SessionExpiry {
        match secs {
            0 => SessionExpiry::WithConnection,
            u32::MAX => SessionExpiry::Never,
            n => SessionExpiry::After(n),
        }
    }

    /// Seconds, as MQTT 5 counts them.
    pub fn seconds(self) -> u32 {
        match self {
            SessionExpiry::WithConnection => 0,
            SessionExpiry::After(n) => n,
            SessionExpiry::Never => u32::MAX,
        }
    }
    /// The session queue's `x-expires` in milliseconds, if it has one.
    fn expires_ms(self) -> Option<i64> {
        match self {
            SessionExpiry::After(n) => Some(i64::from(n) * 1000),
            _ => None,
        }
    }
}

/// The queue argument that makes an unused session queue, and with it the
/// session, go.
const EXPIRES_ARGUMENT: &str = "x-expires";
/// The longest queue name the core stores.
const MAX_QUEUE_NAME: usize = 255;

/// The start of every session queue's name.
const QUEUE_PREFIX: &str = "mqtt-subscription-";

/// The queue of the session of `client_id` (RabbitMQ's name for it).
pub fn queue_name(client_id: &str) -> String {
    format!("{QUEUE_PREFIX}{client_id}qos1")
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

/// The binding arguments recording a subscription.
fn subscription_arguments(sub: &Subscription) -> FieldTable {
    let mut args = FieldTable::new();
    args.insert(QOS_ARGUMENT, FieldValue::U8(sub.qos.bits()));
    if sub.no_local {
        args.insert(NO_LOCAL_ARGUMENT, FieldValue::Bool(true));
    }
    if sub.retain_as_published {
        args.insert(RAP_ARGUMENT, FieldValue::Bool(true));
    }
    if let Some(id) = sub.id {
        args.insert(ID_ARGUMENT, FieldValue::I64(i64::from(id)));
    }
    args
}

/// A subscription to `filter` with `options` and identifier `id`.
pub fn subscription(filter: &str, options: SubscriptionOptions, id: Option<u32>) -> Subscription {
    Subscription {
        filter: filter.to_string(),
        qos: options.qos,
        no_local: options.no_local,
        retain_as_published: options.retain_as_published,
        id,
    }
}

impl Session {
    /// Opens the session of `client_id` for connection `conn_id`: with
    /// `clean_start` it starts from nothing (a stored one is deleted),
    /// otherwise it resumes a stored queue and subscriptions if they exist.
    /// `expiry` says how long the session outlives the connection. Returns
    /// the session and whether a stored session was resumed (CONNACK's
    /// session present).
    pub fn open(
        vhost: &Arc<VHost>,
        client_id: &str,
        clean_start: bool,
        expiry: SessionExpiry,
        conn_id: u64,
    ) -> crate::core::Result<(Session, bool)> {
        let name = queue_name(client_id);
        let exchange = vhost.get_exchange(TOPIC_EXCHANGE)?;
        let existing = vhost.queue(&name);
        if clean_start && existing.is_some() {
            vhost.delete_queue(&name, false, false, None)?;
        }
        let resumed = !clean_start && existing.as_ref().is_some_and(|q| q.exclusive_owner.is_none());
        let clean = expiry == SessionExpiry::WithConnection;
        if !resumed {
            let opts = QueueOptions {
                durable: !clean,
                exclusive: clean,
                ..QueueOptions::default()
            };
            let mut args = FieldTable::new();
            if let Some(ms) = expiry.expires_ms() {
                args.insert(EXPIRES_ARGUMENT, FieldValue::I64(ms));
            }
            vhost.declare_queue(&name, &opts, args, conn_id)?;
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
            subscriptions: Arc::new(Subscriptions::new(subscriptions)),
            clean,
            conn_id,
        };
        if resumed {
            session.set_expiry(expiry)?;
        }
        Ok((session, resumed))
    }

    /// Makes a stored session outlive its connection by `expiry` from now
    /// on: the client reconnected, or disconnected, with another interval.
    /// A session that ends with its connection has nothing stored to change.
    pub fn set_expiry(&self, expiry: SessionExpiry) -> crate::core::Result<()> {
        if self.clean || expiry == SessionExpiry::WithConnection {
            return Ok(());
        }
        let current = self
            .queue
            .arguments()
            .get(EXPIRES_ARGUMENT)
            .and_then(FieldValue::as_i64);
        let wanted = expiry.expires_ms();
        if current == wanted {
            return Ok(());
        }
        self.vhost
            .set_queue_argument(&self.queue, EXPIRES_ARGUMENT, wanted.map(FieldValue::I64))
    }

    /// Subscribes as `sub` says, replacing an existing subscription to the
    /// same filter [MQTT-3.8.4-3]. Returns whether the subscription is new
    /// (for MQTT 5's retain handling 1).
    pub fn subscribe(&self, sub: Subscription) -> crate::core::Result<bool> {
        let key = filter_to_binding_key(&sub.filter);
        let existing = self
            .subscriptions
            .read()
            .iter()
            .find(|s| s.filter == sub.filter)
            .cloned();
        if existing.as_ref() != Some(&sub) {
            self.unbind(&key)?;
            self.vhost.bind_queue(
                &self.queue.name,
                TOPIC_EXCHANGE,
                &key,
                subscription_arguments(&sub),
                Some(self.conn_id),
            )?;
        }
        self.subscriptions
            .change(|subs| match subs.iter_mut().find(|s| s.filter == sub.filter) {
                Some(entry) => *entry = sub,
                None => subs.push(sub),
            });
        Ok(existing.is_none())
    }

    /// Drops the subscription to `filter`; returns whether there was one.
    pub fn unsubscribe(&self, filter: &str) -> crate::core::Result<bool> {
        self.unbind(&filter_to_binding_key(filter))?;
        Ok(self.subscriptions.change(|subs| {
            let before = subs.len();
            subs.retain(|s| s.filter != filter);
            subs.len() != before
        }))
    }

    /// The shared subscriptions of a resumed session, by full `$share/...`
    /// filter; each subscription's filter is the one after the share name.
    pub fn stored_shared(&self) -> Vec<(String, Subscription)> {
        let arguments = self.queue.arguments();
        shared_entries(&arguments)
            .iter()
            .filter_map(|entry| {
                let table = entry.as_table()?;
                let full = table.get(SHARED_FILTER_KEY)?.as_str()?;
                let shared = super::shared_subscription::parse(full).ok()??;
                Some((full.to_string(), subscription_from_arguments(shared.filter, table)))
            })
            .collect()
    }

    /// Records that this session is a member of shared subscription
    /// `full_filter` with `sub` (`None`: no longer a member), so that a
    /// stored session rejoins the group when it is resumed. A session that
    /// ends with its connection stores nothing.
    pub fn record_shared(&self, full_filter: &str, sub: Option<&Subscription>) -> crate::core::Result<()> {
        if self.clean {
            return Ok(());
        }
        let arguments = self.queue.arguments();
        let before = shared_entries(&arguments);
        let is_other = |v: &FieldValue| {
            v.as_table()
                .and_then(|t| t.get(SHARED_FILTER_KEY))
                .and_then(FieldValue::as_str)
                != Some(full_filter)
        };
        let mut entries: Vec<FieldValue> = before.iter().filter(|v| is_other(v)).cloned().collect();
        if let Some(sub) = sub {
            let mut entry = subscription_arguments(sub);
            entry.insert(SHARED_FILTER_KEY, FieldValue::LongStr(full_filter.to_string().into()));
            entries.push(FieldValue::Table(entry));
        }
        if entries.as_slice() == before {
            return Ok(());
        }
        let value = (!entries.is_empty()).then_some(FieldValue::Array(entries));
        self.vhost.set_queue_argument(&self.queue, SHARED_ARGUMENT, value)
    }

    /// Whether every subscription of this session matching `topic` is
    /// no-local: a message the session's own client published then does not
    /// go into its queue [MQTT-3.8.3-3].
    pub fn only_no_local(&self, topic: &str) -> bool {
        let subs = self.subscriptions.read();
        let mut matching = subs
            .iter()
            .filter(|s| super::codec::topic::matches(&s.filter, topic))
            .peekable();
        matching.peek().is_some() && matching.all(|s| s.no_local)
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
            let origin = Origin {
                qos: r.qos,
                retained_copy: true,
                retain_published: false,
            };
            let mut properties = stored_properties(r.properties);
            // A message expiry counts from the publish [MQTT-3.3.2-5/-6].
            if let Some(p) = properties.as_mut()
                && let Some(secs) = p.message_expiry_interval
            {
                let left_ms = i64::from(secs) * 1000 - Message::now_ms().saturating_sub(r.published_ms);
                if left_ms <= 0 {
                    if let Err(e) = retained.expire(&r.topic, r.published_ms) {
                        tracing::warn!(topic = %r.topic, "cannot drop an expired retained message: {e}");
                    }
                    continue;
                }
                p.message_expiry_interval = u32::try_from(left_ms.saturating_add(999) / 1000).ok();
            }
            let msg = core_message(
                crate::wire::ShortStr::from(routing_key.into_owned()),
                origin,
                properties.as_deref(),
                r.payload,
            );
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

/// The MQTT 5 properties a retained message was published with, from their
/// stored encoding.
fn stored_properties(encoded: Option<bytes::Bytes>) -> Option<Box<Properties>> {
    let encoded = encoded.filter(|e| !e.is_empty())?;
    Properties::decode_block(encoded, Context::Publish).ok()
}

fn is_queue(d: &Destination, q: &Arc<Queue>) -> bool {
    matches!(d, Destination::Queue(b) if Arc::ptr_eq(b, q))
}

/// The subscriptions of a stored session, from its queue's bindings.
fn stored_subscriptions(exchange: &Exchange, queue: &Arc<Queue>) -> Vec<Subscription> {
    exchange
        .bindings()
        .into_iter()
        .filter(|b| is_queue(&b.destination, queue))
        .map(|b| subscription_from_arguments(&binding_key_to_filter(&b.routing_key), &b.arguments))
        .collect()
}

/// The subscription to `filter` whose options `args` record (see
/// [`subscription_arguments`]).
fn subscription_from_arguments(filter: &str, args: &FieldTable) -> Subscription {
    let flag = |name| args.get(name).and_then(FieldValue::as_bool).unwrap_or(false);
    Subscription {
        filter: filter.to_string(),
        qos: args
            .get(QOS_ARGUMENT)
            .and_then(FieldValue::as_i64)
            .and_then(|q| QoS::from_bits(q.clamp(0, 2) as u8))
            .unwrap_or(QoS::AtLeastOnce),
        no_local: flag(NO_LOCAL_ARGUMENT),
        retain_as_published: flag(RAP_ARGUMENT),
        id: args
            .get(ID_ARGUMENT)
            .and_then(FieldValue::as_i64)
            .and_then(|id| u32::try_from(id).ok()),
    }
}

/// The full `$share/...` filters of the shared subscriptions a stored
/// session's queue records (none for any other queue).
pub fn stored_shared_filters(queue: &Queue) -> Vec<String> {
    if !queue.name.starts_with(QUEUE_PREFIX) {
        return Vec::new();
    }
    let arguments = queue.arguments();
    shared_entries(&arguments)
        .iter()
        .filter_map(|entry| entry.as_table()?.get(SHARED_FILTER_KEY)?.as_str().map(str::to_string))
        .collect()
}

/// The entries of [`SHARED_ARGUMENT`] in a session queue's arguments.
fn shared_entries(arguments: &FieldTable) -> &[FieldValue] {
    arguments
        .get(SHARED_ARGUMENT)
        .and_then(FieldValue::as_array)
        .unwrap_or_default()
}
