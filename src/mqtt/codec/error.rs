//! Errors of the MQTT codec: what was wrong with the bytes a peer sent, or why
//! a packet could not be written.
//!
//! Every decoding failure is a protocol violation after which the broker closes
//! the network connection (MQTT 3.1.1 section 4.8); [`DecodeError::rule`] names
//! the normative statement that was broken so the log line says why. The one
//! failure that needs an answer first is
//! [`DecodeError::UnsupportedProtocolLevel`] (CONNACK return code 1).

use thiserror::Error;

/// Why a topic name or topic filter is not acceptable.
///
/// Kept apart from [`DecodeError`] so the same checks can validate topics that
/// did not come off the wire (a will topic given to the broker, a filter typed
/// into the management UI).
#[derive(Error, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicError {
    /// Topic names and filters must be at least one character long.
    #[error("topic is empty [MQTT-4.7.3-1]")]
    Empty,
    /// A topic name (PUBLISH, will topic) contained `+` or `#`.
    #[error("wildcard character in topic name [MQTT-3.3.2-2]")]
    WildcardInName,
    /// `#` was not alone in its level, or not the last level of a filter.
    #[error("multi-level wildcard '#' must be the last level and alone in it [MQTT-4.7.1-2]")]
    MisplacedMultiLevelWildcard,
    /// `+` shared its level with other characters.
    #[error("single-level wildcard '+' must occupy a whole level [MQTT-4.7.1-3]")]
    MisplacedSingleLevelWildcard,
}

impl TopicError {
    /// The normative statement of the MQTT 3.1.1 specification this breaks.
    pub fn rule(&self) -> &'static str {
        match self {
            TopicError::Empty => "MQTT-4.7.3-1",
            TopicError::WildcardInName => "MQTT-3.3.2-2",
            TopicError::MisplacedMultiLevelWildcard => "MQTT-4.7.1-2",
            TopicError::MisplacedSingleLevelWildcard => "MQTT-4.7.1-3",
        }
    }
}

