//! One stream connection: the opening, then the command loop that declares
//! publishers and stores what they publish, subscribes readers, answers
//! queries about streams and offsets, creates and deletes streams, and ends
//! with a close carrying the code when the client broke the protocol.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use rustc_hash::FxHashMap;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::Instrument;

use super::StreamContext;
use super::codec::command::{OffsetSpec, Published};
use super::codec::primitives::{begin_frame, end_frame};
use super::codec::reply::{self, Broker};
use super::codec::{Command, DecodeError, code, key, split_frame};
use super::handshake::{Opened, handshake};
use super::publisher::{HeldReplies, Publisher};
use super::subscription::{SingleActive, Subscription};
use crate::auth::Identity;
use crate::core::permissions::{Access, Compiled};
use crate::core::queue::Queue;
use crate::core::stream::{ConsumerOptions, Filter, StartAt};
use crate::core::vhost::{QueueOptions, VHost};
use crate::transport::outbox::Outbox;
use crate::transport::peer::Peer;
use crate::wire::{FieldTable, FieldValue};

/// The commands and versions we serve, told to clients that ask
/// (publish 2 carries filter values).
const COMMAND_VERSIONS: [(u16, u16, u16); 29] = [
    (key::DECLARE_PUBLISHER, 1, 1),
    (key::PUBLISH, 1, 2),
    (key::PUBLISH_CONFIRM, 1, 1),
    (key::PUBLISH_ERROR, 1, 1),
    (key::QUERY_PUBLISHER_SEQUENCE, 1, 1),
    (key::DELETE_PUBLISHER, 1, 1),
    (key::SUBSCRIBE, 1, 1),
    (key::DELIVER, 1, 1),
    (key::CREDIT, 1, 1),
    (key::STORE_OFFSET, 1, 1),
    (key::QUERY_OFFSET, 1, 1),
    (key::UNSUBSCRIBE, 1, 1),
    (key::CREATE, 1, 1),
    (key::DELETE, 1, 1),
    (key::METADATA, 1, 1),
    (key::METADATA_UPDATE, 1, 1),
    (key::PEER_PROPERTIES, 1, 1),
    (key::SASL_HANDSHAKE, 1, 1),
    (key::SASL_AUTHENTICATE, 1, 1),
    (key::TUNE, 1, 1),
    (key::OPEN, 1, 1),
    (key::CLOSE, 1, 1),
    (key::HEARTBEAT, 1, 1),
    (key::STREAM_STATS, 1, 1),
    (key::CONSUMER_UPDATE, 1, 1),
    (key::ROUTE, 1, 1),
    (key::PARTITIONS, 1, 1),
    (key::CREATE_SUPER_STREAM, 1, 1),
    (key::DELETE_SUPER_STREAM, 1, 1),
];

/// Serves a stream connection until it ends.
pub async fn serve<S>(ctx: Arc<StreamContext>, stream: S, peer: Peer)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let direct = crate::transport::shared_tcp::direct_socket(&stream);
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut buf = BytesMut::new();
    let opened = match Box::pin(handshake(&ctx, &mut rd, &mut wr, &mut buf, &peer)).await {
        Ok(opened) => opened,
        Err(e) => {
            tracing::info!(peer = %peer.addr, "stream connection closed during the opening: {e}");
            let _ = wr.shutdown().await;
            return;
        }
    };
    drop(peer);
    let span = tracing::info_span!("conn", vhost = %opened.vhost.name, user = %opened.identity.name());
    async move {
        tracing::info!("stream connection established");
        let outbox = Arc::new(Outbox::default());
        let heartbeat = (opened.heartbeat > 0).then(|| {
            (
                Duration::from_secs(u64::from(opened.heartbeat)),
                reply::heartbeat as fn(&mut BytesMut),
            )
        });
        let writer = outbox.spawn_writer(wr, heartbeat, opened.registration.entry.clone(), direct);
        let mut conn = Connection::new(ctx, opened, outbox.clone());
        let error = conn.run(&mut rd, &mut buf).await;
        conn.end();
        if let Some((c, reason)) = &error {
            outbox.write(|b| reply::close(b, 1, *c, reason));
        }
        outbox.flush();
        drop(conn);
        outbox.close();
        let _ = writer.await;
        if error.is_some() {
            crate::transport::close_linger::linger(&mut rd, &mut buf).await;
        }
    }
    .instrument(span)
    .await
}

