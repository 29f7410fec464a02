//! What a queue's optional `x-` arguments ask for, validated as RabbitMQ validates
//! them, and merged with the policy and operator policy that apply to the queue.
//!
//! The queue keeps its declared arguments verbatim (they are what a redeclaration
//! is compared with); this is the interpreted, effective form the queue obeys.

use serde_json::{Map, Value};

use super::stream_compaction::CompactionKey;
use super::{FieldTable, FieldValue};

/// What happens to a publish that would take the queue over its length limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// The oldest ready messages are dropped (dead-lettered) to make room.
    #[default]
    DropHead,
    /// The new message is refused (nacked when confirms are on).
    RejectPublish,
    /// As `RejectPublish`, and the refused message is dead-lettered.
    RejectPublishDlx,
}

impl Overflow {
    /// Parses the `x-overflow` / `overflow` value.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "drop-head" => Some(Overflow::DropHead),
            "reject-publish" => Some(Overflow::RejectPublish),
            "reject-publish-dlx" => Some(Overflow::RejectPublishDlx),
            _ => None,
        }
    }
}

/// The `x-queue-type` of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueType {
    /// The default queue.
    #[default]
    Classic,
    /// Accepted so that clients declaring quorum queues work; stored as a durable
    /// queue (replication comes with clustering).
    Quorum,
    /// An append-only log read by offset.
    Stream,
}

impl QueueType {
    /// The name as clients write it.
    pub fn name(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
            QueueType::Stream => "stream",
        }
    }
}

/// The effective settings of a queue.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueSettings {
    /// `x-queue-type`.
    pub queue_type: QueueType,
    /// Milliseconds a message may stay in the queue.
    pub message_ttl: Option<u64>,
    /// Milliseconds an unused queue lives.
    pub expires: Option<u64>,
    /// Most ready messages.
    pub max_length: Option<u64>,
    /// Most ready body bytes.
    pub max_length_bytes: Option<u64>,
    /// Behaviour at the length limit.
    pub overflow: Overflow,
    /// Exchange that dropped messages are republished to.
    pub dead_letter_exchange: Option<String>,
    /// Routing key for dead-lettered messages (their own keys when unset).
    pub dead_letter_routing_key: Option<String>,
    /// Highest message priority (a priority queue when set).
    pub max_priority: Option<u8>,
    /// Only one consumer receives at a time.
    pub single_active_consumer: bool,
    /// Times a message may be returned to the queue before it is dead-lettered.
    pub delivery_limit: Option<u64>,
    /// Milliseconds a delivery may stay unacknowledged.
    pub consumer_timeout: Option<u64>,
    /// Streams: milliseconds a message is kept (`x-max-age`).
    pub max_age: Option<i64>,
    /// Streams: the key whose newest message compaction keeps
    /// (`x-stream-compaction`).
    pub stream_compaction: Option<CompactionKey>,
}

/// Largest TTL or expiry RabbitMQ accepts (milliseconds).
const MAX_EXPIRY: i64 = 4_294_967_295;

/// RabbitMQ's name of a field value type, used in its error texts.
fn type_name(v: &FieldValue) -> &'static str {
    match v {
        FieldValue::Bool(_) => "bool",
        FieldValue::I8(_) => "byte",
        FieldValue::U8(_) => "unsignedbyte",
        FieldValue::I16(_) => "short",
        FieldValue::U16(_) => "unsignedshort",
        FieldValue::I32(_) => "signedint",
        FieldValue::U32(_) => "unsignedint",
        FieldValue::I64(_) => "long",
        FieldValue::F32(_) => "float",
        FieldValue::F64(_) => "double",
        FieldValue::LongStr(_) => "longstr",
        FieldValue::Array(_) => "array",
        FieldValue::Timestamp(_) => "timestamp",
        FieldValue::Table(_) => "table",
        FieldValue::ByteArray(_) => "binary",
        _ => "void",
    }
}

/// A refused argument: its name and RabbitMQ's description of the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError {
    /// Argument name.
    pub arg: &'static str,
    /// What is wrong, in RabbitMQ's notation, e.g. `{value_negative,-1}`.
    pub detail: String,
}

impl ArgError {
    /// The full error text for queue `queue` in `vhost`.
    pub fn describe(&self, queue: &str, vhost: &str) -> String {
        if let Some(kind) = self.detail.strip_prefix("invalid type ") {
            return format!(
                "invalid type '{kind}' for arg '{}' in queue '{queue}' in vhost '{vhost}'",
                self.arg
            );
        }
        format!(
            "invalid arg '{}' for queue '{queue}' in vhost '{vhost}': {}",
            self.arg, self.detail
        )
    }
}

