//! The opening of an MQTT connection: the CONNECT packet, who the client is
//! (user name `vhost:user`, or the default vhost; without a user name, the
//! verified TLS client certificate's CN or else the default user), its client
//! identifier, and the CONNACK reason code when it may not connect.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::codec::{Connect, DecodeError, Packet, ProtocolVersion, ReasonCode, parse_packet};
use super::context::{ClientIdValidation, MqttContext};
use super::session::client_id_fits;
use crate::auth::Identity;
use crate::core::vhost::VHost;
use crate::transport::peer::Peer;

/// How long a client has to send CONNECT after connecting.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the connection ends before CONNACK.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The socket closed or failed.
    #[error("connection lost before CONNECT: {0}")]
    Io(#[from] std::io::Error),
    /// No CONNECT within [`CONNECT_TIMEOUT`].
    #[error("no CONNECT within {}s", CONNECT_TIMEOUT.as_secs())]
    Timeout,
    /// The bytes were not a valid packet.
    #[error("malformed packet: {}", .0.with_rule())]
    Malformed(#[from] DecodeError),
    /// The first packet was not CONNECT [MQTT-3.1.0-1].
    #[error("expected CONNECT as the first packet, got {0} [MQTT-3.1.0-1]")]
    NotConnect(&'static str),
}

/// Reads the CONNECT packet that must open the connection.
pub async fn read_connect<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    max_packet_size: usize,
) -> Result<Box<Connect>, ConnectError> {
    let read = async {
        loop {
            // CONNECT names its own revision; any will do to read it.
            if let Some(packet) = parse_packet(buf, max_packet_size, ProtocolVersion::V3_1_1)? {
                return match packet {
                    Packet::Connect(c) => Ok(c),
                    other => Err(ConnectError::NotConnect(other.name())),
                };
            }
            if rd.read_buf(buf).await? == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
            }
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, read)
        .await
        .map_err(|_| ConnectError::Timeout)?
}

/// A client that may connect.
pub struct Admitted {
    /// The authenticated user's name.
    pub user: String,
    /// Who the client logged in as.
    pub identity: Identity,
    /// The vhost it connects to.
    pub vhost: Arc<VHost>,
    /// The client identifier (assigned when the client sent none).
    pub client_id: String,
    /// Whether the broker made the client identifier up (MQTT 5 then tells
    /// the client in CONNACK).
    pub assigned_client_id: bool,
    /// How the user was established, as the management API lists it:
    /// `MQTT` (user name and password, or anonymous) or `EXTERNAL` (the
    /// client certificate).
    pub mechanism: &'static str,
}

/// A refusal: the CONNACK reason code and the reason for the log.
pub type Refusal = (ReasonCode, String);

/// Checks the client's identity (a password or an access token, through the
/// login backends) and client identifier.
pub async fn admit(ctx: &MqttContext, connect: &Connect, peer: &Peer) -> Result<Admitted, Refusal> {
    let settings = ctx.settings.load_full();
    if let Some(method) = connect
        .properties
        .as_ref()
        .and_then(|p| p.authentication_method.as_ref())
    {
        return Err((
            ReasonCode::BAD_AUTHENTICATION_METHOD,
            format!("enhanced authentication method '{}' is not supported", method.as_str()),
        ));
    }
    let by_certificate = connect.username.is_none() && peer.client_cn().is_some();
    let (vhost_name, user) = match (&connect.username, peer.client_cn()) {
        (Some(name), _) => {
            let name = name.as_str();
            match name.split_once(':') {
                Some((vhost, user)) => (vhost.to_string(), user.to_string()),
                None => (settings.default_vhost.clone(), name.to_string()),
            }
        }
        // A verified client certificate names the user, as SASL EXTERNAL does.
        (None, Some(cn)) => (settings.default_vhost.clone(), cn.to_string()),
        (None, None) => (settings.default_vhost.clone(), settings.default_user.clone()),
    };
    let bad_credentials = || {
        (
            ReasonCode::BAD_USER_NAME_OR_PASSWORD,
            format!("authentication failed for user '{user}'"),
        )
    };
    let identity = match (&connect.username, &connect.password) {
        // Anonymous clients are the certificate's user or the default user,
        // as with RabbitMQ's `mqtt.ssl_cert_login` and `mqtt.allow_anonymous`.
        (None, _) => Identity::Local(ctx.broker.users.shared(&user).ok_or_else(bad_credentials)?),
        (Some(_), Some(password)) => {
            let password = std::str::from_utf8(password).map_err(|_| bad_credentials())?;
            let broker = &ctx.broker;
            broker
                .auth
                .login(&broker.users, &user, password)
                .await
                .map_err(|e| (ReasonCode::BAD_USER_NAME_OR_PASSWORD, e.to_string()))?
        }
        (Some(_), None) => return Err(bad_credentials()),
    };
    // A token names its own user.
    let user = identity.name().to_owned();
    if user == settings.default_user
        && settings.default_user_only_loopback
        && !peer.addr.ip().to_canonical().is_loopback()
    {
        return Err((
            ReasonCode::NOT_AUTHORIZED,
            format!("user '{user}' may only connect from loopback"),
        ));
    }
    let Some(vhost) = ctx.broker.vhost(&vhost_name) else {
        return Err((ReasonCode::NOT_AUTHORIZED, format!("vhost '{vhost_name}' not found")));
    };
    if !identity.may_use_vhost(&vhost_name) {
        return Err((
            ReasonCode::NOT_AUTHORIZED,
            format!("access to vhost '{vhost_name}' refused for user '{user}'"),
        ));
    }
    let client_id = client_id(connect, &user, settings.client_id_validation)?;
    Ok(Admitted {
        user,
        identity,
        vhost,
        assigned_client_id: connect.client_id.is_empty(),
        client_id,
        mechanism: if by_certificate { "EXTERNAL" } else { "MQTT" },
    })
}

/// The client identifier the session goes by: the client's own, or, when it
/// sent none (with a clean session before MQTT 5), one the broker makes up
/// [MQTT-3.1.3-6] (the user name with `client_id_validation = username`).
fn client_id(connect: &Connect, user: &str, validation: ClientIdValidation) -> Result<String, Refusal> {
    let given = connect.client_id.as_str();
    let id = if !given.is_empty() {
        given.to_string()
    } else if !connect.clean_session && connect.protocol != ProtocolVersion::V5 {
        return Err((
            ReasonCode::CLIENT_IDENTIFIER_NOT_VALID,
            "an empty client id needs a clean session [MQTT-3.1.3-8]".into(),
        ));
    } else if validation == ClientIdValidation::Username {
        user.to_string()
    } else {
        generated_client_id()
    };
    if !client_id_fits(&id) {
        return Err((
            ReasonCode::CLIENT_IDENTIFIER_NOT_VALID,
            format!("client id of {} bytes is too long", id.len()),
        ));
    }
    Ok(id)
}

fn generated_client_id() -> String {
    let mut bytes = [0u8; 12];
    rand::fill(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("lavinmq-{hex}")
}
