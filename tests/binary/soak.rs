//! Soak: the real binary under a mixed load for a chosen time (one minute in
//! the test command, `make soak` for an hour), with its resident memory, open
//! files, threads and data-directory size sampled every few seconds. The test
//! fails when any of them keeps growing, and when a confirmed message of the
//! steady load was not delivered.
//!
//! The load, all at once:
//! - a publisher with confirms and a consumer acking every message (durable
//!   queue, persistent messages);
//! - a slow consumer (prefetch 1, 20 ms per message) behind a queue capped
//!   with `x-max-length`, published to faster than it consumes;
//! - queue churn: declare, bind, publish, get, delete, five times a second;
//! - connection churn: AMQP connections opened and closed five times a
//!   second, every other one dropped without a close;
//! - MQTT sessions: ten persistent sessions that reconnect, resume and get a
//!   QoS 1 message each, every second.
//!
//! Growth is judged after a warm-up (the first quarter of the samples): the
//! largest value of the last half may exceed the largest of the half before
//! it only by a small allowance. A leak of a steady rate shows as a gap that
//! widens with the run's length.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use crate::common::RawConn;
use crate::common::mqtt_raw::MqttRaw;
use crate::process::BrokerProcess;

/// Seconds the load runs, from `LAVINMQ_SOAK_SECS` (60 by default).
fn soak_secs() -> u64 {
    std::env::var("LAVINMQ_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

/// Segment size of the soak broker: small, so that segments are created and
/// removed many times over even in a one-minute run.
const SEGMENT_SIZE: u64 = 1024 * 1024;

/// One reading of the broker process and its data directory.
#[derive(Debug, Clone, Copy)]
struct Sample {
    secs: f64,
    rss_kib: u64,
    fds: u64,
    threads: u64,
    data_kib: u64,
}

impl Sample {
    fn take(pid: u32, data: &Path, started: Instant) -> Sample {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("broker's /proc status");
        let field = |key: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("{key} in /proc status"))
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count() as u64)
            .expect("broker's fds");
        Sample {
            secs: started.elapsed().as_secs_f64(),
            rss_kib: field("VmRSS:"),
            fds,
            threads: field("Threads:"),
            data_kib: dir_bytes(data) / 1024,
        }
    }
}

/// Bytes of every file under `dir` (files may vanish while it is walked).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

/// A figure judged for growth: its name, how to read it, and the allowance
/// over the earlier maximum (absolute, and as a share of that maximum).
struct Figure {
    name: &'static str,
    read: fn(&Sample) -> u64,
    slack: u64,
    share: f64,
}

const FIGURES: [Figure; 4] = [
    Figure {
        name: "RSS KiB",
        read: |s| s.rss_kib,
        slack: 16 * 1024,
        share: 0.10,
    },
    Figure {
        name: "open files",
        read: |s| s.fds,
        slack: 24,
        share: 0.0,
    },
    Figure {
        name: "threads",
        read: |s| s.threads,
        slack: 4,
        share: 0.0,
    },
    Figure {
        name: "data dir KiB",
        read: |s| s.data_kib,
        slack: 4 * SEGMENT_SIZE / 1024,
        share: 0.10,
    },
];

/// Checks every figure for growth after the warm-up; returns the summary
/// table and the failures.
fn judge(samples: &[Sample]) -> (String, Vec<String>) {
    let steady = &samples[samples.len() / 4..];
    let (earlier, later) = steady.split_at(steady.len() / 2);
    let mut table = format!(
        "{} samples over {:.0} s\n{:<13} {:>10} {:>10} {:>10} {:>12} {:>12} {:>10}\n",
        samples.len(),
        samples.last().map_or(0.0, |s| s.secs),
        "figure",
        "first",
        "min",
        "max",
        "max earlier",
        "max later",
        "last"
    );
    let mut failures = Vec::new();
    for f in &FIGURES {
        let all: Vec<u64> = samples.iter().map(f.read).collect();
        let max_of = |s: &[Sample]| s.iter().map(f.read).max().unwrap_or(0);
        let (before, after) = (max_of(earlier), max_of(later));
        table += &format!(
            "{:<13} {:>10} {:>10} {:>10} {:>12} {:>12} {:>10}\n",
            f.name,
            all[0],
            all.iter().min().unwrap_or(&0),
            all.iter().max().unwrap_or(&0),
            before,
            after,
            all[all.len() - 1]
        );
        let allowed = before + f.slack.max((before as f64 * f.share) as u64);
        if after > allowed {
            failures.push(format!(
                "{} grew: {after} in the last half of the run against {before} before it (allowed {allowed})",
                f.name
            ));
        }
    }
    (table, failures)
}

