//! Zero-copy AMQP short strings.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use bytes::Bytes;

use crate::wire::error::CodecError;

/// An AMQP long string: arbitrary bytes with a 32-bit length prefix on the wire.
///
/// Kept as raw [`Bytes`] because the protocol does not require long strings to
/// be UTF-8 (SASL responses, byte payloads, ...).
pub type LongStr = Bytes;

/// A UTF-8 string backed by [`Bytes`], used for AMQP short strings (queue
/// names, routing keys, consumer tags, ...).
///
/// Decoding slices it straight out of the frame buffer without copying; UTF-8
/// is validated once at construction so later `&str` access is free. The
/// 255-byte wire limit is enforced when encoding, not here.
#[derive(Clone, Default)]
pub struct ShortStr(Bytes);

impl ShortStr {
    /// Wraps bytes that must be valid UTF-8, without copying them.
    pub fn from_bytes(bytes: Bytes) -> Result<Self, CodecError> {
        if super::utf8::to_str(&bytes).is_err() {
            return Err(CodecError::InvalidUtf8("short string"));
        }
        Ok(ShortStr(bytes))
    }

    /// Wraps bytes that are ASCII (hence UTF-8), with a check cheaper than
    /// full UTF-8 validation for short strings; gives them back otherwise.
    pub fn from_ascii(bytes: Bytes) -> Result<Self, Bytes> {
        if bytes.is_ascii() {
            Ok(ShortStr(bytes))
        } else {
            Err(bytes)
        }
    }

    /// Builds a short string from a `'static` literal without allocating, for
    /// constants such as exchange type names.
    pub const fn from_static(s: &'static str) -> Self {
        ShortStr(Bytes::from_static(s.as_bytes()))
    }

    /// The string contents.
    pub fn as_str(&self) -> &str {
        // SAFETY: every constructor either validates the bytes with
        // `std::str::from_utf8` or builds them from a `str`/`String`, and the
        // inner `Bytes` is never mutated afterwards.
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }

    /// The underlying buffer, e.g. to store the string without copying.
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }

    /// Unwraps the underlying buffer.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }
}

impl Deref for ShortStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ShortStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for ShortStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.as_str(), f)
    }
}

impl fmt::Debug for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Byte equality that never hands `memcmp` an empty slice.
///
/// An empty [`Bytes`] points at a dangling address. glibc's AVX-512 `memcmp`
/// reads even zero bytes with a masked load, and a masked load from an
/// address with no page behind it takes a microcode assist: comparing the
/// empty default-exchange name this way cost a tenth of the publish path's
/// CPU. Comparing lengths first, and empty slices not at all, avoids it.
#[inline]
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

impl PartialEq for ShortStr {
    fn eq(&self, other: &Self) -> bool {
        same_bytes(&self.0, &other.0)
    }
}

impl Eq for ShortStr {}

impl PartialEq<str> for ShortStr {
    fn eq(&self, other: &str) -> bool {
        same_bytes(&self.0, other.as_bytes())
    }
}

impl PartialEq<&str> for ShortStr {
    fn eq(&self, other: &&str) -> bool {
        same_bytes(&self.0, other.as_bytes())
    }
}

impl Hash for ShortStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Hash exactly like `str` so `Borrow<str>` lookups in maps work.
        self.as_str().hash(state)
    }
}

impl From<&str> for ShortStr {
    fn from(s: &str) -> Self {
        ShortStr(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<String> for ShortStr {
    fn from(s: String) -> Self {
        ShortStr(Bytes::from(s.into_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn validates_utf8() {
        assert!(ShortStr::from_bytes(Bytes::from_static(b"\xff\xfe")).is_err());
        let s = ShortStr::from_bytes(Bytes::from_static("héllo".as_bytes())).unwrap();
        assert_eq!(s.as_str(), "héllo");
        assert_eq!(s.len(), 6);
    }

    #[test]
    fn eq_hash_borrow() {
        let mut m = HashMap::new();
        m.insert(ShortStr::from("q1"), 1);
        assert_eq!(m.get("q1"), Some(&1));
        assert_eq!(ShortStr::from(String::from("a")), ShortStr::from_static("a"));
        assert_eq!(ShortStr::default(), "");
        assert_eq!(format!("{} {:?}", ShortStr::from("x"), ShortStr::from("x")), "x \"x\"");
    }
}
