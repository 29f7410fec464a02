//! A group of clustered nodes sharing one etcd prefix.

use std::time::Duration;

use super::{Etcd, LOG_LEADER, LOG_LEADER_LOST, Node, NodeConfig, TAIL_LINES, eventually, unique_suffix};

/// Nodes started together against one etcd under one prefix. Dropping it kills
/// every node.
pub struct Cluster {
    /// The nodes, "node0", "node1", ... in start order.
    pub nodes: Vec<Node>,
    /// The etcd prefix all nodes use.
    pub prefix: String,
    /// The etcd endpoints all nodes use.
    pub etcd_endpoints: String,
}

impl Cluster {
    /// The prefix used when `prefix_unique` is false (LavinMQ's default).
    pub const DEFAULT_PREFIX: &str = "lavinmq";

    /// Spawns `n` nodes with default [`NodeConfig`]s against `etcd`, under a
    /// prefix of their own ("test-<random hex>") if `prefix_unique`, else under
    /// [`Cluster::DEFAULT_PREFIX`]. Waits for nothing (see [`Cluster::wait_leader`]).
    pub fn start(n: usize, etcd: &Etcd, prefix_unique: bool) -> Cluster {
        Cluster::start_with(n, etcd, prefix_unique, |_, cfg| cfg)
    }

    /// [`Cluster::start`], with `configure(index, default config)` giving each
    /// node's config (lease TTL, ack timeout, extra args, ...).
    pub fn start_with(
        n: usize,
        etcd: &Etcd,
        prefix_unique: bool,
        mut configure: impl FnMut(usize, NodeConfig) -> NodeConfig,
    ) -> Cluster {
        let prefix = if prefix_unique {
            format!("test-{}", unique_suffix())
        } else {
            Cluster::DEFAULT_PREFIX.to_owned()
        };
        let mut cluster = Cluster {
            nodes: Vec::with_capacity(n),
            prefix,
            etcd_endpoints: etcd.endpoint(),
        };
        for i in 0..n {
            let cfg = configure(i, cluster.node_config(i));
            cluster.nodes.push(Node::spawn(cfg));
        }
        cluster
    }

    /// The default config of node `i` of this cluster (name "node<i>", this
    /// cluster's etcd and prefix).
    pub fn node_config(&self, i: usize) -> NodeConfig {
        NodeConfig::new(&self.etcd_endpoints, &self.prefix).name(format!("node{i}"))
    }

    /// Spawns one more node with `cfg` (start from [`Cluster::node_config`]);
    /// its index.
    pub fn add_node(&mut self, cfg: NodeConfig) -> usize {
        self.nodes.push(Node::spawn(cfg));
        self.nodes.len() - 1
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// How many nodes there are (running or not).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The leader according to the logs, right now: among the nodes that run and
    /// are not stopped, the one whose last [`LOG_LEADER`] line in its current run
    /// (not followed by [`LOG_LEADER_LOST`]) was captured last.
    pub fn current_leader(&self) -> Option<usize> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, node)| node.is_running() && !node.is_stopped())
            .filter_map(|(i, node)| {
                let out = node.output();
                let (idx, seq) = out.last_from(node.run_start(), LOG_LEADER)?;
                out.find_from(idx + 1, LOG_LEADER_LOST).is_none().then_some((seq, i))
            })
            .max()
            .map(|(_, i)| i)
    }

    /// Polls [`Cluster::current_leader`] for at most `timeout`.
    pub fn leader_index(&self, timeout: Duration) -> Option<usize> {
        let mut found = None;
        eventually(timeout, || {
            found = self.current_leader();
            found.is_some()
        });
        found
    }

    /// [`Cluster::leader_index`], panicking with every node's output tail on timeout.
    pub fn wait_leader(&self, timeout: Duration) -> usize {
        self.leader_index(timeout).unwrap_or_else(|| {
            panic!(
                "no leader elected within {timeout:?}\n{}",
                self.panic_report(TAIL_LINES)
            )
        })
    }

    /// Waits (at most `timeout`) for a leader other than node `old`; panics with
    /// every node's output tail on timeout.
    pub fn wait_new_leader(&self, old: usize, timeout: Duration) -> usize {
        let mut found = None;
        self.wait_until(&format!("a leader other than node{old}"), timeout, || {
            found = self.current_leader().filter(|&i| i != old);
            found.is_some()
        });
        found.expect("found")
    }

    /// Polls `cond` for at most `timeout`; panics naming `what`, with every
    /// node's output tail, if it never held.
    pub fn wait_until(&self, what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
        if !eventually(timeout, cond) {
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                self.panic_report(TAIL_LINES)
            );
        }
    }

    /// The last `n` output lines of every node, under a header per node.
    pub fn logs_tail(&self, n: usize) -> String {
        self.report(n, false)
    }

    /// [`Cluster::logs_tail`] for a panic message: the nodes' drops then do not
    /// print their tails again.
    fn panic_report(&self, n: usize) -> String {
        self.report(n, true)
    }

    fn report(&self, n: usize, for_panic: bool) -> String {
        self.nodes
            .iter()
            .map(|node| {
                let state = if !node.is_running() {
                    "not running"
                } else if node.is_stopped() {
                    "stopped"
                } else {
                    "running"
                };
                format!(
                    "----- {} ({state}, amqp {}) -----\n{}\n",
                    node.name(),
                    node.amqp_port(),
                    if for_panic {
                        node.output().tail_for_panic(n)
                    } else {
                        node.log_tail(n)
                    }
                )
            })
            .collect()
    }
}
