//! Test-only sample packets: a fixed set covering every packet type and flag,
//! and a seeded generator of random valid packets for property tests, for
//! MQTT 3.1.1 and for MQTT 5.0.

use bytes::{Bytes, BytesMut};
use rand::RngExt;
use rand::rngs::StdRng;

use crate::mqtt::codec::encode::write_packet;
use crate::mqtt::codec::packet::{
    Ack, Connack, Connect, Disconnect, Packet, ProtocolVersion, Publish, QoS, Suback, Subscribe, SubscriptionOptions,
    Unsuback, Unsubscribe, Will,
};
use crate::mqtt::codec::properties::{MAX_VARINT, Properties};
use crate::mqtt::codec::reason::ReasonCode;
use crate::mqtt::codec::string::MqttStr;

/// A string known to be valid.
pub(crate) fn s(text: &str) -> MqttStr {
    MqttStr::try_from(text).expect("sample strings have no U+0000")
}

/// Encodes one packet as MQTT 3.1.1 lays it out.
pub(crate) fn encode(packet: &Packet) -> BytesMut {
    encode_as(packet, ProtocolVersion::V3_1_1)
}

/// Encodes one packet as `version` lays it out.
pub(crate) fn encode_as(packet: &Packet, version: ProtocolVersion) -> BytesMut {
    let mut out = BytesMut::new();
    write_packet(&mut out, packet, version).expect("sample packets encode");
    out
}

/// One packet of every type, with every flag and optional field both ways.
pub(crate) fn all_packets() -> Vec<Packet> {
    let connect = Connect {
        protocol: ProtocolVersion::V3_1_1,
        clean_session: true,
        keep_alive: 60,
        client_id: s("client-1"),
        will: None,
        username: None,
        password: None,
        properties: None,
    };
    let publish = Publish {
        dup: false,
        qos: QoS::AtMostOnce,
        retain: false,
        topic: s("a/b"),
        packet_id: 0,
        payload: Bytes::from_static(b"hello"),
        properties: None,
    };
    vec![
        Packet::Connect(Box::new(connect.clone())),
        Packet::Connect(Box::new(Connect {
            protocol: ProtocolVersion::V3_1,
            clean_session: false,
            keep_alive: 0,
            client_id: s(""),
            will: Some(Will {
                topic: s("clients/ü/status"),
                payload: Bytes::from_static(b"offline"),
                qos: QoS::ExactlyOnce,
                retain: true,
                properties: None,
            }),
            username: Some(s("vhost:user")),
            password: Some(Bytes::from_static(b"\x00\xffsecret")),
            properties: None,
        })),
        Packet::Connect(Box::new(Connect {
            will: Some(Will {
                topic: s("w"),
                payload: Bytes::new(),
                qos: QoS::AtMostOnce,
                retain: false,
                properties: None,
            }),
            username: Some(s("")),
            ..connect
        })),
        Packet::Connack(Connack {
            session_present: false,
            code: ReasonCode::SUCCESS,
            properties: None,
        }),
        Packet::Connack(Connack {
            session_present: true,
            code: ReasonCode::NOT_AUTHORIZED,
            properties: None,
        }),
        Packet::Publish(publish.clone()),
        Packet::Publish(Publish {
            dup: true,
            qos: QoS::AtLeastOnce,
            retain: true,
            packet_id: 1,
            payload: Bytes::new(),
            ..publish.clone()
        }),
        Packet::Publish(Publish {
            qos: QoS::ExactlyOnce,
            packet_id: 65535,
            topic: s("/"),
            payload: Bytes::from(vec![7u8; 200]),
            ..publish
        }),
        Packet::Puback(Ack::ok(1)),
        Packet::Pubrec(Ack::ok(2)),
        Packet::Pubrel(Ack::ok(3)),
        Packet::Pubcomp(Ack::ok(65535)),
        Packet::Subscribe(Subscribe {
            packet_id: 10,
            filters: vec![
                (s("a/+/c"), SubscriptionOptions::qos(QoS::AtMostOnce)),
                (s("#"), SubscriptionOptions::qos(QoS::AtLeastOnce)),
                (s("$SYS/#"), SubscriptionOptions::qos(QoS::ExactlyOnce)),
            ],
            properties: None,
        }),
        Packet::Suback(Suback {
            packet_id: 10,
            codes: vec![
                ReasonCode::SUCCESS,
                ReasonCode::GRANTED_QOS_1,
                ReasonCode::GRANTED_QOS_2,
                ReasonCode::UNSPECIFIED_ERROR,
            ],
            properties: None,
        }),
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 11,
            filters: vec![s("a/+/c"), s("/")],
            properties: None,
        }),
        Packet::Unsuback(Unsuback {
            packet_id: 11,
            codes: Vec::new(),
            properties: None,
        }),
        Packet::Pingreq,
        Packet::Pingresp,
        Packet::Disconnect(Disconnect::normal()),
    ]
}

