//! The cluster collector (clustered nodes only): the cluster as this node
//! sees it. Each connected follower's lag under LavinMQ's name (label `id`,
//! its base-36 node id); whether this node leads, how many followers are
//! connected and in sync, and per follower (label `follower`) its lag and
//! in-sync state.

use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};

use super::spec::{Spec, descs, row_families, single_families};
use crate::cluster::status::{ClusterStatus, FollowerView, Role};

use MetricType::GAUGE as Gauge;

/// The cluster's state at one scrape.
struct Cluster {
    role: Role,
    /// Sorted by node id.
    followers: Vec<FollowerView>,
}

impl Cluster {
    fn count(&self, f: fn(&FollowerView) -> bool) -> Option<f64> {
        Some(self.followers.iter().filter(|v| f(v)).count() as f64)
    }
}

/// LavinMQ's family: connected followers only.
const LAG: Spec<FollowerView> = Spec::new(
    "follower_lag_in_bytes",
    Gauge,
    "Bytes that hasn't been synchronized with the follower yet",
    |f| f.connected.then_some(f.lag_bytes as f64),
);

/// This broker's single-sample families.
const SUMMARY: [Spec<Cluster>; 3] = [
    Spec::new(
        "cluster_is_leader",
        Gauge,
        "1 if this node is the cluster leader, else 0",
        |c| Some(f64::from(u8::from(c.role == Role::Leader))),
    ),
    Spec::new(
        "cluster_followers",
        Gauge,
        "Follower nodes connected to the leader",
        |c| c.count(|f| f.connected),
    ),
    Spec::new(
        "cluster_in_sync_followers",
        Gauge,
        "Follower nodes in the in-sync replica set",
        |c| c.count(|f| f.in_sync),
    ),
];

/// This broker's per-follower families.
const PER_FOLLOWER: [Spec<FollowerView>; 2] = [
    Spec::new(
        "cluster_follower_lag_bytes",
        Gauge,
        "Bytes of the replication stream the follower has not acknowledged",
        |f| Some(f.lag_bytes as f64),
    ),
    Spec::new(
        "cluster_follower_in_sync",
        Gauge,
        "1 if the follower is in the in-sync replica set, else 0",
        |f| Some(f64::from(u8::from(f.in_sync))),
    ),
];

/// Reads the node's cluster status when the registry gathers.
pub struct ClusterCollector {
    status: Arc<ClusterStatus>,
    lag: Vec<Desc>,
    summary: Vec<Desc>,
    per_follower: Vec<Desc>,
}

impl ClusterCollector {
    /// The collector of a clustered node, its families named under `prefix`.
    pub fn new(status: Arc<ClusterStatus>, prefix: &str) -> prometheus::Result<Self> {
        Ok(ClusterCollector {
            status,
            lag: descs(prefix, &[LAG], &["id"])?,
            summary: descs(prefix, &SUMMARY, &[])?,
            per_follower: descs(prefix, &PER_FOLLOWER, &["follower"])?,
        })
    }

    fn families(&self, role: Role, mut followers: Vec<FollowerView>) -> Vec<MetricFamily> {
        followers.sort_by(|a, b| a.id.cmp(&b.id));
        let cluster = Cluster { role, followers };
        let mut families = row_families(&[LAG], &self.lag, &cluster.followers, |f| [("id", &f.id)]);
        families.extend(single_families(&SUMMARY, &self.summary, &cluster));
        families.extend(row_families(
            &PER_FOLLOWER,
            &self.per_follower,
            &cluster.followers,
            |f| [("follower", &f.id)],
        ));
        families
    }
}

impl Collector for ClusterCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.lag.iter().chain(&self.summary).chain(&self.per_follower).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.families(self.status.role(), self.status.followers())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, TextEncoder};

    fn follower(id: &str, in_sync: bool, connected: bool, lag_bytes: u64) -> FollowerView {
        FollowerView {
            id: id.into(),
            addr: "127.0.0.1:1".into(),
            in_sync,
            connected,
            lag_bytes,
        }
    }

    fn encode(families: &[MetricFamily]) -> String {
        let families: Vec<_> = families
            .iter()
            .filter(|f| !f.get_metric().is_empty())
            .cloned()
            .collect();
        let mut out = Vec::new();
        TextEncoder::new().encode(&families, &mut out).expect("encodes");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn cluster_metrics() {
        let c = ClusterCollector::new(Arc::new(ClusterStatus::default()), "lavinmq").expect("valid");
        let text = encode(&c.families(
            Role::Leader,
            vec![
                follower("zz", false, true, 4096),
                follower("a1", true, true, 0),
                // Gone: LavinMQ lists only connected followers' lag.
                follower("b2", false, false, 10),
            ],
        ));
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "lavinmq_follower_lag_in_bytes{id=\"a1\"} 0",
                "lavinmq_follower_lag_in_bytes{id=\"zz\"} 4096",
                "lavinmq_cluster_is_leader 1",
                "lavinmq_cluster_followers 2",
                "lavinmq_cluster_in_sync_followers 1",
                "lavinmq_cluster_follower_lag_bytes{follower=\"a1\"} 0",
                "lavinmq_cluster_follower_lag_bytes{follower=\"b2\"} 10",
                "lavinmq_cluster_follower_lag_bytes{follower=\"zz\"} 4096",
                "lavinmq_cluster_follower_in_sync{follower=\"a1\"} 1",
                "lavinmq_cluster_follower_in_sync{follower=\"b2\"} 0",
                "lavinmq_cluster_follower_in_sync{follower=\"zz\"} 0",
            ]
        );
        assert!(text.contains("# TYPE lavinmq_cluster_follower_lag_bytes gauge\n"));
        assert!(text.contains(
            "# HELP lavinmq_follower_lag_in_bytes Bytes that hasn't been synchronized with the follower yet\n"
        ));

        let c = ClusterCollector::new(Arc::new(ClusterStatus::default()), "p").expect("valid");
        assert!(encode(&c.families(Role::Follower, Vec::new())).contains("p_cluster_is_leader 0\n"));
    }
}
