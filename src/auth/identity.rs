//! Who a client logged in as: a user of the local store, or the bearer of an
//! access token whose scopes say what it may do.

use std::sync::Arc;
use std::time::SystemTime;

use crate::core::permissions::Compiled;
use crate::core::topic_permissions::TopicRules;
use crate::core::user::{Permissions, User, UserStore};

/// The user a token stands for: its name, tags and permissions, all taken
/// from the token's claims, valid until the token expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenUser {
    /// The user name, from the first of `preferred_username_claims` present.
    pub name: String,
    /// Tags granted by `tag:` scopes (`administrator`, `management`, …).
    pub tags: Vec<String>,
    /// Permissions by vhost pattern (a name, or a pattern with `*`
    /// wildcards), in the order the scopes first named them.
    pub permissions: Vec<(String, Permissions)>,
    /// When the token expires (its `exp`).
    pub expires_at: SystemTime,
}

impl TokenUser {
    /// The permissions that apply in `vhost`: those granted for its exact
    /// name, else for the first wildcard pattern that matches it.
    pub fn permissions_in(&self, vhost: &str) -> Option<&Permissions> {
        let exact = self.permissions.iter().find(|(pattern, _)| pattern == vhost);
        exact
            .or_else(|| {
                self.permissions
                    .iter()
                    .find(|(pattern, _)| pattern.contains('*') && wildcard_match(pattern, vhost))
            })
            .map(|(_, p)| p)
    }
}

/// True when `value` matches `pattern`, in which `*` stands for any run of
/// characters.
pub fn wildcard_match(pattern: &str, value: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = value.strip_prefix(first) else {
        return false;
    };
    let mut parts: Vec<&str> = parts.collect();
    let Some(last) = parts.pop() else {
        // No `*` at all: the whole value must be the pattern.
        return rest.is_empty();
    };
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Who a client logged in as.
#[derive(Debug, Clone)]
pub enum Identity {
    /// A user of the local store, as it was at login. Its permissions are
    /// read from the store when needed, so that changes reach open
    /// connections.
    Local(Arc<User>),
    /// The bearer of an access token: the token's scopes are its rights
    /// until it expires or the client presents a fresh one.
    Token(Arc<TokenUser>),
}

impl Identity {
    /// The user name.
    pub fn name(&self) -> &str {
        match self {
            Identity::Local(u) => &u.name,
            Identity::Token(t) => &t.name,
        }
    }

    /// The user's tags.
    pub fn tags(&self) -> &[String] {
        match self {
            Identity::Local(u) => &u.tags,
            Identity::Token(t) => &t.tags,
        }
    }

    /// True when the user has `tag`.
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags().iter().any(|t| t == tag)
    }

    /// True when the user has permissions in `vhost` at all, which opening
    /// it takes.
    pub fn may_use_vhost(&self, vhost: &str) -> bool {
        match self {
            Identity::Local(u) => u.permissions.contains_key(vhost),
            Identity::Token(t) => t.permissions_in(vhost).is_some(),
        }
    }

    /// The permissions in force in `vhost` now: a local user's from the
    /// store (topic permissions with their variables filled in from the
    /// user, the vhost and `client_id`), a token's from its scopes.
    pub fn permissions(&self, users: &UserStore, vhost: &str, client_id: Option<&str>) -> Compiled {
        match self {
            Identity::Local(u) => users.permissions(&u.name, vhost, client_id),
            Identity::Token(t) => match t.permissions_in(vhost) {
                Some(p) => Compiled::new(p, TopicRules::default()),
                None => Compiled::none(),
            },
        }
    }

    /// When the login stops being valid: a token's expiry, never for a
    /// local user.
    pub fn expires_at(&self) -> Option<SystemTime> {
        match self {
            Identity::Local(_) => None,
            Identity::Token(t) => Some(t.expires_at),
        }
    }

    /// The moment the login expires on the runtime's clock, for connections
    /// to wait on (see [`expired`]).
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        let left = self.expires_at()?.duration_since(SystemTime::now()).unwrap_or_default();
        Some(tokio::time::Instant::now() + left)
    }

    /// The connection limits a new connection of this user to `vhost` is
    /// checked against: the vhost's and the user's `max-connections`.
    pub fn connection_limits(&self, vhost: &crate::core::vhost::VHost) -> crate::core::connections::ConnectionLimits {
        crate::core::connections::ConnectionLimits {
            vhost: vhost.max_connections(),
            user: crate::core::limits::in_force(self.limits().max_connections),
        }
    }

    /// Limits a local user has set; none for a token's user.
    pub fn limits(&self) -> crate::core::user::UserLimits {
        match self {
            Identity::Local(u) => u.limits,
            Identity::Token(_) => Default::default(),
        }
    }
}

/// Completes at `deadline` (see [`Identity::deadline`]), never without one.
pub async fn expired(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_any_run_of_characters() {
        assert!(wildcard_match("*", ""));
        assert!(wildcard_match("*", "/"));
        assert!(wildcard_match("prod-*", "prod-eu"));
        assert!(!wildcard_match("prod-*", "dev-eu"));
        assert!(wildcard_match("*-eu", "prod-eu"));
        assert!(wildcard_match("a*b*c", "axxbyyc"));
        assert!(!wildcard_match("a*b*c", "axxcyyb"));
        assert!(!wildcard_match("ab*ba", "aba"));
        assert!(wildcard_match("exact", "exact"));
        assert!(!wildcard_match("exact", "exactly"));
    }

    #[test]
    fn an_exact_vhost_wins_over_a_wildcard() {
        let p = |c: &str| Permissions {
            configure: c.into(),
            write: "^$".into(),
            read: "^$".into(),
        };
        let t = TokenUser {
            name: "svc".into(),
            tags: vec![],
            permissions: vec![("*".into(), p("any")), ("prod".into(), p("prod"))],
            expires_at: SystemTime::now(),
        };
        assert_eq!(t.permissions_in("prod").map(|p| p.configure.as_str()), Some("prod"));
        assert_eq!(t.permissions_in("dev").map(|p| p.configure.as_str()), Some("any"));
        let only = TokenUser {
            permissions: vec![("prod".into(), p("prod"))],
            ..t
        };
        assert!(only.permissions_in("dev").is_none());
    }
}