/// Why the connection ends: the code and reason of our close.
type Close = (u16, String);

/// An open stream connection.
struct Connection {
    ctx: Arc<StreamContext>,
    id: u64,
    user: String,
    identity: Identity,
    vhost: Arc<VHost>,
    registration: crate::core::connections::Registration,
    outbox: Arc<Outbox>,
    frame_max: u32,
    heartbeat: u32,
    /// The user's permissions, with the user-store generation they were
    /// compiled at.
    perms: (u64, Compiled),
    publishers: FxHashMap<u8, Publisher>,
    subscriptions: FxHashMap<u8, Arc<Subscription>>,
    held: Arc<HeldReplies>,
    scratch: BytesMut,
    /// Streams that got their first messages in this read batch.
    wakes: Vec<Arc<Queue>>,
    alarms: tokio::sync::watch::Receiver<crate::core::alarms::Alarms>,
    /// Correlation ids of the requests the broker sends (consumer updates).
    correlations: Arc<std::sync::atomic::AtomicU32>,
    /// The client came over TLS: metadata names the TLS port.
    tls: bool,
}

impl Connection {
    fn new(ctx: Arc<StreamContext>, o: Opened, outbox: Arc<Outbox>) -> Connection {
        let alarms = ctx.amqp.broker.alarms.subscribe();
        Connection {
            user: o.identity.name().to_owned(),
            id: o.id,
            identity: o.identity,
            vhost: o.vhost,
            registration: o.registration,
            held: HeldReplies::new(outbox.clone()),
            outbox,
            frame_max: o.frame_max,
            heartbeat: o.heartbeat,
            perms: (u64::MAX, Compiled::none()),
            publishers: FxHashMap::default(),
            subscriptions: FxHashMap::default(),
            scratch: BytesMut::new(),
            wakes: Vec::new(),
            alarms,
            correlations: Arc::new(std::sync::atomic::AtomicU32::new(1)),
            tls: o.tls,
            ctx,
        }
    }

    /// Reads and handles frames until the connection ends; returns the close
    /// to send, None when the client closed or the socket went.
    async fn run<R: AsyncRead + Unpin>(&mut self, rd: &mut R, buf: &mut BytesMut) -> Option<Close> {
        let idle_limit = (self.heartbeat > 0).then(|| Duration::from_secs(u64::from(self.heartbeat) * 2));
        let shutdown = self.ctx.shutdown.clone();
        let entry = self.registration.entry.clone();
        loop {
            loop {
                match split_frame(buf, self.frame_max) {
                    Ok(Some(frame)) => {
                        let handled = match Command::decode(&frame) {
                            Ok(c) => self.handle(c),
                            Err(DecodeError::UnknownKey(k)) => {
                                tracing::warn!("unknown command key {k}");
                                Err((code::UNKNOWN_FRAME, format!("unknown command key {k}")))
                            }
                            Err(e) => {
                                tracing::warn!("malformed frame: {e}");
                                Err((code::UNKNOWN_FRAME, format!("malformed frame: {e}")))
                            }
                        };
                        match handled {
                            Ok(true) => {}
                            Ok(false) => {
                                self.end_of_batch();
                                return None;
                            }
                            Err(close) => {
                                self.end_of_batch();
                                tracing::warn!("closing connection: {}", close.1);
                                return Some(close);
                            }
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        self.end_of_batch();
                        tracing::warn!("closing connection: {e}");
                        return Some((code::FRAME_TOO_LARGE, e.to_string()));
                    }
                }
            }
            self.end_of_batch();
            // Publishers are held back while a resource alarm is on, as
            // RabbitMQ blocks a stream connection: nothing more is read.
            while self.alarms.borrow().any() {
                tokio::select! {
                    r = self.alarms.changed() => if r.is_err() { break },
                    _ = shutdown.cancelled() => return Some((code::OK, "broker shutdown".into())),
                    _ = entry.closed() => return Some((code::OK, entry.reason())),
                }
            }
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
                        tracing::warn!("client silent past twice the heartbeat");
                        return Some((code::OK, "heartbeat timeout".into()));
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
                _ = shutdown.cancelled() => return Some((code::OK, "broker shutdown".into())),
                _ = entry.closed() => {
                    let reason = entry.reason();
                    tracing::info!("closing connection on request: {reason}");
                    return Some((code::OK, reason));
                }
            }
        }
    }

