//! `/api/connections`: list, show and close client connections.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use super::listing::Listing;
use super::stats_json;
use crate::core::connections::ConnectionEntry;
use crate::core::table_json::table_to_json;

/// A connection as the API shows it.
pub fn connection_json(c: &ConnectionEntry) -> Value {
    let i = &c.info;
    let client_properties = table_to_json(&i.client_properties.unpack());
    let mut out = json!({"name": c.name, "user": c.info.user, "vhost": c.info.vhost, "protocol": c.info.protocol,
           "node": &*crate::core::node::name(), "connected_at": c.connected_at, "channels": c.channel_count(),
           "state": c.state(crate::core::message::Message::now_ms()), "type": "network", "ssl": i.tls.is_some(), "auth_mechanism": i.auth_mechanism,
           "host": i.local.ip().to_string(), "port": i.local.port(),
           "peer_host": i.peer.ip().to_string(), "peer_port": i.peer.port(),
           "frame_max": i.frame_max, "channel_max": i.channel_max, "timeout": i.heartbeat,
           "client_properties": client_properties});
    if let Some(tls) = &i.tls {
        // RabbitMQ's names, and LavinMQ's (`tls_version`, `cipher`).
        out["ssl_protocol"] = json!(tls.protocol);
        out["ssl_cipher"] = json!(tls.cipher);
        out["tls_version"] = json!(tls.protocol);
        out["cipher"] = json!(tls.cipher);
        if let Some(cn) = &tls.peer_cn {
            out["peer_cert_subject"] = json!(format!("CN={cn}"));
        }
    }
    if let Some(name) = client_properties.get("connection_name") {
        out["user_provided_name"] = name.clone();
    }
    let counts = c.named_counts();
    for (name, v) in counts {
        out[name] = json!(v);
    }
    stats_json::add_details(&mut out, &c.rates, &["recv_oct", "send_oct"]);
    out
}

/// True when `user` may see connection `c`: its own, or all for administrators
/// and monitoring users.
pub fn visible(user: &Authed, c: &ConnectionEntry) -> bool {
    user.sees_all() || c.info.user == user.name()
}

/// Refuses (403) a change to connection `c` (closing it, cancelling a
/// consumer, changing a prefetch) unless `user` owns it or is an administrator.
pub fn require_owner_or_admin(user: &Authed, c: &ConnectionEntry) -> ApiResult<()> {
    if user.has_tag("administrator") || c.info.user == user.name() {
        Ok(())
    } else {
        Err(ApiError::forbidden("Not administrator user"))
    }
}

/// Every connection the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> Listing {
    let all = s.broker.connections.list();
    Listing(
        all.iter()
            .filter(|c| visible(&user, c))
            .map(|c| connection_json(c))
            .collect(),
    )
}

/// The connections to one vhost.
pub async fn list_vhost(State(s): State<Arc<HttpState>>, user: Authed, Path(v): Path<String>) -> ApiResult<Listing> {
    s.vhost_for(&user, &v)?;
    let all = s.broker.connections.list();
    let out = all
        .iter()
        .filter(|c| c.info.vhost == v && visible(&user, c))
        .map(|c| connection_json(c))
        .collect();
    Ok(Listing(out))
}

/// One connection.
pub async fn show(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let c = s.broker.connections.get(&name).filter(|c| visible(&user, c));
    let c = c.ok_or_else(ApiError::not_found)?;
    Ok(Json(connection_json(&c)))
}

/// The text a closed client gets: the `X-Reason` header, or RabbitMQ's default.
fn reason(headers: &HeaderMap) -> &str {
    headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("Closed via management plugin")
}

/// Closes a connection; the `X-Reason` header is the text the client gets.
pub async fn close(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    let c = s.broker.connections.get(&name).filter(|c| visible(&user, c));
    let c = c.ok_or_else(ApiError::not_found)?;
    require_owner_or_admin(&user, &c)?;
    c.close(reason(&headers));
    Ok(StatusCode::NO_CONTENT)
}

/// The connections of one user.
pub async fn list_username(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(username): Path<String>,
) -> ApiResult<Json<Value>> {
    if !(user.sees_all() || username == user.name()) {
        return Err(ApiError::forbidden("Not administrator user"));
    }
    let all = s.broker.connections.list();
    Ok(Json(Value::Array(
        all.iter()
            .filter(|c| c.info.user == username)
            .map(|c| connection_json(c))
            .collect(),
    )))
}

/// Closes every connection of one user.
pub async fn close_username(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(username): Path<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    if !(user.has_tag("administrator") || username == user.name()) {
        return Err(ApiError::forbidden("Not administrator user"));
    }
    for c in s.broker.connections.list().iter().filter(|c| c.info.user == username) {
        c.close(reason(&headers));
    }
    Ok(StatusCode::NO_CONTENT)
}
