//! Checks the codec against an independent implementation (rumqttc's MQTT
//! 3.1.1 packets): what one encodes, the other must decode to the same packet.

use bytes::{Bytes, BytesMut};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rumqttc::mqttbytes::v4 as oracle;
use rumqttc::mqttbytes::{Protocol as OracleProtocol, QoS as OracleQoS};

use crate::mqtt::codec::MAX_REMAINING_LENGTH;
use crate::mqtt::codec::decode::parse_packet;
use crate::mqtt::codec::packet::{
    Ack, Connack, Connect, Disconnect, Packet, ProtocolVersion, Publish, QoS, Suback, Subscribe, SubscriptionOptions,
    Unsuback, Unsubscribe, Will,
};
use crate::mqtt::codec::reason::ReasonCode;
use crate::mqtt::codec::samples::{encode, random_packet, s};
use crate::mqtt::codec::string::MqttStr;

fn to_oracle_qos(qos: QoS) -> OracleQoS {
    match qos {
        QoS::AtMostOnce => OracleQoS::AtMostOnce,
        QoS::AtLeastOnce => OracleQoS::AtLeastOnce,
        QoS::ExactlyOnce => OracleQoS::ExactlyOnce,
    }
}

fn from_oracle_qos(qos: OracleQoS) -> QoS {
    match qos {
        OracleQoS::AtMostOnce => QoS::AtMostOnce,
        OracleQoS::AtLeastOnce => QoS::AtLeastOnce,
        OracleQoS::ExactlyOnce => QoS::ExactlyOnce,
    }
}

/// The oracle's CONNACK code for what we write in 3.1.1.
fn to_oracle_code(code: ReasonCode) -> oracle::ConnectReturnCode {
    match code.to_v3_connack() {
        0 => oracle::ConnectReturnCode::Success,
        1 => oracle::ConnectReturnCode::RefusedProtocolVersion,
        2 => oracle::ConnectReturnCode::BadClientId,
        3 => oracle::ConnectReturnCode::ServiceUnavailable,
        4 => oracle::ConnectReturnCode::BadUserNamePassword,
        _ => oracle::ConnectReturnCode::NotAuthorized,
    }
}

fn text(bytes: &Bytes) -> String {
    String::from_utf8(bytes.to_vec()).expect("oracle passwords are text")
}

/// The same packet as the oracle's type. Passwords must be UTF-8: the oracle
/// only has string passwords.
fn to_oracle(packet: &Packet) -> oracle::Packet {
    match packet {
        Packet::Connect(c) => oracle::Packet::Connect(oracle::Connect {
            protocol: OracleProtocol::V4,
            keep_alive: c.keep_alive,
            client_id: c.client_id.to_string(),
            clean_session: c.clean_session,
            last_will: c.will.as_ref().map(|w| oracle::LastWill {
                topic: w.topic.to_string(),
                message: w.payload.clone(),
                qos: to_oracle_qos(w.qos),
                retain: w.retain,
            }),
            login: c.username.as_ref().map(|u| oracle::Login {
                username: u.to_string(),
                password: c.password.as_ref().map(text).unwrap_or_default(),
            }),
        }),
        Packet::Connack(c) => oracle::Packet::ConnAck(oracle::ConnAck {
            session_present: c.session_present,
            code: to_oracle_code(c.code),
        }),
        Packet::Publish(p) => oracle::Packet::Publish(oracle::Publish {
            dup: p.dup,
            qos: to_oracle_qos(p.qos),
            retain: p.retain,
            topic: p.topic.to_string(),
            pkid: p.packet_id,
            payload: p.payload.clone(),
        }),
        Packet::Puback(a) => oracle::Packet::PubAck(oracle::PubAck { pkid: a.packet_id }),
        Packet::Pubrec(a) => oracle::Packet::PubRec(oracle::PubRec { pkid: a.packet_id }),
        Packet::Pubrel(a) => oracle::Packet::PubRel(oracle::PubRel { pkid: a.packet_id }),
        Packet::Pubcomp(a) => oracle::Packet::PubComp(oracle::PubComp { pkid: a.packet_id }),
        Packet::Subscribe(s) => oracle::Packet::Subscribe(oracle::Subscribe {
            pkid: s.packet_id,
            filters: s
                .filters
                .iter()
                .map(|(f, o)| oracle::SubscribeFilter::new(f.to_string(), to_oracle_qos(o.qos)))
                .collect(),
        }),
        Packet::Suback(s) => oracle::Packet::SubAck(oracle::SubAck {
            pkid: s.packet_id,
            return_codes: s
                .codes
                .iter()
                .map(|c| match QoS::from_bits(c.to_v3_suback()) {
                    Some(q) => oracle::SubscribeReasonCode::Success(to_oracle_qos(q)),
                    None => oracle::SubscribeReasonCode::Failure,
                })
                .collect(),
        }),
        Packet::Unsubscribe(u) => oracle::Packet::Unsubscribe(oracle::Unsubscribe {
            pkid: u.packet_id,
            topics: u.filters.iter().map(ToString::to_string).collect(),
        }),
        Packet::Unsuback(u) => oracle::Packet::UnsubAck(oracle::UnsubAck { pkid: u.packet_id }),
        Packet::Pingreq => oracle::Packet::PingReq,
        Packet::Pingresp => oracle::Packet::PingResp,
        Packet::Disconnect(_) => oracle::Packet::Disconnect,
        Packet::Auth(_) => unreachable!("MQTT 3.1.1 has no AUTH"),
    }
}

