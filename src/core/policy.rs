//! Policies and operator policies: settings applied by name pattern to queues and
//! exchanges, so that operators change TTLs, limits and dead-lettering without
//! touching the applications that declare them.

use regex::Regex;
use serde_json::{Map, Value, json};

use super::{Error, Result};

/// Which entities a policy applies to (`apply-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyTo {
    /// Queues and exchanges.
    All,
    /// Every queue.
    Queues,
    /// Exchanges only.
    Exchanges,
    /// Classic queues only.
    ClassicQueues,
    /// Quorum queues only.
    QuorumQueues,
    /// Streams only.
    Streams,
}

impl ApplyTo {
    /// Parses the `apply-to` value.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "all" => ApplyTo::All,
            "queues" => ApplyTo::Queues,
            "exchanges" => ApplyTo::Exchanges,
            "classic_queues" => ApplyTo::ClassicQueues,
            "quorum_queues" => ApplyTo::QuorumQueues,
            "streams" => ApplyTo::Streams,
            _ => return None,
        })
    }

    /// The value as written.
    pub fn name(self) -> &'static str {
        match self {
            ApplyTo::All => "all",
            ApplyTo::Queues => "queues",
            ApplyTo::Exchanges => "exchanges",
            ApplyTo::ClassicQueues => "classic_queues",
            ApplyTo::QuorumQueues => "quorum_queues",
            ApplyTo::Streams => "streams",
        }
    }

    /// True when a queue of type `queue_type` is covered.
    pub fn covers_queue(self, queue_type: &str) -> bool {
        match self {
            ApplyTo::All | ApplyTo::Queues => true,
            ApplyTo::Exchanges => false,
            ApplyTo::ClassicQueues => queue_type == "classic",
            ApplyTo::QuorumQueues => queue_type == "quorum",
            ApplyTo::Streams => queue_type == "stream",
        }
    }

    /// True when exchanges are covered.
    pub fn covers_exchanges(self) -> bool {
        matches!(self, ApplyTo::All | ApplyTo::Exchanges)
    }
}

/// Keys a policy definition may hold, and whether their value is a number.
const POLICY_KEYS: [(&str, bool); 15] = [
    ("max-length", true),
    ("max-length-bytes", true),
    ("message-ttl", true),
    ("expires", true),
    ("delivery-limit", true),
    ("consumer-timeout", true),
    ("overflow", false),
    ("dead-letter-exchange", false),
    ("dead-letter-routing-key", false),
    ("alternate-exchange", false),
    ("max-age", false),
    ("stream-compaction", false),
    ("delayed-message", false),
    ("federation-upstream", false),
    ("federation-upstream-set", false),
];

/// RabbitMQ's policy keys that mean nothing here (mirroring, lazy queues,
/// queue placement, in-memory limits...): accepted, kept and exported again, so
/// that a RabbitMQ definitions file imports, and reported once in the log.
const NO_EFFECT_KEYS: [&str; 16] = [
    "ha-mode",
    "ha-params",
    "ha-sync-mode",
    "ha-sync-batch-size",
    "ha-promote-on-shutdown",
    "ha-promote-on-failure",
    "queue-mode",
    "queue-version",
    "queue-master-locator",
    "queue-leader-locator",
    "max-in-memory-length",
    "max-in-memory-bytes",
    "dead-letter-strategy",
    "initial-cluster-size",
    "target-group-size",
    "stream-max-segment-size-bytes",
];

/// Logs, once per key and process, that a policy key has no effect here.
fn report_no_effect(key: &'static str) {
    static REPORTED: parking_lot::Mutex<Vec<&'static str>> = parking_lot::Mutex::new(Vec::new());
    let mut reported = REPORTED.lock();
    if !reported.contains(&key) {
        reported.push(key);
        tracing::warn!("policy key '{key}' is kept but has no effect in this broker");
    }
}

/// Keys an operator policy may hold (numeric limits only).
const OPERATOR_KEYS: [&str; 5] = [
    "max-length",
    "max-length-bytes",
    "message-ttl",
    "expires",
    "delivery-limit",
];

/// A policy or operator policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Policy name, unique per vhost.
    pub name: String,
    /// Regular expression matched against entity names.
    pub pattern: String,
    regex: Regex,
    /// Which entities it applies to.
    pub apply_to: ApplyTo,
    /// The highest priority of the matching policies wins.
    pub priority: i64,
    /// The settings it applies.
    pub definition: Map<String, Value>,
}

fn invalid(text: String) -> Error {
    Error::PreconditionFailed(format!("Validation failed\n\n{text}"))
}

