//! Percent-encoding of URL path segments (vhost `/` becomes `%2F`) and
//! decoding of a URI's user info.

pub use lavinmq::http::path::encode_segment;

/// Decodes `%XX` escapes; malformed escapes are kept as written. Bytes that
/// are not UTF-8 after decoding are replaced, which only matters for user
/// names and passwords that could not be sent anyway.
pub fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(&h), Some(&l)) = (bytes.get(i + 1), bytes.get(i + 2))
            && let (Some(h), Some(l)) = (hex(h), hex(l))
        {
            // Two hex digits fit in a byte.
            out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_reserved_characters() {
        assert_eq!(encode_segment("/"), "%2F");
        assert_eq!(encode_segment("a b/c%d"), "a%20b%2Fc%25d");
        assert_eq!(encode_segment("q-1.x_y~"), "q-1.x_y~");
        assert_eq!(encode_segment("å"), "%C3%A5");
    }

    #[test]
    fn decodes_escapes_and_keeps_malformed_ones() {
        assert_eq!(decode("p%40ss%3Aw"), "p@ss:w");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz"), "%zz");
        assert_eq!(decode("%C3%A5"), "å");
    }
}
