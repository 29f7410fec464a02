//! One MQTT connection: CONNECT and CONNACK, then the packet loop that routes
//! publishes into the core, manages subscriptions, acknowledges, answers
//! pings and enforces the keep alive, and at the end publishes the will when
//! the client did not say DISCONNECT.
//!
//! MQTT 3.1.1 has no way to tell a client why the broker closes: every
//! protocol violation closes the network connection [MQTT-4.8.0-1] with a log
//! line naming the broken rule. An MQTT 5 client first gets a DISCONNECT
//! with the reason code.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::Instrument;

use super::codec::{
    Ack, Connack, Connect, DecodeError, Disconnect, Packet, Properties, ProtocolVersion, Publish, QoS, ReasonCode,
    Suback, Subscribe, Unsuback, Unsubscribe, Will, parse_packet, write_connack, write_packet,
};
use super::connect::{Admitted, ConnectError, admit, read_connect};
use super::context::{MqttContext, MqttSettings};
use super::delivery::{ClientLimits, Deliveries, MqttConsumer, Source, Subscription};
use super::publish_acks::{PublishAck, PublishAcks};
use super::routing::{Outgoing, Publisher};
use super::session::{Session, SessionExpiry, TOPIC_EXCHANGE, subscription};
use super::session_registry::{Claim, SessionState};
use super::topic_alias::{TOPIC_ALIAS_MAXIMUM, TopicAliases};
use super::topic_map::topic_to_routing_key;
use super::{shared_group, shared_subscription};
use crate::core::connections::{ConnectionInfo, Registration};
use crate::core::login_throttle::Admission;
use crate::core::message::Message;
use crate::core::permissions::{Access, Compiled};
use crate::core::queue::Queue;
use crate::core::topic_permissions::TopicAccess;
use crate::core::{FieldTable, FieldValue};
use crate::store::SegPos;
use crate::transport::BUSY_READ;
use crate::transport::outbox::Outbox;
use crate::transport::peer::Peer;
use crate::transport::read_sizing::{QUIET_CAPACITY, ReadSizing};
/// Why the packet loop closes the connection.
#[derive(Debug, thiserror::Error)]
enum Violation {
    #[error("malformed packet: {}", .0.with_rule())]
    Malformed(#[from] DecodeError),
    #[error("second CONNECT [MQTT-3.1.0-2]")]
    SecondConnect,
    #[error("{0} may only be sent by a server")]
    ServerPacket(&'static str),
    #[error("{1}")]
    Refused(ReasonCode, String),
}

impl Violation {
    /// The reason an MQTT 5 client is given.
    fn reason(&self) -> ReasonCode {
        match self {
            Violation::Malformed(e) => e.reason_code(),
            Violation::SecondConnect | Violation::ServerPacket(_) => ReasonCode::PROTOCOL_ERROR,
            Violation::Refused(code, _) => *code,
        }
    }
}

/// How the packet loop ended.
enum End {
    /// The client sent DISCONNECT: no will, unless MQTT 5's reason 0x04
    /// asked for it.
    Disconnect { will: bool },
    /// Anything else: the will is published, and an MQTT 5 client is told
    /// why with this reason (when the socket still works).
    Abnormal(Option<ReasonCode>),
    /// The broker is shutting down: the session is kept, no will.
    Shutdown,
}

/// Serves one client connection until it closes; `peer` says who it is and
/// whether it came over TLS.
pub async fn serve<S>(ctx: Arc<MqttContext>, stream: S, peer: Peer)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let span = tracing::info_span!("mqtt", client = %peer.addr);
    async move {
        let direct = crate::transport::shared_tcp::direct_socket(&stream);
        let (mut rd, mut wr) = tokio::io::split(stream);
        // The buffer grows with the traffic (see `ReadSizing`).
        let mut buf = BytesMut::with_capacity(QUIET_CAPACITY);
        // Boxed: CONNECT, authentication and the session's opening are large
        // and needed once, not for the life of the connection's task.
        let establishing = Box::pin(establish(&ctx, &mut rd, &mut wr, &mut buf, &peer));
        let Some((mut conn, outbox)) = establishing.await else {
            return;
        };
        drop(peer);
        let span = tracing::info_span!("session", vhost = %conn.session.vhost.name, client_id = %conn.client_id);
        // The session is whole again before the client reads its CONNACK: a
        // message published right after it reaches the shared subscriptions.
        let resumed = span.in_scope(|| conn.resume());
        let writer = outbox.spawn_writer(wr, None, conn.registration.entry.clone(), direct);
        let end = match resumed {
            Ok(()) => conn.run(&mut rd, buf).instrument(span.clone()).await,
            Err(end) => end,
        };
        span.in_scope(|| conn.finish(end));
        outbox.close();
        let _ = writer.await;
    }
    .instrument(span)
    .await
}

/// Reads the CONNECT, admits and registers the client and opens its
/// session, with the CONNACK queued in the returned outbox; `None` when the
/// client was refused (its CONNACK sent and the socket closed) or left.
async fn establish<R, W>(
    ctx: &Arc<MqttContext>,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    peer: &Peer,
) -> Option<(Connection, Arc<Outbox>)>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let connect = match read_connect(rd, buf, ctx.settings().max_packet_size).await {
        Ok(c) => c,
        Err(ConnectError::Malformed(DecodeError::UnsupportedProtocolLevel(level))) => {
            tracing::info!("unsupported protocol level {level} [MQTT-3.1.2-2]");
            let refusal = refusal(ReasonCode::UNSUPPORTED_PROTOCOL_VERSION);
            send_and_close(wr, &Packet::Connack(refusal), ProtocolVersion::V3_1_1).await;
            return None;
        }
        Err(e) => {
            tracing::info!("connection closed: {e}");
            let _ = wr.shutdown().await;
            return None;
        }
    };
    let version = connect.protocol;
    let logins = &ctx.broker.logins;
    let source = peer.addr.ip();
    // The creation rate is checked first: the login's password hashing
    // is the cost it saves. MQTT 3.1.1 has no code for it but "unavailable".
    let admitted = match ctx.broker.connections.admit_new() {
        Err(why) if version.is_v5() => Err((ReasonCode::CONNECTION_RATE_EXCEEDED, why)),
        Err(why) => Err((ReasonCode::SERVER_UNAVAILABLE, why)),
        Ok(()) => match logins.admit(source) {
            Admission::Refused(left) => Err((ReasonCode::CONNECTION_RATE_EXCEEDED, Admission::refusal_text(left))),
            Admission::Check => admit(ctx, &connect, peer).await,
        },
    };
    let admitted = match admitted {
        Ok(a) => {
            logins.succeeded(source);
            a
        }
        Err((code, why)) => {
            tracing::warn!("connection refused ({code}): {why}");
            if code == ReasonCode::BAD_USER_NAME_OR_PASSWORD {
                tokio::time::sleep(logins.failed(source)).await;
            }
            send_and_close(wr, &Packet::Connack(refusal(code)), version).await;
            return None;
        }
    };
    let id = ctx.broker.connections.next_id();
    let info = ConnectionInfo {
        id,
        protocol: match version {
            ProtocolVersion::V3_1 => "MQTT 3.1",
            ProtocolVersion::V3_1_1 => "MQTT 3.1.1",
            ProtocolVersion::V5 => "MQTT 5.0",
        },
        user: admitted.user.clone(),
        vhost: admitted.vhost.name.clone(),
        peer: peer.addr,
        local: peer.local,
        auth_mechanism: admitted.mechanism.into(),
        client_properties: client_properties(&admitted.client_id),
        frame_max: 0,
        channel_max: 0,
        heartbeat: connect.keep_alive,
        tls: peer.tls_info(),
    };
    let limits = admitted.identity.connection_limits(&admitted.vhost);
    let registration = match ctx.broker.connections.register(info, Message::now_ms(), limits) {
        Ok(r) => r,
        Err(reached) => {
            tracing::warn!(
                "connection refused: {}",
                reached.describe(&admitted.vhost.name, &admitted.user)
            );
            send_and_close(wr, &Packet::Connack(refusal(ReasonCode::QUOTA_EXCEEDED)), version).await;
            return None;
        }
    };
    let client_id = admitted.client_id.as_str();
    let clean_start = connect.clean_session;
    let expiry = session_expiry(&connect);
    let claim = ctx
        .sessions
        .claim(&admitted.vhost.name, client_id, id, clean_start)
        .await;
    let opened = Session::open(&admitted.vhost, client_id, clean_start, expiry, id);
    let (session, present) = match opened {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(client_id, "cannot open the session: {e}");
            ctx.sessions.release(&admitted.vhost.name, client_id, id, clean_start);
            let refusal = refusal(ReasonCode::SERVER_UNAVAILABLE);
            send_and_close(wr, &Packet::Connack(refusal), version).await;
            return None;
        }
    };
    tracing::info!(vhost = %admitted.vhost.name, user = %admitted.user, client_id, clean_start, present, ?version, "connection established");
    let outbox = Arc::new(Outbox::default());
    let connack = Connack {
        session_present: present,
        code: ReasonCode::SUCCESS,
        properties: version.is_v5().then(|| connack_properties(ctx, &admitted, &connect)),
    };
    outbox.write(|out| {
        // The CONNACK's strings are a client id and fit.
        let _ = write_connack(out, &connack, version);
    });
    let conn = Connection::new(ctx, registration, session, claim, outbox.clone(), &admitted, &connect);
    Some((conn, outbox))
}

