//! Messages over the management API, as RabbitMQ's has them:
//! `POST /api/exchanges/{vhost}/{name}/publish` routes one message like an AMQP
//! basic.publish without `mandatory` (alternate exchanges, exchange-to-exchange
//! bindings, `CC`/`BCC`, delayed exchanges and deduplication included) and
//! answers `{"routed": bool}`; `POST /api/queues/{vhost}/{name}/get` takes
//! messages like basic.get and acknowledges, requeues or rejects them as the
//! `ackmode` asks. Publishing needs write permission on the exchange, getting
//! read permission on the queue, as over AMQP.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::BytesMut;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use smallvec::SmallVec;

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use crate::core::message::Message;
use crate::core::permissions::Access;
use crate::core::table_json::{json_to_table, table_to_json};
use crate::core::topic_permissions::TopicAccess;
use crate::core::{BasicProperties, Error, FieldValue, ShortStr};

/// Longest AMQP short string (routing keys and most properties).
const SHORTSTR_MAX: usize = 255;

/// An integer given as a JSON number or a decimal string (RabbitMQ's UI sends
/// both); `None` when absent or null.
pub(super) fn int_field(v: Option<&Value>, what: &str) -> ApiResult<Option<i64>> {
    let parsed = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(t)) => t.trim().parse::<i64>().ok(),
        Some(_) => None,
    };
    parsed
        .map(Some)
        .ok_or_else(|| ApiError::bad_request(format!("{what} must be an integer")))
}

/// A short-string property given as a JSON string (a number is taken as its
/// decimal form).
fn short_property(v: &Value, key: &str) -> ApiResult<ShortStr> {
    let text = match v {
        Value::String(t) => t.clone(),
        Value::Number(n) => n.to_string(),
        _ => return Err(ApiError::bad_request(format!("property '{key}' must be a string"))),
    };
    if text.len() > SHORTSTR_MAX {
        return Err(ApiError::bad_request(format!(
            "property '{key}' is longer than {SHORTSTR_MAX} bytes"
        )));
    }
    Ok(ShortStr::from(text))
}

/// An octet property (`delivery_mode`, `priority`).
fn octet_property(v: &Value, key: &str) -> ApiResult<u8> {
    let n = int_field(Some(v), &format!("property '{key}'"))?.unwrap_or_default();
    u8::try_from(n).map_err(|_| ApiError::bad_request(format!("property '{key}' must be between 0 and 255")))
}

/// Message properties from the `properties` object of a publish request, with
/// RabbitMQ's names. Unknown names and null values are ignored.
pub fn properties_from_json(props: &Map<String, Value>) -> ApiResult<BasicProperties> {
    let mut p = BasicProperties::default();
    for (key, v) in props {
        if v.is_null() {
            continue;
        }
        match key.as_str() {
            "content_type" => p.content_type = Some(short_property(v, key)?),
            "content_encoding" => p.content_encoding = Some(short_property(v, key)?),
            "correlation_id" => p.correlation_id = Some(short_property(v, key)?),
            "reply_to" => p.reply_to = Some(short_property(v, key)?),
            "expiration" => p.expiration = Some(short_property(v, key)?),
            "message_id" => p.message_id = Some(short_property(v, key)?),
            "type" => p.kind = Some(short_property(v, key)?),
            "user_id" => p.user_id = Some(short_property(v, key)?),
            "app_id" => p.app_id = Some(short_property(v, key)?),
            "cluster_id" => p.cluster_id = Some(short_property(v, key)?),
            "delivery_mode" => p.delivery_mode = Some(octet_property(v, key)?),
            "priority" => p.priority = Some(octet_property(v, key)?),
            "timestamp" => {
                let n = int_field(Some(v), "property 'timestamp'")?.unwrap_or_default();
                let ts =
                    u64::try_from(n).map_err(|_| ApiError::bad_request("property 'timestamp' must not be negative"))?;
                p.timestamp = Some(ts);
            }
            "headers" => match v {
                Value::Object(_) => p.headers = Some(json_to_table(v)),
                _ => return Err(ApiError::bad_request("property 'headers' must be an object")),
            },
            _ => {}
        }
    }
    Ok(p)
}

