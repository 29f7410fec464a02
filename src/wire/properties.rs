//! The 14 `basic` content-header properties.

use bytes::{BufMut, Bytes, BytesMut};

use crate::wire::error::CodecError;
use crate::wire::primitives::{get_shortstr, get_u8, get_u16, get_u64, put_shortstr};
use crate::wire::shortstr::ShortStr;
use crate::wire::table::FieldTable;

const CONTENT_TYPE: u16 = 0x8000;
const CONTENT_ENCODING: u16 = 0x4000;
const HEADERS: u16 = 0x2000;
const DELIVERY_MODE: u16 = 0x1000;
const PRIORITY: u16 = 0x0800;
const CORRELATION_ID: u16 = 0x0400;
const REPLY_TO: u16 = 0x0200;
const EXPIRATION: u16 = 0x0100;
const MESSAGE_ID: u16 = 0x0080;
const TIMESTAMP: u16 = 0x0040;
const TYPE: u16 = 0x0020;
const USER_ID: u16 = 0x0010;
const APP_ID: u16 = 0x0008;
const CLUSTER_ID: u16 = 0x0004;
const CONTINUATION: u16 = 0x0001;

/// Message properties carried in a `basic` content header frame.
///
/// The broker needs them for routing decisions (headers exchange), TTL
/// (`expiration`), persistence (`delivery_mode`), priority queues and
/// user-id validation. Each field is `None` when its presence flag is unset.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BasicProperties {
    /// MIME content type.
    pub content_type: Option<ShortStr>,
    /// MIME content encoding.
    pub content_encoding: Option<ShortStr>,
    /// Application headers (also used by the headers exchange).
    pub headers: Option<FieldTable>,
    /// 1 = transient, 2 = persistent.
    pub delivery_mode: Option<u8>,
    /// Message priority, 0-9.
    pub priority: Option<u8>,
    /// Application correlation identifier.
    pub correlation_id: Option<ShortStr>,
    /// Address to reply to.
    pub reply_to: Option<ShortStr>,
    /// Per-message TTL in milliseconds, as a decimal string.
    pub expiration: Option<ShortStr>,
    /// Application message identifier.
    pub message_id: Option<ShortStr>,
    /// Message timestamp, seconds since the epoch.
    pub timestamp: Option<u64>,
    /// Message type name (the spec's `type`).
    pub kind: Option<ShortStr>,
    /// Creating user id; validated by the broker against the connection user.
    pub user_id: Option<ShortStr>,
    /// Creating application id.
    pub app_id: Option<ShortStr>,
    /// Deprecated cluster id.
    pub cluster_id: Option<ShortStr>,
}

impl BasicProperties {
    /// Whether the publisher asked for the message to survive a restart
    /// (`delivery_mode == 2`).
    pub fn is_persistent(&self) -> bool {
        self.delivery_mode == Some(2)
    }

    /// Property flags word for the fields that are set.
    pub fn flags(&self) -> u16 {
        let mut f = 0;
        let mut set = |present: bool, bit: u16| {
            if present {
                f |= bit;
            }
        };
        set(self.content_type.is_some(), CONTENT_TYPE);
        set(self.content_encoding.is_some(), CONTENT_ENCODING);
        set(self.headers.is_some(), HEADERS);
        set(self.delivery_mode.is_some(), DELIVERY_MODE);
        set(self.priority.is_some(), PRIORITY);
        set(self.correlation_id.is_some(), CORRELATION_ID);
        set(self.reply_to.is_some(), REPLY_TO);
        set(self.expiration.is_some(), EXPIRATION);
        set(self.message_id.is_some(), MESSAGE_ID);
        set(self.timestamp.is_some(), TIMESTAMP);
        set(self.kind.is_some(), TYPE);
        set(self.user_id.is_some(), USER_ID);
        set(self.app_id.is_some(), APP_ID);
        set(self.cluster_id.is_some(), CLUSTER_ID);
        f
    }

    /// Reads the property flags (accepting and skipping continuation flag
    /// words) followed by the fields they announce.
    pub fn decode(buf: &mut Bytes) -> Result<Self, CodecError> {
        let mut p = BasicProperties::default();
        p.decode_into(buf)?;
        Ok(p)
    }

