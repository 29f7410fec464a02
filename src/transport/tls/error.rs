//! Why TLS settings could not be turned into a working server configuration.

use std::path::PathBuf;

/// A TLS setting that cannot be used; the broker refuses to start with it, and
/// a reload that hits it keeps the certificates in use.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("cannot read {what} from {}: {source}", path.display())]
    Pem {
        /// What the file should hold (certificate chain, private key, CA).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: rustls_pki_types::pem::Error,
    },
    /// A CA directory could not be listed.
    #[error("cannot list CA directory {}: {source}", path.display())]
    CaDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file that should hold certificates holds none.
    #[error("no certificate found in {}", path.display())]
    NoCertificate {
        /// The file (or directory).
        path: PathBuf,
    },
    /// `tls_min_version` is not a version this server can speak.
    #[error("tls_min_version {0:?} is not supported: expected 1.2 or 1.3")]
    MinVersion(String),
    /// `tls_ciphers` names nothing this server supports.
    #[error("tls_ciphers {list:?} names no cipher suite this server supports; supported: {supported}")]
    NoKnownCipher {
        /// The list as configured.
        list: String,
        /// The names that would have been accepted.
        supported: String,
    },
    /// The key log file could not be opened for appending.
    #[error("cannot open TLS key log file {}: {source}", path.display())]
    KeyLog {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Client verification was asked for without a CA to verify against.
    #[error("tls_verify_peer needs tls_ca_cert")]
    NoCa,
    /// The CA certificates cannot verify client certificates.
    #[error("cannot verify client certificates with {}: {source}", path.display())]
    Verifier {
        /// The CA file.
        path: PathBuf,
        /// What rustls found wrong.
        source: rustls::server::VerifierBuilderError,
    },
    /// rustls refused the combination (e.g. the key does not match the
    /// certificate, or no suite is left for the allowed versions).
    #[error("{context}: {source}")]
    Rustls {
        /// What was being set up.
        context: String,
        /// What rustls found wrong.
        source: rustls::Error,
    },
    /// An `[sni:HOST]` section's settings are unusable.
    #[error("[sni:{host}] ({listener}): {source}")]
    Sni {
        /// The section's host name.
        host: String,
        /// The listener whose settings failed.
        listener: &'static str,
        /// What was wrong.
        source: Box<TlsError>,
    },
    /// A reload found a certificate while no TLS listener is bound (they are
    /// bound at start only).
    #[error("no TLS listener was bound at start (tls_cert was unset); restart to enable TLS")]
    NotBound,
    /// A reload found no certificate while TLS listeners are running.
    #[error("tls_cert is no longer set; the TLS listeners keep their certificates until a restart")]
    Disabled,
}
