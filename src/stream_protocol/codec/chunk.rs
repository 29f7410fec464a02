//! Deliver frames: messages go to a subscriber in chunks, laid out as
//! RabbitMQ's stream log (osiris) stores them, since that is what the
//! clients parse: a header with the first offset, the entry count, the
//! timestamp and a CRC of the data, then one entry per message (a 4-byte
//! size whose top bit says "simple entry", then the AMQP 1.0 message).
//! A chunk's entries have consecutive offsets: the clients number them from
//! the first.

use bytes::{BufMut, BytesMut};

use super::key;
use super::primitives::{begin_frame, end_frame};

/// Magic 5, format version 0, in one byte as osiris writes it.
const MAGIC_VERSION: u8 = 0x50;
/// A chunk of user messages (not tracking data).
const CHUNK_TYPE_USER: u8 = 0;
/// Bytes from the chunk's start to its data.
const HEADER_LEN: usize = 48;

/// A chunk being written into an outgoing buffer.
pub struct ChunkWriter {
    frame: usize,
    header: usize,
    entries: u16,
    entry: usize,
    first_offset: u64,
}

impl ChunkWriter {
    /// Starts a deliver frame for `subscription_id` whose first message has
    /// offset `first_offset` and was stored at `timestamp_ms`.
    pub fn begin(out: &mut BytesMut, subscription_id: u8, first_offset: u64, timestamp_ms: i64) -> ChunkWriter {
        let frame = begin_frame(out, key::DELIVER, 1);
        out.put_u8(subscription_id);
        let header = out.len();
        out.put_u8(MAGIC_VERSION);
        out.put_u8(CHUNK_TYPE_USER);
        out.put_u16(0); // entries, set at the end
        out.put_u32(0); // records, set at the end
        out.put_i64(timestamp_ms);
        out.put_u64(0); // epoch
        out.put_u64(first_offset);
        out.put_u32(0); // CRC of the data, set at the end
        out.put_u32(0); // data length, set at the end
        out.put_u32(0); // trailer length
        out.put_u32(0); // Bloom filter size and reserved bytes
        debug_assert_eq!(out.len() - header, HEADER_LEN);
        ChunkWriter {
            frame,
            header,
            entries: 0,
            entry: 0,
            first_offset,
        }
    }

    /// The offset the next entry must have.
    pub fn next_offset(&self) -> u64 {
        self.first_offset + u64::from(self.entries)
    }

    /// Entries so far.
    pub fn entries(&self) -> u16 {
        self.entries
    }

    /// Bytes of entries so far.
    pub fn data_len(&self, out: &BytesMut) -> usize {
        out.len() - self.header - HEADER_LEN
    }

    /// Starts an entry; write the message into `out`, then call
    /// [`ChunkWriter::end_entry`].
    pub fn begin_entry(&mut self, out: &mut BytesMut) {
        self.entry = out.len();
        out.put_u32(0);
    }

    /// Ends the entry begun last.
    pub fn end_entry(&mut self, out: &mut BytesMut) {
        let size = (out.len() - self.entry - 4) as u32 & 0x7fff_ffff;
        out[self.entry..self.entry + 4].copy_from_slice(&size.to_be_bytes());
        self.entries += 1;
    }

    /// Drops the entry begun last (its message could not be written).
    pub fn cancel_entry(&mut self, out: &mut BytesMut) {
        out.truncate(self.entry);
    }

    /// Completes the header and the frame.
    pub fn finish(self, out: &mut BytesMut) {
        let h = self.header;
        let data = h + HEADER_LEN;
        let crc = crc32fast::hash(&out[data..]);
        let data_len = (out.len() - data) as u32;
        out[h + 2..h + 4].copy_from_slice(&self.entries.to_be_bytes());
        out[h + 4..h + 8].copy_from_slice(&u32::from(self.entries).to_be_bytes());
        out[h + 32..h + 36].copy_from_slice(&crc.to_be_bytes());
        out[h + 36..h + 40].copy_from_slice(&data_len.to_be_bytes());
        end_frame(out, self.frame);
    }

    /// Drops a chunk that got no entry.
    pub fn abandon(self, out: &mut BytesMut) {
        out.truncate(self.frame);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_counts_its_entries_and_checks_its_data() {
        let mut out = BytesMut::new();
        let mut c = ChunkWriter::begin(&mut out, 7, 100, 5);
        for m in [&b"one"[..], b"three"] {
            c.begin_entry(&mut out);
            out.put_slice(m);
            c.end_entry(&mut out);
        }
        assert_eq!(c.next_offset(), 102);
        c.finish(&mut out);
        let size = u32::from_be_bytes(out[..4].try_into().unwrap()) as usize;
        assert_eq!(size + 4, out.len());
        // The data length counts exactly the entries.
        let h = &out[9..];
        assert_eq!(u32::from_be_bytes(h[36..40].try_into().unwrap()) as usize, h.len() - 48);
        assert_eq!(&out[4..8], &[0, 8, 0, 1]);
        assert_eq!(out[8], 7);
        let h = &out[9..];
        assert_eq!(h[0], 0x50);
        assert_eq!(u16::from_be_bytes([h[2], h[3]]), 2);
        assert_eq!(u64::from_be_bytes(h[24..32].try_into().unwrap()), 100);
        let data = &h[48..];
        assert_eq!(data, b"\0\0\0\x03one\0\0\0\x05three");
        assert_eq!(u32::from_be_bytes(h[32..36].try_into().unwrap()), crc32fast::hash(data));
    }
}
