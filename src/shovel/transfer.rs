//! The transfer loop every link between brokers runs: shovels and
//! federation links both consume on one AMQP connection (the source) and
//! publish on another (the destination), or post to a webhook.
//!
//! What differs between them (where a message goes, which headers it gains,
//! which it drops) is a [`Forward`]; work a link does on the source while it
//! runs (propagating bindings, starting and stopping its consumer) is an
//! [`Upkeep`].
//!
//! Invariants of the loop:
//! - with `on-confirm`, a source message is acked only after the destination
//!   confirmed its copy, and nacked back to the source (requeued) when the
//!   destination refuses it; at most `prefetch` messages are in flight;
//! - source delivery tags and destination publish sequence numbers both grow
//!   by one per forwarded message, so the in-flight list is ordered by both,
//!   and a confirm of everything up to one sequence number is an ack of
//!   everything up to its delivery tag (a dropped message is acked on its
//!   own when it arrives, so a multiple ack never covers one in flight);
//! - everything received in one read is handled before the writes it caused
//!   are sent, so both sockets see batches, not one write per message.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio_util::sync::CancellationToken;

use super::config::{self, AckMode};
use super::status::{State, Status};
use super::webhook::{Webhook, WebhookError};
use crate::amqp::codec::{
    BasicProperties, FieldTable, Frame, Method, ShortStr, parse_frame, write_basic_ack, write_basic_nack, write_body,
    write_header, write_header_raw, write_heartbeat, write_method,
};
use crate::amqp::context::AmqpContext;
use crate::client::connection::{self as client, ClientInfo, Connection, Login, QueueDeclare, close_error};
use crate::transport::peer::Peer;

/// How long connecting to either end may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Heartbeat interval asked of both ends, in seconds: a peer silent for
/// twice as long is given up on, so a link over a dead network reconnects.
const HEARTBEAT: u16 = 30;
/// The channel used on both connections.
pub const CHANNEL: u16 = 1;
/// How long a stopped link may take to close its connections.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Size of the in-process pipe to this broker.
const PIPE_SIZE: usize = 256 * 1024;
/// How often a link's [`Upkeep`] runs.
const UPKEEP_EVERY: Duration = Duration::from_millis(200);

/// Why a session ended early; the link retries after its reconnect delay.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The parameter cannot be used (only when it changed under a running
    /// link: it is checked when set).
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// One end failed or refused something.
    #[error("{end}: {error}")]
    Peer {
        /// `source` or `destination`.
        end: &'static str,
        /// What went wrong.
        error: client::Error,
    },
    /// The webhook destination failed or refused a message.
    #[error("destination: {0}")]
    Webhook(WebhookError),
    /// An end sent nothing, not even a heartbeat, for too long.
    #[error("{end}: nothing received for {secs} s (missed heartbeats)")]
    Silent {
        /// `source` or `destination`.
        end: &'static str,
        /// How long it was silent.
        secs: u64,
    },
    /// An end did not answer in time.
    #[error("{0}: timed out connecting")]
    Timeout(&'static str),
    /// What the link serves is gone (a federated exchange or queue deleted).
    #[error("{0}")]
    Gone(String),
}

/// Tags a client error with the end it came from.
pub fn at(end: &'static str) -> impl Fn(client::Error) -> LinkError {
    move |error| LinkError::Peer { end, error }
}

/// How a session ended without an error.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It was told to stop.
    Stopped,
    /// Its message count was reached: the link is done.
    Finished,
}

