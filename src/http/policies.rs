//! `/api/policies` and `/api/operator-policies`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::HttpState;
use super::auth::Authed;
use super::body::JsonBody;
use super::error::{ApiError, ApiResult};
use crate::core::policy::Policy;

fn all(s: &HttpState, user: &Authed, vhost: Option<&str>, operator: bool) -> ApiResult<Json<Value>> {
    let vhosts = match vhost {
        Some(v) => vec![s.vhost_for(user, v)?],
        None => s.visible_vhosts(user),
    };
    let out = vhosts
        .iter()
        .flat_map(|v| {
            v.policies(operator)
                .into_iter()
                .map(|p| p.to_json(&v.name))
                .collect::<Vec<_>>()
        })
        .collect();
    Ok(Json(Value::Array(out)))
}

/// Every policy the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    all(&s, &user, None, false)
}

/// The policies of a vhost.
pub async fn list_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(v): Path<String>,
) -> ApiResult<Json<Value>> {
    all(&s, &user, Some(&v), false)
}

/// Every operator policy (administrators only, as in RabbitMQ).
pub async fn list_operator(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    all(&s, &user, None, true)
}

/// The operator policies of a vhost.
pub async fn list_operator_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(v): Path<String>,
) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    all(&s, &user, Some(&v), true)
}

fn one(s: &HttpState, user: &Authed, v: &str, name: &str, operator: bool) -> ApiResult<Json<Value>> {
    user.require_vhost(v)?;
    let vh = s.broker.vhost(v).ok_or_else(ApiError::not_found)?;
    let p = vh
        .policies(operator)
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(p.to_json(v)))
}

/// One policy.
pub async fn show(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    one(&s, &user, &v, &name, false)
}

/// One operator policy (administrators only).
pub async fn show_operator(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    one(&s, &user, &v, &name, true)
}

/// Body of a policy PUT.
#[derive(Deserialize)]
pub struct PolicyBody {
    pattern: String,
    definition: Map<String, Value>,
    #[serde(default)]
    priority: i64,
    #[serde(rename = "apply-to", default = "all_types")]
    apply_to: String,
}

fn all_types() -> String {
    "all".into()
}

fn put(s: &HttpState, v: &str, name: &str, body: PolicyBody, operator: bool) -> ApiResult<StatusCode> {
    let vh = s.broker.vhost(v).ok_or_else(ApiError::not_found)?;
    let existed = vh.policies(operator).iter().any(|p| p.name == name);
    let policy = Policy::new(
        name,
        &body.pattern,
        &body.apply_to,
        body.priority,
        body.definition,
        operator,
    )?;
    vh.set_policy(policy, operator)?;
    Ok(super::created_or_updated(existed))
}

/// Creates or replaces a policy (policymaker or administrator).
pub async fn set(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<PolicyBody>,
) -> ApiResult<StatusCode> {
    user.require_policymaker()?;
    user.require_vhost(&v)?;
    put(&s, &v, &name, body, false)
}

/// Creates or replaces an operator policy (administrator).
pub async fn set_operator(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<PolicyBody>,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    put(&s, &v, &name, body, true)
}

fn remove(s: &HttpState, v: &str, name: &str, operator: bool) -> ApiResult<StatusCode> {
    let vh = s.broker.vhost(v).ok_or_else(ApiError::not_found)?;
    vh.delete_policy(name, operator)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes a policy.
pub async fn delete(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    user.require_policymaker()?;
    user.require_vhost(&v)?;
    remove(&s, &v, &name, false)
}

/// Deletes an operator policy.
pub async fn delete_operator(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    remove(&s, &v, &name, true)
}
