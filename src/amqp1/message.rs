//! AMQP 1.0 messages and the core's: the sections of a received message
//! mapped onto the properties and headers every protocol shares, and a
//! stored message written back as sections for an AMQP 1.0 consumer, as
//! RabbitMQ 4 documents the conversion.
//!
//! A body that is not a single data section (an amqp-value or an
//! amqp-sequence) is stored as its encoded sections with the content type
//! `message/vnd.rabbitmq.amqp`, RabbitMQ's marker for it: an AMQP 1.0
//! consumer gets those sections back byte for byte.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::codec::types::{DecodeError, Descriptor, Value, encode_described_list};
use crate::wire::properties::is_private_header;
use crate::wire::{BasicProperties, FieldTable, FieldValue, ShortStr};

/// The content type under which a body that is not one data section is
/// stored (RabbitMQ's).
pub const AMQP_BODY_TYPE: &str = "message/vnd.rabbitmq.amqp";

/// The header that keeps a received message's properties section as it was
/// encoded (RabbitMQ 3.13's name for it): the shared properties cannot hold
/// `to`, `subject`, group ids, expiry times or non-string ids, so an AMQP 1.0
/// consumer gets the section back byte for byte from here.
pub const ORIGINAL_PROPERTIES: &str = "x-amqp-1.0-properties";

/// The header that keeps a received message's application-properties
/// section as it was encoded: their types (uint, symbol, char, ...) and keys
/// longer than a 0-9-1 header's survive for AMQP 1.0 consumers.
pub const ORIGINAL_APPLICATION_PROPERTIES: &str = "x-amqp-1.0-app-properties";

/// Section descriptor codes.
mod section {
    pub const HEADER: u64 = 0x70;
    pub const DELIVERY_ANNOTATIONS: u64 = 0x71;
    pub const MESSAGE_ANNOTATIONS: u64 = 0x72;
    pub const PROPERTIES: u64 = 0x73;
    pub const APPLICATION_PROPERTIES: u64 = 0x74;
    pub const DATA: u64 = 0x75;
    pub const AMQP_SEQUENCE: u64 = 0x76;
    pub const AMQP_VALUE: u64 = 0x77;
    pub const FOOTER: u64 = 0x78;
}

