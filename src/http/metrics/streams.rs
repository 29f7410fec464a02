//! The stream family of `/metrics/detailed`: RabbitMQ's
//! `stream_consumer_metrics`, per stream of the scraped vhosts that has
//! stream-protocol consumers, the highest offset lag among them.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus::proto::MetricType;
use rustc_hash::FxHashSet;

use super::spec::Spec;
use super::text::{TextWriter, write_rows};
use crate::core::broker::Broker;
use crate::core::vhost::VHost;

/// A stream with consumers, and their highest lag.
struct StreamRow {
    vhost: String,
    stream: String,
    max_lag: u64,
}

/// `stream_consumer_metrics` (RabbitMQ's name and help text).
const STREAM_CONSUMER: [Spec<StreamRow>; 1] = [Spec::new(
    "detailed_stream_consumer_max_offset_lag",
    MetricType::GAUGE,
    "Highest consumer offset lag",
    |r| Some(r.max_lag as f64),
)];

/// Writes `stream_consumer_metrics` over the streams of `vhosts`, by vhost
/// and stream name.
pub fn write_stream_consumers(w: &mut TextWriter<'_>, broker: &Broker, vhosts: &[Arc<VHost>]) {
    let names: FxHashSet<&str> = vhosts.iter().map(|v| v.name.as_str()).collect();
    // Each stream's next offset, read once however many consumers it has.
    let mut lags: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for c in broker.stream_clients.consumers() {
        if !names.contains(c.of.vhost.as_str()) {
            continue;
        }
        let key = (c.of.vhost.clone(), c.of.stream.clone());
        let (next, max_lag) = lags.entry(key).or_insert_with(|| {
            let next = broker
                .vhost(&c.of.vhost)
                .and_then(|v| v.queue(&c.of.stream))
                .and_then(|q| q.stream_next_offset())
                .unwrap_or(0);
            (next, 0)
        });
        *max_lag = (*max_lag).max(c.offset_lag(*next));
    }
    let rows: Vec<StreamRow> = lags
        .into_iter()
        .map(|((vhost, stream), (_, max_lag))| StreamRow { vhost, stream, max_lag })
        .collect();
    write_rows(w, &STREAM_CONSUMER, &rows, |r| {
        [("queue", r.stream.as_str()), ("vhost", r.vhost.as_str())]
    });
}
