//! One AMQP connection: the protocol header, the start/tune/open handshake, then the
//! frame loop that hands methods and content to channels, enforces heartbeats, and
//! closes with the right reply code when a client breaks the protocol. A closed
//! connection keeps answering connection.close with close-ok, and discards every
//! other frame, until the client closes its end of the socket.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use rustc_hash::FxHashMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::Instrument;

use super::channel::Channel;
use super::codec::publish_frames::{WholePublish, peek_publish};
use super::codec::{CodecError, Frame, Method, ShortStr, parse_frame, write_heartbeat, write_method};
use super::context::AmqpContext;
use super::error::{AmqpError, AmqpResult, Scope, code};
use super::handshake::handshake;
use crate::core::alarms::Alarms;
use crate::core::exchange::{Exchange, ExchangeKind};
use crate::core::message::Message;
use crate::core::rate_limit::TokenBucket;
use crate::core::topic_permissions::TopicAccess;
use crate::core::vhost::VHost;
use crate::transport::BUSY_READ;
use crate::transport::outbox::Outbox;
use crate::transport::peer::Peer;
use crate::transport::read_sizing::ReadSizing;
use crate::transport::shared_tcp::DirectSocket;

/// The protocol header of AMQP 0-9-1.
pub const PROTOCOL_HEADER: [u8; 8] = *b"AMQP\x00\x00\x09\x01";
/// The alternative header some old clients send for 0-9-1.
pub const PROTOCOL_HEADER_ALT: [u8; 8] = *b"AMQP\x01\x01\x00\x09";
/// How long a client has for each handshake step.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server waits for close-ok after sending connection.close.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest a connection the client closed stays open, answering any
/// further connection.close, for the client to close its end of the socket:
/// RabbitMQ's closing timeout. A shorter negotiated heartbeat timeout applies
/// instead (see [`closing_timeout`]).
pub const CLOSING_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection the client closed waits for the client to close its
/// end: the heartbeat timeout (`heartbeat` seconds, 0 = off) when it is
/// shorter than [`CLOSING_TIMEOUT`], as in RabbitMQ.
pub fn closing_timeout(heartbeat: u16) -> Duration {
    let heartbeat = Duration::from_secs(u64::from(heartbeat));
    if heartbeat.is_zero() {
        CLOSING_TIMEOUT
    } else {
        heartbeat.min(CLOSING_TIMEOUT)
    }
}

/// The settings each publish consults, copied out of the reloadable
/// [`crate::amqp::context::AmqpSettings`] once per read batch: loading those
/// per message cost a twentieth of the broker's CPU when publishing small
/// messages. A reload reaches open connections at their next read.
#[derive(Debug, Clone, Copy)]
pub struct PublishSettings {
    /// Largest message body accepted.
    pub max_message_size: u64,
    /// Add a timestamp property to messages that lack one.
    pub set_timestamp: bool,
}

impl PublishSettings {
    /// The publish settings in `settings`.
    pub fn of(settings: &crate::amqp::context::AmqpSettings) -> Self {
        PublishSettings {
            max_message_size: settings.max_message_size,
            set_timestamp: settings.set_timestamp,
        }
    }
}

/// What channels need to know about their connection.
pub struct ConnInfo {
    /// Shared server state.
    pub ctx: Arc<AmqpContext>,
    /// Connection id (owner of exclusive queues).
    pub id: u64,
    /// Authenticated user name.
    pub user: String,
    /// Who the client logged in as; replaced when a token user sends a
    /// fresh token (`connection.update-secret`).
    pub identity: std::cell::RefCell<crate::auth::Identity>,
    /// How many times the client replaced its secret: part of
    /// [`ConnInfo::permission_generation`], so that a fresh token's scopes
    /// replace the cached permission checks.
    pub secret_updates: std::cell::Cell<u64>,
    /// The vhost opened.
    pub vhost: Arc<VHost>,
    /// Negotiated frame_max.
    pub frame_max: u32,
    /// Client accepts server-sent basic.cancel.
    pub cancel_notify: bool,
    /// Client understands connection.blocked / unblocked.
    pub blocked_notify: bool,
    /// Negotiated heartbeat in seconds (0 = off).
    pub heartbeat: u16,
    /// Negotiated channel_max.
    pub channel_max: u16,
    /// Wall-clock milliseconds, read once per read batch for message timestamps.
    pub now_ms: std::cell::Cell<i64>,
    /// The settings every publish checks, read once per read batch (see
    /// [`PublishSettings`]).
    pub publish_settings: std::cell::Cell<PublishSettings>,
    /// Queues that received their first ready message during the current read
    /// batch; their consumers are woken once the batch is done.
    pub wakes: std::cell::RefCell<Vec<Arc<crate::core::queue::Queue>>>,
    /// A queue published to during the current read batch whose consumers
    /// cannot keep up: the next read waits for its backlog to shrink.
    pub paced_by: std::cell::RefCell<Option<Arc<crate::core::queue::Queue>>>,
    /// The user's permissions in the vhost, with the user-store generation they
    /// were read at (recompiled when it changes).
    pub perms: std::cell::RefCell<(u64, crate::core::permissions::Compiled)>,
}

