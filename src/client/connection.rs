//! A minimal async AMQP 0-9-1 client on the broker's own codec: just enough
//! for load generation over TCP or TLS (PLAIN handshake, channels, confirms, transactions,
//! queue declare/bind/unbind/purge, qos, consume/cancel) and a raw view of
//! the receive buffer so the hot loops can work on frames without copying
//! them.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::amqp::codec::{
    BasicProperties, CodecError, FieldTable, FieldValue, Frame, Method, ShortStr, parse_frame, write_method,
};
use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;

use super::stream::{self, Reader, Writer};
use super::uri::AmqpUri;

/// Initial size of a connection's receive buffer.
pub const READ_BUF: usize = 256 * 1024;
/// Free space the receive buffer keeps before each read.
const MIN_READ: usize = 64 * 1024;
/// frame_max we ask for when the server leaves it unlimited (and the most we accept).
const FRAME_MAX: u32 = 131_072;
/// How long a graceful connection.close may wait for close-ok.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Frame type octets and the frame end marker (AMQP 0-9-1 section 4.2.3).
pub const FRAME_METHOD: u8 = 1;
pub const FRAME_HEADER: u8 = 2;
pub const FRAME_BODY: u8 = 3;
pub const FRAME_HEARTBEAT: u8 = 8;
const FRAME_END: u8 = 0xCE;

/// Why a client gave up.
#[derive(Debug)]
pub enum Error {
    /// Socket error (or the server hung up).
    Io(io::Error),
    /// The server sent something the codec could not decode.
    Codec(CodecError),
    /// The server closed the connection with connection.close.
    ConnectionClosed {
        code: u16,
        text: String,
        class_id: u16,
        method_id: u16,
    },
    /// The server closed a channel with channel.close.
    ChannelClosed {
        code: u16,
        text: String,
        class_id: u16,
        method_id: u16,
    },
    /// The server cancelled our consumer (e.g. the queue was deleted).
    ConsumerCancelled(String),
    /// Anything else that does not follow the protocol.
    Protocol(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = |f: &mut fmt::Formatter<'_>, class_id: u16, method_id: u16| {
            if class_id != 0 {
                write!(f, " (in method {class_id}.{method_id})")
            } else {
                Ok(())
            }
        };
        match self {
            Error::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => write!(f, "connection closed by server"),
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::Codec(e) => write!(f, "protocol error: {e}"),
            Error::ConnectionClosed {
                code,
                text,
                class_id,
                method_id,
            } => {
                write!(f, "connection closed by server: {code} {text}")?;
                origin(f, *class_id, *method_id)
            }
            Error::ChannelClosed {
                code,
                text,
                class_id,
                method_id,
            } => {
                write!(f, "channel closed by server: {code} {text}")?;
                origin(f, *class_id, *method_id)
            }
            Error::ConsumerCancelled(tag) => write!(f, "consumer {tag:?} cancelled by server"),
            Error::Protocol(s) => write!(f, "protocol error: {s}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<CodecError> for Error {
    fn from(e: CodecError) -> Self {
        Error::Codec(e)
    }
}

/// Turns a server's connection.close / channel.close into an [`Error`];
/// `None` for every other method.
pub fn close_error(method: &Method) -> Option<Error> {
    match method {
        Method::ConnectionClose {
            reply_code,
            reply_text,
            class_id,
            method_id,
        } => Some(Error::ConnectionClosed {
            code: *reply_code,
            text: reply_text.to_string(),
            class_id: *class_id,
            method_id: *method_id,
        }),
        Method::ChannelClose {
            reply_code,
            reply_text,
            class_id,
            method_id,
        } => Some(Error::ChannelClosed {
            code: *reply_code,
            text: reply_text.to_string(),
            class_id: *class_id,
            method_id: *method_id,
        }),
        _ => None,
    }
}

/// One complete frame at the front of a receive buffer, borrowed in place.
pub struct RawFrame<'a> {
    /// Frame type octet.
    pub kind: u8,
    /// The payload between the 7-byte header and the end octet.
    pub payload: &'a [u8],
    /// Length of the whole frame, header and end octet included.
    pub len: usize,
}

/// Length of the frame at the front of `buf` according to its header, if
/// the header is complete.
pub fn announced_len(buf: &[u8]) -> Option<usize> {
    let size: [u8; 4] = buf.get(3..7)?.try_into().ok()?;
    usize::try_from(u32::from_be_bytes(size)).ok()?.checked_add(8)
}

/// Borrows the complete frame at the front of `buf`, without decoding it.
/// `Ok(None)` while it is incomplete.
pub fn peek_frame(buf: &[u8]) -> Result<Option<RawFrame<'_>>, Error> {
    let Some(len) = announced_len(buf) else { return Ok(None) };
    if buf.len() < len {
        return Ok(None);
    }
    if buf[len - 1] != FRAME_END {
        return Err(CodecError::BadFrameEnd(buf[len - 1]).into());
    }
    Ok(Some(RawFrame {
        kind: buf[0],
        payload: &buf[7..len - 1],
        len,
    }))
}

