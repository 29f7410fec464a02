//! Prometheus metrics: `/metrics` and `/metrics/detailed` on the management
//! listener (basic auth, vhost visibility) and on the dedicated metrics
//! listener (no auth), LavinMQ's names, the `prefix`, `vhost` and `family`
//! parameters, and the text exposition format.

use crate::common;

use std::collections::HashSet;

use common::api::{Api, GUEST};
use common::*;
use lapin::options::{BasicAckOptions, BasicQosOptions};
use lavinmq::core::FieldTable;
use lavinmq::core::vhost::QueueOptions;
use lavinmq::server::{Server, StartError};
use reqwest::StatusCode;
use serde_json::json;

const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One sample line of an exposition document.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

impl Sample {
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

fn valid_name(name: &str) -> bool {
    name.starts_with(is_name_start) && name.chars().all(is_name_char)
}

/// Parses a text-format 0.0.4 document strictly enough for these tests: every
/// non-comment line is `name{labels} value` with a float value, and every
/// sample's name was introduced by exactly one `# TYPE` line before it.
fn parse(text: &str) -> Vec<Sample> {
    let mut typed: HashSet<String> = HashSet::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            let mut parts = comment.splitn(3, ' ');
            let kind = parts.next().unwrap_or_default();
            let name = parts.next().unwrap_or_default();
            if kind == "TYPE" {
                assert!(valid_name(name), "bad metric name in {line:?}");
                let ty = parts.next().unwrap_or_default();
                assert!(
                    ["counter", "gauge", "untyped", "summary", "histogram"].contains(&ty),
                    "bad type in {line:?}"
                );
                assert!(typed.insert(name.to_string()), "second TYPE line for {name}");
            } else {
                assert_eq!(kind, "HELP", "unknown comment {line:?}");
            }
            continue;
        }
        assert!(!line.is_empty() && !line.starts_with('#'), "bad line {line:?}");
        let sample = parse_sample(line);
        assert!(typed.contains(&sample.name), "no TYPE before {line:?}");
        samples.push(sample);
    }
    samples
}

fn parse_sample(line: &str) -> Sample {
    let name_end = line.find(['{', ' ']).unwrap_or_else(|| panic!("no value in {line:?}"));
    let name = &line[..name_end];
    assert!(valid_name(name), "bad metric name in {line:?}");
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        loop {
            if let Some((i, '}')) = chars.peek().copied() {
                rest = &after[i + 1..];
                break;
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            assert!(
                valid_name(&key) && !key.contains(':'),
                "bad label name {key:?} in {line:?}"
            );
            assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "unquoted label in {line:?}");
            let mut value = String::new();
            loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c @ ('\\' | '"'))) => value.push(c),
                        other => panic!("bad escape {other:?} in {line:?}"),
                    },
                    Some((_, '"')) => break,
                    Some((_, '\n')) | None => panic!("unterminated label value in {line:?}"),
                    Some((_, c)) => value.push(c),
                }
            }
            labels.push((key, value));
            match chars.next() {
                Some((_, ',')) => {}
                Some((i, '}')) => {
                    rest = &after[i + 1..];
                    break;
                }
                other => panic!("expected ',' or '}}', got {other:?} in {line:?}"),
            }
        }
    }
    let value = rest
        .strip_prefix(' ')
        .unwrap_or_else(|| panic!("no space before the value in {line:?}"));
    let value = match value {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().unwrap_or_else(|_| panic!("bad value in {line:?}")),
    };
    Sample {
        name: name.to_string(),
        labels,
        value,
    }
}

/// Values of `name`'s samples.
fn values(samples: &[Sample], name: &str) -> Vec<f64> {
    samples.iter().filter(|s| s.name == name).map(|s| s.value).collect()
}

/// The single value of an unlabelled metric.
#[track_caller]
fn value(samples: &[Sample], name: &str) -> f64 {
    match values(samples, name).as_slice() {
        [v] => *v,
        other => panic!("expected one sample of {name}, got {other:?}"),
    }
}

/// The value of `name` for queue `queue` in vhost `vhost`.
fn queue_value(samples: &[Sample], name: &str, vhost: &str, queue: &str) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.name == name && s.label("queue") == Some(queue) && s.label("vhost") == Some(vhost))
        .map(|s| s.value)
}

/// Base URL of the dedicated metrics listener.
fn metrics_base(b: &TestBroker) -> String {
    format!(
        "http://{}",
        b.server().metrics_addr().expect("metrics listener enabled")
    )
}

/// Base URL of the management listener.
fn mgmt_base(b: &TestBroker) -> String {
    format!("http://{}", b.server().http_addr())
}

/// GETs `url` (as `auth` when given); returns status, content type and body.
async fn fetch(url: &str, auth: Option<(&str, &str)>) -> (StatusCode, String, String) {
    let mut req = reqwest::Client::new().get(url);
    if let Some((u, p)) = auth {
        req = req.basic_auth(u, Some(p));
    }
    let resp = within("metrics request", req.send()).await.expect("request");
    let status = resp.status();
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = within("metrics body", resp.text()).await.expect("body");
    (status, ctype, body)
}

/// GETs a metrics document, asserting 200 and the exposition content type,
/// and parses it.
async fn scrape(url: &str, auth: Option<(&str, &str)>) -> Vec<Sample> {
    let (status, ctype, body) = fetch(url, auth).await;
    assert_eq!(status, StatusCode::OK, "GET {url}: {body}");
    assert_eq!(ctype, CONTENT_TYPE, "GET {url}");
    parse(&body)
}