/// Why a transfer's payload is not a message.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MessageError {
    /// Not valid AMQP 1.0 encoding.
    #[error("{0}")]
    Decode(#[from] DecodeError),
    /// Valid encoding, but not the sections of a message.
    #[error("{0}")]
    Invalid(&'static str),
}

/// A received message, its sections read.
#[derive(Debug, Default)]
pub struct Received {
    /// The header's durable flag (true when there is no header: RabbitMQ
    /// keeps messages unless told they may go).
    pub durable: bool,
    /// The header's priority.
    pub priority: Option<u8>,
    /// The header's time to live in milliseconds.
    pub ttl: Option<u32>,
    /// The properties' `to`: where a link without a target address sends it.
    pub to: Option<String>,
    /// The properties' `subject`: the routing key for `/exchanges/X`.
    pub subject: Option<String>,
    /// Properties and headers as the core keeps them (boxed as the core's
    /// message holds them, so that the parsed message moves cheaply).
    pub properties: Box<BasicProperties>,
    /// The body: a data section's bytes, or the encoded body sections.
    pub body: Bytes,
    /// `properties` already encoded for the store, when the message set
    /// nothing but its durability.
    pub raw_properties: Option<Bytes>,
}

fn described(v: &Value) -> Option<(u64, &Value)> {
    match v {
        Value::Described(d, inner) => match **d {
            Descriptor::Code(c) => Some((c, inner)),
            Descriptor::Name(_) => None,
        },
        _ => None,
    }
}

fn short(s: &str) -> Option<ShortStr> {
    (s.len() <= 255).then(|| ShortStr::from(s))
}

/// A message or correlation id as the 0-9-1 string it becomes.
fn id_string(v: &Value) -> Option<ShortStr> {
    match v {
        Value::String(s) => short(s),
        Value::Ulong(n) => Some(ShortStr::from(n.to_string())),
        Value::Uuid(u) => {
            let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
            Some(ShortStr::from(format!(
                "{}-{}-{}-{}-{}",
                &h[0..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..32]
            )))
        }
        Value::Binary(b) => std::str::from_utf8(b).ok().and_then(short),
        _ => None,
    }
}

/// A simple AMQP 1.0 value as a header value; compound values have none.
pub fn to_field(v: &Value) -> Option<FieldValue> {
    Some(match v {
        Value::Null => FieldValue::Void,
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Ubyte(n) => FieldValue::U8(*n),
        Value::Ushort(n) => FieldValue::U16(*n),
        Value::Uint(n) => FieldValue::I64(i64::from(*n)),
        Value::Ulong(n) => FieldValue::I64(i64::try_from(*n).ok()?),
        Value::Byte(n) => FieldValue::I8(*n),
        Value::Short(n) => FieldValue::I16(*n),
        Value::Int(n) => FieldValue::I32(*n),
        Value::Long(n) => FieldValue::I64(*n),
        Value::Float(f) => FieldValue::F32(*f),
        Value::Double(f) => FieldValue::F64(*f),
        Value::Timestamp(ms) => FieldValue::Timestamp((*ms / 1000).max(0) as u64),
        Value::String(s) | Value::Symbol(s) => FieldValue::LongStr(Bytes::copy_from_slice(s.as_bytes())),
        Value::Char(c) => FieldValue::LongStr(Bytes::copy_from_slice(c.to_string().as_bytes())),
        Value::Binary(b) => FieldValue::ByteArray(b.clone()),
        _ => return None,
    })
}

/// A header value as an application property; tables, arrays and decimals
/// have none (application properties hold simple values only).
pub fn from_field(v: &FieldValue) -> Option<Value> {
    Some(match v {
        FieldValue::Bool(b) => Value::Bool(*b),
        FieldValue::I8(n) => Value::Byte(*n),
        FieldValue::U8(n) => Value::Ubyte(*n),
        FieldValue::I16(n) => Value::Short(*n),
        FieldValue::U16(n) => Value::Ushort(*n),
        FieldValue::I32(n) => Value::Int(*n),
        FieldValue::U32(n) => Value::Uint(*n),
        FieldValue::I64(n) => Value::Long(*n),
        FieldValue::F32(f) => Value::Float(*f),
        FieldValue::F64(f) => Value::Double(*f),
        FieldValue::LongStr(b) => match std::str::from_utf8(b) {
            Ok(s) => Value::String(s.to_owned()),
            Err(_) => Value::Binary(b.clone()),
        },
        FieldValue::Timestamp(s) => Value::Timestamp((*s as i64).saturating_mul(1000)),
        FieldValue::Void => Value::Null,
        FieldValue::ByteArray(b) => Value::Binary(b.clone()),
        FieldValue::Decimal { .. } | FieldValue::Array(_) | FieldValue::Table(_) => return None,
    })
}

fn map_pairs(v: &Value) -> &[(Value, Value)] {
    match v {
        Value::Map(pairs) => pairs,
        _ => &[],
    }
}

fn list_items(v: &Value) -> &[Value] {
    match v {
        Value::List(items) => items,
        _ => &[],
    }
}

/// The layout of the message most clients send: at most a header that sets
/// only `durable`, then one data section. Gives the durable flag and where
/// the data starts; `None` for any other layout.
fn plain_layout(payload: &[u8]) -> Option<(bool, usize)> {
    let mut at = 0;
    let durable = match payload.get(..3)? {
        [0x00, 0x53, 0x70] => {
            let (durable, len) = match payload.get(3..)? {
                [0x45, ..] => (false, 1),
                [0xc0, 0x02, 0x01, flag, ..] => (
                    match flag {
                        0x41 => true,
                        0x42 | 0x40 => false,
                        _ => return None,
                    },
                    4,
                ),
                _ => return None,
            };
            at = 3 + len;
            durable
        }
        _ => true,
    };
    let (start, len) = match payload.get(at..at + 4)? {
        [0x00, 0x53, 0x75, 0xa0] => (at + 5, usize::from(*payload.get(at + 4)?)),
        [0x00, 0x53, 0x75, 0xb0] => (
            at + 8,
            u32::from_be_bytes(payload.get(at + 4..at + 8)?.try_into().ok()?) as usize,
        ),
        _ => return None,
    };
    if start.checked_add(len)? != payload.len() {
        return None;
    }
    Some((durable, start))
}

impl Received {
    /// Reads the sections of a transfer's payload.
    pub fn parse(payload: &Bytes) -> Result<Received, MessageError> {
        match Self::parse_plain(payload) {
            Some(m) => Ok(m),
            None => Self::parse_sections(payload),
        }
    }

    /// Reads every section through the value tree: any message the plain
    /// layout (see [`plain_layout`]) does not cover.
    fn parse_sections(payload: &Bytes) -> Result<Received, MessageError> {
        let mut m = Received {
            durable: true,
            ..Received::default()
        };
        let mut headers = FieldTable::default();
        let mut rest = &payload[..];
        let mut body_start = None;
        let mut body_end = payload.len();
        let mut data_sections = 0;
        let mut data: Option<Bytes> = None;
        let mut originals: [Option<(&str, Bytes)>; 2] = [None, None];
        while !rest.is_empty() {
            let at = payload.len() - rest.len();
            let v = Value::decode(&mut rest)?;
            let Some((code, inner)) = described(&v) else {
                return Err(MessageError::Invalid("a message section is not a described type"));
            };
            match code {
                section::HEADER => {
                    let f = list_items(inner);
                    let at = |i: usize| f.get(i).unwrap_or(&Value::Null);
                    m.durable = at(0).as_bool().unwrap_or(false);
                    m.priority = at(1).as_u32().map(|p| p.min(255) as u8);
                    m.ttl = at(2).as_u32();
                    if let Some(n) = at(4).as_u32().filter(|n| *n > 0) {
                        headers.insert("x-delivery-count", FieldValue::I64(i64::from(n)));
                    }
                }
                section::DELIVERY_ANNOTATIONS => {}
                section::MESSAGE_ANNOTATIONS => {
                    for (k, v) in map_pairs(inner) {
                        let Some(k) = k.as_str() else { continue };
                        // RabbitMQ's own annotations describe the broker's
                        // routing, which this publish sets afresh; the
                        // original sections are the broker's to keep.
                        if k == "x-exchange" || k == "x-routing-key" || is_private_header(k) || k.len() > 255 {
                            continue;
                        }
                        if let Some(f) = to_field(v) {
                            headers.insert(k, f);
                        }
                    }
                }
                section::PROPERTIES => {
                    m.read_properties(list_items(inner));
                    let end = payload.len() - rest.len();
                    originals[0] = Some((ORIGINAL_PROPERTIES, payload.slice(at..end)));
                }
                section::APPLICATION_PROPERTIES => {
                    let end = payload.len() - rest.len();
                    originals[1] = Some((ORIGINAL_APPLICATION_PROPERTIES, payload.slice(at..end)));
                    for (k, v) in map_pairs(inner) {
                        if let (Some(k), Some(f)) = (k.as_str().filter(|k| k.len() <= 255), to_field(v)) {
                            headers.insert(k, f);
                        }
                    }
                }
                section::DATA | section::AMQP_SEQUENCE | section::AMQP_VALUE => {
                    if body_start.is_none() {
                        body_start = Some(at);
                    }
                    body_end = payload.len() - rest.len();
                    if code == section::DATA {
                        data_sections += 1;
                        data = inner.as_binary().cloned();
                    } else {
                        data_sections = usize::MAX / 2;
                    }
                }
                section::FOOTER => {}
                _ => return Err(MessageError::Invalid("unknown message section")),
            }
        }
        let Some(start) = body_start else {
            return Err(MessageError::Invalid("a message needs a body section"));
        };
        if data_sections == 1 {
            m.body = data.unwrap_or_default();
        } else {
            m.body = payload.slice(start..body_end);
            m.properties.content_type = Some(ShortStr::from(AMQP_BODY_TYPE));
        }
        m.properties.delivery_mode = Some(if m.durable { 2 } else { 1 });
        m.properties.priority = m.priority;
        if let Some(ttl) = m.ttl {
            m.properties.expiration = Some(ShortStr::from(ttl.to_string()));
        }
        // First in the table, where other protocols' deliveries find them
        // without a scan (see `wire::properties::has_private_headers`).
        let originals = originals
            .into_iter()
            .flatten()
            .map(|(k, v)| (ShortStr::from(k), FieldValue::LongStr(v)));
        headers.0.splice(0..0, originals);
        if !headers.is_empty() {
            m.properties.headers = Some(headers);
        }
        Ok(m)
    }

    /// [`Received::parse`] for a payload the caller gives up: the message
    /// most clients send keeps the payload itself as its body, advanced past
    /// the sections before it, rather than a second reference to count.
    /// A `spare` box, from an earlier message, holds its properties.
    pub fn parse_owned(mut payload: Bytes, spare: Option<Box<BasicProperties>>) -> Result<Received, MessageError> {
        match plain_layout(&payload) {
            Some((durable, start)) => {
                payload.advance(start);
                Ok(Self::plain(durable, payload, spare))
            }
            None => Self::parse_sections(&payload),
        }
    }

    /// The message most clients send, read without the value tree (see
    /// [`plain_layout`]); `None` for anything else, which
    /// [`Received::parse`] reads in full (to the same result for these).
    fn parse_plain(payload: &Bytes) -> Option<Received> {
        let (durable, start) = plain_layout(payload)?;
        Some(Self::plain(durable, payload.slice(start..), None))
    }

    fn plain(durable: bool, body: Bytes, spare: Option<Box<BasicProperties>>) -> Received {
        let mode = if durable { 2 } else { 1 };
        let fresh = BasicProperties {
            delivery_mode: Some(mode),
            ..BasicProperties::default()
        };
        let properties = match spare {
            Some(mut b) => {
                *b = fresh;
                b
            }
            None => Box::new(fresh),
        };
        Received {
            durable,
            properties,
            body,
            raw_properties: Some(Bytes::from_static(crate::wire::properties::delivery_mode_only(mode))),
            ..Received::default()
        }
    }

    fn read_properties(&mut self, f: &[Value]) {
        let at = |i: usize| f.get(i).unwrap_or(&Value::Null);
        let p = &mut self.properties;
        p.message_id = id_string(at(0));
        p.user_id = at(1)
            .as_binary()
            .and_then(|b| std::str::from_utf8(b).ok())
            .and_then(short);
        self.to = at(2).as_str().map(str::to_owned);
        self.subject = at(3).as_str().map(str::to_owned);
        p.reply_to = at(4).as_str().and_then(short);
        p.correlation_id = id_string(at(5));
        if p.content_type.is_none() {
            p.content_type = at(6).as_str().and_then(short);
        }
        p.content_encoding = at(7).as_str().and_then(short);
        if let Value::Timestamp(ms) = at(9) {
            p.timestamp = Some((*ms / 1000).max(0) as u64);
        }
        // RabbitMQ 4's mapping: group-id is 0-9-1's app-id.
        p.app_id = at(10).as_str().and_then(short);
    }
}

/// Writes a stored message as the sections of an AMQP 1.0 message: header,
/// message annotations (the exchange and routing key, and `x-` headers),
/// properties, application properties (the other headers) and the body.
pub fn write_stored(
    out: &mut BytesMut,
    exchange: &str,
    routing_key: &str,
    props: &BasicProperties,
    body: &[u8],
    redelivered: bool,
) {
    let delivery_count = props
        .headers
        .as_ref()
        .and_then(|h| h.get("x-delivery-count"))
        .and_then(FieldValue::as_i64)
        .unwrap_or(0)
        .max(0) as u32;
    let ttl = props.expiration.as_ref().and_then(|e| e.parse::<u32>().ok());
    // first-acquirer: no earlier delivery of this message was made.
    put_header_section(
        out,
        props.is_persistent(),
        props.priority,
        ttl,
        !redelivered,
        (delivery_count > 0).then_some(delivery_count),
    );
    let headers = props.headers.as_ref();
    let original_properties = original_section(props, ORIGINAL_PROPERTIES, section::PROPERTIES);
    let original_application =
        original_section(props, ORIGINAL_APPLICATION_PROPERTIES, section::APPLICATION_PROPERTIES);
    let annotated = headers.is_some_and(|h| h.iter().any(|(k, _)| is_annotation(k)));
    if !annotated {
        // The usual case: the exchange and routing key are the only
        // annotations, written without building values.
        put_routing_annotations(out, exchange, routing_key);
    }
    let mut app = Vec::new();
    let mut annotations = Vec::new();
    for (k, v) in headers.into_iter().flat_map(FieldTable::iter) {
        let annotation = is_annotation(k);
        if !annotation && (original_application.is_some() || k.starts_with("x-")) {
            continue;
        }
        let Some(v) = from_field(v) else { continue };
        if annotation {
            annotations.push((Value::Symbol(k.to_string()), v));
        } else {
            app.push((Value::String(k.to_string()), v));
        }
    }
    if annotated {
        let routing = [
            (Value::Symbol("x-exchange".into()), Value::String(exchange.to_owned())),
            (
                Value::Symbol("x-routing-key".into()),
                Value::String(routing_key.to_owned()),
            ),
        ];
        annotations.splice(0..0, routing);
        out.put_slice(&[0x00, 0x53, section::MESSAGE_ANNOTATIONS as u8]);
        Value::Map(annotations).encode(out);
    }
    let amqp_body = props.content_type.as_deref() == Some(AMQP_BODY_TYPE);
    if let Some(raw) = original_properties {
        out.put_slice(raw);
    } else if has_properties_section(props, amqp_body) {
        put_properties_section(out, props, amqp_body);
    }
    if let Some(raw) = original_application {
        out.put_slice(raw);
    } else if !app.is_empty() {
        out.put_slice(&[0x00, 0x53, section::APPLICATION_PROPERTIES as u8]);
        Value::Map(app).encode(out);
    }
    if amqp_body && !body.is_empty() {
        out.put_slice(body);
    } else {
        write_data_section(out, body);
    }
}

/// [`write_stored`] for the message most clients send: its stored
/// properties set nothing but the delivery mode (`persistent` when 2), so
/// the sections are written without building the properties first.
pub fn write_plain_stored(
    out: &mut BytesMut,
    exchange: &str,
    routing_key: &str,
    persistent: bool,
    body: &[u8],
    redelivered: bool,
) {
    put_header_section(out, persistent, None, None, !redelivered, None);
    put_routing_annotations(out, exchange, routing_key);
    write_data_section(out, body);
}

/// The original section a stored message keeps in header `key`, when it is
/// one well-formed section with descriptor `code`.
fn original_section<'a>(props: &'a BasicProperties, key: &str, code: u64) -> Option<&'a Bytes> {
    match props.headers.as_ref()?.get(key)? {
        FieldValue::LongStr(b) if is_section(b, code) => Some(b),
        _ => None,
    }
}