/// The client properties an MQTT connection shows in the management API:
/// its client id.
fn client_properties(client_id: &str) -> crate::wire::PackedTable {
    let mut table = FieldTable::new();
    table.insert(
        "client_id",
        FieldValue::LongStr(Bytes::copy_from_slice(client_id.as_bytes())),
    );
    crate::wire::PackedTable::from(&table)
}

/// How long the session of `connect` outlives its connection.
fn session_expiry(connect: &Connect) -> SessionExpiry {
    match connect.protocol {
        ProtocolVersion::V5 => SessionExpiry::from_interval(
            connect
                .properties
                .as_ref()
                .and_then(|p| p.session_expiry_interval)
                .unwrap_or(0),
        ),
        _ if connect.clean_session => SessionExpiry::WithConnection,
        _ => SessionExpiry::Never,
    }
}

/// What an MQTT 5 CONNACK tells the client: an assigned client id, and the
/// limits that differ from the protocol's defaults.
fn connack_properties(ctx: &MqttContext, admitted: &Admitted, connect: &Connect) -> Box<Properties> {
    let settings = ctx.settings();
    let mut p = Properties {
        topic_alias_maximum: Some(TOPIC_ALIAS_MAXIMUM),
        ..Properties::default()
    };
    let keep_alive = keep_alive(&settings, connect);
    if keep_alive != connect.keep_alive {
        p.server_keep_alive = Some(keep_alive);
    }
    if admitted.assigned_client_id {
        p.assigned_client_identifier = super::codec::MqttStr::try_from(admitted.client_id.as_str()).ok();
    }
    if settings.max_packet_size < super::codec::MAX_REMAINING_LENGTH {
        // The announced size counts the whole packet; the setting bounds what
        // follows the fixed header (at most 5 bytes).
        p.maximum_packet_size = u32::try_from(settings.max_packet_size + 5).ok();
    }
    Box::new(p)
}

