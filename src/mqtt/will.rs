//! Wills that wait: an MQTT 5 will delay interval postpones the will after
//! the connection ends, and a new connection of the session within the delay
//! cancels it [MQTT-3.1.3-9].

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::codec::Will;
use super::context::MqttContext;
use super::routing::{Outgoing, Publisher};
use super::session::TOPIC_EXCHANGE;
use crate::core::vhost::VHost;

/// The publish a will stands for.
pub fn outgoing(will: &Will) -> Outgoing<'_> {
    Outgoing {
        topic: will.topic.as_str(),
        qos: will.qos,
        retain: will.retain,
        properties: will.properties.as_deref(),
        payload: will.payload.clone(),
    }
}

/// Publishes `will` in `vhost` after `delay`, unless `cancel` fires first or
/// the broker shuts down.
pub fn publish_later(ctx: Arc<MqttContext>, vhost: Arc<VHost>, will: Will, delay: Duration, cancel: CancellationToken) {
    let tasks = ctx.tasks.clone();
    tasks.spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = cancel.cancelled() => {
                tracing::debug!(topic = will.topic.as_str(), "delayed will cancelled: the session reconnected");
                return;
            }
            _ = ctx.shutdown.cancelled() => return,
        }
        let Ok(exchange) = vhost.get_exchange(TOPIC_EXCHANGE) else {
            return;
        };
        let mut publisher = Publisher::default();
        match publisher.publish(&ctx, &vhost, &exchange, outgoing(&will), |_| false) {
            Ok(_) => tracing::debug!(topic = will.topic.as_str(), "delayed will published"),
            Err(e) => tracing::warn!("delayed will not published: {e}"),
        }
        publisher.wake();
    });
}
