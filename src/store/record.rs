//! On-disk framing of one message inside a segment file.
//!
//! Every record is `u32 len | u32 crc32 | payload`, little-endian, where the payload is
//! `i64 timestamp | u8 len + exchange | u8 len + routing key | u32 len + properties |
//! u64 len + body`. The length and checksum let recovery stop at the last whole record
//! after a torn write, and the layout lets delivery copy exchange, routing key,
//! properties and body straight out of the mapped file without decoding properties.
//!
//! The checksum is seeded (the initial value of the CRC register) by the segment
//! the record belongs to. A segment file reused for a later segment still holds
//! the records of its earlier life beyond the new data; seeded with another
//! value, none of them can pass for a record of the new segment, because the
//! same bytes never give the same CRC from two different initial values.

/// Bytes before the payload: length and checksum.
pub const RECORD_HEADER: usize = 8;

/// A borrowed view of one stored message, pointing into a mapped segment.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    /// Milliseconds since the Unix epoch when the broker accepted the message.
    pub timestamp: i64,
    /// Exchange the message was published to.
    pub exchange: &'a str,
    /// Routing key the message was published with.
    pub routing_key: &'a str,
    /// Encoded basic properties (flags followed by the present fields).
    pub properties: &'a [u8],
    /// Message body.
    pub body: &'a [u8],
}

/// Why a record could not be read back.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    /// The record ends past the end of the data (a torn tail).
    #[error("record truncated")]
    Truncated,
    /// The checksum does not match the payload.
    #[error("record checksum mismatch")]
    Checksum,
    /// The payload is structurally invalid.
    #[error("record malformed: {0}")]
    Malformed(&'static str),
}

/// Total size (header included) of the record for a message with these parts.
/// Refuses an exchange name or routing key too long for the one-byte length the
/// record gives them (AMQP short strings never are; this guards other paths).
pub fn size(exchange: &str, routing_key: &str, properties: &[u8], body: &[u8]) -> std::io::Result<usize> {
    if exchange.len() > 255 || routing_key.len() > 255 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "exchange name or routing key longer than 255 bytes",
        ));
    }
    Ok(RECORD_HEADER + payload_len(exchange, routing_key, properties.len(), body.len()))
}

/// Size of the payload for a message with these parts.
pub fn payload_len(exchange: &str, routing_key: &str, properties: usize, body: usize) -> usize {
    8 + 1 + exchange.len() + 1 + routing_key.len() + 4 + properties + 8 + body
}

/// Writes a whole record (header and payload) into `dst`, which must be exactly
/// `RECORD_HEADER + payload_len(..)` bytes long, with its checksum seeded by `seed`.
pub fn write(
    dst: &mut [u8],
    seed: u32,
    timestamp: i64,
    exchange: &str,
    routing_key: &str,
    properties: &[u8],
    body: &[u8],
) {
    let payload = dst.len() - RECORD_HEADER;
    let mut at = RECORD_HEADER;
    let mut put = |bytes: &[u8]| {
        dst[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    put(&timestamp.to_le_bytes());
    put(&[exchange.len() as u8]);
    put(exchange.as_bytes());
    put(&[routing_key.len() as u8]);
    put(routing_key.as_bytes());
    put(&(properties.len() as u32).to_le_bytes());
    put(properties);
    put(&(body.len() as u64).to_le_bytes());
    put(body);
    let crc = checksum(seed, &dst[RECORD_HEADER..]);
    dst[0..4].copy_from_slice(&(payload as u32).to_le_bytes());
    dst[4..8].copy_from_slice(&crc.to_le_bytes());
}

/// Everything of a record but its body: the length and checksum header followed by
/// the payload up to and including the body length. Writing these bytes and then
/// the body gives the same record as [`write`].
pub fn head(seed: u32, timestamp: i64, exchange: &str, routing_key: &str, properties: &[u8], body: &[u8]) -> Vec<u8> {
    let payload = payload_len(exchange, routing_key, properties.len(), body.len());
    let mut v = Vec::with_capacity(RECORD_HEADER + payload - body.len());
    v.extend_from_slice(&[0; RECORD_HEADER]);
    v.extend_from_slice(&timestamp.to_le_bytes());
    v.push(exchange.len() as u8);
    v.extend_from_slice(exchange.as_bytes());
    v.push(routing_key.len() as u8);
    v.extend_from_slice(routing_key.as_bytes());
    v.extend_from_slice(&(properties.len() as u32).to_le_bytes());
    v.extend_from_slice(properties);
    v.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let mut crc = crc32fast::Hasher::new_with_initial(seed);
    crc.update(&v[RECORD_HEADER..]);
    crc.update(body);
    let crc = crc.finalize();
    v[0..4].copy_from_slice(&(payload as u32).to_le_bytes());
    v[4..8].copy_from_slice(&crc.to_le_bytes());
    v
}

/// Reads the total record size (header included) at the start of `src`, or `None`
/// when the length field is zero (the unwritten tail of a segment).
pub fn total_len(src: &[u8]) -> Result<Option<usize>, RecordError> {
    let Some(len) = src.get(0..4) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if len == 0 {
        return Ok(None);
    }
    let total = RECORD_HEADER + len;
    if total > src.len() {
        return Err(RecordError::Truncated);
    }
    Ok(Some(total))
}

/// The checksum of a record's payload in a segment whose records are seeded by `seed`.
fn checksum(seed: u32, payload: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new_with_initial(seed);
    crc.update(payload);
    crc.finalize()
}

/// Checks the checksum (seeded by `seed`) of the record at the start of `src`,
/// whose total size is `total`.
pub fn verify(src: &[u8], total: usize, seed: u32) -> Result<(), RecordError> {
    let Some(rec) = src.get(..total) else {
        return Err(RecordError::Truncated);
    };
    let crc = u32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]);
    if checksum(seed, &rec[RECORD_HEADER..]) != crc {
        return Err(RecordError::Checksum);
    }
    parse(rec).map(|_| ())
}

