//! The MQTT adapter as a [`Protocol`] the shared listeners serve, over TCP and
//! (on the MQTTS port) TLS.

use std::future::Future;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connection::serve;
use super::context::MqttContext;
use crate::transport::peer::Peer;
use crate::transport::protocol_listener::Protocol;

impl Protocol for MqttContext {
    fn serve<S>(self: Arc<Self>, stream: S, peer: Peer) -> impl Future<Output = ()> + Send
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        serve(self, stream, peer)
    }

    fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }
}
