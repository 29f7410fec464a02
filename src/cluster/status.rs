//! What this node knows of its place in the cluster, for the management API,
//! the metrics and `lavinmqctl cluster_status`: its role, the leader, and (as
//! leader) every follower with its in-sync state and lag.

use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use super::log::ReplicationLog;
use super::node_id;

/// The node's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// Not clustered, or not yet connected to etcd.
    #[default]
    Standalone,
    /// Replicating from the leader and forwarding clients to it.
    Follower,
    /// Serving clients.
    Leader,
}

impl Role {
    /// The role's name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Standalone => "standalone",
            Role::Follower => "follower",
            Role::Leader => "leader",
        }
    }
}

#[derive(Default)]
struct Inner {
    id: u32,
    uri: String,
    role: Role,
    leader: Option<String>,
    in_sync: bool,
    applied: u64,
}

/// One follower as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FollowerView {
    /// Its node id, base 36.
    pub id: String,
    /// Its address as the leader sees it.
    pub addr: String,
    /// In the in-sync replica set.
    pub in_sync: bool,
    /// Connected now.
    pub connected: bool,
    /// Bytes of the replication stream it has not acknowledged.
    pub lag_bytes: u64,
}

/// The node's cluster status (one per process).
#[derive(Default)]
pub struct ClusterStatus {
    inner: RwLock<Inner>,
    log: OnceLock<Arc<ReplicationLog>>,
}

static GLOBAL: OnceLock<Arc<ClusterStatus>> = OnceLock::new();

impl ClusterStatus {
    /// The process's status (clustering is one node per process).
    pub fn global() -> Arc<ClusterStatus> {
        GLOBAL.get_or_init(Arc::default).clone()
    }

    /// The status if this process runs a clustered node.
    pub fn if_clustered() -> Option<Arc<ClusterStatus>> {
        GLOBAL.get().cloned().filter(|s| s.inner.read().id != 0)
    }

    pub(super) fn set_self(&self, id: u32, uri: &str, log: Arc<ReplicationLog>) {
        let mut g = self.inner.write();
        g.id = id;
        g.uri = uri.to_string();
        drop(g);
        let _ = self.log.set(log);
    }

    pub(super) fn set_role(&self, role: Role, leader: Option<String>) {
        let mut g = self.inner.write();
        g.role = role;
        g.leader = leader;
        if role != Role::Follower {
            g.in_sync = false;
        }
    }

    pub(super) fn set_in_sync(&self, in_sync: bool) {
        self.inner.write().in_sync = in_sync;
    }

    pub(super) fn set_applied(&self, offset: u64) {
        self.inner.write().applied = offset;
    }

    /// This node's id (base 36).
    pub fn id(&self) -> String {
        node_id::format(self.inner.read().id)
    }

    /// This node's advertised URI.
    pub fn uri(&self) -> String {
        self.inner.read().uri.clone()
    }

    /// This node's role.
    pub fn role(&self) -> Role {
        self.inner.read().role
    }

    /// The leader's advertised URI, when known.
    pub fn leader(&self) -> Option<String> {
        self.inner.read().leader.clone()
    }

    /// As a follower: whether the leader counts this node as in sync.
    pub fn in_sync(&self) -> bool {
        self.inner.read().in_sync
    }

    /// As a follower: bytes of the replication stream applied since it
    /// last connected to the leader.
    pub fn applied(&self) -> u64 {
        self.inner.read().applied
    }

    /// As leader: the followers, with their lag.
    pub fn followers(&self) -> Vec<FollowerView> {
        let Some(log) = self.log.get() else { return Vec::new() };
        if !log.leading() {
            return Vec::new();
        }
        let end = log.end();
        log.followers()
            .into_iter()
            .map(|(id, f)| FollowerView {
                id: node_id::format(id),
                addr: f.addr,
                in_sync: f.in_isr,
                connected: f.connected,
                lag_bytes: end.saturating_sub(f.acked),
            })
            .collect()
    }
}
