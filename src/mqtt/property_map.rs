//! MQTT 5 PUBLISH properties in the core's (AMQP) message properties, and
//! back, so that request/response and metadata work between MQTT 5 clients
//! and between MQTT 5 and AMQP clients, as RabbitMQ maps them:
//!
//! | MQTT 5                     | AMQP 0-9-1                                      |
//! |----------------------------|-------------------------------------------------|
//! | content type               | `content_type`                                  |
//! | response topic `a/b`       | `reply_to` `a.b` (a routing key of `amq.topic`) |
//! | correlation data           | `correlation_id`, or header `x-correlation-id` when not UTF-8 or over 255 bytes |
//! | user properties            | headers with string values, in order            |
//! | message expiry interval    | `expiration` (ms); the remaining interval on delivery |
//! | payload format indicator   | header `x-mqtt-payload-format-indicator`        |

use super::codec::{MqttStr, Properties};
use super::message_props::DELIVERY_MODE_FLAG;
use super::topic_map::{topic_to_routing_key, write_topic};
use crate::core::{BasicProperties, FieldValue, ShortStr};

/// Header carrying correlation data that does not fit `correlation_id`.
pub const CORRELATION_HEADER: &str = "x-correlation-id";
/// Header carrying the payload format indicator.
pub const PAYLOAD_FORMAT_HEADER: &str = "x-mqtt-payload-format-indicator";

/// Headers of the broker's own that are not user properties.
fn is_internal_header(name: &str) -> bool {
    name.starts_with("x-mqtt-") || name == CORRELATION_HEADER || crate::wire::properties::is_private_header(name)
}

/// A short string, or `None` when it would not fit AMQP's 255 bytes.
fn short(s: &str) -> Option<ShortStr> {
    (s.len() <= 255).then(|| ShortStr::from(s.to_string()))
}

/// Adds what an MQTT 5 PUBLISH's properties say to the core properties of
/// its message.
pub fn apply_publish_properties(props: &mut BasicProperties, p: &Properties) {
    if let Some(ct) = &p.content_type {
        props.content_type = short(ct.as_str());
    }
    if let Some(topic) = &p.response_topic {
        props.reply_to = short(&topic_to_routing_key(topic.as_str()));
    }
    let mut headers = props.headers.take().unwrap_or_default();
    if let Some(data) = &p.correlation_data {
        match std::str::from_utf8(data).ok().and_then(short) {
            Some(id) => props.correlation_id = Some(id),
            None => headers.insert(CORRELATION_HEADER, FieldValue::ByteArray(data.clone())),
        }
    }
    if let Some(secs) = p.message_expiry_interval {
        let ms = u64::from(secs) * 1000;
        props.expiration = Some(ShortStr::from(ms.to_string()));
    }
    if let Some(indicator) = p.payload_format_indicator {
        headers.insert(PAYLOAD_FORMAT_HEADER, FieldValue::U8(indicator));
    }
    for (name, value) in &p.user_properties {
        if name.len() <= 255 {
            // Pushed, not inserted: MQTT keeps repeated names and their order.
            headers.0.push((
                ShortStr::from(name.to_string()),
                FieldValue::LongStr(value.as_bytes().clone()),
            ));
        }
    }
    if !headers.is_empty() {
        props.headers = Some(headers);
    }
}

fn mqtt_str(s: &str) -> Option<MqttStr> {
    MqttStr::try_from(s).ok()
}

/// The MQTT 5 properties a delivery of a message with these core properties
/// carries. `age_ms` is how long the message has been in the broker, taken
/// off its expiry interval [MQTT-3.3.2-6].
pub fn delivery_properties(props: &BasicProperties, age_ms: i64, out: &mut Properties) {
    if let Some(ct) = &props.content_type {
        out.content_type = mqtt_str(ct.as_str());
    }
    if let Some(reply_to) = &props.reply_to {
        let mut topic = String::with_capacity(reply_to.len());
        write_topic(reply_to.as_str(), &mut topic);
        out.response_topic = mqtt_str(&topic);
    }
    if let Some(id) = &props.correlation_id {
        out.correlation_data = Some(id.as_bytes().clone());
    }
    if let Some(ms) = props.expiration.as_ref().and_then(|e| e.as_str().parse::<i64>().ok()) {
        let left_ms = ms.saturating_sub(age_ms.max(0)).max(0);
        // Rounded up: a message with some time left does not say 0.
        out.message_expiry_interval = Some(u32::try_from(left_ms.saturating_add(999) / 1000).unwrap_or(u32::MAX));
    }
    let Some(headers) = &props.headers else { return };
    for (name, value) in headers.iter() {
        match name.as_str() {
            CORRELATION_HEADER => {
                if let FieldValue::ByteArray(b) | FieldValue::LongStr(b) = value {
                    out.correlation_data = Some(b.clone());
                }
            }
            PAYLOAD_FORMAT_HEADER => {
                out.payload_format_indicator = value.as_i64().map(|v| u8::from(v == 1));
            }
            n if is_internal_header(n) => {}
            n => {
                if let Some(v) = header_text(value)
                    && let (Some(k), Some(v)) = (mqtt_str(n), mqtt_str(v))
                {
                    out.user_properties.push((k, v));
                }
            }
        }
    }
}

