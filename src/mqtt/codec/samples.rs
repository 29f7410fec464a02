//! Test-only sample packets: a fixed set covering every packet type and flag,
//! and a seeded generator of random valid packets for property tests.

use bytes::{Bytes, BytesMut};
use rand::RngExt;
use rand::rngs::StdRng;

use crate::mqtt::codec::encode::write_packet;
use crate::mqtt::codec::packet::{
    Connack, Connect, ConnectReturnCode, Packet, ProtocolVersion, Publish, QoS, Suback, Subscribe, SubscribeReturnCode,
    Unsubscribe, Will,
};
use crate::mqtt::codec::string::MqttStr;

/// A string known to be valid.
pub(crate) fn s(text: &str) -> MqttStr {
    MqttStr::try_from(text).expect("sample strings have no U+0000")
}

/// Encodes one packet.
pub(crate) fn encode(packet: &Packet) -> BytesMut {
    let mut out = BytesMut::new();
    write_packet(&mut out, packet).expect("sample packets encode");
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
    };
    let publish = Publish {
        dup: false,
        qos: QoS::AtMostOnce,
        retain: false,
        topic: s("a/b"),
        packet_id: 0,
        payload: Bytes::from_static(b"hello"),
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
            }),
            username: Some(s("vhost:user")),
            password: Some(Bytes::from_static(b"\x00\xffsecret")),
        })),
        Packet::Connect(Box::new(Connect {
            will: Some(Will {
                topic: s("w"),
                payload: Bytes::new(),
                qos: QoS::AtMostOnce,
                retain: false,
            }),
            username: Some(s("")),
            ..connect
        })),
        Packet::Connack(Connack {
            session_present: false,
            return_code: ConnectReturnCode::Accepted,
        }),
        Packet::Connack(Connack {
            session_present: true,
            return_code: ConnectReturnCode::NotAuthorized,
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
        Packet::Puback { packet_id: 1 },
        Packet::Pubrec { packet_id: 2 },
        Packet::Pubrel { packet_id: 3 },
        Packet::Pubcomp { packet_id: 65535 },
        Packet::Subscribe(Subscribe {
            packet_id: 10,
            filters: vec![
                (s("a/+/c"), QoS::AtMostOnce),
                (s("#"), QoS::AtLeastOnce),
                (s("$SYS/#"), QoS::ExactlyOnce),
            ],
        }),
        Packet::Suback(Suback {
            packet_id: 10,
            return_codes: vec![
                SubscribeReturnCode::Success(QoS::AtMostOnce),
                SubscribeReturnCode::Success(QoS::AtLeastOnce),
                SubscribeReturnCode::Success(QoS::ExactlyOnce),
                SubscribeReturnCode::Failure,
            ],
        }),
        Packet::Unsubscribe(Unsubscribe {
            packet_id: 11,
            filters: vec![s("a/+/c"), s("/")],
        }),
        Packet::Unsuback { packet_id: 11 },
        Packet::Pingreq,
        Packet::Pingresp,
        Packet::Disconnect,
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
                }),
                username,
                password,
            }))
        }
        1 => Packet::Connack(Connack {
            session_present: rng.random_bool(0.5),
            return_code: ConnectReturnCode::from_u8(rng.random_range(0..6)).unwrap_or(ConnectReturnCode::Accepted),
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
            })
        }
        3 => Packet::Puback {
            packet_id: random_id(rng),
        },
        4 => Packet::Pubrec {
            packet_id: random_id(rng),
        },
        5 => Packet::Pubrel {
            packet_id: random_id(rng),
        },
        6 => Packet::Pubcomp {
            packet_id: random_id(rng),
        },
        7 => Packet::Subscribe(Subscribe {
            packet_id: random_id(rng),
            filters: (0..rng.random_range(1..4))
                .map(|_| (random_filter(rng), random_qos(rng)))
                .collect(),
        }),
        8 => Packet::Suback(Suback {
            packet_id: random_id(rng),
            return_codes: (0..rng.random_range(1..4))
                .map(|_| {
                    if rng.random_bool(0.2) {
                        SubscribeReturnCode::Failure
                    } else {
                        SubscribeReturnCode::Success(random_qos(rng))
                    }
                })
                .collect(),
        }),
        9 => Packet::Unsubscribe(Unsubscribe {
            packet_id: random_id(rng),
            filters: (0..rng.random_range(1..4)).map(|_| random_filter(rng)).collect(),
        }),
        10 => Packet::Unsuback {
            packet_id: random_id(rng),
        },
        11 => Packet::Pingreq,
        12 => Packet::Pingresp,
        _ => Packet::Disconnect,
    }
}