/// The delivery tag of a basic.deliver method payload, read in place
/// (class 60, method 60, consumer-tag shortstr, delivery-tag u64, ...).
/// `None` if the payload is not a basic.deliver.
pub fn deliver_tag(payload: &[u8]) -> Option<u64> {
    if payload.get(..4)? != [0, 60, 0, 60] {
        return None;
    }
    let tag_len = usize::from(*payload.get(4)?);
    let at = 5 + tag_len;
    Some(u64::from_be_bytes(payload.get(at..at + 8)?.try_into().ok()?))
}

/// The delivery tag of a basic.get-ok method payload, read in place
/// (class 60, method 71, delivery-tag u64, ...). `None` if the payload is
/// not a basic.get-ok.
pub fn get_ok_tag(payload: &[u8]) -> Option<u64> {
    if payload.get(..4)? != [0, 60, 0, 71] {
        return None;
    }
    Some(u64::from_be_bytes(payload.get(4..12)?.try_into().ok()?))
}

/// The body size of a content header payload (class u16, weight u16, size u64).
pub fn header_body_size(payload: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(payload.get(4..12)?.try_into().ok()?))
}

/// The receive side of a connection: a socket and a large buffer that the
/// hot loops inspect in place.
pub struct FrameReader {
    rd: Reader,
    /// Bytes received and not yet consumed.
    pub buf: BytesMut,
}

impl FrameReader {
    /// Reads more bytes, making room for at least the frame at the front.
    /// The server hanging up is an `UnexpectedEof` I/O error.
    pub async fn fill(&mut self) -> Result<(), Error> {
        let want = announced_len(&self.buf).unwrap_or(0).max(self.buf.len() + MIN_READ);
        if self.buf.capacity() < want {
            self.buf.reserve(want.max(READ_BUF) - self.buf.len());
        }
        if self.rd.read_buf(&mut self.buf).await? == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        Ok(())
    }

    /// The next frame, decoded by the codec.
    pub async fn next_frame(&mut self) -> Result<Frame, Error> {
        loop {
            if let Some(frame) = parse_frame(&mut self.buf, 0)? {
                return Ok(frame);
            }
            self.fill().await?;
        }
    }
}

/// Negotiated connection limits.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// Largest frame either side may send, framing included.
    pub frame_max: u32,
    /// Heartbeat interval in seconds (0: none). The client must send
    /// something at least this often and may give up on a server silent for
    /// twice as long.
    pub heartbeat: u16,
}

/// Who the client is to the server, and how often it wants heartbeats.
#[derive(Debug, Clone, Copy)]
pub struct ClientInfo<'a> {
    /// The program, in the client properties (`lavinmqperf`, `lavinmq`).
    pub product: &'a str,
    /// The connection's name, as the management UI lists it.
    pub name: &'a str,
    /// Heartbeat interval to ask for, in seconds; 0 for none. The server's
    /// proposal wins when it is shorter.
    pub heartbeat: u16,
}

/// An open AMQP connection, used sequentially during setup and then split
/// into its reader and writer for the hot loops.
pub struct Connection {
    /// Receive side.
    pub reader: FrameReader,
    /// Send side.
    pub writer: Writer,
    /// Scratch buffer for outgoing frames.
    pub wbuf: BytesMut,
    /// Negotiated limits.
    pub tuning: Tuning,
}