fn unacceptable(arg: &'static str, v: &FieldValue) -> ArgError {
    ArgError {
        arg,
        detail: format!("{{unacceptable_type,{}}}", type_name(v)),
    }
}

fn int_arg(arg: &'static str, v: &FieldValue) -> Result<i64, ArgError> {
    v.as_i64().ok_or_else(|| ArgError {
        arg,
        detail: format!("\"expected integer, got {}\"", type_name(v)),
    })
}

fn non_negative(arg: &'static str, v: &FieldValue) -> Result<u64, ArgError> {
    let n = int_arg(arg, v)?;
    u64::try_from(n).map_err(|_| ArgError {
        arg,
        detail: format!("{{value_negative,{n}}}"),
    })
}

fn expiry(arg: &'static str, v: &FieldValue) -> Result<u64, ArgError> {
    let n = non_negative(arg, v)?;
    if n as i64 > MAX_EXPIRY {
        return Err(ArgError {
            arg,
            detail: format!("{{value_too_large,{n},{MAX_EXPIRY}}}"),
        });
    }
    Ok(n)
}

fn string_arg<'a>(arg: &'static str, v: &'a FieldValue) -> Result<&'a str, ArgError> {
    v.as_str().ok_or_else(|| unacceptable(arg, v))
}

/// A name used as an exchange name or routing key: at most 255 bytes.
fn short_arg<'a>(arg: &'static str, v: &'a FieldValue) -> Result<&'a str, ArgError> {
    let s = v.as_str().ok_or_else(|| ArgError {
        arg,
        detail: format!("invalid type {}", type_name(v)),
    })?;
    if s.len() > 255 {
        return Err(ArgError {
            arg,
            detail: format!("{{value_too_long,{}}}", s.len()),
        });
    }
    Ok(s)
}

impl QueueSettings {
    /// Interprets and validates declaration arguments. Unknown arguments are
    /// ignored, as RabbitMQ ignores them.
    pub fn from_arguments(args: &FieldTable) -> Result<Self, ArgError> {
        let mut s = QueueSettings::default();
        for (key, v) in args.iter() {
            match &**key {
                "x-queue-type" => {
                    let t = string_arg("x-queue-type", v)?;
                    s.queue_type = match t {
                        "classic" => QueueType::Classic,
                        "quorum" => QueueType::Quorum,
                        "stream" => QueueType::Stream,
                        other => {
                            return Err(ArgError {
                                arg: "x-queue-type",
                                detail: format!("\"unsupported queue type '{other}'\""),
                            });
                        }
                    };
                }
                "x-message-ttl" => s.message_ttl = Some(expiry("x-message-ttl", v)?),
                "x-expires" => {
                    let n = expiry("x-expires", v)?;
                    if n == 0 {
                        return Err(ArgError {
                            arg: "x-expires",
                            detail: "{value_zero,0}".into(),
                        });
                    }
                    s.expires = Some(n);
                }
                "x-max-length" => s.max_length = Some(non_negative("x-max-length", v)?),
                "x-max-length-bytes" => s.max_length_bytes = Some(non_negative("x-max-length-bytes", v)?),
                "x-overflow" => {
                    let o = string_arg("x-overflow", v)?;
                    s.overflow = Overflow::parse(o).ok_or(ArgError {
                        arg: "x-overflow",
                        detail: "invalid_overflow".into(),
                    })?;
                }
                "x-dead-letter-exchange" => {
                    let dlx = short_arg("x-dead-letter-exchange", v)?;
                    s.dead_letter_exchange = Some(dlx.to_string());
                }
                "x-dead-letter-routing-key" => {
                    let rk = match v.as_str() {
                        Some(_) => short_arg("x-dead-letter-routing-key", v)?,
                        None => string_arg("x-dead-letter-routing-key", v)?,
                    };
                    if args.get("x-dead-letter-exchange").is_none() {
                        return Err(ArgError {
                            arg: "x-dead-letter-routing-key",
                            detail: "routing_key_but_no_dlx_defined".into(),
                        });
                    }
                    s.dead_letter_routing_key = Some(rk.to_string());
                }
                "x-max-priority" => {
                    let n = non_negative("x-max-priority", v)?;
                    s.max_priority = Some(u8::try_from(n).map_err(|_| ArgError {
                        arg: "x-max-priority",
                        detail: format!("{{max_value_exceeded,{n}}}"),
                    })?);
                }
                "x-single-active-consumer" => {
                    s.single_active_consumer =
                        v.as_bool().ok_or_else(|| unacceptable("x-single-active-consumer", v))?;
                }
                "x-delivery-limit" => s.delivery_limit = Some(non_negative("x-delivery-limit", v)?),
                "x-consumer-timeout" => s.consumer_timeout = Some(non_negative("x-consumer-timeout", v)?),
                "x-max-age" => {
                    let text = string_arg("x-max-age", v)?;
                    s.max_age = Some(super::stream::parse_max_age(text).ok_or(ArgError {
                        arg: "x-max-age",
                        detail: format!("\"invalid max age '{text}'\""),
                    })?);
                }
                "x-stream-compaction" => {
                    let text = string_arg("x-stream-compaction", v)?;
                    s.stream_compaction = Some(CompactionKey::parse(text).ok_or(ArgError {
                        arg: "x-stream-compaction",
                        detail: format!("\"invalid compaction key '{text}': routing-key or header:<name>\""),
                    })?);
                }
                _ => {}
            }
        }
        Ok(s)
    }

