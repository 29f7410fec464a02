//! An AMQP 0-9-1 client on the broker's own codec, for the parts of the broker
//! that talk to other brokers (shovels) and for `lavinmqperf`.
//!
//! It is small on purpose: a PLAIN (or EXTERNAL) handshake, channels, confirms,
//! queue and consume methods, and a raw view of the receive buffer so that hot
//! loops can work on frames in place.

pub mod connection;
pub mod http;
pub mod stream;
pub mod tls;
pub mod uri;
