//! Shovel commands: list (with state), add, delete and restart. A shovel is
//! a `shovel` parameter; its state comes from `/api/shovels`.

use hyper::Method;
use serde_json::{Value, json};

use super::{Ctx, columns};
use crate::api::path;
use crate::cli::Columns;
use crate::error::{CtlError, CtlResult};

/// `list_shovels [column ...]` in the vhost.
pub async fn list(ctx: &Ctx, cols: Columns) -> CtlResult<()> {
    ctx.out
        .info(&format!("Listing shovels for vhost {} ...", ctx.vhost()))?;
    let shovels = ctx.api.get_list(&path(["shovels", ctx.vhost()])).await?;
    let default = [
        "name",
        "vhost",
        "state",
        "src_uri",
        "dest_uri",
        "message_count",
        "reason",
    ];
    ctx.out.table(&columns(cols, &default), &shovels)
}

/// `add_shovel <name> <definition>`.
pub async fn add(ctx: &Ctx, name: &str, definition: &str) -> CtlResult<()> {
    let value: Value = serde_json::from_str(definition)
        .map_err(|e| CtlError::Usage(format!("add_shovel: the definition is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(CtlError::Usage(
            "add_shovel: the definition must be a JSON object such as {\"src-uri\":\"amqp://\",...}".into(),
        ));
    }
    let target = path(["parameters", "shovel", ctx.vhost(), name]);
    ctx.api
        .call(Method::PUT, &target, Some(&json!({ "value": value })), &[201, 204])
        .await?;
    Ok(())
}

/// `delete_shovel <name>`.
pub async fn delete(ctx: &Ctx, name: &str) -> CtlResult<()> {
    let target = path(["parameters", "shovel", ctx.vhost(), name]);
    ctx.api.call(Method::DELETE, &target, None, &[204]).await?;
    Ok(())
}

/// `restart_shovel <name>`.
pub async fn restart(ctx: &Ctx, name: &str) -> CtlResult<()> {
    let target = path(["shovels", "vhost", ctx.vhost(), name, "restart"]);
    ctx.api.call(Method::DELETE, &target, None, &[204]).await?;
    Ok(())
}
