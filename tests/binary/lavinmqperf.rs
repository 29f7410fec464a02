//! Runs the `lavinmqperf` binary against an in-process broker.

// Only the certificate helpers of the TLS tests (for `mqtts://`).
use crate::tls_support::pki;

use std::process::Stdio;
use std::time::Duration;

use lapin::options::{BasicGetOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lavinmq::config::Config;
use lavinmq::server::Server;
use tokio::process::Command;

/// Longest any single lavinmqperf run may take before the test fails.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);

struct Broker {
    server: Server,
    _dir: tempfile::TempDir,
}

async fn start_broker() -> Broker {
    start_broker_with(|_, _| {}).await
}

async fn start_broker_with(tweak: impl FnOnce(&mut Config, &std::path::Path)) -> Broker {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.main.data_dir = dir.path().to_path_buf();
    config.amqp.bind = "127.0.0.1".into();
    config.amqp.port = 0;
    config.mgmt.port = 0;
    config.mqtt.port = 0;
    config.stream.port = Some(0);
    config.main.metrics_http_port = Some(0);
    config.main.control_unix_path = dir.path().join("ctl.sock");
    tweak(&mut config, dir.path());
    let server = Server::start(&config).await.expect("server starts");
    Broker { server, _dir: dir }
}

impl Broker {
    fn uri(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}", self.server.amqp_addr().port())
    }
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The summary object printed with `-j`.
    fn json(&self) -> serde_json::Value {
        let line = self
            .stdout
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("no JSON summary in {:?} (stderr {:?})", self.stdout, self.stderr));
        serde_json::from_str(line).expect("summary is JSON")
    }
}

