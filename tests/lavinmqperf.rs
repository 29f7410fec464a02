//! Runs the `lavinmqperf` binary against an in-process broker.

use std::process::Stdio;
use std::time::Duration;

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
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.main.data_dir = dir.path().to_path_buf();
    config.amqp.bind = "127.0.0.1".into();
    config.amqp.port = 0;
    config.mgmt.port = 0;
    config.mqtt.port = 0;
    config.main.metrics_http_port = Some(0);
    config.main.control_unix_path = dir.path().join("ctl.sock");
    let server = Server::start(&config).await.expect("server starts");
    Broker { server, _dir: dir }
}

impl Broker {
    fn uri(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}", self.server.amqp_addr().port())
    }
}

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
    let child = Command::new(env!("CARGO_BIN_EXE_lavinmqperf"))
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
