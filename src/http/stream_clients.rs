//! RabbitMQ's stream management endpoints: `/api/stream/connections`,
//! `/api/stream/publishers` and `/api/stream/consumers`, each also per
//! vhost, with the counters the stream adapter keeps and each consumer's
//! lag behind the end of its stream.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::HttpState;
use super::auth::Authed;
use super::connections::{connection_json, visible};
use super::error::{ApiError, ApiResult};
use super::listing::Listing;
use crate::core::stream_clients::ClientOf;

/// The protocol name stream connections are registered with.
const PROTOCOL: &str = "RabbitMQ Stream";

/// The connection part of a publisher or consumer, or `None` when the user
/// may not see that connection (or it is gone).
fn connection_details(s: &HttpState, user: &Authed, of: &ClientOf) -> Option<Value> {
    let c = s.broker.connections.get(&of.connection).filter(|c| visible(user, c))?;
    Some(json!({
        "name": c.name,
        "user": c.info.user,
        "node": &*crate::core::node::name(),
        "peer_host": c.info.peer.ip().to_string(),
        "peer_port": c.info.peer.port(),
    }))
}

fn stream_connections(s: &HttpState, user: &Authed, vhost: Option<&str>) -> Listing {
    let all = s.broker.connections.list();
    Listing(
        all.iter()
            .filter(|c| c.info.protocol == PROTOCOL && visible(user, c))
            .filter(|c| vhost.is_none_or(|v| c.info.vhost == v))
            .map(|c| connection_json(c))
            .collect(),
    )
}

/// Every stream connection.
pub async fn connections(State(s): State<Arc<HttpState>>, user: Authed) -> Listing {
    stream_connections(&s, &user, None)
}

/// The stream connections of one vhost.
pub async fn connections_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(vhost): Path<String>,
) -> ApiResult<Listing> {
    s.vhost_for(&user, &vhost)?;
    Ok(stream_connections(&s, &user, Some(&vhost)))
}

/// One stream connection of a vhost, by name (404 when the user may not see it).
pub async fn connection(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    s.vhost_for(&user, &vhost)?;
    s.broker
        .connections
        .get(&name)
        .filter(|c| c.info.protocol == PROTOCOL && c.info.vhost == vhost && visible(&user, c))
        .map(|c| Json(connection_json(&c)))
        .ok_or_else(ApiError::not_found)
}

/// Which publishers or consumers a request asks for.
#[derive(Default)]
struct Select<'a> {
    vhost: Option<&'a str>,
    stream: Option<&'a str>,
    connection: Option<&'a str>,
}

impl<'a> Select<'a> {
    /// Everything in `vhost`, narrowed to one stream or one connection.
    fn within(vhost: &'a str, stream: Option<&'a str>, connection: Option<&'a str>) -> Self {
        Select {
            vhost: Some(vhost),
            stream,
            connection,
        }
    }

    fn matches(&self, of: &ClientOf) -> bool {
        self.vhost.is_none_or(|v| of.vhost == v)
            && self.stream.is_none_or(|q| of.stream == q)
            && self.connection.is_none_or(|c| of.connection == c)
    }
}

fn publishers_json(s: &HttpState, user: &Authed, sel: &Select<'_>) -> Listing {
    let out = s
        .broker
        .stream_clients
        .publishers()
        .iter()
        .filter(|p| sel.matches(&p.of))
        .filter_map(|p| {
            let details = connection_details(s, user, &p.of)?;
            Some(json!({
                "connection_details": details,
                "queue": {"name": p.of.stream, "vhost": p.of.vhost},
                "publisher_id": p.publisher_id,
                "reference": p.reference.clone().unwrap_or_default(),
                "published": p.published.load(Ordering::Relaxed),
                "confirmed": p.confirmed.load(Ordering::Relaxed),
                "errored": p.errored.load(Ordering::Relaxed),
            }))
        })
        .collect();
    Listing(out)
}

fn consumers_json(s: &HttpState, user: &Authed, sel: &Select<'_>) -> Listing {
    let out = s
        .broker
        .stream_clients
        .consumers()
        .iter()
        .filter(|c| sel.matches(&c.of))
        .filter_map(|c| {
            let details = connection_details(s, user, &c.of)?;
            let end = s
                .broker
                .vhost(&c.of.vhost)
                .and_then(|v| v.queue(&c.of.stream))
                .and_then(|q| q.stream_next_offset())
                .unwrap_or(0);
            let offset = c.last_offset();
            let lag = c.offset_lag(end);
            let active = c.active.load(Ordering::Relaxed);
            let properties: serde_json::Map<String, Value> =
                c.properties.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
            Some(json!({
                "connection_details": details,
                "queue": {"name": c.of.stream, "vhost": c.of.vhost},
                "subscription_id": c.subscription_id,
                "credits": c.credits.load(Ordering::Relaxed),
                "consumed": c.consumed.load(Ordering::Relaxed),
                "offset": offset.unwrap_or(0),
                "offset_lag": lag,
                "active": active,
                "activity_status": if active { "up" } else { "waiting" },
                "properties": properties,
            }))
        })
        .collect();
    Listing(out)
}

/// What a list function makes of a selection.
type Lister = fn(&HttpState, &Authed, &Select<'_>) -> Listing;

/// `list` for the selection, after checking the user's access to its vhost.
fn in_vhost(s: &HttpState, user: &Authed, sel: Select<'_>, list: Lister) -> ApiResult<Listing> {
    if let Some(v) = sel.vhost {
        s.vhost_for(user, v)?;
    }
    Ok(list(s, user, &sel))
}

/// Every stream publisher.
pub async fn publishers(State(s): State<Arc<HttpState>>, user: Authed) -> Listing {
    publishers_json(&s, &user, &Select::default())
}

/// The stream publishers of one vhost.
pub async fn publishers_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(vhost): Path<String>,
) -> ApiResult<Listing> {
    in_vhost(&s, &user, Select::within(&vhost, None, None), publishers_json)
}

/// The publishers of one stream.
pub async fn publishers_stream(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, stream)): Path<(String, String)>,
) -> ApiResult<Listing> {
    in_vhost(&s, &user, Select::within(&vhost, Some(&stream), None), publishers_json)
}

/// Every stream consumer.
pub async fn consumers(State(s): State<Arc<HttpState>>, user: Authed) -> Listing {
    consumers_json(&s, &user, &Select::default())
}

/// The stream consumers of one vhost.
pub async fn consumers_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(vhost): Path<String>,
) -> ApiResult<Listing> {
    in_vhost(&s, &user, Select::within(&vhost, None, None), consumers_json)
}

/// The publishers of one stream connection.
pub async fn connection_publishers(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<Listing> {
    in_vhost(&s, &user, Select::within(&vhost, None, Some(&name)), publishers_json)
}

/// The consumers of one stream connection.
pub async fn connection_consumers(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
) -> ApiResult<Listing> {
    in_vhost(&s, &user, Select::within(&vhost, None, Some(&name)), consumers_json)
}
