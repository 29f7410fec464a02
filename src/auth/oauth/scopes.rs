//! A verified token's claims turned into a user: its name from the preferred
//! claims, and its tags and permissions from its scopes, read as RabbitMQ's
//! OAuth 2 plugin reads them:
//!
//! - `<prefix>tag:<tag>` grants a tag (`administrator`, `monitoring`,
//!   `policymaker`, `management`, `impersonator`);
//! - `<prefix><configure|read|write>:<vhost>/<name>[/<routing key>]` grants
//!   that access to names matching `<name>` in vhosts matching `<vhost>`, both
//!   URL-encoded, `*` matching any run of characters (the routing key part is
//!   accepted and ignored).
//!
//! The prefix is `scope_prefix`, else `<resource_server_id>.`; without either
//! every scope counts. Scopes come from the `scope` claim (space separated),
//! from `resource_access.<resource_server_id>.roles` (Keycloak's client
//! roles) and from each of `additional_scopes_keys` (a string, a list, or an
//! object keyed by resource server id).

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use super::TokenError;
use crate::auth::identity::TokenUser;
use crate::auth::percent_decode;
use crate::config::OAuthConfig;
use crate::core::user::Permissions;

/// The tags a scope may grant.
const KNOWN_TAGS: [&str; 5] = [
    "administrator",
    "monitoring",
    "policymaker",
    "management",
    "impersonator",
];

/// The permission pattern that grants nothing.
const NOTHING: &str = "^$";

/// The user that the claims of a verified token describe.
pub fn token_user(config: &OAuthConfig, claims: &Map<String, Value>) -> Result<TokenUser, TokenError> {
    let name = username(config, claims)?;
    let exp = claims.get("exp").and_then(Value::as_u64).ok_or(TokenError::NoExpiry)?;
    let mut user = TokenUser {
        name,
        tags: Vec::new(),
        permissions: Vec::new(),
        expires_at: SystemTime::UNIX_EPOCH + Duration::from_secs(exp),
    };
    let prefix = config
        .scope_prefix
        .clone()
        .or_else(|| config.resource_server_id.as_ref().map(|id| format!("{id}.")));
    for scope in scopes(config, claims) {
        let scope = match &prefix {
            Some(p) => match scope.strip_prefix(p.as_str()) {
                Some(rest) => rest,
                None => continue,
            },
            None => scope.as_str(),
        };
        grant(&mut user, scope);
    }
    Ok(user)
}

/// The first of the preferred claims that holds a string.
fn username(config: &OAuthConfig, claims: &Map<String, Value>) -> Result<String, TokenError> {
    config
        .preferred_username_claims
        .iter()
        .find_map(|claim| claims.get(claim).and_then(Value::as_str))
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| TokenError::NoUsername(config.preferred_username_claims.join(", ")))
}

/// Every scope the token carries, before the prefix filter.
fn scopes(config: &OAuthConfig, claims: &Map<String, Value>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(id) = &config.resource_server_id
        && let Some(roles) = claims
            .get("resource_access")
            .and_then(|r| r.get(id))
            .and_then(|r| r.get("roles"))
    {
        collect(roles, None, &mut out);
    }
    if let Some(scope) = claims.get("scope") {
        collect(scope, None, &mut out);
    }
    for key in &config.additional_scopes_keys {
        if let Some(v) = claims.get(key) {
            collect(v, config.resource_server_id.as_deref(), &mut out);
        }
    }
    out
}

/// Scopes from a claim: words of a string, items of a list, and the values
/// of an object (only the entry of resource server `server`, when known).
fn collect(v: &Value, server: Option<&str>, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.extend(s.split_whitespace().map(str::to_owned)),
        Value::Array(items) => items.iter().for_each(|i| collect(i, server, out)),
        Value::Object(map) => map
            .iter()
            .filter(|(k, _)| server.is_none_or(|s| s == k.as_str()))
            .for_each(|(_, i)| collect(i, server, out)),
        _ => {}
    }
}