/// Declares `name` in `vhost` through the core API (no client round trips).
fn core_declare(b: &TestBroker, vhost: &str, name: &str) {
    let v = b.server().broker.vhost(vhost).expect("vhost exists");
    v.declare_queue(name, &QueueOptions::default(), FieldTable::default(), 0)
        .expect("declare queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_listeners_serve_both_endpoints() {
    let b = start().await;
    for (base, auth) in [(metrics_base(&b), None), (mgmt_base(&b), GUEST)] {
        let overview = scrape(&format!("{base}/metrics"), auth).await;
        assert_eq!(value(&overview, "lavinmq_queues"), 0.0);
        assert_eq!(value(&overview, "lavinmq_connections"), 0.0);
        assert!(value(&overview, "lavinmq_uptime") >= 0.0);
        assert!(value(&overview, "telemetry_scrape_duration_seconds") >= 0.0);
        let identity = overview
            .iter()
            .find(|s| s.name == "lavinmq_identity_info")
            .expect("identity_info");
        assert_eq!(identity.value, 1.0);
        assert_eq!(identity.label("lavinmq_version"), Some(env!("CARGO_PKG_VERSION")));
        assert!(identity.label("lavinmq_cluster").is_some_and(|c| !c.is_empty()));
        for name in [
            "lavinmq_channels",
            "lavinmq_consumers",
            "lavinmq_bindings",
            "lavinmq_queue_messages_ready",
            "lavinmq_queue_messages_unacked",
            "lavinmq_queue_messages",
            "lavinmq_global_messages_delivered_total",
            "lavinmq_global_messages_acknowledged_total",
            "lavinmq_global_messages_redelivered_total",
            "lavinmq_queue_messages_published_total",
            "lavinmq_process_open_tcp_sockets",
        ] {
            value(&overview, name);
        }
        // Unclustered: no follower, and none of the cluster gauges.
        assert_eq!(value(&overview, "lavinmq_total_connected_followers"), 0.0);
        assert!(
            !overview.iter().any(|s| s.name.starts_with("lavinmq_cluster_")),
            "{overview:?}"
        );
        if cfg!(target_os = "linux") {
            assert!(value(&overview, "lavinmq_process_open_fds") > 0.0);
            assert!(value(&overview, "lavinmq_process_resident_memory_bytes") > 0.0);
        }

        let detailed = scrape(&format!("{base}/metrics/detailed?family=exchange_metrics"), auth).await;
        assert!(
            detailed
                .iter()
                .any(|s| s.name == "lavinmq_detailed_exchange_messages_published_in_total"
                    && s.label("exchange") == Some("amq.direct")
                    && s.label("vhost") == Some("/")),
            "{detailed:?}"
        );
    }
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_listener_requires_credentials() {
    let b = start().await;
    let base = mgmt_base(&b);
    for path in ["/metrics", "/metrics/detailed?family=queue_coarse_metrics"] {
        let (status, _, _) = fetch(&format!("{base}{path}"), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        let (status, _, _) = fetch(&format!("{base}{path}"), Some(("guest", "wrong"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        let (status, _, _) = fetch(&format!("{base}{path}"), GUEST).await;
        assert_eq!(status, StatusCode::OK, "{path}");
    }
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_listener_needs_no_credentials_and_serves_only_metrics() {
    let b = start().await;
    let base = metrics_base(&b);
    scrape(&format!("{base}/metrics"), None).await;
    scrape(&format!("{base}/metrics/detailed"), None).await;
    let (status, _, _) = fetch(&format!("{base}/api/overview"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_listener_can_be_disabled() {
    let b = start_with(|c| c.main.metrics_http_port = None).await;
    assert_eq!(b.server().metrics_addr(), None);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_metrics_port_fails_the_start_and_leaves_nothing_behind() {
    let first = start().await;
    let port = first.server().metrics_addr().expect("metrics listener").port();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = first.config.clone();
    config.main.data_dir = dir.path().join("data");
    config.main.control_unix_path = dir.path().join("ctl.sock");
    config.main.metrics_http_port = Some(port);
    match Server::start(&config).await {
        Ok(second) => {
            second.shutdown().await;
            panic!("a second broker bound the same metrics port");
        }
        Err(StartError::Bind { what, addr, .. }) => {
            assert_eq!(what, "metrics");
            assert!(addr.ends_with(&format!(":{port}")), "{addr}");
        }
        Err(e) => panic!("unexpected error: {e}"),
    }
    assert!(!dir.path().join("ctl.sock").exists(), "control socket left behind");
    first.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_replaces_lavinmq_and_is_limited_to_20_characters() {
    let b = start().await;
    let base = metrics_base(&b);
    let samples = scrape(&format!("{base}/metrics?prefix=testing"), None).await;
    assert!(!samples.is_empty());
    for s in &samples {
        assert!(
            s.name.starts_with("testing_") || s.name.starts_with("telemetry_"),
            "{}",
            s.name
        );
    }
    let identity = samples
        .iter()
        .find(|s| s.name == "testing_identity_info")
        .expect("identity");
    assert!(identity.label("testing_version").is_some());
    let detailed = scrape(
        &format!("{base}/metrics/detailed?prefix=testing&family=vhost_message_stats"),
        None,
    )
    .await;
    assert!(detailed.iter().any(|s| s.name == "testing_detailed_vhost_queues"));

    // Exactly 20 characters is fine; 21 is not.
    scrape(&format!("{base}/metrics?prefix=abcdefghijklmnopqrst"), None).await;
    for url in [
        format!("{base}/metrics?prefix=abcdefghijklmnopqrstu"),
        format!("{base}/metrics/detailed?prefix=abcdefghijklmnopqrstuvwxyz&family=queue_coarse_metrics"),
        format!("{}/metrics?prefix=abcdefghijklmnopqrstuvwxyz", mgmt_base(&b)),
    ] {
        let auth = if url.starts_with(&base) { None } else { GUEST };
        let (status, _, body) = fetch(&url, auth).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}");
        assert!(body.contains("Prefix too long"), "{body}");
    }
    // A prefix that would break the format is refused too.
    let (status, _, _) = fetch(&format!("{base}/metrics?prefix=a%0Ab"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhost_parameter_limits_the_figures() {
    let b = start().await;
    let broker = &b.server().broker;
    broker.create_vhost("metrics-a").expect("vhost a");
    broker.create_vhost("metrics-b").expect("vhost b");
    core_declare(&b, "metrics-a", "qa1");
    core_declare(&b, "metrics-a", "qa2");
    core_declare(&b, "metrics-b", "qb");
    let base = metrics_base(&b);

    let all = scrape(&format!("{base}/metrics"), None).await;
    assert_eq!(value(&all, "lavinmq_queues"), 3.0);
    let a = scrape(&format!("{base}/metrics?vhost=metrics-a"), None).await;
    assert_eq!(value(&a, "lavinmq_queues"), 2.0);

    let detailed = format!("{base}/metrics/detailed?family=queue_coarse_metrics");
    let only_b = scrape(&format!("{detailed}&vhost=metrics-b"), None).await;
    let ready: Vec<_> = only_b
        .iter()
        .filter(|s| s.name == "lavinmq_detailed_queue_messages_ready")
        .collect();
    assert_eq!(ready.len(), 1, "{only_b:?}");
    assert_eq!(ready[0].label("queue"), Some("qb"));
    assert_eq!(ready[0].label("vhost"), Some("metrics-b"));

    let both = scrape(&format!("{detailed}&vhost=metrics-a&vhost=metrics-b"), None).await;
    assert_eq!(values(&both, "lavinmq_detailed_queue_messages_ready").len(), 3);
    let none = scrape(&format!("{detailed}&vhost=no-such-vhost"), None).await;
    assert!(values(&none, "lavinmq_detailed_queue_messages_ready").is_empty());

    // The same filter on the management listener.
    let mgmt = scrape(
        &format!(
            "{}/metrics/detailed?family=queue_coarse_metrics&vhost=metrics-a",
            mgmt_base(&b)
        ),
        GUEST,
    )
    .await;
    assert_eq!(values(&mgmt, "lavinmq_detailed_queue_messages_ready").len(), 2);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_users_see_only_their_vhosts() {
    let b = start().await;
    let api = Api::new(&b);
    for vhost in ["seen", "unseen"] {
        assert_eq!(
            api.put(&format!("/api/vhosts/{vhost}"), json!({})).await,
            StatusCode::CREATED
        );
        core_declare(&b, vhost, &format!("q-{vhost}"));
    }
    for (user, tags) in [("manager", "management"), ("watcher", "monitoring")] {
        let body = json!({"password": "secret", "tags": tags});
        assert_eq!(api.put(&format!("/api/users/{user}"), body).await, StatusCode::CREATED);
        let perms = json!({"configure": ".*", "write": ".*", "read": ".*"});
        assert_eq!(
            api.put(&format!("/api/permissions/seen/{user}"), perms).await,
            StatusCode::CREATED
        );
    }
    let url = format!("{}/metrics/detailed?family=queue_coarse_metrics", mgmt_base(&b));

    let manager = scrape(&url, Some(("manager", "secret"))).await;
    let queues: Vec<_> = manager
        .iter()
        .filter(|s| s.name == "lavinmq_detailed_queue_messages_ready")
        .map(|s| {
            (
                s.label("vhost").unwrap_or_default(),
                s.label("queue").unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(queues, [("seen", "q-seen")]);
    // Asking for another vhost does not reveal it.
    let asked = scrape(&format!("{url}&vhost=unseen"), Some(("manager", "secret"))).await;
    assert!(values(&asked, "lavinmq_detailed_queue_messages_ready").is_empty());
    let overview = scrape(&format!("{}/metrics", mgmt_base(&b)), Some(("manager", "secret"))).await;
    assert_eq!(value(&overview, "lavinmq_queues"), 1.0);

    let watcher = scrape(&url, Some(("watcher", "secret"))).await;
    let mut vhosts: Vec<_> = watcher
        .iter()
        .filter(|s| s.name == "lavinmq_detailed_queue_messages_ready")
        .filter_map(|s| s.label("vhost"))
        .collect();
    vhosts.sort_unstable();
    assert_eq!(vhosts, ["seen", "unseen"]);
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_follow_publishing_and_consuming() {
    let b = start().await;
    let base = metrics_base(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("metered");
    declare_queue(&ch, &q).await;
    let detailed = format!("{base}/metrics/detailed?family=queue_coarse_metrics&family=queue_delivery_metrics");
    let before = scrape(&detailed, None).await;
    assert_eq!(
        queue_value(&before, "lavinmq_detailed_queue_messages_ready", "/", &q),
        Some(0.0)
    );

    confirm_select(&ch).await;
    for i in 0..3 {
        publish_confirmed(&ch, "", &q, format!("m{i}").as_bytes()).await;
    }
    let after = scrape(&detailed, None).await;
    assert_eq!(
        queue_value(&after, "lavinmq_detailed_queue_messages_ready", "/", &q),
        Some(3.0)
    );
    assert_eq!(
        queue_value(&after, "lavinmq_detailed_queue_messages", "/", &q),
        Some(3.0)
    );
    assert_eq!(
        queue_value(&after, "lavinmq_detailed_queue_messages_published_total", "/", &q),
        Some(3.0)
    );
    let overview = scrape(&format!("{base}/metrics"), None).await;
    assert_eq!(value(&overview, "lavinmq_queue_messages_ready"), 3.0);
    assert_eq!(value(&overview, "lavinmq_queue_messages_published_total"), 3.0);
    assert!(value(&overview, "lavinmq_global_messages_received_total") >= 3.0);
    assert_eq!(value(&overview, "lavinmq_connections"), 1.0);
    assert_eq!(value(&overview, "lavinmq_channels"), 1.0);

    // Consume all three, acknowledging each.
    ch.basic_qos(10, BasicQosOptions::default()).await.expect("basic.qos");
    let mut consumer = consume(&ch, &q).await;
    for d in deliveries(&mut consumer, 3).await {
        d.ack(BasicAckOptions::default()).await.expect("basic.ack");
    }
    eventually("acks counted", || async {
        let s = scrape(&format!("{base}/metrics"), None).await;
        value(&s, "lavinmq_global_messages_acknowledged_total") == 3.0
    })
    .await;
    let overview = scrape(&format!("{base}/metrics"), None).await;
    assert_eq!(value(&overview, "lavinmq_queue_messages_ready"), 0.0);
    assert_eq!(value(&overview, "lavinmq_queue_messages_unacked"), 0.0);
    assert_eq!(value(&overview, "lavinmq_global_messages_delivered_total"), 3.0);
    assert_eq!(value(&overview, "lavinmq_consumers"), 1.0);
    let detailed = scrape(&detailed, None).await;
    assert_eq!(
        queue_value(
            &detailed,
            "lavinmq_detailed_queue_messages_delivered_ack_total",
            "/",
            &q
        ),
        Some(3.0)
    );
    assert_eq!(
        queue_value(&detailed, "lavinmq_detailed_queue_messages_acked_total", "/", &q),
        Some(3.0)
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn family_parameter_selects_detailed_families() {
    let b = start().await;
    let base = metrics_base(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("fam");
    declare_queue(&ch, &q).await;
    let _consumer = consume(&ch, &q).await;
    let detailed = |query: &str| format!("{base}/metrics/detailed?{query}");

    // No family, or only unknown ones: just the scrape's own telemetry.
    for query in ["", "family=nonsense", "family=family=queue_coarse_metrics"] {
        let s = scrape(&detailed(query), None).await;
        let names: Vec<_> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["telemetry_scrape_duration_seconds", "telemetry_scrape_mem"],
            "{query}"
        );
    }
    // Churn: this test's one connection, one channel and one queue.
    let churn = scrape(&detailed("family=connection_churn_metrics"), None).await;
    assert_eq!(value(&churn, "lavinmq_detailed_connections_opened_total"), 1.0);
    assert_eq!(value(&churn, "lavinmq_detailed_channels_opened_total"), 1.0);
    assert_eq!(value(&churn, "lavinmq_detailed_queues_created_total"), 1.0);
    assert_eq!(value(&churn, "lavinmq_detailed_queues_deleted_total"), 0.0);
    assert_eq!(value(&churn, "lavinmq_detailed_consumers_added_total"), 1.0);
    assert_eq!(value(&churn, "lavinmq_detailed_consumers_removed_total"), 0.0);

    let expect = [
        ("queue_coarse_metrics", "lavinmq_detailed_queue_messages_ready"),
        ("queue_consumer_count", "lavinmq_detailed_queue_consumers"),
        ("queue_delivery_metrics", "lavinmq_detailed_queue_get_empty_total"),
        (
            "connection_coarse_metrics",
            "lavinmq_detailed_connection_incoming_bytes_total",
        ),
        ("connection_metrics", "lavinmq_detailed_connection_outgoing_bytes_total"),
        ("channel_metrics", "lavinmq_detailed_channel_consumers"),
        (
            "exchange_metrics",
            "lavinmq_detailed_exchange_messages_published_out_total",
        ),
        ("vhost_message_stats", "lavinmq_detailed_vhost_messages_published_total"),
    ];
    for (family, metric) in expect {
        let s = scrape(&detailed(&format!("family={family}")), None).await;
        assert!(s.iter().any(|s| s.name == metric), "{family}: {s:?}");
        // Nothing from the other families.
        for (other, other_metric) in expect {
            let same_group = other.starts_with("connection_") && family.starts_with("connection_");
            if other != family && !same_group {
                assert!(!s.iter().any(|s| s.name == other_metric), "{family} has {other_metric}");
            }
        }
    }

    let s = scrape(&detailed("family=queue_consumer_count"), None).await;
    assert_eq!(queue_value(&s, "lavinmq_detailed_queue_consumers", "/", &q), Some(1.0));
    let s = scrape(&detailed("family=channel_metrics"), None).await;
    let channel = s
        .iter()
        .find(|s| s.name == "lavinmq_detailed_channel_consumers")
        .expect("channel sample");
    assert_eq!(channel.value, 1.0);
    assert_eq!(channel.label("vhost"), Some("/"));
    let connection = channel.label("connection").expect("connection label");
    assert_eq!(channel.label("channel"), Some(format!("{connection} (1)").as_str()));
    let s = scrape(&detailed("family=connection_coarse_metrics"), None).await;
    let incoming = s
        .iter()
        .find(|s| s.name == "lavinmq_detailed_connection_incoming_bytes_total")
        .expect("connection sample");
    assert!(incoming.value > 0.0);
    assert_eq!(incoming.label("channel"), Some(connection));

    // Several families at once, each family's header exactly once.
    let s = scrape(
        &detailed("family=queue_coarse_metrics&family=vhost_message_stats&family=queue_coarse_metrics"),
        None,
    )
    .await;
    assert!(s.iter().any(|s| s.name == "lavinmq_detailed_queue_messages_unacked"));
    assert!(
        s.iter()
            .any(|s| s.name == "lavinmq_detailed_vhost_queues" && s.label("vhost") == Some("/"))
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_values_are_escaped() {
    let b = start().await;
    let name = "odd \"quoted\" \\ name\nwith newline";
    core_declare(&b, "/", name);
    let s = scrape(
        &format!("{}/metrics/detailed?family=queue_coarse_metrics", metrics_base(&b)),
        None,
    )
    .await;
    assert_eq!(
        queue_value(&s, "lavinmq_detailed_queue_messages_ready", "/", name),
        Some(0.0)
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scraping_2000_queues_while_amqp_traffic_flows() {
    const QUEUES: usize = 2000;
    const MESSAGES: usize = 300;
    let b = start().await;
    for i in 0..QUEUES {
        core_declare(&b, "/", &format!("bulk-{i:05}"));
    }
    let base = metrics_base(&b);
    let scraper = tokio::spawn({
        let detailed = format!("{base}/metrics/detailed?family=queue_coarse_metrics&family=queue_consumer_count");
        let overview = format!("{base}/metrics");
        async move {
            let mut scrapes = 0;
            for _ in 0..5 {
                let s = scrape(&detailed, None).await;
                let bulk = s
                    .iter()
                    .filter(|s| {
                        s.name == "lavinmq_detailed_queue_messages_ready"
                            && s.label("queue").is_some_and(|q| q.starts_with("bulk-"))
                    })
                    .count();
                assert_eq!(bulk, QUEUES);
                let s = scrape(&overview, None).await;
                assert!(value(&s, "lavinmq_queues") >= QUEUES as f64);
                scrapes += 1;
            }
            scrapes
        }
    });

    let (_conn, ch) = b.channel().await;
    let q = uniq("traffic");
    declare_queue(&ch, &q).await;
    confirm_select(&ch).await;
    let mut consumer = consume(&ch, &q).await;
    for i in 0..MESSAGES {
        publish_confirmed(&ch, "", &q, format!("msg {i}").as_bytes()).await;
    }
    let got = deliveries(&mut consumer, MESSAGES).await;
    for (i, d) in got.iter().enumerate() {
        assert_eq!(d.data, format!("msg {i}").into_bytes());
        d.ack(BasicAckOptions::default()).await.expect("basic.ack");
    }
    let scrapes = within("scrapes", scraper).await.expect("scraper task");
    assert_eq!(scrapes, 5);

    let s = scrape(&format!("{base}/metrics/detailed?family=queue_coarse_metrics"), None).await;
    assert_eq!(values(&s, "lavinmq_detailed_queue_messages_ready").len(), QUEUES + 1);
    b.stop().await;
}

/// The whole text of a metrics document, asserting 200.
async fn document(url: &str, auth: Option<(&str, &str)>) -> String {
    let (status, _, body) = fetch(url, auth).await;
    assert_eq!(status, StatusCode::OK, "GET {url}: {body}");
    parse(&body);
    body
}

/// A metric family: name (without the prefix), type and help text.
type FamilySpec = (&'static str, &'static str, &'static str);

/// LavinMQ 2.9's families on `/metrics` (unclustered; the node figures read
/// from `/proc` only where it exists), as `(name, type, help)`.
const LAVINMQ_OVERVIEW: &[FamilySpec] = &[
    ("identity_info", "gauge", "System information"),
    (
        "connections_opened_total",
        "counter",
        "Total number of connections opened",
    ),
    (
        "connections_closed_total",
        "counter",
        "Total number of connections closed or terminated",
    ),
    ("channels_opened_total", "counter", "Total number of channels opened"),
    ("channels_closed_total", "counter", "Total number of channels closed"),
    ("queues_declared_total", "counter", "Total number of queues declared"),
    ("queues_deleted_total", "counter", "Total number of queues deleted"),
    ("process_open_tcp_sockets", "gauge", "Open TCP sockets"),
    ("disk_space_available_bytes", "gauge", "Disk space available in bytes"),
    ("connections", "gauge", "Connections currently open"),
    ("channels", "gauge", "Channels currently open"),
    ("consumers", "gauge", "Consumers currently connected"),
    ("queues", "gauge", "Queues available"),
    ("bindings", "gauge", "Bindings currently configured"),
    (
        "queue_messages_ready",
        "gauge",
        "Messages ready to be delivered to consumers",
    ),
    (
        "queue_messages_unacked",
        "gauge",
        "Messages delivered to consumers but not yet acknowledged",
    ),
    (
        "queue_messages",
        "gauge",
        "Sum of ready and unacknowledged messages - total queue depth",
    ),
    ("uptime", "counter", "Server uptime in seconds"),
    (
        "stats_collection_duration_seconds_total",
        "gauge",
        "Total time it takes to collect metrics (stats_loop)",
    ),
    (
        "stats_rates_collection_duration_seconds",
        "gauge",
        "Time it takes to update stats rates (update_stats_rates)",
    ),
    (
        "stats_system_collection_duration_seconds",
        "gauge",
        "Time it takes to collect system metrics",
    ),
    (
        "total_connected_followers",
        "gauge",
        "Amount of follower nodes connected",
    ),
    ("mfile_count", "gauge", "Number of MFile memory-mapped files"),
    (
        "global_messages_delivered_total",
        "counter",
        "Total number of messaged delivered to consumers",
    ),
    (
        "global_messages_redelivered_total",
        "counter",
        "Total number of messages redelivered to consumers",
    ),
    (
        "global_messages_acknowledged_total",
        "counter",
        "Total number of messages acknowledged by consumers",
    ),
    (
        "global_messages_confirmed_total",
        "counter",
        "Total number of messages confirmed to publishers",
    ),
];

/// The families LavinMQ reads from `/proc`.
const LAVINMQ_OVERVIEW_PROC: &[FamilySpec] = &[
    ("process_open_fds", "gauge", "Open file descriptors"),
    ("process_resident_memory_bytes", "gauge", "Memory used in bytes"),
    ("process_max_fds", "gauge", "Open file descriptors limit"),
    ("resident_memory_limit_bytes", "gauge", "Memory high watermark in bytes"),
    ("cpu_system_time_total", "counter", "Total CPU system time"),
    ("cpu_user_time_total", "counter", "Total CPU user time"),
];

/// LavinMQ 2.9's families on `/metrics/detailed`, by `family=`.
const LAVINMQ_DETAILED: &[(&str, &[FamilySpec])] = &[
    (
        "connection_churn_metrics",
        &[
            (
                "detailed_connections_opened_total",
                "counter",
                "Total number of connections opened",
            ),
            (
                "detailed_connections_closed_total",
                "counter",
                "Total number of connections closed or terminated",
            ),
            (
                "detailed_channels_opened_total",
                "counter",
                "Total number of channels opened",
            ),
            (
                "detailed_channels_closed_total",
                "counter",
                "Total number of channels closed",
            ),
            (
                "detailed_queues_declared_total",
                "counter",
                "Total number of queues declared",
            ),
            (
                "detailed_queues_deleted_total",
                "counter",
                "Total number of queues deleted",
            ),
            (
                "detailed_consumers_added_total",
                "counter",
                "Total number of consumers added",
            ),
            (
                "detailed_consumers_removed_total",
                "counter",
                "Total number of consumers removed",
            ),
        ],
    ),
    (
        "queue_coarse_metrics",
        &[
            (
                "detailed_queue_messages_ready",
                "gauge",
                "Messages ready to be delivered to consumers",
            ),
            (
                "detailed_queue_messages_unacked",
                "gauge",
                "Messages delivered to consumers but not yet acknowledged",
            ),
            (
                "detailed_queue_messages",
                "gauge",
                "Sum of ready and unacknowledged messages - total queue depth",
            ),
            (
                "detailed_queue_deduplication",
                "counter",
                "Number of deduplicated messages for this queue",
            ),
        ],
    ),
    (
        "queue_consumer_count",
        &[("detailed_queue_consumers", "gauge", "Consumers on a queue")],
    ),
    (
        "connection_coarse_metrics",
        &[
            (
                "detailed_connection_incoming_bytes_total",
                "counter",
                "Total number of bytes received on a connection",
            ),
            (
                "detailed_connection_outgoing_bytes_total",
                "counter",
                "Total number of bytes sent on a connection",
            ),
            // LavinMQ says counter; it is a gauge here (it goes down).
            ("detailed_connection_channels", "gauge", "Channels on a connection"),
        ],
    ),
    (
        "channel_metrics",
        &[
            ("detailed_channel_consumers", "gauge", "Consumers on a channel"),
            (
                "detailed_messages_unacked",
                "gauge",
                "Delivered but not yet acknowledged messages",
            ),
            (
                "detailed_channel_prefetch",
                "gauge",
                "Total limit of unacknowledged messages for all consumers on a channel",
            ),
        ],
    ),
    (
        "exchange_metrics",
        &[(
            "detailed_exchange_deduplication",
            "counter",
            "Number of deduplicated messages for this exchange",
        )],
    ),
    (
        "vhost_message_stats",
        &[
            (
                "detailed_vhost_messages_published_total",
                "counter",
                "Total messages published to a vhost (all protocols)",
            ),
            (
                "detailed_vhost_messages_delivered_total",
                "counter",
                "Total messages delivered to clients on a vhost (all protocols)",
            ),
            ("detailed_vhost_queues", "gauge", "Number of queues on a vhost"),
        ],
    ),
];

/// LavinMQ's scrape telemetry, on both endpoints.
const LAVINMQ_TELEMETRY: &[FamilySpec] = &[
    (
        "scrape_duration_seconds",
        "gauge",
        "Duration for metrics collection in seconds",
    ),
    ("scrape_mem", "gauge", "Memory used for metrics collections in bytes"),
];

/// Asserts that `text` declares each family with its type and help text.
#[track_caller]
fn assert_families(text: &str, prefix: &str, families: &[FamilySpec]) {
    for (name, kind, help) in families {
        let full = format!("{prefix}_{name}");
        assert!(
            text.contains(&format!("# TYPE {full} {kind}\n")),
            "no `# TYPE {full} {kind}` in:\n{text}"
        );
        assert!(
            text.contains(&format!("# HELP {full} {help}\n")),
            "no `# HELP {full} {help}` in:\n{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{full} ")) || l.starts_with(&format!("{full}{{"))),
            "no sample of {full} in:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lavinmq_families_have_lavinmqs_names_types_and_help() {
    let b = start().await;
    let base = metrics_base(&b);
    // Something in every family: a queue with a consumer on an open channel.
    let (_conn, ch) = b.channel().await;
    let q = uniq("families");
    declare_queue(&ch, &q).await;
    let _consumer = consume(&ch, &q).await;

    for prefix in ["lavinmq", "other"] {
        let text = document(&format!("{base}/metrics?prefix={prefix}"), None).await;
        assert_families(&text, prefix, LAVINMQ_OVERVIEW);
        if cfg!(target_os = "linux") {
            assert_families(&text, prefix, LAVINMQ_OVERVIEW_PROC);
        }
        assert_families(&text, "telemetry", LAVINMQ_TELEMETRY);
        // Garbage-collector statistics have no meaning here.
        assert!(!text.contains(&format!("{prefix}_gc_")), "{text}");

        let mut all = String::new();
        for (family, metrics) in LAVINMQ_DETAILED {
            let url = format!("{base}/metrics/detailed?prefix={prefix}&family={family}");
            let text = document(&url, None).await;
            assert_families(&text, prefix, metrics);
            assert_families(&text, "telemetry", LAVINMQ_TELEMETRY);
            all.push_str(&format!("&family={family}"));
        }
        // Every family at once still makes one valid document.
        let text = document(&format!("{base}/metrics/detailed?prefix={prefix}{all}"), None).await;
        for (_, metrics) in LAVINMQ_DETAILED {
            assert_families(&text, prefix, metrics);
        }
    }
    b.stop().await;
}

/// `global_messages_confirmed_total` in `/metrics` (with `query`).
async fn confirmed(base: &str, query: &str) -> f64 {
    let s = scrape(&format!("{base}/metrics{query}"), None).await;
    value(&s, "lavinmq_global_messages_confirmed_total")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publisher_confirms_are_counted_and_outlive_their_channels() {
    let b = start().await;
    let base = metrics_base(&b);
    assert_eq!(confirmed(&base, "").await, 0.0);

    let (conn, ch) = b.channel().await;
    let q = uniq("confirmed");
    declare_queue(&ch, &q).await;
    // Without confirm mode nothing is confirmed.
    publish(&ch, "", &q, b"unconfirmed").await;
    let confirming = conn.create_channel().await.expect("channel");
    confirm_select(&confirming).await;
    for i in 0..3 {
        publish_confirmed(&confirming, "", &q, format!("c{i}").as_bytes()).await;
    }
    // An unroutable message is confirmed too.
    publish_confirmed(&confirming, "", "no-such-queue", b"lost").await;
    assert_eq!(confirmed(&base, "").await, 4.0);
    let channels = value(&scrape(&format!("{base}/metrics"), None).await, "lavinmq_channels");
    assert_eq!(channels, 2.0);

    // A closed channel's and a closed connection's confirms still count.
    confirming.close(200, "bye".into()).await.expect("channel.close");
    assert_eq!(confirmed(&base, "").await, 4.0);
    let (other, other_ch) = b.channel().await;
    confirm_select(&other_ch).await;
    publish_confirmed(&other_ch, "", &q, b"other").await;
    other.close(200, "bye".into()).await.expect("connection.close");
    assert_eq!(confirmed(&base, "").await, 5.0);
    eventually("the connection unlisted", || async {
        value(&scrape(&format!("{base}/metrics"), None).await, "lavinmq_connections") == 1.0
    })
    .await;
    assert_eq!(confirmed(&base, "").await, 5.0);

    // MQTT's PUBACK and PUBREC confirm a publish; QoS 0 has nothing to confirm.
    let mut mqtt = common::mqtt::connect(common::mqtt::options(&b, "metrics-confirms")).await;
    mqtt.publish("metrics/confirms", rumqttc::QoS::AtMostOnce, false, b"0")
        .await;
    mqtt.publish("metrics/confirms", rumqttc::QoS::AtLeastOnce, false, b"1")
        .await;
    mqtt.publish("metrics/confirms", rumqttc::QoS::ExactlyOnce, false, b"2")
        .await;
    assert_eq!(confirmed(&base, "").await, 7.0);
    mqtt.disconnect().await;
    assert_eq!(confirmed(&base, "").await, 7.0);

    // Counted per vhost.
    b.server().broker.create_vhost("metrics-quiet").expect("vhost");
    assert_eq!(confirmed(&base, "?vhost=/").await, 7.0);
    assert_eq!(confirmed(&base, "?vhost=metrics-quiet").await, 0.0);
    drop(conn);
    b.stop().await;
}

/// The `connection_churn_metrics` family.
async fn churn(base: &str) -> Vec<Sample> {
    scrape(
        &format!("{base}/metrics/detailed?family=connection_churn_metrics"),
        None,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_added_and_removed_are_counted() {
    use lapin::options::BasicCancelOptions;
    let b = start().await;
    let base = metrics_base(&b);
    let s = churn(&base).await;
    assert_eq!(value(&s, "lavinmq_detailed_consumers_added_total"), 0.0);
    assert_eq!(value(&s, "lavinmq_detailed_consumers_removed_total"), 0.0);

    let (conn, ch) = b.channel().await;
    let (q1, q2) = (uniq("churn"), uniq("churn"));
    declare_queue(&ch, &q1).await;
    declare_queue(&ch, &q2).await;
    let first = consume(&ch, &q1).await;
    let _second = consume(&ch, &q1).await;
    let _third = consume(&ch, &q2).await;
    let s = churn(&base).await;
    assert_eq!(value(&s, "lavinmq_detailed_consumers_added_total"), 3.0);
    assert_eq!(value(&s, "lavinmq_detailed_consumers_removed_total"), 0.0);

    // A cancel, then a queue deleted under its consumer.
    ch.basic_cancel(first.tag(), BasicCancelOptions::default())
        .await
        .expect("basic.cancel");
    let s = churn(&base).await;
    assert_eq!(value(&s, "lavinmq_detailed_consumers_removed_total"), 1.0);
    ch.queue_delete(q2.as_str().into(), Default::default())
        .await
        .expect("queue.delete");
    let s = churn(&base).await;
    assert_eq!(value(&s, "lavinmq_detailed_consumers_removed_total"), 2.0);

    // A closing connection takes its last consumer with it.
    conn.close(200, "bye".into()).await.expect("connection.close");
    eventually("the last consumer removed", || async {
        value(&churn(&base).await, "lavinmq_detailed_consumers_removed_total") == 3.0
    })
    .await;
    let s = churn(&base).await;
    assert_eq!(value(&s, "lavinmq_detailed_consumers_added_total"), 3.0);
    assert_eq!(value(&s, "lavinmq_detailed_connections_closed_total"), 1.0);
    assert_eq!(value(&s, "lavinmq_detailed_channels_closed_total"), 1.0);
    // The overview has LavinMQ's churn totals, without the consumers.
    let overview = scrape(&format!("{base}/metrics"), None).await;
    assert_eq!(value(&overview, "lavinmq_connections_closed_total"), 1.0);
    assert_eq!(value(&overview, "lavinmq_queues_deleted_total"), 1.0);
    assert!(values(&overview, "lavinmq_consumers_added_total").is_empty());
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deduplicated_messages_are_counted_per_queue_and_exchange() {
    use lapin::BasicProperties;
    use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
    use lapin::types::AMQPValue;

    let b = start().await;
    let base = metrics_base(&b);
    let (_conn, ch) = b.channel().await;
    let dedup = || table(&[("x-message-deduplication", AMQPValue::Boolean(true))]);
    let (q, plain) = (uniq("dedup-q"), uniq("plain-q"));
    ch.queue_declare(q.as_str().into(), QueueDeclareOptions::default(), dedup())
        .await
        .expect("queue.declare");
    declare_queue(&ch, &plain).await;
    let ex = uniq("dedup-ex");
    ch.exchange_declare(
        ex.as_str().into(),
        lapin::ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        dedup(),
    )
    .await
    .expect("exchange.declare");
    ch.queue_bind(
        plain.as_str().into(),
        ex.as_str().into(),
        "".into(),
        QueueBindOptions::default(),
        lapin::types::FieldTable::default(),
    )
    .await
    .expect("queue.bind");

    confirm_select(&ch).await;
    let with_id =
        |id: &str| BasicProperties::default().with_headers(table(&[("x-deduplication-header", long_str(id))]));
    // The queue drops two repeats, the exchange one.
    for id in ["a", "a", "b", "a"] {
        publish_props(&ch, "", &q, b"m", with_id(id)).await;
    }
    for id in ["x", "x", "y"] {
        publish_props(&ch, &ex, "", b"m", with_id(id)).await;
    }
    ch.wait_for_confirms().await.expect("confirms");

    let s = scrape(
        &format!("{base}/metrics/detailed?family=queue_coarse_metrics&family=exchange_metrics"),
        None,
    )
    .await;
    assert_eq!(
        queue_value(&s, "lavinmq_detailed_queue_deduplication", "/", &q),
        Some(2.0)
    );
    assert_eq!(
        queue_value(&s, "lavinmq_detailed_queue_messages_ready", "/", &q),
        Some(2.0)
    );
    assert_eq!(
        queue_value(&s, "lavinmq_detailed_queue_deduplication", "/", &plain),
        Some(0.0)
    );
    let exchange = |name: &str| {
        s.iter()
            .find(|m| {
                m.name == "lavinmq_detailed_exchange_deduplication"
                    && m.label("exchange") == Some(name)
                    && m.label("vhost") == Some("/")
            })
            .map(|m| m.value)
    };
    assert_eq!(exchange(&ex), Some(1.0));
    assert_eq!(exchange("amq.direct"), Some(0.0));
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_maps_and_collection_times_are_reported() {
    let b = start_with(|c| c.main.stats_interval = 50).await;
    let base = metrics_base(&b);
    let (_conn, ch) = b.channel().await;
    let q = uniq("mapped");
    declare_queue(&ch, &q).await;
    confirm_select(&ch).await;
    publish_confirmed(&ch, "", &q, b"on disk").await;
    // The queue's segment (at least) is mapped; other tests' brokers in this
    // process map theirs too, so only a lower bound holds.
    let s = scrape(&format!("{base}/metrics"), None).await;
    assert!(value(&s, "lavinmq_mfile_count") >= 1.0, "{s:?}");

    eventually("the stats loop timed", || async {
        let s = scrape(&format!("{base}/metrics"), None).await;
        value(&s, "lavinmq_stats_rates_collection_duration_seconds") > 0.0
    })
    .await;
    let s = scrape(&format!("{base}/metrics"), None).await;
    let total = value(&s, "lavinmq_stats_collection_duration_seconds_total");
    let rates = value(&s, "lavinmq_stats_rates_collection_duration_seconds");
    let system = value(&s, "lavinmq_stats_system_collection_duration_seconds");
    assert!(rates > 0.0 && rates < 5.0, "{rates}");
    assert!((0.0..5.0).contains(&system), "{system}");
    assert!((total - (rates + system)).abs() < 1e-6, "{total} != {rates} + {system}");
    assert!(value(&s, "telemetry_scrape_mem") > 0.0);
    b.stop().await;
}
