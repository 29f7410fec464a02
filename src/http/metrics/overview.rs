//! The collector behind `/metrics`: the node's identity, process and disk
//! figures, alarms, logins, and totals over the scraped vhosts' queues,
//! exchanges, connections and channels.

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};
use rustc_hash::FxHashSet;

use super::spec::{FamilyBuilder, Spec, describe, descs, full_name, single_families};
use crate::cluster::status::ClusterStatus;
use crate::core::broker::Broker;
use crate::core::vhost::VHost;
use crate::http::node_stats as node;

use MetricType::{COUNTER as Counter, GAUGE as Gauge};

/// The process and disk figures, read when scraped.
struct NodeFigures {
    open_fds: Option<u64>,
    resident_memory: Option<u64>,
    disk_free: Option<u64>,
    max_fds: Option<u64>,
    /// User and system CPU seconds.
    cpu: Option<(f64, f64)>,
    /// How long reading them took.
    took: Duration,
}

impl NodeFigures {
    fn read(broker: &Broker) -> Self {
        let started = Instant::now();
        let mut figures = NodeFigures {
            open_fds: node::open_fds(),
            resident_memory: node::resident_memory_bytes(),
            disk_free: broker.disk.free_bytes(),
            max_fds: node::max_fds(),
            cpu: node::cpu_times(),
            took: Duration::ZERO,
        };
        figures.took = started.elapsed();
        figures
    }
}

/// Sums over the queues and exchanges of the scraped vhosts.
#[derive(Default)]
struct Totals {
    queues: u64,
    consumers: u64,
    bindings: u64,
    ready: u64,
    unacked: u64,
    published: u64,
    delivered: u64,
    redelivered: u64,
    acked: u64,
    received: u64,
    routed: u64,
}

impl Totals {
    /// One pass over the queues and exchanges of `vhosts`.
    fn read(vhosts: &[Arc<VHost>]) -> Self {
        let mut t = Totals::default();
        for v in vhosts {
            for q in v.queues() {
                let st = q.stats();
                t.queues += 1;
                t.consumers += st.consumers as u64;
                t.ready += st.ready;
                t.unacked += st.unacked;
                let c = st.counts;
                t.published += c.publish;
                t.delivered += c.deliver_get();
                t.redelivered += c.redeliver;
                t.acked += c.ack;
            }
            for e in v.exchanges() {
                t.bindings += e.bindings().len() as u64;
                t.received += e.counters.publish_in.get();
                t.routed += e.counters.publish_out();
            }
        }
        t
    }
}

/// Everything `/metrics` reports besides churn and the cluster, read at once.
struct Figures {
    node: NodeFigures,
    totals: Totals,
    /// Every open connection, whatever its vhost.
    sockets: u64,
    /// Connections and their channels in the scraped vhosts.
    connections: u64,
    channels: u64,
    confirmed: u64,
    login_failures: u64,
    login_refusals: u64,
    login_blocked: u64,
    disk_limit: u64,
    disk_alarm: bool,
    memory_limit: u64,
    memory_alarm: bool,
    uptime: u64,
    rates_took: Duration,
    followers_connected: u64,
    mfiles: u64,
}

impl Figures {
    fn read(broker: &Broker, vhosts: &[Arc<VHost>]) -> Self {
        let node = NodeFigures::read(broker);
        let all_connections = broker.connections.list();
        let names: FxHashSet<&str> = vhosts.iter().map(|v| v.name.as_str()).collect();
        let (mut connections, mut channels) = (0u64, 0u64);
        for c in all_connections.iter().filter(|c| names.contains(c.info.vhost.as_str())) {
            connections += 1;
            channels += c.channel_count() as u64;
        }
        let followers_connected =
            ClusterStatus::if_clustered().map_or(0, |c| c.followers().iter().filter(|f| f.connected).count() as u64);
        Figures {
            node,
            totals: Totals::read(vhosts),
            sockets: all_connections.len() as u64,
            connections,
            channels,
            confirmed: broker.connections.confirms(|v| names.contains(v)),
            login_failures: broker.logins.failures(),
            login_refusals: broker.logins.refusals(),
            login_blocked: broker.logins.blocked_sources() as u64,
            disk_limit: broker.disk.min_free(),
            disk_alarm: broker.disk.is_blocked(),
            memory_limit: broker.memory.limit(),
            memory_alarm: broker.memory.is_alarmed(),
            uptime: node::uptime_secs(),
            rates_took: broker.stats.last_duration(),
            followers_connected,
            mfiles: crate::store::mmap::open_count(),
        }
    }
}

