//! The MQTT 3.1, 3.1.1 and 5.0 control packets as values.
//!
//! One model serves every revision: outcomes are [`ReasonCode`]s (the encoder
//! writes the 3.1.1 return code for them) and MQTT 5 properties are optional
//! boxes, absent for older clients and for packets that carry none. Strings
//! and payloads are [`MqttStr`]/[`Bytes`] slices of the buffer they
//! were decoded from, so a PUBLISH reaches a queue without its topic or
//! payload being copied.

use bytes::Bytes;

use crate::mqtt::codec::properties::Properties;
use crate::mqtt::codec::reason::ReasonCode;
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
    /// MQTT 5.0: protocol name "MQTT", level 5.
    V5,
}

impl ProtocolVersion {
    /// The protocol name CONNECT carries for this revision.
    pub fn name(self) -> &'static str {
        match self {
            ProtocolVersion::V3_1 => "MQIsdp",
            ProtocolVersion::V3_1_1 | ProtocolVersion::V5 => "MQTT",
        }
    }

    /// The protocol level CONNECT carries for this revision.
    pub fn level(self) -> u8 {
        match self {
            ProtocolVersion::V3_1 => 3,
            ProtocolVersion::V3_1_1 => 4,
            ProtocolVersion::V5 => 5,
        }
    }

    /// Whether packets carry properties and reason codes.
    pub fn is_v5(self) -> bool {
        self == ProtocolVersion::V5
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
    /// MQTT 5 will properties (delay, expiry, content type, ...).
    pub properties: Option<Box<Properties>>,
}

/// CONNECT: the first packet of a client, opening a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// Protocol revision the client speaks.
    pub protocol: ProtocolVersion,
    /// Whether to discard any previous session and start a new one (MQTT 5's
    /// "clean start").
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
    /// MQTT 5 properties (session expiry, receive maximum, ...).
    pub properties: Option<Box<Properties>>,
}

/// CONNACK: the broker's answer to CONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connack {
    /// Whether the broker resumed a stored session.
    pub session_present: bool,
    /// Outcome of the connection attempt (3.1.1 has return codes 0-5 for
    /// some of them).
    pub code: ReasonCode,
    /// MQTT 5 properties (assigned client id, limits, capabilities).
    pub properties: Option<Box<Properties>>,
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
    /// MQTT 5 properties; `None` when there are none.
    pub properties: Option<Box<Properties>>,
}

/// PUBACK, PUBREC, PUBREL or PUBCOMP: one step of a QoS 1 or 2 exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// Packet identifier of the PUBLISH concerned.
    pub packet_id: u16,
    /// MQTT 5 outcome; always success for older revisions.
    pub reason: ReasonCode,
    /// MQTT 5 properties (reason string, user properties).
    pub properties: Option<Box<Properties>>,
}

impl Ack {
    /// A successful step without properties.
    pub fn ok(packet_id: u16) -> Ack {
        Ack {
            packet_id,
            reason: ReasonCode::SUCCESS,
            properties: None,
        }
    }
}

/// How a subscription wants its messages (the options byte of SUBSCRIBE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SubscriptionOptions {
    /// Highest QoS the client wants.
    pub qos: QoS,
    /// MQTT 5: do not send the client its own publishes.
    pub no_local: bool,
    /// MQTT 5: keep the retain flag of live messages as published.
    pub retain_as_published: bool,
    /// MQTT 5: 0 send retained messages on subscribe, 1 only for a new
    /// subscription, 2 never.
    pub retain_handling: u8,
}

impl SubscriptionOptions {
    /// Options of a plain subscription with `qos` (what MQTT 3.1.1 has).
    pub fn qos(qos: QoS) -> SubscriptionOptions {
        SubscriptionOptions {
            qos,
            no_local: false,
            retain_as_published: false,
            retain_handling: 0,
        }
    }

    /// The options byte.
    pub fn bits(self) -> u8 {
        self.qos.bits()
            | (u8::from(self.no_local) << 2)
            | (u8::from(self.retain_as_published) << 3)
            | (self.retain_handling << 4)
    }
}

/// SUBSCRIBE: a client's request for topic filters, each with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// Packet identifier (non-zero), echoed by SUBACK.
    pub packet_id: u16,
    /// Topic filters with their options, in packet order (at least one).
    pub filters: Vec<(MqttStr, SubscriptionOptions)>,
    /// MQTT 5 properties (subscription identifier, user properties).
    pub properties: Option<Box<Properties>>,
}

