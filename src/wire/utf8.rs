//! UTF-8 validation with an inlined fast path for ASCII.
//!
//! Exchange names, routing keys and topics are short and nearly always ASCII,
//! and they are validated for every message read from a segment or received.
//! `std::str::from_utf8` is an out-of-line call with a setup cost that, at a
//! dozen bytes, outweighs the check itself; the ASCII test below inlines into
//! the caller and only falls back to the full validation for other text.

use std::str::Utf8Error;

/// `bytes` as a `str` if they are well-formed UTF-8.
#[inline]
pub fn to_str(bytes: &[u8]) -> Result<&str, Utf8Error> {
    if bytes.is_ascii() {
        // SAFETY: every ASCII byte sequence is well-formed UTF-8.
        Ok(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::to_str;

    #[test]
    fn agrees_with_the_standard_validation() {
        let cases: [&[u8]; 7] = [
            b"",
            b"amq.topic",
            b"caf\xc3\xa9",
            b"\xff",
            b"a\xc3",
            b"\x7f\x00",
            b"\xe2\x82\xac/x",
        ];
        for bytes in cases {
            assert_eq!(to_str(bytes).ok(), std::str::from_utf8(bytes).ok(), "{bytes:?}");
        }
    }
}
