//! The queue families of `/metrics/detailed`: the per-queue families
//! (`queue_coarse_metrics`, `queue_consumer_count`, `queue_delivery_metrics`)
//! and the per-vhost `vhost_message_stats`, all from one read of each queue's
//! figures (its lock taken once, briefly).

use std::sync::Arc;

use prometheus::proto::MetricType;

use super::params::Family;
use super::spec::Spec;
use super::text::{TextWriter, write_rows};
use crate::core::queue::{Queue, QueueStats};
use crate::core::vhost::VHost;

use MetricType::{COUNTER as Counter, GAUGE as Gauge};

/// A queue's figures, read once per scrape.
struct QueueRow {
    queue: Arc<Queue>,
    vhost: Arc<VHost>,
    stats: QueueStats,
}

/// `queue_coarse_metrics` (LavinMQ's names).
const QUEUE_COARSE: [Spec<QueueRow>; 4] = [
    Spec::new(
        "detailed_queue_messages_ready",
        Gauge,
        "Messages ready to be delivered to consumers",
        |q| Some(q.stats.ready as f64),
    ),
    Spec::new(
        "detailed_queue_messages_unacked",
        Gauge,
        "Messages delivered to consumers but not yet acknowledged",
        |q| Some(q.stats.unacked as f64),
    ),
    Spec::new(
        "detailed_queue_messages",
        Gauge,
        "Sum of ready and unacknowledged messages - total queue depth",
        |q| Some((q.stats.ready + q.stats.unacked) as f64),
    ),
    Spec::new(
        "detailed_queue_deduplication",
        Counter,
        "Number of deduplicated messages for this queue",
        |q| Some(q.stats.counts.dedup as f64),
    ),
];

/// `queue_consumer_count` (LavinMQ's name).
const QUEUE_CONSUMERS: [Spec<QueueRow>; 1] = [Spec::new(
    "detailed_queue_consumers",
    Gauge,
    "Consumers on a queue",
    |q| Some(q.stats.consumers as f64),
)];

/// `queue_delivery_metrics` (RabbitMQ's names; LavinMQ has no such family).
const QUEUE_DELIVERY: [Spec<QueueRow>; 8] = [
    Spec::new(
        "detailed_queue_messages_published_total",
        Counter,
        "Total number of messages published to a queue",
        |q| Some(q.stats.counts.publish as f64),
    ),
    Spec::new(
        "detailed_queue_messages_delivered_ack_total",
        Counter,
        "Total number of messages delivered to consumers in manual acknowledgement mode",
        |q| Some(q.stats.counts.deliver as f64),
    ),
    Spec::new(
        "detailed_queue_messages_delivered_total",
        Counter,
        "Total number of messages delivered to consumers in automatic acknowledgement mode",
        |q| Some(q.stats.counts.deliver_no_ack as f64),
    ),
    Spec::new(
        "detailed_queue_get_ack_total",
        Counter,
        "Total number of messages fetched with basic.get in manual acknowledgement mode",
        |q| Some(q.stats.counts.get as f64),
    ),
    Spec::new(
        "detailed_queue_get_total",
        Counter,
        "Total number of messages fetched with basic.get in automatic acknowledgement mode",
        |q| Some(q.stats.counts.get_no_ack as f64),
    ),
    Spec::new(
        "detailed_queue_get_empty_total",
        Counter,
        "Total number of times basic.get found the queue empty",
        |q| Some(q.stats.counts.get_empty as f64),
    ),
    Spec::new(
        "detailed_queue_messages_redelivered_total",
        Counter,
        "Total number of messages redelivered to consumers",
        |q| Some(q.stats.counts.redeliver as f64),
    ),
    Spec::new(
        "detailed_queue_messages_acked_total",
        Counter,
        "Total number of messages acknowledged by consumers",
        |q| Some(q.stats.counts.ack as f64),
    ),
];