    /// Sends what the batch wrote, then wakes the readers of streams that
    /// got messages.
    fn end_of_batch(&mut self) {
        self.outbox.flush();
        for q in self.wakes.drain(..) {
            q.deliver_or_wake();
        }
    }

    /// Stops subscriptions and leaves the registry.
    fn end(&mut self) {
        for (_, s) in self.subscriptions.drain() {
            s.cancel();
        }
        self.publishers.clear();
        self.ctx.amqp.broker.stream_clients.remove_connection(self.id);
        self.vhost.connection_closed(self.id);
    }

    fn permissions(&mut self) -> &Compiled {
        let generation = self.ctx.amqp.broker.users.generation();
        if self.perms.0 != generation {
            self.perms = (
                generation,
                self.identity
                    .permissions(&self.ctx.amqp.broker.users, &self.vhost.name, None),
            );
        }
        &self.perms.1
    }

    /// True when the user has `access` to the stream `name`.
    fn allowed(&mut self, access: Access, name: &str) -> bool {
        self.allowed_on("queue", access, name)
    }

    /// True when the user has `access` to the `kind` (queue, exchange) `name`.
    fn allowed_on(&mut self, kind: &str, access: Access, name: &str) -> bool {
        let (vhost, user) = (self.vhost.name.clone(), self.user.clone());
        match self.permissions().check(access, kind, name, &vhost, &user) {
            Ok(()) => true,
            Err(e) => {
                tracing::info!("refused: {e}");
                false
            }
        }
    }

    /// Whose a publisher or consumer on `stream` is, for the management API.
    fn client_of(&self, stream: &str) -> crate::core::stream_clients::ClientOf {
        crate::core::stream_clients::ClientOf {
            connection: self.registration.entry.name.clone(),
            vhost: self.vhost.name.clone(),
            stream: stream.to_owned(),
        }
    }

    /// The stream queue `name`, if there is one.
    fn stream(&self, name: &str) -> Option<Arc<Queue>> {
        self.vhost.queue(name).filter(|q| q.is_stream())
    }

    fn respond(&self, request: u16, correlation_id: u32, c: u16) {
        self.outbox.write(|b| reply::generic(b, request, correlation_id, c));
    }

    /// Answers a definition change once it is durable (after the sync, and
    /// the in-sync followers when clustered), in order with held confirms.
    fn respond_when_durable(&self, request: u16, correlation_id: u32, c: u16, wrote: bool) {
        let sync = &self.ctx.amqp.broker.sync;
        if crate::amqp::durable_reply::replicated() || (wrote && sync.enabled()) || self.held.busy() {
            self.held
                .reply_after_sync(sync, |b| reply::generic(b, request, correlation_id, c));
        } else {
            self.respond(request, correlation_id, c);
        }
    }

