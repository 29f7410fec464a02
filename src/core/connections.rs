//! The client connections of every protocol, as the management API lists and
//! closes them. Adapters register a connection when it is open and drop its
//! [`Registration`] when it ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap;
use tokio_util::sync::CancellationToken;

/// What the broker knows about one open connection.
pub struct ConnectionEntry {
    /// Broker-wide connection id.
    pub id: u64,
    /// Name shown by the API (the client's address).
    pub name: String,
    /// Protocol, e.g. `AMQP 0-9-1`.
    pub protocol: &'static str,
    /// Authenticated user.
    pub user: String,
    /// Vhost in use.
    pub vhost: String,
    /// Milliseconds since the epoch when it opened.
    pub connected_at: i64,
    /// Open channels.
    pub channels: AtomicUsize,
    close: CancellationToken,
    reason: Mutex<Option<String>>,
}

impl ConnectionEntry {
    /// Asks the connection to close, telling the client `reason`.
    pub fn close(&self, reason: &str) {
        *self.reason.lock() = Some(reason.to_string());
        self.close.cancel();
    }

    /// Completes when someone asked the connection to close.
    pub async fn closed(&self) {
        self.close.cancelled().await;
    }

    /// The reason given to [`ConnectionEntry::close`].
    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .clone()
            .unwrap_or_else(|| "closed via management plugin".into())
    }

    /// Number of open channels, as the adapter last reported.
    pub fn channel_count(&self) -> usize {
        self.channels.load(Ordering::Relaxed)
    }
}

/// Every open connection.
#[derive(Default)]
pub struct ConnectionRegistry {
    entries: RwLock<FxHashMap<u64, Arc<ConnectionEntry>>>,
}

/// Keeps a connection listed; dropping it removes the entry.
pub struct Registration {
    registry: Arc<ConnectionRegistry>,
    /// The entry, for the adapter to update and watch.
    pub entry: Arc<ConnectionEntry>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.entries.write().remove(&self.entry.id);
    }
}

impl ConnectionRegistry {
    /// Lists a new connection.
    pub fn register(
        self: &Arc<Self>,
        id: u64,
        name: String,
        protocol: &'static str,
        user: &str,
        vhost: &str,
        connected_at: i64,
    ) -> Registration {
        let entry = Arc::new(ConnectionEntry {
            id,
            name,
            protocol,
            user: user.to_string(),
            vhost: vhost.to_string(),
            connected_at,
            channels: AtomicUsize::new(0),
            close: CancellationToken::new(),
            reason: Mutex::new(None),
        });
        self.entries.write().insert(id, entry.clone());
        Registration {
            registry: self.clone(),
            entry,
        }
    }

    /// Every open connection, by name.
    pub fn list(&self) -> Vec<Arc<ConnectionEntry>> {
        let mut all: Vec<_> = self.entries.read().values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// The connection named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<ConnectionEntry>> {
        self.entries.read().values().find(|e| e.name == name).cloned()
    }

    /// Closes every connection to `vhost` (it is being deleted).
    pub fn close_vhost(&self, vhost: &str, reason: &str) {
        for e in self.entries.read().values().filter(|e| e.vhost == vhost) {
            e.close(reason);
        }
    }
}
