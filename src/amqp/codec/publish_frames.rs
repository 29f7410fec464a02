//! The publish fast path's parser: a `basic.publish`, its content header and
//! its body, recognised in the read buffer as one unit.
//!
//! A publishing client sends three frames per message (the method, the content
//! header, and one body frame for any body that fits in `frame_max`). Parsed one
//! at a time, each becomes a [`Frame`](super::Frame) (the method a decoded
//! [`Method`](super::Method)) with its own slice of the buffer, and is handed to
//! the channel on its own. [`peek_publish`] instead reads the fixed layout of
//! the three in place and says where each part lies, so that the connection can
//! split them off the buffer at once and build the message directly.
//!
//! Invariants:
//! - It accepts only what the general parser would accept in the same way:
//!   known frame types on one non-zero channel, every frame within `frame_max`
//!   and ended by `0xCE`, class 60 method 40 with no bytes after its
//!   arguments, a content header of class 60, and a body in exactly one frame
//!   of exactly the announced size (or no body frame for an empty body).
//! - Anything else (an incomplete sequence, a body spread over several frames,
//!   any malformation) gives `None` and leaves the buffer untouched for the
//!   general parser, which handles it and reports errors as it always has.
//! - What it cannot check without allocating is left to the caller, who must
//!   treat a failure as the general parser would: UTF-8 of the exchange and
//!   routing key, and the property fields (see [`PublishFrames`]).

use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};

use super::frame::{FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_METHOD, FRAME_OVERHEAD, decode_properties_into};
use crate::wire::{BasicProperties, CodecError, ShortStr};

/// Length of a frame's header: type, channel, size.
const HEADER_LEN: usize = 7;
/// `class-id method-id reserved-1` at the start of a basic.publish payload.
const PUBLISH_PREFIX: [u8; 4] = [0, 60, 0, 40];
/// `class-id weight body-size`, before the properties in a header payload.
const CONTENT_HEADER_FIXED: usize = 12;

/// Where the parts of one publish lie in the buffer given to [`peek_publish`].
///
/// The exchange and routing key are not yet checked for UTF-8, and the
/// properties (flags and fields, as received) are not yet decoded: the caller
/// does both and treats a failure as a malformed frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishFrames {
    /// The channel all three frames are on (never 0).
    pub channel: u16,
    /// The exchange name's bytes.
    pub exchange: Range<usize>,
    /// The routing key's bytes.
    pub routing_key: Range<usize>,
    /// The mandatory flag.
    pub mandatory: bool,
    /// The immediate flag.
    pub immediate: bool,
    /// The body size the header announced (the length of `body`).
    pub body_size: u64,
    /// The property flags and fields.
    pub properties: Range<usize>,
    /// The body (empty, without a frame, when `body_size` is 0).
    pub body: Range<usize>,
    /// Bytes the frames take, from the start of the buffer.
    pub len: usize,
}

/// The parts of a publish that arrived whole, taken off the read buffer.
pub struct WholePublish {
    /// Exchange it is published to.
    pub exchange: ShortStr,
    /// Its routing key.
    pub routing_key: ShortStr,
    /// The mandatory flag.
    pub mandatory: bool,
    /// The immediate flag.
    pub immediate: bool,
    /// The decoded properties.
    pub properties: Box<BasicProperties>,
    /// The properties as received.
    pub raw_properties: Bytes,
    /// The whole body.
    pub body: Bytes,
}

impl WholePublish {
    /// Splits the publish `p` (found by [`peek_publish`] at the start of
    /// `buf`) off `buf` and checks what `peek_publish` left to check. An
    /// error is a malformed frame, as the general parser would report it.
    pub fn split_off(buf: &mut BytesMut, p: &PublishFrames) -> Result<WholePublish, CodecError> {
        Self::split_off_reusing(buf, p, None)
    }

