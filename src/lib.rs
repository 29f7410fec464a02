//! LavinMQ, rewritten in Rust: a message broker that speaks AMQP 0-9-1 to existing
//! RabbitMQ clients, keeps messages in memory-mapped segment files, and aims to be
//! faster and leaner than the brokers it replaces.
//!
//! Layers, top to bottom: protocol adapters ([`amqp`]) translate wire protocols into
//! operations on the protocol-agnostic [`core`], which keeps messages through
//! [`store`]. [`server`] wires them to sockets; [`config`] reads flags and ini files.

pub mod amqp;
pub mod amqp1;
pub mod auth;
pub mod client;
pub mod cluster;
pub mod config;
pub mod core;
pub mod data_dir_lock;
pub mod federation;
pub mod http;
pub mod log_exchange;
pub mod log_tail;
pub mod logging;
pub mod memory_trim;
pub mod mqtt;
pub mod server;
pub mod shovel;
pub mod store;
pub mod stream_protocol;
pub mod system_limits;
pub mod systemd;
pub mod takeover;
pub mod transport;
pub mod wire;
