//! `lavinmqperf throughput`: publishers and consumers, each on its own
//! connection, hammering one queue while the rates are reported every second.
//!
//! Hot paths never allocate per message: publishers copy a pre-encoded
//! publish/header/body frame triple into one reused write buffer per batch
//! (with `--random-bodies` overwriting the body with a slice of a random
//! pool); consumers read into a large buffer and look at deliveries (or
//! basic.get replies with `--poll`) in place, handing every other frame to
//! the codec.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use clap::Parser;
use hdrhistogram::Histogram;
use lavinmq::amqp::codec::{
    BasicProperties, FieldTable, Frame, Method, ShortStr, parse_frame, write_basic_ack, write_body, write_header,
    write_heartbeat, write_method,
};
use parking_lot::Mutex;
use tokio::io::AsyncReadExt;
use tokio::sync::{Notify, mpsc, watch};

use crate::bodies::{Bodies, BodyCheck, SlotPicker};
use crate::client::{
    self, CLOSE_TIMEOUT, Connection, Error, FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, FrameReader,
    QueueDeclare, close_error, deliver_tag, get_ok_tag, header_body_size, peek_frame,
};
use crate::stream::{Reader, Writer};
use crate::uri::{self, AmqpUri};
use crate::{exit_signal, now_ns};

/// Bytes of publishes encoded into one write.
const BATCH_BYTES: usize = 64 * 1024;
/// Latency samples a consumer buffers before merging them into the shared histograms.
const SAMPLE_FLUSH: usize = 4096;

/// Flags of the throughput mode (LavinMQ's lavinmqperf names and defaults).
#[derive(Parser, Debug, Clone)]
#[command(
    name = "lavinmqperf throughput",
    about = "Publish to and consume from a queue as fast as possible (or at a given rate)"
)]
pub struct ThroughputArgs {
    /// URI to connect to (amqp://, or amqps:// for TLS; add ?verify=none for a
    /// self-signed certificate)
    #[arg(long, default_value = "amqp://guest:guest@localhost")]
    pub uri: String,
    /// Clients, message size, rate and limits.
    #[command(flatten)]
    pub run: RunArgs,
    /// Ack (multiple) after every N consumed messages; 0 consumes with no-ack
    #[arg(short = 'a', long, default_value_t = 0)]
    pub ack: u64,
    /// Publisher confirms: at most N unconfirmed publishes per publisher (0 = no confirms)
    #[arg(short = 'c', long, default_value_t = 0)]
    pub confirm: u64,
    /// Publish in transactions of N messages (0 = no transactions)
    #[arg(short = 't', long, default_value_t = 0)]
    pub transaction: u64,
    /// Ack in transactions: consumers commit after every N acknowledged
    /// messages (0 = no transactions; with --ack 0 every message is acked)
    #[arg(short = 'T', long = "ack-transaction", visible_alias = "ack-tx", default_value_t = 0)]
    pub ack_transaction: u64,
    /// Poll with basic.get instead of consuming with basic.consume
    #[arg(short = 'g', long)]
    pub poll: bool,
    /// Properties of published messages as a JSON object, e.g.
    /// '{"content_type":"text/plain","headers":{"a":1},"priority":5}'
    #[arg(long)]
    pub properties: Option<String>,
    /// Queue name ("" = a server-named, auto-delete queue per consumer)
    #[arg(short = 'u', long, default_value = "perf-test")]
    pub queue: String,
    /// Exchange to publish to (the queue is bound to it with the routing key)
    #[arg(short = 'e', long, default_value = "")]
    pub exchange: String,
    /// Routing key (default: the queue name)
    #[arg(short = 'k', long)]
    pub routing_key: Option<String>,
    /// Max consume rate per consumer, msgs/s (0 = unlimited)
    #[arg(short = 'R', long, default_value_t = 0)]
    pub consumer_rate: u64,
    /// Persistent messages (delivery mode 2)
    #[arg(short = 'p', long)]
    pub persistent: bool,
    /// Consumer prefetch (basic.qos); not set by default
    #[arg(short = 'P', long)]
    pub prefetch: Option<u16>,
    /// Measure end-to-end latency (timestamp in the first 8 body bytes; size >= 8)
    #[arg(short = 'l', long)]
    pub measure_latency: bool,
    /// Queue arguments as a JSON object, e.g. '{"x-queue-type":"quorum"}'
    #[arg(long)]
    pub queue_args: Option<String>,
    /// Consumer arguments as a JSON object
    #[arg(long)]
    pub consumer_args: Option<String>,
    /// Queue name pattern: `%` becomes a number from --queue-pattern-from to
    /// --queue-pattern-to, consumer N taking the Nth, round robin; with fewer
    /// publishers than queues, publisher N publishes to queues N, N + P,
    /// N + 2P, ... in turn (P publishers), so every queue gets messages;
    /// overrides --queue
    #[arg(long)]
    pub queue_pattern: Option<String>,
    /// First number of --queue-pattern
    #[arg(long, default_value_t = 1)]
    pub queue_pattern_from: u64,
    /// Last number of --queue-pattern
    #[arg(long, default_value_t = 1)]
    pub queue_pattern_to: u64,
}

/// The flags every throughput mode shares, whatever the protocol.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// Number of publishers
    #[arg(short = 'x', long, default_value_t = 1)]
    pub publishers: usize,
    /// Number of consumers (subscribers for MQTT)
    #[arg(short = 'y', long, default_value_t = 1)]
    pub consumers: usize,
    /// Size of each message in bytes
    #[arg(short = 's', long, default_value_t = 16)]
    pub size: usize,
    /// Max publish rate per publisher, msgs/s (0 = unlimited)
    #[arg(short = 'r', long, default_value_t = 0)]
    pub rate: u64,
    /// Only run for N seconds (0 = until Ctrl-C or done)
    #[arg(short = 'z', long, default_value_t = 0)]
    pub time: u64,
    /// Publish at most N messages in total
    #[arg(short = 'C', long, default_value_t = 0)]
    pub pmessages: u64,
    /// Consume at most N messages in total
    #[arg(short = 'D', long, default_value_t = 0)]
    pub cmessages: u64,
    /// Quiet, only print the summary
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Output the summary as JSON
    #[arg(short = 'j', long)]
    pub json: bool,
    /// Consumers verify every body against what was published; any
    /// mismatch makes the exit code 1 (random bodies verify only when this
    /// run published them)
    #[arg(short = 'V', long)]
    pub verify: bool,
    /// Every message gets a different random body (a slice of a pool of
    /// random bytes filled at start)
    #[arg(long)]
    pub random_bodies: bool,
}

impl RunArgs {
    /// The shape of the run these flags ask for.
    pub fn plan(&self) -> Plan {
        Plan {
            consumers: self.consumers,
            publishers: self.publishers,
            seconds: self.time,
            quiet: self.quiet,
            json: self.json,
            verify: self.verify,
            totals: false,
        }
    }
}

/// Validated settings shared by every client task.
struct Settings {
    args: ThroughputArgs,
    uri: AmqpUri,
    queue_args: FieldTable,
    consumer_args: FieldTable,
    /// Properties of every published message (`--properties`, `-p`).
    props: BasicProperties,
    /// What publishers send and consumers verify.
    bodies: Arc<Bodies>,
    /// Consumers ack every this many messages (0 = no-ack).
    ack_every: u64,
}

