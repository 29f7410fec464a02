//! Prometheus metrics as LavinMQ serves them: `GET /metrics` (node and broker
//! totals) and `GET /metrics/detailed?family=...` (per queue, connection,
//! channel, exchange and vhost), both on the management listener behind basic
//! auth and on the dedicated metrics listener (`metrics_http_bind`,
//! `metrics_http_port`) without it.
//!
//! Query parameters, as in LavinMQ: `prefix` replaces the `lavinmq` name prefix
//! (at most 20 characters, else 400), `vhost` (repeatable) limits the figures
//! to those vhosts, `family` (repeatable, detailed only) selects families.
//!
//! Every metric family LavinMQ 2.9 exports is here, under its name, type and
//! help text, except:
//!
//! * its garbage collector's statistics (`gc_*`): Rust has no collector, and
//!   the allocator's own figures would not mean the same thing;
//! * `detailed_connection_channels`, which LavinMQ declares a counter, is a
//!   gauge here (as in RabbitMQ): it goes down when channels close.
//!
//! Where LavinMQ has no metric for a figure this broker keeps, RabbitMQ's
//! `rabbitmq_prometheus` name is used with the same prefix
//! (`global_messages_received_total`, `global_messages_routed_total`,
//! `queue_messages_published_total`, the `queue_delivery_metrics` family, the
//! connection packet counts), and the extra counters get names in the same
//! style (`queues_created_total`, the exchange message counters).
//!
//! How the figures LavinMQ defines are measured here:
//!
//! * churn totals (`connections_opened_total` ... `consumers_removed_total`):
//!   connections and channels broker-wide, queues and consumers per vhost
//!   (a consumer is added when it attaches to a queue and removed when it
//!   detaches or its queue goes);
//! * `global_messages_confirmed_total`: publisher confirms sent (AMQP
//!   `basic.ack` and `basic.nack` in confirm mode, MQTT PUBACK and PUBREC),
//!   one per message, over the scraped vhosts. Channels count their own
//!   confirms; a closing channel's and connection's count is folded into its
//!   connection's and then its vhost's total under the lock that unlists it,
//!   so the sum never goes back;
//! * `detailed_queue_deduplication` and `detailed_exchange_deduplication`:
//!   messages dropped as duplicates (as in LavinMQ, only the duplicates);
//! * `mfile_count`: memory maps of message store files open now (segments,
//!   ack logs, read cursors);
//! * `stats_rates_collection_duration_seconds`: the last run of the stats
//!   sampler, which turns every counter into rates each `stats_interval`;
//!   `stats_system_collection_duration_seconds`: reading the process and
//!   disk figures, which this broker does when scraped rather than in that
//!   loop; `stats_collection_duration_seconds_total`: their sum;
//! * `telemetry_scrape_mem`: the bytes of the buffers the scrape builds (the
//!   document, and the queue and channel snapshots it writes from).
//!
//! Clustered, `/metrics` also reports the cluster as this node (the leader,
//! which alone serves it) sees it: LavinMQ's `total_connected_followers` and,
//! per connected follower, `follower_lag_in_bytes` labelled `id="<node id>"`,
//! plus this broker's `cluster_is_leader`, `cluster_followers` (connected),
//! `cluster_in_sync_followers`, and per follower, labelled
//! `follower="<node id>"`, `cluster_follower_lag_bytes` and
//! `cluster_follower_in_sync`. Unclustered, none of these appear (and
//! `total_connected_followers` stays 0).
//!
//! A scrape runs on a blocking thread: it takes each queue's lock once, briefly,
//! to read its figures, holds no lock across an `.await`, and writes the text
//! by hand into one `String` (see [`super::metrics_text`] for why not the
//! `prometheus` crate), so scraping tens of thousands of queues neither stalls
//! the runtime nor builds an object per sample.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rustc_hash::FxHashSet;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use super::metrics_text::{CONTENT_TYPE, MetricType, TextWriter, validate_prefix};
use super::node_stats as node;
use crate::cluster::status::{ClusterStatus, FollowerView, Role};
use crate::core::broker::Broker;
use crate::core::connections::ConnectionEntry;
use crate::core::exchange::Exchange;
use crate::core::queue::{Queue, QueueStats};
use crate::core::vhost::VHost;

use MetricType::{Counter, Gauge};

/// Metric-name prefix when the scrape does not ask for another.
pub const DEFAULT_PREFIX: &str = "lavinmq";

/// A group of metrics `/metrics/detailed` can be asked for with `family=`
/// (RabbitMQ's family names, which LavinMQ adopted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Totals of connections, channels and queues opened and closed.
    ConnectionChurn,
    /// Ready, unacknowledged and total messages per queue.
    QueueCoarse,
    /// Consumers per queue.
    QueueConsumerCount,
    /// Publish, delivery, get and ack counters per queue (RabbitMQ's family).
    QueueDelivery,
    /// Bytes, packets and channels per connection (`connection_coarse_metrics`
    /// and `connection_metrics`, which LavinMQ serves alike).
    Connection,
    /// Consumers, unacknowledged messages and prefetch per channel.
    Channel,
    /// Messages in, out and unroutable per exchange.
    Exchange,
    /// Messages published and delivered and queues per vhost.
    VhostMessageStats,
}