/// Client properties sent in connection.start-ok: the program is named by
/// `product` (`lavinmqperf`, or `lavinmq` for a shovel), the connection by
/// `name`.
fn client_properties(product: &str, name: &str) -> FieldTable {
    let mut caps = FieldTable::new();
    for cap in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
    ] {
        caps.insert(cap, FieldValue::Bool(true));
    }
    let mut props = FieldTable::new();
    props.insert("product", FieldValue::from(product));
    props.insert("version", FieldValue::from(env!("CARGO_PKG_VERSION")));
    props.insert("platform", FieldValue::from("Rust"));
    props.insert("connection_name", FieldValue::from(name));
    props.insert("capabilities", FieldValue::Table(caps));
    props
}

/// How a client proves who it is.
#[derive(Debug, Clone)]
pub enum Login<'a> {
    /// SASL PLAIN with a user name and password.
    Plain {
        /// User name.
        user: &'a str,
        /// Password.
        password: &'a str,
    },
    /// SASL EXTERNAL: the server already knows (a client certificate, or the
    /// broker's own in-process connection).
    External,
}

impl Login<'_> {
    fn mechanism(&self) -> &'static str {
        match self {
            Login::Plain { .. } => "PLAIN",
            Login::External => "EXTERNAL",
        }
    }

    fn response(&self) -> Bytes {
        match self {
            Login::Plain { user, password } => {
                let mut response = Vec::with_capacity(user.len() + password.len() + 2);
                response.push(0);
                response.extend_from_slice(user.as_bytes());
                response.push(0);
                response.extend_from_slice(password.as_bytes());
                Bytes::from(response)
            }
            Login::External => Bytes::new(),
        }
    }
}

impl Connection {
    /// Connects, authenticates with PLAIN and opens the URI's vhost, as
    /// `lavinmqperf`.
    pub async fn connect(uri: &AmqpUri, name: &str) -> Result<Connection, Error> {
        let info = ClientInfo {
            product: "lavinmqperf",
            name,
            // No heartbeats: every connection here is busy or short-lived.
            heartbeat: 0,
        };
        Self::connect_as(uri, info).await
    }

    /// Connects, authenticates with PLAIN and opens the URI's vhost, as `info` says.
    pub async fn connect_as(uri: &AmqpUri, info: ClientInfo<'_>) -> Result<Connection, Error> {
        let (rd, writer) = stream::connect(uri).await?;
        let login = Login::Plain {
            user: &uri.user,
            password: &uri.password,
        };
        Self::open(rd, writer, login, &uri.vhost, info).await
    }

    /// Runs the handshake over an already connected stream and opens `vhost`.
    pub async fn open(
        rd: Reader,
        writer: Writer,
        login: Login<'_>,
        vhost: &str,
        info: ClientInfo<'_>,
    ) -> Result<Connection, Error> {
        let mut conn = Connection {
            reader: FrameReader {
                rd,
                buf: BytesMut::with_capacity(READ_BUF),
            },
            writer,
            wbuf: BytesMut::with_capacity(4096),
            tuning: Tuning {
                frame_max: FRAME_MAX,
                heartbeat: 0,
            },
        };
        conn.writer.send(b"AMQP\x00\x00\x09\x01").await?;
        let Method::ConnectionStart { mechanisms, .. } = conn.expect(0).await? else {
            return Err(Error::Protocol("expected connection.start".into()));
        };
        let mechanism = login.mechanism();
        if !mechanisms.split(|&b| b == b' ').any(|m| m == mechanism.as_bytes()) {
            return Err(Error::Protocol(format!(
                "server does not offer {mechanism} authentication (offers {})",
                String::from_utf8_lossy(&mechanisms)
            )));
        }
        conn.send(
            0,
            &Method::ConnectionStartOk {
                client_properties: client_properties(info.product, info.name),
                mechanism: ShortStr::from_static(mechanism),
                response: login.response(),
                locale: ShortStr::from_static("en_US"),
            },
        )
        .await?;
        let tune = match conn.expect(0).await {
            Ok(m) => m,
            // A server without authentication_failure_close just hangs up.
            Err(Error::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                let who = match &login {
                    Login::Plain { user, .. } => format!(" for user {user:?}"),
                    Login::External => String::new(),
                };
                return Err(Error::Protocol(format!(
                    "server closed the connection during the handshake (wrong credentials{who}?)"
                )));
            }
            Err(e) => return Err(e),
        };
        let Method::ConnectionTune {
            channel_max,
            frame_max,
            heartbeat,
        } = tune
        else {
            return Err(Error::Protocol(format!(
                "expected connection.tune, got {}",
                tune.name()
            )));
        };
        let frame_max = if frame_max == 0 {
            FRAME_MAX
        } else {
            frame_max.min(FRAME_MAX)
        };
        // 0 from us turns heartbeats off; 0 from the server leaves ours.
        let heartbeat = match (heartbeat, info.heartbeat) {
            (_, 0) => 0,
            (0, ours) => ours,
            (theirs, ours) => theirs.min(ours),
        };
        conn.tuning = Tuning { frame_max, heartbeat };
        conn.send(
            0,
            &Method::ConnectionTuneOk {
                channel_max: if channel_max == 0 { 2047 } else { channel_max },
                frame_max,
                heartbeat,
            },
        )
        .await?;
        let open = Method::ConnectionOpen {
            virtual_host: ShortStr::from(vhost),
        };
        conn.call(0, &open, "connection.open-ok", |m| {
            matches!(m, Method::ConnectionOpenOk)
        })
        .await?;
        Ok(conn)
    }

