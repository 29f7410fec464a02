//! Policy commands: list, set and clear.

use hyper::Method;
use serde_json::{Value, json};

use super::{Ctx, columns};
use crate::api::path;
use crate::cli::{Columns, SetPolicy};
use crate::error::{CtlError, CtlResult};

/// `list_policies [column ...]` in the vhost.
pub async fn list(ctx: &Ctx, cols: Columns) -> CtlResult<()> {
    ctx.out
        .info(&format!("Listing policies for vhost {} ...", ctx.vhost()))?;
    let policies = ctx.api.get_list(&path(["policies", ctx.vhost()])).await?;
    let default = ["vhost", "name", "pattern", "apply-to", "definition", "priority"];
    ctx.out.table(&columns(cols, &default), &policies)
}

/// `set_policy <name> <pattern> <definition> [--priority N] [--apply-to X]`.
pub async fn set(ctx: &Ctx, args: &SetPolicy) -> CtlResult<()> {
    let definition: Value = serde_json::from_str(&args.definition)
        .map_err(|e| CtlError::Usage(format!("set_policy: the definition is not valid JSON: {e}")))?;
    if !definition.is_object() {
        return Err(CtlError::Usage(
            "set_policy: the definition must be a JSON object such as {\"max-length\":10}".into(),
        ));
    }
    let body = json!({
        "pattern": args.pattern,
        "definition": definition,
        "priority": args.priority,
        "apply-to": args.apply_to,
    });
    ctx.api
        .call(
            Method::PUT,
            &path(["policies", ctx.vhost(), &args.name]),
            Some(&body),
            &[201, 204],
        )
        .await?;
    Ok(())
}

/// `clear_policy <name>`.
pub async fn clear(ctx: &Ctx, name: &str) -> CtlResult<()> {
    let target = path(["policies", ctx.vhost(), name]);
    ctx.api.call(Method::DELETE, &target, None, &[204]).await?;
    Ok(())
}
