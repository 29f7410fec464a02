//! The acceptors of all TLS listeners, built and reloaded together: a reload
//! builds every listener's new configurations first and installs them only if
//! all succeeded, so a bad certificate changes nothing.

use std::sync::Arc;

use super::acceptor::TlsAcceptor;
use super::error::TlsError;
use crate::config::{Config, TlsProtocol};

/// One acceptor per TLS listener.
pub struct TlsAcceptors {
    /// AMQPS.
    pub amqp: Arc<TlsAcceptor>,
    /// MQTTS.
    pub mqtt: Arc<TlsAcceptor>,
    /// HTTPS.
    pub http: Arc<TlsAcceptor>,
}

impl TlsAcceptors {
    /// The acceptors `config` asks for, or `None` without `tls_cert`.
    pub fn from_config(config: &Config) -> Result<Option<TlsAcceptors>, TlsError> {
        let acceptor = |protocol| TlsAcceptor::from_config(config, protocol);
        let (Some(amqp), Some(mqtt), Some(http)) = (
            acceptor(TlsProtocol::Amqp)?,
            acceptor(TlsProtocol::Mqtt)?,
            acceptor(TlsProtocol::Http)?,
        ) else {
            return Ok(None);
        };
        Ok(Some(TlsAcceptors { amqp, mqtt, http }))
    }

    /// Re-reads the certificates and settings in `config` for every listener.
    /// New handshakes use them; established connections keep theirs. On error
    /// nothing changes.
    pub fn reload(&self, config: &Config) -> Result<(), TlsError> {
        let all = [&self.amqp, &self.mqtt, &self.http];
        let mut prepared = Vec::with_capacity(all.len());
        for acceptor in all {
            prepared.push(acceptor.prepare(config)?);
        }
        for (acceptor, configs) in all.into_iter().zip(prepared) {
            acceptor.install(configs);
        }
        Ok(())
    }
}
