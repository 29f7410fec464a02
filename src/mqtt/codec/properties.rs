//! MQTT 5 properties (section 2.2.2): the optional, identified fields that
//! follow the variable header of most packets.
//!
//! One struct holds every property; which ones a packet may carry is checked
//! while decoding ([`Context`]), so a CONNECT with a topic alias or a PUBLISH
//! with a session expiry is refused as the specification requires. Strings
//! and binary data stay slices of the receive buffer.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::mqtt::codec::error::{DecodeError, EncodeError};
use crate::mqtt::codec::string::MqttStr;

/// The largest value of a variable byte integer (four bytes of seven bits).
pub const MAX_VARINT: u32 = 268_435_455;

/// Every property of MQTT 5; absent ones are `None` or empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    /// 0x01: the payload is UTF-8 text (1) or unspecified bytes (0).
    pub payload_format_indicator: Option<u8>,
    /// 0x02: seconds the message may live.
    pub message_expiry_interval: Option<u32>,
    /// 0x03: MIME type of the payload.
    pub content_type: Option<MqttStr>,
    /// 0x08: topic a response should go to.
    pub response_topic: Option<MqttStr>,
    /// 0x09: data matching a response to its request.
    pub correlation_data: Option<Bytes>,
    /// 0x0B: subscription identifiers (one in SUBSCRIBE, any number in a
    /// delivered PUBLISH), each 1 to 268,435,455.
    pub subscription_identifiers: Vec<u32>,
    /// 0x11: seconds a session outlives its connection.
    pub session_expiry_interval: Option<u32>,
    /// 0x12: the client identifier the broker assigned.
    pub assigned_client_identifier: Option<MqttStr>,
    /// 0x13: the keep alive the broker imposes.
    pub server_keep_alive: Option<u16>,
    /// 0x15: name of the enhanced authentication method.
    pub authentication_method: Option<MqttStr>,
    /// 0x16: data of the enhanced authentication method.
    pub authentication_data: Option<Bytes>,
    /// 0x17: whether reason strings and user properties may be sent on failures.
    pub request_problem_information: Option<u8>,
    /// 0x18: seconds to wait before publishing the will.
    pub will_delay_interval: Option<u32>,
    /// 0x19: whether the client wants response information in CONNACK.
    pub request_response_information: Option<u8>,
    /// 0x1A: basis for response topics.
    pub response_information: Option<MqttStr>,
    /// 0x1C: another server to use.
    pub server_reference: Option<MqttStr>,
    /// 0x1F: human-readable text about the outcome.
    pub reason_string: Option<MqttStr>,
    /// 0x21: how many QoS > 0 PUBLISHes the sender accepts unacknowledged.
    pub receive_maximum: Option<u16>,
    /// 0x22: the highest topic alias the sender accepts.
    pub topic_alias_maximum: Option<u16>,
    /// 0x23: a number standing for the topic of this PUBLISH.
    pub topic_alias: Option<u16>,
    /// 0x24: the highest QoS the broker supports (0 or 1; absent means 2).
    pub maximum_qos: Option<u8>,
    /// 0x25: whether the broker keeps retained messages.
    pub retain_available: Option<u8>,
    /// 0x26: name/value pairs, in order, repeats allowed.
    pub user_properties: Vec<(MqttStr, MqttStr)>,
    /// 0x27: the largest packet the sender accepts.
    pub maximum_packet_size: Option<u32>,
    /// 0x28: whether wildcard filters are supported.
    pub wildcard_subscription_available: Option<u8>,
    /// 0x29: whether subscription identifiers are supported.
    pub subscription_identifier_available: Option<u8>,
    /// 0x2A: whether shared subscriptions are supported.
    pub shared_subscription_available: Option<u8>,
}

/// Where properties appear; each place allows its own set (table 2-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// CONNECT's properties.
    Connect,
    /// The will properties inside CONNECT's payload.
    Will,
    /// CONNACK.
    Connack,
    /// PUBLISH.
    Publish,
    /// PUBACK, PUBREC, PUBREL and PUBCOMP.
    Ack,
    /// SUBSCRIBE.
    Subscribe,
    /// SUBACK.
    Suback,
    /// UNSUBSCRIBE.
    Unsubscribe,
    /// UNSUBACK.
    Unsuback,
    /// DISCONNECT.
    Disconnect,
    /// AUTH.
    Auth,
}

