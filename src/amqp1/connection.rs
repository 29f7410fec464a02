//! One AMQP 1.0 connection after its opening: the frame loop that hands
//! performatives to sessions and links, keeps the idle time-out, and ends
//! with a close carrying the error when the client broke the protocol.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use rustc_hash::FxHashMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::Instrument;

use super::address::Address;
use super::codec::frame::{parse_frame, write_frame, write_heartbeat};
use super::codec::performative::{
    AmqpError, Attach, Begin, DeliveryState, Detach, Disposition, Flow, Performative, Role, Terminus, Transfer, code,
};
use super::codec::types::{Descriptor, Value};
use super::codec::{Frame, FrameKind, transfer};
use super::consumer::LinkConsumer;
use super::error::{condition, from_core};
use super::handshake::{HandshakeError, MAX_FRAME_SIZE, Opened, handshake, send_performative};
use super::publisher::{FixedTarget, PublishContext, Publisher, Target, resolve};
use super::session::{OutDelivery, Session};
use crate::amqp::AmqpContext;
use crate::auth::Identity;
use crate::core::permissions::{Access, Compiled};
use crate::core::queue::Queue;
use crate::core::vhost::VHost;
use crate::transport::outbox::Outbox;
use crate::transport::peer::Peer;
use crate::transport::shared_tcp::DirectSocket;

/// True for the two protocol headers of AMQP 1.0 (with and without SASL).
pub fn is_amqp1_header(header: &[u8; 8]) -> bool {
    header[..4] == *b"AMQP" && (header[4] == 0 || header[4] == 3) && header[5..] == [1, 0, 0]
}

/// Serves an AMQP 1.0 connection whose protocol `header` was read.
pub async fn serve<R, W>(
    ctx: Arc<AmqpContext>,
    mut rd: R,
    mut wr: W,
    peer: Box<Peer>,
    header: [u8; 8],
    direct: Option<DirectSocket>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut buf = BytesMut::new();
    let opened = match Box::pin(handshake(&ctx, &mut rd, &mut wr, &mut buf, &peer, header)).await {
        Ok(opened) => opened,
        Err(HandshakeError::Closed(e)) => {
            tracing::info!(
                "connection refused: {}",
                e.description.as_deref().unwrap_or(&e.condition)
            );
            let _ = send_performative(&mut wr, &Performative::Close(Some(e))).await;
            let _ = wr.shutdown().await;
            return;
        }
        Err(e) => {
            tracing::info!("connection closed during handshake: {e}");
            let _ = wr.shutdown().await;
            return;
        }
    };
    drop(peer);
    let span = tracing::info_span!("conn", vhost = %opened.vhost.name, user = %opened.identity.name());
    async move {
        tracing::info!("AMQP 1.0 connection established");
        let outbox = Arc::new(Outbox::default());
        let heartbeat = opened
            .remote_idle
            .map(|idle| (idle / 2, write_heartbeat as fn(&mut BytesMut)));
        let writer = outbox.spawn_writer(wr, heartbeat, opened.registration.entry.clone(), direct);
        let mut conn = Connection::new(ctx, opened, outbox.clone());
        let error = conn.run(&mut rd, &mut buf).await;
        conn.end_all();
        conn.vhost.connection_closed(conn.id);
        if let Some(e) = error {
            outbox.write(|b| write_frame(b, FrameKind::Amqp, 0, |b| Performative::Close(Some(e)).encode(b)));
        }
        outbox.flush();
        drop(conn);
        outbox.close();
        let _ = writer.await;
        crate::transport::close_linger::linger(&mut rd, &mut buf).await;
    }
    .instrument(span)
    .await
}

