//! `/api/channels` and `/api/consumers`: the channels of open connections and
//! the consumers on them, and cancelling a consumer from the broker's side.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::HttpState;
use super::auth::Authed;
use super::body::JsonBody;
use super::connections::{require_owner_or_admin, visible};
use super::error::{ApiError, ApiResult};
use super::listing::Listing;
use super::stats_json;
use crate::core::connections::{ChannelView, ConnectionEntry};

/// RabbitMQ's name of a channel: its connection's name and its number.
fn channel_name(c: &ConnectionEntry, number: u16) -> String {
    format!("{} ({number})", c.name)
}

/// Who a channel belongs to, as RabbitMQ nests it in channels and consumers.
fn channel_details(c: &ConnectionEntry, number: u16) -> Value {
    json!({"name": channel_name(c, number), "number": number, "connection_name": c.name,
           "node": &*crate::core::node::name(),
           "peer_host": c.info.peer.ip().to_string(), "peer_port": c.info.peer.port(), "user": c.info.user})
}

/// Milliseconds a consumer of queue `queue` in `vhost` may keep a delivery
/// unacknowledged, as RabbitMQ shows it (`consumer_timeout`): the queue's own
/// timeout (argument or policy), else the broker's `consumer_timeout`; 0 when
/// neither sets one.
fn consumer_timeout(s: &HttpState, vhost: &str, queue: &str) -> u64 {
    let of_queue = s
        .broker
        .vhost(vhost)
        .and_then(|v| v.queue(queue))
        .and_then(|q| q.consumer_timeout());
    let global = || s.websocket.as_ref().and_then(|w| w.amqp.settings().consumer_timeout);
    of_queue.or_else(global).unwrap_or(0)
}

fn channel_json(c: &ConnectionEntry, ch: &dyn ChannelView) -> Value {
    let d = ch.details();
    let number = ch.number();
    json!({
        "name": channel_name(c, number), "number": number, "vhost": c.info.vhost, "user": c.info.user,
        "node": &*crate::core::node::name(),
        "connection_details": {"name": c.name, "peer_host": c.info.peer.ip().to_string(),
                               "peer_port": c.info.peer.port()},
        "state": if d.flow_active { "running" } else { "flow" },
        "consumer_count": ch.consumers().len(), "messages_unacknowledged": d.unacked,
        "messages_unconfirmed": d.unconfirmed, "messages_uncommitted": 0, "acks_uncommitted": 0,
        "prefetch_count": d.prefetch_count, "global_prefetch_count": d.global_prefetch_count,
        "confirm": d.confirm, "transactional": d.transactional,
        "message_stats": stats_json::message_stats(&ch.counters().named(), ch.rates()),
    })
}

/// Every channel of the connections `user` may see that `keep` accepts.
fn channels_where(s: &HttpState, user: &Authed, keep: impl Fn(&ConnectionEntry) -> bool) -> Vec<Value> {
    let mut out = Vec::new();
    for c in s.broker.connections.list() {
        if visible(user, &c) && keep(&c) {
            out.extend(c.channels().iter().map(|ch| channel_json(&c, &**ch)));
        }
    }
    out
}

/// Every channel the user may see.
pub async fn list(State(s): State<Arc<HttpState>>, user: Authed) -> Listing {
    Listing(channels_where(&s, &user, |_| true))
}

/// The channels on connections to one vhost.
pub async fn list_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(vhost): Path<String>,
) -> ApiResult<Listing> {
    s.vhost_for(&user, &vhost)?;
    Ok(Listing(channels_where(&s, &user, |c| c.info.vhost == vhost)))
}

/// The channels of one connection.
pub async fn list_connection(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    let c = s.broker.connections.get(&name).filter(|c| visible(&user, c));
    let c = c.ok_or_else(ApiError::not_found)?;
    Ok(Json(Value::Array(
        c.channels().iter().map(|ch| channel_json(&c, &**ch)).collect(),
    )))
}

/// The channel named `<connection name> (<number>)`, if the user may see it.
fn find(s: &HttpState, user: &Authed, name: &str) -> ApiResult<(Arc<ConnectionEntry>, Arc<dyn ChannelView>)> {
    let (conn, number) = name
        .strip_suffix(')')
        .and_then(|n| n.rsplit_once(" ("))
        .and_then(|(conn, num)| Some((conn, num.parse::<u16>().ok()?)))
        .ok_or_else(ApiError::not_found)?;
    let c = s.broker.connections.get(conn).filter(|c| visible(user, c));
    let c = c.ok_or_else(ApiError::not_found)?;
    let ch = c.channel(number).ok_or_else(ApiError::not_found)?;
    Ok((c, ch))
}

/// One channel, by its name (`<connection name> (<number>)`).
pub async fn show(State(s): State<Arc<HttpState>>, user: Authed, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let (c, ch) = find(&s, &user, &name)?;
    let mut out = channel_json(&c, &*ch);
    out["consumer_details"] = Value::Array(consumers_of(&s, &c, &*ch));
    Ok(Json(out))
}

