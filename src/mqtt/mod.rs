//! The MQTT 3.1.1 (and 3.1) adapter: packets in, broker operations, packets out.
//!
//! [`codec`] turns bytes into [`codec::Packet`]s and back without doing any
//! I/O; [`topic_map`] translates MQTT topics and filters into the routing and
//! binding keys of the protocol-agnostic core, the way RabbitMQ's MQTT plugin
//! does, so MQTT and AMQP clients can exchange messages.

pub mod codec;
pub mod topic_map;
