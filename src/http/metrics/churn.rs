//! The churn collector: connections and channels opened and closed
//! (broker-wide), queues declared, created and deleted in the scraped vhosts;
//! in `/metrics/detailed` (the `connection_churn_metrics` family) named
//! `detailed_..._total`, with the consumers added and removed, as LavinMQ
//! does there.

use std::sync::Arc;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};

use super::spec::{Spec, describe, full_name, single_families};
use crate::core::broker::Broker;
use crate::core::stats::ChurnCounters;
use crate::core::vhost::VHost;

use MetricType::COUNTER as Counter;

/// Where the churn counters are read from, when the registry gathers.
struct Churn {
    broker: Arc<Broker>,
    vhosts: Vec<Arc<VHost>>,
}

impl Churn {
    /// A per-vhost counter summed over the scraped vhosts.
    fn sum(&self, f: fn(&VHost) -> u64) -> Option<f64> {
        Some(self.vhosts.iter().map(|v| f(v)).sum::<u64>() as f64)
    }

    /// A broker-wide counter.
    fn node(&self, f: fn(&ChurnCounters) -> u64) -> Option<f64> {
        Some(f(&self.broker.connections.churn) as f64)
    }
}

/// The churn families: both endpoints report the first [`IN_OVERVIEW`],
/// only `/metrics/detailed` the consumers after them.
const CHURN: [Spec<Churn>; 9] = [
    Spec::new(
        "connections_opened_total",
        Counter,
        "Total number of connections opened",
        |c| c.node(|n| n.connection_created.get()),
    ),
    Spec::new(
        "connections_closed_total",
        Counter,
        "Total number of connections closed or terminated",
        |c| c.node(|n| n.connection_closed.get()),
    ),
    Spec::new(
        "channels_opened_total",
        Counter,
        "Total number of channels opened",
        |c| c.node(|n| n.channel_created.get()),
    ),
    Spec::new(
        "channels_closed_total",
        Counter,
        "Total number of channels closed",
        |c| c.node(|n| n.channel_closed.get()),
    ),
    Spec::new(
        "queues_declared_total",
        Counter,
        "Total number of queues declared",
        |c| c.sum(|v| v.churn.queue_declared.get()),
    ),
    Spec::new("queues_created_total", Counter, "Total number of queues created", |c| {
        c.sum(|v| v.churn.queue_created.get())
    }),
    Spec::new("queues_deleted_total", Counter, "Total number of queues deleted", |c| {
        c.sum(|v| v.churn.queue_deleted.get())
    }),
    Spec::new(
        "consumers_added_total",
        Counter,
        "Total number of consumers added",
        |c| c.sum(|v| v.churn.consumer_added.get()),
    ),
    Spec::new(
        "consumers_removed_total",
        Counter,
        "Total number of consumers removed",
        |c| c.sum(|v| v.churn.consumer_removed.get()),
    ),
];

/// How many of [`CHURN`]'s families `/metrics` reports.
const IN_OVERVIEW: usize = 7;

/// Reads the churn counters when the registry gathers.
pub struct ChurnCollector {
    churn: Churn,
    specs: &'static [Spec<Churn>],
    descs: Vec<Desc>,
}

impl ChurnCollector {
    /// The collector for `vhosts` under `prefix`; `detailed` names the
    /// families as `connection_churn_metrics` does and adds the consumers.
    pub fn new(broker: Arc<Broker>, vhosts: Vec<Arc<VHost>>, prefix: &str, detailed: bool) -> prometheus::Result<Self> {
        let (name_prefix, specs): (&str, &'static [Spec<Churn>]) = if detailed {
            ("detailed_", &CHURN[..])
        } else {
            ("", &CHURN[..IN_OVERVIEW])
        };
        let descs = specs
            .iter()
            .map(|s| describe(&full_name(prefix, &format!("{name_prefix}{}", s.name)), s.help, &[]))
            .collect::<prometheus::Result<_>>()?;
        Ok(ChurnCollector {
            churn: Churn { broker, vhosts },
            specs,
            descs,
        })
    }
}

impl Collector for ChurnCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        single_families(self.specs, &self.descs, &self.churn)
    }
}
