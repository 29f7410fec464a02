//! The broker a clustered node serves while it leads. The layer above (the
//! server, with every protocol) starts it; this module names only what a
//! node needs from it, so that the cluster imports nothing from the layers
//! above it.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::follower::LeaderInfo;
use crate::config::Config;
use crate::core::broker::Broker;
use crate::transport::protocol_listener::Forwarders;

/// A running leader's broker and its client listeners.
pub trait LeaderService: Send {
    /// Its client ports, which the followers' proxies forward to (`id` is
    /// left for the node to fill in).
    fn client_ports(&self) -> LeaderInfo;
    /// The broker, so that the node can wait until nothing of it is left
    /// before it follows again.
    fn broker(&self) -> &Arc<Broker>;
    /// Closes every client and listener.
    fn shutdown(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// Starts the leader's broker with `config`, taking PROXY headers from the
/// addresses `forwarders` accepts (the followers'); `Err` says why it could
/// not start.
pub type StartLeader =
    Arc<dyn Fn(Config, Forwarders) -> BoxFuture<'static, Result<Box<dyn LeaderService>, String>> + Send + Sync>;
