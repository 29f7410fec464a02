//! One session of a running shovel: connect to both ends, then move messages
//! until stopped, finished or broken.
//!
//! Invariants of the transfer loop:
//! - with `on-confirm`, a source message is acked only after the destination
//!   confirmed its copy, and nacked back to the source (requeued) when the
//!   destination refuses it; at most `prefetch` messages are in flight;
//! - source delivery tags and destination publish sequence numbers both grow
//!   by one per message, so the in-flight list is ordered by both, and a
//!   confirm of everything up to one sequence number is an ack of everything
//!   up to its delivery tag;
//! - everything received in one read is handled before the writes it caused
//!   are sent, so both sockets see batches, not one write per message.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio_util::sync::CancellationToken;

use super::config::{self, AckMode, DeleteAfter, Destination, ShovelConfig, Source};
use super::status::{State, Status};
use super::webhook::Webhook;
use crate::amqp::codec::{
    BasicProperties, FieldTable, FieldValue, Frame, Method, ShortStr, parse_frame, write_basic_ack, write_basic_nack,
    write_body, write_header, write_header_raw, write_heartbeat, write_method,
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
const CHANNEL: u16 = 1;
/// Size of the in-process pipe to this broker.
const PIPE_SIZE: usize = 256 * 1024;

/// Why a session ended early; the shovel retries after its reconnect delay.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The parameter cannot be used (only when it changed under a running
    /// shovel: it is checked when set).
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
    Webhook(super::webhook::WebhookError),
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
}

/// Tags a client error with the end it came from.
fn at(end: &'static str) -> impl Fn(client::Error) -> LinkError {
    move |error| LinkError::Peer { end, error }
}

/// How a session ended without an error.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It was told to stop.
    Stopped,
    /// `src-delete-after` was reached: the shovel is done.
    Finished,
}

/// What a session needs from its shovel.
pub struct Link<'a> {
    /// The shovel's name (connection names say it).
    pub name: &'a str,
    /// Its vhost, for forward headers.
    pub vhost: &'a str,
    /// Its settings.
    pub config: &'a ShovelConfig,
    /// This broker, for host-less URIs.
    pub local: &'a Arc<AmqpContext>,
    /// Who host-less URIs act as.
    pub user: &'a str,
    /// Where progress is shown.
    pub status: &'a Status,
    /// Which of the URIs to try (the attempt number; URIs are tried in turn).
    pub attempt: usize,
}

/// A message being received from the source.
struct Incoming {
    delivery_tag: u64,
    exchange: ShortStr,
    routing_key: ShortStr,
    header: Option<(Box<BasicProperties>, Bytes, u64)>,
    body: BytesMut,
}