/// Connects to `uri_text` as `role`: to this broker, in process and acting
/// as `user`, when the URI names no host.
pub async fn connect(
    local: &Arc<AmqpContext>,
    user: &str,
    uri_text: &str,
    key: &'static str,
    conn_name: &str,
    role: &'static str,
) -> Result<Connection, LinkError> {
    let uri = config::parse_amqp_uri(key, uri_text)?;
    let info = ClientInfo {
        product: "lavinmq",
        name: conn_name,
        heartbeat: uri.heartbeat.unwrap_or(HEARTBEAT),
    };
    if config::is_local(uri_text) {
        return connect_local(local, user, &uri.vhost, info, role).await;
    }
    match tokio::time::timeout(CONNECT_TIMEOUT, Connection::connect_as(&uri, info)).await {
        Ok(result) => result.map_err(at(role)),
        Err(_) => Err(LinkError::Timeout(role)),
    }
}

/// Connects to `vhost` of this broker, in process and acting as `user`.
pub async fn connect_local(
    local: &Arc<AmqpContext>,
    user: &str,
    vhost: &str,
    info: ClientInfo<'_>,
    role: &'static str,
) -> Result<Connection, LinkError> {
    let (ours, theirs) = tokio::io::duplex(PIPE_SIZE);
    let peer = Peer::in_process(user);
    local
        .tasks
        .spawn(crate::amqp::connection::serve(local.clone(), theirs, peer));
    let (rd, wr) = crate::client::stream::in_process(ours);
    match tokio::time::timeout(CONNECT_TIMEOUT, Connection::open(rd, wr, Login::External, vhost, info)).await {
        Ok(result) => result.map_err(at(role)),
        Err(_) => Err(LinkError::Timeout(role)),
    }
}

/// Runs a link's sessions (`session(attempt)`) until one ends without an
/// error or the link is stopped: after a failure, `failed` hears of it, the
/// status shows it, and the next session starts after `reconnect_delay`. A
/// stopped session closes both ends itself; one stuck connecting is dropped
/// after a grace period.
pub async fn retrying<F, Fut>(
    stop: &CancellationToken,
    status: &Status,
    reconnect_delay: Duration,
    mut failed: impl FnMut(&LinkError),
    mut session: F,
) -> Outcome
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<Outcome, LinkError>>,
{
    for attempt in 0.. {
        if stop.is_cancelled() {
            break;
        }
        status.set(State::Starting, None);
        let stopped = async {
            stop.cancelled().await;
            tokio::time::sleep(STOP_GRACE).await;
        };
        let result = tokio::select! {
            result = session(attempt) => result,
            _ = stopped => Ok(Outcome::Stopped),
        };
        match result {
            Ok(outcome) => return outcome,
            Err(_) if stop.is_cancelled() => break,
            Err(e) => {
                failed(&e);
                status.set(State::Terminated, Some(e.to_string()));
            }
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(reconnect_delay) => {}
        }
    }
    Outcome::Stopped
}

/// Declares `queue` if it is missing (durable, as RabbitMQ's shovel
/// does), else uses it as it is; returns its ready message count.
pub async fn ensure_queue(conn: &mut Connection, queue: &str, end: &'static str) -> Result<u32, LinkError> {
    let none = FieldTable::new();
    let mut q = QueueDeclare {
        name: queue,
        passive: true,
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments: &none,
    };
    match conn.queue_declare_counted(CHANNEL, q.clone()).await {
        Ok((_, count)) => Ok(count),
        Err(client::Error::ChannelClosed { code: 404, .. }) => {
            conn.open_channel(CHANNEL).await.map_err(at(end))?;
            q.passive = false;
            conn.queue_declare_counted(CHANNEL, q)
                .await
                .map(|(_, count)| count)
                .map_err(at(end))
        }
        Err(e) => Err(at(end)(e)),
    }
}

/// Closes both ends gracefully (unacked messages go back to the source queue).
pub async fn close(src: Connection, dst: Option<Connection>) {
    match dst {
        Some(dst) => drop(tokio::join!(src.close(), dst.close())),
        None => drop(src.close().await),
    }
}

/// A message as the source delivered it, for [`Forward`] to look at.
pub struct Delivered<'a> {
    /// The exchange it was published to.
    pub exchange: &'a str,
    /// Its routing key.
    pub routing_key: &'a str,
    /// Whether the source delivered it before.
    pub redelivered: bool,
}

