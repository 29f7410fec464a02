//! AMQP 1.0 framing: an 8-byte header (size, data offset, type, channel)
//! before each performative, and the protocol headers that open the SASL and
//! AMQP layers.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The protocol header of the SASL layer, which RabbitMQ 4 and we require.
pub const SASL_HEADER: [u8; 8] = *b"AMQP\x03\x01\x00\x00";
/// The protocol header of the AMQP layer, after SASL (or instead of it, which
/// we refuse).
pub const AMQP_HEADER: [u8; 8] = *b"AMQP\x00\x01\x00\x00";
/// The smallest max-frame-size the standard lets a peer ask for.
pub const MIN_MAX_FRAME_SIZE: u32 = 512;

/// Which layer a frame belongs to (the header's type byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// Type 0: performatives of connections, sessions and links.
    Amqp,
    /// Type 1: the SASL exchange before the AMQP layer.
    Sasl,
}

/// One frame: its channel and its body (performative and payload); an empty
/// body is a heartbeat.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Layer of the frame.
    pub kind: FrameKind,
    /// Session channel (0 for connection-level and SASL frames).
    pub channel: u16,
    /// Everything after the extended header.
    pub body: Bytes,
}

/// Why the bytes on the wire are not a frame.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FrameError {
    /// The header's size field is below the header itself or beyond the
    /// negotiated max-frame-size.
    #[error("frame size {size} outside 8..={max}")]
    BadSize {
        /// Size the peer announced.
        size: u32,
        /// Largest size accepted.
        max: u32,
    },
    /// The data offset points inside the header or past the frame.
    #[error("invalid data offset {0}")]
    BadOffset(u8),
    /// A type byte that is neither AMQP nor SASL.
    #[error("unknown frame type {0}")]
    BadType(u8),
}

/// Takes one whole frame from the front of `buf`, or `None` until one is
/// buffered. `max` is the largest frame accepted.
pub fn parse_frame(buf: &mut BytesMut, max: u32) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 8 {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if size < 8 || size > max {
        return Err(FrameError::BadSize { size, max });
    }
    let doff = buf[4];
    if doff < 2 || u32::from(doff) * 4 > size {
        return Err(FrameError::BadOffset(doff));
    }
    let kind = match buf[5] {
        0 => FrameKind::Amqp,
        1 => FrameKind::Sasl,
        other => return Err(FrameError::BadType(other)),
    };
    if buf.len() < size as usize {
        buf.reserve(size as usize - buf.len());
        return Ok(None);
    }
    let channel = u16::from_be_bytes([buf[6], buf[7]]);
    let mut whole = buf.split_to(size as usize);
    whole.advance(usize::from(doff) * 4);
    Ok(Some(Frame {
        kind,
        channel,
        body: whole.freeze(),
    }))
}

/// Writes a frame header for a body of `body_len` bytes that the caller
/// appends next.
pub fn put_header(out: &mut BytesMut, kind: FrameKind, channel: u16, body_len: usize) {
    out.put_u32(8 + body_len as u32);
    out.put_u8(2);
    out.put_u8(match kind {
        FrameKind::Amqp => 0,
        FrameKind::Sasl => 1,
    });
    out.put_u16(channel);
}

/// Appends a frame whose body `write` produces, filling in its size after.
pub fn write_frame(out: &mut BytesMut, kind: FrameKind, channel: u16, write: impl FnOnce(&mut BytesMut)) {
    let start = out.len();
    put_header(out, kind, channel, 0);
    write(out);
    let size = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

/// An empty frame: keeps an idle connection alive.
pub fn write_heartbeat(out: &mut BytesMut) {
    put_header(out, FrameKind::Amqp, 0, 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_wait_for_whole_frames() {
        let mut out = BytesMut::new();
        write_frame(&mut out, FrameKind::Amqp, 7, |b| b.put_slice(b"hello"));
        write_heartbeat(&mut out);
        let bytes = out.freeze();
        for cut in 0..13 {
            let mut part = BytesMut::from(&bytes[..cut]);
            assert!(parse_frame(&mut part, 1024).unwrap().is_none(), "cut at {cut}");
        }
        let mut buf = BytesMut::from(&bytes[..]);
        let f = parse_frame(&mut buf, 1024).unwrap().unwrap();
        assert_eq!((f.kind, f.channel, &f.body[..]), (FrameKind::Amqp, 7, &b"hello"[..]));
        let hb = parse_frame(&mut buf, 1024).unwrap().unwrap();
        assert!(hb.body.is_empty());
        assert!(buf.is_empty());
    }

    #[test]
    fn bad_headers_are_errors() {
        let mut b = BytesMut::from(&[0, 0, 0, 4, 2, 0, 0, 0][..]);
        assert!(matches!(parse_frame(&mut b, 512), Err(FrameError::BadSize { .. })));
        let mut b = BytesMut::from(&[0, 0, 16, 0, 2, 0, 0, 0][..]);
        assert!(matches!(parse_frame(&mut b, 512), Err(FrameError::BadSize { .. })));
        let mut b = BytesMut::from(&[0, 0, 0, 8, 1, 0, 0, 0][..]);
        assert_eq!(parse_frame(&mut b, 512).unwrap_err(), FrameError::BadOffset(1));
        let mut b = BytesMut::from(&[0, 0, 0, 8, 2, 9, 0, 0][..]);
        assert_eq!(parse_frame(&mut b, 512).unwrap_err(), FrameError::BadType(9));
    }
}
