//! The opening of an AMQP connection: protocol header, connection.start /
//! start-ok (PLAIN, AMQPLAIN, and EXTERNAL for clients with a verified TLS
//! certificate), tune / tune-ok negotiation and connection.open, each with a
//! timeout and the reply code RabbitMQ uses when a client gets it wrong.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::codec::{FieldTable, FieldValue, Frame, Method, ShortStr, parse_frame, write_method};
use super::connection::{CLOSE_TIMEOUT, ConnInfo, HANDSHAKE_TIMEOUT, PROTOCOL_HEADER, PROTOCOL_HEADER_ALT};
use super::context::AmqpContext;
use super::error::{AmqpError, code};
use crate::auth::Identity;
use crate::core::connections::{ConnectionInfo, Registration};
use crate::core::login_throttle::Admission;
use crate::transport::peer::Peer;

/// Why a connection ended before or during the handshake.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The socket failed.
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    /// The client took longer than the handshake timeout for a step.
    #[error("timed out")]
    Timeout,
    /// The client broke off or sent something unusable; the socket just closes.
    #[error("{0}")]
    Protocol(String),
    /// The server closes with connection.close and this reply.
    #[error("closed by server: {}", .0.text)]
    Closed(AmqpError),
}

/// The error for a client that sent something else than the method expected.
fn expected(what: &str) -> HandshakeError {
    HandshakeError::Closed(AmqpError::connection(code::COMMAND_INVALID, format!("expected {what}")))
}

/// Writes one method on channel 0.
async fn send_method<W: AsyncWrite + Unpin>(wr: &mut W, method: &Method) -> std::io::Result<()> {
    let mut out = BytesMut::new();
    let _ = write_method(&mut out, 0, method);
    wr.write_all(&out).await?;
    // Buffered transports (WebSocket, TLS) send only on flush.
    wr.flush().await
}

/// Reads until one whole frame is buffered, with a timeout.
async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    frame_max: u32,
) -> Result<Frame, HandshakeError> {
    loop {
        match parse_frame(buf, frame_max) {
            Ok(Some(f)) => return Ok(f),
            Ok(None) => {}
            Err(e) => {
                return Err(HandshakeError::Closed(AmqpError::connection(e.reply_code(), e)));
            }
        }
        buf.reserve(4096);
        let n = tokio::time::timeout(HANDSHAKE_TIMEOUT, rd.read_buf(buf))
            .await
            .map_err(|_| HandshakeError::Timeout)??;
        if n == 0 {
            return Err(HandshakeError::Protocol("client closed the socket".into()));
        }
    }
}

/// Reads the next method on channel 0 during the handshake.
async fn expect_method<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    frame_max: u32,
    what: &str,
) -> Result<Method, HandshakeError> {
    loop {
        match read_frame(rd, buf, frame_max).await? {
            Frame::Method {
                channel: 0,
                method: Method::ConnectionClose { .. },
            } => {
                return Err(HandshakeError::Protocol("client closed the connection".into()));
            }
            Frame::Method { channel: 0, method } => return Ok(method),
            Frame::Heartbeat { channel: 0 } => continue,
            _ => return Err(expected(what)),
        }
    }
}

/// Sends connection.close with the error's reply code and text.
async fn send_close<W: AsyncWrite + Unpin>(wr: &mut W, e: &AmqpError) {
    let mut out = BytesMut::new();
    let _ = write_method(
        &mut out,
        0,
        &Method::ConnectionClose {
            reply_code: e.code,
            reply_text: ShortStr::from(e.text.as_str()),
            class_id: e.class_id,
            method_id: e.method_id,
        },
    );
    let _ = wr.write_all(&out).await;
    let _ = wr.flush().await;
}

/// What connection.start tells clients about the server, capabilities included.
fn server_properties() -> FieldTable {
    let mut caps = FieldTable::default();
    for cap in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "consumer_priorities",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ] {
        caps.insert(cap, FieldValue::Bool(true));
    }
    let s = |v: &str| FieldValue::LongStr(Bytes::copy_from_slice(v.as_bytes()));
    let mut props = FieldTable::default();
    props.insert("product", s("LavinMQ"));
    props.insert("version", s(env!("CARGO_PKG_VERSION")));
    props.insert("platform", s("Rust"));
    props.insert("information", s("https://lavinmq.com"));
    props.insert("capabilities", FieldValue::Table(caps));
    props
}

