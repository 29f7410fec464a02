//! The opening of an AMQP 1.0 connection after its protocol header: the
//! SASL layer (PLAIN, and EXTERNAL for clients with a verified certificate;
//! RabbitMQ 4 requires SASL, and so do we), the AMQP protocol header, and
//! the exchange of open performatives that picks the vhost and frame sizes.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::codec::frame::{AMQP_HEADER, MIN_MAX_FRAME_SIZE, SASL_HEADER, parse_frame, write_frame};
use super::codec::performative::{AmqpError, Open, Performative, Sasl};
use super::codec::{Frame, FrameKind, Value};
use super::error::condition;
use crate::amqp::AmqpContext;
use crate::auth::Identity;
use crate::core::connections::{ConnectionInfo, Registration};
use crate::core::login_throttle::Admission;
use crate::core::vhost::VHost;
use crate::transport::peer::Peer;

/// How long a client has for each step of the opening.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest frame we accept and offer.
pub const MAX_FRAME_SIZE: u32 = 1 << 20;
/// Sessions a connection may have (channels 0..=CHANNEL_MAX).
pub const CHANNEL_MAX: u16 = 255;

/// Why a connection ended during the opening.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The socket failed.
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    /// A step took longer than [`STEP_TIMEOUT`].
    #[error("timed out")]
    Timeout,
    /// The client broke off or sent something unusable.
    #[error("{0}")]
    Protocol(String),
    /// The login was refused (the SASL outcome said so).
    #[error("authentication failed: {0}")]
    Refused(String),
    /// Refused after open: the client gets a close with this error.
    #[error("{}", .0.description.as_deref().unwrap_or(&.0.condition))]
    Closed(AmqpError),
}

/// What the opening settled.
pub struct Opened {
    /// Who logged in.
    pub identity: Identity,
    /// The vhost the client opened.
    pub vhost: Arc<VHost>,
    /// The largest frame the client accepts.
    pub max_frame_size: u32,
    /// The highest channel we accept.
    pub channel_max: u16,
    /// The client's idle time-out: we send something at least twice as often.
    pub remote_idle: Option<Duration>,
    /// The connection's listing in the registry.
    pub registration: Registration,
    /// Its id.
    pub id: u64,
}

async fn read_exact<R: AsyncRead + Unpin>(rd: &mut R, n: &mut [u8]) -> Result<(), HandshakeError> {
    tokio::time::timeout(STEP_TIMEOUT, rd.read_exact(n))
        .await
        .map_err(|_| HandshakeError::Timeout)??;
    Ok(())
}

async fn read_frame<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut BytesMut) -> Result<Frame, HandshakeError> {
    loop {
        match parse_frame(buf, MAX_FRAME_SIZE) {
            Ok(Some(f)) if f.body.is_empty() => continue,
            Ok(Some(f)) => return Ok(f),
            Ok(None) => {}
            Err(e) => return Err(HandshakeError::Protocol(e.to_string())),
        }
        buf.reserve(4096);
        let n = tokio::time::timeout(STEP_TIMEOUT, rd.read_buf(buf))
            .await
            .map_err(|_| HandshakeError::Timeout)??;
        if n == 0 {
            return Err(HandshakeError::Protocol("client closed the socket".into()));
        }
    }
}

async fn send<W: AsyncWrite + Unpin>(wr: &mut W, bytes: &[u8]) -> Result<(), HandshakeError> {
    wr.write_all(bytes).await?;
    wr.flush().await?;
    Ok(())
}

async fn send_sasl<W: AsyncWrite + Unpin>(wr: &mut W, s: &Sasl) -> Result<(), HandshakeError> {
    let mut out = BytesMut::new();
    write_frame(&mut out, FrameKind::Sasl, 0, |b| s.encode(b));
    send(wr, &out).await
}

/// Sends a performative on channel 0 (open, close) during the opening.
pub async fn send_performative<W: AsyncWrite + Unpin>(wr: &mut W, p: &Performative) -> Result<(), HandshakeError> {
    let mut out = BytesMut::new();
    write_frame(&mut out, FrameKind::Amqp, 0, |b| p.encode(b));
    send(wr, &out).await
}

