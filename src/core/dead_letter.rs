//! Dead-lettering: turning a message a queue drops (rejected, expired, over the
//! length limit, over the delivery limit) into a new message for the queue's
//! dead-letter exchange, with the `x-death` history RabbitMQ writes, and spotting
//! messages that would cycle through the same queues forever.
//!
//! As in LavinMQ, a message may name its own dead-letter exchange and routing
//! key in its `x-dead-letter-exchange` and `x-dead-letter-routing-key` headers;
//! they override the queue's and are removed from the dead-lettered copy.

use bytes::Bytes;
use smallvec::SmallVec;

use super::message::Message;
use super::{BasicProperties, FieldTable, FieldValue, ShortStr};

/// Why a message was dead-lettered, as written in `x-death`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// basic.reject or basic.nack without requeue.
    Rejected,
    /// Its TTL ran out.
    Expired,
    /// The queue's length limit pushed it out (or refused it).
    Maxlen,
    /// It was returned to the queue more often than `x-delivery-limit` allows.
    DeliveryLimit,
}

impl Reason {
    /// The name RabbitMQ uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Rejected => "rejected",
            Reason::Expired => "expired",
            Reason::Maxlen => "maxlen",
            Reason::DeliveryLimit => "delivery_limit",
        }
    }
}

/// A message on its way to a dead-letter exchange.
#[derive(Debug)]
pub struct DeadLetter {
    /// The message as it will be published (exchange = the DLX).
    pub message: Message,
    /// More routing keys (the original `CC` keys when no DLX routing key is set).
    pub extra_keys: SmallVec<[String; 2]>,
    /// Why it was dead-lettered.
    pub reason: Reason,
}

/// Where a queue sends what it drops, unless the message names its own target.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The queue dropping the message.
    pub queue: &'a str,
    /// Its dead-letter exchange, if any.
    pub exchange: Option<&'a str>,
    /// Its dead-letter routing key, if any.
    pub routing_key: Option<&'a str>,
}

/// Header naming a message's own dead-letter exchange (LavinMQ extension).
pub const EXCHANGE_HEADER: &str = "x-dead-letter-exchange";
/// Header naming a message's own dead-letter routing key (LavinMQ extension).
pub const ROUTING_KEY_HEADER: &str = "x-dead-letter-routing-key";

/// True when a message could be dead-lettered although its queue has no
/// dead-letter exchange: its encoded properties may carry
/// [`EXCHANGE_HEADER`]. A byte search over the raw headers, so that dropping a
/// message without headers (or without that one) decodes nothing.
pub fn may_name_exchange(raw_properties: &[u8]) -> bool {
    crate::wire::properties::raw_headers(raw_properties).is_some_and(|h| {
        h.windows(EXCHANGE_HEADER.len())
            .any(|w| w == EXCHANGE_HEADER.as_bytes())
    })
}

/// True when the (decoded) headers name a dead-letter exchange.
pub fn names_exchange(headers: Option<&FieldTable>) -> bool {
    headers.is_some_and(|h| h.get(EXCHANGE_HEADER).and_then(FieldValue::as_str).is_some())
}

/// Takes a string header out of the table (a value of another type is removed too).
fn take_text(headers: &mut FieldTable, key: &str) -> Option<String> {
    match headers.remove(key)? {
        FieldValue::LongStr(b) => String::from_utf8(b.to_vec()).ok(),
        _ => None,
    }
}

fn long_str(s: &str) -> FieldValue {
    FieldValue::LongStr(Bytes::copy_from_slice(s.as_bytes()))
}

fn text<'a>(t: &'a FieldTable, key: &str) -> Option<&'a str> {
    t.get(key).and_then(FieldValue::as_str)
}