/// Extracts user and password from a start-ok response.
fn credentials(mechanism: &str, response: &Bytes) -> Option<(String, String)> {
    match mechanism {
        "PLAIN" => crate::auth::plain_credentials(response),
        "AMQPLAIN" => {
            let table = FieldTable::decode_body(response.clone()).ok()?;
            let user = table.get("LOGIN")?.as_str()?.to_string();
            let pass = table.get("PASSWORD")?.as_str()?.to_string();
            Some((user, pass))
        }
        _ => None,
    }
}

/// The SASL mechanisms offered to `peer`: EXTERNAL only to clients that
/// presented a verified certificate with a common name, and to the broker's
/// own in-process connections.
fn mechanisms(peer: &Peer) -> Bytes {
    if peer.external_identity().is_some() {
        Bytes::from_static(b"PLAIN AMQPLAIN EXTERNAL")
    } else {
        Bytes::from_static(b"PLAIN AMQPLAIN")
    }
}

/// Who the client is, by the mechanism it chose: PLAIN and AMQPLAIN check a
/// password or an access token with the login backends; EXTERNAL takes the
/// user named by the verified client certificate's CN (the response is
/// ignored), which must exist. The error is the reason for the log.
async fn authenticate(ctx: &AmqpContext, mechanism: &str, response: &Bytes, peer: &Peer) -> Result<Identity, String> {
    if mechanism == "EXTERNAL" {
        return crate::auth::certificate_user(&ctx.broker.users, peer.external_identity());
    }
    let Some((username, password)) = credentials(mechanism, response) else {
        return Err(format!("unsupported mechanism or malformed response ({mechanism})"));
    };
    let broker = &ctx.broker;
    broker
        .auth
        .login(&broker.users, &username, &password)
        .await
        .map_err(|e| e.to_string())
}

/// Runs the whole opening of a connection after its protocol `header` (read
/// by the caller, which serves AMQP 1.0 itself); on a protocol error the
/// client gets connection.close with the reply code before the socket goes.
pub async fn handshake<R, W>(
    ctx: &Arc<AmqpContext>,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    peer: &Peer,
    header: [u8; 8],
) -> Result<(ConnInfo, Registration), HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if header != PROTOCOL_HEADER && header != PROTOCOL_HEADER_ALT {
        wr.write_all(&PROTOCOL_HEADER).await?;
        let _ = wr.flush().await;
        return Err(HandshakeError::Protocol(format!(
            "unsupported protocol header {:?}",
            String::from_utf8_lossy(&header)
        )));
    }
    let settings = ctx.settings.load_full();
    let start = Method::ConnectionStart {
        version_major: 0,
        version_minor: 9,
        server_properties: server_properties(),
        mechanisms: mechanisms(peer),
        locales: Bytes::from_static(b"en_US"),
    };
    send_method(wr, &start).await?;
    let result = negotiate(ctx, rd, wr, buf, peer).await;
    if let Err(HandshakeError::Closed(e)) = &result {
        send_close(wr, e).await;
        // Give the client a moment to read the close before the socket goes.
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, read_frame(rd, buf, settings.frame_max)).await;
    }
    result
}