    /// As [`Self::decode`], into a box: what every published message keeps.
    /// Decoding in place spares moving the whole struct (several hundred
    /// bytes) into the box, per message.
    pub fn decode_boxed(buf: &mut Bytes) -> Result<Box<Self>, CodecError> {
        let mut p = Box::<BasicProperties>::default();
        p.decode_into(buf)?;
        Ok(p)
    }

    /// Decodes into `self`, which holds no property yet.
    fn decode_into(&mut self, buf: &mut Bytes) -> Result<(), CodecError> {
        let p = self;
        let flags = get_u16(buf, "property flags")?;
        let mut more = flags & CONTINUATION != 0;
        while more {
            // 0-9-1 defines no properties beyond the first word; skip extra words.
            more = get_u16(buf, "property flags continuation")? & CONTINUATION != 0;
        }
        let has = |bit: u16| flags & bit != 0;
        if has(CONTENT_TYPE) {
            p.content_type = Some(get_shortstr(buf, "content-type")?);
        }
        if has(CONTENT_ENCODING) {
            p.content_encoding = Some(get_shortstr(buf, "content-encoding")?);
        }
        if has(HEADERS) {
            p.headers = Some(FieldTable::decode(buf)?);
        }
        if has(DELIVERY_MODE) {
            p.delivery_mode = Some(get_u8(buf, "delivery-mode")?);
        }
        if has(PRIORITY) {
            p.priority = Some(get_u8(buf, "priority")?);
        }
        if has(CORRELATION_ID) {
            p.correlation_id = Some(get_shortstr(buf, "correlation-id")?);
        }
        if has(REPLY_TO) {
            p.reply_to = Some(get_shortstr(buf, "reply-to")?);
        }
        if has(EXPIRATION) {
            p.expiration = Some(get_shortstr(buf, "expiration")?);
        }
        if has(MESSAGE_ID) {
            p.message_id = Some(get_shortstr(buf, "message-id")?);
        }
        if has(TIMESTAMP) {
            p.timestamp = Some(get_u64(buf, "timestamp")?);
        }
        if has(TYPE) {
            p.kind = Some(get_shortstr(buf, "type")?);
        }
        if has(USER_ID) {
            p.user_id = Some(get_shortstr(buf, "user-id")?);
        }
        if has(APP_ID) {
            p.app_id = Some(get_shortstr(buf, "app-id")?);
        }
        if has(CLUSTER_ID) {
            p.cluster_id = Some(get_shortstr(buf, "cluster-id")?);
        }
        Ok(())
    }

    /// Writes the flags word (never with a continuation) and the set fields.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), CodecError> {
        buf.put_u16(self.flags());
        let s = |buf: &mut BytesMut, v: &Option<ShortStr>| match v {
            Some(v) => put_shortstr(buf, v),
            None => Ok(()),
        };
        s(buf, &self.content_type)?;
        s(buf, &self.content_encoding)?;
        if let Some(h) = &self.headers {
            h.encode(buf)?;
        }
        if let Some(v) = self.delivery_mode {
            buf.put_u8(v);
        }
        if let Some(v) = self.priority {
            buf.put_u8(v);
        }
        s(buf, &self.correlation_id)?;
        s(buf, &self.reply_to)?;
        s(buf, &self.expiration)?;
        s(buf, &self.message_id)?;
        if let Some(v) = self.timestamp {
            buf.put_u64(v);
        }
        s(buf, &self.kind)?;
        s(buf, &self.user_id)?;
        s(buf, &self.app_id)?;
        s(buf, &self.cluster_id)
    }
}

/// The encoding of properties that set nothing but delivery mode `mode` (1
/// transient, anything else persistent): what most messages from MQTT,
/// AMQP 1.0 and stream clients carry, so a constant rather than an encoding
/// per message.
pub fn delivery_mode_only(mode: u8) -> &'static [u8] {
    const TRANSIENT: [u8; 3] = [0x10, 0x00, 0x01];
    const PERSISTENT: [u8; 3] = [0x10, 0x00, 0x02];
    if mode == 1 { &TRANSIENT } else { &PERSISTENT }
}

