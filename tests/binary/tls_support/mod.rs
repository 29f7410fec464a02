//! Helpers of the TLS tests: certificates, TLS clients, raw AMQP and MQTT
//! clients over any stream, and the captured broker log.
#![allow(dead_code)]

pub mod amqp;
pub mod client;
pub mod logs;
pub mod mqtt;
pub mod pki;