    /// Handles one command; false once the client closed the connection.
    fn handle(&mut self, c: Command) -> Result<bool, Close> {
        tracing::trace!("received {c:?}");
        match c {
            Command::DeclarePublisher {
                correlation_id,
                publisher_id,
                reference,
                stream,
            } => self.declare_publisher(correlation_id, publisher_id, reference, &stream),
            Command::Publish { publisher_id, messages } => self.publish(publisher_id, messages),
            Command::QueryPublisherSequence {
                correlation_id,
                reference,
                stream,
            } => {
                let (c, seq) = match self.stream(&stream) {
                    Some(_) if !self.allowed(Access::Read, &stream) => (code::ACCESS_REFUSED, 0),
                    Some(q) => (code::OK, q.stream_publisher_sequence(&reference)),
                    None => (code::STREAM_DOES_NOT_EXIST, 0),
                };
                self.outbox
                    .write(|b| reply::with_u64(b, key::QUERY_PUBLISHER_SEQUENCE, correlation_id, c, seq));
            }
            Command::DeletePublisher {
                correlation_id,
                publisher_id,
            } => {
                let c = match self.publishers.remove(&publisher_id) {
                    Some(_) => {
                        self.ctx
                            .amqp
                            .broker
                            .stream_clients
                            .remove_publisher(self.id, publisher_id);
                        code::OK
                    }
                    None => code::PUBLISHER_DOES_NOT_EXIST,
                };
                self.respond(key::DELETE_PUBLISHER, correlation_id, c);
            }
            Command::Subscribe {
                correlation_id,
                subscription_id,
                stream,
                offset,
                credit,
                properties,
            } => self.subscribe(correlation_id, subscription_id, &stream, offset, credit, &properties),
            Command::Credit {
                subscription_id,
                credit,
            } => match self.subscriptions.get(&subscription_id) {
                Some(s) => s.grant(credit),
                None => self.outbox.write(|b| {
                    // Credit is answered only when it fails.
                    let f = begin_frame(b, key::CREDIT | key::RESPONSE, 1);
                    b.put_u16(code::SUBSCRIPTION_ID_DOES_NOT_EXIST);
                    b.put_u8(subscription_id);
                    end_frame(b, f);
                }),
            },
            Command::StoreOffset {
                reference,
                stream,
                offset,
            } => match self.stream(&stream) {
                Some(q) if self.allowed(Access::Read, &stream) => q.store_stream_offset(&reference, offset),
                Some(_) => {}
                None => tracing::info!("store offset for missing stream '{stream}'"),
            },
            Command::QueryOffset {
                correlation_id,
                reference,
                stream,
            } => {
                let (c, offset) = match self.stream(&stream) {
                    None => (code::STREAM_DOES_NOT_EXIST, 0),
                    Some(_) if !self.allowed(Access::Read, &stream) => (code::ACCESS_REFUSED, 0),
                    Some(q) => match q.stored_stream_offset(&reference) {
                        Some(o) => (code::OK, o),
                        None => (code::NO_OFFSET, 0),
                    },
                };
                self.outbox
                    .write(|b| reply::with_u64(b, key::QUERY_OFFSET, correlation_id, c, offset));
            }
            Command::Unsubscribe {
                correlation_id,
                subscription_id,
            } => {
                let c = match self.subscriptions.remove(&subscription_id) {
                    Some(s) => {
                        s.cancel();
                        self.ctx
                            .amqp
                            .broker
                            .stream_clients
                            .remove_consumer(self.id, subscription_id);
                        code::OK
                    }
                    None => code::SUBSCRIPTION_ID_DOES_NOT_EXIST,
                };
                self.respond(key::UNSUBSCRIBE, correlation_id, c);
            }
            Command::Create {
                correlation_id,
                stream,
                arguments,
            } => self.create(correlation_id, &stream, &arguments),
            Command::Delete { correlation_id, stream } => self.delete(correlation_id, &stream),
            Command::Metadata {
                correlation_id,
                streams,
            } => {
                let settings = &self.ctx.settings;
                let leaders: Vec<(&str, Option<u16>)> = streams
                    .iter()
                    .map(|s| (s.as_str(), self.stream(s).map(|_| 0)))
                    .collect();
                let port = match self.tls {
                    true => settings.advertised_tls_port.unwrap_or(settings.advertised_port),
                    false => settings.advertised_port,
                };
                let broker = Broker {
                    reference: 0,
                    host: &settings.advertised_host,
                    port: u32::from(port),
                };
                self.outbox
                    .write(|b| reply::metadata(b, correlation_id, std::slice::from_ref(&broker), &leaders));
            }
            Command::Close {
                correlation_id,
                code: c,
                reason,
            } => {
                tracing::info!("client closed the connection ({c}: {reason})");
                self.respond(key::CLOSE, correlation_id, code::OK);
                return Ok(false);
            }
            Command::CloseResponse => return Ok(false),
            Command::ConsumerUpdateResponse {
                correlation_id, offset, ..
            } => {
                let start = offset.map(start_at);
                let found = self
                    .subscriptions
                    .values()
                    .any(|s| s.activated(correlation_id, start.clone()));
                if !found {
                    tracing::debug!("consumer update answer {correlation_id} for no pending activation");
                }
            }
            Command::Heartbeat | Command::Tune { .. } => {}
            Command::ExchangeCommandVersions { correlation_id, .. } => {
                self.outbox
                    .write(|b| reply::command_versions(b, correlation_id, &COMMAND_VERSIONS));
            }
            Command::StreamStats { correlation_id, stream } => {
                let stats = self.stream(&stream).map(|q| {
                    let st = q.lock();
                    st.stream.as_ref().map_or((-1, -1), |s| {
                        let (first, next) = (s.store.first_offset(), s.store.next_offset());
                        match next > first {
                            true => (first as i64, next as i64 - 1),
                            false => (-1, -1),
                        }
                    })
                });
                let (c, (first, committed)) = match stats {
                    Some(s) => (code::OK, s),
                    None => (code::STREAM_DOES_NOT_EXIST, (-1, -1)),
                };
                self.outbox.write(|b| {
                    reply::stream_stats(
                        b,
                        correlation_id,
                        c,
                        &[("first_chunk_id", first), ("committed_chunk_id", committed)],
                    )
                });
            }
            Command::Route {
                correlation_id,
                routing_key,
                super_stream,
            } => {
                let found = crate::core::super_stream::route(&self.vhost, &super_stream, &routing_key);
                self.string_list(key::ROUTE, correlation_id, found);
            }
            Command::Partitions {
                correlation_id,
                super_stream,
            } => {
                let found = crate::core::super_stream::partitions(&self.vhost, &super_stream);
                self.string_list(key::PARTITIONS, correlation_id, found);
            }
            Command::CreateSuperStream {
                correlation_id,
                name,
                partitions,
                binding_keys,
                arguments,
            } => self.create_super_stream(correlation_id, &name, &partitions, &binding_keys, &arguments),
            Command::DeleteSuperStream { correlation_id, name } => self.delete_super_stream(correlation_id, &name),
            Command::PeerProperties { .. }
            | Command::SaslHandshake { .. }
            | Command::SaslAuthenticate { .. }
            | Command::Open { .. } => {
                return Err((code::PRECONDITION_FAILED, "the connection is already open".into()));
            }
        }
        Ok(true)
    }

