//! What a follower answers itself while its client ports forward to the
//! leader: its control socket says that it follows and whom (so
//! `lavinmqctl cluster_status` works on it; every other command is refused
//! with 503 and the leader's address), and its metrics port (if configured)
//! serves `/metrics` with the follower's own gauges and `/health`.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::status::ClusterStatus;
use crate::config::Config;
use crate::transport::unix_socket::{self, BoundSocket};

/// The follower's own listeners; [`FollowerApi::close`] frees them before the
/// node serves as leader (which binds the same socket and port).
pub struct FollowerApi {
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    control: Option<BoundSocket>,
}

fn this_node(status: &ClusterStatus) -> Value {
    json!({
        "name": format!("lavinmq@{}", status.id()),
        "type": "disc",
        "running": true,
        "cluster_role": status.role().as_str(),
        "node_id": status.id(),
        "in_sync": status.in_sync(),
        "lag_bytes": 0,
        "address": status.uri(),
        "leader": status.leader(),
        "applications": [{"name": "lavinmq", "description": "LavinMQ", "version": env!("CARGO_PKG_VERSION")}],
    })
}

async fn nodes(State(status): State<Arc<ClusterStatus>>) -> Json<Value> {
    Json(json!([this_node(&status)]))
}

async fn not_leader(State(status): State<Arc<ClusterStatus>>) -> Response {
    let leader = status.leader().unwrap_or_else(|| "unknown".into());
    let body = json!({
        "error": "not_leader",
        "reason": format!("this node follows the leader at {leader}; send commands to the leader"),
        "leader": status.leader(),
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

async fn metrics(State(status): State<Arc<ClusterStatus>>) -> String {
    format!(
        "# HELP lavinmq_cluster_is_leader Whether this node is the cluster's leader\n\
         # TYPE lavinmq_cluster_is_leader gauge\n\
         lavinmq_cluster_is_leader 0\n\
         # HELP lavinmq_cluster_in_sync Whether the leader counts this follower as in sync\n\
         # TYPE lavinmq_cluster_in_sync gauge\n\
         lavinmq_cluster_in_sync {}\n\
         # HELP lavinmq_cluster_replicated_bytes Bytes of the replication stream applied since the last connect\n\
         # TYPE lavinmq_cluster_replicated_bytes counter\n\
         lavinmq_cluster_replicated_bytes {}\n",
        u8::from(status.in_sync()),
        status.applied()
    )
}

async fn health(State(status): State<Arc<ClusterStatus>>) -> Json<Value> {
    Json(json!({"status": "ok", "cluster_role": "follower", "in_sync": status.in_sync()}))
}

impl FollowerApi {
    /// Binds the control socket and the metrics port of `config`; what cannot
    /// be bound is logged and left out.
    pub async fn start(config: &Config, status: Arc<ClusterStatus>) -> FollowerApi {
        let cancel = CancellationToken::new();
        let mut tasks = Vec::new();
        let mut control = None;
        let path = &config.main.control_unix_path;
        if !path.as_os_str().is_empty() {
            match unix_socket::bind("control socket", path, unix_socket::CONTROL_SOCKET_MODE) {
                Ok((listener, bound)) => {
                    let app = Router::new()
                        .route("/api/nodes", get(nodes))
                        .fallback(not_leader)
                        .with_state(status.clone());
                    let stop = cancel.clone();
                    tasks.push(tokio::spawn(async move {
                        let _ = axum::serve(listener, app)
                            .with_graceful_shutdown(async move { stop.cancelled().await })
                            .await;
                    }));
                    control = Some(bound);
                }
                Err(e) => tracing::error!("cluster: cannot bind the follower's control socket: {e}"),
            }
        }
        if let Some(port) = config.main.metrics_http_port {
            let addr = crate::transport::listen_address(&config.main.metrics_http_bind, port);
            let bound = match tokio::net::TcpListener::bind(&addr).await {
                Ok(listener) => listener.local_addr().map(|local| (listener, local)),
                Err(e) => Err(e),
            };
            match bound {
                Ok((listener, addr)) => {
                    tracing::info!("Metrics (follower) listening on {addr}");
                    let app = Router::new()
                        .route("/metrics", get(metrics))
                        .route("/health", get(health))
                        .with_state(status);
                    let stop = cancel.clone();
                    tasks.push(tokio::spawn(async move {
                        let _ = axum::serve(listener, app)
                            .with_graceful_shutdown(async move { stop.cancelled().await })
                            .await;
                    }));
                }
                Err(e) => tracing::error!("cluster: cannot bind the follower's metrics port {addr}: {e}"),
            }
        }
        FollowerApi { cancel, tasks, control }
    }

    /// Stops serving and frees the socket and the port.
    pub async fn close(self) {
        self.cancel.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some(c) = self.control {
            c.remove();
        }
    }
}
