//! `log_exchange`: the broker's own log lines published to the internal topic
//! exchange `amq.lavinmq.log` of vhost `/`, as LavinMQ does (and as RabbitMQ's
//! `amq.rabbitmq.log`), so that an operator can follow the log with any AMQP
//! client by binding a queue to it. The routing key is the level in RabbitMQ's
//! spelling (`debug`, `info`, `warning`, `error`); the body is
//! `<source> - <message>`, with `content_type: text/plain` and the line's time.
//!
//! The lines come from the in-memory log tail (see [`crate::log_tail`]), so the
//! exchange carries exactly what the log shows, under the same level filter. A
//! task reads them and publishes; logging never waits for it, and a reader that
//! falls behind skips lines rather than slowing the broker down.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tracing::Level;

use crate::core::broker::Broker;
use crate::core::message::Message;
use crate::core::vhost::ExchangeOptions;
use crate::core::{BasicProperties, FieldTable, ShortStr};
use crate::log_tail::{LogLine, LogTail};

/// The exchange log lines go to.
pub const EXCHANGE: &str = "amq.lavinmq.log";

/// The vhost that holds [`EXCHANGE`].
const VHOST: &str = "/";

/// Declares [`EXCHANGE`] and publishes every new line of `tail` to it until
/// `shutdown`. Logs a warning and does nothing when vhost `/` is missing.
pub fn spawn(broker: Arc<Broker>, tail: &LogTail, shutdown: CancellationToken) {
    let Some(vhost) = broker.vhost(VHOST) else {
        tracing::warn!("log_exchange is on but vhost '/' is missing: log lines are not published");
        return;
    };
    let opts = ExchangeOptions {
        durable: true,
        auto_delete: false,
        internal: true,
        passive: false,
    };
    if let Err(e) = vhost.declare_broker_exchange(EXCHANGE, "topic", &opts, FieldTable::default()) {
        tracing::warn!("log_exchange: cannot declare {EXCHANGE}: {e}");
        return;
    }
    let mut live = tail.subscribe(Some(u64::MAX)).live;
    tokio::spawn(async move {
        let mut scratch = BytesMut::new();
        loop {
            let line = tokio::select! {
                line = live.recv() => line,
                _ = shutdown.cancelled() => return,
            };
            let line = match line {
                Ok(line) => line,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            };
            let Some(exchange) = vhost.exchange(EXCHANGE) else {
                continue;
            };
            let msg = message(&line);
            // Anything logged while publishing a log line (a queue that cannot
            // store it, say) is dropped: published in turn it could fail the
            // same way, and feed itself for ever.
            tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
                vhost.publish_routed(&exchange, &msg, &mut scratch);
            });
        }
    });
}

/// The message carrying one log line.
fn message(line: &LogLine) -> Message {
    let properties = BasicProperties {
        content_type: Some(ShortStr::from("text/plain")),
        timestamp: u64::try_from(line.timestamp_ms / 1000).ok(),
        ..BasicProperties::default()
    };
    Message {
        timestamp: line.timestamp_ms,
        exchange: ShortStr::from(EXCHANGE),
        routing_key: ShortStr::from(routing_key(line.level)),
        properties: Box::new(properties),
        raw_properties: None,
        body: Bytes::from(format!("{} - {}", line.source, line.message)),
    }
}

/// The routing key of a line of `level`: RabbitMQ's level names.
fn routing_key(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}