/// A user property.
fn user(name: &str, value: &str) -> (MqttStr, MqttStr) {
    (s(name), s(value))
}

/// One MQTT 5 packet of every type (AUTH included), with properties of every
/// kind, non-success reason codes, subscription options and the short forms
/// of acknowledgements, DISCONNECT and AUTH.
pub(crate) fn all_v5_packets() -> Vec<Packet> {
    let connect = Connect {
        protocol: ProtocolVersion::V5,
        clean_session: true,
        keep_alive: 30,
        client_id: s("client-5"),
        will: None,
        username: None,
        password: None,
        properties: None,
    };
    let publish = Publish {
        dup: false,
        qos: QoS::AtLeastOnce,
        retain: false,
        topic: s("sensors/1"),
        packet_id: 7,
        payload: Bytes::from_static(b"{\"t\":21}"),
        properties: None,
    };
    let reason_only = |reason: u8| Ack {
        packet_id: 9,
        reason: ReasonCode(reason),
        properties: None,
    };
    let with_reason_string = |reason: u8| Ack {
        packet_id: 10,
        reason: ReasonCode(reason),
        properties: Some(Box::new(Properties {
            reason_string: Some(s("because")),
            user_properties: vec![user("k", "v")],
            ..Properties::default()
        })),
    };
    vec![
        Packet::Connect(Box::new(connect.clone())),
        Packet::Connect(Box::new(Connect {
            protocol: ProtocolVersion::V5,
            clean_session: false,
            keep_alive: 0,
            client_id: s(""),
            will: Some(Will {
                topic: s("clients/ü/status"),
                payload: Bytes::from_static(b"offline"),
                qos: QoS::ExactlyOnce,
                retain: true,
                properties: Some(Box::new(Properties {
                    payload_format_indicator: Some(1),
                    message_expiry_interval: Some(3600),
                    content_type: Some(s("text/plain")),
                    response_topic: Some(s("replies/5")),
                    correlation_data: Some(Bytes::from_static(b"\x00\x01\xff")),
                    will_delay_interval: Some(10),
                    user_properties: vec![user("a", "1"), user("a", "2")],
                    ..Properties::default()
                })),
            }),
            username: Some(s("vhost:user")),
            password: Some(Bytes::from_static(b"\x00\xffsecret")),
            properties: Some(Box::new(Properties {
                session_expiry_interval: Some(u32::MAX),
                receive_maximum: Some(20),
                maximum_packet_size: Some(1 << 20),
                topic_alias_maximum: Some(16),
                request_response_information: Some(1),
                request_problem_information: Some(0),
                authentication_method: Some(s("SCRAM-SHA-256")),
                authentication_data: Some(Bytes::from_static(b"n,,n=user")),
                user_properties: vec![user("client", "rust")],
                ..Properties::default()
            })),
        })),
        // MQTT 5 allows a password without a user name.
        Packet::Connect(Box::new(Connect {
            password: Some(Bytes::from_static(b"token")),
            properties: Some(Box::new(Properties {
                session_expiry_interval: Some(60),
                ..Properties::default()
            })),
            ..connect
        })),
        Packet::Connack(Connack {
            session_present: false,
            code: ReasonCode::SUCCESS,
            properties: None,
        }),
        Packet::Connack(Connack {
            session_present: true,
            code: ReasonCode::SUCCESS,
            properties: Some(Box::new(Properties {
                session_expiry_interval: Some(120),
                assigned_client_identifier: Some(s("auto-1234")),
                server_keep_alive: Some(60),
                authentication_method: Some(s("SCRAM-SHA-256")),
                authentication_data: Some(Bytes::from_static(b"v=xyz")),
                response_information: Some(s("responses/")),
                reason_string: Some(s("welcome")),
                receive_maximum: Some(100),
                topic_alias_maximum: Some(10),
                maximum_qos: Some(1),
                retain_available: Some(1),
                user_properties: vec![user("node", "rabbit@1")],
                maximum_packet_size: Some(65536),
                wildcard_subscription_available: Some(1),
                subscription_identifier_available: Some(1),
                shared_subscription_available: Some(0),
                ..Properties::default()
            })),
        }),
        Packet::Connack(Connack {
            session_present: false,
            code: ReasonCode::BAD_USER_NAME_OR_PASSWORD,
            properties: Some(Box::new(Properties {
                reason_string: Some(s("no such user")),
                server_reference: Some(s("other.example:1883")),
                ..Properties::default()
            })),
        }),
        Packet::Connack(Connack {
            session_present: false,
            code: ReasonCode::QOS_NOT_SUPPORTED,
            properties: None,
        }),
        Packet::Publish(publish.clone()),
        Packet::Publish(Publish {
            dup: true,
            qos: QoS::ExactlyOnce,
            retain: true,
            packet_id: 65535,
            payload: Bytes::from(vec![7u8; 200]),
            properties: Some(Box::new(Properties {
                payload_format_indicator: Some(0),
                message_expiry_interval: Some(30),
                content_type: Some(s("application/json")),
                response_topic: Some(s("replies/1")),
                correlation_data: Some(Bytes::from_static(b"req-1")),
                subscription_identifiers: vec![1, 200, MAX_VARINT],
                topic_alias: Some(3),
                user_properties: vec![user("k", "v"), user("k", "w"), user("", "")],
                ..Properties::default()
            })),
            ..publish.clone()
        }),
        // A topic alias standing for the topic: the topic name is empty.
        Packet::Publish(Publish {
            qos: QoS::AtMostOnce,
            packet_id: 0,
            topic: s(""),
            payload: Bytes::new(),
            properties: Some(Box::new(Properties {
                topic_alias: Some(3),
                ..Properties::default()
            })),
            ..publish
        }),
        Packet::Puback(Ack::ok(1)),
        Packet::Puback(reason_only(0x10)),
        Packet::Puback(with_reason_string(0x87)),
        Packet::Pubrec(Ack::ok(2)),
        Packet::Pubrec(reason_only(0x97)),
        Packet::Pubrec(with_reason_string(0x00)),
        Packet::Pubrel(Ack::ok(3)),
        Packet::Pubrel(reason_only(0x92)),
        Packet::Pubrel(with_reason_string(0x92)),
        Packet::Pubcomp(Ack::ok(65535)),
        Packet::Pubcomp(reason_only(0x92)),
        Packet::Pubcomp(with_reason_string(0x00)),
        Packet::Subscribe(Subscribe {
            packet_id: 10,
            filters: vec![
                (s("a/+/c"), SubscriptionOptions::qos(QoS::AtMostOnce)),
                (
                    s("#"),
                    SubscriptionOptions {
                        qos: QoS::AtLeastOnce,
                        no_local: true,
                        retain_as_published: false,
                        retain_handling: 1,
                    },
                ),
                (
                    s("$share/g/x/#"),
                    SubscriptionOptions {
                        qos: QoS::ExactlyOnce,
                        no_local: false,
                        retain_as_published: true,
                        retain_handling: 2,
                    },
                ),
            ],
            properties: Some(Box::new(Properties {
                subscription_identifiers: vec![MAX_VARINT],
                user_properties: vec![user("k", "v")],
                ..Properties::default()
            })),
        }),
        Packet::Subscribe(Subscribe {
            packet_id: 11,
            filters: vec![(s("x"), SubscriptionOptions::qos(QoS::AtLeastOnce))],
            properties: None,
        }),
        Packet::Suback(Suback {
            packet_id: 10,
            codes: vec![
                ReasonCode::SUCCESS,
                ReasonCode::GRANTED_QOS_1,
                ReasonCode::GRANTED_QOS_2,
                ReasonCode::NOT_AUTHORIZED,
                ReasonCode::SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
                ReasonCode(0xA2),
            ],
            properties: Some(Box::new(Properties {
                reason_string: Some(s("partly")),
                ..Properties::default()
            })),
        }),
        Packet::Suback(Suback {
            packet_id: 11,
            codes: vec![ReasonCode::GRANTED_QOS_1],
            properties: None,
        }),
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 12,
            filters: vec![s("a/+/c"), s("/")],
            properties: Some(Box::new(Properties {
                user_properties: vec![user("k", "v")],
                ..Properties::default()
            })),
        }),
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 13,
            filters: vec![s("#")],
            properties: None,
        }),
        Packet::Unsuback(Unsuback {
            packet_id: 12,
            codes: vec![ReasonCode::SUCCESS, ReasonCode::NO_SUBSCRIPTION_EXISTED],
            properties: Some(Box::new(Properties {
                reason_string: Some(s("one was not there")),
                ..Properties::default()
            })),
        }),
        Packet::Unsuback(Unsuback {
            packet_id: 13,
            codes: vec![ReasonCode::TOPIC_FILTER_INVALID],
            properties: None,
        }),
        Packet::Pingreq,
        Packet::Pingresp,
        Packet::Disconnect(Disconnect::normal()),
        Packet::Disconnect(Disconnect::with(ReasonCode::DISCONNECT_WITH_WILL)),
        Packet::Disconnect(Disconnect {
            reason: ReasonCode::SESSION_TAKEN_OVER,
            properties: Some(Box::new(Properties {
                session_expiry_interval: Some(0),
                reason_string: Some(s("another connection")),
                server_reference: Some(s("b.example")),
                user_properties: vec![user("k", "v")],
                ..Properties::default()
            })),
        }),
        Packet::Auth(Disconnect::normal()),
        Packet::Auth(Disconnect {
            reason: ReasonCode::CONTINUE_AUTHENTICATION,
            properties: Some(Box::new(Properties {
                authentication_method: Some(s("SCRAM-SHA-256")),
                authentication_data: Some(Bytes::from_static(b"r=nonce")),
                reason_string: Some(s("go on")),
                user_properties: vec![user("k", "v")],
                ..Properties::default()
            })),
        }),
        Packet::Auth(Disconnect::with(ReasonCode::REAUTHENTICATE)),
    ]
}

