//! `/api/vhosts`: list, show, create and delete virtual hosts, with their
//! description, tags and default queue type; `/api/vhost-limits`: the
//! `max-connections` and `max-queues` limits of each vhost.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use super::stats_json;
use crate::core::limits::NamedLimits;
use crate::core::vhost::{VHost, VHostLimits, VHostMeta};

/// The queue type a vhost reports when none was chosen for it.
const DEFAULT_QUEUE_TYPE: &str = "classic";

fn vhost_json(s: &HttpState, v: &VHost) -> Value {
    let (mut ready, mut unacked) = (0u64, 0u64);
    for q in v.queues() {
        let st = q.stats();
        ready += st.ready;
        unacked += st.unacked;
    }
    let meta = v.meta();
    let queue_type = meta.default_queue_type.as_deref().unwrap_or(DEFAULT_QUEUE_TYPE);
    let mut out = json!({"name": v.name, "description": meta.description, "tags": meta.tags,
           "default_queue_type": queue_type,
           "metadata": {"description": meta.description, "tags": meta.tags, "default_queue_type": queue_type},
           "tracing": false, "cluster_state": cluster_state(),
           "messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked});
    // Counts and rates as of the last statistics sample.
    if let Some(t) = s.broker.stats.vhost(&v.name) {
        let values = t.values();
        let (depths, counts): (Vec<_>, Vec<_>) = values.iter().partition(|(n, _)| n.starts_with("messages"));
        out["message_stats"] = stats_json::message_stats(&counts, &t.rates);
        let names: Vec<&str> = depths.iter().map(|(n, _)| *n).collect();
        stats_json::add_details(&mut out, &t.rates, &names);
    }
    out
}

/// The vhosts the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> Json<Value> {
    Json(Value::Array(
        s.visible_vhosts(&user).iter().map(|v| vhost_json(&s, v)).collect(),
    ))
}

/// One vhost.
pub async fn show(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let v = s.vhost_for(&user, &name)?;
    Ok(Json(vhost_json(&s, &v)))
}

/// Body of `PUT /api/vhosts/{name}`; every field is optional.
#[derive(Deserialize, Default)]
#[serde(default)]
struct VHostBody {
    description: Option<String>,
    /// A list or a comma-separated string.
    tags: Option<Value>,
    default_queue_type: Option<String>,
}

impl VHostBody {
    /// `current` with the fields this body gives replaced.
    fn apply_to(self, current: VHostMeta) -> VHostMeta {
        VHostMeta {
            description: self.description.unwrap_or(current.description),
            tags: self
                .tags
                .map(|t| crate::core::definition_json::parse_tags(&t))
                .unwrap_or(current.tags),
            default_queue_type: self
                .default_queue_type
                .filter(|t| !t.is_empty() && t != "undefined")
                .or(current.default_queue_type),
        }
    }
}

/// Creates a vhost (201) or updates the metadata of an existing one (204).
/// The body may give `description`, `tags` and `default_queue_type`.
pub async fn create(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    let body: VHostBody = super::body::parse(&body)?;
    let existed = s.broker.vhost(&name).is_some();
    let v = s.broker.create_vhost(&name)?;
    s.broker.set_vhost_meta(&name, body.apply_to(v.meta()))?;
    Ok(super::created_or_updated(existed))
}

/// Deletes a vhost with everything in it.
pub async fn delete(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<StatusCode> {
    user.require_admin()?;
    if !s.broker.delete_vhost(&name)? {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The limits of a vhost as RabbitMQ lists them: `{"vhost", "value": {...}}`.
fn limits_json(v: &VHost) -> Value {
    json!({"vhost": v.name, "value": v.limits().to_json()})
}

/// The limits of every vhost the user may see that has any.
pub async fn list_limits(State(s): State<Arc<HttpState>>, user: Authed) -> Json<Value> {
    Json(Value::Array(
        s.visible_vhosts(&user)
            .iter()
            .filter(|v| !v.limits().is_empty())
            .map(|v| limits_json(v))
            .collect(),
    ))
}

/// The limits of one vhost (an empty list when it has none, as RabbitMQ answers).
pub async fn show_limits(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let v = s.vhost_for(&user, &name)?;
    if v.limits().is_empty() {
        return Ok(Json(json!([])));
    }
    Ok(Json(json!([limits_json(&v)])))
}

/// Body of `PUT /api/vhost-limits/{vhost}/{name}`.
#[derive(Deserialize)]
struct LimitBody {
    value: Value,
}

/// Sets one limit (`max-connections` or `max-queues`) of a vhost; a negative
/// value means no limit (204).
pub async fn set_limit(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    s.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    let value = limit_value(&body, &name)?;
    s.broker.update_vhost_limits(&vhost, |l| l.set(&name, value))?;
    Ok(StatusCode::NO_CONTENT)
}

/// The value of limit `name` in a `{"value": N}` body (a number or a
/// numeric string).
pub(super) fn limit_value(body: &Bytes, name: &str) -> ApiResult<i64> {
    let body: LimitBody = super::body::parse(body)?;
    match &body.value {
        Value::Number(n) => n.as_i64(),
        Value::String(t) => t.trim().parse::<i64>().ok(),
        _ => None,
    }
    .ok_or_else(|| ApiError::bad_request(format!("limit '{name}' must be an integer, got {}", body.value)))
}

/// Removes one limit of a vhost: 204 also when it was not set (as in
/// RabbitMQ), 404 for a missing vhost or a name that is no limit.
pub async fn clear_limit(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    user.require_admin()?;
    s.broker.vhost(&vhost).ok_or_else(ApiError::not_found)?;
    if !VHostLimits::NAMES.contains(&name.as_str()) {
        return Err(ApiError::not_found());
    }
    s.broker.update_vhost_limits(&vhost, |l| Ok(l.clear(&name)))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `cluster_state`: this node, running (followers are not listed, as a
/// RabbitMQ node lists only the cluster members that run the vhost).
fn cluster_state() -> Value {
    let mut m = serde_json::Map::new();
    m.insert(crate::core::node::name().to_string(), Value::from("running"));
    Value::Object(m)
}
