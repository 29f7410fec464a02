//! A link on which a client receives messages from a queue: a consumer of
//! the queue whose capacity is the link credit the client granted (and the
//! room in the session's window and the connection's outbox).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use bytes::Bytes;
use tokio::sync::Notify;

use super::codec::performative::{AmqpError, Detach, Performative};
use super::message::{write_plain_stored, write_stored};
use super::session::{OutDelivery, SessionShared};
use crate::core::consumer::Consumer;
use crate::core::queue::Queue;
use crate::store::SegPos;
use crate::store::record::RecordView;
use crate::wire::BasicProperties;

/// The link's credit, as the client grants it and deliveries use it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Credit {
    /// Deliveries the client will still take.
    pub credit: u32,
    /// Deliveries made on the link so far (the standard's delivery-count).
    pub delivery_count: u32,
}

impl Credit {
    fn pack(self) -> u64 {
        (u64::from(self.delivery_count) << 32) | u64::from(self.credit)
    }

    fn unpack(word: u64) -> Credit {
        Credit {
            credit: word as u32,
            delivery_count: (word >> 32) as u32,
        }
    }
}

/// A [`Credit`] in one atomic word: every delivery checks and takes credit,
/// and the queue's task and the connection's (granting, draining) share it
/// without a lock.
#[derive(Default)]
pub struct AtomicCredit(AtomicU64);

impl AtomicCredit {
    /// The credit as of now.
    pub fn load(&self) -> Credit {
        Credit::unpack(self.0.load(Ordering::Acquire))
    }

    /// Applies `f` atomically (again if another thread changed the credit
    /// meanwhile); returns the credit after it, or None (and changes
    /// nothing) when `f` declines.
    fn update(&self, mut f: impl FnMut(Credit) -> Option<Credit>) -> Option<Credit> {
        let mut after = None;
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                after = f(Credit::unpack(w));
                after.map(Credit::pack)
            })
            .ok()
            .and(after)
    }
}

/// A consuming link.
pub struct LinkConsumer {
    /// Broker-wide consumer id.
    pub id: u64,
    /// The link's handle (ours and the client's).
    pub handle: u32,
    /// The link's name, shown as the consumer tag.
    pub name: String,
    /// The queue it reads.
    pub queue: Arc<Queue>,
    /// Deliveries are sent settled (the client asked for settled mode):
    /// the queue forgets them once sent.
    pub presettled: bool,
    /// The session it belongs to.
    pub session: Arc<SessionShared>,
    /// Credit and delivery count.
    pub credit: AtomicCredit,
    /// Half of the credit the client's last flow left the link with: the
    /// delivery that brings the credit down to it is sent at once (see
    /// [`LinkConsumer::deliver`]).
    half_grant: AtomicU32,
    wake: Notify,
    cancelled: AtomicBool,
    /// We detached the link (its queue was deleted).
    detached: AtomicBool,
    me: std::sync::Weak<LinkConsumer>,
}

impl LinkConsumer {
    /// A consumer for link `handle`; start it with [`LinkConsumer::spawn`]
    /// after adding it to the queue.
    pub fn new(
        id: u64,
        handle: u32,
        name: String,
        queue: Arc<Queue>,
        presettled: bool,
        session: Arc<SessionShared>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| LinkConsumer {
            id,
            handle,
            name,
            queue,
            presettled,
            session,
            credit: AtomicCredit::default(),
            half_grant: AtomicU32::new(0),
            wake: Notify::new(),
            cancelled: AtomicBool::new(false),
            detached: AtomicBool::new(false),
            me: me.clone(),
        })
    }

    /// Starts the task that runs the queue's delivery for this link.
    pub fn spawn(self: &Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move {
            crate::transport::delivery_loop::run(&me.queue, &me.session.outbox, &me.wake, &me.cancelled).await;
        });
    }

    /// Stops deliveries and detaches from the queue.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        self.wake.notify_one();
        self.queue.detach_consumer(self.id);
    }

    /// The client's flow for this link: credit counted from its view of the
    /// delivery count. Returns the credit and delivery count after it.
    pub fn grant(&self, delivery_count: Option<u32>, link_credit: u32) -> Credit {
        let now = self
            .credit
            .update(|c| {
                let theirs = delivery_count.unwrap_or(c.delivery_count);
                let mut credit = theirs.wrapping_add(link_credit).wrapping_sub(c.delivery_count);
                if credit > link_credit {
                    // Counted from a delivery count ahead of ours: not
                    // possible for a well-behaved client; trust the credit
                    // it named.
                    credit = link_credit;
                }
                Some(Credit { credit, ..c })
            })
            .unwrap_or_default();
        self.half_grant.store(now.credit / 2, Ordering::Relaxed);
        // The connection task delivers what the credit allows at the end of
        // its read batch; the link's own task is for what is left after.
        now
    }

    /// Drain: the credit left is used up without deliveries. Returns the
    /// state to report back.
    pub fn drain(&self) -> Credit {
        self.credit
            .update(|c| {
                Some(Credit {
                    credit: 0,
                    delivery_count: c.delivery_count.wrapping_add(c.credit),
                })
            })
            .unwrap_or_default()
    }

    /// Something changed that may let deliveries go on (the session window
    /// opened, a settlement).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// True when we detached the link, so that the client's detach is its
    /// answer to ours.
    pub fn detached_by_us(&self) -> bool {
        self.detached.load(Ordering::Acquire)
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }
}