impl Settings {
    fn new(args: ThroughputArgs) -> Result<Settings, String> {
        let uri = uri::parse(&args.uri)?;
        if args.measure_latency && args.run.size < 8 {
            return Err("Message size must be at least 8 bytes when measuring latency".into());
        }
        if args.confirm > 0 && args.transaction > 0 {
            return Err(
                "--confirm and --transaction cannot be combined (a channel is either in confirm or in tx mode)".into(),
            );
        }
        let table = |s: &Option<String>| {
            s.as_deref()
                .map_or_else(|| Ok(FieldTable::new()), client::json_to_table)
        };
        let queue_args = table(&args.queue_args)?;
        let consumer_args = table(&args.consumer_args)?;
        let mut props = match &args.properties {
            Some(json) => client::json_to_properties(json)?,
            None => BasicProperties::default(),
        };
        if args.persistent {
            props.delivery_mode = Some(2);
        }
        // Acks in transactions need acks: with --ack 0 every message is acked.
        let ack_every = if args.ack == 0 && args.ack_transaction > 0 {
            1
        } else {
            args.ack
        };
        if let Some(p) = args.prefetch.filter(|&p| p > 0) {
            if ack_every > u64::from(p) {
                eprintln!("Warning: acking every {ack_every} messages with prefetch {p} will stall");
            } else if args.ack_transaction > u64::from(p) {
                eprintln!(
                    "Warning: committing acks every {} messages with prefetch {p} will stall",
                    args.ack_transaction
                );
            }
        }
        let skip = if args.measure_latency { 8 } else { 0 };
        let bodies = Arc::new(Bodies::new(
            args.run.size,
            skip,
            args.run.random_bodies,
            args.run.verify,
        ));
        Ok(Settings {
            args,
            uri,
            queue_args,
            consumer_args,
            props,
            bodies,
            ack_every,
        })
    }

    /// The queue of publisher or consumer number `n`.
    fn queue(&self, n: u64) -> String {
        match &self.args.queue_pattern {
            Some(pattern) => {
                let (from, to) = (self.args.queue_pattern_from, self.args.queue_pattern_to);
                let count = to.saturating_sub(from) + 1;
                pattern.replace('%', &(from + n % count).to_string())
            }
            None => self.args.queue.clone(),
        }
    }

    /// The routing key consumers bind `queue` with.
    fn binding_key(&self, queue: &str) -> String {
        self.args.routing_key.clone().unwrap_or_else(|| queue.to_owned())
    }

    /// The routing keys publisher `n` takes turns with: the queues of the
    /// pattern it covers when there are fewer publishers than queues, else
    /// its one [`Settings::publish_key`].
    fn publish_keys(&self, shared: &Shared, n: u64) -> Vec<String> {
        if self.args.routing_key.is_none() && self.args.queue_pattern.is_some() {
            let count = self.args.queue_pattern_to.saturating_sub(self.args.queue_pattern_from) + 1;
            let publishers = self.args.run.publishers.max(1) as u64;
            if publishers < count {
                return (n..count).step_by(publishers as usize).map(|i| self.queue(i)).collect();
            }
        }
        vec![self.publish_key(shared, n)]
    }

    /// The routing key publishers use: the flag, else the queue name (for a
    /// server-named queue the name the first consumer got).
    fn publish_key(&self, shared: &Shared, n: u64) -> String {
        match &self.args.routing_key {
            Some(k) => k.clone(),
            None if self.queue(n).is_empty() => shared.queue_name.get().cloned().unwrap_or_default(),
            None => self.queue(n),
        }
    }
}

/// End-to-end latencies in nanoseconds: since the last report and overall.
struct Latencies {
    interval: Histogram<u64>,
    total: Histogram<u64>,
}

impl Latencies {
    fn new() -> Latencies {
        // 1 µs .. 1 h at 3 significant digits.
        let h = || Histogram::new_with_bounds(1_000, 3_600_000_000_000, 3).expect("valid histogram bounds");
        Latencies {
            interval: h(),
            total: h(),
        }
    }
}

/// Percentiles of a histogram, in milliseconds.
struct LatencyStats {
    min: f64,
    median: f64,
    p75: f64,
    p95: f64,
    p99: f64,
    count: u64,
}

impl LatencyStats {
    fn of(h: &Histogram<u64>) -> Option<LatencyStats> {
        if h.is_empty() {
            return None;
        }
        let ms = |ns: u64| ns as f64 / 1e6;
        Some(LatencyStats {
            min: ms(h.min()),
            median: ms(h.value_at_quantile(0.5)),
            p75: ms(h.value_at_quantile(0.75)),
            p95: ms(h.value_at_quantile(0.95)),
            p99: ms(h.value_at_quantile(0.99)),
            count: h.len(),
        })
    }
}

/// Counters shared by all clients and the reporter.
pub struct Shared {
    /// Messages published (written to a socket).
    pub pubs: AtomicU64,
    /// Messages consumed (deliveries received).
    pub consumes: AtomicU64,
    /// Messages publishers have claimed against `--pmessages`.
    pub pclaimed: AtomicU64,
    /// Name of the first consumer's queue (matters when it is server-named).
    queue_name: OnceLock<String>,
    /// Set once `--cmessages` were consumed, so that idle consumers stop too.
    pub consume_done: watch::Sender<bool>,
    /// Bodies `--verify` found equal to what was published.
    pub verified: AtomicU64,
    /// Bodies `--verify` found different from anything published.
    pub mismatches: AtomicU64,
    latency: Option<Mutex<Latencies>>,
}

impl Shared {
    /// Fresh counters; `latency` keeps latency histograms.
    pub fn new(latency: bool) -> Shared {
        Shared {
            pubs: AtomicU64::new(0),
            consumes: AtomicU64::new(0),
            pclaimed: AtomicU64::new(0),
            queue_name: OnceLock::new(),
            consume_done: watch::Sender::new(false),
            verified: AtomicU64::new(0),
            mismatches: AtomicU64::new(0),
            latency: latency.then(|| Mutex::new(Latencies::new())),
        }
    }
}

/// What client tasks tell the coordinator.
pub enum Event {
    /// Connected and set up; waiting for the start signal.
    Ready,
    /// A publisher or consumer finished (`--pmessages` / `--cmessages`) or failed.
    Done(Result<(), Error>),
    /// A helper task failed; the run cannot continue.
    Fatal(Error),
}

/// Where client tasks send their [`Event`]s.
pub type Events = mpsc::UnboundedSender<Event>;

/// Runs the throughput test; returns the process exit code.
pub async fn run(args: ThroughputArgs) -> i32 {
    let cfg = match Settings::new(args) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    now_ns(); // start the latency clock
    let shared = Arc::new(Shared::new(cfg.args.measure_latency));
    let plan = cfg.args.run.plan();
    let (cfg2, shared1, shared2) = (cfg.clone(), shared.clone(), shared.clone());
    let (consumers, publishers) = (AtomicU64::new(0), AtomicU64::new(0));
    drive(
        plan,
        &shared,
        move |go, ev| {
            let (cfg, shared) = (cfg.clone(), shared1.clone());
            let n = consumers.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let r = consumer(&cfg, &shared, n, go, &ev).await;
                let _ = ev.send(Event::Done(r));
            });
        },
        move |go, ev| {
            let (cfg, shared) = (cfg2.clone(), shared2.clone());
            let n = publishers.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let r = publisher(&cfg, &shared, n, go, &ev).await;
                let _ = ev.send(Event::Done(r));
            });
        },
    )
    .await
}

/// The shape of a throughput run, whatever the protocol.
pub struct Plan {
    /// Consumer clients.
    pub consumers: usize,
    /// Publisher clients.
    pub publishers: usize,
    /// Stop after this many seconds (0 = when done or interrupted).
    pub seconds: u64,
    /// Print only the summary.
    pub quiet: bool,
    /// Print the summary as JSON.
    pub json: bool,
    /// Report what `--verify` found, and fail the run on a mismatch.
    pub verify: bool,
    /// Also print the total numbers of messages published and consumed.
    pub totals: bool,
}

