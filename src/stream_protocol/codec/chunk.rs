//! Deliver frames: messages go to a subscriber in chunks, laid out as
//! RabbitMQ's stream log (osiris) stores them, since that is what the
//! clients parse: a header with the first offset, the entry count, the
//! timestamp and a CRC of the data, then one entry per message (a 4-byte
//! size whose top bit says "simple entry", then the AMQP 1.0 message).
//! A chunk's entries have consecutive offsets: the clients number them from
//! the first.

use bytes::{BufMut, BytesMut};

use super::key;

/// Magic 5, format version 0, in one byte as osiris writes it.
const MAGIC_VERSION: u8 = 0x50;
/// A chunk of user messages (not tracking data).
const CHUNK_TYPE_USER: u8 = 0;
/// Bytes from the chunk's start to its data.
const HEADER_LEN: usize = 48;
/// Bytes from the frame's start to the chunk's: the size, key, version and
/// subscription id.
const FRAME_HEAD_LEN: usize = 4 + 2 + 2 + 1;
/// Bytes a deliver frame adds to its chunk's entries: the frame's size,
/// key, version and subscription id, and the chunk header.
pub const FRAME_OVERHEAD: usize = FRAME_HEAD_LEN + HEADER_LEN;

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
        let frame = out.len();
        put_start(out, subscription_id, first_offset, timestamp_ms);
        debug_assert_eq!(out.len() - frame, FRAME_OVERHEAD);
        ChunkWriter {
            frame,
            header: frame + FRAME_HEAD_LEN,
            entries: 0,
            entry: 0,
            first_offset,
        }
    }

    /// Where in its buffer the frame starts.
    pub fn frame_start(&self) -> usize {
        self.frame
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

    /// Adds `count` entries already encoded (each with its size), as
    /// [`encode_chunk`] lays them out after its header.
    pub fn append_entries(&mut self, out: &mut BytesMut, entries: &[u8], count: u16) {
        self.entry = out.len();
        out.extend_from_slice(entries);
        self.entries += count;
    }

    /// Drops the entry begun last (its message could not be written).
    pub fn cancel_entry(&mut self, out: &mut BytesMut) {
        out.truncate(self.entry);
    }

    /// Completes the header and the frame.
    pub fn finish(self, out: &mut BytesMut) {
        let end = out.len();
        self.seal(out, end);
    }

    /// Completes this chunk without the entry written last, which moves,
    /// unchanged, into a new chunk that it begins (its offset follows this
    /// chunk's; `timestamp_ms` is its message's): for an entry that would
    /// take this chunk's frame past the size the client accepts. The entry's
    /// bytes are copied once, to make room for the new frame's start.
    pub fn split_before_last(mut self, out: &mut BytesMut, subscription_id: u8, timestamp_ms: i64) -> ChunkWriter {
        debug_assert!(self.entries > 1, "a chunk keeps at least one entry");
        let at = self.entry;
        let len = out.len() - at;
        self.entries -= 1;
        let first_offset = self.next_offset();
        self.seal(out, at);
        out.resize(out.len() + FRAME_OVERHEAD, 0);
        out.copy_within(at..at + len, at + FRAME_OVERHEAD);
        let mut start = &mut out[at..at + FRAME_OVERHEAD];
        put_start(&mut start, subscription_id, first_offset, timestamp_ms);
        debug_assert!(start.is_empty());
        ChunkWriter {
            frame: at,
            header: at + FRAME_HEAD_LEN,
            entries: 1,
            entry: at + FRAME_OVERHEAD,
            first_offset,
        }
    }

    /// Completes the header and the frame of a chunk whose data ends at `end`.
    fn seal(&self, out: &mut BytesMut, end: usize) {
        let crc = crc32fast::hash(&out[self.header + HEADER_LEN..end]);
        complete(out, self.frame, end, self.entries, crc);
    }

    /// Drops a chunk that got no entry.
    pub fn abandon(self, out: &mut BytesMut) {
        out.truncate(self.frame);
    }
}

/// Sets the counts, CRC and data length of the chunk in the deliver frame
/// at `frame` whose data ends at `end`, and the frame's size.
fn complete(out: &mut [u8], frame: usize, end: usize, entries: u16, crc: u32) {
    let h = frame + FRAME_HEAD_LEN;
    let data_len = (end - h - HEADER_LEN) as u32;
    out[h + 2..h + 4].copy_from_slice(&entries.to_be_bytes());
    out[h + 4..h + 8].copy_from_slice(&u32::from(entries).to_be_bytes());
    out[h + 32..h + 36].copy_from_slice(&crc.to_be_bytes());
    out[h + 36..h + 40].copy_from_slice(&data_len.to_be_bytes());
    let size = (end - frame - 4) as u32;
    out[frame..frame + 4].copy_from_slice(&size.to_be_bytes());
}