    /// Sends one method frame.
    pub async fn send(&mut self, channel: u16, method: &Method) -> Result<(), Error> {
        self.wbuf.clear();
        write_method(&mut self.wbuf, channel, method)?;
        self.writer.send(&self.wbuf).await?;
        Ok(())
    }

    /// Waits for the next method on `channel`, answering heartbeats and
    /// turning the server's connection.close / channel.close into errors.
    pub async fn expect(&mut self, channel: u16) -> Result<Method, Error> {
        loop {
            match self.reader.next_frame().await? {
                Frame::Method { channel: ch, method } => {
                    if let Some(err) = close_error(&method) {
                        let ok = if ch == 0 {
                            Method::ConnectionCloseOk
                        } else {
                            Method::ChannelCloseOk
                        };
                        let _ = self.send(ch, &ok).await;
                        return Err(err);
                    }
                    match method {
                        Method::ConnectionBlocked { reason } => {
                            tracing::warn!("connection blocked by server: {reason}")
                        }
                        Method::ConnectionUnblocked => tracing::info!("connection unblocked"),
                        m if ch == channel => return Ok(m),
                        _ => {}
                    }
                }
                Frame::Heartbeat { .. } => {
                    self.wbuf.clear();
                    crate::amqp::codec::write_heartbeat(&mut self.wbuf);
                    self.writer.send(&self.wbuf).await?;
                }
                Frame::Header { .. } | Frame::Body { .. } => {}
            }
        }
    }

    /// Sends `method` and waits for the reply `is_reply` accepts.
    pub async fn call(
        &mut self,
        channel: u16,
        method: &Method,
        reply: &str,
        is_reply: impl Fn(&Method) -> bool,
    ) -> Result<Method, Error> {
        self.send(channel, method).await?;
        let got = self.expect(channel).await?;
        if is_reply(&got) {
            Ok(got)
        } else {
            Err(Error::Protocol(format!("expected {reply}, got {}", got.name())))
        }
    }

    /// channel.open.
    pub async fn open_channel(&mut self, channel: u16) -> Result<(), Error> {
        self.call(channel, &Method::ChannelOpen, "channel.open-ok", |m| {
            matches!(m, Method::ChannelOpenOk)
        })
        .await
        .map(drop)
    }

    /// confirm.select: publisher confirms on `channel`.
    pub async fn confirm_select(&mut self, channel: u16) -> Result<(), Error> {
        let m = Method::ConfirmSelect { nowait: false };
        self.call(channel, &m, "confirm.select-ok", |m| {
            matches!(m, Method::ConfirmSelectOk)
        })
        .await
        .map(drop)
    }

    /// tx.select: transactions on `channel`.
    pub async fn tx_select(&mut self, channel: u16) -> Result<(), Error> {
        self.call(channel, &Method::TxSelect, "tx.select-ok", |m| {
            matches!(m, Method::TxSelectOk)
        })
        .await
        .map(drop)
    }

    /// basic.qos with a per-consumer prefetch count.
    pub async fn qos(&mut self, channel: u16, prefetch_count: u16) -> Result<(), Error> {
        let m = Method::BasicQos {
            prefetch_size: 0,
            prefetch_count,
            global: false,
        };
        self.call(channel, &m, "basic.qos-ok", |m| matches!(m, Method::BasicQosOk))
            .await
            .map(drop)
    }