/// [`drive`] for protocol modes whose clients share one settings value:
/// each consumer and publisher is a task running `consumer` or `publisher`,
/// whose result is reported when it ends.
pub async fn drive_clients<C, CF, CFut, PF, PFut>(
    plan: Plan,
    shared: Arc<Shared>,
    cfg: Arc<C>,
    consumer: CF,
    publisher: PF,
) -> i32
where
    C: Send + Sync + 'static,
    CF: Fn(Arc<C>, Arc<Shared>, watch::Receiver<bool>, Events) -> CFut,
    CFut: Future<Output = Result<(), Error>> + Send + 'static,
    PF: Fn(Arc<C>, Arc<Shared>, watch::Receiver<bool>, Events) -> PFut,
    PFut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let spawn = |client: Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>, ev: Events| {
        tokio::spawn(async move {
            let r = client.await;
            let _ = ev.send(Event::Done(r));
        });
    };
    drive(
        plan,
        &shared,
        |go, ev| spawn(Box::pin(consumer(cfg.clone(), shared.clone(), go, ev.clone())), ev),
        |go, ev| spawn(Box::pin(publisher(cfg.clone(), shared.clone(), go, ev.clone())), ev),
    )
    .await
}

/// Counts a batch of `received` messages a consumer took (the protocol
/// modes count per read, not per message as [`count_consumed`] does); true
/// once `limit` (`--cmessages`, 0 for none) is reached, which stops every
/// consumer.
pub fn count_batch_consumed(shared: &Shared, received: u64, limit: u64) -> bool {
    let total = shared.consumes.fetch_add(received, Ordering::Relaxed) + received;
    if limit > 0 && total >= limit {
        let _ = shared.consume_done.send(true);
        return true;
    }
    false
}

/// Reads more of a consumer's connection into `buf` (keeping at least
/// `room` bytes free, growing by `grow`); false once the other consumers
/// took all that `--cmessages` asked for.
pub async fn read_more(
    rd: &mut Reader,
    buf: &mut BytesMut,
    done: &mut watch::Receiver<bool>,
    room: usize,
    grow: usize,
) -> Result<bool, Error> {
    if buf.capacity() - buf.len() < room {
        buf.reserve(grow);
    }
    tokio::select! {
        r = rd.read_buf(buf) => match r? {
            0 => Err(Error::Protocol("the broker closed the connection".into())),
            _ => Ok(true),
        },
        _ = done.wait_for(|d| *d) => Ok(false),
    }
}

/// Starts the consumers, then the publishers (each told to go at once, so
/// that the queues exist before anyone publishes), reports every second,
/// and prints the summary; returns the process exit code.
pub async fn drive(
    plan: Plan,
    shared: &Shared,
    spawn_consumer: impl Fn(watch::Receiver<bool>, Events),
    spawn_publisher: impl Fn(watch::Receiver<bool>, Events),
) -> i32 {
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel();
    let (go_tx, go_rx) = watch::channel(false);
    let mut finished = 0;
    for _ in 0..plan.consumers {
        spawn_consumer(go_rx.clone(), ev_tx.clone());
    }
    if let Err(code) = wait_ready(&mut ev_rx, plan.consumers, &mut finished).await {
        return code;
    }
    for _ in 0..plan.publishers {
        spawn_publisher(go_rx.clone(), ev_tx.clone());
    }
    if let Err(code) = wait_ready(&mut ev_rx, plan.publishers, &mut finished).await {
        return code;
    }
    drop(ev_tx);

    let start = Instant::now();
    let _ = go_tx.send(true);
    let total = plan.consumers + plan.publishers;
    let deadline = (plan.seconds > 0).then(|| start + Duration::from_secs(plan.seconds));
    let mut tick = tokio::time::interval_at((start + Duration::from_secs(1)).into(), Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = (start, 0u64, 0u64);
    let stop = exit_signal();
    tokio::pin!(stop);
    while finished < total {
        tokio::select! {
            _ = tick.tick() => {
                if !plan.quiet {
                    last = report(shared, last);
                }
            }
            () = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            } => break,
            () = &mut stop => break,
            ev = ev_rx.recv() => match ev {
                Some(Event::Done(Ok(()))) => finished += 1,
                Some(Event::Done(Err(e)) | Event::Fatal(e)) => {
                    eprintln!("{e}");
                    return 1;
                }
                Some(Event::Ready) => {}
                None => break,
            }
        }
    }
    summary(&plan, shared, start);
    let mismatches = shared.mismatches.load(Ordering::Relaxed);
    if plan.verify && mismatches > 0 {
        eprintln!(
            "Verification failed: {mismatches} of {} consumed messages differ from what was published",
            mismatches + shared.verified.load(Ordering::Relaxed)
        );
        return 1;
    }
    0
}

/// Waits until `n` clients reported ready; a failure ends the run.
async fn wait_ready(rx: &mut mpsc::UnboundedReceiver<Event>, n: usize, finished: &mut usize) -> Result<(), i32> {
    let mut ready = 0;
    let stop = exit_signal();
    tokio::pin!(stop);
    while ready < n {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(Event::Ready) => ready += 1,
                Some(Event::Done(Ok(()))) => *finished += 1,
                Some(Event::Done(Err(e)) | Event::Fatal(e)) => {
                    eprintln!("{e}");
                    return Err(1);
                }
                None => return Err(1),
            },
            () = &mut stop => return Err(130),
        }
    }
    Ok(())
}

/// Prints one per-second line; returns the new baseline.
fn report(shared: &Shared, (t0, pubs0, cons0): (Instant, u64, u64)) -> (Instant, u64, u64) {
    let now = Instant::now();
    let pubs = shared.pubs.load(Ordering::Relaxed);
    let cons = shared.consumes.load(Ordering::Relaxed);
    let secs = now.duration_since(t0).as_secs_f64().max(1e-9);
    let mut line = format!(
        "Publish rate: {} msgs/s Consume rate: {} msgs/s",
        ((pubs - pubs0) as f64 / secs).round() as u64,
        ((cons - cons0) as f64 / secs).round() as u64
    );
    if let Some(lat) = &shared.latency {
        let mut lat = lat.lock();
        if let Some(s) = LatencyStats::of(&lat.interval) {
            line.push_str(&format!(
                " | Latency (ms) min/median/75th/95th/99th: {:.3}/{:.3}/{:.3}/{:.3}/{:.3}",
                s.min, s.median, s.p75, s.p95, s.p99
            ));
        }
        lat.interval.reset();
    }
    println!("{line}");
    (now, pubs, cons)
}

/// Prints the averages since `start` (and overall latency percentiles,
/// totals and verification results when the plan asks for them).
fn summary(plan: &Plan, shared: &Shared, start: Instant) {
    let elapsed = start.elapsed().as_secs_f64();
    let avg = |n: u64| (n as f64 / elapsed.max(1e-9)).round() as u64;
    let (pubs, consumes) = (
        shared.pubs.load(Ordering::Relaxed),
        shared.consumes.load(Ordering::Relaxed),
    );
    let (avg_pub, avg_consume) = (avg(pubs), avg(consumes));
    let (verified, mismatches) = (
        shared.verified.load(Ordering::Relaxed),
        shared.mismatches.load(Ordering::Relaxed),
    );
    let latency = shared.latency.as_ref().and_then(|l| LatencyStats::of(&l.lock().total));
    println!();
    if plan.json {
        let mut json =
            format!("{{\"elapsed_seconds\":{elapsed},\"avg_pub_rate\":{avg_pub},\"avg_consume_rate\":{avg_consume}");
        if plan.totals {
            json.push_str(&format!(",\"total_published\":{pubs},\"total_consumed\":{consumes}"));
        }
        if plan.verify {
            json.push_str(&format!(",\"verified\":{verified},\"verify_failures\":{mismatches}"));
        }
        if let Some(s) = latency {
            let r = |v: f64| (v * 1000.0).round() / 1000.0;
            json.push_str(&format!(
                ",\"latency_min_ms\":{},\"latency_median_ms\":{},\"latency_p75_ms\":{},\"latency_p95_ms\":{},\"latency_p99_ms\":{},\"latency_count\":{}",
                r(s.min),
                r(s.median),
                r(s.p75),
                r(s.p95),
                r(s.p99),
                s.count
            ));
        }
        json.push('}');
        println!("{json}");
    } else {
        println!("Summary:");
        println!("Average publish rate: {avg_pub} msgs/s");
        println!("Average consume rate: {avg_consume} msgs/s");
        if plan.totals {
            println!("Total published: {pubs}");
            println!("Total consumed: {consumes}");
        }
        if plan.verify {
            println!("Verified: {verified} messages, {mismatches} differed from what was published");
        }
        if let Some(s) = latency {
            println!("Latency (ms, n={}):", s.count);
            println!("  min:    {:.3}", s.min);
            println!("  median: {:.3}", s.median);
            println!("  75th:   {:.3}", s.p75);
            println!("  95th:   {:.3}", s.p95);
            println!("  99th:   {:.3}", s.p99);
        }
    }
}

