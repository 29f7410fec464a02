//! Decoding: splitting whole MQTT packets off a receive buffer and checking
//! every rule of MQTT 3.1.1 that a receiver must enforce while parsing.
//!
//! Session-level rules (CONNECT as first packet, client identifier policy,
//! packet identifier bookkeeping) are not decoding and live with the session.

use bytes::{Buf, Bytes, BytesMut};

use crate::mqtt::codec::error::DecodeError;
use crate::mqtt::codec::header::{FixedHeader, PacketType, parse_fixed_header};
use crate::mqtt::codec::packet::{
    Connack, Connect, ConnectReturnCode, Packet, ProtocolVersion, Publish, QoS, Suback, Subscribe, SubscribeReturnCode,
    Unsubscribe, Will,
};
use crate::mqtt::codec::string::MqttStr;
use crate::mqtt::codec::topic::{validate_topic_filter, validate_topic_name};

/// Splits one complete packet off the front of `buf`.
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
pub fn parse_packet(buf: &mut BytesMut, max_packet_size: usize) -> Result<Option<Packet>, DecodeError> {
    let Some(header) = parse_fixed_header(buf)? else {
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
    let packet = match header.packet_type {
        PacketType::Connack => {
            let [flags, code] = two_bytes_at(buf, header.header_len);
            Packet::Connack(decode_connack(flags, code)?)
        }
        PacketType::Puback => Packet::Puback {
            packet_id: id_at(buf, header.header_len),
        },
        PacketType::Pubrec => Packet::Pubrec {
            packet_id: id_at(buf, header.header_len),
        },
        PacketType::Pubrel => Packet::Pubrel {
            packet_id: id_at(buf, header.header_len),
        },
        PacketType::Pubcomp => Packet::Pubcomp {
            packet_id: id_at(buf, header.header_len),
        },
        PacketType::Unsuback => Packet::Unsuback {
            packet_id: id_at(buf, header.header_len),
        },
        PacketType::Pingreq => Packet::Pingreq,
        PacketType::Pingresp => Packet::Pingresp,
        PacketType::Disconnect => Packet::Disconnect,
        PacketType::Connect
        | PacketType::Publish
        | PacketType::Subscribe
        | PacketType::Suback
        | PacketType::Unsubscribe => {
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

/// Decodes the packets whose size varies, from their body.
fn decode_body(header: FixedHeader, r: Reader) -> Result<Packet, DecodeError> {
    Ok(match header.packet_type {
        PacketType::Connect => Packet::Connect(Box::new(decode_connect(r)?)),
        PacketType::Publish => Packet::Publish(decode_publish(header.flags, r)?),
        PacketType::Subscribe => Packet::Subscribe(decode_subscribe(r)?),
        PacketType::Suback => Packet::Suback(decode_suback(r)?),
        _ => Packet::Unsubscribe(decode_unsubscribe(r)?),
    })
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
        let topic = self.string(field)?;
        validate_topic_name(&topic).map_err(|error| DecodeError::InvalidTopic { field, error })?;
        Ok(topic)
    }

    fn topic_filter(&mut self) -> Result<MqttStr, DecodeError> {
        const FIELD: &str = "topic filter";
        let filter = self.string(FIELD)?;
        validate_topic_filter(&filter).map_err(|error| DecodeError::InvalidTopic { field: FIELD, error })?;
        Ok(filter)
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
        (b"MQIsdp", 3) => ProtocolVersion::V3_1,
        // The rest of the packet may follow another layout (MQTT 5), so stop
        // here and let the broker answer CONNACK 1 [MQTT-3.1.2-2].
        (b"MQTT" | b"MQIsdp", level) => return Err(DecodeError::UnsupportedProtocolLevel(level)),
        _ => return Err(DecodeError::InvalidProtocolName),
    };
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
    if flags & FLAG_PASSWORD != 0 && flags & FLAG_USERNAME == 0 {
        return Err(DecodeError::PasswordWithoutUsername);
    }
    let keep_alive = r.u16("keep alive")?;
    let client_id = r.string("client identifier")?;
    let will = if has_will {
        Some(Will {
            topic: r.topic_name("will topic")?,
            payload: r.binary("will message")?,
            qos: will_qos,
            retain: flags & FLAG_WILL_RETAIN != 0,
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
    })
}

fn decode_connack(flags: u8, code: u8) -> Result<Connack, DecodeError> {
    if flags & !1 != 0 {
        return Err(DecodeError::InvalidConnackFlags(flags));
    }
    Ok(Connack {
        session_present: flags == 1,
        return_code: ConnectReturnCode::from_u8(code).ok_or(DecodeError::InvalidConnectReturnCode(code))?,
    })
}

fn decode_publish(flags: u8, mut r: Reader) -> Result<Publish, DecodeError> {
    // The fixed header check already refused QoS 3.
    let qos = QoS::from_bits((flags >> 1) & 0b11).ok_or(DecodeError::InvalidPublishQos)?;
    let topic = r.topic_name("topic name")?;
    let packet_id = if qos == QoS::AtMostOnce {
        0
    } else {
        r.packet_id("PUBLISH")?
    };
    Ok(Publish {
        dup: flags & 0b1000 != 0,
        qos,
        retain: flags & 1 != 0,
        topic,
        packet_id,
        payload: r.0,
    })
}

fn decode_subscribe(mut r: Reader) -> Result<Subscribe, DecodeError> {
    let packet_id = r.packet_id("SUBSCRIBE")?;
    let mut filters = Vec::with_capacity(1);
    while !r.is_empty() {
        let filter = r.topic_filter()?;
        let requested = r.u8("requested QoS")?;
        // Upper six bits reserved, and QoS 3 invalid [MQTT-3-8.3-4].
        let qos = QoS::from_bits(requested).ok_or(DecodeError::InvalidRequestedQos(requested))?;
        filters.push((filter, qos));
    }
    if filters.is_empty() {
        return Err(DecodeError::NoSubscribeFilters);
    }
    Ok(Subscribe { packet_id, filters })
}

fn decode_suback(mut r: Reader) -> Result<Suback, DecodeError> {
    let packet_id = r.u16("packet identifier")?;
    let return_codes =
        r.0.iter()
            .map(|&code| SubscribeReturnCode::from_u8(code).ok_or(DecodeError::InvalidSubackReturnCode(code)))
            .collect::<Result<_, _>>()?;
    Ok(Suback {
        packet_id,
        return_codes,
    })
}

fn decode_unsubscribe(mut r: Reader) -> Result<Unsubscribe, DecodeError> {
    let packet_id = r.packet_id("UNSUBSCRIBE")?;
    let mut filters = Vec::with_capacity(1);
    while !r.is_empty() {
        filters.push(r.topic_filter()?);
    }
    if filters.is_empty() {
        return Err(DecodeError::NoUnsubscribeFilters);
    }
    Ok(Unsubscribe { packet_id, filters })
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
    use crate::mqtt::codec::samples::{all_packets, encode, random_packet, s};

    const MAX: usize = MAX_REMAINING_LENGTH;

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
        parse_packet(&mut BytesMut::from(bytes), MAX)
    }

    fn parse_err(first: u8, body: &[u8]) -> DecodeError {
        parse_packet(&mut frame(first, body), MAX).unwrap_err()
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
        let Some(Packet::Publish(p)) = parse_packet(&mut buf, MAX).unwrap() else {
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
            filters: vec![(s("a/b"), QoS::AtLeastOnce), (s("c/d"), QoS::ExactlyOnce)],
        });
        assert_eq!(packet, expected);
    }

    #[test]
    fn small_packet_vectors() {
        assert_eq!(parse(&[0xc0, 0]).unwrap(), Some(Packet::Pingreq));
        assert_eq!(parse(&[0xd0, 0]).unwrap(), Some(Packet::Pingresp));
        assert_eq!(parse(&[0xe0, 0]).unwrap(), Some(Packet::Disconnect));
        assert_eq!(
            parse(&[0x40, 2, 0x12, 0x34]).unwrap(),
            Some(Packet::Puback { packet_id: 0x1234 })
        );
        assert_eq!(parse(&[0x50, 2, 0, 5]).unwrap(), Some(Packet::Pubrec { packet_id: 5 }));
        assert_eq!(parse(&[0x62, 2, 0, 5]).unwrap(), Some(Packet::Pubrel { packet_id: 5 }));
        assert_eq!(parse(&[0x70, 2, 0, 5]).unwrap(), Some(Packet::Pubcomp { packet_id: 5 }));
        assert_eq!(
            parse(&[0xb0, 2, 0, 7]).unwrap(),
            Some(Packet::Unsuback { packet_id: 7 })
        );
        assert_eq!(
            parse(&[0x20, 2, 1, 0]).unwrap(),
            Some(Packet::Connack(Connack {
                session_present: true,
                return_code: ConnectReturnCode::Accepted
            }))
        );
        assert_eq!(
            parse(&[0xa2, 7, 0, 3, 0, 3, b'a', b'/', b'#']).unwrap(),
            Some(Packet::Unsubscribe(Unsubscribe {
                packet_id: 3,
                filters: vec![s("a/#")]
            }))
        );
    }

    #[test]
    fn every_prefix_waits_and_consumes_nothing() {
        for packet in all_packets() {
            let bytes = encode(&packet);
            for len in 0..bytes.len() {
                let mut buf = BytesMut::from(&bytes[..len]);
                assert_eq!(parse_packet(&mut buf, MAX), Ok(None), "{} prefix {len}", packet.name());
                assert_eq!(&buf[..], &bytes[..len], "{} prefix {len} consumed", packet.name());
            }
        }
    }

    #[test]
    fn consumes_exactly_one_packet_at_a_time() {
        let packets = all_packets();
        let mut buf = BytesMut::new();
        for packet in &packets {
            buf.extend_from_slice(&encode(packet));
        }
        buf.extend_from_slice(&[0x30]); // the start of another packet
        for packet in &packets {
            assert_eq!(parse_packet(&mut buf, MAX).unwrap().as_ref(), Some(packet));
        }
        assert_eq!(parse_packet(&mut buf, MAX), Ok(None));
        assert_eq!(&buf[..], &[0x30]);
    }

    #[test]
    fn oversized_packet_fails_from_the_header() {
        // Only the fixed header is buffered: the size is refused before the body.
        let mut buf = BytesMut::from(&[0x30, 0x80, 0x08][..]); // remaining length 1024
        assert_eq!(
            parse_packet(&mut buf, 1023),
            Err(DecodeError::PacketTooLarge { size: 1024, max: 1023 })
        );
        let mut ok = frame(0x30, &[&lp(b"t")[..], &[0u8; 10][..]].concat());
        assert!(parse_packet(&mut ok, 13).unwrap().is_some());
        let mut too_big = frame(0x30, &[&lp(b"t")[..], &[0u8; 11][..]].concat());
        assert_eq!(
            parse_packet(&mut too_big, 13),
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
        for (name, level) in [(&b"MQTT"[..], 5), (b"MQTT", 3), (b"MQIsdp", 4), (b"MQTT", 0)] {
            let err = parse_err(0x10, &connect_body(name, level, 2, &[b"c"]));
            assert_eq!(err, DecodeError::UnsupportedProtocolLevel(level));
        }
        // An MQTT 5 CONNECT is refused by level even though its body differs.
        let v5 = [&lp(b"MQTT")[..], &[5, 2, 0, 10, 0, 0, 1, b'c']].concat();
        assert_eq!(parse_err(0x10, &v5), DecodeError::UnsupportedProtocolLevel(5));
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
            DecodeError::Truncated("requested QoS")
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

    /// Decodes everything in `buf`, checking the buffer contract on the way:
    /// `None` consumes nothing, and whatever decodes re-encodes to an equal packet.
    fn decode_all(mut buf: BytesMut) {
        loop {
            let before = buf.clone();
            match parse_packet(&mut buf, 4096) {
                Ok(Some(packet)) => {
                    let mut again = encode(&packet);
                    assert_eq!(parse_packet(&mut again, MAX).unwrap().as_ref(), Some(&packet));
                }
                Ok(None) => {
                    assert_eq!(buf, before);
                    return;
                }
                Err(_) => return,
            }
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = StdRng::seed_from_u64(0x6d71_7474);
        for _ in 0..50_000 {
            let len = rng.random_range(0..48);
            let mut bytes = vec![0u8; len];
            rng.fill(&mut bytes[..]);
            // Half the time start with a plausible first byte, to get past the header.
            if len > 0 && rng.random_bool(0.5) {
                bytes[0] = [0x10, 0x20, 0x30, 0x32, 0x82, 0x90, 0xa2][rng.random_range(0..7)];
                if len > 1 {
                    bytes[1] = (len - 2) as u8;
                }
            }
            decode_all(BytesMut::from(&bytes[..]));
        }
    }

    #[test]
    fn mutated_packets_never_panic() {
        let mut rng = StdRng::seed_from_u64(42);
        for _ in 0..20_000 {
            let packet = random_packet(&mut rng, false, false);
            let mut bytes = encode(&packet).to_vec();
            for _ in 0..rng.random_range(1..4) {
                let i = rng.random_range(0..bytes.len());
                match rng.random_range(0..3) {
                    0 => bytes[i] ^= 1 << rng.random_range(0..8),
                    1 => bytes[i] = rng.random(),
                    _ => bytes.truncate(i.max(1)),
                }
            }
            decode_all(BytesMut::from(&bytes[..]));
        }
    }
}