    /// Answers a route or partitions query: the streams, or "does not
    /// exist" for a missing super stream.
    fn string_list(&self, request: u16, correlation_id: u32, found: Option<Vec<String>>) {
        let (c, list) = match found {
            Some(l) => (code::OK, l),
            None => (code::STREAM_DOES_NOT_EXIST, Vec::new()),
        };
        self.outbox
            .write(|b| reply::with_strings(b, request, correlation_id, c, list.iter().map(String::as_str)));
    }

    fn create_super_stream(
        &mut self,
        correlation_id: u32,
        name: &str,
        partitions: &[String],
        binding_keys: &[String],
        arguments: &[(String, String)],
    ) {
        use crate::core::super_stream::{self, SuperStreamError};
        let refuse = |me: &Self, c: u16| me.respond(key::CREATE_SUPER_STREAM, correlation_id, c);
        if !super_stream::names_allowed(name, partitions) {
            return refuse(self, code::PRECONDITION_FAILED);
        }
        let (vhost, user) = (self.vhost.name.clone(), self.user.clone());
        let perms = self.permissions();
        let allowed = perms.check(Access::Configure, "exchange", name, &vhost, &user).is_ok()
            && perms.check(Access::Write, "exchange", name, &vhost, &user).is_ok()
            && partitions.iter().all(|p| {
                perms.check(Access::Configure, "queue", p, &vhost, &user).is_ok()
                    && perms.check(Access::Write, "queue", p, &vhost, &user).is_ok()
            });
        if !allowed {
            return refuse(self, code::ACCESS_REFUSED);
        }
        let args = match crate::core::super_stream::stream_arguments(arguments) {
            Ok(a) => a,
            Err(e) => {
                tracing::info!("super stream '{name}' refused: {e}");
                return refuse(self, code::PRECONDITION_FAILED);
            }
        };
        let before = self.vhost.definition_changes();
        match super_stream::create(&self.vhost, name, partitions, binding_keys, &args, self.id) {
            Ok(()) => {
                let wrote = self.vhost.definition_changes() != before;
                self.respond_when_durable(key::CREATE_SUPER_STREAM, correlation_id, code::OK, wrote);
            }
            Err(e) => {
                tracing::info!("super stream '{name}' refused: {e}");
                let c = match e {
                    SuperStreamError::Exists(_) => code::STREAM_ALREADY_EXISTS,
                    _ => code::PRECONDITION_FAILED,
                };
                refuse(self, c);
            }
        }
    }

