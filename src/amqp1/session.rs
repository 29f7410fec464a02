//! A session: the numbering and windows of the transfers in each direction,
//! the links attached to it, and what its consumers' deliveries and its
//! publishers' syncs share across tasks.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{BufMut, BytesMut};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use super::codec::FrameKind;
use super::codec::frame::write_frame;
use super::codec::performative::{AmqpError, DeliveryState, Disposition, Flow, Performative, Role};
use super::codec::transfer;
use super::consumer::LinkConsumer;
use super::management::ReplyLink;
use super::publisher::Publisher;
use super::unsettled::Unsettled;
use crate::store::SegPos;
use crate::store::SyncWaiter;
use crate::transport::outbox::Outbox;

/// Transfers we let a client send before we widen the window again.
pub const INCOMING_WINDOW: u32 = 1 << 16;
/// What we announce as our outgoing window: consumers are limited by link
/// credit and the client's incoming window, not by this.
const OUTGOING_WINDOW: u32 = u32::MAX >> 1;

/// A delivery to a client not yet settled by it.
pub struct OutDelivery {
    /// The consumer (link) that sent it.
    pub consumer: Arc<LinkConsumer>,
    /// Where the message is in its queue.
    pub pos: SegPos,
}

/// The outgoing direction of a session, locked by the consumers' delivery
/// (under their queue's lock) and by the connection task.
pub struct Outgoing {
    /// Id of our next transfer frame.
    pub next_outgoing_id: u32,
    /// Id of our next delivery.
    pub next_delivery_id: u32,
    /// Transfers the client can take now.
    pub remote_incoming_window: u32,
    /// Deliveries the client has not settled, by delivery id.
    pub unsettled: Unsettled<OutDelivery>,
    /// Reused to encode each message before it is cut into frames.
    scratch: BytesMut,
}

/// Accepted dispositions waiting for the sync that makes their messages safe.
#[derive(Default)]
struct Confirms {
    next_token: u64,
    waiting: VecDeque<(u64, u32)>,
}

/// What a session's consumers and sync waiters share with its connection.
pub struct SessionShared {
    /// Our channel for the session (the same number as the client's).
    pub channel: u16,
    /// The connection's outgoing frames.
    pub outbox: Arc<Outbox>,
    /// The largest frame the client takes.
    pub max_frame_size: u32,
    /// The outgoing direction.
    pub out: Mutex<Outgoing>,
    confirms: Mutex<Confirms>,
    /// Consecutive publisher deliveries accepted in this read batch, sent as
    /// one disposition at its end ([`SessionShared::flush_accepts`]).
    accepts: Mutex<Option<(u32, u32)>>,
    /// `remote_incoming_window > 0`, kept beside it for the checks every
    /// delivery makes without taking the lock.
    window_open: AtomicBool,
}

impl SessionShared {
    /// Writes one performative on this session's channel.
    pub fn write(&self, p: &Performative) {
        // Accepted dispositions of the batch go first: a detach or an end
        // must not overtake them.
        self.flush_accepts();
        self.write_now(p);
    }

    fn write_now(&self, p: &Performative) {
        let channel = self.channel;
        tracing::trace!(channel, "sending {p:?}");
        self.outbox
            .write(|b| write_frame(b, FrameKind::Amqp, channel, |b| p.encode(b)));
    }

    /// Sends a stored message on link `handle` as one or more transfer
    /// frames; returns the delivery id. Called under the queue's lock.
    pub fn send_message(
        &self,
        handle: u32,
        settled: bool,
        encode: impl FnOnce(&mut BytesMut),
        track: impl FnOnce(u32) -> Option<OutDelivery>,
    ) -> u32 {
        let mut out = self.out.lock();
        let id = out.next_delivery_id;
        out.next_delivery_id = id.wrapping_add(1);
        let mut msg = std::mem::take(&mut out.scratch);
        msg.clear();
        let tag = id.to_be_bytes();
        let max_frame = self.max_frame_size as usize;
        let channel = self.channel;
        let mut frames = 1;
        self.outbox.write(|b| {
            // Most messages fit one frame: encoded in place.
            let start = b.len();
            write_frame(b, FrameKind::Amqp, channel, |b| {
                transfer::encode(b, handle, Some(id), Some(tag), settled, false);
                encode(b);
            });
            if b.len() - start <= max_frame {
                return;
            }
            // Too large: taken back and split over frames. The first
            // frame's header is the largest (later ones leave out the id
            // and tag).
            msg.extend_from_slice(&b[start + 8 + transfer::FIRST_FRAME_HEADER..]);
            b.truncate(start);
            let room = max_frame.saturating_sub(8 + transfer::FIRST_FRAME_HEADER).max(1);
            frames = msg.len().div_ceil(room).max(1);
            for (i, chunk) in msg.chunks(room).enumerate() {
                let last = i + 1 == frames;
                write_frame(b, FrameKind::Amqp, channel, |b| {
                    if i == 0 {
                        transfer::encode(b, handle, Some(id), Some(tag), settled, !last);
                    } else {
                        transfer::encode(b, handle, None, None, settled, !last);
                    }
                    b.put_slice(chunk);
                });
            }
        });
        out.next_outgoing_id = out.next_outgoing_id.wrapping_add(frames as u32);
        out.remote_incoming_window = out.remote_incoming_window.saturating_sub(frames as u32);
        if out.remote_incoming_window == 0 {
            self.window_open.store(false, Ordering::Release);
        }
        if let Some(d) = track(id) {
            out.unsettled.insert(id, d);
        }
        out.scratch = msg;
        id
    }

