//! TLS settings as the configuration states them: `[main]`'s keys and the
//! `[sni:HOST]` sections, whose keys may be overridden per protocol with an
//! `amqp_`, `mqtt_` or `http_` prefix. Turning them into rustls objects is the
//! job of `transport::tls`; this module only holds and merges them.

use std::path::PathBuf;

use super::{ConfigError, MainConfig};

/// The TLS listeners whose settings an `[sni:HOST]` section may set apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlsProtocol {
    /// AMQPS (`[amqp] tls_port`).
    Amqp,
    /// MQTTS (`[mqtt] tls_port`).
    Mqtt,
    /// HTTPS and secure WebSockets (`[mgmt] tls_port`).
    Http,
}

impl TlsProtocol {
    /// Every protocol, in the order listeners are bound.
    pub const ALL: [TlsProtocol; 3] = [TlsProtocol::Amqp, TlsProtocol::Mqtt, TlsProtocol::Http];

    /// The key prefix of this protocol's overrides in `[sni:HOST]` sections.
    pub fn prefix(self) -> &'static str {
        match self {
            TlsProtocol::Amqp => "amqp_",
            TlsProtocol::Mqtt => "mqtt_",
            TlsProtocol::Http => "http_",
        }
    }

    /// The listener's name in logs and errors.
    pub fn listener(self) -> &'static str {
        match self {
            TlsProtocol::Amqp => "AMQPS",
            TlsProtocol::Mqtt => "MQTTS",
            TlsProtocol::Http => "HTTPS",
        }
    }
}

/// One set of TLS keys; `None` means "not set here", so that a more specific
/// set can be laid over a general one with [`TlsKeys::or`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsKeys {
    /// Certificate chain, PEM (`tls_cert`).
    pub cert: Option<PathBuf>,
    /// Private key, PEM; the certificate file when unset (`tls_key`).
    pub key: Option<PathBuf>,
    /// Minimum protocol version, `1.2` or `1.3` (`tls_min_version`).
    pub min_version: Option<String>,
    /// Cipher suites, OpenSSL or IANA names separated by `:` (`tls_ciphers`).
    pub ciphers: Option<String>,
    /// Require a client certificate that chains to `ca_cert` (`tls_verify_peer`).
    pub verify_peer: Option<bool>,
    /// CA certificates client certificates must chain to, PEM (`tls_ca_cert`).
    pub ca_cert: Option<PathBuf>,
    /// Write TLS secrets here in NSS key log format, for debugging with a
    /// packet analyser (`tls_keylog_file`; `SSLKEYLOGFILE` when unset).
    pub keylog_file: Option<PathBuf>,
}

impl TlsKeys {
    /// These keys, with every one that is unset taken from `base`.
    pub fn or(&self, base: &TlsKeys) -> TlsKeys {
        TlsKeys {
            cert: self.cert.clone().or_else(|| base.cert.clone()),
            key: self.key.clone().or_else(|| base.key.clone()),
            min_version: self.min_version.clone().or_else(|| base.min_version.clone()),
            ciphers: self.ciphers.clone().or_else(|| base.ciphers.clone()),
            verify_peer: self.verify_peer.or(base.verify_peer),
            ca_cert: self.ca_cert.clone().or_else(|| base.ca_cert.clone()),
            keylog_file: self.keylog_file.clone().or_else(|| base.keylog_file.clone()),
        }
    }
}

/// An `[sni:HOST]` section: the TLS settings used when a client asks for HOST
/// (or, for `*.example.com`, any name one label below `example.com`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SniConfig {
    /// The unprefixed keys, used by every protocol.
    pub tls: TlsKeys,
    /// `amqp_tls_*` overrides.
    pub amqp: TlsKeys,
    /// `mqtt_tls_*` overrides.
    pub mqtt: TlsKeys,
    /// `http_tls_*` overrides.
    pub http: TlsKeys,
}

impl SniConfig {
    /// The settings `protocol`'s listener uses for this host.
    pub fn for_protocol(&self, protocol: TlsProtocol) -> TlsKeys {
        self.overrides(protocol).or(&self.tls)
    }

    fn overrides(&self, protocol: TlsProtocol) -> &TlsKeys {
        match protocol {
            TlsProtocol::Amqp => &self.amqp,
            TlsProtocol::Mqtt => &self.mqtt,
            TlsProtocol::Http => &self.http,
        }
    }

    /// The key set a (possibly prefixed) section key belongs to, and the key
    /// without its prefix.
    pub(crate) fn keys_for<'k>(&mut self, key: &'k str) -> (&mut TlsKeys, &'k str) {
        for protocol in TlsProtocol::ALL {
            if let Some(rest) = key.strip_prefix(protocol.prefix()) {
                let keys = match protocol {
                    TlsProtocol::Amqp => &mut self.amqp,
                    TlsProtocol::Mqtt => &mut self.mqtt,
                    TlsProtocol::Http => &mut self.http,
                };
                return (keys, rest);
            }
        }
        (&mut self.tls, key)
    }

    /// Checks that every protocol has a certificate for `host`, as a section
    /// without one could never be used.
    pub(crate) fn validate(&self, host: &str) -> Result<(), ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid { field: "sni", reason };
        if let Some(rest) = host.strip_prefix("*.") {
            if rest.is_empty() || rest.contains('*') {
                return Err(invalid(format!(
                    "[sni:{host}]: a wildcard must look like *.example.com"
                )));
            }
        } else if host.contains('*') {
            return Err(invalid(format!(
                "[sni:{host}]: '*' is only allowed as the first label, as in *.example.com"
            )));
        }
        for protocol in TlsProtocol::ALL {
            let keys = self.for_protocol(protocol);
            let prefix = protocol.prefix();
            if keys.cert.is_none() {
                return Err(invalid(format!("[sni:{host}] has no tls_cert (nor {prefix}tls_cert)")));
            }
            if keys.verify_peer == Some(true) && keys.ca_cert.is_none() {
                return Err(invalid(format!(
                    "[sni:{host}] verifies {} clients but has no tls_ca_cert (nor {prefix}tls_ca_cert)",
                    protocol.listener()
                )));
            }
        }
        Ok(())
    }
}

impl MainConfig {
    /// `[main]`'s TLS keys, or `None` when no certificate is configured and
    /// so no TLS listener is bound.
    pub fn tls_keys(&self) -> Option<TlsKeys> {
        let cert = self.tls_cert.clone()?;
        Some(TlsKeys {
            cert: Some(cert),
            key: self.tls_key.clone(),
            min_version: self.tls_min_version.clone(),
            ciphers: self.tls_ciphers.clone(),
            verify_peer: Some(self.tls_verify_peer),
            ca_cert: self.tls_ca_cert.clone(),
            keylog_file: self.tls_keylog_file.clone(),
        })
    }
}
