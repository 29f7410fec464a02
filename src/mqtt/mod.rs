//! The MQTT 5.0, 3.1.1 (and 3.1) adapter: packets in, broker operations, packets out.
//!
//! [`codec`] turns bytes into [`codec::Packet`]s and back without doing any
//! I/O; [`topic_map`] translates MQTT topics and filters into the routing and
//! binding keys of the protocol-agnostic core, the way RabbitMQ's MQTT plugin
//! does, so MQTT and AMQP clients can exchange messages. A session is a queue
//! bound to `amq.topic` ([`session`]); [`connection`] runs the protocol over
//! any byte stream, [`delivery`] feeds the client from the session's queue.

pub mod codec;
pub mod connect;
pub mod connection;
pub mod context;
pub mod delivery;
pub mod inflight;
pub mod listener;
pub mod message_props;
pub mod property_map;
pub mod publish_acks;
pub mod retained;
pub mod routing;
pub mod session;
pub mod session_registry;
pub mod shared_group;
pub mod shared_subscription;
pub mod topic_alias;
pub mod topic_map;
pub mod will;

pub use context::{ClientIdValidation, MqttContext, MqttSettings};
