//! Clustering: nodes elect a leader through etcd, the leader replicates every
//! durable change of its data dir to the followers, and a confirm waits until
//! the in-sync followers hold the data (see `DESIGN.md`).
//!
//! - [`node`]: a node's life (follow, campaign, lead, lose the lease);
//! - [`etcd`]: the lease, the election, the in-sync replica set, the secret;
//! - [`log`]: the leader's replication log, the store's change sink;
//! - [`leader_link`] and [`follower`]: the two ends of a replication
//!   connection, speaking [`wire`]; [`snapshot`] lists files with checksums;
//! - [`proxy`]: a follower forwards client connections to the leader;
//!   [`follower_api`]: what it answers itself (control socket, metrics);
//! - [`status`]: what the API and the CLI show;
//! - [`leader_service`]: what a node needs from the broker it starts as
//!   leader (the server, above this module, provides it).
//!
//! The store knows none of this: it reports file operations through
//! [`crate::store::replication`].

pub mod etcd;
pub mod follower;
pub mod follower_api;
pub mod leader_link;
pub mod leader_service;
pub mod lease_clock;
pub mod log;
pub mod node;
pub mod node_id;
pub mod proxy;
pub mod snapshot;
pub mod status;
pub mod wire;