/// SUBACK: the broker's answer to SUBSCRIBE, one code per filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suback {
    /// Packet identifier of the SUBSCRIBE answered.
    pub packet_id: u16,
    /// One code per requested filter, in the same order: the granted QoS
    /// (0-2) or a failure (0x80 and above; 3.1.1 only has 0x80).
    pub codes: Vec<ReasonCode>,
    /// MQTT 5 properties (reason string, user properties).
    pub properties: Option<Box<Properties>>,
}

/// UNSUBSCRIBE: a client's request to drop topic filters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    /// Packet identifier (non-zero), echoed by UNSUBACK.
    pub packet_id: u16,
    /// Topic filters to drop (at least one).
    pub filters: Vec<MqttStr>,
    /// MQTT 5 properties (user properties).
    pub properties: Option<Box<Properties>>,
}

/// UNSUBACK: the broker's answer to UNSUBSCRIBE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsuback {
    /// Packet identifier of the UNSUBSCRIBE answered.
    pub packet_id: u16,
    /// MQTT 5: one code per filter; empty for older revisions.
    pub codes: Vec<ReasonCode>,
    /// MQTT 5 properties (reason string, user properties).
    pub properties: Option<Box<Properties>>,
}

/// DISCONNECT (either side) or AUTH: a reason code and properties, both
/// absent before MQTT 5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disconnect {
    /// Why; success means a normal disconnection.
    pub reason: ReasonCode,
    /// MQTT 5 properties (session expiry, reason string, ...).
    pub properties: Option<Box<Properties>>,
}

impl Disconnect {
    /// A normal disconnection without properties.
    pub fn normal() -> Disconnect {
        Disconnect::with(ReasonCode::SUCCESS)
    }

    /// A disconnection for `reason`, without properties.
    pub fn with(reason: ReasonCode) -> Disconnect {
        Disconnect {
            reason,
            properties: None,
        }
    }
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
    Puback(Ack),
    /// PUBREC (type 5): QoS 2 delivery, part 1.
    Pubrec(Ack),
    /// PUBREL (type 6): QoS 2 delivery, part 2.
    Pubrel(Ack),
    /// PUBCOMP (type 7): QoS 2 delivery, part 3.
    Pubcomp(Ack),
    /// SUBSCRIBE (type 8).
    Subscribe(Subscribe),
    /// SUBACK (type 9).
    Suback(Suback),
    /// UNSUBSCRIBE (type 10).
    Unsubscribe(Unsubscribe),
    /// UNSUBACK (type 11).
    Unsuback(Unsuback),
    /// PINGREQ (type 12): client keep-alive probe.
    Pingreq,
    /// PINGRESP (type 13): the broker's answer to PINGREQ.
    Pingresp,
    /// DISCONNECT (type 14): a normal close (no will, unless MQTT 5's
    /// reason 0x04 asks for it), or an MQTT 5 server's reason for closing.
    Disconnect(Disconnect),
    /// AUTH (type 15, MQTT 5 only): enhanced authentication exchange.
    Auth(Disconnect),
}

impl Packet {
    /// The packet type name, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Packet::Connect(_) => "CONNECT",
            Packet::Connack(_) => "CONNACK",
            Packet::Publish(_) => "PUBLISH",
            Packet::Puback(_) => "PUBACK",
            Packet::Pubrec(_) => "PUBREC",
            Packet::Pubrel(_) => "PUBREL",
            Packet::Pubcomp(_) => "PUBCOMP",
            Packet::Subscribe(_) => "SUBSCRIBE",
            Packet::Suback(_) => "SUBACK",
            Packet::Unsubscribe(_) => "UNSUBSCRIBE",
            Packet::Unsuback(_) => "UNSUBACK",
            Packet::Pingreq => "PINGREQ",
            Packet::Pingresp => "PINGRESP",
            Packet::Disconnect(_) => "DISCONNECT",
            Packet::Auth(_) => "AUTH",
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
    fn subscription_options_bits() {
        let o = SubscriptionOptions {
            qos: QoS::ExactlyOnce,
            no_local: true,
            retain_as_published: true,
            retain_handling: 2,
        };
        assert_eq!(o.bits(), 0b10_1110);
        assert_eq!(SubscriptionOptions::qos(QoS::AtLeastOnce).bits(), 1);
    }

    #[test]
    fn publish_stays_small() {
        assert!(std::mem::size_of::<Packet>() <= 96, "{}", std::mem::size_of::<Packet>());
    }
}