    fn delete_super_stream(&mut self, correlation_id: u32, name: &str) {
        use crate::core::super_stream::{self, SuperStreamError};
        if !self.allowed_on("exchange", Access::Configure, name) {
            return self.respond(key::DELETE_SUPER_STREAM, correlation_id, code::ACCESS_REFUSED);
        }
        let before = self.vhost.definition_changes();
        let c = match super_stream::delete(&self.vhost, name, self.id) {
            Ok(()) => code::OK,
            Err(SuperStreamError::NotFound(_)) => code::STREAM_DOES_NOT_EXIST,
            Err(e) => {
                tracing::info!("deleting super stream '{name}' failed: {e}");
                code::PRECONDITION_FAILED
            }
        };
        let wrote = self.vhost.definition_changes() != before;
        self.respond_when_durable(key::DELETE_SUPER_STREAM, correlation_id, c, wrote);
        self.subscriptions.retain(|_, s| !s.is_cancelled());
        self.publishers.retain(|_, p| !p.queue.lock().deleted);
    }

    fn declare_publisher(&mut self, correlation_id: u32, publisher_id: u8, reference: Option<String>, stream: &str) {
        // A publisher whose stream was deleted meanwhile no longer counts.
        self.publishers.retain(|_, p| !p.queue.lock().deleted);
        let taken = self.publishers.contains_key(&publisher_id);
        let reference_taken = reference.as_ref().is_some_and(|r| {
            self.publishers
                .values()
                .any(|p| p.queue.name == stream && p.reference.as_ref() == Some(r))
        });
        let c = if taken || reference_taken || reference.as_ref().is_some_and(|r| r.len() > 256) {
            code::PRECONDITION_FAILED
        } else {
            match self.stream(stream) {
                None => code::STREAM_DOES_NOT_EXIST,
                Some(_) if !self.allowed(Access::Write, stream) => code::ACCESS_REFUSED,
                Some(queue) => {
                    let of = self.client_of(stream);
                    let stats =
                        self.ctx
                            .amqp
                            .broker
                            .stream_clients
                            .add_publisher(self.id, of, publisher_id, reference.clone());
                    self.publishers.insert(
                        publisher_id,
                        Publisher {
                            queue,
                            reference,
                            stats,
                        },
                    );
                    code::OK
                }
            }
        };
        self.respond(key::DECLARE_PUBLISHER, correlation_id, c);
    }

    fn publish(&mut self, publisher_id: u8, messages: Vec<Published>) {
        let Some(p) = self.publishers.get(&publisher_id) else {
            let errors: Vec<(u64, u16)> = messages
                .iter()
                .map(|m| (m.publishing_id, code::PUBLISHER_DOES_NOT_EXIST))
                .collect();
            self.outbox.write(|b| reply::publish_error(b, publisher_id, &errors));
            return;
        };
        let set_timestamp = self.ctx.amqp.settings().set_timestamp;
        let out = p.publish(messages, &mut self.scratch, set_timestamp);
        if out.woke && !self.wakes.iter().any(|w| Arc::ptr_eq(w, &p.queue)) {
            self.wakes.push(p.queue.clone());
        }
        if !out.refused.is_empty() {
            self.outbox
                .write(|b| reply::publish_error(b, publisher_id, &out.refused));
        }
        if out.confirmed.is_empty() {
            return;
        }
        let sync = &self.ctx.amqp.broker.sync;
        if sync.enabled() || crate::amqp::durable_reply::replicated() || self.held.busy() {
            self.held.confirm_after_sync(sync, &p.stats, out.confirmed);
        } else {
            p.stats
                .confirmed
                .fetch_add(out.confirmed.len() as u64, std::sync::atomic::Ordering::Relaxed);
            self.outbox
                .write(|b| reply::publish_confirm(b, publisher_id, &out.confirmed));
        }
    }

