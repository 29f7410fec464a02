//! `/api/shovels`: the state of each shovel, as RabbitMQ's shovel management
//! plugin and LavinMQ show it, and the operator's controls (LavinMQ's pause
//! and resume, RabbitMQ's restart). Shovels are created and deleted as
//! `shovel` parameters (`/api/parameters/shovel/...`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use crate::shovel::ControlError;

/// Every shovel in the vhosts the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_policymaker()?;
    let items = s
        .visible_vhosts(&user)
        .iter()
        .flat_map(|v| s.shovels.list(Some(&v.name)))
        .collect();
    Ok(Json(Value::Array(items)))
}

/// The shovels of one vhost.
pub async fn list_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(vhost): Path<String>,
) -> ApiResult<Json<Value>> {
    user.require_policymaker()?;
    let v = s.vhost_for(&user, &vhost)?;
    Ok(Json(Value::Array(s.shovels.list(Some(&v.name)))))
}

/// One shovel.
pub async fn show(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    user.require_policymaker()?;
    let v = s.vhost_for(&user, &vhost)?;
    s.shovels.get(&v.name, &name).map(Json).ok_or_else(ApiError::not_found)
}

/// Runs `control` on shovel `name` of `vhost` after the checks: 204, 404
/// for an unknown shovel, 422 when its state does not allow it.
fn control(
    s: &HttpState,
    user: &Authed,
    vhost: &str,
    name: &str,
    control: fn(&crate::shovel::Shovels, &str, &str) -> Result<(), ControlError>,
) -> ApiResult<StatusCode> {
    user.require_policymaker()?;
    let v = s.vhost_for(user, vhost)?;
    match control(&s.shovels, &v.name, name) {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(ControlError::NotFound(..)) => Err(ApiError::not_found()),
        Err(e @ ControlError::WrongState { .. }) => Err(ApiError::unprocessable(e.to_string())),
    }
}

/// `PUT /api/shovels/{vhost}/{name}/pause`: stops the shovel until resumed,
/// also across restarts.
pub async fn pause(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    control(&s, &user, &vhost, &name, crate::shovel::Shovels::pause)
}

/// `PUT /api/shovels/{vhost}/{name}/resume`.
pub async fn resume(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    control(&s, &user, &vhost, &name, crate::shovel::Shovels::resume)
}

/// `DELETE /api/shovels/vhost/{vhost}/{name}/restart` (RabbitMQ): stops the
/// shovel and starts it again.
pub async fn restart(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    control(&s, &user, &vhost, &name, crate::shovel::Shovels::restart)
}

/// `DELETE /api/shovels/vhost/{vhost}/{name}` (RabbitMQ): deletes the
/// shovel's parameter.
pub async fn delete(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    user.require_policymaker()?;
    let v = s.vhost_for(&user, &vhost)?;
    v.delete_parameter(crate::shovel::COMPONENT, &name)?;
    s.shovels.changed();
    Ok(StatusCode::NO_CONTENT)
}