/// Builds the dead-lettered copy of a message that was published to `exchange`
/// with `routing_key`. `now_ms` is the time of death. `None` when neither the
/// message nor the queue names a dead-letter exchange.
pub fn make(
    exchange: &str,
    routing_key: &str,
    mut props: BasicProperties,
    body: Bytes,
    target: Target<'_>,
    reason: Reason,
    now_ms: i64,
) -> Option<DeadLetter> {
    let mut headers = props.headers.take().unwrap_or_default();
    let own_exchange = take_text(&mut headers, EXCHANGE_HEADER);
    let own_routing_key = take_text(&mut headers, ROUTING_KEY_HEADER);
    let dlx = own_exchange.as_deref().or(target.exchange)?;
    let dlrk = own_routing_key.as_deref().or(target.routing_key);
    let mut keys: SmallVec<[String; 2]> = SmallVec::new();
    keys.push(routing_key.to_string());
    if let Some(cc) = headers.get("CC").and_then(FieldValue::as_array) {
        keys.extend(cc.iter().filter_map(FieldValue::as_str).map(str::to_string));
    }
    let original_expiration = props.expiration.take();
    let deaths = match headers.remove("x-death") {
        Some(FieldValue::Array(a)) => a,
        _ => Vec::new(),
    };
    let had_deaths = !deaths.is_empty();
    let (mut same, mut others): (Vec<FieldValue>, Vec<FieldValue>) = deaths.into_iter().partition(|d| {
        d.as_table()
            .is_some_and(|t| text(t, "queue") == Some(target.queue) && text(t, "reason") == Some(reason.as_str()))
    });
    let entry = match same.pop().and_then(|d| match d {
        FieldValue::Table(t) => Some(t),
        _ => None,
    }) {
        Some(mut t) => {
            let count = t.get("count").and_then(FieldValue::as_i64).unwrap_or(0);
            t.insert("count", FieldValue::I64(count + 1));
            t
        }
        None => {
            let mut t = FieldTable::new();
            t.insert("count", FieldValue::I64(1));
            t.insert("exchange", long_str(exchange));
            if let Some(exp) = &original_expiration {
                t.insert("original-expiration", long_str(exp));
            }
            t.insert("queue", long_str(target.queue));
            t.insert("reason", long_str(reason.as_str()));
            t.insert(
                "routing-keys",
                FieldValue::Array(keys.iter().map(|k| long_str(k)).collect()),
            );
            t.insert("time", FieldValue::Timestamp((now_ms / 1000).max(0) as u64));
            t
        }
    };
    others.insert(0, FieldValue::Table(entry));
    headers.insert("x-death", FieldValue::Array(others));
    if !had_deaths {
        headers.insert("x-first-death-exchange", long_str(exchange));
        headers.insert("x-first-death-queue", long_str(target.queue));
        headers.insert("x-first-death-reason", long_str(reason.as_str()));
    }
    headers.insert("x-last-death-exchange", long_str(exchange));
    headers.insert("x-last-death-queue", long_str(target.queue));
    headers.insert("x-last-death-reason", long_str(reason.as_str()));
    let (routing_key, extra_keys) = match dlrk {
        Some(rk) => {
            // Routed by the DLX key alone: the CC keys no longer apply.
            headers.remove("CC");
            (rk.to_string(), SmallVec::new())
        }
        None => {
            let mut rest = keys;
            let first = if rest.is_empty() { String::new() } else { rest.remove(0) };
            (first, rest)
        }
    };
    props.headers = Some(headers);
    Some(DeadLetter {
        message: Message {
            timestamp: now_ms,
            exchange: ShortStr::from(dlx),
            routing_key: ShortStr::from(routing_key),
            properties: Box::new(props),
            raw_properties: None,
            body,
        },
        extra_keys,
        reason,
    })
}

