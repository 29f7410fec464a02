//! `/api/overview`, `/api/whoami` and `/api/aliveness-test`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use crate::core::permissions::Access;
use crate::core::stats_sampler::{Totals, accumulate};

/// The exchange types the broker declares.
const EXCHANGE_TYPES: [&str; 7] = [
    "direct",
    "fanout",
    "topic",
    "headers",
    "x-consistent-hash",
    "x-delayed-message",
    "x-federation-upstream",
];

/// Connections, channels and queues created and closed, with rates.
fn churn_rates(s: &HttpState) -> Value {
    let churn = &s.broker.stats.churn;
    super::stats_json::message_stats(&churn.values(), &churn.rates)
}

/// The exchange types, as the overview and nodes list them.
pub fn exchange_types() -> Value {
    EXCHANGE_TYPES
        .iter()
        .map(|t| json!({"name": t, "description": "", "enabled": true}))
        .collect()
}

/// The bound listeners, as the overview and nodes list them.
pub fn listeners(s: &HttpState) -> Value {
    s.listeners
        .iter()
        .map(|(protocol, addr)| {
            json!({"node": &*crate::core::node::name(), "protocol": protocol, "ip_address": addr.ip().to_string(), "port": addr.port()})
        })
        .collect()
}

/// The HTTP listeners as RabbitMQ lists its management contexts (the port
/// as a string, as RabbitMQ has it).
fn contexts(s: &HttpState) -> Value {
    s.listeners
        .iter()
        .filter(|(protocol, _)| protocol.starts_with("http"))
        .map(|(protocol, addr)| {
            json!({"node": &*crate::core::node::name(), "description": "LavinMQ Management", "path": "/",
                   "port": addr.port().to_string(), "ssl": *protocol == "https"})
        })
        .collect()
}

/// Totals across the vhosts the user may see.
pub async fn overview(State(s): State<Arc<HttpState>>, user: Authed) -> Json<Value> {
    let (mut queues, mut exchanges, mut bindings, mut consumers, mut ready, mut unacked) = (0, 0, 0usize, 0, 0, 0);
    let visible = s.visible_vhosts(&user);
    // Totals over all vhosts when the user sees them all, else over its own.
    let mut values: Vec<(&'static str, u64)> = Vec::new();
    let mut rates: Vec<(&'static str, f64)> = Vec::new();
    let mut add = |t: &Totals| {
        let vals = t.values();
        accumulate(&mut rates, vals.iter().map(|&(n, _)| (n, t.rates.rate(n))));
        accumulate(&mut values, vals);
    };
    if user.sees_all() {
        add(&s.broker.stats.overview);
    } else {
        for v in &visible {
            if let Some(t) = s.broker.stats.vhost(&v.name) {
                add(&t);
            }
        }
    }
    let (connections, channels) = s
        .broker
        .connections
        .list()
        .iter()
        .filter(|c| user.sees_all() || c.info.user == user.name())
        .fold((0, 0), |(n, ch), c| (n + 1, ch + c.channel_count()));
    let stat = |name: &str| rates.iter().find(|(n, _)| *n == name).map_or(0.0, |&(_, r)| r);
    let mut message_stats = serde_json::Map::new();
    for (name, v) in &values {
        if name.starts_with("messages") {
            continue;
        }
        message_stats.insert(name.to_string(), json!(v));
        message_stats.insert(format!("{name}_details"), json!({"rate": stat(name)}));
    }
    for v in visible {
        let list = v.exchanges();
        exchanges += list.len();
        bindings += list.iter().map(|e| e.binding_count()).sum::<usize>();
        for q in v.queues() {
            let st = q.stats();
            queues += 1;
            // Every queue's implicit binding to the default exchange counts,
            // as `/api/bindings` lists it.
            bindings += 1;
            consumers += st.consumers;
            ready += st.ready;
            unacked += st.unacked;
        }
    }
    Json(json!({
        "product_name": "LavinMQ",
        "product_version": env!("CARGO_PKG_VERSION"),
        "management_version": env!("CARGO_PKG_VERSION"),
        "rabbitmq_version": "3.10.0",
        // No Erlang runs here: RabbitMQ's clients read these as strings,
        // and an empty one claims nothing.
        "erlang_version": "",
        "erlang_full_version": "",
        "cluster_name": &*crate::core::node::name(),
        "node": &*crate::core::node::name(),
        "contexts": contexts(&s),
        "rates_mode": "basic",
        "statistics_db_event_queue": 0,
        "disable_stats": false,
        "enable_queue_totals": false,
        "is_op_policy_updating_enabled": true,
        "sample_retention_policies": {
            "global": [600, 3600, 28800, 86400],
            "basic": [600, 3600],
            "detailed": [600]
        },
        "exchange_types": exchange_types(),
        "listeners": listeners(&s),
        "object_totals": {"queues": queues, "exchanges": exchanges, "bindings": bindings, "consumers": consumers,
                          "connections": connections, "channels": channels},
        "queue_totals": {"messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked,
                         "messages_details": {"rate": stat("messages")},
                         "messages_ready_details": {"rate": stat("messages_ready")},
                         "messages_unacknowledged_details": {"rate": stat("messages_unacknowledged")}},
        "message_stats": message_stats,
        "churn_rates": if user.sees_all() { churn_rates(&s) } else { json!({}) },
    }))
}

/// The authenticated user and its tags.
pub async fn whoami(user: Authed) -> Json<Value> {
    Json(json!({"name": user.name(), "tags": user.0.tags()}))
}

/// Declares a queue, publishes to it and gets the message back, as RabbitMQ does.
pub async fn aliveness(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(vhost): Path<String>,
) -> ApiResult<Json<Value>> {
    let v = s.vhost_for(&user, &vhost)?;
    for access in [Access::Configure, Access::Write, Access::Read] {
        user.check(&s, &v.name, access, "queue", "aliveness-test")?;
    }
    let opts = crate::core::vhost::QueueOptions::default();
    v.declare_queue("aliveness-test", &opts, Default::default(), 0)?;
    let q = v.get_queue("aliveness-test")?;
    let msg = crate::core::message::Message {
        timestamp: crate::core::message::Message::now_ms(),
        exchange: "".into(),
        routing_key: "aliveness-test".into(),
        properties: Box::default(),
        raw_properties: None,
        body: bytes::Bytes::from_static(b"test_message"),
    };
    q.publish(&msg, &mut bytes::BytesMut::new())?;
    let mut ok = false;
    q.get(true, |m, _, _, _| ok = m.body == b"test_message");
    if !ok {
        return Err(ApiError::bad_request("aliveness test failed"));
    }
    Ok(Json(json!({"status": "ok"})))
}
