//! Switching from LavinMQ without a drain: the binary started on a LavinMQ
//! 2.x data dir converts it (the original files moved, untouched, into a
//! backup directory), and `--convert-lavinmq-data-dir` converts one into
//! another directory without starting. Clients then log in with their old
//! passwords and find exactly the messages LavinMQ had not yet acked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use futures_lite::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicGetOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Connection, ConnectionProperties};

use crate::lavinmq_fixture::*;
use crate::process::{BIN, BrokerProcess, within};

/// Messages written into the `work` queue; every 7th is acked in the source.
const WORK: usize = 12_000;
const TS: i64 = 1_700_000_000_000;

fn acked(i: usize) -> bool {
    i % 7 == 3
}

/// A LavinMQ data dir with two vhosts, users with each hash algorithm, a
/// multi-segment queue with acks, a priority queue, a stream with a tracked
/// consumer offset, a delayed exchange holding messages, a queue whose last
/// segment is truncated, a paused queue and a retained MQTT message.
fn write_fixture(root: &Path) {
    std::fs::create_dir_all(root).unwrap();
    std::fs::write(root.join("schema_version"), "4").unwrap();
    let mut users = Vec::new();
    for (name, algo, tags) in [
        ("guest", "sha256", "administrator"),
        ("alice", "sha512", "management"),
        ("bob", "md5", "monitoring"),
        ("carol", "bcrypt", ""),
        ("__direct", "sha256", "administrator"),
    ] {
        let (hash, algorithm) = password_hash(algo, &format!("{name}-pw"));
        let all = serde_json::json!({"config": ".*", "read": ".*", "write": ".*"});
        users.push(
            serde_json::json!({"name": name, "password_hash": hash, "hashing_algorithm": algorithm,
                                      "permissions": {"/": all, "other": all}, "tags": tags}),
        );
    }
    std::fs::write(root.join("users.json"), serde_json::to_vec_pretty(&users).unwrap()).unwrap();
    let vhosts = serde_json::json!([
        {"name": "/", "dir": sha1_hex("/"), "tracing": false, "tags": [], "description": "", "cluster_state": {}},
        {"name": "other", "dir": sha1_hex("other"), "tracing": false, "tags": ["prod"], "description": "second"}
    ]);
    std::fs::write(root.join("vhosts.json"), vhosts.to_string()).unwrap();
    std::fs::write(root.join("parameters.json"), "[]").unwrap();

    let delayed_args = table(&[("x-delayed-exchange", Header::Bool(true))]);
    let root_vhost = write_vhost(
        root,
        "/",
        &[
            exchange_declare("orders", "topic", &[]),
            exchange_declare("later", "direct", &delayed_args),
            queue_declare("work", &[]),
            queue_declare("gone", &[]),
            queue_declare("prio", &table(&[("x-max-priority", Header::Int(5))])),
            queue_declare("events", &table(&[("x-queue-type", Header::Str("stream"))])),
            queue_declare("damaged", &[]),
            queue_declare("held", &[]),
            queue_declare("delayed-target", &[]),
            queue_bind("work", "orders", "order.#"),
            queue_bind("delayed-target", "later", "k"),
            queue_delete("gone"),
            queue_declare("mqtt.sensor-7", &table(&[("x-queue-type", Header::Str("mqtt"))])),
            queue_bind_with(
                "mqtt.sensor-7",
                "mqtt.default",
                "sensors/#",
                &table(&[("mqtt.qos", Header::Int(1))]),
            ),
        ],
    );
    let work: Vec<Vec<u8>> = (0..WORK)
        .map(|i| {
            let props = Props {
                content_type: Some("text/plain".into()),
                headers: Some(table(&[("i", Header::Int(i as i32)), ("src", Header::Str("lavinmq"))])),
                delivery_mode: Some(2),
                message_id: Some(format!("m{i}")),
                timestamp: Some(1_700_000_000 + i as i64),
                ..Props::default()
            };
            record(
                TS + i as i64,
                "orders",
                "order.new",
                &props,
                format!("work-{i}").as_bytes(),
            )
        })
        .collect();
    let segments = write_store(&queue_dir(&root_vhost, "work"), &work, 64 * 1024, acked);
    assert!(segments >= 4, "the work queue spans several segments");

    let prio_dir = queue_dir(&root_vhost, "prio");
    for level in 0..=5u8 {
        let records: Vec<Vec<u8>> = (0..3)
            .map(|n| {
                let props = Props {
                    priority: (level > 0).then_some(level),
                    ..Props::default()
                };
                record(TS, "", "prio", &props, format!("p{level}-{n}").as_bytes())
            })
            .collect();
        write_store(&prio_dir.join(format!("prio.{level:03}")), &records, 4096, |_| false);
    }

    let events_dir = queue_dir(&root_vhost, "events");
    let events: Vec<Vec<u8>> = (0..50)
        .map(|i| record(TS + i, "", "events", &Props::default(), format!("ev-{i}").as_bytes()))
        .collect();
    let segs = write_store(&events_dir, &events, 600, |_| false);
    assert!(segs >= 2);
    let first_count = {
        let data = std::fs::read(events_dir.join("meta.0000000001")).unwrap();
        u32::from_le_bytes([data[0], data[1], data[2], data[3]])
    };
    write_stream_meta(&events_dir, 1, first_count, 1, TS);
    // "reader" read up to ev-19 (offset 20) and goes on at offset 21; an
    // older entry of the same tag comes first.
    write_consumer_offsets(&events_dir, &[("reader", 5), ("reader", 21)]);

    let damaged_dir = queue_dir(&root_vhost, "damaged");
    let damaged: Vec<Vec<u8>> = (0..6)
        .map(|i| record(TS, "", "damaged", &Props::default(), format!("d{i}").as_bytes()))
        .collect();
    write_store(&damaged_dir, &damaged, 1 << 20, |_| false);
    let seg = damaged_dir.join("msgs.0000000001");
    let keep: usize = 4 + damaged[..5].iter().map(Vec::len).sum::<usize>() + damaged[5].len() - 2;
    let data = std::fs::read(&seg).unwrap();
    std::fs::write(&seg, &data[..keep]).unwrap();

    let held_dir = queue_dir(&root_vhost, "held");
    write_store(
        &held_dir,
        &[record(TS, "", "held", &Props::default(), b"h")],
        4096,
        |_| false,
    );
    std::fs::write(held_dir.join("paused"), "").unwrap();

    let delayed: Vec<Vec<u8>> = [("later-now", 5), ("later-tomorrow", 86_400_000)]
        .iter()
        .map(|(body, delay)| {
            let props = Props {
                headers: Some(table(&[("x-delay", Header::Int(*delay))])),
                ..Props::default()
            };
            record(now_ms() - 1000, "later", "k", &props, body.as_bytes())
        })
        .collect();
    write_store(&queue_dir(&root_vhost, "amq.delayed-later"), &delayed, 4096, |_| false);
    write_retained(&root_vhost, &[("sensors/1", b"21.5")]);
    let queued = Props {
        delivery_mode: Some(2),
        ..Props::default()
    };
    let session = [record(TS, "mqtt.default", "sensors/9", &queued, b"queued-for-7")];
    write_store(&queue_dir(&root_vhost, "mqtt.sensor-7"), &session, 4096, |_| false);

    let other = write_vhost(root, "other", &[queue_declare("q2", &[])]);
    std::fs::write(other.join("limits.json"), r#"{"max-queues":10}"#).unwrap();
    let policy = serde_json::json!([{"name": "lim", "vhost": "other", "pattern": "^q", "apply-to": "queues",
                                     "priority": 0, "definition": {"max-length": 1000, "ha-mode": "all"}}]);
    std::fs::write(other.join("policies.json"), policy.to_string()).unwrap();
    let q2: Vec<Vec<u8>> = (0..3)
        .map(|i| record(TS, "", "q2", &Props::default(), format!("o{i}").as_bytes()))
        .collect();
    write_store(&queue_dir(&other, "q2"), &q2, 4096, |_| false);
}

/// Milliseconds since the epoch, for delayed messages.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Runs `lavinmq --convert-lavinmq-data-dir SRC -D DEST`.
fn convert(src: &Path, dest: &Path) -> std::process::Output {
    Command::new(BIN)
        .arg("--convert-lavinmq-data-dir")
        .arg(src)
        .arg("-D")
        .arg(dest)
        .output()
        .unwrap()
}

/// Every file under `dir` with a hash of its contents.
fn file_hashes(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let data = std::fs::read(&p).unwrap();
                let h = data.iter().fold(0xcbf29ce484222325u64, |h, b| {
                    (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
                });
                out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), h);
            }
        }
    }
    out
}

