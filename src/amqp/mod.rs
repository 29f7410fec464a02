//! The AMQP 0-9-1 adapter: frames in, broker operations, frames out.

pub mod channel;
pub mod channel_view;
pub mod codec;
pub mod connection;
pub mod consumer;
pub mod context;
pub mod durable_reply;
pub mod error;
pub mod handshake;
pub mod listener;
pub mod publish;
pub mod unacked;

pub use context::{AmqpContext, AmqpSettings};
