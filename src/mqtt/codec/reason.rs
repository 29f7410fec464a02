//! Reason codes: the one-byte outcome MQTT 5 packets carry (section 2.4),
//! and their mapping onto the fewer return codes of MQTT 3.1.1.
//!
//! The packet model uses reason codes for every revision, so the session
//! logic names one outcome ("bad user name or password") and the encoder
//! writes what the client's revision has for it.

use std::fmt;

/// The outcome of an operation, as MQTT 5 numbers it. Values below 0x80 are
/// successes, 0x80 and above failures.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReasonCode(pub u8);

impl ReasonCode {
    /// Success; also "granted QoS 0" in SUBACK and "normal disconnection".
    pub const SUCCESS: ReasonCode = ReasonCode(0x00);
    /// SUBACK: granted QoS 1.
    pub const GRANTED_QOS_1: ReasonCode = ReasonCode(0x01);
    /// SUBACK: granted QoS 2.
    pub const GRANTED_QOS_2: ReasonCode = ReasonCode(0x02);
    /// DISCONNECT: the client wants its will published.
    pub const DISCONNECT_WITH_WILL: ReasonCode = ReasonCode(0x04);
    /// PUBACK/PUBREC: accepted, but nobody subscribes to the topic.
    pub const NO_MATCHING_SUBSCRIBERS: ReasonCode = ReasonCode(0x10);
    /// UNSUBACK: the filter was not subscribed.
    pub const NO_SUBSCRIPTION_EXISTED: ReasonCode = ReasonCode(0x11);
    /// AUTH: continue the authentication exchange.
    pub const CONTINUE_AUTHENTICATION: ReasonCode = ReasonCode(0x18);
    /// AUTH: re-authenticate.
    pub const REAUTHENTICATE: ReasonCode = ReasonCode(0x19);
    /// A failure the broker does not name further.
    pub const UNSPECIFIED_ERROR: ReasonCode = ReasonCode(0x80);
    /// The packet could not be parsed.
    pub const MALFORMED_PACKET: ReasonCode = ReasonCode(0x81);
    /// The packet broke a rule of the protocol.
    pub const PROTOCOL_ERROR: ReasonCode = ReasonCode(0x82);
    /// Valid, but the broker will not do it.
    pub const IMPLEMENTATION_SPECIFIC_ERROR: ReasonCode = ReasonCode(0x83);
    /// CONNACK: the protocol level is not spoken here.
    pub const UNSUPPORTED_PROTOCOL_VERSION: ReasonCode = ReasonCode(0x84);
    /// CONNACK: the client identifier is not allowed.
    pub const CLIENT_IDENTIFIER_NOT_VALID: ReasonCode = ReasonCode(0x85);
    /// CONNACK: wrong user name or password.
    pub const BAD_USER_NAME_OR_PASSWORD: ReasonCode = ReasonCode(0x86);
    /// The client may not do this.
    pub const NOT_AUTHORIZED: ReasonCode = ReasonCode(0x87);
    /// The broker cannot serve the client now.
    pub const SERVER_UNAVAILABLE: ReasonCode = ReasonCode(0x88);
    /// The broker is too busy.
    pub const SERVER_BUSY: ReasonCode = ReasonCode(0x89);
    /// CONNACK: the authentication method is not supported.
    pub const BAD_AUTHENTICATION_METHOD: ReasonCode = ReasonCode(0x8C);
    /// DISCONNECT: nothing arrived within 1.5 times the keep alive.
    pub const KEEP_ALIVE_TIMEOUT: ReasonCode = ReasonCode(0x8D);
    /// DISCONNECT: another connection took the session over.
    pub const SESSION_TAKEN_OVER: ReasonCode = ReasonCode(0x8E);
    /// SUBACK/UNSUBACK: the filter is valid syntax but not accepted.
    pub const TOPIC_FILTER_INVALID: ReasonCode = ReasonCode(0x8F);
    /// The topic name is not accepted.
    pub const TOPIC_NAME_INVALID: ReasonCode = ReasonCode(0x90);
    /// PUBREL/PUBCOMP: no QoS 2 exchange with that packet identifier.
    pub const PACKET_IDENTIFIER_NOT_FOUND: ReasonCode = ReasonCode(0x92);
    /// The client sent more QoS > 0 PUBLISHes than the receive maximum.
    pub const RECEIVE_MAXIMUM_EXCEEDED: ReasonCode = ReasonCode(0x93);
    /// A topic alias outside the announced range, or unknown.
    pub const TOPIC_ALIAS_INVALID: ReasonCode = ReasonCode(0x94);
    /// The packet exceeds the maximum packet size.
    pub const PACKET_TOO_LARGE: ReasonCode = ReasonCode(0x95);
    /// A quota (queue length, connections) is exceeded.
    pub const QUOTA_EXCEEDED: ReasonCode = ReasonCode(0x97);
    /// DISCONNECT: the broker closes the connection on request.
    pub const ADMINISTRATIVE_ACTION: ReasonCode = ReasonCode(0x98);
    /// The payload does not match its payload format indicator.
    pub const PAYLOAD_FORMAT_INVALID: ReasonCode = ReasonCode(0x99);
    /// CONNACK: a will QoS above the broker's maximum QoS.
    pub const QOS_NOT_SUPPORTED: ReasonCode = ReasonCode(0x9B);
    /// SUBACK: shared subscriptions are not supported.
    pub const SHARED_SUBSCRIPTIONS_NOT_SUPPORTED: ReasonCode = ReasonCode(0x9E);
    /// CONNACK: too many failed logins from the client's address.
    pub const CONNECTION_RATE_EXCEEDED: ReasonCode = ReasonCode(0x9F);
    /// DISCONNECT: the connection's time is up (its access token expired).
    pub const MAXIMUM_CONNECT_TIME: ReasonCode = ReasonCode(0xA0);
    /// DISCONNECT: the broker is shutting down.
    pub const SERVER_SHUTTING_DOWN: ReasonCode = ReasonCode(0x8B);