/// Paces a client to `rate` messages per second (0 = unlimited).
pub struct Pacer {
    rate: u64,
    start: Instant,
    sent: u64,
}

impl Pacer {
    /// A pacer for `rate` messages per second.
    pub fn new(rate: u64) -> Pacer {
        Pacer {
            rate,
            start: Instant::now(),
            sent: 0,
        }
    }

    /// How many messages may go now (`u64::MAX` when unlimited).
    fn allowance(&mut self) -> u64 {
        if self.rate == 0 {
            return u64::MAX;
        }
        let due = (self.start.elapsed().as_secs_f64() * self.rate as f64) as u64 + 1;
        if due > self.sent + self.rate {
            // More than a second behind: don't burst to catch up.
            self.start = Instant::now();
            self.sent = 0;
            return 1;
        }
        due.saturating_sub(self.sent)
    }

    /// When the next message is due.
    fn next_at(&self) -> Instant {
        self.start + Duration::from_secs_f64(self.sent as f64 / self.rate.max(1) as f64)
    }

    /// Waits until at least one message may go; returns how many may.
    pub async fn wait(&mut self) -> u64 {
        loop {
            let n = self.allowance();
            if n > 0 {
                return n;
            }
            tokio::time::sleep_until(self.next_at().into()).await;
        }
    }

    /// Counts `n` messages as sent.
    pub fn record(&mut self, n: u64) {
        self.sent += n;
    }
}

/// A publish frame triple, encoded once and copied for every message.
struct Template {
    frames: BytesMut,
    /// Offset of the first body byte, where `-l` writes the timestamp.
    timestamp_at: Option<usize>,
    /// Where the body frames' payloads sit in `frames`: (offset in
    /// `frames`, offset in the body, length); `--random-bodies` overwrites
    /// them for every message.
    body_spans: Vec<(usize, usize, usize)>,
    /// The bodies and how this publisher picks among them.
    bodies: Arc<Bodies>,
    picker: SlotPicker,
}

impl Template {
    fn new(cfg: &Settings, channel: u16, routing_key: &str, frame_max: u32) -> Result<Template, Error> {
        let mut frames = BytesMut::new();
        let publish = Method::BasicPublish {
            exchange: ShortStr::from(cfg.args.exchange.as_str()),
            routing_key: ShortStr::from(routing_key),
            mandatory: false,
            immediate: false,
        };
        write_method(&mut frames, channel, &publish)?;
        let bodies = cfg.bodies.clone();
        write_header(&mut frames, channel, bodies.size() as u64, &cfg.props)?;
        let body_at = frames.len();
        write_body(&mut frames, channel, bodies.body(0), frame_max);
        let mut body_spans = Vec::new();
        let (mut at, mut in_body) = (body_at, 0);
        while let Some(frame) = peek_frame(&frames[at..])? {
            body_spans.push((at + 7, in_body, frame.payload.len()));
            in_body += frame.payload.len();
            at += frame.len;
        }
        Ok(Template {
            frames,
            timestamp_at: cfg.args.measure_latency.then_some(body_at + 7),
            body_spans,
            bodies,
            picker: SlotPicker::new(),
        })
    }

    /// Whether every message is the same bytes.
    fn is_static(&self) -> bool {
        self.timestamp_at.is_none() && !self.bodies.is_random()
    }

    /// Appends `n` messages to `out`.
    fn append(&mut self, out: &mut BytesMut, n: u64) {
        for _ in 0..n {
            let at = out.len();
            out.extend_from_slice(&self.frames);
            if self.bodies.is_random() {
                let body = self.bodies.body(self.picker.next(self.bodies.slots()));
                for &(to, from, len) in &self.body_spans {
                    out[at + to..at + to + len].copy_from_slice(&body[from..from + len]);
                }
            }
            if let Some(ts) = self.timestamp_at {
                out[at + ts..at + ts + 8].copy_from_slice(&now_ns().to_le_bytes());
            }
        }
    }
}

/// Publisher state the confirm reader shares with the writer.
#[derive(Default)]
struct PubState {
    /// Publishes the server has confirmed (acked or nacked).
    settled: AtomicU64,
    /// Publishes the server nacked.
    nacked: AtomicU64,
    /// tx.commit-ok replies received.
    commits: AtomicU64,
    /// Signalled whenever one of the above grows.
    progress: Notify,
}

impl PubState {
    /// Waits until `done()` holds, woken by the confirm reader.
    async fn wait_for(&self, done: impl Fn(&PubState) -> bool) {
        while !done(self) {
            self.progress.notified().await;
        }
    }
}

/// Tracks which publish sequence numbers are confirmed, from acks/nacks
/// that may be `multiple` or (in principle) out of order.
#[derive(Default)]
struct ConfirmTracker {
    /// Every tag up to here is settled.
    low: u64,
    /// Settled tags above `low`.
    above: BTreeSet<u64>,
}

impl ConfirmTracker {
    fn settle(&mut self, tag: u64, multiple: bool) {
        if multiple {
            self.low = self.low.max(tag);
            if !self.above.is_empty() {
                self.above = self.above.split_off(&(self.low + 1));
            }
        } else if tag > self.low {
            self.above.insert(tag);
        }
        while self.above.first() == Some(&(self.low + 1)) {
            self.above.pop_first();
            self.low += 1;
        }
    }

    fn settled(&self) -> u64 {
        self.low + self.above.len() as u64
    }
}

/// Reads a publisher's connection: confirms, commit-oks, and errors.
async fn publisher_reader(mut reader: FrameReader, st: &PubState) -> Result<(), Error> {
    let mut tracker = ConfirmTracker::default();
    loop {
        reader.fill().await?;
        let before = tracker.settled();
        let mut progress = false;
        while let Some(frame) = parse_frame(&mut reader.buf, 0)? {
            let Frame::Method { method, .. } = frame else { continue };
            match method {
                Method::BasicAck { delivery_tag, multiple } => tracker.settle(delivery_tag, multiple),
                Method::BasicNack {
                    delivery_tag, multiple, ..
                } => {
                    let was = tracker.settled();
                    tracker.settle(delivery_tag, multiple);
                    st.nacked.fetch_add(tracker.settled() - was, Ordering::Relaxed);
                }
                Method::TxCommitOk => {
                    st.commits.fetch_add(1, Ordering::Release);
                    progress = true;
                }
                Method::ConnectionCloseOk => return Ok(()),
                Method::ConnectionBlocked { reason } => eprintln!("Publisher blocked by server: {reason}"),
                Method::ConnectionUnblocked => eprintln!("Publisher unblocked"),
                m => {
                    if let Some(e) = close_error(&m) {
                        return Err(e);
                    }
                }
            }
        }
        if tracker.settled() != before {
            st.settled.store(tracker.settled(), Ordering::Release);
            progress = true;
        }
        if progress {
            st.progress.notify_one();
        }
    }
}

