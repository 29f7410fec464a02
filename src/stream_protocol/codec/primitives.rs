//! Reading and writing the protocol's field types: big-endian integers,
//! strings (an int16 length, -1 for null), bytes (an int32 length) and
//! arrays (an int32 count).

use bytes::{BufMut, Bytes, BytesMut};

use super::DecodeError;

/// A cursor over the fields of one frame.
pub struct Reader<'a> {
    buf: &'a [u8],
    /// The frame, to hand out message bodies without copying.
    whole: Option<&'a Bytes>,
    at: usize,
}

impl<'a> Reader<'a> {
    /// Reads the fields of `frame` (size prefix removed).
    pub fn new(frame: &'a Bytes) -> Self {
        Reader {
            buf: frame,
            whole: Some(frame),
            at: 0,
        }
    }

    /// Reads fields from a plain slice (bytes fields are then copied).
    pub fn over(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            whole: None,
            at: 0,
        }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(n).ok_or(DecodeError::Truncated(what))?;
        let s = self.buf.get(self.at..end).ok_or(DecodeError::Truncated(what))?;
        self.at = end;
        Ok(s)
    }

    /// The next u16, without taking it.
    pub fn peek_u16(&self) -> Option<u16> {
        let b = self.buf.get(self.at..self.at + 2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }

    /// An unsigned byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        Ok(self.take(1, what)?[0])
    }

    /// A big-endian u16.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A big-endian u32.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A big-endian u64.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// A string; null (length -1) reads as `None`.
    pub fn opt_string(&mut self, what: &'static str) -> Result<Option<String>, DecodeError> {
        let len = self.u16(what)? as i16;
        if len < 0 {
            return Ok(None);
        }
        let b = self.take(len as usize, what)?;
        let s = std::str::from_utf8(b).map_err(|_| DecodeError::NotUtf8(what))?;
        Ok(Some(s.to_owned()))
    }

    /// A string; null reads as empty.
    pub fn string(&mut self, what: &'static str) -> Result<String, DecodeError> {
        Ok(self.opt_string(what)?.unwrap_or_default())
    }

    /// A bytes field (int32 length); null reads as empty.
    pub fn bytes(&mut self, what: &'static str) -> Result<Bytes, DecodeError> {
        let len = self.u32(what)? as i32;
        if len < 0 {
            return Ok(Bytes::new());
        }
        let start = self.at;
        let b = self.take(len as usize, what)?;
        Ok(match self.whole {
            Some(whole) => whole.slice(start..start + b.len()),
            None => Bytes::copy_from_slice(b),
        })
    }

    /// An array count, checked against what is left (each item takes at
    /// least `min_item` bytes), so that a forged count cannot make the
    /// reader reserve memory the frame does not back.
    pub fn count(&mut self, min_item: usize, what: &'static str) -> Result<usize, DecodeError> {
        let n = self.u32(what)? as i32;
        if n < 0 {
            return Ok(0);
        }
        let n = n as usize;
        if n.saturating_mul(min_item.max(1)) > self.remaining() {
            return Err(DecodeError::Truncated(what));
        }
        Ok(n)
    }

    /// A map of strings (an array of key, value pairs).
    pub fn string_map(&mut self, what: &'static str) -> Result<Vec<(String, String)>, DecodeError> {
        let n = self.count(4, what)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let k = self.string(what)?;
            let v = self.string(what)?;
            out.push((k, v));
        }
        Ok(out)
    }

    /// An array of strings.
    pub fn strings(&mut self, what: &'static str) -> Result<Vec<String>, DecodeError> {
        let n = self.count(2, what)?;
        (0..n).map(|_| self.string(what)).collect()
    }
}

/// Writes a string field (length-prefixed, truncated to what an int16 holds).
pub fn put_string(out: &mut BytesMut, s: &str) {
    let b = &s.as_bytes()[..s.len().min(i16::MAX as usize)];
    out.put_u16(b.len() as u16);
    out.put_slice(b);
}

/// Writes a map of strings.
pub fn put_string_map<'a>(out: &mut BytesMut, map: impl ExactSizeIterator<Item = (&'a str, &'a str)>) {
    out.put_u32(map.len() as u32);
    for (k, v) in map {
        put_string(out, k);
        put_string(out, v);
    }
}

/// Starts a frame: reserves its size and writes the key and version.
/// Returns where the frame starts, for [`end_frame`].
pub fn begin_frame(out: &mut BytesMut, key: u16, version: u16) -> usize {
    let start = out.len();
    out.put_u32(0);
    out.put_u16(key);
    out.put_u16(version);
    start
}

/// Writes the size of the frame begun at `start`.
pub fn end_frame(out: &mut BytesMut, start: usize) {
    let size = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}