    /// The settings with `policy` and `operator` (policy definitions) applied
    /// over the arguments, as RabbitMQ resolves them: for numeric limits the
    /// lowest value of the three wins; for the others the queue's own argument
    /// wins over the policy.
    pub fn with_policies(
        &self,
        args: &FieldTable,
        policy: Option<&Map<String, Value>>,
        operator: Option<&Map<String, Value>>,
    ) -> Self {
        let mut s = self.clone();
        let num = |def: Option<&Map<String, Value>>, key: &str| def.and_then(|d| d.get(key)).and_then(Value::as_u64);
        let lowest = |current: Option<u64>, key: &str| {
            [current, num(policy, key), num(operator, key)]
                .into_iter()
                .flatten()
                .min()
        };
        s.message_ttl = lowest(s.message_ttl, "message-ttl");
        s.expires = lowest(s.expires, "expires").filter(|&n| n > 0);
        s.max_length = lowest(s.max_length, "max-length");
        s.max_length_bytes = lowest(s.max_length_bytes, "max-length-bytes");
        s.delivery_limit = lowest(s.delivery_limit, "delivery-limit");
        s.consumer_timeout = lowest(s.consumer_timeout, "consumer-timeout");
        let policy_age = |def: Option<&Map<String, Value>>| {
            def.and_then(|d| d.get("max-age"))
                .and_then(Value::as_str)
                .and_then(super::stream::parse_max_age)
        };
        s.max_age = [s.max_age, policy_age(policy), policy_age(operator)]
            .into_iter()
            .flatten()
            .min();
        let text = |key: &str| policy.and_then(|d| d.get(key)).and_then(Value::as_str);
        if args.get("x-overflow").is_none()
            && let Some(o) = text("overflow")
                .or_else(|| operator.and_then(|d| d.get("overflow")).and_then(Value::as_str))
                .and_then(Overflow::parse)
        {
            s.overflow = o;
        }
        if args.get("x-dead-letter-exchange").is_none()
            && let Some(dlx) = text("dead-letter-exchange")
        {
            s.dead_letter_exchange = Some(dlx.to_string());
        }
        if args.get("x-dead-letter-routing-key").is_none()
            && let Some(rk) = text("dead-letter-routing-key")
        {
            s.dead_letter_routing_key = Some(rk.to_string());
        }
        if args.get("x-stream-compaction").is_none()
            && let Some(key) = text("stream-compaction").and_then(CompactionKey::parse)
        {
            s.stream_compaction = Some(key);
        }
        s
    }
}

/// Arguments compared when a queue is declared again; others may differ, as in
/// RabbitMQ.
const COMPARED_ARGUMENTS: [&str; 14] = [
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-single-active-consumer",
    "x-delivery-limit",
    "x-max-age",
    "x-message-deduplication",
    "x-queue-type",
];

fn describe_value(v: Option<&FieldValue>) -> String {
    match v {
        None => "none".into(),
        Some(v) => {
            let shown = match (v.as_str(), v.as_i64(), v.as_bool()) {
                (Some(s), _, _) => s.to_string(),
                (_, Some(n), _) => n.to_string(),
                (_, _, Some(b)) => b.to_string(),
                _ => format!("{v:?}"),
            };
            format!("the value '{shown}' of type '{}'", type_name(v))
        }
    }
}