impl Family {
    /// The family named `name`, or `None` when there is none by that name
    /// (unknown families are ignored, as in LavinMQ).
    pub fn parse(name: &str) -> Option<Family> {
        Some(match name {
            "connection_churn_metrics" => Family::ConnectionChurn,
            "queue_coarse_metrics" => Family::QueueCoarse,
            "queue_consumer_count" => Family::QueueConsumerCount,
            "queue_delivery_metrics" => Family::QueueDelivery,
            "connection_coarse_metrics" | "connection_metrics" => Family::Connection,
            "channel_metrics" => Family::Channel,
            "exchange_metrics" => Family::Exchange,
            "vhost_message_stats" => Family::VhostMessageStats,
            _ => return None,
        })
    }

    /// How many samples the family writes for each queue.
    fn samples_per_queue(self) -> usize {
        match self {
            Family::QueueCoarse => QUEUE_COARSE.len(),
            Family::QueueConsumerCount => QUEUE_CONSUMERS.len(),
            Family::QueueDelivery => QUEUE_DELIVERY.len(),
            _ => 0,
        }
    }

    /// True when the family is computed from the queues' figures.
    fn needs_queues(self) -> bool {
        matches!(
            self,
            Family::QueueCoarse | Family::QueueConsumerCount | Family::QueueDelivery | Family::VhostMessageStats
        )
    }
}

/// Which document a scrape produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    /// `/metrics`.
    Overview,
    /// `/metrics/detailed`.
    Detailed,
}

/// The query parameters of a scrape.
#[derive(Debug)]
struct ScrapeParams {
    prefix: String,
    vhosts: Vec<String>,
    families: Vec<Family>,
}

impl ScrapeParams {
    /// Reads `prefix` (the first one given), every `vhost` and every known
    /// `family` (each once, in the order first asked for).
    fn parse(pairs: Vec<(String, String)>) -> ApiResult<Self> {
        let mut prefix = None;
        let mut vhosts = Vec::new();
        let mut families = Vec::new();
        for (key, value) in pairs {
            match key.as_str() {
                "prefix" if prefix.is_none() => prefix = Some(value),
                "vhost" => vhosts.push(value),
                "family" => {
                    if let Some(f) = Family::parse(&value)
                        && !families.contains(&f)
                    {
                        families.push(f);
                    }
                }
                _ => {}
            }
        }
        let prefix = prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        validate_prefix(&prefix).map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(ScrapeParams {
            prefix,
            vhosts,
            families,
        })
    }

    /// Keeps the vhosts the scrape asked for (all when it named none).
    fn select(&self, mut vhosts: Vec<Arc<VHost>>) -> Vec<Arc<VHost>> {
        if !self.vhosts.is_empty() {
            vhosts.retain(|v| self.vhosts.contains(&v.name));
        }
        vhosts
    }
}