/// One publisher connection.
async fn publisher(
    cfg: &Settings,
    shared: &Shared,
    n: u64,
    mut go: watch::Receiver<bool>,
    ev: &Events,
) -> Result<(), Error> {
    let mut conn = Connection::connect(&cfg.uri, "lavinmqperf publisher").await?;
    let args = &cfg.args;
    let ch = if args.run.consumers == 0 && args.exchange.is_empty() && !cfg.queue(n).is_empty() {
        // Nobody else declares the queue, and publishing to the default
        // exchange without it would drop every message.
        declare_queue(&mut conn, cfg, &cfg.queue(n)).await?.0
    } else {
        conn.open_channel(1).await?;
        1
    };
    if cfg.args.confirm > 0 {
        conn.confirm_select(ch).await?;
    }
    if cfg.args.transaction > 0 {
        conn.tx_select(ch).await?;
    }
    let _ = ev.send(Event::Ready);
    let _ = go.wait_for(|go| *go).await;

    let mut templates = cfg
        .publish_keys(shared, n)
        .iter()
        .map(|key| Template::new(cfg, ch, key, conn.tuning.frame_max))
        .collect::<Result<Vec<_>, Error>>()?;
    let mut turn = 0;
    let Connection { reader, mut writer, .. } = conn;
    let st = Arc::new(PubState::default());
    let reader_task = tokio::spawn({
        let (st, ev) = (st.clone(), ev.clone());
        async move {
            let r = publisher_reader(reader, &st).await;
            if let Err(e) = r {
                let _ = ev.send(Event::Fatal(e));
            }
        }
    });

    let (window, tx_size, limit) = (cfg.args.confirm, cfg.args.transaction, cfg.args.run.pmessages);
    let frame_len = templates[0].frames.len();
    let per_batch = (BATCH_BYTES / frame_len).max(1) as u64;
    let mut out = BytesMut::with_capacity(BATCH_BYTES + frame_len + 64);
    let mut pacer = Pacer::new(cfg.args.run.rate);
    let (mut published, mut in_tx, mut commits) = (0u64, 0u64, 0u64);
    loop {
        let mut n = per_batch;
        if window > 0 {
            st.wait_for(|st| published - st.settled.load(Ordering::Acquire) < window)
                .await;
            n = n.min(window - (published - st.settled.load(Ordering::Acquire)));
        }
        if tx_size > 0 {
            n = n.min(tx_size - in_tx);
        }
        n = n.min(pacer.wait().await);
        let mut last = false;
        if limit > 0 {
            let claimed = shared.pclaimed.fetch_add(n, Ordering::Relaxed);
            if claimed >= limit {
                break;
            }
            if claimed + n >= limit {
                n = limit - claimed;
                last = true;
            }
        }
        let commit = tx_size > 0 && in_tx + n == tx_size;
        if n == 1 && !commit && templates.len() == 1 && templates[0].is_static() {
            writer.send(&templates[0].frames).await?;
        } else {
            out.clear();
            if templates.len() == 1 {
                templates[0].append(&mut out, n);
            } else {
                for _ in 0..n {
                    templates[turn].append(&mut out, 1);
                    turn = (turn + 1) % templates.len();
                }
            }
            if commit {
                write_method(&mut out, ch, &Method::TxCommit)?;
            }
            writer.send(&out).await?;
        }
        published += n;
        shared.pubs.fetch_add(n, Ordering::Relaxed);
        pacer.record(n);
        in_tx += n;
        if commit {
            in_tx = 0;
            commits += 1;
            st.wait_for(|st| st.commits.load(Ordering::Acquire) >= commits).await;
        }
        if last {
            break;
        }
    }

    // Done (--pmessages): settle what is outstanding, then close.
    if tx_size > 0 && in_tx > 0 {
        out.clear();
        write_method(&mut out, ch, &Method::TxCommit)?;
        writer.send(&out).await?;
        commits += 1;
        st.wait_for(|st| st.commits.load(Ordering::Acquire) >= commits).await;
    }
    if window > 0 {
        let all = st.wait_for(|st| st.settled.load(Ordering::Acquire) >= published);
        if tokio::time::timeout(CLOSE_TIMEOUT * 6, all).await.is_err() {
            eprintln!("Publisher: timed out waiting for confirms");
        }
    }
    let nacked = st.nacked.load(Ordering::Relaxed);
    if nacked > 0 {
        eprintln!("Publisher: {nacked} publishes were nacked by the server");
    }
    out.clear();
    write_method(&mut out, 0, &client::close_method())?;
    writer.send(&out).await?;
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, reader_task).await;
    Ok(())
}

/// Consumer bookkeeping while walking the receive buffer.
struct ConsumeState {
    channel: u16,
    ack_every: u64,
    since_ack: u64,
    /// Commit after this many acknowledged messages (0 = no transactions).
    tx_every: u64,
    /// Messages acked since the last tx.commit.
    uncommitted: u64,
    /// A tx.commit frame, encoded once.
    commit: BytesMut,
    /// tx.commit frames sent and tx.commit-ok replies received.
    commits_sent: u64,
    commits_ok: u64,
    /// Tag of the delivery whose content is arriving (or arrived last).
    tag: u64,
    /// Tag of the last complete message.
    last_tag: u64,
    /// Body bytes still to come for the current delivery.
    body_left: u64,
    /// The next body frame is the first of a message.
    first_body: bool,
    measure_latency: bool,
    samples: Vec<u64>,
    /// What bodies must equal, with `--verify`.
    verify: Option<Arc<Bodies>>,
    /// The check of the body arriving.
    check: BodyCheck,
    /// Bodies verified, and found different, since the last flush.
    verified: u64,
    mismatches: u64,
    /// A mismatch was reported on stderr already.
    told: bool,
}

/// What one pass over the receive buffer did.
struct Pass {
    /// Messages received completely (deliver, header and body).
    delivered: u64,
    /// Stopped because `budget` messages were received (more may be buffered).
    budget_hit: bool,
    /// A basic.get found the queue empty (the pass stops there).
    empty: bool,
    /// connection.close-ok arrived.
    closed: bool,
}

impl ConsumeState {
    fn new(channel: u16, ack_every: u64, tx_every: u64, measure_latency: bool, verify: Option<Arc<Bodies>>) -> Self {
        let mut commit = BytesMut::new();
        write_method(&mut commit, channel, &Method::TxCommit).expect("tx.commit encodes");
        ConsumeState {
            channel,
            ack_every,
            since_ack: 0,
            tx_every,
            uncommitted: 0,
            commit,
            commits_sent: 0,
            commits_ok: 0,
            tag: 0,
            last_tag: 0,
            body_left: 0,
            first_body: false,
            measure_latency,
            samples: Vec::with_capacity(if measure_latency { SAMPLE_FLUSH } else { 0 }),
            verify,
            check: BodyCheck::default(),
            verified: 0,
            mismatches: 0,
            told: false,
        }
    }

    /// A message is complete: count (and verify) it, ack every `ack_every`
    /// and commit every `tx_every` acked messages.
    fn complete(&mut self, pass: &mut Pass, wbuf: &mut BytesMut) {
        pass.delivered += 1;
        self.last_tag = self.tag;
        if self.verify.is_some() {
            if self.check.ok() {
                self.verified += 1;
            } else {
                self.mismatches += 1;
                if !self.told {
                    self.told = true;
                    eprintln!(
                        "Consumer: the body of delivery {} differs from what was published",
                        self.tag
                    );
                }
            }
        }
        if self.ack_every > 0 {
            self.since_ack += 1;
            if self.since_ack >= self.ack_every {
                self.ack(wbuf);
            }
        }
    }

    /// Acks everything received (multiple), committing when `tx_every` acked
    /// messages are due.
    fn ack(&mut self, wbuf: &mut BytesMut) {
        write_basic_ack(wbuf, self.channel, self.last_tag, true);
        self.uncommitted += self.since_ack;
        self.since_ack = 0;
        if self.tx_every > 0 && self.uncommitted >= self.tx_every {
            self.commit_now(wbuf);
        }
    }

