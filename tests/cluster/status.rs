//! Seeing the cluster: `/api/nodes`, the cluster gauges of `/metrics` and
//! `lavinmqctl cluster_status`, as the leader answers them for a cluster of
//! three nodes.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{Cluster, Etcd, HttpResponse, LOG_IN_SYNC, Node, TIMEOUT, http_request};

/// Credentials of the default user.
const GUEST: (&str, &str) = ("guest", "guest");

/// What the leader calls itself in `/api/nodes` (the unclustered node name).
const LEADER_NAME: &str = "lavinmq@localhost";

/// The node id (base 36) a node wrote to its data directory.
fn node_id(node: &Node) -> String {
    let path = node.data_dir().join(".clustering_id");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: read {}: {e}", node.name(), path.display()))
        .trim()
        .to_owned()
}

/// `GET path` as guest on `node`'s HTTP port; `None` unless it answered 200.
fn get(node: &Node, path: &str) -> Option<HttpResponse> {
    http_request(
        "GET",
        &node.http_addr(),
        path,
        Some(GUEST),
        None,
        Duration::from_secs(5),
    )
    .ok()
    .filter(|r| r.status == 200)
}

/// `GET path` on `node` as JSON; `None` unless it answered 200 with JSON.
fn get_json(node: &Node, path: &str) -> Option<Value> {
    get(node, path).and_then(|r| serde_json::from_str(&r.body).ok())
}

/// Whether `nodes` (an `/api/nodes` answer) shows one leader and two
/// followers, connected and in sync.
fn settled(nodes: &Value) -> bool {
    let Some(list) = nodes.as_array() else { return false };
    let role = |r: &str| list.iter().filter(|n| n["cluster_role"] == r).count();
    list.len() == 3
        && role("leader") == 1
        && role("follower") == 2
        && list.iter().all(|n| n["in_sync"] == true && n["running"] == true)
}

