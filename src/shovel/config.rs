//! A shovel's settings, read from the value of a `shovel` runtime parameter
//! with the keys RabbitMQ and LavinMQ define (`src-uri`, `dest-queue`,
//! `ack-mode`, ...). Reading checks everything a running shovel would trip
//! over later, so a bad parameter is refused when it is set.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::client::uri::{self, AmqpUri};
use crate::core::table_json::json_to_table;
use crate::wire::FieldTable;

/// Why a shovel parameter cannot be used.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The value is not a JSON object.
    #[error("the value must be a JSON object")]
    NotAnObject,
    /// A key no shovel understands (a misspelling would otherwise go unnoticed).
    #[error("unknown parameter key '{0}'")]
    UnknownKey(String),
    /// A required key is absent.
    #[error("'{0}' is required")]
    Missing(&'static str),
    /// A key's value has the wrong type or is out of range.
    #[error("'{key}' {expected}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// What it should have been.
        expected: &'static str,
    },
    /// A URI that does not parse.
    #[error("'{key}': {reason}")]
    BadUri {
        /// `src-uri` or `dest-uri`.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A protocol this broker's shovels do not speak.
    #[error("'{0}': only AMQP 0-9-1 shovels (amqp091) are supported")]
    Protocol(&'static str),
}

/// Where a shovel takes messages from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// Consumes from a queue.
    Queue(String),
    /// Consumes from a temporary queue bound to an exchange with a key.
    Exchange {
        /// The exchange.
        exchange: String,
        /// The binding key.
        key: String,
    },
}

/// Where a shovel puts messages.
#[derive(Debug, Clone, PartialEq)]
pub enum Destination {
    /// Publishes over AMQP: to a queue (through the default exchange), to an
    /// exchange with a key, or, with neither set, to the message's own
    /// exchange and routing key.
    Amqp {
        /// `dest-queue`.
        queue: Option<String>,
        /// `dest-exchange`.
        exchange: Option<String>,
        /// `dest-exchange-key`.
        key: Option<String>,
    },
    /// POSTs each message to a URL (a webhook).
    Http,
}

impl Destination {
    /// The exchange and routing key to publish a message to that arrived
    /// with `exchange` and `routing_key`.
    pub fn route<'a>(&'a self, exchange: &'a str, routing_key: &'a str) -> (&'a str, &'a str) {
        match self {
            Destination::Amqp { queue: Some(queue), .. } => ("", queue),
            Destination::Amqp {
                exchange: Some(x), key, ..
            } => (x, key.as_deref().unwrap_or(routing_key)),
            Destination::Amqp { key, .. } => (exchange, key.as_deref().unwrap_or(routing_key)),
            Destination::Http => (exchange, routing_key),
        }
    }
}

/// When a message leaves the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// After the destination confirmed it: nothing is lost.
    OnConfirm,
    /// As soon as it was sent on: lost if the destination fails before storing it.
    OnPublish,
    /// When it was delivered (consumed without acks): the fastest, the least safe.
    NoAck,
}

/// When a shovel stops by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteAfter {
    /// Runs until deleted.
    Never,
    /// Moves the messages the source queue held when the shovel started, then
    /// deletes itself.
    QueueLength,
    /// Moves this many messages, then deletes itself.
    Count(u64),
}

/// Everything a running shovel needs to know.
#[derive(Debug, Clone)]
pub struct ShovelConfig {
    /// Source brokers, tried in turn.
    pub src_uris: Vec<String>,
    /// What to consume.
    pub source: Source,
    /// `basic.qos` prefetch on the source.
    pub prefetch: u16,
    /// `basic.consume` arguments on the source (e.g. a stream offset).
    pub consumer_args: FieldTable,
    /// When the shovel ends by itself.
    pub delete_after: DeleteAfter,
    /// Destination brokers (or URLs), tried in turn.
    pub dest_uris: Vec<String>,
    /// Where messages go.
    pub destination: Destination,
    /// Adds an `x-shovelled` header saying where the message came from.
    pub add_forward_headers: bool,
    /// Adds an `x-shovelled-timestamp` header with the time it was moved.
    pub add_timestamp_header: bool,
    /// When a message leaves the source.
    pub ack_mode: AckMode,
    /// How long to wait before connecting again after a failure.
    pub reconnect_delay: Duration,
}

