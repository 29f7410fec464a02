//! `/api/overview`, `/api/whoami` and `/api/aliveness-test`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};

/// Totals across the vhosts the user may see.
pub async fn overview(State(s): State<Arc<HttpState>>, user: Authed) -> Json<Value> {
    let (mut queues, mut exchanges, mut consumers, mut ready, mut unacked) = (0, 0, 0, 0, 0);
    for v in s.visible_vhosts(&user) {
        exchanges += v.exchanges().len();
        for q in v.queues() {
            let st = q.stats();
            queues += 1;
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
        "node": "lavinmq@localhost",
        "object_totals": {"queues": queues, "exchanges": exchanges, "consumers": consumers},
        "queue_totals": {"messages": ready + unacked, "messages_ready": ready, "messages_unacknowledged": unacked},
    }))
}

/// The authenticated user and its tags.
pub async fn whoami(user: Authed) -> Json<Value> {
    Json(json!({"name": user.0.name, "tags": user.0.tags}))
}

/// Declares a queue, publishes to it and gets the message back, as RabbitMQ does.
pub async fn aliveness(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path(vhost): Path<String>,
) -> ApiResult<Json<Value>> {
    let v = s.vhost_for(&user, &vhost)?;
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
