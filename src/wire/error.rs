//! Error type shared by every part of the AMQP 0-9-1 codec.

use thiserror::Error;

/// AMQP reply code 501: the peer sent a frame that could not be framed.
pub const FRAME_ERROR: u16 = 501;
/// AMQP reply code 502: a frame was well framed but its contents were invalid.
pub const SYNTAX_ERROR: u16 = 502;
/// AMQP reply code 540: the peer used a class or method this codec does not know.
pub const NOT_IMPLEMENTED: u16 = 540;

/// Everything that can go wrong while decoding or encoding AMQP 0-9-1 data.
///
/// Every decoder in this crate reports problems through this type instead of
/// panicking, so the broker can close the connection with a proper reply code
/// (see [`CodecError::reply_code`]).
#[derive(Error, Debug)]
pub enum CodecError {
    /// A frame announced a payload larger than the negotiated `frame_max`
    /// allows; detected from the frame header alone.
    #[error("frame payload of {size} bytes exceeds maximum of {max} (frame_max)")]
    FrameTooLarge {
        /// Payload size announced in the frame header.
        size: u32,
        /// Negotiated frame_max the size was checked against.
        max: u32,
    },
    /// The octet after a frame payload was not the mandatory 0xCE frame end.
    #[error("bad frame end octet 0x{0:02x}, expected 0xce")]
    BadFrameEnd(u8),
    /// The frame type octet is not method (1), header (2), body (3) or heartbeat (8).
    #[error("unknown frame type {0}")]
    UnknownFrameType(u8),
    /// A method frame named a class/method pair that is not part of AMQP 0-9-1.
    #[error("unknown method {class}.{method}")]
    UnknownMethod {
        /// Class id from the method frame.
        class: u16,
        /// Method id from the method frame.
        method: u16,
    },
    /// A frame's fixed structure (class/method ids, content header prelude)
    /// ended early; names the missing part.
    #[error("frame truncated while reading {0}")]
    TruncatedFrame(&'static str),
    /// A frame was structurally invalid (e.g. a heartbeat with a payload).
    #[error("malformed frame: {0}")]
    MalformedFrame(String),
    /// A method argument, property or table entry ran out of bytes; names the
    /// field being read.
    #[error("truncated while reading {0}")]
    Truncated(&'static str),
    /// A short string (or a key) that must be UTF-8 was not; names the field.
    #[error("invalid UTF-8 in {0}")]
    InvalidUtf8(&'static str),
    /// A field table or array used a type tag that is not in RabbitMQ's table.
    #[error("invalid field value type tag 0x{0:02x}")]
    InvalidFieldType(u8),
    /// Field-level contents were invalid in some other way (trailing bytes,
    /// excessive nesting, ...).
    #[error("malformed: {0}")]
    Malformed(String),
    /// Encoding: a short string longer than 255 bytes cannot be represented.
    #[error("short string of {0} bytes exceeds 255 bytes")]
    ShortStrTooLong(usize),
    /// Encoding: a long string, table or array longer than `u32::MAX` bytes
    /// cannot be represented.
    #[error("value of {0} bytes exceeds u32 length prefix")]
    TooLong(usize),
}

impl CodecError {
    /// The AMQP reply code the broker should use when closing the connection
    /// because of this error: 501 FRAME_ERROR for framing problems, 540
    /// NOT_IMPLEMENTED for unknown methods, 502 SYNTAX_ERROR for bad contents.
    pub fn reply_code(&self) -> u16 {
        match self {
            CodecError::FrameTooLarge { .. }
            | CodecError::BadFrameEnd(_)
            | CodecError::UnknownFrameType(_)
            | CodecError::TruncatedFrame(_)
            | CodecError::MalformedFrame(_) => FRAME_ERROR,
            CodecError::UnknownMethod { .. } => NOT_IMPLEMENTED,
            CodecError::Truncated(_)
            | CodecError::InvalidUtf8(_)
            | CodecError::InvalidFieldType(_)
            | CodecError::Malformed(_)
            | CodecError::ShortStrTooLong(_)
            | CodecError::TooLong(_) => SYNTAX_ERROR,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_codes() {
        assert_eq!(CodecError::BadFrameEnd(0).reply_code(), 501);
        assert_eq!(CodecError::FrameTooLarge { size: 1, max: 0 }.reply_code(), 501);
        assert_eq!(CodecError::UnknownFrameType(9).reply_code(), 501);
        assert_eq!(CodecError::TruncatedFrame("x").reply_code(), 501);
        assert_eq!(CodecError::UnknownMethod { class: 1, method: 2 }.reply_code(), 540);
        assert_eq!(CodecError::Truncated("x").reply_code(), 502);
        assert_eq!(CodecError::InvalidUtf8("x").reply_code(), 502);
        assert_eq!(CodecError::InvalidFieldType(0).reply_code(), 502);
        assert_eq!(CodecError::Malformed(String::new()).reply_code(), 502);
    }
}
