//! The `[clustering]` settings: whether this broker takes part in a
//! leader/follower cluster coordinated through etcd, where it listens for
//! followers, and how long leadership and follower acknowledgements may lag.

use std::time::Duration;

use super::ConfigError;

/// Shortest `lease_ttl` accepted: etcd grants leases in whole seconds, so a
/// shorter one could not be kept alive reliably.
pub(crate) const MIN_LEASE_TTL: Duration = Duration::from_secs(1);

/// `[clustering]` settings, named as in LavinMQ.
///
/// Only the leader accepts clients; followers stream its data directory over
/// the replication port. Leadership is decided through an etcd lease, so the
/// etcd settings and timings here decide how quickly a failed leader is
/// replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusteringConfig {
    /// Take part in a cluster instead of running stand-alone
    /// (`enabled`, `--clustering`, `LAVINMQ_CLUSTERING`).
    pub enabled: bool,
    /// Address the leader listens on for followers
    /// (`bind`, `--clustering-bind`, `LAVINMQ_CLUSTERING_BIND`).
    pub bind: String,
    /// Port the leader listens on for followers
    /// (`port`, `--clustering-port`, `LAVINMQ_CLUSTERING_PORT`).
    pub port: u16,
    /// URI followers are told to connect to when this node leads; `None`
    /// means `tcp://<hostname>:<port>`, see [`ClusteringConfig::advertised_uri()`]
    /// (`advertised_uri`, `--clustering-advertised-uri`,
    /// `LAVINMQ_CLUSTERING_ADVERTISED_URI`).
    pub advertised_uri: Option<String>,
    /// etcd endpoints as written: `host:port` pairs separated by commas, each
    /// optionally prefixed with `user:password@`. Kept raw so the etcd client
    /// is the single place that interprets them (`etcd_endpoints`,
    /// `--clustering-etcd-endpoints`, `LAVINMQ_CLUSTERING_ETCD_ENDPOINTS`).
    pub etcd_endpoints: String,
    /// Prefix of every etcd key this cluster uses, so several clusters can
    /// share one etcd (`etcd_prefix`, `--clustering-etcd-prefix`,
    /// `LAVINMQ_CLUSTERING_ETCD_PREFIX`).
    pub etcd_prefix: String,
    /// Shell command run when this node becomes leader, e.g. to move a
    /// floating IP (`on_leader_elected`, `--clustering-on-leader-elected`,
    /// `LAVINMQ_CLUSTERING_ON_LEADER_ELECTED`).
    pub on_leader_elected: Option<String>,
    /// Shell command run when this node loses leadership
    /// (`on_leader_lost`, `--clustering-on-leader-lost`,
    /// `LAVINMQ_CLUSTERING_ON_LEADER_LOST`).
    pub on_leader_lost: Option<String>,
    /// Time-to-live of the etcd lease that holds leadership: how long a
    /// leader that stops responding keeps the role before another node may
    /// take over, so a failover takes about this long plus a second (the
    /// election and the new leader's start). The leader renews it every
    /// third of it, and loses the role when etcd stays out of reach for
    /// that long. At least 1 s; seconds, decimals allowed
    /// (`lease_ttl`, `--clustering-lease-ttl`, `LAVINMQ_CLUSTERING_LEASE_TTL`).
    pub lease_ttl: Duration,
    /// How long an in-sync follower may leave replicated bytes
    /// unacknowledged before it is dropped from the in-sync replica set, so
    /// one slow follower cannot stall publishers indefinitely. Must be above
    /// zero; seconds, decimals allowed (`ack_timeout`,
    /// `--clustering-ack-timeout`, `LAVINMQ_CLUSTERING_ACK_TIMEOUT`).
    pub ack_timeout: Duration,
    /// How long a follower holds a client connection while no leader can
    /// take it (during an election), before giving up on it; the
    /// connection is forwarded as soon as a leader is known. Seconds,
    /// decimals allowed (`client_hold_timeout`,
    /// `--clustering-client-hold-timeout`,
    /// `LAVINMQ_CLUSTERING_CLIENT_HOLD_TIMEOUT`).
    pub client_hold_timeout: Duration,
}

impl Default for ClusteringConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            bind: "127.0.0.1".to_owned(),
            port: 5679,
            advertised_uri: None,
            etcd_endpoints: "localhost:2379".to_owned(),
            etcd_prefix: "lavinmq".to_owned(),
            on_leader_elected: None,
            on_leader_lost: None,
            lease_ttl: Duration::from_secs(3),
            ack_timeout: Duration::from_secs(3),
            client_hold_timeout: Duration::from_secs(30),
        }
    }
}

impl ClusteringConfig {
    /// The URI followers should connect to: the `advertised_uri` field when
    /// set, else `tcp://<hostname>:<port>`.
    ///
    /// Computed on demand rather than stored so the configuration stays a
    /// plain record of what the operator set.
    pub fn advertised_uri(&self) -> String {
        match &self.advertised_uri {
            Some(uri) => uri.clone(),
            None => format!("tcp://{}:{}", hostname(), self.port),
        }
    }

    /// Rejects timings the cluster cannot work with.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_ttl < MIN_LEASE_TTL {
            return Err(ConfigError::Invalid {
                field: "lease_ttl",
                reason: format!(
                    "{} s is below the minimum of {} s",
                    self.lease_ttl.as_secs_f64(),
                    MIN_LEASE_TTL.as_secs()
                ),
            });
        }
        if self.ack_timeout.is_zero() {
            return Err(ConfigError::Invalid {
                field: "ack_timeout",
                reason: "must be greater than 0 seconds".to_owned(),
            });
        }
        Ok(())
    }
}

/// This machine's host name, read from `/proc/sys/kernel/hostname` (the
/// `uname` nodename; rustix's `system` module is not enabled here), or
/// `localhost` when it cannot be read.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
