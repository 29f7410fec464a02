//! One session of a federation link: connect to the upstream and to this
//! broker, set up what the link consumes on the upstream, then run the
//! shovels' transfer loop until stopped or broken.
//!
//! - An **exchange link** declares on the upstream a queue and an
//!   `x-federation-upstream` exchange bound to the upstream exchange with
//!   each binding of the federated exchange (kept in step while it runs,
//!   see [`BindingSync`]), and publishes what arrives to the federated
//!   exchange with the message's routing key. Messages carry
//!   `x-received-from`; one that already crossed `max-hops` links is dropped,
//!   so a ring of federated exchanges does not loop. Bindings carry
//!   `x-bound-from` with a hop count, so they do not loop either.
//! - A **queue link** consumes the upstream queue only while the federated
//!   queue has consumers and no ready messages (see [`ConsumerGate`]), and
//!   publishes what arrives to it.

use std::sync::Arc;

use bytes::BytesMut;
use tokio_util::sync::CancellationToken;

use super::config::Upstream;
use crate::amqp::codec::{BasicProperties, FieldTable, FieldValue, Method, ShortStr, write_method};
use crate::amqp::context::AmqpContext;
use crate::client::connection::{self as client, ClientInfo, Connection, ExchangeDeclare, QueueDeclare};
use crate::core::exchange::{Exchange, ExchangeKind, received_from_hops};
use crate::core::queue::Queue;
use crate::core::vhost::VHost;
use crate::shovel::config::AckMode;
use crate::shovel::status::{State, Status};
use crate::shovel::transfer::{self, CHANNEL, Delivered, Ends, Forward, LinkError, Outcome, Plan, Upkeep, at, redact};

/// What a link federates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A federated exchange.
    Exchange,
    /// A federated queue.
    Queue,
}

impl Kind {
    /// The API's name of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Exchange => "exchange",
            Kind::Queue => "queue",
        }
    }
}

/// What a session needs from its link.
pub struct Link<'a> {
    /// The vhost of the federated exchange or queue.
    pub vhost: &'a Arc<VHost>,
    /// Exchange or queue.
    pub kind: Kind,
    /// The federated exchange's or queue's name.
    pub resource: &'a str,
    /// Where messages come from.
    pub upstream: &'a Upstream,
    /// This broker.
    pub local: &'a Arc<AmqpContext>,
    /// Who the link acts as on this broker.
    pub user: &'a str,
    /// Where progress is shown.
    pub status: &'a Status,
    /// Which of the upstream's URIs to try (URIs are tried in turn).
    pub attempt: usize,
}