    /// Appends a tx.commit.
    fn commit_now(&mut self, wbuf: &mut BytesMut) {
        wbuf.extend_from_slice(&self.commit);
        self.uncommitted = 0;
        self.commits_sent += 1;
    }

    /// Handles every complete frame in `rbuf` (stopping after `budget`
    /// complete messages), appending acks and heartbeats to `wbuf`.
    fn process(&mut self, rbuf: &mut BytesMut, wbuf: &mut BytesMut, budget: u64) -> Result<Pass, Error> {
        // Frames are consumed by moving `pos`; the buffer is advanced once.
        let mut pos = 0;
        let pass = self.process_at(rbuf, &mut pos, wbuf, budget);
        rbuf.advance(pos);
        pass
    }

    fn process_at(
        &mut self,
        rbuf: &mut BytesMut,
        pos: &mut usize,
        wbuf: &mut BytesMut,
        budget: u64,
    ) -> Result<Pass, Error> {
        let mut pass = Pass {
            delivered: 0,
            budget_hit: false,
            empty: false,
            closed: false,
        };
        loop {
            if pass.delivered >= budget {
                pass.budget_hit = true;
                return Ok(pass);
            }
            let Some(frame) = peek_frame(&rbuf[*pos..])? else {
                return Ok(pass);
            };
            let len = frame.len;
            match frame.kind {
                FRAME_METHOD => match deliver_tag(frame.payload).or_else(|| get_ok_tag(frame.payload)) {
                    Some(tag) => self.tag = tag,
                    None => {
                        // Anything but a delivery goes through the codec.
                        rbuf.advance(*pos);
                        *pos = 0;
                        if let Some(Frame::Method { channel, method }) = parse_frame(rbuf, 0)? {
                            if let Some(e) = close_error(&method) {
                                let ok = if channel == 0 {
                                    Method::ConnectionCloseOk
                                } else {
                                    Method::ChannelCloseOk
                                };
                                write_method(wbuf, channel, &ok)?;
                                return Err(e);
                            }
                            match method {
                                Method::BasicCancel { consumer_tag, .. } => {
                                    return Err(Error::ConsumerCancelled(consumer_tag.to_string()));
                                }
                                Method::BasicGetEmpty => {
                                    pass.empty = true;
                                    return Ok(pass);
                                }
                                Method::TxCommitOk => self.commits_ok += 1,
                                Method::ConnectionCloseOk => {
                                    pass.closed = true;
                                    return Ok(pass);
                                }
                                Method::ConnectionBlocked { reason } => {
                                    eprintln!("Consumer blocked by server: {reason}")
                                }
                                Method::ConnectionUnblocked => eprintln!("Consumer unblocked"),
                                _ => {}
                            }
                        }
                        continue;
                    }
                },
                FRAME_HEADER => {
                    self.body_left = header_body_size(frame.payload).unwrap_or(0);
                    self.first_body = true;
                    if let Some(bodies) = &self.verify {
                        self.check.start(bodies, self.body_left);
                    }
                    if self.body_left == 0 {
                        self.complete(&mut pass, wbuf);
                    }
                }
                FRAME_BODY => {
                    if self.first_body {
                        self.first_body = false;
                        if self.measure_latency
                            && let Some(ts) = frame.payload.get(..8)
                        {
                            let sent = i64::from_le_bytes(ts.try_into().unwrap_or_default());
                            let now = now_ns();
                            if sent > 0 && sent <= now {
                                self.samples.push((now - sent) as u64);
                            }
                        }
                    }
                    if let Some(bodies) = &self.verify {
                        self.check.frame(bodies, frame.payload);
                    }
                    self.body_left = self.body_left.saturating_sub(frame.payload.len() as u64);
                    if self.body_left == 0 {
                        self.complete(&mut pass, wbuf);
                    }
                }
                FRAME_HEARTBEAT => write_heartbeat(wbuf),
                other => return Err(lavinmq::amqp::codec::CodecError::UnknownFrameType(other).into()),
            }
            *pos += len;
        }
    }

    /// Merges the verification counts into the shared figures.
    fn flush_verified(&mut self, shared: &Shared) {
        if self.verified > 0 {
            shared.verified.fetch_add(self.verified, Ordering::Relaxed);
            self.verified = 0;
        }
        if self.mismatches > 0 {
            shared.mismatches.fetch_add(self.mismatches, Ordering::Relaxed);
            self.mismatches = 0;
        }
    }

    /// Merges buffered latency samples (and verification counts) into the
    /// shared figures.
    fn flush_samples(&mut self, shared: &Shared) {
        self.flush_verified(shared);
        if self.samples.is_empty() {
            return;
        }
        if let Some(lat) = &shared.latency {
            let mut lat = lat.lock();
            for &s in &self.samples {
                lat.interval.saturating_record(s);
                lat.total.saturating_record(s);
            }
        }
        self.samples.clear();
    }
}

/// Declares the test queue on channel 1 (durable unless server-named). If
/// that fails (e.g. the queue exists with other arguments) it is declared
/// passively on channel 2 and used as it is. Returns the channel to go on
/// with and the queue name.
async fn declare_queue(conn: &mut Connection, cfg: &Settings, name: &str) -> Result<(u16, String), Error> {
    conn.open_channel(1).await?;
    let mut declare = QueueDeclare {
        name,
        passive: false,
        durable: !name.is_empty(),
        exclusive: false,
        auto_delete: name.is_empty(),
        arguments: &cfg.queue_args,
    };
    match conn.queue_declare(1, declare.clone()).await {
        Ok(q) => Ok((1, q)),
        Err(Error::ChannelClosed { code, text, .. }) => {
            eprintln!("Queue declare failed ({code} {text}), declaring it passively");
            conn.open_channel(2).await?;
            declare.passive = true;
            Ok((2, conn.queue_declare(2, declare).await?))
        }
        Err(e) => Err(e),
    }
}

