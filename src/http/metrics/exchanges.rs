//! The exchange family of `/metrics/detailed` (`exchange_metrics`):
//! LavinMQ's deduplication count and this broker's message counters, per
//! exchange of the scraped vhosts.

use std::sync::Arc;

use prometheus::proto::MetricType;

use super::spec::Spec;
use super::text::{TextWriter, write_rows};
use crate::core::exchange::Exchange;
use crate::core::vhost::VHost;

use MetricType::COUNTER as Counter;

/// An exchange with its vhost.
struct ExchangeRow {
    vhost: Arc<VHost>,
    exchange: Arc<Exchange>,
}

/// `exchange_metrics`.
const EXCHANGE: [Spec<ExchangeRow>; 4] = [
    Spec::new(
        "detailed_exchange_deduplication",
        Counter,
        "Number of deduplicated messages for this exchange",
        |r| Some(r.exchange.counters.dedup.get() as f64),
    ),
    Spec::new(
        "detailed_exchange_messages_published_in_total",
        Counter,
        "Total number of messages published to an exchange",
        |r| Some(r.exchange.counters.publish_in.get() as f64),
    ),
    Spec::new(
        "detailed_exchange_messages_published_out_total",
        Counter,
        "Total number of messages an exchange routed to at least one queue",
        |r| Some(r.exchange.counters.publish_out() as f64),
    ),
    Spec::new(
        "detailed_exchange_messages_unroutable_total",
        Counter,
        "Total number of messages an exchange could not route",
        |r| Some(r.exchange.counters.unroutable.get() as f64),
    ),
];

/// Writes `exchange_metrics` over the exchanges of `vhosts` (by name within
/// each); returns the bytes of the list it wrote from.
pub fn write_exchanges(w: &mut TextWriter<'_>, vhosts: &[Arc<VHost>]) -> usize {
    let mut rows = Vec::new();
    for v in vhosts {
        let mut list = v.exchanges();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        rows.extend(list.into_iter().map(|exchange| ExchangeRow {
            vhost: v.clone(),
            exchange,
        }));
    }
    write_rows(w, &EXCHANGE, &rows, |r| {
        [("exchange", r.exchange.name.as_str()), ("vhost", r.vhost.name.as_str())]
    });
    size_of_val(rows.as_slice())
}
