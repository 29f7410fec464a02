//! Decoding: splitting whole MQTT packets off a receive buffer and checking
//! every rule of MQTT 3.1.1 and 5.0 that a receiver must enforce while
//! parsing.
//!
//! Session-level rules (CONNECT as first packet, client identifier policy,
//! packet identifier bookkeeping, topic aliases) are not decoding and live
//! with the session.

use bytes::{Buf, Bytes, BytesMut};

use crate::mqtt::codec::error::DecodeError;
use crate::mqtt::codec::header::{FixedHeader, PacketType, parse_fixed_header};
use crate::mqtt::codec::packet::{
    Ack, Connack, Connect, Disconnect, Packet, ProtocolVersion, Publish, QoS, Suback, Subscribe, SubscriptionOptions,
    Unsuback, Unsubscribe, Will,
};
use crate::mqtt::codec::properties::{Context, Properties};
use crate::mqtt::codec::reason::ReasonCode;
use crate::mqtt::codec::string::MqttStr;
use crate::mqtt::codec::topic::{validate_topic_filter, validate_topic_name};

/// Splits one complete packet off the front of `buf`, reading it as
/// `version` lays packets out (a CONNECT names its own revision, so the
/// first packet can be read with any).
///
/// Returns `Ok(None)`, consuming nothing, until a whole packet is buffered.
/// `max_packet_size` bounds the remaining length (the bytes after the fixed
/// header); it is checked from the fixed header alone, so an oversized packet
/// fails before its body arrives. Pass
/// [`MAX_REMAINING_LENGTH`](crate::mqtt::codec::MAX_REMAINING_LENGTH) for no
/// limit beyond the protocol's. Strings and payloads of the packet are slices
/// of `buf`'s storage, not copies.
///
/// After an error the connection must be closed (for
/// [`DecodeError::UnsupportedProtocolLevel`], after sending CONNACK 1); what
/// is left in `buf` is then unspecified.
pub fn parse_packet(
    buf: &mut BytesMut,
    max_packet_size: usize,
    version: ProtocolVersion,
) -> Result<Option<Packet>, DecodeError> {
    let v5 = version.is_v5();
    let Some(header) = parse_fixed_header(buf, v5)? else {
        return Ok(None);
    };
    if header.remaining_len > max_packet_size {
        return Err(DecodeError::PacketTooLarge {
            size: header.remaining_len,
            max: max_packet_size,
        });
    }
    let total = header.header_len + header.remaining_len;
    if buf.len() < total {
        return Ok(None);
    }
    // MQTT 5 packets carry reason codes and properties, except the common
    // successful acknowledgement, which keeps 3.1.1's two-byte form and its
    // allocation-free path below.
    let short_ack = header.remaining_len == 2
        && matches!(
            header.packet_type,
            PacketType::Puback | PacketType::Pubrec | PacketType::Pubrel | PacketType::Pubcomp
        )
        && id_at(buf, header.header_len) != 0;
    if v5 && !short_ack && !matches!(header.packet_type, PacketType::Pingreq | PacketType::Pingresp) {
        let mut body = buf.split_to(total).freeze();
        body.advance(header.header_len);
        return decode_v5_body(header, Reader(body)).map(Some);
    }
    let packet = match header.packet_type {
        PacketType::Connack => {
            let [flags, code] = two_bytes_at(buf, header.header_len);
            Packet::Connack(decode_connack(flags, code)?)
        }
        PacketType::Puback => Packet::Puback(Ack::ok(id_at(buf, header.header_len))),
        PacketType::Pubrec => Packet::Pubrec(Ack::ok(id_at(buf, header.header_len))),
        PacketType::Pubrel => Packet::Pubrel(Ack::ok(id_at(buf, header.header_len))),
        PacketType::Pubcomp => Packet::Pubcomp(Ack::ok(id_at(buf, header.header_len))),
        PacketType::Unsuback => Packet::Unsuback(Unsuback {
            packet_id: id_at(buf, header.header_len),
            codes: Vec::new(),
            properties: None,
        }),
        PacketType::Pingreq => Packet::Pingreq,
        PacketType::Pingresp => Packet::Pingresp,
        PacketType::Disconnect => Packet::Disconnect(Disconnect::normal()),
        PacketType::Connect
        | PacketType::Publish
        | PacketType::Subscribe
        | PacketType::Suback
        | PacketType::Unsubscribe
        | PacketType::Auth => {
            let mut body = buf.split_to(total).freeze();
            body.advance(header.header_len);
            return decode_body(header, Reader(body)).map(Some);
        }
    };
    buf.advance(total);
    Ok(Some(packet))
}

/// The two bytes at `at`; the fixed header check guarantees they are there.
fn two_bytes_at(buf: &[u8], at: usize) -> [u8; 2] {
    match buf.get(at..at + 2) {
        Some(&[a, b]) => [a, b],
        _ => [0, 0],
    }
}

/// The big-endian packet identifier at `at`.
fn id_at(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes(two_bytes_at(buf, at))
}

/// Decodes the MQTT 3.1.1 packets whose size varies, from their body.
fn decode_body(header: FixedHeader, r: Reader) -> Result<Packet, DecodeError> {
    Ok(match header.packet_type {
        PacketType::Connect => Packet::Connect(Box::new(decode_connect(r)?)),
        PacketType::Publish => Packet::Publish(decode_publish(header.flags, r, false)?),
        PacketType::Subscribe => Packet::Subscribe(decode_subscribe(r, false)?),
        PacketType::Suback => Packet::Suback(decode_suback(r, false)?),
        PacketType::Unsubscribe => Packet::Unsubscribe(decode_unsubscribe(r, false)?),
        _ => return Err(DecodeError::ReservedPacketType(header.packet_type as u8)),
    })
}

/// Decodes any MQTT 5 packet from its body.
fn decode_v5_body(header: FixedHeader, mut r: Reader) -> Result<Packet, DecodeError> {
    let ty = header.packet_type;
    Ok(match ty {
        PacketType::Connect => Packet::Connect(Box::new(decode_connect(r)?)),
        PacketType::Connack => {
            let flags = r.u8("acknowledge flags")?;
            if flags & !1 != 0 {
                return Err(DecodeError::InvalidConnackFlags(flags));
            }
            let code = r.reason(ty)?;
            let properties = r.properties(Context::Connack)?;
            r.finish("CONNACK")?;
            Packet::Connack(Connack {
                session_present: flags == 1,
                code,
                properties,
            })
        }
        PacketType::Publish => Packet::Publish(decode_publish(header.flags, r, true)?),
        PacketType::Puback | PacketType::Pubrec | PacketType::Pubrel | PacketType::Pubcomp => {
            let packet_id = r.packet_id(ty.name())?;
            let (reason, properties) = r.reason_and_properties(ty, Context::Ack)?;
            let ack = Ack {
                packet_id,
                reason,
                properties,
            };
            match ty {
                PacketType::Puback => Packet::Puback(ack),
                PacketType::Pubrec => Packet::Pubrec(ack),
                PacketType::Pubrel => Packet::Pubrel(ack),
                _ => Packet::Pubcomp(ack),
            }
        }
        PacketType::Subscribe => Packet::Subscribe(decode_subscribe(r, true)?),
        PacketType::Suback => Packet::Suback(decode_suback(r, true)?),
        PacketType::Unsubscribe => Packet::Unsubscribe(decode_unsubscribe(r, true)?),
        PacketType::Unsuback => {
            let packet_id = r.u16("packet identifier")?;
            let properties = r.properties(Context::Unsuback)?;
            let mut codes = Vec::with_capacity(r.0.len());
            while !r.is_empty() {
                codes.push(r.reason(ty)?);
            }
            Packet::Unsuback(Unsuback {
                packet_id,
                codes,
                properties,
            })
        }
        PacketType::Pingreq => Packet::Pingreq,
        PacketType::Pingresp => Packet::Pingresp,
        PacketType::Disconnect => {
            let (reason, properties) = r.reason_and_properties(ty, Context::Disconnect)?;
            Packet::Disconnect(Disconnect { reason, properties })
        }
        PacketType::Auth => {
            let (reason, properties) = r.reason_and_properties(ty, Context::Auth)?;
            Packet::Auth(Disconnect { reason, properties })
        }
    })
}

