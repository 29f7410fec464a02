//! Encoding: writing MQTT packets straight into a send buffer, laid out for
//! the revision the peer speaks.
//!
//! Every length is checked before the first byte is written, so a packet that
//! cannot be encoded leaves the buffer as it was.

use bytes::{BufMut, BytesMut};

use crate::mqtt::codec::error::EncodeError;
use crate::mqtt::codec::header::{PacketType, put_fixed_header};
use crate::mqtt::codec::packet::{
    Ack, Connack, Connect, Disconnect, Packet, ProtocolVersion, Publish, QoS, Suback, Subscribe, Unsuback, Unsubscribe,
};
use crate::mqtt::codec::properties::{Properties, encoded_len, put_properties};
use crate::mqtt::codec::reason::ReasonCode;

/// Appends `packet` to `out`, laid out as `version` defines it (properties
/// and reason codes are left out before MQTT 5, and outcomes written as the
/// older return codes).
///
/// Fails, writing nothing, if a string or binary field is longer than 65535
/// bytes, the packet longer than the protocol allows, or a QoS > 0 PUBLISH
/// has packet identifier 0. Other rules (topic wildcards, empty filter lists)
/// are not checked, so tests can build packets that break them.
pub fn write_packet(out: &mut BytesMut, packet: &Packet, version: ProtocolVersion) -> Result<(), EncodeError> {
    let v5 = version.is_v5();
    match packet {
        Packet::Connect(connect) => write_connect(out, connect),
        Packet::Connack(connack) => write_connack(out, connack, version),
        Packet::Publish(p) => write_publish_packet(out, p, version),
        Packet::Puback(a) => write_ack(out, PacketType::Puback, a, v5),
        Packet::Pubrec(a) => write_ack(out, PacketType::Pubrec, a, v5),
        Packet::Pubrel(a) => write_ack(out, PacketType::Pubrel, a, v5),
        Packet::Pubcomp(a) => write_ack(out, PacketType::Pubcomp, a, v5),
        Packet::Subscribe(subscribe) => write_subscribe(out, subscribe, v5),
        Packet::Suback(suback) => write_suback(out, suback, v5),
        Packet::Unsubscribe(unsubscribe) => write_unsubscribe(out, unsubscribe, v5),
        Packet::Unsuback(u) => write_unsuback(out, u, v5),
        Packet::Pingreq => write_empty(out, PacketType::Pingreq),
        Packet::Pingresp => write_empty(out, PacketType::Pingresp),
        Packet::Disconnect(d) => write_reasoned(out, PacketType::Disconnect, d, v5),
        Packet::Auth(a) => write_reasoned(out, PacketType::Auth, a, v5),
    }
}

/// The fixed part of a PUBLISH being written from its parts.
#[derive(Debug, Clone, Copy)]
pub struct PublishHead<'a> {
    /// Topic name (empty when an MQTT 5 topic alias stands for it).
    pub topic: &'a str,
    /// QoS of this transfer.
    pub qos: QoS,
    /// Packet identifier; ignored for QoS 0, non-zero otherwise.
    pub packet_id: u16,
    /// The RETAIN flag.
    pub retain: bool,
    /// The DUP flag.
    pub dup: bool,
    /// MQTT 5: the encoded properties, without their length (empty for
    /// none); `None` for older revisions, which have no property length.
    pub properties: Option<&'a [u8]>,
}