/// One consumer connection: declares (and binds) the queue, then consumes
/// (or polls with basic.get) until done.
async fn consumer(
    cfg: &Settings,
    shared: &Shared,
    n: u64,
    mut go: watch::Receiver<bool>,
    ev: &Events,
) -> Result<(), Error> {
    let args = &cfg.args;
    let mut conn = Connection::connect(&cfg.uri, "lavinmqperf consumer").await?;
    let (ch, queue) = declare_queue(&mut conn, cfg, &cfg.queue(n)).await?;
    let _ = shared.queue_name.set(queue.clone());
    if args.measure_latency {
        // Messages already in the queue would skew the latency.
        conn.queue_purge(ch, &queue).await?;
    }
    if args.ack_transaction > 0 {
        conn.tx_select(ch).await?;
    }
    if let Some(prefetch) = args.prefetch {
        conn.qos(ch, prefetch).await?;
    }
    if !args.exchange.is_empty() {
        conn.queue_bind(ch, &queue, &args.exchange, &cfg.binding_key(&queue))
            .await?;
    }
    let _ = ev.send(Event::Ready);
    let _ = go.wait_for(|go| *go).await;
    if !args.poll {
        conn.consume(ch, &queue, cfg.ack_every == 0, &cfg.consumer_args).await?;
    }

    let Connection {
        mut reader,
        mut writer,
        mut wbuf,
        ..
    } = conn;
    wbuf.clear();
    let verify = args.run.verify.then(|| cfg.bodies.clone());
    let mut state = ConsumeState::new(ch, cfg.ack_every, args.ack_transaction, args.measure_latency, verify);
    let mut io = ConsumerIo {
        reader: &mut reader,
        writer: &mut writer,
        wbuf: &mut wbuf,
    };
    if args.poll {
        poll_loop(cfg, shared, &queue, &mut state, &mut io).await?;
    } else {
        consume_loop(cfg, shared, &mut state, &mut io).await?;
    }

    // Done (--cmessages): ack and commit what was counted, then close.
    state.flush_samples(shared);
    if state.since_ack > 0 {
        state.ack(&mut wbuf);
    }
    if state.uncommitted > 0 {
        state.commit_now(&mut wbuf);
    }
    write_method(&mut wbuf, 0, &client::close_method())?;
    writer.send(&wbuf).await?;
    wbuf.clear();
    let drain = async {
        loop {
            let pass = state.process(&mut reader.buf, &mut wbuf, u64::MAX)?;
            wbuf.clear();
            if pass.closed {
                return Ok::<(), Error>(());
            }
            if !pass.empty {
                reader.fill().await?;
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, drain).await;
    if state.commits_ok < state.commits_sent {
        eprintln!(
            "Consumer: {} of {} ack transactions were not committed",
            state.commits_sent - state.commits_ok,
            state.commits_sent
        );
    }
    Ok(())
}

/// A consumer's connection halves and write buffer, for its loops.
struct ConsumerIo<'a> {
    reader: &'a mut FrameReader,
    writer: &'a mut Writer,
    wbuf: &'a mut BytesMut,
}

impl ConsumerIo<'_> {
    /// Walks the receive buffer (see [`ConsumeState::process`]) and sends
    /// the acks and commits that produced. On an error what is pending
    /// (such as channel.close-ok) is still sent.
    async fn process(&mut self, state: &mut ConsumeState, budget: u64) -> Result<Pass, Error> {
        let pass = match state.process(&mut self.reader.buf, self.wbuf, budget) {
            Ok(p) => p,
            Err(e) => {
                let _ = self.writer.send(self.wbuf).await;
                return Err(e);
            }
        };
        if !self.wbuf.is_empty() {
            self.writer.send(self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(pass)
    }
}

/// Counts `delivered` consumed messages; true once `--cmessages` (`limit`,
/// counted one at a time so that the total is exact) are all consumed.
fn count_consumed(shared: &Shared, limit: u64, delivered: u64) -> bool {
    if limit == 0 {
        shared.consumes.fetch_add(delivered, Ordering::Relaxed);
        return false;
    }
    let counted = shared
        .consumes
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| (c < limit).then_some(c + 1));
    if counted.map_or(true, |c| c + 1 >= limit) {
        shared.consume_done.send_replace(true);
        return true;
    }
    false
}

/// Receives deliveries of basic.consume until `--cmessages` are consumed.
async fn consume_loop(
    cfg: &Settings,
    shared: &Shared,
    state: &mut ConsumeState,
    io: &mut ConsumerIo<'_>,
) -> Result<(), Error> {
    let args = &cfg.args;
    let limit = args.run.cmessages;
    let mut consume_done = shared.consume_done.subscribe();
    let mut pacer = Pacer::new(args.consumer_rate);
    loop {
        // With --cmessages count one at a time so the total is exact.
        let budget = if limit > 0 { 1 } else { pacer.wait().await };
        let pass = io.process(state, budget).await?;
        if pass.delivered > 0 {
            pacer.record(pass.delivered);
            state.flush_verified(shared);
            if count_consumed(shared, limit, pass.delivered) {
                return Ok(());
            }
            if limit > 0 && args.consumer_rate > 0 {
                pacer.wait().await;
            }
        }
        if state.samples.len() >= SAMPLE_FLUSH {
            state.flush_samples(shared);
        }
        if !pass.budget_hit {
            state.flush_samples(shared);
            tokio::select! {
                r = io.reader.fill() => r?,
                // Another consumer took the last of --cmessages.
                _ = consume_done.wait_for(|done| *done) => return Ok(()),
            }
        }
    }
}

/// `--poll`: basic.get in a loop, one at a time, until `--cmessages` are
/// consumed; an empty queue is asked again at once. Acks and commits go out
/// with the next basic.get.
async fn poll_loop(
    cfg: &Settings,
    shared: &Shared,
    queue: &str,
    state: &mut ConsumeState,
    io: &mut ConsumerIo<'_>,
) -> Result<(), Error> {
    let args = &cfg.args;
    let mut get = BytesMut::new();
    let method = Method::BasicGet {
        queue: ShortStr::from(queue),
        no_ack: cfg.ack_every == 0,
    };
    write_method(&mut get, state.channel, &method)?;
    let limit = args.run.cmessages;
    let mut consume_done = shared.consume_done.subscribe();
    let mut pacer = Pacer::new(args.consumer_rate);
    loop {
        if *consume_done.borrow() {
            return Ok(());
        }
        pacer.wait().await;
        io.wbuf.extend_from_slice(&get);
        io.writer.send(io.wbuf).await?;
        io.wbuf.clear();
        let pass = loop {
            let pass = io.process(state, 1).await?;
            if pass.delivered > 0 || pass.empty {
                break pass;
            }
            tokio::select! {
                r = io.reader.fill() => r?,
                _ = consume_done.wait_for(|done| *done) => return Ok(()),
            }
        };
        // Like LavinMQ's poller, the consumer rate paces attempts.
        pacer.record(1);
        if pass.delivered > 0 {
            state.flush_verified(shared);
            if count_consumed(shared, limit, pass.delivered) {
                return Ok(());
            }
        }
        if pass.empty || state.samples.len() >= SAMPLE_FLUSH {
            state.flush_samples(shared);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confirm_tracker() {
        let mut t = ConfirmTracker::default();
        t.settle(1, false);
        t.settle(3, false);
        assert_eq!((t.low, t.settled()), (1, 2));
        t.settle(2, false);
        assert_eq!((t.low, t.settled()), (3, 3));
        t.settle(5, false);
        t.settle(7, false);
        t.settle(6, true);
        assert_eq!((t.low, t.settled()), (7, 7));
        t.settle(100, true);
        assert_eq!(t.settled(), 100);
        t.settle(50, false);
        assert_eq!(t.settled(), 100);
    }

    fn consume_state(ack_every: u64) -> ConsumeState {
        ConsumeState::new(1, ack_every, 0, true, None)
    }

    fn delivery(buf: &mut BytesMut, tag: u64, body: &[u8], frame_max: u32) {
        lavinmq::amqp::codec::write_basic_deliver(buf, 1, "ctag", tag, false, "", "q").unwrap();
        write_header(buf, 1, body.len() as u64, &BasicProperties::default()).unwrap();
        write_body(buf, 1, body, frame_max);
    }

    #[test]
    fn consumer_counts_whole_messages_and_acks_multiple() {
        let mut rbuf = BytesMut::new();
        now_ns();
        std::thread::sleep(Duration::from_millis(2));
        let mut stamped = (now_ns() - 1_000_000).to_le_bytes().to_vec();
        stamped.extend_from_slice(&[0u8; 10_000]);
        delivery(&mut rbuf, 1, &stamped, 4096); // three body frames
        delivery(&mut rbuf, 2, b"", 4096); // no body frame at all
        write_method(&mut rbuf, 1, &Method::BasicQosOk).unwrap(); // handed to the codec
        delivery(&mut rbuf, 3, &now_ns().to_le_bytes(), 4096);
        write_heartbeat(&mut rbuf);
        let total = rbuf.len();
        // A partial frame stays buffered.
        rbuf.extend_from_slice(&[1, 0, 1, 0, 0]);

        let mut st = consume_state(2);
        let mut wbuf = BytesMut::new();
        let pass = st.process(&mut rbuf, &mut wbuf, 2).unwrap();
        assert_eq!((pass.delivered, pass.budget_hit), (2, true));
        let pass = st.process(&mut rbuf, &mut wbuf, u64::MAX).unwrap();
        assert_eq!((pass.delivered, pass.budget_hit, pass.closed), (1, false, false));
        assert_eq!(rbuf.len(), 5, "all {total} bytes of whole frames consumed");
        assert_eq!(st.last_tag, 3);
        assert_eq!(st.since_ack, 1);
        assert_eq!(st.samples.len(), 2);
        assert!(st.samples[0] >= 1_000_000);

        let ack = parse_frame(&mut wbuf, 0).unwrap().unwrap();
        assert_eq!(
            ack,
            Frame::Method {
                channel: 1,
                method: Method::BasicAck {
                    delivery_tag: 2,
                    multiple: true
                }
            }
        );
        assert_eq!(
            parse_frame(&mut wbuf, 0).unwrap(),
            Some(Frame::Heartbeat { channel: 0 })
        );
        assert!(wbuf.is_empty());
    }

    #[test]
    fn consumer_reports_server_close() {
        let mut rbuf = BytesMut::new();
        delivery(&mut rbuf, 1, b"x", 4096);
        let close = Method::ChannelClose {
            reply_code: 404,
            reply_text: ShortStr::from("NOT_FOUND - no queue"),
            class_id: 60,
            method_id: 20,
        };
        write_method(&mut rbuf, 1, &close).unwrap();
        let mut st = consume_state(0);
        let mut wbuf = BytesMut::new();
        let err = st.process(&mut rbuf, &mut wbuf, u64::MAX).err().unwrap();
        assert!(matches!(err, Error::ChannelClosed { code: 404, .. }), "{err}");
        assert_eq!(
            parse_frame(&mut wbuf, 0).unwrap(),
            Some(Frame::Method {
                channel: 1,
                method: Method::ChannelCloseOk
            })
        );

        let mut rbuf = BytesMut::new();
        write_method(&mut rbuf, 0, &Method::ConnectionCloseOk).unwrap();
        let pass = st.process(&mut rbuf, &mut wbuf, u64::MAX).unwrap();
        assert!(pass.closed);
    }

    #[test]
    fn verify_counts_bodies_that_differ() {
        let bodies = Arc::new(Bodies::new(5000, 8, true, true));
        let mut st = ConsumeState::new(1, 0, 0, true, Some(bodies.clone()));
        let mut rbuf = BytesMut::new();
        let mut good = bodies.body(7).to_vec();
        good[..8].copy_from_slice(&now_ns().to_le_bytes());
        delivery(&mut rbuf, 1, &good, 4096); // two body frames
        let mut bad = good.clone();
        bad[4999] ^= 1;
        delivery(&mut rbuf, 2, &bad, 4096);
        delivery(&mut rbuf, 3, &good[..4999], 4096);
        delivery(&mut rbuf, 4, &good, 4096);
        let mut wbuf = BytesMut::new();
        let pass = st.process(&mut rbuf, &mut wbuf, u64::MAX).unwrap();
        assert_eq!(pass.delivered, 4);
        let shared = Shared::new(true);
        st.flush_samples(&shared);
        assert_eq!(shared.verified.load(Ordering::Relaxed), 2);
        assert_eq!(shared.mismatches.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn acks_are_committed_every_n_messages() {
        let mut st = ConsumeState::new(1, 2, 4, false, None);
        let mut rbuf = BytesMut::new();
        for tag in 1..=5 {
            delivery(&mut rbuf, tag, b"x", 4096);
        }
        write_method(&mut rbuf, 1, &Method::TxCommitOk).unwrap();
        let mut wbuf = BytesMut::new();
        let pass = st.process(&mut rbuf, &mut wbuf, u64::MAX).unwrap();
        assert_eq!(pass.delivered, 5);
        let mut sent = Vec::new();
        while let Some(Frame::Method { method, .. }) = parse_frame(&mut wbuf, 0).unwrap() {
            sent.push(method);
        }
        let ack = |delivery_tag| Method::BasicAck {
            delivery_tag,
            multiple: true,
        };
        assert_eq!(sent, [ack(2), ack(4), Method::TxCommit]);
        assert_eq!((st.commits_sent, st.commits_ok), (1, 1));
        assert_eq!((st.since_ack, st.uncommitted), (1, 0));
        // The rest is acked and committed at the end.
        st.ack(&mut wbuf);
        st.commit_now(&mut wbuf);
        assert!(matches!(
            parse_frame(&mut wbuf, 0).unwrap(),
            Some(Frame::Method {
                method: Method::BasicAck { delivery_tag: 5, .. },
                ..
            })
        ));
        assert!(matches!(
            parse_frame(&mut wbuf, 0).unwrap(),
            Some(Frame::Method {
                method: Method::TxCommit,
                ..
            })
        ));
    }

    #[test]
    fn polled_messages_and_empty_replies() {
        let mut st = ConsumeState::new(1, 1, 0, false, None);
        let mut rbuf = BytesMut::new();
        lavinmq::amqp::codec::write_basic_get_ok(&mut rbuf, 1, 9, false, "", "q", 0).unwrap();
        write_header(&mut rbuf, 1, 3, &BasicProperties::default()).unwrap();
        write_body(&mut rbuf, 1, b"abc", 4096);
        write_method(&mut rbuf, 1, &Method::BasicGetEmpty).unwrap();
        let mut wbuf = BytesMut::new();
        let pass = st.process(&mut rbuf, &mut wbuf, 1).unwrap();
        assert_eq!((pass.delivered, pass.empty), (1, false));
        assert!(matches!(
            parse_frame(&mut wbuf, 0).unwrap(),
            Some(Frame::Method {
                method: Method::BasicAck { delivery_tag: 9, .. },
                ..
            })
        ));
        let pass = st.process(&mut rbuf, &mut wbuf, 1).unwrap();
        assert_eq!((pass.delivered, pass.empty), (0, true));
        assert!(rbuf.is_empty());
    }

    #[test]
    fn template_sends_properties_and_random_bodies() {
        let args = ThroughputArgs::parse_from([
            "perf",
            "-s",
            "9000",
            "--random-bodies",
            "-V",
            "-p",
            "--properties",
            r#"{"content_type":"application/x-perf","priority":3,"headers":{"h":"v"}}"#,
        ]);
        let cfg = Settings::new(args).unwrap();
        let mut template = Template::new(&cfg, 1, "rk", 4096).unwrap();
        assert!(!template.is_static());
        let mut out = BytesMut::new();
        template.append(&mut out, 2);
        let mut bodies = Vec::new();
        for _ in 0..2 {
            assert!(matches!(
                parse_frame(&mut out, 0).unwrap(),
                Some(Frame::Method {
                    method: Method::BasicPublish { .. },
                    ..
                })
            ));
            let Some(Frame::Header {
                body_size, properties, ..
            }) = parse_frame(&mut out, 0).unwrap()
            else {
                panic!("no header");
            };
            assert_eq!(body_size, 9000);
            assert_eq!(properties.content_type.as_deref(), Some("application/x-perf"));
            assert_eq!((properties.priority, properties.delivery_mode), (Some(3), Some(2)));
            assert!(properties.headers.is_some());
            let mut body = Vec::new();
            while body.len() < 9000 {
                let Some(Frame::Body { payload, .. }) = parse_frame(&mut out, 0).unwrap() else {
                    panic!("no body");
                };
                body.extend_from_slice(&payload);
            }
            assert!(cfg.bodies.check(&body), "a body from the pool");
            bodies.push(body);
        }
        assert!(out.is_empty());
        // Two of 65536 slots: equal only by a rare coincidence.
        let fixed = Bodies::new(9000, 0, false, false);
        assert_ne!(bodies[0], fixed.body(0));
    }

    #[test]
    fn pacer_allows_rate() {
        let mut p = Pacer::new(0);
        assert_eq!(p.allowance(), u64::MAX);
        let mut p = Pacer::new(10);
        assert_eq!(p.allowance(), 1);
        p.record(1);
        assert_eq!(p.allowance(), 0);
        assert!(p.next_at() > p.start);
    }
}
