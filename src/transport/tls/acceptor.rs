//! The server side of TLS handshakes for one listener: picks the configuration
//! by SNI, bounds the handshake in time, reports what it established, and lets
//! the configurations be replaced while connections run (a reload).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpStream;
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;

use super::client_cert;
use super::error::TlsError;
use super::sni::{self, Configs};
use crate::config::{Config, TlsProtocol};
use crate::transport::peer::{Peer, TlsPeer};

/// How long a client has to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a handshake did not complete.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The client did not finish within [`HANDSHAKE_TIMEOUT`].
    #[error("not completed within {}s", HANDSHAKE_TIMEOUT.as_secs())]
    Timeout,
    /// The first bytes were not a TLS record: most likely a plaintext client
    /// on the TLS port.
    #[error("the client does not speak TLS (plaintext sent to a TLS port?)")]
    NotTls,
    /// The client sent something that is not TLS, broke off, or was refused
    /// (no acceptable version or suite, a missing or untrusted certificate).
    #[error("{0}")]
    Failed(#[from] std::io::Error),
}

/// Accepts TLS connections for one listener with the configurations in force
/// at the moment each handshake starts.
pub struct TlsAcceptor {
    protocol: TlsProtocol,
    configs: ArcSwap<Configs>,
}

impl TlsAcceptor {
    /// The acceptor for `protocol`'s listener, or `None` when `config` has no
    /// `tls_cert` (the listener is then not bound).
    pub fn from_config(config: &Config, protocol: TlsProtocol) -> Result<Option<Arc<TlsAcceptor>>, TlsError> {
        Ok(sni::configs(config, protocol)?.map(|configs| {
            Arc::new(TlsAcceptor {
                protocol,
                configs: ArcSwap::from_pointee(configs),
            })
        }))
    }

    /// The listener this acceptor serves.
    pub fn protocol(&self) -> TlsProtocol {
        self.protocol
    }

    /// Builds `protocol`'s configurations from `config` without installing
    /// them, so that a reload can check every listener before changing any.
    pub fn prepare(&self, config: &Config) -> Result<Configs, TlsError> {
        sni::configs(config, self.protocol)?.ok_or(TlsError::Disabled)
    }

    /// Installs new configurations: handshakes that start from now on use
    /// them; established connections are not affected.
    pub fn install(&self, configs: Configs) {
        self.configs.store(Arc::new(configs));
    }

    /// Runs the server handshake on a freshly accepted connection. A failure
    /// is logged as one line naming the client and yields `None`; the socket
    /// is closed when it is dropped.
    pub async fn handshake(&self, tcp: TcpStream, peer: Peer) -> Option<(TlsStream<TcpStream>, Peer)> {
        match self.try_handshake(tcp, peer.clone()).await {
            Ok(done) => Some(done),
            Err(e) => {
                let listener = self.protocol.listener();
                tracing::warn!("{listener} TLS handshake with {} failed: {e}", peer.addr);
                None
            }
        }
    }

    async fn try_handshake(&self, tcp: TcpStream, peer: Peer) -> Result<(TlsStream<TcpStream>, Peer), HandshakeError> {
        let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
        let hello = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp);
        let start = tokio::time::timeout_at(deadline, hello)
            .await
            .map_err(|_| HandshakeError::Timeout)?
            .map_err(classify)?;
        let server_name = start.client_hello().server_name().map(str::to_owned);
        let config = self.configs.load().get(server_name.as_deref()).clone();
        let stream = tokio::time::timeout_at(deadline, start.into_stream(config))
            .await
            .map_err(|_| HandshakeError::Timeout)??;
        let session = stream.get_ref().1;
        let client_cn = session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(client_cert::common_name);
        let protocol = match session.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "tlsv1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "tlsv1.2",
            _ => "unknown",
        };
        let cipher = session
            .negotiated_cipher_suite()
            .and_then(|s| s.suite().as_str())
            .unwrap_or("unknown");
        let tls = TlsPeer {
            server_name,
            client_cn,
            protocol,
            cipher,
        };
        Ok((stream, Peer { tls: Some(tls), ..peer }))
    }
}

/// Names the commonest failure, a client that is not speaking TLS at all.
fn classify(e: std::io::Error) -> HandshakeError {
    let not_tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|inner| {
            matches!(
                inner,
                rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
            )
        });
    if not_tls {
        HandshakeError::NotTls
    } else {
        HandshakeError::Failed(e)
    }
}