async fn perf(args: &[&str]) -> Run {
    let child = Command::new(crate::process::PERF)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn lavinmqperf");
    let out = tokio::time::timeout(RUN_TIMEOUT, child.wait_with_output())
        .await
        .expect("lavinmqperf finishes")
        .expect("lavinmqperf output");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs an MQTT mode `line` (split at whitespace) against `uri`.
async fn perf_at_mqtt(uri: &str, line: &str) -> Run {
    let mut args: Vec<&str> = line.split_whitespace().collect();
    args.extend(["-u", uri]);
    perf(&args).await
}

/// Runs `line` (split at whitespace) against `uri`.
async fn perf_at(uri: &str, line: &str) -> Run {
    let mut args: Vec<&str> = line.split_whitespace().collect();
    args.extend(["--uri", uri]);
    perf(&args).await
}

fn assert_ok(run: &Run) {
    assert_eq!(run.code, Some(0), "stdout {:?} stderr {:?}", run.stdout, run.stderr);
}

/// Messages consumed in a run, from its JSON summary.
fn consumed(json: &serde_json::Value) -> f64 {
    (json["avg_consume_rate"].as_f64().unwrap() * json["elapsed_seconds"].as_f64().unwrap()).round()
}

/// Messages ready in `queue`, by a passive declare.
async fn ready(uri: &str, queue: &str) -> u32 {
    let conn = lapin::Connection::connect(uri, lapin::ConnectionProperties::default())
        .await
        .expect("connect");
    let ch = conn.create_channel().await.expect("channel");
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let q = ch
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
        .expect("queue exists");
    let _ = conn.close(200, "bye".into()).await;
    q.message_count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_run_reports_json() {
    let broker = start_broker().await;
    let uri = broker.uri();
    let run = perf(&["throughput", "-z", "2", "-j", "--uri", &uri]).await;
    assert_ok(&run);
    let json = run.json();
    assert!(json["elapsed_seconds"].as_f64().unwrap() > 0.0, "{json}");
    assert!(json["avg_pub_rate"].as_u64().unwrap() > 0, "{json}");
    assert!(json["avg_consume_rate"].as_u64().unwrap() > 0, "{json}");
    assert!(run.stdout.contains("Publish rate: "), "{}", run.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counted_run_with_confirms_finishes() {
    let broker = start_broker().await;
    let uri = broker.uri();
    let run = perf_at(&uri, "amqp throughput -C 1000 -D 1000 -c 100 -a 10 -j -q").await;
    assert_ok(&run);
    assert!(run.json()["avg_consume_rate"].as_u64().unwrap() > 0, "{}", run.stdout);
    assert!(!run.stdout.contains("Publish rate: "), "quiet: {}", run.stdout);

    // Several publishers and consumers share the limits; idle consumers stop too.
    let run = perf_at(
        &uri,
        "throughput -x 2 -y 3 -C 3000 -D 3000 -c 100 -u shared-limits -j -q",
    )
    .await;
    assert_ok(&run);
    let json = run.json();
    let elapsed = json["elapsed_seconds"].as_f64().unwrap();
    let consumed = (json["avg_consume_rate"].as_f64().unwrap() * elapsed).round();
    assert!((2990.0..=3010.0).contains(&consumed), "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_transactions_and_server_named_queue() {
    let broker = start_broker().await;
    let uri = broker.uri();
    // `--queue=`: a server-named queue.
    let run = perf_at(&uri, "throughput -C 500 -D 500 -t 50 -l --queue= -j").await;
    assert_ok(&run);
    let json = run.json();
    assert_eq!(json["latency_count"].as_u64(), Some(500), "{json}");
    assert!(json["latency_p99_ms"].as_f64().unwrap() >= json["latency_min_ms"].as_f64().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_exit_non_zero() {
    let broker = start_broker().await;
    let uri = broker.uri();
    let run = perf(&["throughput", "-z", "2", "-e", "no-such-exchange", "--uri", &uri]).await;
    assert_eq!(run.code, Some(1), "{run:?}", run = run.stdout);
    assert!(run.stderr.contains("404"), "{}", run.stderr);

    let bad = uri.replace("guest:guest", "guest:wrong");
    let run = perf(&["throughput", "-z", "2", "--uri", &bad]).await;
    assert_eq!(run.code, Some(1), "{}", run.stdout);
    assert!(run.stderr.contains("ACCESS_REFUSED"), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_pattern_spreads_clients_over_queues() {
    let broker = start_broker().await;
    let uri = broker.uri();
    let line =
        "throughput -x 4 -y 4 --queue-pattern pq-% --queue-pattern-from 1 --queue-pattern-to 3 -C 900 -D 900 -j -q";
    let run = perf_at(&uri, line).await;
    assert_ok(&run);
    let json = run.json();
    let consumed = (json["avg_consume_rate"].as_f64().unwrap() * json["elapsed_seconds"].as_f64().unwrap()).round();
    assert!((890.0..=910.0).contains(&consumed), "{json}");
    let vhost = broker.server.broker.vhost("/").expect("default vhost");
    for name in ["pq-1", "pq-2", "pq-3"] {
        assert!(vhost.queue(name).is_some(), "{name} declared");
    }
    assert!(vhost.queue("pq-4").is_none(), "the range ends at 3");
    assert!(vhost.queue("perf-test").is_none(), "the pattern replaces --queue");
}

/// With fewer publishers than queues, each publisher takes turns over its
/// share of the pattern's queues, so that every queue gets messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fewer_publishers_than_queues_publish_to_every_queue() {
    let broker = start_broker().await;
    let line = "throughput -x 1 -y 3 --queue-pattern rq-% --queue-pattern-to 3 -C 900 -D 900 -j -q";
    let run = perf_at(&broker.uri(), line).await;
    assert_ok(&run);
    let vhost = broker.server.broker.vhost("/").expect("default vhost");
    for name in ["rq-1", "rq-2", "rq-3"] {
        let published = vhost.queue(name).expect("declared").stats().counts.publish;
        assert_eq!(published, 300, "{name}");
    }
}

#[tokio::test]
async fn unknown_mqtt_modes_exit_2() {
    let run = perf(&["mqtt", "bind-churn"]).await;
    assert_eq!(run.code, Some(2));
    assert!(run.stderr.contains("Unknown MQTT mode"), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_throughput_counts_both_qos() {
    let broker = start_broker().await;
    let uri = format!("mqtt://guest:guest@127.0.0.1:{}", broker.server.mqtt_addr().port());
    // Clean sessions and a topic per run: a persistent session left behind
    // would keep receiving the next run's messages.
    let run = perf(&[
        "mqtt",
        "throughput",
        "-u",
        &uri,
        "-z",
        "2",
        "-j",
        "--clean-session",
        "-t",
        "timed",
    ])
    .await;
    assert_ok(&run);
    let json = run.json();
    assert!(json["avg_pub_rate"].as_u64().unwrap() > 0, "{json}");
    assert!(json["avg_consume_rate"].as_u64().unwrap() > 0, "{json}");
    assert!(run.stdout.contains("Publish rate: "), "{}", run.stdout);

    // QoS 1 with counted messages: every publish is acknowledged and consumed.
    let line = "mqtt throughput --qos 1 -C 2000 -D 2000 -j -q -t counted";
    let run = perf_at_mqtt(&uri, line).await;
    assert_ok(&run);
    let json = run.json();
    let consumed = (json["avg_consume_rate"].as_f64().unwrap() * json["elapsed_seconds"].as_f64().unwrap()).round();
    assert!((1990.0..=2010.0).contains(&consumed), "{json}");
    assert!(!run.stderr.contains("timed out"), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp1_throughput_moves_settled_and_unsettled_messages() {
    let broker = start_broker().await;
    let uri = broker.uri();
    // Unsettled, counted: every transfer is accepted and received, and the
    // queue is left empty.
    let run = perf_at(&uri, "amqp1 throughput -C 3000 -D 3000 -j -q -u perf-amqp1").await;
    assert_ok(&run);
    assert!((2990.0..=3010.0).contains(&consumed(&run.json())), "{}", run.stdout);
    assert!(!run.stderr.contains("timed out"), "{}", run.stderr);
    assert_eq!(ready(&uri, "perf-amqp1").await, 0);
    // Pre-settled, timed, with RabbitMQ 3's addresses and durable messages.
    let line = "amqp1 throughput --settled -p --address-version 1 -z 1 -j -u perf-amqp1-v1";
    let run = perf_at(&uri, line).await;
    assert_ok(&run);
    let json = run.json();
    assert!(json["avg_pub_rate"].as_u64().unwrap() > 0, "{json}");
    assert!(json["avg_consume_rate"].as_u64().unwrap() > 0, "{json}");
    // A bad address version is refused before connecting.
    let run = perf_at(&uri, "amqp1 throughput --address-version 3 -z 1").await;
    assert_eq!(run.code, Some(2), "{:?}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_count_opens_connections() {
    let broker = start_broker().await;
    let uri = broker.uri();
    // stdin is empty, so it stops after the first round.
    let run = perf(&["connection-count", "-x", "5", "-c", "2", "-C", "1", "--uri", &uri]).await;
    assert_ok(&run);
    assert!(
        run.stdout.contains("5 connections 10 channels 10 consumers"),
        "{}",
        run.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_churn_reports_both_cases() {
    let broker = start_broker().await;
    let uri = broker.uri();
    let run = perf(&["queue-churn", "-z", "1", "--uri", &uri]).await;
    assert_ok(&run);
    assert!(run.stdout.contains("create/delete transient queue"), "{}", run.stdout);
    assert!(run.stdout.contains("create/delete durable queue"), "{}", run.stdout);
}

/// The count of the `Summary: N <things> in ...` line.
fn summary_count(run: &Run, things: &str) -> u64 {
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("Summary: "))
        .unwrap_or_else(|| panic!("no summary in {:?} (stderr {:?})", run.stdout, run.stderr));
    let mut words = line.split_whitespace().skip(1);
    let n = words
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert_eq!(words.next(), Some(things), "{line}");
    n
}

/// Runs a churn mode for one second and checks its rate lines and summary.
async fn churn(mode: &str, things: &str) {
    churn_with(mode, &[], things).await;
}

async fn churn_with(mode: &str, extra: &[&str], things: &str) {
    let broker = start_broker().await;
    let uri = broker.uri();
    let mut args = vec![mode, "-z", "1", "--uri", &uri];
    args.extend_from_slice(extra);
    let run = perf(&args).await;
    assert_ok(&run);
    assert!(summary_count(&run, things) > 0, "{}", run.stdout);
    let rate = run
        .stdout
        .lines()
        .find_map(|l| l.strip_suffix(&format!(" {things}/s")))
        .unwrap_or_else(|| panic!("no rate line in {}", run.stdout));
    assert!(rate.parse::<u64>().unwrap() > 0, "{}", run.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_churn_binds() {
    churn("bind-churn", "bindings").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_churn_binds_a_durable_queue() {
    churn_with("bind-churn", &["--durable"], "bindings").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_churn_binds_and_unbinds() {
    churn_with("bind-churn", &["--durable", "--unbind"], "bindings").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_churn_opens_channels() {
    churn("channel-churn", "channels").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_churn_opens_connections() {
    churn("connection-churn", "connections").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_churn_consumes() {
    churn("consumer-churn", "consumers").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_count_declares_queues() {
    let broker = start_broker().await;
    let uri = broker.uri();
    let run = perf_at(&uri, "queue-count -q 50 -z 1").await;
    assert_ok(&run);
    assert_eq!(summary_count(&run, "queues"), 50, "{}", run.stdout);
    assert!(run.stdout.contains("50 queues declared"), "{}", run.stdout);

    // Durable, no-wait, with arguments.
    let run = perf_at(&uri, r#"queue-count -q 20 -D -n --arguments {"x-max-length":10} -z 1"#).await;
    assert_ok(&run);
    assert_eq!(summary_count(&run, "queues"), 20, "{}", run.stdout);

    let run = perf_at(&uri, "queue-count --arguments [1] -z 1").await;
    assert_eq!(run.code, Some(2), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_checks_bodies() {
    let broker = start_broker().await;
    let uri = broker.uri();
    // Fixed bodies, random bodies, and random bodies with latency timestamps.
    for (i, extra) in ["", "--random-bodies -s 5000", "--random-bodies -l -s 100"]
        .iter()
        .enumerate()
    {
        let line = format!("throughput -V -C 2000 -D 2000 -a 50 -j -q -u verify-{i} {extra}");
        let run = perf_at(&uri, &line).await;
        assert_ok(&run);
        let json = run.json();
        assert!(json["avg_pub_rate"].as_u64().unwrap() > 0, "{extra}: {json}");
        assert_eq!(json["verified"].as_u64(), Some(2000), "{extra}: {json}");
        assert_eq!(json["verify_failures"].as_u64(), Some(0), "{extra}: {json}");
    }
    // Without -V the summary says nothing about verification.
    let run = perf_at(&uri, "throughput -C 10 -D 10 -j -q -u unverified").await;
    assert_ok(&run);
    assert!(run.json().get("verified").is_none(), "{}", run.stdout);

    // 20-byte messages waiting in a queue are not the 16-byte ones a
    // verifying consumer expects.
    let run = perf_at(&uri, "throughput -y 0 -C 10 -s 20 -u mismatched -q").await;
    assert_ok(&run);
    let run = perf_at(&uri, "throughput -x 0 -D 10 -V -j -q -u mismatched").await;
    assert_eq!(run.code, Some(1), "{run:?}");
    let json = run.json();
    assert_eq!(json["verify_failures"].as_u64(), Some(10), "{json}");
    assert_eq!(json["verified"].as_u64(), Some(0), "{json}");
    assert!(run.stderr.contains("Verification failed: 10 of 10"), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_and_ack_transactions() {
    let broker = start_broker().await;
    let uri = broker.uri();
    // basic.get with no-ack, then with acks in transactions.
    for (queue, extra) in [("polled", ""), ("polled-tx", "-a 1 -T 10")] {
        let line = format!("throughput -g -V -C 1000 -D 1000 -j -q -u {queue} {extra}");
        let run = perf_at(&uri, &line).await;
        assert_ok(&run);
        let json = run.json();
        assert!(json["avg_pub_rate"].as_u64().unwrap() > 0, "{json}");
        assert_eq!(consumed(&json), 1000.0, "{json}");
        assert_eq!(json["verify_failures"].as_u64(), Some(0), "{json}");
        assert_eq!(ready(&uri, queue).await, 0, "{queue}: every message acked");
    }
    // basic.consume with acks committed every 7 messages (the last
    // transaction is committed at the end), and -T alone (acks every message).
    for (queue, extra) in [("tx-acks", "-a 3 -T 7"), ("tx-only", "-T 100")] {
        let line = format!("throughput -C 2000 -D 2000 -j -q -u {queue} {extra}");
        let run = perf_at(&uri, &line).await;
        assert_ok(&run);
        let json = run.json();
        assert_eq!(consumed(&json), 2000.0, "{json}");
        assert!(!run.stderr.contains("not committed"), "{}", run.stderr);
        assert_eq!(ready(&uri, queue).await, 0, "{queue}: acks committed");
    }
    // Publishing in transactions (-t) together with acking in them.
    let run = perf_at(&uri, "throughput -z 1 -t 10 -a 5 --ack-tx 20 -j -u tx-both").await;
    assert_ok(&run);
    let json = run.json();
    assert!(json["avg_pub_rate"].as_u64().unwrap() > 0, "{json}");
    assert!(json["avg_consume_rate"].as_u64().unwrap() > 0, "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn properties_are_published() {
    let broker = start_broker().await;
    let uri = broker.uri();
    let props = r#"{"content_type":"text/plain","content_encoding":"utf-8","headers":{"h":"v","n":5},
        "priority":4,"correlation_id":"corr","reply_to":"replies","expiration":"600000","message_id":"mid",
        "timestamp":1700000000,"type":"perf","user_id":"guest","app_id":"lavinmqperf"}"#;
    let mut args: Vec<&str> = "throughput -y 0 -C 20 -u props -p --random-bodies -s 64 -q -j"
        .split_whitespace()
        .collect();
    args.extend(["--properties", props, "--uri", &uri]);
    let run = perf(&args).await;
    assert_ok(&run);
    assert!(run.json()["avg_pub_rate"].as_u64().unwrap() > 0, "{}", run.stdout);

    let conn = lapin::Connection::connect(&uri, lapin::ConnectionProperties::default())
        .await
        .expect("connect");
    let ch = conn.create_channel().await.expect("channel");
    let mut bodies = Vec::new();
    while let Some(m) = ch
        .basic_get("props".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        let p = &m.delivery.properties;
        let s = |v: &Option<lapin::types::ShortString>| v.as_ref().map(|x| x.as_str().to_owned());
        assert_eq!(s(p.content_type()).as_deref(), Some("text/plain"));
        assert_eq!(s(p.content_encoding()).as_deref(), Some("utf-8"));
        assert_eq!(p.delivery_mode(), &Some(2), "-p on top of --properties");
        assert_eq!(p.priority(), &Some(4));
        assert_eq!(s(p.correlation_id()).as_deref(), Some("corr"));
        assert_eq!(s(p.reply_to()).as_deref(), Some("replies"));
        assert_eq!(s(p.expiration()).as_deref(), Some("600000"));
        assert_eq!(s(p.message_id()).as_deref(), Some("mid"));
        assert_eq!(p.timestamp(), &Some(1_700_000_000));
        assert_eq!(s(p.kind()).as_deref(), Some("perf"));
        assert_eq!(s(p.user_id()).as_deref(), Some("guest"));
        assert_eq!(s(p.app_id()).as_deref(), Some("lavinmqperf"));
        let headers = p.headers().as_ref().expect("headers");
        assert!(
            headers.inner().contains_key("h") && headers.inner().contains_key("n"),
            "{headers:?}"
        );
        assert_eq!(m.delivery.data.len(), 64);
        bodies.push(m.delivery.data);
    }
    assert_eq!(bodies.len(), 20);
    bodies.sort();
    bodies.dedup();
    assert!(bodies.len() > 1, "random bodies differ");

    let run = perf_at(&uri, r#"throughput -C 1 --properties {"priority":"high"}"#).await;
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(run.stderr.contains("priority"), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_verify_and_random_bodies() {
    let broker = start_broker().await;
    let uri = format!("mqtt://guest:guest@127.0.0.1:{}", broker.server.mqtt_addr().port());
    for extra in ["", "--random-bodies -s 300"] {
        let line = format!("mqtt throughput --qos 1 -V -C 1000 -D 1000 -j -q --clean-session -t verify {extra}");
        let run = perf_at_mqtt(&uri, &line).await;
        assert_ok(&run);
        let json = run.json();
        assert_eq!(json["total_published"].as_u64(), Some(1000), "{json}");
        assert_eq!(json["total_consumed"].as_u64(), Some(1000), "{json}");
        assert_eq!(json["verified"].as_u64(), Some(1000), "{json}");
        assert_eq!(json["verify_failures"].as_u64(), Some(0), "{json}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_throughput_over_mqtts() {
    let ca = pki::Ca::new("lavinmqperf test CA");
    let mut ca_path = None;
    let broker = start_broker_with(|c, dir| {
        ca_path = Some(ca.write(dir, "ca.pem"));
        let (cert, key) = ca.server("localhost", &["localhost", "127.0.0.1"]).write(dir, "server");
        c.main.tls_cert = Some(cert);
        c.main.tls_key = Some(key);
        c.mqtt.tls_port = Some(0);
        c.amqp.tls_port = None;
        c.mgmt.tls_port = None;
    })
    .await;
    let ca_path = ca_path.unwrap();
    let port = broker.server.mqtts_addr().expect("MQTTS is bound").port();
    let verified = format!("mqtts://guest:guest@localhost:{port}?cacertfile={}", ca_path.display());
    let unverified = format!("mqtts://guest:guest@127.0.0.1:{port}?verify=none");
    for (topic, uri) in [("tls-verified", &verified), ("tls-unverified", &unverified)] {
        let line = format!("mqtt throughput --qos 1 -V -C 500 -D 500 -j -q --clean-session -t {topic}");
        let run = perf_at_mqtt(uri, &line).await;
        assert_ok(&run);
        let json = run.json();
        assert!(json["avg_consume_rate"].as_u64().unwrap() > 0, "{json}");
        assert_eq!(json["verified"].as_u64(), Some(500), "{json}");
    }
    let run = perf_at_mqtt(&unverified, "mqtt throughput -z 1 -j --clean-session -t tls-timed").await;
    assert_ok(&run);
    assert!(run.json()["avg_pub_rate"].as_u64().unwrap() > 0, "{}", run.stdout);

    // Verification is on by default: another CA's certificate is refused.
    let other = pki::Ca::new("Other CA").write(ca_path.parent().unwrap(), "other-ca.pem");
    let uri = format!("mqtts://guest:guest@localhost:{port}?cacertfile={}", other.display());
    let run = perf_at_mqtt(&uri, "mqtt throughput -C 10 -D 10 -q").await;
    assert_ne!(run.code, Some(0), "{run:?}");
    assert!(run.stderr.contains("certificate"), "{}", run.stderr);
}
