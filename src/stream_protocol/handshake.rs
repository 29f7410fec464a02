//! The opening of a stream connection, driven by the client: peer
//! properties, SASL (PLAIN, and EXTERNAL for clients with a verified
//! certificate), the tune (frame size and heartbeat) and the open that picks
//! the vhost.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::StreamContext;
use super::codec::{Command, code, key, reply, split_frame};
use crate::auth::Identity;
use crate::core::connections::{ConnectionInfo, Registration};
use crate::core::login_throttle::Admission;
use crate::core::vhost::VHost;
use crate::transport::peer::Peer;

/// How long a client has for each step of the opening.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest frame accepted before the tune.
const OPENING_FRAME_MAX: u32 = 64 * 1024;

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
    /// Refused: the client was answered with a code.
    #[error("{0}")]
    Refused(String),
}

/// What the opening settled.
pub struct Opened {
    /// Who logged in.
    pub identity: Identity,
    /// The vhost the client opened.
    pub vhost: Arc<VHost>,
    /// The largest frame either side sends (0: no limit).
    pub frame_max: u32,
    /// The heartbeat both sides keep, in seconds (0: none).
    pub heartbeat: u32,
    /// The connection's listing in the registry.
    pub registration: Registration,
    /// The client came over TLS.
    pub tls: bool,
    /// Its id.
    pub id: u64,
}