/// The keep alive the connection runs with: the client's, unless an MQTT 5
/// client asked for none or for more than `max_keep_alive`; then the maximum,
/// which CONNACK's Server Keep Alive tells it [MQTT-3.2.2-21]. A 3.1.1 client
/// cannot be told, so it keeps its own.
fn keep_alive(settings: &MqttSettings, connect: &Connect) -> u16 {
    let (asked, max) = (connect.keep_alive, settings.max_keep_alive);
    if connect.protocol.is_v5() && max > 0 && (asked == 0 || asked > max) {
        max
    } else {
        asked
    }
}

/// A refusing CONNACK.
fn refusal(code: ReasonCode) -> Connack {
    Connack {
        session_present: false,
        code,
        properties: None,
    }
}

/// Sends one packet and closes [MQTT-3.2.2-5].
async fn send_and_close<W: AsyncWrite + Unpin>(wr: &mut W, packet: &Packet, version: ProtocolVersion) {
    let mut out = BytesMut::with_capacity(16);
    let _ = write_packet(&mut out, packet, version);
    let _ = wr.write_all(&out).await;
    let _ = wr.flush().await;
    let _ = wr.shutdown().await;
}

/// An open connection after CONNACK.
struct Connection {
    ctx: Arc<MqttContext>,
    registration: Registration,
    version: ProtocolVersion,
    session: Session,
    claim: Claim,
    outbox: Arc<Outbox>,
    deliveries: Arc<Deliveries>,
    /// The consumer of the session's queue.
    consumer: Arc<MqttConsumer>,
    /// Consumers of shared subscriptions, by their full `$share/...` filter.
    shared: HashMap<String, Arc<MqttConsumer>>,
    acks: Arc<PublishAcks>,
    user: String,
    /// Who the client logged in as (its permissions, and a token's expiry).
    identity: crate::auth::Identity,
    client_id: String,
    keep_alive: u16,
    will: Option<Will>,
    expiry: SessionExpiry,
    aliases: TopicAliases,
    /// The user's permissions and topic permissions, with the user-store
    /// generation they were read at (recompiled when it changes).
    perms: (u64, Compiled),
    publisher: Publisher,
    scratch: BytesMut,
    /// Deliveries PUBACKed in the current read, acked in their queues at its end.
    settled: Vec<(Arc<Queue>, SegPos)>,
}

impl Connection {
    fn new(
        ctx: &Arc<MqttContext>,
        registration: Registration,
        session: Session,
        claim: Claim,
        outbox: Arc<Outbox>,
        admitted: &Admitted,
        connect: &Connect,
    ) -> Connection {
        let version = connect.protocol;
        let state: &Arc<SessionState> = &claim.state;
        let props = connect.properties.as_deref();
        // The client's receive maximum bounds its unacknowledged deliveries.
        let max_inflight = props
            .and_then(|p| p.receive_maximum)
            .map_or(ctx.settings().max_inflight, |m| m.min(ctx.settings().max_inflight));
        let deliveries = Deliveries::new(
            outbox.clone(),
            state.clone(),
            version,
            max_inflight,
            ClientLimits {
                max_packet_size: props.and_then(|p| p.maximum_packet_size),
                topic_alias_maximum: props.and_then(|p| p.topic_alias_maximum).unwrap_or(0),
            },
        );
        let consumer = deliveries.consumer(
            ctx.broker.connections.next_id(),
            format!("mqtt-{}", admitted.client_id),
            session.queue.clone(),
            Source::Session(session.subscriptions.clone()),
        );
        Connection {
            ctx: ctx.clone(),
            registration,
            version,
            client_id: admitted.client_id.clone(),
            session,
            acks: PublishAcks::new(outbox.clone(), version),
            claim,
            outbox,
            deliveries,
            consumer,
            shared: HashMap::new(),
            user: admitted.user.clone(),
            identity: admitted.identity.clone(),
            keep_alive: keep_alive(&ctx.settings(), connect),
            will: connect.will.clone(),
            expiry: session_expiry(connect),
            aliases: TopicAliases::default(),
            perms: (0, Compiled::none()),
            publisher: Publisher::default(),
            scratch: BytesMut::new(),
            settled: Vec::new(),
        }
    }

