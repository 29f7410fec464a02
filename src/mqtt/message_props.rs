//! How an MQTT message's QoS and retain flag ride in the core's message
//! properties, so that they survive a stay in a queue and reach AMQP consumers.
//!
//! QoS 0 and 1 messages carry only `delivery_mode` (1 and 2), as RabbitMQ's
//! MQTT plugin maps them, which keeps the common case free of a header table;
//! QoS 2, and retained messages handed to a new subscription, also carry the
//! headers `x-mqtt-publish-qos` and `x-mqtt-retain`. AMQP messages have no such
//! headers: persistent ones count as QoS 1, others as QoS 0.

use bytes::{Bytes, BytesMut};

use super::codec::QoS;
use crate::core::message::Message;
use crate::core::{BasicProperties, FieldTable, FieldValue, ShortStr};

/// Header holding the QoS a message was published with.
pub const QOS_HEADER: &str = "x-mqtt-publish-qos";
/// Header marking a retained message delivered because of a new subscription.
pub const RETAIN_HEADER: &str = "x-mqtt-retain";

const HEADERS_FLAG: u16 = 0x2000;
const DELIVERY_MODE_FLAG: u16 = 0x1000;
const CONTENT_TYPE_FLAG: u16 = 0x8000;
const CONTENT_ENCODING_FLAG: u16 = 0x4000;

/// The properties of a message published over MQTT with `qos`; `retained`
/// marks a copy of a retained message for a new subscription. Returns the
/// parsed properties and their encoding.
pub fn publish_properties(qos: QoS, retained: bool) -> (Box<BasicProperties>, Bytes) {
    let mut props = BasicProperties {
        delivery_mode: Some(if qos == QoS::AtMostOnce { 1 } else { 2 }),
        ..BasicProperties::default()
    };
    if qos != QoS::ExactlyOnce && !retained {
        // Only the flags word and the delivery mode: encoded once, not per message.
        let raw: &'static [u8] = if qos == QoS::AtMostOnce {
            &[0x10, 0x00, 1]
        } else {
            &[0x10, 0x00, 2]
        };
        return (Box::new(props), Bytes::from_static(raw));
    }
    {
        let mut headers = FieldTable::new();
        headers.insert(QOS_HEADER, FieldValue::U8(qos.bits()));
        if retained {
            headers.insert(RETAIN_HEADER, FieldValue::Bool(true));
        }
        props.headers = Some(headers);
    }
    let mut raw = BytesMut::with_capacity(64);
    // A delivery mode and two small headers always encode.
    let _ = props.encode(&mut raw);
    (Box::new(props), raw.freeze())
}

/// A message published over MQTT (or a retained copy, with `retained`) to the
/// topic whose routing key is `routing_key`, as the core routes it through
/// `amq.topic`.
pub fn topic_message(routing_key: String, qos: QoS, retained: bool, payload: Bytes) -> Message {
    let (properties, raw) = publish_properties(qos, retained);
    Message {
        timestamp: Message::now_ms(),
        exchange: ShortStr::from_static(super::session::TOPIC_EXCHANGE),
        routing_key: ShortStr::from(routing_key),
        properties,
        raw_properties: Some(raw),
        body: payload,
    }
}

/// The QoS a stored message was published with, and whether it is a retained
/// copy, read from its encoded properties without allocating in the common
/// case (no headers).
pub fn stored_qos(properties: &[u8]) -> (QoS, bool) {
    let Some((flags, rest)) = properties.split_first_chunk::<2>() else {
        return (QoS::AtMostOnce, false);
    };
    let flags = u16::from_be_bytes(*flags);
    if flags & HEADERS_FLAG == 0 {
        return (qos_of_delivery_mode(delivery_mode_without_headers(flags, rest)), false);
    }
    let Ok(props) = BasicProperties::decode(&mut Bytes::copy_from_slice(properties)) else {
        return (QoS::AtMostOnce, false);
    };
    let headers = props.headers.as_ref();
    let qos = headers
        .and_then(|h| h.get(QOS_HEADER))
        .and_then(FieldValue::as_i64)
        .and_then(|q| QoS::from_bits(q.clamp(0, 2) as u8))
        .unwrap_or_else(|| qos_of_delivery_mode(props.delivery_mode));
    let retain = headers
        .and_then(|h| h.get(RETAIN_HEADER))
        .and_then(FieldValue::as_bool)
        .unwrap_or(false);
    (qos, retain)
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
            for retained in [false, true] {
                let (props, raw) = publish_properties(qos, retained);
                assert_eq!(stored_qos(&raw), (qos, retained));
                assert_eq!(props.is_persistent(), qos != QoS::AtMostOnce);
            }
        }
        assert_eq!(
            publish_properties(QoS::AtLeastOnce, false).1.len(),
            3,
            "no header table"
        );
        for qos in [QoS::AtMostOnce, QoS::AtLeastOnce] {
            let (props, raw) = publish_properties(qos, false);
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
        assert_eq!(stored_qos(&encode(persistent)), (QoS::AtLeastOnce, false));
        assert_eq!(
            stored_qos(&encode(BasicProperties::default())),
            (QoS::AtMostOnce, false)
        );
        let mut headers = FieldTable::new();
        headers.insert("other", FieldValue::Bool(true));
        let with_headers = BasicProperties {
            headers: Some(headers),
            delivery_mode: Some(2),
            ..Default::default()
        };
        assert_eq!(stored_qos(&encode(with_headers)), (QoS::AtLeastOnce, false));
        assert_eq!(stored_qos(&[0x10]), (QoS::AtMostOnce, false), "truncated input");
        assert_eq!(
            stored_qos(&[0x90, 0x00, 200]),
            (QoS::AtMostOnce, false),
            "truncated string"
        );
    }
}