impl Link<'_> {
    /// Connects to `uri` (this broker when it names no host), as `role`.
    async fn connect(&self, uri_text: &str, key: &'static str, role: &'static str) -> Result<Connection, LinkError> {
        let uri = config::parse_amqp_uri(key, uri_text)?;
        let conn_name = format!("Shovel {} {role}", self.name);
        let info = ClientInfo {
            product: "lavinmq",
            name: &conn_name,
            heartbeat: uri.heartbeat.unwrap_or(HEARTBEAT),
        };
        let connecting = async {
            if config::is_local(uri_text) {
                let (ours, theirs) = tokio::io::duplex(PIPE_SIZE);
                let ctx = self.local.clone();
                let peer = Peer::in_process(self.user);
                self.local
                    .tasks
                    .spawn(crate::amqp::connection::serve(ctx, theirs, peer));
                let (rd, wr) = crate::client::stream::in_process(ours);
                Connection::open(rd, wr, Login::External, &uri.vhost, info).await
            } else {
                Connection::connect_as(&uri, info).await
            }
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Ok(result) => result.map_err(at(role)),
            Err(_) => Err(LinkError::Timeout(role)),
        }
    }

    /// Declares `queue` if it is missing (durable, as RabbitMQ's shovel
    /// does), else uses it as it is; returns its ready message count.
    async fn ensure_queue(conn: &mut Connection, queue: &str, end: &'static str) -> Result<u32, LinkError> {
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

    /// Runs one session until it is stopped, finishes, or fails.
    pub async fn run(&self, stop: &CancellationToken) -> Result<Outcome, LinkError> {
        let cfg = self.config;
        let pick = |uris: &[String]| uris[self.attempt % uris.len()].clone();
        let (src_uri, dest_uri) = (pick(&cfg.src_uris), pick(&cfg.dest_uris));
        let mut src = self.connect(&src_uri, "src-uri", "source").await?;
        let (mut dst, mut webhook) = if cfg.destination == Destination::Http {
            let hook = Webhook::new(&dest_uri, self.name).map_err(LinkError::Webhook)?;
            (None, Some(hook))
        } else {
            (Some(self.connect(&dest_uri, "dest-uri", "destination").await?), None)
        };
        src.open_channel(CHANNEL).await.map_err(at("source"))?;
        let (queue, count) = match &cfg.source {
            Source::Queue(q) => (q.clone(), Self::ensure_queue(&mut src, q, "source").await?),
            Source::Exchange { exchange, key } => {
                let none = FieldTable::new();
                let temp = QueueDeclare {
                    name: "",
                    passive: false,
                    durable: false,
                    exclusive: true,
                    auto_delete: true,
                    arguments: &none,
                };
                let q = src.queue_declare(CHANNEL, temp).await.map_err(at("source"))?;
                src.queue_bind(CHANNEL, &q, exchange, key).await.map_err(at("source"))?;
                (q, 0)
            }
        };
        let mut remaining = match cfg.delete_after {
            DeleteAfter::Never => None,
            DeleteAfter::QueueLength => Some(u64::from(count)),
            DeleteAfter::Count(n) => Some(n.saturating_sub(self.status.forwarded_count())),
        };
        if remaining == Some(0) {
            close(src, dst).await;
            return Ok(Outcome::Finished);
        }
        if let Some(dst) = dst.as_mut() {
            dst.open_channel(CHANNEL).await.map_err(at("destination"))?;
            // Declaring may close and reopen the channel, so confirms come after.
            if let Destination::Amqp { queue: Some(q), .. } = &cfg.destination {
                Self::ensure_queue(dst, q, "destination").await?;
            }
            if cfg.ack_mode == AckMode::OnConfirm {
                dst.confirm_select(CHANNEL).await.map_err(at("destination"))?;
            }
        }
        let no_ack = cfg.ack_mode == AckMode::NoAck;
        if !no_ack {
            let limit = remaining.map_or(cfg.prefetch, |r| u16::try_from(r).unwrap_or(u16::MAX).min(cfg.prefetch));
            src.qos(CHANNEL, limit).await.map_err(at("source"))?;
        }
        let consumer_tag = src
            .consume(CHANNEL, &queue, no_ack, &cfg.consumer_args)
            .await
            .map_err(at("source"))?;
        self.status.set(State::Running, None);
        tracing::info!(shovel = self.name, vhost = self.vhost, "shovel running");
        let mut mover = Mover {
            link: self,
            src_uri: &src_uri,
            dest_uri: &dest_uri,
            no_ack,
            remaining: &mut remaining,
            cancelled: false,
            consumer_tag,
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
            }
        };
        close(src, dst).await;
        Ok(outcome)
    }
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

/// Closes both ends gracefully (unacked messages go back to the source queue).
async fn close(src: Connection, dst: Option<Connection>) {
    match dst {
        Some(dst) => drop(tokio::join!(src.close(), dst.close())),
        None => drop(src.close().await),
    }
}