/// A whole number as a sample value.
fn n(v: u64) -> Option<f64> {
    Some(v as f64)
}

/// The single-sample families of `/metrics` (LavinMQ's names and help text;
/// RabbitMQ's where LavinMQ has none).
const OVERVIEW: [Spec<Figures>; 35] = [
    Spec::new("process_open_fds", Gauge, "Open file descriptors", |f| {
        f.node.open_fds.and_then(n)
    }),
    Spec::new("process_open_tcp_sockets", Gauge, "Open TCP sockets", |f| n(f.sockets)),
    Spec::new("process_resident_memory_bytes", Gauge, "Memory used in bytes", |f| {
        f.node.resident_memory.and_then(n)
    }),
    Spec::new(
        "disk_space_available_bytes",
        Gauge,
        "Disk space available in bytes",
        |f| f.node.disk_free.and_then(n),
    ),
    Spec::new(
        "login_failures_total",
        Counter,
        "Failed logins",
        |f| n(f.login_failures),
    ),
    Spec::new(
        "login_refusals_total",
        Counter,
        "Logins refused unchecked after too many failures from their address",
        |f| n(f.login_refusals),
    ),
    Spec::new(
        "login_blocked_sources",
        Gauge,
        "Addresses whose logins are refused now",
        |f| n(f.login_blocked),
    ),
    // RabbitMQ's names for the disk alarm's threshold and state.
    Spec::new(
        "disk_space_available_limit_bytes",
        Gauge,
        "Free disk space low watermark in bytes",
        |f| n(f.disk_limit),
    ),
    Spec::new(
        "alarms_free_disk_space_watermark",
        Gauge,
        "is free disk space alarm in effect",
        |f| n(u64::from(f.disk_alarm)),
    ),
    Spec::new("process_max_fds", Gauge, "Open file descriptors limit", |f| {
        f.node.max_fds.and_then(n)
    }),
    // RabbitMQ's names for the memory alarm's threshold and state.
    Spec::new(
        "resident_memory_limit_bytes",
        Gauge,
        "Memory high watermark in bytes",
        |f| n(f.memory_limit),
    ),
    Spec::new(
        "alarms_memory_used_watermark",
        Gauge,
        "is memory alarm in effect",
        |f| n(u64::from(f.memory_alarm)),
    ),
    Spec::new("connections", Gauge, "Connections currently open", |f| n(f.connections)),
    Spec::new("channels", Gauge, "Channels currently open", |f| n(f.channels)),
    Spec::new("consumers", Gauge, "Consumers currently connected", |f| {
        n(f.totals.consumers)
    }),
    Spec::new("queues", Gauge, "Queues available", |f| n(f.totals.queues)),
    Spec::new("bindings", Gauge, "Bindings currently configured", |f| {
        n(f.totals.bindings)
    }),
    Spec::new(
        "queue_messages_ready",
        Gauge,
        "Messages ready to be delivered to consumers",
        |f| n(f.totals.ready),
    ),
    Spec::new(
        "queue_messages_unacked",
        Gauge,
        "Messages delivered to consumers but not yet acknowledged",
        |f| n(f.totals.unacked),
    ),
    Spec::new(
        "queue_messages",
        Gauge,
        "Sum of ready and unacknowledged messages - total queue depth",
        |f| n(f.totals.ready + f.totals.unacked),
    ),
    Spec::new("uptime", Counter, "Server uptime in seconds", |f| n(f.uptime)),
    Spec::new("cpu_system_time_total", Counter, "Total CPU system time", |f| {
        f.node.cpu.map(|(_, system)| system)
    }),
    Spec::new("cpu_user_time_total", Counter, "Total CPU user time", |f| {
        f.node.cpu.map(|(user, _)| user)
    }),
    Spec::new(
        "stats_collection_duration_seconds_total",
        Gauge,
        "Total time it takes to collect metrics (stats_loop)",
        |f| Some((f.rates_took + f.node.took).as_secs_f64()),
    ),
    Spec::new(
        "stats_rates_collection_duration_seconds",
        Gauge,
        "Time it takes to update stats rates (update_stats_rates)",
        |f| Some(f.rates_took.as_secs_f64()),
    ),
    Spec::new(
        "stats_system_collection_duration_seconds",
        Gauge,
        "Time it takes to collect system metrics",
        |f| Some(f.node.took.as_secs_f64()),
    ),
    // Clustered, the leader counts its followers; alone, LavinMQ reports 0.
    Spec::new(
        "total_connected_followers",
        Gauge,
        "Amount of follower nodes connected",
        |f| n(f.followers_connected),
    ),
    Spec::new("mfile_count", Gauge, "Number of MFile memory-mapped files", |f| {
        n(f.mfiles)
    }),
    Spec::new(
        "global_messages_delivered_total",
        Counter,
        // LavinMQ's help text, word for word.
        "Total number of messaged delivered to consumers",
        |f| n(f.totals.delivered),
    ),
    Spec::new(
        "global_messages_redelivered_total",
        Counter,
        "Total number of messages redelivered to consumers",
        |f| n(f.totals.redelivered),
    ),
    Spec::new(
        "global_messages_acknowledged_total",
        Counter,
        "Total number of messages acknowledged by consumers",
        |f| n(f.totals.acked),
    ),
    Spec::new(
        "global_messages_confirmed_total",
        Counter,
        "Total number of messages confirmed to publishers",
        |f| n(f.confirmed),
    ),
    Spec::new(
        "global_messages_received_total",
        Counter,
        "Total number of messages published to exchanges",
        |f| n(f.totals.received),
    ),
    Spec::new(
        "global_messages_routed_total",
        Counter,
        "Total number of messages routed to queues",
        |f| n(f.totals.routed),
    ),
    Spec::new(
        "queue_messages_published_total",
        Counter,
        "Total number of messages published to queues",
        |f| n(f.totals.published),
    ),
];