/// The `expiration` property read straight from encoded properties, without
/// decoding the rest: TTL checks run on every delivery from a queue with a TTL
/// and must not allocate. `None` when absent or when the bytes are malformed.
pub fn raw_expiration(raw: &[u8]) -> Option<&str> {
    let flags = u16::from_be_bytes([*raw.first()?, *raw.get(1)?]);
    if flags & EXPIRATION == 0 || flags & CONTINUATION != 0 {
        return None;
    }
    let mut at = 2usize;
    let short = |at: &mut usize| -> Option<()> {
        let n = usize::from(*raw.get(*at)?);
        *at += 1 + n;
        Some(())
    };
    if flags & CONTENT_TYPE != 0 {
        short(&mut at)?;
    }
    if flags & CONTENT_ENCODING != 0 {
        short(&mut at)?;
    }
    if flags & HEADERS != 0 {
        let len = raw.get(at..at + 4)?;
        at += 4 + u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    }
    if flags & DELIVERY_MODE != 0 {
        at += 1;
    }
    if flags & PRIORITY != 0 {
        at += 1;
    }
    if flags & CORRELATION_ID != 0 {
        short(&mut at)?;
    }
    if flags & REPLY_TO != 0 {
        short(&mut at)?;
    }
    let n = usize::from(*raw.get(at)?);
    std::str::from_utf8(raw.get(at + 1..at + 1 + n)?).ok()
}

/// The encoded `headers` table (its body, without the length prefix) read
/// straight from encoded properties, without decoding anything: lets a queue
/// check a stored message for a header it rarely carries without allocating.
/// `None` when absent or when the bytes are malformed.
pub fn raw_headers(raw: &[u8]) -> Option<&[u8]> {
    let flags = u16::from_be_bytes([*raw.first()?, *raw.get(1)?]);
    if flags & HEADERS == 0 || flags & CONTINUATION != 0 {
        return None;
    }
    let mut at = 2usize;
    for bit in [CONTENT_TYPE, CONTENT_ENCODING] {
        if flags & bit != 0 {
            at += 1 + usize::from(*raw.get(at)?);
        }
    }
    let len = raw.get(at..at + 4)?;
    let n = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    raw.get(at + 4..at + 4 + n)
}

/// Headers whose keys start with this are a protocol adapter's own: AMQP
/// 1.0's original sections of a message, kept for its AMQP 1.0 consumers
/// (see `amqp1::message`). The adapter writes them first in the table, so
/// [`has_private_headers`] finds them without a scan, and other protocols
/// leave them out of what they deliver.
pub const PRIVATE_HEADER_PREFIX: &str = "x-amqp-1.0-";

/// Whether header `key` is a private header (see [`PRIVATE_HEADER_PREFIX`]).
pub fn is_private_header(key: &str) -> bool {
    key.starts_with(PRIVATE_HEADER_PREFIX)
}

/// Whether encoded properties start their headers with a private header:
/// checked on every delivery to a 0-9-1 or MQTT consumer, so it reads a few
/// bytes and allocates nothing.
pub fn has_private_headers(raw: &[u8]) -> bool {
    let Some(table) = raw_headers(raw) else {
        return false;
    };
    let prefix = PRIVATE_HEADER_PREFIX.as_bytes();
    let key_len = usize::from(table.first().copied().unwrap_or(0));
    key_len >= prefix.len() && table.get(1..1 + prefix.len()) == Some(prefix)
}