/// Whether a header goes out as a message annotation: the `x-` headers but
/// the delivery count (the header section's) and the original sections.
fn is_annotation(key: &str) -> bool {
    key.starts_with("x-") && key != "x-delivery-count" && !is_private_header(key)
}

/// Whether `raw` is one well-formed section with descriptor `code`: what an
/// original section kept in a header must be before it is sent as is (a
/// 0-9-1 publisher may set the same header to anything).
fn is_section(raw: &[u8], code: u64) -> bool {
    let descriptor_ok = match raw {
        [0x00, 0x53, c, ..] => u64::from(*c) == code,
        [0x00, 0x80, rest @ ..] => rest
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .is_some_and(|b| u64::from_be_bytes(b) == code),
        _ => false,
    };
    descriptor_ok && super::codec::types::skip(raw) == Ok(raw.len())
}

/// Whether a stored message has any of the fields the properties section
/// carries (most have none: the section is then left out).
fn has_properties_section(props: &BasicProperties, amqp_body: bool) -> bool {
    props.message_id.is_some()
        || props.user_id.is_some()
        || props.reply_to.is_some()
        || props.correlation_id.is_some()
        || (props.content_type.is_some() && !amqp_body)
        || props.content_encoding.is_some()
        || props.timestamp.is_some()
        || props.app_id.is_some()
}

