//! `/api/topic-permissions`: RabbitMQ's topic permissions, a user's write and
//! read patterns for routing keys on one topic exchange of a vhost (see
//! [`crate::core::topic_permissions`]). Administrators only.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::HttpState;
use super::auth::Authed;
use super::body::JsonBody;
use super::error::{ApiError, ApiResult};
use crate::core::definition_json::user_topic_permissions_json;
use crate::core::topic_permissions::TopicPermission;

/// Every topic permission of every user.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    let out = s
        .broker
        .users
        .list()
        .iter()
        .flat_map(|u| user_topic_permissions_json(u, None))
        .collect();
    Ok(Json(Value::Array(out)))
}

/// A user's topic permissions in one vhost (404 when it has none there).
pub async fn show(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    let u = s.broker.users.get(&name).ok_or_else(ApiError::not_found)?;
    let out = user_topic_permissions_json(&u, Some(&vhost));
    if out.is_empty() {
        return Err(ApiError::not_found());
    }
    Ok(Json(Value::Array(out)))
}

/// A user's topic permissions in every vhost.
pub async fn of_user(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    let u = s.broker.users.get(&name).ok_or_else(ApiError::not_found)?;
    Ok(Json(Value::Array(user_topic_permissions_json(&u, None))))
}

/// Every user's topic permissions in one vhost.
pub async fn of_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(vhost): Path<String>,
) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    s.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let out = s
        .broker
        .users
        .list()
        .iter()
        .flat_map(|u| user_topic_permissions_json(u, Some(&vhost)))
        .collect();
    Ok(Json(Value::Array(out)))
}

/// Body of `PUT /api/topic-permissions/{vhost}/{user}`.
#[derive(Deserialize)]
pub struct TopicPermissionBody {
    exchange: Option<String>,
    write: Option<String>,
    read: Option<String>,
}

/// Sets a user's topic permission on one exchange of a vhost (201 when the
/// user had none in the vhost, else 204). The exchange need not exist yet,
/// as in RabbitMQ.
pub async fn set(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<TopicPermissionBody>,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    let field = |v: Option<String>, k: &str| v.ok_or_else(|| ApiError::bad_request(format!("{k} is missing")));
    let exchange = field(body.exchange, "exchange")?;
    let p = TopicPermission {
        write: field(body.write, "write")?,
        read: field(body.read, "read")?,
    };
    let created = crate::core::topic_permissions::set_for_user(&s.broker, &name, &vhost, exchange, p)?;
    Ok(super::created_or_updated(!created))
}

/// Query of `DELETE /api/topic-permissions/{vhost}/{user}`.
#[derive(Deserialize)]
pub struct ClearQuery {
    exchange: Option<String>,
}

/// Removes a user's topic permissions in a vhost: all of them, or only those
/// on `?exchange=` (404 when there were none to remove).
pub async fn clear(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
    Query(q): Query<ClearQuery>,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    let mut removed = false;
    s.broker.users.update(&name, |u| {
        let Some(by_exchange) = u.topic_permissions.get_mut(&vhost) else {
            return;
        };
        match &q.exchange {
            Some(e) => removed = by_exchange.remove(e).is_some(),
            None => removed = !by_exchange.is_empty(),
        }
        if q.exchange.is_none() || by_exchange.is_empty() {
            u.topic_permissions.remove(&vhost);
        }
    })?;
    if !removed {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}
