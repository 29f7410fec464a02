//! One MQTT connection: CONNECT and CONNACK, then the packet loop that routes
//! publishes into the core, manages subscriptions, acknowledges, answers
//! pings and enforces the keep alive, and at the end publishes the will when
//! the client did not say DISCONNECT.
//!
//! MQTT has no way to tell a client why the broker closes: every protocol
//! violation closes the network connection [MQTT-4.8.0-1] with a log line
//! naming the broken rule.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::Instrument;

use super::codec::{
    Connack, Connect, ConnectReturnCode, DecodeError, Packet, ProtocolVersion, Publish, QoS, Suback, Subscribe,
    SubscribeReturnCode, Unsubscribe, Will, parse_packet, write_connack, write_packet,
};
use super::connect::{Admitted, ConnectError, admit, read_connect};
use super::context::MqttContext;
use super::delivery::MqttConsumer;
use super::message_props::topic_message;
use super::publish_acks::{PublishAck, PublishAcks};
use super::session::{Session, TOPIC_EXCHANGE};
use super::session_registry::{Claim, SessionState};
use super::topic_map::topic_to_routing_key;
use crate::core::connections::{ConnectionInfo, Registration};
use crate::core::message::Message;
use crate::core::permissions::{Access, Compiled};
use crate::core::queue::Queue;
use crate::core::{FieldTable, FieldValue};
use crate::transport::BUSY_READ;
use crate::transport::outbox::Outbox;
use crate::transport::peer::Peer;

/// Why the packet loop closes the connection.
#[derive(Debug, thiserror::Error)]
enum Violation {
    #[error("malformed packet: {}", .0.with_rule())]
    Malformed(#[from] DecodeError),
    #[error("second CONNECT [MQTT-3.1.0-2]")]
    SecondConnect,
    #[error("{0} may only be sent by a server")]
    ServerPacket(&'static str),
    #[error("{0}")]
    Refused(String),
}

/// How the packet loop ended.
enum End {
    /// The client sent DISCONNECT: no will.
    Disconnect,
    /// Anything else: the will is published.
    Abnormal,
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
        let (mut rd, mut wr) = tokio::io::split(stream);
        let mut buf = BytesMut::with_capacity(8 * 1024);
        let connect = match read_connect(&mut rd, &mut buf, ctx.settings().max_packet_size).await {
            Ok(c) => c,
            Err(ConnectError::Malformed(DecodeError::UnsupportedProtocolLevel(level))) => {
                tracing::info!("unsupported protocol level {level} [MQTT-3.1.2-2]");
                refuse(&mut wr, ConnectReturnCode::UnacceptableProtocolVersion).await;
                return;
            }
            Err(e) => {
                tracing::info!("connection closed: {e}");
                let _ = wr.shutdown().await;
                return;
            }
        };
        let admitted = match admit(&ctx, &connect, &peer) {
            Ok(a) => a,
            Err((code, why)) => {
                tracing::warn!("connection refused ({code:?}): {why}");
                refuse(&mut wr, code).await;
                return;
            }
        };
        let id = ctx.broker.connections.next_id();
        let mut client_properties = FieldTable::new();
        client_properties.insert(
            "client_id",
            FieldValue::LongStr(Bytes::from(admitted.client_id.clone())),
        );
        let info = ConnectionInfo {
            id,
            protocol: match connect.protocol {
                ProtocolVersion::V3_1 => "MQTT 3.1",
                ProtocolVersion::V3_1_1 => "MQTT 3.1.1",
            },
            user: admitted.user.clone(),
            vhost: admitted.vhost.name.clone(),
            peer: peer.addr,
            local: peer.local,
            auth_mechanism: admitted.mechanism.into(),
            client_properties,
            frame_max: 0,
            channel_max: 0,
            heartbeat: connect.keep_alive,
            tls: peer.tls_info(),
        };
        let limit = admitted.vhost.max_connections();
        let Some(registration) = ctx.broker.connections.register(info, Message::now_ms(), limit) else {
            tracing::warn!(vhost = %admitted.vhost.name, "connection refused: the vhost's connection limit is reached");
            refuse(&mut wr, ConnectReturnCode::ServerUnavailable).await;
            return;
        };
        let client_id = admitted.client_id.clone();
        let clean = connect.clean_session;
        let claim = ctx.sessions.claim(&admitted.vhost.name, &client_id, id, clean).await;
        let opened = Session::open(&admitted.vhost, &client_id, clean, id);
        let (session, present) = match opened {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(client_id, "cannot open the session: {e}");
                ctx.sessions.release(&admitted.vhost.name, &client_id, id, clean);
                refuse(&mut wr, ConnectReturnCode::ServerUnavailable).await;
                return;
            }
        };
        tracing::info!(vhost = %admitted.vhost.name, user = %admitted.user, client_id, clean, present, "connection established");
        let outbox = Arc::new(Outbox::default());
        outbox.write(|out| {
            write_connack(
                out,
                &Connack {
                    session_present: present,
                    return_code: ConnectReturnCode::Accepted,
                },
            )
        });
        let writer = outbox.spawn_writer(wr, None, registration.entry.clone());
        let span = tracing::info_span!("session", vhost = %admitted.vhost.name, client_id);
        let mut conn = Connection::new(&ctx, registration, session, claim, outbox.clone(), &admitted, &connect);
        let end = conn.run(&mut rd, buf).instrument(span.clone()).await;
        span.in_scope(|| conn.finish(end));
        outbox.close();
        let _ = writer.await;
    }
    .instrument(span)
    .await
}

