//! What every AMQP connection shares: the broker, the negotiated limits from the
//! configuration, id counters, the direct reply-to registry and the shutdown signal.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::channel::ChannelShared;
use crate::core::broker::Broker;

/// Settings of the AMQP listener, taken from the `[amqp]` and `[main]` config.
#[derive(Debug, Clone)]
pub struct AmqpSettings {
    /// Largest frame the server accepts (tune).
    pub frame_max: u32,
    /// Most channels per connection (tune).
    pub channel_max: u16,
    /// Heartbeat interval proposed to clients, in seconds.
    pub heartbeat: u16,
    /// Largest message body accepted.
    pub max_message_size: u64,
    /// Prefetch of consumers on channels that never sent basic.qos.
    pub default_prefetch: u16,
    /// Add a timestamp property to messages that lack one.
    pub set_timestamp: bool,
    /// Most consumers per channel (0 = unlimited).
    pub max_consumers_per_channel: u32,
    /// Most channels a connection may open per second (0 = unlimited).
    pub channel_rate_limit: u32,
    /// Name of the default user.
    pub default_user: String,
    /// The default user may only connect from loopback.
    pub default_user_only_loopback: bool,
    /// User name and password that AMQP 1.0's SASL ANONYMOUS logs in with;
    /// `None`: ANONYMOUS is not offered.
    pub anonymous_login: Option<(String, String)>,
    /// Milliseconds a delivery may stay unacknowledged, unless the queue says
    /// otherwise (`consumer_timeout`).
    pub consumer_timeout: Option<u64>,
    /// How often unacknowledged deliveries are checked against their timeout.
    pub consumer_timeout_check: std::time::Duration,
}

impl Default for AmqpSettings {
    fn default() -> Self {
        AmqpSettings {
            frame_max: 131_072,
            channel_max: 2047,
            heartbeat: 300,
            max_message_size: 128 * 1024 * 1024,
            default_prefetch: 65535,
            set_timestamp: false,
            max_consumers_per_channel: 0,
            channel_rate_limit: 0,
            default_user: "guest".into(),
            default_user_only_loopback: true,
            anonymous_login: None,
            consumer_timeout: None,
            consumer_timeout_check: std::time::Duration::from_secs(60),
        }
    }
}

/// State shared by all AMQP connections of a server.
pub struct AmqpContext {
    /// The protocol-agnostic broker.
    pub broker: Arc<Broker>,
    /// Listener settings, replaced as a whole when the config is reloaded
    /// (see [`Self::settings`]).
    pub settings: arc_swap::ArcSwap<AmqpSettings>,
    direct_reply: Mutex<HashMap<String, Weak<ChannelShared>>>,
    /// Cancelled when the server shuts down.
    pub shutdown: CancellationToken,
    /// Tracks connection tasks so that shutdown can wait for them.
    pub tasks: TaskTracker,
}

impl AmqpContext {
    /// Creates the shared context.
    pub fn new(broker: Arc<Broker>, settings: AmqpSettings, shutdown: CancellationToken) -> Arc<Self> {
        Arc::new(AmqpContext {
            broker,
            settings: arc_swap::ArcSwap::from_pointee(settings),
            direct_reply: Mutex::default(),
            shutdown,
            tasks: TaskTracker::new(),
        })
    }

    /// The current settings: connection limits are negotiated from them at
    /// connect, per-message checks read them each time, so a reload reaches
    /// open connections too.
    #[inline]
    pub fn settings(&self) -> arc_swap::Guard<Arc<AmqpSettings>> {
        self.settings.load()
    }

    /// A process-unique id for connections and consumers.
    pub fn next_id(&self) -> u64 {
        self.broker.connections.next_id()
    }

    /// Registers a channel's direct reply-to consumer under `token`.
    pub fn register_reply_to(&self, token: &str, channel: &Arc<ChannelShared>) {
        self.direct_reply
            .lock()
            .insert(token.to_string(), Arc::downgrade(channel));
    }

    /// Forgets a direct reply-to registration.
    pub fn unregister_reply_to(&self, token: &str) {
        self.direct_reply.lock().remove(token);
    }

    /// The channel waiting for replies addressed to `token`.
    pub fn reply_to_channel(&self, token: &str) -> Option<Arc<ChannelShared>> {
        self.direct_reply.lock().get(token).and_then(Weak::upgrade)
    }
}