/// start-ok, tune, tune-ok, open and open-ok, after connection.start was sent.
async fn negotiate<R, W>(
    ctx: &Arc<AmqpContext>,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    peer: &Peer,
) -> Result<(ConnInfo, Registration), HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let settings = ctx.settings.load_full();
    let Method::ConnectionStartOk {
        client_properties,
        mechanism,
        response,
        ..
    } = expect_method(rd, buf, settings.frame_max, "connection.start-ok").await?
    else {
        return Err(expected("connection.start-ok"));
    };
    let caps = client_properties.get("capabilities").and_then(|c| c.as_table());
    let cap = |name: &str| {
        caps.and_then(|c| c.get(name))
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    };
    let (failure_close, cancel_notify) = (cap("authentication_failure_close"), cap("consumer_cancel_notify"));
    let blocked_notify = cap("connection.blocked");
    let refused_with = |why: String, text: String| {
        tracing::warn!("authentication failed: {why}");
        if failure_close {
            HandshakeError::Closed(AmqpError::connection(code::ACCESS_REFUSED, text))
        } else {
            HandshakeError::Protocol(why)
        }
    };
    let refused = |why: String| {
        let text = format!(
            "Login was refused using authentication mechanism {mechanism}. For details see the broker logfile."
        );
        refused_with(why, text)
    };
    // Before the login: its password hashing is the cost the limit saves.
    if let Err(text) = ctx.broker.connections.admit_new() {
        tracing::warn!("{text}");
        return Err(HandshakeError::Closed(
            AmqpError::connection(code::NOT_ALLOWED, text).on(10, 11),
        ));
    }
    let source = peer.addr.ip();
    if let Admission::Refused(left) = ctx.broker.logins.admit(source) {
        let text = Admission::refusal_text(left);
        return Err(refused_with(text.clone(), text));
    }
    let identity = match authenticate(ctx, &mechanism, &response, peer).await {
        Ok(found) => {
            ctx.broker.logins.succeeded(source);
            found
        }
        Err(why) => {
            tokio::time::sleep(ctx.broker.logins.failed(source)).await;
            return Err(refused(why));
        }
    };
    let username = identity.name().to_owned();
    if username == settings.default_user
        && settings.default_user_only_loopback
        && !peer.addr.ip().to_canonical().is_loopback()
    {
        return Err(refused(format!("user '{username}' may only connect from loopback")));
    }
    let tune = Method::ConnectionTune {
        channel_max: settings.channel_max,
        frame_max: settings.frame_max,
        heartbeat: settings.heartbeat,
    };
    send_method(wr, &tune).await?;
    let Method::ConnectionTuneOk {
        channel_max,
        frame_max,
        heartbeat,
    } = expect_method(rd, buf, settings.frame_max, "connection.tune-ok").await?
    else {
        return Err(expected("connection.tune-ok"));
    };
    let not_allowed = |t: String| HandshakeError::Closed(AmqpError::connection(code::NOT_ALLOWED, t).on(10, 31));
    if frame_max != 0 && frame_max < 4096 {
        return Err(not_allowed(format!("frame_max={frame_max} < 4096 min size")));
    }
    if frame_max > settings.frame_max {
        return Err(not_allowed(format!(
            "frame_max={frame_max} > {} max size",
            settings.frame_max
        )));
    }
    if channel_max > settings.channel_max {
        return Err(not_allowed(format!(
            "channel_max={channel_max} > {} max size",
            settings.channel_max
        )));
    }
    let frame_max = if frame_max == 0 { settings.frame_max } else { frame_max };
    let channel_max = if channel_max == 0 {
        settings.channel_max
    } else {
        channel_max
    };
    let Method::ConnectionOpen { virtual_host } = expect_method(rd, buf, frame_max, "connection.open").await? else {
        return Err(expected("connection.open"));
    };
    let vhost_name = if virtual_host.is_empty() { "/" } else { &virtual_host };
    let Some(vhost) = ctx.broker.vhost(vhost_name) else {
        return Err(HandshakeError::Closed(
            AmqpError::connection(code::NOT_ALLOWED, format!("vhost {vhost_name} not found")).on(10, 40),
        ));
    };
    if !identity.may_use_vhost(vhost_name) {
        return Err(HandshakeError::Closed(
            AmqpError::connection(
                code::NOT_ALLOWED,
                format!("access to vhost '{vhost_name}' refused for user '{username}'"),
            )
            .on(10, 40),
        ));
    }
    let id = ctx.next_id();
    let listed = ConnectionInfo {
        id,
        protocol: "AMQP 0-9-1",
        user: username.clone(),
        vhost: vhost.name.clone(),
        peer: peer.addr,
        local: peer.local,
        auth_mechanism: mechanism.to_string(),
        client_properties: crate::wire::PackedTable::from(&client_properties),
        frame_max,
        channel_max,
        heartbeat,
        tls: peer.tls_info(),
    };
    let limits = identity.connection_limits(&vhost);
    let now = crate::core::message::Message::now_ms();
    let registration = ctx
        .broker
        .connections
        .register(listed, now, limits)
        .map_err(|reached| {
            HandshakeError::Closed(
                AmqpError::connection(code::NOT_ALLOWED, reached.describe(vhost_name, &username)).on(10, 40),
            )
        })?;
    send_method(wr, &Method::ConnectionOpenOk).await?;
    let info = ConnInfo {
        ctx: ctx.clone(),
        id,
        user: username,
        identity: std::cell::RefCell::new(identity),
        secret_updates: std::cell::Cell::new(0),
        vhost,
        frame_max,
        cancel_notify,
        blocked_notify,
        heartbeat,
        channel_max,
        wakes: Default::default(),
        paced_by: Default::default(),
        perms: std::cell::RefCell::new((0, crate::core::permissions::Compiled::none())),
        now_ms: std::cell::Cell::new(now),
        publish_settings: std::cell::Cell::new(super::connection::PublishSettings::of(&ctx.settings())),
    };
    Ok((info, registration))
}
