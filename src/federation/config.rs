//! Federation upstreams, read from `federation-upstream` and
//! `federation-upstream-set` runtime parameters with RabbitMQ's and
//! LavinMQ's keys. Reading checks everything a running link would trip over
//! later, so a bad parameter is refused when it is set.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::shovel::config::{self as shovel, AckMode, ConfigError};

/// Keys of an upstream. The `*-predeclared`, `bind-nowait`, `channel-use-mode`,
/// `queue-type` and `resource-cleanup-mode` keys of RabbitMQ's exports are
/// accepted and not used.
const UPSTREAM_KEYS: &[&str] = &[
    "uri",
    "prefetch-count",
    "reconnect-delay",
    "ack-mode",
    "exchange",
    "queue",
    "max-hops",
    "expires",
    "message-ttl",
    "trust-user-id",
    "consumer-tag",
    "ha-policy",
    "bind-nowait",
    "channel-use-mode",
    "queue-type",
    "resource-cleanup-mode",
];

/// What a link needs to know about its upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct Upstream {
    /// The upstream's name (its parameter's).
    pub name: String,
    /// Upstream brokers, tried in turn.
    pub uris: Vec<String>,
    /// `basic.qos` prefetch on the upstream.
    pub prefetch: u16,
    /// How long to wait before connecting again after a failure.
    pub reconnect_delay: Duration,
    /// When a message leaves the upstream.
    pub ack_mode: AckMode,
    /// The upstream exchange, when not named as the federated one.
    pub exchange: Option<String>,
    /// The upstream queue, when not named as the federated one.
    pub queue: Option<String>,
    /// How many links a message may cross.
    pub max_hops: u32,
    /// `x-expires` of the upstream queue of an exchange link, in ms.
    pub expires: Option<u64>,
    /// `x-message-ttl` of that queue, in ms.
    pub message_ttl: Option<u64>,
    /// Keep the `user-id` of federated messages (else it is cleared).
    pub trust_user_id: bool,
    /// The consumer tag on the upstream.
    pub consumer_tag: String,
}

impl Upstream {
    /// Reads and checks a `federation-upstream` parameter value.
    pub fn from_json(name: &str, value: &Value) -> Result<Upstream, ConfigError> {
        let fields = value.as_object().ok_or(ConfigError::NotAnObject)?;
        check_keys(fields, UPSTREAM_KEYS)?;
        let uris = shovel::uris(fields, "uri")?;
        let mut upstream = Upstream {
            name: name.to_owned(),
            uris,
            prefetch: shovel::prefetch(fields, &["prefetch-count"])?,
            reconnect_delay: shovel::reconnect_delay(fields)?,
            ack_mode: shovel::ack_mode(fields)?,
            exchange: None,
            queue: None,
            max_hops: 1,
            expires: None,
            message_ttl: None,
            trust_user_id: false,
            consumer_tag: format!("federation-link-{name}"),
        };
        upstream.apply(fields)?;
        Ok(upstream)
    }

    /// Sets the keys `fields` holds (an upstream's own, or a set entry's
    /// overrides).
    fn apply(&mut self, fields: &Map<String, Value>) -> Result<(), ConfigError> {
        if fields.contains_key("uri") {
            self.uris = shovel::uris(fields, "uri")?;
        }
        for u in &self.uris {
            shovel::check_amqp_uri("uri", u)?;
        }
        if fields.contains_key("prefetch-count") {
            self.prefetch = shovel::prefetch(fields, &["prefetch-count"])?;
        }
        if fields.contains_key("reconnect-delay") {
            self.reconnect_delay = shovel::reconnect_delay(fields)?;
        }
        if fields.contains_key("ack-mode") {
            self.ack_mode = shovel::ack_mode(fields)?;
        }
        if let Some(x) = shovel::string(fields, "exchange")? {
            self.exchange = Some(x);
        }
        if let Some(q) = shovel::string(fields, "queue")? {
            self.queue = Some(q);
        }
        if let Some(tag) = shovel::string(fields, "consumer-tag")? {
            self.consumer_tag = tag;
        }
        if let Some(v) = fields.get("max-hops") {
            self.max_hops = v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0)
                .ok_or(ConfigError::Invalid {
                    key: "max-hops",
                    expected: "must be a positive number",
                })?;
        }
        for (key, slot) in [("expires", &mut self.expires), ("message-ttl", &mut self.message_ttl)] {
            match fields.get(key) {
                None | Some(Value::Null) => {}
                Some(v) => {
                    *slot = Some(
                        v.as_u64()
                            .filter(|n| *n <= u64::from(u32::MAX))
                            .ok_or(ConfigError::Invalid {
                                key: if key == "expires" { "expires" } else { "message-ttl" },
                                expected: "must be a number of milliseconds",
                            })?,
                    );
                }
            }
        }
        match fields.get("trust-user-id") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => self.trust_user_id = *b,
            Some(_) => {
                return Err(ConfigError::Invalid {
                    key: "trust-user-id",
                    expected: "must be true or false",
                });
            }
        }
        Ok(())
    }
}

