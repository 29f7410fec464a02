//! The publish path of a channel: assembling basic.publish + header + body frames
//! into a message, validating it, routing it through the vhost, storing it in every
//! queue it reaches, and answering with returns and publisher confirms.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use super::channel::{Channel, ChannelShared, REPLY_TO_QUEUE, REPLY_TO_QUEUE_ALT, Settle, settle_entries};
use super::codec::publish_frames::WholePublish;
use super::codec::{
    BasicProperties, FieldValue, ShortStr, write_basic_ack, write_basic_deliver, write_basic_nack, write_basic_return,
    write_body, write_header_raw,
};
use super::connection::ConnInfo;
use super::error::{AmqpError, AmqpResult, code};
use crate::core::exchange::Exchange;
use crate::core::message::Message;
use crate::core::topic_permissions::TopicAccess;
use crate::store::SyncWaiter;
use crate::wire::shortstr::same_bytes;

/// Prefix of routing keys that address a direct reply-to consumer.
const REPLY_TO_PREFIX: &str = "amq.rabbitmq.reply-to.";

/// A basic.publish whose content is still arriving.
pub struct PendingPublish {
    exchange: ShortStr,
    routing_key: ShortStr,
    mandatory: bool,
    immediate: bool,
    header: Option<(Box<BasicProperties>, Bytes, u64)>,
    body: Body,
}

enum Body {
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Body {
    fn len(&self) -> usize {
        match self {
            Body::Empty => 0,
            Body::One(b) => b.len(),
            Body::Many(b) => b.len(),
        }
    }
}

/// Publishes and settlements held back until tx.commit.
#[derive(Default)]
pub struct TxBuffer {
    publishes: Vec<(Message, bool, bool)>,
    /// Deliveries taken off the unacked list by ack/nack/reject, and what to do.
    pub settles: Vec<(Vec<super::unacked::Unacked>, Settle)>,
}

impl TxBuffer {
    /// Forgets the publishes and hands back the deliveries whose settlement is
    /// cancelled (rollback), so that they become unacked again.
    pub fn clear(&mut self) -> Vec<super::unacked::Unacked> {
        self.publishes.clear();
        self.settles.drain(..).flat_map(|(e, _)| e).collect()
    }
}

/// Refuses a body larger than the configured `max_message_size`.
fn check_size(info: &ConnInfo, body_size: u64) -> AmqpResult {
    let max = info.publish_settings.get().max_message_size;
    if body_size > max {
        return Err(precondition(format!(
            "message size {body_size} is larger than configured max size {max}"
        ))
        .on(60, 40));
    }
    Ok(())
}

fn precondition(text: impl std::fmt::Display) -> AmqpError {
    AmqpError::channel(code::PRECONDITION_FAILED, text)
}

fn unexpected(text: &str) -> AmqpError {
    AmqpError::connection(code::UNEXPECTED_FRAME, text)
}

impl Channel {
    /// basic.publish: remembers where the content that follows goes.
    pub(super) fn start_publish(
        &mut self,
        _info: &ConnInfo,
        exchange: ShortStr,
        routing_key: ShortStr,
        mandatory: bool,
        immediate: bool,
    ) -> AmqpResult {
        if self.publish.is_some() {
            return Err(unexpected(
                "expected content header for basic.publish, got basic.publish",
            ));
        }
        self.publish = Some(PendingPublish {
            exchange,
            routing_key,
            mandatory,
            immediate,
            header: None,
            body: Body::Empty,
        });
        Ok(())
    }