/// The timestamp of the record at the start of `rec`, without parsing the
/// rest (a reader that only steps over records needs no more).
pub fn timestamp(rec: &[u8]) -> Option<i64> {
    let bytes = rec.get(RECORD_HEADER..RECORD_HEADER + 8)?;
    Some(i64::from_le_bytes(bytes.try_into().ok()?))
}

/// Exchange name of a gap record (see [`gap_offsets`]).
const GAP_EXCHANGE: &str = "\0gap";
/// Timestamp of a gap record: before any the broker's clock gives a message.
const GAP_TIMESTAMP: i64 = i64::MIN;

/// Size of a gap record, header included.
pub const GAP_RECORD: usize = RECORD_HEADER + 8 + 1 + GAP_EXCHANGE.len() + 1 + 4 + 8 + 8;

/// A gap record in `dst` (exactly [`GAP_RECORD`] bytes) standing for `offsets`
/// consecutive stream offsets whose messages compaction removed. Streams do not
/// store offsets: a segment's messages are numbered by counting, and a gap
/// keeps that count (see [`gap_offsets`]).
pub fn write_gap(dst: &mut [u8], seed: u32, offsets: u64) {
    write(dst, seed, GAP_TIMESTAMP, GAP_EXCHANGE, "", &[], &offsets.to_le_bytes());
}

/// How many offsets the record `rec` stands for when it is a gap (written by
/// [`write_gap`]); `None` for a message. A message never matches: its
/// timestamp is the broker's clock, and its properties hold at least their
/// flags.
pub fn gap_offsets(rec: &[u8]) -> Option<u64> {
    if timestamp(rec)? != GAP_TIMESTAMP || rec.len() != GAP_RECORD {
        return None;
    }
    let view = parse(rec).ok()?;
    if view.exchange != GAP_EXCHANGE || !view.properties.is_empty() || !view.routing_key.is_empty() {
        return None;
    }
    Some(u64::from_le_bytes(view.body.try_into().ok()?))
}

/// How many stream offsets the (valid) record `rec` takes: one for a message,
/// the count of a gap.
pub fn offsets_taken(rec: &[u8]) -> u64 {
    gap_offsets(rec).unwrap_or(1)
}

