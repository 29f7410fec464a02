//! `lavinmqperf amqp1 throughput`: senders and receivers of one queue over
//! AMQP 1.0, as RabbitMQ 4's clients use it (SASL PLAIN, one session and one
//! link per connection, link credit), reported like the AMQP 0-9-1 mode.
//! Works against this broker and RabbitMQ (4.x natively, 3.x with its AMQP
//! 1.0 plugin and `--address-version 1`).
//!
//! Built on the broker's own AMQP 1.0 codec for the opening; transfers are
//! written from a fixed layout and receivers read only the delivery id of
//! each transfer, so that the tool stays cheaper than the broker it drives.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{BufMut, Bytes, BytesMut};
use clap::Parser;
use lavinmq::amqp1::codec::frame::{AMQP_HEADER, FrameKind, SASL_HEADER, parse_frame, put_header, write_frame};
use lavinmq::amqp1::codec::performative::{
    Attach, Begin, DeliveryState, Disposition, Flow, Open, Performative, Role, Sasl, Terminus,
};
use lavinmq::amqp1::codec::transfer;
use lavinmq::amqp1::codec::types::Value;
use tokio::io::AsyncReadExt;
use tokio::sync::{Notify, watch};

use crate::bodies::Bodies;
use crate::client::{Connection, Error, QueueDeclare};
use crate::stream::{self, Reader, Writer};
use crate::throughput::{Event, Events, Pacer, RunArgs, Shared, count_batch_consumed, drive_clients, read_more};
use crate::uri::{self, AmqpUri};

/// The largest frame the tool accepts and asks for.
const MAX_FRAME: u32 = 1 << 20;
/// The session window the tool grants (transfers in flight to it).
const SESSION_WINDOW: u32 = 1 << 20;
/// Bytes of transfers written per socket write at most (the AMQP 0-9-1
/// mode's batch), so that both modes hand the broker reads of one size.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// Flags of the AMQP 1.0 throughput mode.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "lavinmqperf amqp1 throughput",
    about = "Send to and receive from a queue over AMQP 1.0"
)]
pub struct Amqp1ThroughputArgs {
    /// URI to connect to (amqp://user:password@host:port/vhost)
    #[arg(long, default_value = "amqp://guest:guest@localhost:5672/%2f")]
    pub uri: String,
    /// Clients, message size, rate and limits.
    #[command(flatten)]
    pub run: RunArgs,
    /// The queue (declared durable over AMQP 0-9-1 when missing)
    #[arg(short = 'u', long, default_value = "perf-test")]
    pub queue: String,
    /// Senders send pre-settled and receivers take pre-settled deliveries
    /// (no dispositions either way)
    #[arg(long)]
    pub settled: bool,
    /// Link credit each receiver keeps granted, and the unsettled
    /// transfers each sender may have
    #[arg(long, default_value_t = 1000)]
    pub credit: u32,
    /// Messages are durable (their header says so; otherwise it says they
    /// are not)
    #[arg(short = 'p', long)]
    pub persistent: bool,
    /// Address format: 2 (RabbitMQ 4's `/queues/NAME`) or 1 (RabbitMQ 3's
    /// `/amq/queue/NAME`)
    #[arg(long, default_value_t = 2)]
    pub address_version: u8,
}

struct Settings {
    args: Amqp1ThroughputArgs,
    uri: AmqpUri,
    bodies: Bodies,
    address: String,
}

fn protocol(text: impl Into<String>) -> Error {
    Error::Protocol(text.into())
}

/// Runs the AMQP 1.0 throughput test; returns the process exit code.
pub async fn run(args: Amqp1ThroughputArgs) -> i32 {
    let uri = match uri::parse(&args.uri) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let address = match args.address_version {
        1 => format!("/amq/queue/{}", args.queue),
        2 => format!("/queues/{}", utf8_percent(&args.queue)),
        v => {
            eprintln!("--address-version must be 1 or 2, not {v}");
            return 2;
        }
    };
    if args.run.size as u64 + 256 > u64::from(MAX_FRAME) {
        eprintln!("messages must fit in one {MAX_FRAME}-byte frame");
        return 2;
    }
    let mut plan = args.run.plan();
    plan.totals = true;
    let bodies = Bodies::new(args.run.size, 0, false, false);
    let cfg = Arc::new(Settings {
        args,
        uri,
        bodies,
        address,
    });
    if let Err(e) = declare_queue(&cfg).await {
        eprintln!("cannot declare the queue: {e}");
        return 1;
    }
    drive_clients(
        plan,
        Arc::new(Shared::new(false)),
        cfg,
        |cfg, shared, go, ev| async move { receiver(&cfg, &shared, go, &ev).await },
        |cfg, shared, go, ev| async move { sender(&cfg, &shared, go, &ev).await },
    )
    .await
}

