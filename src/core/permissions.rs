//! Permission checks: a user's configure, write and read regular expressions for
//! a vhost, compiled once, matched against resource names as RabbitMQ does.
//!
//! Protocol adapters ask before each operation. The user store counts its
//! changes ([`crate::core::user::UserStore::generation`]), so an open connection
//! sees a changed permission on its next operation without reconnecting, while
//! the common case (nothing changed) costs one atomic load.

use regex::Regex;

use super::Error;
use super::topic_permissions::{TopicAccess, TopicRules};
use super::user::Permissions;

/// What an operation needs on a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Create or delete it (declare, delete).
    Configure,
    /// Put messages in (publish, bind as destination).
    Write,
    /// Take messages out (consume, get, purge, bind as source).
    Read,
}

/// One regular expression, with the two common patterns answered without
/// running it.
#[derive(Debug, Clone)]
pub(super) enum Rule {
    /// `.*`: everything.
    All,
    /// `` or `^$`: nothing (RabbitMQ treats the empty string as `^$`).
    Nothing,
    /// Anything else.
    Pattern(Regex),
}

impl Rule {
    /// Compiles `pattern`; one that does not compile grants nothing.
    pub(super) fn new(pattern: &str) -> Self {
        match pattern {
            ".*" | "^.*$" | "^.*" => Rule::All,
            "" | "^$" => Rule::Nothing,
            p => match Regex::new(p) {
                Ok(r) => Rule::Pattern(r),
                // A pattern that does not compile grants nothing.
                Err(_) => Rule::Nothing,
            },
        }
    }

    /// True when `name` matches.
    pub(super) fn allows(&self, name: &str) -> bool {
        match self {
            Rule::All => true,
            Rule::Nothing => false,
            Rule::Pattern(r) => r.is_match(name),
        }
    }
}

/// A user's compiled permissions in one vhost, topic permissions included.
#[derive(Debug, Clone)]
pub struct Compiled {
    configure: Rule,
    write: Rule,
    read: Rule,
    topics: TopicRules,
}

impl Compiled {
    /// Compiles a permission set and the topic permissions that narrow it.
    pub fn new(p: &Permissions, topics: TopicRules) -> Self {
        Compiled {
            configure: Rule::new(&p.configure),
            write: Rule::new(&p.write),
            read: Rule::new(&p.read),
            topics,
        }
    }

    /// No permission at all (the user has none in the vhost).
    pub fn none() -> Self {
        Compiled {
            configure: Rule::Nothing,
            write: Rule::Nothing,
            read: Rule::Nothing,
            topics: TopicRules::default(),
        }
    }

    /// These permissions with `topics` as the topic permissions.
    pub fn with_topics(self, topics: TopicRules) -> Self {
        Compiled { topics, ..self }
    }

    /// True when the user has topic permissions on the exchange `exchange`,
    /// so that its routing keys must be checked (if it is a topic exchange).
    pub fn restricts_topics(&self, exchange: &str) -> bool {
        self.topics.restricts(exchange)
    }

    /// Checks a routing key (`Write`, publishing) or binding key (`Read`,
    /// binding from the exchange) against the user's topic permissions on
    /// the topic exchange `exchange`, failing with RabbitMQ's text.
    pub fn check_topic(
        &self,
        access: TopicAccess,
        exchange: &str,
        key: &str,
        vhost: &str,
        user: &str,
    ) -> Result<(), Error> {
        if self.topics.allows(access, exchange, key) {
            return Ok(());
        }
        Err(Error::AccessRefused(format!(
            "access to topic '{key}' in exchange '{exchange}' in vhost '{vhost}' refused for user '{user}'"
        )))
    }

    /// True when `access` to resource `name` is allowed.
    pub fn allows(&self, access: Access, name: &str) -> bool {
        match access {
            Access::Configure => self.configure.allows(name),
            Access::Write => self.write.allows(name),
            Access::Read => self.read.allows(name),
        }
    }

    /// Checks `access` to a queue or exchange (`kind`) named `name` (the default
    /// exchange is `amq.default`), failing with RabbitMQ's ACCESS_REFUSED text.
    pub fn check(&self, access: Access, kind: &str, name: &str, vhost: &str, user: &str) -> Result<(), Error> {
        let name = if name.is_empty() && kind == "exchange" {
            "amq.default"
        } else {
            name
        };
        if self.allows(access, name) {
            return Ok(());
        }
        Err(Error::AccessRefused(format!(
            "access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(c: &str, w: &str, r: &str) -> Compiled {
        Compiled::new(
            &Permissions {
                configure: c.into(),
                write: w.into(),
                read: r.into(),
            },
            TopicRules::default(),
        )
    }

    #[test]
    fn rules_match_like_rabbitmq() {
        let p = perms("^app\\.", ".*", "");
        assert!(p.allows(Access::Configure, "app.q"));
        assert!(!p.allows(Access::Configure, "other"));
        assert!(p.allows(Access::Write, "anything"));
        assert!(!p.allows(Access::Read, "anything"));
        let err = p.check(Access::Read, "queue", "q1", "/", "bob").unwrap_err();
        assert_eq!(err.text(), "access to queue 'q1' in vhost '/' refused for user 'bob'");
        let p = perms(".*", "^amq\\.default$", ".*");
        assert!(p.check(Access::Write, "exchange", "", "/", "bob").is_ok());
        assert!(!Compiled::none().allows(Access::Read, "x"));
    }
}