    /// Picks the session up where it was left: releases of QoS 2 messages the
    /// client acknowledged, the session queue's consumer, and the groups of its
    /// shared subscriptions. Runs before the writer sends CONNACK.
    fn resume(&mut self) -> Result<(), End> {
        let released: Vec<u16> = self.claim.state.released.lock().iter().copied().collect();
        for packet_id in released {
            self.send(&Packet::Pubrel(Ack::ok(packet_id)));
        }
        if let Err(e) = self.session.queue.add_consumer(self.consumer.clone(), false) {
            tracing::error!("cannot consume from the session queue: {e}");
            return Err(End::Abnormal(Some(ReasonCode::UNSPECIFIED_ERROR)));
        }
        self.consumer.spawn();
        for (full_filter, sub) in self.session.stored_shared() {
            if let Err(e) = self.join_shared(&full_filter, sub) {
                tracing::warn!(filter = %full_filter, "cannot rejoin the shared subscription: {e}");
            }
        }
        Ok(())
    }

    async fn run<R: AsyncRead + Unpin>(&mut self, rd: &mut R, mut buf: BytesMut) -> End {
        self.outbox.flush();
        // The keep alive: the connection is dropped after 1.5 times the interval
        // without a packet [MQTT-3.1.2-24].
        let idle_limit = (self.keep_alive > 0).then(|| Duration::from_millis(u64::from(self.keep_alive) * 1500));
        let shutdown = self.ctx.shutdown.clone();
        let entry = self.registration.entry.clone();
        let kick = self.claim.kick.clone();
        let queue_gone = self.consumer.queue_gone.clone();
        let mut alarms = self.ctx.broker.alarms.subscribe();
        let mut busy = false;
        let mut sizing = ReadSizing::default();
        // A token's expiry ends the connection, as LavinMQ does (MQTT has no
        // way to present a fresh token on an open connection).
        let expires = self.identity.deadline();
        loop {
            // Read once per batch, not per packet: settings change rarely.
            let max_packet_size = self.ctx.settings().max_packet_size;
            loop {
                match parse_packet(&mut buf, max_packet_size, self.version) {
                    Ok(Some(packet)) => match self.handle(packet) {
                        Ok(None) => {}
                        Ok(Some(end)) => {
                            self.end_of_batch();
                            return end;
                        }
                        Err(v) => {
                            self.end_of_batch();
                            tracing::warn!("closing connection: {v}");
                            return End::Abnormal(Some(v.reason()));
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        self.end_of_batch();
                        let v = Violation::Malformed(e);
                        tracing::warn!("closing connection: {v}");
                        return End::Abnormal(Some(v.reason()));
                    }
                }
            }
            self.end_of_batch();
            // A busy publisher lets other tasks run between read batches; a client
            // waiting for an answer does not need to (a yield wakes an idle worker).
            if busy {
                tokio::task::yield_now().await;
            }
            // While a resource alarm is on, publishers are not read.
            while alarms.borrow_and_update().any() {
                tokio::select! {
                    _ = alarms.changed() => {}
                    _ = shutdown.cancelled() => return End::Shutdown,
                }
            }
            sizing.prepare(&mut buf);
            let read = async {
                match idle_limit {
                    Some(limit) => tokio::time::timeout(limit, rd.read_buf(&mut buf)).await.ok(),
                    None => Some(rd.read_buf(&mut buf).await),
                }
            };
            tokio::select! {
                r = read => match r {
                    None => {
                        tracing::info!("closing connection: no packet within 1.5 times the keep alive of {}s", self.keep_alive);
                        return End::Abnormal(Some(ReasonCode::KEEP_ALIVE_TIMEOUT));
                    }
                    Some(Ok(0)) => {
                        tracing::info!("client closed the socket without DISCONNECT");
                        return End::Abnormal(None);
                    }
                    Some(Ok(n)) => {
                        entry.count_read(n);
                        sizing.read(n);
                        busy = n >= BUSY_READ;
                    }
                    Some(Err(e)) => {
                        tracing::info!("read failed: {e}");
                        return End::Abnormal(None);
                    }
                },
                _ = shutdown.cancelled() => return End::Shutdown,
                _ = kick.cancelled() => {
                    tracing::info!("closing connection: another connection took the client id over");
                    return End::Abnormal(Some(ReasonCode::SESSION_TAKEN_OVER));
                }
                _ = entry.closed() => {
                    tracing::info!("closing connection on request: {}", entry.reason());
                    return End::Abnormal(Some(ReasonCode::ADMINISTRATIVE_ACTION));
                }
                _ = queue_gone.cancelled() => {
                    tracing::info!("closing connection: the session's queue was deleted");
                    return End::Abnormal(Some(ReasonCode::ADMINISTRATIVE_ACTION));
                }
                _ = self.outbox.closed() => return End::Abnormal(None),
                _ = crate::auth::identity::expired(expires) => {
                    tracing::info!("closing connection: token expired");
                    return End::Abnormal(Some(ReasonCode::MAXIMUM_CONNECT_TIME));
                }
            }
        }
    }

    /// Acks the deliveries the batch's PUBACKs settled, asks for the sync its
    /// QoS 1 and 2 publishes wait for, sends every answer of the batch in one
    /// write, then delivers what it published. Answers go first: a publisher
    /// that waits for each PUBACK starts on its next message while the
    /// deliveries are made.
    fn end_of_batch(&mut self) {
        Deliveries::ack_settled(&mut self.settled);
        self.acks.await_sync(&self.ctx.broker.sync);
        self.outbox.flush();
        self.publisher.wake();
    }

    fn send(&self, packet: &Packet) {
        let version = self.version;
        self.outbox.write(|out| {
            // Only small answers without long strings are sent this way.
            let _ = write_packet(out, packet, version);
        });
    }

    /// Handles one packet; `Some` when the connection ends with it.
    fn handle(&mut self, packet: Packet) -> Result<Option<End>, Violation> {
        match packet {
            Packet::Publish(p) => self.on_publish(p)?,
            Packet::Puback(a) => {
                if !self.deliveries.puback(a.packet_id, &mut self.settled) {
                    tracing::debug!(packet_id = a.packet_id, "PUBACK for an unknown packet id");
                }
            }
            Packet::Pubrec(a) => {
                // An MQTT 5 failure code ends the exchange without PUBREL.
                let failed = !a.reason.is_success();
                let known = self.deliveries.acknowledged(a.packet_id, !failed)
                    || self.claim.state.released.lock().contains(&a.packet_id);
                if !failed {
                    let reason = if known {
                        ReasonCode::SUCCESS
                    } else {
                        ReasonCode::PACKET_IDENTIFIER_NOT_FOUND
                    };
                    self.send(&Packet::Pubrel(Ack {
                        packet_id: a.packet_id,
                        reason,
                        properties: None,
                    }));
                }
            }
            Packet::Pubcomp(a) => self.deliveries.completed(a.packet_id),
            Packet::Pubrel(a) => {
                let known = self.claim.state.received.lock().remove(&a.packet_id);
                let reason = if known {
                    ReasonCode::SUCCESS
                } else {
                    ReasonCode::PACKET_IDENTIFIER_NOT_FOUND
                };
                self.send(&Packet::Pubcomp(Ack {
                    packet_id: a.packet_id,
                    reason,
                    properties: None,
                }));
            }
            Packet::Subscribe(s) => self.on_subscribe(s)?,
            Packet::Unsubscribe(u) => self.on_unsubscribe(u),
            Packet::Pingreq => self.send(&Packet::Pingresp),
            Packet::Disconnect(d) => return self.on_disconnect(d).map(Some),
            Packet::Auth(_) => {
                return Err(Violation::Refused(
                    ReasonCode::PROTOCOL_ERROR,
                    "AUTH without an authentication method in CONNECT [MQTT-4.12.0-1]".into(),
                ));
            }
            Packet::Connect(_) => return Err(Violation::SecondConnect),
            other @ (Packet::Connack(_) | Packet::Suback(_) | Packet::Unsuback(_) | Packet::Pingresp) => {
                return Err(Violation::ServerPacket(other.name()));
            }
        }
        Ok(None)
    }

    /// DISCONNECT from the client: MQTT 5 may ask for the will (0x04) and
    /// change the session expiry interval.
    fn on_disconnect(&mut self, d: Disconnect) -> Result<End, Violation> {
        if let Some(secs) = d.properties.as_ref().and_then(|p| p.session_expiry_interval) {
            if self.expiry == SessionExpiry::WithConnection && secs != 0 {
                return Err(Violation::Refused(
                    ReasonCode::PROTOCOL_ERROR,
                    "session expiry set in DISCONNECT after 0 in CONNECT [MQTT-3.14.2-2]".into(),
                ));
            }
            if secs == 0 {
                // The session now ends with this connection.
                self.expiry = SessionExpiry::WithConnection;
                self.session.clean = true;
            } else {
                self.expiry = SessionExpiry::from_interval(secs);
                if let Err(e) = self.session.set_expiry(self.expiry) {
                    tracing::error!(client_id = %self.client_id, "cannot change the session expiry: {e}");
                }
            }
        }
        Ok(End::Disconnect {
            will: d.reason == ReasonCode::DISCONNECT_WITH_WILL,
        })
    }

    /// Checks a permission when `permission_check_enabled` is on.
    fn permitted(&mut self, access: Access, kind: &str, name: &str) -> Result<(), crate::core::Error> {
        if !self.ctx.settings().permission_check {
            return Ok(());
        }
        self.refresh_perms();
        let vhost = &self.session.vhost.name;
        self.perms.1.check(access, kind, name, vhost, &self.user)
    }

    /// Checks an MQTT topic (`Write`, publishing) or filter (`Read`,
    /// subscribing) against the user's topic permissions on `amq.topic`, in
    /// its AMQP form (`a/b` is `a.b`), as RabbitMQ's MQTT plugin does. Unlike
    /// the vhost permissions this does not wait for `permission_check_enabled`:
    /// a user has topic permissions only when an operator gave them, to be
    /// enforced.
    fn topic_permitted(&mut self, access: TopicAccess, topic: &str) -> Result<(), crate::core::Error> {
        self.refresh_perms();
        let (vhost, perms) = (&self.session.vhost.name, &self.perms.1);
        if !perms.restricts_topics(TOPIC_EXCHANGE) {
            return Ok(());
        }
        let key = topic_to_routing_key(topic);
        perms.check_topic(access, TOPIC_EXCHANGE, &key, vhost, &self.user)
    }

    /// Reads the user's permissions again if a user or permission changed
    /// since they were last read.
    fn refresh_perms(&mut self) {
        let users = &self.ctx.broker.users;
        let generation = users.generation();
        if self.perms.0 != generation {
            let p = self
                .identity
                .permissions(users, &self.session.vhost.name, Some(&self.client_id));
            self.perms = (generation, p);
        }
    }

    fn on_publish(&mut self, mut p: Publish) -> Result<(), Violation> {
        self.permitted(Access::Write, "exchange", TOPIC_EXCHANGE)
            .map_err(|e| Violation::Refused(ReasonCode::NOT_AUTHORIZED, format!("publish refused: {e}")))?;
        let properties = p.properties.take();
        let mut topic = p.topic;
        if self.version.is_v5() {
            let alias = properties.as_ref().and_then(|p| p.topic_alias);
            topic = self
                .aliases
                .resolve(topic, alias)
                .map_err(|(code, why)| Violation::Refused(code, why.into()))?;
            if let Some(props) = &properties {
                if !props.subscription_identifiers.is_empty() {
                    return Err(Violation::Refused(
                        ReasonCode::PROTOCOL_ERROR,
                        "subscription identifier in a client's PUBLISH [MQTT-3.3.4-6]".into(),
                    ));
                }
                if props.payload_format_indicator == Some(1) && std::str::from_utf8(&p.payload).is_err() {
                    if p.qos == QoS::AtMostOnce {
                        return Err(Violation::Refused(
                            ReasonCode::PAYLOAD_FORMAT_INVALID,
                            "payload is not the UTF-8 its format indicator says".into(),
                        ));
                    }
                    tracing::info!(topic = topic.as_str(), "publish refused: payload is not UTF-8");
                    self.acknowledge(p.qos, p.packet_id, ReasonCode::PAYLOAD_FORMAT_INVALID, false);
                    return Ok(());
                }
            }
        }
        self.topic_permitted(TopicAccess::Write, &topic)
            .map_err(|e| Violation::Refused(ReasonCode::NOT_AUTHORIZED, format!("publish refused: {e}")))?;
        if p.qos == QoS::ExactlyOnce && !self.claim.state.received.lock().insert(p.packet_id) {
            // A retransmission of a QoS 2 publish already routed: only answer.
            self.acknowledge(p.qos, p.packet_id, ReasonCode::SUCCESS, false);
            return Ok(());
        }
        let outgoing = Outgoing {
            topic: topic.as_str(),
            qos: p.qos,
            retain: p.retain,
            properties: properties.as_deref(),
            payload: p.payload,
        };
        let (needs_sync, queues) = self.route(outgoing)?;
        if p.qos != QoS::AtMostOnce {
            // The PUBACK or PUBREC below confirms the publish (LavinMQ counts it so).
            self.registration.entry.confirm.incr();
        }
        let reason = if queues == 0 {
            ReasonCode::NO_MATCHING_SUBSCRIBERS
        } else {
            ReasonCode::SUCCESS
        };
        self.acknowledge(p.qos, p.packet_id, reason, needs_sync);
        Ok(())
    }

    /// Sends PUBACK or PUBREC for a publish (nothing for QoS 0), after the
    /// sync when the message went to disk.
    fn acknowledge(&self, qos: QoS, packet_id: u16, reason: ReasonCode, needs_sync: bool) {
        match qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => self.acks.ack(PublishAck::Puback(packet_id, reason), needs_sync),
            QoS::ExactlyOnce => self.acks.ack(PublishAck::Pubrec(packet_id, reason), needs_sync),
        }
    }

