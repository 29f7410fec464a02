//! The protocol-agnostic broker: vhosts, exchanges, queues, bindings, users.
//! Nothing here knows about sockets or a wire protocol; adapters in `amqp` (and
//! later `mqtt`, `http`) translate their protocol into these operations.

pub mod alarms;
pub mod binding_list;
pub mod binding_table;
pub mod broker;
pub mod connections;
pub mod consistent_hash;
pub mod consumer;
pub mod dead_letter;
pub mod dedup;
pub mod definition_json;
pub mod definitions;
pub mod definitions_export;
pub mod definitions_import;
pub mod definitions_log;
pub mod definitions_offline;
pub mod delayed;
pub mod disk;
pub mod error;
pub mod exchange;
pub mod exchange_declaration;
pub mod headers;
pub mod limits;
pub mod login_throttle;
pub mod memory;
pub mod message;
pub mod node;
pub mod password;
pub mod permissions;
pub mod policy;
pub mod queue;
pub mod queue_removed;
pub mod queue_settings;
pub mod rate_limit;
pub mod route_cache;
pub mod stats;
pub mod stats_sampler;
pub mod stream;
pub mod stream_clients;
pub mod stream_compaction;
pub mod stream_filter;
pub mod stream_groups;
pub mod stream_runs;
pub mod super_stream;
pub mod table_json;
pub mod topic;
pub mod topic_permissions;
pub mod user;
pub mod vhost;

pub use crate::wire::{BasicProperties, FieldTable, FieldValue, PackedTable, ShortStr};
pub use error::{Error, Result};