/// `GET /metrics` on the management listener: the user's vhosts only, unless
/// it is an administrator or has the monitoring tag.
pub async fn metrics(
    user: Authed,
    State(s): State<Arc<HttpState>>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Response> {
    let params = ScrapeParams::parse(query)?;
    let vhosts = params.select(s.visible_vhosts(&user));
    scrape(s.broker.clone(), vhosts, params, Endpoint::Overview).await
}

/// `GET /metrics/detailed` on the management listener, with the same vhost
/// visibility as [`metrics`].
pub async fn detailed(
    user: Authed,
    State(s): State<Arc<HttpState>>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Response> {
    let params = ScrapeParams::parse(query)?;
    let vhosts = params.select(s.visible_vhosts(&user));
    scrape(s.broker.clone(), vhosts, params, Endpoint::Detailed).await
}

/// Every vhost, by name: what the unauthenticated listener reports on.
fn all_vhosts(broker: &Broker) -> Vec<Arc<VHost>> {
    let mut all = broker.vhosts();
    all.sort_by(|a, b| a.name.cmp(&b.name));
    all
}

/// `GET /metrics` on the metrics listener (no authentication).
async fn public_metrics(
    State(s): State<Arc<HttpState>>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Response> {
    let params = ScrapeParams::parse(query)?;
    let vhosts = params.select(all_vhosts(&s.broker));
    scrape(s.broker.clone(), vhosts, params, Endpoint::Overview).await
}

/// `GET /metrics/detailed` on the metrics listener (no authentication).
async fn public_detailed(
    State(s): State<Arc<HttpState>>,
    Query(query): Query<Vec<(String, String)>>,
) -> ApiResult<Response> {
    let params = ScrapeParams::parse(query)?;
    let vhosts = params.select(all_vhosts(&s.broker));
    scrape(s.broker.clone(), vhosts, params, Endpoint::Detailed).await
}

/// The routes of the dedicated metrics listener: the two metrics paths and
/// nothing else, without authentication (it binds to loopback by default).
pub fn public_router(state: Arc<HttpState>) -> Router {
    Router::new()
        .route("/metrics", get(public_metrics))
        .route("/metrics/detailed", get(public_detailed))
        .with_state(state)
}

/// The metrics listener could not bind its address.
#[derive(Debug, thiserror::Error)]
#[error("cannot bind metrics listener to {addr}: {source}")]
pub struct MetricsBindError {
    /// The address tried, `host:port`.
    pub addr: String,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

/// Binds the metrics listener on `host:port` (port 0 picks a free port) and
/// returns it with the address it got.
pub async fn bind(host: &str, port: u16) -> Result<(TcpListener, SocketAddr), MetricsBindError> {
    let addr = crate::transport::listen_address(host, port);
    let fail = |source| MetricsBindError {
        addr: addr.clone(),
        source,
    };
    let listener = TcpListener::bind(&addr).await.map_err(fail)?;
    let local = listener.local_addr().map_err(fail)?;
    Ok((listener, local))
}

/// Serves [`public_router`] on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, state: Arc<HttpState>, shutdown: CancellationToken) {
    let result = axum::serve(listener, public_router(state))
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
    if let Err(e) = result {
        tracing::error!("metrics server failed: {e}");
    }
}

/// Renders the document on a blocking thread and answers with it.
async fn scrape(
    broker: Arc<Broker>,
    vhosts: Vec<Arc<VHost>>,
    params: ScrapeParams,
    endpoint: Endpoint,
) -> ApiResult<Response> {
    let body = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let Rendered { mut text, scratch } = match endpoint {
            Endpoint::Overview => render_overview(&broker, &vhosts, &params.prefix),
            Endpoint::Detailed => render_detailed(&broker, &vhosts, &params.families, &params.prefix),
        };
        // LavinMQ reports the scrape's own cost under a fixed prefix.
        let mut telemetry = TextWriter::new("telemetry", 512);
        telemetry.single(
            "scrape_duration_seconds",
            Gauge,
            "Duration for metrics collection in seconds",
            started.elapsed().as_secs_f64(),
        );
        let telemetry_bytes = telemetry.capacity();
        telemetry.single(
            "scrape_mem",
            Gauge,
            "Memory used for metrics collections in bytes",
            text.capacity() + scratch + telemetry_bytes,
        );
        text.push_str(&telemetry.finish());
        text
    })
    .await
    .map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        error: "internal_error",
        reason: format!("metrics collection failed: {e}"),
    })?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response())
}

/// A rendered document, with the bytes of the snapshots it was written from.
struct Rendered {
    text: String,
    scratch: usize,
}

/// Names of `vhosts`, for matching connections to them.
fn vhost_names(vhosts: &[Arc<VHost>]) -> FxHashSet<&str> {
    vhosts.iter().map(|v| v.name.as_str()).collect()
}

/// The open connections to one of `names`.
fn connections_in(broker: &Broker, names: &FxHashSet<&str>) -> Vec<Arc<ConnectionEntry>> {
    let mut conns = broker.connections.list();
    conns.retain(|c| names.contains(c.info.vhost.as_str()));
    conns
}

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

