//! `lavinmqperf mqtt throughput`: MQTT publishers and subscribers on one
//! topic, reported like the AMQP mode (`Publish rate: N msgs/s Consume rate:
//! N msgs/s` every second, then the summary). Works against any MQTT 3.1.1
//! or, with `--protocol-version 5`, MQTT 5 broker (Mosquitto, RabbitMQ's
//! plugin, LavinMQ).
//!
//! Built on the broker's own MQTT codec; QoS 0 publishers copy one encoded
//! PUBLISH into a reused buffer, so the tool allocates nothing per message.
//! `mqtts://` connects over TLS, verified like `amqps://`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;
use clap::Parser;
use lavinmq::mqtt::codec::{
    Ack, Connect, Disconnect, MAX_REMAINING_LENGTH, MqttStr, Packet, ProtocolVersion, PublishHead, QoS, Subscribe,
    SubscriptionOptions, parse_packet, write_packet, write_publish_head,
};
use tokio::io::AsyncReadExt;
use tokio::sync::{Notify, watch};

use crate::bodies::{Bodies, SlotPicker};
use crate::client::Error;
use crate::stream::{self, Reader, Writer};
use crate::throughput::{Event, Events, Pacer, RunArgs, Shared, count_batch_consumed, drive, read_more};
use crate::uri::{self, AmqpUri};

/// Bytes of publishes encoded into one write.
const BATCH_BYTES: usize = 64 * 1024;
/// QoS 1 publishes a publisher may have unacknowledged.
const WINDOW: u64 = 1024;

/// Flags of the MQTT throughput mode (LavinMQ's names).
#[derive(Parser, Debug, Clone)]
#[command(
    name = "lavinmqperf mqtt throughput",
    about = "Publish to and subscribe on an MQTT topic"
)]
pub struct MqttThroughputArgs {
    /// URI to connect to (mqtt://, or mqtts:// for TLS; add ?verify=none for
    /// a self-signed certificate or ?cacertfile=PATH to trust a CA)
    #[arg(short = 'u', long, default_value = "mqtt://localhost:1883")]
    pub uri: String,
    /// Clients, message size, rate and limits.
    #[command(flatten)]
    pub run: RunArgs,
    /// QoS of publishes and subscriptions (0 or 1)
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub qos: u8,
    /// Topic to publish to and subscribe on
    #[arg(short = 't', long, default_value = "perf-test")]
    pub topic: String,
    /// Publish with the retain flag
    #[arg(long)]
    pub retain: bool,
    /// Connect with clean session
    #[arg(long)]
    pub clean_session: bool,
    /// MQTT protocol version: 4 (3.1.1) or 5
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(4..=5))]
    pub protocol_version: u8,
}

struct Settings {
    args: MqttThroughputArgs,
    uri: AmqpUri,
    qos: QoS,
    version: ProtocolVersion,
    /// What publishers send and subscribers verify.
    bodies: Bodies,
}

/// Runs the MQTT throughput test; returns the process exit code.
pub async fn run(args: MqttThroughputArgs) -> i32 {
    let uri = match uri::parse_mqtt(&args.uri) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let qos = if args.qos == 1 {
        QoS::AtLeastOnce
    } else {
        QoS::AtMostOnce
    };
    let mut plan = args.run.plan();
    plan.totals = true;
    let bodies = Bodies::new(args.run.size, 0, args.run.random_bodies, args.run.verify);
    let version = if args.protocol_version == 5 {
        ProtocolVersion::V5
    } else {
        ProtocolVersion::V3_1_1
    };
    let cfg = Arc::new(Settings {
        args,
        uri,
        qos,
        version,
        bodies,
    });
    let shared = Arc::new(Shared::new(false));
    let ids = Arc::new(AtomicU64::new(0));
    let (cfg1, shared1, ids1) = (cfg.clone(), shared.clone(), ids.clone());
    let (cfg2, shared2) = (cfg.clone(), shared.clone());
    drive(
        plan,
        &shared,
        move |go, ev| {
            let (cfg, shared, n) = (cfg1.clone(), shared1.clone(), ids1.fetch_add(1, Ordering::Relaxed));
            tokio::spawn(async move {
                let r = subscriber(&cfg, &shared, n, go, &ev).await;
                let _ = ev.send(Event::Done(r));
            });
        },
        move |go, ev| {
            let (cfg, shared, n) = (cfg2.clone(), shared2.clone(), ids.fetch_add(1, Ordering::Relaxed));
            tokio::spawn(async move {
                let r = publisher(&cfg, &shared, n, go, &ev).await;
                let _ = ev.send(Event::Done(r));
            });
        },
    )
    .await
}