impl Context {
    /// The packet (or part) name, for errors.
    pub fn name(self) -> &'static str {
        match self {
            Context::Connect => "CONNECT",
            Context::Will => "will properties",
            Context::Connack => "CONNACK",
            Context::Publish => "PUBLISH",
            Context::Ack => "acknowledgement",
            Context::Subscribe => "SUBSCRIBE",
            Context::Suback => "SUBACK",
            Context::Unsubscribe => "UNSUBSCRIBE",
            Context::Unsuback => "UNSUBACK",
            Context::Disconnect => "DISCONNECT",
            Context::Auth => "AUTH",
        }
    }

    /// Whether property `id` may appear here.
    fn allows(self, id: u8) -> bool {
        use Context::*;
        match id {
            0x01 | 0x02 | 0x03 | 0x08 | 0x09 => matches!(self, Publish | Will),
            0x0B => matches!(self, Publish | Subscribe),
            0x11 => matches!(self, Connect | Connack | Disconnect),
            0x12 | 0x13 | 0x1A | 0x24 | 0x25 | 0x28 | 0x29 | 0x2A => self == Connack,
            0x15 | 0x16 => matches!(self, Connect | Connack | Auth),
            0x17 | 0x19 => self == Connect,
            0x18 => self == Will,
            0x1C => matches!(self, Connack | Disconnect),
            0x1F => !matches!(self, Connect | Will | Publish | Subscribe | Unsubscribe),
            0x21 | 0x22 | 0x27 => matches!(self, Connect | Connack),
            0x23 => self == Publish,
            0x26 => true,
            _ => false,
        }
    }
}

/// Whether `id` names a property of MQTT 5 at all.
fn is_known(id: u8) -> bool {
    matches!(id, 0x01..=0x03 | 0x08 | 0x09 | 0x0B | 0x11..=0x13 | 0x15..=0x1A | 0x1C | 0x1F | 0x21..=0x2A)
}