/// Checks that a redeclaration's arguments match the queue's, returning
/// RabbitMQ's text naming the first argument that differs.
pub fn check_equivalent(current: &FieldTable, received: &FieldTable, queue: &str, vhost: &str) -> Result<(), String> {
    for key in COMPARED_ARGUMENTS {
        let (cur, new) = (current.get(key), received.get(key));
        let same = match (cur, new) {
            (Some(a), Some(b)) => super::headers::values_equal(a, b),
            (None, None) => true,
            _ => false,
        };
        if same {
            continue;
        }
        if key == "x-queue-type" {
            let kind = |v: Option<&FieldValue>| v.map(|v| v.as_str().unwrap_or("?").to_string());
            let (c, r) = (kind(cur), kind(new));
            let classic = |k: &Option<String>| k.as_deref().is_none_or(|k| k == "classic");
            if classic(&c) && classic(&r) {
                continue;
            }
            if let (Some(c), Some(r)) = (&c, &r) {
                return Err(format!(
                    "inequivalent arg 'x-queue-type' for queue '{queue}' in vhost '{vhost}': received '{r}' but current is '{c}'"
                ));
            }
        }
        return Err(format!(
            "inequivalent arg '{key}' for queue '{queue}' in vhost '{vhost}': received {} but current is {}",
            describe_value(new),
            describe_value(cur)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pairs: &[(&str, FieldValue)]) -> FieldTable {
        pairs.iter().map(|(k, v)| ((*k).into(), v.clone())).collect()
    }

    fn err(pairs: &[(&str, FieldValue)]) -> String {
        QueueSettings::from_arguments(&args(pairs))
            .unwrap_err()
            .describe("q", "/")
    }

    #[test]
    fn parses_every_argument() {
        let s = QueueSettings::from_arguments(&args(&[
            ("x-message-ttl", FieldValue::I32(100)),
            ("x-expires", FieldValue::I64(5000)),
            ("x-max-length", FieldValue::U8(3)),
            ("x-max-length-bytes", FieldValue::I16(100)),
            ("x-overflow", "reject-publish-dlx".into()),
            ("x-dead-letter-exchange", "dlx".into()),
            ("x-dead-letter-routing-key", "dead".into()),
            ("x-max-priority", FieldValue::I8(10)),
            ("x-single-active-consumer", true.into()),
            ("x-delivery-limit", FieldValue::I32(2)),
            ("x-queue-type", "quorum".into()),
            ("x-something-else", "ignored".into()),
        ]))
        .unwrap();
        assert_eq!(s.message_ttl, Some(100));
        assert_eq!(s.expires, Some(5000));
        assert_eq!(s.max_length, Some(3));
        assert_eq!(s.max_length_bytes, Some(100));
        assert_eq!(s.overflow, Overflow::RejectPublishDlx);
        assert_eq!(s.dead_letter_exchange.as_deref(), Some("dlx"));
        assert_eq!(s.dead_letter_routing_key.as_deref(), Some("dead"));
        assert_eq!(s.max_priority, Some(10));
        assert!(s.single_active_consumer);
        assert_eq!(s.delivery_limit, Some(2));
        assert_eq!(s.queue_type, QueueType::Quorum);
    }

    #[test]
    fn refuses_bad_values_with_rabbitmq_texts() {
        assert_eq!(
            err(&[("x-message-ttl", FieldValue::I32(-1))]),
            "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-1}"
        );
        assert_eq!(
            err(&[("x-message-ttl", "10".into())]),
            "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': \"expected integer, got longstr\""
        );
        assert!(err(&[("x-expires", FieldValue::I32(0))]).ends_with("{value_zero,0}"));
        assert!(err(&[("x-max-priority", FieldValue::I32(256))]).ends_with("{max_value_exceeded,256}"));
        assert!(err(&[("x-overflow", "drop-tail".into())]).ends_with("invalid_overflow"));
        assert!(err(&[("x-dead-letter-routing-key", "k".into())]).ends_with("routing_key_but_no_dlx_defined"));
        assert!(err(&[("x-single-active-consumer", "yes".into())]).contains("x-single-active-consumer"));
    }

    #[test]
    fn policies_merge_the_rabbitmq_way() {
        let a = args(&[
            ("x-max-length", FieldValue::I32(10)),
            ("x-dead-letter-exchange", "mine".into()),
        ]);
        let base = QueueSettings::from_arguments(&a).unwrap();
        let policy: Map<String, Value> = serde_json::from_str(
            r#"{"max-length": 5, "message-ttl": 1000, "dead-letter-exchange": "theirs", "overflow": "reject-publish"}"#,
        )
        .unwrap();
        let operator: Map<String, Value> = serde_json::from_str(r#"{"message-ttl": 500, "max-length": 50}"#).unwrap();
        let s = base.with_policies(&a, Some(&policy), Some(&operator));
        assert_eq!(s.max_length, Some(5));
        assert_eq!(s.message_ttl, Some(500));
        assert_eq!(s.dead_letter_exchange.as_deref(), Some("mine"));
        assert_eq!(s.overflow, Overflow::RejectPublish);
    }
}