    /// queue.declare; returns the (possibly server-generated) queue name.
    pub async fn queue_declare(&mut self, channel: u16, queue: QueueDeclare<'_>) -> Result<String, Error> {
        self.queue_declare_counted(channel, queue).await.map(|(name, _)| name)
    }

    /// queue.declare; returns the queue name and its ready message count.
    pub async fn queue_declare_counted(
        &mut self,
        channel: u16,
        queue: QueueDeclare<'_>,
    ) -> Result<(String, u32), Error> {
        let m = Method::QueueDeclare {
            queue: ShortStr::from(queue.name),
            passive: queue.passive,
            durable: queue.durable,
            exclusive: queue.exclusive,
            auto_delete: queue.auto_delete,
            nowait: false,
            arguments: queue.arguments.clone(),
        };
        match self
            .call(channel, &m, "queue.declare-ok", |m| {
                matches!(m, Method::QueueDeclareOk { .. })
            })
            .await?
        {
            Method::QueueDeclareOk {
                queue, message_count, ..
            } => Ok((queue.to_string(), message_count)),
            other => Err(Error::Protocol(format!("unexpected reply {}", other.name()))),
        }
    }

    /// exchange.declare.
    pub async fn exchange_declare(&mut self, channel: u16, exchange: ExchangeDeclare<'_>) -> Result<(), Error> {
        let m = Method::ExchangeDeclare {
            exchange: ShortStr::from(exchange.name),
            kind: ShortStr::from(exchange.kind),
            passive: exchange.passive,
            durable: exchange.durable,
            auto_delete: exchange.auto_delete,
            internal: exchange.internal,
            nowait: false,
            arguments: exchange.arguments.clone(),
        };
        self.call(channel, &m, "exchange.declare-ok", |m| {
            matches!(m, Method::ExchangeDeclareOk)
        })
        .await
        .map(drop)
    }

    /// exchange.delete.
    pub async fn exchange_delete(&mut self, channel: u16, exchange: &str) -> Result<(), Error> {
        let m = Method::ExchangeDelete {
            exchange: ShortStr::from(exchange),
            if_unused: false,
            nowait: false,
        };
        self.call(channel, &m, "exchange.delete-ok", |m| {
            matches!(m, Method::ExchangeDeleteOk)
        })
        .await
        .map(drop)
    }

    /// queue.delete; returns the number of messages deleted with it.
    pub async fn queue_delete(&mut self, channel: u16, queue: &str) -> Result<u32, Error> {
        let m = Method::QueueDelete {
            queue: ShortStr::from(queue),
            if_unused: false,
            if_empty: false,
            nowait: false,
        };
        match self
            .call(channel, &m, "queue.delete-ok", |m| {
                matches!(m, Method::QueueDeleteOk { .. })
            })
            .await?
        {
            Method::QueueDeleteOk { message_count } => Ok(message_count),
            other => Err(Error::Protocol(format!("unexpected reply {}", other.name()))),
        }
    }

    /// queue.bind.
    pub async fn queue_bind(
        &mut self,
        channel: u16,
        queue: &str,
        exchange: &str,
        routing_key: &str,
    ) -> Result<(), Error> {
        let m = Method::QueueBind {
            queue: ShortStr::from(queue),
            exchange: ShortStr::from(exchange),
            routing_key: ShortStr::from(routing_key),
            nowait: false,
            arguments: FieldTable::new(),
        };
        self.call(channel, &m, "queue.bind-ok", |m| matches!(m, Method::QueueBindOk))
            .await
            .map(drop)
    }

    /// queue.unbind.
    pub async fn queue_unbind(
        &mut self,
        channel: u16,
        queue: &str,
        exchange: &str,
        routing_key: &str,
    ) -> Result<(), Error> {
        let m = Method::QueueUnbind {
            queue: ShortStr::from(queue),
            exchange: ShortStr::from(exchange),
            routing_key: ShortStr::from(routing_key),
            arguments: FieldTable::new(),
        };
        self.call(channel, &m, "queue.unbind-ok", |m| matches!(m, Method::QueueUnbindOk))
            .await
            .map(drop)
    }

