//! A link on which a client publishes: its target (an exchange with a fixed
//! or per-message routing key, or none, when each message's `to` names it),
//! the credit we grant it, messages split over several transfers, and the
//! outcome of each: accepted once stored (and synced, when it must survive
//! a restart), released when nothing routed it, rejected when refused.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::address::Address;
use super::codec::performative::{AmqpError, DeliveryState, Transfer};
use super::error::{condition, from_core};
use super::message::Received;
use super::session::SessionLinks;
use crate::amqp::AmqpContext;
use crate::core::exchange::Exchange;
use crate::core::message::Message;
use crate::core::permissions::{Access, Compiled};
use crate::core::queue::Queue;
use crate::core::route_cache::RouteCache;
use crate::core::vhost::VHost;
use crate::wire::{BasicProperties, ShortStr};

/// Most credit a publisher gets at a time (RabbitMQ grants 128): with small
/// messages, more lets a fast sender fill whole socket reads, as each top-up
/// is a flow frame it waits for.
const MAX_LINK_CREDIT: u32 = 2048;

/// Least credit a publisher gets at a time, however large its messages.
const MIN_LINK_CREDIT: u32 = 8;

/// Bytes of messages a publisher's credit covers, counted at the size of its
/// last message: what it may still send once an alarm withholds credit.
const CREDIT_BYTES: u64 = 8 << 20;

/// The message size assumed before a link's first message: its first credit
/// is RabbitMQ's 128.
const FIRST_MESSAGE_SIZE: u64 = CREDIT_BYTES / 128;

/// Where a publishing link sends messages.
pub enum Target {
    /// An exchange, with a fixed routing key or the subject of each message.
    Exchange(FixedTarget),
    /// No target address: each message's `to` property says where.
    PerMessage,
    /// RabbitMQ's management node: messages are requests, answered on the
    /// reply link of the same name.
    Management(String),
}

/// An exchange resolved at attach, with its name and the routing key as
/// messages carry them, made once rather than per message.
pub struct FixedTarget {
    exchange: Arc<Exchange>,
    name: ShortStr,
    key: Option<ShortStr>,
}

impl FixedTarget {
    /// Publishing to `exchange`, with `key` or else each message's subject.
    pub fn new(exchange: Arc<Exchange>, key: Option<String>) -> FixedTarget {
        FixedTarget {
            name: ShortStr::from(exchange.name.as_str()),
            exchange,
            key: key.map(ShortStr::from),
        }
    }
}

/// What a publisher needs from its connection for each message.
pub struct PublishContext<'a> {
    /// Shared server state.
    pub ctx: &'a AmqpContext,
    /// The connection's vhost.
    pub vhost: &'a Arc<VHost>,
    /// The user, for `user-id` checks and permission errors.
    pub user: &'a str,
    /// The user's permissions now.
    pub perms: &'a Compiled,
    /// Queues that got their first ready message: woken after the batch.
    pub wakes: &'a mut Vec<Arc<Queue>>,
    /// A queue whose consumers cannot keep up: the connection's next read
    /// waits for them.
    pub paced_by: &'a mut Option<Arc<Queue>>,
    /// Messages without a timestamp get the broker's (`set_timestamp`),
    /// as of the start of the read batch.
    pub set_timestamp: bool,
    /// The connection (owner of the exclusive queues it declares).
    pub conn_id: u64,
}

/// A message whose transfers are still arriving.
struct Partial {
    delivery_id: u32,
    settled: bool,
    bytes: BytesMut,
}

/// A publishing link.
pub struct Publisher {
    /// The link's handle.
    pub handle: u32,
    /// Where its messages go.
    pub target: Target,
    /// Transfers received so far on the link.
    pub delivery_count: u32,
    /// Credit the client has left.
    pub credit: u32,
    /// The largest message accepted.
    pub max_message_size: u64,
    /// The size of the last whole message, which the credit is counted in.
    last_message_size: u64,
    partial: Option<Partial>,
    queues: Vec<Arc<Queue>>,
    scratch: BytesMut,
    /// The last route of a fixed target, as 0-9-1 channels keep theirs.
    route: RouteCache,
    /// The properties box of the last message, for the next one: a message
    /// otherwise allocates and frees one.
    spare_properties: Option<Box<BasicProperties>>,
}