fn protocol(text: impl Into<String>) -> Error {
    Error::Protocol(text.into())
}

fn mqtt_str(s: String) -> Result<MqttStr, Error> {
    MqttStr::try_from(s).map_err(|e| protocol(e.to_string()))
}

/// A connected client: CONNECT sent and CONNACK accepted.
async fn connect(cfg: &Settings, role: &str, n: u64) -> Result<(Reader, Writer, BytesMut), Error> {
    let (mut rd, mut wr) = stream::connect(&cfg.uri).await?;
    let client_id = format!("lavinmqperf-{role}-{}-{n}", std::process::id());
    let anonymous = !cfg.args.uri.contains('@');
    let connect = Connect {
        protocol: cfg.version,
        clean_session: cfg.args.clean_session,
        keep_alive: 0,
        client_id: mqtt_str(client_id)?,
        will: None,
        username: if anonymous {
            None
        } else {
            Some(mqtt_str(cfg.uri.user.clone())?)
        },
        password: (!anonymous).then(|| bytes::Bytes::from(cfg.uri.password.clone())),
        properties: None,
    };
    let mut out = BytesMut::new();
    write_packet(&mut out, &Packet::Connect(Box::new(connect)), cfg.version).map_err(|e| protocol(e.to_string()))?;
    wr.send(&out).await?;
    let mut buf = BytesMut::with_capacity(256 * 1024);
    match read_packet(&mut rd, &mut buf, cfg.version).await? {
        Packet::Connack(c) if c.code.is_success() => Ok((rd, wr, buf)),
        Packet::Connack(c) => Err(protocol(format!("connection refused: {}", c.code))),
        p => Err(protocol(format!("expected CONNACK, got {}", p.name()))),
    }
}

