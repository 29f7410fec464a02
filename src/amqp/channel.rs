//! One AMQP channel: the state shared with its consumers' delivery tasks
//! ([`ChannelShared`]) and the state only the connection task touches ([`Channel`]),
//! with the handlers of every channel-level method.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use bytes::BytesMut;
use parking_lot::Mutex;

use super::codec::{
    Method, write_basic_ack, write_basic_get_ok, write_basic_nack, write_body, write_header_raw, write_method,
};
use super::connection::ConnInfo;
use super::consumer::{AmqpConsumer, ConsumerSettings};
use super::error::{AmqpError, AmqpResult, code};
use super::publish::PendingPublish;
use super::unacked::{Unacked, UnackedList};
use crate::core::permissions::Access;
use crate::core::queue::Queue;
use crate::core::stats::{ChannelCounters, Rates};
use crate::core::topic_permissions::TopicAccess;
use crate::core::vhost::{ExchangeOptions, QueueOptions};
use crate::core::{FieldTable, ShortStr};
use crate::store::SyncWaiter;
use crate::transport::outbox::Outbox;

/// Queue name clients consume from for direct reply-to.
pub const REPLY_TO_QUEUE: &str = "amq.rabbitmq.reply-to";
/// LavinMQ's alternative name of the same pseudo-queue.
pub const REPLY_TO_QUEUE_ALT: &str = "amq.direct.reply-to";

/// Channel state shared with consumer delivery tasks.
pub struct ChannelShared {
    /// Channel number.
    pub number: u16,
    /// The connection's outbox.
    pub outbox: Arc<Outbox>,
    /// Negotiated frame_max, for splitting bodies.
    pub frame_max: u32,
    /// Delivery tags and unacked deliveries.
    pub unacked: Mutex<UnackedList>,
    /// Channel-wide prefetch (basic.qos global=true), 0 = unlimited.
    pub global_prefetch: AtomicU32,
    /// Consumer deliveries not yet acked on this channel.
    pub global_unacked: AtomicU32,
    flow: AtomicBool,
    /// Consumers by tag.
    pub consumers: Mutex<HashMap<String, Arc<AmqpConsumer>>>,
    /// The client understands server-sent basic.cancel.
    pub cancel_notify: bool,
    /// Direct reply-to consumer tag and token, if any.
    pub reply_to: Mutex<Option<(String, String)>>,
    /// Newest publisher-confirm sequence number waiting for a sync (0 = none).
    awaiting_sync: AtomicU64,
    /// The broker-wide consumer timeout (queues may set their own).
    pub consumer_timeout: Option<u64>,
    /// Per-consumer prefetch for new consumers, as the API shows it.
    pub prefetch: AtomicU32,
    /// In confirm mode, as the API shows it.
    pub confirm_mode: AtomicBool,
    /// In transaction mode, as the API shows it.
    pub tx_mode: AtomicBool,
    /// Message counts.
    pub counters: ChannelCounters,
    /// Rates of the counts, sampled by the broker.
    pub rates: Rates,
}