    /// A content header frame.
    pub fn on_header(
        &mut self,
        info: &ConnInfo,
        class_id: u16,
        body_size: u64,
        properties: Box<BasicProperties>,
        raw: Bytes,
    ) -> AmqpResult {
        let Some(p) = self.publish.as_mut() else {
            return Err(unexpected("expected method frame, got non method frame instead"));
        };
        if p.header.is_some() {
            return Err(unexpected("second content header frame"));
        }
        if class_id != 60 {
            return Err(AmqpError::connection(
                code::FRAME_ERROR,
                format!("content header for class {class_id}, expected 60"),
            ));
        }
        if let Err(e) = check_size(info, body_size) {
            self.publish = None;
            return Err(e);
        }
        p.header = Some((properties, raw, body_size));
        if body_size == 0 {
            return self.finish_publish(info);
        }
        Ok(())
    }

    /// A content body frame.
    pub fn on_body(&mut self, info: &ConnInfo, payload: Bytes) -> AmqpResult {
        let Some(p) = self.publish.as_mut() else {
            return Err(unexpected("expected method frame, got non method frame instead"));
        };
        let Some((_, _, size)) = &p.header else {
            return Err(unexpected("content body frame before content header"));
        };
        let size = *size as usize;
        let have = p.body.len() + payload.len();
        if have > size {
            return Err(AmqpError::connection(
                code::FRAME_ERROR,
                format!("content body of {have} bytes exceeds declared size {size}"),
            ));
        }
        p.body = match std::mem::replace(&mut p.body, Body::Empty) {
            Body::Empty if payload.len() == size => Body::One(payload),
            Body::Empty => {
                let mut b = BytesMut::with_capacity(size);
                b.extend_from_slice(&payload);
                Body::Many(b)
            }
            Body::Many(mut b) => {
                b.extend_from_slice(&payload);
                Body::Many(b)
            }
            Body::One(_) => return Err(unexpected("content body frame after complete body")),
        };
        if have == size {
            return self.finish_publish(info);
        }
        Ok(())
    }

    fn finish_publish(&mut self, info: &ConnInfo) -> AmqpResult {
        let Some(p) = self.publish.take() else {
            return Ok(());
        };
        let Some((properties, raw, _)) = p.header else {
            return Ok(());
        };
        let body = match p.body {
            Body::Empty => Bytes::new(),
            Body::One(b) => b,
            Body::Many(b) => b.freeze(),
        };
        let msg = Message {
            timestamp: info.now_ms.get(),
            exchange: p.exchange,
            routing_key: p.routing_key,
            properties,
            raw_properties: Some(raw),
            body,
        };
        self.publish_assembled(info, msg, p.mandatory, p.immediate)
    }

    /// A publish whose method, header and body frames were all in one read
    /// (the fast path, see [`super::codec::publish_frames`]): what
    /// [`Channel::start_publish`], [`Channel::on_header`] and
    /// [`Channel::on_body`] do together, without the pending state between
    /// them. The caller checked that no other publish is pending.
    #[inline(always)]
    pub(super) fn publish_whole(&mut self, info: &ConnInfo, p: WholePublish) -> AmqpResult {
        check_size(info, p.body.len() as u64)?;
        let msg = Message {
            timestamp: info.now_ms.get(),
            exchange: p.exchange,
            routing_key: p.routing_key,
            properties: p.properties,
            raw_properties: Some(p.raw_properties),
            body: p.body,
        };
        self.publish_assembled(info, msg, p.mandatory, p.immediate)
    }

    /// A complete message: validated, then held for the transaction or
    /// published.
    fn publish_assembled(&mut self, info: &ConnInfo, mut msg: Message, mandatory: bool, immediate: bool) -> AmqpResult {
        self.validate(info, &mut msg).map_err(|e| e.on(60, 40))?;
        if let Some(tx) = self.tx.as_mut() {
            tx.publishes.push((msg, mandatory, immediate));
            return Ok(());
        }
        let outcome = self.publish_message(info, &mut msg, mandatory, immediate);
        // The properties box serves the next message (see `spare_properties`).
        self.spare_properties = Some(msg.properties);
        outcome.map(|_| ()).map_err(|e| e.on(60, 40))
    }