/// Parses the record occupying all of `rec` (header included) without copying.
pub fn parse(rec: &[u8]) -> Result<RecordView<'_>, RecordError> {
    let mut cur = Cursor {
        buf: rec,
        at: RECORD_HEADER,
    };
    let timestamp = i64::from_le_bytes(cur.array::<8>()?);
    let ex_len = cur.array::<1>()?[0] as usize;
    let exchange = cur.str(ex_len)?;
    let rk_len = cur.array::<1>()?[0] as usize;
    let routing_key = cur.str(rk_len)?;
    let props_len = u32::from_le_bytes(cur.array::<4>()?) as usize;
    let properties = cur.take(props_len)?;
    let body_len = u64::from_le_bytes(cur.array::<8>()?);
    let body_len = usize::try_from(body_len).map_err(|_| RecordError::Malformed("body length"))?;
    let body = cur.take(body_len)?;
    if cur.at != rec.len() {
        return Err(RecordError::Malformed("trailing bytes"));
    }
    Ok(RecordView {
        timestamp,
        exchange,
        routing_key,
        properties,
        body,
    })
}

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        let end = self.at.checked_add(n).ok_or(RecordError::Truncated)?;
        let s = self.buf.get(self.at..end).ok_or(RecordError::Truncated)?;
        self.at = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn str(&mut self, n: usize) -> Result<&'a str, RecordError> {
        crate::wire::utf8::to_str(self.take(n)?).map_err(|_| RecordError::Malformed("utf-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(body: &[u8]) -> Vec<u8> {
        let n = RECORD_HEADER + payload_len("ex", "rk", 3, body.len());
        let mut v = vec![0u8; n];
        write(&mut v, SEED, 42, "ex", "rk", &[1, 2, 3], body);
        v
    }

    const SEED: u32 = 7;

    #[test]
    fn roundtrip() {
        let v = encode(b"hello");
        assert_eq!(total_len(&v), Ok(Some(v.len())));
        verify(&v, v.len(), SEED).unwrap();
        let r = parse(&v).unwrap();
        assert_eq!((r.timestamp, r.exchange, r.routing_key), (42, "ex", "rk"));
        assert_eq!(r.properties, &[1, 2, 3]);
        assert_eq!(r.body, b"hello");
    }

    #[test]
    fn head_then_body_equals_write() {
        let v = encode(b"some body");
        let mut h = head(SEED, 42, "ex", "rk", &[1, 2, 3], b"some body");
        h.extend_from_slice(b"some body");
        assert_eq!(h, v);
    }

    #[test]
    fn detects_damage() {
        let mut v = encode(b"hello");
        let n = v.len();
        assert_eq!(total_len(&v[..n - 1]), Err(RecordError::Truncated));
        v[n - 2] ^= 0xff;
        assert_eq!(verify(&v, n, SEED), Err(RecordError::Checksum));
        assert_eq!(total_len(&[0, 0, 0, 0]), Ok(None));
    }

    #[test]
    fn gaps_count_offsets_and_messages_are_never_gaps() {
        let mut gap = vec![0u8; GAP_RECORD];
        write_gap(&mut gap, SEED, 17);
        verify(&gap, gap.len(), SEED).unwrap();
        assert_eq!(total_len(&gap), Ok(Some(GAP_RECORD)));
        assert_eq!((gap_offsets(&gap), offsets_taken(&gap)), (Some(17), 17));
        let msg = encode(b"12345678");
        assert_eq!((gap_offsets(&msg), offsets_taken(&msg)), (None, 1));
        // A message shaped like a gap but with properties is a message.
        let mut lookalike = vec![0u8; RECORD_HEADER + payload_len(GAP_EXCHANGE, "", 2, 8)];
        write(&mut lookalike, SEED, GAP_TIMESTAMP, GAP_EXCHANGE, "", &[0, 0], &[1; 8]);
        assert_eq!(gap_offsets(&lookalike), None);
    }

    #[test]
    fn a_record_fails_under_any_other_seed() {
        let v = encode(b"hello");
        for seed in [0, 1, 6, 8, SEED ^ 0x8000_0000, u32::MAX] {
            assert_eq!(verify(&v, v.len(), seed), Err(RecordError::Checksum), "seed {seed}");
        }
        // Seed 0 is the plain CRC-32 of the first format.
        let mut plain = vec![0u8; v.len()];
        write(&mut plain, 0, 42, "ex", "rk", &[1, 2, 3], b"hello");
        assert_eq!(plain[4..8], crc32fast::hash(&plain[RECORD_HEADER..]).to_le_bytes());
        // A seed is what zlib calls the running value: crc32(data, seed).
        assert_eq!((checksum(7, b"abc"), checksum(0, b"abc")), (812_341_063, 891_568_578));
    }
}
