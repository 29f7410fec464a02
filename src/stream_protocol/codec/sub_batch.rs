//! Sub-entry batches: several messages published under one publishing id,
//! optionally compressed together (the clients' `subEntrySize` and
//! `compression` settings).
//!
//! On the wire a sub-entry batch takes the place of a message's size: a
//! byte whose top bit marks the batch and whose next three bits name the
//! compression, the number of messages (u16), the uncompressed size (u32),
//! the size of the data (u32), then the data: each message as a u32 size
//! and its bytes, compressed as a whole.
//!
//! The broker splits a batch into its messages, so that every consumer
//! (stream, AMQP 0-9-1, AMQP 1.0, MQTT) reads them as ordinary messages,
//! each with its own offset, as RabbitMQ numbers the records of a batch.
//! Uncompressed and gzip batches are read, the two codecs every stream client
//! ships with; a batch in another codec is refused with a publish error.

use std::io::Read;

use bytes::Bytes;

use super::DecodeError;
use super::primitives::Reader;

/// The largest batch the broker inflates: a small compressed frame must
/// not be able to make it allocate without bound.
pub const MAX_UNCOMPRESSED: usize = 64 << 20;

/// The compression codes clients use.
mod compression {
    pub const NONE: u8 = 0;
    pub const GZIP: u8 = 1;
}

/// What one publishing id carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// One AMQP 1.0 encoded message.
    Single(Bytes),
    /// The messages of a sub-entry batch, in order.
    Batch(Vec<Bytes>),
    /// A sub-entry batch the broker cannot read, with the reason.
    Unreadable(&'static str),
}

/// True when the next field starts a sub-entry batch rather than a
/// message's size.
pub fn starts_batch(r: &Reader<'_>) -> bool {
    r.peek_u16().is_some_and(|h| h & 0x8000 != 0)
}

/// Reads a sub-entry batch. A batch whose framing is wrong makes the whole
/// frame unreadable (an error); one whose content cannot be read (an unknown
/// codec, corrupt data) is [`Entry::Unreadable`], and only its publishing id
/// is refused.
pub fn read(r: &mut Reader<'_>) -> Result<Entry, DecodeError> {
    let kind = r.u8("sub-entry type")?;
    let count = usize::from(r.u16("sub-entry count")?);
    let uncompressed = r.u32("sub-entry uncompressed size")? as usize;
    let data = r.bytes("sub-entry data")?;
    let codec = (kind & 0x70) >> 4;
    let raw = match codec {
        compression::NONE => data,
        compression::GZIP => match inflate(&data, uncompressed) {
            Ok(raw) => raw,
            Err(why) => return Ok(Entry::Unreadable(why)),
        },
        _ => return Ok(Entry::Unreadable("sub-entry compression other than none and gzip")),
    };
    Ok(split(raw, count).map_or(
        Entry::Unreadable("sub-entry batch does not hold its messages"),
        Entry::Batch,
    ))
}

/// Inflates gzip `data` that should come to `expected` bytes.
fn inflate(data: &[u8], expected: usize) -> Result<Bytes, &'static str> {
    if expected > MAX_UNCOMPRESSED {
        return Err("sub-entry batch larger than 64 MiB uncompressed");
    }
    let mut out = Vec::with_capacity(expected);
    // One byte more than announced, to tell a batch that is longer.
    let limit = expected as u64 + 1;
    flate2::read::GzDecoder::new(data)
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|_| "sub-entry batch is not valid gzip")?;
    if out.len() != expected {
        return Err("sub-entry batch does not inflate to its announced size");
    }
    Ok(Bytes::from(out))
}

/// The `count` size-prefixed messages of `raw`, which they must fill
/// exactly.
fn split(raw: Bytes, count: usize) -> Option<Vec<Bytes>> {
    let mut messages = Vec::with_capacity(count.min(raw.len() / 4));
    let mut at = 0usize;
    for _ in 0..count {
        let size = u32::from_be_bytes(raw.get(at..at + 4)?.try_into().ok()?) as usize;
        let start = at + 4;
        let end = start.checked_add(size)?;
        if end > raw.len() {
            return None;
        }
        messages.push(raw.slice(start..end));
        at = end;
    }
    (at == raw.len()).then_some(messages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};
    use std::io::Write;

    fn messages_data(messages: &[&[u8]]) -> Vec<u8> {
        let mut raw = Vec::new();
        for m in messages {
            raw.extend_from_slice(&(m.len() as u32).to_be_bytes());
            raw.extend_from_slice(m);
        }
        raw
    }

    fn batch(codec: u8, count: u16, uncompressed: usize, data: &[u8]) -> Bytes {
        let mut b = BytesMut::new();
        b.put_u8(0x80 | codec << 4);
        b.put_u16(count);
        b.put_u32(uncompressed as u32);
        b.put_u32(data.len() as u32);
        b.put_slice(data);
        b.freeze()
    }

    fn read_all(frame: &Bytes) -> Entry {
        let mut r = Reader::new(frame);
        assert!(starts_batch(&r));
        let entry = read(&mut r).unwrap();
        assert_eq!(r.remaining(), 0);
        entry
    }

    #[test]
    fn uncompressed_and_gzip_batches_split_into_their_messages() {
        let raw = messages_data(&[b"one", b"", b"three"]);
        let want = Entry::Batch(vec![
            Bytes::from_static(b"one"),
            Bytes::new(),
            Bytes::from_static(b"three"),
        ]);
        assert_eq!(read_all(&batch(0, 3, raw.len(), &raw)), want);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&raw).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(read_all(&batch(1, 3, raw.len(), &gz)), want);
    }

    #[test]
    fn unreadable_batches_are_told_apart_from_broken_frames() {
        let raw = messages_data(&[b"a", b"b"]);
        // Other codecs, wrong counts, sizes and corrupt gzip: refused, framing intact.
        for frame in [
            batch(3, 2, raw.len(), &raw),
            batch(0, 3, raw.len(), &raw),
            batch(0, 1, raw.len(), &raw),
            batch(1, 2, raw.len(), b"not gzip"),
            batch(1, 2, MAX_UNCOMPRESSED + 1, b"x"),
        ] {
            assert!(matches!(read_all(&frame), Entry::Unreadable(_)), "{frame:?}");
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&raw).unwrap();
        let gz = gz.finish().unwrap();
        assert!(matches!(
            read_all(&batch(1, 2, raw.len() - 1, &gz)),
            Entry::Unreadable(_)
        ));
        // A data size beyond the frame breaks the frame.
        let mut cut = batch(0, 2, raw.len(), &raw).to_vec();
        cut.truncate(cut.len() - 1);
        assert!(read(&mut Reader::new(&Bytes::from(cut))).is_err());
    }
}