    fn validate(&self, info: &ConnInfo, msg: &mut Message) -> AmqpResult {
        let props = &msg.properties;
        if let Some(uid) = &props.user_id
            && **uid != *info.user
            && !may_impersonate(info)
        {
            return Err(precondition(format!(
                "user_id property set to '{uid}' but authenticated user was '{}'",
                info.user
            )));
        }
        if let Some(exp) = &props.expiration
            && let Err(why) = parse_expiration(exp)
        {
            return Err(precondition(format!("invalid expiration '{exp}': {why}")));
        }
        if let Some(reply_to) = &props.reply_to
            && (**reply_to == *REPLY_TO_QUEUE || **reply_to == *REPLY_TO_QUEUE_ALT)
        {
            let token = match self.shared.reply_to.lock().as_ref() {
                Some((_, token)) => token.clone(),
                None => return Err(precondition("fast reply consumer does not exist")),
            };
            msg.properties_mut().reply_to = Some(ShortStr::from(format!("{REPLY_TO_PREFIX}{token}")));
        }
        if info.publish_settings.get().set_timestamp && msg.properties.timestamp.is_none() {
            let ts = (msg.timestamp / 1000) as u64;
            msg.properties_mut().timestamp = Some(ts);
        }
        Ok(())
    }

    /// Routes and stores one complete message, then answers with a return and/or
    /// a confirm as the channel's mode asks. Returns true when the message went
    /// to disk in a durable queue (so a confirm or commit must wait for a sync).
    pub(super) fn publish_message(
        &mut self,
        info: &ConnInfo,
        msg: &mut Message,
        mandatory: bool,
        immediate: bool,
    ) -> AmqpResult<bool> {
        // Taken out of the channel and put back, rather than cloned: a count
        // taken and dropped on the exchange per message is measurable.
        let exchange = match self.last_exchange.take() {
            Some(e) if same_bytes(&self.last_exchange_name, msg.exchange.as_bytes()) && !e.is_deleted() => e,
            _ => {
                let vhost = &info.vhost;
                let Some(e) = vhost.exchange(&msg.exchange) else {
                    let text = format!("no exchange '{}' in vhost '{}'", msg.exchange, vhost.name);
                    return Err(AmqpError::channel(code::NOT_FOUND, text));
                };
                self.last_exchange_name = smallvec::SmallVec::from_slice(e.name.as_bytes());
                e
            }
        };
        let outcome = self.publish_to(info, &exchange, msg, mandatory, immediate);
        self.last_exchange = Some(exchange);
        outcome
    }