impl ConnInfo {
    /// Changes whenever the permissions in force may have: with any user or
    /// permission in the store, and when the client replaces its token.
    pub fn permission_generation(&self) -> u64 {
        self.ctx.broker.users.generation() + self.secret_updates.get()
    }

    /// Checks that the user may have `access` to the queue or exchange (`kind`)
    /// `name`, with the permissions in force now.
    pub fn check(
        &self,
        access: crate::core::permissions::Access,
        kind: &str,
        name: &str,
    ) -> Result<(), crate::core::Error> {
        self.with_perms(|p| p.check(access, kind, name, &self.vhost.name, &self.user))
    }

    /// True when `exchange` is a topic exchange on which the user has topic
    /// permissions, so that each routing key published to it is checked.
    pub fn restricts_topics(&self, exchange: &Exchange) -> bool {
        exchange.kind == ExchangeKind::Topic && self.with_perms(|p| p.restricts_topics(&exchange.name))
    }

    /// Checks `key` against the user's topic permissions on `exchange`, known
    /// to be a topic exchange (see [`ConnInfo::restricts_topics`]).
    pub fn check_topic_key(
        &self,
        access: TopicAccess,
        exchange: &Exchange,
        key: &str,
    ) -> Result<(), crate::core::Error> {
        self.with_perms(|p| p.check_topic(access, &exchange.name, key, &self.vhost.name, &self.user))
    }

    /// Checks a binding key (bind, unbind) against the user's topic
    /// permissions on the exchange named `exchange`; only topic exchanges are
    /// restricted, as in RabbitMQ.
    pub fn check_topic(&self, access: TopicAccess, exchange: &str, key: &str) -> Result<(), crate::core::Error> {
        match self.vhost.exchange(exchange) {
            Some(e) if self.restricts_topics(&e) => self.check_topic_key(access, &e, key),
            _ => Ok(()),
        }
    }

    /// Runs `f` on the permissions in force now, recompiling them first if
    /// any user or permission changed since they were read.
    fn with_perms<R>(&self, f: impl FnOnce(&crate::core::permissions::Compiled) -> R) -> R {
        let generation = self.permission_generation();
        let mut p = self.perms.borrow_mut();
        if p.0 != generation {
            let users = &self.ctx.broker.users;
            *p = (
                generation,
                self.identity.borrow().permissions(users, &self.vhost.name, None),
            );
        }
        f(&p.1)
    }

    /// Remembers to let `queue`'s consumers catch up before the next read.
    pub fn pace_after_batch(&self, queue: &Arc<crate::core::queue::Queue>) {
        let mut p = self.paced_by.borrow_mut();
        if p.is_none() {
            *p = Some(queue.clone());
        }
    }

    /// Remembers to wake `queue`'s consumers at the end of the read batch.
    pub fn defer_wake(&self, queue: &Arc<crate::core::queue::Queue>) {
        let mut w = self.wakes.borrow_mut();
        if !w.iter().any(|q| Arc::ptr_eq(q, queue)) {
            w.push(queue.clone());
        }
    }
}