    /// SUBACK's code for a subscription granted with `qos`.
    pub fn granted(qos: crate::mqtt::codec::QoS) -> ReasonCode {
        ReasonCode(qos.bits())
    }

    /// True for the success codes (below 0x80).
    pub fn is_success(self) -> bool {
        self.0 < 0x80
    }

    /// The MQTT 3.1.1 CONNACK return code for this outcome.
    pub fn to_v3_connack(self) -> u8 {
        match self {
            ReasonCode::SUCCESS => 0,
            ReasonCode::UNSUPPORTED_PROTOCOL_VERSION => 1,
            ReasonCode::CLIENT_IDENTIFIER_NOT_VALID => 2,
            ReasonCode::BAD_USER_NAME_OR_PASSWORD | ReasonCode::BAD_AUTHENTICATION_METHOD => 4,
            ReasonCode::NOT_AUTHORIZED | ReasonCode::CONNECTION_RATE_EXCEEDED => 5,
            _ => 3,
        }
    }

    /// The outcome an MQTT 3.1.1 CONNACK return code stands for; `None` for
    /// the reserved 6-255.
    pub fn from_v3_connack(code: u8) -> Option<ReasonCode> {
        Some(match code {
            0 => ReasonCode::SUCCESS,
            1 => ReasonCode::UNSUPPORTED_PROTOCOL_VERSION,
            2 => ReasonCode::CLIENT_IDENTIFIER_NOT_VALID,
            3 => ReasonCode::SERVER_UNAVAILABLE,
            4 => ReasonCode::BAD_USER_NAME_OR_PASSWORD,
            5 => ReasonCode::NOT_AUTHORIZED,
            _ => return None,
        })
    }

    /// The MQTT 3.1.1 SUBACK return code: the granted QoS, or 0x80.
    pub fn to_v3_suback(self) -> u8 {
        if self.0 <= 2 { self.0 } else { 0x80 }
    }

    /// The name the specification gives the code, for logs.
    pub fn name(self) -> &'static str {
        match self.0 {
            0x00 => "success",
            0x01 => "granted QoS 1",
            0x02 => "granted QoS 2",
            0x04 => "disconnect with will message",
            0x10 => "no matching subscribers",
            0x11 => "no subscription existed",
            0x18 => "continue authentication",
            0x19 => "re-authenticate",
            0x80 => "unspecified error",
            0x81 => "malformed packet",
            0x82 => "protocol error",
            0x83 => "implementation specific error",
            0x84 => "unsupported protocol version",
            0x85 => "client identifier not valid",
            0x86 => "bad user name or password",
            0x87 => "not authorized",
            0x88 => "server unavailable",
            0x89 => "server busy",
            0x8A => "banned",
            0x8B => "server shutting down",
            0x8C => "bad authentication method",
            0x8D => "keep alive timeout",
            0x8E => "session taken over",
            0x8F => "topic filter invalid",
            0x90 => "topic name invalid",
            0x91 => "packet identifier in use",
            0x92 => "packet identifier not found",
            0x93 => "receive maximum exceeded",
            0x94 => "topic alias invalid",
            0x95 => "packet too large",
            0x96 => "message rate too high",
            0x97 => "quota exceeded",
            0x98 => "administrative action",
            0x99 => "payload format invalid",
            0x9A => "retain not supported",
            0x9B => "QoS not supported",
            0x9C => "use another server",
            0x9D => "server moved",
            0x9E => "shared subscriptions not supported",
            0x9F => "connection rate exceeded",
            0xA0 => "maximum connect time",
            0xA1 => "subscription identifiers not supported",
            0xA2 => "wildcard subscriptions not supported",
            _ => "unknown reason code",
        }
    }
}

impl fmt::Debug for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#04x} ({})", self.0, self.name())
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#04x})", self.name(), self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v3_connack_codes_round_trip() {
        for code in 0..=5u8 {
            let reason = ReasonCode::from_v3_connack(code).unwrap();
            assert_eq!(reason.to_v3_connack(), code);
        }
        assert_eq!(ReasonCode::from_v3_connack(6), None);
        assert_eq!(ReasonCode::QUOTA_EXCEEDED.to_v3_connack(), 3);
    }

    #[test]
    fn v3_suback_codes() {
        assert_eq!(ReasonCode::GRANTED_QOS_2.to_v3_suback(), 2);
        assert_eq!(ReasonCode::NOT_AUTHORIZED.to_v3_suback(), 0x80);
    }
}