/// Everything that can be wrong with the bytes of an incoming MQTT packet.
///
/// Decoding never panics; it reports one of these so the connection can be
/// closed with a log line naming the broken rule.
#[derive(Error, Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// Packet type 0, or 15 (AUTH) before MQTT 5.
    #[error("reserved packet type {0}")]
    ReservedPacketType(u8),
    /// The low nibble of the first byte is not what the packet type requires:
    /// 0b0010 for PUBREL, SUBSCRIBE and UNSUBSCRIBE, 0 for the others.
    #[error("invalid fixed header flags {flags:#06b} for {packet}")]
    InvalidFlags {
        /// Name of the packet type.
        packet: &'static str,
        /// The flags nibble as received.
        flags: u8,
    },
    /// A PUBLISH with both QoS bits set.
    #[error("PUBLISH with QoS 3 [MQTT-3.3.1-4]")]
    InvalidPublishQos,
    /// A QoS 0 PUBLISH with the DUP flag set.
    #[error("DUP flag set on a QoS 0 PUBLISH [MQTT-3.3.1-2]")]
    DupOnQos0,
    /// The remaining length did not end within four bytes.
    #[error("malformed remaining length (more than 4 bytes)")]
    MalformedRemainingLength,
    /// A packet type with a fixed size announced another size.
    #[error("{packet} with remaining length {len}, expected {expected}")]
    InvalidRemainingLength {
        /// Name of the packet type.
        packet: &'static str,
        /// Remaining length as received.
        len: usize,
        /// The only length this packet type can have.
        expected: usize,
    },
    /// The packet is larger than the broker accepts; found from the fixed
    /// header alone, before the body is buffered.
    #[error("packet of {size} bytes exceeds maximum packet size {max}")]
    PacketTooLarge {
        /// Remaining length announced by the fixed header.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A field ran past the end of the packet; names the field.
    #[error("packet ends inside {0}")]
    Truncated(&'static str),
    /// Bytes left over after the last field of a packet; names the packet.
    #[error("trailing bytes after {0}")]
    TrailingBytes(&'static str),
    /// CONNECT named a protocol other than "MQTT" or "MQIsdp".
    #[error("unknown protocol name [MQTT-3.1.2-1]")]
    InvalidProtocolName,
    /// CONNECT asked for a protocol level this broker does not speak. The
    /// broker answers CONNACK with return code 1 before closing.
    #[error("unsupported protocol level {0} [MQTT-3.1.2-2]")]
    UnsupportedProtocolLevel(u8),
    /// CONNECT with the reserved connect flag (bit 0) set.
    #[error("reserved CONNECT flag set [MQTT-3.1.2-3]")]
    ConnectReservedFlag,
    /// CONNECT without the will flag but with will QoS or will retain set.
    #[error("will QoS or will retain set without the will flag [MQTT-3.1.2-11]")]
    WillFlagsWithoutWill,
    /// CONNECT with a will of QoS 3.
    #[error("will QoS 3 [MQTT-3.1.2-14]")]
    InvalidWillQos,
    /// CONNECT with the password flag but not the user name flag.
    #[error("password flag set without user name flag [MQTT-3.1.2-22]")]
    PasswordWithoutUsername,
    /// A string field was not well-formed UTF-8; names the field.
    #[error("ill-formed UTF-8 in {0} [MQTT-1.5.3-1]")]
    InvalidUtf8(&'static str),
    /// A string field contained U+0000; names the field.
    #[error("U+0000 in {0} [MQTT-1.5.3-2]")]
    NullCharacter(&'static str),
    /// A topic name or filter broke the topic rules.
    #[error("invalid {field}: {error}")]
    InvalidTopic {
        /// Which topic: "topic name", "will topic" or "topic filter".
        field: &'static str,
        /// The rule that was broken.
        error: TopicError,
    },
    /// A packet identifier that must be non-zero was 0; names the packet.
    #[error("packet identifier 0 in {0} [MQTT-2.3.1-1]")]
    ZeroPacketId(&'static str),
    /// SUBSCRIBE without any topic filter.
    #[error("SUBSCRIBE without topic filters [MQTT-3.8.3-3]")]
    NoSubscribeFilters,
    /// UNSUBSCRIBE without any topic filter.
    #[error("UNSUBSCRIBE without topic filters [MQTT-3.10.3-2]")]
    NoUnsubscribeFilters,
    /// A requested QoS byte in SUBSCRIBE above 2 or with reserved bits set.
    #[error("invalid requested QoS byte {0:#04x} [MQTT-3-8.3-4]")]
    InvalidRequestedQos(u8),
    /// CONNACK acknowledge flags with reserved bits 7-1 set.
    #[error("reserved CONNACK flags set: {0:#04x}")]
    InvalidConnackFlags(u8),
    /// CONNACK return code above 5.
    #[error("unknown CONNACK return code {0}")]
    InvalidConnectReturnCode(u8),
    /// SUBACK return code other than 0x00, 0x01, 0x02 or 0x80.
    #[error("invalid SUBACK return code {0:#04x} [MQTT-3.9.3-2]")]
    InvalidSubackReturnCode(u8),
    /// A variable byte integer longer than four bytes; names the field.
    #[error("malformed variable byte integer in {0}")]
    MalformedVarint(&'static str),
    /// A property identifier MQTT 5 does not define.
    #[error("unknown property identifier {0:#04x}")]
    UnknownProperty(u32),
    /// A property this packet may not carry.
    #[error("property {id:#04x} is not allowed in {packet}")]
    PropertyNotAllowed {
        /// The property identifier.
        id: u8,
        /// Where it appeared.
        packet: &'static str,
    },
    /// A property that may appear once appeared twice.
    #[error("property {id:#04x} appears twice in {packet}")]
    DuplicateProperty {
        /// The property identifier.
        id: u8,
        /// Where it appeared.
        packet: &'static str,
    },
    /// A property value the specification does not allow (0 where it must
    /// not be, a flag other than 0 or 1).
    #[error("invalid value of property {field} ({id:#04x})")]
    InvalidPropertyValue {
        /// The property identifier.
        id: u8,
        /// The property name.
        field: &'static str,
    },
    /// A reason code this packet type cannot carry.
    #[error("reason code {code:#04x} is not valid in {packet}")]
    InvalidReasonCode {
        /// Name of the packet type.
        packet: &'static str,
        /// The code as received.
        code: u8,
    },
    /// SUBSCRIBE options with reserved bits set or retain handling 3.
    #[error("invalid subscription options {0:#04x} [MQTT-3.8.3-5]")]
    InvalidSubscriptionOptions(u8),
}

impl DecodeError {
    /// The error with the rule it breaks, named once.
    pub fn with_rule(&self) -> String {
        let text = self.to_string();
        let rule = self.rule();
        if text.contains(rule) {
            text
        } else {
            format!("{text} [{rule}]")
        }
    }

    /// The normative statement of the MQTT 3.1.1 specification this breaks, or
    /// the section for rules the specification states without a number.
    pub fn rule(&self) -> &'static str {
        match self {
            DecodeError::ReservedPacketType(_) => "2.2.1",
            DecodeError::InvalidFlags { packet, .. } => match *packet {
                "PUBREL" => "MQTT-3.6.1-1",
                "SUBSCRIBE" => "MQTT-3.8.1-1",
                "UNSUBSCRIBE" => "MQTT-3.10.1-1",
                _ => "MQTT-2.2.2-1",
            },
            DecodeError::InvalidPublishQos => "MQTT-3.3.1-4",
            DecodeError::DupOnQos0 => "MQTT-3.3.1-2",
            DecodeError::MalformedRemainingLength => "2.2.3",
            DecodeError::InvalidRemainingLength { .. } | DecodeError::Truncated(_) | DecodeError::TrailingBytes(_) => {
                "4.8"
            }
            DecodeError::PacketTooLarge { .. } => "max_packet_size",
            DecodeError::InvalidProtocolName => "MQTT-3.1.2-1",
            DecodeError::UnsupportedProtocolLevel(_) => "MQTT-3.1.2-2",
            DecodeError::ConnectReservedFlag => "MQTT-3.1.2-3",
            DecodeError::WillFlagsWithoutWill => "MQTT-3.1.2-11",
            DecodeError::InvalidWillQos => "MQTT-3.1.2-14",
            DecodeError::PasswordWithoutUsername => "MQTT-3.1.2-22",
            DecodeError::InvalidUtf8(_) => "MQTT-1.5.3-1",
            DecodeError::NullCharacter(_) => "MQTT-1.5.3-2",
            DecodeError::InvalidTopic { error, .. } => error.rule(),
            DecodeError::ZeroPacketId(_) => "MQTT-2.3.1-1",
            DecodeError::NoSubscribeFilters => "MQTT-3.8.3-3",
            DecodeError::NoUnsubscribeFilters => "MQTT-3.10.3-2",
            DecodeError::InvalidRequestedQos(_) => "MQTT-3-8.3-4",
            DecodeError::InvalidConnackFlags(_) => "3.2.2.1",
            DecodeError::InvalidConnectReturnCode(_) => "3.2.2.3",
            DecodeError::InvalidSubackReturnCode(_) => "MQTT-3.9.3-2",
            DecodeError::MalformedVarint(_) => "1.5.5",
            DecodeError::UnknownProperty(_)
            | DecodeError::PropertyNotAllowed { .. }
            | DecodeError::DuplicateProperty { .. }
            | DecodeError::InvalidPropertyValue { .. } => "2.2.2.2",
            DecodeError::InvalidReasonCode { .. } => "2.4",
            DecodeError::InvalidSubscriptionOptions(_) => "MQTT-3.8.3-5",
        }
    }

    /// The MQTT 5 reason code an MQTT 5 server's DISCONNECT gives for this
    /// error: a packet too large, a protocol error (a rule broken by
    /// well-formed bytes), or a malformed packet.
    pub fn reason_code(&self) -> crate::mqtt::codec::ReasonCode {
        use crate::mqtt::codec::ReasonCode;
        match self {
            DecodeError::PacketTooLarge { .. } => ReasonCode::PACKET_TOO_LARGE,
            DecodeError::DuplicateProperty { .. }
            | DecodeError::InvalidPropertyValue { .. }
            | DecodeError::ZeroPacketId(_)
            | DecodeError::InvalidProtocolName
            | DecodeError::UnsupportedProtocolLevel(_)
            | DecodeError::ReservedPacketType(_) => ReasonCode::PROTOCOL_ERROR,
            DecodeError::InvalidTopic {
                field: "topic filter", ..
            } => ReasonCode::PROTOCOL_ERROR,
            _ => ReasonCode::MALFORMED_PACKET,
        }
    }
}

/// Why a packet could not be written.
#[derive(Error, Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// A string or binary field longer than its 16-bit length prefix allows.
    #[error("{field} of {len} bytes exceeds 65535 bytes")]
    FieldTooLong {
        /// Name of the field.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// The packet's remaining length exceeds 268,435,455 bytes, the most the
    /// four-byte length encoding can express.
    #[error("remaining length of {0} bytes exceeds 268435455")]
    PacketTooLarge(usize),
    /// A PUBLISH of QoS 1 or 2 without a packet identifier.
    #[error("QoS > 0 PUBLISH needs a non-zero packet identifier [MQTT-2.3.1-1]")]
    MissingPacketId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_name_the_statement() {
        let flags = |packet| DecodeError::InvalidFlags { packet, flags: 0 };
        assert_eq!(flags("PUBREL").rule(), "MQTT-3.6.1-1");
        assert_eq!(flags("SUBSCRIBE").rule(), "MQTT-3.8.1-1");
        assert_eq!(flags("UNSUBSCRIBE").rule(), "MQTT-3.10.1-1");
        assert_eq!(flags("PUBACK").rule(), "MQTT-2.2.2-1");
        let topic = DecodeError::InvalidTopic {
            field: "topic filter",
            error: TopicError::MisplacedMultiLevelWildcard,
        };
        assert_eq!(topic.rule(), "MQTT-4.7.1-2");
        assert!(topic.to_string().contains("MQTT-4.7.1-2"));
        assert_eq!(DecodeError::UnsupportedProtocolLevel(5).rule(), "MQTT-3.1.2-2");
    }
}