impl Link<'_> {
    /// The upstream URI this session uses.
    pub fn uri(&self) -> &str {
        &self.upstream.uris[self.attempt % self.upstream.uris.len()]
    }

    /// The exchange or queue consumed on the upstream.
    pub fn upstream_resource(&self) -> &str {
        let named = match self.kind {
            Kind::Exchange => self.upstream.exchange.as_deref(),
            Kind::Queue => self.upstream.queue.as_deref(),
        };
        named.unwrap_or(self.resource)
    }

    /// Runs one session until it is stopped or fails.
    pub async fn run(&self, stop: &CancellationToken) -> Result<Outcome, LinkError> {
        let conn_name = format!("Federation link: {}/{}", self.upstream.name, self.resource);
        let mut src = transfer::connect(self.local, self.user, self.uri(), "uri", &conn_name, "upstream").await?;
        let info = ClientInfo {
            product: "lavinmq",
            name: &conn_name,
            heartbeat: 0,
        };
        let mut dst = transfer::connect_local(self.local, self.user, &self.vhost.name, info, "downstream").await?;
        src.open_channel(CHANNEL).await.map_err(at("source"))?;
        dst.open_channel(CHANNEL).await.map_err(at("destination"))?;
        if self.upstream.ack_mode == AckMode::OnConfirm {
            dst.confirm_select(CHANNEL).await.map_err(at("destination"))?;
        }
        let no_ack = self.upstream.ack_mode == AckMode::NoAck;
        let uri = redact(self.uri());
        let forward = Stamp {
            link: self,
            uri: &uri,
            upstream_resource: self.upstream_resource(),
        };
        let plan = Plan {
            forward: &forward,
            ack_mode: self.upstream.ack_mode,
            status: self.status,
            consumer_tag: self.upstream.consumer_tag.clone(),
            remaining: None,
        };
        let mut upkeep: Box<dyn Upkeep> = match self.kind {
            Kind::Exchange => {
                let exchange = self
                    .vhost
                    .get_exchange(self.resource)
                    .map_err(|e| LinkError::Gone(e.to_string()))?;
                let queue = self.setup_exchange_link(&mut src, &exchange).await?;
                let mut sync = BindingSync {
                    vhost: self.vhost.clone(),
                    exchange,
                    upstream_exchange: self.upstream_resource().to_owned(),
                    target: queue.clone(),
                    max_hops: self.upstream.max_hops,
                    seen: None,
                    propagated: Vec::new(),
                };
                let mut first = BytesMut::new();
                sync.tick(&mut first)?;
                src.writer.send(&first).await.map_err(|e| at("source")(e.into()))?;
                if !no_ack {
                    src.qos(CHANNEL, self.upstream.prefetch).await.map_err(at("source"))?;
                }
                consume(&mut src, &queue, &self.upstream.consumer_tag, no_ack).await?;
                Box::new(sync)
            }
            Kind::Queue => {
                let queue = self
                    .vhost
                    .get_queue(self.resource)
                    .map_err(|e| LinkError::Gone(e.to_string()))?;
                transfer::ensure_queue(&mut src, self.upstream_resource(), "source").await?;
                if !no_ack {
                    src.qos(CHANNEL, self.upstream.prefetch).await.map_err(at("source"))?;
                }
                Box::new(ConsumerGate {
                    vhost: self.vhost.clone(),
                    queue,
                    upstream_queue: self.upstream_resource().to_owned(),
                    consumer_tag: self.upstream.consumer_tag.clone(),
                    no_ack,
                    most_ready: u64::from(self.upstream.prefetch),
                    consuming: false,
                })
            }
        };
        self.status.set(State::Running, None);
        tracing::info!(
            vhost = %self.vhost.name,
            upstream = %self.upstream.name,
            "federation link for {} '{}' running",
            self.kind.as_str(),
            self.resource
        );
        let ends = Ends {
            src,
            dst: Some(dst),
            webhook: None,
        };
        transfer::run(ends, plan, stop, Some(upkeep.as_mut())).await
    }

    /// The name of the queue (and of the `x-federation-upstream` exchange)
    /// an exchange link uses on the upstream, as RabbitMQ and LavinMQ name it.
    pub fn upstream_queue_name(&self) -> String {
        format!(
            "federation: {} -> {}:{}:{}",
            self.upstream_resource(),
            crate::core::node::host_name(),
            self.vhost.name,
            self.resource
        )
    }

    /// Declares the upstream exchange (like the federated one if it is
    /// missing), the link's queue and its `x-federation-upstream` exchange;
    /// returns the queue's name.
    async fn setup_exchange_link(&self, src: &mut Connection, exchange: &Exchange) -> Result<String, LinkError> {
        let no_args = FieldTable::new();
        let passive = ExchangeDeclare {
            name: self.upstream_resource(),
            kind: exchange.kind.name(),
            passive: true,
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: &no_args,
        };
        match src.exchange_declare(CHANNEL, passive.clone()).await {
            Ok(()) => {}
            Err(client::Error::ChannelClosed { code: 404, .. }) => {
                src.open_channel(CHANNEL).await.map_err(at("source"))?;
                let declare = ExchangeDeclare {
                    passive: false,
                    durable: exchange.durable,
                    arguments: &exchange.arguments,
                    ..passive
                };
                src.exchange_declare(CHANNEL, declare).await.map_err(at("source"))?;
            }
            Err(e) => return Err(at("source")(e)),
        }
        let name = self.upstream_queue_name();
        let mut q_args = FieldTable::new();
        q_args.insert("x-internal-purpose", FieldValue::from("federation"));
        if let Some(ms) = self.upstream.expires {
            q_args.insert("x-expires", FieldValue::I64(ms as i64));
        }
        if let Some(ms) = self.upstream.message_ttl {
            q_args.insert("x-message-ttl", FieldValue::I64(ms as i64));
        }
        let q = QueueDeclare {
            name: &name,
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments: &q_args,
        };
        src.queue_declare(CHANNEL, q).await.map_err(at("source"))?;
        let mut x_args = FieldTable::new();
        x_args.insert(
            "x-downstream-name",
            FieldValue::from(crate::core::node::host_name().as_str()),
        );
        x_args.insert("x-downstream-vhost", FieldValue::from(self.vhost.name.as_str()));
        x_args.insert("x-internal-purpose", FieldValue::from("federation"));
        x_args.insert("x-max-hops", FieldValue::I64(i64::from(self.upstream.max_hops)));
        let federation_exchange = ExchangeDeclare {
            name: &name,
            kind: ExchangeKind::FederationUpstream.name(),
            passive: false,
            durable: true,
            auto_delete: true,
            internal: true,
            arguments: &x_args,
        };
        src.exchange_declare(CHANNEL, federation_exchange)
            .await
            .map_err(at("source"))?;
        src.queue_bind(CHANNEL, &name, &name, "").await.map_err(at("source"))?;
        Ok(name)
    }
}

