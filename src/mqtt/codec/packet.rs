//! The MQTT 3.1 / 3.1.1 control packets as values.
//!
//! Strings and payloads are [`MqttStr`]/[`Bytes`] slices of the buffer they
//! were decoded from, so a PUBLISH reaches a queue without its topic or
//! payload being copied.

use bytes::Bytes;

use crate::mqtt::codec::string::MqttStr;

/// Delivery guarantee of a message or subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QoS {
    /// QoS 0: delivered at most once, never acknowledged.
    AtMostOnce = 0,
    /// QoS 1: delivered at least once, acknowledged by PUBACK.
    AtLeastOnce = 1,
    /// QoS 2: delivered exactly once, via PUBREC/PUBREL/PUBCOMP.
    ExactlyOnce = 2,
}

impl QoS {
    /// The QoS for its two-bit wire value; `None` for 3, which is invalid.
    pub fn from_bits(bits: u8) -> Option<QoS> {
        match bits {
            0 => Some(QoS::AtMostOnce),
            1 => Some(QoS::AtLeastOnce),
            2 => Some(QoS::ExactlyOnce),
            _ => None,
        }
    }

    /// The wire value.
    pub fn bits(self) -> u8 {
        self as u8
    }
}

/// Which protocol revision a client speaks, from the CONNECT protocol name and
/// level; the broker answers in the same revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtocolVersion {
    /// MQTT 3.1: protocol name "MQIsdp", level 3.
    V3_1,
    /// MQTT 3.1.1: protocol name "MQTT", level 4.
    V3_1_1,
}

impl ProtocolVersion {
    /// The protocol name CONNECT carries for this revision.
    pub fn name(self) -> &'static str {
        match self {
            ProtocolVersion::V3_1 => "MQIsdp",
            ProtocolVersion::V3_1_1 => "MQTT",
        }
    }

    /// The protocol level CONNECT carries for this revision.
    pub fn level(self) -> u8 {
        match self {
            ProtocolVersion::V3_1 => 3,
            ProtocolVersion::V3_1_1 => 4,
        }
    }
}

/// The message the broker publishes for a client whose connection ends
/// without a DISCONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    /// Topic name the will is published to (no wildcards).
    pub topic: MqttStr,
    /// Application message of the will.
    pub payload: Bytes,
    /// QoS the will is published with.
    pub qos: QoS,
    /// Whether the will is published as a retained message.
    pub retain: bool,
}

/// CONNECT: the first packet of a client, opening a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// Protocol revision the client speaks.
    pub protocol: ProtocolVersion,
    /// Whether to discard any previous session and start a new one.
    pub clean_session: bool,
    /// Keep alive interval in seconds; 0 turns the keep alive off.
    pub keep_alive: u16,
    /// Client identifier; may be empty (the broker then assigns one or refuses
    /// with CONNACK 2, which is session logic, not decoding).
    pub client_id: MqttStr,
    /// The will message, if the will flag was set.
    pub will: Option<Will>,
    /// User name, if the user name flag was set.
    pub username: Option<MqttStr>,
    /// Password (binary data), if the password flag was set.
    pub password: Option<Bytes>,
}

/// CONNACK return codes (MQTT 3.1.1 table 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectReturnCode {
    /// 0: connection accepted.
    Accepted = 0,
    /// 1: the broker does not speak the requested protocol level.
    UnacceptableProtocolVersion = 1,
    /// 2: the client identifier is not allowed.
    IdentifierRejected = 2,
    /// 3: the MQTT service is unavailable.
    ServerUnavailable = 3,
    /// 4: malformed user name or password.
    BadUsernameOrPassword = 4,
    /// 5: the client is not authorized to connect.
    NotAuthorized = 5,
}

impl ConnectReturnCode {
    /// The return code for its wire value; `None` for the reserved 6-255.
    pub fn from_u8(code: u8) -> Option<ConnectReturnCode> {
        match code {
            0 => Some(ConnectReturnCode::Accepted),
            1 => Some(ConnectReturnCode::UnacceptableProtocolVersion),
            2 => Some(ConnectReturnCode::IdentifierRejected),
            3 => Some(ConnectReturnCode::ServerUnavailable),
            4 => Some(ConnectReturnCode::BadUsernameOrPassword),
            5 => Some(ConnectReturnCode::NotAuthorized),
            _ => None,
        }
    }
}

/// CONNACK: the broker's answer to CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connack {
    /// Whether the broker resumed a stored session.
    pub session_present: bool,
    /// Outcome of the connection attempt.
    pub return_code: ConnectReturnCode,
}

/// PUBLISH: an application message, in either direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// Whether this is a redelivery of an earlier attempt (never for QoS 0).
    pub dup: bool,
    /// Delivery guarantee of this transfer.
    pub qos: QoS,
    /// Whether the broker should keep (or this is) the retained message.
    pub retain: bool,
    /// Topic name (no wildcards).
    pub topic: MqttStr,
    /// Packet identifier; 0 for QoS 0 (not on the wire), non-zero otherwise.
    pub packet_id: u16,
    /// The application message.
    pub payload: Bytes,
}

