//! The stream protocol's wire format, sans IO: frames (a 4-byte size, then a
//! key, a version and the command's fields, all big-endian), the commands a
//! client sends ([`command`]), what the broker answers ([`reply`]) and the
//! chunks that carry messages to subscribers ([`chunk`]).

pub mod chunk;
pub mod command;
pub mod primitives;
pub mod reply;
pub mod sub_batch;

pub use command::Command;

/// The keys of the commands, as RabbitMQ numbers them; a response carries
/// its request's key with the top bit set.
pub mod key {
    pub const DECLARE_PUBLISHER: u16 = 1;
    pub const PUBLISH: u16 = 2;
    pub const PUBLISH_CONFIRM: u16 = 3;
    pub const PUBLISH_ERROR: u16 = 4;
    pub const QUERY_PUBLISHER_SEQUENCE: u16 = 5;
    pub const DELETE_PUBLISHER: u16 = 6;
    pub const SUBSCRIBE: u16 = 7;
    pub const DELIVER: u16 = 8;
    pub const CREDIT: u16 = 9;
    pub const STORE_OFFSET: u16 = 10;
    pub const QUERY_OFFSET: u16 = 11;
    pub const UNSUBSCRIBE: u16 = 12;
    pub const CREATE: u16 = 13;
    pub const DELETE: u16 = 14;
    pub const METADATA: u16 = 15;
    pub const METADATA_UPDATE: u16 = 16;
    pub const PEER_PROPERTIES: u16 = 17;
    pub const SASL_HANDSHAKE: u16 = 18;
    pub const SASL_AUTHENTICATE: u16 = 19;
    pub const TUNE: u16 = 20;
    pub const OPEN: u16 = 21;
    pub const CLOSE: u16 = 22;
    pub const HEARTBEAT: u16 = 23;
    pub const ROUTE: u16 = 24;
    pub const PARTITIONS: u16 = 25;
    pub const CONSUMER_UPDATE: u16 = 26;
    pub const EXCHANGE_COMMAND_VERSIONS: u16 = 27;
    pub const STREAM_STATS: u16 = 28;
    pub const CREATE_SUPER_STREAM: u16 = 29;
    pub const DELETE_SUPER_STREAM: u16 = 30;
    /// The bit that marks a response.
    pub const RESPONSE: u16 = 0x8000;
}

/// Response codes.
pub mod code {
    pub const OK: u16 = 0x01;
    pub const STREAM_DOES_NOT_EXIST: u16 = 0x02;
    pub const SUBSCRIPTION_ID_ALREADY_EXISTS: u16 = 0x03;
    pub const SUBSCRIPTION_ID_DOES_NOT_EXIST: u16 = 0x04;
    pub const STREAM_ALREADY_EXISTS: u16 = 0x05;
    pub const STREAM_NOT_AVAILABLE: u16 = 0x06;
    pub const SASL_MECHANISM_NOT_SUPPORTED: u16 = 0x07;
    pub const AUTHENTICATION_FAILURE: u16 = 0x08;
    pub const SASL_ERROR: u16 = 0x09;
    pub const SASL_CHALLENGE: u16 = 0x0a;
    pub const AUTHENTICATION_FAILURE_LOOPBACK: u16 = 0x0b;
    pub const VIRTUAL_HOST_ACCESS_FAILURE: u16 = 0x0c;
    pub const UNKNOWN_FRAME: u16 = 0x0d;
    pub const FRAME_TOO_LARGE: u16 = 0x0e;
    pub const INTERNAL_ERROR: u16 = 0x0f;
    pub const ACCESS_REFUSED: u16 = 0x10;
    pub const PRECONDITION_FAILED: u16 = 0x11;
    pub const PUBLISHER_DOES_NOT_EXIST: u16 = 0x12;
    pub const NO_OFFSET: u16 = 0x13;
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The frame ended inside a field.
    #[error("frame ends inside {0}")]
    Truncated(&'static str),
    /// A string that is not UTF-8.
    #[error("{0} is not UTF-8")]
    NotUtf8(&'static str),
    /// A field with a value the protocol does not define.
    #[error("invalid {0}")]
    Invalid(&'static str),
    /// A key the broker does not know (answered with `unknown frame`).
    #[error("unknown command key {0}")]
    UnknownKey(u16),
    /// A frame larger than the negotiated maximum.
    #[error("frame of {0} bytes is larger than allowed")]
    TooLarge(u32),
}

/// Takes the next whole frame (without its size prefix) off `buf`; `None`
/// while more bytes are needed. A frame announcing more than `max` bytes
/// (0: no limit) is refused before its bytes are waited for.
pub fn split_frame(buf: &mut bytes::BytesMut, max: u32) -> Result<Option<bytes::Bytes>, DecodeError> {
    let Some(size) = announced_size(buf) else {
        return Ok(None);
    };
    if max > 0 && size > max {
        return Err(DecodeError::TooLarge(size));
    }
    if size < 4 {
        return Err(DecodeError::Truncated("frame header"));
    }
    if buf.len() < 4 + size as usize {
        return Ok(None);
    }
    let mut frame = buf.split_to(4 + size as usize);
    bytes::Buf::advance(&mut frame, 4);
    Ok(Some(frame.freeze()))
}

/// The size a frame at the start of `buf` announces, once its prefix is in.
pub fn announced_size(buf: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(buf.get(..4)?.try_into().ok()?))
}