/// Whether `code` is one the specification lists for packet type `ty`.
fn reason_allowed(ty: PacketType, code: u8) -> bool {
    match ty {
        PacketType::Connack => matches!(code, 0x00 | 0x80..=0x8A | 0x8C | 0x90 | 0x95 | 0x97 | 0x99..=0x9D | 0x9F),
        PacketType::Puback | PacketType::Pubrec => {
            matches!(code, 0x00 | 0x10 | 0x80 | 0x83 | 0x87 | 0x90 | 0x91 | 0x97 | 0x99)
        }
        PacketType::Pubrel | PacketType::Pubcomp => matches!(code, 0x00 | 0x92),
        PacketType::Suback => matches!(
            code,
            0x00..=0x02 | 0x80 | 0x83 | 0x87 | 0x8F | 0x91 | 0x97 | 0x9E | 0xA1 | 0xA2
        ),
        PacketType::Unsuback => matches!(code, 0x00 | 0x11 | 0x80 | 0x83 | 0x87 | 0x8F | 0x91),
        PacketType::Disconnect => matches!(
            code,
            0x00 | 0x04 | 0x80..=0x83 | 0x87 | 0x89 | 0x8B | 0x8D..=0x90 | 0x93..=0xA2
        ),
        PacketType::Auth => matches!(code, 0x00 | 0x18 | 0x19),
        _ => false,
    }
}

/// A cursor over a packet body; every read is bounds-checked and names the
/// field it was reading when the body runs out.
struct Reader(Bytes);

impl Reader {
    fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        self.0.try_get_u8().map_err(|_| DecodeError::Truncated(field))
    }

    fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        self.0.try_get_u16().map_err(|_| DecodeError::Truncated(field))
    }

    /// A non-zero packet identifier [MQTT-2.3.1-1].
    fn packet_id(&mut self, packet: &'static str) -> Result<u16, DecodeError> {
        match self.u16("packet identifier")? {
            0 => Err(DecodeError::ZeroPacketId(packet)),
            id => Ok(id),
        }
    }

    /// Binary data with a two-byte length prefix.
    fn binary(&mut self, field: &'static str) -> Result<Bytes, DecodeError> {
        let len = usize::from(self.u16(field)?);
        if self.0.len() < len {
            return Err(DecodeError::Truncated(field));
        }
        Ok(self.0.split_to(len))
    }

    /// A UTF-8 string with a two-byte length prefix.
    fn string(&mut self, field: &'static str) -> Result<MqttStr, DecodeError> {
        MqttStr::from_bytes(self.binary(field)?, field)
    }

    fn topic_name(&mut self, field: &'static str) -> Result<MqttStr, DecodeError> {
        let bytes = match MqttStr::plain_topic_name(self.binary(field)?) {
            Ok(topic) => return Ok(topic),
            Err(bytes) => bytes,
        };
        let topic = MqttStr::from_bytes(bytes, field)?;
        validate_topic_name(&topic).map_err(|error| DecodeError::InvalidTopic { field, error })?;
        Ok(topic)
    }

    fn topic_filter(&mut self) -> Result<MqttStr, DecodeError> {
        const FIELD: &str = "topic filter";
        let filter = self.string(FIELD)?;
        validate_topic_filter(&filter).map_err(|error| DecodeError::InvalidTopic { field: FIELD, error })?;
        Ok(filter)
    }

    /// MQTT 5 properties allowed in `ctx`.
    fn properties(&mut self, ctx: Context) -> Result<Option<Box<Properties>>, DecodeError> {
        Properties::decode(&mut self.0, ctx)
    }

    /// A reason code valid for `ty`.
    fn reason(&mut self, ty: PacketType) -> Result<ReasonCode, DecodeError> {
        let code = self.u8("reason code")?;
        if !reason_allowed(ty, code) {
            return Err(DecodeError::InvalidReasonCode {
                packet: ty.name(),
                code,
            });
        }
        Ok(ReasonCode(code))
    }

    /// The optional reason code and properties that end MQTT 5
    /// acknowledgements, DISCONNECT and AUTH: both may be left out, meaning
    /// success and none.
    fn reason_and_properties(
        &mut self,
        ty: PacketType,
        ctx: Context,
    ) -> Result<(ReasonCode, Option<Box<Properties>>), DecodeError> {
        if self.is_empty() {
            return Ok((ReasonCode::SUCCESS, None));
        }
        let reason = self.reason(ty)?;
        if self.is_empty() {
            return Ok((reason, None));
        }
        let properties = self.properties(ctx)?;
        self.finish(ty.name())?;
        Ok((reason, properties))
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Fails if bytes are left after the last field of `packet`.
    fn finish(&self, packet: &'static str) -> Result<(), DecodeError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes(packet))
        }
    }
}

/// CONNECT flag bits (section 3.1.2.3).
const FLAG_RESERVED: u8 = 0x01;
const FLAG_CLEAN_SESSION: u8 = 0x02;
const FLAG_WILL: u8 = 0x04;
const FLAG_WILL_RETAIN: u8 = 0x20;
const FLAG_PASSWORD: u8 = 0x40;
const FLAG_USERNAME: u8 = 0x80;

fn decode_connect(mut r: Reader) -> Result<Connect, DecodeError> {
    let name = r.binary("protocol name")?;
    let level = r.u8("protocol level")?;
    let protocol = match (&name[..], level) {
        (b"MQTT", 4) => ProtocolVersion::V3_1_1,
        (b"MQTT", 5) => ProtocolVersion::V5,
        (b"MQIsdp", 3) => ProtocolVersion::V3_1,
        // The rest of the packet may follow another layout, so stop here and
        // let the broker answer CONNACK 1 [MQTT-3.1.2-2].
        (b"MQTT" | b"MQIsdp", level) => return Err(DecodeError::UnsupportedProtocolLevel(level)),
        _ => return Err(DecodeError::InvalidProtocolName),
    };
    let v5 = protocol.is_v5();
    let flags = r.u8("connect flags")?;
    if flags & FLAG_RESERVED != 0 {
        return Err(DecodeError::ConnectReservedFlag);
    }
    let will_qos = (flags >> 3) & 0b11;
    let has_will = flags & FLAG_WILL != 0;
    if !has_will && (will_qos != 0 || flags & FLAG_WILL_RETAIN != 0) {
        return Err(DecodeError::WillFlagsWithoutWill);
    }
    let will_qos = QoS::from_bits(will_qos).ok_or(DecodeError::InvalidWillQos)?;
    // MQTT 5 allows a password without a user name.
    if !v5 && flags & FLAG_PASSWORD != 0 && flags & FLAG_USERNAME == 0 {
        return Err(DecodeError::PasswordWithoutUsername);
    }
    let keep_alive = r.u16("keep alive")?;
    let properties = if v5 { r.properties(Context::Connect)? } else { None };
    let client_id = r.string("client identifier")?;
    let will = if has_will {
        let properties = if v5 { r.properties(Context::Will)? } else { None };
        Some(Will {
            topic: r.topic_name("will topic")?,
            payload: r.binary("will message")?,
            qos: will_qos,
            retain: flags & FLAG_WILL_RETAIN != 0,
            properties,
        })
    } else {
        None
    };
    let username = if flags & FLAG_USERNAME != 0 {
        Some(r.string("user name")?)
    } else {
        None
    };
    let password = if flags & FLAG_PASSWORD != 0 {
        Some(r.binary("password")?)
    } else {
        None
    };
    r.finish("CONNECT")?;
    Ok(Connect {
        protocol,
        clean_session: flags & FLAG_CLEAN_SESSION != 0,
        keep_alive,
        client_id,
        will,
        username,
        password,
        properties,
    })
}