    /// [`WholePublish::split_off`], reusing `spare` (an earlier message's
    /// properties box) for a message without properties. Inlined into the
    /// read loop, so that the publish is built where it is used rather than
    /// returned and copied (a measurable share of a small message's cost).
    #[inline(always)]
    pub fn split_off_reusing(
        buf: &mut BytesMut,
        p: &PublishFrames,
        spare: Option<Box<BasicProperties>>,
    ) -> Result<WholePublish, CodecError> {
        let mut frames = buf.split_to(p.len).freeze();
        let shortstr = |range: &Range<usize>, what| {
            if range.is_empty() {
                return Ok(ShortStr::default());
            }
            ShortStr::from_bytes(frames.slice(range.clone())).map_err(|_| CodecError::InvalidUtf8(what))
        };
        let exchange = shortstr(&p.exchange, "exchange")?;
        let routing_key = shortstr(&p.routing_key, "routing-key")?;
        // No property set, as most publishers send: a static copy, which
        // takes no count on the shared read buffer (nor gives one back).
        let raw_properties = if frames[p.properties.clone()] == [0, 0] {
            Bytes::from_static(&[0, 0])
        } else {
            frames.slice(p.properties.clone())
        };
        let properties = decode_properties_into(&raw_properties, spare)?;
        // The body is what is left of the frames: no count taken on the
        // shared buffer for it.
        frames.truncate(p.body.end);
        frames.advance(p.body.start);
        Ok(WholePublish {
            exchange,
            routing_key,
            mandatory: p.mandatory,
            immediate: p.immediate,
            properties,
            raw_properties,
            body: frames,
        })
    }
}

/// One frame's type, channel and payload range, if it is complete in `buf`
/// from `at`, within `frame_max` (0 = unlimited) and properly ended.
fn frame_at(buf: &[u8], at: usize, frame_max: u32) -> Option<(u8, u16, Range<usize>)> {
    let header = buf.get(at..at + HEADER_LEN)?;
    let size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]);
    if frame_max > 0 && size > frame_max.saturating_sub(FRAME_OVERHEAD) {
        return None;
    }
    let start = at + HEADER_LEN;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    if *buf.get(end)? != FRAME_END {
        return None;
    }
    Some((header[0], u16::from_be_bytes([header[1], header[2]]), start..end))
}

/// A short string's range at `at` within `payload`, and where it ends.
fn shortstr_at(buf: &[u8], at: usize, end: usize) -> Option<Range<usize>> {
    let len = usize::from(*buf.get(at)?);
    let range = at + 1..at + 1 + len;
    (range.end <= end).then_some(range)
}