    /// True while the client's incoming window has room for a transfer.
    pub fn window_open(&self) -> bool {
        self.window_open.load(Ordering::Acquire)
    }

    /// Accepts a publisher's delivery `id`: added to the range of this read
    /// batch, so that a publisher streaming unsettled messages gets one
    /// disposition per batch rather than one per message.
    pub fn accept_incoming(&self, id: u32) {
        let mut accepts = self.accepts.lock();
        match *accepts {
            Some((first, last)) if id == last.wrapping_add(1) => *accepts = Some((first, id)),
            Some((first, last)) => {
                *accepts = Some((id, id));
                drop(accepts);
                self.write_settlement(first, last, DeliveryState::Accepted);
            }
            None => *accepts = Some((id, id)),
        }
    }

    /// Writes the accepted range of the batch, if any; at the end of each
    /// read batch and before any other settlement.
    pub fn flush_accepts(&self) {
        let range = self.accepts.lock().take();
        if let Some((first, last)) = range {
            self.write_settlement(first, last, DeliveryState::Accepted);
        }
    }

    /// Settles a publisher's delivery with `state`.
    pub fn settle_incoming(&self, first: u32, last: u32, state: DeliveryState) {
        self.flush_accepts();
        self.write_settlement(first, last, state);
    }

    fn write_settlement(&self, first: u32, last: u32, state: DeliveryState) {
        self.write_now(&Performative::Disposition(Disposition {
            role: Role::Receiver,
            first,
            last: (last != first).then_some(last),
            settled: true,
            state: Some(state),
        }));
    }

    /// Holds the accepted disposition of delivery `id` until the next sync.
    pub fn accept_after_sync(self: &Arc<Self>, sync: &crate::store::GroupSync, id: u32) {
        let token = {
            let mut c = self.confirms.lock();
            c.next_token += 1;
            let t = c.next_token;
            c.waiting.push_back((t, id));
            t
        };
        let waiter: Arc<dyn SyncWaiter> = self.clone();
        sync.register(&waiter, token);
    }
}

impl SyncWaiter for SessionShared {
    fn synced(&self, token: u64, ok: bool) {
        let mut ids = Vec::new();
        {
            let mut c = self.confirms.lock();
            while let Some(&(t, id)) = c.waiting.front() {
                if t > token {
                    break;
                }
                c.waiting.pop_front();
                ids.push(id);
            }
        }
        if ids.is_empty() {
            return;
        }
        let state = if ok {
            DeliveryState::Accepted
        } else {
            DeliveryState::Rejected(Some(AmqpError::new(
                super::error::condition::INTERNAL,
                "the message could not be synced to disk",
            )))
        };
        // Runs of consecutive ids share one disposition.
        let mut start = 0;
        for i in 1..=ids.len() {
            if i == ids.len() || ids[i] != ids[i - 1].wrapping_add(1) {
                self.settle_incoming(ids[start], ids[i - 1], state.clone());
                start = i;
            }
        }
        self.outbox.flush();
    }
}

/// A session's shared half and its management reply links, lent to a
/// publisher handling a transfer.
pub struct SessionLinks<'a> {
    /// What consumer tasks and sync waiters share.
    pub shared: &'a Arc<SessionShared>,
    replies: &'a FxHashMap<u32, Arc<ReplyLink>>,
}

impl SessionLinks<'_> {
    /// The management reply link paired with the request link `name`.
    pub fn reply_link(&self, name: &str) -> Option<Arc<ReplyLink>> {
        self.replies.values().find(|r| r.name == name).cloned()
    }
}