    /// Routes a message through `amq.topic` into the queues it reaches (and
    /// keeps it as the topic's retained message when asked). Returns whether
    /// its acknowledgement must wait for a sync, and how many queues took it.
    fn route(&mut self, m: Outgoing<'_>) -> Result<(bool, usize), Violation> {
        let session = &self.session;
        // MQTT 5's no-local: the client's own subscriptions do not get it.
        let skip_own = self.version.is_v5() && session.only_no_local(m.topic);
        let (retain, qos) = (m.retain, m.qos);
        let routed = self
            .publisher
            .publish(&self.ctx, &session.vhost, &session.exchange, m, |q| {
                skip_own && Arc::ptr_eq(q, &session.queue)
            })
            .map_err(|e| Violation::Refused(ReasonCode::IMPLEMENTATION_SPECIFIC_ERROR, e.to_string()))?;
        let sync = (routed.durable || retain) && qos != QoS::AtMostOnce && self.ctx.broker.sync.enabled();
        Ok((sync, routed.queues))
    }

    fn on_subscribe(&mut self, s: Subscribe) -> Result<(), Violation> {
        let v5 = self.version.is_v5();
        let id = s
            .properties
            .as_ref()
            .and_then(|p| p.subscription_identifiers.first().copied());
        let mut codes = Vec::with_capacity(s.filters.len());
        let mut retained = Vec::new();
        for (filter, options) in &s.filters {
            let filter = filter.as_str();
            let shared = match shared_subscription::parse(filter) {
                Ok(shared) => shared,
                Err(e) => {
                    tracing::warn!(filter, "subscription refused: {e}");
                    codes.push(ReasonCode::TOPIC_FILTER_INVALID);
                    continue;
                }
            };
            if shared.is_some() && options.no_local && v5 {
                return Err(Violation::Refused(
                    ReasonCode::PROTOCOL_ERROR,
                    "no-local on a shared subscription [MQTT-3.8.3-4]".into(),
                ));
            }
            let queue_name = self.session.queue.name.clone();
            let own_filter = shared.as_ref().map_or(filter, |s| s.filter);
            let allowed = self
                .permitted(Access::Read, "exchange", TOPIC_EXCHANGE)
                .and_then(|_| self.permitted(Access::Write, "queue", &queue_name))
                .and_then(|_| self.topic_permitted(TopicAccess::Read, own_filter));
            if let Err(e) = allowed {
                tracing::warn!(filter, "subscription refused: {e}");
                codes.push(ReasonCode::NOT_AUTHORIZED);
                continue;
            }
            let is_shared = shared.is_some();
            let result = match shared {
                Some(shared) => {
                    let sub = subscription(shared.filter, *options, id);
                    self.join_shared(filter, sub).map(|_| false)
                }
                None => self.session.subscribe(subscription(filter, *options, id)),
            };
            match result {
                Ok(new) => {
                    codes.push(ReasonCode::granted(options.qos));
                    let send_retained = match options.retain_handling {
                        0 => true,
                        1 => new,
                        _ => false,
                    };
                    // Shared subscriptions get no retained messages (4.8.2).
                    if send_retained && !is_shared {
                        retained.push(filter);
                    }
                }
                Err(e) => {
                    tracing::warn!(filter, "subscription refused: {e}");
                    codes.push(ReasonCode::UNSPECIFIED_ERROR);
                }
            }
        }
        self.send(&Packet::Suback(Suback {
            packet_id: s.packet_id,
            codes,
            properties: None,
        }));
        if retained.is_empty() {
            return Ok(());
        }
        let store = match self
            .ctx
            .retained
            .of(&self.session.vhost, self.ctx.broker.sync.enabled())
        {
            Ok(store) => store,
            Err(e) => {
                tracing::error!("retained messages unavailable: {e}");
                return Ok(());
            }
        };
        let mut wake = false;
        for filter in retained {
            wake |= self.session.queue_retained(&store, filter, &mut self.scratch);
        }
        if wake {
            self.publisher.wakes.push(self.session.queue.clone());
        }
        Ok(())
    }