/// A vhost's totals, summed from its queues and exchanges.
struct VhostRow {
    vhost: Arc<VHost>,
    published: u64,
    delivered: u64,
    queues: u64,
}

/// `vhost_message_stats` (LavinMQ's names).
const VHOST_STATS: [Spec<VhostRow>; 3] = [
    Spec::new(
        "detailed_vhost_messages_published_total",
        Counter,
        "Total messages published to a vhost (all protocols)",
        |v| Some(v.published as f64),
    ),
    Spec::new(
        "detailed_vhost_messages_delivered_total",
        Counter,
        "Total messages delivered to clients on a vhost (all protocols)",
        |v| Some(v.delivered as f64),
    ),
    Spec::new("detailed_vhost_queues", Gauge, "Number of queues on a vhost", |v| {
        Some(v.queues as f64)
    }),
];

/// A queue sample's labels.
fn queue_labels(q: &QueueRow) -> [(&'static str, &str); 2] {
    [("queue", q.queue.name.as_str()), ("vhost", q.vhost.name.as_str())]
}

/// How many samples `family` writes for each queue.
fn samples_per_queue(family: Family) -> usize {
    match family {
        Family::QueueCoarse => QUEUE_COARSE.len(),
        Family::QueueConsumerCount => QUEUE_CONSUMERS.len(),
        Family::QueueDelivery => QUEUE_DELIVERY.len(),
        _ => 0,
    }
}

/// Writes the queue-derived families among `families` (in their order)
/// over `vhosts`, reading each queue's figures once; returns the bytes of
/// that snapshot.
pub fn write_queue_families(w: &mut TextWriter<'_>, vhosts: &[Arc<VHost>], families: &[Family]) -> usize {
    if !families.iter().any(|f| f.needs_queues()) {
        return 0;
    }
    let queues = read_queues(vhosts);
    // About 100 bytes a sample, so the text is rarely copied to grow.
    let per_queue: usize = families.iter().map(|f| samples_per_queue(*f)).sum();
    w.reserve(queues.len() * per_queue * 100);
    for family in families {
        match family {
            Family::QueueCoarse => write_rows(w, &QUEUE_COARSE, &queues, queue_labels),
            Family::QueueConsumerCount => write_rows(w, &QUEUE_CONSUMERS, &queues, queue_labels),
            Family::QueueDelivery => write_rows(w, &QUEUE_DELIVERY, &queues, queue_labels),
            Family::VhostMessageStats => {
                let rows = vhost_rows(vhosts, &queues);
                write_rows(w, &VHOST_STATS, &rows, |v| [("vhost", v.vhost.name.as_str())]);
            }
            _ => {}
        }
    }
    size_of_val(queues.as_slice())
}

/// Every queue of `vhosts` with its figures, grouped by vhost and sorted by
/// name within each.
fn read_queues(vhosts: &[Arc<VHost>]) -> Vec<QueueRow> {
    let mut rows = Vec::new();
    for v in vhosts {
        let mut queues = v.queues();
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        rows.extend(queues.into_iter().map(|q| QueueRow {
            stats: q.stats(),
            queue: q,
            vhost: v.clone(),
        }));
    }
    rows
}

/// Each of `vhosts` with its totals over its exchanges and `queues` (as
/// [`read_queues`] lists them: grouped by vhost, in the same order).
fn vhost_rows(vhosts: &[Arc<VHost>], queues: &[QueueRow]) -> Vec<VhostRow> {
    let mut rest = queues;
    vhosts
        .iter()
        .map(|v| {
            let count = rest.iter().take_while(|q| Arc::ptr_eq(&q.vhost, v)).count();
            let (mine, after) = rest.split_at(count);
            rest = after;
            VhostRow {
                vhost: v.clone(),
                published: v.exchanges().iter().map(|e| e.counters.publish_in.get()).sum(),
                delivered: mine.iter().map(|q| q.stats.counts.deliver_get()).sum(),
                queues: count as u64,
            }
        })
        .collect()
}
