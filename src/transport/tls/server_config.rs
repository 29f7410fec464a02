//! One rustls server configuration from one set of TLS keys: certificate and
//! key, protocol versions, cipher suites, client certificate verification and
//! key logging.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::version::{TLS12, TLS13};
use rustls::{ServerConfig, SupportedProtocolVersion};

use super::error::TlsError;
use super::keylog::KeyLogFile;
use super::{ciphers, pem};
use crate::config::TlsKeys;

/// TLS 1.2 and 1.3 (the default minimum, as in LavinMQ).
static FROM_TLS12: &[&SupportedProtocolVersion] = &[&TLS13, &TLS12];
/// TLS 1.3 only.
static FROM_TLS13: &[&SupportedProtocolVersion] = &[&TLS13];

/// Builds the server configuration `keys` describe; `keys.cert` must be set.
pub fn build(keys: &TlsKeys) -> Result<ServerConfig, TlsError> {
    let Some(cert_path) = keys.cert.as_deref() else {
        return Err(TlsError::Disabled);
    };
    let chain = pem::certificates(cert_path, "certificate chain")?;
    // LavinMQ reads the key from the certificate file when tls_key is unset.
    let key = pem::private_key(keys.key.as_deref().unwrap_or(cert_path))?;
    let versions = versions(keys.min_version.as_deref())?;
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(list) = keys.ciphers.as_deref() {
        let (suites, skipped) = ciphers::select(list)?;
        if !skipped.is_empty() {
            tracing::warn!("tls_ciphers: skipping unsupported names {}", skipped.join(":"));
        }
        provider.cipher_suites = suites;
    }
    let provider = Arc::new(provider);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|source| TlsError::Rustls {
            context: "no cipher suite is left for the allowed TLS versions".to_owned(),
            source,
        })?;
    let builder = if keys.verify_peer == Some(true) {
        builder.with_client_cert_verifier(client_verifier(keys, provider)?)
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|source| TlsError::Rustls {
            context: format!("certificate {}", cert_path.display()),
            source,
        })?;
    if let Some(path) = KeyLogFile::path_for(keys.keylog_file.as_deref()) {
        tracing::warn!("TLS key log enabled, writing secrets to {}", path.display());
        config.key_log = Arc::new(KeyLogFile::open(&path)?);
    }
    Ok(config)
}

/// The versions allowed from `tls_min_version` on. 1.0 and 1.1 are not
/// implemented by rustls, so they mean 1.2 (with a warning).
fn versions(min: Option<&str>) -> Result<&'static [&'static SupportedProtocolVersion], TlsError> {
    let min = min.map(str::trim).unwrap_or("");
    let number = min
        .strip_prefix("TLSv")
        .or_else(|| min.strip_prefix("tlsv"))
        .unwrap_or(min);
    match number {
        "" | "1.2" => Ok(FROM_TLS12),
        "1.3" => Ok(FROM_TLS13),
        "1" | "1.0" | "1.1" => {
            tracing::warn!("tls_min_version {min}: TLS 1.0 and 1.1 are not supported, using 1.2");
            Ok(FROM_TLS12)
        }
        _ => Err(TlsError::MinVersion(min.to_owned())),
    }
}

/// Requires client certificates chaining to `keys.ca_cert`.
fn client_verifier(
    keys: &TlsKeys,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let ca = keys.ca_cert.as_deref().ok_or(TlsError::NoCa)?;
    let roots = pem::ca_roots(ca)?;
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|source| TlsError::Verifier {
            path: ca.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_versions() {
        assert_eq!(versions(None).unwrap().len(), 2);
        assert_eq!(versions(Some("1.2")).unwrap().len(), 2);
        assert_eq!(versions(Some("TLSv1.3")).unwrap().len(), 1);
        assert_eq!(versions(Some("1.3")).unwrap().len(), 1);
        assert_eq!(versions(Some("1.0")).unwrap().len(), 2);
        let err = versions(Some("1.4")).unwrap_err().to_string();
        assert!(err.contains("1.4") && err.contains("1.2 or 1.3"), "{err}");
    }
}