/// `/metrics`: node figures, then totals over `vhosts`.
fn render_overview(broker: &Broker, vhosts: &[Arc<VHost>], prefix: &str) -> Rendered {
    let mut w = TextWriter::new(prefix, 8 * 1024);
    let sys = NodeFigures::read(broker);

    let version_label = format!("{prefix}_version");
    let cluster_label = format!("{prefix}_cluster");
    let host = node::hostname();
    w.header("identity_info", Gauge, "System information");
    w.sample(
        "identity_info",
        &[
            (version_label.as_str(), env!("CARGO_PKG_VERSION")),
            (cluster_label.as_str(), host.as_str()),
        ],
        1u64,
    );

    write_churn(&mut w, broker, vhosts, false);
    let all_connections = broker.connections.list();
    if let Some(n) = sys.open_fds {
        w.single("process_open_fds", Gauge, "Open file descriptors", n);
    }
    w.single(
        "process_open_tcp_sockets",
        Gauge,
        "Open TCP sockets",
        all_connections.len(),
    );
    if let Some(n) = sys.resident_memory {
        w.single("process_resident_memory_bytes", Gauge, "Memory used in bytes", n);
    }
    if let Some(n) = sys.disk_free {
        w.single("disk_space_available_bytes", Gauge, "Disk space available in bytes", n);
    }
    let logins = &broker.logins;
    w.single("login_failures_total", Counter, "Failed logins", logins.failures());
    w.single(
        "login_refusals_total",
        Counter,
        "Logins refused unchecked after too many failures from their address",
        logins.refusals(),
    );
    w.single(
        "login_blocked_sources",
        Gauge,
        "Addresses whose logins are refused now",
        logins.blocked_sources(),
    );
    // RabbitMQ's names for the disk alarm's threshold and state.
    w.single(
        "disk_space_available_limit_bytes",
        Gauge,
        "Free disk space low watermark in bytes",
        broker.disk.min_free(),
    );
    w.single(
        "alarms_free_disk_space_watermark",
        Gauge,
        "is free disk space alarm in effect",
        u64::from(broker.disk.is_blocked()),
    );
    if let Some(n) = sys.max_fds {
        w.single("process_max_fds", Gauge, "Open file descriptors limit", n);
    }
    // RabbitMQ's names for the memory alarm's threshold and state.
    w.single(
        "resident_memory_limit_bytes",
        Gauge,
        "Memory high watermark in bytes",
        broker.memory.limit(),
    );
    w.single(
        "alarms_memory_used_watermark",
        Gauge,
        "is memory alarm in effect",
        u64::from(broker.memory.is_alarmed()),
    );

    // One pass over the queues and exchanges of the selected vhosts.
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
            t.delivered += c.deliver + c.deliver_no_ack + c.get + c.get_no_ack;
            t.redelivered += c.redeliver;
            t.acked += c.ack;
        }
        for e in v.exchanges() {
            t.bindings += e.bindings().len() as u64;
            t.received += e.counters.publish_in.get();
            t.routed += e.counters.publish_out();
        }
    }
    let names = vhost_names(vhosts);
    let (mut connections, mut channels) = (0u64, 0u64);
    for c in all_connections.iter().filter(|c| names.contains(c.info.vhost.as_str())) {
        connections += 1;
        channels += c.channel_count() as u64;
    }
    let confirmed = broker.connections.confirms(|v| names.contains(v));

    w.single("connections", Gauge, "Connections currently open", connections);
    w.single("channels", Gauge, "Channels currently open", channels);
    w.single("consumers", Gauge, "Consumers currently connected", t.consumers);
    w.single("queues", Gauge, "Queues available", t.queues);
    w.single("bindings", Gauge, "Bindings currently configured", t.bindings);
    w.single(
        "queue_messages_ready",
        Gauge,
        "Messages ready to be delivered to consumers",
        t.ready,
    );
    w.single(
        "queue_messages_unacked",
        Gauge,
        "Messages delivered to consumers but not yet acknowledged",
        t.unacked,
    );
    w.single(
        "queue_messages",
        Gauge,
        "Sum of ready and unacknowledged messages - total queue depth",
        t.ready + t.unacked,
    );

    w.single("uptime", Counter, "Server uptime in seconds", node::uptime_secs());
    if let Some((user, system)) = sys.cpu {
        w.single("cpu_system_time_total", Counter, "Total CPU system time", system);
        w.single("cpu_user_time_total", Counter, "Total CPU user time", user);
    }
    let rates = broker.stats.last_duration();
    w.single(
        "stats_collection_duration_seconds_total",
        Gauge,
        "Total time it takes to collect metrics (stats_loop)",
        (rates + sys.took).as_secs_f64(),
    );
    w.single(
        "stats_rates_collection_duration_seconds",
        Gauge,
        "Time it takes to update stats rates (update_stats_rates)",
        rates.as_secs_f64(),
    );
    w.single(
        "stats_system_collection_duration_seconds",
        Gauge,
        "Time it takes to collect system metrics",
        sys.took.as_secs_f64(),
    );
    // Clustered, the leader counts its followers; alone, LavinMQ reports 0.
    let cluster = ClusterStatus::if_clustered().map(|c| (c.role(), c.followers()));
    let connected = cluster
        .as_ref()
        .map_or(0, |(_, followers)| followers.iter().filter(|f| f.connected).count());
    w.single(
        "total_connected_followers",
        Gauge,
        "Amount of follower nodes connected",
        connected,
    );
    if let Some((role, followers)) = cluster {
        write_cluster(&mut w, role, followers);
    }
    w.single(
        "mfile_count",
        Gauge,
        "Number of MFile memory-mapped files",
        crate::store::mmap::open_count(),
    );

    w.single(
        "global_messages_delivered_total",
        Counter,
        // LavinMQ's help text, word for word.
        "Total number of messaged delivered to consumers",
        t.delivered,
    );
    w.single(
        "global_messages_redelivered_total",
        Counter,
        "Total number of messages redelivered to consumers",
        t.redelivered,
    );
    w.single(
        "global_messages_acknowledged_total",
        Counter,
        "Total number of messages acknowledged by consumers",
        t.acked,
    );
    w.single(
        "global_messages_confirmed_total",
        Counter,
        "Total number of messages confirmed to publishers",
        confirmed,
    );
    w.single(
        "global_messages_received_total",
        Counter,
        "Total number of messages published to exchanges",
        t.received,
    );
    w.single(
        "global_messages_routed_total",
        Counter,
        "Total number of messages routed to queues",
        t.routed,
    );
    w.single(
        "queue_messages_published_total",
        Counter,
        "Total number of messages published to queues",
        t.published,
    );
    Rendered {
        text: w.finish(),
        scratch: 0,
    }
}

