//! `/api/nodes`, `/api/extensions`, `/api/cluster-name`, `/api/auth` and the
//! health checks: what monitoring scripts and the management UI ask about the
//! node itself. Unclustered, this broker is one node; its name is
//! [`crate::core::node::name`]. Clustered, only the leader serves this API (a
//! follower forwards its HTTP port to it), and `/api/nodes` describes the
//! cluster as the leader sees it: this node first, then one entry per follower
//! (see [`follower_name`] and [`follower_json`]).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::HttpState;
use super::auth::Authed;
use super::body::JsonBody;
use super::error::{ApiError, ApiResult};
use super::node_stats;
use crate::cluster::status::{ClusterStatus, FollowerView, Role};
use crate::core::queue_settings::QueueType;

/// The global parameter RabbitMQ keeps the cluster name in.
const CLUSTER_NAME: &str = "cluster_name";

fn node_json(s: &HttpState) -> Value {
    let disk = &s.broker.disk;
    let processors = std::thread::available_parallelism().map_or(1, |n| n.get());
    json!({
        "name": &*crate::core::node::name(), "type": "disc", "running": true, "being_drained": false,
        "os_pid": std::process::id().to_string(), "processors": processors,
        "uptime": node_stats::uptime_ms(),
        "mem_used": node_stats::resident_memory_bytes(), "mem_limit": s.broker.memory.limit(),
        "mem_alarm": s.broker.memory.is_alarmed(),
        "disk_free": disk.free_bytes(), "disk_free_limit": disk.min_free(), "disk_free_alarm": disk.is_blocked(),
        "fd_used": node_stats::open_fds(), "fd_total": node_stats::max_fds(),
        "sockets_used": s.broker.connections.list().len(),
        "partitions": [], "applications": [], "contexts": [],
        "exchange_types": super::overview::exchange_types(),
        "listeners": super::overview::listeners(s),
    })
}

/// The name `/api/nodes` gives a follower: `lavinmq@<node id>`, the id in
/// base 36 as in `.clustering_id` and the logs.
///
/// The leader does not know a follower's host name (nor its own: this node
/// keeps its configured name so that nothing that already reads it breaks), only the
/// address its replication connection comes from, which changes with every
/// reconnect. The node id is what identifies a node in the cluster (it is its
/// etcd lease and its place in the in-sync replica set) and it survives
/// restarts, so it makes a stable, unique name. It cannot collide with
/// the default node name: an id is at most 6 base-36 digits, "localhost" has 9.
pub fn follower_name(id: &str) -> String {
    format!("lavinmq@{id}")
}

/// The cluster fields of this node's entry: its role, id, in-sync state (a
/// leader is the reference, so in sync with no lag) and advertised URI.
fn this_node_cluster_fields(status: &ClusterStatus) -> [(&'static str, Value); 5] {
    let role = status.role();
    let in_sync = match role {
        Role::Leader => true,
        Role::Follower => status.in_sync(),
        Role::Standalone => false,
    };
    [
        ("cluster_role", json!(role.as_str())),
        ("node_id", json!(status.id())),
        ("in_sync", json!(in_sync)),
        ("lag_bytes", json!(0u64)),
        ("address", json!(status.uri())),
    ]
}

/// A follower's entry as the leader sees it: only what the leader knows of it
/// (its figures, such as memory or uptime, are the follower's own and are left
/// out rather than reported as zero). `running` is whether its replication
/// connection is up; `address` is where that connection comes from.
pub fn follower_json(f: &FollowerView) -> Value {
    json!({
        "name": follower_name(&f.id), "type": "disc", "running": f.connected, "being_drained": false,
        "cluster_role": Role::Follower.as_str(), "node_id": f.id, "in_sync": f.in_sync,
        "lag_bytes": f.lag_bytes, "address": f.addr,
    })
}

/// This node's entry: [`node_json`], plus the cluster fields when clustered.
fn this_node_json(s: &HttpState, status: Option<&ClusterStatus>) -> Value {
    let mut node = node_json(s);
    if let (Some(status), Some(obj)) = (status, node.as_object_mut()) {
        for (key, value) in this_node_cluster_fields(status) {
            obj.insert(key.to_owned(), value);
        }
    }
    node
}

/// The followers the leader knows of, by id.
fn followers(status: &ClusterStatus) -> Vec<FollowerView> {
    let mut list = status.followers();
    list.sort_by(|a, b| a.id.cmp(&b.id));
    list
}

/// The nodes of the cluster: this one, then (clustered, as leader) every
/// follower it knows of.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_monitoring()?;
    let status = ClusterStatus::if_clustered();
    let mut nodes = vec![this_node_json(&s, status.as_deref())];
    if let Some(status) = &status {
        nodes.extend(followers(status).iter().map(follower_json));
    }
    Ok(Json(Value::Array(nodes)))
}

