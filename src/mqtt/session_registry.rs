//! Sessions by vhost and client identifier: which connection holds each one, so
//! that a second connection with the same client id takes the session over
//! [MQTT-3.1.4-2], and the QoS 2 state a persistent session keeps between
//! connections (its queue and subscriptions live in the core).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

/// How long a taking-over connection waits for the old one to finish.
const TAKEOVER_WAIT: Duration = Duration::from_secs(5);

/// QoS 2 bookkeeping of a session, kept across reconnects of a persistent
/// session so that an exchange interrupted by a lost connection completes
/// exactly once.
#[derive(Default)]
pub struct SessionState {
    /// Packet ids of QoS 2 PUBLISHes received (PUBREC sent) whose PUBREL has
    /// not come yet: a PUBLISH with one of these ids is a retransmission and
    /// is not routed again.
    pub received: Mutex<BTreeSet<u16>>,
    /// Packet ids of QoS 2 deliveries the client received (PUBREC came, PUBREL
    /// sent) and has not completed with PUBCOMP; PUBREL is sent again for each
    /// on reconnect.
    pub released: Mutex<BTreeSet<u16>>,
}

struct Live {
    conn_id: u64,
    kick: CancellationToken,
    ended: CancellationToken,
}

struct Entry {
    live: Option<Live>,
    state: Arc<SessionState>,
    /// An MQTT 5 will waiting for its delay; a new connection cancels it.
    pending_will: Option<CancellationToken>,
}

/// What a connection gets for its client id.
pub struct Claim {
    /// The session's QoS 2 state (fresh for a clean session).
    pub state: Arc<SessionState>,
    /// Cancelled when another connection takes the session over.
    pub kick: CancellationToken,
    /// To be cancelled when this connection has finished with the session.
    pub ended: CancellationToken,
}

/// Every session the broker knows of, by vhost and client id.
#[derive(Default)]
pub struct SessionRegistry {
    entries: Mutex<HashMap<(String, String), Entry>>,
}

impl SessionRegistry {
    /// Makes connection `conn_id` the holder of the session; a connection that
    /// holds it now is told to close, and this waits (a few seconds at most)
    /// until it has. With `clean`, the stored QoS 2 state is discarded.
    pub async fn claim(&self, vhost: &str, client_id: &str, conn_id: u64, clean: bool) -> Claim {
        let key = (vhost.to_string(), client_id.to_string());
        loop {
            let previous = {
                let mut entries = self.entries.lock();
                let entry = entries.entry(key.clone()).or_insert_with(|| Entry {
                    live: None,
                    state: Arc::default(),
                    pending_will: None,
                });
                match &entry.live {
                    Some(live) => (live.kick.clone(), live.ended.clone()),
                    None => {
                        // A new connection before the will delay passed: no will.
                        if let Some(will) = entry.pending_will.take() {
                            will.cancel();
                        }
                        if clean {
                            entry.state = Arc::default();
                        }
                        let claim = Claim {
                            state: entry.state.clone(),
                            kick: CancellationToken::new(),
                            ended: CancellationToken::new(),
                        };
                        entry.live = Some(Live {
                            conn_id,
                            kick: claim.kick.clone(),
                            ended: claim.ended.clone(),
                        });
                        return claim;
                    }
                }
            };
            let (kick, ended) = previous;
            tracing::info!(client_id, "client id in use: closing the existing connection");
            kick.cancel();
            if tokio::time::timeout(TAKEOVER_WAIT, ended.cancelled()).await.is_err() {
                // Should not happen; take the session anyway rather than refuse.
                tracing::warn!(client_id, "the existing connection did not close in time");
                if let Some(e) = self.entries.lock().get_mut(&key)
                    && e.live.as_ref().is_some_and(|l| l.ended == ended)
                {
                    e.live = None;
                }
            }
        }
    }

    /// Connection `conn_id` is done with the session; a clean session is
    /// forgotten. Cancels the claim's `ended` token.
    pub fn release(&self, vhost: &str, client_id: &str, conn_id: u64, clean: bool) {
        let key = (vhost.to_string(), client_id.to_string());
        let mut entries = self.entries.lock();
        let Some(entry) = entries.get_mut(&key) else { return };
        let Some(live) = entry.live.take_if(|l| l.conn_id == conn_id) else {
            return;
        };
        if clean {
            entries.remove(&key);
        }
        drop(entries);
        live.ended.cancel();
    }

    /// Registers a will that waits for its delay after the connection of the
    /// session ended; the token is cancelled when a connection claims the
    /// session first.
    pub fn defer_will(&self, vhost: &str, client_id: &str) -> CancellationToken {
        let token = CancellationToken::new();
        let key = (vhost.to_string(), client_id.to_string());
        let mut entries = self.entries.lock();
        let entry = entries.entry(key).or_insert_with(|| Entry {
            live: None,
            state: Arc::default(),
            pending_will: None,
        });
        if let Some(old) = entry.pending_will.replace(token.clone()) {
            old.cancel();
        }
        token
    }

    /// Forgets the stored state of a session nobody holds (its queue was
    /// deleted).
    pub fn forget(&self, vhost: &str, client_id: &str) {
        let key = (vhost.to_string(), client_id.to_string());
        let mut entries = self.entries.lock();
        if entries.get(&key).is_some_and(|e| e.live.is_none()) {
            entries.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn takeover_waits_for_the_holder() {
        let registry = Arc::new(SessionRegistry::default());
        let first = registry.claim("/", "c", 1, false).await;
        first.state.received.lock().insert(7);
        let holder = {
            let registry = registry.clone();
            let kick = first.kick.clone();
            tokio::spawn(async move {
                kick.cancelled().await;
                registry.release("/", "c", 1, false);
            })
        };
        let second = registry.claim("/", "c", 2, false).await;
        holder.await.unwrap();
        assert!(first.ended.is_cancelled());
        assert!(second.state.received.lock().contains(&7), "persistent state survives");
        registry.release("/", "c", 2, true);
        let third = registry.claim("/", "c", 3, false).await;
        assert!(third.state.received.lock().is_empty(), "a clean session leaves nothing");
    }

    #[tokio::test]
    async fn a_stale_release_changes_nothing() {
        let registry = SessionRegistry::default();
        let claim = registry.claim("/", "c", 1, false).await;
        registry.release("/", "c", 9, true);
        assert!(!claim.ended.is_cancelled());
        let clean = registry.claim("v", "c", 2, true).await;
        assert!(!clean.kick.is_cancelled(), "client ids are per vhost");
    }
}