/// The cluster as this node sees it (clustered only): each connected
/// follower's lag under LavinMQ's name (label `id`, its base-36 node id);
/// whether this node leads, how many followers are connected and in sync, and
/// per follower (label `follower`) its lag and in-sync state.
fn write_cluster(w: &mut TextWriter<'_>, role: Role, mut followers: Vec<FollowerView>) {
    followers.sort_by(|a, b| a.id.cmp(&b.id));
    w.header(
        "follower_lag_in_bytes",
        Gauge,
        "Bytes that hasn't been synchronized with the follower yet",
    );
    for f in followers.iter().filter(|f| f.connected) {
        w.sample("follower_lag_in_bytes", &[("id", &f.id)], f.lag_bytes);
    }
    w.single(
        "cluster_is_leader",
        Gauge,
        "1 if this node is the cluster leader, else 0",
        u64::from(role == Role::Leader),
    );
    w.single(
        "cluster_followers",
        Gauge,
        "Follower nodes connected to the leader",
        followers.iter().filter(|f| f.connected).count(),
    );
    w.single(
        "cluster_in_sync_followers",
        Gauge,
        "Follower nodes in the in-sync replica set",
        followers.iter().filter(|f| f.in_sync).count(),
    );
    w.header(
        "cluster_follower_lag_bytes",
        Gauge,
        "Bytes of the replication stream the follower has not acknowledged",
    );
    for f in &followers {
        w.sample("cluster_follower_lag_bytes", &[("follower", &f.id)], f.lag_bytes);
    }
    w.header(
        "cluster_follower_in_sync",
        Gauge,
        "1 if the follower is in the in-sync replica set, else 0",
    );
    for f in &followers {
        w.sample("cluster_follower_in_sync", &[("follower", &f.id)], u64::from(f.in_sync));
    }
}

/// One metric family whose samples are computed from rows of type `T`.
struct Spec<T> {
    name: &'static str,
    kind: MetricType,
    help: &'static str,
    value: fn(&T) -> u64,
}

impl<T> Spec<T> {
    const fn new(name: &'static str, kind: MetricType, help: &'static str, value: fn(&T) -> u64) -> Self {
        Spec {
            name,
            kind,
            help,
            value,
        }
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

/// A vhost's queues with their figures, read once per scrape.
struct VhostQueues<'a> {
    vhost: &'a VHost,
    queues: Vec<(Arc<Queue>, QueueStats)>,
}

/// Reads every queue's figures, taking each queue's lock once.
fn snapshot_queues(vhosts: &[Arc<VHost>]) -> Vec<VhostQueues<'_>> {
    vhosts
        .iter()
        .map(|v| {
            let mut queues: Vec<_> = v
                .queues()
                .into_iter()
                .map(|q| {
                    let st = q.stats();
                    (q, st)
                })
                .collect();
            queues.sort_by(|a, b| a.0.name.cmp(&b.0.name));
            VhostQueues { vhost: v, queues }
        })
        .collect()
}

/// Writes per-queue families: for each, its header, then one sample per queue.
fn queue_families(w: &mut TextWriter<'_>, snapshot: &[VhostQueues<'_>], specs: &[Spec<QueueStats>]) {
    for spec in specs {
        w.header(spec.name, spec.kind, spec.help);
        for vq in snapshot {
            for (q, st) in &vq.queues {
                w.sample(
                    spec.name,
                    &[("queue", &q.name), ("vhost", &vq.vhost.name)],
                    (spec.value)(st),
                );
            }
        }
    }
}

/// `queue_coarse_metrics` (LavinMQ's names).
const QUEUE_COARSE: [Spec<QueueStats>; 4] = [
    Spec::new(
        "detailed_queue_messages_ready",
        Gauge,
        "Messages ready to be delivered to consumers",
        |st| st.ready,
    ),
    Spec::new(
        "detailed_queue_messages_unacked",
        Gauge,
        "Messages delivered to consumers but not yet acknowledged",
        |st| st.unacked,
    ),
    Spec::new(
        "detailed_queue_messages",
        Gauge,
        "Sum of ready and unacknowledged messages - total queue depth",
        |st| st.ready + st.unacked,
    ),
    Spec::new(
        "detailed_queue_deduplication",
        Counter,
        "Number of deduplicated messages for this queue",
        |st| st.counts.dedup,
    ),
];