/// Percent-encodes what RabbitMQ's v2 addresses require encoded in a name.
fn utf8_percent(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The queue, declared durable over AMQP 0-9-1 (both brokers serve it on
/// the same port), so that senders and receivers meet.
async fn declare_queue(cfg: &Settings) -> Result<(), Error> {
    let mut c = Connection::connect(&cfg.uri, "lavinmqperf").await?;
    c.open_channel(1).await?;
    let arguments = Default::default();
    c.queue_declare(
        1,
        QueueDeclare {
            name: &cfg.args.queue,
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: false,
            arguments: &arguments,
        },
    )
    .await?;
    c.close().await
}

/// Reads until one whole frame is buffered.
async fn read_frame(rd: &mut Reader, buf: &mut BytesMut) -> Result<lavinmq::amqp1::codec::frame::Frame, Error> {
    loop {
        if let Some(f) = parse_frame(buf, MAX_FRAME).map_err(|e| protocol(e.to_string()))? {
            return Ok(f);
        }
        if rd.read_buf(buf).await? == 0 {
            return Err(Error::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
}

/// Reads the 8-byte protocol header the broker answers with.
async fn read_header(rd: &mut Reader, buf: &mut BytesMut, want: &[u8; 8]) -> Result<(), Error> {
    while buf.len() < 8 {
        if rd.read_buf(buf).await? == 0 {
            return Err(Error::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
    let got = buf.split_to(8);
    if &got[..] != want {
        return Err(protocol(format!("unexpected protocol header {got:?}")));
    }
    Ok(())
}

/// The next AMQP-layer performative, skipping heartbeats.
async fn next_performative(rd: &mut Reader, buf: &mut BytesMut) -> Result<Performative, Error> {
    loop {
        let f = read_frame(rd, buf).await?;
        if f.kind == FrameKind::Amqp && !f.body.is_empty() {
            return Performative::decode(&f.body).map_err(|e| protocol(e.to_string()));
        }
    }
}

fn send_performative(out: &mut BytesMut, p: &Performative) {
    write_frame(out, FrameKind::Amqp, 0, |b| p.encode(b));
}

/// A connection with one session, through SASL PLAIN, open and begin.
async fn connect(cfg: &Settings) -> Result<(Reader, Writer, BytesMut), Error> {
    let (mut rd, mut wr) = stream::connect(&cfg.uri).await?;
    let mut buf = BytesMut::with_capacity(256 * 1024);
    let mut out = BytesMut::new();
    wr.send(&SASL_HEADER).await?;
    read_header(&mut rd, &mut buf, &SASL_HEADER).await?;
    // The mechanisms, then PLAIN.
    read_frame(&mut rd, &mut buf).await?;
    let plain = format!("\0{}\0{}", cfg.uri.user, cfg.uri.password);
    let init = Sasl::Init {
        mechanism: "PLAIN".into(),
        initial_response: Some(Bytes::from(plain.into_bytes())),
        hostname: Some(cfg.uri.host.clone()),
    };
    write_frame(&mut out, FrameKind::Sasl, 0, |b| init.encode(b));
    wr.send(&out).await?;
    let outcome = read_frame(&mut rd, &mut buf).await?;
    match Sasl::decode(&outcome.body) {
        Ok(Sasl::Outcome(0)) => {}
        Ok(Sasl::Outcome(code)) => return Err(protocol(format!("authentication failed (SASL code {code})"))),
        _ => return Err(protocol("no SASL outcome")),
    }
    out.clear();
    out.put_slice(&AMQP_HEADER);
    let open = Performative::Open(Open {
        container_id: "lavinmqperf".into(),
        hostname: Some(format!("vhost:{}", cfg.uri.vhost)),
        max_frame_size: MAX_FRAME,
        channel_max: 0,
        idle_time_out: None,
        properties: None,
    });
    send_performative(&mut out, &open);
    let begin = Performative::Begin(Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: SESSION_WINDOW,
        outgoing_window: SESSION_WINDOW,
        handle_max: 0,
    });
    send_performative(&mut out, &begin);
    wr.send(&out).await?;
    read_header(&mut rd, &mut buf, &AMQP_HEADER).await?;
    let (mut opened, mut begun) = (false, false);
    while !(opened && begun) {
        match next_performative(&mut rd, &mut buf).await? {
            Performative::Open(_) => opened = true,
            Performative::Begin(_) => begun = true,
            Performative::Close(e) => return Err(protocol(format!("connection refused: {e:?}"))),
            _ => {}
        }
    }
    Ok((rd, wr, buf))
}

/// Attaches link 0 of the session and waits for the broker's attach.
async fn attach(cfg: &Settings, rd: &mut Reader, wr: &mut Writer, buf: &mut BytesMut, role: Role) -> Result<(), Error> {
    let address = Some(cfg.address.as_str());
    let (source, target) = match role {
        Role::Sender => (
            Terminus::with_address(None, true),
            Terminus::with_address(address, false),
        ),
        Role::Receiver => (
            Terminus::with_address(address, true),
            Terminus::with_address(None, false),
        ),
    };
    let a = Performative::Attach(Box::new(Attach {
        name: format!("lavinmqperf-{role:?}"),
        handle: 0,
        role,
        snd_settle_mode: if cfg.args.settled { 1 } else { 0 },
        rcv_settle_mode: 0,
        source: Some(source),
        target: Some(target),
        initial_delivery_count: (role == Role::Sender).then_some(0),
        max_message_size: None,
        properties: None,
    }));
    let mut out = BytesMut::new();
    send_performative(&mut out, &a);
    wr.send(&out).await?;
    loop {
        match next_performative(rd, buf).await? {
            // A refusal comes as an attach without the node's terminus,
            // then a detach with the reason.
            Performative::Attach(a) if a.source.is_some() && role == Role::Receiver => return Ok(()),
            Performative::Attach(a) if a.target.is_some() && role == Role::Sender => return Ok(()),
            Performative::Attach(_) => {}
            Performative::Detach(d) => return Err(protocol(format!("the link was refused: {:?}", d.error))),
            Performative::Close(e) | Performative::End(e) => return Err(protocol(format!("closed: {e:?}"))),
            _ => {}
        }
    }
}

/// The delivery id of a transfer frame's body, read without decoding the
/// rest: `None` for a continuation frame (or anything else).
fn transfer_delivery_id(body: &[u8]) -> Option<u32> {
    // The broker's own direct reader: no value tree per delivery, which
    // cost the receiver more than the rest of its work.
    if let Some((t, _)) = transfer::decode_head(body) {
        return t.delivery_id;
    }
    // A shape the direct reader leaves to the generic decoder (a delivery
    // state, say): the descriptor 0x00 0x53 0x14, the list, the handle,
    // then the delivery id.
    let rest = body.strip_prefix(&[0x00, 0x53, 0x14])?;
    let mut rest = match rest.first()? {
        0xc0 => rest.get(3..)?,
        0xd0 => rest.get(9..)?,
        _ => return None,
    };
    let _handle = Value::decode(&mut rest).ok()?;
    Value::decode(&mut rest).ok()?.as_u32()
}

/// One receiver: counts deliveries, settles unsettled ones in ranges of a
/// tenth of its credit (as the AMQP 0-9-1 mode acknowledges every
/// `--ack` messages) and tops its credit up once half of it is used.
async fn receiver(cfg: &Settings, shared: &Shared, mut go: watch::Receiver<bool>, ev: &Events) -> Result<(), Error> {
    let (mut rd, mut wr, mut buf) = connect(cfg).await?;
    attach(cfg, &mut rd, &mut wr, &mut buf, Role::Receiver).await?;
    let _ = ev.send(Event::Ready);
    let _ = go.wait_for(|go| *go).await;
    let credit = cfg.args.credit.max(1);
    let (mut delivered, mut transfers) = (0u32, 0u32);
    let mut granted_at = 0u32;
    let mut out = BytesMut::new();
    let flow = |delivered: u32, transfers: u32| {
        Performative::Flow(Flow {
            next_incoming_id: Some(transfers),
            incoming_window: SESSION_WINDOW,
            next_outgoing_id: 0,
            outgoing_window: SESSION_WINDOW,
            handle: Some(0),
            delivery_count: Some(delivered),
            link_credit: Some(credit),
            ..Flow::default()
        })
    };
    send_performative(&mut out, &flow(0, 0));
    wr.send(&out).await?;
    let mut done = shared.consume_done.subscribe();
    let limit = cfg.args.run.cmessages;
    let settle_every = (credit / 10).max(1);
    // Deliveries received and not yet settled: the first id and the last.
    let mut first: Option<u32> = None;
    let mut last = 0u32;
    loop {
        let mut received = 0u64;
        while let Some(f) = parse_frame(&mut buf, MAX_FRAME).map_err(|e| protocol(e.to_string()))? {
            if f.body.is_empty() {
                continue;
            }
            if f.body.get(2) == Some(&0x14) {
                transfers = transfers.wrapping_add(1);
                if let Some(id) = transfer_delivery_id(&f.body) {
                    received += 1;
                    first.get_or_insert(id);
                    last = id;
                }
                continue;
            }
            if let Ok(Performative::Detach(_) | Performative::End(_) | Performative::Close(_)) =
                Performative::decode(&f.body)
            {
                return Err(protocol("the broker ended the link"));
            }
        }
        out.clear();
        delivered = delivered.wrapping_add(received as u32);
        let finished = count_batch_consumed(shared, received, limit);
        if let (Some(from), false) = (first, cfg.args.settled)
            && (last.wrapping_sub(from) + 1 >= settle_every || finished)
        {
            let d = Performative::Disposition(Disposition {
                role: Role::Receiver,
                first: from,
                last: Some(last),
                settled: true,
                state: Some(DeliveryState::Accepted),
            });
            send_performative(&mut out, &d);
            first = None;
        }
        if delivered.wrapping_sub(granted_at) >= credit / 2 {
            granted_at = delivered;
            send_performative(&mut out, &flow(delivered, transfers));
        }
        if !out.is_empty() {
            wr.send(&out).await?;
        }
        if finished || !read_more(&mut rd, &mut buf, &mut done, 64 * 1024, 512 * 1024).await? {
            return Ok(());
        }
    }
}

/// What a sender's reader learns from the broker.
#[derive(Default)]
struct SenderState {
    /// The delivery count up to which the link has credit.
    credit_limit: AtomicU64,
    /// The transfer id up to which the session window is open.
    window_limit: AtomicU64,
    /// Deliveries the broker settled.
    settled: AtomicU64,
    /// Deliveries sent (the sender's delivery count).
    sent: AtomicU64,
    progress: Notify,
}

/// Reads the broker's flows and dispositions for a sender.
async fn sender_reader(mut rd: Reader, mut buf: BytesMut, state: &SenderState) -> Result<(), Error> {
    loop {
        while let Some(f) = parse_frame(&mut buf, MAX_FRAME).map_err(|e| protocol(e.to_string()))? {
            if f.body.is_empty() {
                continue;
            }
            match Performative::decode(&f.body).map_err(|e| protocol(e.to_string()))? {
                Performative::Flow(flow) => {
                    let next_in = u64::from(flow.next_incoming_id.unwrap_or(0));
                    state
                        .window_limit
                        .store(next_in + u64::from(flow.incoming_window), Ordering::Release);
                    if let Some(credit) = flow.link_credit {
                        // Without a delivery count (RabbitMQ 3 sends none),
                        // the credit counts from what was sent so far.
                        let count = flow
                            .delivery_count
                            .map_or_else(|| state.sent.load(Ordering::Acquire), u64::from);
                        state.credit_limit.store(count + u64::from(credit), Ordering::Release);
                    }
                }
                Performative::Disposition(d) if d.role == Role::Receiver => {
                    let n = d.last.unwrap_or(d.first).wrapping_sub(d.first) + 1;
                    state.settled.fetch_add(u64::from(n), Ordering::Release);
                }
                Performative::Detach(_) | Performative::End(_) | Performative::Close(_) => {
                    return Err(protocol("the broker ended the link"));
                }
                _ => {}
            }
            state.progress.notify_one();
        }
        if rd.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}

/// Appends one transfer of `message` as delivery `id` (tag: the id).
fn put_transfer(out: &mut BytesMut, id: u32, settled: bool, message: &[u8]) {
    // Performative: descriptor (3), list8 header (3), fields (19).
    put_header(out, FrameKind::Amqp, 0, 25 + message.len());
    out.put_slice(&[0x00, 0x53, 0x14, 0xc0, 20, 6]);
    out.put_u8(0x43); // handle 0
    out.put_u8(0x70); // delivery id
    out.put_u32(id);
    out.put_slice(&[0xa0, 8]); // delivery tag: 8 bytes
    out.put_u64(u64::from(id));
    out.put_u8(0x43); // message format 0
    out.put_u8(if settled { 0x41 } else { 0x42 });
    out.put_u8(0x42); // more: false
    out.put_slice(message);
}

/// One sender: transfers while the link has credit, the session window is
/// open and fewer than `--credit` deliveries are unsettled.
async fn sender(cfg: &Settings, shared: &Shared, mut go: watch::Receiver<bool>, ev: &Events) -> Result<(), Error> {
    let (mut rd, mut wr, mut buf) = connect(cfg).await?;
    attach(cfg, &mut rd, &mut wr, &mut buf, Role::Sender).await?;
    let state = Arc::new(SenderState::default());
    state.window_limit.store(u64::from(SESSION_WINDOW), Ordering::Release);
    let reader = tokio::spawn({
        let (state, ev) = (state.clone(), ev.clone());
        async move {
            if let Err(e) = sender_reader(rd, buf, &state).await {
                let _ = ev.send(Event::Fatal(e));
            }
        }
    });
    let _ = ev.send(Event::Ready);
    let _ = go.wait_for(|go| *go).await;
    // A header that says whether the message is durable: without one,
    // RabbitMQ (and this broker) keep a message as if it were.
    let mut message = BytesMut::new();
    let durable = if cfg.args.persistent { 0x41 } else { 0x42 };
    message.put_slice(&[0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, durable]);
    let body = cfg.bodies.body(0);
    message.put_slice(&[0x00, 0x53, 0x75, 0xb0]);
    message.put_u32(body.len() as u32);
    message.put_slice(body);
    let settled = cfg.args.settled;
    let unsettled_max = u64::from(cfg.args.credit.max(1));
    let mut pacer = Pacer::new(cfg.args.run.rate);
    let mut sent = 0u64;
    let limit = cfg.args.run.pmessages;
    let transfer_len = 8 + 25 + message.len();
    let write_batch = (WRITE_BATCH_BYTES / transfer_len).max(1) as u64;
    let mut out = BytesMut::with_capacity(WRITE_BATCH_BYTES + transfer_len);
    loop {
        let mut count = write_batch.min(pacer.wait().await);
        loop {
            let credit = state.credit_limit.load(Ordering::Acquire).saturating_sub(sent);
            let window = state.window_limit.load(Ordering::Acquire).saturating_sub(sent);
            let room = match settled {
                true => u64::MAX,
                false => unsettled_max.saturating_sub(sent - state.settled.load(Ordering::Acquire)),
            };
            let can = credit.min(window).min(room);
            if can > 0 {
                count = count.min(can);
                break;
            }
            state.progress.notified().await;
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
        for i in 0..count {
            put_transfer(&mut out, (sent + i) as u32, settled, &message);
        }
        wr.send(&out).await?;
        sent += count;
        state.sent.store(sent, Ordering::Release);
        shared.pubs.fetch_add(count, Ordering::Relaxed);
        pacer.record(count);
        if last {
            break;
        }
    }
    if !settled {
        let all = async {
            while state.settled.load(Ordering::Acquire) < sent {
                state.progress.notified().await;
            }
        };
        if tokio::time::timeout(std::time::Duration::from_secs(6), all)
            .await
            .is_err()
        {
            eprintln!("Sender: timed out waiting for dispositions");
        }
    }
    reader.abort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written transfer decodes as the codec's transfer, and the
    /// receiver's shortcut reads its delivery id.
    #[test]
    fn transfers_are_what_the_codec_reads() {
        let mut out = BytesMut::new();
        put_transfer(&mut out, 70_000, false, b"msg");
        let f = parse_frame(&mut out, MAX_FRAME).unwrap().unwrap();
        let Performative::Transfer(t, payload) = Performative::decode(&f.body).unwrap() else {
            panic!("not a transfer");
        };
        assert_eq!(t.delivery_id, Some(70_000));
        assert_eq!(t.settled, Some(false));
        assert_eq!(t.delivery_tag.as_deref(), Some(&70_000u64.to_be_bytes()[..]));
        assert_eq!(&payload[..], b"msg");
        assert_eq!(transfer_delivery_id(&f.body), Some(70_000));
    }
}