    /// Joins the group of shared subscription `full_filter` as `sub` says
    /// (or updates the options of this connection's membership: the new
    /// consumer attaches before the old one leaves, so the group's queue is
    /// never without a member). A stored session records the membership.
    fn join_shared(&mut self, full_filter: &str, sub: Subscription) -> crate::core::Result<()> {
        let Ok(Some(shared)) = shared_subscription::parse(full_filter) else {
            return Err(crate::core::Error::PreconditionFailed(format!(
                "'{full_filter}' is not a shared subscription"
            )));
        };
        let vhost = self.session.vhost.clone();
        let (conn_id, durable) = (self.registration.entry.info.id, !self.session.clean);
        // The last member of the group leaving at this moment deletes a queue
        // found here before the consumer attaches: it is declared again.
        let mut attempts = 0;
        let consumer = loop {
            let queue = shared_group::join(&vhost, &shared, conn_id, durable)?;
            self.session.record_shared(full_filter, Some(&sub))?;
            let consumer = self.deliveries.consumer(
                self.ctx.broker.connections.next_id(),
                format!("mqtt-{}-{}", self.client_id, full_filter),
                queue.clone(),
                Source::Shared(sub.clone()),
            );
            match queue.add_consumer(consumer.clone(), false) {
                Ok(()) => break consumer,
                Err(e) => {
                    self.deliveries.remove(crate::core::consumer::Consumer::id(&*consumer));
                    attempts += 1;
                    let replaced = vhost.queue(&queue.name).is_none_or(|q| !Arc::ptr_eq(&q, &queue));
                    if attempts == 3 || !replaced {
                        return Err(e);
                    }
                }
            }
        };
        consumer.spawn();
        if let Some(old) = self.shared.insert(full_filter.to_string(), consumer) {
            release_consumer(&self.deliveries, &old);
        }
        Ok(())
    }