/// Keys read from a parameter value. RabbitMQ's older spellings
/// (`prefetch-count`, `delete-after`, `add-forward-headers`, ...) are aliases
/// of the `src-`/`dest-` ones; the `*-predeclared`, `*-queue-args` and
/// `*-publish-properties` keys of its exports are accepted and not used.
const KNOWN_KEYS: &[&str] = &[
    "src-uri",
    "src-queue",
    "src-exchange",
    "src-exchange-key",
    "src-prefetch-count",
    "prefetch-count",
    "src-consumer-args",
    "src-delete-after",
    "delete-after",
    "src-protocol",
    "src-predeclared",
    "src-queue-args",
    "dest-uri",
    "dest-queue",
    "dest-exchange",
    "dest-exchange-key",
    "dest-add-forward-headers",
    "add-forward-headers",
    "dest-add-timestamp-header",
    "add-timestamp-header",
    "dest-protocol",
    "dest-predeclared",
    "dest-queue-args",
    "dest-publish-properties",
    "publish-properties",
    "publish-fields",
    "ack-mode",
    "reconnect-delay",
];

/// Default prefetch, as LavinMQ's.
const DEFAULT_PREFETCH: u16 = 1000;
/// Default wait before reconnecting, as RabbitMQ's.
const DEFAULT_RECONNECT_DELAY: Duration = Duration::from_secs(1);

impl ShovelConfig {
    /// Reads and checks a `shovel` parameter value.
    pub fn from_json(value: &Value) -> Result<ShovelConfig, ConfigError> {
        let fields = value.as_object().ok_or(ConfigError::NotAnObject)?;
        if let Some(unknown) = fields.keys().find(|k| !KNOWN_KEYS.contains(&k.as_str())) {
            return Err(ConfigError::UnknownKey(unknown.clone()));
        }
        for key in ["src-protocol", "dest-protocol"] {
            if let Some(p) = fields.get(key)
                && p.as_str() != Some("amqp091")
            {
                return Err(ConfigError::Protocol(key));
            }
        }
        let src_uris = uris(fields, "src-uri")?;
        for u in &src_uris {
            check_amqp_uri("src-uri", u)?;
        }
        let dest_uris = uris(fields, "dest-uri")?;
        let http = dest_uris.iter().any(|u| is_http(u));
        if http && !dest_uris.iter().all(|u| is_http(u)) {
            return Err(ConfigError::BadUri {
                key: "dest-uri",
                reason: "cannot mix http(s) and amqp(s) URIs".into(),
            });
        }
        for u in dest_uris.iter().filter(|u| !is_http(u)) {
            check_amqp_uri("dest-uri", u)?;
        }
        for u in dest_uris.iter().filter(|u| is_http(u)) {
            u.parse::<hyper::Uri>().map_err(|e| ConfigError::BadUri {
                key: "dest-uri",
                reason: format!("{u:?} is not a URL: {e}"),
            })?;
        }
        let source = match (string(fields, "src-queue")?, string(fields, "src-exchange")?) {
            (Some(q), None) => Source::Queue(q),
            (None, Some(exchange)) => Source::Exchange {
                exchange,
                key: string(fields, "src-exchange-key")?.unwrap_or_default(),
            },
            (Some(_), Some(_)) => {
                return Err(ConfigError::Invalid {
                    key: "src-queue",
                    expected: "and 'src-exchange' cannot both be set",
                });
            }
            (None, None) => return Err(ConfigError::Missing("src-queue or src-exchange")),
        };
        let destination = if http {
            Destination::Http
        } else {
            let queue = string(fields, "dest-queue")?;
            let exchange = string(fields, "dest-exchange")?;
            if queue.is_some() && exchange.is_some() {
                return Err(ConfigError::Invalid {
                    key: "dest-queue",
                    expected: "and 'dest-exchange' cannot both be set",
                });
            }
            Destination::Amqp {
                queue,
                exchange,
                key: string(fields, "dest-exchange-key")?,
            }
        };
        let prefetch = prefetch(fields, &["src-prefetch-count", "prefetch-count"])?;
        let consumer_args = match fields.get("src-consumer-args") {
            None => FieldTable::new(),
            Some(v) if v.is_object() => json_to_table(v),
            Some(_) => {
                return Err(ConfigError::Invalid {
                    key: "src-consumer-args",
                    expected: "must be a JSON object",
                });
            }
        };
        let delete_after = match first(fields, &["src-delete-after", "delete-after"]) {
            None => DeleteAfter::Never,
            Some(Value::String(s)) if s == "never" => DeleteAfter::Never,
            Some(Value::String(s)) if s == "queue-length" => DeleteAfter::QueueLength,
            Some(v) => v.as_u64().map(DeleteAfter::Count).ok_or(ConfigError::Invalid {
                key: "src-delete-after",
                expected: "must be \"never\", \"queue-length\" or a number of messages",
            })?,
        };
        if delete_after == DeleteAfter::QueueLength && !matches!(source, Source::Queue(_)) {
            return Err(ConfigError::Invalid {
                key: "src-delete-after",
                expected: "can be \"queue-length\" only with 'src-queue'",
            });
        }
        let ack_mode = ack_mode(fields)?;
        let reconnect_delay = reconnect_delay(fields)?;
        Ok(ShovelConfig {
            src_uris,
            source,
            prefetch,
            consumer_args,
            delete_after,
            dest_uris,
            destination,
            add_forward_headers: flag(fields, &["dest-add-forward-headers", "add-forward-headers"])?,
            add_timestamp_header: flag(fields, &["dest-add-timestamp-header", "add-timestamp-header"])?,
            ack_mode,
            reconnect_delay,
        })
    }
}