/// `queue_consumer_count` (LavinMQ's name).
const QUEUE_CONSUMERS: [Spec<QueueStats>; 1] = [Spec::new(
    "detailed_queue_consumers",
    Gauge,
    "Consumers on a queue",
    |st| st.consumers as u64,
)];

/// `queue_delivery_metrics` (RabbitMQ's names; LavinMQ has no such family).
const QUEUE_DELIVERY: [Spec<QueueStats>; 8] = [
    Spec::new(
        "detailed_queue_messages_published_total",
        Counter,
        "Total number of messages published to a queue",
        |st| st.counts.publish,
    ),
    Spec::new(
        "detailed_queue_messages_delivered_ack_total",
        Counter,
        "Total number of messages delivered to consumers in manual acknowledgement mode",
        |st| st.counts.deliver,
    ),
    Spec::new(
        "detailed_queue_messages_delivered_total",
        Counter,
        "Total number of messages delivered to consumers in automatic acknowledgement mode",
        |st| st.counts.deliver_no_ack,
    ),
    Spec::new(
        "detailed_queue_get_ack_total",
        Counter,
        "Total number of messages fetched with basic.get in manual acknowledgement mode",
        |st| st.counts.get,
    ),
    Spec::new(
        "detailed_queue_get_total",
        Counter,
        "Total number of messages fetched with basic.get in automatic acknowledgement mode",
        |st| st.counts.get_no_ack,
    ),
    Spec::new(
        "detailed_queue_get_empty_total",
        Counter,
        "Total number of times basic.get found the queue empty",
        |st| st.counts.get_empty,
    ),
    Spec::new(
        "detailed_queue_messages_redelivered_total",
        Counter,
        "Total number of messages redelivered to consumers",
        |st| st.counts.redeliver,
    ),
    Spec::new(
        "detailed_queue_messages_acked_total",
        Counter,
        "Total number of messages acknowledged by consumers",
        |st| st.counts.ack,
    ),
];

/// `/metrics/detailed`: the asked-for families over `vhosts`.
fn render_detailed(broker: &Broker, vhosts: &[Arc<VHost>], families: &[Family], prefix: &str) -> Rendered {
    let snapshot = if families.iter().any(|f| f.needs_queues()) {
        snapshot_queues(vhosts)
    } else {
        Vec::new()
    };
    let queue_count: usize = snapshot.iter().map(|v| v.queues.len()).sum();
    // About 100 bytes per per-queue sample, so the text is rarely copied to grow.
    let per_queue: usize = families.iter().map(|f| f.samples_per_queue()).sum();
    let mut w = TextWriter::new(prefix, 1024 + queue_count * 100 * per_queue);
    let names = vhost_names(vhosts);
    let mut scratch = size_of_val(snapshot.as_slice())
        + snapshot
            .iter()
            .map(|vq| size_of_val(vq.queues.as_slice()))
            .sum::<usize>();
    for family in families {
        match family {
            Family::ConnectionChurn => write_churn(&mut w, broker, vhosts, true),
            Family::QueueCoarse => queue_families(&mut w, &snapshot, &QUEUE_COARSE),
            Family::QueueConsumerCount => queue_families(&mut w, &snapshot, &QUEUE_CONSUMERS),
            Family::QueueDelivery => queue_families(&mut w, &snapshot, &QUEUE_DELIVERY),
            Family::Connection => write_connections(&mut w, &connections_in(broker, &names)),
            Family::Channel => scratch += write_channels(&mut w, &connections_in(broker, &names)),
            Family::Exchange => scratch += write_exchanges(&mut w, vhosts),
            Family::VhostMessageStats => write_vhost_stats(&mut w, &snapshot),
        }
    }
    Rendered {
        text: w.finish(),
        scratch,
    }
}

