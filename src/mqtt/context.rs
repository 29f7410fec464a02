//! What every MQTT connection shares: the broker, the listener's settings, the
//! sessions by client id (for takeover and the state a session keeps between
//! connections), the retained messages of each vhost, and the shutdown signal.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::retained::RetainedStores;
use super::session_registry::SessionRegistry;
use crate::core::broker::Broker;

/// How client identifiers are checked (`[mqtt] client_id_validation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientIdValidation {
    /// Any identifier the protocol allows.
    None,
    /// An empty identifier becomes the user name (LavinMQ's `username`).
    Username,
}

/// Settings of the MQTT listener, from the `[mqtt]` and `[main]` config.
#[derive(Debug, Clone)]
pub struct MqttSettings {
    /// Largest packet accepted, in bytes after the fixed header.
    pub max_packet_size: usize,
    /// Most QoS 1 and 2 deliveries awaiting acknowledgement per session.
    pub max_inflight: u16,
    /// Longest keep alive an MQTT 5 client may run with, in seconds (0: any).
    pub max_keep_alive: u16,
    /// Vhost of clients whose user name names none (`vhost:user`).
    pub default_vhost: String,
    /// How client identifiers are checked.
    pub client_id_validation: ClientIdValidation,
    /// Check vhost permissions on publish and subscribe.
    pub permission_check: bool,
    /// The default user, which anonymous clients log in as (RabbitMQ's
    /// `mqtt.allow_anonymous`).
    pub default_user: String,
    /// The default user may only connect from loopback.
    pub default_user_only_loopback: bool,
}

impl Default for MqttSettings {
    fn default() -> Self {
        MqttSettings {
            max_packet_size: 268_435_455,
            max_inflight: 65_535,
            max_keep_alive: 0,
            default_vhost: "/".into(),
            client_id_validation: ClientIdValidation::None,
            permission_check: false,
            default_user: "guest".into(),
            default_user_only_loopback: true,
        }
    }
}

/// State shared by all MQTT connections of a server.
pub struct MqttContext {
    /// The protocol-agnostic broker.
    pub broker: Arc<Broker>,
    /// Listener settings, replaced as a whole when the config is reloaded
    /// (see [`Self::settings`]).
    pub settings: arc_swap::ArcSwap<MqttSettings>,
    /// Sessions by vhost and client id.
    pub sessions: SessionRegistry,
    /// Retained messages, per vhost.
    pub retained: RetainedStores,
    /// Cancelled when the server shuts down.
    pub shutdown: CancellationToken,
    /// Tracks connection tasks so that shutdown can wait for them.
    pub tasks: TaskTracker,
}

impl MqttContext {
    /// Creates the shared context, and puts the shared subscription groups
    /// of the stored sessions in order (see [`super::shared_group::restore`]).
    pub fn new(broker: Arc<Broker>, settings: MqttSettings, shutdown: CancellationToken) -> Arc<Self> {
        for vhost in broker.vhosts() {
            super::shared_group::restore(&vhost);
        }
        Arc::new(MqttContext {
            broker,
            settings: arc_swap::ArcSwap::from_pointee(settings),
            sessions: SessionRegistry::default(),
            retained: RetainedStores::default(),
            shutdown,
            tasks: TaskTracker::new(),
        })
    }

    /// The current settings: connection limits are negotiated from them at
    /// connect, per-message checks read them each time, so a reload reaches
    /// open connections too.
    #[inline]
    pub fn settings(&self) -> arc_swap::Guard<Arc<MqttSettings>> {
        self.settings.load()
    }
}