/// A header value as text, for headers of string type.
fn header_text(value: &FieldValue) -> Option<&str> {
    match value {
        FieldValue::LongStr(b) => std::str::from_utf8(b).ok(),
        other => other.as_str(),
    }
}

/// Whether a message carries anything beyond its delivery mode (and the
/// MQTT origin headers), read from the flags word of its encoded properties;
/// a delivery needs the full decode only then.
pub fn has_mapped_properties(encoded: &[u8]) -> bool {
    encoded
        .first_chunk::<2>()
        .is_some_and(|f| u16::from_be_bytes(*f) & !DELIVERY_MODE_FLAG != 0)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// The correlation data of a message, wherever it rides.
    fn correlation_bytes(props: &BasicProperties) -> Option<Bytes> {
        props
            .correlation_id
            .as_ref()
            .map(|id| id.as_bytes().clone())
            .or_else(|| {
                props
                    .headers
                    .as_ref()
                    .and_then(|h| h.get(CORRELATION_HEADER))
                    .and_then(|v| match v {
                        FieldValue::ByteArray(b) | FieldValue::LongStr(b) => Some(b.clone()),
                        _ => None,
                    })
            })
    }

    fn s(text: &str) -> MqttStr {
        MqttStr::try_from(text).unwrap()
    }

    #[test]
    fn publish_properties_round_trip_through_amqp() {
        let p = Properties {
            content_type: Some(s("text/plain")),
            response_topic: Some(s("resp/x")),
            correlation_data: Some(Bytes::from_static(b"c-1")),
            message_expiry_interval: Some(60),
            payload_format_indicator: Some(1),
            user_properties: vec![(s("k"), s("v")), (s("k"), s("w"))],
            ..Properties::default()
        };
        let mut amqp = BasicProperties::default();
        apply_publish_properties(&mut amqp, &p);
        assert_eq!(amqp.reply_to.as_ref().unwrap().as_str(), "resp.x");
        assert_eq!(amqp.correlation_id.as_ref().unwrap().as_str(), "c-1");
        assert_eq!(amqp.expiration.as_ref().unwrap().as_str(), "60000");
        let mut back = Properties::default();
        delivery_properties(&amqp, 1500, &mut back);
        assert_eq!(back.message_expiry_interval, Some(59));
        back.message_expiry_interval = Some(60);
        assert_eq!(back, p);
    }

    #[test]
    fn binary_correlation_data_rides_in_a_header() {
        let p = Properties {
            correlation_data: Some(Bytes::from_static(b"\xff\x00")),
            ..Properties::default()
        };
        let mut amqp = BasicProperties::default();
        apply_publish_properties(&mut amqp, &p);
        assert!(amqp.correlation_id.is_none());
        assert_eq!(correlation_bytes(&amqp).as_deref(), Some(&b"\xff\x00"[..]));
        let mut back = Properties::default();
        delivery_properties(&amqp, 0, &mut back);
        assert_eq!(back.correlation_data.as_deref(), Some(&b"\xff\x00"[..]));
        assert!(back.user_properties.is_empty());
    }

    #[test]
    fn expired_interval_is_zero_not_negative() {
        let amqp = BasicProperties {
            expiration: Some(ShortStr::from("1000".to_string())),
            ..BasicProperties::default()
        };
        let mut back = Properties::default();
        delivery_properties(&amqp, 5000, &mut back);
        assert_eq!(back.message_expiry_interval, Some(0));
    }

    #[test]
    fn flags_tell_when_to_decode() {
        assert!(!has_mapped_properties(&[0x10, 0, 1]));
        assert!(has_mapped_properties(&[0x30, 0, 0, 0, 0, 0, 1]));
        assert!(!has_mapped_properties(&[]));
    }
}
