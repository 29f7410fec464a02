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
//! `queue_messages_published_total`, the `queue_delivery_metrics` and
//! `stream_consumer_metrics` families, the connection packet counts), and the extra counters get names in the same
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
//! How a scrape is built: on a blocking thread, so that it never stalls the
//! runtime, and holding no lock across an `.await`. The node-wide families
//! come from `prometheus` collectors ([`overview`], [`churn`], [`cluster`]),
//! registered in a registry made for the scrape (its prefix and vhosts are
//! the request's), which read the broker's counters when gathered and are
//! encoded by the crate's `TextEncoder`. The per-object families ([`queues`],
//! [`connections`], [`exchanges`], [`streams`]) are written from the same kind of family
//! table ([`spec::Spec`]) by a hand-written encoder ([`text`], which says why
//! and what it saves), taking each queue's lock once, briefly.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus::proto::MetricType;
use prometheus::{Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::HttpState;
use super::auth::Authed;
use super::error::{ApiError, ApiResult};
use crate::cluster::status::ClusterStatus;
use crate::core::broker::Broker;
use crate::core::vhost::VHost;
use churn::ChurnCollector;
use cluster::ClusterCollector;
use connections::{write_channels, write_connections};
use exchanges::write_exchanges;
use overview::OverviewCollector;
use params::{CONTENT_TYPE, Family, ScrapeParams};
use queues::write_queue_families;
use spec::{Spec, descs, heap_bytes, single_families};
use streams::write_stream_consumers;
use text::TextWriter;

mod churn;
mod cluster;
mod connections;
mod exchanges;
mod overview;
mod params;
mod queues;
mod spec;
mod streams;
mod text;

/// Which document a scrape produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    /// `/metrics`.
    Overview,
    /// `/metrics/detailed`.
    Detailed,
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
    let failed = |reason: String| {
        tracing::error!("metrics collection failed: {reason}");
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            error: "internal_error",
            reason: format!("metrics collection failed: {reason}"),
        }
    };
    let body = tokio::task::spawn_blocking(move || render(broker, vhosts, &params, endpoint))
        .await
        .map_err(|e| failed(e.to_string()))?
        .map_err(|e| failed(e.to_string()))?;
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response())
}

/// Registers the collectors of `endpoint` for one scrape, gathers and
/// encodes them, writes the per-object families asked for by hand (see
/// [`text`] for why), then LavinMQ's two figures on the scrape itself.
fn render(
    broker: Arc<Broker>,
    vhosts: Vec<Arc<VHost>>,
    params: &ScrapeParams,
    endpoint: Endpoint,
) -> prometheus::Result<String> {
    let started = Instant::now();
    let prefix = params.prefix.as_str();
    let registry = Registry::new();
    let detailed = endpoint == Endpoint::Detailed;
    if !detailed {
        registry.register(Box::new(OverviewCollector::new(
            broker.clone(),
            vhosts.clone(),
            prefix,
        )?))?;
        if let Some(status) = ClusterStatus::if_clustered() {
            registry.register(Box::new(ClusterCollector::new(status, prefix)?))?;
        }
    }
    if !detailed || params.families.contains(&Family::ConnectionChurn) {
        registry.register(Box::new(ChurnCollector::new(
            broker.clone(),
            vhosts.clone(),
            prefix,
            detailed,
        )?))?;
    }
    let families = registry.gather();
    let mut text = String::with_capacity(16 * 1024);
    let encoder = TextEncoder::new();
    encoder.encode_utf8(&families, &mut text)?;
    let mut scratch = heap_bytes(&families);
    drop(families);

    if detailed {
        let mut w = TextWriter::new(prefix, text);
        scratch += write_queue_families(&mut w, &vhosts, &params.families);
        for family in &params.families {
            match family {
                Family::Connection => write_connections(&mut w, &broker, &vhosts),
                Family::Channel => scratch += write_channels(&mut w, &broker, &vhosts),
                Family::Exchange => scratch += write_exchanges(&mut w, &vhosts),
                Family::StreamConsumer => write_stream_consumers(&mut w, &broker, &vhosts),
                // Above: the churn collector, and one read of the queues.
                Family::ConnectionChurn
                | Family::QueueCoarse
                | Family::QueueConsumerCount
                | Family::QueueDelivery
                | Family::VhostMessageStats => {}
            }
        }
        text = w.finish();
    }

    // LavinMQ reports the scrape's own cost under a fixed prefix.
    let telemetry = Telemetry {
        took: started.elapsed(),
        bytes: text.capacity() + scratch,
    };
    let descs = descs("telemetry", &TELEMETRY, &[])?;
    encoder.encode_utf8(&single_families(&TELEMETRY, &descs, &telemetry), &mut text)?;
    Ok(text)
}

/// What a scrape cost itself.
struct Telemetry {
    took: std::time::Duration,
    /// The document's and its snapshots' bytes.
    bytes: usize,
}

/// LavinMQ's figures on the scrape itself (prefix `telemetry`, whatever the
/// scrape's).
const TELEMETRY: [Spec<Telemetry>; 2] = [
    Spec::new(
        "scrape_duration_seconds",
        MetricType::GAUGE,
        "Duration for metrics collection in seconds",
        |t| Some(t.took.as_secs_f64()),
    ),
    Spec::new(
        "scrape_mem",
        MetricType::GAUGE,
        "Memory used for metrics collections in bytes",
        |t| Some(t.bytes as f64),
    ),
];
