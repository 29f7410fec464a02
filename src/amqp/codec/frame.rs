//! AMQP 0-9-1 framing: splitting frames off a receive buffer and writing
//! frames straight into a send buffer.
//!
//! Wire layout: `type:u8 channel:u16 size:u32 payload[size] 0xCE`.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::amqp::codec::method::{Method, encode_basic_deliver, encode_basic_get_ok, encode_basic_return};
use crate::wire::error::CodecError;
use crate::wire::primitives::{get_u16, get_u64, patch_u32_len, put_bits, reserve_u32};
use crate::wire::properties::BasicProperties;

/// Frame type octet of a method frame.
pub const FRAME_METHOD: u8 = 1;
/// Frame type octet of a content header frame.
pub const FRAME_HEADER: u8 = 2;
/// Frame type octet of a content body frame.
pub const FRAME_BODY: u8 = 3;
/// Frame type octet of a heartbeat frame.
pub const FRAME_HEARTBEAT: u8 = 8;
/// The octet that terminates every frame.
pub const FRAME_END: u8 = 0xCE;
/// Bytes of framing around a payload: 7-byte header plus the end octet.
/// `frame_max` includes these, so a payload may be at most `frame_max - 8`.
pub const FRAME_OVERHEAD: u32 = 8;
/// Length of the frame header (type, channel, size).
const HEADER_LEN: usize = 7;
/// Class id of `basic`, the only class with content.
const CLASS_BASIC: u16 = 60;

/// One decoded AMQP frame.
///
/// Payloads are zero-copy slices of the receive buffer, so body data can be
/// stored or forwarded without copying.
// The properties are boxed: moving a ~400-byte value through parsing, channel
// and message assembly costs more than one allocation per message.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A method frame.
    Method {
        /// Channel the method applies to (0 = connection).
        channel: u16,
        /// The decoded method.
        method: Method,
    },
    /// A content header frame, following a content-carrying method.
    Header {
        /// Channel of the content.
        channel: u16,
        /// Class of the content (60 = basic for valid clients; the broker checks).
        class_id: u16,
        /// Total size of the body frames that follow.
        body_size: u64,
        /// The decoded properties.
        properties: Box<BasicProperties>,
        /// The property flags and fields exactly as received, so the broker
        /// can store or forward them without re-encoding.
        raw_properties: Bytes,
    },
    /// A content body frame.
    Body {
        /// Channel of the content.
        channel: u16,
        /// A chunk of the message body.
        payload: Bytes,
    },
    /// A heartbeat frame.
    Heartbeat {
        /// Channel of the heartbeat (must be 0 per spec; the broker checks).
        channel: u16,
    },
}

/// Decodes a content header's properties (flags and fields), which must
/// take all of `raw`.
pub fn decode_properties(raw: &Bytes) -> Result<Box<BasicProperties>, CodecError> {
    decode_properties_into(raw, None)
}

/// [`decode_properties`], reusing `spare` (the box of an earlier message)
/// when the message has no property, so that it allocates nothing.
pub fn decode_properties_into(
    raw: &Bytes,
    spare: Option<Box<BasicProperties>>,
) -> Result<Box<BasicProperties>, CodecError> {
    if raw[..] == [0, 0] {
        // No property: most load generators and many applications send
        // none, and a cursor over the shared buffer costs a count on it.
        return Ok(match spare {
            Some(mut b) => {
                *b = BasicProperties::default();
                b
            }
            None => Box::default(),
        });
    }
    let mut cursor = raw.clone();
    let properties = BasicProperties::decode_boxed(&mut cursor)?;
    if !cursor.is_empty() {
        return Err(CodecError::Malformed(format!(
            "{} trailing bytes after content header properties",
            cursor.len()
        )));
    }
    Ok(properties)
}