/// `identity_info`: always 1, the version and host name in its labels.
const IDENTITY: Spec<Figures> = Spec::new("identity_info", Gauge, "System information", |_| Some(1.0));

/// Reads `/metrics`'s figures when the registry gathers.
pub struct OverviewCollector {
    broker: Arc<Broker>,
    vhosts: Vec<Arc<VHost>>,
    descs: Vec<Desc>,
    identity: Desc,
    /// `identity_info`'s label names: `<prefix>_version`, `<prefix>_cluster`.
    identity_labels: [String; 2],
}

impl OverviewCollector {
    /// The collector for `vhosts`, its families named under `prefix`.
    pub fn new(broker: Arc<Broker>, vhosts: Vec<Arc<VHost>>, prefix: &str) -> prometheus::Result<Self> {
        let identity_labels = [full_name(prefix, "version"), full_name(prefix, "cluster")];
        let labels = [identity_labels[0].as_str(), identity_labels[1].as_str()];
        Ok(OverviewCollector {
            broker,
            vhosts,
            descs: descs(prefix, &OVERVIEW, &[])?,
            identity: describe(&full_name(prefix, IDENTITY.name), IDENTITY.help, &labels)?,
            identity_labels,
        })
    }
}

impl Collector for OverviewCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().chain([&self.identity]).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let figures = Figures::read(&self.broker, &self.vhosts);
        let host = crate::core::node::host_name();
        let identity = [
            (self.identity_labels[0].as_str(), env!("CARGO_PKG_VERSION")),
            (self.identity_labels[1].as_str(), host.as_str()),
        ];
        let mut families = single_families(&OVERVIEW, &self.descs, &figures);
        let mut family = FamilyBuilder::new(&self.identity, IDENTITY.kind, 1);
        if let Some(value) = (IDENTITY.value)(&figures) {
            family.sample(&identity, value);
        }
        families.push(family.finish());
        families
    }
}