/// An open AMQP 1.0 connection.
struct Connection {
    ctx: Arc<AmqpContext>,
    id: u64,
    user: String,
    identity: Identity,
    vhost: Arc<VHost>,
    registration: crate::core::connections::Registration,
    outbox: Arc<Outbox>,
    max_frame_size: u32,
    channel_max: u16,
    /// Sessions by the client's channel.
    sessions: FxHashMap<u16, Session>,
    /// The user's permissions, with the user-store generation they were
    /// compiled at.
    perms: (u64, Compiled),
    /// Queues that got their first messages in this read batch.
    wakes: Vec<Arc<Queue>>,
    /// Queues whose consumers on this connection got credit in this read
    /// batch: delivered to by this task at its end, rather than by waking
    /// each consumer's task (one task wake-up less per top-up, which a
    /// publisher paced by the consumer's credit waits behind).
    granted: Vec<Arc<Queue>>,
    /// A queue whose consumers cannot keep up with what this batch
    /// published: the next read waits for them (see
    /// [`Queue::deliver_or_wake`]).
    paced_by: Option<Arc<Queue>>,
    /// What the transfers of one read batch check, read once per batch
    /// rather than per message (a change reaches the next batch).
    batch: BatchSettings,
    alarms: tokio::sync::watch::Receiver<crate::core::alarms::Alarms>,
}

/// Settings and state read at the start of each read batch.
#[derive(Clone, Copy, Default)]
struct BatchSettings {
    /// A resource alarm holds: publishers get no new credit.
    alarmed: bool,
    /// Messages without a timestamp get the broker's.
    set_timestamp: bool,
}

/// What ends a connection: the error to close it with.
type ConnResult = Result<(), AmqpError>;

fn conn_error(c: &str, text: impl Into<String>) -> AmqpError {
    AmqpError::new(c, text)
}

impl Connection {
    fn new(ctx: Arc<AmqpContext>, o: Opened, outbox: Arc<Outbox>) -> Connection {
        let alarms = ctx.broker.alarms.subscribe();
        Connection {
            user: o.identity.name().to_owned(),
            ctx,
            id: o.id,
            identity: o.identity,
            vhost: o.vhost,
            registration: o.registration,
            outbox,
            max_frame_size: o.max_frame_size,
            channel_max: o.channel_max,
            sessions: FxHashMap::default(),
            perms: (u64::MAX, Compiled::none()),
            wakes: Vec::new(),
            granted: Vec::new(),
            paced_by: None,
            batch: BatchSettings::default(),
            alarms,
        }
    }