/// Splits one complete frame off the front of `buf`.
///
/// Returns `Ok(None)` (leaving `buf` untouched) while the frame is incomplete.
/// The frame type and the announced size are checked against `frame_max`
/// (0 = unlimited) from the 7-byte header alone, so an oversized frame fails
/// before its payload is buffered. After a complete frame is split off,
/// a bad end octet or undecodable payload is an error; the caller should then
/// close the connection with [`CodecError::reply_code`].
pub fn parse_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<Frame>, CodecError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let mut header: &[u8] = buf;
    let frame_type = header.get_u8();
    let channel = header.get_u16();
    let size = header.get_u32();
    if !matches!(frame_type, FRAME_METHOD | FRAME_HEADER | FRAME_BODY | FRAME_HEARTBEAT) {
        return Err(CodecError::UnknownFrameType(frame_type));
    }
    if frame_max > 0 && size > frame_max.saturating_sub(FRAME_OVERHEAD) {
        return Err(CodecError::FrameTooLarge { size, max: frame_max });
    }
    let too_large = || CodecError::FrameTooLarge { size, max: frame_max };
    let payload_len = usize::try_from(size).map_err(|_| too_large())?;
    let total = payload_len.checked_add(HEADER_LEN + 1).ok_or_else(too_large)?;
    if buf.len() < total {
        return Ok(None);
    }
    let mut frame = buf.split_to(total).freeze();
    frame.advance(HEADER_LEN);
    let mut payload = frame.split_to(payload_len);
    match frame.first() {
        Some(&FRAME_END) => {}
        Some(&other) => return Err(CodecError::BadFrameEnd(other)),
        None => return Err(CodecError::TruncatedFrame("frame end")),
    }
    let frame = match frame_type {
        FRAME_METHOD => Frame::Method {
            channel,
            method: Method::decode(payload)?,
        },
        FRAME_HEADER => {
            let truncated = |_| CodecError::TruncatedFrame("content header");
            let class_id = get_u16(&mut payload, "class-id").map_err(truncated)?;
            let _weight = get_u16(&mut payload, "weight").map_err(truncated)?;
            let body_size = get_u64(&mut payload, "body-size").map_err(truncated)?;
            let raw_properties = payload;
            let properties = decode_properties(&raw_properties)?;
            Frame::Header {
                channel,
                class_id,
                body_size,
                properties,
                raw_properties,
            }
        }
        FRAME_BODY => Frame::Body { channel, payload },
        _ => {
            if !payload.is_empty() {
                return Err(CodecError::MalformedFrame(format!(
                    "heartbeat frame with {} byte payload",
                    payload.len()
                )));
            }
            Frame::Heartbeat { channel }
        }
    };
    Ok(Some(frame))
}

/// Writes one frame whose payload is produced by `payload`, patching the
/// size afterwards. On error `buf` is restored to its previous length so no
/// partial frame is ever left in the send buffer.
fn write_frame(
    buf: &mut BytesMut,
    frame_type: u8,
    channel: u16,
    payload: impl FnOnce(&mut BytesMut) -> Result<(), CodecError>,
) -> Result<(), CodecError> {
    let start = buf.len();
    buf.put_u8(frame_type);
    buf.put_u16(channel);
    let pos = reserve_u32(buf);
    match payload(buf).and_then(|()| patch_u32_len(buf, pos)) {
        Ok(()) => {
            buf.put_u8(FRAME_END);
            Ok(())
        }
        Err(e) => {
            buf.truncate(start);
            Err(e)
        }
    }
}

/// Writes a method frame.
pub fn write_method(buf: &mut BytesMut, channel: u16, method: &Method) -> Result<(), CodecError> {
    write_frame(buf, FRAME_METHOD, channel, |b| method.encode(b))
}

/// Writes a `basic` content header frame, encoding `properties`.
pub fn write_header(
    buf: &mut BytesMut,
    channel: u16,
    body_size: u64,
    properties: &BasicProperties,
) -> Result<(), CodecError> {
    write_frame(buf, FRAME_HEADER, channel, |b| {
        b.put_u16(CLASS_BASIC);
        b.put_u16(0);
        b.put_u64(body_size);
        properties.encode(b)
    })
}

/// Writes a `basic` content header frame from already-encoded property
/// flags + fields (e.g. `raw_properties` of a received header), avoiding a
/// decode/encode round trip when delivering stored messages.
pub fn write_header_raw(
    buf: &mut BytesMut,
    channel: u16,
    body_size: u64,
    raw_properties: &[u8],
) -> Result<(), CodecError> {
    write_frame(buf, FRAME_HEADER, channel, |b| {
        b.put_u16(CLASS_BASIC);
        b.put_u16(0);
        b.put_u64(body_size);
        b.put_slice(raw_properties);
        Ok(())
    })
}

/// Writes `body` as content body frames of at most `frame_max - 8` payload
/// bytes each (`frame_max` 0 = unlimited). An empty body writes no frame, as
/// the header's body size of 0 already says there is no content.
pub fn write_body(buf: &mut BytesMut, channel: u16, body: &[u8], frame_max: u32) {
    let limit = if frame_max == 0 {
        u32::MAX
    } else {
        // Negotiation guarantees frame_max >= 4096; never let a bogus value
        // produce empty chunks (and thus an endless loop).
        frame_max.saturating_sub(FRAME_OVERHEAD).max(1)
    };
    let chunk_len = usize::try_from(limit).unwrap_or(usize::MAX);
    buf.reserve(
        body.len()
            .saturating_add(body.len().div_ceil(chunk_len).saturating_mul(8)),
    );
    for chunk in body.chunks(chunk_len) {
        buf.put_u8(FRAME_BODY);
        buf.put_u16(channel);
        // chunk.len() <= limit, which fits in u32.
        buf.put_u32(u32::try_from(chunk.len()).unwrap_or(limit));
        buf.put_slice(chunk);
        buf.put_u8(FRAME_END);
    }
}