/// True when delivering the dead-lettered `msg` to `queue` would close a cycle
/// with no rejection in it (RabbitMQ drops such messages instead of looping).
pub fn is_cycle(msg: &Message, reason: Reason, queue: &str) -> bool {
    if reason == Reason::Rejected {
        return false;
    }
    let Some(deaths) = msg
        .properties
        .headers
        .as_ref()
        .and_then(|h| h.get("x-death"))
        .and_then(FieldValue::as_array)
    else {
        return false;
    };
    for d in deaths {
        let Some(t) = d.as_table() else { continue };
        if text(t, "reason") == Some(Reason::Rejected.as_str()) {
            return false;
        }
        if text(t, "queue") == Some(queue) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(queue: &str) -> Target<'_> {
        Target {
            queue,
            exchange: Some("dlx"),
            routing_key: None,
        }
    }

    fn death(dl: &DeadLetter, i: usize) -> FieldTable {
        let h = dl.message.properties.headers.as_ref().unwrap();
        h.get("x-death").unwrap().as_array().unwrap()[i]
            .as_table()
            .unwrap()
            .clone()
    }

    #[test]
    fn first_death_writes_the_full_record() {
        let props = BasicProperties {
            expiration: Some("5000".into()),
            headers: Some(
                [("CC".into(), FieldValue::Array(vec![long_str("cc1")]))]
                    .into_iter()
                    .collect(),
            ),
            ..Default::default()
        };
        let dl = make(
            "ex",
            "rk",
            props,
            Bytes::from_static(b"x"),
            target("q1"),
            Reason::Expired,
            7_000,
        )
        .unwrap();
        let d = death(&dl, 0);
        assert_eq!(d.get("count"), Some(&FieldValue::I64(1)));
        assert_eq!(text(&d, "reason"), Some("expired"));
        assert_eq!(text(&d, "queue"), Some("q1"));
        assert_eq!(text(&d, "exchange"), Some("ex"));
        assert_eq!(text(&d, "original-expiration"), Some("5000"));
        assert_eq!(d.get("time"), Some(&FieldValue::Timestamp(7)));
        assert_eq!(d.get("routing-keys").unwrap().as_array().unwrap().len(), 2);
        let m = &dl.message;
        assert!(m.properties.expiration.is_none());
        assert_eq!((&*m.exchange, &*m.routing_key), ("dlx", "rk"));
        assert_eq!(dl.extra_keys.as_slice(), ["cc1".to_string()]);
        let h = m.properties.headers.as_ref().unwrap();
        assert_eq!(text(h, "x-first-death-queue"), Some("q1"));
    }

    #[test]
    fn message_headers_override_the_queue_target_and_are_removed() {
        let headers: FieldTable = [
            (EXCHANGE_HEADER.into(), long_str("own")),
            (ROUTING_KEY_HEADER.into(), long_str("own-rk")),
            ("keep".into(), long_str("v")),
        ]
        .into_iter()
        .collect();
        let props = BasicProperties {
            headers: Some(headers),
            ..Default::default()
        };
        let mut raw = bytes::BytesMut::new();
        props.encode(&mut raw).unwrap();
        assert!(may_name_exchange(&raw));
        let dl = make("ex", "rk", props, Bytes::new(), target("q"), Reason::Rejected, 0).unwrap();
        assert_eq!((&*dl.message.exchange, &*dl.message.routing_key), ("own", "own-rk"));
        let h = dl.message.properties.headers.as_ref().unwrap();
        assert!(h.get(EXCHANGE_HEADER).is_none() && h.get(ROUTING_KEY_HEADER).is_none());
        assert_eq!(text(h, "keep"), Some("v"));
        let none = Target {
            queue: "q",
            exchange: None,
            routing_key: Some("q-rk"),
        };
        let plain = BasicProperties::default();
        let mut raw = bytes::BytesMut::new();
        plain.encode(&mut raw).unwrap();
        assert!(!may_name_exchange(&raw));
        assert!(make("ex", "rk", plain, Bytes::new(), none, Reason::Expired, 0).is_none());
    }

    #[test]
    fn repeated_death_counts_and_moves_to_front() {
        let dl = make(
            "ex",
            "rk",
            BasicProperties::default(),
            Bytes::new(),
            target("a"),
            Reason::Rejected,
            0,
        )
        .unwrap();
        let dl = make(
            "dlx",
            "rk",
            *dl.message.properties,
            Bytes::new(),
            target("b"),
            Reason::Rejected,
            0,
        )
        .unwrap();
        let dl = make(
            "dlx",
            "rk",
            *dl.message.properties,
            Bytes::new(),
            target("a"),
            Reason::Rejected,
            0,
        )
        .unwrap();
        assert_eq!(text(&death(&dl, 0), "queue"), Some("a"));
        assert_eq!(death(&dl, 0).get("count"), Some(&FieldValue::I64(2)));
        assert_eq!(text(&death(&dl, 1), "queue"), Some("b"));
        let h = dl.message.properties.headers.as_ref().unwrap();
        assert_eq!(text(h, "x-first-death-queue"), Some("a"));
        assert_eq!(text(h, "x-last-death-queue"), Some("a"));
    }

    #[test]
    fn cycles_without_rejection_are_detected() {
        let dl = make(
            "ex",
            "rk",
            BasicProperties::default(),
            Bytes::new(),
            target("a"),
            Reason::Expired,
            0,
        )
        .unwrap();
        assert!(is_cycle(&dl.message, Reason::Expired, "a"));
        assert!(!is_cycle(&dl.message, Reason::Expired, "b"));
        assert!(!is_cycle(&dl.message, Reason::Rejected, "a"));
        let dl = make(
            "ex",
            "rk",
            *dl.message.properties,
            Bytes::new(),
            target("b"),
            Reason::Rejected,
            0,
        )
        .unwrap();
        assert!(!is_cycle(&dl.message, Reason::Expired, "a"));
    }
}
