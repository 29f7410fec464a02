//! `/api/parameters` and `/api/global-parameters`: runtime parameters as
//! RabbitMQ's management API exposes them. Vhost parameters (items
//! `{"name", "vhost", "component", "value"}`) are kept with the vhost's
//! definitions and need the `policymaker` (or `administrator`) tag plus access
//! to the vhost; global parameters (items `{"name", "value"}`) live in the
//! data dir's `parameters.json` and are for administrators only.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use crate::core::definition_json::{global_parameter_json, parameter_json};
use crate::core::vhost::{Parameter, VHost};

/// The parameters of the given vhosts, of `component` when one is given.
fn of_vhosts(vhosts: &[Arc<VHost>], component: Option<&str>) -> Value {
    Value::Array(
        vhosts
            .iter()
            .flat_map(|v| {
                v.parameters()
                    .into_iter()
                    .filter(|p| component.is_none_or(|c| p.component == c))
                    .map(|p| parameter_json(&v.name, &p))
                    .collect::<Vec<_>>()
            })
            .collect(),
    )
}

/// Body of a parameter PUT: `{"value": ...}` (other fields are ignored).
#[derive(Deserialize)]
struct ParameterBody {
    value: Option<Value>,
}

/// The value a PUT body gives; 400 for a body that is not JSON or has no value.
fn value_of(body: &[u8]) -> ApiResult<Value> {
    let body: ParameterBody = super::body::parse(body)?;
    match body.value {
        Some(v) if !v.is_null() => Ok(v),
        _ => Err(ApiError::bad_request("the parameter has no value")),
    }
}

/// The vhost of a vhost-parameter request, after the tag and access checks.
fn vhost_param_target(s: &HttpState, user: &Authed, vhost: &str) -> ApiResult<Arc<VHost>> {
    user.require_policymaker()?;
    s.vhost_for(user, vhost)
}

/// Every vhost parameter the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_policymaker()?;
    Ok(Json(of_vhosts(&s.visible_vhosts(&user), None)))
}

/// The parameters of one component, in every vhost the user may see.
pub async fn list_component(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(component): Path<String>,
) -> ApiResult<Json<Value>> {
    user.require_policymaker()?;
    Ok(Json(of_vhosts(&s.visible_vhosts(&user), Some(&component))))
}

/// The parameters of one component in one vhost.
pub async fn list_component_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((component, vhost)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let v = vhost_param_target(&s, &user, &vhost)?;
    Ok(Json(of_vhosts(&[v], Some(&component))))
}

/// One vhost parameter.
pub async fn show(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((component, vhost, name)): Path<(String, String, String)>,
) -> ApiResult<Json<Value>> {
    let v = vhost_param_target(&s, &user, &vhost)?;
    let value = v.parameter(&component, &name).ok_or_else(ApiError::not_found)?;
    let p = Parameter { component, name, value };
    Ok(Json(parameter_json(&v.name, &p)))
}

/// Creates (201) or replaces (204) a vhost parameter.
pub async fn set(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((component, vhost, name)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    let v = vhost_param_target(&s, &user, &vhost)?;
    if component.is_empty() || name.is_empty() {
        return Err(ApiError::bad_request("component and name must not be empty"));
    }
    let value = value_of(&body)?;
    if component == crate::shovel::COMPONENT {
        crate::shovel::config::ShovelConfig::from_json(&value)
            .map_err(|e| ApiError::bad_request(format!("shovel '{name}': {e}")))?;
    }
    check_federation_value(&component, &name, &value)?;
    let existed = v.set_parameter(&component, &name, value, Some(user.name()))?;
    s.shovels.changed();
    s.federation.changed();
    Ok(super::created_or_updated(existed))
}

/// Refuses a `federation-upstream` or `federation-upstream-set` value a
/// link could not use (a set may name upstreams not created yet).
pub fn check_federation_value(component: &str, name: &str, value: &serde_json::Value) -> ApiResult<()> {
    use crate::federation::{UPSTREAM, UPSTREAM_SET, config};
    let checked = match component {
        UPSTREAM => config::Upstream::from_json(name, value).map(drop),
        UPSTREAM_SET => config::read_set(value, &|_| None).map(drop),
        _ => Ok(()),
    };
    checked.map_err(|e| ApiError::bad_request(format!("{component} '{name}': {e}")))
}

/// Deletes a vhost parameter (204, or 404 when there is none).
pub async fn delete(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((component, vhost, name)): Path<(String, String, String)>,
) -> ApiResult<StatusCode> {
    let v = vhost_param_target(&s, &user, &vhost)?;
    v.delete_parameter(&component, &name)?;
    s.shovels.changed();
    s.federation.changed();
    Ok(StatusCode::NO_CONTENT)
}

/// Every global parameter.
pub async fn list_global(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    Ok(Json(Value::Array(
        s.broker
            .global_parameters()
            .iter()
            .map(|(name, value)| global_parameter_json(name, value))
            .collect(),
    )))
}

/// One global parameter.
pub async fn show_global(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    user.require_admin()?;
    let value = s.broker.global_parameter(&name).ok_or_else(ApiError::not_found)?;
    Ok(Json(global_parameter_json(&name, &value)))
}

/// Creates (201) or replaces (204) a global parameter.
pub async fn set_global(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    if name.is_empty() {
        return Err(ApiError::bad_request("name must not be empty"));
    }
    let value = value_of(&body)?;
    let existed = s.broker.set_global_parameter(&name, value)?;
    Ok(super::created_or_updated(existed))
}

/// Deletes a global parameter (204, or 404 when there is none).
pub async fn delete_global(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    if !s.broker.delete_global_parameter(&name)? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}
