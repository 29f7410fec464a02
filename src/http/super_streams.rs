//! `PUT /api/stream/super-streams/{vhost}/{name}`: RabbitMQ's management
//! endpoint for creating a super stream, as its UI and management clients
//! call it. The body names either a number of `partitions` (streams
//! `NAME-0`..`NAME-(n-1)`, bound with keys `0`..`n-1`) or comma-separated
//! `binding-keys` (a stream `NAME-KEY` per key), never both, and optionally
//! the partitions' `arguments` (`max-length-bytes`, `max-age`,
//! `stream-max-segment-size-bytes`, ...).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;

use super::HttpState;
use super::auth::Authed;
use super::body::JsonBody;
use super::error::{ApiError, ApiResult};
use crate::core::permissions::Access;
use crate::core::super_stream::{self, SuperStreamError};

/// The most partitions one super stream may have, as in RabbitMQ.
const MAX_PARTITIONS: u64 = 1000;

/// The partition streams and their binding keys that a body asks for.
fn partitions_of(name: &str, body: &Value) -> Result<(Vec<String>, Vec<String>), ApiError> {
    let count = body.get("partitions").filter(|v| !v.is_null());
    let keys = body.get("binding-keys").filter(|v| !v.is_null());
    let keys: Vec<String> = match (count, keys) {
        (None, None) => return Err(ApiError::bad_request("Must specify partitions or binding keys")),
        (Some(_), Some(_)) => return Err(ApiError::bad_request("Specify partitions or binding keys, not both")),
        (Some(count), None) => {
            // A number, or a number in a string, as RabbitMQ coerces it.
            let n = match count {
                Value::Number(n) => n.as_i64(),
                Value::String(s) => s.trim().parse::<i64>().ok(),
                _ => None,
            }
            .ok_or_else(|| ApiError::bad_request("The partitions must be a number"))?;
            if n < 1 {
                return Err(ApiError::bad_request("The partition number must be greater than 0"));
            }
            if n as u64 > MAX_PARTITIONS {
                return Err(ApiError::bad_request(format!(
                    "The partition number must be at most {MAX_PARTITIONS}"
                )));
            }
            (0..n).map(|i| i.to_string()).collect()
        }
        (None, Some(keys)) => {
            let Some(keys) = keys.as_str() else {
                return Err(ApiError::bad_request(
                    "The binding keys must be a comma-separated string",
                ));
            };
            keys.split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_owned)
                .collect()
        }
    };
    if keys.is_empty() {
        return Err(ApiError::bad_request("Must specify partitions or binding keys"));
    }
    let streams = keys.iter().map(|k| format!("{name}-{k}")).collect();
    Ok((streams, keys))
}

/// The partitions' arguments as text, as the stream protocol carries them.
fn arguments_of(body: &Value) -> Result<Vec<(String, String)>, ApiError> {
    let Some(args) = body.get("arguments").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let Some(args) = args.as_object() else {
        return Err(ApiError::bad_request("arguments must be an object"));
    };
    args.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            Value::Number(n) => Ok((k.clone(), n.to_string())),
            Value::Bool(b) => Ok((k.clone(), b.to_string())),
            _ => Err(ApiError::bad_request(format!(
                "argument '{k}' must be a string or a number"
            ))),
        })
        .collect()
}

/// Creates a super stream: its exchange, its partition streams and their
/// bindings (201; 400 when it or a partition exists, as RabbitMQ answers).
pub async fn create(
    State(s): State<Arc<HttpState>>,
    user: Authed,
    Path((v, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult<StatusCode> {
    let v = s.vhost_for(&user, &v)?;
    let (streams, keys) = partitions_of(&name, &body)?;
    if !super_stream::names_allowed(&name, &streams) {
        return Err(ApiError::bad_request(format!("invalid super stream name '{name}'")));
    }
    user.check(&s, &v.name, Access::Configure, "exchange", &name)?;
    for stream in &streams {
        user.check(&s, &v.name, Access::Configure, "queue", stream)?;
    }
    let args = super_stream::stream_arguments(&arguments_of(&body)?).map_err(ApiError::bad_request)?;
    match super_stream::create(&v, &name, &streams, &keys, &args, 0) {
        Ok(()) => Ok(StatusCode::CREATED),
        Err(SuperStreamError::Core(e)) => Err(e.into()),
        Err(e) => Err(ApiError::bad_request(e.to_string())),
    }
}
