//! Server commands: the broker's status and the cluster's.

use serde_json::{Value, json};

use super::Ctx;
use crate::api::path;
use crate::error::{CtlError, CtlResult};
use crate::output::lookup;

/// The value at a dotted path of `v`, or null.
fn at(v: &Value, dotted: &str) -> Value {
    lookup(v, dotted).cloned().unwrap_or(Value::Null)
}

/// The first node of a `/api/nodes` answer.
fn first_node(nodes: Value) -> CtlResult<Value> {
    match nodes {
        Value::Array(list) => list.into_iter().next(),
        _ => None,
    }
    .ok_or_else(|| CtlError::BadResponse {
        path: path(["nodes"]),
        detail: "expected a list with at least one node".into(),
    })
}

/// `status`: version, node, uptime (seconds) and object and message totals,
/// with LavinMQ's field names.
pub async fn status(ctx: &Ctx) -> CtlResult<()> {
    let overview = ctx.api.get_json("/api/overview").await?;
    // The overview may carry the uptime (LavinMQ's does); else the node has it, in ms.
    let uptime = match overview.get("uptime") {
        Some(u) => u.clone(),
        None => {
            let node = first_node(ctx.api.get_json("/api/nodes").await?)?;
            node.get("uptime")
                .and_then(Value::as_u64)
                .map_or(Value::Null, |ms| Value::from(ms / 1000))
        }
    };
    let version = overview
        .get("lavinmq_version")
        .or_else(|| overview.get("product_version"))
        .cloned()
        .unwrap_or(Value::Null);
    ctx.out.record(&[
        ("Version", version),
        ("Node", at(&overview, "node")),
        ("Uptime", uptime),
        ("Connections", at(&overview, "object_totals.connections")),
        ("Channels", at(&overview, "object_totals.channels")),
        ("Consumers", at(&overview, "object_totals.consumers")),
        ("Exchanges", at(&overview, "object_totals.exchanges")),
        ("Queues", at(&overview, "object_totals.queues")),
        ("Bindings", at(&overview, "object_totals.bindings")),
        ("Messages", at(&overview, "queue_totals.messages")),
        ("Messages_ready", at(&overview, "queue_totals.messages_ready")),
        (
            "Messages_unacked",
            at(&overview, "queue_totals.messages_unacknowledged"),
        ),
    ])
}

/// What `cluster_status` shows of each node, in this order.
const NODE_COLUMNS: [&str; 7] = ["name", "role", "node_id", "in_sync", "lag_bytes", "running", "address"];

/// One `/api/nodes` entry as `cluster_status` shows it. A broker that is not
/// clustered gives none of the cluster fields: its one node is "standalone",
/// holds all of its data (in sync, no lag) and has no node id or address.
fn node_row(node: &Value) -> Value {
    let field = |key: &str, default: Value| match node.get(key) {
        None | Some(Value::Null) => default,
        Some(v) => v.clone(),
    };
    json!({
        "name": at(node, "name"),
        "role": field("cluster_role", json!("standalone")),
        "node_id": at(node, "node_id"),
        "in_sync": field("in_sync", json!(true)),
        "lag_bytes": field("lag_bytes", json!(0)),
        "running": field("running", json!(true)),
        "address": at(node, "address"),
    })
}

/// `cluster_status`: this node (the first `/api/nodes` lists, the leader when
/// clustered), the version, and every node with its role, in-sync state and
/// replication lag. Text: `this_node` and `version` lines, then a table of
/// the nodes. JSON: `this_node`, `version`, `followers` (the follower rows,
/// none when the broker runs alone) and `nodes` (every row).
pub async fn cluster_status(ctx: &Ctx) -> CtlResult<()> {
    let nodes = ctx.api.get_json("/api/nodes").await?;
    let node = first_node(nodes.clone())?;
    let version = match lookup(&node, "applications")
        .and_then(|a| a.get(0))
        .and_then(|a| a.get("version"))
    {
        Some(v) => v.clone(),
        None => at(&ctx.api.get_json("/api/overview").await?, "product_version"),
    };
    let rows: Vec<Value> = nodes
        .as_array()
        .map(|l| l.iter().map(node_row).collect())
        .unwrap_or_default();
    if ctx.out.is_json() {
        let followers = rows.iter().filter(|r| r["role"] == "follower").cloned().collect();
        return ctx.out.record(&[
            ("this_node", at(&node, "name")),
            ("version", version),
            ("followers", Value::Array(followers)),
            ("nodes", Value::Array(rows)),
        ]);
    }
    ctx.out
        .record(&[("this_node", at(&node, "name")), ("version", version)])?;
    let columns: Vec<String> = NODE_COLUMNS.iter().map(|c| c.to_string()).collect();
    ctx.out.table(&columns, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_clustered_and_standalone_nodes() {
        let standalone = node_row(&json!({"name": "lavinmq@localhost", "running": true, "uptime": 5}));
        assert_eq!(
            standalone,
            json!({"name": "lavinmq@localhost", "role": "standalone", "node_id": null, "in_sync": true,
                   "lag_bytes": 0, "running": true, "address": null})
        );
        let follower = node_row(
            &json!({"name": "lavinmq@k3", "running": false, "cluster_role": "follower",
                                        "node_id": "k3", "in_sync": false, "lag_bytes": 12,
                                        "address": "10.0.0.2:4000"}),
        );
        assert_eq!(
            follower,
            json!({"name": "lavinmq@k3", "role": "follower", "node_id": "k3", "in_sync": false,
                   "lag_bytes": 12, "running": false, "address": "10.0.0.2:4000"})
        );
    }
}