/// Resolves an exchange by name, checking write permission on it.
pub fn writable_exchange(pc: &PublishContext<'_>, name: &str) -> Result<Arc<Exchange>, AmqpError> {
    let Some(x) = pc.vhost.exchange(name) else {
        return Err(AmqpError::new(
            condition::NOT_FOUND,
            format!("no exchange '{name}' in vhost '{}'", pc.vhost.name),
        ));
    };
    pc.perms
        .check(Access::Write, "exchange", &x.name, &pc.vhost.name, pc.user)
        .map_err(|e| from_core(&e))?;
    if x.internal {
        return Err(AmqpError::new(
            condition::UNAUTHORIZED,
            format!("cannot publish to internal exchange '{name}'"),
        ));
    }
    Ok(x)
}

/// The exchange and key an address publishes to; a queue must exist.
pub fn resolve(pc: &PublishContext<'_>, address: &Address) -> Result<(Arc<Exchange>, Option<String>), AmqpError> {
    match address {
        Address::Queue(q) => {
            if pc.vhost.queue(q).is_none() {
                return Err(AmqpError::new(
                    condition::NOT_FOUND,
                    format!("no queue '{q}' in vhost '{}'", pc.vhost.name),
                ));
            }
            Ok((writable_exchange(pc, "")?, Some(q.clone())))
        }
        Address::Exchange(x, key) => Ok((writable_exchange(pc, x)?, key.clone())),
        Address::Management => Err(AmqpError::new(
            condition::NOT_IMPLEMENTED,
            "the management node is not available",
        )),
    }
}

impl Publisher {
    /// A publisher on link `handle` sending to `target`.
    pub fn new(handle: u32, target: Target, max_message_size: u64) -> Publisher {
        Publisher {
            handle,
            target,
            delivery_count: 0,
            credit: 0,
            max_message_size,
            last_message_size: FIRST_MESSAGE_SIZE,
            partial: None,
            queues: Vec::new(),
            scratch: BytesMut::new(),
            route: RouteCache::default(),
            spare_properties: None,
        }
    }

    /// The credit the link is topped up to: as many messages of its last
    /// message's size as [`CREDIT_BYTES`] holds, within bounds.
    pub fn credit_window(&self) -> u32 {
        (CREDIT_BYTES / self.last_message_size.max(1)).clamp(u64::from(MIN_LINK_CREDIT), u64::from(MAX_LINK_CREDIT))
            as u32
    }

    /// Tops the credit up when half of it is used; returns the link's flow
    /// state (handle, delivery count, credit) to send when it did.
    pub fn top_up_credit(&mut self) -> Option<(u32, u32, u32)> {
        let window = self.credit_window();
        if self.credit >= window / 2 {
            return None;
        }
        self.credit = window;
        Some((self.handle, self.delivery_count, self.credit))
    }