/// Appends the properties section of a stored message.
fn put_properties_section(out: &mut BytesMut, props: &BasicProperties, amqp_body: bool) {
    encode_described_list(section::PROPERTIES, &mapped_properties(props, amqp_body), out);
}

/// The fields of the properties section the shared properties give (up to
/// group-id; the rest have no place there).
fn mapped_properties(props: &BasicProperties, amqp_body: bool) -> [Value; 11] {
    let s = |v: &Option<ShortStr>| v.as_ref().map_or(Value::Null, |s| Value::String(s.to_string()));
    let sym = |v: &Option<ShortStr>| v.as_ref().map_or(Value::Null, |s| Value::Symbol(s.to_string()));
    [
        s(&props.message_id),
        props
            .user_id
            .as_ref()
            .map_or(Value::Null, |u| Value::Binary(Bytes::copy_from_slice(u.as_bytes()))),
        Value::Null,
        Value::Null,
        s(&props.reply_to),
        s(&props.correlation_id),
        if amqp_body {
            Value::Null
        } else {
            sym(&props.content_type)
        },
        sym(&props.content_encoding),
        Value::Null,
        props
            .timestamp
            .map_or(Value::Null, |t| Value::Timestamp((t as i64).saturating_mul(1000))),
        s(&props.app_id),
    ]
}

