//! Choosing the server configuration by the name a client asks for (SNI):
//! an exact `[sni:HOST]` section first, then a wildcard one (`*.example.com`
//! covers names exactly one label below `example.com`), else `[main]`'s.
//!
//! The whole configuration is chosen, not only the certificate, because a
//! section may also set the versions, the cipher suites and client
//! verification, which rustls fixes per configuration.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::ServerConfig;

use super::error::TlsError;
use super::server_config;
use crate::config::{Config, TlsProtocol};

/// Values by server name, with a default for clients that send no name or an
/// unknown one.
#[derive(Debug)]
pub struct SniTable<T> {
    exact: HashMap<String, T>,
    /// Keyed by the part after `*.`.
    wildcard: HashMap<String, T>,
    default: T,
}

impl<T> SniTable<T> {
    /// A table that answers `default` for every name.
    pub fn new(default: T) -> SniTable<T> {
        SniTable {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
            default,
        }
    }

    /// Adds `host`, a name or a wildcard like `*.example.com`.
    pub fn insert(&mut self, host: &str, value: T) {
        let host = host.to_ascii_lowercase();
        match host.strip_prefix("*.") {
            Some(domain) => self.wildcard.insert(domain.to_owned(), value),
            None => self.exact.insert(host, value),
        };
    }

    /// The value for a client that asked for `name`.
    pub fn get(&self, name: Option<&str>) -> &T {
        let Some(name) = name else { return &self.default };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(v) = self.exact.get(&name) {
            return v;
        }
        name.split_once('.')
            .and_then(|(_, parent)| self.wildcard.get(parent))
            .unwrap_or(&self.default)
    }

    /// How many names have their own value.
    pub fn len(&self) -> usize {
        self.exact.len() + self.wildcard.len()
    }

    /// Whether every name gets the default.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The server configurations of one listener, by server name.
pub type Configs = SniTable<Arc<ServerConfig>>;

/// Builds `protocol`'s configurations from `config`: `[main]`'s as the
/// default and one per `[sni:HOST]` section. `None` when no `tls_cert` is set.
pub fn configs(config: &Config, protocol: TlsProtocol) -> Result<Option<Configs>, TlsError> {
    let Some(main) = config.main.tls_keys() else {
        return Ok(None);
    };
    let mut table = SniTable::new(Arc::new(server_config::build(&main)?));
    for (host, section) in &config.sni {
        let built = server_config::build(&section.for_protocol(protocol)).map_err(|e| TlsError::Sni {
            host: host.clone(),
            listener: protocol.listener(),
            source: Box::new(e),
        })?;
        table.insert(host, Arc::new(built));
    }
    Ok(Some(table))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_then_wildcard_then_default() {
        let mut t = SniTable::new("default");
        t.insert("Broker.Example.com", "exact");
        t.insert("*.example.com", "wildcard");
        assert_eq!(*t.get(Some("broker.example.com")), "exact");
        assert_eq!(*t.get(Some("BROKER.example.com.")), "exact");
        assert_eq!(*t.get(Some("other.example.com")), "wildcard");
        assert_eq!(*t.get(Some("a.b.example.com")), "default");
        assert_eq!(*t.get(Some("example.com")), "default");
        assert_eq!(*t.get(Some("localhost")), "default");
        assert_eq!(*t.get(None), "default");
        assert_eq!(t.len(), 2);
    }
}
