//! `/api/exchanges`: list, show, declare and delete exchanges.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use crate::core::exchange::Exchange;
use crate::core::table_json::{json_to_table, table_to_json};
use crate::core::vhost::{ExchangeOptions, VHost};

/// An exchange as RabbitMQ's API shows it.
pub fn exchange_json(vhost: &str, e: &Exchange) -> Value {
    json!({"name": e.name, "vhost": vhost, "type": e.declared_type, "durable": e.durable,
           "auto_delete": e.auto_delete, "internal": e.internal, "arguments": table_to_json(&e.arguments)})
}

fn vhost(s: &HttpState, user: &Authed, name: &str) -> ApiResult<Arc<VHost>> {
    user.require_vhost(name)?;
    s.broker.vhost(name).ok_or_else(ApiError::not_found)
}

fn of_vhost(v: &VHost) -> Vec<Value> {
    let mut all = v.exchanges();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all.iter().map(|e| exchange_json(&v.name, e)).collect()
}

/// Exchanges of every vhost the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> Json<Value> {
    let mut vhosts: Vec<_> = s
        .broker
        .vhosts()
        .into_iter()
        .filter(|v| user.can_access(&v.name))
        .collect();
    vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    Json(Value::Array(vhosts.iter().flat_map(|v| of_vhost(v)).collect()))
}

/// Exchanges of one vhost.
pub async fn list_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(v): Path<String>,
) -> ApiResult<Json<Value>> {
    let v = vhost(&s, &user, &v)?;
    Ok(Json(Value::Array(of_vhost(&v))))
}

/// One exchange (the default exchange is `amq.default` in the API).
pub async fn show(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let v = vhost(&s, &user, &v)?;
    let name = if name == "amq.default" { String::new() } else { name };
    let e = v.exchange(&name).ok_or_else(ApiError::not_found)?;
    Ok(Json(exchange_json(&v.name, &e)))
}

/// Body of `PUT /api/exchanges/{vhost}/{name}`.
#[derive(Deserialize)]
pub struct DeclareBody {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default = "yes")]
    durable: bool,
    #[serde(default)]
    auto_delete: bool,
    #[serde(default)]
    internal: bool,
    #[serde(default)]
    arguments: Value,
}

fn yes() -> bool {
    true
}

/// Declares an exchange (201 new, 204 already there).
pub async fn declare(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
    Json(body): Json<DeclareBody>,
) -> ApiResult<StatusCode> {
    let v = vhost(&s, &user, &v)?;
    let existed = v.exchange(&name).is_some();
    let opts = ExchangeOptions {
        durable: body.durable,
        auto_delete: body.auto_delete,
        internal: body.internal,
        passive: false,
    };
    v.declare_exchange(&name, &body.kind, &opts, json_to_table(&body.arguments))?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

/// Conditions of `DELETE /api/exchanges/{vhost}/{name}`.
#[derive(Deserialize, Default)]
pub struct DeleteQuery {
    #[serde(rename = "if-unused", default)]
    if_unused: bool,
}

/// Deletes an exchange.
pub async fn delete(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
    Query(q): Query<DeleteQuery>,
) -> ApiResult<StatusCode> {
    let v = vhost(&s, &user, &v)?;
    if v.exchange(&name).is_none() {
        return Err(ApiError::not_found());
    }
    v.delete_exchange(&name, q.if_unused)?;
    Ok(StatusCode::NO_CONTENT)
}