/// The fields of a stored message's properties section as an AMQP 1.0
/// consumer would get them: the original section's when the message came
/// over AMQP 1.0, else those mapped from the shared properties.
pub fn properties_fields(props: &BasicProperties) -> Vec<Value> {
    let original =
        original_section(props, ORIGINAL_PROPERTIES, section::PROPERTIES).and_then(|b| Value::decode(&mut &b[..]).ok());
    match original.as_ref().and_then(described) {
        Some((_, inner)) => list_items(inner).to_vec(),
        None => {
            let amqp_body = props.content_type.as_deref() == Some(AMQP_BODY_TYPE);
            mapped_properties(props, amqp_body).to_vec()
        }
    }
}

/// Appends the header section: a list of scalars, written directly.
fn put_header_section(
    out: &mut BytesMut,
    durable: bool,
    priority: Option<u8>,
    ttl: Option<u32>,
    first_acquirer: bool,
    delivery_count: Option<u32>,
) {
    let bool_byte = |b: bool| if b { 0x41 } else { 0x42 };
    // A missing delivery count is left off the end, as the value encoder
    // leaves trailing nulls.
    let (count, count_len) = match delivery_count {
        Some(_) => (5, 5),
        None => (4, 0),
    };
    let size = 1 + 1 + priority.map_or(1, |_| 2) + ttl.map_or(1, |_| 5) + 1 + count_len;
    out.put_slice(&[0x00, 0x53, section::HEADER as u8, 0xc0, size as u8, count]);
    out.put_u8(bool_byte(durable));
    match priority {
        Some(p) => out.put_slice(&[0x50, p]),
        None => out.put_u8(0x40),
    }
    match ttl {
        Some(n) => {
            out.put_u8(0x70);
            out.put_u32(n);
        }
        None => out.put_u8(0x40),
    }
    out.put_u8(bool_byte(first_acquirer));
    if let Some(n) = delivery_count {
        out.put_u8(0x70);
        out.put_u32(n);
    }
}

