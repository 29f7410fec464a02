//! The node's name, as the management API, shovels and federation report it
//! (`--node-name`, `[main] node_name`; RabbitMQ's `rabbit@host` form). Below
//! the adapters, so that each of them reads the same name.

use std::sync::{Arc, RwLock};

/// The name of a node whose configuration names none.
pub const DEFAULT_NAME: &str = "lavinmq@localhost";

static NAME: RwLock<Option<Arc<str>>> = RwLock::new(None);

/// The node's name.
pub fn name() -> Arc<str> {
    match NAME.read() {
        Ok(n) => n.clone().unwrap_or_else(|| Arc::from(DEFAULT_NAME)),
        Err(_) => Arc::from(DEFAULT_NAME),
    }
}

/// The machine's host name (`localhost` when it cannot be read).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Names the node; the server calls it once at start-up.
pub fn set_name(name: &str) {
    if let Ok(mut n) = NAME.write() {
        *n = Some(Arc::from(name));
    }
}