const WORDS: [&str; 8] = ["a", "sensor", "ü", "€x", "", "$SYS", "1 2", "日本"];

fn random_qos(rng: &mut StdRng) -> QoS {
    QoS::from_bits(rng.random_range(0..3u8)).unwrap_or(QoS::AtMostOnce)
}

fn random_word(rng: &mut StdRng) -> &'static str {
    WORDS[rng.random_range(0..WORDS.len())]
}

/// A random valid topic name of one to four levels.
pub(crate) fn random_topic(rng: &mut StdRng) -> MqttStr {
    let levels: Vec<&str> = (0..rng.random_range(1..5)).map(|_| random_word(rng)).collect();
    let topic = levels.join("/");
    if topic.is_empty() { s("t") } else { s(&topic) }
}

/// A random valid topic filter, with `+` levels and maybe a final `#`.
pub(crate) fn random_filter(rng: &mut StdRng) -> MqttStr {
    let mut levels: Vec<&str> = (0..rng.random_range(0..4))
        .map(|_| if rng.random_bool(0.3) { "+" } else { random_word(rng) })
        .collect();
    if levels.is_empty() || rng.random_bool(0.3) {
        levels.push("#");
    }
    let filter = levels.join("/");
    if filter.is_empty() { s("#") } else { s(&filter) }
}