/// The prefetch count under the first of `keys` that is set (1000 when none is).
pub(crate) fn prefetch(fields: &Map<String, Value>, keys: &[&'static str]) -> Result<u16, ConfigError> {
    match first(fields, keys) {
        None => Ok(DEFAULT_PREFETCH),
        Some(v) => v
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n > 0)
            .ok_or(ConfigError::Invalid {
                key: keys[0],
                expected: "must be a number from 1 to 65535",
            }),
    }
}

/// `ack-mode`: `on-confirm` when absent.
pub(crate) fn ack_mode(fields: &Map<String, Value>) -> Result<AckMode, ConfigError> {
    match fields.get("ack-mode").map(|v| v.as_str()) {
        None | Some(Some("on-confirm")) => Ok(AckMode::OnConfirm),
        Some(Some("on-publish")) => Ok(AckMode::OnPublish),
        Some(Some("no-ack")) => Ok(AckMode::NoAck),
        Some(_) => Err(ConfigError::Invalid {
            key: "ack-mode",
            expected: "must be \"on-confirm\", \"on-publish\" or \"no-ack\"",
        }),
    }
}

/// `reconnect-delay` in seconds: 1 s when absent.
pub(crate) fn reconnect_delay(fields: &Map<String, Value>) -> Result<Duration, ConfigError> {
    match fields.get("reconnect-delay") {
        None => Ok(DEFAULT_RECONNECT_DELAY),
        Some(v) => v
            .as_f64()
            .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 86_400.0)
            .map(Duration::from_secs_f64)
            .ok_or(ConfigError::Invalid {
                key: "reconnect-delay",
                expected: "must be a number of seconds",
            }),
    }
}

/// Whether `uri` is a webhook URL rather than a broker.
fn is_http(uri: &str) -> bool {
    uri.starts_with("http://") || uri.starts_with("https://")
}

/// Whether an AMQP URI names no host: this broker.
pub fn is_local(uri: &str) -> bool {
    let rest = uri
        .strip_prefix("amqp://")
        .or_else(|| uri.strip_prefix("amqps://"))
        .unwrap_or(uri);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    host.is_empty()
}

/// Parses an AMQP URI of a shovel: `amqp://` or `amqps://`, with or without a host.
pub fn parse_amqp_uri(key: &'static str, input: &str) -> Result<AmqpUri, ConfigError> {
    if !(input.starts_with("amqp://") || input.starts_with("amqps://")) {
        return Err(ConfigError::BadUri {
            key,
            reason: format!("{input:?} is not an amqp:// or amqps:// URI"),
        });
    }
    uri::parse(input).map_err(|reason| ConfigError::BadUri { key, reason })
}