/// Recognises `basic.publish` + content header + body at the start of `buf`.
///
/// `None` when the buffer starts with anything else, or with a publish the
/// general parser must handle (see the module's invariants).
pub fn peek_publish(buf: &[u8], frame_max: u32) -> Option<PublishFrames> {
    let (kind, channel, method) = frame_at(buf, 0, frame_max)?;
    if kind != FRAME_METHOD || channel == 0 || buf.get(method.start..method.start + 4)? != PUBLISH_PREFIX {
        return None;
    }
    let exchange = shortstr_at(buf, method.start + 6, method.end)?;
    let routing_key = shortstr_at(buf, exchange.end, method.end)?;
    if routing_key.end + 1 != method.end {
        return None;
    }
    let bits = buf[routing_key.end];

    let (kind, header_channel, header) = frame_at(buf, method.end + 1, frame_max)?;
    if kind != FRAME_HEADER || header_channel != channel || header.len() < CONTENT_HEADER_FIXED + 2 {
        return None;
    }
    let fixed = &buf[header.start..header.start + CONTENT_HEADER_FIXED];
    if fixed[..2] != [0, 60] {
        return None;
    }
    let mut size = [0u8; 8];
    size.copy_from_slice(&fixed[4..12]);
    let body_size = u64::from_be_bytes(size);
    let properties = header.start + CONTENT_HEADER_FIXED..header.end;

    let after_header = header.end + 1;
    let (body, len) = if body_size == 0 {
        (after_header..after_header, after_header)
    } else {
        let (kind, body_channel, body) = frame_at(buf, after_header, frame_max)?;
        if kind != FRAME_BODY || body_channel != channel || body.len() as u64 != body_size {
            return None;
        }
        let len = body.end + 1;
        (body, len)
    };
    Some(PublishFrames {
        channel,
        exchange,
        routing_key,
        mandatory: bits & 1 != 0,
        immediate: bits & 2 != 0,
        body_size,
        properties,
        body,
        len,
    })
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;
    use crate::amqp::codec::{
        BasicProperties, Frame, Method, ShortStr, parse_frame, write_body, write_header, write_method,
    };

    fn publish(channel: u16, exchange: &str, key: &str, body: &[u8], frame_max: u32) -> BytesMut {
        let mut buf = BytesMut::new();
        let method = Method::BasicPublish {
            exchange: ShortStr::from(exchange),
            routing_key: ShortStr::from(key),
            mandatory: true,
            immediate: false,
        };
        write_method(&mut buf, channel, &method).expect("encodes");
        let props = BasicProperties {
            delivery_mode: Some(2),
            content_type: Some(ShortStr::from("text/plain")),
            ..Default::default()
        };
        write_header(&mut buf, channel, body.len() as u64, &props).expect("encodes");
        write_body(&mut buf, channel, body, frame_max);
        buf
    }

    #[test]
    fn finds_the_parts_the_general_parser_finds() {
        let buf = publish(3, "amq.direct", "key", b"hello", 4096);
        let p = peek_publish(&buf, 4096).expect("a whole publish");
        assert_eq!(p.channel, 3);
        assert_eq!(&buf[p.exchange.clone()], b"amq.direct");
        assert_eq!(&buf[p.routing_key.clone()], b"key");
        assert!(p.mandatory && !p.immediate);
        assert_eq!((p.body_size, &buf[p.body.clone()]), (5, &b"hello"[..]));
        assert_eq!(p.len, buf.len());

        let mut general = buf.clone();
        let _method = parse_frame(&mut general, 4096).expect("parses").expect("whole");
        let Some(Frame::Header { raw_properties, .. }) = parse_frame(&mut general, 4096).expect("parses") else {
            panic!("a content header");
        };
        assert_eq!(&buf[p.properties.clone()], &raw_properties[..]);
    }

    #[test]
    fn an_empty_body_has_no_body_frame() {
        let mut buf = publish(1, "", "q", b"", 4096);
        buf.extend_from_slice(&publish(1, "", "q", b"next", 4096));
        let p = peek_publish(&buf, 4096).expect("a whole publish");
        assert_eq!((p.body_size, p.body.len()), (0, 0));
        let next = peek_publish(&buf[p.len..], 4096).expect("the next publish");
        assert_eq!(next.body_size, 4);
    }

    #[test]
    fn leaves_everything_unusual_to_the_general_parser() {
        let whole = publish(1, "", "q", b"0123456789", 4096);
        // Every incomplete prefix.
        for cut in 0..whole.len() {
            assert_eq!(peek_publish(&whole[..cut], 4096), None, "cut at {cut}");
        }
        // A body in two frames.
        let split = publish(1, "", "q", &[7u8; 10], 13);
        assert_eq!(peek_publish(&split, 0), None);
        // Frames over frame_max.
        assert_eq!(peek_publish(&whole, 12), None);
        // Any single byte changed in the framing or the fixed fields.
        let p = peek_publish(&whole, 4096).expect("whole");
        let header_at = p.routing_key.end + 2;
        let body_at = p.properties.end + 1;
        for at in (0..7)
            .chain(7..11)
            .chain([p.routing_key.end + 1])
            .chain(header_at..header_at + 7 + 2)
            .chain([p.properties.end])
            .chain(body_at..body_at + 7)
            .chain([whole.len() - 1])
        {
            let mut bad = whole.clone();
            bad[at] ^= 0x40;
            assert_eq!(peek_publish(&bad, 4096), None, "byte {at} changed");
        }
        // Another method.
        let mut other = BytesMut::new();
        write_method(
            &mut other,
            1,
            &Method::BasicQos {
                prefetch_size: 0,
                prefetch_count: 1,
                global: false,
            },
        )
        .expect("encodes");
        assert_eq!(peek_publish(&other, 4096), None);
    }
}