/// Reads a `federation-upstream-set` value: a list of `{"upstream": name,
/// ...overrides}`; `upstreams` resolves names (a set may name an upstream
/// that does not exist yet: it is skipped until it does).
pub fn read_set(value: &Value, upstreams: &impl Fn(&str) -> Option<Upstream>) -> Result<Vec<Upstream>, ConfigError> {
    let entries = value.as_array().ok_or(ConfigError::Invalid {
        key: "value",
        expected: "of an upstream set must be a list of {\"upstream\": name} objects",
    })?;
    let mut out = Vec::new();
    for entry in entries {
        let fields = entry.as_object().ok_or(ConfigError::NotAnObject)?;
        let mut keys = UPSTREAM_KEYS.to_vec();
        keys.push("upstream");
        check_keys(fields, &keys)?;
        let name = shovel::string(fields, "upstream")?.ok_or(ConfigError::Missing("upstream"))?;
        match upstreams(&name) {
            Some(mut upstream) => {
                upstream.apply(fields)?;
                out.push(upstream);
            }
            None => {
                // Not created yet: its overrides are still checked.
                let mut probe = Upstream::from_json(&name, &serde_json::json!({"uri": "amqp://"}))?;
                probe.apply(fields)?;
            }
        }
    }
    Ok(out)
}

fn check_keys(fields: &Map<String, Value>, known: &[&str]) -> Result<(), ConfigError> {
    match fields.keys().find(|k| !known.contains(&k.as_str())) {
        Some(unknown) => Err(ConfigError::UnknownKey(unknown.clone())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_an_upstream_with_defaults() {
        let u = Upstream::from_json("up", &json!({"uri": "amqp://h"})).unwrap();
        assert_eq!(u.uris, vec!["amqp://h"]);
        assert_eq!((u.prefetch, u.max_hops, u.ack_mode), (1000, 1, AckMode::OnConfirm));
        assert_eq!(u.consumer_tag, "federation-link-up");
        let u = Upstream::from_json(
            "up",
            &json!({"uri": ["amqp://a", "amqp://b"], "max-hops": 3, "expires": 60000, "message-ttl": 1000,
                    "exchange": "x", "queue": "q", "trust-user-id": true, "ack-mode": "no-ack"}),
        )
        .unwrap();
        assert_eq!((u.max_hops, u.expires, u.message_ttl), (3, Some(60000), Some(1000)));
        assert_eq!((u.exchange.as_deref(), u.queue.as_deref()), (Some("x"), Some("q")));
        assert!(u.trust_user_id);
    }

    #[test]
    fn refuses_bad_upstreams() {
        for bad in [
            json!({}),
            json!({"uri": "http://h"}),
            json!({"uri": "amqp://h", "max-hops": 0}),
            json!({"uri": "amqp://h", "expires": "soon"}),
            json!({"uri": "amqp://h", "uri2": 1}),
            json!("amqp://h"),
        ] {
            assert!(Upstream::from_json("u", &bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn set_entries_override_their_upstream() {
        let base = Upstream::from_json("a", &json!({"uri": "amqp://h"})).unwrap();
        let lookup = |n: &str| (n == "a").then(|| base.clone());
        let set = read_set(
            &json!([{"upstream": "a", "max-hops": 2}, {"upstream": "missing"}]),
            &lookup,
        )
        .unwrap();
        assert_eq!(set.len(), 1);
        assert_eq!(set[0].max_hops, 2);
        assert!(read_set(&json!({"upstream": "a"}), &lookup).is_err());
        assert!(read_set(&json!([{"max-hops": 2}]), &lookup).is_err());
    }
}