fn random_bytes(rng: &mut StdRng, max: usize) -> Bytes {
    let mut v = vec![0u8; rng.random_range(0..=max)];
    rng.fill(&mut v[..]);
    Bytes::from(v)
}

fn random_id(rng: &mut StdRng) -> u16 {
    rng.random_range(1..=u16::MAX)
}

/// A random valid packet of any type. `text_password` keeps passwords UTF-8
/// (some independent codecs only take string passwords) and `v311_only`
/// avoids MQTT 3.1 CONNECTs.
pub(crate) fn random_packet(rng: &mut StdRng, text_password: bool, v311_only: bool) -> Packet {
    match rng.random_range(0..14) {
        0 => {
            let username = rng.random_bool(0.5).then(|| random_topic(rng));
            let password = match &username {
                Some(_) if rng.random_bool(0.5) => Some(if text_password {
                    random_topic(rng).into_bytes()
                } else {
                    random_bytes(rng, 20)
                }),
                _ => None,
            };
            Packet::Connect(Box::new(Connect {
                protocol: if v311_only || rng.random_bool(0.5) {
                    ProtocolVersion::V3_1_1
                } else {
                    ProtocolVersion::V3_1
                },
                clean_session: rng.random_bool(0.5),
                keep_alive: rng.random(),
                client_id: if rng.random_bool(0.8) { random_topic(rng) } else { s("") },
                will: rng.random_bool(0.5).then(|| Will {
                    topic: random_topic(rng),
                    payload: random_bytes(rng, 30),
                    qos: random_qos(rng),
                    retain: rng.random_bool(0.5),
                    properties: None,
                }),
                username,
                password,
                properties: None,
            }))
        }
        1 => Packet::Connack(Connack {
            session_present: rng.random_bool(0.5),
            code: ReasonCode::from_v3_connack(rng.random_range(0..6)).unwrap_or(ReasonCode::SUCCESS),
            properties: None,
        }),
        2 => {
            let qos = random_qos(rng);
            let at_most_once = qos == QoS::AtMostOnce;
            Packet::Publish(Publish {
                dup: !at_most_once && rng.random_bool(0.5),
                qos,
                retain: rng.random_bool(0.5),
                topic: random_topic(rng),
                packet_id: if at_most_once { 0 } else { random_id(rng) },
                payload: random_bytes(rng, 300),
                properties: None,
            })
        }
        3 => Packet::Puback(Ack::ok(random_id(rng))),
        4 => Packet::Pubrec(Ack::ok(random_id(rng))),
        5 => Packet::Pubrel(Ack::ok(random_id(rng))),
        6 => Packet::Pubcomp(Ack::ok(random_id(rng))),
        7 => Packet::Subscribe(Subscribe {
            packet_id: random_id(rng),
            filters: (0..rng.random_range(1..4))
                .map(|_| (random_filter(rng), SubscriptionOptions::qos(random_qos(rng))))
                .collect(),
            properties: None,
        }),
        8 => Packet::Suback(Suback {
            packet_id: random_id(rng),
            codes: (0..rng.random_range(1..4))
                .map(|_| {
                    if rng.random_bool(0.2) {
                        ReasonCode::UNSPECIFIED_ERROR
                    } else {
                        ReasonCode::granted(random_qos(rng))
                    }
                })
                .collect(),
            properties: None,
        }),
        9 => Packet::Unsubscribe(Unsubscribe {
            packet_id: random_id(rng),
            filters: (0..rng.random_range(1..4)).map(|_| random_filter(rng)).collect(),
            properties: None,
        }),
        10 => Packet::Unsuback(Unsuback {
            packet_id: random_id(rng),
            codes: Vec::new(),
            properties: None,
        }),
        11 => Packet::Pingreq,
        12 => Packet::Pingresp,
        _ => Packet::Disconnect(Disconnect::normal()),
    }
}

