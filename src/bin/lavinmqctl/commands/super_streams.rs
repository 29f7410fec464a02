//! Super stream commands, as RabbitMQ's `rabbitmq-streams` has them:
//! `add_super_stream` (through the management API's super stream endpoint)
//! and `delete_super_stream` (its partition streams, then its exchange).

use hyper::Method;
use serde_json::{Map, Value, json};

use super::Ctx;
use crate::api::path;
use crate::cli::AddSuperStream;
use crate::error::{CtlError, CtlResult};
use lavinmq::core::super_stream::SUPER_STREAM_ARGUMENT;

/// `add_super_stream <name> [--partitions N | --routing-keys a,b] [flags]`:
/// three partitions unless told otherwise, as in RabbitMQ.
pub async fn add(ctx: &Ctx, args: &AddSuperStream) -> CtlResult<()> {
    let mut arguments = Map::new();
    if let Some(n) = args.max_length_bytes {
        arguments.insert("max-length-bytes".into(), json!(n));
    }
    if let Some(age) = &args.max_age {
        arguments.insert("max-age".into(), json!(age));
    }
    if let Some(n) = args.stream_max_segment_size_bytes {
        arguments.insert("stream-max-segment-size-bytes".into(), json!(n));
    }
    let mut body = json!({ "arguments": arguments });
    match &args.routing_keys {
        Some(keys) => body["binding-keys"] = json!(keys),
        None => body["partitions"] = json!(args.partitions.unwrap_or(3)),
    }
    let target = path(["stream", "super-streams", ctx.vhost(), &args.name]);
    ctx.api.call(Method::PUT, &target, Some(&body), &[201, 204]).await?;
    Ok(())
}

/// `delete_super_stream <name>`: the streams its exchange routes to, then
/// the exchange.
pub async fn delete(ctx: &Ctx, name: &str) -> CtlResult<()> {
    let exchange = ctx.api.get_json(&path(["exchanges", ctx.vhost(), name])).await?;
    if exchange["arguments"][SUPER_STREAM_ARGUMENT] != Value::Bool(true) {
        return Err(CtlError::Api {
            status: hyper::StatusCode::BAD_REQUEST,
            reason: format!("'{name}' is not a super stream"),
        });
    }
    let source = path(["exchanges", ctx.vhost(), name, "bindings", "source"]);
    for binding in ctx.api.get_list(&source).await? {
        if binding["destination_type"] == "queue"
            && let Some(stream) = binding["destination"].as_str()
        {
            let target = path(["queues", ctx.vhost(), stream]);
            ctx.api.call(Method::DELETE, &target, None, &[204, 404]).await?;
        }
    }
    ctx.api
        .call(Method::DELETE, &path(["exchanges", ctx.vhost(), name]), None, &[204])
        .await?;
    Ok(())
}
