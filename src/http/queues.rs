//! `/api/queues`: list, show, declare, delete and purge queues.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::HttpState;
use super::auth::Authed;
use super::body::JsonBody;
use super::error::{ApiError, ApiResult};
use super::listing::Listing;
use super::stats_json;
use crate::core::permissions::Access;
use crate::core::queue::Queue;
use crate::core::table_json::{json_to_table, table_to_json};
use crate::core::vhost::QueueOptions;

/// A queue as RabbitMQ's API shows it; a queue whose files could not be
/// opened shows LavinMQ's state "closed", with the reason in `closed_reason`.
pub fn queue_json(q: &Queue) -> Value {
    let st = q.stats();
    let policies = q.policies();
    let state = match (st.closed, st.paused) {
        (true, _) => "closed",
        (false, true) => "paused",
        (false, false) => "running",
    };
    let mut out = json!({
        "name": q.name, "vhost": q.vhost, "durable": q.durable, "auto_delete": q.auto_delete,
        "exclusive": q.exclusive_owner.is_some(), "arguments": table_to_json(&q.arguments()),
        "type": q.queue_type.name(), "state": state,
        "messages": st.ready + st.unacked, "messages_ready": st.ready,
        "messages_unacknowledged": st.unacked, "consumers": st.consumers,
        "policy": policies.policy, "operator_policy": policies.operator_policy,
        "effective_policy_definition": policies.effective,
        "message_stats": stats_json::message_stats(&st.counts.named(), &q.rates),
    });
    if st.closed
        && let Some(reason) = q.closed_reason()
    {
        out["closed_reason"] = Value::String(reason);
    }
    stats_json::add_details(
        &mut out,
        &q.rates,
        &["messages", "messages_ready", "messages_unacknowledged"],
    );
    out
}

fn sorted(mut qs: Vec<Arc<Queue>>) -> Vec<Arc<Queue>> {
    qs.sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    qs
}

/// Queues of every vhost the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> Listing {
    let all = s.visible_vhosts(&user).iter().flat_map(|v| v.queues()).collect();
    Listing(sorted(all).iter().map(|q| queue_json(q)).collect())
}

/// Queues of one vhost.
pub async fn list_vhost(State(s): State<Arc<HttpState>>, user: Authed, Path(v): Path<String>) -> ApiResult<Listing> {
    let v = s.vhost_for(&user, &v)?;
    Ok(Listing(sorted(v.queues()).iter().map(|q| queue_json(q)).collect()))
}

/// One queue.
pub async fn show(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let v = s.vhost_for(&user, &v)?;
    let q = v.queue(&name).ok_or_else(ApiError::not_found)?;
    let mut out = queue_json(&q);
    out["consumer_details"] = Value::Array(super::channels::consumers_of_queue(&s, &q.vhost, &q.name));
    Ok(Json(out))
}

/// Body of `PUT /api/queues/{vhost}/{name}`.
#[derive(Deserialize, Default)]
#[serde(default)]
pub struct DeclareBody {
    durable: Option<bool>,
    auto_delete: bool,
    arguments: Value,
}

/// Declares a queue (201 new, 204 already there with the same properties).
pub async fn declare(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<DeclareBody>,
) -> ApiResult<StatusCode> {
    let v = s.vhost_for(&user, &v)?;
    user.check(&s, &v.name, Access::Configure, "queue", &name)?;
    let existed = v.queue(&name).is_some();
    let opts = QueueOptions {
        durable: body.durable.unwrap_or(true),
        auto_delete: body.auto_delete,
        exclusive: false,
        passive: false,
    };
    if name.is_empty() || name.starts_with("amq.") {
        return Err(ApiError::bad_request(format!("invalid queue name '{name}'")));
    }
    v.declare_queue(&name, &opts, json_to_table(&body.arguments), 0)?;
    Ok(super::created_or_updated(existed))
}

/// Conditions of `DELETE /api/queues/{vhost}/{name}`.
#[derive(Deserialize, Default)]
pub struct DeleteQuery {
    #[serde(rename = "if-unused", default)]
    if_unused: bool,
    #[serde(rename = "if-empty", default)]
    if_empty: bool,
}

/// Deletes a queue.
pub async fn delete(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
    Query(q): Query<DeleteQuery>,
) -> ApiResult<StatusCode> {
    let v = s.vhost_for(&user, &v)?;
    if v.queue(&name).is_none() {
        return Err(ApiError::not_found());
    }
    user.check(&s, &v.name, Access::Configure, "queue", &name)?;
    v.delete_queue(&name, q.if_unused, q.if_empty, None)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The queue's deliveries not yet acknowledged.
pub async fn unacked(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let v = s.vhost_for(&user, &v)?;
    let q = v.queue(&name).ok_or_else(ApiError::not_found)?;
    Ok(Json(Value::Array(super::channels::unacked_of_queue(
        &s, &q.vhost, &q.name,
    ))))
}

/// Pauses deliveries from a queue (LavinMQ's `PUT .../pause`).
pub async fn pause(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    s.queue_for(&user, &v, &name, Access::Configure)?.set_paused(true)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Resumes deliveries from a paused queue (LavinMQ's `PUT .../resume`).
pub async fn resume(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    s.queue_for(&user, &v, &name, Access::Configure)?.set_paused(false)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Reopens a closed queue from its files (LavinMQ's `PUT .../restart`): 204
/// when reopened, 400 when the queue was not closed or its files still cannot
/// be opened.
pub async fn restart(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let q = s.queue_for(&user, &v, &name, Access::Configure)?;
    let vhost = s.vhost_for(&user, &v)?;
    match vhost.restart_queue(&q.name) {
        Ok(true) => Ok(StatusCode::NO_CONTENT),
        Ok(false) => Err(ApiError::bad_request("Queue was not restarted")),
        Err(e) => Err(ApiError::bad_request(format!("Queue was not restarted: {}", e.text()))),
    }
}

/// Purges a queue's ready messages.
pub async fn purge(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    s.queue_for(&user, &v, &name, Access::Read)?.purge()?;
    Ok(StatusCode::NO_CONTENT)
}
