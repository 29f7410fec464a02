//! `/api/users` and `/api/permissions`: users, their tags and passwords, and
//! their permissions per vhost. Administrators only.

use std::collections::HashMap;
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
use crate::core::definition_json::{parse_tags, permission_json, user_json};
use crate::core::password;
use crate::core::user::{self, Permissions, User};

/// Every user.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    Ok(Json(Value::Array(
        s.broker.users.list().iter().map(user_json).collect(),
    )))
}

/// One user.
pub async fn show(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    let u = s.broker.users.get(&name).ok_or_else(ApiError::not_found)?;
    Ok(Json(user_json(&u)))
}

/// Body of `PUT /api/users/{user}`: a clear-text `password`, or a
/// `password_hash` in the format `hashing_algorithm` names (guessed from the
/// hash when absent).
#[derive(Deserialize)]
pub struct UserBody {
    password: Option<String>,
    password_hash: Option<String>,
    hashing_algorithm: Option<String>,
    tags: Option<Value>,
}

/// Creates (201) or updates (204) a user.
pub async fn create(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<UserBody>,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    let existing = s.broker.users.get(&name);
    let (hash, algorithm) = match (&body.password, &body.password_hash) {
        (Some(p), _) => {
            // As in RabbitMQ and LavinMQ a clear-text password is always stored
            // as SHA-256; a given algorithm must still be a known one.
            if let Some(a) = &body.hashing_algorithm {
                password::Algorithm::from_name(a).map_err(|e| ApiError::bad_request(e.to_string()))?;
            }
            (user::hash_password(p), user::SHA256.to_string())
        }
        (None, Some(h)) => user::checked_hash(h, body.hashing_algorithm.as_deref())
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        (None, None) => match &existing {
            Some(u) => (u.password_hash.clone(), u.hashing_algorithm.clone()),
            None => return Err(ApiError::bad_request("password or password_hash must be set")),
        },
    };
    let created = existing.is_none();
    // What the API sets elsewhere is kept: limits and both kinds of permissions.
    let (limits, permissions, topic_permissions) = existing
        .map(|u| (u.limits, u.permissions, u.topic_permissions))
        .unwrap_or_default();
    let u = User {
        name: name.clone(),
        password_hash: hash,
        hashing_algorithm: algorithm,
        tags: parse_tags(body.tags.as_ref().unwrap_or(&Value::Null)),
        limits,
        permissions,
        topic_permissions,
    };
    s.broker.users.put(u)?;
    Ok(super::created_or_updated(!created))
}

/// Deletes a user.
pub async fn delete(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<StatusCode> {
    user.require_admin()?;
    if !s.broker.users.delete(&name)? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Every permission of every user.
pub async fn permissions(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    let mut out = Vec::new();
    for u in s.broker.users.list() {
        let mut vhosts: Vec<_> = u.permissions.iter().collect();
        vhosts.sort_by(|a, b| a.0.cmp(b.0));
        out.extend(vhosts.into_iter().map(|(v, p)| permission_json(&u.name, v, p)));
    }
    Ok(Json(Value::Array(out)))
}

/// A user's permissions in a vhost.
pub async fn show_permission(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    let u = s.broker.users.get(&name).ok_or_else(ApiError::not_found)?;
    let p = u.permissions.get(&vhost).ok_or_else(ApiError::not_found)?;
    Ok(Json(permission_json(&name, &vhost, p)))
}

/// Sets a user's permissions in a vhost (201 new, 204 changed).
pub async fn set_permission(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<HashMap<String, String>>,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    if s.broker.vhost(&vhost).is_none() {
        return Err(ApiError::bad_request(format!("vhost '{vhost}' does not exist")));
    }
    let field = |k: &str| {
        body.get(k)
            .cloned()
            .ok_or_else(|| ApiError::bad_request(format!("{k} is missing")))
    };
    let p = Permissions {
        configure: field("configure")?,
        write: field("write")?,
        read: field("read")?,
    };
    p.validate().map_err(ApiError::bad_request)?;
    let mut created = false;
    let found = s.broker.users.update(&name, |u| {
        created = u.permissions.insert(vhost.clone(), p).is_none();
    })?;
    if !found {
        return Err(ApiError::bad_request(format!("user '{name}' does not exist")));
    }
    Ok(super::created_or_updated(!created))
}

/// Removes a user's permissions in a vhost.
pub async fn clear_permission(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    let mut removed = false;
    s.broker
        .users
        .update(&name, |u| removed = u.permissions.remove(&vhost).is_some())?;
    if !removed {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Users with no permission in any vhost.
pub async fn without_permissions(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    let out = s
        .broker
        .users
        .list()
        .iter()
        .filter(|u| u.permissions.is_empty())
        .map(user_json)
        .collect();
    Ok(Json(Value::Array(out)))
}

/// Every user's permissions in one vhost.
pub async fn vhost_permissions(
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
        .filter_map(|u| u.permissions.get(&vhost).map(|p| permission_json(&u.name, &vhost, p)))
        .collect();
    Ok(Json(Value::Array(out)))
}

/// A user's permissions in every vhost.
pub async fn user_permissions(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    let u = s.broker.users.get(&name).ok_or_else(ApiError::not_found)?;
    let mut vhosts: Vec<_> = u.permissions.iter().collect();
    vhosts.sort_by(|a, b| a.0.cmp(b.0));
    Ok(Json(Value::Array(
        vhosts.into_iter().map(|(v, p)| permission_json(&name, v, p)).collect(),
    )))
}

/// Body of `POST /api/users/bulk-delete`.
#[derive(Deserialize)]
pub struct BulkDelete {
    users: Vec<String>,
}

/// Deletes several users at once; names that do not exist are skipped.
pub async fn bulk_delete(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    JsonBody(body): JsonBody<BulkDelete>,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    for name in &body.users {
        s.broker.users.delete(name)?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Body of `PUT /api/auth/hash_password`.
#[derive(Deserialize)]
pub struct HashRequest {
    password: String,
}

/// LavinMQ's helper: the RabbitMQ SHA-256 hash of a password, for scripts that
/// create users with `password_hash`.
pub async fn hash_password(_user: Authed, JsonBody(body): JsonBody<HashRequest>) -> Json<Value> {
    Json(json!({"password_hash": user::hash_password(&body.password)}))
}