/// A complete chunk (header and entries) for `entries`, whose first has
/// offset `first_offset`, stored at `timestamp_ms`: made once for every
/// subscriber, which sends it in a deliver frame of its own
/// ([`JoinedChunks`]) or adds its entries to one it is writing
/// ([`ChunkWriter::append_entries`]). `data_len` is the
/// entries' total size with their 4-byte size prefixes. At most
/// `u16::MAX` entries.
pub fn encode_chunk<'a>(
    first_offset: u64,
    timestamp_ms: i64,
    entries: impl Iterator<Item = &'a [u8]>,
    data_len: usize,
) -> bytes::Bytes {
    let mut out = BytesMut::with_capacity(FRAME_HEAD_LEN + HEADER_LEN + data_len);
    let mut c = ChunkWriter::begin(&mut out, 0, first_offset, timestamp_ms);
    for e in entries {
        c.begin_entry(&mut out);
        out.put_slice(e);
        c.end_entry(&mut out);
    }
    c.finish(&mut out);
    out.split_off(FRAME_HEAD_LEN).freeze()
}

/// The bytes of entries in a chunk made by [`encode_chunk`].
pub fn chunk_data_len(chunk: &[u8]) -> usize {
    chunk.len().saturating_sub(HEADER_LEN)
}

/// The entries of a chunk made by [`encode_chunk`].
pub fn chunk_data(chunk: &[u8]) -> &[u8] {
    chunk.get(HEADER_LEN..).unwrap_or(&[])
}