    fn subscribe(
        &mut self,
        correlation_id: u32,
        subscription_id: u8,
        stream: &str,
        offset: OffsetSpec,
        credit: u16,
        properties: &[(String, String)],
    ) {
        let refuse = |me: &Self, c: u16| me.respond(key::SUBSCRIBE, correlation_id, c);
        // A subscription whose stream was deleted no longer holds its id.
        if self
            .subscriptions
            .get(&subscription_id)
            .is_some_and(|s| s.is_cancelled())
        {
            self.subscriptions.remove(&subscription_id);
            self.ctx
                .amqp
                .broker
                .stream_clients
                .remove_consumer(self.id, subscription_id);
        }
        if self.subscriptions.contains_key(&subscription_id) {
            return refuse(self, code::SUBSCRIPTION_ID_ALREADY_EXISTS);
        }
        let Some(queue) = self.stream(stream) else {
            return refuse(self, code::STREAM_DOES_NOT_EXIST);
        };
        if !self.allowed(Access::Read, stream) {
            return refuse(self, code::ACCESS_REFUSED);
        }
        let property = |k: &str| properties.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        let opts = match consumer_options(offset, properties) {
            Ok(o) => o,
            Err(e) => {
                tracing::info!("subscription refused: {e}");
                return refuse(self, code::PRECONDITION_FAILED);
            }
        };
        let single_active = match property("single-active-consumer") == Some("true") {
            false => None,
            true => {
                let Some(name) = property("name").filter(|n| !n.is_empty()) else {
                    tracing::info!("subscription refused: a single active consumer needs a name");
                    return refuse(self, code::PRECONDITION_FAILED);
                };
                // A partition's place in its super stream spreads the
                // partitions over the group's members.
                let partition = property("super-stream")
                    .and_then(|ss| crate::core::super_stream::partitions(&self.vhost, ss))
                    .and_then(|ps| ps.iter().position(|p| p == stream));
                Some(SingleActive::new(
                    name.to_owned(),
                    partition,
                    opts.clone(),
                    self.correlations.clone(),
                ))
            }
        };
        let tag = match property("name") {
            Some(name) => name.to_owned(),
            None => format!("stream-subscription-{subscription_id}"),
        };
        // The answer goes out before the first chunk.
        self.respond(key::SUBSCRIBE, correlation_id, code::OK);
        let stats = self.ctx.amqp.broker.stream_clients.add_consumer(
            self.id,
            self.client_of(stream),
            subscription_id,
            properties.to_vec(),
            single_active.is_none(),
        );
        let sub = Subscription::new(
            self.ctx.amqp.next_id(),
            subscription_id,
            tag,
            queue.clone(),
            self.vhost.clone(),
            self.outbox.clone(),
            self.frame_max,
            credit,
            single_active,
            stats,
        );
        if sub.single_active.is_some() {
            // It reads once its group makes it active and the client says
            // from where.
            self.subscriptions.insert(subscription_id, sub.clone());
            sub.join_group();
            return;
        }
        if let Err(e) = queue.add_stream_consumer(sub.clone(), false, &opts) {
            tracing::warn!("subscription to '{stream}' failed: {e}");
            self.outbox
                .write(|b| reply::metadata_update(b, code::STREAM_NOT_AVAILABLE, stream));
            return;
        }
        sub.spawn();
        self.subscriptions.insert(subscription_id, sub);
    }