    /// A transfer on this link. Returns the outcome to settle it with (None
    /// when the message is incomplete, or was sent settled, or waits for a
    /// sync), or a link error that detaches the link.
    pub fn on_transfer(
        &mut self,
        pc: &mut PublishContext<'_>,
        session: &SessionLinks<'_>,
        t: Transfer,
        payload: Bytes,
    ) -> Result<(), AmqpError> {
        if t.aborted {
            self.partial = None;
            return Ok(());
        }
        let first = self.partial.is_none();
        if first {
            if self.credit == 0 {
                return Err(AmqpError::new(
                    condition::TRANSFER_LIMIT,
                    "transfer without link credit",
                ));
            }
            self.credit -= 1;
            self.delivery_count = self.delivery_count.wrapping_add(1);
        }
        let (delivery_id, settled, payload) = match (self.partial.take(), t.more) {
            (None, false) => {
                let Some(id) = t.delivery_id else {
                    return Err(AmqpError::new(condition::INVALID_FIELD, "transfer without delivery-id"));
                };
                (id, t.settled.unwrap_or(false), payload)
            }
            (partial, more) => {
                let mut p = match partial {
                    Some(p) => p,
                    None => Partial {
                        delivery_id: t
                            .delivery_id
                            .ok_or_else(|| AmqpError::new(condition::INVALID_FIELD, "transfer without delivery-id"))?,
                        settled: t.settled.unwrap_or(false),
                        bytes: BytesMut::new(),
                    },
                };
                p.settled |= t.settled.unwrap_or(false);
                if (p.bytes.len() + payload.len()) as u64 > self.max_message_size {
                    return Err(AmqpError::new(
                        condition::MESSAGE_SIZE,
                        format!("message larger than {} bytes", self.max_message_size),
                    ));
                }
                p.bytes.extend_from_slice(&payload);
                if more {
                    self.partial = Some(p);
                    return Ok(());
                }
                (p.delivery_id, p.settled, p.bytes.freeze())
            }
        };
        if payload.len() as u64 > self.max_message_size {
            return Err(AmqpError::new(
                condition::MESSAGE_SIZE,
                format!("message larger than {} bytes", self.max_message_size),
            ));
        }
        self.last_message_size = payload.len() as u64;
        let outcome = self.publish(pc, session, payload, settled, delivery_id);
        match outcome {
            Ok(Some(DeliveryState::Accepted)) if !settled => session.shared.accept_incoming(delivery_id),
            Ok(Some(state)) if !settled => session.shared.settle_incoming(delivery_id, delivery_id, state),
            Ok(_) => {}
            Err(e) if settled => tracing::info!("settled message dropped: {}", e.condition),
            Err(e) => session
                .shared
                .settle_incoming(delivery_id, delivery_id, DeliveryState::Rejected(Some(e))),
        }
        Ok(())
    }

    /// Routes and stores one whole message. The outcome is None when the
    /// accepted disposition waits for a sync.
    fn publish(
        &mut self,
        pc: &mut PublishContext<'_>,
        session: &SessionLinks<'_>,
        payload: Bytes,
        settled: bool,
        delivery_id: u32,
    ) -> Result<Option<DeliveryState>, AmqpError> {
        if let Target::Management(name) = &self.target {
            return management_request(pc, session, name, &payload);
        }
        let received = Received::parse_owned(payload, self.spare_properties.take())
            .map_err(|e| AmqpError::new(condition::DECODE, e.to_string()))?;
        let per_message;
        let (target, cache) = match &self.target {
            Target::Management(_) => return Ok(None),
            Target::Exchange(t) => (t, Some(&mut self.route)),
            Target::PerMessage => {
                let Some(to) = received.to.as_deref() else {
                    return Err(AmqpError::new(
                        condition::INVALID_FIELD,
                        "a link without target address needs the 'to' property",
                    ));
                };
                let address =
                    Address::parse(to).map_err(|e| AmqpError::new(condition::INVALID_FIELD, e.to_string()))?;
                let (x, key) = resolve(pc, &address)?;
                per_message = FixedTarget::new(x, key);
                (&per_message, None)
            }
        };
        let exchange = &target.exchange;
        let key = (target.key.clone())
            .or_else(|| received.subject.map(ShortStr::from))
            .unwrap_or_default();
        if key.len() > 255 {
            return Err(AmqpError::new(
                condition::INVALID_FIELD,
                "routing key longer than 255 bytes",
            ));
        }
        if let Some(uid) = &received.properties.user_id
            && uid.as_str() != pc.user
        {
            return Err(AmqpError::new(
                condition::UNAUTHORIZED,
                format!("user-id '{uid}' is not the authenticated user '{}'", pc.user),
            ));
        }
        let mut properties = received.properties;
        let mut raw_properties = received.raw_properties;
        if pc.set_timestamp && properties.timestamp.is_none() {
            properties.timestamp = Some((Message::now_ms() / 1000) as u64);
            raw_properties = None;
        }
        exchange
            .check_message(&key, properties.headers.as_ref())
            .map_err(|e| from_core(&e))?;
        let msg = Message {
            timestamp: Message::coarse_now_ms(),
            exchange: target.name.clone(),
            routing_key: key,
            properties,
            raw_properties,
            body: received.body,
        };
        let mut queues = std::mem::take(&mut self.queues);
        pc.vhost.route_cached(exchange, &msg, &[], &mut queues, cache);
        let mut durable = false;
        let mut rejected = false;
        let mut failed = None;
        for q in &queues {
            match q.publish(&msg, &mut self.scratch) {
                Ok(p) => {
                    durable |= q.durable;
                    rejected |= p.rejected;
                    if p.woke && !pc.wakes.iter().any(|w| Arc::ptr_eq(w, q)) {
                        pc.wakes.push(q.clone());
                    }
                    if p.pace && pc.paced_by.is_none() {
                        *pc.paced_by = Some(q.clone());
                    }
                }
                Err(e) => failed = Some(e),
            }
        }
        let routed = !queues.is_empty();
        queues.clear();
        self.queues = queues;
        let persistent = msg.properties.is_persistent();
        self.spare_properties = Some(msg.properties);
        if let Some(e) = failed {
            tracing::error!("publish failed: {e}");
            return Err(from_core(&e));
        }
        if rejected {
            return Ok(Some(DeliveryState::Rejected(Some(AmqpError::new(
                condition::RESOURCE_LIMIT,
                "a queue at its length limit refused the message",
            )))));
        }
        if !routed {
            // RabbitMQ 4 releases what no queue took.
            return Ok(Some(DeliveryState::Released));
        }
        let sync = &pc.ctx.broker.sync;
        if !settled && durable && persistent && sync.enabled() {
            session.shared.accept_after_sync(sync, delivery_id);
            return Ok(None);
        }
        Ok(Some(DeliveryState::Accepted))
    }
}

