//! TLS clients for the tests: rustls client configurations (trusting a CA,
//! optionally presenting a client certificate, optionally limited to one TLS
//! version), connecting with a chosen server name, and looking at what the
//! server presented.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore, SupportedProtocolVersion};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::pki::{Ca, Issued};

/// A TLS client stream.
pub type Tls = TlsStream<TcpStream>;

/// How a test client sets up TLS.
pub struct ClientTls {
    roots: Vec<CertificateDer<'static>>,
    identity: Option<(Vec<CertificateDer<'static>>, rustls::pki_types::PrivateKeyDer<'static>)>,
    versions: &'static [&'static SupportedProtocolVersion],
}

impl ClientTls {
    /// Trusts `ca`, presents no certificate, speaks TLS 1.2 and 1.3.
    pub fn trusting(ca: &Ca) -> ClientTls {
        ClientTls {
            roots: vec![ca.der()],
            identity: None,
            versions: rustls::ALL_VERSIONS,
        }
    }

    /// Also trusts `ca`.
    pub fn and_trusting(mut self, ca: &Ca) -> ClientTls {
        self.roots.push(ca.der());
        self
    }

    /// Presents `cert` as the client certificate.
    pub fn with_identity(mut self, cert: &Issued) -> ClientTls {
        self.identity = Some((cert.chain.clone(), cert.key.clone_key()));
        self
    }

    /// Speaks only TLS 1.2.
    pub fn tls12_only(mut self) -> ClientTls {
        static TLS12_ONLY: &[&SupportedProtocolVersion] = &[&rustls::version::TLS12];
        self.versions = TLS12_ONLY;
        self
    }

    /// The rustls configuration.
    pub fn config(&self) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        for r in &self.roots {
            roots.add(r.clone()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(self.versions)
            .unwrap()
            .with_root_certificates(roots);
        let config = match &self.identity {
            Some((chain, key)) => builder.with_client_auth_cert(chain.clone(), key.clone_key()).unwrap(),
            None => builder.with_no_client_auth(),
        };
        Arc::new(config)
    }

    /// Connects to `addr` asking for `server_name` (SNI; an IP address sends
    /// none) and completes the handshake.
    pub async fn connect(&self, addr: SocketAddr, server_name: &str) -> io::Result<Tls> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        self.handshake(tcp, server_name).await
    }

    /// Like [`ClientTls::connect`], but also returns the client's address
    /// (which the broker's log names), even when the handshake fails.
    pub async fn connect_from(&self, addr: SocketAddr, server_name: &str) -> (SocketAddr, io::Result<Tls>) {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let me = tcp.local_addr().unwrap();
        (me, self.handshake(tcp, server_name).await)
    }

    /// Completes the handshake over `tcp`, which the caller connected (and
    /// perhaps sent a PROXY protocol header on).
    pub async fn handshake(&self, tcp: TcpStream, server_name: &str) -> io::Result<Tls> {
        let name = ServerName::try_from(server_name.to_string()).map_err(io::Error::other)?;
        TlsConnector::from(self.config()).connect(name, tcp).await
    }
}

/// The leaf certificate the server presented on `stream`.
pub fn server_leaf(stream: &Tls) -> CertificateDer<'static> {
    stream.get_ref().1.peer_certificates().expect("server certificate")[0].clone()
}
