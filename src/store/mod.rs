//! Bytes on disk: segment files with messages, ack logs and definitions.
//! Knows nothing of AMQP; the core hands it already-encoded parts.

pub mod definitions;
pub mod file_reaper;
pub mod group_sync;
pub mod json_log;
pub mod message_store;
pub mod mmap;
pub mod publisher_sequences;
pub mod queue_store;
pub mod record;
pub mod replication;
pub mod segment;
pub mod spare_segments;
pub mod stream_compaction;
pub mod stream_store;
pub mod sync_method;

pub use group_sync::{GroupSync, SyncWaiter};
pub use message_store::{MessageStore, SegPos};
pub use queue_store::QueueStore;
pub use sync_method::SyncMethod;