/// Encoded properties without their private headers (the headers property
/// left out when nothing else remains in it); `None` when there are none to
/// remove or the bytes do not decode.
pub fn without_private_headers(raw: &[u8]) -> Option<Bytes> {
    if !has_private_headers(raw) {
        return None;
    }
    let mut props = BasicProperties::decode(&mut Bytes::copy_from_slice(raw)).ok()?;
    if let Some(h) = props.headers.as_mut() {
        h.0.retain(|(k, _)| !is_private_header(k));
        if h.is_empty() {
            props.headers = None;
        }
    }
    let mut out = BytesMut::new();
    props.encode(&mut out).ok()?;
    Some(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::table::FieldValue;

    /// Every property set, for roundtrip tests.
    fn full() -> BasicProperties {
        let mut headers = FieldTable::new();
        headers.insert("x-match", FieldValue::from("all"));
        BasicProperties {
            content_type: Some("application/json".into()),
            content_encoding: Some("gzip".into()),
            headers: Some(headers),
            delivery_mode: Some(2),
            priority: Some(7),
            correlation_id: Some("corr".into()),
            reply_to: Some("amq.rabbitmq.reply-to".into()),
            expiration: Some("60000".into()),
            message_id: Some("mid".into()),
            timestamp: Some(1_700_000_000),
            kind: Some("type".into()),
            user_id: Some("guest".into()),
            app_id: Some("app".into()),
            cluster_id: Some("cluster".into()),
        }
    }

    fn roundtrip(p: &BasicProperties) {
        let mut out = BytesMut::new();
        p.encode(&mut out).unwrap();
        let mut b = out.freeze();
        let back = BasicProperties::decode(&mut b).unwrap();
        assert!(b.is_empty());
        assert_eq!(&back, p);
    }

    #[test]
    fn roundtrip_all_and_none() {
        let p = full();
        assert_eq!(p.flags(), 0xfffc);
        assert!(p.is_persistent());
        roundtrip(&p);
        let none = BasicProperties::default();
        assert_eq!(none.flags(), 0);
        assert!(!none.is_persistent());
        roundtrip(&none);
        let mut out = BytesMut::new();
        none.encode(&mut out).unwrap();
        assert_eq!(&out[..], &[0, 0]);
    }

    #[test]
    fn raw_expiration_matches_decoded() {
        let mut out = BytesMut::new();
        full().encode(&mut out).unwrap();
        assert_eq!(raw_expiration(&out), Some("60000"));
        let mut out = BytesMut::new();
        BasicProperties::default().encode(&mut out).unwrap();
        assert_eq!(raw_expiration(&out), None);
        assert_eq!(raw_expiration(&[0x01]), None);
        assert_eq!(raw_expiration(&[0x01, 0x00, 9, b'1']), None);
    }

    #[test]
    fn raw_headers_finds_the_table_body() {
        let props = full();
        let mut out = BytesMut::new();
        props.encode(&mut out).unwrap();
        let mut expected = BytesMut::new();
        props.headers.as_ref().unwrap().encode(&mut expected).unwrap();
        assert_eq!(raw_headers(&out), Some(&expected[4..]));
        let mut out = BytesMut::new();
        BasicProperties::default().encode(&mut out).unwrap();
        assert_eq!(raw_headers(&out), None);
        assert_eq!(raw_headers(&[0x20, 0x00, 0, 0, 0, 9]), None);
    }

    #[test]
    fn continuation_words_are_skipped() {
        // delivery-mode + continuation, then two extra flag words, then the value.
        let mut b = Bytes::from_static(&[0x10, 0x01, 0x00, 0x01, 0x00, 0x00, 2]);
        let p = BasicProperties::decode(&mut b).unwrap();
        assert_eq!(p.delivery_mode, Some(2));
        assert!(b.is_empty());
    }

    #[test]
    fn truncated_properties_error() {
        let mut out = BytesMut::new();
        full().encode(&mut out).unwrap();
        let all = out.freeze();
        for n in 0..all.len() {
            let mut b = all.slice(..n);
            assert!(BasicProperties::decode(&mut b).is_err(), "prefix {n}");
        }
    }

    #[test]
    fn private_headers_are_found_first_and_removed() {
        let mut headers = FieldTable::new();
        headers.insert("x-amqp-1.0-properties", FieldValue::from("raw"));
        headers.insert("k", FieldValue::from("v"));
        let props = BasicProperties {
            message_id: Some("m".into()),
            headers: Some(headers),
            ..BasicProperties::default()
        };
        let mut raw = BytesMut::new();
        props.encode(&mut raw).unwrap();
        assert!(has_private_headers(&raw));
        let back = BasicProperties::decode(&mut without_private_headers(&raw).unwrap()).unwrap();
        assert_eq!(back.message_id.as_deref(), Some("m"));
        assert_eq!(back.headers.as_ref().map(|h| h.0.len()), Some(1));
        assert!(without_private_headers(&without_private_headers(&raw).unwrap()).is_none());
        // Only private headers: the headers property goes.
        let mut only = FieldTable::new();
        only.insert("x-amqp-1.0-app-properties", FieldValue::from("raw"));
        let mut raw = BytesMut::new();
        BasicProperties {
            headers: Some(only),
            ..BasicProperties::default()
        }
        .encode(&mut raw)
        .unwrap();
        let back = BasicProperties::decode(&mut without_private_headers(&raw).unwrap()).unwrap();
        assert_eq!(back.headers, None);
        assert!(!has_private_headers(delivery_mode_only(2)));
    }
}
