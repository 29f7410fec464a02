//! The AMQP 1.0 adapter, as RabbitMQ 4 serves the protocol: on the same
//! listeners as AMQP 0-9-1 (the protocol header selects it), SASL, then
//! connections carrying sessions carrying links, each link a publisher into
//! an exchange or queue, or a consumer of a queue, on the shared core.

pub mod address;
pub mod codec;
pub mod connection;
pub mod consumer;
pub mod error;
pub mod handshake;
pub mod management;
pub mod message;
pub mod publisher;
pub mod session;
pub mod stream_source;
pub mod unsettled;