    /// Leaves a shared subscription's group: what it was sent and did not
    /// acknowledge goes back to the group, whose queue goes when no session
    /// of the group is left. Returns whether it was a member.
    fn leave_shared(&mut self, full_filter: &str) -> crate::core::Result<bool> {
        let Some(consumer) = self.shared.remove(full_filter) else {
            return Ok(false);
        };
        release_consumer(&self.deliveries, &consumer);
        self.session.record_shared(full_filter, None)?;
        shared_group::release_if_unused(&self.session.vhost, &consumer.queue().name);
        Ok(true)
    }

    fn on_unsubscribe(&mut self, u: Unsubscribe) {
        let mut codes = Vec::with_capacity(u.filters.len());
        for filter in &u.filters {
            let filter = filter.as_str();
            let existed = if self.shared.contains_key(filter) {
                self.leave_shared(filter)
            } else {
                self.session.unsubscribe(filter)
            };
            codes.push(match existed {
                Ok(true) => ReasonCode::SUCCESS,
                Ok(false) => ReasonCode::NO_SUBSCRIPTION_EXISTED,
                Err(e) => {
                    tracing::warn!(filter, "unsubscribe failed: {e}");
                    ReasonCode::UNSPECIFIED_ERROR
                }
            });
        }
        self.send(&Packet::Unsuback(Unsuback {
            packet_id: u.packet_id,
            codes: if self.version.is_v5() { codes } else { Vec::new() },
            properties: None,
        }));
    }

