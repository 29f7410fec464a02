//! The key a compacted stream keeps the newest message of: set by the queue
//! argument `x-stream-compaction` or the policy key `stream-compaction`, as
//! `routing-key` or `header:<name>`. The store does the compaction
//! ([`crate::store::stream_compaction`]); this says what a message's key is.

use bytes::Bytes;

use super::{FieldTable, FieldValue};
use crate::store::record::RecordView;

/// Where a message's compaction key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompactionKey {
    /// The routing key it was published with (an MQTT topic, for example).
    RoutingKey,
    /// The value of this header (application property); messages without
    /// it have no key and are all kept.
    Header(String),
}

/// The header form's prefix.
const HEADER_PREFIX: &str = "header:";

impl CompactionKey {
    /// Parses `routing-key` or `header:<name>` (a non-empty name).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "routing-key" => Some(CompactionKey::RoutingKey),
            _ => s
                .strip_prefix(HEADER_PREFIX)
                .filter(|name| !name.is_empty())
                .map(|name| CompactionKey::Header(name.to_string())),
        }
    }

    /// The key of a stored message, `None` when it has none. A header's
    /// string value is its key as it is; any other value, its text.
    pub fn of(&self, v: &RecordView<'_>) -> Option<Box<[u8]>> {
        match self {
            CompactionKey::RoutingKey => Some(v.routing_key.as_bytes().into()),
            CompactionKey::Header(name) => {
                // Only the headers are decoded, and only when there are some.
                let raw = crate::wire::properties::raw_headers(v.properties)?;
                let headers = FieldTable::decode_body(Bytes::copy_from_slice(raw)).ok()?;
                let value = headers.get(name)?.clone();
                Some(match value {
                    FieldValue::LongStr(b) | FieldValue::ByteArray(b) => b.as_ref().into(),
                    FieldValue::Void => return None,
                    other => match other.as_i64() {
                        Some(n) => n.to_string().into_bytes().into(),
                        None => format!("{other:?}").into_bytes().into(),
                    },
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::BasicProperties;

    fn view<'a>(routing_key: &'a str, props: &'a [u8]) -> RecordView<'a> {
        RecordView {
            timestamp: 1,
            exchange: "",
            routing_key,
            properties: props,
            body: b"",
        }
    }

    #[test]
    fn parses_both_forms_and_reads_keys() {
        assert_eq!(CompactionKey::parse("routing-key"), Some(CompactionKey::RoutingKey));
        assert_eq!(
            CompactionKey::parse("header:id"),
            Some(CompactionKey::Header("id".into()))
        );
        for bad in ["", "header:", "header", "Routing-Key", "key"] {
            assert_eq!(CompactionKey::parse(bad), None, "{bad}");
        }
        assert_eq!(
            CompactionKey::RoutingKey.of(&view("sensor.1", &[0, 0])).as_deref(),
            Some(&b"sensor.1"[..])
        );
        let mut headers = FieldTable::new();
        headers.insert("id", FieldValue::LongStr(Bytes::from_static(b"a")));
        headers.insert("n", FieldValue::I32(7));
        let props = BasicProperties {
            headers: Some(headers),
            ..Default::default()
        };
        let mut raw = bytes::BytesMut::new();
        props.encode(&mut raw).unwrap();
        let key = |name: &str| CompactionKey::Header(name.into()).of(&view("rk", &raw));
        assert_eq!(key("id").as_deref(), Some(&b"a"[..]));
        assert_eq!(key("n").as_deref(), Some(&b"7"[..]));
        assert_eq!(key("missing"), None);
        assert_eq!(CompactionKey::Header("id".into()).of(&view("rk", &[0, 0])), None);
    }
}
