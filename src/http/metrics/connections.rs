//! The connection and channel families of `/metrics/detailed`:
//! `connection_coarse_metrics` / `connection_metrics` per connection and
//! `channel_metrics` per channel, over the connections to the scraped vhosts.

use std::sync::Arc;

use prometheus::proto::MetricType;
use rustc_hash::FxHashSet;

use super::spec::Spec;
use super::text::{TextWriter, write_rows};
use crate::core::broker::Broker;
use crate::core::connections::ConnectionEntry;
use crate::core::vhost::VHost;

use MetricType::{COUNTER as Counter, GAUGE as Gauge};

/// Per-connection figures (LavinMQ's names, and RabbitMQ's for the packet counts).
const CONNECTION: [Spec<Arc<ConnectionEntry>>; 5] = [
    Spec::new(
        "detailed_connection_incoming_bytes_total",
        Counter,
        "Total number of bytes received on a connection",
        |c| Some(c.recv_oct.get() as f64),
    ),
    Spec::new(
        "detailed_connection_outgoing_bytes_total",
        Counter,
        "Total number of bytes sent on a connection",
        |c| Some(c.send_oct.get() as f64),
    ),
    Spec::new(
        "detailed_connection_incoming_packets_total",
        Counter,
        "Total number of socket reads on a connection",
        |c| Some(c.recv_cnt.get() as f64),
    ),
    Spec::new(
        "detailed_connection_outgoing_packets_total",
        Counter,
        "Total number of socket writes on a connection",
        |c| Some(c.send_cnt.get() as f64),
    ),
    // A gauge, as in RabbitMQ: LavinMQ declares it a counter, but it goes down.
    Spec::new("detailed_connection_channels", Gauge, "Channels on a connection", |c| {
        Some(c.channel_count() as f64)
    }),
];

/// A channel's figures, read once per scrape.
struct ChannelRow {
    name: String,
    conn: Arc<ConnectionEntry>,
    consumers: usize,
    unacked: u64,
    prefetch: u32,
}

/// `channel_metrics` (LavinMQ's names).
const CHANNEL: [Spec<ChannelRow>; 3] = [
    Spec::new("detailed_channel_consumers", Gauge, "Consumers on a channel", |r| {
        Some(r.consumers as f64)
    }),
    Spec::new(
        "detailed_messages_unacked",
        Gauge,
        "Delivered but not yet acknowledged messages",
        |r| Some(r.unacked as f64),
    ),
    Spec::new(
        "detailed_channel_prefetch",
        Gauge,
        "Total limit of unacknowledged messages for all consumers on a channel",
        |r| Some(f64::from(r.prefetch)),
    ),
];

/// The open connections to one of `vhosts`.
fn connections(broker: &Broker, vhosts: &[Arc<VHost>]) -> Vec<Arc<ConnectionEntry>> {
    let names: FxHashSet<&str> = vhosts.iter().map(|v| v.name.as_str()).collect();
    let mut conns = broker.connections.list();
    conns.retain(|c| names.contains(c.info.vhost.as_str()));
    conns
}

/// Writes `connection_coarse_metrics` over the connections to `vhosts`.
pub fn write_connections(w: &mut TextWriter<'_>, broker: &Broker, vhosts: &[Arc<VHost>]) {
    // LavinMQ (after RabbitMQ) labels connection samples `channel`.
    write_rows(w, &CONNECTION, &connections(broker, vhosts), |c| {
        [("channel", c.name.as_str())]
    });
}

/// Writes `channel_metrics` over the channels of the connections to
/// `vhosts`; returns the bytes of the rows it wrote from.
pub fn write_channels(w: &mut TextWriter<'_>, broker: &Broker, vhosts: &[Arc<VHost>]) -> usize {
    let mut rows = Vec::new();
    for c in connections(broker, vhosts) {
        for ch in c.channels() {
            let details = ch.details();
            rows.push(ChannelRow {
                name: format!("{} ({})", c.name, ch.number()),
                conn: c.clone(),
                consumers: ch.consumers().len(),
                unacked: details.unacked,
                prefetch: details.prefetch_count,
            });
        }
    }
    write_rows(w, &CHANNEL, &rows, |r| {
        [
            ("channel", r.name.as_str()),
            ("vhost", r.conn.info.vhost.as_str()),
            ("connection", r.conn.name.as_str()),
        ]
    });
    size_of_val(rows.as_slice()) + rows.iter().map(|r| r.name.capacity()).sum::<usize>()
}