fn decode_connack(flags: u8, code: u8) -> Result<Connack, DecodeError> {
    if flags & !1 != 0 {
        return Err(DecodeError::InvalidConnackFlags(flags));
    }
    Ok(Connack {
        session_present: flags == 1,
        code: ReasonCode::from_v3_connack(code).ok_or(DecodeError::InvalidConnectReturnCode(code))?,
        properties: None,
    })
}

fn decode_publish(flags: u8, mut r: Reader, v5: bool) -> Result<Publish, DecodeError> {
    // The fixed header check already refused QoS 3.
    let qos = QoS::from_bits((flags >> 1) & 0b11).ok_or(DecodeError::InvalidPublishQos)?;
    // MQTT 5 allows an empty topic name when a topic alias stands for it;
    // whether one does is the session's to check.
    let topic = if v5 && r.0.get(..2) == Some(&[0u8, 0][..]) {
        r.string("topic name")?
    } else {
        r.topic_name("topic name")?
    };
    let packet_id = if qos == QoS::AtMostOnce {
        0
    } else {
        r.packet_id("PUBLISH")?
    };
    let properties = if v5 { r.properties(Context::Publish)? } else { None };
    Ok(Publish {
        dup: flags & 0b1000 != 0,
        qos,
        retain: flags & 1 != 0,
        topic,
        packet_id,
        payload: r.0,
        properties,
    })
}

fn decode_subscribe(mut r: Reader, v5: bool) -> Result<Subscribe, DecodeError> {
    let packet_id = r.packet_id("SUBSCRIBE")?;
    let properties = if v5 { r.properties(Context::Subscribe)? } else { None };
    let mut filters = Vec::with_capacity(1);
    while !r.is_empty() {
        let filter = r.topic_filter()?;
        let byte = r.u8("subscription options")?;
        let options = if v5 {
            // Bits 6-7 reserved, retain handling 3 and QoS 3 invalid.
            let qos = QoS::from_bits(byte & 0b11).ok_or(DecodeError::InvalidSubscriptionOptions(byte))?;
            let retain_handling = (byte >> 4) & 0b11;
            if byte & 0xc0 != 0 || retain_handling == 3 {
                return Err(DecodeError::InvalidSubscriptionOptions(byte));
            }
            SubscriptionOptions {
                qos,
                no_local: byte & 0b100 != 0,
                retain_as_published: byte & 0b1000 != 0,
                retain_handling,
            }
        } else {
            // Upper six bits reserved, and QoS 3 invalid [MQTT-3-8.3-4].
            SubscriptionOptions::qos(QoS::from_bits(byte).ok_or(DecodeError::InvalidRequestedQos(byte))?)
        };
        filters.push((filter, options));
    }
    if filters.is_empty() {
        return Err(DecodeError::NoSubscribeFilters);
    }
    Ok(Subscribe {
        packet_id,
        filters,
        properties,
    })
}

fn decode_suback(mut r: Reader, v5: bool) -> Result<Suback, DecodeError> {
    let packet_id = r.u16("packet identifier")?;
    let properties = if v5 { r.properties(Context::Suback)? } else { None };
    let mut codes = Vec::with_capacity(r.0.len());
    while !r.is_empty() {
        codes.push(if v5 {
            r.reason(PacketType::Suback)?
        } else {
            match r.u8("return code")? {
                code @ (0..=2 | 0x80) => ReasonCode(code),
                code => return Err(DecodeError::InvalidSubackReturnCode(code)),
            }
        });
    }
    Ok(Suback {
        packet_id,
        codes,
        properties,
    })
}

