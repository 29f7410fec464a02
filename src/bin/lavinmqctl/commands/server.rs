//! Server commands: the broker's status and the cluster's.

use serde_json::Value;

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
        ("Messages", at(&overview, "queue_totals.messages")),
        ("Messages_ready", at(&overview, "queue_totals.messages_ready")),
        (
            "Messages_unacked",
            at(&overview, "queue_totals.messages_unacknowledged"),
        ),
    ])
}

/// `cluster_status`: this node, its version and its followers (none when
/// the broker runs alone).
pub async fn cluster_status(ctx: &Ctx) -> CtlResult<()> {
    let node = first_node(ctx.api.get_json("/api/nodes").await?)?;
    let version = match lookup(&node, "applications")
        .and_then(|a| a.get(0))
        .and_then(|a| a.get("version"))
    {
        Some(v) => v.clone(),
        None => at(&ctx.api.get_json("/api/overview").await?, "product_version"),
    };
    let followers = node.get("followers").cloned().unwrap_or(Value::Array(Vec::new()));
    ctx.out.record(&[
        ("this_node", at(&node, "name")),
        ("version", version),
        ("followers", followers),
    ])
}
