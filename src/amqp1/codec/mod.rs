//! The AMQP 1.0 wire format without I/O: the type system, frames and the
//! performatives carried in them.

pub mod frame;
pub mod performative;
pub mod transfer;
pub mod types;

pub use frame::{Frame, FrameError, FrameKind};
pub use types::{DecodeError, Descriptor, Value};
