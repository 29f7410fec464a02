//! MQTT 5.0, 3.1.1 and 3.1 ("MQIsdp") packets, sans-IO: [`parse_packet`]
//! splits whole packets off a receive buffer, enforcing the rules of the
//! specification a receiver must check; [`write_packet`] appends packets to a
//! send buffer. Topics, payloads and properties are slices of the receive
//! buffer.

pub mod decode;
pub mod encode;
pub mod error;
mod header;
pub mod packet;
pub mod properties;
pub mod reason;
pub mod string;
pub mod topic;

#[cfg(test)]
mod oracle_tests;
#[cfg(test)]
mod oracle_v5_tests;
#[cfg(test)]
mod samples;

pub use decode::parse_packet;
pub use encode::{PublishHead, write_connack, write_packet, write_publish, write_publish_head, write_publish_packet};
pub use error::{DecodeError, EncodeError, TopicError};
pub use header::MAX_REMAINING_LENGTH;
pub use packet::{
    Ack, Connack, Connect, Disconnect, Packet, ProtocolVersion, Publish, QoS, Suback, Subscribe, SubscriptionOptions,
    Unsuback, Unsubscribe, Will,
};
pub use properties::Properties;
pub use reason::ReasonCode;
pub use string::MqttStr;