async fn connect_as(broker: &BrokerProcess, user: &str, vhost: &str) -> Connection {
    let url = format!("amqp://{user}:{user}-pw@127.0.0.1:{}/{}", broker.port, urlencode(vhost));
    within("connect", Connection::connect(&url, ConnectionProperties::default()))
        .await
        .unwrap_or_else(|e| panic!("{user} cannot log in: {e}"))
}

fn urlencode(v: &str) -> String {
    v.replace('/', "%2f")
}

/// Takes every ready message of `queue` with basic.get.
async fn drain(conn: &Connection, queue: &str) -> Vec<lapin::message::BasicGetMessage> {
    let ch = conn.create_channel().await.unwrap();
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        out.push(m);
    }
    out
}

fn body(m: &lapin::message::Delivery) -> String {
    String::from_utf8_lossy(&m.data).into_owned()
}

async fn message_count(conn: &Connection, queue: &str) -> u32 {
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("queue {queue}: {e}"))
    .message_count()
}

/// Checks the converted broker: logins, messages, order, properties.
/// `conversion_log` is what the conversion printed.
async fn check_converted(broker: &BrokerProcess, conversion_log: &str) {
    for user in ["guest", "alice", "bob", "carol"] {
        connect_as(broker, user, "/")
            .await
            .close(200, "bye".into())
            .await
            .unwrap();
    }
    let refused = Connection::connect(
        &format!("amqp://__direct:__direct-pw@127.0.0.1:{}/%2f", broker.port),
        ConnectionProperties::default(),
    )
    .await;
    assert!(refused.is_err(), "LavinMQ's internal user is not converted");
    let conn = connect_as(broker, "alice", "/").await;

    let work = drain(&conn, "work").await;
    let expected: Vec<usize> = (0..WORK).filter(|&i| !acked(i)).collect();
    assert_eq!(work.len(), expected.len(), "exactly the unacked messages");
    for (m, &i) in work.iter().zip(&expected) {
        assert_eq!(body(&m.delivery), format!("work-{i}"));
        let p = &m.delivery.properties;
        assert_eq!(p.content_type().as_ref().map(|s| s.as_str()), Some("text/plain"));
        assert_eq!(
            p.message_id().as_ref().map(|s| s.as_str()),
            Some(format!("m{i}").as_str())
        );
        assert_eq!(p.delivery_mode(), &Some(2));
        assert_eq!(p.timestamp(), &Some(1_700_000_000 + i as u64));
        let headers = p.headers().as_ref().expect("headers");
        assert_eq!(headers.inner().get("i"), Some(&AMQPValue::LongInt(i as i32)));
        assert_eq!(m.delivery.exchange.as_str(), "orders");
        assert_eq!(m.delivery.routing_key.as_str(), "order.new");
    }

    let prio: Vec<String> = drain(&conn, "prio").await.iter().map(|m| body(&m.delivery)).collect();
    let want: Vec<String> = (0..=5u8)
        .rev()
        .flat_map(|l| (0..3).map(move |n| format!("p{l}-{n}")))
        .collect();
    assert_eq!(prio, want, "highest priority first, FIFO within a level");

    let damaged: Vec<String> = drain(&conn, "damaged")
        .await
        .iter()
        .map(|m| body(&m.delivery))
        .collect();
    assert_eq!(
        damaged,
        ["d0", "d1", "d2", "d3", "d4"],
        "what the damaged segment holds before the damage"
    );
    assert!(
        conversion_log.contains("damaged segment") && conversion_log.contains("msgs.0000000001"),
        "the skipped part is named in the log:\n{conversion_log}"
    );

    assert!(drain(&conn, "held").await.is_empty(), "a paused queue stays paused");
    assert_eq!(message_count(&conn, "held").await, 1);

    let ch = conn.create_channel().await.unwrap();
    ch.basic_qos(10, BasicQosOptions::default()).await.unwrap();
    let mut reader = ch
        .basic_consume(
            "events".into(),
            "reader".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let first = within("stream delivery", reader.next()).await.unwrap().unwrap();
    assert_eq!(body(&first), "ev-20", "a tracked consumer goes on where it was");
    let mut args = FieldTable::default();
    args.insert("x-stream-offset".into(), AMQPValue::LongLongInt(1));
    let mut from_one = ch
        .basic_consume("events".into(), "from-one".into(), BasicConsumeOptions::default(), args)
        .await
        .unwrap();
    let m = within("stream delivery", from_one.next()).await.unwrap().unwrap();
    assert_eq!(body(&m), "ev-0", "offsets are kept: LavinMQ's first is 1");

    let due = within("delayed release", async {
        loop {
            let got = drain(&conn, "delayed-target").await;
            if !got.is_empty() {
                return got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(due.len(), 1);
    assert_eq!(
        body(&due[0].delivery),
        "later-now",
        "a held message that is due is released"
    );

    assert!(
        conn.create_channel()
            .await
            .unwrap()
            .queue_declare(
                "gone".into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default()
            )
            .await
            .is_err(),
        "a queue deleted in the log is not converted"
    );
    let other = connect_as(broker, "bob", "other").await;
    let q2: Vec<String> = drain(&other, "q2").await.iter().map(|m| body(&m.delivery)).collect();
    assert_eq!(q2, ["o0", "o1", "o2"]);
    assert_retained(broker).await;
}

/// The retained MQTT message is handed to a new subscriber, and a
/// persistent session finds its subscription and its queued message.
async fn assert_retained(broker: &BrokerProcess) {
    let port = mqtt_port(broker);
    let mut opts = rumqttc::MqttOptions::new("takeover-check", "127.0.0.1", port);
    opts.set_credentials("guest", "guest-pw");
    let (client, mut first_events) = rumqttc::AsyncClient::new(opts, 10);
    client.subscribe("sensors/#", rumqttc::QoS::AtLeastOnce).await.unwrap();
    let retained = next_publish(&mut first_events).await;
    assert_eq!(&retained.payload[..], b"21.5");
    tokio::spawn(async move { while first_events.poll().await.is_ok() {} });

    let mut opts = rumqttc::MqttOptions::new("sensor-7", "127.0.0.1", port);
    opts.set_credentials("guest", "guest-pw");
    opts.set_clean_session(false);
    let (_client, mut events) = rumqttc::AsyncClient::new(opts, 10);
    let present = within("connack", async {
        loop {
            if let rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(c)) = events.poll().await.expect("mqtt") {
                return c.session_present;
            }
        }
    })
    .await;
    assert!(present, "LavinMQ's persistent session is kept");
    let queued = next_publish(&mut events).await;
    assert_eq!(
        (queued.topic.as_str(), &queued.payload[..]),
        ("sensors/9", &b"queued-for-7"[..])
    );
    client
        .publish("sensors/2", rumqttc::QoS::AtLeastOnce, false, "new")
        .await
        .unwrap();
    loop {
        let p = next_publish(&mut events).await;
        if &p.payload[..] == b"new" {
            assert_eq!(p.topic, "sensors/2", "the session's subscription is kept");
            break;
        }
    }
}

async fn next_publish(events: &mut rumqttc::EventLoop) -> rumqttc::Publish {
    within("mqtt publish", async {
        loop {
            if let rumqttc::Event::Incoming(rumqttc::Packet::Publish(p)) = events.poll().await.expect("mqtt") {
                return p;
            }
        }
    })
    .await
}

fn mqtt_port(broker: &BrokerProcess) -> u16 {
    let log = broker.log_text();
    log.split("MQTT listening on ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .expect("MQTT port in the log")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_on_a_lavinmq_data_dir_converts_it_and_keeps_the_originals() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    write_fixture(&data);
    let original = file_hashes(&data);
    let mut broker = BrokerProcess::spawn(&data, None);
    assert!(
        broker.log_text().contains("LavinMQ data converted"),
        "{}",
        broker.log_text()
    );
    assert_eq!(
        file_hashes(&data.join("lavinmq-backup")),
        original,
        "the original files are kept, untouched"
    );
    check_converted(&broker, &broker.log_text()).await;
    broker.stop();
    // A restart finds this broker's own data dir: nothing is converted again.
    let broker = BrokerProcess::spawn(&data, None);
    assert!(!broker.log_text().contains("LavinMQ data converted"));
    let conn = connect_as(&broker, "carol", "/").await;
    assert_eq!(message_count(&conn, "held").await, 1);
    assert_eq!(message_count(&conn, "work").await, 0, "consumed before the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn convert_flag_converts_into_another_dir_without_touching_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("lavinmq");
    let dest = dir.path().join("converted");
    write_fixture(&src);
    let original = file_hashes(&src);
    let out = convert(&src, &dest);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let unacked = (0..WORK).filter(|&i| !acked(i)).count();
    // work + prio (18) + stream (50) + damaged (5) + held (1) + MQTT session (1) + delayed (2) + q2 (3)
    let total = unacked + 18 + 50 + 5 + 1 + 1 + 2 + 3;
    assert!(stdout.contains(&format!("{total} messages")), "{stdout}");
    assert_eq!(file_hashes(&src), original, "the source is left as it was");
    let again = convert(&src, &dest);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
    let broker = BrokerProcess::spawn(&dest, None);
    let log = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    check_converted(&broker, &log).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_take_over_is_redone_from_the_backup() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // As left by a broker killed while converting: the originals moved into
    // the backup, the marker still there, part of the new layout written.
    write_fixture(&data.join("lavinmq-backup"));
    std::fs::write(data.join(".lavinmq-takeover-in-progress"), "").unwrap();
    std::fs::write(data.join("users.json"), "[]").unwrap();
    std::fs::write(data.join("vhosts.json"), "[]").unwrap();
    let broker = BrokerProcess::spawn(&data, None);
    assert!(
        broker.log_text().contains("redoing an interrupted conversion"),
        "{}",
        broker.log_text()
    );
    let conn = connect_as(&broker, "bob", "other").await;
    assert_eq!(message_count(&conn, "q2").await, 3);
    assert!(!data.join(".lavinmq-takeover-in-progress").exists());
}

#[test]
fn a_data_dir_of_another_schema_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("schema_version"), "3").unwrap();
    let out = Command::new(BIN)
        .arg("--convert-lavinmq-data-dir")
        .arg(&data)
        .arg("-D")
        .arg(dir.path().join("dest"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("schema 4"));
}

/// Conversion speed and peak memory for one large queue, run by hand with
/// `--ignored`: `LAVINMQ_CONVERT_MESSAGES` messages of 16 bytes (10 million
/// by default), one in ten acked, in 8 MiB segments.
#[test]
#[ignore = "a measurement, run by hand"]
fn measure_converting_a_large_queue() {
    let n: usize = std::env::var("LAVINMQ_CONVERT_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let dir = tempfile::tempdir_in(std::env::var("LAVINMQ_CONVERT_DIR").unwrap_or_else(|_| "/tmp".into())).unwrap();
    let src = dir.path().join("lavinmq");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("schema_version"), "4").unwrap();
    let (hash, algorithm) = password_hash("sha256", "guest-pw");
    let users = serde_json::json!([{"name": "guest", "password_hash": hash, "hashing_algorithm": algorithm,
        "permissions": {"/": {"config": ".*", "read": ".*", "write": ".*"}}, "tags": "administrator"}]);
    std::fs::write(src.join("users.json"), users.to_string()).unwrap();
    std::fs::write(src.join("vhosts.json"), r#"[{"name": "/"}]"#).unwrap();
    let vhost = write_vhost(&src, "/", &[queue_declare("big", &[])]);
    let props = Props {
        delivery_mode: Some(2),
        ..Props::default()
    };
    let records = (0..n).map(|i| record(TS, "", "big", &props, format!("{i:016}").as_bytes()));
    write_store(&queue_dir(&vhost, "big"), records, 8 << 20, |i| i % 10 == 0);
    let started = std::time::Instant::now();
    let out = Command::new(BIN)
        .arg("--convert-lavinmq-data-dir")
        .arg(&src)
        .arg("-D")
        .arg(dir.path().join("converted"))
        .output()
        .unwrap();
    let secs = started.elapsed().as_secs_f64();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // SAFETY: getrusage only writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut u);
        u
    };
    let converted = n - n.div_ceil(10);
    println!(
        "{converted} of {n} messages converted in {secs:.1} s ({:.0} msgs/s), peak RSS {} MiB, CPU {:.1} s",
        converted as f64 / secs,
        usage.ru_maxrss / 1024,
        (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) as f64
            + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) as f64 / 1e6
    );
    println!("{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn lavinmqctl_prints_the_definitions_of_a_lavinmq_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("lavinmq");
    write_fixture(&src);
    let original = file_hashes(&src);
    let out = Command::new(env!("CARGO_BIN_EXE_lavinmqctl"))
        .arg("definitions")
        .arg(&src)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let defs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names = |kind: &str| -> Vec<String> {
        defs[kind]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(names("users"), ["guest", "alice", "bob", "carol"]);
    assert!(names("queues").contains(&"work".to_string()));
    assert!(!names("queues").contains(&"gone".to_string()));
    assert_eq!(names("vhosts"), ["/", "other"]);
    assert_eq!(defs["policies"][0]["definition"]["ha-mode"], "all");
    assert!(
        defs["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["source"] == "orders")
    );
    assert_eq!(file_hashes(&src), original);
}