pub(crate) fn check_amqp_uri(key: &'static str, input: &str) -> Result<(), ConfigError> {
    parse_amqp_uri(key, input).map(drop)
}

/// A URI key: one string or a non-empty list of them.
pub(crate) fn uris(fields: &Map<String, Value>, key: &'static str) -> Result<Vec<String>, ConfigError> {
    let invalid = ConfigError::Invalid {
        key,
        expected: "must be a URI or a list of URIs",
    };
    match fields.get(key) {
        None => Err(ConfigError::Missing(key)),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(list)) if !list.is_empty() => list
            .iter()
            .map(|u| u.as_str().map(String::from).ok_or_else(|| invalid.clone()))
            .collect(),
        Some(_) => Err(invalid),
    }
}

/// An optional string key; empty counts as absent, as in RabbitMQ's UI.
pub(crate) fn string(fields: &Map<String, Value>, key: &'static str) -> Result<Option<String>, ConfigError> {
    match fields.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ConfigError::Invalid {
            key,
            expected: "must be a string",
        }),
    }
}

/// The value of the first of `keys` that is set.
fn first<'a>(fields: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| fields.get(*k)).filter(|v| !v.is_null())
}

/// A boolean key (under any of its names), false when absent.
fn flag(fields: &Map<String, Value>, keys: &[&'static str]) -> Result<bool, ConfigError> {
    match first(fields, keys) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ConfigError::Invalid {
            key: keys[0],
            expected: "must be true or false",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<ShovelConfig, ConfigError> {
        ShovelConfig::from_json(&v)
    }

    #[test]
    fn defaults_follow_rabbitmq_and_lavinmq() {
        let c =
            read(json!({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"})).unwrap();
        assert_eq!(c.source, Source::Queue("a".into()));
        assert_eq!(c.ack_mode, AckMode::OnConfirm);
        assert_eq!(c.prefetch, 1000);
        assert_eq!(c.delete_after, DeleteAfter::Never);
        assert_eq!(c.destination.route("x", "k"), ("", "b"));
        assert!(!c.add_forward_headers);
    }

    #[test]
    fn rabbitmq_export_keys_are_accepted() {
        let c = read(json!({
            "src-protocol": "amqp091", "src-uri": ["amqp://a", "amqp://b"], "src-exchange": "x",
            "src-exchange-key": "#", "prefetch-count": 10, "delete-after": 5, "dest-protocol": "amqp091",
            "dest-uri": "amqps://u:p@h/v", "dest-exchange": "y", "add-forward-headers": true,
            "ack-mode": "on-publish", "reconnect-delay": 2, "src-predeclared": false,
            "dest-publish-properties": {}
        }))
        .unwrap();
        assert_eq!(c.src_uris.len(), 2);
        assert_eq!(c.prefetch, 10);
        assert_eq!(c.delete_after, DeleteAfter::Count(5));
        assert!(c.add_forward_headers);
        assert_eq!(c.destination.route("x", "k"), ("y", "k"));
        assert_eq!(c.reconnect_delay, Duration::from_secs(2));
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        let base = json!({"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b"});
        let with = |k: &str, v: Value| {
            let mut o = base.clone();
            o[k] = v;
            read(o).unwrap_err().to_string()
        };
        assert!(with("srcqueue", json!("x")).contains("unknown parameter key 'srcqueue'"));
        assert!(with("src-uri", json!("http://x")).contains("src-uri"));
        assert!(with("dest-uri", json!("amqp://h:notaport")).contains("dest-uri"));
        assert!(with("ack-mode", json!("later")).contains("ack-mode"));
        assert!(with("src-prefetch-count", json!(0)).contains("src-prefetch-count"));
        assert!(with("src-protocol", json!("amqp10")).contains("amqp091"));
        let mut no_source = base.clone();
        no_source.as_object_mut().unwrap().remove("src-queue");
        assert!(
            read(no_source)
                .unwrap_err()
                .to_string()
                .contains("src-queue or src-exchange")
        );
    }

    #[test]
    fn host_less_uris_mean_this_broker() {
        assert!(is_local("amqp://"));
        assert!(is_local("amqp:///vhost"));
        assert!(is_local("amqp://user@/vhost"));
        assert!(!is_local("amqp://localhost"));
        assert!(!is_local("amqps://u:p@h:5671/v"));
    }
}