/// Appends the message annotations `x-exchange` and `x-routing-key`
/// (both at most 255 bytes: short strings).
fn put_routing_annotations(out: &mut BytesMut, exchange: &str, routing_key: &str) {
    let entry = |key: &str, value: &str| 2 + key.len() + str_len(value);
    let size = 4 + entry("x-exchange", exchange) + entry("x-routing-key", routing_key);
    out.reserve(8 + size);
    out.put_slice(&[0x00, 0x53, section::MESSAGE_ANNOTATIONS as u8, 0xd1]);
    out.put_u32(size as u32);
    out.put_u32(4);
    // The keys as symbols (sym8), constructor and length included.
    out.put_slice(b"\xa3\x0ax-exchange");
    put_str(out, exchange);
    out.put_slice(b"\xa3\x0dx-routing-key");
    put_str(out, routing_key);
}

/// The encoded size of the string `s`.
fn str_len(s: &str) -> usize {
    if s.len() < 256 { 2 + s.len() } else { 5 + s.len() }
}

/// Appends the string `s` (str8 or str32).
fn put_str(out: &mut BytesMut, s: &str) {
    if s.len() < 256 {
        out.put_slice(&[0xa1, s.len() as u8]);
    } else {
        out.put_u8(0xb1);
        out.put_u32(s.len() as u32);
    }
    out.put_slice(s.as_bytes());
}