/// The properties each place may carry (table 2-4 of MQTT 5.0), by
/// identifier.
pub(crate) mod allowed {
    pub(crate) const CONNECT: &[u8] = &[0x11, 0x15, 0x16, 0x17, 0x19, 0x21, 0x22, 0x26, 0x27];
    pub(crate) const WILL: &[u8] = &[0x01, 0x02, 0x03, 0x08, 0x09, 0x18, 0x26];
    pub(crate) const CONNACK: &[u8] = &[
        0x11, 0x12, 0x13, 0x15, 0x16, 0x1A, 0x1C, 0x1F, 0x21, 0x22, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A,
    ];
    pub(crate) const PUBLISH: &[u8] = &[0x01, 0x02, 0x03, 0x08, 0x09, 0x0B, 0x23, 0x26];
    /// PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK and UNSUBACK.
    pub(crate) const ACK: &[u8] = &[0x1F, 0x26];
    pub(crate) const SUBSCRIBE: &[u8] = &[0x0B, 0x26];
    pub(crate) const UNSUBSCRIBE: &[u8] = &[0x26];
    pub(crate) const DISCONNECT: &[u8] = &[0x11, 0x1C, 0x1F, 0x26];
    pub(crate) const AUTH: &[u8] = &[0x15, 0x16, 0x1F, 0x26];
}