/// Entries in a chunk made by [`encode_chunk`].
pub fn chunk_entries(chunk: &[u8]) -> u16 {
    chunk.get(2..4).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

/// True when the entries of `next`, a chunk made by [`encode_chunk`], can
/// join a chunk of `entries` entries and `data_len` bytes of them without
/// passing `max_data` bytes or the count a header holds.
pub fn can_join(entries: u16, data_len: usize, next: &[u8], max_data: usize) -> bool {
    data_len + chunk_data_len(next) <= max_data
        && u32::from(entries) + u32::from(chunk_entries(next)) <= u32::from(u16::MAX)
}

/// A deliver frame whose chunk joins chunks made by [`encode_chunk`] with
/// consecutive offsets: the first one's header, with the counts, length
/// and CRC of them all (the CRCs combined, the data not read again), then
/// their entries. A subscriber behind the writer gets as many messages per
/// credit as it would from RabbitMQ, which batches more per chunk when its
/// writer is busy.
pub struct JoinedChunks {
    frame: usize,
    entries: u16,
    data_len: usize,
    crc: crc32fast::Hasher,
}

impl JoinedChunks {
    /// Starts a frame for `subscription_id` with `first`.
    pub fn begin(out: &mut BytesMut, subscription_id: u8, first: &[u8]) -> JoinedChunks {
        let frame = out.len();
        put_frame_head(out, subscription_id);
        out.extend_from_slice(first);
        JoinedChunks {
            frame,
            entries: chunk_entries(first),
            data_len: chunk_data_len(first),
            crc: Self::crc_of(first),
        }
    }

    /// The CRC of a chunk's data, from its header.
    fn crc_of(chunk: &[u8]) -> crc32fast::Hasher {
        let crc = chunk
            .get(32..36)
            .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        crc32fast::Hasher::new_with_initial_len(crc, chunk_data_len(chunk) as u64)
    }

    /// True when `next` can join without the entries passing `max_data`
    /// bytes or the count its header holds.
    pub fn fits(&self, next: &[u8], max_data: usize) -> bool {
        can_join(self.entries, self.data_len, next, max_data)
    }

    /// Adds the entries of `next`, whose first offset follows the last one's.
    pub fn add(&mut self, out: &mut BytesMut, next: &[u8]) {
        out.extend_from_slice(chunk_data(next));
        self.entries += chunk_entries(next);
        self.data_len += chunk_data_len(next);
        self.crc.combine(&Self::crc_of(next));
    }

    /// Completes the header and the frame.
    pub fn finish(self, out: &mut BytesMut) {
        let end = out.len();
        complete(out, self.frame, end, self.entries, self.crc.finalize());
    }
}

/// Writes the start of a deliver frame, before its chunk (its size left 0).
fn put_frame_head(out: &mut impl BufMut, subscription_id: u8) {
    out.put_u32(0); // frame size, set at the end
    out.put_u16(key::DELIVER);
    out.put_u16(1);
    out.put_u8(subscription_id);
}

/// Writes the start of a deliver frame (its size left 0) and of its chunk
/// header (counts, CRC and data length left 0, set when the chunk is
/// complete).
fn put_start(out: &mut impl BufMut, subscription_id: u8, first_offset: u64, timestamp_ms: i64) {
    put_frame_head(out, subscription_id);
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

    /// The frames in `out`, each with its first offset, entry count and
    /// entries, after checking its sizes and CRC.
    fn frames(mut out: &[u8]) -> Vec<(u64, u16, Vec<Vec<u8>>)> {
        let mut got = Vec::new();
        while !out.is_empty() {
            let size = u32::from_be_bytes(out[..4].try_into().unwrap()) as usize;
            let (frame, rest) = out.split_at(4 + size);
            out = rest;
            assert_eq!(&frame[4..8], &[0, 8, 0, 1]);
            let h = &frame[9..];
            let data = &h[HEADER_LEN..];
            assert_eq!(u32::from_be_bytes(h[36..40].try_into().unwrap()) as usize, data.len());
            assert_eq!(u32::from_be_bytes(h[32..36].try_into().unwrap()), crc32fast::hash(data));
            let count = u16::from_be_bytes([h[2], h[3]]);
            let mut entries = Vec::new();
            let mut d = data;
            while !d.is_empty() {
                let len = u32::from_be_bytes(d[..4].try_into().unwrap()) as usize;
                entries.push(d[4..4 + len].to_vec());
                d = &d[4 + len..];
            }
            assert_eq!(entries.len(), usize::from(count));
            got.push((u64::from_be_bytes(h[24..32].try_into().unwrap()), count, entries));
        }
        got
    }

    #[test]
    fn joined_chunks_are_what_a_writer_makes_of_their_entries() {
        let entries = [&b"one"[..], b"three", b"", b"four"];
        let mut direct = BytesMut::new();
        let mut c = ChunkWriter::begin(&mut direct, 9, 42, 7);
        for m in entries {
            c.begin_entry(&mut direct);
            direct.put_slice(m);
            c.end_entry(&mut direct);
        }
        c.finish(&mut direct);
        let first = encode_chunk(42, 7, entries[..2].iter().copied(), 4 + 3 + 4 + 5);
        let second = encode_chunk(44, 8, entries[2..].iter().copied(), 4 + 4 + 4);
        assert_eq!(chunk_data_len(&first), 16);
        let mut joined = BytesMut::new();
        let mut j = JoinedChunks::begin(&mut joined, 9, &first);
        assert!(j.fits(&second, 28) && !j.fits(&second, 27));
        j.add(&mut joined, &second);
        j.finish(&mut joined);
        assert_eq!(joined, direct);
        // Entries of a chunk added to one being written.
        let mut appended = BytesMut::new();
        let mut c = ChunkWriter::begin(&mut appended, 9, 42, 7);
        for m in &entries[..2] {
            c.begin_entry(&mut appended);
            appended.put_slice(m);
            c.end_entry(&mut appended);
        }
        c.append_entries(&mut appended, chunk_data(&second), chunk_entries(&second));
        assert_eq!(c.next_offset(), 46);
        c.finish(&mut appended);
        assert_eq!(appended, direct);
        // Alone, a chunk goes as it was made.
        let mut alone = BytesMut::new();
        JoinedChunks::begin(&mut alone, 9, &second).finish(&mut alone);
        assert_eq!(frames(&alone), [(44, 2, vec![b"".to_vec(), b"four".to_vec()])]);
    }

    #[test]
    fn the_last_entry_moves_whole_into_a_chunk_of_its_own() {
        let mut out = BytesMut::new();
        let mut c = ChunkWriter::begin(&mut out, 3, 10, 5);
        for m in [&b"one"[..], b"two", b"a longer third"] {
            c.begin_entry(&mut out);
            out.put_slice(m);
            c.end_entry(&mut out);
        }
        let mut c = c.split_before_last(&mut out, 3, 6);
        assert_eq!((c.entries(), c.next_offset()), (1, 13));
        c.begin_entry(&mut out);
        out.put_slice(b"four");
        c.end_entry(&mut out);
        c.finish(&mut out);
        let got = frames(&out);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0, got[0].1), (10, 2));
        assert_eq!(got[0].2, [b"one".to_vec(), b"two".to_vec()]);
        assert_eq!((got[1].0, got[1].1), (12, 2));
        assert_eq!(got[1].2, [b"a longer third".to_vec(), b"four".to_vec()]);
        // The new frame's start is a whole one: subscription id, timestamp.
        let second = 4 + u32::from_be_bytes(out[..4].try_into().unwrap()) as usize;
        assert_eq!(out[second + 8], 3);
        assert_eq!(i64::from_be_bytes(out[second + 17..second + 25].try_into().unwrap()), 6);
        // The overhead is what a frame adds to its entries.
        assert_eq!(second, FRAME_OVERHEAD + 2 * 4 + 6);
    }
}