/// A session as the connection task keeps it.
pub struct Session {
    /// What consumer tasks and sync waiters share.
    pub shared: Arc<SessionShared>,
    /// Id of the client's next transfer.
    pub next_incoming_id: u32,
    /// Transfers the client may still send before we widen the window.
    pub incoming_window: u32,
    /// Highest handle the client may use.
    pub handle_max: u32,
    /// Links on which the client publishes, by handle.
    pub publishers: FxHashMap<u32, Publisher>,
    /// Links on which the client consumes, by handle.
    pub consumers: FxHashMap<u32, Arc<LinkConsumer>>,
    /// Links on which the client receives management answers, by handle.
    pub replies: FxHashMap<u32, Arc<ReplyLink>>,
}

impl Session {
    /// A session begun by the client with `next_outgoing_id` and
    /// `incoming_window`.
    pub fn new(
        channel: u16,
        outbox: Arc<Outbox>,
        max_frame_size: u32,
        remote_next_outgoing_id: u32,
        remote_incoming_window: u32,
    ) -> Session {
        Session {
            shared: Arc::new(SessionShared {
                channel,
                outbox,
                max_frame_size,
                out: Mutex::new(Outgoing {
                    next_outgoing_id: 0,
                    next_delivery_id: 0,
                    remote_incoming_window,
                    unsettled: Unsettled::default(),
                    scratch: BytesMut::new(),
                }),
                confirms: Mutex::new(Confirms::default()),
                accepts: Mutex::new(None),
                window_open: AtomicBool::new(remote_incoming_window > 0),
            }),
            next_incoming_id: remote_next_outgoing_id,
            incoming_window: INCOMING_WINDOW,
            handle_max: 255,
            publishers: FxHashMap::default(),
            consumers: FxHashMap::default(),
            replies: FxHashMap::default(),
        }
    }

    /// Our begin in answer to the client's on `remote_channel`.
    pub fn begin_reply(&self, remote_channel: u16) -> Performative {
        Performative::Begin(super::codec::performative::Begin {
            remote_channel: Some(remote_channel),
            next_outgoing_id: 0,
            incoming_window: INCOMING_WINDOW,
            outgoing_window: OUTGOING_WINDOW,
            handle_max: self.handle_max,
        })
    }

    /// A flow with the session's state, and the link's when given.
    pub fn flow(&self, link: Option<(u32, u32, u32)>, drain: bool) -> Performative {
        let next_outgoing_id = self.shared.out.lock().next_outgoing_id;
        Performative::Flow(Flow {
            next_incoming_id: Some(self.next_incoming_id),
            incoming_window: self.incoming_window,
            next_outgoing_id,
            outgoing_window: OUTGOING_WINDOW,
            handle: link.map(|l| l.0),
            delivery_count: link.map(|l| l.1),
            link_credit: link.map(|l| l.2),
            available: None,
            drain,
            echo: false,
        })
    }

    /// Counts a transfer from the client; false when it exceeded our window.
    /// Widens the window again once half of it is used.
    pub fn count_incoming(&mut self) -> bool {
        if self.incoming_window == 0 {
            return false;
        }
        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
        self.incoming_window -= 1;
        if self.incoming_window < INCOMING_WINDOW / 2 {
            self.incoming_window = INCOMING_WINDOW;
            self.shared.write(&self.flow(None, false));
        }
        true
    }

    /// The client's session flow: its incoming window for our transfers.
    pub fn on_flow(&mut self, flow: &Flow) {
        let mut out = self.shared.out.lock();
        let next_incoming = flow.next_incoming_id.unwrap_or(0);
        out.remote_incoming_window = next_incoming
            .wrapping_add(flow.incoming_window)
            .wrapping_sub(out.next_outgoing_id);
        if out.remote_incoming_window > flow.incoming_window {
            // The client counted transfers we have not sent: take its word
            // for the window rather than a wrapped difference.
            out.remote_incoming_window = flow.incoming_window;
        }
        self.shared
            .window_open
            .store(out.remote_incoming_window > 0, Ordering::Release);
    }

    /// The publishing link `handle`, beside what its transfers need of the
    /// rest of the session (borrowed together, so that the publisher stays
    /// in its map while it handles a message).
    pub fn publisher(&mut self, handle: u32) -> Option<(&mut Publisher, SessionLinks<'_>)> {
        let p = self.publishers.get_mut(&handle)?;
        Some((
            p,
            SessionLinks {
                shared: &self.shared,
                replies: &self.replies,
            },
        ))
    }

    /// Takes the unsettled deliveries in `first..=last` whose link is still
    /// attached (or all when `handle` is None: the session ends).
    pub fn take_unsettled(&self, range: Option<(u32, u32)>, handle: Option<u32>) -> Vec<OutDelivery> {
        let mut out = self.shared.out.lock();
        out.unsettled
            .take(range, |d| handle.is_none_or(|h| d.consumer.handle == h))
    }
}
