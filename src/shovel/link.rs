//! One session of a running shovel: connect to both ends, declare what is
//! missing, then run the transfer loop until stopped, finished or broken.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::config::{AckMode, DeleteAfter, Destination, ShovelConfig, Source};
use super::status::{State, Status};
use super::transfer::{self, CHANNEL, Delivered, Ends, Forward, LinkError, Outcome, Plan, at, redact};
use super::webhook::Webhook;
use crate::amqp::codec::{BasicProperties, FieldTable, FieldValue};
use crate::amqp::context::AmqpContext;
use crate::client::connection::{Connection, QueueDeclare};

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

impl Link<'_> {
    /// Connects to one of the URIs under `key` (they are tried in turn).
    async fn connect(&self, uri: &str, key: &'static str, role: &'static str) -> Result<Connection, LinkError> {
        let name = format!("Shovel {} {role}", self.name);
        transfer::connect(self.local, self.user, uri, key, &name, role).await
    }

    /// Runs one session until it is stopped, finishes, or fails.
    pub async fn run(&self, stop: &CancellationToken) -> Result<Outcome, LinkError> {
        let cfg = self.config;
        let pick = |uris: &[String]| uris[self.attempt % uris.len()].clone();
        let (src_uri, dest_uri) = (pick(&cfg.src_uris), pick(&cfg.dest_uris));
        let mut src = self.connect(&src_uri, "src-uri", "source").await?;
        let (mut dst, webhook) = if cfg.destination == Destination::Http {
            let hook = Webhook::new(&dest_uri, self.name).map_err(LinkError::Webhook)?;
            (None, Some(hook))
        } else {
            (Some(self.connect(&dest_uri, "dest-uri", "destination").await?), None)
        };
        src.open_channel(CHANNEL).await.map_err(at("source"))?;
        let (queue, count) = match &cfg.source {
            Source::Queue(q) => (q.clone(), transfer::ensure_queue(&mut src, q, "source").await?),
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
        let remaining = match cfg.delete_after {
            DeleteAfter::Never => None,
            DeleteAfter::QueueLength => Some(u64::from(count)),
            DeleteAfter::Count(n) => Some(n.saturating_sub(self.status.forwarded_count())),
        };
        if remaining == Some(0) {
            transfer::close(src, dst).await;
            return Ok(Outcome::Finished);
        }
        if let Some(dst) = dst.as_mut() {
            dst.open_channel(CHANNEL).await.map_err(at("destination"))?;
            // Declaring may close and reopen the channel, so confirms come after.
            if let Destination::Amqp { queue: Some(q), .. } = &cfg.destination {
                transfer::ensure_queue(dst, q, "destination").await?;
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
        let forward = ShovelForward {
            link: self,
            src_uri: &src_uri,
            dest_uri: &dest_uri,
        };
        let plan = Plan {
            forward: &forward,
            ack_mode: cfg.ack_mode,
            status: self.status,
            consumer_tag,
            remaining,
        };
        transfer::run(Ends { src, dst, webhook }, plan, stop, None).await
    }
}

/// Where a shovel sends each message, and the headers it adds.
struct ShovelForward<'a> {
    link: &'a Link<'a>,
    src_uri: &'a str,
    dest_uri: &'a str,
}

impl Forward for ShovelForward<'_> {
    fn route<'a>(&'a self, m: &Delivered<'a>, _: &BasicProperties) -> Option<(&'a str, &'a str)> {
        Some(self.link.config.destination.route(m.exchange, m.routing_key))
    }

    fn stamps(&self) -> bool {
        self.link.config.add_forward_headers || self.link.config.add_timestamp_header
    }

    /// Adds RabbitMQ's `x-shovelled` (and `x-shovelled-timestamp`) headers.
    fn stamp(&self, _: &Delivered<'_>, props: &mut BasicProperties) {
        let cfg = self.link.config;
        let headers = props.headers.get_or_insert_with(FieldTable::new);
        if cfg.add_forward_headers {
            let mut entry = FieldTable::new();
            let s = |v: &str| FieldValue::from(v);
            entry.insert("shovelled-by", s(&crate::core::node::name()));
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
}
