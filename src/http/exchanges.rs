//! `/api/exchanges`: list, show, declare and delete exchanges.

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
use super::listing::Listing;
use crate::core::exchange::Exchange;
use crate::core::exchange_declaration::ExchangeDeclaration;
use crate::core::permissions::Access;
use crate::core::vhost::VHost;

/// An exchange as RabbitMQ's API shows it.
/// With a policy in force, its name and definition are shown too (LavinMQ's
/// `policy` and `effective_policy_definition`); `delayed` tells whether the
/// exchange holds back messages with an `x-delay` (by argument or policy).
pub fn exchange_json(vhost: &str, e: &Exchange) -> Value {
    let (policy, definition) = match e.policy() {
        Some((name, d)) => (Value::String(name), Value::Object(d)),
        None => (Value::Null, Value::Object(Default::default())),
    };
    let mut json = crate::core::definition_json::exchange_definition_json(vhost, e);
    json["policy"] = policy;
    json["effective_policy_definition"] = definition;
    json["delayed"] = Value::Bool(e.is_delayed());
    json["message_stats"] = super::stats_json::message_stats(&e.counters.named(), &e.rates);
    json
}

fn of_vhost(v: &VHost) -> Vec<Value> {
    let mut all = v.exchanges();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all.iter().map(|e| exchange_json(&v.name, e)).collect()
}

/// Exchanges of every vhost the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> Listing {
    Listing(s.visible_vhosts(&user).iter().flat_map(|v| of_vhost(v)).collect())
}

/// Exchanges of one vhost.
pub async fn list_vhost(State(s): State<Arc<HttpState>>, user: Authed, Path(v): Path<String>) -> ApiResult<Listing> {
    let v = s.vhost_for(&user, &v)?;
    Ok(Listing(of_vhost(&v)))
}

/// One exchange (the default exchange is `amq.default` in the API).
pub async fn show(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    let v = s.vhost_for(&user, &v)?;
    let name = if name == "amq.default" { String::new() } else { name };
    let e = v.exchange(&name).ok_or_else(ApiError::not_found)?;
    Ok(Json(exchange_json(&v.name, &e)))
}

/// Declares an exchange (201 new, 204 already there).
pub async fn declare(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<ExchangeDeclaration>,
) -> ApiResult<StatusCode> {
    let v = s.vhost_for(&user, &v)?;
    user.check(&s, &v.name, Access::Configure, "exchange", &name)?;
    let existed = v.exchange(&name).is_some();
    body.declare_in(&v, &name)?;
    Ok(super::created_or_updated(existed))
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
    let v = s.vhost_for(&user, &v)?;
    if v.exchange(&name).is_none() {
        return Err(ApiError::not_found());
    }
    user.check(&s, &v.name, Access::Configure, "exchange", &name)?;
    v.delete_exchange(&name, q.if_unused)?;
    Ok(StatusCode::NO_CONTENT)
}
