//! Primitive AMQP 0-9-1 readers and writers.
//!
//! Readers take a cursor (`&mut Bytes`), check `remaining()` before touching
//! it so malformed input yields [`CodecError::Truncated`] rather than a panic,
//! and return zero-copy slices for strings. Writers append to a `BytesMut`.
//! Every reader takes a `what` label naming the field, used in errors.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::wire::error::CodecError;
use crate::wire::shortstr::ShortStr;

/// Fails with `Truncated(what)` unless `buf` holds at least `n` more bytes.
#[inline]
fn ensure(buf: &Bytes, n: usize, what: &'static str) -> Result<(), CodecError> {
    if buf.remaining() < n {
        Err(CodecError::Truncated(what))
    } else {
        Ok(())
    }
}

macro_rules! reader {
    ($(#[$doc:meta])* $name:ident, $ty:ty, $get:ident) => {
        $(#[$doc])*
        #[inline]
        pub fn $name(buf: &mut Bytes, what: &'static str) -> Result<$ty, CodecError> {
            ensure(buf, std::mem::size_of::<$ty>(), what)?;
            Ok(buf.$get())
        }
    };
}

reader!(
    /// Reads an octet.
    get_u8, u8, get_u8
);
reader!(
    /// Reads a signed octet (field tables).
    get_i8, i8, get_i8
);
reader!(
    /// Reads a big-endian `short`.
    get_u16, u16, get_u16
);
reader!(
    /// Reads a big-endian signed short (field tables).
    get_i16, i16, get_i16
);
reader!(
    /// Reads a big-endian `long`.
    get_u32, u32, get_u32
);
reader!(
    /// Reads a big-endian signed long (field tables).
    get_i32, i32, get_i32
);
reader!(
    /// Reads a big-endian `longlong` (delivery tags, body sizes, timestamps).
    get_u64, u64, get_u64
);
reader!(
    /// Reads a big-endian signed longlong (field tables).
    get_i64, i64, get_i64
);
reader!(
    /// Reads a big-endian IEEE-754 single (field tables).
    get_f32, f32, get_f32
);
reader!(
    /// Reads a big-endian IEEE-754 double (field tables).
    get_f64, f64, get_f64
);

/// Splits `n` bytes off the cursor without copying.
#[inline]
pub fn get_bytes(buf: &mut Bytes, n: usize, what: &'static str) -> Result<Bytes, CodecError> {
    ensure(buf, n, what)?;
    Ok(buf.split_to(n))
}

/// Reads a short string (octet length + UTF-8 bytes) without copying.
pub fn get_shortstr(buf: &mut Bytes, what: &'static str) -> Result<ShortStr, CodecError> {
    let len = usize::from(get_u8(buf, what)?);
    let raw = get_bytes(buf, len, what)?;
    ShortStr::from_bytes(raw).map_err(|_| CodecError::InvalidUtf8(what))
}

/// Reads a long string (32-bit length + bytes) without copying.
pub fn get_longstr(buf: &mut Bytes, what: &'static str) -> Result<Bytes, CodecError> {
    let len = get_u32(buf, what)?;
    let len = usize::try_from(len).map_err(|_| CodecError::Truncated(what))?;
    get_bytes(buf, len, what)
}

/// Reads one octet of packed bit fields and unpacks the first `N` bits,
/// least significant bit first, as AMQP packs consecutive `bit` arguments.
pub fn get_bits<const N: usize>(buf: &mut Bytes, what: &'static str) -> Result<[bool; N], CodecError> {
    const { assert!(N <= 8, "at most 8 bits fit in one octet") };
    let octet = get_u8(buf, what)?;
    let mut out = [false; N];
    for (i, bit) in out.iter_mut().enumerate() {
        *bit = octet & (1 << i) != 0;
    }
    Ok(out)
}

/// Packs up to 8 consecutive bit arguments into one octet, LSB first.
pub fn put_bits<const N: usize>(buf: &mut BytesMut, bits: [bool; N]) {
    const { assert!(N <= 8, "at most 8 bits fit in one octet") };
    let mut octet = 0u8;
    for (i, bit) in bits.iter().enumerate() {
        if *bit {
            octet |= 1 << i;
        }
    }
    buf.put_u8(octet);
}

/// Writes a short string; fails if it is longer than 255 bytes instead of
/// silently truncating it.
pub fn put_shortstr(buf: &mut BytesMut, s: &str) -> Result<(), CodecError> {
    let len = u8::try_from(s.len()).map_err(|_| CodecError::ShortStrTooLong(s.len()))?;
    buf.put_u8(len);
    buf.put_slice(s.as_bytes());
    Ok(())
}

/// Writes a long string; fails if it does not fit a 32-bit length.
pub fn put_longstr(buf: &mut BytesMut, s: &[u8]) -> Result<(), CodecError> {
    let len = u32::try_from(s.len()).map_err(|_| CodecError::TooLong(s.len()))?;
    buf.put_u32(len);
    buf.put_slice(s);
    Ok(())
}

/// Reserves a 32-bit length slot, returning its position for [`patch_u32_len`].
pub(crate) fn reserve_u32(buf: &mut BytesMut) -> usize {
    let pos = buf.len();
    buf.put_u32(0);
    pos
}

/// Fills a slot from [`reserve_u32`] with the number of bytes written after it.
pub(crate) fn patch_u32_len(buf: &mut BytesMut, pos: usize) -> Result<(), CodecError> {
    let written = buf.len().saturating_sub(pos + 4);
    let len = u32::try_from(written).map_err(|_| CodecError::TooLong(written))?;
    if let Some(slot) = buf.get_mut(pos..pos + 4) {
        slot.copy_from_slice(&len.to_be_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_is_an_error() {
        let mut b = Bytes::from_static(&[1, 2, 3]);
        assert!(get_u32(&mut b, "x").is_err());
        assert_eq!(get_u16(&mut b, "x").unwrap(), 0x0102);
        let mut b = Bytes::from_static(&[5, b'a']);
        assert!(matches!(get_shortstr(&mut b, "s"), Err(CodecError::Truncated("s"))));
        let mut b = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]);
        assert!(get_longstr(&mut b, "l").is_err());
    }

    #[test]
    fn strings_roundtrip() {
        let mut out = BytesMut::new();
        put_shortstr(&mut out, "abc").unwrap();
        put_longstr(&mut out, b"\x00\xff").unwrap();
        let mut b = out.freeze();
        assert_eq!(get_shortstr(&mut b, "s").unwrap(), "abc");
        assert_eq!(&get_longstr(&mut b, "l").unwrap()[..], b"\x00\xff");
        assert!(b.is_empty());
        let long = "x".repeat(256);
        assert!(matches!(
            put_shortstr(&mut BytesMut::new(), &long),
            Err(CodecError::ShortStrTooLong(256))
        ));
        assert!(put_shortstr(&mut BytesMut::new(), &long[..255]).is_ok());
    }

    #[test]
    fn bits_lsb_first() {
        let mut out = BytesMut::new();
        put_bits(&mut out, [true, false, true]);
        assert_eq!(&out[..], &[0b101]);
        let mut b = out.freeze();
        assert_eq!(get_bits::<3>(&mut b, "b").unwrap(), [true, false, true]);
    }
}