/// The state of the transfer loop between reads.
struct Mover<'a> {
    link: &'a Link<'a>,
    src_uri: &'a str,
    dest_uri: &'a str,
    no_ack: bool,
    /// Messages still to move before `src-delete-after` is reached.
    remaining: &'a mut Option<u64>,
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
    /// Whether `src-delete-after` is reached and nothing is in flight.
    fn done(&self) -> bool {
        *self.remaining == Some(0) && self.unconfirmed.is_empty() && self.incoming.is_none() && self.posts.is_empty()
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
                            exchange,
                            routing_key,
                            ..
                        },
                    ..
                } => {
                    self.incoming = Some(Incoming {
                        delivery_tag,
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
                    // own cancel-ok, after the count was reached, needs nothing.
                    if let Method::BasicCancel { .. } = method {
                        return Err(at("source")(client::Error::ConsumerCancelled(
                            self.consumer_tag.clone(),
                        )));
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
        if *self.remaining == Some(0) {
            // Past the count: give it back (unless it was consumed without
            // acks, when forwarding it is better than losing it).
            if !self.no_ack {
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
        let cfg = self.link.config;
        let Some((properties, raw, size)) = m.header else {
            return Ok(());
        };
        if cfg.destination == Destination::Http {
            let mut props = *properties;
            if cfg.add_forward_headers || cfg.add_timestamp_header {
                self.add_headers(&mut props);
            }
            self.posts.push_back((m.delivery_tag, props, m.body.freeze()));
            return Ok(());
        }
        let (exchange, routing_key) = cfg.destination.route(&m.exchange, &m.routing_key);
        let publish = Method::BasicPublish {
            exchange: ShortStr::from(exchange),
            routing_key: ShortStr::from(routing_key),
            mandatory: false,
            immediate: false,
        };
        let codec = |e| at("destination")(client::Error::Codec(e));
        write_method(&mut self.to_dst, CHANNEL, &publish).map_err(codec)?;
        if cfg.add_forward_headers || cfg.add_timestamp_header {
            let mut props = *properties;
            self.add_headers(&mut props);
            write_header(&mut self.to_dst, CHANNEL, size, &props).map_err(codec)?;
        } else {
            write_header_raw(&mut self.to_dst, CHANNEL, size, &raw).map_err(codec)?;
        }
        write_body(&mut self.to_dst, CHANNEL, &m.body, self.dst_frame_max);
        self.link.status.forwarded(1);
        match cfg.ack_mode {
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
        self.link.status.forwarded(1);
        if !self.no_ack {
            write_basic_ack(&mut self.to_src, CHANNEL, delivery_tag, false);
        }
    }

    /// Adds RabbitMQ's `x-shovelled` (and `x-shovelled-timestamp`) headers.
    fn add_headers(&self, props: &mut BasicProperties) {
        let cfg = self.link.config;
        let headers = props.headers.get_or_insert_with(FieldTable::new);
        if cfg.add_forward_headers {
            let mut entry = FieldTable::new();
            let s = |v: &str| FieldValue::from(v);
            entry.insert("shovelled-by", s(crate::http::overview::NODE));
            entry.insert("shovel-type", s("dynamic"));
            entry.insert("shovel-name", s(self.link.name));
            entry.insert("shovel-vhost", s(self.link.vhost));
            entry.insert("src-uri", s(&redact(self.src_uri)));
            match &cfg.source {
                Source::Queue(q) => entry.insert("src-queue", s(q)),
                Source::Exchange { exchange, key } => {
                    entry.insert("src-exchange", s(exchange));
                    entry.insert("src-exchange-key", s(key))
                }
            };
            entry.insert("dest-uri", s(&redact(self.dest_uri)));
            if let Destination::Amqp { queue, exchange, key } = &cfg.destination {
                for (k, v) in [
                    ("dest-queue", queue),
                    ("dest-exchange", exchange),
                    ("dest-exchange-key", key),
                ] {
                    if let Some(v) = v {
                        entry.insert(k, s(v));
                    }
                }
            }
            let mut list = match headers.get("x-shovelled") {
                Some(FieldValue::Array(a)) => a.clone(),
                _ => Vec::new(),
            };
            list.push(FieldValue::Table(entry));
            headers.insert("x-shovelled", FieldValue::Array(list));
        }
        if cfg.add_timestamp_header {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            headers.insert("x-shovelled-timestamp", FieldValue::Timestamp(now));
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