/// Sends CONNACK with a refusal and closes [MQTT-3.2.2-5].
async fn refuse<W: AsyncWrite + Unpin>(wr: &mut W, code: ConnectReturnCode) {
    let mut out = BytesMut::with_capacity(4);
    write_connack(
        &mut out,
        &Connack {
            session_present: false,
            return_code: code,
        },
    );
    let _ = wr.write_all(&out).await;
    let _ = wr.flush().await;
    let _ = wr.shutdown().await;
}

/// An open connection after CONNACK.
struct Connection {
    ctx: Arc<MqttContext>,
    registration: Registration,
    session: Session,
    claim: Claim,
    outbox: Arc<Outbox>,
    consumer: Arc<MqttConsumer>,
    acks: Arc<PublishAcks>,
    user: String,
    client_id: String,
    keep_alive: u16,
    will: Option<Will>,
    /// Permissions, when `permission_check_enabled`; recompiled when users change.
    perms: Option<(u64, Compiled)>,
    /// Queues that got their first ready message during the current read batch.
    wakes: Vec<Arc<Queue>>,
    route_buf: Vec<Arc<Queue>>,
    scratch: BytesMut,
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
        let state: &Arc<SessionState> = &claim.state;
        let consumer = MqttConsumer::new(
            ctx.broker.connections.next_id(),
            &admitted.client_id,
            session.queue.clone(),
            outbox.clone(),
            session.subscriptions.clone(),
            state.clone(),
            ctx.settings().max_inflight,
        );
        Connection {
            ctx: ctx.clone(),
            registration,
            client_id: admitted.client_id.clone(),
            session,
            acks: PublishAcks::new(outbox.clone()),
            claim,
            outbox,
            consumer,
            user: admitted.user.clone(),
            keep_alive: connect.keep_alive,
            will: connect.will.clone(),
            perms: None,
            wakes: Vec::new(),
            route_buf: Vec::new(),
            scratch: BytesMut::new(),
        }
    }

    async fn run<R: AsyncRead + Unpin>(&mut self, rd: &mut R, mut buf: BytesMut) -> End {
        // A session resumed mid-QoS-2 completes what the client acknowledged.
        let released: Vec<u16> = self.claim.state.released.lock().iter().copied().collect();
        for packet_id in released {
            self.send(&Packet::Pubrel { packet_id });
        }
        if let Err(e) = self.session.queue.add_consumer(self.consumer.clone(), false) {
            tracing::error!("cannot consume from the session queue: {e}");
            return End::Abnormal;
        }
        self.consumer.spawn();
        self.outbox.flush();
        // The keep alive: the connection is dropped after 1.5 times the interval
        // without a packet [MQTT-3.1.2-24].
        let idle_limit = (self.keep_alive > 0).then(|| Duration::from_millis(u64::from(self.keep_alive) * 1500));
        let shutdown = self.ctx.shutdown.clone();
        let entry = self.registration.entry.clone();
        let kick = self.claim.kick.clone();
        let queue_gone = self.consumer.queue_gone.clone();
        let mut disk = self.ctx.broker.disk.subscribe();
        let mut busy = false;
        loop {
            loop {
                match parse_packet(&mut buf, self.ctx.settings().max_packet_size) {
                    Ok(Some(packet)) => match self.handle(packet) {
                        Ok(true) => {}
                        Ok(false) => {
                            self.end_of_batch();
                            return End::Disconnect;
                        }
                        Err(v) => {
                            self.end_of_batch();
                            tracing::warn!("closing connection: {v}");
                            return End::Abnormal;
                        }
                    },
                    Ok(None) => break,
                    Err(e) => {
                        self.end_of_batch();
                        tracing::warn!("closing connection: {}", Violation::Malformed(e));
                        return End::Abnormal;
                    }
                }
            }
            self.end_of_batch();
            // A busy publisher lets other tasks run between read batches; a client
            // waiting for an answer does not need to (a yield wakes an idle worker).
            if busy {
                tokio::task::yield_now().await;
            }
            // While the disk alarm is on, publishers are not read.
            while *disk.borrow_and_update() {
                tokio::select! {
                    _ = disk.changed() => {}
                    _ = shutdown.cancelled() => return End::Shutdown,
                }
            }
            if buf.capacity() - buf.len() < 4096 {
                buf.reserve(64 * 1024);
            }
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
                        return End::Abnormal;
                    }
                    Some(Ok(0)) => {
                        tracing::info!("client closed the socket without DISCONNECT");
                        return End::Abnormal;
                    }
                    Some(Ok(n)) => {
                        entry.count_read(n);
                        busy = n >= BUSY_READ;
                    }
                    Some(Err(e)) => {
                        tracing::info!("read failed: {e}");
                        return End::Abnormal;
                    }
                },
                _ = shutdown.cancelled() => return End::Shutdown,
                _ = kick.cancelled() => {
                    tracing::info!("closing connection: another connection took the client id over");
                    return End::Abnormal;
                }
                _ = entry.closed() => {
                    tracing::info!("closing connection on request: {}", entry.reason());
                    return End::Abnormal;
                }
                _ = queue_gone.cancelled() => {
                    tracing::info!("closing connection: the session's queue was deleted");
                    return End::Abnormal;
                }
                _ = self.outbox.closed() => return End::Abnormal,
            }
        }
    }

    /// Wakes the consumers of queues that got their first messages and sends
    /// every answer of the batch in one write.
    fn end_of_batch(&mut self) {
        for q in self.wakes.drain(..) {
            q.wake_consumers();
        }
        self.outbox.flush();
    }

    fn send(&self, packet: &Packet) {
        self.outbox.write(|out| {
            // Only small fixed-size answers are sent this way.
            let _ = write_packet(out, packet);
        });
    }

    /// Handles one packet; `Ok(false)` after DISCONNECT.
    fn handle(&mut self, packet: Packet) -> Result<bool, Violation> {
        match packet {
            Packet::Publish(p) => self.on_publish(p)?,
            Packet::Puback { packet_id } => {
                if !self.consumer.acknowledged(packet_id, false) {
                    tracing::debug!(packet_id, "PUBACK for an unknown packet id");
                }
            }
            Packet::Pubrec { packet_id } => {
                self.consumer.acknowledged(packet_id, true);
                self.send(&Packet::Pubrel { packet_id });
            }
            Packet::Pubcomp { packet_id } => self.consumer.completed(packet_id),
            Packet::Pubrel { packet_id } => {
                self.claim.state.received.lock().remove(&packet_id);
                self.send(&Packet::Pubcomp { packet_id });
            }
            Packet::Subscribe(s) => self.on_subscribe(s),
            Packet::Unsubscribe(u) => self.on_unsubscribe(u),
            Packet::Pingreq => self.send(&Packet::Pingresp),
            Packet::Disconnect => return Ok(false),
            Packet::Connect(_) => return Err(Violation::SecondConnect),
            other @ (Packet::Connack(_) | Packet::Suback(_) | Packet::Unsuback { .. } | Packet::Pingresp) => {
                return Err(Violation::ServerPacket(other.name()));
            }
        }
        Ok(true)
    }

    /// Checks a permission when `permission_check_enabled` is on.
    fn permitted(&mut self, access: Access, kind: &str, name: &str) -> Result<(), crate::core::Error> {
        if !self.ctx.settings().permission_check {
            return Ok(());
        }
        let users = &self.ctx.broker.users;
        let generation = users.generation();
        let vhost = &self.session.vhost.name;
        let perms = match &self.perms {
            Some((g, p)) if *g == generation => p,
            _ => &self.perms.insert((generation, users.permissions(&self.user, vhost))).1,
        };
        perms.check(access, kind, name, vhost, &self.user)
    }

    fn on_publish(&mut self, p: Publish) -> Result<(), Violation> {
        self.permitted(Access::Write, "exchange", TOPIC_EXCHANGE)
            .map_err(|e| Violation::Refused(format!("publish refused: {e}")))?;
        if p.qos == QoS::ExactlyOnce && !self.claim.state.received.lock().insert(p.packet_id) {
            // A retransmission of a QoS 2 publish already routed: only answer.
            self.acks
                .ack(PublishAck::Pubrec(p.packet_id), false, &self.ctx.broker.sync);
            return Ok(());
        }
        let needs_sync = self.route(p.topic.as_str(), p.qos, p.retain, p.payload)?;
        if p.qos != QoS::AtMostOnce {
            // The PUBACK or PUBREC below confirms the publish (LavinMQ counts it so).
            self.registration.entry.confirm.incr();
        }
        let sync = &self.ctx.broker.sync;
        match p.qos {
            QoS::AtMostOnce => {}
            QoS::AtLeastOnce => self.acks.ack(PublishAck::Puback(p.packet_id), needs_sync, sync),
            QoS::ExactlyOnce => self.acks.ack(PublishAck::Pubrec(p.packet_id), needs_sync, sync),
        }
        Ok(())
    }

    /// Routes a message through `amq.topic` into the queues it reaches (and
    /// keeps it as the topic's retained message when asked). Returns true
    /// when it went to disk and its acknowledgement must wait for a sync.
    fn route(&mut self, topic: &str, qos: QoS, retain: bool, payload: Bytes) -> Result<bool, Violation> {
        let routing_key = topic_to_routing_key(topic);
        if routing_key.len() > 255 {
            return Err(Violation::Refused(format!(
                "topic names longer than 255 bytes are not supported ({} bytes)",
                routing_key.len()
            )));
        }
        let vhost = self.session.vhost.clone();
        if retain {
            let stored = self
                .ctx
                .retained
                .of(&vhost, self.ctx.broker.sync.enabled())
                .and_then(|store| store.set(topic, qos, payload.clone()));
            if let Err(e) = stored {
                return Err(Violation::Refused(format!("cannot store the retained message: {e}")));
            }
        }
        let msg = topic_message(routing_key.into_owned(), qos, false, payload);
        let mut queues = std::mem::take(&mut self.route_buf);
        vhost.route(&self.session.exchange, &msg, &[], &mut queues);
        let mut durable = false;
        for q in &queues {
            match q.publish(&msg, &mut self.scratch) {
                Ok(p) => {
                    durable |= q.durable;
                    if p.woke && !self.wakes.iter().any(|w| Arc::ptr_eq(w, q)) {
                        self.wakes.push(q.clone());
                    }
                }
                Err(e) => tracing::error!(queue = %q.name, "publish failed: {e}"),
            }
        }
        queues.clear();
        self.route_buf = queues;
        Ok((durable || retain) && qos != QoS::AtMostOnce && self.ctx.broker.sync.enabled())
    }

    fn on_subscribe(&mut self, s: Subscribe) {
        let mut codes = Vec::with_capacity(s.filters.len());
        let mut granted = Vec::new();
        for (filter, qos) in &s.filters {
            let filter = filter.as_str();
            let queue_name = self.session.queue.name.clone();
            let allowed = self
                .permitted(Access::Read, "exchange", TOPIC_EXCHANGE)
                .and_then(|_| self.permitted(Access::Write, "queue", &queue_name));
            let result = allowed.and_then(|_| self.session.subscribe(filter, *qos));
            match result {
                Ok(()) => {
                    codes.push(SubscribeReturnCode::Success(*qos));
                    granted.push(filter);
                }
                Err(e) => {
                    tracing::warn!(filter, "subscription refused: {e}");
                    codes.push(SubscribeReturnCode::Failure);
                }
            }
        }
        self.send(&Packet::Suback(Suback {
            packet_id: s.packet_id,
            return_codes: codes,
        }));
        if granted.is_empty() {
            return;
        }
        let store = match self
            .ctx
            .retained
            .of(&self.session.vhost, self.ctx.broker.sync.enabled())
        {
            Ok(store) => store,
            Err(e) => {
                tracing::error!("retained messages unavailable: {e}");
                return;
            }
        };
        let mut wake = false;
        for filter in granted {
            wake |= self.session.queue_retained(&store, filter, &mut self.scratch);
        }
        if wake {
            self.wakes.push(self.session.queue.clone());
        }
    }

    fn on_unsubscribe(&mut self, u: Unsubscribe) {
        for filter in &u.filters {
            if let Err(e) = self.session.unsubscribe(filter.as_str()) {
                tracing::warn!(filter = filter.as_str(), "unsubscribe failed: {e}");
            }
        }
        self.send(&Packet::Unsuback { packet_id: u.packet_id });
    }

    /// After the packet loop: the will, the deliveries in flight, the session.
    fn finish(&mut self, end: End) {
        self.consumer.cancel();
        self.session.queue.detach_consumer(self.consumer_id());
        self.consumer.requeue_inflight();
        if matches!(end, End::Abnormal)
            && let Some(will) = self.will.take()
        {
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

    fn consumer_id(&self) -> u64 {
        crate::core::consumer::Consumer::id(&*self.consumer)
    }

    /// Publishes the will message [MQTT-3.1.2-8], as the client could have.
    fn publish_will(&mut self, will: Will) {
        if let Err(e) = self.permitted(Access::Write, "exchange", TOPIC_EXCHANGE) {
            tracing::warn!("will not published: {e}");
            return;
        }
        match self.route(will.topic.as_str(), will.qos, will.retain, will.payload) {
            Ok(_) => tracing::debug!(topic = will.topic.as_str(), "will published"),
            Err(e) => tracing::warn!("will not published: {e}"),
        }
    }
}
