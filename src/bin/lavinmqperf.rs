//! `lavinmqperf`: AMQP 0-9-1 load generator, built on the broker's own codec
//! so that the tool is never the bottleneck. Works against LavinMQ and
//! RabbitMQ alike.
//!
//! ```text
//! lavinmqperf [amqp] throughput [flags]
//! lavinmqperf amqp1 throughput [flags]
//! lavinmqperf mqtt throughput [flags]
//! lavinmqperf stream throughput [flags]
//! ```

// A binary's root file resolves `mod` paths like a `mod.rs`, so point at
// the modules under `src/bin/lavinmqperf/` explicitly.
#[path = "lavinmqperf/amqp1_throughput.rs"]
mod amqp1_throughput;
#[path = "lavinmqperf/bodies.rs"]
mod bodies;
#[path = "lavinmqperf/churn.rs"]
mod churn;
#[path = "lavinmqperf/churn_loops.rs"]
mod churn_loops;
#[path = "lavinmqperf/mqtt_throughput.rs"]
mod mqtt_throughput;
#[path = "lavinmqperf/stream_throughput.rs"]
mod stream_throughput;
#[path = "lavinmqperf/throughput.rs"]
mod throughput;

// The AMQP client, its byte stream and URI parsing live in the library,
// where shovels use them too.
use lavinmq::client::{connection as client, stream, uri};

use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Instant;

use clap::Parser;

const USAGE: &str = "Usage: lavinmqperf [protocol] [throughput | bind-churn | queue-churn | connection-churn | \
channel-churn | consumer-churn | connection-count | queue-count] [arguments]

Protocols: amqp (default), amqp1 (AMQP 1.0), mqtt, stream (RabbitMQ's stream protocol)
Run `lavinmqperf throughput --help` for the flags of a mode.";

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since a process-local instant: the clock of `--measure-latency`
/// timestamps (publishers and consumers live in the same process).
pub fn now_ns() -> i64 {
    let epoch = *EPOCH.get_or_init(Instant::now);
    i64::try_from(epoch.elapsed().as_nanos()).unwrap_or(i64::MAX)
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn exit_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// The arguments clap sees for `mode`.
fn argv<'a>(mode: &str, rest: &'a [String]) -> impl Iterator<Item = String> + 'a {
    std::iter::once(format!("lavinmqperf {mode}")).chain(rest.iter().cloned())
}

/// Runs a mode on a multi-threaded runtime and turns its result into the exit code.
fn block_on(mode: impl Future<Output = i32>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(mode);
    // Don't wait for client tasks to wind down: the summary is out.
    runtime.shutdown_background();
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// `lavinmqperf mqtt MODE`: the MQTT modes (throughput only).
fn mqtt_main(rest: &[String]) -> ExitCode {
    match rest.first().map(String::as_str) {
        Some("throughput") => {
            let args = mqtt_throughput::MqttThroughputArgs::parse_from(argv("mqtt throughput", &rest[1..]));
            block_on(mqtt_throughput::run(args))
        }
        Some(m) => {
            eprintln!("Unknown MQTT mode: {m} (MQTT has: throughput)");
            ExitCode::from(2)
        }
        None => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// `lavinmqperf amqp1 MODE`: the AMQP 1.0 modes (throughput only).
fn amqp1_main(rest: &[String]) -> ExitCode {
    match rest.first().map(String::as_str) {
        Some("throughput") => {
            let args = amqp1_throughput::Amqp1ThroughputArgs::parse_from(argv("amqp1 throughput", &rest[1..]));
            block_on(amqp1_throughput::run(args))
        }
        Some(m) => {
            eprintln!("Unknown AMQP 1.0 mode: {m} (AMQP 1.0 has: throughput)");
            ExitCode::from(2)
        }
        None => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn stream_main(rest: &[String]) -> ExitCode {
    match rest.first().map(String::as_str) {
        Some("throughput") => {
            let args = stream_throughput::StreamThroughputArgs::parse_from(argv("stream throughput", &rest[1..]));
            block_on(stream_throughput::run(args))
        }
        Some(m) => {
            eprintln!("Unknown stream mode: {m} (the stream protocol has: throughput)");
            ExitCode::from(2)
        }
        None => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let mut rest = &args[1.min(args.len())..];
    match rest.first().map(String::as_str) {
        Some("amqp") => rest = &rest[1..],
        Some("amqp1") => return amqp1_main(&rest[1..]),
        Some("mqtt") => return mqtt_main(&rest[1..]),
        Some("stream") => return stream_main(&rest[1..]),
        _ => {}
    }
    let Some(mode) = rest.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    match mode.as_str() {
        "throughput" => {
            let args = throughput::ThroughputArgs::parse_from(argv(mode, &rest[1..]));
            block_on(throughput::run(args))
        }
        "queue-churn" => {
            let args = churn::QueueChurnArgs::parse_from(argv(mode, &rest[1..]));
            block_on(churn::queue_churn(args))
        }
        "connection-count" => {
            let args = churn::ConnectionCountArgs::parse_from(argv(mode, &rest[1..]));
            block_on(churn::connection_count(args))
        }
        "bind-churn" => {
            let args = churn_loops::BindChurnArgs::parse_from(argv(mode, &rest[1..]));
            block_on(churn_loops::bind_churn(args))
        }
        "channel-churn" => {
            let args = churn_loops::ChurnArgs::parse_from(argv(mode, &rest[1..]));
            block_on(churn_loops::channel_churn(args))
        }
        "connection-churn" => {
            let args = churn_loops::ChurnArgs::parse_from(argv(mode, &rest[1..]));
            block_on(churn_loops::connection_churn(args))
        }
        "consumer-churn" => {
            let args = churn_loops::ChurnArgs::parse_from(argv(mode, &rest[1..]));
            block_on(churn_loops::consumer_churn(args))
        }
        "queue-count" => {
            let args = churn_loops::QueueCountArgs::parse_from(argv(mode, &rest[1..]));
            block_on(churn_loops::queue_count(args))
        }
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        "-v" | "--version" => {
            println!("{}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        m => {
            eprintln!("Unknown mode: {m}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
