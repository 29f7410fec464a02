//! Hooks a vhost calls after it removed a queue, whatever removed it (a
//! client or an administrator deleting it, `x-expires`, auto-delete, the end
//! of its exclusive owner): an adapter that keeps state tied to a queue it
//! created learns that the queue is gone. MQTT uses it to drop a shared
//! subscription group's queue when the last session of the group goes.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use super::queue::Queue;
use super::vhost::VHost;

/// A hook: called with the vhost and the queue it has just removed, without
/// any of the vhost's locks held (it may declare or delete queues).
pub type QueueRemovedHook = fn(&VHost, &Arc<Queue>);

/// The hooks of one vhost, each registered under a name.
#[derive(Default)]
pub struct QueueRemovedHooks {
    hooks: RwLock<HashMap<&'static str, QueueRemovedHook>>,
}

impl QueueRemovedHooks {
    /// Registers `hook` under `name`; a name registered already keeps its
    /// hook, so that registering again is harmless.
    pub fn register(&self, name: &'static str, hook: QueueRemovedHook) {
        if self.hooks.read().contains_key(name) {
            return;
        }
        self.hooks.write().insert(name, hook);
    }

    /// Calls every hook for `queue`, just removed from `vhost`.
    pub fn notify(&self, vhost: &VHost, queue: &Arc<Queue>) {
        let hooks: Vec<QueueRemovedHook> = self.hooks.read().values().copied().collect();
        for hook in hooks {
            hook(vhost, queue);
        }
    }
}