    /// [`Channel::publish_message`] once the exchange is found.
    fn publish_to(
        &mut self,
        info: &ConnInfo,
        exchange: &Arc<Exchange>,
        msg: &mut Message,
        mandatory: bool,
        immediate: bool,
    ) -> AmqpResult<bool> {
        let vhost = &info.vhost;
        let generation = info.permission_generation();
        let key = (Arc::as_ptr(exchange) as usize, generation);
        if self.write_allowed != Some(key) {
            info.check(crate::core::permissions::Access::Write, "exchange", &exchange.name)?;
            self.write_allowed = Some(key);
            self.topic_restricted = info.restricts_topics(exchange);
        }
        if self.topic_restricted {
            info.check_topic_key(TopicAccess::Write, exchange, &msg.routing_key)?;
        }
        if exchange.internal {
            let text = format!(
                "cannot publish to internal exchange '{}' in vhost '{}'",
                exchange.name, vhost.name
            );
            return Err(AmqpError::channel(code::ACCESS_REFUSED, text));
        }
        exchange.check_message(&msg.routing_key, msg.properties.headers.as_ref())?;
        if self.confirm {
            self.confirm_seq += 1;
        }
        let extra = take_cc_bcc(msg)?;
        let extra_refs: SmallVec<[&str; 4]> = extra.iter().map(String::as_str).collect();
        let mut durable = false;
        let mut rejected = false;
        let delay = exchange.hold_for(msg.properties.headers.as_ref());
        let (routed, had_route) = if exchange.name.is_empty() && msg.routing_key.starts_with(REPLY_TO_PREFIX) {
            let ok = self.deliver_direct_reply(info, msg);
            (ok, ok)
        } else if let Some((held, ms)) = delay {
            // Routed when released; until then it counts as routed, as in RabbitMQ.
            held.push(msg, ms, &mut self.scratch)?;
            durable = exchange.durable;
            (true, true)
        } else {
            let mut queues = std::mem::take(&mut self.route_buf);
            let cache = self.route_cache.get_or_insert_default();
            vhost.route_cached(exchange, msg, &extra_refs, &mut queues, Some(cache));
            let had_route = !queues.is_empty();
            if immediate {
                queues.retain(|q| q.has_ready_consumer());
            }
            let mut result = Ok(());
            for q in &queues {
                match q.publish(msg, &mut self.scratch) {
                    Ok(p) => {
                        durable |= q.durable;
                        rejected |= p.rejected;
                        if p.woke {
                            info.defer_wake(q);
                        }
                        if p.pace {
                            info.pace_after_batch(q);
                        }
                    }
                    Err(e) => result = Err(e),
                }
            }
            let routed = !queues.is_empty();
            queues.clear();
            self.route_buf = queues;
            if let Err(e) = result {
                tracing::error!("publish failed: {e}");
                if self.confirm {
                    let (n, seq) = (self.shared.number, self.confirm_seq);
                    self.shared.outbox.write(|b| write_basic_nack(b, n, seq, false, false));
                    return Ok(false);
                }
                return Err(e.into());
            }
            (routed, had_route)
        };
        let counters = &self.shared.counters;
        counters.publish.incr();
        if self.confirm {
            counters.confirm.incr();
        }
        let returned = !routed && (mandatory || immediate);
        if !routed && !returned {
            counters.drop_unroutable.incr();
        }
        if returned {
            counters.return_unroutable.incr();
            if had_route {
                self.send_return(msg, code::NO_CONSUMERS, "NO_CONSUMERS");
            } else {
                self.send_return(msg, code::NO_ROUTE, "NO_ROUTE");
            }
        }
        let needs_sync = durable && msg.properties.is_persistent() && info.ctx.broker.sync.enabled();
        if self.confirm {
            let seq = self.confirm_seq;
            if rejected {
                // A queue at its limit refused the message (reject-publish).
                let n = self.shared.number;
                self.shared.outbox.write(|b| write_basic_nack(b, n, seq, false, false));
            } else if needs_sync || self.shared.awaiting_sync() {
                // Confirms stay in order: once one waits for a sync, later ones do too.
                self.shared.await_sync(seq);
                let waiter: Arc<dyn SyncWaiter> = self.shared.clone();
                info.ctx.broker.sync.register(&waiter, seq);
            } else {
                let n = self.shared.number;
                self.shared.outbox.write(|b| write_basic_ack(b, n, seq, false));
            }
        }
        Ok(needs_sync)
    }

    fn send_return(&mut self, msg: &Message, reply_code: u16, text: &str) {
        let n = self.shared.number;
        let frame_max = self.shared.frame_max;
        let outbox = self.shared.outbox.clone();
        msg.with_encoded_properties(&mut self.scratch, |props| {
            outbox.write(|b| {
                let _ = write_basic_return(b, n, reply_code, text, &msg.exchange, &msg.routing_key);
                let _ = write_header_raw(b, n, msg.body.len() as u64, props);
                write_body(b, n, &msg.body, frame_max);
            });
        });
    }

    fn deliver_direct_reply(&mut self, info: &ConnInfo, msg: &Message) -> bool {
        let token = &msg.routing_key[REPLY_TO_PREFIX.len()..];
        let Some(target) = info.ctx.reply_to_channel(token) else {
            return false;
        };
        deliver_to_reply_consumer(&target, msg, &mut self.scratch)
    }