/// Message properties in the form RabbitMQ's API returns them: only those set.
pub fn properties_to_json(p: &BasicProperties) -> Value {
    let mut m = Map::new();
    let mut short = |key: &str, v: &Option<ShortStr>| {
        if let Some(v) = v {
            m.insert(key.to_string(), json!(v.as_str()));
        }
    };
    short("content_type", &p.content_type);
    short("content_encoding", &p.content_encoding);
    short("correlation_id", &p.correlation_id);
    short("reply_to", &p.reply_to);
    short("expiration", &p.expiration);
    short("message_id", &p.message_id);
    short("type", &p.kind);
    short("user_id", &p.user_id);
    short("app_id", &p.app_id);
    short("cluster_id", &p.cluster_id);
    if let Some(h) = &p.headers {
        // An AMQP 1.0 message's original sections are the broker's own.
        let private = |k: &ShortStr| crate::wire::properties::is_private_header(k);
        if h.iter().any(|(k, _)| private(k)) {
            let rest = crate::wire::FieldTable(h.0.iter().filter(|(k, _)| !private(k)).cloned().collect());
            if !rest.is_empty() {
                m.insert("headers".into(), table_to_json(&rest));
            }
        } else {
            m.insert("headers".into(), table_to_json(h));
        }
    }
    if let Some(v) = p.delivery_mode {
        m.insert("delivery_mode".into(), json!(v));
    }
    if let Some(v) = p.priority {
        m.insert("priority".into(), json!(v));
    }
    if let Some(v) = p.timestamp {
        m.insert("timestamp".into(), json!(v));
    }
    Value::Object(m)
}

/// Body of `POST /api/exchanges/{vhost}/{name}/publish`.
#[derive(Deserialize)]
struct PublishBody {
    #[serde(default)]
    properties: Map<String, Value>,
    #[serde(default)]
    routing_key: String,
    payload: String,
    #[serde(default)]
    payload_encoding: Option<String>,
}

/// The payload bytes of a publish request.
fn decode_payload(payload: String, encoding: Option<&str>) -> ApiResult<Bytes> {
    match encoding.unwrap_or("string") {
        "string" => Ok(Bytes::from(payload.into_bytes())),
        "base64" => B64
            .decode(payload.trim())
            .map(Bytes::from)
            .map_err(|e| ApiError::bad_request(format!("payload is not valid base64: {e}"))),
        other => Err(ApiError::bad_request(format!(
            "unknown payload_encoding '{other}': expected 'string' or 'base64'"
        ))),
    }
}

/// Extra routing keys from the `CC` and `BCC` headers, as over AMQP; `BCC` is
/// removed so that consumers never see it.
fn take_cc_bcc(props: &mut BasicProperties) -> ApiResult<SmallVec<[String; 2]>> {
    let mut keys = SmallVec::new();
    let Some(headers) = props.headers.as_mut() else {
        return Ok(keys);
    };
    for name in ["CC", "BCC"] {
        match headers.get(name) {
            None => {}
            Some(FieldValue::Array(items)) => {
                for item in items {
                    let key = item
                        .as_str()
                        .ok_or_else(|| ApiError::bad_request(format!("{name} header must be a list of strings")))?;
                    keys.push(key.to_string());
                }
            }
            Some(_) => {
                return Err(ApiError::bad_request(format!(
                    "{name} header must be a list of strings"
                )));
            }
        }
    }
    headers.remove("BCC");
    Ok(keys)
}

/// Waits until everything written so far is on disk (when syncing is on).
async fn wait_for_sync(s: &HttpState) -> ApiResult<()> {
    if !s.broker.sync.enabled() {
        return Ok(());
    }
    match super::replicated::group_commit(&s.broker).await {
        true => Ok(()),
        false => Err(ApiError::from(Error::Internal(
            "cannot sync the message to disk".into(),
        ))),
    }
}