async fn read_command<R: AsyncRead + Unpin>(rd: &mut R, buf: &mut BytesMut) -> Result<Command, HandshakeError> {
    loop {
        match split_frame(buf, OPENING_FRAME_MAX) {
            Ok(Some(frame)) => return Command::decode(&frame).map_err(|e| HandshakeError::Protocol(e.to_string())),
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

async fn send<W: AsyncWrite + Unpin>(wr: &mut W, f: impl FnOnce(&mut BytesMut)) -> Result<(), HandshakeError> {
    let mut out = BytesMut::new();
    f(&mut out);
    wr.write_all(&out).await?;
    wr.flush().await?;
    Ok(())
}

/// What the peer properties answer tells clients about the server: the
/// RabbitMQ version whose stream features we serve (clients enable
/// features by it), with our own name in `platform`.
fn server_properties() -> [(&'static str, &'static str); 5] {
    [
        ("product", "RabbitMQ"),
        ("version", crate::amqp1::handshake::RABBITMQ_VERSION),
        ("platform", concat!("LavinMQ ", env!("CARGO_PKG_VERSION"), " (Rust)")),
        ("information", "LavinMQ, serving RabbitMQ's stream clients"),
        ("copyright", "LavinMQ contributors"),
    ]
}

/// Checks a SASL response; the identity it logs in, or why not.
async fn authenticate(ctx: &StreamContext, peer: &Peer, mechanism: &str, data: &Bytes) -> Result<Identity, String> {
    let broker = &ctx.amqp.broker;
    let identity = match mechanism {
        "EXTERNAL" => crate::auth::certificate_user(&broker.users, peer.external_identity())?,
        "PLAIN" => {
            let (user, pass) = crate::auth::plain_credentials(data).ok_or("malformed PLAIN response")?;
            broker
                .auth
                .login(&broker.users, &user, &pass)
                .await
                .map_err(|e| e.to_string())?
        }
        other => return Err(format!("unsupported mechanism {other}")),
    };
    let settings = ctx.amqp.settings();
    if identity.name() == settings.default_user
        && settings.default_user_only_loopback
        && !peer.addr.ip().to_canonical().is_loopback()
    {
        return Err(format!("user '{}' may only connect from loopback", identity.name()));
    }
    Ok(identity)
}

/// Runs the opening; on success the open has been answered.
pub async fn handshake<R, W>(
    ctx: &Arc<StreamContext>,
    rd: &mut R,
    wr: &mut W,
    buf: &mut BytesMut,
    peer: &Peer,
) -> Result<Opened, HandshakeError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let broker = &ctx.amqp.broker;
    let mut client_properties = crate::wire::FieldTable::default();
    let mut identity: Option<(Identity, String)> = None;
    let mut tuned: Option<(u32, u32)> = None;
    let ours = (ctx.settings.frame_max, ctx.settings.heartbeat);
    loop {
        match read_command(rd, buf).await? {
            Command::PeerProperties {
                correlation_id,
                properties,
            } => {
                for (k, v) in properties.iter().filter(|(k, _)| k.len() <= 255) {
                    client_properties.insert(k.as_str(), crate::wire::FieldValue::from(v.as_str()));
                }
                let props = server_properties();
                send(wr, |b| {
                    reply::with_map(b, key::PEER_PROPERTIES, correlation_id, code::OK, props.into_iter())
                })
                .await?;
            }
            Command::SaslHandshake { correlation_id } => {
                let mut offered = vec!["PLAIN"];
                if peer.external_identity().is_some() {
                    offered.push("EXTERNAL");
                }
                send(wr, |b| {
                    reply::with_strings(b, key::SASL_HANDSHAKE, correlation_id, code::OK, offered.into_iter())
                })
                .await?;
            }
            Command::SaslAuthenticate {
                correlation_id,
                mechanism,
                data,
            } => {
                let source = peer.addr.ip();
                if let Err(text) = broker.connections.admit_new() {
                    send(wr, |b| {
                        reply::generic(b, key::SASL_AUTHENTICATE, correlation_id, code::ACCESS_REFUSED)
                    })
                    .await?;
                    return Err(HandshakeError::Refused(text));
                }
                if let Admission::Refused(left) = broker.logins.admit(source) {
                    let text = Admission::refusal_text(left);
                    tracing::warn!("authentication failed: {text}");
                    send(wr, |b| {
                        reply::generic(b, key::SASL_AUTHENTICATE, correlation_id, code::AUTHENTICATION_FAILURE)
                    })
                    .await?;
                    return Err(HandshakeError::Refused(text));
                }
                match authenticate(ctx, peer, &mechanism, &data).await {
                    Ok(id) => {
                        broker.logins.succeeded(source);
                        identity = Some((id, mechanism));
                        send(wr, |b| {
                            reply::generic(b, key::SASL_AUTHENTICATE, correlation_id, code::OK);
                            reply::tune(b, ours.0, ours.1);
                        })
                        .await?;
                    }
                    Err(why) => {
                        tracing::warn!("authentication failed: {why}");
                        tokio::time::sleep(broker.logins.failed(source)).await;
                        let c = match mechanism.as_str() {
                            _ if why.contains("only connect from loopback") => code::AUTHENTICATION_FAILURE_LOOPBACK,
                            "PLAIN" | "EXTERNAL" => code::AUTHENTICATION_FAILURE,
                            _ => code::SASL_MECHANISM_NOT_SUPPORTED,
                        };
                        send(wr, |b| reply::generic(b, key::SASL_AUTHENTICATE, correlation_id, c)).await?;
                        return Err(HandshakeError::Refused(why));
                    }
                }
            }
            Command::Tune { frame_max, heartbeat } => {
                // The smaller non-zero frame size; the heartbeat the client
                // asks for, as RabbitMQ takes it (0: none).
                let frame_max = match (ours.0, frame_max) {
                    (0, x) | (x, 0) => x,
                    (a, b) => a.min(b),
                };
                tuned = Some((frame_max, heartbeat));
            }
            Command::Open { correlation_id, vhost } => {
                let Some((identity, mechanism)) = identity else {
                    return Err(HandshakeError::Protocol("open before authentication".into()));
                };
                let (frame_max, heartbeat) = tuned.unwrap_or(ours);
                let refuse = async |wr: &mut W, c: u16, text: String| {
                    let _ = send(wr, |b| reply::generic(b, key::OPEN, correlation_id, c)).await;
                    HandshakeError::Refused(text)
                };
                let username = identity.name().to_owned();
                let name = if vhost.is_empty() { "/" } else { vhost.as_str() };
                let Some(vh) = broker.vhost(name) else {
                    let text = format!("vhost '{name}' not found");
                    return Err(refuse(wr, code::VIRTUAL_HOST_ACCESS_FAILURE, text).await);
                };
                if !identity.may_use_vhost(name) {
                    let text = format!("access to vhost '{name}' refused for user '{username}'");
                    return Err(refuse(wr, code::VIRTUAL_HOST_ACCESS_FAILURE, text).await);
                }
                let id = ctx.amqp.next_id();
                let listed = ConnectionInfo {
                    id,
                    protocol: "RabbitMQ Stream",
                    user: username.clone(),
                    vhost: vh.name.clone(),
                    peer: peer.addr,
                    local: peer.local,
                    auth_mechanism: mechanism,
                    client_properties: crate::wire::PackedTable::from(&client_properties),
                    frame_max,
                    channel_max: 0,
                    heartbeat: heartbeat.min(u32::from(u16::MAX)) as u16,
                    tls: peer.tls_info(),
                };
                let limits = identity.connection_limits(&vh);
                let now = crate::core::message::Message::now_ms();
                let registration = match broker.connections.register(listed, now, limits) {
                    Ok(r) => r,
                    Err(reached) => {
                        let text = reached.describe(name, &username);
                        return Err(refuse(wr, code::PRECONDITION_FAILED, text).await);
                    }
                };
                let port = match peer.tls {
                    Some(_) => ctx.settings.advertised_tls_port.unwrap_or(ctx.settings.advertised_port),
                    None => ctx.settings.advertised_port,
                }
                .to_string();
                let host = ctx.settings.advertised_host.as_str();
                send(wr, |b| {
                    reply::with_map(
                        b,
                        key::OPEN,
                        correlation_id,
                        code::OK,
                        [("advertised_host", host), ("advertised_port", port.as_str())].into_iter(),
                    )
                })
                .await?;
                return Ok(Opened {
                    identity,
                    vhost: vh,
                    frame_max,
                    heartbeat,
                    registration,
                    id,
                    tls: peer.tls.is_some(),
                });
            }
            Command::Heartbeat => {}
            Command::Close { correlation_id, .. } => {
                let _ = send(wr, |b| reply::generic(b, key::CLOSE, correlation_id, code::OK)).await;
                return Err(HandshakeError::Protocol("client closed during the opening".into()));
            }
            other => {
                return Err(HandshakeError::Protocol(format!(
                    "unexpected command during the opening: {other:?}"
                )));
            }
        }
    }
}