/// Applies one scope, its prefix removed; scopes of other forms are ignored.
fn grant(user: &mut TokenUser, scope: &str) {
    if let Some(tag) = scope.strip_prefix("tag:") {
        if KNOWN_TAGS.contains(&tag) && !user.tags.iter().any(|t| t == tag) {
            user.tags.push(tag.to_owned());
        }
        return;
    }
    let Some((kind, resource)) = scope.split_once(':') else {
        return;
    };
    if !matches!(kind, "configure" | "write" | "read") {
        return;
    }
    let parts: Vec<&str> = resource.split('/').collect();
    let (vhost, name) = match parts.as_slice() {
        [vhost, name] | [vhost, name, _] => (percent_decode(vhost, true), percent_decode(name, true)),
        _ => return,
    };
    let (Some(vhost), Some(name)) = (vhost, name) else {
        return;
    };
    let index = match user.permissions.iter().position(|(v, _)| *v == vhost) {
        Some(i) => i,
        None => {
            let none = Permissions {
                configure: NOTHING.into(),
                write: NOTHING.into(),
                read: NOTHING.into(),
            };
            user.permissions.push((vhost, none));
            user.permissions.len() - 1
        }
    };
    let p = &mut user.permissions[index].1;
    let slot = match kind {
        "configure" => &mut p.configure,
        "write" => &mut p.write,
        _ => &mut p.read,
    };
    let pattern = name_pattern(&name);
    *slot = if *slot == NOTHING {
        pattern
    } else {
        format!("{slot}|{pattern}")
    };
}

/// The regular expression for a name with `*` wildcards.
fn name_pattern(name: &str) -> String {
    if name == "*" {
        return ".*".to_owned();
    }
    let parts: Vec<String> = name.split('*').map(regex::escape).collect();
    format!("^{}$", parts.join(".*"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(config: &OAuthConfig, claims: Value) -> TokenUser {
        let Value::Object(map) = claims else { panic!("object") };
        token_user(config, &map).expect("user")
    }

    fn config() -> OAuthConfig {
        OAuthConfig {
            resource_server_id: Some("mq".into()),
            ..OAuthConfig::default()
        }
    }

    #[test]
    fn scopes_become_permissions_and_tags() {
        let u = user(
            &config(),
            json!({"sub": "svc", "exp": 2_000_000_000u64,
                   "scope": "mq.configure:%2F/q-* mq.write:%2F/x mq.write:%2F/y mq.read:*/* \
                             mq.tag:management mq.tag:bogus other.read:%2F/z openid"}),
        );
        assert_eq!(u.name, "svc");
        assert_eq!(u.tags, ["management"]);
        let root = u.permissions_in("/").expect("/");
        assert_eq!(root.configure, "^q\\-.*$");
        assert_eq!(root.write, "^x$|^y$");
        assert_eq!(root.read, "^$");
        let any = u.permissions_in("other").expect("wildcard");
        assert_eq!(any.read, ".*");
        assert_eq!(any.write, "^$");
    }

    #[test]
    fn roles_and_additional_keys_count_with_the_prefix() {
        let c = OAuthConfig {
            additional_scopes_keys: vec!["extra".into()],
            preferred_username_claims: vec!["preferred_username".into(), "sub".into()],
            ..config()
        };
        let u = user(
            &c,
            json!({"sub": "id-1", "preferred_username": "alice", "exp": 1u64,
                   "resource_access": {"mq": {"roles": ["mq.tag:administrator"]}, "x": {"roles": ["mq.tag:monitoring"]}},
                   "extra": {"mq": ["mq.read:v1/a.b"], "other": "mq.write:v1/nope"}}),
        );
        assert_eq!(u.name, "alice");
        assert_eq!(u.tags, ["administrator"]);
        let v1 = u.permissions_in("v1").expect("v1");
        assert_eq!(v1.read, "^a\\.b$");
        assert_eq!(v1.write, "^$");
    }

    #[test]
    fn without_a_prefix_every_scope_counts_and_odd_ones_are_ignored() {
        let u = user(
            &OAuthConfig::default(),
            json!({"client_id": "app", "exp": 1u64, "scope": ["read:v/a/rk", "read:v", "delete:v/a", "tag:management"]}),
        );
        assert_eq!(u.name, "app");
        assert_eq!(u.tags, ["management"]);
        assert_eq!(u.permissions.len(), 1);
        assert_eq!(u.permissions_in("v").map(|p| p.read.as_str()), Some("^a$"));
    }

    #[test]
    fn a_token_without_a_name_or_expiry_is_refused() {
        let Value::Object(no_name) = json!({"exp": 1u64, "scope": ""}) else {
            panic!()
        };
        assert!(matches!(
            token_user(&config(), &no_name),
            Err(TokenError::NoUsername(_))
        ));
        let Value::Object(no_exp) = json!({"sub": "a"}) else {
            panic!()
        };
        assert!(matches!(token_user(&config(), &no_exp), Err(TokenError::NoExpiry)));
    }
}
