//! AMQP 0-9-1 and AMQP 1.0 against a broker started in-process on ephemeral
//! ports, one module per area: connections, publishing, delivery, exchanges,
//! queues and their features, streams, what survives a restart, permissions,
//! and AMQP 1.0 through a real client (`amqp1`). They share one test binary so
//! that the client libraries are compiled once.

mod amqp1;
#[path = "../common/mod.rs"]
mod common;
mod connection;
mod delivery;
mod exchange_types;
mod exchanges;
mod permissions;
mod persistence;
mod publish;
mod queue_features;
mod queues;
mod stream_protocol;
mod streams;