/// One node by name: this one ([`crate::core::node::name`]) or a follower ([`follower_name`]).
pub async fn show(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    user.require_monitoring()?;
    let status = ClusterStatus::if_clustered();
    if *name == *crate::core::node::name() {
        return Ok(Json(this_node_json(&s, status.as_deref())));
    }
    status
        .and_then(|status| {
            followers(&status)
                .iter()
                .find(|f| follower_name(&f.id) == name)
                .map(follower_json)
        })
        .map(Json)
        .ok_or_else(ApiError::not_found)
}

/// Management UI extensions: none.
pub async fn extensions(_user: Authed) -> Json<Value> {
    Json(json!([]))
}

/// How the UI logs in: whether it offers single sign-on, and with which
/// provider (see [`super::sso`]).
pub async fn auth(State(s): State<Arc<HttpState>>) -> Json<Value> {
    Json(super::sso::SignOn::api_auth(&s))
}

/// The cluster name: the `cluster_name` global parameter, else the host name.
pub async fn cluster_name(State(s): State<Arc<HttpState>>, _user: Authed) -> Json<Value> {
    let name = s
        .broker
        .global_parameter(CLUSTER_NAME)
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(crate::core::node::host_name);
    Json(json!({ "name": name }))
}

/// Body of `PUT /api/cluster-name`.
#[derive(Deserialize)]
pub struct ClusterNameBody {
    name: String,
}

/// Renames the cluster.
pub async fn set_cluster_name(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    JsonBody(body): JsonBody<ClusterNameBody>,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    if body.name.is_empty() {
        return Err(ApiError::bad_request("cluster name must not be empty"));
    }
    s.broker.set_global_parameter(CLUSTER_NAME, json!(body.name))?;
    Ok(StatusCode::NO_CONTENT)
}

/// RabbitMQ's health check answer, 200 when healthy, 503 with the reason when not.
fn health(ok: bool, reason: &str) -> (StatusCode, Json<Value>) {
    if ok {
        (StatusCode::OK, Json(json!({"status": "ok"})))
    } else {
        failed(reason, json!({}))
    }
}

/// A failed health check: 503 with `status`, `reason` and the check's own
/// fields from `details` (an object), as RabbitMQ answers.
fn failed(reason: &str, details: Value) -> (StatusCode, Json<Value>) {
    let mut body = json!({"status": "failed", "reason": reason});
    if let (Some(out), Value::Object(extra)) = (body.as_object_mut(), details) {
        out.extend(extra);
    }
    (StatusCode::SERVICE_UNAVAILABLE, Json(body))
}

/// The node runs (the legacy `/api/healthchecks/node`).
pub async fn node_health(_user: Authed) -> (StatusCode, Json<Value>) {
    health(true, "")
}

/// No resource alarm is in effect (`/api/health/checks/alarms` and
/// `local-alarms`); a failure lists them as RabbitMQ does, each with its node
/// and resource (`memory`, `disk space`).
pub async fn alarms(State(s): State<Arc<HttpState>>, _user: Authed) -> (StatusCode, Json<Value>) {
    let alarms = s.broker.alarms.current();
    if !alarms.any() {
        return health(true, "");
    }
    let names = alarms.names();
    let node = crate::core::node::name();
    let list: Vec<Value> = names
        .iter()
        .map(|name| {
            let resource = if *name == "disk" { "disk space" } else { name };
            json!({"node": &*node, "resource": resource})
        })
        .collect();
    failed(
        &format!("resource alarm(s) in effect: {}", names.join(", ")),
        json!({ "alarms": list }),
    )
}

/// Every vhost is up (`/api/health/checks/virtual-hosts`).
pub async fn virtual_hosts(_user: Authed) -> (StatusCode, Json<Value>) {
    health(true, "")
}

/// A listener is bound on `port` (`/api/health/checks/port-listener/{port}`);
/// a failure names the port (`missing`) and the bound ones (`ports`).
pub async fn port_listener(
    State(s): State<Arc<HttpState>>,
    _user: Authed,
    Path(port): Path<String>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let port: u16 = port
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid port '{port}'")))?;
    let ports: Vec<u16> = s.listeners.iter().map(|(_, a)| a.port()).collect();
    if ports.contains(&port) {
        return Ok((StatusCode::OK, Json(json!({"status": "ok", "port": port}))));
    }
    Ok(failed(
        &format!("no listener on port {port}"),
        json!({"missing": port, "ports": ports}),
    ))
}

