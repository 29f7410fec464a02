//! TLS on the listeners (AMQPS, MQTTS, HTTPS), with rustls.
//!
//! `[main]` gives the default certificate and settings; `[sni:HOST]` sections
//! give others by the name the client asks for. With `tls_verify_peer` a
//! client must present a certificate that chains to `tls_ca_cert`, and its
//! subject CN becomes the client's identity. [`TlsAcceptor`] holds each
//! listener's configurations behind an atomic pointer, so a reload (SIGHUP)
//! changes the certificate for new connections while open ones stay up.

mod acceptor;
mod ciphers;
mod client_cert;
mod error;
mod keylog;
mod pem;
mod reload;
mod server_config;
mod sni;

pub use acceptor::{HANDSHAKE_TIMEOUT, HandshakeError, TlsAcceptor};
pub use error::TlsError;
pub use reload::TlsAcceptors;
pub use sni::{Configs, SniTable};

/// The TLS stream type every TLS listener hands to its protocol adapter.
pub type ServerStream = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
