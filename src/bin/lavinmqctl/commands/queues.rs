//! Queue commands: list, create (with LavinMQ's argument flags), delete,
//! purge, pause, resume and restart.

use hyper::Method;
use serde_json::{Map, Value, json};

use super::{Ctx, columns};
use crate::api::path;
use crate::cli::{Columns, CreateQueue, DeleteQueue};
use crate::error::CtlResult;

/// `list_queues [column ...]` in the vhost: name and messages by default.
pub async fn list(ctx: &Ctx, cols: Columns) -> CtlResult<()> {
    ctx.out.info(&format!("Listing queues for vhost {} ...", ctx.vhost()))?;
    let queues = ctx.api.get_list(&path(["queues", ctx.vhost()])).await?;
    ctx.out.table(&columns(cols, &["name", "messages"]), &queues)
}

/// The queue arguments `create_queue`'s flags stand for.
fn arguments(args: &CreateQueue) -> Map<String, Value> {
    let mut out = Map::new();
    let numbers = [
        ("x-expires", args.expires),
        ("x-max-length", args.max_length),
        ("x-message-ttl", args.message_ttl),
        ("x-delivery-limit", args.delivery_limit),
    ];
    for (key, value) in numbers {
        if let Some(v) = value {
            out.insert(key.into(), json!(v));
        }
    }
    if args.reject_on_overflow {
        out.insert("x-overflow".into(), json!("reject-publish"));
    }
    if let Some(dlx) = &args.dead_letter_exchange {
        out.insert("x-dead-letter-exchange".into(), json!(dlx));
    }
    if let Some(key) = &args.dead_letter_routing_key {
        out.insert("x-dead-letter-routing-key".into(), json!(key));
    }
    if args.stream_queue {
        out.insert("x-queue-type".into(), json!("stream"));
    }
    out
}

/// `create_queue <name> [flags]`: transient unless `--durable`, as in LavinMQ.
pub async fn create(ctx: &Ctx, args: &CreateQueue) -> CtlResult<()> {
    let body = json!({
        "durable": args.durable,
        "auto_delete": args.auto_delete,
        "arguments": arguments(args),
    });
    ctx.api
        .call(
            Method::PUT,
            &path(["queues", ctx.vhost(), &args.name]),
            Some(&body),
            &[201, 204],
        )
        .await?;
    Ok(())
}

/// `delete_queue <name> [--if-unused] [--if-empty]`.
pub async fn delete(ctx: &Ctx, args: &DeleteQueue) -> CtlResult<()> {
    let mut target = path(["queues", ctx.vhost(), &args.name]);
    let conditions: Vec<&str> = [("if-unused=true", args.if_unused), ("if-empty=true", args.if_empty)]
        .into_iter()
        .filter_map(|(c, on)| on.then_some(c))
        .collect();
    if !conditions.is_empty() {
        target = format!("{target}?{}", conditions.join("&"));
    }
    ctx.api.call(Method::DELETE, &target, None, &[204]).await?;
    Ok(())
}

/// `purge_queue <name>`: drops the queue's ready messages.
pub async fn purge(ctx: &Ctx, queue: &str) -> CtlResult<()> {
    let target = path(["queues", ctx.vhost(), queue, "contents"]);
    ctx.api.call(Method::DELETE, &target, None, &[204]).await?;
    Ok(())
}

/// `pause_queue <name>`: stops deliveries to the queue's consumers.
pub async fn pause(ctx: &Ctx, queue: &str) -> CtlResult<()> {
    let target = path(["queues", ctx.vhost(), queue, "pause"]);
    ctx.api.call(Method::PUT, &target, None, &[204]).await?;
    Ok(())
}

/// `resume_queue <name>`: restarts deliveries of a paused queue.
pub async fn resume(ctx: &Ctx, queue: &str) -> CtlResult<()> {
    let target = path(["queues", ctx.vhost(), queue, "resume"]);
    ctx.api.call(Method::PUT, &target, None, &[204]).await?;
    Ok(())
}

/// `restart_queue <name>`: reopens a queue closed because its files could not
/// be opened, once they are fixed.
pub async fn restart(ctx: &Ctx, queue: &str) -> CtlResult<()> {
    let target = path(["queues", ctx.vhost(), queue, "restart"]);
    ctx.api.call(Method::PUT, &target, None, &[204]).await?;
    Ok(())
}
