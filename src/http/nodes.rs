//! `/api/nodes`, `/api/extensions`, `/api/cluster-name`, `/api/auth` and the
//! health checks: what monitoring scripts and the management UI ask about the
//! node itself. This broker is one node; its name is [`super::overview::NODE`].

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
use super::overview::NODE;

/// The global parameter RabbitMQ keeps the cluster name in.
const CLUSTER_NAME: &str = "cluster_name";

fn node_json(s: &HttpState) -> Value {
    let disk = &s.broker.disk;
    let processors = std::thread::available_parallelism().map_or(1, |n| n.get());
    json!({
        "name": NODE, "type": "disc", "running": true, "being_drained": false,
        "os_pid": std::process::id().to_string(), "processors": processors,
        "uptime": node_stats::uptime_secs() * 1000,
        "mem_used": node_stats::resident_memory_bytes(), "mem_limit": node_stats::memory_limit_bytes(),
        "mem_alarm": false,
        "disk_free": disk.free_bytes(), "disk_free_limit": disk.min_free(), "disk_free_alarm": disk.is_blocked(),
        "fd_used": node_stats::open_fds(), "fd_total": node_stats::max_fds(),
        "sockets_used": s.broker.connections.list().len(),
        "partitions": [], "applications": [], "contexts": [],
        "exchange_types": super::overview::exchange_types(),
        "listeners": super::overview::listeners(s),
    })
}

/// The nodes of the cluster: this one.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_monitoring()?;
    Ok(Json(json!([node_json(&s)])))
}

/// One node by name.
pub async fn show(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    user.require_monitoring()?;
    if name != NODE {
        return Err(ApiError::not_found());
    }
    Ok(Json(node_json(&s)))
}

/// Management UI extensions: none.
pub async fn extensions(_user: Authed) -> Json<Value> {
    Json(json!([]))
}

/// How the UI logs in: basic auth only (no OAuth).
pub async fn auth() -> Json<Value> {
    Json(json!({"oauth_enabled": false}))
}

/// The cluster name: the `cluster_name` global parameter, else the host name.
pub async fn cluster_name(State(s): State<Arc<HttpState>>, _user: Authed) -> Json<Value> {
    let name = s
        .broker
        .global_parameter(CLUSTER_NAME)
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(node_stats::hostname);
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
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "failed", "reason": reason})),
        )
    }
}

/// The node runs (the legacy `/api/healthchecks/node`).
pub async fn node_health(_user: Authed) -> (StatusCode, Json<Value>) {
    health(true, "")
}

/// No resource alarm is in effect (`/api/health/checks/alarms` and `local-alarms`).
pub async fn alarms(State(s): State<Arc<HttpState>>, _user: Authed) -> (StatusCode, Json<Value>) {
    health(!s.broker.disk.is_blocked(), "resource alarm(s) in effect: disk")
}

/// Every vhost is up (`/api/health/checks/virtual-hosts`).
pub async fn virtual_hosts(_user: Authed) -> (StatusCode, Json<Value>) {
    health(true, "")
}

/// A listener is bound on `port` (`/api/health/checks/port-listener/{port}`).
pub async fn port_listener(
    State(s): State<Arc<HttpState>>,
    _user: Authed,
    Path(port): Path<String>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let port: u16 = port
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid port '{port}'")))?;
    let bound = s.listeners.iter().any(|(_, a)| a.port() == port);
    Ok(health(bound, &format!("no listener on port {port}")))
}

/// A listener speaks `protocol` (`/api/health/checks/protocol-listener/{protocol}`).
pub async fn protocol_listener(
    State(s): State<Arc<HttpState>>,
    _user: Authed,
    Path(protocol): Path<String>,
) -> (StatusCode, Json<Value>) {
    let bound = s.listeners.iter().any(|(p, _)| p.eq_ignore_ascii_case(&protocol));
    health(bound, &format!("no listener for protocol {protocol}"))
}
