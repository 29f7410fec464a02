//! Every binding of a vhost as one list, in the order RabbitMQ's API lists
//! them: each queue's implicit binding from the default exchange, then the
//! explicit ones. The HTTP API and the definitions export read it.

use serde_json::{Value, json};

use super::exchange::Destination;
use super::table_json::table_to_json;
use super::vhost::VHost;

/// One binding as the API lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingView {
    /// Vhost of both ends.
    pub vhost: String,
    /// Source exchange (`""` for the default exchange).
    pub source: String,
    /// Destination queue or exchange.
    pub destination: String,
    /// True when the destination is a queue.
    pub to_queue: bool,
    /// Binding key.
    pub routing_key: String,
    /// Binding arguments as JSON.
    pub arguments: Value,
    /// True when both ends survive a restart (an exclusive queue does not).
    pub durable: bool,
    /// True for the implicit binding of a queue to the default exchange.
    pub implicit: bool,
}

impl BindingView {
    /// `"queue"` or `"exchange"`.
    pub fn destination_type(&self) -> &'static str {
        if self.to_queue { "queue" } else { "exchange" }
    }
}

/// Every binding of a vhost: the implicit default-exchange binding of each queue
/// first, then the explicit ones, each group sorted.
pub fn of_vhost(v: &VHost) -> Vec<BindingView> {
    let mut queues = v.queues();
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out: Vec<BindingView> = queues
        .iter()
        .map(|q| BindingView {
            vhost: v.name.clone(),
            source: String::new(),
            destination: q.name.clone(),
            to_queue: true,
            routing_key: q.name.clone(),
            arguments: json!({}),
            durable: q.durable && q.exclusive_owner.is_none(),
            implicit: true,
        })
        .collect();
    let mut explicit = Vec::new();
    for e in v.exchanges() {
        for b in e.bindings() {
            let (to_queue, dest_durable) = match &b.destination {
                Destination::Queue(q) => (true, q.durable && q.exclusive_owner.is_none()),
                Destination::Exchange(d) => (false, d.durable),
            };
            explicit.push(BindingView {
                vhost: v.name.clone(),
                source: e.name.clone(),
                destination: b.destination.name().to_string(),
                to_queue,
                routing_key: b.routing_key.clone(),
                arguments: table_to_json(&b.arguments),
                durable: e.durable && dest_durable,
                implicit: false,
            });
        }
    }
    sort_explicit(&mut explicit);
    out.extend(explicit);
    out
}

/// Puts explicit bindings in the order the API lists them: by source,
/// destination, kind of destination, routing key and arguments.
pub fn sort_explicit(bindings: &mut [BindingView]) {
    bindings.sort_by_cached_key(|b| {
        let args = b.arguments.to_string();
        (
            b.source.clone(),
            b.destination.clone(),
            b.to_queue,
            b.routing_key.clone(),
            args,
        )
    });
}
