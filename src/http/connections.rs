//! `/api/connections`: list, show and close client connections.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use crate::core::connections::ConnectionEntry;

fn connection_json(c: &ConnectionEntry) -> Value {
    json!({"name": c.name, "user": c.user, "vhost": c.vhost, "protocol": c.protocol,
           "connected_at": c.connected_at, "channels": c.channel_count(), "state": "running",
           "type": "network"})
}

/// True when `user` may see connection `c`: its own, or all for administrators
/// and monitoring users.
fn visible(user: &Authed, c: &ConnectionEntry) -> bool {
    user.sees_all() || c.user == user.0.name
}

/// Every connection the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> Json<Value> {
    let all = s.broker.connections.list();
    Json(Value::Array(
        all.iter()
            .filter(|c| visible(&user, c))
            .map(|c| connection_json(c))
            .collect(),
    ))
}

/// The connections to one vhost.
pub async fn list_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(v): Path<String>,
) -> ApiResult<Json<Value>> {
    s.vhost_for(&user, &v)?;
    let all = s.broker.connections.list();
    let out = all
        .iter()
        .filter(|c| c.vhost == v && visible(&user, c))
        .map(|c| connection_json(c))
        .collect();
    Ok(Json(Value::Array(out)))
}

/// One connection.
pub async fn show(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let c = s.broker.connections.get(&name).filter(|c| visible(&user, c));
    let c = c.ok_or_else(ApiError::not_found)?;
    Ok(Json(connection_json(&c)))
}

/// Closes a connection; the `X-Reason` header is the text the client gets.
pub async fn close(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    let c = s.broker.connections.get(&name).ok_or_else(ApiError::not_found)?;
    if !(user.has_tag("administrator") || c.user == user.0.name) {
        return Err(ApiError::forbidden("Not administrator user"));
    }
    let reason = headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("Closed via management plugin");
    c.close(reason);
    Ok(StatusCode::NO_CONTENT)
}