/// The reason codes each packet may carry (sections 3.2.2.2 to 3.15.2.1 of
/// MQTT 5.0), written out from the specification's tables.
pub(crate) mod reasons {
    pub(crate) const CONNACK: &[u8] = &[
        0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x90, 0x95, 0x97, 0x99, 0x9A,
        0x9B, 0x9C, 0x9D, 0x9F,
    ];
    /// PUBACK and PUBREC.
    pub(crate) const PUBACK: &[u8] = &[0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99];
    /// PUBREL and PUBCOMP.
    pub(crate) const PUBREL: &[u8] = &[0x00, 0x92];
    pub(crate) const SUBACK: &[u8] = &[0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2];
    pub(crate) const UNSUBACK: &[u8] = &[0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91];
    pub(crate) const DISCONNECT: &[u8] = &[
        0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93, 0x94, 0x95, 0x96, 0x97,
        0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1, 0xA2,
    ];
    pub(crate) const AUTH: &[u8] = &[0x00, 0x18, 0x19];
}

fn random_reason(rng: &mut StdRng, codes: &[u8]) -> ReasonCode {
    ReasonCode(codes[rng.random_range(0..codes.len())])
}

fn random_text(rng: &mut StdRng) -> MqttStr {
    let words: Vec<&str> = (0..rng.random_range(0..3)).map(|_| random_word(rng)).collect();
    s(&words.join(" "))
}

fn random_flag(rng: &mut StdRng) -> Option<u8> {
    Some(rng.random_range(0..2))
}

/// A subscription identifier, small or large.
fn random_subscription_id(rng: &mut StdRng) -> u32 {
    if rng.random_bool(0.5) {
        rng.random_range(1..128)
    } else {
        rng.random_range(1..=MAX_VARINT)
    }
}

