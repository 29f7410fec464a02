//! Encoding: writing MQTT packets straight into a send buffer.
//!
//! Every length is checked before the first byte is written, so a packet that
//! cannot be encoded leaves the buffer as it was.

use bytes::{BufMut, BytesMut};

use crate::mqtt::codec::error::EncodeError;
use crate::mqtt::codec::header::{PacketType, put_fixed_header};
use crate::mqtt::codec::packet::{Connack, Connect, Packet, Publish, QoS, Suback, Subscribe, Unsubscribe};

/// Appends `packet` to `out`.
///
/// Fails, writing nothing, if a string or binary field is longer than 65535
/// bytes, the packet longer than the protocol allows, or a QoS > 0 PUBLISH
/// has packet identifier 0. Other rules (topic wildcards, empty filter lists)
/// are not checked, so tests can build packets that break them.
pub fn write_packet(out: &mut BytesMut, packet: &Packet) -> Result<(), EncodeError> {
    match packet {
        Packet::Connect(connect) => write_connect(out, connect),
        Packet::Connack(connack) => {
            write_connack(out, connack);
            Ok(())
        }
        Packet::Publish(p) => write_publish(out, &p.topic, &p.payload, p.qos, p.packet_id, p.retain, p.dup),
        Packet::Puback { packet_id } => write_id_only(out, PacketType::Puback, *packet_id),
        Packet::Pubrec { packet_id } => write_id_only(out, PacketType::Pubrec, *packet_id),
        Packet::Pubrel { packet_id } => write_id_only(out, PacketType::Pubrel, *packet_id),
        Packet::Pubcomp { packet_id } => write_id_only(out, PacketType::Pubcomp, *packet_id),
        Packet::Subscribe(subscribe) => write_subscribe(out, subscribe),
        Packet::Suback(suback) => write_suback(out, suback),
        Packet::Unsubscribe(unsubscribe) => write_unsubscribe(out, unsubscribe),
        Packet::Unsuback { packet_id } => write_id_only(out, PacketType::Unsuback, *packet_id),
        Packet::Pingreq => write_empty(out, PacketType::Pingreq),
        Packet::Pingresp => write_empty(out, PacketType::Pingresp),
        Packet::Disconnect => write_empty(out, PacketType::Disconnect),
    }
}

/// Appends a PUBLISH built from its parts, for delivering a stored message
/// without first assembling a [`Publish`] (the topic usually comes from a
/// routing key, the payload from a queue segment).
///
/// `packet_id` is ignored for QoS 0 and must be non-zero otherwise.
pub fn write_publish(
    out: &mut BytesMut,
    topic: &str,
    payload: &[u8],
    qos: QoS,
    packet_id: u16,
    retain: bool,
    dup: bool,
) -> Result<(), EncodeError> {
    check_field("topic name", topic.len())?;
    let has_id = qos != QoS::AtMostOnce;
    if has_id && packet_id == 0 {
        return Err(EncodeError::MissingPacketId);
    }
    let len = 2 + topic.len() + if has_id { 2 } else { 0 } + payload.len();
    let first = ((PacketType::Publish as u8) << 4) | (u8::from(dup) << 3) | (qos.bits() << 1) | u8::from(retain);
    put_fixed_header(out, first, len)?;
    put_str(out, topic.as_bytes());
    if has_id {
        out.put_u16(packet_id);
    }
    out.put_slice(payload);
    Ok(())
}

/// Appends a [`Publish`] value; see [`write_publish`].
pub fn write_publish_packet(out: &mut BytesMut, p: &Publish) -> Result<(), EncodeError> {
    write_publish(out, &p.topic, &p.payload, p.qos, p.packet_id, p.retain, p.dup)
}

/// Appends a CONNACK (cannot fail: it is always four bytes).
pub fn write_connack(out: &mut BytesMut, connack: &Connack) {
    out.put_slice(&[
        PacketType::Connack.first_byte(),
        2,
        u8::from(connack.session_present),
        connack.return_code as u8,
    ]);
}

/// Fails if a length-prefixed field does not fit its u16 prefix.
fn check_field(field: &'static str, len: usize) -> Result<(), EncodeError> {
    if len > usize::from(u16::MAX) {
        return Err(EncodeError::FieldTooLong { field, len });
    }
    Ok(())
}

/// Writes a field already checked by [`check_field`].
fn put_str(out: &mut BytesMut, bytes: &[u8]) {
    // Truncation cannot happen: the caller checked the length.
    out.put_u16(bytes.len() as u16);
    out.put_slice(bytes);
}

fn write_id_only(out: &mut BytesMut, packet_type: PacketType, packet_id: u16) -> Result<(), EncodeError> {
    put_fixed_header(out, packet_type.first_byte(), 2)?;
    out.put_u16(packet_id);
    Ok(())
}

fn write_empty(out: &mut BytesMut, packet_type: PacketType) -> Result<(), EncodeError> {
    put_fixed_header(out, packet_type.first_byte(), 0)
}

