//! RabbitMQ's stream protocol (its port 5552), the protocol RabbitMQ's
//! stream clients speak: publishers append AMQP 1.0 encoded messages to
//! stream queues, with confirms and deduplication by publisher name;
//! subscribers read chunks of messages from any offset with credit-based
//! flow control, and store their offsets in the stream. The streams are
//! core's stream queues, so the same stream is read and written over AMQP
//! 0-9-1, AMQP 1.0 and this protocol at once.
//!
//! - [`codec`]: frames, commands, replies and chunks, sans IO;
//! - [`handshake`]: peer properties, SASL, tune and open;
//! - [`connection`]: the command loop after the opening;
//! - [`publisher`]: publishing, confirms and deduplication;
//! - [`subscription`]: a subscriber as a consumer of a stream queue.

pub mod codec;
pub mod connection;
pub mod handshake;
pub mod publisher;
pub mod subscription;

use std::future::Future;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::amqp::AmqpContext;
use crate::transport::peer::Peer;
use crate::transport::protocol_listener::Protocol;

/// Settings of the stream listeners.
#[derive(Debug, Clone)]
pub struct StreamSettings {
    /// Largest frame accepted (0: no limit), proposed in the tune.
    pub frame_max: u32,
    /// Heartbeat in seconds proposed in the tune (0: none).
    pub heartbeat: u32,
    /// The host metadata answers name for this broker.
    pub advertised_host: String,
    /// The port metadata answers name (the plain listener's, or the TLS
    /// listener's for connections over TLS).
    pub advertised_port: u16,
    /// The TLS listener's port, advertised to clients connected over TLS.
    pub advertised_tls_port: Option<u16>,
}

/// What every stream connection shares.
pub struct StreamContext {
    /// The AMQP context: the broker, login settings (the default user's
    /// loopback restriction) and connection ids.
    pub amqp: Arc<AmqpContext>,
    /// Listener settings.
    pub settings: StreamSettings,
    /// Cancelled when the server shuts down.
    pub shutdown: CancellationToken,
    /// Connection tasks, which shutdown waits for.
    pub tasks: TaskTracker,
}

impl StreamContext {
    /// The shared context of the stream listeners.
    pub fn new(amqp: Arc<AmqpContext>, settings: StreamSettings, shutdown: CancellationToken) -> Arc<Self> {
        Arc::new(StreamContext {
            amqp,
            settings,
            shutdown,
            tasks: TaskTracker::new(),
        })
    }
}

impl Protocol for StreamContext {
    fn serve<S>(self: Arc<Self>, stream: S, peer: Peer) -> impl Future<Output = ()> + Send
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        connection::serve(self, stream, peer)
    }

    fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }
}
