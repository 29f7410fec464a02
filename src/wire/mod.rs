//! The broker's binary value encoding: short strings, field tables and basic
//! properties in AMQP 0-9-1's format (with RabbitMQ's type tags). The AMQP adapter
//! speaks it on the wire and the store keeps message properties in it on disk, so it
//! sits below both.

pub mod error;
pub mod primitives;
pub mod properties;
pub mod shortstr;
pub mod table;
pub mod utf8;

pub use error::CodecError;
pub use properties::BasicProperties;
pub use shortstr::ShortStr;
pub use table::{FieldTable, FieldValue, PackedTable};
