//! The fixed header that starts every MQTT packet: packet type, flags and the
//! variable-length "remaining length" (MQTT 3.1.1 section 2.2).
//!
//! Checked byte by byte as it arrives, so a peer sending garbage or an
//! oversized packet is refused before its body is buffered.

use bytes::{BufMut, BytesMut};

use crate::mqtt::codec::error::{DecodeError, EncodeError};

/// The largest remaining length the four-byte encoding can express.
pub const MAX_REMAINING_LENGTH: usize = 268_435_455;

/// The control packet types: fourteen in MQTT 3.1.1, AUTH added by MQTT 5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PacketType {
    Connect = 1,
    Connack = 2,
    Publish = 3,
    Puback = 4,
    Pubrec = 5,
    Pubrel = 6,
    Pubcomp = 7,
    Subscribe = 8,
    Suback = 9,
    Unsubscribe = 10,
    Unsuback = 11,
    Pingreq = 12,
    Pingresp = 13,
    Disconnect = 14,
    Auth = 15,
}

impl PacketType {
    /// The type for the high nibble of the first byte; `None` for the
    /// reserved value 0.
    fn from_nibble(nibble: u8) -> Option<PacketType> {
        Some(match nibble {
            1 => PacketType::Connect,
            2 => PacketType::Connack,
            3 => PacketType::Publish,
            4 => PacketType::Puback,
            5 => PacketType::Pubrec,
            6 => PacketType::Pubrel,
            7 => PacketType::Pubcomp,
            8 => PacketType::Subscribe,
            9 => PacketType::Suback,
            10 => PacketType::Unsubscribe,
            11 => PacketType::Unsuback,
            12 => PacketType::Pingreq,
            13 => PacketType::Pingresp,
            14 => PacketType::Disconnect,
            15 => PacketType::Auth,
            _ => return None,
        })
    }

    /// The packet type name, for errors.
    pub(crate) fn name(self) -> &'static str {
        match self {
            PacketType::Connect => "CONNECT",
            PacketType::Connack => "CONNACK",
            PacketType::Publish => "PUBLISH",
            PacketType::Puback => "PUBACK",
            PacketType::Pubrec => "PUBREC",
            PacketType::Pubrel => "PUBREL",
            PacketType::Pubcomp => "PUBCOMP",
            PacketType::Subscribe => "SUBSCRIBE",
            PacketType::Suback => "SUBACK",
            PacketType::Unsubscribe => "UNSUBSCRIBE",
            PacketType::Unsuback => "UNSUBACK",
            PacketType::Pingreq => "PINGREQ",
            PacketType::Pingresp => "PINGRESP",
            PacketType::Disconnect => "DISCONNECT",
            PacketType::Auth => "AUTH",
        }
    }

    /// The flags nibble this type must carry (section 2.2.2); PUBLISH's flags
    /// carry DUP, QoS and RETAIN instead and are checked on their own.
    pub(crate) fn required_flags(self) -> u8 {
        match self {
            PacketType::Pubrel | PacketType::Subscribe | PacketType::Unsubscribe => 0b0010,
            _ => 0,
        }
    }

    /// The remaining length of packet types whose size is fixed; MQTT 5
    /// lets acknowledgements and DISCONNECT carry reason codes and
    /// properties, so only the pings keep a fixed size there.
    fn fixed_remaining_length(self, v5: bool) -> Option<usize> {
        if v5 {
            return matches!(self, PacketType::Pingreq | PacketType::Pingresp).then_some(0);
        }
        match self {
            PacketType::Connack
            | PacketType::Puback
            | PacketType::Pubrec
            | PacketType::Pubrel
            | PacketType::Pubcomp
            | PacketType::Unsuback => Some(2),
            PacketType::Pingreq | PacketType::Pingresp | PacketType::Disconnect => Some(0),
            _ => None,
        }
    }

    /// The first byte of a packet of this type with its required flags.
    pub(crate) fn first_byte(self) -> u8 {
        ((self as u8) << 4) | self.required_flags()
    }
}