/// Random valid values for some of the properties `ids`; `None` rather than
/// an empty set, as decoding gives.
fn random_properties(rng: &mut StdRng, ids: &[u8]) -> Option<Box<Properties>> {
    let mut p = Properties::default();
    for &id in ids {
        if !rng.random_bool(0.3) {
            continue;
        }
        match id {
            0x01 => p.payload_format_indicator = random_flag(rng),
            0x02 => p.message_expiry_interval = Some(rng.random()),
            0x03 => p.content_type = Some(random_text(rng)),
            0x08 => p.response_topic = Some(random_topic(rng)),
            0x09 => p.correlation_data = Some(random_bytes(rng, 16)),
            0x0B => {
                p.subscription_identifiers = (0..rng.random_range(1..4))
                    .map(|_| random_subscription_id(rng))
                    .collect();
            }
            0x11 => p.session_expiry_interval = Some(rng.random()),
            0x12 => p.assigned_client_identifier = Some(random_topic(rng)),
            0x13 => p.server_keep_alive = Some(rng.random()),
            0x15 => p.authentication_method = Some(random_text(rng)),
            0x16 => p.authentication_data = Some(random_bytes(rng, 16)),
            0x17 => p.request_problem_information = random_flag(rng),
            0x18 => p.will_delay_interval = Some(rng.random()),
            0x19 => p.request_response_information = random_flag(rng),
            0x1A => p.response_information = Some(random_text(rng)),
            0x1C => p.server_reference = Some(random_text(rng)),
            0x1F => p.reason_string = Some(random_text(rng)),
            0x21 => p.receive_maximum = Some(rng.random_range(1..=u16::MAX)),
            0x22 => p.topic_alias_maximum = Some(rng.random()),
            0x23 => p.topic_alias = Some(rng.random_range(1..=u16::MAX)),
            0x24 => p.maximum_qos = random_flag(rng),
            0x25 => p.retain_available = random_flag(rng),
            0x26 => {
                p.user_properties = (0..rng.random_range(1..4))
                    .map(|_| (random_text(rng), random_text(rng)))
                    .collect();
            }
            0x27 => p.maximum_packet_size = Some(rng.random_range(1..=u32::MAX)),
            0x28 => p.wildcard_subscription_available = random_flag(rng),
            0x29 => p.subscription_identifier_available = random_flag(rng),
            _ => p.shared_subscription_available = random_flag(rng),
        }
    }
    (p != Properties::default()).then(|| Box::new(p))
}

fn random_ack(rng: &mut StdRng, codes: &[u8]) -> Ack {
    let reason = if rng.random_bool(0.4) {
        ReasonCode::SUCCESS
    } else {
        random_reason(rng, codes)
    };
    Ack {
        packet_id: random_id(rng),
        reason,
        properties: random_properties(rng, allowed::ACK),
    }
}

