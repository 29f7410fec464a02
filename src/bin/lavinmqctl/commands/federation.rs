//! Federation commands, as LavinMQ's: list, add and delete upstreams (the
//! `federation-upstream` parameters of the vhost), and RabbitMQ's
//! `federation_status` listing the links with their state.

use hyper::Method;
use serde_json::{Map, Value, json};

use super::{Ctx, columns};
use crate::api::path;
use crate::cli::{AddFederation, Columns};
use crate::error::{CtlError, CtlResult};

/// `list_federations [column ...]`: the upstreams of the vhost.
pub async fn list(ctx: &Ctx, cols: Columns) -> CtlResult<()> {
    ctx.out
        .info(&format!("Listing federation upstreams for vhost {} ...", ctx.vhost()))?;
    let params = ctx
        .api
        .get_list(&path(["parameters", "federation-upstream", ctx.vhost()]))
        .await?;
    let rows: Vec<Value> = params
        .iter()
        .map(|p| {
            let mut row = p["value"].as_object().cloned().unwrap_or_default();
            row.insert("name".into(), p["name"].clone());
            row.insert("vhost".into(), p["vhost"].clone());
            Value::Object(row)
        })
        .collect();
    let default = [
        "name",
        "uri",
        "ack-mode",
        "max-hops",
        "prefetch-count",
        "expires",
        "message-ttl",
    ];
    ctx.out.table(&columns(cols, &default), &rows)
}

/// `add_federation <name> --uri=<uri> [--option=value ...]`.
pub async fn add(ctx: &Ctx, a: &AddFederation) -> CtlResult<()> {
    let Some(uri) = &a.upstream_uri else {
        return Err(CtlError::Usage(
            "add_federation: --uri=<amqp URI of the upstream> is required".into(),
        ));
    };
    let mut value = Map::new();
    value.insert("uri".into(), json!(uri));
    let numbers = [
        ("expires", a.expires.map(|s| s * 1000)),
        ("message-ttl", a.message_ttl),
        ("max-hops", a.max_hops),
        ("prefetch-count", a.prefetch_count),
        ("reconnect-delay", a.reconnect_delay),
    ];
    for (key, v) in numbers {
        if let Some(v) = v {
            value.insert(key.into(), json!(v));
        }
    }
    let texts = [
        ("ack-mode", &a.ack_mode),
        ("consumer-tag", &a.consumer_tag),
        ("exchange", &a.exchange),
        ("queue", &a.queue),
    ];
    for (key, v) in texts {
        if let Some(v) = v {
            value.insert(key.into(), json!(v));
        }
    }
    let target = path(["parameters", "federation-upstream", ctx.vhost(), &a.name]);
    ctx.api
        .call(Method::PUT, &target, Some(&json!({ "value": value })), &[201, 204])
        .await?;
    Ok(())
}

/// `delete_federation <name>`.
pub async fn delete(ctx: &Ctx, name: &str) -> CtlResult<()> {
    let target = path(["parameters", "federation-upstream", ctx.vhost(), name]);
    ctx.api.call(Method::DELETE, &target, None, &[204]).await?;
    Ok(())
}

/// `federation_status [column ...]`: the links of the vhost and their state.
pub async fn status(ctx: &Ctx, cols: Columns) -> CtlResult<()> {
    ctx.out
        .info(&format!("Listing federation links for vhost {} ...", ctx.vhost()))?;
    let links = ctx.api.get_list(&path(["federation-links", ctx.vhost()])).await?;
    let default = ["upstream", "type", "resource", "status", "uri", "error"];
    ctx.out.table(&columns(cols, &default), &links)
}