fn write_connect(out: &mut BytesMut, c: &Connect) -> Result<(), EncodeError> {
    let name = c.protocol.name();
    let mut flags = 0u8;
    let mut len = 2 + name.len() + 1 + 1 + 2;
    check_field("client identifier", c.client_id.len())?;
    len += 2 + c.client_id.len();
    if c.clean_session {
        flags |= 0x02;
    }
    if let Some(will) = &c.will {
        check_field("will topic", will.topic.len())?;
        check_field("will message", will.payload.len())?;
        len += 2 + will.topic.len() + 2 + will.payload.len();
        flags |= 0x04 | (will.qos.bits() << 3) | (u8::from(will.retain) << 5);
    }
    if let Some(username) = &c.username {
        check_field("user name", username.len())?;
        len += 2 + username.len();
        flags |= 0x80;
    }
    if let Some(password) = &c.password {
        check_field("password", password.len())?;
        len += 2 + password.len();
        flags |= 0x40;
    }
    put_fixed_header(out, PacketType::Connect.first_byte(), len)?;
    put_str(out, name.as_bytes());
    out.put_u8(c.protocol.level());
    out.put_u8(flags);
    out.put_u16(c.keep_alive);
    put_str(out, c.client_id.as_bytes());
    if let Some(will) = &c.will {
        put_str(out, will.topic.as_bytes());
        put_str(out, &will.payload);
    }
    if let Some(username) = &c.username {
        put_str(out, username.as_bytes());
    }
    if let Some(password) = &c.password {
        put_str(out, password);
    }
    Ok(())
}

fn write_subscribe(out: &mut BytesMut, s: &Subscribe) -> Result<(), EncodeError> {
    let mut len = 2;
    for (filter, _) in &s.filters {
        check_field("topic filter", filter.len())?;
        len += 2 + filter.len() + 1;
    }
    put_fixed_header(out, PacketType::Subscribe.first_byte(), len)?;
    out.put_u16(s.packet_id);
    for (filter, qos) in &s.filters {
        put_str(out, filter.as_bytes());
        out.put_u8(qos.bits());
    }
    Ok(())
}

fn write_suback(out: &mut BytesMut, s: &Suback) -> Result<(), EncodeError> {
    put_fixed_header(out, PacketType::Suback.first_byte(), 2 + s.return_codes.len())?;
    out.put_u16(s.packet_id);
    for code in &s.return_codes {
        out.put_u8(code.to_u8());
    }
    Ok(())
}