/// A request to the management node: answered on the paired reply link,
/// after the sync that covers the change it made, if any.
fn management_request(
    pc: &PublishContext<'_>,
    session: &SessionLinks<'_>,
    link_name: &str,
    payload: &Bytes,
) -> Result<Option<DeliveryState>, AmqpError> {
    let Some(link) = session.reply_link(link_name) else {
        return Err(AmqpError::new(
            condition::NOT_ALLOWED,
            "no management reply link attached with this link's name",
        ));
    };
    let changes_before = pc.vhost.definition_changes();
    let rq = super::management::Requester {
        vhost: pc.vhost,
        user: pc.user,
        perms: pc.perms,
        conn_id: pc.conn_id,
    };
    let Some(answer) = super::management::handle(&rq, payload) else {
        return Err(AmqpError::new(condition::DECODE, "not a management request"));
    };
    let sync = &pc.ctx.broker.sync;
    let wrote = pc.vhost.definition_changes() != changes_before;
    if crate::amqp::durable_reply::replicated() || (wrote && sync.enabled()) {
        super::management::answer_when_durable(sync, link, answer);
    } else {
        link.push(answer);
    }
    Ok(Some(DeliveryState::Accepted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_covers_a_few_mebibytes_of_the_last_message_size() {
        let mut p = Publisher::new(0, Target::PerMessage, u64::MAX);
        // RabbitMQ's 128 before the first message.
        assert_eq!(p.top_up_credit(), Some((0, 0, 128)));
        assert_eq!(p.top_up_credit(), None);
        for (size, window) in [
            (16, MAX_LINK_CREDIT),
            (8 << 10, 1024),
            (1 << 20, MIN_LINK_CREDIT),
            (0, 2048),
        ] {
            p.last_message_size = size;
            assert_eq!(p.credit_window(), window, "{size} B");
        }
        p.last_message_size = 16;
        p.credit = 1024;
        assert_eq!(p.top_up_credit(), None);
        p.credit = 1023;
        assert_eq!(p.top_up_credit(), Some((0, 0, 2048)));
    }
}