/// The value of the sample `line_start` (name and labels) in a metrics text.
fn sample(text: &str, line_start: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// What one run of lavinmqctl printed.
#[derive(Debug)]
struct CtlRun {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs lavinmqctl against the control socket `sock` with `args`, killing it
/// if it has not finished within [`TIMEOUT`].
fn lavinmqctl(sock: &Path, args: &[&str]) -> CtlRun {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lavinmqctl"))
        .arg("--control-unix-path")
        .arg(sock)
        .args(args)
        .env_remove("LAVINMQCTL_HOST")
        .env_remove("LAVINMQCTL_CONTROL_UNIX_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lavinmqctl");
    let deadline = Instant::now() + TIMEOUT;
    while child.try_wait().expect("poll lavinmqctl").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("lavinmqctl {args:?} did not finish within {TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("lavinmqctl output");
    CtlRun {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Three nodes: once both followers are in sync, `/api/nodes` asked through a
/// follower (whose HTTP port leads to the leader) lists the leader and both
/// followers in sync, `/metrics` on the same port has the cluster gauges, and
/// `lavinmqctl cluster_status` on the leader's control socket shows the same.
#[test]
fn nodes_metrics_and_cluster_status_show_the_cluster() {
    let etcd = Etcd::start();
    let cluster = Cluster::start(3, &etcd, true);
    let leader = cluster.wait_leader(TIMEOUT);
    let followers: Vec<usize> = (0..cluster.len()).filter(|&i| i != leader).collect();
    for &i in &followers {
        cluster.node(i).expect_log(LOG_IN_SYNC, TIMEOUT);
    }
    let leader_node = cluster.node(leader);
    let via = cluster.node(followers[0]);
    let leader_id = node_id(leader_node);
    let follower_ids: BTreeSet<String> = followers.iter().map(|&i| node_id(cluster.node(i))).collect();

    // /api/nodes through a follower's HTTP port, until the leader has counted
    // both followers in (the follower logs its sync as the leader decides it).
    let mut nodes = Value::Null;
    cluster.wait_until("/api/nodes to show 3 nodes in sync", TIMEOUT, || {
        nodes = get_json(via, "/api/nodes").unwrap_or(Value::Null);
        settled(&nodes)
    });
    let list = nodes.as_array().expect("list");
    let this = &list[0];
    assert_eq!(this["cluster_role"], "leader", "{nodes:#}");
    assert_eq!(this["name"], LEADER_NAME, "{nodes:#}");
    assert_eq!(this["node_id"], leader_id.as_str(), "{nodes:#}");
    assert_eq!(this["lag_bytes"], 0, "{nodes:#}");
    assert_eq!(
        this["address"],
        format!("tcp://127.0.0.1:{}", leader_node.clustering_port()),
        "{nodes:#}"
    );
    assert!(this["mem_used"].is_u64(), "the leader's own figures: {nodes:#}");
    let mut seen = BTreeSet::new();
    for f in &list[1..] {
        let id = f["node_id"].as_str().expect("follower node_id").to_owned();
        assert_eq!(f["cluster_role"], "follower", "{nodes:#}");
        assert_eq!(f["name"], format!("lavinmq@{id}"), "{nodes:#}");
        assert!(f["lag_bytes"].is_u64(), "{nodes:#}");
        assert!(
            f["address"].as_str().is_some_and(|a| a.starts_with("127.0.0.1:")),
            "{nodes:#}"
        );
        seen.insert(id);
    }
    assert_eq!(seen, follower_ids, "{nodes:#}");

    // Each node by name, followers included.
    let one = get_json(via, &format!("/api/nodes/{LEADER_NAME}")).expect("the leader by name");
    assert_eq!(one["node_id"], leader_id.as_str());
    for id in &follower_ids {
        let one = get_json(via, &format!("/api/nodes/lavinmq@{id}")).expect("a follower by name");
        assert_eq!(one["cluster_role"], "follower", "{one}");
        assert_eq!(&one["node_id"], id.as_str(), "{one}");
    }
    let missing = http_request(
        "GET",
        &via.http_addr(),
        "/api/nodes/lavinmq@nosuchnode",
        Some(GUEST),
        None,
        Duration::from_secs(5),
    )
    .expect("GET an unknown node");
    assert_eq!(missing.status, 404, "{missing:?}");

    // /metrics on the HTTP port (the metrics listener is off in the harness).
    let mut text = String::new();
    cluster.wait_until("/metrics to count 2 followers in sync", TIMEOUT, || {
        text = get(via, "/metrics").map(|r| r.body).unwrap_or_default();
        sample(&text, "lavinmq_cluster_in_sync_followers") == Some(2.0)
    });
    assert_eq!(sample(&text, "lavinmq_cluster_is_leader"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "lavinmq_cluster_followers"), Some(2.0), "{text}");
    assert_eq!(sample(&text, "lavinmq_total_connected_followers"), Some(2.0), "{text}");
    for id in &follower_ids {
        let label = format!("{{follower=\"{id}\"}}");
        assert_eq!(
            sample(&text, &format!("lavinmq_cluster_follower_in_sync{label}")),
            Some(1.0),
            "{text}"
        );
        assert!(
            sample(&text, &format!("lavinmq_cluster_follower_lag_bytes{label}")).is_some_and(|v| v >= 0.0),
            "{text}"
        );
    }

    // lavinmqctl on the leader's control socket.
    let sock = leader_node.data_dir().join("ctl.sock");
    let mut run = None;
    cluster.wait_until("lavinmqctl cluster_status to answer", TIMEOUT, || {
        let r = lavinmqctl(&sock, &["-f", "json", "cluster_status"]);
        let ok = r.code == Some(0);
        run = Some(r);
        ok
    });
    let run = run.expect("ran");
    let status: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run:?}"));
    assert_eq!(status["this_node"], LEADER_NAME, "{status:#}");
    let rows = status["nodes"].as_array().expect("nodes");
    assert_eq!(rows.len(), 3, "{status:#}");
    assert_eq!(rows[0]["role"], "leader", "{status:#}");
    assert_eq!(rows[0]["node_id"], leader_id.as_str(), "{status:#}");
    let listed: BTreeSet<String> = status["followers"]
        .as_array()
        .expect("followers")
        .iter()
        .inspect(|f| {
            assert_eq!(f["role"], "follower", "{status:#}");
            assert_eq!(f["in_sync"], true, "{status:#}");
            assert!(f["lag_bytes"].is_u64(), "{status:#}");
        })
        .map(|f| f["node_id"].as_str().expect("node_id").to_owned())
        .collect();
    assert_eq!(listed, follower_ids, "{status:#}");

    let text = lavinmqctl(&sock, &["cluster_status"]);
    assert_eq!(text.code, Some(0), "{text:?}");
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(lines[0], format!("this_node: {LEADER_NAME}"), "{text:?}");
    assert!(lines[2].starts_with("name"), "{text:?}");
    let roles: Vec<&str> = lines[3..].iter().filter_map(|l| l.split_whitespace().nth(1)).collect();
    assert_eq!(roles, ["leader", "follower", "follower"], "{text:?}");

    // A follower's own control socket says that it follows, and whom; other
    // commands are refused with the leader's address.
    let follower = (0..cluster.len())
        .find(|i| cluster.node(*i).pid() != leader_node.pid())
        .expect("a follower");
    let sock = cluster.node(follower).data_dir().join("ctl.sock");
    let run = lavinmqctl(&sock, &["-f", "json", "cluster_status"]);
    assert_eq!(run.code, Some(0), "{run:?}");
    let status: Value = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run:?}"));
    let rows = status["nodes"].as_array().expect("nodes");
    assert_eq!(rows.len(), 1, "{status:#}");
    assert_eq!(rows[0]["role"], "follower", "{status:#}");
    let refused = lavinmqctl(&sock, &["list_queues"]);
    assert_ne!(refused.code, Some(0), "{refused:?}");
    assert!(
        format!("{}{}", refused.stdout, refused.stderr).contains("leader"),
        "{refused:?}"
    );
}