impl SyncWaiter for ChannelShared {
    fn synced(&self, seq: u64, ok: bool) {
        let n = self.number;
        self.outbox.send(|b| {
            if ok {
                write_basic_ack(b, n, seq, true);
            } else {
                write_basic_nack(b, n, seq, true, false);
            }
        });
        // Only clear if no newer confirm registered meanwhile.
        let _ = self
            .awaiting_sync
            .compare_exchange(seq, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

impl ChannelShared {
    /// True while a confirm waits for a sync (later confirms must queue behind it).
    pub fn awaiting_sync(&self) -> bool {
        self.awaiting_sync.load(Ordering::Acquire) != 0
    }

    /// Marks confirm `seq` as waiting for the next sync.
    pub fn await_sync(&self, seq: u64) {
        self.awaiting_sync.store(seq, Ordering::Release);
    }

    /// False while the client paused deliveries with channel.flow.
    pub fn flow_active(&self) -> bool {
        self.flow.load(Ordering::Acquire)
    }

    /// True while the channel-wide prefetch allows another delivery.
    pub fn global_capacity(&self) -> bool {
        let limit = self.global_prefetch.load(Ordering::Acquire);
        limit == 0 || self.global_unacked.load(Ordering::Acquire) < limit
    }

    /// The queue cancelled consumer `tag` (queue deleted): tell the client.
    pub fn server_cancel(&self, tag: &str) {
        if self.consumers.lock().remove(tag).is_some() && self.cancel_notify {
            let m = Method::BasicCancel {
                consumer_tag: ShortStr::from(tag),
                nowait: true,
            };
            self.outbox.send(|b| {
                let _ = write_method(b, self.number, &m);
            });
        }
    }

    fn wake_consumers(&self) {
        for c in self.consumers.lock().values() {
            crate::core::consumer::Consumer::notify(&**c);
        }
    }
}

/// What `ack`-like methods do with the messages they name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Remove for good.
    Ack,
    /// Put back in the queue.
    Requeue,
    /// Drop (rejected without requeue).
    Discard,
}

/// Connection-task-only state of a channel.
pub struct Channel {
    /// State shared with delivery tasks.
    pub shared: Arc<ChannelShared>,
    /// Set after the server sent channel.close; frames are ignored until close-ok.
    pub closing: bool,
    pub(super) publish: Option<PendingPublish>,
    pub(super) confirm: bool,
    pub(super) confirm_seq: u64,
    pub(super) tx: Option<super::publish::TxBuffer>,
    /// A basic.qos (per consumer, non-zero) was received: stream consumers
    /// need one, as in RabbitMQ (the configured default does not count).
    consumer_qos_set: bool,
    last_queue: String,
    pub(super) route_buf: Vec<Arc<Queue>>,
    /// The last route of the channel's publishes, once it publishes (boxed:
    /// many channels never do, and an idle one stays small).
    pub(super) route_cache: Option<Box<crate::core::route_cache::RouteCache>>,
    /// The exchange of the previous publish, to skip the lookup for the next.
    pub(super) last_exchange: Option<Arc<crate::core::exchange::Exchange>>,
    /// The name of [`Channel::last_exchange`], kept in the channel: the
    /// exchange's own copy sits in shared memory that other threads' writes
    /// keep evicting, which made this per-message comparison a cache miss.
    pub(super) last_exchange_name: smallvec::SmallVec<[u8; 32]>,
    /// The exchange (by address) and permission generation a publish was last
    /// allowed for, to skip the check while neither changes.
    pub(super) write_allowed: Option<(usize, u64)>,
    /// Whether the user's topic permissions restrict that exchange: then each
    /// routing key published to it is checked.
    pub(super) topic_restricted: bool,
    pub(super) scratch: BytesMut,
    /// The properties box of the last message published, for the next one
    /// that has no property: a publish otherwise allocates and frees one.
    pub(super) spare_properties: Option<Box<crate::wire::properties::BasicProperties>>,
}

fn generated_tag(prefix: &str) -> String {
    use base64::Engine;
    let mut bytes = [0u8; 18];
    rand::fill(&mut bytes);
    format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

impl Channel {
    /// Opens channel `number` on a connection.
    pub fn new(number: u16, outbox: Arc<Outbox>, info: &ConnInfo) -> Self {
        Channel {
            shared: Arc::new(ChannelShared {
                number,
                outbox,
                frame_max: info.frame_max,
                unacked: Mutex::default(),
                global_prefetch: AtomicU32::new(0),
                global_unacked: AtomicU32::new(0),
                flow: AtomicBool::new(true),
                consumers: Mutex::default(),
                cancel_notify: info.cancel_notify,
                reply_to: Mutex::new(None),
                awaiting_sync: AtomicU64::new(0),
                consumer_timeout: info.ctx.settings().consumer_timeout,
                prefetch: AtomicU32::new(u32::from(info.ctx.settings().default_prefetch)),
                confirm_mode: AtomicBool::new(false),
                tx_mode: AtomicBool::new(false),
                counters: ChannelCounters::default(),
                rates: Rates::default(),
            }),
            closing: false,
            publish: None,
            confirm: false,
            confirm_seq: 0,
            tx: None,
            consumer_qos_set: false,
            last_queue: String::new(),
            route_buf: Vec::new(),
            route_cache: None,
            last_exchange: None,
            last_exchange_name: smallvec::SmallVec::new(),
            write_allowed: None,
            topic_restricted: false,
            scratch: BytesMut::new(),
            spare_properties: None,
        }
    }

    fn number(&self) -> u16 {
        self.shared.number
    }

    /// Writes a method frame to the client.
    pub fn send(&self, method: &Method) {
        let n = self.number();
        self.shared.outbox.write(|b| {
            let _ = write_method(b, n, method);
        });
    }

    fn reply(&self, nowait: bool, method: Method) {
        if !nowait {
            self.send(&method);
        }
    }

    /// [`Self::reply`] for a definition change: held until the change is
    /// synced (when it wrote the definitions log, which `changes_before`, the
    /// vhost's count read before the change, tells) or, clustered, replicated
    /// (see [`super::durable_reply`]).
    fn reply_durable(&self, info: &ConnInfo, nowait: bool, changes_before: u64, method: Method) {
        if nowait {
            return;
        }
        let sync = &info.ctx.broker.sync;
        let wrote = info.vhost.definition_changes() != changes_before;
        if super::durable_reply::replicated() || (wrote && sync.enabled()) {
            super::durable_reply::send_when_durable(sync, &self.shared.outbox, self.number(), method);
        } else {
            self.send(&method);
        }
    }

    fn queue_name<'a>(&'a self, name: &'a str) -> AmqpResult<&'a str> {
        if !name.is_empty() {
            return Ok(name);
        }
        if self.last_queue.is_empty() {
            return Err(AmqpError::channel(code::NOT_FOUND, "no previously declared queue"));
        }
        Ok(&self.last_queue)
    }

    /// Handles a channel-level method (anything but content).
    pub fn handle(&mut self, info: &ConnInfo, method: Method) -> AmqpResult {
        let (class, id) = (method.class_id(), method.method_id());
        self.dispatch(info, method).map_err(|e| e.on(class, id))
    }

    fn dispatch(&mut self, info: &ConnInfo, method: Method) -> AmqpResult {
        let vhost = &info.vhost;
        let changes_before = vhost.definition_changes();
        match method {
            Method::ChannelFlow { active } => {
                self.shared.flow.store(active, Ordering::Release);
                if active {
                    self.shared.wake_consumers();
                }
                self.send(&Method::ChannelFlowOk { active });
            }
            Method::ChannelFlowOk { .. } | Method::BasicCancelOk { .. } => {}
            Method::AccessRequest { .. } => self.send(&Method::AccessRequestOk),
            Method::ExchangeDeclare {
                exchange,
                kind,
                passive,
                durable,
                auto_delete,
                internal,
                nowait,
                arguments,
            } => {
                let opts = ExchangeOptions {
                    durable,
                    auto_delete,
                    internal,
                    passive,
                };
                if !passive {
                    info.check(Access::Configure, "exchange", &exchange)?;
                    let ae = arguments
                        .get("alternate-exchange")
                        .or_else(|| arguments.get("x-alternate-exchange"))
                        .and_then(|v| v.as_str());
                    if let Some(ae) = ae {
                        // As in RabbitMQ: unroutable messages move from this
                        // exchange to the alternate one.
                        info.check(Access::Write, "exchange", ae)?;
                        info.check(Access::Read, "exchange", &exchange)?;
                    }
                }
                vhost.declare_exchange(&exchange, &kind, &opts, arguments)?;
                self.reply_durable(info, nowait, changes_before, Method::ExchangeDeclareOk);
            }
            Method::ExchangeDelete {
                exchange,
                if_unused,
                nowait,
            } => {
                info.check(Access::Configure, "exchange", &exchange)?;
                vhost.delete_exchange(&exchange, if_unused)?;
                self.reply_durable(info, nowait, changes_before, Method::ExchangeDeleteOk);
            }
            Method::ExchangeBind {
                destination,
                source,
                routing_key,
                nowait,
                arguments,
            } => {
                info.check(Access::Write, "exchange", &destination)?;
                info.check(Access::Read, "exchange", &source)?;
                info.check_topic(TopicAccess::Read, &source, &routing_key)?;
                vhost.bind_exchange(&destination, &source, &routing_key, arguments)?;
                self.reply_durable(info, nowait, changes_before, Method::ExchangeBindOk);
            }
            Method::ExchangeUnbind {
                destination,
                source,
                routing_key,
                nowait,
                arguments,
            } => {
                info.check(Access::Write, "exchange", &destination)?;
                info.check(Access::Read, "exchange", &source)?;
                info.check_topic(TopicAccess::Read, &source, &routing_key)?;
                vhost.unbind_exchange(&destination, &source, &routing_key, &arguments)?;
                self.reply_durable(info, nowait, changes_before, Method::ExchangeUnbindOk);
            }
            Method::QueueDeclare {
                queue,
                passive,
                durable,
                exclusive,
                auto_delete,
                nowait,
                arguments,
            } => {
                let name = if passive {
                    self.queue_name(&queue)?.to_string()
                } else {
                    queue.to_string()
                };
                if passive && (name == REPLY_TO_QUEUE || name == REPLY_TO_QUEUE_ALT) {
                    let ok = Method::QueueDeclareOk {
                        queue,
                        message_count: 0,
                        consumer_count: 0,
                    };
                    self.reply(nowait, ok);
                    return Ok(());
                }
                let opts = QueueOptions {
                    durable,
                    exclusive,
                    auto_delete,
                    passive,
                };
                if !passive {
                    if !name.is_empty() {
                        info.check(Access::Configure, "queue", &name)?;
                    }
                    if let Some(dlx) = arguments.get("x-dead-letter-exchange").and_then(|v| v.as_str()) {
                        // As in RabbitMQ: dead letters move from this queue to the DLX.
                        info.check(Access::Write, "exchange", dlx)?;
                        if !name.is_empty() {
                            info.check(Access::Read, "queue", &name)?;
                        }
                    }
                }
                let d = vhost.declare_queue(&name, &opts, arguments, info.id)?;
                if !passive
                    && name.is_empty()
                    && let Err(e) = info.check(Access::Configure, "queue", &d.name)
                {
                    // A server-named queue the user may not configure: undo it.
                    let _ = vhost.delete_queue(&d.name, false, false, None);
                    return Err(e.into());
                }
                self.last_queue = d.name.clone();
                self.reply_durable(
                    info,
                    nowait,
                    changes_before,
                    Method::QueueDeclareOk {
                        queue: ShortStr::from(d.name),
                        message_count: d.message_count,
                        consumer_count: d.consumer_count,
                    },
                );
            }
            Method::QueueBind {
                queue,
                exchange,
                routing_key,
                nowait,
                arguments,
            } => {
                let q = self.queue_name(&queue)?;
                info.check(Access::Write, "queue", q)?;
                info.check(Access::Read, "exchange", &exchange)?;
                info.check_topic(TopicAccess::Read, &exchange, &routing_key)?;
                vhost.bind_queue(q, &exchange, &routing_key, arguments, Some(info.id))?;
                self.reply_durable(info, nowait, changes_before, Method::QueueBindOk);
            }
            Method::QueueUnbind {
                queue,
                exchange,
                routing_key,
                arguments,
            } => {
                let q = self.queue_name(&queue)?;
                info.check(Access::Write, "queue", q)?;
                info.check(Access::Read, "exchange", &exchange)?;
                info.check_topic(TopicAccess::Read, &exchange, &routing_key)?;
                vhost.unbind_queue(q, &exchange, &routing_key, &arguments, info.id)?;
                self.reply_durable(info, false, changes_before, Method::QueueUnbindOk);
            }
            Method::QueuePurge { queue, nowait } => {
                let q = self.queue_name(&queue)?;
                info.check(Access::Read, "queue", q)?;
                let n = vhost.purge_queue(q, info.id)?;
                self.reply_durable(
                    info,
                    nowait,
                    changes_before,
                    Method::QueuePurgeOk {
                        message_count: n as u32,
                    },
                );
            }
            Method::QueueDelete {
                queue,
                if_unused,
                if_empty,
                nowait,
            } => {
                let q = self.queue_name(&queue)?;
                info.check(Access::Configure, "queue", q)?;
                let n = vhost.delete_queue(q, if_unused, if_empty, Some(info.id))?;
                self.reply_durable(
                    info,
                    nowait,
                    changes_before,
                    Method::QueueDeleteOk {
                        message_count: n as u32,
                    },
                );
            }
            Method::BasicQos {
                prefetch_size,
                prefetch_count,
                global,
            } => {
                if prefetch_size != 0 {
                    return Err(AmqpError::connection(
                        code::NOT_IMPLEMENTED,
                        format!("prefetch_size!=0 ({prefetch_size})"),
                    ));
                }
                if global {
                    self.shared
                        .global_prefetch
                        .store(u32::from(prefetch_count), Ordering::Release);
                    self.shared.wake_consumers();
                } else {
                    self.consumer_qos_set = prefetch_count > 0;
                    self.shared.prefetch.store(u32::from(prefetch_count), Ordering::Relaxed);
                }
                self.send(&Method::BasicQosOk);
            }
            Method::BasicConsume {
                queue,
                consumer_tag,
                no_ack,
                exclusive,
                nowait,
                arguments,
                ..
            } => {
                self.consume(info, &queue, &consumer_tag, no_ack, exclusive, nowait, &arguments)?;
            }
            Method::BasicCancel { consumer_tag, nowait } => {
                self.cancel_consumer(info, &consumer_tag);
                self.reply(nowait, Method::BasicCancelOk { consumer_tag });
            }
            Method::BasicGet { queue, no_ack } => self.get(info, &queue, no_ack)?,
            Method::BasicAck { delivery_tag, multiple } => self.settle(delivery_tag, multiple, Settle::Ack)?,
            Method::BasicReject { delivery_tag, requeue } => self.settle(
                delivery_tag,
                false,
                if requeue { Settle::Requeue } else { Settle::Discard },
            )?,
            Method::BasicNack {
                delivery_tag,
                multiple,
                requeue,
            } => self.settle(
                delivery_tag,
                multiple,
                if requeue { Settle::Requeue } else { Settle::Discard },
            )?,
            Method::BasicRecover { .. } => {
                self.recover();
                self.send(&Method::BasicRecoverOk);
            }
            Method::BasicRecoverAsync { .. } => self.recover(),
            Method::BasicPublish {
                exchange,
                routing_key,
                mandatory,
                immediate,
            } => {
                self.start_publish(info, exchange, routing_key, mandatory, immediate)?;
            }
            Method::ConfirmSelect { nowait } => {
                if self.tx.is_some() {
                    return Err(AmqpError::channel(
                        code::PRECONDITION_FAILED,
                        "cannot switch from tx to confirm mode",
                    ));
                }
                self.confirm = true;
                self.shared.confirm_mode.store(true, Ordering::Relaxed);
                self.reply(nowait, Method::ConfirmSelectOk);
            }
            Method::TxSelect => {
                if self.confirm {
                    return Err(AmqpError::channel(
                        code::PRECONDITION_FAILED,
                        "cannot switch from confirm to tx mode",
                    ));
                }
                self.tx.get_or_insert_with(Default::default);
                self.shared.tx_mode.store(true, Ordering::Relaxed);
                self.send(&Method::TxSelectOk);
            }
            Method::TxCommit => {
                self.commit(info)?;
                self.send(&Method::TxCommitOk);
            }
            Method::TxRollback => {
                let Some(tx) = self.tx.as_mut() else {
                    return Err(AmqpError::channel(
                        code::PRECONDITION_FAILED,
                        "channel is not transactional",
                    ));
                };
                let held = tx.clear();
                self.shared.unacked.lock().restore(held);
                self.send(&Method::TxRollbackOk);
            }
            other => {
                return Err(AmqpError::connection(
                    code::COMMAND_INVALID,
                    format!("unexpected method {} on channel", other.name()),
                ));
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn consume(
        &mut self,
        info: &ConnInfo,
        queue: &str,
        tag: &str,
        no_ack: bool,
        exclusive: bool,
        nowait: bool,
        args: &FieldTable,
    ) -> AmqpResult {
        let tag = if tag.is_empty() {
            generated_tag("amq.ctag-")
        } else {
            tag.to_string()
        };
        if self.shared.consumers.lock().contains_key(&tag)
            || self.shared.reply_to.lock().as_ref().is_some_and(|(t, _)| *t == tag)
        {
            return Err(AmqpError::connection(
                code::NOT_ALLOWED,
                format!("attempt to reuse consumer tag '{tag}'"),
            ));
        }
        let max = info.ctx.settings().max_consumers_per_channel;
        if max > 0 && self.shared.consumers.lock().len() >= max as usize {
            return Err(AmqpError::channel(
                code::RESOURCE_ERROR,
                format!("max consumers per channel reached ({max})"),
            ));
        }
        if queue == REPLY_TO_QUEUE || queue == REPLY_TO_QUEUE_ALT {
            if !no_ack {
                return Err(AmqpError::channel(
                    code::PRECONDITION_FAILED,
                    "reply consumer cannot acknowledge",
                ));
            }
            let token = generated_tag("");
            info.ctx.register_reply_to(&token, &self.shared);
            *self.shared.reply_to.lock() = Some((tag.clone(), token));
            self.reply(
                nowait,
                Method::BasicConsumeOk {
                    consumer_tag: ShortStr::from(tag),
                },
            );
            return Ok(());
        }
        let explicit_tag = !tag.starts_with("amq.ctag-");
        info.check(Access::Read, "queue", self.queue_name(queue)?)?;
        let q = info.vhost.get_queue(self.queue_name(queue)?)?;
        q.check_owner(info.id)?;
        let stream_options = if q.is_stream() {
            if no_ack {
                return Err(AmqpError::connection(
                    code::NOT_IMPLEMENTED,
                    format!(
                        "automatic acknowledgement not supported by stream queues queue '{}' in vhost '{}'",
                        q.name, q.vhost
                    ),
                ));
            }
            if !self.consumer_qos_set {
                return Err(AmqpError::channel(
                    code::PRECONDITION_FAILED,
                    format!(
                        "consumer prefetch count is not set for 'queue '{}' in vhost '{}''",
                        q.name, q.vhost
                    ),
                ));
            }
            if args.get("x-priority").is_some() {
                return Err(AmqpError::channel(
                    code::PRECONDITION_FAILED,
                    format!(
                        "invalid arg 'x-priority' for queue '{}' in vhost '{}' of queue type rabbit_stream_queue",
                        q.name, q.vhost
                    ),
                ));
            }
            let opts = crate::core::stream::ConsumerOptions::from_arguments(args)
                .map_err(|e| AmqpError::channel(code::PRECONDITION_FAILED, e))?;
            Some(opts)
        } else {
            None
        };
        let priority = match args.get("x-priority") {
            None => 0,
            Some(v) => match v.as_i64().and_then(|p| i32::try_from(p).ok()) {
                Some(p) => p,
                None => {
                    return Err(AmqpError::channel(
                        code::PRECONDITION_FAILED,
                        "invalid x-priority argument, expected an integer",
                    ));
                }
            },
        };
        let consumer = AmqpConsumer::new(
            info.ctx.next_id(),
            tag.clone(),
            self.shared.clone(),
            q.clone(),
            ConsumerSettings {
                no_ack,
                exclusive,
                priority,
                // The latest basic.qos, or what the management API set since.
                prefetch: self.shared.prefetch.load(Ordering::Relaxed),
            },
        );
        match &stream_options {
            Some(opts) => q.add_stream_consumer(consumer.clone(), explicit_tag, opts)?,
            None => q.add_consumer(consumer.clone(), exclusive)?,
        }
        self.shared.consumers.lock().insert(tag.clone(), consumer.clone());
        self.reply(
            nowait,
            Method::BasicConsumeOk {
                consumer_tag: ShortStr::from(tag),
            },
        );
        consumer.spawn();
        Ok(())
    }

    fn cancel_consumer(&mut self, info: &ConnInfo, tag: &str) {
        {
            let mut r = self.shared.reply_to.lock();
            if r.as_ref().is_some_and(|(t, _)| t == tag) {
                if let Some((_, token)) = r.take() {
                    info.ctx.unregister_reply_to(&token);
                }
                return;
            }
        }
        let consumer = self.shared.consumers.lock().remove(tag);
        if let Some(c) = consumer {
            detach(&c);
        }
    }

    fn get(&mut self, info: &ConnInfo, queue: &str, no_ack: bool) -> AmqpResult {
        info.check(Access::Read, "queue", self.queue_name(queue)?)?;
        let q = info.vhost.get_queue(self.queue_name(queue)?)?;
        q.check_owner(info.id)?;
        if q.is_stream() {
            return Err(AmqpError::connection(
                code::NOT_IMPLEMENTED,
                format!(
                    "basic.get not supported by stream queues queue '{}' in vhost '{}'",
                    q.name, q.vhost
                ),
            ));
        }
        q.check_open()?;
        let n = self.number();
        let frame_max = self.shared.frame_max;
        let shared = &self.shared;
        let found = q.get(no_ack, |m, pos, redelivered, remaining| {
            shared.counters.get.incr();
            if redelivered {
                shared.counters.redeliver.incr();
            }
            let stripped = crate::wire::properties::without_private_headers(m.properties);
            let properties = stripped.as_deref().unwrap_or(m.properties);
            let mut unacked = shared.unacked.lock();
            let tag = unacked.next_tag();
            shared.outbox.write(|out| {
                let _ = write_basic_get_ok(out, n, tag, redelivered, m.exchange, m.routing_key, remaining);
                let _ = write_header_raw(out, n, m.body.len() as u64, properties);
                write_body(out, n, m.body, frame_max);
            });
            if !no_ack {
                unacked.push(Unacked {
                    tag,
                    queue: q.clone(),
                    pos,
                    consumer: None,
                    delivered_at: crate::core::message::Message::coarse_now_ms(),
                    timeout: None,
                });
            }
        });
        if !found {
            self.shared.outbox.write(|out| {
                let _ = write_method(out, n, &Method::BasicGetEmpty);
            });
        }
        Ok(())
    }

    /// Acks, rejects or nacks deliveries. In tx mode the deliveries leave the
    /// unacked list at once (so an unknown or repeated tag fails now, as in
    /// RabbitMQ) but are settled only at commit.
    fn settle(&mut self, tag: u64, multiple: bool, how: Settle) -> AmqpResult {
        let Some(entries) = self.shared.unacked.lock().take(tag, multiple) else {
            return Err(AmqpError::channel(
                code::PRECONDITION_FAILED,
                format!("unknown delivery tag {tag}"),
            ));
        };
        if how == Settle::Ack {
            self.shared.counters.ack.add(entries.len() as u64);
        }
        match self.tx.as_mut() {
            Some(tx) => tx.settles.push((entries, how)),
            None => settle_entries(&self.shared, entries, how),
        }
        Ok(())
    }

    fn recover(&mut self) {
        let entries = self.shared.unacked.lock().take_all();
        settle_entries(&self.shared, entries, Settle::Requeue);
    }

    /// Releases everything the channel holds: consumers are cancelled, unacked
    /// messages requeued, the reply-to registration dropped.
    pub fn close(&mut self, info: &ConnInfo) {
        let consumers: Vec<_> = self.shared.consumers.lock().drain().map(|(_, c)| c).collect();
        // Stop the consumers first, requeue, and only then detach them: the
        // requeued messages must be in place before another consumer (a single
        // active consumer's successor) is woken, so that it gets them first.
        for c in &consumers {
            c.cancel();
        }
        if let Some((_, token)) = self.shared.reply_to.lock().take() {
            info.ctx.unregister_reply_to(&token);
        }
        if let Some(mut tx) = self.tx.take() {
            let held = tx.clear();
            self.shared.unacked.lock().restore(held);
        }
        // A stream's readers leave first: what they leave unacknowledged
        // holds their tracked offset back, where a returned stream message
        // would count as read (a single active consumer's successor starts
        // there).
        let (streams, others): (Vec<_>, Vec<_>) = consumers.into_iter().partition(|c| c.queue.is_stream());
        for c in &streams {
            detach(c);
        }
        self.recover();
        for c in &others {
            detach(c);
        }
        self.publish = None;
    }
}

/// Stops a consumer and removes it from its queue, deleting an auto-delete queue
/// that lost its last consumer.
fn detach(c: &Arc<AmqpConsumer>) {
    c.cancel();
    c.queue.detach_consumer(c.id);
}

/// Applies a settlement to removed unacked entries, per queue and in order.
pub(super) fn settle_entries(shared: &ChannelShared, entries: Vec<Unacked>, how: Settle) {
    if entries.is_empty() {
        return;
    }
    let mut i = 0;
    while i < entries.len() {
        let q = entries[i].queue.clone();
        let mut j = i;
        while j < entries.len() && Arc::ptr_eq(&entries[j].queue, &q) {
            j += 1;
        }
        let positions = entries[i..j].iter().map(|u| u.pos);
        if q.is_stream() {
            // Stream acks move each consumer's offset: settle per run of one consumer.
            let consumer_id = |u: &Unacked| u.consumer.as_ref().map_or(0, |c| c.id);
            for run in entries[i..j].chunk_by(|a, b| consumer_id(a) == consumer_id(b)) {
                q.settle_stream(consumer_id(&run[0]), run.iter().map(|u| u.pos), how != Settle::Requeue);
            }
            i = j;
            continue;
        }
        match how {
            Settle::Ack => q.ack(positions),
            Settle::Discard => q.reject(positions),
            Settle::Requeue => q.requeue(positions),
        }
        i = j;
    }
    // Tell each consumer once per run of its deliveries, not once per message.
    let mut from_consumers = 0;
    let mut run: Option<(&Arc<AmqpConsumer>, u32)> = None;
    for c in entries.iter().filter_map(|u| u.consumer.as_ref()) {
        from_consumers += 1;
        match &mut run {
            Some((prev, n)) if Arc::ptr_eq(prev, c) => *n += 1,
            _ => {
                if let Some((prev, n)) = run.replace((c, 1)) {
                    prev.settled(n);
                }
            }
        }
    }
    if let Some((c, n)) = run {
        c.settled(n);
    }
    if from_consumers > 0 {
        shared.global_unacked.fetch_sub(from_consumers, Ordering::AcqRel);
        if shared.global_prefetch.load(Ordering::Acquire) > 0 {
            shared.wake_consumers();
        }
    }
}