/// Reads until one whole packet is buffered.
async fn read_packet(rd: &mut Reader, buf: &mut BytesMut, version: ProtocolVersion) -> Result<Packet, Error> {
    loop {
        if let Some(p) = parse_packet(buf, MAX_REMAINING_LENGTH, version).map_err(|e| protocol(e.to_string()))? {
            return Ok(p);
        }
        if rd.read_buf(buf).await? == 0 {
            return Err(Error::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
}

/// One subscriber: counts (and with `--verify` checks) PUBLISHes,
/// acknowledging QoS 1 ones.
async fn subscriber(
    cfg: &Settings,
    shared: &Shared,
    n: u64,
    mut go: watch::Receiver<bool>,
    ev: &Events,
) -> Result<(), Error> {
    let (mut rd, mut wr, mut buf) = connect(cfg, "sub", n).await?;
    let mut out = BytesMut::new();
    let subscribe = Subscribe {
        packet_id: 1,
        filters: vec![(mqtt_str(cfg.args.topic.clone())?, SubscriptionOptions::qos(cfg.qos))],
        properties: None,
    };
    let version = cfg.version;
    write_packet(&mut out, &Packet::Subscribe(subscribe), version).map_err(|e| protocol(e.to_string()))?;
    wr.send(&out).await?;
    match read_packet(&mut rd, &mut buf, version).await? {
        Packet::Suback(s) if s.codes.iter().all(|c| c.is_success()) => {}
        p => return Err(protocol(format!("subscription refused ({})", p.name()))),
    }
    let _ = ev.send(Event::Ready);
    let _ = go.wait_for(|go| *go).await;
    let mut done = shared.consume_done.subscribe();
    let limit = cfg.args.run.cmessages;
    let verify = cfg.args.run.verify;
    let mut told = false;
    loop {
        let (mut received, mut mismatches) = (0, 0);
        out.clear();
        while let Some(p) =
            parse_packet(&mut buf, MAX_REMAINING_LENGTH, version).map_err(|e| protocol(e.to_string()))?
        {
            if let Packet::Publish(p) = p {
                received += 1;
                if verify && !cfg.bodies.check(&p.payload) {
                    mismatches += 1;
                    if !told {
                        told = true;
                        eprintln!("Subscriber: a message body differs from what was published");
                    }
                }
                if p.qos != QoS::AtMostOnce {
                    let _ = write_packet(&mut out, &Packet::Puback(Ack::ok(p.packet_id)), version);
                }
            }
        }
        if !out.is_empty() {
            wr.send(&out).await?;
        }
        if verify && received > 0 {
            shared.verified.fetch_add(received - mismatches, Ordering::Relaxed);
            shared.mismatches.fetch_add(mismatches, Ordering::Relaxed);
        }
        if count_batch_consumed(shared, received, limit)
            || !read_more(&mut rd, &mut buf, &mut done, 16 * 1024, 256 * 1024).await?
        {
            return Ok(());
        }
    }
}

/// Counts PUBACKs for a QoS 1 publisher.
async fn count_acks(
    mut rd: Reader,
    mut buf: BytesMut,
    version: ProtocolVersion,
    acked: &AtomicU64,
    progress: &Notify,
) -> Result<(), Error> {
    loop {
        let mut n = 0;
        while let Some(p) =
            parse_packet(&mut buf, MAX_REMAINING_LENGTH, version).map_err(|e| protocol(e.to_string()))?
        {
            if matches!(p, Packet::Puback(_)) {
                n += 1;
            }
        }
        if n > 0 {
            acked.fetch_add(n, Ordering::Release);
            progress.notify_one();
        }
        if rd.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}

/// One publisher: PUBLISHes in batches, at most [`WINDOW`] unacknowledged
/// with QoS 1.
async fn publisher(
    cfg: &Settings,
    shared: &Shared,
    n: u64,
    mut go: watch::Receiver<bool>,
    ev: &Events,
) -> Result<(), Error> {
    let (rd, mut wr, buf) = connect(cfg, "pub", n).await?;
    let _ = ev.send(Event::Ready);
    let _ = go.wait_for(|go| *go).await;
    let acked = Arc::new(AtomicU64::new(0));
    let progress = Arc::new(Notify::new());
    let reader = tokio::spawn({
        let (acked, progress, ev, version) = (acked.clone(), progress.clone(), ev.clone(), cfg.version);
        async move {
            if let Err(e) = count_acks(rd, buf, version, &acked, &progress).await {
                let _ = ev.send(Event::Fatal(e));
            }
        }
    });
    // One PUBLISH encoded up front; every message is a copy of it with its
    // packet id (QoS 1) and, for random bodies, its payload written over.
    let bodies = &cfg.bodies;
    let mut picker = SlotPicker::new();
    let mut template = BytesMut::new();
    let qos1 = cfg.qos != QoS::AtMostOnce;
    let v5 = cfg.version.is_v5();
    let head = PublishHead {
        topic: &cfg.args.topic,
        qos: cfg.qos,
        packet_id: u16::from(qos1),
        retain: cfg.args.retain,
        dup: false,
        properties: v5.then_some(&[][..]),
    };
    write_publish_head(&mut template, &head, bodies.body(0)).map_err(|e| protocol(e.to_string()))?;
    let payload_at = template.len() - bodies.size();
    // The packet id sits before the payload, and before MQTT 5's (empty)
    // property length.
    let id_end = payload_at - usize::from(v5);
    let per_batch = (BATCH_BYTES / template.len()).max(1) as u64;
    let mut out = BytesMut::with_capacity(BATCH_BYTES + template.len() + 64);
    let mut pacer = Pacer::new(cfg.args.run.rate);
    let (mut published, mut packet_id) = (0u64, 0u16);
    let limit = cfg.args.run.pmessages;
    loop {
        let mut count = per_batch.min(pacer.wait().await);
        if qos1 {
            while published - acked.load(Ordering::Acquire) >= WINDOW {
                progress.notified().await;
            }
            count = count.min(WINDOW - (published - acked.load(Ordering::Acquire)));
        }
        let mut last = false;
        if limit > 0 {
            let claimed = shared.pclaimed.fetch_add(count, Ordering::Relaxed);
            if claimed >= limit {
                break;
            }
            if claimed + count >= limit {
                count = limit - claimed;
                last = true;
            }
        }
        out.clear();
        for _ in 0..count {
            let at = out.len();
            out.extend_from_slice(&template);
            if qos1 {
                packet_id = packet_id.checked_add(1).unwrap_or(1);
                out[at + id_end - 2..at + id_end].copy_from_slice(&packet_id.to_be_bytes());
            }
            if bodies.is_random() {
                let body = bodies.body(picker.next(bodies.slots()));
                out[at + payload_at..at + template.len()].copy_from_slice(body);
            }
        }
        wr.send(&out).await?;
        published += count;
        shared.pubs.fetch_add(count, Ordering::Relaxed);
        pacer.record(count);
        if last {
            break;
        }
    }
    if cfg.qos != QoS::AtMostOnce {
        let all = async {
            while acked.load(Ordering::Acquire) < published {
                progress.notified().await;
            }
        };
        if tokio::time::timeout(std::time::Duration::from_secs(6), all)
            .await
            .is_err()
        {
            eprintln!("Publisher: timed out waiting for PUBACKs");
        }
    }
    out.clear();
    let _ = write_packet(&mut out, &Packet::Disconnect(Disconnect::normal()), cfg.version);
    wr.send(&out).await?;
    reader.abort();
    Ok(())
}