/// The SASL exchange: offers the mechanisms, checks the client's choice.
async fn sasl<R, W>(
    ctx: &AmqpContext,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    peer: &Peer,
) -> Result<(Identity, String), HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    send(wr, &SASL_HEADER).await?;
    let settings = arc_swap::Guard::into_inner(ctx.settings());
    let mut offered = vec!["PLAIN".to_owned()];
    if peer.external_identity().is_some() {
        offered.push("EXTERNAL".to_owned());
    }
    if settings.anonymous_login.is_some() {
        offered.push("ANONYMOUS".to_owned());
    }
    send_sasl(wr, &Sasl::Mechanisms(offered)).await?;
    let frame = read_frame(rd, buf).await?;
    let Ok(Sasl::Init {
        mechanism,
        initial_response,
        ..
    }) = Sasl::decode(&frame.body)
    else {
        return Err(HandshakeError::Protocol("expected sasl-init".into()));
    };
    let source = peer.addr.ip();
    let refuse = async |wr: &mut W, why: String| {
        tracing::warn!("authentication failed: {why}");
        let _ = send_sasl(wr, &Sasl::Outcome(1)).await;
        HandshakeError::Refused(why)
    };
    if let Err(text) = ctx.broker.connections.admit_new() {
        let _ = send_sasl(wr, &Sasl::Outcome(3)).await;
        return Err(HandshakeError::Refused(text));
    }
    if let Admission::Refused(left) = ctx.broker.logins.admit(source) {
        return Err(refuse(wr, Admission::refusal_text(left)).await);
    }
    let found = match mechanism.as_str() {
        "EXTERNAL" => crate::auth::certificate_user(&ctx.broker.users, peer.external_identity()),
        "PLAIN" => match initial_response.as_deref().and_then(crate::auth::plain_credentials) {
            Some((user, pass)) => ctx
                .broker
                .auth
                .login(&ctx.broker.users, &user, &pass)
                .await
                .map_err(|e| e.to_string()),
            None => Err("malformed PLAIN response".to_owned()),
        },
        // RabbitMQ's `anonymous_login_user`: a login with the configured
        // credentials, so the user's password still guards it.
        "ANONYMOUS" => match &settings.anonymous_login {
            Some((user, pass)) => ctx
                .broker
                .auth
                .login(&ctx.broker.users, user, pass)
                .await
                .map_err(|e| e.to_string()),
            None => Err("unsupported mechanism ANONYMOUS".to_owned()),
        },
        other => Err(format!("unsupported mechanism {other}")),
    };
    let identity = match found {
        Ok(identity) => {
            ctx.broker.logins.succeeded(source);
            identity
        }
        Err(why) => {
            tokio::time::sleep(ctx.broker.logins.failed(source)).await;
            return Err(refuse(wr, why).await);
        }
    };
    if identity.name() == settings.default_user
        && settings.default_user_only_loopback
        && !peer.addr.ip().to_canonical().is_loopback()
    {
        let why = format!("user '{}' may only connect from loopback", identity.name());
        return Err(refuse(wr, why).await);
    }
    send_sasl(wr, &Sasl::Outcome(0)).await?;
    Ok((identity, mechanism))
}

/// The RabbitMQ version whose AMQP 1.0 features we serve. RabbitMQ 4's
/// clients refuse a server that does not call itself RabbitMQ 4, and enable
/// features by this version.
pub const RABBITMQ_VERSION: &str = "4.1.0";

/// What our open tells clients about the server: as RabbitMQ 4 does, so
/// that its clients accept us, with our own name in `platform` and
/// `information`.
fn server_properties() -> Value {
    let pair = |k: &str, v: &str| (Value::Symbol(k.to_owned()), Value::String(v.to_owned()));
    Value::Map(vec![
        pair("product", "RabbitMQ"),
        pair("version", RABBITMQ_VERSION),
        pair("platform", concat!("LavinMQ ", env!("CARGO_PKG_VERSION"), " (Rust)")),
        pair("information", "LavinMQ, serving RabbitMQ 4's AMQP 1.0 clients"),
    ])
}

/// The client's open properties (product, version, platform, ...) as the
/// management API lists them for every connection.
fn client_properties(open: &Open) -> crate::wire::FieldTable {
    let mut t = crate::wire::FieldTable::default();
    if let Some(Value::Map(pairs)) = &open.properties {
        for (k, v) in pairs {
            if let (Some(k), Some(v)) = (k.as_str().filter(|k| k.len() <= 255), super::message::to_field(v)) {
                t.insert(k, v);
            }
        }
    }
    t
}