/// Publishes one message to an exchange (`amq.default` names the default
/// exchange) and answers whether any queue got it.
pub async fn publish(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let v = s.vhost_for(&user, &vhost)?;
    let name = if name == "amq.default" { String::new() } else { name };
    // RabbitMQ answers 400 with the AMQP error text for a missing exchange.
    let exchange = v
        .exchange(&name)
        .ok_or_else(|| ApiError::bad_request(format!("404 NOT_FOUND - no exchange '{name}' in vhost '{}'", v.name)))?;
    user.check(&s, &v.name, Access::Write, "exchange", &name)?;
    if exchange.internal {
        return Err(ApiError::forbidden(format!(
            "cannot publish to internal exchange '{name}' in vhost '{}'",
            v.name
        )));
    }
    let body: PublishBody = super::body::parse(&body)?;
    if body.routing_key.len() > SHORTSTR_MAX {
        return Err(ApiError::bad_request(format!(
            "routing_key is longer than {SHORTSTR_MAX} bytes"
        )));
    }
    user.check_topic(&s, &v, TopicAccess::Write, &name, &body.routing_key)?;
    let payload = decode_payload(body.payload, body.payload_encoding.as_deref())?;
    let mut props = properties_from_json(&body.properties)?;
    if let Some(uid) = &props.user_id
        && uid.as_str() != user.name()
    {
        return Err(ApiError::bad_request(format!(
            "user_id property set to '{uid}' but authenticated user was '{}'",
            user.name()
        )));
    }
    if let Some(exp) = &props.expiration
        && exp.parse::<u64>().is_err()
    {
        return Err(ApiError::bad_request(format!(
            "invalid expiration '{exp}': not a number of milliseconds"
        )));
    }
    let extra = take_cc_bcc(&mut props)?;
    exchange.check_message(&body.routing_key, props.headers.as_ref())?;
    let mut raw = BytesMut::new();
    props
        .encode(&mut raw)
        .map_err(|e| ApiError::bad_request(format!("invalid properties: {e}")))?;
    let msg = Message {
        timestamp: Message::now_ms(),
        exchange: ShortStr::from(name.as_str()),
        routing_key: ShortStr::from(body.routing_key),
        properties: Box::new(props),
        raw_properties: Some(raw.freeze()),
        body: payload,
    };
    let mut scratch = BytesMut::new();
    let delay = exchange.hold_for(msg.properties.headers.as_ref());
    let (routed, durable) = if let Some((held, ms)) = delay {
        // Routed when released; until then it counts as routed, as over AMQP.
        held.push(&msg, ms, &mut scratch)?;
        (true, exchange.durable)
    } else {
        let extra_refs: SmallVec<[&str; 4]> = extra.iter().map(String::as_str).collect();
        let mut queues = Vec::new();
        v.route(&exchange, &msg, &extra_refs, &mut queues);
        let mut durable = false;
        for q in &queues {
            let p = q.publish(&msg, &mut scratch)?;
            durable |= q.durable;
            if p.woke {
                q.wake_consumers();
            }
        }
        (!queues.is_empty(), durable)
    };
    if durable && msg.properties.is_persistent() {
        wait_for_sync(&s).await?;
    }
    Ok(Json(json!({"routed": routed})))
}

/// What a get does with the messages it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckMode {
    /// Put them back (they are redelivered next time).
    AckRequeueTrue,
    /// Acknowledge them: they are gone.
    AckRequeueFalse,
    /// Reject them with requeue: put them back.
    RejectRequeueTrue,
    /// Reject them without requeue: dead-lettered when the queue has a DLX.
    RejectRequeueFalse,
}

impl AckMode {
    fn parse(s: &str) -> ApiResult<Self> {
        match s {
            "ack_requeue_true" => Ok(AckMode::AckRequeueTrue),
            "ack_requeue_false" => Ok(AckMode::AckRequeueFalse),
            "reject_requeue_true" => Ok(AckMode::RejectRequeueTrue),
            "reject_requeue_false" => Ok(AckMode::RejectRequeueFalse),
            other => Err(ApiError::bad_request(format!(
                "unknown ackmode '{other}': expected ack_requeue_true, ack_requeue_false, reject_requeue_true or reject_requeue_false"
            ))),
        }
    }
}

/// Body of `POST /api/queues/{vhost}/{name}/get`; `ack_mode` and the older
/// `requeue` flag are accepted besides `ackmode`.
#[derive(Deserialize, Default)]
#[serde(default)]
struct GetBody {
    count: Option<Value>,
    ackmode: Option<String>,
    ack_mode: Option<String>,
    requeue: Option<bool>,
    encoding: Option<String>,
    truncate: Option<Value>,
}

/// One message taken from the queue, copied out of the store.
struct Taken {
    exchange: String,
    routing_key: String,
    properties: Vec<u8>,
    payload: Vec<u8>,
    payload_bytes: usize,
    redelivered: bool,
    remaining: u32,
}

