//! `/api/vhosts`: list, show, create and delete virtual hosts.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use crate::core::vhost::VHost;

fn vhost_json(v: &VHost) -> Value {
    let (mut ready, mut unacked) = (0u64, 0u64);
    for q in v.queues() {
        let st = q.stats();
        ready += st.ready;
        unacked += st.unacked;
    }
    json!({"name": v.name, "description": "", "tags": [], "tracing": false,
           "messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked})
}

/// The vhosts the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> Json<Value> {
    Json(Value::Array(
        s.visible_vhosts(&user).iter().map(|v| vhost_json(v)).collect(),
    ))
}

/// One vhost.
pub async fn show(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let v = s.vhost_for(&user, &name)?;
    Ok(Json(vhost_json(&v)))
}

/// Creates a vhost (201) or leaves an existing one alone (204).
pub async fn create(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<StatusCode> {
    user.require_admin()?;
    if s.broker.vhost(&name).is_some() {
        return Ok(StatusCode::NO_CONTENT);
    }
    s.broker.create_vhost(&name)?;
    Ok(StatusCode::CREATED)
}

/// Deletes a vhost with everything in it.
pub async fn delete(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<StatusCode> {
    user.require_admin()?;
    if !s.broker.delete_vhost(&name)? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}
