//! Prometheus metrics: `/metrics` and `/metrics/detailed` on the management
//! listener (basic auth, vhost visibility) and on the dedicated metrics
//! listener (no auth), LavinMQ's names, the `prefix`, `vhost` and `family`
//! parameters, and the text exposition format.

mod common;

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
        assert_eq!(names, ["telemetry_scrape_duration_seconds"], "{query}");
    }
    // Churn: this test's one connection, one channel and one queue.
    let churn = scrape(&detailed("family=connection_churn_metrics"), None).await;
    assert_eq!(value(&churn, "lavinmq_detailed_connections_opened_total"), 1.0);
    assert_eq!(value(&churn, "lavinmq_detailed_channels_opened_total"), 1.0);
    assert_eq!(value(&churn, "lavinmq_detailed_queues_created_total"), 1.0);
    assert_eq!(value(&churn, "lavinmq_detailed_queues_deleted_total"), 0.0);

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