/// What a link does with each message.
pub trait Forward: Sync {
    /// The exchange and routing key the message is published with on the
    /// destination, or `None` to drop it (it is settled at the source).
    fn route<'a>(&'a self, m: &Delivered<'a>, properties: &BasicProperties) -> Option<(&'a str, &'a str)>;
    /// Whether [`Forward::stamp`] changes anything (else the properties are
    /// copied as they were encoded).
    fn stamps(&self) -> bool;
    /// Adds the link's headers to a forwarded message.
    fn stamp(&self, m: &Delivered<'_>, properties: &mut BasicProperties);
}

/// Work a link does on its source while it runs.
pub trait Upkeep: Send {
    /// Runs every few hundred ms; writes to `to_src` the methods that keep
    /// the source in step (their replies are ignored; an error closes the
    /// channel and so the session).
    fn tick(&mut self, to_src: &mut BytesMut) -> Result<(), LinkError>;
}

/// The two ends of a running session.
pub struct Ends {
    /// Where messages are consumed.
    pub src: Connection,
    /// Where they are published (none for a webhook).
    pub dst: Option<Connection>,
    /// Where they are posted instead.
    pub webhook: Option<Webhook>,
}

/// How a session moves messages.
pub struct Plan<'a> {
    /// Where each message goes.
    pub forward: &'a dyn Forward,
    /// When a message leaves the source.
    pub ack_mode: AckMode,
    /// Where progress is counted.
    pub status: &'a Status,
    /// The source consumer's tag (cancelled when `remaining` reaches 0).
    pub consumer_tag: String,
    /// Messages still to move before the link is done, if it ever is.
    pub remaining: Option<u64>,
}

