//! `lavinmqperf mqtt throughput`: MQTT publishers and subscribers on one
//! topic, reported like the AMQP mode (`Publish rate: N msgs/s Consume rate:
//! N msgs/s` every second, then the summary). Works against any MQTT 3.1.1
//! broker (Mosquitto, RabbitMQ's plugin, LavinMQ).
//!
//! Built on the broker's own MQTT codec; QoS 0 publishers copy one encoded
//! PUBLISH into a reused buffer, so the tool allocates nothing per message.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::BytesMut;
use clap::Parser;
use lavinmq::mqtt::codec::{
    Connect, MAX_REMAINING_LENGTH, MqttStr, Packet, ProtocolVersion, QoS, Subscribe, parse_packet, write_packet,
    write_publish,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{Notify, watch};

use crate::client::Error;
use crate::throughput::{Event, Events, Pacer, RunArgs, Shared, drive};
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
    /// URI to connect to
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
    /// Random message bodies (one per batch of publishes)
    #[arg(long)]
    pub random_bodies: bool,
}

struct Settings {
    args: MqttThroughputArgs,
    uri: AmqpUri,
    qos: QoS,
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
    let plan = args.run.plan();
    let cfg = Arc::new(Settings { args, uri, qos });
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
async fn connect(
    cfg: &Settings,
    role: &str,
    n: u64,
) -> Result<(OwnedReadHalf, tokio::net::tcp::OwnedWriteHalf, BytesMut), Error> {
    let stream = TcpStream::connect((cfg.uri.host.as_str(), cfg.uri.port)).await?;
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let client_id = format!("lavinmqperf-{role}-{}-{n}", std::process::id());
    let anonymous = !cfg.args.uri.contains('@');
    let connect = Connect {
        protocol: ProtocolVersion::V3_1_1,
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
    };
    let mut out = BytesMut::new();
    write_packet(&mut out, &Packet::Connect(Box::new(connect))).map_err(|e| protocol(e.to_string()))?;
    wr.write_all(&out).await?;
    let mut buf = BytesMut::with_capacity(256 * 1024);
    match read_packet(&mut rd, &mut buf).await? {
        Packet::Connack(c) if c.return_code as u8 == 0 => Ok((rd, wr, buf)),
        Packet::Connack(c) => Err(protocol(format!("connection refused: {:?}", c.return_code))),
        p => Err(protocol(format!("expected CONNACK, got {}", p.name()))),
    }
}

/// Reads until one whole packet is buffered.
async fn read_packet(rd: &mut OwnedReadHalf, buf: &mut BytesMut) -> Result<Packet, Error> {
    loop {
        if let Some(p) = parse_packet(buf, MAX_REMAINING_LENGTH).map_err(|e| protocol(e.to_string()))? {
            return Ok(p);
        }
        if rd.read_buf(buf).await? == 0 {
            return Err(Error::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
}

/// One subscriber: counts PUBLISHes, acknowledging QoS 1 ones.
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
        filters: vec![(mqtt_str(cfg.args.topic.clone())?, cfg.qos)],
    };
    write_packet(&mut out, &Packet::Subscribe(subscribe)).map_err(|e| protocol(e.to_string()))?;
    wr.write_all(&out).await?;
    match read_packet(&mut rd, &mut buf).await? {
        Packet::Suback(s) if s.return_codes.iter().all(|c| c.to_u8() < 0x80) => {}
        p => return Err(protocol(format!("subscription refused ({})", p.name()))),
    }
    let _ = ev.send(Event::Ready);
    let _ = go.wait_for(|go| *go).await;
    let mut done = shared.consume_done.subscribe();
    let limit = cfg.args.run.cmessages;
    loop {
        let mut received = 0;
        out.clear();
        while let Some(p) = parse_packet(&mut buf, MAX_REMAINING_LENGTH).map_err(|e| protocol(e.to_string()))? {
            if let Packet::Publish(p) = p {
                received += 1;
                if p.qos != QoS::AtMostOnce {
                    let _ = write_packet(&mut out, &Packet::Puback { packet_id: p.packet_id });
                }
            }
        }
        if !out.is_empty() {
            wr.write_all(&out).await?;
        }
        let total = shared.consumes.fetch_add(received, Ordering::Relaxed) + received;
        if limit > 0 && total >= limit {
            let _ = shared.consume_done.send(true);
            return Ok(());
        }
        if buf.capacity() - buf.len() < 16 * 1024 {
            buf.reserve(256 * 1024);
        }
        tokio::select! {
            r = rd.read_buf(&mut buf) => if r? == 0 {
                return Err(protocol("the broker closed the connection"));
            },
            _ = done.wait_for(|d| *d) => return Ok(()),
        }
    }
}

/// Counts PUBACKs for a QoS 1 publisher.
async fn count_acks(
    mut rd: OwnedReadHalf,
    mut buf: BytesMut,
    acked: &AtomicU64,
    progress: &Notify,
) -> Result<(), Error> {
    loop {
        let mut n = 0;
        while let Some(p) = parse_packet(&mut buf, MAX_REMAINING_LENGTH).map_err(|e| protocol(e.to_string()))? {
            if matches!(p, Packet::Puback { .. }) {
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
        let (acked, progress, ev) = (acked.clone(), progress.clone(), ev.clone());
        async move {
            if let Err(e) = count_acks(rd, buf, &acked, &progress).await {
                let _ = ev.send(Event::Fatal(e));
            }
        }
    });
    let mut body: Vec<u8> = (0..cfg.args.run.size).map(|i| (i % 27 + 64) as u8).collect();
    let mut template = BytesMut::new();
    write_publish(
        &mut template,
        &cfg.args.topic,
        &body,
        QoS::AtMostOnce,
        0,
        cfg.args.retain,
        false,
    )
    .map_err(|e| protocol(e.to_string()))?;
    let per_batch = (BATCH_BYTES / template.len()).max(1) as u64;
    let mut out = BytesMut::with_capacity(BATCH_BYTES + template.len() + 64);
    let mut pacer = Pacer::new(cfg.args.run.rate);
    let (mut published, mut packet_id) = (0u64, 0u16);
    let limit = cfg.args.run.pmessages;
    loop {
        let mut count = per_batch.min(pacer.wait().await);
        if cfg.qos != QoS::AtMostOnce {
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
        if cfg.args.random_bodies {
            rand::fill(&mut body[..]);
        }
        out.clear();
        for _ in 0..count {
            if cfg.qos == QoS::AtMostOnce && !cfg.args.random_bodies {
                out.extend_from_slice(&template);
            } else {
                packet_id = packet_id.checked_add(1).unwrap_or(1);
                write_publish(
                    &mut out,
                    &cfg.args.topic,
                    &body,
                    cfg.qos,
                    packet_id,
                    cfg.args.retain,
                    false,
                )
                .map_err(|e| protocol(e.to_string()))?;
            }
        }
        wr.write_all(&out).await?;
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
    let _ = write_packet(&mut out, &Packet::Disconnect);
    wr.write_all(&out).await?;
    reader.abort();
    Ok(())
}