/// Appends a PUBLISH built from its parts, for delivering a stored message
/// without first assembling a [`Publish`] (the topic usually comes from a
/// routing key, the payload from a queue segment, the properties from a
/// scratch buffer).
pub fn write_publish_head(out: &mut BytesMut, head: &PublishHead<'_>, payload: &[u8]) -> Result<(), EncodeError> {
    check_field("topic name", head.topic.len())?;
    let has_id = head.qos != QoS::AtMostOnce;
    if has_id && head.packet_id == 0 {
        return Err(EncodeError::MissingPacketId);
    }
    let props_len = head
        .properties
        .map_or(0, |p| crate::mqtt::codec::properties::varint_len(p.len()) + p.len());
    let len = 2 + head.topic.len() + if has_id { 2 } else { 0 } + props_len + payload.len();
    let first =
        ((PacketType::Publish as u8) << 4) | (u8::from(head.dup) << 3) | (head.qos.bits() << 1) | u8::from(head.retain);
    put_fixed_header(out, first, len)?;
    put_str(out, head.topic.as_bytes());
    if has_id {
        out.put_u16(head.packet_id);
    }
    if let Some(p) = head.properties {
        crate::mqtt::codec::properties::put_varint(out, p.len());
        out.put_slice(p);
    }
    out.put_slice(payload);
    Ok(())
}

/// Appends an MQTT 3.1.1 PUBLISH built from its parts; see
/// [`write_publish_head`].
pub fn write_publish(
    out: &mut BytesMut,
    topic: &str,
    payload: &[u8],
    qos: QoS,
    packet_id: u16,
    retain: bool,
    dup: bool,
) -> Result<(), EncodeError> {
    let head = PublishHead {
        topic,
        qos,
        packet_id,
        retain,
        dup,
        properties: None,
    };
    write_publish_head(out, &head, payload)
}

/// Appends a [`Publish`] value; see [`write_publish_head`].
pub fn write_publish_packet(out: &mut BytesMut, p: &Publish, version: ProtocolVersion) -> Result<(), EncodeError> {
    let mut props = BytesMut::new();
    if version.is_v5()
        && let Some(properties) = &p.properties
    {
        properties.check()?;
        properties.put_body(&mut props);
    }
    let head = PublishHead {
        topic: &p.topic,
        qos: p.qos,
        packet_id: p.packet_id,
        retain: p.retain,
        dup: p.dup,
        properties: version.is_v5().then_some(&props[..]),
    };
    write_publish_head(out, &head, &p.payload)
}

/// Appends a CONNACK.
pub fn write_connack(out: &mut BytesMut, connack: &Connack, version: ProtocolVersion) -> Result<(), EncodeError> {
    if !version.is_v5() {
        out.put_slice(&[
            PacketType::Connack.first_byte(),
            2,
            u8::from(connack.session_present),
            connack.code.to_v3_connack(),
        ]);
        return Ok(());
    }
    let props = checked(connack.properties.as_deref())?;
    put_fixed_header(out, PacketType::Connack.first_byte(), 2 + encoded_len(props))?;
    out.put_u8(u8::from(connack.session_present));
    out.put_u8(connack.code.0);
    put_properties(out, props);
    Ok(())
}