/// Appends a data section holding `body`.
pub fn write_data_section(out: &mut BytesMut, body: &[u8]) {
    out.put_slice(&[0x00, 0x53, section::DATA as u8]);
    if body.len() < 256 {
        out.put_u8(0xa0);
        out.put_u8(body.len() as u8);
    } else {
        out.put_u8(0xb0);
        out.put_u32(body.len() as u32);
    }
    out.put_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_stored_messages_are_written_as_the_general_writer_writes_them() {
        for (mode, redelivered, body) in [(1, false, &b"x"[..]), (2, true, &[7u8; 300][..]), (2, false, &b""[..])] {
            let props = BasicProperties {
                delivery_mode: Some(mode),
                ..BasicProperties::default()
            };
            let mut general = BytesMut::new();
            write_stored(&mut general, "amq.direct", "key", &props, body, redelivered);
            let mut plain = BytesMut::new();
            write_plain_stored(&mut plain, "amq.direct", "key", mode == 2, body, redelivered);
            assert_eq!(plain, general, "mode {mode}, redelivered {redelivered}");
        }
    }

    #[test]
    fn an_owned_payload_parses_as_a_borrowed_one() {
        for payload in [
            Bytes::from_static(b"\x00\x53\x75\xa0\x02hi"),
            Bytes::from_static(b"\x00\x53\x70\xc0\x02\x01\x42\x00\x53\x75\xa0\x01z"),
            sample(),
        ] {
            let spare = Box::new(BasicProperties {
                message_id: Some(ShortStr::from("left from an earlier message")),
                ..BasicProperties::default()
            });
            let owned = Received::parse_owned(payload.clone(), Some(spare)).unwrap();
            let borrowed = Received::parse(&payload).unwrap();
            assert_eq!(owned.body, borrowed.body);
            assert_eq!(owned.durable, borrowed.durable);
            assert_eq!(owned.properties, borrowed.properties);
            assert_eq!(owned.raw_properties, borrowed.raw_properties);
        }
    }

    fn sample() -> Bytes {
        let mut out = BytesMut::new();
        encode_described_list(section::HEADER, &[Value::Bool(true), Value::Ubyte(7)], &mut out);
        encode_described_list(
            section::PROPERTIES,
            &[
                Value::String("m1".into()),
                Value::Null,
                Value::String("/queues/q".into()),
                Value::String("subj".into()),
                Value::String("reply".into()),
                Value::Ulong(42),
                Value::Symbol("text/plain".into()),
            ],
            &mut out,
        );
        out.put_slice(&[0x00, 0x53, 0x74]);
        Value::Map(vec![
            (Value::String("k".into()), Value::String("v".into())),
            (Value::String("n".into()), Value::Int(5)),
        ])
        .encode(&mut out);
        write_data_section(&mut out, b"hello");
        out.freeze()
    }

    /// The header and annotations written directly are those the value
    /// encoder writes.
    #[test]
    fn direct_sections_match_the_value_encoder() {
        let long = "k".repeat(255);
        for (durable, priority, ttl, first, count) in [
            (true, None, None, true, None),
            (false, Some(9), Some(70_000), false, Some(3)),
        ] {
            let mut direct = BytesMut::new();
            put_header_section(&mut direct, durable, priority, ttl, first, count);
            let mut slice = &direct[..];
            let got = Value::decode(&mut slice).unwrap();
            assert!(slice.is_empty());
            let mut want = BytesMut::new();
            let opt = |v: Option<u32>| v.map_or(Value::Null, Value::Uint);
            encode_described_list(
                section::HEADER,
                &[
                    Value::Bool(durable),
                    priority.map_or(Value::Null, Value::Ubyte),
                    opt(ttl),
                    Value::Bool(first),
                    opt(count),
                ],
                &mut want,
            );
            let mut slice = &want[..];
            assert_eq!(got, Value::decode(&mut slice).unwrap());
        }
        for (exchange, key) in [("", "q"), ("amq.topic", long.as_str())] {
            let mut direct = BytesMut::new();
            put_routing_annotations(&mut direct, exchange, key);
            let mut slice = &direct[..];
            let got = Value::decode(&mut slice).unwrap();
            assert!(slice.is_empty());
            let Value::Described(_, map) = got else {
                panic!("not described")
            };
            let want = Value::Map(vec![
                (Value::Symbol("x-exchange".into()), Value::String(exchange.into())),
                (Value::Symbol("x-routing-key".into()), Value::String(key.into())),
            ]);
            assert_eq!(*map, want);
        }
    }

    /// A body with at most a durability header is read directly, to what
    /// the full reading gives; anything more takes the full reading.
    #[test]
    fn plain_messages_take_the_direct_path_to_the_same_result() {
        let long = vec![7u8; 300];
        for (header, body) in [
            (&[][..], &b"hi"[..]),
            (&[0x00, 0x53, 0x70, 0x45][..], &b""[..]),
            (&[0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x41][..], &long[..]),
            (&[0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x42][..], &b"x"[..]),
        ] {
            let mut out = BytesMut::from(header);
            write_data_section(&mut out, body);
            let payload = out.freeze();
            let fast = Received::parse_plain(&payload).expect("plain");
            let mut full = Received::parse(&payload.slice(..)).unwrap();
            // The full reading of the same bytes, bypassing the direct path.
            let mut with_footer = BytesMut::from(&payload[..]);
            with_footer.put_slice(&[0x00, 0x53, 0x78, 0xc1, 0x01, 0x00]);
            let generic = Received::parse(&with_footer.freeze()).unwrap();
            full.raw_properties = None;
            for m in [&full, &generic] {
                assert_eq!(fast.durable, m.durable);
                assert_eq!(fast.properties, m.properties);
                assert_eq!(fast.body, m.body);
            }
            let mut encoded = BytesMut::new();
            fast.properties.encode(&mut encoded).unwrap();
            assert_eq!(Some(encoded.freeze()), fast.raw_properties);
        }
        // Two data sections, a header with a priority: the full reading.
        let mut two = BytesMut::new();
        write_data_section(&mut two, b"a");
        write_data_section(&mut two, b"b");
        assert!(Received::parse_plain(&two.freeze()).is_none());
        let mut prio = BytesMut::new();
        encode_described_list(section::HEADER, &[Value::Bool(true), Value::Ubyte(7)], &mut prio);
        write_data_section(&mut prio, b"a");
        assert!(Received::parse_plain(&prio.freeze()).is_none());
    }

    #[test]
    fn a_received_message_maps_onto_core_properties() {
        let m = Received::parse(&sample()).unwrap();
        assert_eq!(&m.body[..], b"hello");
        assert_eq!(m.to.as_deref(), Some("/queues/q"));
        assert_eq!(m.subject.as_deref(), Some("subj"));
        let p = &m.properties;
        assert_eq!(p.message_id.as_deref(), Some("m1"));
        assert_eq!(p.correlation_id.as_deref(), Some("42"));
        assert_eq!(p.content_type.as_deref(), Some("text/plain"));
        assert_eq!(p.reply_to.as_deref(), Some("reply"));
        assert_eq!((p.delivery_mode, p.priority), (Some(2), Some(7)));
        let h = p.headers.as_ref().unwrap();
        assert_eq!(h.get("k").and_then(FieldValue::as_str), Some("v"));
        assert_eq!(h.get("n").and_then(FieldValue::as_i64), Some(5));
    }

    #[test]
    fn a_stored_message_reads_back_the_same() {
        let m = Received::parse(&sample()).unwrap();
        let mut out = BytesMut::new();
        write_stored(&mut out, "", "q", &m.properties, &m.body, false);
        let back = Received::parse(&out.freeze()).unwrap();
        assert_eq!(back.body, m.body);
        assert_eq!(back.properties.message_id, m.properties.message_id);
        assert_eq!(back.properties.headers, m.properties.headers);
    }

    #[test]
    fn an_amqp_value_body_is_kept_as_sections() {
        let mut out = BytesMut::new();
        encode_described_list(section::AMQP_VALUE, &[], &mut out);
        let mut value = BytesMut::new();
        value.put_slice(&[0x00, 0x53, 0x77]);
        Value::String("hi".into()).encode(&mut value);
        let m = Received::parse(&value.clone().freeze()).unwrap();
        assert_eq!(m.properties.content_type.as_deref(), Some(AMQP_BODY_TYPE));
        assert_eq!(&m.body[..], &value[..]);
        let mut again = BytesMut::new();
        write_stored(&mut again, "", "q", &m.properties, &m.body, false);
        assert!(again.ends_with(&value));
    }

    /// What the shared properties cannot hold (`to`, `subject`, a group id,
    /// an expiry time, a ulong message id, typed application properties, a
    /// key longer than 255 bytes) reaches an AMQP 1.0 consumer as sent.
    #[test]
    fn the_bare_message_goes_back_byte_for_byte() {
        let mut properties = BytesMut::new();
        encode_described_list(
            section::PROPERTIES,
            &[
                Value::Ulong(7),
                Value::Null,
                Value::String("/queues/q".into()),
                Value::String("subj".into()),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Timestamp(1_700_000_000_123),
                Value::Null,
                Value::String("group".into()),
                Value::Uint(3),
            ],
            &mut properties,
        );
        let mut application = BytesMut::from(&[0x00, 0x53, 0x74][..]);
        Value::Map(vec![
            (Value::String("u".into()), Value::Uint(5)),
            (Value::String("s".into()), Value::Symbol("sym".into())),
            (Value::String("k".repeat(300)), Value::Char('é')),
        ])
        .encode(&mut application);
        let mut payload = BytesMut::new();
        encode_described_list(section::HEADER, &[Value::Bool(true)], &mut payload);
        payload.put_slice(&properties);
        payload.put_slice(&application);
        write_data_section(&mut payload, b"body");
        let m = Received::parse(&payload.freeze()).unwrap();
        assert_eq!(m.properties.app_id.as_deref(), Some("group"), "group-id maps to app-id");
        let h = m.properties.headers.as_ref().unwrap();
        assert_eq!(h.0[0].0.as_str(), ORIGINAL_PROPERTIES, "first in the table");
        let mut encoded = BytesMut::new();
        m.properties.encode(&mut encoded).unwrap();
        assert!(crate::wire::properties::has_private_headers(&encoded));
        let mut out = BytesMut::new();
        write_stored(&mut out, "", "q", &m.properties, &m.body, false);
        let mut want = properties.to_vec();
        want.extend_from_slice(&application);
        let at = out
            .windows(want.len())
            .position(|w| w == want.as_slice())
            .expect("the original sections, in order");
        let mut rest = &out[..at];
        while !rest.is_empty() {
            let section = Value::decode(&mut rest).unwrap();
            let code = described(&section).map(|(c, _)| c);
            let code = code.unwrap_or_else(|| panic!("not a section: {section:?}"));
            assert!(
                code == section::HEADER || code == section::MESSAGE_ANNOTATIONS,
                "{code:#x}"
            );
        }
        let mut tail = BytesMut::new();
        write_data_section(&mut tail, b"body");
        assert_eq!(&out[at + want.len()..], &tail[..]);
    }

    /// The same headers set by a 0-9-1 publisher to something else are not
    /// sent as sections.
    #[test]
    fn forged_original_sections_are_not_sent() {
        let mut headers = FieldTable::default();
        headers.insert(
            ORIGINAL_PROPERTIES,
            FieldValue::LongStr(Bytes::from_static(b"\x00\x53\x73\xc0")),
        );
        headers.insert(
            ORIGINAL_APPLICATION_PROPERTIES,
            FieldValue::LongStr(Bytes::from_static(b"\x00\x53\x75\xa0\x01x")),
        );
        let props = BasicProperties {
            headers: Some(headers),
            ..BasicProperties::default()
        };
        let mut out = BytesMut::new();
        write_stored(&mut out, "", "q", &props, b"b", false);
        let back = Received::parse(&out.freeze()).unwrap();
        assert_eq!(&back.body[..], b"b");
        assert!(back.properties.headers.is_none(), "{:?}", back.properties.headers);
    }

    #[test]
    fn bad_payloads_are_errors() {
        assert!(Received::parse(&Bytes::from_static(b"\x45")).is_err());
        assert!(Received::parse(&Bytes::from_static(b"")).is_err());
        assert!(Received::parse(&Bytes::from_static(b"\x00\x53\x75\xa0\x09ab")).is_err());
    }
}