impl Taken {
    fn to_json(&self, base64_only: bool) -> Value {
        let props = BasicProperties::decode(&mut Bytes::copy_from_slice(&self.properties)).unwrap_or_default();
        message_json(
            &OutMessage {
                exchange: &self.exchange,
                routing_key: &self.routing_key,
                properties: &props,
                payload: &self.payload,
                payload_bytes: self.payload_bytes,
                redelivered: self.redelivered,
                message_count: u64::from(self.remaining),
            },
            base64_only,
        )
    }
}

/// A message as a get or a stream read answers it.
pub(super) struct OutMessage<'a> {
    /// Exchange it was published to.
    pub exchange: &'a str,
    /// Routing key it was published with.
    pub routing_key: &'a str,
    /// Its properties.
    pub properties: &'a BasicProperties,
    /// The body, possibly truncated.
    pub payload: &'a [u8],
    /// Length of the whole body.
    pub payload_bytes: usize,
    /// Delivered before.
    pub redelivered: bool,
    /// Messages in the queue.
    pub message_count: u64,
}

/// RabbitMQ's JSON for a message taken by a get: the payload as a string
/// when it is UTF-8 and `base64_only` is off, else in base64.
pub(super) fn message_json(m: &OutMessage<'_>, base64_only: bool) -> Value {
    let (payload, encoding) = match std::str::from_utf8(m.payload) {
        Ok(text) if !base64_only => (text.to_string(), "string"),
        _ => (B64.encode(m.payload), "base64"),
    };
    json!({"payload_bytes": m.payload_bytes, "redelivered": m.redelivered,
           "exchange": m.exchange, "routing_key": m.routing_key,
           "message_count": m.message_count, "properties": properties_to_json(m.properties),
           "payload": payload, "payload_encoding": encoding})
}

/// The `encoding` of a get or stream read: true for `base64` (every payload
/// in base64), false for `auto` (the default).
pub(super) fn base64_only(encoding: Option<&str>) -> ApiResult<bool> {
    match encoding.unwrap_or("auto") {
        "auto" => Ok(false),
        "base64" => Ok(true),
        other => Err(ApiError::bad_request(format!(
            "unknown encoding '{other}': expected 'auto' or 'base64'"
        ))),
    }
}

/// Takes up to `count` messages from a queue and returns them, then
/// acknowledges, requeues or rejects them as `ackmode` says.
pub async fn get(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let q = s.queue_for(&user, &vhost, &name, Access::Read)?;
    let body: GetBody = super::body::parse(&body)?;
    let mode = match (body.ackmode.as_deref().or(body.ack_mode.as_deref()), body.requeue) {
        (Some(m), _) => AckMode::parse(m)?,
        (None, Some(false)) => AckMode::AckRequeueFalse,
        (None, _) => AckMode::AckRequeueTrue,
    };
    let base64_only = base64_only(body.encoding.as_deref())?;
    let count = int_field(body.count.as_ref(), "count")?.unwrap_or(1).max(0);
    let truncate = int_field(body.truncate.as_ref(), "truncate")?
        .map(|n| usize::try_from(n).map_err(|_| ApiError::bad_request("truncate must not be negative")))
        .transpose()?;
    q.check_owner(0)?;
    if q.is_stream() {
        return Err(ApiError::bad_request(format!(
            "basic.get not supported by stream queues queue '{}' in vhost '{}'",
            q.name, q.vhost
        )));
    }
    q.check_open()?;
    let no_ack = mode == AckMode::AckRequeueFalse;
    let mut taken = Vec::new();
    let mut positions = Vec::new();
    for _ in 0..count {
        let found = q.get(no_ack, |m, pos, redelivered, remaining| {
            let keep = truncate.unwrap_or(usize::MAX).min(m.body.len());
            positions.push(pos);
            taken.push(Taken {
                exchange: m.exchange.to_string(),
                routing_key: m.routing_key.to_string(),
                properties: m.properties.to_vec(),
                payload: m.body[..keep].to_vec(),
                payload_bytes: m.body.len(),
                redelivered,
                remaining,
            });
        });
        if !found {
            break;
        }
    }
    match mode {
        AckMode::AckRequeueFalse => {}
        AckMode::AckRequeueTrue | AckMode::RejectRequeueTrue => q.requeue(positions),
        AckMode::RejectRequeueFalse => q.reject(positions),
    }
    Ok(Json(Value::Array(
        taken.iter().map(|t| t.to_json(base64_only)).collect(),
    )))
}
