//! `POST /api/queues/{vhost}/{name}/stream`: reads a stream queue from an
//! offset without consuming anything, as LavinMQ's UI does to browse a
//! stream. No reader is attached and no consumer offset is tracked; the
//! messages stay for every consumer.
//!
//! The body is `{"offset": ..., "count": n, "encoding": "auto"|"base64",
//! "truncate": n}`, all optional. `offset` is `"first"` (the default),
//! `"last"`, `"next"` (nothing yet: only later messages would follow) or a
//! message offset, as a JSON number or a decimal string; an offset before the
//! oldest kept message starts at that message, one past the end reads
//! nothing. `count` (default 1, negative read as 0) caps the messages
//! returned. The answer is a JSON array shaped like the answer of
//! `POST /api/queues/{vhost}/{name}/get`, each message with its offset in
//! `properties.headers["x-stream-offset"]`, as stream consumers get it.
//! A queue that is not a stream is 404, as in LavinMQ; reading needs read
//! permission on the queue.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use super::messages::{OutMessage, base64_only, int_field, message_json};
use crate::core::permissions::Access;
use crate::core::stream::StartAt;
use crate::core::{BasicProperties, FieldTable, FieldValue};

/// Messages copied per hold of the queue lock, so that a long read does not
/// keep publishers waiting.
const BATCH: usize = 256;

/// Body of a stream read.
#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamBody {
    offset: Option<Value>,
    count: Option<Value>,
    encoding: Option<String>,
    truncate: Option<Value>,
}

/// Where a read starts, from the `offset` of the body.
fn start_at(v: Option<&Value>) -> ApiResult<StartAt> {
    let invalid = |shown: &dyn std::fmt::Display| {
        ApiError::bad_request(format!(
            "invalid offset {shown}: expected \"first\", \"last\", \"next\" or a message offset (0 or more)"
        ))
    };
    match v {
        None | Some(Value::Null) => Ok(StartAt::First),
        Some(Value::Number(n)) => n.as_u64().map(StartAt::Offset).ok_or_else(|| invalid(n)),
        Some(Value::String(s)) => match s.as_str() {
            "first" => Ok(StartAt::First),
            "last" => Ok(StartAt::Last),
            "next" => Ok(StartAt::Next),
            digits if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => digits
                .parse()
                .map(StartAt::Offset)
                .map_err(|_| invalid(&format!("'{s}'"))),
            _ => Err(invalid(&format!("'{s}'"))),
        },
        Some(other) => Err(invalid(other)),
    }
}

/// One message copied out of the stream.
struct Read {
    offset: u64,
    exchange: String,
    routing_key: String,
    properties: Vec<u8>,
    payload: Vec<u8>,
    payload_bytes: usize,
}

/// Answers up to `count` messages of a stream queue from `offset`, leaving
/// them in the stream.
pub async fn read(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((vhost, name)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let q = s.queue_for(&user, &vhost, &name, Access::Read)?;
    if !q.is_stream() {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            error: "Object Not Found",
            reason: format!("queue '{}' in vhost '{}' is not a stream", q.name, q.vhost),
        });
    }
    let body: StreamBody = super::body::parse(&body)?;
    let start = start_at(body.offset.as_ref())?;
    let count = int_field(body.count.as_ref(), "count")?.unwrap_or(1).max(0);
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    let base64_only = base64_only(body.encoding.as_deref())?;
    let truncate = int_field(body.truncate.as_ref(), "truncate")?
        .map(|n| usize::try_from(n).map_err(|_| ApiError::bad_request("truncate must not be negative")))
        .transpose()?;
    // Offsets below the one asked for are skipped, as for a consumer whose
    // start offset lies past the end when it attaches.
    let from = match start {
        StartAt::Offset(o) => o,
        _ => 0,
    };
    let mut read: Vec<Read> = Vec::new();
    let mut cursor = None;
    let mut message_count = 0;
    while read.len() < count {
        let mut st = q.lock();
        if st.deleted {
            return Err(ApiError::not_found());
        }
        let Some(stream) = st.stream.as_mut() else { break };
        message_count = stream.store.len();
        let mut c = match cursor {
            Some(c) => c,
            None => stream.cursor_for(&start),
        };
        let mut at_end = false;
        let batch_end = read.len().saturating_add(BATCH).min(count);
        while read.len() < batch_end {
            let Some((offset, _ts, at)) = stream.store.read(&mut c) else {
                at_end = true;
                break;
            };
            if offset < from {
                continue;
            }
            let Some(view) = stream.store.view(at) else { continue };
            let keep = truncate.unwrap_or(usize::MAX).min(view.body.len());
            read.push(Read {
                offset,
                exchange: view.exchange.to_string(),
                routing_key: view.routing_key.to_string(),
                properties: view.properties.to_vec(),
                payload: view.body[..keep].to_vec(),
                payload_bytes: view.body.len(),
            });
        }
        cursor = Some(c);
        drop(st);
        if at_end {
            break;
        }
    }
    let messages = read
        .iter()
        .map(|m| {
            let mut props = BasicProperties::decode(&mut Bytes::copy_from_slice(&m.properties)).unwrap_or_default();
            props.headers.get_or_insert_with(FieldTable::new).insert(
                "x-stream-offset",
                FieldValue::I64(i64::try_from(m.offset).unwrap_or(i64::MAX)),
            );
            message_json(
                &OutMessage {
                    exchange: &m.exchange,
                    routing_key: &m.routing_key,
                    properties: &props,
                    payload: &m.payload,
                    payload_bytes: m.payload_bytes,
                    redelivered: false,
                    message_count,
                },
                base64_only,
            )
        })
        .collect();
    Ok(Json(Value::Array(messages)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn offsets_as_lavinmq_takes_them_and_numbers() {
        assert_eq!(start_at(None).ok(), Some(StartAt::First));
        assert_eq!(start_at(Some(&json!("last"))).ok(), Some(StartAt::Last));
        assert_eq!(start_at(Some(&json!("next"))).ok(), Some(StartAt::Next));
        assert_eq!(start_at(Some(&json!("42"))).ok(), Some(StartAt::Offset(42)));
        assert_eq!(start_at(Some(&json!(7))).ok(), Some(StartAt::Offset(7)));
        for bad in [json!(-1), json!(1.5), json!("-3"), json!("soon"), json!(""), json!([1])] {
            assert!(start_at(Some(&bad)).is_err(), "{bad} accepted");
        }
    }
}