    fn create(&mut self, correlation_id: u32, stream: &str, arguments: &[(String, String)]) {
        let refuse = |me: &Self, c: u16| me.respond(key::CREATE, correlation_id, c);
        if stream.is_empty() || stream.len() > 255 || stream.starts_with("amq.") {
            return refuse(self, code::PRECONDITION_FAILED);
        }
        if !self.allowed(Access::Configure, stream) {
            return refuse(self, code::ACCESS_REFUSED);
        }
        if self.vhost.queue(stream).is_some() {
            return refuse(self, code::STREAM_ALREADY_EXISTS);
        }
        let args = match crate::core::super_stream::stream_arguments(arguments) {
            Ok(a) => a,
            Err(e) => {
                tracing::info!("stream '{stream}' refused: {e}");
                return refuse(self, code::PRECONDITION_FAILED);
            }
        };
        let opts = QueueOptions {
            durable: true,
            exclusive: false,
            auto_delete: false,
            passive: false,
        };
        let before = self.vhost.definition_changes();
        match self.vhost.declare_queue(stream, &opts, args, self.id) {
            Ok(_) => {
                let wrote = self.vhost.definition_changes() != before;
                self.respond_when_durable(key::CREATE, correlation_id, code::OK, wrote);
            }
            Err(e) => {
                tracing::info!("stream '{stream}' refused: {e}");
                refuse(self, code::PRECONDITION_FAILED);
            }
        }
    }

    fn delete(&mut self, correlation_id: u32, stream: &str) {
        if !self.allowed(Access::Configure, stream) {
            return self.respond(key::DELETE, correlation_id, code::ACCESS_REFUSED);
        }
        if self.stream(stream).is_none() {
            return self.respond(key::DELETE, correlation_id, code::STREAM_DOES_NOT_EXIST);
        }
        let before = self.vhost.definition_changes();
        match self.vhost.delete_queue(stream, false, false, Some(self.id)) {
            Ok(_) => {
                let wrote = self.vhost.definition_changes() != before;
                self.respond_when_durable(key::DELETE, correlation_id, code::OK, wrote);
                // This connection's publishers to it learn it as RabbitMQ
                // tells them.
                let gone: Vec<u8> = self
                    .publishers
                    .iter()
                    .filter(|(_, p)| p.queue.name == stream)
                    .map(|(id, _)| *id)
                    .collect();
                let clients = &self.ctx.amqp.broker.stream_clients;
                for id in gone {
                    self.publishers.remove(&id);
                    clients.remove_publisher(self.id, id);
                }
                self.subscriptions.retain(|id, s| {
                    let keep = !s.is_cancelled();
                    if !keep {
                        clients.remove_consumer(self.id, *id);
                    }
                    keep
                });
            }
            Err(e) => {
                tracing::info!("deleting stream '{stream}' failed: {e}");
                self.respond(key::DELETE, correlation_id, code::PRECONDITION_FAILED);
            }
        }
    }
}

/// Where an offset specification starts reading.
fn start_at(offset: OffsetSpec) -> StartAt {
    match offset {
        OffsetSpec::First => StartAt::First,
        OffsetSpec::Last => StartAt::Last,
        OffsetSpec::Next => StartAt::Next,
        OffsetSpec::Offset(o) => StartAt::Offset(o),
        OffsetSpec::Timestamp(ms) => StartAt::Time(ms),
    }
}

/// A subscription's start and filter as a stream consumer's options:
/// `filter.N` properties are filter values (a message with any of them
/// passes), `match-unfiltered` lets messages without a value through.
fn consumer_options(offset: OffsetSpec, properties: &[(String, String)]) -> Result<ConsumerOptions, String> {
    let start = start_at(offset);
    let values: Vec<FieldValue> = properties
        .iter()
        .filter(|(k, _)| k.starts_with("filter."))
        .map(|(_, v)| FieldValue::from(v.as_str()))
        .collect();
    let mut args = FieldTable::default();
    if !values.is_empty() {
        args.insert("x-stream-filter", FieldValue::Array(values));
        args.insert("x-filter-match-type", FieldValue::from("any"));
        let unfiltered = properties.iter().any(|(k, v)| k == "match-unfiltered" && v == "true");
        args.insert("x-stream-match-unfiltered", FieldValue::Bool(unfiltered));
    }
    Ok(ConsumerOptions {
        start: Some(start),
        filter: Filter::from_arguments(&args)?,
        automatic_tracking: false,
    })
}