/// Body of `PUT /api/channels/{name}`.
#[derive(serde::Deserialize)]
pub struct ChannelUpdate {
    prefetch: Option<i64>,
}

/// Changes a channel's prefetch, for its consumers and those it creates
/// later (LavinMQ's extension, for a consumer that took more than it can
/// handle): 204.
pub async fn update(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<ChannelUpdate>,
) -> ApiResult<StatusCode> {
    let (c, ch) = find(&s, &user, &name)?;
    require_owner_or_admin(&user, &c)?;
    if let Some(prefetch) = body.prefetch {
        let prefetch = u16::try_from(prefetch)
            .map_err(|_| ApiError::bad_request(format!("prefetch must be between 0 and {}", u16::MAX)))?;
        if !ch.set_prefetch(prefetch) {
            return Err(ApiError::bad_request("this channel has no prefetch"));
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

fn consumers_of(s: &HttpState, c: &ConnectionEntry, ch: &dyn ChannelView) -> Vec<Value> {
    let number = ch.number();
    ch.consumers()
        .into_iter()
        .map(|d| {
            let arguments = if d.priority == 0 {
                json!({})
            } else {
                json!({"x-priority": d.priority})
            };
            let timeout = consumer_timeout(s, &c.info.vhost, &d.queue);
            json!({"consumer_tag": d.tag, "queue": {"name": d.queue, "vhost": c.info.vhost},
                   "channel_details": channel_details(c, number), "ack_required": d.ack_required,
                   "exclusive": d.exclusive, "prefetch_count": d.prefetch_count, "arguments": arguments,
                   "consumer_timeout": timeout, "active": d.active,
                   "activity_status": if d.active { "up" } else { "waiting" }})
        })
        .collect()
}

fn consumers_where(s: &HttpState, user: &Authed, keep: impl Fn(&ConnectionEntry) -> bool) -> Vec<Value> {
    let mut out = Vec::new();
    for c in s.broker.connections.list() {
        if visible(user, &c) && keep(&c) {
            for ch in c.channels() {
                out.extend(consumers_of(s, &c, &*ch));
            }
        }
    }
    out
}

/// Every consumer the user may see.
pub async fn consumers(State(s): State<Arc<HttpState>>, user: Authed) -> Listing {
    Listing(consumers_where(&s, &user, |_| true))
}

/// The consumers in one vhost.
pub async fn consumers_vhost(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(vhost): Path<String>,
) -> ApiResult<Listing> {
    s.vhost_for(&user, &vhost)?;
    Ok(Listing(consumers_where(&s, &user, |c| c.info.vhost == vhost)))
}

/// The consumers of one queue, as RabbitMQ nests them in a queue's details.
pub fn consumers_of_queue(s: &HttpState, vhost: &str, queue: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for c in s.broker.connections.list().iter().filter(|c| c.info.vhost == vhost) {
        for ch in c.channels() {
            out.extend(
                consumers_of(s, c, &*ch)
                    .into_iter()
                    .filter(|v| v["queue"]["name"] == queue),
            );
        }
    }
    out
}

/// Deliveries from one queue not yet acknowledged, on every channel (LavinMQ's
/// `GET /api/queues/{vhost}/{name}/unacked`).
pub fn unacked_of_queue(s: &HttpState, vhost: &str, queue: &str) -> Vec<Value> {
    let now = crate::core::message::Message::coarse_now_ms();
    let mut out = Vec::new();
    for c in s.broker.connections.list().iter().filter(|c| c.info.vhost == vhost) {
        for ch in c.channels() {
            out.extend(ch.unacked(queue).into_iter().map(|u| {
                json!({"delivery_tag": u.delivery_tag, "message_tag": u.delivery_tag,
                       "consumer_tag": u.consumer_tag.as_deref().unwrap_or("Basic get"),
                       "unacked_for_seconds": now.saturating_sub(u.delivered_at) / 1000,
                       "channel_name": channel_name(c, ch.number())})
            }));
        }
    }
    out
}

/// Cancels a consumer (LavinMQ's
/// `DELETE /api/consumers/{vhost}/{connection}/{channel}/{consumer_tag}`).
pub async fn cancel(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, conn, channel, tag)): Path<(String, String, u16, String)>,
) -> ApiResult<StatusCode> {
    s.vhost_for(&user, &vhost)?;
    let c = s
        .broker
        .connections
        .get(&conn)
        .filter(|c| c.info.vhost == vhost && visible(&user, c));
    let c = c.ok_or_else(ApiError::not_found)?;
    require_owner_or_admin(&user, &c)?;
    let ch = c.channel(channel).ok_or_else(ApiError::not_found)?;
    if !ch.cancel_consumer(&tag) {
        return Err(ApiError::not_found());
    }
    Ok(StatusCode::NO_CONTENT)
}
