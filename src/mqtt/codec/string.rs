//! Zero-copy MQTT strings.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use bytes::Bytes;

use crate::mqtt::codec::error::DecodeError;
use crate::wire::ShortStr;

/// A UTF-8 string as MQTT defines it (section 1.5.3): well-formed, without
/// U+0000, at most 65535 bytes on the wire.
///
/// Backed by the project's [`ShortStr`] (a validated `str` over [`Bytes`]), so
/// topics, client identifiers and filters are slices of the receive buffer
/// rather than copies; MQTT adds the U+0000 rule. The length limit is checked
/// when encoding.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct MqttStr(ShortStr);

impl MqttStr {
    /// Wraps bytes received for `field`, checking that they are well-formed
    /// UTF-8 [MQTT-1.5.3-1] without U+0000 [MQTT-1.5.3-2].
    pub fn from_bytes(bytes: Bytes, field: &'static str) -> Result<Self, DecodeError> {
        let s = ShortStr::from_bytes(bytes).map_err(|_| DecodeError::InvalidUtf8(field))?;
        if s.as_bytes().contains(&0) {
            return Err(DecodeError::NullCharacter(field));
        }
        Ok(MqttStr(s))
    }

    /// Wraps a topic name that is plain ASCII, without U+0000 and without
    /// wildcards, as nearly every topic is; gives the bytes back for anything
    /// else (including the empty name), for the full checks to judge. Two
    /// tight loops over the bytes cost less than validating UTF-8 and then
    /// searching for U+0000 and for the wildcards, for a check every PUBLISH
    /// pays.
    pub fn plain_topic_name(bytes: Bytes) -> Result<Self, Bytes> {
        if bytes.is_empty() || bytes.iter().any(|&b| b == 0 || b == b'+' || b == b'#') {
            return Err(bytes);
        }
        ShortStr::from_ascii(bytes).map(MqttStr)
    }

    /// The string contents.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The underlying buffer, e.g. to store the string without copying.
    pub fn as_bytes(&self) -> &Bytes {
        self.0.as_bytes()
    }

    /// Unwraps the underlying buffer.
    pub fn into_bytes(self) -> Bytes {
        self.0.into_bytes()
    }
}

impl TryFrom<&str> for MqttStr {
    type Error = DecodeError;
    /// Copies `s`, refusing U+0000.
    fn try_from(s: &str) -> Result<Self, DecodeError> {
        MqttStr::try_from(s.to_owned())
    }
}

impl TryFrom<String> for MqttStr {
    type Error = DecodeError;
    /// Takes `s` without copying, refusing U+0000.
    fn try_from(s: String) -> Result<Self, DecodeError> {
        if s.as_bytes().contains(&0) {
            return Err(DecodeError::NullCharacter("string"));
        }
        Ok(MqttStr(ShortStr::from(s)))
    }
}

impl Deref for MqttStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for MqttStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for MqttStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for MqttStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for MqttStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl PartialEq<str> for MqttStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for MqttStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_utf8_and_keeps_the_buffer() {
        let bytes = Bytes::from_static("a/ü/ß".as_bytes());
        let s = MqttStr::from_bytes(bytes.clone(), "topic name").unwrap();
        assert_eq!(s, "a/ü/ß");
        assert_eq!(s.as_bytes().as_ptr(), bytes.as_ptr());
    }

    #[test]
    fn rejects_ill_formed_utf8() {
        // A lone continuation byte, and an encoded surrogate U+D800.
        for bad in [&b"a\x80"[..], &b"\xed\xa0\x80"[..]] {
            let err = MqttStr::from_bytes(Bytes::copy_from_slice(bad), "client identifier").unwrap_err();
            assert_eq!(err, DecodeError::InvalidUtf8("client identifier"));
        }
    }

    #[test]
    fn rejects_null_character() {
        let err = MqttStr::from_bytes(Bytes::from_static(b"a\0b"), "user name").unwrap_err();
        assert_eq!(err, DecodeError::NullCharacter("user name"));
        assert!(MqttStr::try_from("x\0").is_err());
    }

    #[test]
    fn only_plain_ascii_topic_names_take_the_short_check() {
        let plain = MqttStr::plain_topic_name(Bytes::from_static(b"sensors/42/temp ~!")).unwrap();
        assert_eq!(plain, "sensors/42/temp ~!");
        // Everything else goes back to the full checks, which accept the
        // non-ASCII name and refuse the rest.
        for other in [&b""[..], b"a/+", b"a/#", b"a\0b", b"a/\xc3\xbc", b"\xff"] {
            let back = MqttStr::plain_topic_name(Bytes::copy_from_slice(other)).unwrap_err();
            assert_eq!(&back[..], other);
        }
    }

    #[test]
    fn keeps_byte_order_mark() {
        // [MQTT-1.5.3-3]: U+FEFF is kept, not skipped.
        let s = MqttStr::from_bytes(Bytes::from_static(b"\xef\xbb\xbfa"), "topic name").unwrap();
        assert_eq!(s.as_str(), "\u{feff}a");
    }
}
