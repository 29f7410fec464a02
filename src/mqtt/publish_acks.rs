//! PUBACK and PUBREC for a client's QoS 1 and 2 publishes, sent only once the
//! message is safe: a message stored persistently waits for the group commit
//! that covers it. Acknowledgements leave in the order the PUBLISHes arrived
//! [MQTT-4.6.0-2], so once one waits for a sync, the ones after it wait too.
//! The connection asks for the sync once per read ([`PublishAcks::await_sync`]),
//! not once per publish.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;
use parking_lot::Mutex;

use super::codec::{Ack, Packet, ProtocolVersion, ReasonCode, write_packet};
use crate::store::{GroupSync, SyncWaiter};
use crate::transport::outbox::Outbox;

/// What acknowledges a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishAck {
    /// PUBACK (QoS 1), with its MQTT 5 reason code.
    Puback(u16, ReasonCode),
    /// PUBREC (QoS 2), with its MQTT 5 reason code.
    Pubrec(u16, ReasonCode),
}

impl PublishAck {
    fn write(self, out: &mut BytesMut, version: ProtocolVersion) {
        let ack = |packet_id, reason| Ack {
            packet_id,
            reason,
            properties: None,
        };
        let packet = match self {
            PublishAck::Puback(id, reason) => Packet::Puback(ack(id, reason)),
            PublishAck::Pubrec(id, reason) => Packet::Pubrec(ack(id, reason)),
        };
        // Acknowledgements without properties always encode.
        let _ = write_packet(out, &packet, version);
    }
}

/// The acknowledgements of one connection that wait for a sync.
pub struct PublishAcks {
    outbox: Arc<Outbox>,
    version: ProtocolVersion,
    waiting: Mutex<Waiting>,
    /// The newest sequence a sync was asked for.
    registered: AtomicU64,
}

/// Acknowledgements queued behind a sync, each with its sequence number.
#[derive(Default)]
struct Waiting {
    acks: VecDeque<(u64, PublishAck)>,
    /// Sequence of the last acknowledgement queued.
    seq: u64,
}

impl PublishAcks {
    /// Acknowledgements written to `outbox`, for a client speaking `version`.
    pub fn new(outbox: Arc<Outbox>, version: ProtocolVersion) -> Arc<Self> {
        Arc::new(PublishAcks {
            outbox,
            version,
            waiting: Mutex::default(),
            registered: AtomicU64::new(0),
        })
    }

    /// Acknowledges a publish: at once, unless the message waits for a sync
    /// (`needs_sync`) or an earlier acknowledgement still does. Then it is
    /// queued, and sent once [`PublishAcks::await_sync`] asked for a sync and
    /// that sync is done.
    pub fn ack(&self, ack: PublishAck, needs_sync: bool) {
        let mut waiting = self.waiting.lock();
        if !needs_sync && waiting.acks.is_empty() {
            drop(waiting);
            self.outbox.write(|out| ack.write(out, self.version));
            return;
        }
        waiting.seq += 1;
        let seq = waiting.seq;
        waiting.acks.push_back((seq, ack));
    }

    /// Asks `sync` to tell when the acknowledgements queued so far may go;
    /// called at the end of every batch of packets read.
    pub fn await_sync(self: &Arc<Self>, sync: &GroupSync) {
        let seq = self.waiting.lock().seq;
        if self.registered.swap(seq, Ordering::AcqRel) != seq {
            let waiter: Arc<dyn SyncWaiter> = self.clone();
            sync.register(&waiter, seq);
        }
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
            while let Some((seq, ack)) = waiting.acks.front().copied()
                && seq <= token
            {
                ack.write(out, self.version);
                waiting.acks.pop_front();
            }
        });
    }
}