/// A parsed fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FixedHeader {
    pub(crate) packet_type: PacketType,
    /// The low nibble of the first byte (already checked).
    pub(crate) flags: u8,
    /// Bytes taken by the fixed header itself (2 to 5).
    pub(crate) header_len: usize,
    /// Bytes that follow the fixed header.
    pub(crate) remaining_len: usize,
}

/// Reads the fixed header at the start of `buf`; `v5` when the connection
/// speaks MQTT 5.
///
/// Returns `Ok(None)` while more bytes are needed. The first byte is checked
/// as soon as it is there: reserved packet types (AUTH before MQTT 5), wrong
/// flags [MQTT-2.2.2-1/-2], PUBLISH QoS 3 [MQTT-3.3.1-4] and DUP on QoS 0
/// [MQTT-3.3.1-2]. Fixed-size packet types must announce their size.
pub(crate) fn parse_fixed_header(buf: &[u8], v5: bool) -> Result<Option<FixedHeader>, DecodeError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let packet_type = PacketType::from_nibble(first >> 4)
        .filter(|t| v5 || *t != PacketType::Auth)
        .ok_or(DecodeError::ReservedPacketType(first >> 4))?;
    let flags = first & 0x0f;
    if packet_type == PacketType::Publish {
        let qos = (flags >> 1) & 0b11;
        if qos == 3 {
            return Err(DecodeError::InvalidPublishQos);
        }
        if qos == 0 && flags & 0b1000 != 0 {
            return Err(DecodeError::DupOnQos0);
        }
    } else if flags != packet_type.required_flags() {
        return Err(DecodeError::InvalidFlags {
            packet: packet_type.name(),
            flags,
        });
    }
    let mut remaining_len = 0usize;
    for i in 0..4 {
        let Some(&byte) = buf.get(1 + i) else {
            return Ok(None);
        };
        remaining_len |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            if let Some(expected) = packet_type.fixed_remaining_length(v5)
                && remaining_len != expected
            {
                return Err(DecodeError::InvalidRemainingLength {
                    packet: packet_type.name(),
                    len: remaining_len,
                    expected,
                });
            }
            return Ok(Some(FixedHeader {
                packet_type,
                flags,
                header_len: 2 + i,
                remaining_len,
            }));
        }
    }
    Err(DecodeError::MalformedRemainingLength)
}