    /// queue.purge; returns the number of messages purged.
    pub async fn queue_purge(&mut self, channel: u16, queue: &str) -> Result<u32, Error> {
        let m = Method::QueuePurge {
            queue: ShortStr::from(queue),
            nowait: false,
        };
        match self
            .call(channel, &m, "queue.purge-ok", |m| {
                matches!(m, Method::QueuePurgeOk { .. })
            })
            .await?
        {
            Method::QueuePurgeOk { message_count } => Ok(message_count),
            other => Err(Error::Protocol(format!("unexpected reply {}", other.name()))),
        }
    }

    /// basic.consume; returns the consumer tag.
    pub async fn consume(
        &mut self,
        channel: u16,
        queue: &str,
        no_ack: bool,
        arguments: &FieldTable,
    ) -> Result<String, Error> {
        let m = Method::BasicConsume {
            queue: ShortStr::from(queue),
            consumer_tag: ShortStr::default(),
            no_local: false,
            no_ack,
            exclusive: false,
            nowait: false,
            arguments: arguments.clone(),
        };
        match self
            .call(channel, &m, "basic.consume-ok", |m| {
                matches!(m, Method::BasicConsumeOk { .. })
            })
            .await?
        {
            Method::BasicConsumeOk { consumer_tag } => Ok(consumer_tag.to_string()),
            other => Err(Error::Protocol(format!("unexpected reply {}", other.name()))),
        }
    }

    /// basic.cancel of the consumer `consumer_tag`.
    pub async fn cancel(&mut self, channel: u16, consumer_tag: &str) -> Result<(), Error> {
        let m = Method::BasicCancel {
            consumer_tag: ShortStr::from(consumer_tag),
            nowait: false,
        };
        self.call(channel, &m, "basic.cancel-ok", |m| {
            matches!(m, Method::BasicCancelOk { .. })
        })
        .await
        .map(drop)
    }

    /// channel.close, waiting for close-ok.
    pub async fn close_channel(&mut self, channel: u16) -> Result<(), Error> {
        let m = Method::ChannelClose {
            reply_code: 200,
            reply_text: ShortStr::from_static("bye"),
            class_id: 0,
            method_id: 0,
        };
        self.call(channel, &m, "channel.close-ok", |m| matches!(m, Method::ChannelCloseOk))
            .await
            .map(drop)
    }

    /// Closes the connection gracefully (connection.close, then waits for
    /// close-ok, discarding whatever else arrives meanwhile).
    pub async fn close(mut self) -> Result<(), Error> {
        self.send(0, &close_method()).await?;
        let wait = async {
            loop {
                if let Frame::Method {
                    method: Method::ConnectionCloseOk,
                    ..
                } = self.reader.next_frame().await?
                {
                    return Ok::<(), Error>(());
                }
            }
        };
        tokio::time::timeout(CLOSE_TIMEOUT, wait)
            .await
            .map_err(|_| Error::Protocol("timeout waiting for connection.close-ok".into()))?
    }
}

/// The connection.close a client sends when it is done.
pub fn close_method() -> Method {
    Method::ConnectionClose {
        reply_code: 200,
        reply_text: ShortStr::from_static("bye"),
        class_id: 0,
        method_id: 0,
    }
}

/// Arguments of [`Connection::queue_declare`].
#[derive(Clone)]
pub struct QueueDeclare<'a> {
    pub name: &'a str,
    pub passive: bool,
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    pub arguments: &'a FieldTable,
}

/// Arguments of [`Connection::exchange_declare`].
#[derive(Clone)]
pub struct ExchangeDeclare<'a> {
    pub name: &'a str,
    pub kind: &'a str,
    pub passive: bool,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: &'a FieldTable,
}

/// Converts a JSON object (from `--queue-args` and friends) into a field table:
/// strings become long strings, integers signed 64-bit, objects nested tables.
pub fn json_to_table(json: &str) -> Result<FieldTable, String> {
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("invalid JSON {json:?}: {e}"))?;
    match json_to_field(&value) {
        FieldValue::Table(t) => Ok(t),
        _ => Err(format!("expected a JSON object, got {json:?}")),
    }
}