/// The vhost an open asks for: RabbitMQ reads `vhost:NAME` from the
/// hostname; anything else means the default vhost.
fn vhost_name(open: &Open) -> &str {
    open.hostname
        .as_deref()
        .and_then(|h| h.strip_prefix("vhost:"))
        .filter(|v| !v.is_empty())
        .unwrap_or("/")
}

/// Runs the opening after the client sent `header` (one of the two AMQP 1.0
/// headers); on success our open has been sent.
pub async fn handshake<R, W>(
    ctx: &Arc<AmqpContext>,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    peer: &Peer,
    header: [u8; 8],
) -> Result<Opened, HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    if header != SASL_HEADER {
        // As RabbitMQ: without SASL there is no login; the answer names the
        // header the client must use.
        send(wr, &SASL_HEADER).await?;
        return Err(HandshakeError::Protocol("AMQP 1.0 without SASL".into()));
    }
    let (identity, mechanism) = sasl(ctx, rd, wr, buf, peer).await?;
    let mut amqp = [0u8; 8];
    // The client may have sent its AMQP header right behind its sasl-init.
    let buffered = buf.len().min(8);
    amqp[..buffered].copy_from_slice(&buf.split_to(buffered));
    read_exact(rd, &mut amqp[buffered..]).await?;
    if amqp != AMQP_HEADER {
        send(wr, &AMQP_HEADER).await?;
        return Err(HandshakeError::Protocol(
            "expected the AMQP 1.0 header after SASL".into(),
        ));
    }
    send(wr, &AMQP_HEADER).await?;
    let frame = read_frame(rd, buf).await?;
    let open = match Performative::decode(&frame.body) {
        Ok(Performative::Open(open)) => open,
        _ => return Err(HandshakeError::Protocol("expected open".into())),
    };
    let heartbeat = ctx.settings().heartbeat;
    let ours = Open {
        container_id: "lavinmq".to_owned(),
        hostname: None,
        max_frame_size: MAX_FRAME_SIZE,
        channel_max: CHANNEL_MAX,
        // Twice the heartbeat: the client sends one at least every heartbeat.
        idle_time_out: (heartbeat > 0).then(|| u32::from(heartbeat) * 2000),
        properties: Some(server_properties()),
    };
    // Our open goes first even when we refuse: a close must follow an open.
    send_performative(wr, &Performative::Open(ours)).await?;
    let closed = |c: &str, text: String| HandshakeError::Closed(AmqpError::new(c, text));
    if open.max_frame_size < MIN_MAX_FRAME_SIZE {
        return Err(closed(
            condition::INVALID_FIELD,
            format!("max-frame-size {} is below 512", open.max_frame_size),
        ));
    }
    let username = identity.name().to_owned();
    let name = vhost_name(&open);
    let Some(vhost) = ctx.broker.vhost(name) else {
        return Err(closed(condition::NOT_FOUND, format!("vhost '{name}' not found")));
    };
    if !identity.may_use_vhost(name) {
        return Err(closed(
            condition::UNAUTHORIZED,
            format!("access to vhost '{name}' refused for user '{username}'"),
        ));
    }
    let id = ctx.next_id();
    let max_frame_size = open.max_frame_size.min(MAX_FRAME_SIZE);
    let channel_max = open.channel_max.min(CHANNEL_MAX);
    let listed = ConnectionInfo {
        id,
        protocol: "AMQP 1.0",
        user: username.clone(),
        vhost: vhost.name.clone(),
        peer: peer.addr,
        local: peer.local,
        auth_mechanism: mechanism,
        client_properties: crate::wire::PackedTable::from(&client_properties(&open)),
        frame_max: max_frame_size,
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
        .map_err(|reached| closed(condition::RESOURCE_LIMIT, reached.describe(name, &username)))?;
    Ok(Opened {
        identity,
        vhost,
        max_frame_size,
        channel_max,
        remote_idle: open
            .idle_time_out
            .filter(|ms| *ms > 0)
            .map(|ms| Duration::from_millis(u64::from(ms))),
        registration,
        id,
    })
}