impl Policy {
    /// Validates and builds a policy; `operator` restricts the definition to what
    /// operator policies may set.
    pub fn new(
        name: &str,
        pattern: &str,
        apply_to: &str,
        priority: i64,
        definition: Map<String, Value>,
        operator: bool,
    ) -> Result<Self> {
        let regex = Regex::new(pattern).map_err(|e| invalid(format!("invalid pattern '{pattern}': {e}")))?;
        let apply_to =
            ApplyTo::parse(apply_to).ok_or_else(|| invalid(format!("'{apply_to}' is not a valid apply-to value")))?;
        if definition.is_empty() {
            return Err(invalid("no policy definition given".into()));
        }
        for (key, value) in &definition {
            if let Some(k) = NO_EFFECT_KEYS.iter().find(|k| *k == key) {
                report_no_effect(k);
                continue;
            }
            let known = POLICY_KEYS.iter().find(|(k, _)| k == key);
            let allowed = known.is_some() && (!operator || OPERATOR_KEYS.contains(&key.as_str()));
            let Some((_, numeric)) = known.filter(|_| allowed) else {
                return Err(invalid(format!("[<<\"{key}\">>] are not recognised policy settings")));
            };
            let ok = if *numeric {
                // Times and limits as RabbitMQ bounds them (TTLs fit 32 bits).
                value.as_u64().is_some_and(|n| n <= i64::MAX as u64)
            } else if key == "max-age" {
                value
                    .as_str()
                    .and_then(super::stream::parse_max_age)
                    .is_some_and(|ms| ms >= 0)
            } else if key == "stream-compaction" {
                value
                    .as_str()
                    .is_some_and(|k| super::stream_compaction::CompactionKey::parse(k).is_some())
            } else if key == "delayed-message" {
                // LavinMQ's key: a boolean; `true` makes exchanges delayed.
                value.is_boolean()
            } else if key == "overflow" {
                value
                    .as_str()
                    .is_some_and(|o| super::queue_settings::Overflow::parse(o).is_some())
            } else {
                value.as_str().is_some_and(|s| s.len() <= 255)
            };
            if !ok {
                return Err(invalid(format!("{key} has an invalid value {value}")));
            }
        }
        if operator && apply_to == ApplyTo::Exchanges {
            return Err(invalid("operator policies cannot apply to exchanges".into()));
        }
        Ok(Policy {
            name: name.to_string(),
            pattern: pattern.to_string(),
            regex,
            apply_to,
            priority,
            definition,
        })
    }

    /// True when the policy's pattern matches `name`.
    pub fn matches(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }

    /// The policy as RabbitMQ's API and definitions show it.
    pub fn to_json(&self, vhost: &str) -> Value {
        json!({"vhost": vhost, "name": self.name, "pattern": self.pattern,
               "apply-to": self.apply_to.name(), "priority": self.priority,
               "definition": self.definition})
    }

    /// Rebuilds a policy from [`Policy::to_json`] output.
    pub fn from_json(v: &Value, operator: bool) -> Result<Self> {
        Policy::new(
            v["name"].as_str().unwrap_or_default(),
            v["pattern"].as_str().unwrap_or_default(),
            v["apply-to"].as_str().unwrap_or("all"),
            v["priority"].as_i64().unwrap_or(0),
            v["definition"].as_object().cloned().unwrap_or_default(),
            operator,
        )
    }
}

/// The policy that applies to an entity: the highest priority among those whose
/// pattern matches and whose `apply-to` covers it (ties go to the first by name).
pub fn select<'a>(
    policies: impl IntoIterator<Item = &'a Policy>,
    name: &str,
    covers: impl Fn(ApplyTo) -> bool,
) -> Option<&'a Policy> {
    let mut best: Option<&Policy> = None;
    for p in policies {
        if covers(p.apply_to) && p.matches(name) && best.is_none_or(|b| p.priority > b.priority) {
            best = Some(p);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(s: &str) -> Map<String, Value> {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn validates_definitions() {
        assert!(Policy::new("p", "^q", "queues", 0, def(r#"{"max-length": 5}"#), false).is_ok());
        assert!(Policy::new("p", "(", "queues", 0, def(r#"{"max-length": 5}"#), false).is_err());
        assert!(Policy::new("p", ".*", "nothing", 0, def(r#"{"max-length": 5}"#), false).is_err());
        assert!(Policy::new("p", ".*", "exchanges", 0, def(r#"{"delayed-message": true}"#), false).is_ok());
        assert!(Policy::new("p", ".*", "exchanges", 0, def(r#"{"delayed-message": "yes"}"#), false).is_err());
        assert!(Policy::new("p", ".*", "all", 0, def(r#"{"max-length": -1}"#), false).is_err());
        assert!(Policy::new("p", ".*", "all", 0, def(r#"{"overflow": "x"}"#), false).is_err());
        assert!(Policy::new("p", ".*", "all", 0, def(r#"{"foo": 1}"#), false).is_err());
        assert!(Policy::new("p", ".*", "queues", 0, def(r#"{"dead-letter-exchange": "d"}"#), true).is_err());
        assert!(Policy::new("p", ".*", "queues", 0, def(r#"{"message-ttl": 10}"#), true).is_ok());
        // RabbitMQ's mirroring and lazy-queue keys are kept, with no effect.
        let ha = def(r#"{"ha-mode": "exactly", "ha-params": 2, "queue-mode": "lazy", "max-length": 3}"#);
        let p = Policy::new("p", ".*", "queues", 0, ha.clone(), false).unwrap();
        assert_eq!(p.definition, ha);
    }

    #[test]
    fn highest_priority_match_wins() {
        let a = Policy::new("a", "^q", "all", 1, def(r#"{"max-length": 1}"#), false).unwrap();
        let b = Policy::new("b", "^q1", "queues", 5, def(r#"{"max-length": 2}"#), false).unwrap();
        let c = Policy::new("c", ".*", "exchanges", 9, def(r#"{"alternate-exchange": "ae"}"#), false).unwrap();
        let all = [a, b, c];
        let q = |n: &str| select(&all, n, |t| t.covers_queue("classic")).map(|p| p.name.clone());
        assert_eq!(q("q1x").as_deref(), Some("b"));
        assert_eq!(q("q2").as_deref(), Some("a"));
        assert_eq!(q("other"), None);
        let e = select(&all, "q1", ApplyTo::covers_exchanges).map(|p| p.name.clone());
        assert_eq!(e.as_deref(), Some("c"));
    }
}