/// What the load tasks count, and the flag that stops them.
#[derive(Default)]
struct Load {
    stop: AtomicBool,
    /// Set once the publisher's last batch is confirmed.
    published_all: AtomicBool,
    confirmed: AtomicU64,
    consumed: AtomicU64,
    slow_consumed: AtomicU64,
    queues_churned: AtomicU64,
    connections_churned: AtomicU64,
    mqtt_delivered: AtomicU64,
}

impl Load {
    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }
}

async fn connect(url: &str) -> Connection {
    Connection::connect(url, ConnectionProperties::default())
        .await
        .expect("connect")
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

/// Publishes persistent messages with confirms in paced batches until
/// stopped; also feeds the slow consumer's queue.
async fn publisher(url: String, load: Arc<Load>) {
    let conn = connect(&url).await;
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    let body = vec![b's'; 256];
    let props = BasicProperties::default().with_delivery_mode(2);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut n = 0u64;
    while load.running() {
        tick.tick().await;
        let mut confirms = Vec::with_capacity(50);
        for _ in 0..50 {
            let c = ch
                .basic_publish(
                    "".into(),
                    "soak.work".into(),
                    BasicPublishOptions::default(),
                    &body,
                    props.clone(),
                )
                .await
                .expect("publish");
            confirms.push(c);
        }
        for _ in 0..5 {
            let c = ch
                .basic_publish(
                    "".into(),
                    "soak.slow".into(),
                    BasicPublishOptions::default(),
                    &body,
                    props.clone(),
                )
                .await
                .expect("publish to the slow queue");
            confirms.push(c);
        }
        for c in confirms {
            assert!(c.await.expect("confirm").is_ack(), "a publish was nacked");
        }
        n += 50;
        load.confirmed.store(n, Ordering::Relaxed);
    }
    load.published_all.store(true, Ordering::Release);
    let _ = conn.close(200, "done".into()).await;
}

/// Consumes `queue` with manual acks until stopped (and, for the steady
/// queue, until everything confirmed has arrived).
async fn consumer(url: String, queue: &'static str, prefetch: u16, delay: Duration, load: Arc<Load>) {
    let conn = connect(&url).await;
    let ch = conn.create_channel().await.expect("channel");
    ch.basic_qos(prefetch, BasicQosOptions::default()).await.expect("qos");
    let mut deliveries = ch
        .basic_consume(
            queue.into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let counter = if queue == "soak.work" {
        &load.consumed
    } else {
        &load.slow_consumed
    };
    loop {
        let drained = load.published_all.load(Ordering::Acquire)
            && counter.load(Ordering::Relaxed) >= load.confirmed.load(Ordering::Relaxed);
        if !load.running() && (queue != "soak.work" || drained) {
            break;
        }
        let next = tokio::time::timeout(Duration::from_millis(500), deliveries.next()).await;
        let Ok(Some(delivery)) = next else { continue };
        let delivery = delivery.expect("delivery");
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
        counter.fetch_add(1, Ordering::Relaxed);
    }
    let _ = conn.close(200, "done".into()).await;
}

/// Declares, binds, uses and deletes a queue five times a second.
async fn queue_churn(url: String, load: Arc<Load>) {
    let conn = connect(&url).await;
    let ch = conn.create_channel().await.expect("channel");
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut i = 0u64;
    while load.running() {
        tick.tick().await;
        i += 1;
        let name = format!("soak.churn.{i}");
        ch.queue_declare(name.as_str().into(), durable(), FieldTable::default())
            .await
            .expect("declare");
        ch.queue_bind(
            name.as_str().into(),
            "amq.direct".into(),
            name.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
        for _ in 0..5 {
            ch.basic_publish(
                "amq.direct".into(),
                name.as_str().into(),
                BasicPublishOptions::default(),
                b"churn",
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .expect("publish");
        }
        let got = ch
            .basic_get(name.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .expect("get");
        assert!(got.is_some(), "a message in {name}");
        ch.queue_delete(name.as_str().into(), QueueDeleteOptions::default())
            .await
            .expect("delete");
        load.queues_churned.fetch_add(1, Ordering::Relaxed);
    }
    let _ = conn.close(200, "done".into()).await;
}

/// Opens and closes connections five times a second; every other one is
/// dropped without a close, as a crashed client's.
async fn connection_churn(url: String, addr: std::net::SocketAddr, load: Arc<Load>) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut i = 0u64;
    while load.running() {
        tick.tick().await;
        i += 1;
        if i.is_multiple_of(2) {
            let raw = RawConn::open(addr).await;
            drop(raw);
        } else {
            let conn = connect(&url).await;
            let ch = conn.create_channel().await.expect("channel");
            ch.close(200, "bye".into()).await.expect("channel.close");
            conn.close(200, "bye".into()).await.expect("close");
        }
        load.connections_churned.fetch_add(1, Ordering::Relaxed);
    }
}

/// Ten persistent MQTT sessions: each second every one reconnects, resumes
/// its subscription and gets the QoS 1 message published while it was away.
async fn mqtt_sessions(addr: std::net::SocketAddr, load: Arc<Load>) {
    const SESSIONS: usize = 10;
    for i in 0..SESSIONS {
        let (mut c, _) = MqttRaw::connect(addr, &format!("soak-{i}"), false).await;
        assert_eq!(c.subscribe(&format!("soak/{i}"), 1).await, 1, "SUBACK QoS 1");
    }
    let (mut publisher, _) = MqttRaw::connect(addr, "soak-publisher", true).await;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while load.running() {
        tick.tick().await;
        for i in 0..SESSIONS {
            publisher.publish(&format!("soak/{i}"), 1, false, b"away").await;
        }
        for i in 0..SESSIONS {
            let (mut c, present) = MqttRaw::connect(addr, &format!("soak-{i}"), false).await;
            assert!(present, "session soak-{i} was kept");
            let p = c.next_publish().await;
            assert_eq!(p.topic, format!("soak/{i}"));
            // DISCONNECT, so that the PUBACK sent before it is taken.
            c.send(&[0xE0, 0]).await;
            load.mqtt_delivered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_keeps_memory_files_threads_and_disk_steady() {
    let secs = soak_secs();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let ini = dir.path().join("lavinmq.ini");
    std::fs::write(&ini, format!("[main]\nsegment_size = {SEGMENT_SIZE}\n")).expect("write ini");
    let broker = BrokerProcess::spawn(&data, Some(&ini));
    let url = broker.url();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", broker.port).parse().expect("address");

    let setup = connect(&url).await;
    let ch: Channel = setup.create_channel().await.expect("channel");
    ch.queue_declare("soak.work".into(), durable(), FieldTable::default())
        .await
        .expect("declare soak.work");
    let mut capped = FieldTable::default();
    capped.insert("x-max-length".into(), AMQPValue::LongLongInt(500));
    ch.queue_declare("soak.slow".into(), durable(), capped)
        .await
        .expect("declare soak.slow");
    let _ = setup.close(200, "ready".into()).await;

    let load = Arc::new(Load::default());
    let tasks = vec![
        tokio::spawn(publisher(url.clone(), load.clone())),
        tokio::spawn(consumer(url.clone(), "soak.work", 200, Duration::ZERO, load.clone())),
        tokio::spawn(consumer(
            url.clone(),
            "soak.slow",
            1,
            Duration::from_millis(20),
            load.clone(),
        )),
        tokio::spawn(queue_churn(url.clone(), load.clone())),
        tokio::spawn(connection_churn(url.clone(), addr, load.clone())),
        tokio::spawn(mqtt_sessions(broker.mqtt_addr(), load.clone())),
    ];

    // About 240 samples whatever the length, at least one every 5 s.
    let every = Duration::from_secs((secs / 240).clamp(1, 5));
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(every).await;
        samples.push(Sample::take(broker.pid(), &data, started));
        if tasks.iter().any(|t| t.is_finished()) {
            break;
        }
    }
    load.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("the load stops and drains")
            .expect("a load task failed");
    }

    let (table, failures) = judge(&samples);
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "soak: {secs} s; confirmed {} consumed {}; slow consumer {}; queues churned {}; connections churned {}; MQTT deliveries {}\n{table}",
        c(&load.confirmed),
        c(&load.consumed),
        c(&load.slow_consumed),
        c(&load.queues_churned),
        c(&load.connections_churned),
        c(&load.mqtt_delivered),
    );
    if let Ok(path) = std::env::var("LAVINMQ_SOAK_CSV") {
        let mut csv = String::from("secs,rss_kib,fds,threads,data_kib\n");
        for s in &samples {
            csv += &format!("{:.1},{},{},{},{}\n", s.secs, s.rss_kib, s.fds, s.threads, s.data_kib);
        }
        std::fs::write(path, csv).expect("write the samples");
    }
    assert!(samples.len() >= 8, "too few samples: {}", samples.len());
    assert!(
        started.elapsed() >= Duration::from_secs(secs),
        "a load task ended early"
    );
    assert_eq!(
        c(&load.consumed),
        c(&load.confirmed),
        "every confirmed message of the steady queue is delivered"
    );
    assert!(failures.is_empty(), "{}\n{table}", failures.join("\n"));
}
