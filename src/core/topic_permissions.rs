//! Topic permissions, as RabbitMQ has them: for one user in one vhost and one
//! topic exchange, a write and a read regular expression matched against
//! routing keys. They narrow what the ordinary permissions grant: publishing
//! to the exchange needs the routing key to match `write`, binding from it
//! (an AMQP bind, an MQTT subscribe) needs the binding key to match `read`.
//! An exchange the user has no topic permission for is not restricted.
//!
//! Patterns may name `{username}`, `{vhost}` and `{client_id}` (the MQTT
//! client identifier); they are replaced by the connection's values before
//! the pattern is compiled, once per connection and permission change.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::permissions::Rule;

/// The write and read patterns of a user on one topic exchange, as stored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TopicPermission {
    /// Regex of routing keys the user may publish with.
    pub write: String,
    /// Regex of binding keys the user may bind (subscribe) with.
    pub read: String,
}

/// A user's topic permissions in one vhost, by exchange name.
pub type TopicPermissions = BTreeMap<String, TopicPermission>;

impl TopicPermission {
    /// Checks that both patterns are valid regular expressions once their
    /// variables are replaced (a `{username}` is not a valid regex by itself).
    pub fn validate(&self) -> Result<(), String> {
        let sample = Variables {
            username: "u",
            vhost: "v",
            client_id: Some("c"),
        };
        for re in [&self.write, &self.read] {
            regex::Regex::new(&sample.expand(re)).map_err(|e| format!("invalid regex '{re}': {e}"))?;
        }
        Ok(())
    }
}

/// The values a pattern's variables take for one connection.
#[derive(Debug, Clone, Copy)]
pub struct Variables<'a> {
    /// The authenticated user.
    pub username: &'a str,
    /// The connection's vhost.
    pub vhost: &'a str,
    /// The MQTT client identifier; AMQP connections have none, and there
    /// `{client_id}` stays as literal text, so it matches nothing useful.
    pub client_id: Option<&'a str>,
}

impl Variables<'_> {
    /// `pattern` with every variable replaced by its value (values are
    /// inserted as they are, not escaped, as RabbitMQ does).
    pub fn expand(&self, pattern: &str) -> String {
        if !pattern.contains('{') {
            return pattern.to_string();
        }
        let client_id = self.client_id.unwrap_or(r"\{client_id\}");
        pattern
            .replace("{username}", self.username)
            .replace("{vhost}", self.vhost)
            .replace("{client_id}", client_id)
    }
}

/// What a topic operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicAccess {
    /// Publish with a routing key.
    Write,
    /// Bind or subscribe with a binding key.
    Read,
}

/// A user's topic permissions in one vhost, compiled for one connection.
/// Empty (the common case) when the user has none there.
#[derive(Debug, Clone, Default)]
pub struct TopicRules {
    by_exchange: HashMap<String, (Rule, Rule)>,
}

impl TopicRules {
    /// Compiles `permissions` with `vars` substituted.
    pub fn compile(permissions: &TopicPermissions, vars: Variables<'_>) -> Self {
        let by_exchange = permissions
            .iter()
            .map(|(exchange, p)| {
                let write = Rule::new(&vars.expand(&p.write));
                let read = Rule::new(&vars.expand(&p.read));
                (exchange.clone(), (write, read))
            })
            .collect();
        TopicRules { by_exchange }
    }

    /// True when the user has topic permissions on `exchange`.
    pub fn restricts(&self, exchange: &str) -> bool {
        !self.by_exchange.is_empty() && self.by_exchange.contains_key(exchange)
    }

    /// True when `access` with `key` on `exchange` is allowed.
    pub fn allows(&self, access: TopicAccess, exchange: &str, key: &str) -> bool {
        match self.by_exchange.get(exchange) {
            None => true,
            Some((write, read)) => match access {
                TopicAccess::Write => write.allows(key),
                TopicAccess::Read => read.allows(key),
            },
        }
    }
}

/// Stores user `name`'s topic permission on `exchange` in `vhost`, after
/// checking the vhost, the user and the patterns; true when the user had
/// none in that vhost before (RabbitMQ's resource is the user's topic
/// permissions in a vhost, so adding a second exchange is an update). A
/// refusal is `PreconditionFailed` (the API's 400); the users file failing
/// to save is the store's error.
pub fn set_for_user(
    broker: &super::broker::Broker,
    name: &str,
    vhost: &str,
    exchange: String,
    p: TopicPermission,
) -> super::Result<bool> {
    let refused = super::Error::PreconditionFailed;
    if broker.vhost(vhost).is_none() {
        return Err(refused(format!("vhost '{vhost}' does not exist")));
    }
    p.validate().map_err(refused)?;
    let mut created = false;
    let found = broker.users.update(name, |u| {
        let by_exchange = u.topic_permissions.entry(vhost.to_string()).or_default();
        created = by_exchange.is_empty();
        by_exchange.insert(exchange, p);
    })?;
    if !found {
        return Err(refused(format!("user '{name}' does not exist")));
    }
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(exchange: &str, write: &str, read: &str, client_id: Option<&str>) -> TopicRules {
        let perms = TopicPermissions::from([(
            exchange.to_string(),
            TopicPermission {
                write: write.into(),
                read: read.into(),
            },
        )]);
        let vars = Variables {
            username: "alice",
            vhost: "prod",
            client_id,
        };
        TopicRules::compile(&perms, vars)
    }

    #[test]
    fn only_the_named_exchange_is_restricted() {
        let r = rules("amq.topic", "^sensors\\.", "", None);
        assert!(r.restricts("amq.topic"));
        assert!(!r.restricts("other"));
        assert!(r.allows(TopicAccess::Write, "amq.topic", "sensors.t1"));
        assert!(!r.allows(TopicAccess::Write, "amq.topic", "alarms.t1"));
        // An empty pattern allows nothing, as in RabbitMQ.
        assert!(!r.allows(TopicAccess::Read, "amq.topic", "sensors.t1"));
        assert!(r.allows(TopicAccess::Write, "other", "anything"));
        assert!(!TopicRules::default().restricts("amq.topic"));
    }

    #[test]
    fn variables_are_expanded() {
        let r = rules("t", "^{username}\\.{vhost}\\.", "^{client_id}$", Some("dev-7"));
        assert!(r.allows(TopicAccess::Write, "t", "alice.prod.x"));
        assert!(!r.allows(TopicAccess::Write, "t", "bob.prod.x"));
        assert!(r.allows(TopicAccess::Read, "t", "dev-7"));
        // Without a client id the variable matches only its own literal text.
        let r = rules("t", ".*", "^{client_id}$", None);
        assert!(!r.allows(TopicAccess::Read, "t", "dev-7"));
        assert!(r.allows(TopicAccess::Read, "t", "{client_id}"));
    }

    #[test]
    fn validation_expands_variables_first() {
        let ok = TopicPermission {
            write: "^{username}\\.".into(),
            read: ".*".into(),
        };
        assert!(ok.validate().is_ok());
        let bad = TopicPermission {
            write: "(".into(),
            read: ".*".into(),
        };
        assert!(bad.validate().unwrap_err().contains("invalid regex '('"));
    }
}