/// `basic.consume` with a chosen consumer tag.
async fn consume(src: &mut Connection, queue: &str, tag: &str, no_ack: bool) -> Result<(), LinkError> {
    let m = consume_method(queue, tag, no_ack);
    src.call(CHANNEL, &m, "basic.consume-ok", |m| {
        matches!(m, Method::BasicConsumeOk { .. })
    })
    .await
    .map(drop)
    .map_err(at("source"))
}

fn consume_method(queue: &str, tag: &str, no_ack: bool) -> Method {
    Method::BasicConsume {
        queue: ShortStr::from(queue),
        consumer_tag: ShortStr::from(tag),
        no_local: false,
        no_ack,
        exclusive: false,
        nowait: false,
        arguments: FieldTable::new(),
    }
}

/// Where a link sends each message, and the `x-received-from` entry it adds.
struct Stamp<'a> {
    link: &'a Link<'a>,
    /// The upstream URI, password hidden.
    uri: &'a str,
    upstream_resource: &'a str,
}

impl Forward for Stamp<'_> {
    fn route<'a>(&'a self, m: &Delivered<'a>, properties: &BasicProperties) -> Option<(&'a str, &'a str)> {
        match self.link.kind {
            Kind::Exchange
                if received_from_hops(properties.headers.as_ref()) >= i64::from(self.link.upstream.max_hops) =>
            {
                None
            }
            Kind::Exchange => Some((self.link.resource, m.routing_key)),
            Kind::Queue => Some(("", self.link.resource)),
        }
    }

    fn stamps(&self) -> bool {
        true
    }

    fn stamp(&self, m: &Delivered<'_>, props: &mut BasicProperties) {
        let mut entry = FieldTable::new();
        entry.insert("uri", FieldValue::from(self.uri));
        entry.insert(self.link.kind.as_str(), FieldValue::from(self.upstream_resource));
        entry.insert("redelivered", FieldValue::Bool(m.redelivered));
        let headers = props.headers.get_or_insert_with(FieldTable::new);
        let mut list = match headers.get("x-received-from") {
            Some(FieldValue::Array(a)) => a.clone(),
            _ => Vec::new(),
        };
        list.push(FieldValue::Table(entry));
        headers.insert("x-received-from", FieldValue::Array(list));
        if !self.link.upstream.trust_user_id {
            props.user_id = None;
        }
    }
}

/// Keeps the bindings of the link's `x-federation-upstream` exchange on the
/// upstream equal to those of the federated exchange.
struct BindingSync {
    vhost: Arc<VHost>,
    exchange: Arc<Exchange>,
    upstream_exchange: String,
    /// The link's `x-federation-upstream` exchange.
    target: String,
    max_hops: u32,
    /// The binding generation last compared.
    seen: Option<u64>,
    /// What is bound upstream: routing key and arguments.
    propagated: Vec<(String, FieldTable)>,
}

impl BindingSync {
    /// The arguments a binding is propagated with: `x-bound-from` gains an
    /// entry with one hop less than the binding came with (or `max-hops`);
    /// `None` when no hop is left.
    fn bound_from(&self, arguments: &FieldTable) -> Option<FieldTable> {
        let mut args = arguments.clone();
        let mut list = match args.get("x-bound-from") {
            Some(FieldValue::Array(a)) => a.clone(),
            _ => Vec::new(),
        };
        let previous = list
            .first()
            .and_then(FieldValue::as_table)
            .and_then(|t| t.get("hops"))
            .and_then(FieldValue::as_i64);
        let max = i64::from(self.max_hops);
        let hops = previous.map_or(max, |h| (h - 1).min(max));
        if hops <= 0 {
            return None;
        }
        let mut entry = FieldTable::new();
        entry.insert("vhost", FieldValue::from(self.vhost.name.as_str()));
        entry.insert("exchange", FieldValue::from(self.exchange.name.as_str()));
        entry.insert("hops", FieldValue::I64(hops));
        list.insert(0, FieldValue::Table(entry));
        args.insert("x-bound-from", FieldValue::Array(list));
        Some(args)
    }

