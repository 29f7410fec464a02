//! `lavinmqperf stream throughput`: publishers and consumers of one stream
//! over RabbitMQ's stream protocol, batching as the stream clients do
//! (many messages per publish frame, confirms counted, credit per chunk),
//! reported like the AMQP mode. Works against RabbitMQ's stream plugin and
//! this broker alike.
//!
//! Built on the broker's own stream codec: a publish frame is a template
//! copied per batch with the publishing ids written in; consumers count the
//! entries of each chunk from its header, without decoding messages.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use clap::Parser;
use lavinmq::stream_protocol::codec::primitives::{begin_frame, end_frame, put_string, put_string_map};
use lavinmq::stream_protocol::codec::{code, key, split_frame};
use tokio::io::AsyncReadExt;
use tokio::sync::{Notify, watch};

use crate::bodies::Bodies;
use crate::client::Error;
use crate::stream::{self, Reader, Writer};
use crate::throughput::{Event, Events, Pacer, RunArgs, Shared, count_batch_consumed, drive_clients, read_more};
use crate::uri::{self, AmqpUri};

/// Flags of the stream throughput mode.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "lavinmqperf stream throughput",
    about = "Publish to and consume from a stream over RabbitMQ's stream protocol"
)]
pub struct StreamThroughputArgs {
    /// URI to connect to (rabbitmq-stream://user:password@host:port/vhost)
    #[arg(
        short = 'u',
        long,
        default_value = "rabbitmq-stream://guest:guest@localhost:5552/%2f"
    )]
    pub uri: String,
    /// Clients, message size, rate and limits.
    #[command(flatten)]
    pub run: RunArgs,
    /// The stream (created when missing)
    #[arg(long, default_value = "perf-test-stream")]
    pub stream: String,
    /// Messages per publish frame
    #[arg(long, default_value_t = 100)]
    pub batch: u64,
    /// Messages a publisher may have unconfirmed
    #[arg(long, default_value_t = 10_000)]
    pub max_unconfirmed: u64,
    /// Where consumers start: first, last or next
    #[arg(long, default_value = "next")]
    pub offset: String,
    /// Chunks of credit each consumer keeps granted
    #[arg(long, default_value_t = 10)]
    pub credit: u16,
}

struct Settings {
    args: StreamThroughputArgs,
    uri: AmqpUri,
    bodies: Bodies,
}

fn protocol(text: impl Into<String>) -> Error {
    Error::Protocol(text.into())
}

/// Runs the stream throughput test; returns the process exit code.
pub async fn run(args: StreamThroughputArgs) -> i32 {
    let uri = match uri::parse_stream(&args.uri) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    if !matches!(args.offset.as_str(), "first" | "last" | "next") {
        eprintln!("--offset must be first, last or next");
        return 2;
    }
    let mut plan = args.run.plan();
    plan.totals = true;
    let bodies = Bodies::new(args.run.size, 0, false, false);
    let cfg = Arc::new(Settings { args, uri, bodies });
    // The stream exists before anyone subscribes or publishes.
    if let Err(e) = create_stream(&cfg).await {
        eprintln!("cannot create the stream: {e}");
        return 1;
    }
    drive_clients(
        plan,
        Arc::new(Shared::new(false)),
        cfg,
        |cfg, shared, go, ev| async move { consumer(&cfg, &shared, go, &ev).await },
        |cfg, shared, go, ev| async move { publisher(&cfg, &shared, go, &ev).await },
    )
    .await
}

/// A frame the broker sent: its key and the bytes after the key and version.
struct Frame {
    key: u16,
    body: Bytes,
}