/// Reads a variable byte integer (section 1.5.5), at most four bytes.
pub fn get_varint(buf: &mut Bytes, field: &'static str) -> Result<u32, DecodeError> {
    let mut value = 0u32;
    for i in 0..4 {
        let byte = buf.try_get_u8().map_err(|_| DecodeError::Truncated(field))?;
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(DecodeError::MalformedVarint(field))
}

/// How many bytes `value` takes as a variable byte integer.
pub fn varint_len(value: usize) -> usize {
    match value {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// Writes a variable byte integer; `value` must not exceed [`MAX_VARINT`].
pub fn put_varint(out: &mut BytesMut, value: usize) {
    let mut rest = value;
    loop {
        // Truncation intended: the low seven bits of what is left.
        let byte = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            out.put_u8(byte);
            return;
        }
        out.put_u8(byte | 0x80);
    }
}

fn binary(buf: &mut Bytes, field: &'static str) -> Result<Bytes, DecodeError> {
    let len = usize::from(buf.try_get_u16().map_err(|_| DecodeError::Truncated(field))?);
    if buf.len() < len {
        return Err(DecodeError::Truncated(field));
    }
    Ok(buf.split_to(len))
}

fn string(buf: &mut Bytes, field: &'static str) -> Result<MqttStr, DecodeError> {
    MqttStr::from_bytes(binary(buf, field)?, field)
}

fn byte(buf: &mut Bytes, field: &'static str) -> Result<u8, DecodeError> {
    buf.try_get_u8().map_err(|_| DecodeError::Truncated(field))
}

fn two(buf: &mut Bytes, field: &'static str) -> Result<u16, DecodeError> {
    buf.try_get_u16().map_err(|_| DecodeError::Truncated(field))
}

fn four(buf: &mut Bytes, field: &'static str) -> Result<u32, DecodeError> {
    buf.try_get_u32().map_err(|_| DecodeError::Truncated(field))
}

/// Stores a property that may appear once (section 2.2.2.2: a second one is
/// a protocol error).
fn once<T>(slot: &mut Option<T>, value: T, id: u8, ctx: Context) -> Result<(), DecodeError> {
    if slot.is_some() {
        return Err(DecodeError::DuplicateProperty { id, packet: ctx.name() });
    }
    *slot = Some(value);
    Ok(())
}

/// A 0/1 property.
fn flag(buf: &mut Bytes, id: u8, field: &'static str) -> Result<u8, DecodeError> {
    match byte(buf, field)? {
        v @ (0 | 1) => Ok(v),
        _ => Err(DecodeError::InvalidPropertyValue { id, field }),
    }
}

/// A property that must not be zero.
fn non_zero<T: Default + PartialEq>(value: T, id: u8, field: &'static str) -> Result<T, DecodeError> {
    if value == T::default() {
        return Err(DecodeError::InvalidPropertyValue { id, field });
    }
    Ok(value)
}

impl Properties {
    /// Reads a property length and the properties it covers from `buf`,
    /// allowing only what `ctx` may carry. `None` when there are none, so
    /// packets without properties allocate nothing.
    pub fn decode(buf: &mut Bytes, ctx: Context) -> Result<Option<Box<Properties>>, DecodeError> {
        let len = get_varint(buf, "property length")? as usize;
        if len == 0 {
            return Ok(None);
        }
        if buf.len() < len {
            return Err(DecodeError::Truncated("properties"));
        }
        Properties::decode_block(buf.split_to(len), ctx).map(Some)
    }

    /// Reads the properties of a block whose length is already known (the
    /// bytes after the property length), allowing only what `ctx` may carry.
    pub fn decode_block(mut block: Bytes, ctx: Context) -> Result<Box<Properties>, DecodeError> {
        let mut p = Box::<Properties>::default();
        while !block.is_empty() {
            let id = get_varint(&mut block, "property identifier")?;
            let id = u8::try_from(id).map_err(|_| DecodeError::UnknownProperty(id))?;
            if !ctx.allows(id) {
                return Err(if is_known(id) {
                    DecodeError::PropertyNotAllowed { id, packet: ctx.name() }
                } else {
                    DecodeError::UnknownProperty(u32::from(id))
                });
            }
            p.read_one(&mut block, id, ctx)?;
        }
        Ok(p)
    }

    fn read_one(&mut self, b: &mut Bytes, id: u8, ctx: Context) -> Result<(), DecodeError> {
        match id {
            0x01 => {
                let v = flag(b, id, "payload format indicator")?;
                once(&mut self.payload_format_indicator, v, id, ctx)
            }
            0x02 => once(&mut self.message_expiry_interval, four(b, "message expiry")?, id, ctx),
            0x03 => once(&mut self.content_type, string(b, "content type")?, id, ctx),
            0x08 => once(&mut self.response_topic, string(b, "response topic")?, id, ctx),
            0x09 => once(&mut self.correlation_data, binary(b, "correlation data")?, id, ctx),
            0x0B => {
                const FIELD: &str = "subscription identifier";
                let v = non_zero(get_varint(b, FIELD)?, id, FIELD)?;
                if ctx == Context::Subscribe && !self.subscription_identifiers.is_empty() {
                    return Err(DecodeError::DuplicateProperty { id, packet: ctx.name() });
                }
                self.subscription_identifiers.push(v);
                Ok(())
            }
            0x11 => once(&mut self.session_expiry_interval, four(b, "session expiry")?, id, ctx),
            0x12 => once(&mut self.assigned_client_identifier, string(b, "client id")?, id, ctx),
            0x13 => once(&mut self.server_keep_alive, two(b, "server keep alive")?, id, ctx),
            0x15 => once(&mut self.authentication_method, string(b, "auth method")?, id, ctx),
            0x16 => once(&mut self.authentication_data, binary(b, "auth data")?, id, ctx),
            0x17 => {
                let v = flag(b, id, "request problem information")?;
                once(&mut self.request_problem_information, v, id, ctx)
            }
            0x18 => once(&mut self.will_delay_interval, four(b, "will delay")?, id, ctx),
            0x19 => {
                let v = flag(b, id, "request response information")?;
                once(&mut self.request_response_information, v, id, ctx)
            }
            0x1A => once(&mut self.response_information, string(b, "response info")?, id, ctx),
            0x1C => once(&mut self.server_reference, string(b, "server reference")?, id, ctx),
            0x1F => once(&mut self.reason_string, string(b, "reason string")?, id, ctx),
            0x21 => {
                let v = non_zero(two(b, "receive maximum")?, id, "receive maximum")?;
                once(&mut self.receive_maximum, v, id, ctx)
            }
            0x22 => once(&mut self.topic_alias_maximum, two(b, "topic alias maximum")?, id, ctx),
            0x23 => {
                let v = non_zero(two(b, "topic alias")?, id, "topic alias")?;
                once(&mut self.topic_alias, v, id, ctx)
            }
            0x24 => {
                let v = flag(b, id, "maximum QoS")?;
                once(&mut self.maximum_qos, v, id, ctx)
            }
            0x25 => {
                let v = flag(b, id, "retain available")?;
                once(&mut self.retain_available, v, id, ctx)
            }
            0x26 => {
                let name = string(b, "user property name")?;
                let value = string(b, "user property value")?;
                self.user_properties.push((name, value));
                Ok(())
            }
            0x27 => {
                let v = non_zero(four(b, "maximum packet size")?, id, "maximum packet size")?;
                once(&mut self.maximum_packet_size, v, id, ctx)
            }
            0x28 => {
                let v = flag(b, id, "wildcard subscription available")?;
                once(&mut self.wildcard_subscription_available, v, id, ctx)
            }
            0x29 => {
                let v = flag(b, id, "subscription identifier available")?;
                once(&mut self.subscription_identifier_available, v, id, ctx)
            }
            _ => {
                let v = flag(b, id, "shared subscription available")?;
                once(&mut self.shared_subscription_available, v, id, ctx)
            }
        }
    }

    /// The bytes the properties take, without the property length.
    pub fn body_len(&self) -> usize {
        let s = |v: &Option<MqttStr>| v.as_ref().map_or(0, |s| 3 + s.len());
        let b = |v: &Option<Bytes>| v.as_ref().map_or(0, |s| 3 + s.len());
        let n = |present: bool, size: usize| if present { 1 + size } else { 0 };
        n(self.payload_format_indicator.is_some(), 1)
            + n(self.message_expiry_interval.is_some(), 4)
            + s(&self.content_type)
            + s(&self.response_topic)
            + b(&self.correlation_data)
            + self
                .subscription_identifiers
                .iter()
                .map(|&id| 1 + varint_len(id as usize))
                .sum::<usize>()
            + n(self.session_expiry_interval.is_some(), 4)
            + s(&self.assigned_client_identifier)
            + n(self.server_keep_alive.is_some(), 2)
            + s(&self.authentication_method)
            + b(&self.authentication_data)
            + n(self.request_problem_information.is_some(), 1)
            + n(self.will_delay_interval.is_some(), 4)
            + n(self.request_response_information.is_some(), 1)
            + s(&self.response_information)
            + s(&self.server_reference)
            + s(&self.reason_string)
            + n(self.receive_maximum.is_some(), 2)
            + n(self.topic_alias_maximum.is_some(), 2)
            + n(self.topic_alias.is_some(), 2)
            + n(self.maximum_qos.is_some(), 1)
            + n(self.retain_available.is_some(), 1)
            + self
                .user_properties
                .iter()
                .map(|(k, v)| 5 + k.len() + v.len())
                .sum::<usize>()
            + n(self.maximum_packet_size.is_some(), 4)
            + n(self.wildcard_subscription_available.is_some(), 1)
            + n(self.subscription_identifier_available.is_some(), 1)
            + n(self.shared_subscription_available.is_some(), 1)
    }

    /// Fails if a string or binary property does not fit its length prefix,
    /// or a subscription identifier its variable byte integer.
    pub fn check(&self) -> Result<(), EncodeError> {
        let strings = [
            ("content type", &self.content_type),
            ("response topic", &self.response_topic),
            ("assigned client identifier", &self.assigned_client_identifier),
            ("authentication method", &self.authentication_method),
            ("response information", &self.response_information),
            ("server reference", &self.server_reference),
            ("reason string", &self.reason_string),
        ];
        for (field, value) in strings {
            check_len(field, value.as_ref().map_or(0, |s| s.len()))?;
        }
        check_len("correlation data", self.correlation_data.as_ref().map_or(0, Bytes::len))?;
        check_len(
            "authentication data",
            self.authentication_data.as_ref().map_or(0, Bytes::len),
        )?;
        for (k, v) in &self.user_properties {
            check_len("user property", k.len().max(v.len()))?;
        }
        if self.subscription_identifiers.iter().any(|&id| id > MAX_VARINT) {
            return Err(EncodeError::PacketTooLarge(usize::MAX));
        }
        Ok(())
    }

    /// Writes the properties (no property length); lengths must have passed
    /// [`Properties::check`].
    pub fn put_body(&self, out: &mut BytesMut) {
        let put_str = |out: &mut BytesMut, id: u8, v: &Option<MqttStr>| {
            if let Some(v) = v {
                out.put_u8(id);
                put_prefixed(out, v.as_bytes());
            }
        };
        let put_bin = |out: &mut BytesMut, id: u8, v: &Option<Bytes>| {
            if let Some(v) = v {
                out.put_u8(id);
                put_prefixed(out, v);
            }
        };
        let put_u8 = |out: &mut BytesMut, id: u8, v: Option<u8>| {
            if let Some(v) = v {
                out.put_slice(&[id, v]);
            }
        };
        let put_u16 = |out: &mut BytesMut, id: u8, v: Option<u16>| {
            if let Some(v) = v {
                out.put_u8(id);
                out.put_u16(v);
            }
        };
        let put_u32 = |out: &mut BytesMut, id: u8, v: Option<u32>| {
            if let Some(v) = v {
                out.put_u8(id);
                out.put_u32(v);
            }
        };
        put_u8(out, 0x01, self.payload_format_indicator);
        put_u32(out, 0x02, self.message_expiry_interval);
        put_str(out, 0x03, &self.content_type);
        put_str(out, 0x08, &self.response_topic);
        put_bin(out, 0x09, &self.correlation_data);
        for &id in &self.subscription_identifiers {
            put_subscription_identifier(out, id);
        }
        put_u32(out, 0x11, self.session_expiry_interval);
        put_str(out, 0x12, &self.assigned_client_identifier);
        put_u16(out, 0x13, self.server_keep_alive);
        put_str(out, 0x15, &self.authentication_method);
        put_bin(out, 0x16, &self.authentication_data);
        put_u8(out, 0x17, self.request_problem_information);
        put_u32(out, 0x18, self.will_delay_interval);
        put_u8(out, 0x19, self.request_response_information);
        put_str(out, 0x1A, &self.response_information);
        put_str(out, 0x1C, &self.server_reference);
        put_str(out, 0x1F, &self.reason_string);
        put_u16(out, 0x21, self.receive_maximum);
        put_u16(out, 0x22, self.topic_alias_maximum);
        if let Some(alias) = self.topic_alias {
            put_topic_alias(out, alias);
        }
        put_u8(out, 0x24, self.maximum_qos);
        put_u8(out, 0x25, self.retain_available);
        for (k, v) in &self.user_properties {
            out.put_u8(0x26);
            put_prefixed(out, k.as_bytes());
            put_prefixed(out, v.as_bytes());
        }
        put_u32(out, 0x27, self.maximum_packet_size);
        put_u8(out, 0x28, self.wildcard_subscription_available);
        put_u8(out, 0x29, self.subscription_identifier_available);
        put_u8(out, 0x2A, self.shared_subscription_available);
    }
}

/// Writes a subscription identifier property (0x0B); for encoders that
/// write a delivery's few properties without building a [`Properties`].
pub fn put_subscription_identifier(out: &mut BytesMut, id: u32) {
    out.put_u8(0x0B);
    put_varint(out, id as usize);
}

/// Writes a topic alias property (0x23).
pub fn put_topic_alias(out: &mut BytesMut, alias: u16) {
    out.put_u8(0x23);
    out.put_u16(alias);
}

/// The bytes `props` take on the wire, property length included.
pub fn encoded_len(props: Option<&Properties>) -> usize {
    let body = props.map_or(0, Properties::body_len);
    varint_len(body) + body
}

/// Writes the property length and `props`.
pub fn put_properties(out: &mut BytesMut, props: Option<&Properties>) {
    let body = props.map_or(0, Properties::body_len);
    put_varint(out, body);
    if let Some(p) = props {
        p.put_body(out);
    }
}

fn check_len(field: &'static str, len: usize) -> Result<(), EncodeError> {
    if len > usize::from(u16::MAX) {
        return Err(EncodeError::FieldTooLong { field, len });
    }
    Ok(())
}

/// A two-byte length and the bytes; the length was checked.
fn put_prefixed(out: &mut BytesMut, bytes: &[u8]) {
    out.put_u16(bytes.len() as u16);
    out.put_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8], ctx: Context) -> Result<Option<Box<Properties>>, DecodeError> {
        Properties::decode(&mut Bytes::copy_from_slice(bytes), ctx)
    }

    #[test]
    fn varints() {
        for v in [
            0usize,
            127,
            128,
            16_383,
            16_384,
            2_097_151,
            2_097_152,
            MAX_VARINT as usize,
        ] {
            let mut out = BytesMut::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            assert_eq!(get_varint(&mut out.freeze(), "v"), Ok(v as u32));
        }
        assert_eq!(
            get_varint(&mut Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x01]), "v"),
            Err(DecodeError::MalformedVarint("v"))
        );
    }

    #[test]
    fn empty_properties_allocate_nothing() {
        assert_eq!(decode(&[0], Context::Publish), Ok(None));
    }

    #[test]
    fn round_trip() {
        let p = Properties {
            message_expiry_interval: Some(60),
            content_type: Some(MqttStr::try_from("text/plain").unwrap()),
            correlation_data: Some(Bytes::from_static(b"\x00\x01")),
            subscription_identifiers: vec![1, 300, MAX_VARINT],
            topic_alias: Some(3),
            user_properties: vec![
                (MqttStr::try_from("k").unwrap(), MqttStr::try_from("v").unwrap()),
                (MqttStr::try_from("k").unwrap(), MqttStr::try_from("w").unwrap()),
            ],
            ..Properties::default()
        };
        let mut out = BytesMut::new();
        put_properties(&mut out, Some(&p));
        assert_eq!(out.len(), encoded_len(Some(&p)));
        assert_eq!(decode(&out, Context::Publish), Ok(Some(Box::new(p))));
    }

    #[test]
    fn placement_and_value_rules() {
        // Topic alias 0x23 in CONNECT.
        assert!(matches!(
            decode(&[3, 0x23, 0, 1], Context::Connect),
            Err(DecodeError::PropertyNotAllowed { id: 0x23, .. })
        ));
        assert_eq!(
            decode(&[2, 0x7f, 0], Context::Publish),
            Err(DecodeError::UnknownProperty(0x7f))
        );
        // Twice the message expiry.
        assert!(matches!(
            decode(&[10, 2, 0, 0, 0, 1, 2, 0, 0, 0, 1], Context::Publish),
            Err(DecodeError::DuplicateProperty { id: 2, .. })
        ));
        assert!(matches!(
            decode(&[3, 0x23, 0, 0], Context::Publish),
            Err(DecodeError::InvalidPropertyValue { id: 0x23, .. })
        ));
        assert!(matches!(
            decode(&[2, 0x01, 2], Context::Publish),
            Err(DecodeError::InvalidPropertyValue { id: 1, .. })
        ));
        assert_eq!(
            decode(&[5, 0x02, 0], Context::Publish),
            Err(DecodeError::Truncated("properties"))
        );
        assert_eq!(
            decode(&[2, 0x02, 0], Context::Publish),
            Err(DecodeError::Truncated("message expiry"))
        );
        // Two subscription identifiers: fine in PUBLISH, not in SUBSCRIBE.
        assert!(decode(&[4, 0x0b, 1, 0x0b, 2], Context::Publish).is_ok());
        assert!(decode(&[4, 0x0b, 1, 0x0b, 2], Context::Subscribe).is_err());
    }
}
