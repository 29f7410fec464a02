//! Vhost commands: add, delete, list, and set limits.

use hyper::Method;
use serde_json::{Value, json};

use super::{Ctx, columns};
use crate::api::path;
use crate::cli::Columns;
use crate::error::{CtlError, CtlResult};

/// The limits `set_vhost_limits` knows, by their JSON names.
const LIMITS: [&str; 2] = ["max-connections", "max-queues"];

/// `list_vhosts [column ...]`: names by default.
pub async fn list(ctx: &Ctx, cols: Columns) -> CtlResult<()> {
    ctx.out.info("Listing vhosts ...")?;
    let vhosts = ctx.api.get_list("/api/vhosts").await?;
    ctx.out.table(&columns(cols, &["name"]), &vhosts)
}

/// `add_vhost <vhost>`.
pub async fn add(ctx: &Ctx, vhost: &str) -> CtlResult<()> {
    ctx.api
        .call(Method::PUT, &path(["vhosts", vhost]), None, &[201, 204])
        .await?;
    Ok(())
}

/// `delete_vhost <vhost>`.
pub async fn delete(ctx: &Ctx, vhost: &str) -> CtlResult<()> {
    ctx.api
        .call(Method::DELETE, &path(["vhosts", vhost]), None, &[204])
        .await?;
    Ok(())
}

/// `set_vhost_limits <json>`, e.g. `{"max-queues":10}`: each limit named is
/// set in the vhost (-p).
pub async fn set_limits(ctx: &Ctx, json: &str) -> CtlResult<()> {
    let limits = parse_limits(json)?;
    for (name, value) in limits {
        let body = json!({"value": value});
        ctx.api
            .call(
                Method::PUT,
                &path(["vhost-limits", ctx.vhost(), name]),
                Some(&body),
                &[204],
            )
            .await?;
    }
    Ok(())
}

/// The vhost limits in `json`, checked before anything is sent.
fn parse_limits(json: &str) -> CtlResult<Vec<(&'static str, i64)>> {
    parse_named_limits("set_vhost_limits", &LIMITS, json)
        .map_err(|e| e.unwrap_or_else(|| CtlError::Usage("max-queues or max-connections required".into())))
}

/// The limits named in `known` that `json` (an object) sets, for command
/// `command`; `Err(None)` when it sets none.
pub(super) fn parse_named_limits(
    command: &str,
    known: &[&'static str],
    json: &str,
) -> Result<Vec<(&'static str, i64)>, Option<CtlError>> {
    let usage = |m: String| Some(CtlError::Usage(m));
    let value: Value = serde_json::from_str(json).map_err(|e| usage(format!("{command}: invalid JSON: {e}")))?;
    let example = known.first().copied().unwrap_or_default();
    let obj = value.as_object().ok_or_else(|| {
        usage(format!(
            "{command}: expected a JSON object such as {{\"{example}\":10}}"
        ))
    })?;
    if let Some(unknown) = obj.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(usage(format!(
            "{command}: unknown limit '{unknown}', expected {}",
            known.join(" or ")
        )));
    }
    let mut out = Vec::new();
    for &name in known {
        if let Some(v) = obj.get(name) {
            let n = v
                .as_i64()
                .ok_or_else(|| usage(format!("{command}: {name} must be an integer, got {v}")))?;
            out.push((name, n));
        }
    }
    if out.is_empty() {
        return Err(None);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_limits_and_refuses_the_rest() {
        assert_eq!(
            parse_limits(r#"{"max-queues":10,"max-connections":-1}"#).ok(),
            Some(vec![("max-connections", -1), ("max-queues", 10)])
        );
        assert!(parse_limits("{}").is_err());
        assert!(parse_limits(r#"{"max-queues":"x"}"#).is_err());
        assert!(parse_limits(r#"{"max-channels":1}"#).is_err());
        assert!(parse_limits("[1]").is_err());
        assert!(parse_limits("nope").is_err());
    }
}