/// The properties, once their fields are known to fit.
fn checked(props: Option<&Properties>) -> Result<Option<&Properties>, EncodeError> {
    if let Some(p) = props {
        p.check()?;
    }
    Ok(props)
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

/// PUBACK, PUBREC, PUBREL or PUBCOMP. MQTT 5 leaves out a success code
/// without properties, as the specification allows, so the common case stays
/// four bytes.
fn write_ack(out: &mut BytesMut, packet_type: PacketType, ack: &Ack, v5: bool) -> Result<(), EncodeError> {
    let props = checked(ack.properties.as_deref())?;
    if !v5 || (ack.reason == ReasonCode::SUCCESS && props.is_none()) {
        put_fixed_header(out, packet_type.first_byte(), 2)?;
        out.put_u16(ack.packet_id);
        return Ok(());
    }
    let len = 3 + if props.is_some() { encoded_len(props) } else { 0 };
    put_fixed_header(out, packet_type.first_byte(), len)?;
    out.put_u16(ack.packet_id);
    out.put_u8(ack.reason.0);
    if props.is_some() {
        put_properties(out, props);
    }
    Ok(())
}

/// DISCONNECT or AUTH: nothing before MQTT 5; then a reason code and
/// properties, both left out for a plain success.
fn write_reasoned(out: &mut BytesMut, packet_type: PacketType, d: &Disconnect, v5: bool) -> Result<(), EncodeError> {
    let props = checked(d.properties.as_deref())?;
    if !v5 || (d.reason == ReasonCode::SUCCESS && props.is_none()) {
        return write_empty(out, packet_type);
    }
    let len = 1 + if props.is_some() { encoded_len(props) } else { 0 };
    put_fixed_header(out, packet_type.first_byte(), len)?;
    out.put_u8(d.reason.0);
    if props.is_some() {
        put_properties(out, props);
    }
    Ok(())
}

fn write_empty(out: &mut BytesMut, packet_type: PacketType) -> Result<(), EncodeError> {
    put_fixed_header(out, packet_type.first_byte(), 0)
}

fn write_connect(out: &mut BytesMut, c: &Connect) -> Result<(), EncodeError> {
    let v5 = c.protocol.is_v5();
    let name = c.protocol.name();
    let mut flags = 0u8;
    let mut len = 2 + name.len() + 1 + 1 + 2;
    let props = checked(c.properties.as_deref())?;
    if v5 {
        len += encoded_len(props);
    }
    check_field("client identifier", c.client_id.len())?;
    len += 2 + c.client_id.len();
    if c.clean_session {
        flags |= 0x02;
    }
    if let Some(will) = &c.will {
        check_field("will topic", will.topic.len())?;
        check_field("will message", will.payload.len())?;
        len += 2 + will.topic.len() + 2 + will.payload.len();
        if v5 {
            len += encoded_len(checked(will.properties.as_deref())?);
        }
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
    if v5 {
        put_properties(out, props);
    }
    put_str(out, c.client_id.as_bytes());
    if let Some(will) = &c.will {
        if v5 {
            put_properties(out, will.properties.as_deref());
        }
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

/// The property length and properties of an MQTT 5 packet, or nothing.
fn props_len(props: Option<&Properties>, v5: bool) -> usize {
    if v5 { encoded_len(props) } else { 0 }
}

fn write_subscribe(out: &mut BytesMut, s: &Subscribe, v5: bool) -> Result<(), EncodeError> {
    let props = checked(s.properties.as_deref())?;
    let mut len = 2 + props_len(props, v5);
    for (filter, _) in &s.filters {
        check_field("topic filter", filter.len())?;
        len += 2 + filter.len() + 1;
    }
    put_fixed_header(out, PacketType::Subscribe.first_byte(), len)?;
    out.put_u16(s.packet_id);
    if v5 {
        put_properties(out, props);
    }
    for (filter, options) in &s.filters {
        put_str(out, filter.as_bytes());
        out.put_u8(if v5 { options.bits() } else { options.qos.bits() });
    }
    Ok(())
}

fn write_suback(out: &mut BytesMut, s: &Suback, v5: bool) -> Result<(), EncodeError> {
    let props = checked(s.properties.as_deref())?;
    put_fixed_header(
        out,
        PacketType::Suback.first_byte(),
        2 + props_len(props, v5) + s.codes.len(),
    )?;
    out.put_u16(s.packet_id);
    if v5 {
        put_properties(out, props);
    }
    for code in &s.codes {
        out.put_u8(if v5 { code.0 } else { code.to_v3_suback() });
    }
    Ok(())
}

fn write_unsubscribe(out: &mut BytesMut, u: &Unsubscribe, v5: bool) -> Result<(), EncodeError> {
    let props = checked(u.properties.as_deref())?;
    let mut len = 2 + props_len(props, v5);
    for filter in &u.filters {
        check_field("topic filter", filter.len())?;
        len += 2 + filter.len();
    }
    put_fixed_header(out, PacketType::Unsubscribe.first_byte(), len)?;
    out.put_u16(u.packet_id);
    if v5 {
        put_properties(out, props);
    }
    for filter in &u.filters {
        put_str(out, filter.as_bytes());
    }
    Ok(())
}

fn write_unsuback(out: &mut BytesMut, u: &Unsuback, v5: bool) -> Result<(), EncodeError> {
    if !v5 {
        put_fixed_header(out, PacketType::Unsuback.first_byte(), 2)?;
        out.put_u16(u.packet_id);
        return Ok(());
    }
    let props = checked(u.properties.as_deref())?;
    put_fixed_header(
        out,
        PacketType::Unsuback.first_byte(),
        2 + encoded_len(props) + u.codes.len(),
    )?;
    out.put_u16(u.packet_id);
    put_properties(out, props);
    for code in &u.codes {
        out.put_u8(code.0);
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
    use crate::mqtt::codec::packet::{SubscriptionOptions, Will};
    use crate::mqtt::codec::samples::{
        all_packets, all_v5_packets, encode, encode_as, random_packet, random_v5_packet, s,
    };

    const V3: ProtocolVersion = ProtocolVersion::V3_1_1;
    const V5: ProtocolVersion = ProtocolVersion::V5;

    fn round_trip(packet: &Packet) {
        round_trip_as(packet, V3);
    }

    fn round_trip_as(packet: &Packet, version: ProtocolVersion) {
        let mut buf = encode_as(packet, version);
        let decoded = parse_packet(&mut buf, MAX_REMAINING_LENGTH, version).unwrap();
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
    fn round_trip_every_v5_packet_type() {
        let packets = all_v5_packets();
        let mut names: Vec<&str> = packets.iter().map(Packet::name).collect();
        names.dedup();
        assert_eq!(names.len(), 15, "every packet type is sampled");
        for packet in &packets {
            round_trip_as(packet, V5);
        }
    }

    #[test]
    fn round_trip_random_v5_packets() {
        let mut rng = StdRng::seed_from_u64(8);
        for _ in 0..5_000 {
            round_trip_as(&random_v5_packet(&mut rng, false), V5);
        }
    }

    fn connack(session_present: bool, code: ReasonCode) -> Connack {
        Connack {
            session_present,
            code,
            properties: None,
        }
    }

    #[test]
    fn connack_vectors() {
        let mut out = BytesMut::new();
        for c in [
            connack(false, ReasonCode::SUCCESS),
            connack(true, ReasonCode::BAD_USER_NAME_OR_PASSWORD),
            connack(false, ReasonCode::UNSUPPORTED_PROTOCOL_VERSION),
            // MQTT 5 outcomes without a 3.1.1 code become "server unavailable".
            connack(false, ReasonCode::QUOTA_EXCEEDED),
        ] {
            write_connack(&mut out, &c, V3).unwrap();
        }
        assert_eq!(&out[..], &[0x20, 2, 0, 0, 0x20, 2, 1, 4, 0x20, 2, 0, 1, 0x20, 2, 0, 3]);
        out.clear();
        let with_properties = Connack {
            properties: Some(Box::new(Properties {
                receive_maximum: Some(10),
                ..Properties::default()
            })),
            ..connack(true, ReasonCode::SUCCESS)
        };
        write_connack(&mut out, &with_properties, V5).unwrap();
        write_connack(&mut out, &connack(false, ReasonCode::BAD_USER_NAME_OR_PASSWORD), V5).unwrap();
        assert_eq!(&out[..], &[0x20, 6, 1, 0, 3, 0x21, 0, 10, 0x20, 3, 0, 0x86, 0]);
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
        assert_eq!(bytes(Packet::Puback(Ack::ok(0x1234))), [0x40, 2, 0x12, 0x34]);
        assert_eq!(bytes(Packet::Pubrec(Ack::ok(1))), [0x50, 2, 0, 1]);
        assert_eq!(bytes(Packet::Pubrel(Ack::ok(1))), [0x62, 2, 0, 1]);
        assert_eq!(bytes(Packet::Pubcomp(Ack::ok(1))), [0x70, 2, 0, 1]);
        let unsuback = Unsuback {
            packet_id: 9,
            codes: Vec::new(),
            properties: None,
        };
        assert_eq!(bytes(Packet::Unsuback(unsuback)), [0xb0, 2, 0, 9]);
        assert_eq!(bytes(Packet::Pingreq), [0xc0, 0]);
        assert_eq!(bytes(Packet::Pingresp), [0xd0, 0]);
        assert_eq!(bytes(Packet::Disconnect(Disconnect::normal())), [0xe0, 0]);
        let suback = Packet::Suback(Suback {
            packet_id: 10,
            codes: vec![
                ReasonCode::SUCCESS,
                ReasonCode::GRANTED_QOS_2,
                ReasonCode::UNSPECIFIED_ERROR,
                // MQTT 5 failures are 0x80 in 3.1.1.
                ReasonCode::NOT_AUTHORIZED,
            ],
            properties: None,
        });
        assert_eq!(bytes(suback), [0x90, 6, 0, 10, 0, 2, 0x80, 0x80]);
    }

    #[test]
    fn v5_acknowledgement_vectors() {
        let bytes = |p: Packet| encode_as(&p, V5).to_vec();
        let ack = |reason: ReasonCode, properties: Option<Box<Properties>>| Ack {
            packet_id: 0x0102,
            reason,
            properties,
        };
        let reason_string = || {
            Some(Box::new(Properties {
                reason_string: Some(s("x")),
                ..Properties::default()
            }))
        };
        // Success without properties stays the short 3.1.1 form.
        assert_eq!(bytes(Packet::Puback(Ack::ok(0x0102))), [0x40, 2, 1, 2]);
        assert_eq!(
            bytes(Packet::Puback(ack(ReasonCode::NO_MATCHING_SUBSCRIBERS, None))),
            [0x40, 3, 1, 2, 0x10]
        );
        assert_eq!(
            bytes(Packet::Pubrel(ack(ReasonCode::SUCCESS, reason_string()))),
            [0x62, 8, 1, 2, 0, 4, 0x1f, 0, 1, b'x']
        );
        // The 3.1.1 layout drops reason and properties.
        assert_eq!(
            encode(&Packet::Pubcomp(ack(ReasonCode(0x92), reason_string()))).to_vec(),
            [0x70, 2, 1, 2]
        );
        let unsuback = Unsuback {
            packet_id: 9,
            codes: vec![ReasonCode::SUCCESS, ReasonCode::NO_SUBSCRIPTION_EXISTED],
            properties: None,
        };
        assert_eq!(bytes(Packet::Unsuback(unsuback.clone())), [0xb0, 5, 0, 9, 0, 0, 0x11]);
        assert_eq!(encode(&Packet::Unsuback(unsuback)).to_vec(), [0xb0, 2, 0, 9]);
        assert_eq!(bytes(Packet::Disconnect(Disconnect::normal())), [0xe0, 0]);
        assert_eq!(
            bytes(Packet::Disconnect(Disconnect::with(ReasonCode::SERVER_SHUTTING_DOWN))),
            [0xe0, 1, 0x8b]
        );
        assert_eq!(
            bytes(Packet::Disconnect(Disconnect {
                reason: ReasonCode::SUCCESS,
                properties: Some(Box::new(Properties {
                    session_expiry_interval: Some(1),
                    ..Properties::default()
                })),
            })),
            [0xe0, 7, 0, 5, 0x11, 0, 0, 0, 1]
        );
        assert_eq!(bytes(Packet::Auth(Disconnect::normal())), [0xf0, 0]);
        assert_eq!(
            bytes(Packet::Auth(Disconnect::with(ReasonCode::REAUTHENTICATE))),
            [0xf0, 1, 0x19]
        );
        let suback = Suback {
            packet_id: 10,
            codes: vec![ReasonCode::GRANTED_QOS_1, ReasonCode::NOT_AUTHORIZED],
            properties: reason_string(),
        };
        assert_eq!(
            bytes(Packet::Suback(suback)),
            [0x90, 9, 0, 10, 4, 0x1f, 0, 1, b'x', 1, 0x87]
        );
    }

    #[test]
    fn v5_publish_head_vectors() {
        // MQTT 5 PUBLISH from its parts: an empty property block, then a
        // message expiry of 10 seconds.
        let mut out = BytesMut::new();
        let head = PublishHead {
            topic: "a",
            qos: QoS::AtLeastOnce,
            packet_id: 5,
            retain: false,
            dup: false,
            properties: Some(&[]),
        };
        write_publish_head(&mut out, &head, b"hi").unwrap();
        assert_eq!(&out[..], &[0x32, 8, 0, 1, b'a', 0, 5, 0, b'h', b'i']);
        out.clear();
        let expiry = [0x02, 0, 0, 0, 10];
        let head = PublishHead {
            properties: Some(&expiry),
            ..head
        };
        write_publish_head(&mut out, &head, b"hi").unwrap();
        assert_eq!(
            &out[..],
            &[0x32, 13, 0, 1, b'a', 0, 5, 5, 0x02, 0, 0, 0, 10, b'h', b'i']
        );
        let decoded = parse_packet(&mut out, MAX_REMAINING_LENGTH, V5).unwrap();
        let Some(Packet::Publish(p)) = decoded else {
            panic!("not a PUBLISH");
        };
        assert_eq!(p.properties.unwrap().message_expiry_interval, Some(10));
        // The same head without properties is the 3.1.1 layout.
        out.clear();
        write_publish_head(
            &mut out,
            &PublishHead {
                properties: None,
                ..head
            },
            b"hi",
        )
        .unwrap();
        assert_eq!(&out[..], &[0x32, 7, 0, 1, b'a', 0, 5, b'h', b'i']);
    }

    #[test]
    fn v5_connect_vector() {
        // Password without user name, will with a delay, session expiry.
        let connect = Connect {
            protocol: ProtocolVersion::V5,
            clean_session: true,
            keep_alive: 10,
            client_id: s("c"),
            will: Some(Will {
                topic: s("w"),
                payload: Bytes::from_static(b"m"),
                qos: QoS::AtLeastOnce,
                retain: true,
                properties: Some(Box::new(Properties {
                    will_delay_interval: Some(2),
                    ..Properties::default()
                })),
            }),
            username: None,
            password: Some(Bytes::from_static(b"p")),
            properties: Some(Box::new(Properties {
                session_expiry_interval: Some(1),
                ..Properties::default()
            })),
        };
        let bytes = encode_as(&Packet::Connect(Box::new(connect)), V5).to_vec();
        let expected = [
            0x10, 34, 0, 4, b'M', b'Q', b'T', b'T', 5, 0x6e, 0, 10, 5, 0x11, 0, 0, 0, 1, 0, 1, b'c', 5, 0x18, 0, 0, 0,
            2, 0, 1, b'w', 0, 1, b'm', 0, 1, b'p',
        ];
        assert_eq!(bytes, expected);
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
            properties: None,
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
            filters: vec![
                (s("a/b"), SubscriptionOptions::qos(QoS::AtLeastOnce)),
                (s("c/d"), SubscriptionOptions::qos(QoS::ExactlyOnce)),
            ],
            properties: None,
        });
        let expected = [0x82, 14, 0, 10, 0, 3, b'a', b'/', b'b', 1, 0, 3, b'c', b'/', b'd', 2];
        assert_eq!(encode(&subscribe).to_vec(), expected);
        let unsubscribe = Packet::Unsubscribe(Unsubscribe {
            packet_id: 11,
            filters: vec![s("+")],
            properties: None,
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
            properties: None,
        };
        assert_eq!(
            write_packet(&mut out, &Packet::Connect(Box::new(connect)), V3),
            Err(EncodeError::FieldTooLong {
                field: "password",
                len: 70_000
            })
        );
        assert_eq!(&out[..], b"keep");
    }
}