/// Writes a heartbeat frame (channel 0, empty payload).
pub fn write_heartbeat(buf: &mut BytesMut) {
    buf.put_slice(&[FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END]);
}

/// Writes a basic.deliver method frame from borrowed fields, for the
/// delivery hot path; byte-identical to [`write_method`] with
/// [`Method::BasicDeliver`].
pub fn write_basic_deliver(
    buf: &mut BytesMut,
    channel: u16,
    consumer_tag: &str,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
) -> Result<(), CodecError> {
    write_frame(buf, FRAME_METHOD, channel, |b| {
        b.put_u16(60);
        b.put_u16(60);
        encode_basic_deliver(b, consumer_tag, delivery_tag, redelivered, exchange, routing_key)
    })
}

/// Writes a basic.get-ok method frame from borrowed fields; byte-identical
/// to [`write_method`] with [`Method::BasicGetOk`].
pub fn write_basic_get_ok(
    buf: &mut BytesMut,
    channel: u16,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
    message_count: u32,
) -> Result<(), CodecError> {
    write_frame(buf, FRAME_METHOD, channel, |b| {
        b.put_u16(60);
        b.put_u16(71);
        encode_basic_get_ok(b, delivery_tag, redelivered, exchange, routing_key, message_count)
    })
}

/// Writes a basic.return method frame from borrowed fields (unroutable
/// mandatory publishes); byte-identical to [`write_method`] with
/// [`Method::BasicReturn`].
pub fn write_basic_return(
    buf: &mut BytesMut,
    channel: u16,
    reply_code: u16,
    reply_text: &str,
    exchange: &str,
    routing_key: &str,
) -> Result<(), CodecError> {
    write_frame(buf, FRAME_METHOD, channel, |b| {
        b.put_u16(60);
        b.put_u16(50);
        encode_basic_return(b, reply_code, reply_text, exchange, routing_key)
    })
}

/// Writes a basic.ack method frame (publisher confirms); cannot fail.
pub fn write_basic_ack(buf: &mut BytesMut, channel: u16, delivery_tag: u64, multiple: bool) {
    // An unused second bit is zero, so this is exactly the one-bit encoding.
    write_ack_like(buf, channel, 80, delivery_tag, [multiple, false]);
}

/// Writes a basic.nack method frame (negative publisher confirms); cannot fail.
pub fn write_basic_nack(buf: &mut BytesMut, channel: u16, delivery_tag: u64, multiple: bool, requeue: bool) {
    write_ack_like(buf, channel, 120, delivery_tag, [multiple, requeue]);
}

/// Fixed-size frame shared by ack/nack: tag + one octet of flags.
fn write_ack_like(buf: &mut BytesMut, channel: u16, method_id: u16, delivery_tag: u64, bits: [bool; 2]) {
    buf.put_u8(FRAME_METHOD);
    buf.put_u16(channel);
    buf.put_u32(4 + 8 + 1);
    buf.put_u16(CLASS_BASIC);
    buf.put_u16(method_id);
    buf.put_u64(delivery_tag);
    put_bits(buf, bits);
    buf.put_u8(FRAME_END);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_roundtrip() {
        let mut b = BytesMut::new();
        write_heartbeat(&mut b);
        assert_eq!(
            parse_frame(&mut b, 4096).unwrap(),
            Some(Frame::Heartbeat { channel: 0 })
        );
        assert!(b.is_empty());
    }

    #[test]
    fn heartbeat_with_payload_is_frame_error() {
        let mut b = BytesMut::from(&[8u8, 0, 0, 0, 0, 0, 1, 0, 0xCE][..]);
        let e = parse_frame(&mut b, 0).unwrap_err();
        assert_eq!(e.reply_code(), 501);
    }

    #[test]
    fn ack_nack_match_generic_encoder() {
        for (tag, multiple, requeue) in [(1, false, false), (u64::MAX, true, true), (7, true, false)] {
            let mut fast = BytesMut::new();
            write_basic_ack(&mut fast, 3, tag, multiple);
            let mut slow = BytesMut::new();
            write_method(
                &mut slow,
                3,
                &Method::BasicAck {
                    delivery_tag: tag,
                    multiple,
                },
            )
            .unwrap();
            assert_eq!(fast, slow);

            let mut fast = BytesMut::new();
            write_basic_nack(&mut fast, 3, tag, multiple, requeue);
            let mut slow = BytesMut::new();
            let m = Method::BasicNack {
                delivery_tag: tag,
                multiple,
                requeue,
            };
            write_method(&mut slow, 3, &m).unwrap();
            assert_eq!(fast, slow);
        }
    }

    #[test]
    fn failed_write_leaves_buffer_untouched() {
        let mut b = BytesMut::from(&b"keep"[..]);
        let long = "x".repeat(300);
        assert!(write_basic_deliver(&mut b, 1, &long, 1, false, "", "").is_err());
        assert_eq!(&b[..], b"keep");
    }
}
