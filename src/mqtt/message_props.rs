//! How an MQTT message's QoS and retain flag ride in the core's message
//! properties, so that they survive a stay in a queue and reach AMQP consumers.
//!
//! QoS 0 and 1 messages carry only `delivery_mode` (1 and 2), as RabbitMQ's
//! MQTT plugin maps them, which keeps the common case free of a header table;
//! QoS 2, and retained messages handed to a new subscription, also carry the
//! headers `x-mqtt-publish-qos` and `x-mqtt-retain`, and a live message
//! published with the RETAIN flag carries `x-mqtt-retain-published` (for
//! MQTT 5's retain-as-published). AMQP messages have no such headers:
//! persistent ones count as QoS 1, others as QoS 0. MQTT 5's own properties
//! are mapped in [`super::property_map`].

use bytes::{Bytes, BytesMut};

use super::codec::QoS;
use crate::core::message::Message;
use crate::core::{BasicProperties, FieldTable, FieldValue, ShortStr};

/// Header holding the QoS a message was published with.
pub const QOS_HEADER: &str = "x-mqtt-publish-qos";
/// Header marking a retained message delivered because of a new subscription.
pub const RETAIN_HEADER: &str = "x-mqtt-retain";
/// Header marking a live message published with the RETAIN flag.
pub const RETAIN_PUBLISHED_HEADER: &str = "x-mqtt-retain-published";

/// How an MQTT message was published, as far as its properties record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// QoS of the publish.
    pub qos: QoS,
    /// A retained message's copy handed to a new subscription.
    pub retained_copy: bool,
    /// A live message its publisher sent with the RETAIN flag.
    pub retain_published: bool,
}

impl Origin {
    /// A live message published with `qos` and no RETAIN flag.
    pub fn live(qos: QoS) -> Origin {
        Origin {
            qos,
            retained_copy: false,
            retain_published: false,
        }
    }

    /// True when the properties record nothing of this origin but the delivery
    /// mode (QoS 0 or 1, neither retained nor published with RETAIN): such
    /// messages share one encoding per QoS.
    pub fn only_delivery_mode(self) -> bool {
        self.qos != QoS::ExactlyOnce && !self.retained_copy && !self.retain_published
    }
}

const HEADERS_FLAG: u16 = 0x2000;
/// The `delivery_mode` bit of the AMQP property flags.
pub(super) const DELIVERY_MODE_FLAG: u16 = 0x1000;
const CONTENT_TYPE_FLAG: u16 = 0x8000;
const CONTENT_ENCODING_FLAG: u16 = 0x4000;

/// The core properties recording `origin`, before any MQTT 5 properties.
pub fn origin_properties(origin: Origin) -> BasicProperties {
    let mut props = BasicProperties {
        delivery_mode: Some(delivery_mode_of(origin.qos)),
        ..BasicProperties::default()
    };
    if origin.qos == QoS::ExactlyOnce || origin.retained_copy || origin.retain_published {
        let mut headers = FieldTable::new();
        if origin.qos == QoS::ExactlyOnce {
            headers.insert(QOS_HEADER, FieldValue::U8(origin.qos.bits()));
        }
        if origin.retained_copy {
            headers.insert(RETAIN_HEADER, FieldValue::Bool(true));
        }
        if origin.retain_published {
            headers.insert(RETAIN_PUBLISHED_HEADER, FieldValue::Bool(true));
        }
        props.headers = Some(headers);
    }
    props
}

/// The properties of a message published over MQTT as `origin` says.
/// Returns the parsed properties and their encoding.
pub fn publish_properties(origin: Origin) -> (Box<BasicProperties>, Bytes) {
    let qos = origin.qos;
    if origin.only_delivery_mode() {
        // Filled in place on the heap: building the (large) value first and
        // boxing it afterwards copied it twice per message.
        let mut props = Box::<BasicProperties>::default();
        let mode = delivery_mode_of(qos);
        props.delivery_mode = Some(mode);
        // Only the flags word and the delivery mode: encoded once, not per message.
        return (
            props,
            Bytes::from_static(crate::wire::properties::delivery_mode_only(mode)),
        );
    }
    encoded(origin_properties(origin))
}

/// Properties with their encoding.
pub fn encoded(props: BasicProperties) -> (Box<BasicProperties>, Bytes) {
    let mut raw = BytesMut::with_capacity(64);
    // Callers keep every string within its AMQP limit, so this encodes.
    let _ = props.encode(&mut raw);
    (Box::new(props), raw.freeze())
}

/// A message published over MQTT (or a retained copy) to the topic whose
/// routing key is `routing_key`, as the core routes it through `amq.topic`.
pub fn topic_message(routing_key: ShortStr, origin: Origin, payload: Bytes) -> Message {
    let (properties, raw) = publish_properties(origin);
    message_with(routing_key, properties, raw, payload)
}