/// Moves messages between `ends` until stopped, finished or broken.
pub async fn run(
    mut ends: Ends,
    plan: Plan<'_>,
    stop: &CancellationToken,
    mut upkeep: Option<&mut dyn Upkeep>,
) -> Result<Outcome, LinkError> {
    let Ends { src, dst, webhook } = &mut ends;
    let mut mover = Mover {
        forward: plan.forward,
        ack_mode: plan.ack_mode,
        status: plan.status,
        webhook: webhook.is_some(),
        remaining: plan.remaining,
        cancelled: false,
        consumer_tag: plan.consumer_tag,
        incoming: None,
        unconfirmed: VecDeque::new(),
        next_seq: 1,
        to_src: BytesMut::new(),
        to_dst: BytesMut::new(),
        posts: VecDeque::new(),
        dst_frame_max: dst.as_ref().map_or(0, |d| d.tuning.frame_max),
        src_frame_max: src.tuning.frame_max,
    };
    let beats = Heartbeats::new(src.tuning.heartbeat, dst.as_ref().map_or(0, |d| d.tuning.heartbeat));
    let mut ticker = tokio::time::interval(beats.period.max(Duration::from_millis(1)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut upkeep_ticker = tokio::time::interval(UPKEEP_EVERY);
    upkeep_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut src_seen, mut dst_seen) = (Instant::now(), Instant::now());
    let outcome = loop {
        // Frames may already be buffered (deliveries that came with
        // consume-ok), so handle what is there before reading more.
        mover.handle_source(&mut src.reader.buf)?;
        if let Some(dst) = dst.as_mut() {
            mover.handle_destination(&mut dst.reader.buf)?;
            if !mover.to_dst.is_empty() {
                dst.writer
                    .send(&mover.to_dst)
                    .await
                    .map_err(|e| at("destination")(e.into()))?;
                mover.to_dst.clear();
            }
        }
        if let Some(hook) = webhook.as_mut() {
            while let Some((tag, properties, body)) = mover.posts.pop_front() {
                hook.post(&properties, body).await.map_err(LinkError::Webhook)?;
                mover.posted(tag);
            }
        }
        if !mover.to_src.is_empty() {
            src.writer
                .send(&mover.to_src)
                .await
                .map_err(|e| at("source")(e.into()))?;
            mover.to_src.clear();
        }
        if mover.done() {
            break Outcome::Finished;
        }
        tokio::select! {
            _ = stop.cancelled() => break Outcome::Stopped,
            read = src.reader.fill() => {
                read.map_err(at("source"))?;
                src_seen = Instant::now();
            }
            read = async {
                match dst.as_mut() {
                    Some(d) => d.reader.fill().await,
                    None => std::future::pending().await,
                }
            } => {
                read.map_err(at("destination"))?;
                dst_seen = Instant::now();
            }
            _ = ticker.tick(), if beats.on() => {
                beats.check("source", src.tuning.heartbeat, src_seen, &mut mover.to_src)?;
                if let Some(d) = dst.as_ref() {
                    beats.check("destination", d.tuning.heartbeat, dst_seen, &mut mover.to_dst)?;
                }
            }
            _ = upkeep_ticker.tick(), if upkeep.is_some() => {
                if let Some(u) = upkeep.as_deref_mut() {
                    u.tick(&mut mover.to_src)?;
                }
            }
        }
    };
    let Ends { src, dst, .. } = ends;
    close(src, dst).await;
    Ok(outcome)
}

/// Heartbeats on both connections: each end with a negotiated interval gets
/// one at least that often and is given up on when silent for twice as long.
struct Heartbeats {
    /// How often to send and check: half the shortest interval (zero: never).
    period: Duration,
}

impl Heartbeats {
    fn new(src: u16, dst: u16) -> Heartbeats {
        let shortest = [src, dst].into_iter().filter(|h| *h > 0).min().unwrap_or(0);
        Heartbeats {
            period: Duration::from_millis(u64::from(shortest) * 500),
        }
    }

    /// Whether either end uses heartbeats.
    fn on(&self) -> bool {
        !self.period.is_zero()
    }

    /// Fails when the end has been silent too long, else queues a heartbeat to it.
    fn check(&self, end: &'static str, interval: u16, seen: Instant, out: &mut BytesMut) -> Result<(), LinkError> {
        if interval == 0 {
            return Ok(());
        }
        let limit = Duration::from_secs(u64::from(interval) * 2);
        if seen.elapsed() > limit {
            return Err(LinkError::Silent {
                end,
                secs: limit.as_secs(),
            });
        }
        write_heartbeat(out);
        Ok(())
    }
}

/// A message being received from the source.
struct Incoming {
    delivery_tag: u64,
    redelivered: bool,
    exchange: ShortStr,
    routing_key: ShortStr,
    header: Option<(Box<BasicProperties>, Bytes, u64)>,
    body: BytesMut,
}

/// The state of the transfer loop between reads.
struct Mover<'a> {
    forward: &'a dyn Forward,
    ack_mode: AckMode,
    status: &'a Status,
    /// Messages go to a webhook, not a destination connection.
    webhook: bool,
    /// Messages still to move before the link is done.
    remaining: Option<u64>,
    /// Whether the consumer was cancelled because the count was reached.
    cancelled: bool,
    consumer_tag: String,
    incoming: Option<Incoming>,
    /// `(publish sequence number, source delivery tag)` awaiting a confirm.
    unconfirmed: VecDeque<(u64, u64)>,
    next_seq: u64,
    /// Bytes to send to the source (acks, nacks, cancel).
    to_src: BytesMut,
    /// Bytes to send to the destination (publishes).
    to_dst: BytesMut,
    /// Messages for a webhook destination: delivery tag, properties, body.
    posts: VecDeque<(u64, BasicProperties, Bytes)>,
    /// The negotiated frame sizes: larger frames are refused before they
    /// are buffered.
    dst_frame_max: u32,
    src_frame_max: u32,
}