/// Converts a JSON object (from `--properties`) into message properties,
/// with the AMQP names: `content_type`, `content_encoding`, `headers` (an
/// object), `delivery_mode`, `priority`, `correlation_id`, `reply_to`,
/// `expiration` (a string or a number of milliseconds), `message_id`,
/// `timestamp` (seconds since the epoch), `type`, `user_id` and `app_id`.
/// Nulls are skipped; anything else is an error, so that a misspelt name
/// does not go unnoticed.
pub fn json_to_properties(json: &str) -> Result<BasicProperties, String> {
    use serde_json::Value;
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("invalid JSON {json:?}: {e}"))?;
    let Value::Object(fields) = value else {
        return Err(format!("expected a JSON object, got {json:?}"));
    };
    let mut p = BasicProperties::default();
    for (key, v) in &fields {
        let text = || match v {
            Value::String(s) => Ok(ShortStr::from(s.as_str())),
            _ => Err(format!("property {key:?} must be a string")),
        };
        let octet = || {
            v.as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .ok_or_else(|| format!("property {key:?} must be a number from 0 to 255"))
        };
        match key.as_str() {
            _ if v.is_null() => {}
            "content_type" => p.content_type = Some(text()?),
            "content_encoding" => p.content_encoding = Some(text()?),
            "correlation_id" => p.correlation_id = Some(text()?),
            "reply_to" => p.reply_to = Some(text()?),
            "message_id" => p.message_id = Some(text()?),
            "type" => p.kind = Some(text()?),
            "user_id" => p.user_id = Some(text()?),
            "app_id" => p.app_id = Some(text()?),
            "delivery_mode" => p.delivery_mode = Some(octet()?),
            "priority" => p.priority = Some(octet()?),
            "expiration" => {
                p.expiration = Some(match v {
                    Value::Number(n) if n.is_u64() => ShortStr::from(n.to_string().as_str()),
                    _ => text().map_err(|_| format!("property {key:?} must be a string or a whole number"))?,
                })
            }
            "timestamp" => {
                p.timestamp = Some(
                    v.as_u64()
                        .ok_or_else(|| format!("property {key:?} must be a whole number of seconds"))?,
                )
            }
            "headers" => match json_to_field(v) {
                FieldValue::Table(t) => p.headers = Some(t),
                _ => return Err(format!("property {key:?} must be an object")),
            },
            other => return Err(format!("unknown message property {other:?}")),
        }
    }
    Ok(p)
}

