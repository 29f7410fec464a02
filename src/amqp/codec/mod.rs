//! AMQP 0-9-1 framing and methods, sans-IO: bytes in, frames out, and encoders
//! that write frames straight into an output buffer.

pub mod frame;
pub mod method;
pub mod publish_frames;

pub use crate::wire::{BasicProperties, CodecError, FieldTable, FieldValue, ShortStr};
pub use frame::{
    Frame, decode_properties, parse_frame, write_basic_ack, write_basic_deliver, write_basic_get_ok, write_basic_nack,
    write_basic_return, write_body, write_header, write_header_raw, write_heartbeat, write_method,
};
pub use method::Method;
