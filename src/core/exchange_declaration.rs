//! An exchange declaration as RabbitMQ's management API and definitions files
//! give it: `{"type", "durable", "auto_delete", "internal", "arguments"}`.

use serde::Deserialize;
use serde_json::Value;

use super::Error;
use super::table_json::json_to_table;
use super::vhost::{ExchangeOptions, VHost};

/// The body of `PUT /api/exchanges/{vhost}/{name}`, and an exchange item of
/// a definitions file (with its name and vhost beside it).
#[derive(Deserialize)]
pub struct ExchangeDeclaration {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default = "yes")]
    durable: bool,
    #[serde(default)]
    auto_delete: bool,
    #[serde(default)]
    internal: bool,
    #[serde(default)]
    arguments: Value,
}

/// Serde's default for fields that are true unless the document says otherwise.
pub(super) fn yes() -> bool {
    true
}

impl ExchangeDeclaration {
    /// Keeps LavinMQ's placement for a consistent-hash exchange from LavinMQ's
    /// exported definitions (see [`super::consistent_hash::pin_lavinmq_algorithm`]).
    pub fn pin_lavinmq_algorithm(&mut self) {
        super::consistent_hash::pin_lavinmq_algorithm(&self.kind, &mut self.arguments);
    }

    /// Checks the type and arguments without declaring anything.
    pub fn check(&self) -> Result<(), Error> {
        super::vhost::check_exchange_declaration(&self.kind, &json_to_table(&self.arguments))
    }

    /// Declares exchange `name` in `vhost` as the declaration describes.
    pub fn declare_in(&self, vhost: &VHost, name: &str) -> Result<(), Error> {
        let opts = ExchangeOptions {
            durable: self.durable,
            auto_delete: self.auto_delete,
            internal: self.internal,
            passive: false,
        };
        vhost.declare_exchange(name, &self.kind, &opts, json_to_table(&self.arguments))
    }
}