fn decode_unsubscribe(mut r: Reader, v5: bool) -> Result<Unsubscribe, DecodeError> {
    let packet_id = r.packet_id("UNSUBSCRIBE")?;
    let properties = if v5 { r.properties(Context::Unsubscribe)? } else { None };
    let mut filters = Vec::with_capacity(1);
    while !r.is_empty() {
        filters.push(r.topic_filter()?);
    }
    if filters.is_empty() {
        return Err(DecodeError::NoUnsubscribeFilters);
    }
    Ok(Unsubscribe {
        packet_id,
        filters,
        properties,
    })
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    use super::*;
    use crate::mqtt::codec::MAX_REMAINING_LENGTH;
    use crate::mqtt::codec::error::TopicError;
    use crate::mqtt::codec::header::put_fixed_header;
    use crate::mqtt::codec::samples::{
        all_packets, all_v5_packets, encode, encode_as, random_packet, random_v5_packet, reasons, s,
    };

    const MAX: usize = MAX_REMAINING_LENGTH;
    const V3: ProtocolVersion = ProtocolVersion::V3_1_1;
    const V5: ProtocolVersion = ProtocolVersion::V5;

    /// A packet from its first byte and body, with the remaining length filled in.
    fn frame(first: u8, body: &[u8]) -> BytesMut {
        let mut out = BytesMut::new();
        put_fixed_header(&mut out, first, body.len()).unwrap();
        out.put_slice(body);
        out
    }

    /// A two-byte length prefix followed by `bytes`.
    fn lp(bytes: &[u8]) -> Vec<u8> {
        let mut v = (bytes.len() as u16).to_be_bytes().to_vec();
        v.extend_from_slice(bytes);
        v
    }

    fn parse(bytes: &[u8]) -> Result<Option<Packet>, DecodeError> {
        parse_packet(&mut BytesMut::from(bytes), MAX, V3)
    }

    fn parse_err(first: u8, body: &[u8]) -> DecodeError {
        parse_packet(&mut frame(first, body), MAX, V3).unwrap_err()
    }

    /// A CONNECT body: protocol name, level, flags, keep alive 10, then `payload`.
    fn connect_body(name: &[u8], level: u8, flags: u8, payload: &[&[u8]]) -> Vec<u8> {
        let mut v = lp(name);
        v.extend_from_slice(&[level, flags, 0, 10]);
        for part in payload {
            v.extend_from_slice(&lp(part));
        }
        v
    }

    #[test]
    fn connect_vector() {
        // Section 3.1.2.10's variable header: "MQTT", level 4, flags 0xCE
        // (user name, password, will QoS 1, will, clean session), keep alive 10.
        let mut bytes = vec![0x10, 37, 0, 4, b'M', b'Q', b'T', b'T', 4, 0xce, 0, 10];
        bytes.extend_from_slice(&[0, 3, b'c', b'i', b'd']);
        bytes.extend_from_slice(&[0, 3, b'a', b'/', b'b']);
        bytes.extend_from_slice(&[0, 3, b'b', b'y', b'e']);
        bytes.extend_from_slice(&[0, 4, b'u', b's', b'e', b'r']);
        bytes.extend_from_slice(&[0, 4, b'p', b'a', b's', b's']);
        assert_eq!(bytes.len(), 2 + 37);
        let Some(Packet::Connect(c)) = parse(&bytes).unwrap() else {
            panic!("not a CONNECT");
        };
        assert_eq!(c.protocol, ProtocolVersion::V3_1_1);
        assert!(c.clean_session);
        assert_eq!(c.keep_alive, 10);
        assert_eq!(c.client_id, "cid");
        let will = c.will.as_ref().unwrap();
        assert_eq!(
            (will.topic.as_str(), &will.payload[..], will.qos, will.retain),
            ("a/b", &b"bye"[..], QoS::AtLeastOnce, false)
        );
        assert_eq!(c.username.as_ref().unwrap(), "user");
        assert_eq!(c.password.as_deref(), Some(&b"pass"[..]));
    }

    #[test]
    fn mqtt_3_1_connect_vector() {
        let mut bytes = vec![0x10, 16, 0, 6, b'M', b'Q', b'I', b's', b'd', b'p', 3, 0x02, 0, 30];
        bytes.extend_from_slice(&[0, 2, b'i', b'd']);
        let Some(Packet::Connect(c)) = parse(&bytes).unwrap() else {
            panic!("not a CONNECT");
        };
        assert_eq!(c.protocol, ProtocolVersion::V3_1);
        assert_eq!((c.keep_alive, c.client_id.as_str(), c.will.is_none()), (30, "id", true));
        assert_eq!((c.username.as_ref(), c.password.as_ref()), (None, None));
    }

    #[test]
    fn publish_vector_is_zero_copy() {
        // QoS 1, retain, topic "a/b", packet id 10, payload "hi".
        let mut buf = BytesMut::from(&[0x33, 9, 0, 3, b'a', b'/', b'b', 0, 10, b'h', b'i'][..]);
        let start = buf.as_ptr() as usize;
        let Some(Packet::Publish(p)) = parse_packet(&mut buf, MAX, V3).unwrap() else {
            panic!("not a PUBLISH");
        };
        assert!(buf.is_empty());
        assert_eq!(
            (p.dup, p.qos, p.retain, p.packet_id),
            (false, QoS::AtLeastOnce, true, 10)
        );
        assert_eq!(p.topic, "a/b");
        assert_eq!(&p.payload[..], b"hi");
        // Topic and payload point into the receive buffer.
        assert_eq!(p.topic.as_bytes().as_ptr() as usize, start + 4);
        assert_eq!(p.payload.as_ptr() as usize, start + 9);
    }

    #[test]
    fn subscribe_vector() {
        // Section 3.8.3's example: packet id 10, "a/b" QoS 1, "c/d" QoS 2.
        let bytes = [0x82, 14, 0, 10, 0, 3, b'a', b'/', b'b', 1, 0, 3, b'c', b'/', b'd', 2];
        let packet = parse(&bytes).unwrap().unwrap();
        let expected = Packet::Subscribe(Subscribe {
            packet_id: 10,
            filters: vec![
                (s("a/b"), SubscriptionOptions::qos(QoS::AtLeastOnce)),
                (s("c/d"), SubscriptionOptions::qos(QoS::ExactlyOnce)),
            ],
            properties: None,
        });
        assert_eq!(packet, expected);
    }

    #[test]
    fn small_packet_vectors() {
        assert_eq!(parse(&[0xc0, 0]).unwrap(), Some(Packet::Pingreq));
        assert_eq!(parse(&[0xd0, 0]).unwrap(), Some(Packet::Pingresp));
        assert_eq!(
            parse(&[0xe0, 0]).unwrap(),
            Some(Packet::Disconnect(Disconnect::normal()))
        );
        assert_eq!(
            parse(&[0x40, 2, 0x12, 0x34]).unwrap(),
            Some(Packet::Puback(Ack::ok(0x1234)))
        );
        assert_eq!(parse(&[0x50, 2, 0, 5]).unwrap(), Some(Packet::Pubrec(Ack::ok(5))));
        assert_eq!(parse(&[0x62, 2, 0, 5]).unwrap(), Some(Packet::Pubrel(Ack::ok(5))));
        assert_eq!(parse(&[0x70, 2, 0, 5]).unwrap(), Some(Packet::Pubcomp(Ack::ok(5))));
        assert_eq!(
            parse(&[0xb0, 2, 0, 7]).unwrap(),
            Some(Packet::Unsuback(Unsuback {
                packet_id: 7,
                codes: Vec::new(),
                properties: None
            }))
        );
        assert_eq!(
            parse(&[0x20, 2, 1, 0]).unwrap(),
            Some(Packet::Connack(Connack {
                session_present: true,
                code: ReasonCode::SUCCESS,
                properties: None
            }))
        );
        assert_eq!(
            parse(&[0xa2, 7, 0, 3, 0, 3, b'a', b'/', b'#']).unwrap(),
            Some(Packet::Unsubscribe(Unsubscribe {
                packet_id: 3,
                filters: vec![s("a/#")],
                properties: None
            }))
        );
    }

    /// Every prefix of every sample of `version` is `Ok(None)` and leaves the
    /// buffer as it was.
    fn check_every_prefix_waits(packets: &[Packet], version: ProtocolVersion) {
        for packet in packets {
            let bytes = encode_as(packet, version);
            for len in 0..bytes.len() {
                let mut buf = BytesMut::from(&bytes[..len]);
                assert_eq!(
                    parse_packet(&mut buf, MAX, version),
                    Ok(None),
                    "{} prefix {len}",
                    packet.name()
                );
                assert_eq!(&buf[..], &bytes[..len], "{} prefix {len} consumed", packet.name());
            }
        }
    }

    #[test]
    fn every_prefix_waits_and_consumes_nothing() {
        check_every_prefix_waits(&all_packets(), V3);
    }

    #[test]
    fn every_v5_prefix_waits_and_consumes_nothing() {
        check_every_prefix_waits(&all_v5_packets(), V5);
        let mut rng = StdRng::seed_from_u64(5);
        let random: Vec<Packet> = (0..300).map(|_| random_v5_packet(&mut rng, false)).collect();
        check_every_prefix_waits(&random, V5);
    }

    /// The samples back to back in one buffer come out one at a time.
    fn check_one_packet_at_a_time(packets: &[Packet], version: ProtocolVersion) {
        let mut buf = BytesMut::new();
        for packet in packets {
            buf.extend_from_slice(&encode_as(packet, version));
        }
        buf.extend_from_slice(&[0x30]); // the start of another packet
        for packet in packets {
            assert_eq!(parse_packet(&mut buf, MAX, version).unwrap().as_ref(), Some(packet));
        }
        assert_eq!(parse_packet(&mut buf, MAX, version), Ok(None));
        assert_eq!(&buf[..], &[0x30]);
    }

    #[test]
    fn consumes_exactly_one_packet_at_a_time() {
        check_one_packet_at_a_time(&all_packets(), V3);
    }

    #[test]
    fn consumes_exactly_one_v5_packet_at_a_time() {
        check_one_packet_at_a_time(&all_v5_packets(), V5);
    }

    #[test]
    fn oversized_packet_fails_from_the_header() {
        // Only the fixed header is buffered: the size is refused before the body.
        let mut buf = BytesMut::from(&[0x30, 0x80, 0x08][..]); // remaining length 1024
        assert_eq!(
            parse_packet(&mut buf, 1023, V3),
            Err(DecodeError::PacketTooLarge { size: 1024, max: 1023 })
        );
        let mut ok = frame(0x30, &[&lp(b"t")[..], &[0u8; 10][..]].concat());
        assert!(parse_packet(&mut ok, 13, V3).unwrap().is_some());
        let mut too_big = frame(0x30, &[&lp(b"t")[..], &[0u8; 11][..]].concat());
        assert_eq!(
            parse_packet(&mut too_big, 13, V3),
            Err(DecodeError::PacketTooLarge { size: 14, max: 13 })
        );
    }

    #[test]
    fn protocol_name_and_level() {
        // [MQTT-3.1.2-1]
        for name in [&b"MQTS"[..], b"mqtt", b"MQIsdP", b""] {
            assert_eq!(
                parse_err(0x10, &connect_body(name, 4, 2, &[b"c"])),
                DecodeError::InvalidProtocolName
            );
        }
        // [MQTT-3.1.2-2]: a distinct error, so the broker can answer CONNACK 1.
        for (name, level) in [
            (&b"MQTT"[..], 6),
            (b"MQTT", 3),
            (b"MQIsdp", 4),
            (b"MQIsdp", 5),
            (b"MQTT", 0),
        ] {
            let err = parse_err(0x10, &connect_body(name, level, 2, &[b"c"]));
            assert_eq!(err, DecodeError::UnsupportedProtocolLevel(level));
        }
        // An MQTT 5 CONNECT (with its property length) is read whatever the
        // connection was read as so far: it is the first packet.
        let v5 = frame(0x10, &[&lp(b"MQTT")[..], &[5, 2, 0, 10, 0, 0, 1, b'c']].concat());
        for version in [V3, V5] {
            let Some(Packet::Connect(c)) = parse_packet(&mut v5.clone(), MAX, version).unwrap() else {
                panic!("not a CONNECT");
            };
            assert_eq!(
                (c.protocol, c.client_id.as_str(), c.properties.is_none()),
                (V5, "c", true)
            );
        }
    }

    #[test]
    fn connect_flag_rules() {
        let err = |flags: u8, payload: &[&[u8]]| parse_err(0x10, &connect_body(b"MQTT", 4, flags, payload));
        // [MQTT-3.1.2-3]
        assert_eq!(err(0x03, &[b"c"]), DecodeError::ConnectReservedFlag);
        // [MQTT-3.1.2-11], [MQTT-3.1.2-13]: will QoS without the will flag.
        assert_eq!(err(0x08, &[b"c"]), DecodeError::WillFlagsWithoutWill);
        assert_eq!(err(0x10, &[b"c"]), DecodeError::WillFlagsWithoutWill);
        // [MQTT-3.1.2-15]: will retain without the will flag.
        assert_eq!(err(0x20, &[b"c"]), DecodeError::WillFlagsWithoutWill);
        // [MQTT-3.1.2-14]
        assert_eq!(err(0x1c, &[b"c", b"t", b"m"]), DecodeError::InvalidWillQos);
        // [MQTT-3.1.2-22]
        assert_eq!(err(0x40, &[b"c", b"p"]), DecodeError::PasswordWithoutUsername);
        // [MQTT-3.1.2-9]: will fields must be there when the flag says so.
        assert_eq!(err(0x04, &[b"c"]), DecodeError::Truncated("will topic"));
        assert_eq!(err(0x04, &[b"c", b"t"]), DecodeError::Truncated("will message"));
        // [MQTT-3.1.2-19], [MQTT-3.1.2-21]
        assert_eq!(err(0x80, &[b"c"]), DecodeError::Truncated("user name"));
        assert_eq!(err(0xc0, &[b"c", b"u"]), DecodeError::Truncated("password"));
        // [MQTT-3.1.2-18], [MQTT-3.1.2-20]: nothing beyond what the flags announce.
        assert_eq!(err(0x02, &[b"c", b"u"]), DecodeError::TrailingBytes("CONNECT"));
        assert_eq!(err(0x02, &[]), DecodeError::Truncated("client identifier"));
        // Will topics are topic names.
        assert_eq!(
            err(0x04, &[b"c", b"a/#", b"m"]),
            DecodeError::InvalidTopic {
                field: "will topic",
                error: TopicError::WildcardInName
            }
        );
        assert_eq!(
            err(0x04, &[b"c", b"", b"m"]),
            DecodeError::InvalidTopic {
                field: "will topic",
                error: TopicError::Empty
            }
        );
    }

    #[test]
    fn connect_strings_must_be_valid() {
        let err = |payload: &[&[u8]]| parse_err(0x10, &connect_body(b"MQTT", 4, 0x86, payload));
        // [MQTT-1.5.3-1], [MQTT-1.5.3-2]
        assert_eq!(
            err(&[b"\xff", b"t", b"m", b"u"]),
            DecodeError::InvalidUtf8("client identifier")
        );
        assert_eq!(
            err(&[b"c\0", b"t", b"m", b"u"]),
            DecodeError::NullCharacter("client identifier")
        );
        assert_eq!(
            err(&[b"c", b"\xc3", b"m", b"u"]),
            DecodeError::InvalidUtf8("will topic")
        );
        assert_eq!(
            err(&[b"c", b"t", b"m", b"\xed\xa0\x80"]),
            DecodeError::InvalidUtf8("user name")
        );
        assert_eq!(
            err(&[b"c", b"t", b"m", b"u\0"]),
            DecodeError::NullCharacter("user name")
        );
        // Will messages and passwords are binary data.
        assert!(
            parse(&frame(
                0x10,
                &connect_body(b"MQTT", 4, 0xc6, &[b"c", b"t", b"\0\xff", b"u", b"\0\xff"])
            ))
            .is_ok()
        );
    }

    #[test]
    fn publish_topics_outside_ascii_are_accepted() {
        for topic in ["a/ü", "\u{feff}t", "x/\u{7f}/€"] {
            let Ok(Some(Packet::Publish(p))) = parse(&frame(0x30, &lp(topic.as_bytes()))) else {
                panic!("{topic:?} refused");
            };
            assert_eq!(p.topic, topic);
        }
    }

    #[test]
    fn publish_rules() {
        // [MQTT-3.3.2-2]
        for topic in [&b"a/+"[..], b"#", b"a+b"] {
            assert_eq!(
                parse_err(0x30, &lp(topic)),
                DecodeError::InvalidTopic {
                    field: "topic name",
                    error: TopicError::WildcardInName
                }
            );
        }
        // [MQTT-4.7.3-1]
        assert_eq!(
            parse_err(0x30, &lp(b"")),
            DecodeError::InvalidTopic {
                field: "topic name",
                error: TopicError::Empty
            }
        );
        // [MQTT-1.5.3-1], [MQTT-1.5.3-2]
        assert_eq!(parse_err(0x30, &lp(b"a\xff")), DecodeError::InvalidUtf8("topic name"));
        assert_eq!(parse_err(0x30, &lp(b"a\0")), DecodeError::NullCharacter("topic name"));
        // [MQTT-2.3.1-1]
        let body = [&lp(b"t")[..], &[0, 0]].concat();
        assert_eq!(parse_err(0x32, &body), DecodeError::ZeroPacketId("PUBLISH"));
        assert_eq!(parse_err(0x34, &body), DecodeError::ZeroPacketId("PUBLISH"));
        // QoS 0 has no packet identifier: the two zero bytes are payload.
        let Some(Packet::Publish(p)) = parse(&frame(0x30, &body)).unwrap() else {
            panic!("not a PUBLISH");
        };
        assert_eq!(&p.payload[..], &[0, 0]);
        assert_eq!(parse_err(0x32, &lp(b"t")), DecodeError::Truncated("packet identifier"));
        assert_eq!(parse_err(0x30, &[0, 5, b'a']), DecodeError::Truncated("topic name"));
        // [MQTT-3.3.1-4], [MQTT-3.3.1-2]
        assert_eq!(parse_err(0x36, &body), DecodeError::InvalidPublishQos);
        assert_eq!(parse_err(0x38, &body), DecodeError::DupOnQos0);
    }

    #[test]
    fn subscribe_rules() {
        let filter = |f: &[u8], qos: u8| [&lp(f)[..], &[qos]].concat();
        // [MQTT-3.8.1-1]
        assert!(matches!(
            parse_err(0x80, &[0, 1]),
            DecodeError::InvalidFlags {
                packet: "SUBSCRIBE",
                flags: 0
            }
        ));
        // [MQTT-3.8.3-3]
        assert_eq!(parse_err(0x82, &[0, 1]), DecodeError::NoSubscribeFilters);
        // [MQTT-2.3.1-1]
        assert_eq!(
            parse_err(0x82, &[&[0, 0][..], &filter(b"a", 0)].concat()),
            DecodeError::ZeroPacketId("SUBSCRIBE")
        );
        // [MQTT-3-8.3-4]: QoS above 2, or reserved bits set.
        for bad in [3u8, 0x04, 0x41, 0x80, 0xff] {
            let body = [&[0, 1][..], &filter(b"a", 0), &filter(b"b", bad)].concat();
            assert_eq!(parse_err(0x82, &body), DecodeError::InvalidRequestedQos(bad));
        }
        // [MQTT-4.7.1-2], [MQTT-4.7.1-3], [MQTT-4.7.3-1]
        for (f, error) in [
            (&b"a/#/b"[..], TopicError::MisplacedMultiLevelWildcard),
            (b"a#", TopicError::MisplacedMultiLevelWildcard),
            (b"a/b+", TopicError::MisplacedSingleLevelWildcard),
            (b"", TopicError::Empty),
        ] {
            let body = [&[0, 1][..], &filter(f, 1)].concat();
            assert_eq!(
                parse_err(0x82, &body),
                DecodeError::InvalidTopic {
                    field: "topic filter",
                    error
                }
            );
        }
        assert_eq!(
            parse_err(0x82, &[0, 1, 0, 1, b'a']),
            DecodeError::Truncated("subscription options")
        );
        assert_eq!(parse_err(0x82, &[0]), DecodeError::Truncated("packet identifier"));
    }

    #[test]
    fn unsubscribe_rules() {
        // [MQTT-3.10.1-1]
        assert!(matches!(
            parse_err(0xa3, &[0, 1]),
            DecodeError::InvalidFlags {
                packet: "UNSUBSCRIBE",
                flags: 3
            }
        ));
        // [MQTT-3.10.3-2]
        assert_eq!(parse_err(0xa2, &[0, 1]), DecodeError::NoUnsubscribeFilters);
        // [MQTT-2.3.1-1]
        assert_eq!(
            parse_err(0xa2, &[&[0, 0][..], &lp(b"a")].concat()),
            DecodeError::ZeroPacketId("UNSUBSCRIBE")
        );
        assert_eq!(
            parse_err(0xa2, &[&[0, 1][..], &lp(b"+a")].concat()),
            DecodeError::InvalidTopic {
                field: "topic filter",
                error: TopicError::MisplacedSingleLevelWildcard
            }
        );
        assert_eq!(
            parse_err(0xa2, &[&[0, 1][..], &lp(b"a\0")].concat()),
            DecodeError::NullCharacter("topic filter")
        );
    }

    #[test]
    fn pubrel_flags() {
        // [MQTT-3.6.1-1]
        assert!(matches!(
            parse(&[0x60, 2, 0, 1]),
            Err(DecodeError::InvalidFlags {
                packet: "PUBREL",
                flags: 0
            })
        ));
    }

    #[test]
    fn acknowledgement_rules() {
        assert_eq!(parse(&[0x20, 2, 2, 0]), Err(DecodeError::InvalidConnackFlags(2)));
        assert_eq!(parse(&[0x20, 2, 0, 6]), Err(DecodeError::InvalidConnectReturnCode(6)));
        // [MQTT-3.9.3-2]
        assert_eq!(parse(&[0x90, 3, 0, 1, 3]), Err(DecodeError::InvalidSubackReturnCode(3)));
        assert_eq!(
            parse(&[0x90, 3, 0, 1, 0x81]),
            Err(DecodeError::InvalidSubackReturnCode(0x81))
        );
    }

    fn parse_v5(bytes: &[u8]) -> Result<Option<Packet>, DecodeError> {
        parse_packet(&mut BytesMut::from(bytes), MAX, V5)
    }

    fn parse_v5_err(first: u8, body: &[u8]) -> DecodeError {
        parse_packet(&mut frame(first, body), MAX, V5).unwrap_err()
    }

    fn props(p: Properties) -> Option<Box<Properties>> {
        Some(Box::new(p))
    }

    #[test]
    fn v5_acknowledgement_vectors() {
        let ack = |packet_id, reason, properties| Ack {
            packet_id,
            reason: ReasonCode(reason),
            properties,
        };
        // Section 3.4.2.1: the reason code may stand alone, and both it and
        // the property length may be left out for success.
        assert_eq!(
            parse_v5(&[0x40, 3, 0x12, 0x34, 0x10]),
            Ok(Some(Packet::Puback(ack(0x1234, 0x10, None))))
        );
        assert_eq!(parse_v5(&[0x40, 2, 0, 1]), Ok(Some(Packet::Puback(Ack::ok(1)))));
        assert_eq!(
            parse_v5(&[0x40, 4, 0, 1, 0x10, 0]),
            Ok(Some(Packet::Puback(ack(1, 0x10, None))))
        );
        assert_eq!(
            parse_v5(&[0x50, 8, 0, 5, 0x80, 4, 0x1f, 0, 1, b'x']),
            Ok(Some(Packet::Pubrec(ack(
                5,
                0x80,
                props(Properties {
                    reason_string: Some(s("x")),
                    ..Properties::default()
                })
            ))))
        );
        assert_eq!(
            parse_v5(&[0x62, 3, 0, 7, 0x92]),
            Ok(Some(Packet::Pubrel(ack(7, 0x92, None))))
        );
        assert_eq!(
            parse_v5(&[0x70, 3, 0, 7, 0x92]),
            Ok(Some(Packet::Pubcomp(ack(7, 0x92, None))))
        );
        assert_eq!(
            encode_as(&Packet::Puback(ack(0x1234, 0x10, None)), V5).to_vec(),
            [0x40, 3, 0x12, 0x34, 0x10]
        );
        // Zero packet identifiers and bytes after the properties.
        assert_eq!(parse_v5(&[0x40, 2, 0, 0]), Err(DecodeError::ZeroPacketId("PUBACK")));
        assert_eq!(
            parse_v5(&[0x40, 5, 0, 1, 0x10, 0, 0xff]),
            Err(DecodeError::TrailingBytes("PUBACK"))
        );
        assert_eq!(
            parse_v5(&[0x40, 5, 0, 1, 0x10, 5, 0x1f]),
            Err(DecodeError::Truncated("properties"))
        );
    }

    #[test]
    fn v5_disconnect_and_auth_vectors() {
        assert_eq!(parse_v5(&[0xe0, 0]), Ok(Some(Packet::Disconnect(Disconnect::normal()))));
        assert_eq!(
            parse_v5(&[0xe0, 1, 0x04]),
            Ok(Some(Packet::Disconnect(Disconnect::with(
                ReasonCode::DISCONNECT_WITH_WILL
            ))))
        );
        assert_eq!(
            parse_v5(&[0xe0, 2, 0x8e, 0]),
            Ok(Some(Packet::Disconnect(Disconnect::with(
                ReasonCode::SESSION_TAKEN_OVER
            ))))
        );
        assert_eq!(
            parse_v5(&[0xe0, 7, 0x00, 5, 0x11, 0, 0, 0, 60]),
            Ok(Some(Packet::Disconnect(Disconnect {
                reason: ReasonCode::SUCCESS,
                properties: props(Properties {
                    session_expiry_interval: Some(60),
                    ..Properties::default()
                }),
            })))
        );
        let with_will = Packet::Disconnect(Disconnect::with(ReasonCode::DISCONNECT_WITH_WILL));
        assert_eq!(encode_as(&with_will, V5).to_vec(), [0xe0, 1, 0x04]);
        // Before MQTT 5 DISCONNECT has no reason.
        assert_eq!(encode(&with_will).to_vec(), [0xe0, 0]);
        assert_eq!(parse_v5(&[0xf0, 0]), Ok(Some(Packet::Auth(Disconnect::normal()))));
        assert_eq!(
            parse_v5(&[0xf0, 1, 0x18]),
            Ok(Some(Packet::Auth(Disconnect::with(
                ReasonCode::CONTINUE_AUTHENTICATION
            ))))
        );
        // AUTH is a reserved packet type before MQTT 5 [MQTT-2.1.3-1].
        assert_eq!(parse(&[0xf0, 0]), Err(DecodeError::ReservedPacketType(15)));
        assert_eq!(parse(&[0xf0, 1, 0x18]), Err(DecodeError::ReservedPacketType(15)));
        // Pings stay fixed-size.
        assert!(matches!(
            parse_v5(&[0xc0, 1, 0]),
            Err(DecodeError::InvalidRemainingLength { .. })
        ));
    }

    #[test]
    fn v5_connect_vector() {
        // Section 3.1.2.11's layout: "MQTT", level 5, clean start, keep alive
        // 10, properties: session expiry 3600; client id "c".
        let bytes = [
            0x10, 19, 0, 4, b'M', b'Q', b'T', b'T', 5, 0x02, 0, 10, 5, 0x11, 0, 0, 0x0e, 0x10, 0, 1, b'c',
        ];
        let expected = Packet::Connect(Box::new(Connect {
            protocol: V5,
            clean_session: true,
            keep_alive: 10,
            client_id: s("c"),
            will: None,
            username: None,
            password: None,
            properties: props(Properties {
                session_expiry_interval: Some(3600),
                ..Properties::default()
            }),
        }));
        assert_eq!(parse(&bytes), Ok(Some(expected.clone())));
        assert_eq!(parse_v5(&bytes), Ok(Some(expected.clone())));
        assert_eq!(encode_as(&expected, V5).to_vec(), bytes);
        // Will properties come before the will topic.
        let with_will = [
            &lp(b"MQTT")[..],
            &[5, 0x06, 0, 10, 0],
            &lp(b"c"),
            &[5, 0x18, 0, 0, 0, 9],
            &lp(b"w"),
            &lp(b"bye"),
        ]
        .concat();
        let Some(Packet::Connect(c)) = parse_v5(&frame(0x10, &with_will)).unwrap() else {
            panic!("not a CONNECT");
        };
        let will = c.will.unwrap();
        assert_eq!((will.topic.as_str(), &will.payload[..]), ("w", &b"bye"[..]));
        assert_eq!(will.properties.unwrap().will_delay_interval, Some(9));
    }

    #[test]
    fn v5_password_without_user_name() {
        // Allowed by MQTT 5 (section 3.1.2.9), not by 3.1.1 [MQTT-3.1.2-22].
        let body = [&lp(b"MQTT")[..], &[5, 0x40, 0, 10, 0], &lp(b"c"), &lp(b"secret")].concat();
        let Some(Packet::Connect(c)) = parse_v5(&frame(0x10, &body)).unwrap() else {
            panic!("not a CONNECT");
        };
        assert_eq!((c.username, c.password.as_deref()), (None, Some(&b"secret"[..])));
        assert_eq!(
            parse_err(0x10, &connect_body(b"MQTT", 4, 0x40, &[b"c", b"p"])),
            DecodeError::PasswordWithoutUsername
        );
    }

    #[test]
    fn v5_connack_publish_and_subscribe_vectors() {
        let refused = Packet::Connack(Connack {
            session_present: false,
            code: ReasonCode::BAD_USER_NAME_OR_PASSWORD,
            properties: None,
        });
        assert_eq!(parse_v5(&[0x20, 3, 0, 0x86, 0]), Ok(Some(refused.clone())));
        assert_eq!(encode_as(&refused, V5).to_vec(), [0x20, 3, 0, 0x86, 0]);
        assert_eq!(encode(&refused).to_vec(), [0x20, 2, 0, 4]);
        // The property length of CONNACK is not optional.
        assert_eq!(
            parse_v5(&[0x20, 2, 0, 0]),
            Err(DecodeError::Truncated("property length"))
        );
        // An empty topic with a topic alias, QoS 0, payload "hi".
        let aliased = Packet::Publish(Publish {
            dup: false,
            qos: QoS::AtMostOnce,
            retain: false,
            topic: s(""),
            packet_id: 0,
            payload: Bytes::from_static(b"hi"),
            properties: props(Properties {
                topic_alias: Some(5),
                ..Properties::default()
            }),
        });
        let bytes = [0x30, 8, 0, 0, 3, 0x23, 0, 5, b'h', b'i'];
        assert_eq!(parse_v5(&bytes), Ok(Some(aliased.clone())));
        assert_eq!(encode_as(&aliased, V5).to_vec(), bytes);
        // A topic alias of 0 is a protocol error; wildcards stay refused.
        assert!(matches!(
            parse_v5_err(0x30, &[0, 0, 3, 0x23, 0, 0]),
            DecodeError::InvalidPropertyValue { id: 0x23, .. }
        ));
        assert_eq!(
            parse_v5_err(0x30, &[0, 1, b'#', 0]),
            DecodeError::InvalidTopic {
                field: "topic name",
                error: TopicError::WildcardInName
            }
        );
        // Subscription identifier 5, "a" with QoS 2, no local, retain as
        // published, retain handling 2.
        let subscribe = Packet::Subscribe(Subscribe {
            packet_id: 1,
            filters: vec![(
                s("a"),
                SubscriptionOptions {
                    qos: QoS::ExactlyOnce,
                    no_local: true,
                    retain_as_published: true,
                    retain_handling: 2,
                },
            )],
            properties: props(Properties {
                subscription_identifiers: vec![5],
                ..Properties::default()
            }),
        });
        let bytes = [0x82, 9, 0, 1, 2, 0x0b, 5, 0, 1, b'a', 0x2e];
        assert_eq!(parse_v5(&bytes), Ok(Some(subscribe.clone())));
        assert_eq!(encode_as(&subscribe, V5).to_vec(), bytes);
        assert_eq!(
            parse_v5(&[0x90, 5, 0, 1, 0, 0x01, 0x87]),
            Ok(Some(Packet::Suback(Suback {
                packet_id: 1,
                codes: vec![ReasonCode::GRANTED_QOS_1, ReasonCode::NOT_AUTHORIZED],
                properties: None,
            })))
        );
        assert_eq!(
            parse_v5(&[0xb0, 5, 0, 1, 0, 0x00, 0x11]),
            Ok(Some(Packet::Unsuback(Unsuback {
                packet_id: 1,
                codes: vec![ReasonCode::SUCCESS, ReasonCode::NO_SUBSCRIPTION_EXISTED],
                properties: None,
            })))
        );
    }

    #[test]
    fn v5_property_rules() {
        // A topic alias (0x23) in CONNECT's properties.
        let connect = [&lp(b"MQTT")[..], &[5, 2, 0, 10, 3, 0x23, 0, 1], &lp(b"c")].concat();
        assert_eq!(
            parse_v5_err(0x10, &connect),
            DecodeError::PropertyNotAllowed {
                id: 0x23,
                packet: "CONNECT"
            }
        );
        // A session expiry (0x11) among the will properties.
        let will = [
            &lp(b"MQTT")[..],
            &[5, 6, 0, 10, 0],
            &lp(b"c"),
            &[5, 0x11, 0, 0, 0, 1],
            &lp(b"w"),
            &lp(b"m"),
        ]
        .concat();
        assert_eq!(
            parse_v5_err(0x10, &will),
            DecodeError::PropertyNotAllowed {
                id: 0x11,
                packet: "will properties"
            }
        );
        // A reason string in PUBLISH, a content type in PUBACK.
        assert!(matches!(
            parse_v5_err(0x30, &[0, 1, b't', 4, 0x1f, 0, 1, b'x']),
            DecodeError::PropertyNotAllowed { id: 0x1f, .. }
        ));
        assert!(matches!(
            parse_v5_err(0x40, &[0, 1, 0, 4, 0x03, 0, 1, b'x']),
            DecodeError::PropertyNotAllowed { id: 0x03, .. }
        ));
        // The message expiry twice.
        assert_eq!(
            parse_v5_err(0x30, &[0, 1, b't', 10, 2, 0, 0, 0, 1, 2, 0, 0, 0, 1]),
            DecodeError::DuplicateProperty {
                id: 2,
                packet: "PUBLISH"
            }
        );
        // Two subscription identifiers in SUBSCRIBE, or one of 0.
        assert_eq!(
            parse_v5_err(0x82, &[0, 1, 4, 0x0b, 1, 0x0b, 2, 0, 1, b'a', 0]),
            DecodeError::DuplicateProperty {
                id: 0x0b,
                packet: "SUBSCRIBE"
            }
        );
        assert!(matches!(
            parse_v5_err(0x82, &[0, 1, 2, 0x0b, 0, 0, 1, b'a', 0]),
            DecodeError::InvalidPropertyValue { id: 0x0b, .. }
        ));
        // Unknown identifiers, one byte or a longer variable byte integer.
        assert_eq!(
            parse_v5_err(0xe0, &[0x00, 2, 0x7f, 0]),
            DecodeError::UnknownProperty(0x7f)
        );
        assert_eq!(
            parse_v5_err(0xe0, &[0x00, 3, 0x80, 0x01, 0]),
            DecodeError::UnknownProperty(0x80)
        );
        assert_eq!(
            parse_v5_err(0x40, &[0, 1, 0x10, 2, 0x04, 0]),
            DecodeError::UnknownProperty(0x04)
        );
        // A property length beyond the packet.
        assert_eq!(
            parse_v5_err(0x90, &[0, 1, 9, 0x1f, 0, 1, b'x']),
            DecodeError::Truncated("properties")
        );
    }

    /// The reason code byte of a minimal MQTT 5 packet of each type that has
    /// one, with the codes the specification lists for it.
    fn reason_carriers() -> Vec<(&'static str, Vec<u8>, &'static [u8])> {
        vec![
            ("CONNACK", vec![0x20, 3, 0, 0xff, 0], reasons::CONNACK),
            ("PUBACK", vec![0x40, 3, 0, 1, 0xff], reasons::PUBACK),
            ("PUBREC", vec![0x50, 3, 0, 1, 0xff], reasons::PUBACK),
            ("PUBREL", vec![0x62, 3, 0, 1, 0xff], reasons::PUBREL),
            ("PUBCOMP", vec![0x70, 3, 0, 1, 0xff], reasons::PUBREL),
            ("SUBACK", vec![0x90, 4, 0, 1, 0, 0xff], reasons::SUBACK),
            ("UNSUBACK", vec![0xb0, 4, 0, 1, 0, 0xff], reasons::UNSUBACK),
            ("DISCONNECT", vec![0xe0, 1, 0xff], reasons::DISCONNECT),
            ("AUTH", vec![0xf0, 1, 0xff], reasons::AUTH),
        ]
    }

    #[test]
    fn v5_reason_codes_follow_the_specification() {
        // Every code of every packet type: accepted exactly when the
        // specification's table for the packet lists it.
        for (packet, mut bytes, valid) in reason_carriers() {
            let at = bytes.len() - if packet == "CONNACK" { 2 } else { 1 };
            for code in 0..=255u8 {
                bytes[at] = code;
                let result = parse_v5(&bytes);
                if valid.contains(&code) {
                    assert!(matches!(result, Ok(Some(_))), "{packet} {code:#04x}: {result:?}");
                } else {
                    assert_eq!(
                        result,
                        Err(DecodeError::InvalidReasonCode { packet, code }),
                        "{packet} {code:#04x}"
                    );
                }
            }
        }
    }

    #[test]
    fn v5_subscription_options_rules() {
        let subscribe = |options: u8| frame(0x82, &[0, 1, 0, 0, 1, b'a', options]);
        // [MQTT-3.8.3-5]: reserved bits 6 and 7; retain handling 3; QoS 3.
        for bad in [0x40u8, 0x80, 0xc0, 0x30, 0x03, 0x3f] {
            assert_eq!(
                parse_packet(&mut subscribe(bad), MAX, V5),
                Err(DecodeError::InvalidSubscriptionOptions(bad))
            );
        }
        for good in 0..=0x2fu8 {
            if good & 0b11 == 3 || (good >> 4) == 3 {
                continue;
            }
            let Some(Packet::Subscribe(sub)) = parse_packet(&mut subscribe(good), MAX, V5).unwrap() else {
                panic!("not a SUBSCRIBE");
            };
            assert_eq!(sub.filters[0].1.bits(), good);
        }
        // The same bits are a bad requested QoS in 3.1.1.
        assert_eq!(
            parse_err(0x82, &[0, 1, 0, 1, b'a', 0x04]),
            DecodeError::InvalidRequestedQos(0x04)
        );
        // SUBSCRIBE and UNSUBSCRIBE still need a filter.
        assert_eq!(parse_v5_err(0x82, &[0, 1, 0]), DecodeError::NoSubscribeFilters);
        assert_eq!(parse_v5_err(0xa2, &[0, 1, 0]), DecodeError::NoUnsubscribeFilters);
    }

    /// Decodes everything in `buf` as `version`, checking the buffer contract
    /// on the way: `None` consumes nothing, and whatever decodes re-encodes to
    /// an equal packet.
    fn decode_all(mut buf: BytesMut, version: ProtocolVersion) {
        loop {
            let before = buf.clone();
            match parse_packet(&mut buf, 4096, version) {
                Ok(Some(packet)) => {
                    // A CONNECT names its own revision; the rest follow the connection's.
                    let as_version = match &packet {
                        Packet::Connect(c) => c.protocol,
                        _ => version,
                    };
                    let mut again = encode_as(&packet, as_version);
                    assert_eq!(parse_packet(&mut again, MAX, version).unwrap().as_ref(), Some(&packet));
                }
                Ok(None) => {
                    assert_eq!(buf, before);
                    return;
                }
                Err(_) => return,
            }
        }
    }

    /// Random bytes, half the time behind a plausible first byte from `firsts`.
    fn random_bytes_never_panic_as(version: ProtocolVersion, firsts: &[u8], seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        for _ in 0..50_000 {
            let len = rng.random_range(0..48);
            let mut bytes = vec![0u8; len];
            rng.fill(&mut bytes[..]);
            // Half the time start with a plausible first byte, to get past the header.
            if len > 0 && rng.random_bool(0.5) {
                bytes[0] = firsts[rng.random_range(0..firsts.len())];
                if len > 1 {
                    bytes[1] = (len - 2) as u8;
                }
            }
            decode_all(BytesMut::from(&bytes[..]), version);
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        random_bytes_never_panic_as(V3, &[0x10, 0x20, 0x30, 0x32, 0x82, 0x90, 0xa2], 0x6d71_7474);
    }

    #[test]
    fn random_v5_bytes_never_panic() {
        let firsts = [
            0x10, 0x20, 0x30, 0x32, 0x40, 0x50, 0x62, 0x70, 0x82, 0x90, 0xa2, 0xb0, 0xe0, 0xf0,
        ];
        random_bytes_never_panic_as(V5, &firsts, 0x6d71_7435);
    }

    /// Flips, overwrites or cuts a few bytes of valid packets.
    fn mutated_packets_never_panic_as(
        version: ProtocolVersion,
        seed: u64,
        mut packet: impl FnMut(&mut StdRng) -> Packet,
    ) {
        let mut rng = StdRng::seed_from_u64(seed);
        for _ in 0..20_000 {
            let packet = packet(&mut rng);
            let mut bytes = encode_as(&packet, version).to_vec();
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..bytes.len());
                match rng.random_range(0..3) {
                    0 => bytes[i] ^= 1 << rng.random_range(0..8),
                    1 => bytes[i] = rng.random(),
                    _ => bytes.truncate(i.max(1)),
                }
            }
            decode_all(BytesMut::from(&bytes[..]), version);
        }
    }

    #[test]
    fn mutated_packets_never_panic() {
        mutated_packets_never_panic_as(V3, 42, |rng| random_packet(rng, false, false));
    }

    #[test]
    fn mutated_v5_packets_never_panic() {
        mutated_packets_never_panic_as(V5, 43, |rng| random_v5_packet(rng, false));
    }
}