    /// tx.commit: applies buffered settlements, then buffered publishes.
    pub(super) fn commit(&mut self, info: &ConnInfo) -> AmqpResult {
        let Some(tx) = self.tx.as_mut() else {
            return Err(precondition("channel is not transactional"));
        };
        let settles = std::mem::take(&mut tx.settles);
        let publishes = std::mem::take(&mut tx.publishes);
        for (entries, how) in settles {
            settle_entries(&self.shared, entries, how);
        }
        let mut needs_sync = false;
        for (mut msg, mandatory, immediate) in publishes {
            needs_sync |= self.publish_message(info, &mut msg, mandatory, immediate)?;
        }
        if needs_sync {
            // commit-ok promises the messages are safe: one sync, on this thread.
            info.ctx.broker.sync.sync_now().map_err(|e| {
                AmqpError::connection(
                    code::INTERNAL_ERROR,
                    format!("cannot sync the transaction to disk: {e}"),
                )
            })?;
        }
        Ok(())
    }
}

/// Delivers a message straight to a channel's direct reply-to consumer.
fn deliver_to_reply_consumer(target: &ChannelShared, msg: &Message, scratch: &mut BytesMut) -> bool {
    let Some((tag, _)) = target.reply_to.lock().clone() else {
        return false;
    };
    let n = target.number;
    let delivery_tag = target.unacked.lock().next_tag();
    msg.with_encoded_properties(scratch, |props| {
        target.outbox.send(|b| {
            let _ = write_basic_deliver(b, n, &tag, delivery_tag, false, &msg.exchange, &msg.routing_key);
            let _ = write_header_raw(b, n, msg.body.len() as u64, props);
            write_body(b, n, &msg.body, target.frame_max);
        });
    });
    true
}

/// Extra routing keys from the `CC` and `BCC` headers; `BCC` is removed from the
/// message so that consumers never see it.
fn take_cc_bcc(msg: &mut Message) -> AmqpResult<SmallVec<[String; 2]>> {
    let mut keys = SmallVec::new();
    let Some(headers) = msg.properties.headers.as_ref() else {
        return Ok(keys);
    };
    let has_bcc = headers.get("BCC").is_some();
    for name in ["CC", "BCC"] {
        match headers.get(name) {
            None => {}
            Some(FieldValue::Array(items)) => {
                for item in items {
                    match item.as_str() {
                        Some(s) => keys.push(s.to_string()),
                        None => {
                            return Err(precondition(format!(
                                "invalid {name} header: expected an array of strings"
                            )));
                        }
                    }
                }
            }
            Some(_) => {
                return Err(precondition(format!(
                    "invalid {name} header: expected an array of strings"
                )));
            }
        }
    }
    if has_bcc && let Some(h) = msg.properties_mut().headers.as_mut() {
        h.remove("BCC");
    }
    Ok(keys)
}

/// Parses an `expiration` property (milliseconds as a decimal string), explaining
/// a bad value the way RabbitMQ does.
pub fn parse_expiration(s: &str) -> Result<u64, String> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
    if end == 0 {
        return Err("no_integer".into());
    }
    if end < digits.len() {
        return Err(format!("{{leftover_string,\"{}\"}}", &digits[end..]));
    }
    if s.starts_with('-') {
        return Err(format!("{{value_negative,{s}}}"));
    }
    s.parse::<u64>().map_err(|_| "no_integer".to_string())
}

/// Whether the connection's user has the `impersonator` tag (LavinMQ's): it
/// may publish with any `user_id`, for a relay that forwards other users'
/// messages. Looked up when needed, so a tag change applies at once.
fn may_impersonate(info: &ConnInfo) -> bool {
    info.ctx
        .broker
        .users
        .get(&info.user)
        .is_some_and(|u| u.tags.iter().any(|t| t == "impersonator"))
}
