//! Connection commands: list, close one, close all.

use hyper::Method;
use hyper::header::HeaderName;
use serde_json::{Value, json};

use super::{Ctx, columns};
use crate::api::{is_not_found, path};
use crate::cli::Columns;
use crate::error::CtlResult;

/// What a closed client is told when no reason is given.
const DEFAULT_REASON: &str = "Closed via lavinmqctl";

/// The header the API reads the close reason from.
const X_REASON: HeaderName = HeaderName::from_static("x-reason");

/// The connections of the vhost given with `-p`, else all of them.
async fn fetch(ctx: &Ctx) -> CtlResult<Vec<Value>> {
    match &ctx.vhost_option {
        Some(vhost) => ctx.api.get_list(&path(["vhosts", vhost, "connections"])).await,
        None => ctx.api.get_list("/api/connections").await,
    }
}

/// `list_connections [column ...]`: user, peer_host, peer_port and state by
/// default, as in LavinMQ (`name` is what `close_connection` takes).
pub async fn list(ctx: &Ctx, cols: Columns) -> CtlResult<()> {
    ctx.out.info("Listing connections ...")?;
    let conns = fetch(ctx).await?;
    ctx.out
        .table(&columns(cols, &["user", "peer_host", "peer_port", "state"]), &conns)
}

/// Asks the broker to close connection `name`, telling the client `reason`.
async fn close_one(ctx: &Ctx, name: &str, reason: &str) -> CtlResult<()> {
    let headers = [(X_REASON, reason.to_string())];
    ctx.api
        .call_raw(Method::DELETE, &path(["connections", name]), None, &headers, &[204])
        .await?;
    Ok(())
}

/// `close_connection <name> [reason]`.
pub async fn close(ctx: &Ctx, name: &str, reason: Option<&str>) -> CtlResult<()> {
    ctx.out.info(&format!("Closing connection {name} ..."))?;
    close_one(ctx, name, reason.unwrap_or(DEFAULT_REASON)).await
}

/// `close_all_connections [reason]`: closes every connection (of the vhost
/// with `-p`) and lists the ones closed. A connection that went away by
/// itself in the meantime is not an error.
pub async fn close_all(ctx: &Ctx, reason: Option<&str>) -> CtlResult<()> {
    let reason = reason.unwrap_or(DEFAULT_REASON);
    let mut closed = Vec::new();
    for conn in fetch(ctx).await? {
        let Some(name) = conn.get("name").and_then(Value::as_str) else {
            continue;
        };
        ctx.out.info(&format!("Closing connection {name} ..."))?;
        match close_one(ctx, name, reason).await {
            Ok(()) => closed.push(json!({"name": name})),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    ctx.out.table(&["name".to_string()], &closed)
}
