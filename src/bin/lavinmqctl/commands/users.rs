//! User commands: add, delete, list, change the password, set tags,
//! permissions and limits, and hash a password locally.

use hyper::Method;
use serde_json::{Value, json};

use super::{Ctx, columns};
use crate::api::path;
use crate::cli::Columns;
use crate::error::{CtlError, CtlResult};

/// `add_user <username> <password>`.
pub async fn add(ctx: &Ctx, username: &str, password: &str) -> CtlResult<()> {
    let body = json!({"password": password});
    ctx.api
        .call(Method::PUT, &path(["users", username]), Some(&body), &[201, 204])
        .await?;
    Ok(())
}

/// `delete_user <username>`.
pub async fn delete(ctx: &Ctx, username: &str) -> CtlResult<()> {
    ctx.api
        .call(Method::DELETE, &path(["users", username]), None, &[204])
        .await?;
    Ok(())
}

/// `list_users [column ...]`: name and tags by default.
pub async fn list(ctx: &Ctx, cols: Columns) -> CtlResult<()> {
    ctx.out.info("Listing users ...")?;
    let users = ctx.api.get_list("/api/users").await?;
    ctx.out.table(&columns(cols, &["name", "tags"]), &users)
}

/// `change_password <username> <new_password>`. The API replaces a user's
/// tags on every PUT, so the current tags are read first and sent back.
pub async fn change_password(ctx: &Ctx, username: &str, password: &str) -> CtlResult<()> {
    let user_path = path(["users", username]);
    let current = ctx.api.get_json(&user_path).await?;
    let tags = current.get("tags").cloned().unwrap_or(Value::Array(Vec::new()));
    let body = json!({"password": password, "tags": tags});
    ctx.api.call(Method::PUT, &user_path, Some(&body), &[204]).await?;
    Ok(())
}

/// `set_user_tags <username> [tag ...]`: the user keeps its password.
pub async fn set_tags(ctx: &Ctx, username: &str, tags: &[String]) -> CtlResult<()> {
    let body = json!({"tags": tags.join(",")});
    ctx.api
        .call(Method::PUT, &path(["users", username]), Some(&body), &[201, 204])
        .await?;
    Ok(())
}

/// `set_permissions <username> <configure> <write> <read>` in the vhost.
pub async fn set_permissions(ctx: &Ctx, username: &str, configure: &str, write: &str, read: &str) -> CtlResult<()> {
    let body = json!({"configure": configure, "write": write, "read": read});
    ctx.api
        .call(
            Method::PUT,
            &path(["permissions", ctx.vhost(), username]),
            Some(&body),
            &[201, 204],
        )
        .await?;
    Ok(())
}

/// `set_topic_permissions <username> <exchange> <write> <read>` in the vhost.
pub async fn set_topic_permissions(
    ctx: &Ctx,
    username: &str,
    exchange: &str,
    write: &str,
    read: &str,
) -> CtlResult<()> {
    let body = json!({"exchange": exchange, "write": write, "read": read});
    ctx.api
        .call(
            Method::PUT,
            &path(["topic-permissions", ctx.vhost(), username]),
            Some(&body),
            &[201, 204],
        )
        .await?;
    Ok(())
}

/// `clear_topic_permissions <username> [exchange]` in the vhost.
pub async fn clear_topic_permissions(ctx: &Ctx, username: &str, exchange: Option<&str>) -> CtlResult<()> {
    let mut target = path(["topic-permissions", ctx.vhost(), username]);
    if let Some(e) = exchange {
        target = format!("{target}?exchange={}", crate::percent::encode_segment(e));
    }
    ctx.api.call(Method::DELETE, &target, None, &[204]).await?;
    Ok(())
}

/// `list_topic_permissions [column ...]`: every user's in the vhost.
pub async fn list_topic_permissions(ctx: &Ctx, cols: Columns) -> CtlResult<()> {
    let vhost = ctx.vhost();
    ctx.out
        .info(&format!("Listing topic permissions for vhost \"{vhost}\" ..."))?;
    let rows = ctx.api.get_list(&path(["vhosts", vhost, "topic-permissions"])).await?;
    ctx.out
        .table(&columns(cols, &["user", "exchange", "write", "read"]), &rows)
}

/// `list_user_topic_permissions <username> [column ...]`: in every vhost.
pub async fn list_user_topic_permissions(ctx: &Ctx, username: &str, cols: Columns) -> CtlResult<()> {
    ctx.out
        .info(&format!("Listing topic permissions for user \"{username}\" ..."))?;
    let rows = ctx
        .api
        .get_list(&path(["users", username, "topic-permissions"]))
        .await?;
    ctx.out
        .table(&columns(cols, &["vhost", "exchange", "write", "read"]), &rows)
}

/// `hash_password <password>`: RabbitMQ's salted SHA-256 hash, computed here
/// without asking the broker (usable as `password_hash` in definitions).
pub fn hash_password(ctx: &Ctx, password: &str) -> CtlResult<()> {
    ctx.out.text(&lavinmq::core::user::hash_password(password))
}

/// The limits `set_user_limits` knows, by their JSON names.
const USER_LIMITS: [&str; 2] = ["max-connections", "max-channels"];

/// `set_user_limits <username> <json>`, e.g. `{"max-connections":10}`.
pub async fn set_limits(ctx: &Ctx, username: &str, json: &str) -> CtlResult<()> {
    let limits = super::vhosts::parse_named_limits("set_user_limits", &USER_LIMITS, json)
        .map_err(|e| e.unwrap_or_else(|| CtlError::Usage("max-connections or max-channels required".into())))?;
    for (name, value) in limits {
        let body = json!({"value": value});
        ctx.api
            .call(Method::PUT, &path(["user-limits", username, name]), Some(&body), &[204])
            .await?;
    }
    Ok(())
}

/// `clear_user_limits <username> <limit>`: one limit, or `all`.
pub async fn clear_limits(ctx: &Ctx, username: &str, limit: &str) -> CtlResult<()> {
    let names: Vec<&str> = match limit {
        "all" => USER_LIMITS.to_vec(),
        name if USER_LIMITS.contains(&name) => vec![name],
        other => {
            return Err(CtlError::Usage(format!(
                "clear_user_limits: unknown limit '{other}', expected max-connections, max-channels or all"
            )));
        }
    };
    for name in names {
        ctx.api
            .call(Method::DELETE, &path(["user-limits", username, name]), None, &[204])
            .await?;
    }
    Ok(())
}
