//! The `-ok` of a definition change (declare, delete, bind, unbind) that
//! wrote the definitions log is sent only once the group commit has synced
//! it, as a publisher confirm is: a client that saw `declare-ok` finds its
//! queue after a power loss. Clustered, every such reply (purge too) also
//! waits until every in-sync follower holds the change, so that the client
//! finds it after a failover. Changes that wrote nothing (a transient queue,
//! a redeclaration) and `sync = false` without clustering answer at once.

use std::sync::Arc;

use parking_lot::Mutex;

use super::codec::{Method, write_method};
use crate::store::{GroupSync, SyncWaiter};
use crate::transport::outbox::Outbox;

/// A reply held until the group commit (and, clustered, replication) covers
/// the change.
struct HeldReply {
    outbox: Arc<Outbox>,
    channel: u16,
    method: Mutex<Option<Method>>,
}

impl SyncWaiter for HeldReply {
    fn synced(&self, _token: u64, ok: bool) {
        let Some(method) = self.method.lock().take() else {
            return;
        };
        if ok {
            self.outbox.send(|b| {
                let _ = write_method(b, self.channel, &method);
            });
        } else {
            // Leadership is lost: the broker is closing every connection, and
            // the change is not confirmed.
            tracing::warn!(
                channel = self.channel,
                "a definition change was not replicated; no reply sent"
            );
        }
    }
}

/// True when replies must wait for replication (a clustered leader).
pub fn replicated() -> bool {
    crate::store::replication::sink().is_some()
}

/// Sends `method` on `channel` once `sync` has covered the definitions log
/// as written so far (a sync of that file alone, unless a confirm or another
/// waiter needs the whole data directory synced meanwhile).
pub fn send_when_durable(sync: &GroupSync, outbox: &Arc<Outbox>, channel: u16, method: Method) {
    let waiter: Arc<dyn SyncWaiter> = Arc::new(HeldReply {
        outbox: outbox.clone(),
        channel,
        method: Mutex::new(Some(method)),
    });
    sync.register_for_files(&waiter, 0);
}
