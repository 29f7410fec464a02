//! Percent-encoding of one URL path segment, for the paths the API hands out
//! (binding `Location` headers) and the clients of the API (lavinmqctl).

/// Encodes `s` for use as one path segment: everything but RFC 3986's
/// unreserved characters is escaped, so `/` (the default vhost), `%`, `?`,
/// `#` and spaces survive the trip.
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