/// A message to `amq.topic` with properties already encoded.
pub fn message_with(routing_key: ShortStr, properties: Box<BasicProperties>, raw: Bytes, payload: Bytes) -> Message {
    Message {
        // The coarse clock: MQTT expiry intervals count in seconds.
        timestamp: Message::coarse_now_ms(),
        exchange: ShortStr::from_static(super::session::TOPIC_EXCHANGE),
        routing_key,
        properties,
        raw_properties: Some(raw),
        body: payload,
    }
}

/// How a stored message was published, read from its encoded properties
/// without allocating in the common case (no headers).
pub fn stored_origin(properties: &[u8]) -> Origin {
    let Some((flags, rest)) = properties.split_first_chunk::<2>() else {
        return Origin::live(QoS::AtMostOnce);
    };
    let flags = u16::from_be_bytes(*flags);
    if flags & HEADERS_FLAG == 0 {
        return Origin::live(qos_of_delivery_mode(delivery_mode_without_headers(flags, rest)));
    }
    match BasicProperties::decode(&mut Bytes::copy_from_slice(properties)) {
        Ok(props) => origin_of(&props),
        Err(_) => Origin::live(QoS::AtMostOnce),
    }
}

/// How a message with these (decoded) properties was published.
pub fn origin_of(props: &BasicProperties) -> Origin {
    let headers = props.headers.as_ref();
    let flag = |name: &str| {
        headers
            .and_then(|h| h.get(name))
            .and_then(FieldValue::as_bool)
            .unwrap_or(false)
    };
    let qos = headers
        .and_then(|h| h.get(QOS_HEADER))
        .and_then(FieldValue::as_i64)
        .and_then(|q| QoS::from_bits(q.clamp(0, 2) as u8))
        .unwrap_or_else(|| qos_of_delivery_mode(props.delivery_mode));
    Origin {
        qos,
        retained_copy: flag(RETAIN_HEADER),
        retain_published: flag(RETAIN_PUBLISHED_HEADER),
    }
}

/// The delivery mode a message published with `qos` is stored with: QoS 0
/// transient (1), QoS 1 and 2 persistent (2), as RabbitMQ's MQTT plugin does.
fn delivery_mode_of(qos: QoS) -> u8 {
    if qos == QoS::AtMostOnce { 1 } else { 2 }
}

fn qos_of_delivery_mode(mode: Option<u8>) -> QoS {
    if mode == Some(2) {
        QoS::AtLeastOnce
    } else {
        QoS::AtMostOnce
    }
}

/// Reads `delivery_mode` from properties that have no headers: only the two
/// short strings before it need skipping.
fn delivery_mode_without_headers(flags: u16, mut rest: &[u8]) -> Option<u8> {
    if flags & DELIVERY_MODE_FLAG == 0 {
        return None;
    }
    for flag in [CONTENT_TYPE_FLAG, CONTENT_ENCODING_FLAG] {
        if flags & flag != 0 {
            let len = usize::from(*rest.first()?);
            rest = rest.get(1 + len..)?;
        }
    }
    rest.first().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos_round_trips() {
        for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
            for (retained_copy, retain_published) in [(false, false), (true, false), (false, true)] {
                let origin = Origin {
                    qos,
                    retained_copy,
                    retain_published,
                };
                let (props, raw) = publish_properties(origin);
                assert_eq!(stored_origin(&raw), origin);
                assert_eq!(props.is_persistent(), qos != QoS::AtMostOnce);
            }
        }
        assert_eq!(
            publish_properties(Origin::live(QoS::AtLeastOnce)).1.len(),
            3,
            "no header table"
        );
        for qos in [QoS::AtMostOnce, QoS::AtLeastOnce] {
            let (props, raw) = publish_properties(Origin::live(qos));
            let mut encoded = BytesMut::new();
            props.encode(&mut encoded).unwrap();
            assert_eq!(&raw[..], &encoded[..], "the constant encoding matches the properties");
        }
    }

    #[test]
    fn amqp_messages_map_by_delivery_mode() {
        let encode = |p: BasicProperties| {
            let mut b = BytesMut::new();
            p.encode(&mut b).unwrap();
            b
        };
        let persistent = BasicProperties {
            content_type: Some("text/plain".into()),
            content_encoding: Some("utf-8".into()),
            delivery_mode: Some(2),
            ..Default::default()
        };
        assert_eq!(stored_origin(&encode(persistent)), Origin::live(QoS::AtLeastOnce));
        assert_eq!(
            stored_origin(&encode(BasicProperties::default())),
            Origin::live(QoS::AtMostOnce)
        );
        let mut headers = FieldTable::new();
        headers.insert("other", FieldValue::Bool(true));
        let with_headers = BasicProperties {
            headers: Some(headers),
            delivery_mode: Some(2),
            ..Default::default()
        };
        assert_eq!(stored_origin(&encode(with_headers)), Origin::live(QoS::AtLeastOnce));
        assert_eq!(stored_origin(&[0x10]), Origin::live(QoS::AtMostOnce), "truncated input");
        assert_eq!(
            stored_origin(&[0x90, 0x00, 200]),
            Origin::live(QoS::AtMostOnce),
            "truncated string"
        );
    }
}