/// How many bytes the remaining length `len` takes on the wire.
pub(crate) fn remaining_length_len(len: usize) -> usize {
    match len {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// Writes a first byte and remaining length; fails if `len` exceeds
/// [`MAX_REMAINING_LENGTH`].
pub(crate) fn put_fixed_header(out: &mut BytesMut, first: u8, len: usize) -> Result<(), EncodeError> {
    if len > MAX_REMAINING_LENGTH {
        return Err(EncodeError::PacketTooLarge(len));
    }
    out.reserve(1 + remaining_length_len(len) + len);
    out.put_u8(first);
    let mut rest = len;
    loop {
        // Truncation intended: the low seven bits of what is left.
        let byte = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            out.put_u8(byte);
            return Ok(());
        }
        out.put_u8(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(bytes: &[u8]) -> Result<Option<FixedHeader>, DecodeError> {
        parse_fixed_header(bytes, false)
    }

    #[test]
    fn remaining_length_boundaries() {
        // Table 2.4 of the specification.
        let cases: [(usize, &[u8]); 8] = [
            (0, &[0x00]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (16_383, &[0xff, 0x7f]),
            (16_384, &[0x80, 0x80, 0x01]),
            (2_097_151, &[0xff, 0xff, 0x7f]),
            (2_097_152, &[0x80, 0x80, 0x80, 0x01]),
            (268_435_455, &[0xff, 0xff, 0xff, 0x7f]),
        ];
        for (len, encoded) in cases {
            let mut out = BytesMut::new();
            put_fixed_header(&mut out, 0x30, len).unwrap();
            assert_eq!(&out[1..], encoded, "{len}");
            assert_eq!(remaining_length_len(len), encoded.len());
            let parsed = header(&out).unwrap().unwrap();
            assert_eq!(parsed.remaining_len, len);
            assert_eq!(parsed.header_len, 1 + encoded.len());
        }
    }

    #[test]
    fn too_long_to_encode() {
        let mut out = BytesMut::new();
        assert_eq!(
            put_fixed_header(&mut out, 0x30, MAX_REMAINING_LENGTH + 1),
            Err(EncodeError::PacketTooLarge(MAX_REMAINING_LENGTH + 1))
        );
    }

    #[test]
    fn fifth_length_byte_is_malformed() {
        assert_eq!(
            header(&[0x30, 0xff, 0xff, 0xff, 0xff]),
            Err(DecodeError::MalformedRemainingLength)
        );
        assert_eq!(
            header(&[0x30, 0x80, 0x80, 0x80, 0x80, 0x01]),
            Err(DecodeError::MalformedRemainingLength)
        );
    }

    #[test]
    fn incomplete_headers_wait() {
        assert_eq!(header(&[]), Ok(None));
        assert_eq!(header(&[0x30]), Ok(None));
        assert_eq!(header(&[0x30, 0x80]), Ok(None));
        assert_eq!(header(&[0x30, 0xff, 0xff, 0xff]), Ok(None));
    }

    #[test]
    fn reserved_packet_types() {
        assert_eq!(header(&[0x00, 0x00]), Err(DecodeError::ReservedPacketType(0)));
        assert_eq!(header(&[0xf0, 0x00]), Err(DecodeError::ReservedPacketType(15)));
        // Refused from the first byte alone.
        assert_eq!(header(&[0xf0]), Err(DecodeError::ReservedPacketType(15)));
        // AUTH exists in MQTT 5.
        assert!(parse_fixed_header(&[0xf0, 0x00], true).unwrap().is_some());
    }

    #[test]
    fn required_flags() {
        // [MQTT-3.6.1-1], [MQTT-3.8.1-1], [MQTT-3.10.1-1]: 0b0010 and nothing else.
        for (first, name) in [(0x60, "PUBREL"), (0x80, "SUBSCRIBE"), (0xa0, "UNSUBSCRIBE")] {
            for flags in (0..16u8).filter(|f| *f != 2) {
                assert_eq!(
                    header(&[first | flags]),
                    Err(DecodeError::InvalidFlags { packet: name, flags }),
                    "{name} {flags}"
                );
            }
            assert!(header(&[first | 2]).is_ok());
        }
        // [MQTT-2.2.2-2]: every other type (but PUBLISH) needs 0.
        for ty in [1u8, 2, 4, 5, 7, 9, 11, 12, 13, 14] {
            for flags in 1..16u8 {
                assert!(matches!(
                    header(&[(ty << 4) | flags]),
                    Err(DecodeError::InvalidFlags { .. })
                ));
            }
        }
    }

    #[test]
    fn publish_flags() {
        assert_eq!(header(&[0x36]), Err(DecodeError::InvalidPublishQos));
        assert_eq!(header(&[0x3f]), Err(DecodeError::InvalidPublishQos));
        assert_eq!(header(&[0x38]), Err(DecodeError::DupOnQos0));
        for ok in [0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x3a, 0x3b, 0x3c, 0x3d] {
            assert_eq!(header(&[ok]), Ok(None), "{ok:#x}");
        }
    }

    #[test]
    fn fixed_size_packets_must_announce_their_size() {
        assert_eq!(
            header(&[0x40, 0x03]),
            Err(DecodeError::InvalidRemainingLength {
                packet: "PUBACK",
                len: 3,
                expected: 2
            })
        );
        assert_eq!(
            header(&[0xc0, 0x01]),
            Err(DecodeError::InvalidRemainingLength {
                packet: "PINGREQ",
                len: 1,
                expected: 0
            })
        );
        assert!(header(&[0xe0, 0x00]).unwrap().is_some());
        // MQTT 5 acknowledgements may carry a reason code and properties.
        assert!(parse_fixed_header(&[0x40, 0x03], true).unwrap().is_some());
        assert!(parse_fixed_header(&[0xc0, 0x01], true).is_err());
    }
}