fn json_to_field(v: &serde_json::Value) -> FieldValue {
    use serde_json::Value;
    match v {
        Value::Null => FieldValue::Void,
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => FieldValue::I64(i),
            (None, Some(f)) => FieldValue::F64(f),
            (None, None) => FieldValue::Void,
        },
        Value::String(s) => FieldValue::from(s.as_str()),
        Value::Array(a) => FieldValue::Array(a.iter().map(json_to_field).collect()),
        Value::Object(o) => FieldValue::Table(
            o.iter()
                .map(|(k, v)| (ShortStr::from(k.as_str()), json_to_field(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amqp::codec::{BasicProperties, write_basic_deliver, write_body, write_header};

    #[test]
    fn raw_view_matches_codec() {
        let mut buf = BytesMut::new();
        write_basic_deliver(
            &mut buf,
            1,
            "amq.ctag-xyz",
            0x0102_0304_0506_0708,
            false,
            "",
            "perf-test",
        )
        .unwrap();
        let props = BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        };
        write_header(&mut buf, 1, 20, &props).unwrap();
        write_body(&mut buf, 1, &[7u8; 20], 4096);

        let mut at = 0;
        let f = peek_frame(&buf[at..]).unwrap().unwrap();
        assert_eq!(f.kind, FRAME_METHOD);
        assert_eq!(deliver_tag(f.payload), Some(0x0102_0304_0506_0708));
        at += f.len;
        let f = peek_frame(&buf[at..]).unwrap().unwrap();
        assert_eq!(f.kind, FRAME_HEADER);
        assert_eq!(header_body_size(f.payload), Some(20));
        at += f.len;
        let f = peek_frame(&buf[at..]).unwrap().unwrap();
        assert_eq!(f.kind, FRAME_BODY);
        assert_eq!(f.payload, &[7u8; 20]);
        at += f.len;
        assert_eq!(at, buf.len());
        assert!(peek_frame(&buf[..5]).unwrap().is_none());
        assert!(peek_frame(&buf[..at - 1]).unwrap().is_some());

        // The codec agrees on every frame boundary and value.
        let mut copy = buf.clone();
        match parse_frame(&mut copy, 0).unwrap().unwrap() {
            Frame::Method {
                method: Method::BasicDeliver { delivery_tag, .. },
                ..
            } => assert_eq!(delivery_tag, 0x0102_0304_0506_0708),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_frame(&mut copy, 0).unwrap().unwrap(),
            Frame::Header { body_size: 20, .. }
        ));
        assert!(matches!(
            parse_frame(&mut copy, 0).unwrap().unwrap(),
            Frame::Body { .. }
        ));
        assert!(copy.is_empty());
    }

    #[test]
    fn non_deliver_is_not_mistaken() {
        let mut buf = BytesMut::new();
        write_method(
            &mut buf,
            1,
            &Method::BasicAck {
                delivery_tag: 5,
                multiple: true,
            },
        )
        .unwrap();
        let f = peek_frame(&buf).unwrap().unwrap();
        assert_eq!(deliver_tag(f.payload), None);
    }

    #[test]
    fn bad_frame_end() {
        let buf = [1u8, 0, 1, 0, 0, 0, 1, 9, 0x00];
        assert!(peek_frame(&buf).is_err());
    }

    #[test]
    fn json_properties() {
        let p = json_to_properties(
            r#"{"content_type":"text/plain","content_encoding":"gzip","headers":{"a":1,"b":"x"},
                "delivery_mode":2,"priority":5,"correlation_id":"c","reply_to":"r","expiration":60000,
                "message_id":"m","timestamp":1700000000,"type":"t","user_id":"guest","app_id":"perf",
                "cluster_id":null}"#,
        )
        .unwrap();
        assert_eq!(p.content_type.as_deref(), Some("text/plain"));
        assert_eq!(p.content_encoding.as_deref(), Some("gzip"));
        let headers = p.headers.as_ref().unwrap();
        assert_eq!(headers.get("a"), Some(&FieldValue::I64(1)));
        assert_eq!(headers.get("b").and_then(FieldValue::as_str), Some("x"));
        assert_eq!((p.delivery_mode, p.priority), (Some(2), Some(5)));
        assert_eq!(p.correlation_id.as_deref(), Some("c"));
        assert_eq!(p.reply_to.as_deref(), Some("r"));
        assert_eq!(p.expiration.as_deref(), Some("60000"));
        assert_eq!(p.message_id.as_deref(), Some("m"));
        assert_eq!(p.timestamp, Some(1_700_000_000));
        assert_eq!(p.kind.as_deref(), Some("t"));
        assert_eq!(p.user_id.as_deref(), Some("guest"));
        assert_eq!(p.app_id.as_deref(), Some("perf"));
        assert_eq!(
            json_to_properties(r#"{"expiration":"5"}"#)
                .unwrap()
                .expiration
                .as_deref(),
            Some("5")
        );
        for bad in [
            "[]",
            "{",
            r#"{"priority":256}"#,
            r#"{"delivery_mode":"2"}"#,
            r#"{"headers":[1]}"#,
            r#"{"content_typ":"x"}"#,
            r#"{"timestamp":-1}"#,
            r#"{"app_id":1}"#,
        ] {
            assert!(json_to_properties(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn get_ok_tag_in_place() {
        let mut buf = BytesMut::new();
        crate::amqp::codec::write_basic_get_ok(&mut buf, 1, 42, false, "", "q", 7).unwrap();
        let f = peek_frame(&buf).unwrap().unwrap();
        assert_eq!(get_ok_tag(f.payload), Some(42));
        assert_eq!(deliver_tag(f.payload), None);
        buf.clear();
        write_method(&mut buf, 1, &Method::BasicGetEmpty).unwrap();
        assert_eq!(get_ok_tag(peek_frame(&buf).unwrap().unwrap().payload), None);
    }

    #[test]
    fn json_tables() {
        let t = json_to_table(r#"{"x-max-length": 10, "x-queue-type": "quorum", "b": true, "n": {"f": 1.5}}"#).unwrap();
        assert_eq!(t.get("x-max-length"), Some(&FieldValue::I64(10)));
        assert_eq!(t.get("x-queue-type").and_then(FieldValue::as_str), Some("quorum"));
        assert_eq!(t.get("b"), Some(&FieldValue::Bool(true)));
        assert!(json_to_table("[1]").is_err());
        assert!(json_to_table("{").is_err());
    }
}