/// Connections and channels opened and closed (broker-wide), and queues
/// declared, created and deleted in `vhosts`; `detailed` (the
/// `connection_churn_metrics` family), names them `detailed_..._total` and
/// adds, as LavinMQ does there, the consumers added and removed.
fn write_churn(w: &mut TextWriter<'_>, broker: &Broker, vhosts: &[Arc<VHost>], detailed: bool) {
    let c = &broker.connections.churn;
    let sum = |f: fn(&VHost) -> u64| vhosts.iter().map(|v| f(v)).sum::<u64>();
    let figures: [(&str, &str, u64); 7] = [
        (
            "connections_opened_total",
            "Total number of connections opened",
            c.connection_created.get(),
        ),
        (
            "connections_closed_total",
            "Total number of connections closed or terminated",
            c.connection_closed.get(),
        ),
        (
            "channels_opened_total",
            "Total number of channels opened",
            c.channel_created.get(),
        ),
        (
            "channels_closed_total",
            "Total number of channels closed",
            c.channel_closed.get(),
        ),
        (
            "queues_declared_total",
            "Total number of queues declared",
            sum(|v| v.churn.queue_declared.get()),
        ),
        (
            "queues_created_total",
            "Total number of queues created",
            sum(|v| v.churn.queue_created.get()),
        ),
        (
            "queues_deleted_total",
            "Total number of queues deleted",
            sum(|v| v.churn.queue_deleted.get()),
        ),
    ];
    let consumers: [(&str, &str, u64); 2] = [
        (
            "consumers_added_total",
            "Total number of consumers added",
            sum(|v| v.churn.consumer_added.get()),
        ),
        (
            "consumers_removed_total",
            "Total number of consumers removed",
            sum(|v| v.churn.consumer_removed.get()),
        ),
    ];
    let (prefix, consumers) = if detailed {
        ("detailed_", &consumers[..])
    } else {
        ("", &consumers[..0])
    };
    for (name, help, value) in figures.iter().chain(consumers) {
        w.single(&format!("{prefix}{name}"), Counter, help, *value);
    }
}

fn write_vhost_stats(w: &mut TextWriter<'_>, snapshot: &[VhostQueues<'_>]) {
    let name = "detailed_vhost_messages_published_total";
    w.header(name, Counter, "Total messages published to a vhost (all protocols)");
    for vq in snapshot {
        let published: u64 = vq.vhost.exchanges().iter().map(|e| e.counters.publish_in.get()).sum();
        w.sample(name, &[("vhost", &vq.vhost.name)], published);
    }
    let name = "detailed_vhost_messages_delivered_total";
    w.header(
        name,
        Counter,
        "Total messages delivered to clients on a vhost (all protocols)",
    );
    for vq in snapshot {
        let delivered: u64 = vq
            .queues
            .iter()
            .map(|(_, st)| st.counts.deliver + st.counts.deliver_no_ack + st.counts.get + st.counts.get_no_ack)
            .sum();
        w.sample(name, &[("vhost", &vq.vhost.name)], delivered);
    }
    let name = "detailed_vhost_queues";
    w.header(name, Gauge, "Number of queues on a vhost");
    for vq in snapshot {
        w.sample(name, &[("vhost", &vq.vhost.name)], vq.queues.len());
    }
}

/// `connection_coarse_metrics` and `connection_metrics` (LavinMQ's names, and
/// RabbitMQ's for the packet counts).
const CONNECTION: [Spec<ConnectionEntry>; 5] = [
    Spec::new(
        "detailed_connection_incoming_bytes_total",
        Counter,
        "Total number of bytes received on a connection",
        |c| c.recv_oct.get(),
    ),
    Spec::new(
        "detailed_connection_outgoing_bytes_total",
        Counter,
        "Total number of bytes sent on a connection",
        |c| c.send_oct.get(),
    ),
    Spec::new(
        "detailed_connection_incoming_packets_total",
        Counter,
        "Total number of socket reads on a connection",
        |c| c.recv_cnt.get(),
    ),
    Spec::new(
        "detailed_connection_outgoing_packets_total",
        Counter,
        "Total number of socket writes on a connection",
        |c| c.send_cnt.get(),
    ),
    // A gauge, as in RabbitMQ: LavinMQ declares it a counter, but it goes down.
    Spec::new("detailed_connection_channels", Gauge, "Channels on a connection", |c| {
        c.channel_count() as u64
    }),
];

fn write_connections(w: &mut TextWriter<'_>, conns: &[Arc<ConnectionEntry>]) {
    for spec in &CONNECTION {
        w.header(spec.name, spec.kind, spec.help);
        for c in conns {
            // LavinMQ (after RabbitMQ) labels connection samples `channel`.
            w.sample(spec.name, &[("channel", &c.name)], (spec.value)(c));
        }
    }
}

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
        r.consumers as u64
    }),
    Spec::new(
        "detailed_messages_unacked",
        Gauge,
        "Delivered but not yet acknowledged messages",
        |r| r.unacked,
    ),
    Spec::new(
        "detailed_channel_prefetch",
        Gauge,
        "Total limit of unacknowledged messages for all consumers on a channel",
        |r| u64::from(r.prefetch),
    ),
];

