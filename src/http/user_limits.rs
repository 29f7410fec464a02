//! `/api/user-limits`: RabbitMQ's per-user limits (`max-connections`,
//! `max-channels`), counted over all of a user's connections. Administrators
//! only.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use crate::core::limits::NamedLimits;
use crate::core::user::{User, UserLimits};

/// The limits of a user as RabbitMQ lists them: `{"user", "value": {...}}`.
fn limits_json(u: &User) -> Value {
    json!({"user": u.name, "value": u.limits})
}

/// The limits of every user that has any.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    let users = s.broker.users.list();
    Ok(Json(
        users.iter().filter(|u| !u.limits.is_empty()).map(limits_json).collect(),
    ))
}

/// The limits of one user (an empty list when it has none, as RabbitMQ
/// answers).
pub async fn show(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    let u = s.broker.users.get(&name).ok_or_else(ApiError::not_found)?;
    if u.limits.is_empty() {
        return Ok(Json(json!([])));
    }
    Ok(Json(json!([limits_json(&u)])))
}

/// Sets one limit of a user; a negative value means no limit (204).
pub async fn set(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((name, limit)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    let value = super::vhosts::limit_value(&body, &limit)?;
    let mut result = Ok(());
    if !s.broker.users.update(&name, |u| result = u.limits.set(&limit, value))? {
        return Err(ApiError::not_found());
    }
    result?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes one limit of a user: 204 also when it was not set, 404 for a
/// missing user or a name that is no limit.
pub async fn clear(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((name, limit)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    if !UserLimits::NAMES.contains(&limit.as_str()) {
        return Err(ApiError::not_found());
    }
    if !s.broker.users.update(&name, |u| {
        u.limits.clear(&limit);
    })? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}