/// Serves one client connection until it closes; `peer` says who it is and
/// whether it came over TLS.
///
/// The future is the connection's task for its whole life, so its size is
/// paid per connection: `peer` is boxed (only the handshake reads it), and
/// the connection is built outside it, so that nothing moved into it keeps
/// a slot of its own while the connection runs.
pub fn serve<S>(ctx: Arc<AmqpContext>, stream: S, peer: Peer) -> impl Future<Output = ()> + Send
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let span = tracing::info_span!("amqp", client = %peer.addr);
    let peer = Box::new(peer);
    async move {
        let direct = crate::transport::shared_tcp::direct_socket(&stream);
        let (mut rd, mut wr) = tokio::io::split(stream);
        let mut header = [0u8; 8];
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, rd.read_exact(&mut header)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return tracing::info!("connection closed before its protocol header: {e}"),
            Err(_) => return tracing::info!("no protocol header within {HANDSHAKE_TIMEOUT:?}"),
        }
        if crate::amqp1::connection::is_amqp1_header(&header) {
            // Boxed: an AMQP 1.0 connection's future is not part of every
            // 0-9-1 connection's.
            return Box::pin(crate::amqp1::connection::serve(ctx, rd, wr, peer, header, direct)).await;
        }
        // The buffer grows with the traffic (see `ReadSizing`).
        let mut buf = BytesMut::new();
        // Boxed: the handshake's state (authentication included) is large and
        // needed once, not for the life of the connection's task.
        let handshaking = Box::pin(handshake(&ctx, &mut rd, &mut wr, &mut buf, &peer, header));
        let (mut conn, writer) = match handshaking.await {
            Ok((info, registration)) => Connection::open(info, registration, wr, direct),
            Err(e) => {
                tracing::info!("connection closed during handshake: {e}");
                let _ = wr.shutdown().await;
                return;
            }
        };
        drop(peer);
        let span = tracing::info_span!("conn", vhost = %conn.info.vhost.name, user = %conn.info.user);
        conn.run(&mut rd, &mut buf).instrument(span.clone()).await;
        let closed_by_client = conn.closed_by_client;
        if !closed_by_client {
            // Otherwise done before close-ok went out.
            conn.cleanup();
        }
        let outbox = conn.outbox.clone();
        let frame_max = conn.info.frame_max;
        let closing = closing_timeout(conn.info.heartbeat);
        // Unlisted now, not after the wait or the linger below.
        drop(conn);
        if closed_by_client {
            // The client has its close-ok, but other threads of it may still
            // send connection.close (each waiting for its own close-ok) before
            // it closes the socket: the socket stays open, and they are
            // answered, until it does.
            let answering = answer_closes(&mut rd, &mut buf, &outbox, frame_max, closing);
            tokio::select! {
                _ = answering.instrument(span) => {}
                _ = ctx.shutdown.cancelled() => {}
            }
        }
        // The writer sends what is buffered (close-ok last) before it shuts
        // the socket down.
        outbox.close();
        let _ = writer.await;
        crate::transport::close_linger::linger(&mut rd, &mut buf).await;
    }
    .instrument(span)
}