/// RabbitMQ's name of a listener protocol, the way its protocol health
/// check compares them: lower case, aliases (`amqp091`, `amqps`, `mqtt311`,
/// `management`, ...) to the listener's name (`amqp`, `amqp/ssl`, `mqtt`, `http`).
fn canonical_protocol(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let canonical = match lower.as_str() {
        "amqp091" | "amqp0.9.1" | "amqp0-9-1" | "amqp0_9_1" | "amqp10" | "amqp1.0" | "amqp1-0" | "amqp1_0" => "amqp",
        "amqps" => "amqp/ssl",
        "mqtt3.1" | "mqtt3.1.1" | "mqtt31" | "mqtt311" | "mqtt3_1" | "mqtt3_1_1" => "mqtt",
        "mqtts" | "mqtt+tls" | "mqtt+ssl" => "mqtt/ssl",
        "http1" | "http1.1" | "http_api" | "management" | "management_ui" | "ui" => "http",
        _ => return lower,
    };
    canonical.to_string()
}

/// Listeners speak every protocol of the comma-separated `protocol`
/// (`/api/health/checks/protocol-listener/{protocol}`); the answer lists the
/// protocols listened on (`protocols`) and, failed, those missing (`missing`).
pub async fn protocol_listener(
    State(s): State<Arc<HttpState>>,
    _user: Authed,
    Path(protocol): Path<String>,
) -> (StatusCode, Json<Value>) {
    let mut active: Vec<String> = s.listeners.iter().map(|(p, _)| canonical_protocol(p)).collect();
    active.sort();
    active.dedup();
    let missing: Vec<String> = protocol
        .split(',')
        .map(canonical_protocol)
        .filter(|p| !active.contains(p))
        .collect();
    if missing.is_empty() {
        return (StatusCode::OK, Json(json!({"status": "ok", "protocols": active})));
    }
    failed(
        &format!("no listener for protocol {}", missing.join(", ")),
        json!({"missing": missing, "protocols": active}),
    )
}

/// Whether stopping this node would leave replicated queues without an
/// up-to-date copy (`/api/health/checks/node-is-quorum-critical`). Unclustered
/// it is not, as RabbitMQ answers for a single node. Clustered, the leader
/// answering is critical while no follower is in sync: the failure lists the
/// quorum queues and streams, which RabbitMQ's clients expect to survive a node.
pub async fn node_is_quorum_critical(State(s): State<Arc<HttpState>>, _user: Authed) -> (StatusCode, Json<Value>) {
    let Some(status) = ClusterStatus::if_clustered() else {
        return (
            StatusCode::OK,
            Json(json!({"status": "ok", "reason": "single node cluster"})),
        );
    };
    if status.followers().iter().any(|f| f.in_sync) {
        return health(true, "");
    }
    let mut queues = Vec::new();
    for v in s.broker.vhosts() {
        for q in v.queues() {
            if matches!(q.queue_type, QueueType::Quorum | QueueType::Stream) {
                let readable = format!("queue '{}' in vhost '{}'", q.name, v.name);
                queues.push(
                    json!({"name": q.name, "readable_name": readable, "virtual_host": v.name,
                                   "type": q.queue_type.name()}),
                );
            }
        }
    }
    if queues.is_empty() {
        return health(true, "");
    }
    failed(
        "There are quorum queues that would lose their quorum if the target node is shut down",
        json!({ "queues": queues }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follower_entries() {
        let f = FollowerView {
            id: "k3x9a".into(),
            addr: "10.0.0.2:41234".into(),
            in_sync: true,
            connected: true,
            lag_bytes: 17,
        };
        let v = follower_json(&f);
        assert_eq!(v["name"], "lavinmq@k3x9a");
        assert_eq!(v["running"], true);
        assert_eq!(v["cluster_role"], "follower");
        assert_eq!(v["node_id"], "k3x9a");
        assert_eq!(v["in_sync"], true);
        assert_eq!(v["lag_bytes"], 17);
        assert_eq!(v["address"], "10.0.0.2:41234");
        // The largest id is 6 digits: never this node's name.
        let max = crate::cluster::node_id::format(i32::MAX as u32);
        assert_ne!(follower_name(&max), crate::core::node::DEFAULT_NAME);
    }
}