impl Mover<'_> {
    /// Whether the count is reached and nothing is in flight.
    fn done(&self) -> bool {
        self.remaining == Some(0) && self.unconfirmed.is_empty() && self.incoming.is_none() && self.posts.is_empty()
    }

    fn no_ack(&self) -> bool {
        self.ack_mode == AckMode::NoAck
    }

    /// Handles every complete frame the source sent.
    fn handle_source(&mut self, buf: &mut BytesMut) -> Result<(), LinkError> {
        let proto = |e| at("source")(client::Error::Codec(e));
        while let Some(frame) = parse_frame(buf, self.src_frame_max).map_err(proto)? {
            match frame {
                Frame::Method {
                    method:
                        Method::BasicDeliver {
                            delivery_tag,
                            redelivered,
                            exchange,
                            routing_key,
                            ..
                        },
                    ..
                } => {
                    self.incoming = Some(Incoming {
                        delivery_tag,
                        redelivered,
                        exchange,
                        routing_key,
                        header: None,
                        body: BytesMut::new(),
                    });
                }
                Frame::Header {
                    properties,
                    raw_properties,
                    body_size,
                    ..
                } => {
                    if let Some(m) = self.incoming.as_mut() {
                        m.header = Some((properties, raw_properties, body_size));
                    }
                    self.complete_if_whole()?;
                }
                Frame::Body { payload, .. } => {
                    if let Some(m) = self.incoming.as_mut() {
                        m.body.extend_from_slice(&payload);
                    }
                    self.complete_if_whole()?;
                }
                Frame::Method { method, .. } => {
                    if let Some(e) = close_error(&method) {
                        return Err(at("source")(e));
                    }
                    // The server cancelled the consumer (queue deleted); our
                    // own cancel-ok needs nothing.
                    if let Method::BasicCancel { consumer_tag, .. } = method {
                        return Err(at("source")(client::Error::ConsumerCancelled(consumer_tag.to_string())));
                    }
                }
                Frame::Heartbeat { .. } => {}
            }
        }
        Ok(())
    }

    /// Sends the message being received on once its body is complete.
    fn complete_if_whole(&mut self) -> Result<(), LinkError> {
        let whole = match &self.incoming {
            Some(Incoming {
                header: Some((_, _, size)),
                body,
                ..
            }) => body.len() as u64 >= *size,
            _ => false,
        };
        if !whole {
            return Ok(());
        }
        let Some(m) = self.incoming.take() else {
            return Ok(());
        };
        if self.remaining == Some(0) {
            // Past the count: give it back (unless it was consumed without
            // acks, when forwarding it is better than losing it).
            if !self.no_ack() {
                write_basic_nack(&mut self.to_src, CHANNEL, m.delivery_tag, false, true);
                return Ok(());
            }
        }
        self.publish(m)?;
        if let Some(r) = self.remaining.as_mut() {
            *r = r.saturating_sub(1);
            if *r == 0 && !self.cancelled {
                self.cancelled = true;
                let cancel = Method::BasicCancel {
                    consumer_tag: ShortStr::from(self.consumer_tag.as_str()),
                    nowait: false,
                };
                write_method(&mut self.to_src, CHANNEL, &cancel).map_err(|e| at("source")(e.into()))?;
            }
        }
        Ok(())
    }

    /// Writes the publish of one message and, per the ack mode, its ack.
    fn publish(&mut self, m: Incoming) -> Result<(), LinkError> {
        let Some((properties, raw, size)) = m.header else {
            return Ok(());
        };
        let delivered = Delivered {
            exchange: &m.exchange,
            routing_key: &m.routing_key,
            redelivered: m.redelivered,
        };
        let Some((exchange, routing_key)) = self.forward.route(&delivered, &properties) else {
            if !self.no_ack() {
                write_basic_ack(&mut self.to_src, CHANNEL, m.delivery_tag, false);
            }
            return Ok(());
        };
        if self.webhook {
            let mut props = *properties;
            if self.forward.stamps() {
                self.forward.stamp(&delivered, &mut props);
            }
            self.posts.push_back((m.delivery_tag, props, m.body.freeze()));
            return Ok(());
        }
        let publish = Method::BasicPublish {
            exchange: ShortStr::from(exchange),
            routing_key: ShortStr::from(routing_key),
            mandatory: false,
            immediate: false,
        };
        let codec = |e| at("destination")(client::Error::Codec(e));
        write_method(&mut self.to_dst, CHANNEL, &publish).map_err(codec)?;
        if self.forward.stamps() {
            let mut props = *properties;
            self.forward.stamp(&delivered, &mut props);
            write_header(&mut self.to_dst, CHANNEL, size, &props).map_err(codec)?;
        } else {
            write_header_raw(&mut self.to_dst, CHANNEL, size, &raw).map_err(codec)?;
        }
        write_body(&mut self.to_dst, CHANNEL, &m.body, self.dst_frame_max);
        self.status.forwarded(1);
        match self.ack_mode {
            AckMode::OnConfirm => {
                self.unconfirmed.push_back((self.next_seq, m.delivery_tag));
                self.next_seq += 1;
            }
            AckMode::OnPublish => write_basic_ack(&mut self.to_src, CHANNEL, m.delivery_tag, false),
            AckMode::NoAck => {}
        }
        Ok(())
    }

    /// A webhook accepted the message with `delivery_tag`: it leaves the source.
    fn posted(&mut self, delivery_tag: u64) {
        self.status.forwarded(1);
        if !self.no_ack() {
            write_basic_ack(&mut self.to_src, CHANNEL, delivery_tag, false);
        }
    }

    /// Handles every complete frame the destination sent: confirms turn
    /// into acks (or requeueing nacks) on the source.
    fn handle_destination(&mut self, buf: &mut BytesMut) -> Result<(), LinkError> {
        let proto = |e| at("destination")(client::Error::Codec(e));
        while let Some(frame) = parse_frame(buf, self.dst_frame_max).map_err(proto)? {
            let Frame::Method { method, .. } = frame else { continue };
            if let Some(e) = close_error(&method) {
                return Err(at("destination")(e));
            }
            match method {
                Method::BasicAck { delivery_tag, multiple } => self.confirmed(delivery_tag, multiple, true),
                Method::BasicNack {
                    delivery_tag, multiple, ..
                } => self.confirmed(delivery_tag, multiple, false),
                _ => {}
            }
        }
        Ok(())
    }

    /// Settles the source messages whose copies the destination confirmed
    /// (`ok`) or refused, up to sequence number `seq` when `multiple`.
    fn confirmed(&mut self, seq: u64, multiple: bool, ok: bool) {
        let settle = |out: &mut BytesMut, tag: u64, multiple: bool| {
            if ok {
                write_basic_ack(out, CHANNEL, tag, multiple);
            } else {
                write_basic_nack(out, CHANNEL, tag, multiple, true);
            }
        };
        if multiple {
            let mut last = None;
            while let Some(&(s, tag)) = self.unconfirmed.front() {
                if s > seq {
                    break;
                }
                last = Some(tag);
                self.unconfirmed.pop_front();
            }
            if let Some(tag) = last {
                settle(&mut self.to_src, tag, true);
            }
        } else if let Some(i) = self.unconfirmed.iter().position(|&(s, _)| s == seq)
            && let Some((_, tag)) = self.unconfirmed.remove(i)
        {
            settle(&mut self.to_src, tag, false);
        }
    }
}

/// A URI with its password hidden, for headers and the API.
pub fn redact(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}@{host}{tail}")
        }
        None => uri.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact("amqp://u:secret@h:5672/v"), "amqp://u@h:5672/v");
        assert_eq!(redact("amqp://h/v"), "amqp://h/v");
        assert_eq!(redact("amqp://"), "amqp://");
    }
}