/// Serves a connection once one side has closed it (close-ok sent for the
/// client's connection.close, or our own connection.close sent), as RabbitMQ
/// does in its closing state: each further connection.close is answered with
/// close-ok; every other frame, on any channel, is discarded, as AMQP 0-9-1
/// requires of a peer once connection.close was sent. It ends when close-ok
/// arrives, when the client closes its end or the socket fails, at a frame
/// that cannot be delimited (the stream is out of sync), or after `limit`.
/// `buf` holds what was read but not handled yet.
async fn answer_closes<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    outbox: &Outbox,
    frame_max: u32,
    limit: Duration,
) {
    let answer = async {
        loop {
            loop {
                let before = buf.len();
                match parse_frame(buf, frame_max) {
                    Ok(Some(Frame::Method {
                        channel: 0,
                        method: Method::ConnectionClose { .. },
                    })) => outbox.send(|b| {
                        let _ = write_method(b, 0, &Method::ConnectionCloseOk);
                    }),
                    Ok(Some(Frame::Method {
                        channel: 0,
                        method: Method::ConnectionCloseOk,
                    })) => return,
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    // A whole frame whose content does not decode: discarded
                    // like any other.
                    Err(e) if buf.len() < before && !matches!(e, CodecError::BadFrameEnd(_)) => {}
                    Err(_) => return,
                }
            }
            buf.reserve(4096);
            match rd.read_buf(buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    let _ = tokio::time::timeout(limit, async {
        tokio::select! {
            _ = answer => {}
            // The writer failed: nobody reads the answers.
            _ = outbox.closed() => {}
        }
    })
    .await;
}

/// An open connection after the handshake.
struct Connection {
    /// The listing in the broker's connection registry (removed on drop).
    registration: crate::core::connections::Registration,
    info: ConnInfo,
    outbox: Arc<Outbox>,
    /// By number; looked up for every frame, so hashed with FxHash (the
    /// numbers are bounded by channel_max: nothing to flood). Boxed: a map's
    /// table holds room for several entries, and a channel inline in each of
    /// them would cost an idle connection kilobytes.
    channels: FxHashMap<u16, Box<Channel>>,
    /// The resource alarms: while one is on, a connection that publishes is
    /// not read.
    alarms: tokio::sync::watch::Receiver<Alarms>,
    /// This connection has published (so a resource alarm blocks it).
    published: bool,
    /// Whether the client was last told it is blocked.
    told_blocked: bool,
    /// New channels against `channel_rate_limit`.
    channel_rate: TokenBucket,
    /// A publish held back by a resource alarm, handled first once it clears.
    /// Boxed: rarely set, and a frame inline would cost every connection.
    held: Option<Box<Frame>>,
    /// Channels whose close crossed the client's own: gone, but the client
    /// still owes the close-ok for ours, and frames it sent before it saw our
    /// close may follow. They are dropped, not a connection error.
    crossed_closes: Vec<u16>,
    /// The client sent connection.close and close-ok is written: the socket
    /// stays open for the client to close (see [`answer_closes`]).
    closed_by_client: bool,
}

fn is_publish(frame: &Frame) -> bool {
    matches!(
        frame,
        Frame::Method {
            method: Method::BasicPublish { .. },
            ..
        }
    )
}

/// What the frame loop takes off the read buffer next.
enum Step {
    /// A frame for [`Connection::handle_frame`].
    Frame(Frame),
    /// A whole publish the fast path has already handled, with its outcome.
    Handled(AmqpResult<Next>),
}

/// What the frame loop does after a frame.
enum Next {
    Continue,
    Stop,
}

impl Connection {
    /// The connection after a successful handshake, with its writer task
    /// started on `wr` (and direct writes to `direct`, the same socket, when
    /// it is plain TCP).
    fn open<W>(
        info: ConnInfo,
        registration: crate::core::connections::Registration,
        wr: W,
        direct: Option<DirectSocket>,
    ) -> (Connection, tokio::task::JoinHandle<()>)
    where
        W: AsyncWrite + Unpin + Send + 'static,
    {
        tracing::info!(vhost = %info.vhost.name, user = %info.user, "connection established");
        let outbox = Arc::new(Outbox::default());
        let heartbeat = (info.heartbeat > 0).then(|| {
            (
                Duration::from_secs(u64::from(info.heartbeat)) / 2,
                write_heartbeat as fn(&mut BytesMut),
            )
        });
        let writer = outbox.spawn_writer(wr, heartbeat, registration.entry.clone(), direct);
        let alarms = info.ctx.broker.alarms.subscribe();
        let conn = Connection {
            registration,
            info,
            outbox,
            channels: FxHashMap::default(),
            alarms,
            published: false,
            told_blocked: false,
            channel_rate: TokenBucket::default(),
            held: None,
            crossed_closes: Vec::new(),
            closed_by_client: false,
        };
        (conn, writer)
    }

    /// After a read buffer's frames are handled: send every reply in one
    /// write, then deliver to the consumers of queues that got messages.
    /// Replies go first: a client waiting for one (a confirm, a declare-ok)
    /// goes on while the deliveries are made.
    fn end_of_batch(&mut self) {
        self.outbox.flush();
        // Taken out first: delivering runs other code, which must be free to
        // note further wake-ups.
        let mut wakes = std::mem::take(&mut *self.info.wakes.borrow_mut());
        for q in wakes.drain(..) {
            if q.deliver_or_wake() {
                self.info.pace_after_batch(&q);
            }
        }
        let mut kept = self.info.wakes.borrow_mut();
        if kept.is_empty() {
            // The buffer is reused by the next batch.
            *kept = wakes;
        }
    }

    async fn run<R: AsyncRead + Unpin>(&mut self, rd: &mut R, buf: &mut BytesMut) {
        let idle_limit = (self.info.heartbeat > 0).then(|| Duration::from_secs(u64::from(self.info.heartbeat) * 2));
        let shutdown = self.info.ctx.shutdown.clone();
        let entry = self.registration.entry.clone();
        let mut timeout_check = tokio::time::interval(self.info.ctx.settings().consumer_timeout_check);
        timeout_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut busy = false;
        let mut sizing = ReadSizing::default();
        loop {
            self.info.now_ms.set(Message::now_ms());
            self.info
                .publish_settings
                .set(PublishSettings::of(&self.info.ctx.settings()));
            let alarm = self.alarms.borrow().any();
            loop {
                let next = match self.held.take() {
                    Some(frame) if !alarm => Ok(Some(Step::Frame(*frame))),
                    Some(frame) => {
                        self.held = Some(frame);
                        break;
                    }
                    // While an alarm holds publishes back, they take the general path.
                    None if !alarm => match self.whole_publish(buf) {
                        Ok(Some(handled)) => Ok(Some(Step::Handled(handled))),
                        Ok(None) => parse_frame(buf, self.info.frame_max).map(|f| f.map(Step::Frame)),
                        Err(e) => Err(e),
                    },
                    None => parse_frame(buf, self.info.frame_max).map(|f| f.map(Step::Frame)),
                };
                let handled = match next {
                    Ok(Some(Step::Handled(handled))) => handled,
                    Ok(Some(Step::Frame(frame))) if alarm && is_publish(&frame) => {
                        // A resource alarm is on: hold this publish (and everything
                        // after it) until it clears.
                        self.published = true;
                        self.held = Some(Box::new(frame));
                        break;
                    }
                    Ok(Some(Step::Frame(Frame::Method {
                        channel: 0,
                        method: Method::ConnectionUpdateSecret { new_secret, .. },
                    }))) => {
                        // Boxed: it may fetch the token issuer's keys, a large
                        // future this loop would otherwise carry all the time.
                        Box::pin(self.update_secret(&new_secret)).await.map(|()| Next::Continue)
                    }
                    Ok(Some(Step::Frame(frame))) => self.handle_frame(frame),
                    Ok(None) => break,
                    Err(e) => {
                        self.end_of_batch();
                        tracing::warn!("malformed frame: {e}");
                        self.fail(AmqpError::connection(e.reply_code(), e));
                        return;
                    }
                };
                match handled {
                    Ok(Next::Continue) => {}
                    Ok(Next::Stop) => {
                        self.end_of_batch();
                        return;
                    }
                    Err(e) => {
                        self.end_of_batch();
                        self.fail(e);
                        self.await_close_ok(rd, buf).await;
                        return;
                    }
                }
            }
            self.end_of_batch();
            // Let consumers and other connections run between read batches: without
            // this a busy publisher keeps its thread for many batches in a row. A
            // client that sent little (a request waiting for its answer) needs no
            // yield, which would wake an idle worker thread for nothing.
            if busy {
                tokio::task::yield_now().await;
            }
            let paced_by = self.info.paced_by.borrow_mut().take();
            if let Some(queue) = paced_by {
                let _ = queue.pace_publisher(&entry).await;
            }
            if self.alarm_blocked() {
                tokio::select! {
                    _ = self.alarms.changed() => continue,
                    _ = shutdown.cancelled() => {
                        self.fail(AmqpError::connection(code::CONNECTION_FORCED, "broker forced connection closure with reason 'shutdown'"));
                        return;
                    }
                }
            }
            sizing.prepare(buf);
            // Read again each round: update-secret may have moved it.
            let expired = crate::auth::identity::expired(self.info.identity.borrow().deadline());
            let read = async {
                match idle_limit {
                    Some(limit) => tokio::time::timeout(limit, rd.read_buf(buf)).await.ok(),
                    None => Some(rd.read_buf(buf).await),
                }
            };
            tokio::select! {
                r = read => match r {
                    None => {
                        tracing::warn!("missed heartbeats from client, timeout: {}s", self.info.heartbeat);
                        return;
                    }
                    Some(Ok(0)) => {
                        tracing::info!("client closed the socket");
                        return;
                    }
                    Some(Ok(n)) => {
                        entry.count_read(n);
                        sizing.read(n);
                        busy = n >= BUSY_READ;
                    }
                    Some(Err(e)) => {
                        tracing::info!("read failed: {e}");
                        return;
                    }
                },
                _ = shutdown.cancelled() => {
                    self.fail(AmqpError::connection(code::CONNECTION_FORCED, "broker forced connection closure with reason 'shutdown'"));
                    self.await_close_ok(rd, buf).await;
                    return;
                }
                _ = self.alarms.changed() => {}
                _ = timeout_check.tick() => self.close_timed_out_channels(),
                _ = expired => {
                    self.fail(AmqpError::connection(code::CONNECTION_FORCED, "token expired"));
                    self.await_close_ok(rd, buf).await;
                    return;
                }
                _ = entry.closed() => {
                    let reason = entry.reason();
                    tracing::info!("closing connection on request: {reason}");
                    self.fail(AmqpError::connection(code::CONNECTION_FORCED, reason));
                    self.await_close_ok(rd, buf).await;
                    return;
                }
            }
        }
    }

    /// `connection.update-secret`: a token user's fresh token (for the same
    /// user) replaces the old one, its scopes and expiry applying from now
    /// on; a local user's password is checked again. A refused secret closes
    /// the connection (530, as RabbitMQ does).
    async fn update_secret(&mut self, secret: &[u8]) -> AmqpResult<()> {
        let user = self.info.user.clone();
        let refused = |why: String| {
            AmqpError::connection(
                code::NOT_ALLOWED,
                format!("Secret update was refused for user '{user}': {why}"),
            )
            .on(10, 70)
        };
        let secret = std::str::from_utf8(secret).map_err(|_| refused("the secret is not UTF-8".into()))?;
        let broker = self.info.ctx.broker.clone();
        let current = self.info.identity.borrow().clone();
        let fresh = broker
            .auth
            .refresh(&broker.users, &current, secret)
            .await
            .map_err(|e| refused(e.to_string()))?;
        *self.info.identity.borrow_mut() = fresh;
        self.info.secret_updates.set(self.info.secret_updates.get() + 1);
        tracing::info!("secret updated");
        self.outbox.send(|b| {
            let _ = write_method(b, 0, &Method::ConnectionUpdateSecretOk);
        });
        Ok(())
    }

    /// Closes (406) every channel holding a delivery unacknowledged for longer
    /// than its consumer timeout, as RabbitMQ does.
    fn close_timed_out_channels(&mut self) {
        let now = Message::now_ms();
        let expired: Vec<(u16, u64)> = self
            .channels
            .iter()
            .filter(|(_, ch)| !ch.closing)
            .filter_map(|(n, ch)| ch.shared.unacked.lock().timed_out(now).map(|t| (*n, t)))
            .collect();
        for (n, timeout) in expired {
            let text = format!(
                "delivery acknowledgement on channel {n} timed out. Timeout value used: {timeout} ms. This timeout value can be configured, see consumers doc guide to learn more"
            );
            self.close_channel(n, AmqpError::channel(code::PRECONDITION_FAILED, text));
        }
        self.outbox.flush();
    }

    /// Follows the resource alarms: tells a publishing client that understands
    /// it when it is blocked (and why) or unblocked, and returns true while this
    /// connection must not be read (it publishes and an alarm is on).
    fn alarm_blocked(&mut self) -> bool {
        // As in RabbitMQ, only connections that publish are blocked and told so.
        let alarms = *self.alarms.borrow_and_update();
        let blocked = alarms.any() && self.published;
        if blocked != self.told_blocked && self.info.blocked_notify {
            let m = if blocked {
                Method::ConnectionBlocked {
                    reason: ShortStr::from(alarms.reason()),
                }
            } else {
                Method::ConnectionUnblocked
            };
            self.outbox.send(|b| {
                let _ = write_method(b, 0, &m);
            });
        }
        self.told_blocked = blocked;
        blocked
    }

    /// Sends connection.close for a connection-level error; channel-level errors
    /// are handled where they occur, by [`Connection::close_channel`].
    fn fail(&mut self, e: AmqpError) {
        tracing::warn!("closing connection: {}", e.text);
        self.outbox.write(|b| {
            let _ = write_method(
                b,
                0,
                &Method::ConnectionClose {
                    reply_code: e.code,
                    reply_text: ShortStr::from(e.text.as_str()),
                    class_id: e.class_id,
                    method_id: e.method_id,
                },
            );
        });
        self.outbox.flush();
    }

    fn close_channel(&mut self, number: u16, e: AmqpError) {
        tracing::info!(channel = number, "closing channel: {}", e.text);
        if let Some(ch) = self.channels.get_mut(&number) {
            ch.close(&self.info);
            ch.closing = true;
            ch.send(&Method::ChannelClose {
                reply_code: e.code,
                reply_text: ShortStr::from(e.text.as_str()),
                class_id: e.class_id,
                method_id: e.method_id,
            });
        }
    }

    /// After [`Connection::fail`]: waits (up to [`CLOSE_TIMEOUT`]) for the
    /// client's close-ok, answering a connection.close of its own that
    /// crossed ours with close-ok and discarding everything else.
    async fn await_close_ok<R: AsyncRead + Unpin>(&mut self, rd: &mut R, buf: &mut BytesMut) {
        let outbox = self.outbox.clone();
        answer_closes(rd, buf, &outbox, self.info.frame_max, CLOSE_TIMEOUT).await;
    }

    /// The publish fast path: a `basic.publish` whose content header and body
    /// are in the buffer too goes to its channel as one message, without a
    /// [`Frame`] per part (see [`peek_publish`] for what qualifies).
    /// `Ok(None)` leaves the buffer to the general parser: also when the
    /// channel is not open, is closing or expects content, where the general
    /// path's answers apply. An error is a malformed frame, as the general
    /// parser would report it.
    fn whole_publish(&mut self, buf: &mut BytesMut) -> Result<Option<AmqpResult<Next>>, CodecError> {
        let Some(p) = peek_publish(buf, self.info.frame_max) else {
            return Ok(None);
        };
        let Some(ch) = self.channels.get_mut(&p.channel) else {
            return Ok(None);
        };
        if ch.closing || ch.publish.is_some() {
            return Ok(None);
        }
        let publish = WholePublish::split_off_reusing(buf, &p, ch.spare_properties.take())?;
        self.published = true;
        Ok(Some(match ch.publish_whole(&self.info, publish) {
            Err(e) if e.scope == Scope::Channel => {
                self.close_channel(p.channel, e);
                Ok(Next::Continue)
            }
            r => r.map(|()| Next::Continue),
        }))
    }

    fn handle_frame(&mut self, frame: Frame) -> AmqpResult<Next> {
        match frame {
            Frame::Heartbeat { channel: 0 } => Ok(Next::Continue),
            Frame::Heartbeat { .. } => Err(AmqpError::connection(
                code::FRAME_ERROR,
                "heartbeat frame on a non-zero channel",
            )),
            Frame::Method { channel: 0, method } => self.connection_method(method),
            Frame::Method { channel, method } => {
                self.channel_method(channel, method)?;
                Ok(Next::Continue)
            }
            Frame::Header { channel: 0, .. } | Frame::Body { channel: 0, .. } => Err(AmqpError::connection(
                code::UNEXPECTED_FRAME,
                "content frame on channel 0",
            )),
            Frame::Header {
                channel,
                class_id,
                body_size,
                properties,
                raw_properties,
            } => {
                self.content(channel, |ch, info| {
                    ch.on_header(info, class_id, body_size, properties, raw_properties)
                })?;
                Ok(Next::Continue)
            }
            Frame::Body { channel, payload } => {
                self.content(channel, |ch, info| ch.on_body(info, payload))?;
                Ok(Next::Continue)
            }
        }
    }

    fn content(&mut self, number: u16, f: impl FnOnce(&mut Channel, &ConnInfo) -> AmqpResult) -> AmqpResult {
        let Some(ch) = self.channels.get_mut(&number) else {
            if self.crossed_closes.contains(&number) {
                return Ok(());
            }
            return Err(AmqpError::connection(
                code::CHANNEL_ERROR,
                format!("content frame on unopened channel {number}"),
            ));
        };
        if ch.closing {
            return Ok(());
        }
        match f(ch, &self.info) {
            Err(e) if e.scope == Scope::Channel => {
                self.close_channel(number, e);
                Ok(())
            }
            r => r,
        }
    }

    fn connection_method(&mut self, method: Method) -> AmqpResult<Next> {
        match method {
            Method::ConnectionClose {
                reply_code, reply_text, ..
            } => {
                tracing::info!("client closed the connection: {reply_code} {reply_text}");
                // As in RabbitMQ, the channels are closed and the exclusive
                // queues deleted before close-ok goes out: a client that has
                // its close-ok finds them gone. Whatever the channels wrote
                // before is sent first, in order.
                self.cleanup();
                self.outbox.write(|b| {
                    let _ = write_method(b, 0, &Method::ConnectionCloseOk);
                });
                self.closed_by_client = true;
                Ok(Next::Stop)
            }
            Method::ConnectionCloseOk => Ok(Next::Stop),
            Method::ConnectionBlocked { .. } | Method::ConnectionUnblocked => Ok(Next::Continue),
            other => Err(AmqpError::connection(
                code::COMMAND_INVALID,
                format!("unexpected method {} on channel 0", other.name()),
            )
            .on(other.class_id(), other.method_id())),
        }
    }

    fn channel_method(&mut self, number: u16, method: Method) -> AmqpResult {
        let (class, id) = (method.class_id(), method.method_id());
        if let Method::BasicPublish { .. } = method {
            self.published = true;
        }
        if let Method::ChannelOpen = method {
            if self.channels.contains_key(&number) {
                return Err(AmqpError::connection(
                    code::CHANNEL_ERROR,
                    format!("second 'channel.open' seen on channel {number}"),
                )
                .on(class, id));
            }
            let max = self.info.channel_max;
            if number > max || self.channels.len() >= usize::from(max) {
                let open = self.channels.len();
                return Err(AmqpError::connection(
                    code::NOT_ALLOWED,
                    format!("number of channels opened ({open}) has reached the negotiated channel_max ({max})"),
                )
                .on(class, id));
            }
            let broker = &self.info.ctx.broker;
            let user = &self.info.user;
            if let Some(max) = crate::core::limits::in_force(broker.users.limits(user).max_channels)
                && broker.connections.user_channel_count(user) >= max
            {
                return Err(AmqpError::connection(
                    code::NOT_ALLOWED,
                    format!(
                        "number of channels opened for user '{user}' has reached the maximum allowed user limit ({max})"
                    ),
                )
                .on(class, id));
            }
            let rate = self.info.ctx.settings().channel_rate_limit;
            if !self.channel_rate.try_take(rate, std::time::Instant::now()) {
                return Err(AmqpError::connection(
                    code::NOT_ALLOWED,
                    format!("channel creation rate limit ({rate}/s) is reached"),
                )
                .on(class, id));
            }
            self.crossed_closes.retain(|&n| n != number);
            let ch = Channel::new(number, self.outbox.clone(), &self.info);
            ch.send(&Method::ChannelOpenOk);
            self.registration.entry.add_channel(ch.shared.clone());
            self.channels.insert(number, Box::new(ch));
            return Ok(());
        }
        let Some(ch) = self.channels.get_mut(&number) else {
            if let Some(i) = self.crossed_closes.iter().position(|&n| n == number) {
                // The close-ok the client owed for our close ends it.
                if matches!(method, Method::ChannelCloseOk) {
                    self.crossed_closes.swap_remove(i);
                }
                return Ok(());
            }
            return Err(AmqpError::connection(
                code::CHANNEL_ERROR,
                format!("expected 'channel.open' on channel {number}"),
            )
            .on(class, id));
        };
        if ch.closing {
            match method {
                Method::ChannelCloseOk => self.remove_channel(number),
                Method::ChannelClose { .. } => {
                    // Our close crossed the client's: answer its close; its
                    // close-ok for ours may still come.
                    ch.send(&Method::ChannelCloseOk);
                    self.remove_channel(number);
                    self.crossed_closes.push(number);
                }
                _ => {}
            }
            return Ok(());
        }
        match method {
            Method::ChannelClose { .. } => {
                ch.close(&self.info);
                ch.send(&Method::ChannelCloseOk);
                self.remove_channel(number);
                Ok(())
            }
            Method::ChannelCloseOk => Ok(()),
            method => {
                if ch.publish.is_some() {
                    return Err(AmqpError::connection(
                        code::UNEXPECTED_FRAME,
                        "expected content body, got non content body frame instead",
                    )
                    .on(class, id));
                }
                match ch.handle(&self.info, method) {
                    Err(e) if e.scope == Scope::Channel => {
                        self.close_channel(number, e);
                        Ok(())
                    }
                    r => r,
                }
            }
        }
    }

    /// Forgets a closed channel.
    fn remove_channel(&mut self, number: u16) {
        self.channels.remove(&number);
        self.registration.entry.remove_channel(number);
    }

    fn cleanup(&mut self) {
        for ch in self.channels.values_mut() {
            ch.close(&self.info);
            self.registration.entry.remove_channel(ch.shared.number);
        }
        self.channels.clear();
        self.info.vhost.connection_closed(self.info.id);
    }
}