impl Consumer for LinkConsumer {
    fn tag(&self) -> &str {
        &self.name
    }

    fn priority(&self) -> i32 {
        0
    }

    fn has_capacity(&self) -> bool {
        !self.is_cancelled()
            && self.credit.load().credit > 0
            && !self.session.outbox.is_full()
            && self.session.window_open()
    }

    /// An unsettled link waits for its client only when the socket is full:
    /// credit it has not granted is held back by settlements, as a prefetch
    /// limit is. A settled link's credit is what its client is ready to read
    /// (the role a no-ack 0-9-1 consumer's socket buffer plays), so running
    /// out of it, or of session window, is waiting for the client too.
    fn waits_for_client(&self) -> bool {
        if self.is_cancelled() {
            return false;
        }
        let credit = self.credit.load().credit;
        if self.presettled {
            credit == 0 || self.session.outbox.is_full() || !self.session.window_open()
        } else {
            self.session.outbox.is_full() && credit > 0
        }
    }

    /// Takes one credit: deliveries of other queues on the same link cannot
    /// happen (a link reads one queue), but the connection task may drain
    /// the credit meanwhile.
    fn reserve(&self) -> bool {
        self.credit
            .update(|c| {
                (c.credit > 0).then(|| Credit {
                    credit: c.credit - 1,
                    delivery_count: c.delivery_count.wrapping_add(1),
                })
            })
            .is_some()
    }

    fn unreserve(&self) {
        self.credit.update(|c| {
            Some(Credit {
                credit: c.credit.wrapping_add(1),
                delivery_count: c.delivery_count.wrapping_sub(1),
            })
        });
    }

    fn settles_on_delivery(&self) -> bool {
        self.presettled
    }

    fn deliver(&self, m: &RecordView<'_>, pos: SegPos, redelivered: bool) -> bool {
        let presettled = self.presettled;
        let track = |_| match presettled {
            true => None,
            false => self.me.upgrade().map(|consumer| OutDelivery { consumer, pos }),
        };
        match m.properties {
            // Most messages set nothing but their durability.
            [0x10, 0x00, mode] => self.session.send_message(
                self.handle,
                presettled,
                |out| write_plain_stored(out, m.exchange, m.routing_key, *mode == 2, m.body, redelivered),
                track,
            ),
            raw => {
                let props = BasicProperties::decode(&mut Bytes::copy_from_slice(raw)).unwrap_or_default();
                self.session.send_message(
                    self.handle,
                    presettled,
                    |out| write_stored(out, m.exchange, m.routing_key, &props, m.body, redelivered),
                    track,
                )
            }
        };
        // Clients top their credit up once they have read about half of
        // it. The deliveries up to that point go out now rather than with
        // the rest of the batch, so that the client reads them and grants
        // more while the rest is sent: otherwise each top-up waits for the
        // whole credit's worth to be sent, and the link stops at each one.
        if self.credit.load().credit == self.half_grant.load(Ordering::Relaxed) {
            self.session.outbox.flush();
        }
        presettled
    }

    fn flush(&self) {
        self.session.outbox.flush();
    }

    fn notify(&self) {
        self.wake.notify_one();
    }

    /// The client learns of it as RabbitMQ tells it: the link is detached
    /// with `amqp:resource-deleted`.
    fn queue_deleted(&self) {
        self.cancelled.store(true, Ordering::Release);
        self.detached.store(true, Ordering::Release);
        self.wake.notify_one();
        self.session.write(&Performative::Detach(Detach {
            handle: self.handle,
            closed: true,
            error: Some(AmqpError::new(
                "amqp:resource-deleted",
                format!("queue '{}' was deleted", self.queue.name),
            )),
        }));
        self.session.outbox.flush();
    }

    fn id(&self) -> u64 {
        self.id
    }
}
