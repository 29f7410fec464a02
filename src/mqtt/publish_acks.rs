//! PUBACK and PUBREC for a client's QoS 1 and 2 publishes, sent only once the
//! message is safe: a message stored persistently waits for the group commit
//! that covers it. Acknowledgements leave in the order the PUBLISHes arrived
//! [MQTT-4.6.0-2], so once one waits for a sync, the ones after it wait too.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::BytesMut;
use parking_lot::Mutex;

use super::codec::{Packet, write_packet};
use crate::store::{GroupSync, SyncWaiter};
use crate::transport::outbox::Outbox;

/// What acknowledges a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishAck {
    /// PUBACK (QoS 1).
    Puback(u16),
    /// PUBREC (QoS 2).
    Pubrec(u16),
}

impl PublishAck {
    fn write(self, out: &mut BytesMut) {
        let packet = match self {
            PublishAck::Puback(packet_id) => Packet::Puback { packet_id },
            PublishAck::Pubrec(packet_id) => Packet::Pubrec { packet_id },
        };
        // Two-byte packets always encode.
        let _ = write_packet(out, &packet);
    }
}

/// The acknowledgements of one connection that wait for a sync.
pub struct PublishAcks {
    outbox: Arc<Outbox>,
    waiting: Mutex<VecDeque<(u64, PublishAck)>>,
    /// Sequence of the last acknowledgement queued behind a sync.
    seq: Mutex<u64>,
}

impl PublishAcks {
    /// Acknowledgements written to `outbox`.
    pub fn new(outbox: Arc<Outbox>) -> Arc<Self> {
        Arc::new(PublishAcks {
            outbox,
            waiting: Mutex::default(),
            seq: Mutex::new(0),
        })
    }

    /// Acknowledges a publish: at once, unless the message waits for a sync
    /// (`needs_sync`) or an earlier acknowledgement still does.
    pub fn ack(self: &Arc<Self>, ack: PublishAck, needs_sync: bool, sync: &GroupSync) {
        let mut waiting = self.waiting.lock();
        if !needs_sync && waiting.is_empty() {
            drop(waiting);
            self.outbox.write(|out| ack.write(out));
            return;
        }
        let seq = {
            let mut seq = self.seq.lock();
            *seq += 1;
            *seq
        };
        waiting.push_back((seq, ack));
        drop(waiting);
        let waiter: Arc<dyn SyncWaiter> = self.clone();
        sync.register(&waiter, seq);
    }
}

impl SyncWaiter for PublishAcks {
    fn synced(&self, token: u64, ok: bool) {
        if !ok {
            // The client must not learn that a message is safe when it is not:
            // closing makes it publish again on its next connection.
            tracing::error!("closing an MQTT connection: its messages could not be synced");
            self.outbox.close();
            return;
        }
        let mut waiting = self.waiting.lock();
        self.outbox.send(|out| {
            while let Some((seq, ack)) = waiting.front().copied()
                && seq <= token
            {
                ack.write(out);
                waiting.pop_front();
            }
        });
    }
}