    /// Reads and handles frames until the connection ends; returns the
    /// error to close with, None when the client closed or the socket went.
    async fn run<R: AsyncRead + Unpin>(&mut self, rd: &mut R, buf: &mut BytesMut) -> Option<AmqpError> {
        let heartbeat = self.ctx.settings().heartbeat;
        let idle_limit = (heartbeat > 0).then(|| Duration::from_secs(u64::from(heartbeat) * 2));
        let shutdown = self.ctx.shutdown.clone();
        let entry = self.registration.entry.clone();
        let mut pause_mid_read = true;
        loop {
            self.batch = BatchSettings {
                alarmed: self.alarms.borrow().any(),
                set_timestamp: self.ctx.settings().set_timestamp,
            };
            loop {
                match parse_frame(buf, MAX_FRAME_SIZE) {
                    Ok(Some(frame)) => match self.handle_frame(frame) {
                        // A consumer's credit is often smaller than a read:
                        // the rest waits in the buffer for that credit rather
                        // than going through the store.
                        Ok(true) if self.paced_by.is_some() && pause_mid_read => break,
                        Ok(true) => {}
                        Ok(false) => {
                            // The client closed: our close answers it.
                            self.end_of_batch();
                            self.outbox
                                .write(|b| write_frame(b, FrameKind::Amqp, 0, |b| Performative::Close(None).encode(b)));
                            return None;
                        }
                        Err(e) => {
                            self.end_of_batch();
                            tracing::warn!("closing connection: {}", e.description.as_deref().unwrap_or(""));
                            return Some(e);
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        self.end_of_batch();
                        tracing::warn!("malformed frame: {e}");
                        return Some(conn_error(condition::FRAMING, e.to_string()));
                    }
                }
            }
            self.end_of_batch();
            if let Some(queue) = self.paced_by.take() {
                // Consumers that let the limit pass are not reading: the
                // rest of this read is then published without another pause.
                pause_mid_read &= queue.pace_publisher(&entry).await;
                if !buf.is_empty() {
                    continue;
                }
            }
            pause_mid_read = true;
            buf.reserve(64 * 1024);
            let read = async {
                match idle_limit {
                    Some(limit) => tokio::time::timeout(limit, rd.read_buf(buf)).await.ok(),
                    None => Some(rd.read_buf(buf).await),
                }
            };
            tokio::select! {
                r = read => match r {
                    None => {
                        tracing::warn!("client silent past the idle time-out");
                        return Some(conn_error(condition::RESOURCE_LIMIT, "idle time-out"));
                    }
                    Some(Ok(0)) => {
                        tracing::info!("client closed the socket");
                        return None;
                    }
                    Some(Ok(n)) => entry.count_read(n),
                    Some(Err(e)) => {
                        tracing::info!("read failed: {e}");
                        return None;
                    }
                },
                _ = shutdown.cancelled() => {
                    return Some(conn_error(condition::FORCED, "broker forced connection closure with reason 'shutdown'"));
                }
                _ = self.alarms.changed() => self.regrant_credit(),
                _ = entry.closed() => {
                    let reason = entry.reason();
                    tracing::info!("closing connection on request: {reason}");
                    return Some(conn_error(condition::FORCED, reason));
                }
            }
        }
    }

    /// Sends what the batch wrote, then wakes the consumers of queues that
    /// got messages.
    fn end_of_batch(&mut self) {
        for s in self.sessions.values() {
            s.shared.flush_accepts();
        }
        self.outbox.flush();
        for q in self.wakes.drain(..) {
            if q.deliver_or_wake() && self.paced_by.is_none() {
                self.paced_by = Some(q);
            }
        }
        // A consumer's backlog is not this connection's to wait for.
        for q in self.granted.drain(..) {
            q.deliver_or_wake();
        }
    }

    fn alarm(&self) -> bool {
        self.alarms.borrow().any()
    }

    /// Publishers get credit again once an alarm clears.
    fn regrant_credit(&mut self) {
        if self.alarm() {
            return;
        }
        for s in self.sessions.values_mut() {
            let mut flows = Vec::new();
            for p in s.publishers.values_mut() {
                flows.extend(p.top_up_credit());
            }
            for link in flows {
                s.shared.write(&s.flow(Some(link), false));
            }
        }
        self.outbox.flush();
    }

    fn permissions(&mut self) -> &Compiled {
        let generation = self.ctx.broker.users.generation();
        if self.perms.0 != generation {
            self.perms = (
                generation,
                self.identity
                    .permissions(&self.ctx.broker.users, &self.vhost.name, None),
            );
        }
        &self.perms.1
    }

    /// A transfer: a message (or part of one) on a publishing link.
    fn transfer(&mut self, ch: u16, t: Transfer, payload: Bytes) -> ConnResult {
        // Brought up to date, then borrowed beside the sessions.
        self.permissions();
        let Connection {
            ctx,
            id,
            vhost,
            user,
            sessions,
            wakes,
            paced_by,
            perms,
            batch,
            ..
        } = self;
        let Some(s) = sessions.get_mut(&ch) else {
            return Err(conn_error(
                condition::NOT_ALLOWED,
                format!("transfer on unused channel {ch}"),
            ));
        };
        if !s.count_incoming() {
            return Err(conn_error(
                condition::WINDOW_VIOLATION,
                "transfer beyond the session window",
            ));
        }
        let handle = t.handle;
        let Some((p, links)) = s.publisher(handle) else {
            return Err(conn_error(
                condition::UNATTACHED_HANDLE,
                format!("transfer on unattached handle {handle}"),
            ));
        };
        let mut pc = PublishContext {
            ctx,
            vhost,
            user,
            perms: &perms.1,
            wakes,
            paced_by,
            set_timestamp: batch.set_timestamp,
            conn_id: *id,
        };
        match p.on_transfer(&mut pc, &links, t, payload) {
            Ok(()) => {
                if !batch.alarmed
                    && let Some(link) = p.top_up_credit()
                {
                    s.shared.write(&s.flow(Some(link), false));
                }
            }
            Err(e) => {
                tracing::info!("detaching publisher: {:?}", e.description);
                s.publishers.remove(&handle);
                s.shared.write(&Performative::Detach(Detach {
                    handle,
                    closed: true,
                    error: Some(e),
                }));
            }
        }
        Ok(())
    }

    /// Handles one frame; false once the client closed the connection.
    fn handle_frame(&mut self, frame: Frame) -> Result<bool, AmqpError> {
        if frame.body.is_empty() {
            return Ok(true);
        }
        if frame.kind != FrameKind::Amqp {
            return Err(conn_error(condition::FRAMING, "SASL frame after the SASL exchange"));
        }
        let ch = frame.channel;
        let mut body = frame.body;
        // Transfers, one per message, mostly take the direct path.
        if let Some((t, end)) = transfer::decode_head(&body) {
            tracing::trace!(channel = ch, "received {t:?}");
            body.advance(end);
            self.transfer(ch, t, body)?;
            return Ok(true);
        }
        let p = Performative::decode_generic(&body).map_err(|e| conn_error(condition::DECODE, e.to_string()))?;
        tracing::trace!(channel = ch, "received {p:?}");
        match p {
            Performative::Open(_) => return Err(conn_error(condition::NOT_ALLOWED, "second open")),
            Performative::Close(e) => {
                if let Some(e) = e {
                    tracing::info!("client closed with {}: {:?}", e.condition, e.description);
                }
                return Ok(false);
            }
            Performative::Begin(b) => self.begin(ch, b)?,
            Performative::End(_) => {
                if let Some(s) = self.sessions.remove(&ch) {
                    s.shared.flush_accepts();
                    end_session(s);
                    self.write(ch, &Performative::End(None));
                }
            }
            Performative::Attach(a) => self.attach(ch, *a)?,
            Performative::Flow(f) => self.flow(ch, f)?,
            Performative::Transfer(t, payload) => self.transfer(ch, t, payload)?,
            Performative::Disposition(d) => self.disposition(ch, d)?,
            Performative::Detach(d) => {
                let Some(s) = self.sessions.get_mut(&ch) else {
                    return Err(conn_error(
                        condition::NOT_ALLOWED,
                        format!("detach on unused channel {ch}"),
                    ));
                };
                // Only a link still attached on our side gets a detach back:
                // after a refused attach or a link error, the client's
                // detaches (its own and its answer to ours) end nothing.
                let attached = s.publishers.contains_key(&d.handle)
                    || s.replies.contains_key(&d.handle)
                    || s.consumers.get(&d.handle).is_some_and(|c| !c.detached_by_us());
                detach_link(s, d.handle);
                if attached {
                    s.shared.write(&Performative::Detach(Detach {
                        handle: d.handle,
                        closed: d.closed,
                        error: None,
                    }));
                }
            }
        }
        Ok(true)
    }

    fn write(&self, channel: u16, p: &Performative) {
        self.outbox
            .write(|b| write_frame(b, FrameKind::Amqp, channel, |b| p.encode(b)));
    }

    fn begin(&mut self, ch: u16, b: Begin) -> ConnResult {
        if b.remote_channel.is_some() {
            return Err(conn_error(
                condition::NOT_ALLOWED,
                "begin with remote-channel from a client",
            ));
        }
        if ch > self.channel_max {
            return Err(conn_error(
                condition::NOT_ALLOWED,
                format!("channel {ch} above channel-max {}", self.channel_max),
            ));
        }
        if self.sessions.contains_key(&ch) {
            return Err(conn_error(
                condition::NOT_ALLOWED,
                format!("channel {ch} already in use"),
            ));
        }
        let s = Session::new(
            ch,
            self.outbox.clone(),
            self.max_frame_size,
            b.next_outgoing_id,
            b.incoming_window,
        );
        s.shared.write(&s.begin_reply(ch));
        self.sessions.insert(ch, s);
        Ok(())
    }

    fn attach(&mut self, ch: u16, a: Attach) -> ConnResult {
        let perms = self.permissions().clone();
        let Some(s) = self.sessions.get(&ch) else {
            return Err(conn_error(
                condition::NOT_ALLOWED,
                format!("attach on unused channel {ch}"),
            ));
        };
        if a.handle > s.handle_max {
            return Err(conn_error(
                condition::NOT_ALLOWED,
                format!("handle {} above handle-max", a.handle),
            ));
        }
        if s.publishers.contains_key(&a.handle)
            || s.consumers.contains_key(&a.handle)
            || s.replies.contains_key(&a.handle)
        {
            return Err(conn_error(
                condition::NOT_ALLOWED,
                format!("handle {} already in use", a.handle),
            ));
        }
        let result = match a.role {
            Role::Sender => self.attach_publisher(ch, &a, &perms),
            Role::Receiver => self.attach_consumer(ch, &a, &perms),
        };
        if let Err(e) = result {
            tracing::info!(link = %a.name, "attach refused: {:?}", e.description);
            let Some(s) = self.sessions.get(&ch) else { return Ok(()) };
            // The standard's refusal: an attach with no terminus on our
            // side, then a detach with the error.
            let reply = Attach {
                role: match a.role {
                    Role::Sender => Role::Receiver,
                    Role::Receiver => Role::Sender,
                },
                source: if a.role == Role::Sender { a.source.clone() } else { None },
                target: if a.role == Role::Receiver {
                    a.target.clone()
                } else {
                    None
                },
                initial_delivery_count: (a.role == Role::Receiver).then_some(0),
                max_message_size: None,
                properties: None,
                ..a
            };
            s.shared.write(&Performative::Attach(Box::new(reply)));
            s.shared.write(&Performative::Detach(Detach {
                handle: a.handle,
                closed: true,
                error: Some(e),
            }));
        }
        Ok(())
    }

    /// The client attaches as sender: it publishes to the target.
    fn attach_publisher(&mut self, ch: u16, a: &Attach, perms: &Compiled) -> ConnResult {
        if a.target.as_ref().is_some_and(is_coordinator) {
            // A transaction controller: RabbitMQ 4 has no AMQP 1.0
            // transactions either.
            return Err(conn_error(condition::NOT_IMPLEMENTED, "transactions are not supported"));
        }
        let target = a
            .target
            .as_ref()
            .and_then(|t| Terminus::parse(t, false))
            .unwrap_or_default();
        let max = self.ctx.settings().max_message_size;
        let target = match target.address.as_deref() {
            None => Target::PerMessage,
            Some("/management") => Target::Management(a.name.clone()),
            Some(addr) => {
                let address = Address::parse(addr).map_err(|e| conn_error(condition::INVALID_FIELD, e.to_string()))?;
                let pc = PublishContext {
                    ctx: &self.ctx,
                    vhost: &self.vhost,
                    user: &self.user,
                    perms,
                    wakes: &mut Vec::new(),
                    paced_by: &mut None,
                    set_timestamp: self.batch.set_timestamp,
                    conn_id: self.id,
                };
                let (x, key) = resolve(&pc, &address)?;
                Target::Exchange(FixedTarget::new(x, key))
            }
        };
        let alarm = self.alarm();
        let Some(s) = self.sessions.get_mut(&ch) else {
            return Ok(());
        };
        let mut p = Publisher::new(a.handle, target, max);
        p.delivery_count = a.initial_delivery_count.unwrap_or(0);
        let reply = Attach {
            name: a.name.clone(),
            handle: a.handle,
            role: Role::Receiver,
            snd_settle_mode: a.snd_settle_mode,
            rcv_settle_mode: 0,
            source: a.source.clone(),
            target: a.target.clone(),
            initial_delivery_count: None,
            max_message_size: Some(max),
            properties: a.properties.clone(),
        };
        s.shared.write(&Performative::Attach(Box::new(reply)));
        if !alarm && let Some(link) = p.top_up_credit() {
            s.shared.write(&s.flow(Some(link), false));
        }
        s.publishers.insert(a.handle, p);
        Ok(())
    }

    /// The client attaches as receiver: it consumes the source queue.
    fn attach_consumer(&mut self, ch: u16, a: &Attach, perms: &Compiled) -> ConnResult {
        let source = a
            .source
            .as_ref()
            .and_then(|t| Terminus::parse(t, true))
            .unwrap_or_default();
        let Some(addr) = source.address.as_deref() else {
            return Err(conn_error(
                condition::INVALID_FIELD,
                "a receiving link needs a source address",
            ));
        };
        let address = Address::parse(addr).map_err(|e| conn_error(condition::INVALID_FIELD, e.to_string()))?;
        if address == Address::Management {
            return self.attach_reply_link(ch, a);
        }
        let Address::Queue(name) = address else {
            return Err(conn_error(
                condition::INVALID_FIELD,
                format!("'{addr}' is not a queue to consume from"),
            ));
        };
        let Some(queue) = self.vhost.queue(&name) else {
            return Err(conn_error(
                condition::NOT_FOUND,
                format!("no queue '{name}' in vhost '{}'", self.vhost.name),
            ));
        };
        perms
            .check(Access::Read, "queue", &name, &self.vhost.name, &self.user)
            .map_err(|e| from_core(&e))?;
        queue.check_owner(self.id).map_err(|e| from_core(&e))?;
        let stream_options = match queue.is_stream() {
            true => Some(
                super::stream_source::consumer_options(source.filter.as_ref())
                    .map_err(|e| conn_error(condition::INVALID_FIELD, e))?,
            ),
            false => None,
        };
        let Some(s) = self.sessions.get_mut(&ch) else {
            return Ok(());
        };
        // Settled mode (1) asks for deliveries sent settled; otherwise the
        // client settles each one.
        let presettled = a.snd_settle_mode == 1;
        let reply = Attach {
            name: a.name.clone(),
            handle: a.handle,
            role: Role::Sender,
            snd_settle_mode: if presettled { 1 } else { 0 },
            rcv_settle_mode: 0,
            source: a
                .source
                .as_ref()
                .map(|s| super::stream_source::applied_only(s, queue.is_stream())),
            target: a.target.clone(),
            initial_delivery_count: Some(0),
            max_message_size: None,
            properties: None,
        };
        let consumer = LinkConsumer::new(
            self.ctx.next_id(),
            a.handle,
            a.name.clone(),
            queue.clone(),
            presettled,
            s.shared.clone(),
        );
        match &stream_options {
            Some(opts) => queue.add_stream_consumer(consumer.clone(), false, opts),
            None => queue.add_consumer(consumer.clone(), false),
        }
        .map_err(|e| from_core(&e))?;
        s.shared.write(&Performative::Attach(Box::new(reply)));
        consumer.spawn();
        s.consumers.insert(a.handle, consumer);
        Ok(())
    }

    /// The client attaches the receiving half of a management link pair.
    fn attach_reply_link(&mut self, ch: u16, a: &Attach) -> ConnResult {
        let Some(s) = self.sessions.get_mut(&ch) else {
            return Ok(());
        };
        let reply = Attach {
            name: a.name.clone(),
            handle: a.handle,
            role: Role::Sender,
            snd_settle_mode: 1,
            rcv_settle_mode: 0,
            source: a.source.clone(),
            target: a.target.clone(),
            initial_delivery_count: Some(0),
            max_message_size: None,
            properties: a.properties.clone(),
        };
        s.shared.write(&Performative::Attach(Box::new(reply)));
        let link = super::management::ReplyLink::new(a.handle, a.name.clone(), s.shared.clone());
        s.replies.insert(a.handle, link);
        Ok(())
    }

    fn flow(&mut self, ch: u16, f: Flow) -> ConnResult {
        let Some(s) = self.sessions.get_mut(&ch) else {
            return Err(conn_error(
                condition::NOT_ALLOWED,
                format!("flow on unused channel {ch}"),
            ));
        };
        s.on_flow(&f);
        let Some(handle) = f.handle else {
            for c in s.consumers.values() {
                c.wake();
            }
            if f.echo {
                s.shared.write(&s.flow(None, false));
            }
            return Ok(());
        };
        if let Some(c) = s.consumers.get(&handle).cloned() {
            let mut credit = c.grant(f.delivery_count, f.link_credit.unwrap_or(0));
            if f.drain {
                // Deliver what the credit allows now, then give back the rest.
                c.queue.deliver_ready();
                credit = c.drain();
            } else if !self.granted.iter().any(|q| Arc::ptr_eq(q, &c.queue)) {
                self.granted.push(c.queue.clone());
            }
            // The session window may have opened for the others.
            for other in s.consumers.values().filter(|o| o.handle != handle) {
                other.wake();
            }
            if f.drain || f.echo {
                s.shared
                    .write(&s.flow(Some((handle, credit.delivery_count, credit.credit)), f.drain));
            }
        } else if let Some(r) = s.replies.get(&handle) {
            let (delivery_count, credit) = r.grant(f.delivery_count, f.link_credit.unwrap_or(0));
            if f.echo || f.drain {
                s.shared.write(&s.flow(Some((handle, delivery_count, credit)), false));
            }
        } else if let Some(p) = s.publishers.get(&handle) {
            if f.echo {
                s.shared
                    .write(&s.flow(Some((handle, p.delivery_count, p.credit)), false));
            }
        } else {
            // A link we refused (or detached) whose detach the client has
            // not seen yet: its flow crossed ours and means nothing now.
            tracing::debug!("flow on unattached handle {handle} ignored");
        }
        Ok(())
    }

    fn disposition(&mut self, ch: u16, d: Disposition) -> ConnResult {
        let Some(s) = self.sessions.get(&ch) else {
            return Err(conn_error(
                condition::NOT_ALLOWED,
                format!("disposition on unused channel {ch}"),
            ));
        };
        if d.role != Role::Receiver {
            // The client settling its own transfers, which we settled first.
            return Ok(());
        }
        let last = d.last.unwrap_or(d.first);
        let Some(state) = d.state.clone() else {
            return Ok(());
        };
        if !d.settled {
            // Receiver settles second: we settle, then it forgets.
            s.shared.write(&Performative::Disposition(Disposition {
                role: Role::Sender,
                settled: true,
                ..d.clone()
            }));
        }
        let taken = s.take_unsettled(Some((d.first, last)), None);
        settle(taken, &state);
        Ok(())
    }

    /// Ends every session: the connection is going.
    fn end_all(&mut self) {
        for (_, s) in self.sessions.drain() {
            end_session(s);
        }
    }
}

/// Applies a client's outcome to deliveries taken off the unsettled map.
fn settle(taken: Vec<OutDelivery>, state: &DeliveryState) {
    // Grouped by link: a link reads one queue, and a stream settles per reader.
    let mut by_link: Vec<(Arc<LinkConsumer>, Vec<crate::store::SegPos>)> = Vec::new();
    for d in taken {
        match by_link.iter_mut().find(|(c, _)| Arc::ptr_eq(c, &d.consumer)) {
            Some((_, positions)) => positions.push(d.pos),
            None => by_link.push((d.consumer, vec![d.pos])),
        }
    }
    for (c, positions) in by_link {
        let q = &c.queue;
        if q.is_stream() {
            // A stream keeps its messages: a settlement moves the reader's
            // offset, and a release is ignored, as in RabbitMQ.
            let acked = !matches!(state, DeliveryState::Released | DeliveryState::Modified { .. });
            q.settle_stream(c.id, positions, acked);
        } else {
            match state {
                DeliveryState::Accepted => q.ack(positions),
                DeliveryState::Rejected(_)
                | DeliveryState::Modified {
                    undeliverable_here: true,
                    ..
                } => q.reject(positions),
                DeliveryState::Released | DeliveryState::Modified { .. } => q.requeue(positions),
                DeliveryState::Received => {}
            }
        }
        c.wake();
    }
}

/// Detaches link `handle`: a consumer stops and its unsettled deliveries go
/// back to the queue.
fn detach_link(s: &mut Session, handle: u32) {
    s.publishers.remove(&handle);
    s.replies.remove(&handle);
    if let Some(c) = s.consumers.remove(&handle) {
        c.cancel();
        let back = s.take_unsettled(None, Some(handle));
        settle(back, &DeliveryState::Released);
    }
}

/// Ends a session: every link detaches.
fn end_session(mut s: Session) {
    let handles: Vec<u32> = s.consumers.keys().copied().collect();
    for h in handles {
        detach_link(&mut s, h);
    }
    s.publishers.clear();
}

/// Whether a target is a transaction coordinator (the standard's
/// `coordinator`, by code or by name).
fn is_coordinator(target: &Value) -> bool {
    match target {
        Value::Described(d, _) => match &**d {
            Descriptor::Code(c) => *c == code::COORDINATOR,
            Descriptor::Name(name) => name == "amqp:coordinator:list",
        },
        _ => false,
    }
}
