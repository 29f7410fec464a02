//! `/api/federation-links`: the state of each federation link, as
//! RabbitMQ's federation management plugin and LavinMQ show it. Upstreams
//! are created and deleted as `federation-upstream` parameters, and links by
//! the policies that name them.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde_json::Value;

use super::HttpState;
use super::auth::Authed;
use super::error::ApiResult;

/// Every link in the vhosts the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> ApiResult<Json<Value>> {
    user.require_policymaker()?;
    let items = s
        .visible_vhosts(&user)
        .iter()
        .flat_map(|v| s.federation.links_json(Some(&v.name)))
        .collect();
    Ok(Json(Value::Array(items)))
}

/// The links of one vhost.
pub async fn list_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(vhost): Path<String>,
) -> ApiResult<Json<Value>> {
    user.require_policymaker()?;
    let v = s.vhost_for(&user, &vhost)?;
    Ok(Json(Value::Array(s.federation.links_json(Some(&v.name)))))
}