/// A random valid MQTT 5 packet of any type, with random properties and
/// reason codes.
///
/// `for_oracle` keeps to what rumqttc's MQTT 5 codec reads and writes
/// correctly (see `oracle_v5_tests`): user names and passwords are non-empty
/// text when present (its `Login` holds two strings and writes an empty one
/// as absent), a PUBLISH has at most one subscription identifier (it counts
/// each one a byte too long, so later properties are lost), there is no AUTH (it can neither read AUTH packets nor size
/// AUTH properties), and DISCONNECT always carries properties (it refuses a
/// DISCONNECT of remaining length 0, and writes a reason code without
/// properties with a property length its remaining length leaves out).
pub(crate) fn random_v5_packet(rng: &mut StdRng, for_oracle: bool) -> Packet {
    let kinds = if for_oracle { 14 } else { 15 };
    match rng.random_range(0..kinds) {
        0 => {
            let username = rng.random_bool(0.5).then(|| random_topic(rng));
            let password = rng.random_bool(0.5).then(|| {
                if for_oracle {
                    random_topic(rng).into_bytes()
                } else {
                    random_bytes(rng, 20)
                }
            });
            Packet::Connect(Box::new(Connect {
                protocol: ProtocolVersion::V5,
                clean_session: rng.random_bool(0.5),
                keep_alive: rng.random(),
                client_id: if rng.random_bool(0.8) { random_topic(rng) } else { s("") },
                will: rng.random_bool(0.5).then(|| Will {
                    topic: random_topic(rng),
                    payload: random_bytes(rng, 30),
                    qos: random_qos(rng),
                    retain: rng.random_bool(0.5),
                    properties: random_properties(rng, allowed::WILL),
                }),
                username,
                password,
                properties: random_properties(rng, allowed::CONNECT),
            }))
        }
        1 => Packet::Connack(Connack {
            session_present: rng.random_bool(0.5),
            code: random_reason(rng, reasons::CONNACK),
            properties: random_properties(rng, allowed::CONNACK),
        }),
        2 => {
            let qos = random_qos(rng);
            let at_most_once = qos == QoS::AtMostOnce;
            let mut properties = random_properties(rng, allowed::PUBLISH);
            if for_oracle && let Some(p) = properties.as_mut() {
                p.subscription_identifiers.truncate(1);
            }
            let aliased = properties.as_ref().is_some_and(|p| p.topic_alias.is_some());
            Packet::Publish(Publish {
                dup: !at_most_once && rng.random_bool(0.5),
                qos,
                retain: rng.random_bool(0.5),
                topic: if aliased && rng.random_bool(0.5) {
                    s("")
                } else {
                    random_topic(rng)
                },
                packet_id: if at_most_once { 0 } else { random_id(rng) },
                payload: random_bytes(rng, 300),
                properties,
            })
        }
        3 => Packet::Puback(random_ack(rng, reasons::PUBACK)),
        4 => Packet::Pubrec(random_ack(rng, reasons::PUBACK)),
        5 => Packet::Pubrel(random_ack(rng, reasons::PUBREL)),
        6 => Packet::Pubcomp(random_ack(rng, reasons::PUBREL)),
        7 => {
            let mut properties = random_properties(rng, allowed::SUBSCRIBE);
            if let Some(p) = properties.as_mut() {
                // SUBSCRIBE carries at most one subscription identifier.
                p.subscription_identifiers.truncate(1);
            }
            Packet::Subscribe(Subscribe {
                packet_id: random_id(rng),
                filters: (0..rng.random_range(1..4))
                    .map(|_| {
                        let options = SubscriptionOptions {
                            qos: random_qos(rng),
                            no_local: rng.random_bool(0.5),
                            retain_as_published: rng.random_bool(0.5),
                            retain_handling: rng.random_range(0..3),
                        };
                        (random_filter(rng), options)
                    })
                    .collect(),
                properties,
            })
        }
        8 => Packet::Suback(Suback {
            packet_id: random_id(rng),
            codes: (0..rng.random_range(1..4))
                .map(|_| random_reason(rng, reasons::SUBACK))
                .collect(),
            properties: random_properties(rng, allowed::ACK),
        }),
        9 => Packet::Unsubscribe(Unsubscribe {
            packet_id: random_id(rng),
            filters: (0..rng.random_range(1..4)).map(|_| random_filter(rng)).collect(),
            properties: random_properties(rng, allowed::UNSUBSCRIBE),
        }),
        10 => Packet::Unsuback(Unsuback {
            packet_id: random_id(rng),
            codes: (0..rng.random_range(1..4))
                .map(|_| random_reason(rng, reasons::UNSUBACK))
                .collect(),
            properties: random_properties(rng, allowed::ACK),
        }),
        11 => Packet::Pingreq,
        12 => Packet::Pingresp,
        13 => {
            let mut properties = random_properties(rng, allowed::DISCONNECT);
            if for_oracle && properties.is_none() {
                properties = Some(Box::new(Properties {
                    reason_string: Some(random_text(rng)),
                    ..Properties::default()
                }));
            }
            Packet::Disconnect(Disconnect {
                reason: if rng.random_bool(0.3) {
                    ReasonCode::SUCCESS
                } else {
                    random_reason(rng, reasons::DISCONNECT)
                },
                properties,
            })
        }
        _ => Packet::Auth(Disconnect {
            reason: random_reason(rng, reasons::AUTH),
            properties: random_properties(rng, allowed::AUTH),
        }),
    }
}