    fn bind_method(&self, routing_key: &str, arguments: &FieldTable, bind: bool) -> Method {
        let (destination, source) = (
            ShortStr::from(self.target.as_str()),
            ShortStr::from(self.upstream_exchange.as_str()),
        );
        let routing_key = ShortStr::from(routing_key);
        let arguments = arguments.clone();
        if bind {
            Method::ExchangeBind {
                destination,
                source,
                routing_key,
                nowait: true,
                arguments,
            }
        } else {
            Method::ExchangeUnbind {
                destination,
                source,
                routing_key,
                nowait: true,
                arguments,
            }
        }
    }
}

impl Upkeep for BindingSync {
    fn tick(&mut self, to_src: &mut BytesMut) -> Result<(), LinkError> {
        let current = self.vhost.exchange(&self.exchange.name);
        if !current.is_some_and(|x| Arc::ptr_eq(&x, &self.exchange)) {
            return Err(LinkError::Gone(format!(
                "exchange '{}' was deleted",
                self.exchange.name
            )));
        }
        let generation = self.exchange.binding_generation();
        if self.seen == Some(generation) {
            return Ok(());
        }
        self.seen = Some(generation);
        let mut wanted: Vec<(String, FieldTable)> = Vec::new();
        for b in self.exchange.bindings() {
            if let Some(args) = self.bound_from(&b.arguments) {
                let entry = (b.routing_key, args);
                if !wanted.contains(&entry) {
                    wanted.push(entry);
                }
            }
        }
        let codec = |e| at("source")(client::Error::Codec(e));
        for (key, args) in wanted.iter().filter(|w| !self.propagated.contains(w)) {
            write_method(to_src, CHANNEL, &self.bind_method(key, args, true)).map_err(codec)?;
        }
        for (key, args) in self.propagated.iter().filter(|p| !wanted.contains(p)) {
            write_method(to_src, CHANNEL, &self.bind_method(key, args, false)).map_err(codec)?;
        }
        self.propagated = wanted;
        Ok(())
    }
}

/// Consumes the upstream queue only while the federated queue has
/// consumers and no backlog of its own.
struct ConsumerGate {
    vhost: Arc<VHost>,
    queue: Arc<Queue>,
    upstream_queue: String,
    consumer_tag: String,
    no_ack: bool,
    /// Consuming stops when this many messages wait here (the prefetch),
    /// and starts again when none do.
    most_ready: u64,
    consuming: bool,
}

impl Upkeep for ConsumerGate {
    fn tick(&mut self, to_src: &mut BytesMut) -> Result<(), LinkError> {
        let current = self.vhost.queue(&self.queue.name);
        if !current.is_some_and(|q| Arc::ptr_eq(&q, &self.queue)) {
            return Err(LinkError::Gone(format!("queue '{}' was deleted", self.queue.name)));
        }
        let (ready, consumers) = self.queue.counts();
        let codec = |e| at("source")(client::Error::Codec(e));
        if !self.consuming && consumers > 0 && ready == 0 {
            self.consuming = true;
            let m = consume_method(&self.upstream_queue, &self.consumer_tag, self.no_ack);
            write_method(to_src, CHANNEL, &m).map_err(codec)?;
        } else if self.consuming && (consumers == 0 || ready >= self.most_ready) {
            self.consuming = false;
            let m = Method::BasicCancel {
                consumer_tag: ShortStr::from(self.consumer_tag.as_str()),
                nowait: false,
            };
            write_method(to_src, CHANNEL, &m).map_err(codec)?;
        }
        Ok(())
    }
}

/// Removes what an exchange link created on its upstream (its queue and
/// `x-federation-upstream` exchange), when the link is deleted for good.
pub async fn clean_up(link: &Link<'_>) -> Result<(), LinkError> {
    let conn_name = format!("Federation link cleanup: {}/{}", link.upstream.name, link.resource);
    let mut src = transfer::connect(link.local, link.user, link.uri(), "uri", &conn_name, "upstream").await?;
    src.open_channel(CHANNEL).await.map_err(at("source"))?;
    let name = link.upstream_queue_name();
    src.queue_delete(CHANNEL, &name).await.map_err(at("source"))?;
    src.exchange_delete(CHANNEL, &name).await.map_err(at("source"))?;
    drop(src.close().await);
    Ok(())
}
