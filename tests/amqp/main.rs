//! AMQP 0-9-1 against a broker started in-process on ephemeral ports, one
//! module per area: connections, publishing, delivery, exchanges, queues and
//! their features, streams, what survives a restart, and permissions. They
//! share one test binary so that the client libraries are compiled once.

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
mod streams;