/// SUBACK return code for one requested subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubscribeReturnCode {
    /// The subscription was accepted with this maximum QoS.
    Success(QoS),
    /// 0x80: the subscription was refused.
    Failure,
}

impl SubscribeReturnCode {
    /// The wire value.
    pub fn to_u8(self) -> u8 {
        match self {
            SubscribeReturnCode::Success(qos) => qos.bits(),
            SubscribeReturnCode::Failure => 0x80,
        }
    }

    /// The return code for its wire value; `None` for values the
    /// specification does not allow [MQTT-3.9.3-2].
    pub fn from_u8(code: u8) -> Option<SubscribeReturnCode> {
        match code {
            0x80 => Some(SubscribeReturnCode::Failure),
            bits => QoS::from_bits(bits).map(SubscribeReturnCode::Success),
        }
    }
}

/// SUBSCRIBE: a client's request for topic filters, each with a maximum QoS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// Packet identifier (non-zero), echoed by SUBACK.
    pub packet_id: u16,
    /// Topic filters with their requested QoS, in packet order (at least one).
    pub filters: Vec<(MqttStr, QoS)>,
}

/// SUBACK: the broker's answer to SUBSCRIBE, one code per filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suback {
    /// Packet identifier of the SUBSCRIBE answered.
    pub packet_id: u16,
    /// One return code per requested filter, in the same order.
    pub return_codes: Vec<SubscribeReturnCode>,
}

/// UNSUBSCRIBE: a client's request to drop topic filters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    /// Packet identifier (non-zero), echoed by UNSUBACK.
    pub packet_id: u16,
    /// Topic filters to drop (at least one).
    pub filters: Vec<MqttStr>,
}

/// One MQTT control packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// CONNECT (type 1). Boxed: it is the largest packet and the rarest, and
    /// keeping it out of line keeps every PUBLISH small to move.
    Connect(Box<Connect>),
    /// CONNACK (type 2).
    Connack(Connack),
    /// PUBLISH (type 3).
    Publish(Publish),
    /// PUBACK (type 4): QoS 1 acknowledgement.
    Puback {
        /// Packet identifier of the PUBLISH acknowledged.
        packet_id: u16,
    },
    /// PUBREC (type 5): QoS 2 delivery, part 1.
    Pubrec {
        /// Packet identifier of the PUBLISH received.
        packet_id: u16,
    },
    /// PUBREL (type 6): QoS 2 delivery, part 2.
    Pubrel {
        /// Packet identifier of the PUBLISH released.
        packet_id: u16,
    },
    /// PUBCOMP (type 7): QoS 2 delivery, part 3.
    Pubcomp {
        /// Packet identifier of the PUBLISH completed.
        packet_id: u16,
    },
    /// SUBSCRIBE (type 8).
    Subscribe(Subscribe),
    /// SUBACK (type 9).
    Suback(Suback),
    /// UNSUBSCRIBE (type 10).
    Unsubscribe(Unsubscribe),
    /// UNSUBACK (type 11).
    Unsuback {
        /// Packet identifier of the UNSUBSCRIBE answered.
        packet_id: u16,
    },
    /// PINGREQ (type 12): client keep-alive probe.
    Pingreq,
    /// PINGRESP (type 13): the broker's answer to PINGREQ.
    Pingresp,
    /// DISCONNECT (type 14): the client closes cleanly (no will).
    Disconnect,
}

impl Packet {
    /// The packet type name, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Packet::Connect(_) => "CONNECT",
            Packet::Connack(_) => "CONNACK",
            Packet::Publish(_) => "PUBLISH",
            Packet::Puback { .. } => "PUBACK",
            Packet::Pubrec { .. } => "PUBREC",
            Packet::Pubrel { .. } => "PUBREL",
            Packet::Pubcomp { .. } => "PUBCOMP",
            Packet::Subscribe(_) => "SUBSCRIBE",
            Packet::Suback(_) => "SUBACK",
            Packet::Unsubscribe(_) => "UNSUBSCRIBE",
            Packet::Unsuback { .. } => "UNSUBACK",
            Packet::Pingreq => "PINGREQ",
            Packet::Pingresp => "PINGRESP",
            Packet::Disconnect => "DISCONNECT",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos_bits() {
        for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
            assert_eq!(QoS::from_bits(qos.bits()), Some(qos));
        }
        assert_eq!(QoS::from_bits(3), None);
    }

    #[test]
    fn return_codes() {
        for code in 0..=255u8 {
            if let Some(rc) = SubscribeReturnCode::from_u8(code) {
                assert_eq!(rc.to_u8(), code);
            }
            if let Some(rc) = ConnectReturnCode::from_u8(code) {
                assert_eq!(rc as u8, code);
            }
        }
        assert_eq!(SubscribeReturnCode::from_u8(3), None);
        assert_eq!(SubscribeReturnCode::from_u8(0x81), None);
        assert_eq!(ConnectReturnCode::from_u8(6), None);
    }

    #[test]
    fn publish_stays_small() {
        assert!(std::mem::size_of::<Packet>() <= 96, "{}", std::mem::size_of::<Packet>());
    }
}
