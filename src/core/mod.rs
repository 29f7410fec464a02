//! The protocol-agnostic broker: vhosts, exchanges, queues, bindings, users.
//! Nothing here knows about sockets or a wire protocol; adapters in `amqp` (and
//! later `mqtt`, `http`) translate their protocol into these operations.

pub mod broker;
pub mod consumer;
pub mod definitions;
pub mod disk;
pub mod error;
pub mod exchange;
pub mod headers;
pub mod message;
pub mod queue;
pub mod table_json;
pub mod topic;
pub mod user;
pub mod vhost;

pub use crate::wire::{BasicProperties, FieldTable, FieldValue, ShortStr};
pub use error::{Error, Result};