fn write_unsubscribe(out: &mut BytesMut, u: &Unsubscribe) -> Result<(), EncodeError> {
    let mut len = 2;
    for filter in &u.filters {
        check_field("topic filter", filter.len())?;
        len += 2 + filter.len();
    }
    put_fixed_header(out, PacketType::Unsubscribe.first_byte(), len)?;
    out.put_u16(u.packet_id);
    for filter in &u.filters {
        put_str(out, filter.as_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::mqtt::codec::MAX_REMAINING_LENGTH;
    use crate::mqtt::codec::decode::parse_packet;
    use crate::mqtt::codec::packet::{ConnectReturnCode, ProtocolVersion, SubscribeReturnCode};
    use crate::mqtt::codec::samples::{all_packets, encode, random_packet, s};

    fn round_trip(packet: &Packet) {
        let mut buf = encode(packet);
        let decoded = parse_packet(&mut buf, MAX_REMAINING_LENGTH).unwrap();
        assert_eq!(decoded.as_ref(), Some(packet));
        assert!(buf.is_empty(), "{} left {} bytes", packet.name(), buf.len());
    }

    #[test]
    fn round_trip_every_packet_type() {
        let packets = all_packets();
        let mut names: Vec<&str> = packets.iter().map(Packet::name).collect();
        names.dedup();
        assert_eq!(names.len(), 14, "every packet type is sampled");
        for packet in &packets {
            round_trip(packet);
        }
    }

    #[test]
    fn round_trip_random_packets() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..5_000 {
            round_trip(&random_packet(&mut rng, false, false));
        }
    }

    #[test]
    fn connack_vectors() {
        let mut out = BytesMut::new();
        write_connack(
            &mut out,
            &Connack {
                session_present: false,
                return_code: ConnectReturnCode::Accepted,
            },
        );
        write_connack(
            &mut out,
            &Connack {
                session_present: true,
                return_code: ConnectReturnCode::BadUsernameOrPassword,
            },
        );
        write_connack(
            &mut out,
            &Connack {
                session_present: false,
                return_code: ConnectReturnCode::UnacceptableProtocolVersion,
            },
        );
        assert_eq!(&out[..], &[0x20, 2, 0, 0, 0x20, 2, 1, 4, 0x20, 2, 0, 1]);
    }

    #[test]
    fn publish_vectors() {
        let mut out = BytesMut::new();
        write_publish(&mut out, "a/b", b"hi", QoS::AtMostOnce, 0, false, false).unwrap();
        assert_eq!(&out[..], &[0x30, 7, 0, 3, b'a', b'/', b'b', b'h', b'i']);
        out.clear();
        write_publish(&mut out, "a/b", b"hi", QoS::ExactlyOnce, 0x0102, true, true).unwrap();
        assert_eq!(&out[..], &[0x3d, 9, 0, 3, b'a', b'/', b'b', 1, 2, b'h', b'i']);
        // A 200-byte payload needs a two-byte remaining length: 2 + 1 + 200 = 203.
        out.clear();
        write_publish(&mut out, "t", &[0; 200], QoS::AtMostOnce, 0, false, false).unwrap();
        assert_eq!(&out[..6], &[0x30, 0xcb, 0x01, 0, 1, b't']);
        assert_eq!(out.len(), 3 + 203);
    }

    #[test]
    fn acknowledgement_vectors() {
        let bytes = |p: Packet| encode(&p).to_vec();
        assert_eq!(bytes(Packet::Puback { packet_id: 0x1234 }), [0x40, 2, 0x12, 0x34]);
        assert_eq!(bytes(Packet::Pubrec { packet_id: 1 }), [0x50, 2, 0, 1]);
        assert_eq!(bytes(Packet::Pubrel { packet_id: 1 }), [0x62, 2, 0, 1]);
        assert_eq!(bytes(Packet::Pubcomp { packet_id: 1 }), [0x70, 2, 0, 1]);
        assert_eq!(bytes(Packet::Unsuback { packet_id: 9 }), [0xb0, 2, 0, 9]);
        assert_eq!(bytes(Packet::Pingreq), [0xc0, 0]);
        assert_eq!(bytes(Packet::Pingresp), [0xd0, 0]);
        assert_eq!(bytes(Packet::Disconnect), [0xe0, 0]);
        let suback = Packet::Suback(Suback {
            packet_id: 10,
            return_codes: vec![
                SubscribeReturnCode::Success(QoS::AtMostOnce),
                SubscribeReturnCode::Success(QoS::ExactlyOnce),
                SubscribeReturnCode::Failure,
            ],
        });
        assert_eq!(bytes(suback), [0x90, 5, 0, 10, 0, 2, 0x80]);
    }

    #[test]
    fn connect_vector() {
        let connect = Connect {
            protocol: ProtocolVersion::V3_1_1,
            clean_session: true,
            keep_alive: 10,
            client_id: s("c"),
            will: None,
            username: Some(s("u")),
            password: Some(Bytes::from_static(b"p")),
        };
        let bytes = encode(&Packet::Connect(Box::new(connect))).to_vec();
        let expected = [
            0x10, 19, 0, 4, b'M', b'Q', b'T', b'T', 4, 0xc2, 0, 10, 0, 1, b'c', 0, 1, b'u', 0, 1, b'p',
        ];
        assert_eq!(bytes, expected);
    }

    #[test]
    fn subscribe_and_unsubscribe_vectors() {
        let subscribe = Packet::Subscribe(Subscribe {
            packet_id: 10,
            filters: vec![(s("a/b"), QoS::AtLeastOnce), (s("c/d"), QoS::ExactlyOnce)],
        });
        let expected = [0x82, 14, 0, 10, 0, 3, b'a', b'/', b'b', 1, 0, 3, b'c', b'/', b'd', 2];
        assert_eq!(encode(&subscribe).to_vec(), expected);
        let unsubscribe = Packet::Unsubscribe(Unsubscribe {
            packet_id: 11,
            filters: vec![s("+")],
        });
        assert_eq!(encode(&unsubscribe).to_vec(), [0xa2, 5, 0, 11, 0, 1, b'+']);
    }

    #[test]
    fn refuses_what_cannot_be_encoded_and_writes_nothing() {
        let mut out = BytesMut::from(&b"keep"[..]);
        let long = "x".repeat(65_536);
        assert_eq!(
            write_publish(&mut out, &long, b"", QoS::AtMostOnce, 0, false, false),
            Err(EncodeError::FieldTooLong {
                field: "topic name",
                len: 65_536
            })
        );
        assert_eq!(
            write_publish(&mut out, "t", b"", QoS::AtLeastOnce, 0, false, false),
            Err(EncodeError::MissingPacketId)
        );
        let huge = vec![0u8; MAX_REMAINING_LENGTH];
        assert_eq!(
            write_publish(&mut out, "t", &huge, QoS::AtMostOnce, 0, false, false),
            Err(EncodeError::PacketTooLarge(MAX_REMAINING_LENGTH + 3))
        );
        let connect = Connect {
            protocol: ProtocolVersion::V3_1_1,
            clean_session: true,
            keep_alive: 0,
            client_id: s("c"),
            will: None,
            username: Some(s("u")),
            password: Some(Bytes::from(vec![0u8; 70_000])),
        };
        assert_eq!(
            write_packet(&mut out, &Packet::Connect(Box::new(connect))),
            Err(EncodeError::FieldTooLong {
                field: "password",
                len: 70_000
            })
        );
        assert_eq!(&out[..], b"keep");
    }
}