    /// After the packet loop: the reason told to an MQTT 5 client, the will,
    /// the deliveries in flight, the session.
    fn finish(&mut self, end: End) {
        let reason = match end {
            End::Abnormal(reason) => reason,
            End::Shutdown => Some(ReasonCode::SERVER_SHUTTING_DOWN),
            End::Disconnect { .. } => None,
        };
        if let (true, Some(reason)) = (self.version.is_v5(), reason) {
            self.send(&Packet::Disconnect(Disconnect::with(reason)));
        }
        // A group stays while this session is stored as its member; a
        // session that ends here leaves it with its queue's deletion below.
        for (_, consumer) in self.shared.drain() {
            release_consumer(&self.deliveries, &consumer);
            shared_group::release_if_unused(&self.session.vhost, &consumer.queue().name);
        }
        release_consumer(&self.deliveries, &self.consumer);
        let publish_will = matches!(end, End::Abnormal(_) | End::Disconnect { will: true });
        if publish_will && let Some(will) = self.will.take() {
            self.publish_will(will);
        }
        self.end_of_batch();
        let (vhost, clean) = (self.session.vhost.name.clone(), self.session.clean);
        if !matches!(end, End::Shutdown) {
            self.session.close();
        }
        self.ctx
            .sessions
            .release(&vhost, &self.client_id, self.registration.entry.info.id, clean);
    }

    /// Publishes the will message [MQTT-3.1.2-8], as the client could have;
    /// an MQTT 5 will delay (capped by the session's expiry) postpones it.
    fn publish_will(&mut self, will: Will) {
        let allowed = self
            .permitted(Access::Write, "exchange", TOPIC_EXCHANGE)
            .and_then(|_| self.topic_permitted(TopicAccess::Write, &will.topic));
        if let Err(e) = allowed {
            tracing::warn!("will not published: {e}");
            return;
        }
        let delay = will
            .properties
            .as_ref()
            .and_then(|p| p.will_delay_interval)
            .unwrap_or(0)
            .min(self.expiry.seconds());
        if delay > 0 {
            let cancel = self.ctx.sessions.defer_will(&self.session.vhost.name, &self.client_id);
            super::will::publish_later(
                self.ctx.clone(),
                self.session.vhost.clone(),
                will,
                Duration::from_secs(u64::from(delay)),
                cancel,
            );
            return;
        }
        match self.route(super::will::outgoing(&will)) {
            Ok(_) => tracing::debug!(topic = will.topic.as_str(), "will published"),
            Err(e) => tracing::warn!("will not published: {e}"),
        }
    }
}

/// Stops a consumer and gives what it has in flight back to its queue,
/// for another member of a group or for the session's next connection.
fn release_consumer(deliveries: &Deliveries, consumer: &Arc<MqttConsumer>) {
    use crate::core::consumer::Consumer;
    consumer.cancel();
    deliveries.requeue_inflight(Some(consumer.queue()));
    consumer.queue().detach_consumer(consumer.id());
    deliveries.remove(consumer.id());
}