fn mqtt_str(text: &str) -> MqttStr {
    s(text)
}

/// The oracle's packet as ours; the oracle writes an empty user name or
/// password as absent, so those map to `None`.
fn from_oracle(packet: oracle::Packet) -> Packet {
    match packet {
        oracle::Packet::Connect(c) => {
            let (username, password) = match c.login {
                Some(l) => (
                    (!l.username.is_empty()).then(|| mqtt_str(&l.username)),
                    (!l.password.is_empty()).then(|| Bytes::from(l.password)),
                ),
                None => (None, None),
            };
            Packet::Connect(Box::new(Connect {
                protocol: ProtocolVersion::V3_1_1,
                clean_session: c.clean_session,
                keep_alive: c.keep_alive,
                client_id: mqtt_str(&c.client_id),
                will: c.last_will.map(|w| Will {
                    topic: mqtt_str(&w.topic),
                    payload: w.message,
                    qos: from_oracle_qos(w.qos),
                    retain: w.retain,
                    properties: None,
                }),
                username,
                password,
                properties: None,
            }))
        }
        oracle::Packet::ConnAck(c) => Packet::Connack(Connack {
            session_present: c.session_present,
            code: ReasonCode::from_v3_connack(c.code as u8).expect("oracle codes are valid"),
            properties: None,
        }),
        oracle::Packet::Publish(p) => Packet::Publish(Publish {
            dup: p.dup,
            qos: from_oracle_qos(p.qos),
            retain: p.retain,
            topic: mqtt_str(&p.topic),
            packet_id: p.pkid,
            payload: p.payload,
            properties: None,
        }),
        oracle::Packet::PubAck(a) => Packet::Puback(Ack::ok(a.pkid)),
        oracle::Packet::PubRec(a) => Packet::Pubrec(Ack::ok(a.pkid)),
        oracle::Packet::PubRel(a) => Packet::Pubrel(Ack::ok(a.pkid)),
        oracle::Packet::PubComp(a) => Packet::Pubcomp(Ack::ok(a.pkid)),
        oracle::Packet::Subscribe(s) => Packet::Subscribe(Subscribe {
            packet_id: s.pkid,
            filters: s
                .filters
                .into_iter()
                .map(|f| (mqtt_str(&f.path), SubscriptionOptions::qos(from_oracle_qos(f.qos))))
                .collect(),
            properties: None,
        }),
        oracle::Packet::SubAck(s) => Packet::Suback(Suback {
            packet_id: s.pkid,
            codes: s
                .return_codes
                .into_iter()
                .map(|c| match c {
                    oracle::SubscribeReasonCode::Success(q) => ReasonCode::granted(from_oracle_qos(q)),
                    oracle::SubscribeReasonCode::Failure => ReasonCode::UNSPECIFIED_ERROR,
                })
                .collect(),
            properties: None,
        }),
        oracle::Packet::Unsubscribe(u) => Packet::Unsubscribe(Unsubscribe {
            packet_id: u.pkid,
            filters: u.topics.iter().map(|t| mqtt_str(t)).collect(),
            properties: None,
        }),
        oracle::Packet::UnsubAck(a) => Packet::Unsuback(Unsuback {
            packet_id: a.pkid,
            codes: Vec::new(),
            properties: None,
        }),
        oracle::Packet::PingReq => Packet::Pingreq,
        oracle::Packet::PingResp => Packet::Pingresp,
        oracle::Packet::Disconnect => Packet::Disconnect(Disconnect::normal()),
    }
}

#[test]
fn oracle_decodes_what_we_encode() {
    let mut rng = StdRng::seed_from_u64(1);
    for _ in 0..3_000 {
        let packet = random_packet(&mut rng, true, true);
        let mut bytes = encode(&packet);
        let decoded = oracle::Packet::read(&mut bytes, MAX_REMAINING_LENGTH).expect("oracle decodes");
        assert!(bytes.is_empty());
        assert_eq!(from_oracle(decoded), packet);
    }
}

#[test]
fn we_decode_what_the_oracle_encodes() {
    let mut rng = StdRng::seed_from_u64(2);
    for _ in 0..3_000 {
        let packet = random_packet(&mut rng, true, true);
        let mut bytes = BytesMut::new();
        to_oracle(&packet)
            .write(&mut bytes, MAX_REMAINING_LENGTH)
            .expect("oracle encodes");
        assert_eq!(bytes, encode(&packet), "same bytes for {packet:?}");
        let decoded = parse_packet(&mut bytes, MAX_REMAINING_LENGTH, ProtocolVersion::V3_1_1).expect("we decode");
        assert_eq!(decoded, Some(packet));
    }
}
