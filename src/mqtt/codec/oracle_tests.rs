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
    Connack, Connect, ConnectReturnCode, Packet, ProtocolVersion, Publish, QoS, Suback, Subscribe, SubscribeReturnCode,
    Unsubscribe, Will,
};
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

fn to_oracle_code(code: ConnectReturnCode) -> oracle::ConnectReturnCode {
    match code {
        ConnectReturnCode::Accepted => oracle::ConnectReturnCode::Success,
        ConnectReturnCode::UnacceptableProtocolVersion => oracle::ConnectReturnCode::RefusedProtocolVersion,
        ConnectReturnCode::IdentifierRejected => oracle::ConnectReturnCode::BadClientId,
        ConnectReturnCode::ServerUnavailable => oracle::ConnectReturnCode::ServiceUnavailable,
        ConnectReturnCode::BadUsernameOrPassword => oracle::ConnectReturnCode::BadUserNamePassword,
        ConnectReturnCode::NotAuthorized => oracle::ConnectReturnCode::NotAuthorized,
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
            code: to_oracle_code(c.return_code),
        }),
        Packet::Publish(p) => oracle::Packet::Publish(oracle::Publish {
            dup: p.dup,
            qos: to_oracle_qos(p.qos),
            retain: p.retain,
            topic: p.topic.to_string(),
            pkid: p.packet_id,
            payload: p.payload.clone(),
        }),
        Packet::Puback { packet_id } => oracle::Packet::PubAck(oracle::PubAck { pkid: *packet_id }),
        Packet::Pubrec { packet_id } => oracle::Packet::PubRec(oracle::PubRec { pkid: *packet_id }),
        Packet::Pubrel { packet_id } => oracle::Packet::PubRel(oracle::PubRel { pkid: *packet_id }),
        Packet::Pubcomp { packet_id } => oracle::Packet::PubComp(oracle::PubComp { pkid: *packet_id }),
        Packet::Subscribe(s) => oracle::Packet::Subscribe(oracle::Subscribe {
            pkid: s.packet_id,
            filters: s
                .filters
                .iter()
                .map(|(f, q)| oracle::SubscribeFilter::new(f.to_string(), to_oracle_qos(*q)))
                .collect(),
        }),
        Packet::Suback(s) => oracle::Packet::SubAck(oracle::SubAck {
            pkid: s.packet_id,
            return_codes: s
                .return_codes
                .iter()
                .map(|c| match c {
                    SubscribeReturnCode::Success(q) => oracle::SubscribeReasonCode::Success(to_oracle_qos(*q)),
                    SubscribeReturnCode::Failure => oracle::SubscribeReasonCode::Failure,
                })
                .collect(),
        }),
        Packet::Unsubscribe(u) => oracle::Packet::Unsubscribe(oracle::Unsubscribe {
            pkid: u.packet_id,
            topics: u.filters.iter().map(ToString::to_string).collect(),
        }),
        Packet::Unsuback { packet_id } => oracle::Packet::UnsubAck(oracle::UnsubAck { pkid: *packet_id }),
        Packet::Pingreq => oracle::Packet::PingReq,
        Packet::Pingresp => oracle::Packet::PingResp,
        Packet::Disconnect => oracle::Packet::Disconnect,
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
                }),
                username,
                password,
            }))
        }
        oracle::Packet::ConnAck(c) => Packet::Connack(Connack {
            session_present: c.session_present,
            return_code: ConnectReturnCode::from_u8(c.code as u8).expect("oracle codes are valid"),
        }),
        oracle::Packet::Publish(p) => Packet::Publish(Publish {
            dup: p.dup,
            qos: from_oracle_qos(p.qos),
            retain: p.retain,
            topic: mqtt_str(&p.topic),
            packet_id: p.pkid,
            payload: p.payload,
        }),
        oracle::Packet::PubAck(a) => Packet::Puback { packet_id: a.pkid },
        oracle::Packet::PubRec(a) => Packet::Pubrec { packet_id: a.pkid },
        oracle::Packet::PubRel(a) => Packet::Pubrel { packet_id: a.pkid },
        oracle::Packet::PubComp(a) => Packet::Pubcomp { packet_id: a.pkid },
        oracle::Packet::Subscribe(s) => Packet::Subscribe(Subscribe {
            packet_id: s.pkid,
            filters: s
                .filters
                .into_iter()
                .map(|f| (mqtt_str(&f.path), from_oracle_qos(f.qos)))
                .collect(),
        }),
        oracle::Packet::SubAck(s) => Packet::Suback(Suback {
            packet_id: s.pkid,
            return_codes: s
                .return_codes
                .into_iter()
                .map(|c| match c {
                    oracle::SubscribeReasonCode::Success(q) => SubscribeReturnCode::Success(from_oracle_qos(q)),
                    oracle::SubscribeReasonCode::Failure => SubscribeReturnCode::Failure,
                })
                .collect(),
        }),
        oracle::Packet::Unsubscribe(u) => Packet::Unsubscribe(Unsubscribe {
            packet_id: u.pkid,
            filters: u.topics.iter().map(|t| mqtt_str(t)).collect(),
        }),
        oracle::Packet::UnsubAck(a) => Packet::Unsuback { packet_id: a.pkid },
        oracle::Packet::PingReq => Packet::Pingreq,
        oracle::Packet::PingResp => Packet::Pingresp,
        oracle::Packet::Disconnect => Packet::Disconnect,
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
        let decoded = parse_packet(&mut bytes, MAX_REMAINING_LENGTH).expect("we decode");
        assert_eq!(decoded, Some(packet));
    }
}