/// Writes `channel_metrics`; returns the bytes of the rows it wrote from.
fn write_channels(w: &mut TextWriter<'_>, conns: &[Arc<ConnectionEntry>]) -> usize {
    let mut rows = Vec::new();
    for c in conns {
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
    for spec in &CHANNEL {
        w.header(spec.name, spec.kind, spec.help);
        for r in &rows {
            let labels = [
                ("channel", r.name.as_str()),
                ("vhost", &r.conn.info.vhost),
                ("connection", &r.conn.name),
            ];
            w.sample(spec.name, &labels, (spec.value)(r));
        }
    }
    size_of_val(rows.as_slice()) + rows.iter().map(|r| r.name.capacity()).sum::<usize>()
}

/// `exchange_metrics`: LavinMQ's deduplication count, and this broker's
/// message counters.
const EXCHANGE: [Spec<Exchange>; 4] = [
    Spec::new(
        "detailed_exchange_deduplication",
        Counter,
        "Number of deduplicated messages for this exchange",
        |e| e.counters.dedup.get(),
    ),
    Spec::new(
        "detailed_exchange_messages_published_in_total",
        Counter,
        "Total number of messages published to an exchange",
        |e| e.counters.publish_in.get(),
    ),
    Spec::new(
        "detailed_exchange_messages_published_out_total",
        Counter,
        "Total number of messages an exchange routed to at least one queue",
        |e| e.counters.publish_out(),
    ),
    Spec::new(
        "detailed_exchange_messages_unroutable_total",
        Counter,
        "Total number of messages an exchange could not route",
        |e| e.counters.unroutable.get(),
    ),
];

/// Writes `exchange_metrics`; returns the bytes of the list it wrote from.
fn write_exchanges(w: &mut TextWriter<'_>, vhosts: &[Arc<VHost>]) -> usize {
    let mut exchanges = Vec::new();
    for v in vhosts {
        let mut list = v.exchanges();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        exchanges.extend(list.into_iter().map(|e| (v, e)));
    }
    for spec in &EXCHANGE {
        w.header(spec.name, spec.kind, spec.help);
        for (v, e) in &exchanges {
            w.sample(spec.name, &[("exchange", &e.name), ("vhost", &v.name)], (spec.value)(e));
        }
    }
    size_of_val(exchanges.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn params_default_and_select() {
        let p = ScrapeParams::parse(Vec::new()).expect("valid");
        assert_eq!(p.prefix, DEFAULT_PREFIX);
        assert!(p.vhosts.is_empty() && p.families.is_empty());

        let p = ScrapeParams::parse(pairs(&[
            ("prefix", "x"),
            ("prefix", "y"),
            ("vhost", "a"),
            ("vhost", "b"),
            ("family", "queue_coarse_metrics"),
            ("family", "nonsense"),
            ("family", "connection_metrics"),
            ("family", "connection_coarse_metrics"),
            ("family", "queue_coarse_metrics"),
        ]))
        .expect("valid");
        assert_eq!(p.prefix, "x");
        assert_eq!(p.vhosts, ["a", "b"]);
        assert_eq!(p.families, [Family::QueueCoarse, Family::Connection]);
    }

    #[test]
    fn cluster_metrics() {
        let follower = |id: &str, in_sync, connected, lag_bytes| FollowerView {
            id: id.into(),
            addr: "127.0.0.1:1".into(),
            in_sync,
            connected,
            lag_bytes,
        };
        let mut w = TextWriter::new("lavinmq", 0);
        write_cluster(
            &mut w,
            Role::Leader,
            vec![
                follower("zz", false, true, 4096),
                follower("a1", true, true, 0),
                // Gone: LavinMQ lists only connected followers' lag.
                follower("b2", false, false, 10),
            ],
        );
        let text = w.finish();
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            samples,
            [
                "lavinmq_follower_lag_in_bytes{id=\"a1\"} 0",
                "lavinmq_follower_lag_in_bytes{id=\"zz\"} 4096",
                "lavinmq_cluster_is_leader 1",
                "lavinmq_cluster_followers 2",
                "lavinmq_cluster_in_sync_followers 1",
                "lavinmq_cluster_follower_lag_bytes{follower=\"a1\"} 0",
                "lavinmq_cluster_follower_lag_bytes{follower=\"b2\"} 10",
                "lavinmq_cluster_follower_lag_bytes{follower=\"zz\"} 4096",
                "lavinmq_cluster_follower_in_sync{follower=\"a1\"} 1",
                "lavinmq_cluster_follower_in_sync{follower=\"b2\"} 0",
                "lavinmq_cluster_follower_in_sync{follower=\"zz\"} 0",
            ]
        );
        assert!(text.contains("# TYPE lavinmq_cluster_follower_lag_bytes gauge\n"));
        assert!(text.contains(
            "# HELP lavinmq_follower_lag_in_bytes Bytes that hasn't been synchronized with the follower yet\n"
        ));

        let mut w = TextWriter::new("p", 0);
        write_cluster(&mut w, Role::Follower, Vec::new());
        assert!(w.finish().contains("p_cluster_is_leader 0\n"));
    }

    #[test]
    fn bad_prefixes_are_400() {
        for prefix in ["abcdefghijklmnopqrstuvwxyz", "a\nb", "a{b}"] {
            let err = ScrapeParams::parse(pairs(&[("prefix", prefix)])).expect_err("rejected");
            assert_eq!(err.status, StatusCode::BAD_REQUEST);
        }
    }
}