/// Reads until one whole frame is buffered.
async fn read_frame(rd: &mut Reader, buf: &mut BytesMut) -> Result<Frame, Error> {
    loop {
        if let Some(mut f) = split_frame(buf, 0).map_err(|e| protocol(e.to_string()))? {
            if f.len() < 4 {
                return Err(protocol("short frame"));
            }
            let key = f.get_u16();
            f.advance(2);
            return Ok(Frame { key, body: f });
        }
        if rd.read_buf(buf).await? == 0 {
            return Err(Error::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
}

/// Reads frames until the response to `request`, skipping others; its code.
async fn response(rd: &mut Reader, buf: &mut BytesMut, request: u16) -> Result<u16, Error> {
    loop {
        let mut f = read_frame(rd, buf).await?;
        if f.key == request | key::RESPONSE && f.body.len() >= 6 {
            f.body.advance(4);
            return Ok(f.body.get_u16());
        }
    }
}

fn frame(out: &mut BytesMut, k: u16, fields: impl FnOnce(&mut BytesMut)) {
    let f = begin_frame(out, k, 1);
    fields(out);
    end_frame(out, f);
}

/// A connection through the opening: peer properties, PLAIN, tune, open.
async fn connect(cfg: &Settings) -> Result<(Reader, Writer, BytesMut), Error> {
    let (mut rd, mut wr) = stream::connect(&cfg.uri).await?;
    let mut buf = BytesMut::with_capacity(256 * 1024);
    let mut out = BytesMut::new();
    // One step at a time: RabbitMQ closes a connection whose next opening
    // frame arrives before the answer to the previous one.
    frame(&mut out, key::PEER_PROPERTIES, |b| {
        b.put_u32(1);
        put_string_map(b, [("product", "lavinmqperf")].into_iter());
    });
    wr.send(&out).await?;
    if response(&mut rd, &mut buf, key::PEER_PROPERTIES).await? != code::OK {
        return Err(protocol("peer properties refused"));
    }
    out.clear();
    frame(&mut out, key::SASL_HANDSHAKE, |b| b.put_u32(2));
    wr.send(&out).await?;
    response(&mut rd, &mut buf, key::SASL_HANDSHAKE).await?;
    out.clear();
    frame(&mut out, key::SASL_AUTHENTICATE, |b| {
        b.put_u32(3);
        put_string(b, "PLAIN");
        let plain = format!("\0{}\0{}", cfg.uri.user, cfg.uri.password);
        b.put_u32(plain.len() as u32);
        b.put_slice(plain.as_bytes());
    });
    wr.send(&out).await?;
    if response(&mut rd, &mut buf, key::SASL_AUTHENTICATE).await? != code::OK {
        return Err(protocol("authentication failed"));
    }
    let tune = loop {
        let f = read_frame(&mut rd, &mut buf).await?;
        if f.key == key::TUNE {
            break f;
        }
    };
    let mut t = tune.body;
    let frame_max = if t.len() >= 4 { t.get_u32() } else { 0 };
    out.clear();
    frame(&mut out, key::TUNE, |b| {
        b.put_u32(frame_max);
        b.put_u32(0);
    });
    frame(&mut out, key::OPEN, |b| {
        b.put_u32(4);
        put_string(b, &cfg.uri.vhost);
    });
    wr.send(&out).await?;
    match response(&mut rd, &mut buf, key::OPEN).await? {
        code::OK => Ok((rd, wr, buf)),
        c => Err(protocol(format!("open refused with code {c}"))),
    }
}

async fn create_stream(cfg: &Settings) -> Result<(), Error> {
    let (mut rd, mut wr, mut buf) = connect(cfg).await?;
    let mut out = BytesMut::new();
    frame(&mut out, key::CREATE, |b| {
        b.put_u32(5);
        put_string(b, &cfg.args.stream);
        b.put_u32(0);
    });
    wr.send(&out).await?;
    match response(&mut rd, &mut buf, key::CREATE).await? {
        code::OK | code::STREAM_ALREADY_EXISTS => Ok(()),
        c => Err(protocol(format!("create refused with code {c}"))),
    }
}

/// One consumer: counts the entries of each chunk and grants a credit back
/// for each.
async fn consumer(cfg: &Settings, shared: &Shared, mut go: watch::Receiver<bool>, ev: &Events) -> Result<(), Error> {
    let (mut rd, mut wr, mut buf) = connect(cfg).await?;
    let mut out = BytesMut::new();
    let offset_type: u16 = match cfg.args.offset.as_str() {
        "first" => 1,
        "last" => 2,
        _ => 3,
    };
    frame(&mut out, key::SUBSCRIBE, |b| {
        b.put_u32(6);
        b.put_u8(1);
        put_string(b, &cfg.args.stream);
        b.put_u16(offset_type);
        b.put_u16(cfg.args.credit);
        b.put_u32(0);
    });
    wr.send(&out).await?;
    if response(&mut rd, &mut buf, key::SUBSCRIBE).await? != code::OK {
        return Err(protocol("subscription refused"));
    }
    let _ = ev.send(Event::Ready);
    let _ = go.wait_for(|go| *go).await;
    let mut done = shared.consume_done.subscribe();
    let limit = cfg.args.run.cmessages;
    loop {
        let (mut received, mut chunks) = (0u64, 0u16);
        while let Some(mut f) = split_frame(&mut buf, 0).map_err(|e| protocol(e.to_string()))? {
            if f.len() < 4 {
                continue;
            }
            let k = f.get_u16();
            let version = f.get_u16();
            if k != key::DELIVER {
                continue;
            }
            // Subscription id, (committed chunk id in version 2), magic,
            // chunk type, entries, records.
            let skip = if version >= 2 { 9 } else { 1 };
            if f.len() < skip + 8 {
                return Err(protocol("short chunk"));
            }
            f.advance(skip + 4);
            received += u64::from(f.get_u32());
            chunks += 1;
        }
        if chunks > 0 {
            out.clear();
            frame(&mut out, key::CREDIT, |b| {
                b.put_u8(1);
                b.put_u16(chunks);
            });
            wr.send(&out).await?;
        }
        if count_batch_consumed(shared, received, limit)
            || !read_more(&mut rd, &mut buf, &mut done, 64 * 1024, 512 * 1024).await?
        {
            return Ok(());
        }
    }
}

/// Counts the publishing ids confirmed (and refused) for a publisher.
async fn count_confirms(
    mut rd: Reader,
    mut buf: BytesMut,
    confirmed: &AtomicU64,
    progress: &Notify,
) -> Result<(), Error> {
    loop {
        let mut n = 0;
        while let Some(mut f) = split_frame(&mut buf, 0).map_err(|e| protocol(e.to_string()))? {
            if f.len() < 9 {
                continue;
            }
            let k = f.get_u16();
            f.advance(3);
            if k == key::PUBLISH_CONFIRM || k == key::PUBLISH_ERROR {
                n += u64::from(f.get_u32());
            }
        }
        if n > 0 {
            confirmed.fetch_add(n, Ordering::Release);
            progress.notify_one();
        }
        if rd.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}

/// One publisher: publish frames of `--batch` messages, at most
/// `--max-unconfirmed` unconfirmed.
async fn publisher(cfg: &Settings, shared: &Shared, mut go: watch::Receiver<bool>, ev: &Events) -> Result<(), Error> {
    let (mut rd, mut wr, mut buf) = connect(cfg).await?;
    let mut out = BytesMut::new();
    frame(&mut out, key::DECLARE_PUBLISHER, |b| {
        b.put_u32(7);
        b.put_u8(1);
        put_string(b, ""); // no reference: not deduplicated
        put_string(b, &cfg.args.stream);
    });
    wr.send(&out).await?;
    if response(&mut rd, &mut buf, key::DECLARE_PUBLISHER).await? != code::OK {
        return Err(protocol("publisher refused"));
    }
    let _ = ev.send(Event::Ready);
    let _ = go.wait_for(|go| *go).await;
    let confirmed = Arc::new(AtomicU64::new(0));
    let progress = Arc::new(Notify::new());
    let reader = tokio::spawn({
        let (confirmed, progress, ev) = (confirmed.clone(), progress.clone(), ev.clone());
        async move {
            if let Err(e) = count_confirms(rd, buf, &confirmed, &progress).await {
                let _ = ev.send(Event::Fatal(e));
            }
        }
    });
    // Each message: a publishing id, then the AMQP 1.0 message (one data
    // section) with its length.
    let body = cfg.bodies.body(0);
    let mut message = BytesMut::new();
    message.put_slice(&[0x00, 0x53, 0x75, 0xb0]);
    message.put_u32(body.len() as u32);
    message.put_slice(body);
    let per_batch = cfg.args.batch.max(1);
    let window = cfg.args.max_unconfirmed.max(per_batch);
    let mut pacer = Pacer::new(cfg.args.run.rate);
    let (mut published, mut next_id) = (0u64, 0u64);
    let limit = cfg.args.run.pmessages;
    loop {
        let mut count = per_batch.min(pacer.wait().await);
        while published - confirmed.load(Ordering::Acquire) + count > window {
            progress.notified().await;
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
        frame(&mut out, key::PUBLISH, |b| {
            b.put_u8(1);
            b.put_u32(count as u32);
            for _ in 0..count {
                b.put_u64(next_id);
                next_id += 1;
                b.put_u32(message.len() as u32);
                b.put_slice(&message);
            }
        });
        wr.send(&out).await?;
        published += count;
        shared.pubs.fetch_add(count, Ordering::Relaxed);
        pacer.record(count);
        if last {
            break;
        }
    }
    let all = async {
        while confirmed.load(Ordering::Acquire) < published {
            progress.notified().await;
        }
    };
    if tokio::time::timeout(std::time::Duration::from_secs(6), all)
        .await
        .is_err()
    {
        eprintln!("Publisher: timed out waiting for confirms");
    }
    reader.abort();
    Ok(())
}
