//! Exchange commands: list, create (with LavinMQ's flags) and delete.

use hyper::Method;
use serde_json::{Map, Value, json};

use super::{Ctx, columns};
use crate::api::path;
use crate::cli::{Columns, CreateExchange};
use crate::error::CtlResult;

/// `list_exchanges [column ...]` in the vhost: name and type by default.
pub async fn list(ctx: &Ctx, cols: Columns) -> CtlResult<()> {
    ctx.out
        .info(&format!("Listing exchanges for vhost {} ...", ctx.vhost()))?;
    let exchanges = ctx.api.get_list(&path(["exchanges", ctx.vhost()])).await?;
    ctx.out.table(&columns(cols, &["name", "type"]), &exchanges)
}

/// The exchange arguments `create_exchange`'s flags stand for.
fn arguments(args: &CreateExchange) -> Map<String, Value> {
    let mut out = Map::new();
    if args.delayed {
        out.insert("x-delayed-exchange".into(), json!(true));
    }
    if let Some(ae) = &args.alternate_exchange {
        out.insert("x-alternate-exchange".into(), json!(ae));
    }
    if let Some(n) = args.persist_messages {
        out.insert("x-persist-messages".into(), json!(n));
    }
    if let Some(ms) = args.persist_ms {
        out.insert("x-persist-ms".into(), json!(ms));
    }
    out
}

/// `create_exchange <type> <name> [flags]`: transient unless `--durable`, as
/// in LavinMQ. `--delayed` travels as the `x-delayed-exchange` argument and
/// as LavinMQ's `delayed` field, so either kind of broker understands it.
pub async fn create(ctx: &Ctx, args: &CreateExchange) -> CtlResult<()> {
    let body = json!({
        "type": args.kind,
        "durable": args.durable,
        "auto_delete": args.auto_delete,
        "internal": args.internal,
        "delayed": args.delayed,
        "arguments": arguments(args),
    });
    ctx.api
        .call(
            Method::PUT,
            &path(["exchanges", ctx.vhost(), &args.name]),
            Some(&body),
            &[201, 204],
        )
        .await?;
    Ok(())
}

/// `delete_exchange <name>`.
pub async fn delete(ctx: &Ctx, name: &str) -> CtlResult<()> {
    let target = path(["exchanges", ctx.vhost(), name]);
    ctx.api.call(Method::DELETE, &target, None, &[204]).await?;
    Ok(())
}
