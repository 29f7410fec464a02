//! End-to-end throughput, in the spirit of `lavinmqperf throughput`: one publisher
//! connection and one consumer connection (the `lapin` client) move 16-byte
//! transient messages through one queue as fast as they can.
//!
//! ```sh
//! cargo bench --bench throughput                       # broker started in-process
//! AMQP_URL=amqp://guest:guest@127.0.0.1:5682/%2f \
//!     cargo bench --bench throughput                   # any broker, e.g. RabbitMQ
//! ```
//!
//! Environment:
//! * `AMQP_URL`: broker to use; unset = start `lavinmq::server::Server` in this
//!   process on an ephemeral port with a temporary data dir and `sync = false`.
//! * `DURATION`: seconds per variant (default 10; 1 when not run by `cargo bench`).
//! * `VARIANT`: `noack`, `ack` or `all` (default).
//!   - `noack`: consumer with no-ack.
//!   - `ack`: manual acks, `multiple` every 100 messages, prefetch 1000.
//! * `PUBLISH_WINDOW`: publishes queued in the client before waiting for the
//!   oldest to be written (default 1000).
//! * `BROKER_PID`: an out-of-process broker whose CPU time is reported as well.
//!
//! The publisher does not use confirms. `lapin`'s `basic_publish` future resolves
//! once the client's I/O thread has written the frames to the socket, so awaiting
//! each one serialises publishing on that thread's round trip. Instead every
//! publish is polled once (which queues its frames and wakes the I/O thread) and
//! kept in a FIFO window; when the window is full the oldest is awaited. That
//! bounds the frames buffered in the client while keeping the socket busy.
//!
//! The publisher and the consumer each run on their own thread (a current-thread
//! Tokio runtime), and lapin adds one I/O thread per connection. CPU time is
//! reported per thread from `/proc`, because on a small machine the client can
//! be the bottleneck rather than the broker.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, PublisherConfirm};

/// Queue the messages go through.
const QUEUE: &str = "perf-test";
/// The message body.
const BODY: [u8; 16] = *b"0123456789abcdef";
/// Thread name of the in-process broker's runtime.
const BROKER_THREADS: &str = "lavinmq-broker";
/// Thread running the publisher.
const PUBLISHER_THREAD: &str = "bench-publisher";
/// Thread running the consumer.
const CONSUMER_THREAD: &str = "bench-consumer";
/// Thread name lapin gives each connection's I/O thread.
const LAPIN_THREADS: &str = "lapin-io-loop";
/// USER_HZ, the unit of the CPU times in `/proc/*/stat` (100 on Linux).
const CLOCK_TICKS: f64 = 100.0;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    no_ack: bool,
    /// Ack (with `multiple`) every this many messages; 0 with no-ack.
    ack_every: u64,
    /// basic.qos prefetch count; 0 = none.
    prefetch: u16,
}

const NO_ACK: Variant = Variant {
    name: "no-ack consumer",
    no_ack: true,
    ack_every: 0,
    prefetch: 0,
};

const MANUAL_ACK: Variant = Variant {
    name: "manual ack every 100, prefetch 1000",
    no_ack: false,
    ack_every: 100,
    prefetch: 1000,
};

#[derive(Default)]
struct Counters {
    /// Publishes whose frames were written to the socket.
    published: AtomicU64,
    /// Deliveries received.
    consumed: AtomicU64,
    /// Tells the publisher to stop.
    stop: AtomicBool,
}

struct Outcome {
    publish_rate: f64,
    consume_rate: f64,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v} is not a valid value")),
        Err(_) => default,
    }
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` does not: then run a
    // short smoke test.
    let benching = std::env::args().any(|a| a == "--bench");
    let duration = Duration::from_secs(env_or("DURATION", if benching { 10 } else { 1 }));
    let window: usize = env_or("PUBLISH_WINDOW", 1000).max(1);
    let variants = match std::env::var("VARIANT").as_deref() {
        Ok("noack") => vec![NO_ACK],
        Ok("ack") => vec![MANUAL_ACK],
        Ok("all") | Err(_) => vec![NO_ACK, MANUAL_ACK],
        Ok(other) => panic!("VARIANT={other}: expected noack, ack or all"),
    };
    let broker_pid: Option<u32> = std::env::var("BROKER_PID").ok().map(|p| p.parse().expect("BROKER_PID"));

    let (url, broker) = match std::env::var("AMQP_URL") {
        Ok(url) => (url, None),
        Err(_) => {
            let broker = InProcessBroker::start();
            (broker.url.clone(), Some(broker))
        }
    };
    let target = if broker.is_some() {
        "lavinmq (in-process)".to_string()
    } else {
        url.clone()
    };
    println!(
        "Broker: {target}; {} s per variant, 16-byte transient messages, queue '{QUEUE}', \
         publisher without confirms (window {window}), {} CPUs",
        duration.as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    for variant in variants {
        println!("\n== {} ==", variant.name);
        let outcome =
            run(&url, variant, duration, window, broker_pid).unwrap_or_else(|e| panic!("{}: {e}", variant.name));
        if !benching {
            assert!(outcome.publish_rate > 0.0, "nothing was published");
            assert!(outcome.consume_rate > 0.0, "nothing was consumed");
        }
    }

    if let Some(broker) = broker {
        broker.stop();
    }
}

/// The broker running on its own runtime inside this process.
struct InProcessBroker {
    runtime: tokio::runtime::Runtime,
    server: lavinmq::server::Server,
    url: String,
    _data_dir: tempfile::TempDir,
}

impl InProcessBroker {
    fn start() -> Self {
        let data_dir = tempfile::tempdir().expect("tempdir");
        let mut config = lavinmq::config::Config::default();
        config.main.data_dir = data_dir.path().to_path_buf();
        config.main.sync = false;
        config.amqp.bind = "127.0.0.1".into();
        config.amqp.port = 0;
        config.main.metrics_http_port = Some(0);
        config.mgmt.port = 0;
        config.mqtt.port = 0;
        // Its own control socket: never replace that of a broker running here.
        config.main.control_unix_path = data_dir.path().join("ctl.sock");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name(BROKER_THREADS)
            .enable_all()
            .build()
            .expect("broker runtime");
        let server = runtime
            .block_on(lavinmq::server::Server::start(&config))
            .expect("start broker");
        let url = format!("amqp://guest:guest@{}/%2f", server.amqp_addr());
        InProcessBroker {
            runtime,
            server,
            url,
            _data_dir: data_dir,
        }
    }

    fn stop(self) {
        self.runtime.block_on(self.server.shutdown());
        self.runtime.shutdown_timeout(Duration::from_secs(2));
    }
}

/// Runs `role` on a new thread named `name` with its own current-thread runtime.
fn spawn_role<T, Fut>(name: &str, role: impl FnOnce() -> Fut + Send + 'static) -> JoinHandle<Result<T, BoxError>>
where
    T: Send + 'static,
    Fut: Future<Output = Result<T, BoxError>>,
{
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(role())
        })
        .expect("spawn thread")
}

fn join<T>(handle: JoinHandle<Result<T, BoxError>>) -> Result<T, BoxError> {
    handle.join().map_err(|_| BoxError::from("thread panicked"))?
}

/// One timed run: fresh queue, consumer, publisher, a report every second, summary.
fn run(
    url: &str,
    variant: Variant,
    duration: Duration,
    window: usize,
    broker_pid: Option<u32>,
) -> Result<Outcome, BoxError> {
    let counters = Arc::new(Counters::default());

    let (ready_tx, ready_rx) = mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let consumer = spawn_role(CONSUMER_THREAD, {
        let (url, counters) = (url.to_string(), counters.clone());
        move || consume(url, variant, counters, ready_tx, stop_rx)
    });
    if ready_rx.recv().is_err() {
        return Err(join(consumer).err().unwrap_or_else(|| "consumer stopped".into()));
    }
    let (ready_tx, ready_rx) = mpsc::channel();
    let publisher = spawn_role(PUBLISHER_THREAD, {
        let (url, counters) = (url.to_string(), counters.clone());
        move || publish(url, window, counters, ready_tx)
    });
    if ready_rx.recv().is_err() {
        return Err(join(publisher).err().unwrap_or_else(|| "publisher stopped".into()));
    }

    let cpu_before = CpuSample::take(broker_pid);
    let start = Instant::now();
    let (mut last_t, mut last_p, mut last_c) = (start, 0, 0);
    let mut tick = start;
    while tick - start < duration && !publisher.is_finished() && !consumer.is_finished() {
        tick += Duration::from_secs(1);
        std::thread::sleep(tick.saturating_duration_since(Instant::now()));
        let now = Instant::now();
        let p = counters.published.load(Ordering::Relaxed);
        let c = counters.consumed.load(Ordering::Relaxed);
        let dt = (now - last_t).as_secs_f64();
        println!(
            "Publish rate: {:.0} msgs/s Consume rate: {:.0} msgs/s",
            (p - last_p) as f64 / dt,
            (c - last_c) as f64 / dt
        );
        (last_t, last_p, last_c) = (now, p, c);
    }
    let elapsed = (last_t - start).as_secs_f64();
    let cpu_after = CpuSample::take(broker_pid);

    counters.stop.store(true, Ordering::Relaxed);
    let published = join(publisher);
    let _ = stop_tx.send(());
    let backlog = join(consumer)?;
    published?;

    let publish_rate = last_p as f64 / elapsed;
    let consume_rate = last_c as f64 / elapsed;
    println!("Summary:");
    println!("Average publish rate: {publish_rate:.0} msgs/s");
    println!("Average consume rate: {consume_rate:.0} msgs/s");
    cpu_before.report(&cpu_after, elapsed);
    println!("Messages in the queue at teardown: {backlog}");
    Ok(Outcome {
        publish_rate,
        consume_rate,
    })
}

/// Polls `fut` once with a waker that does nothing; `None` while it is pending.
/// A later `.await` polls it again with the task's real waker.
fn poll_once<F: Future + ?Sized>(fut: Pin<&mut F>) -> Option<F::Output> {
    match fut.poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

type PublishFuture<'a> = Pin<Box<dyn Future<Output = lapin::Result<PublisherConfirm>> + Send + 'a>>;

/// Publishes until told to stop, with at most `window` publishes whose frames are
/// not yet written to the socket.
async fn publish(url: String, window: usize, counters: Arc<Counters>, ready: mpsc::Sender<()>) -> Result<(), BoxError> {
    let conn = Connection::connect(&url, ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    let props = BasicProperties::default().with_delivery_mode(1);
    let mut in_flight: VecDeque<PublishFuture<'_>> = VecDeque::with_capacity(window);
    let mut written = 0u64;
    ready.send(())?;
    while !counters.stop.load(Ordering::Relaxed) {
        let mut fut: PublishFuture<'_> = Box::pin(channel.basic_publish(
            "".into(),
            QUEUE.into(),
            BasicPublishOptions::default(),
            &BODY,
            props.clone(),
        ));
        // The first poll hands the frames to lapin's I/O thread.
        match poll_once(fut.as_mut()) {
            Some(done) => {
                done?;
                written += 1;
            }
            None => in_flight.push_back(fut),
        }
        if in_flight.len() >= window {
            // Frames go out in order, so the oldest completes first.
            if let Some(oldest) = in_flight.pop_front() {
                oldest.await?;
                written += 1;
            }
            counters.published.store(written, Ordering::Relaxed);
        } else if in_flight.is_empty() {
            counters.published.store(written, Ordering::Relaxed);
        }
    }
    while let Some(f) = in_flight.pop_front() {
        f.await?;
    }
    drop(in_flight);
    conn.close(200, "OK".into()).await?;
    Ok(())
}

type AckFuture = Pin<Box<dyn Future<Output = lapin::Result<bool>> + Send>>;

/// Declares a fresh queue and counts its deliveries until `stop`; with manual
/// acks, acks every `ack_every`-th with `multiple`. An ack is handed to the I/O
/// thread without waiting for it to be written (at most one is outstanding), so
/// the consumer keeps reading meanwhile. Returns the messages left in the queue.
async fn consume(
    url: String,
    variant: Variant,
    counters: Arc<Counters>,
    ready: mpsc::Sender<()>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<u32, BoxError> {
    let conn = Connection::connect(&url, ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    ch.queue_delete(QUEUE.into(), QueueDeleteOptions::default()).await?;
    ch.queue_declare(QUEUE.into(), QueueDeclareOptions::default(), FieldTable::default())
        .await?;
    if variant.prefetch > 0 {
        ch.basic_qos(variant.prefetch, BasicQosOptions::default()).await?;
    }
    let options = BasicConsumeOptions {
        no_ack: variant.no_ack,
        ..BasicConsumeOptions::default()
    };
    let mut consumer = ch
        .basic_consume(QUEUE.into(), "".into(), options, FieldTable::default())
        .await?;
    ready.send(())?;

    let mut n = 0u64;
    let mut pending_ack: Option<AckFuture> = None;
    loop {
        let delivery = tokio::select! {
            biased;
            _ = &mut stop => break,
            d = consumer.next() => match d {
                Some(d) => d?,
                None => break,
            },
        };
        n += 1;
        counters.consumed.store(n, Ordering::Relaxed);
        if variant.ack_every > 0 && n.is_multiple_of(variant.ack_every) {
            if let Some(previous) = pending_ack.take() {
                previous.await?;
            }
            let acker = delivery.acker.clone();
            let mut ack: AckFuture = Box::pin(async move { acker.ack(BasicAckOptions { multiple: true }).await });
            match poll_once(ack.as_mut()) {
                Some(done) => {
                    done?;
                }
                None => pending_ack = Some(ack),
            }
        }
    }
    if let Some(previous) = pending_ack {
        previous.await?;
    }
    ch.basic_cancel(consumer.tag(), BasicCancelOptions::default()).await?;
    let backlog = ch.queue_delete(QUEUE.into(), QueueDeleteOptions::default()).await?;
    conn.close(200, "OK".into()).await?;
    Ok(backlog)
}

/// CPU time used so far by this process, each of its threads, and `BROKER_PID`.
struct CpuSample {
    /// (thread id, thread name, CPU seconds)
    threads: Vec<(u32, String, f64)>,
    process: f64,
    broker_pid: Option<(u32, f64)>,
    /// Busy CPU seconds of the whole machine (all processes, all cores).
    machine: f64,
}

/// Busy time of all CPUs from `/proc/stat`, in seconds.
fn machine_busy() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().next() else {
        return 0.0;
    };
    // cpu user nice system idle iowait irq softirq steal ...
    let v: Vec<f64> = cpu.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let busy: f64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| v.get(i)).sum();
    busy / CLOCK_TICKS
}

/// Parses `/proc/.../stat`: the command name and utime + stime in seconds.
fn read_stat(path: &str) -> Option<(String, f64)> {
    let stat = std::fs::read_to_string(path).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat[open + 1..close].to_string();
    // Fields after the name start at field 3 (state); utime and stime are 14, 15.
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((name, (utime + stime) / CLOCK_TICKS))
}

impl CpuSample {
    fn take(broker_pid: Option<u32>) -> Self {
        let mut threads = Vec::new();
        if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
            for entry in dir.flatten() {
                let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                    continue;
                };
                if let Some((name, cpu)) = read_stat(&format!("/proc/self/task/{tid}/stat")) {
                    threads.push((tid, name, cpu));
                }
            }
        }
        CpuSample {
            threads,
            process: read_stat("/proc/self/stat").map_or(0.0, |(_, cpu)| cpu),
            broker_pid: broker_pid.and_then(|pid| Some((pid, read_stat(&format!("/proc/{pid}/stat"))?.1))),
            machine: machine_busy(),
        }
    }

    /// Prints the CPU used between `self` and `later` as % of one core.
    fn report(&self, later: &CpuSample, elapsed: f64) {
        let groups = [BROKER_THREADS, PUBLISHER_THREAD, CONSUMER_THREAD];
        let mut used = [0.0f64; 3];
        let mut lapin_threads = Vec::new();
        let mut other = 0.0;
        for (tid, name, cpu) in &later.threads {
            let before = self
                .threads
                .iter()
                .find(|(t, _, _)| t == tid)
                .map_or(0.0, |(_, _, c)| *c);
            let delta = cpu - before;
            if name.starts_with(LAPIN_THREADS) {
                lapin_threads.push((*tid, delta));
            } else {
                match groups.iter().position(|g| name.starts_with(g)) {
                    Some(i) => used[i] += delta,
                    None => other += delta,
                }
            }
        }
        // Thread ids grow in creation order: the consumer connection is opened first.
        lapin_threads.sort_unstable_by_key(|(tid, _)| *tid);
        let pct = |secs: f64| secs / elapsed * 100.0;
        let mut parts = vec![format!("this process {:.0}%", pct(later.process - self.process))];
        let labels = ["broker runtime", "publisher task", "consumer task"];
        for (label, secs) in labels.iter().zip(used) {
            if secs > 0.0 {
                parts.push(format!("{label} {:.0}%", pct(secs)));
            }
        }
        match lapin_threads[..] {
            [(_, consumer), (_, publisher)] => {
                parts.push(format!("lapin I/O publisher {:.0}%", pct(publisher)));
                parts.push(format!("lapin I/O consumer {:.0}%", pct(consumer)));
            }
            ref all => parts.push(format!("lapin I/O {:.0}%", pct(all.iter().map(|(_, c)| c).sum()))),
        }
        if other > 0.0 {
            parts.push(format!("other {:.0}%", pct(other)));
        }
        let mut ours = later.process - self.process;
        if let (Some((pid, a)), Some((_, b))) = (self.broker_pid, later.broker_pid) {
            parts.push(format!("broker pid {pid} {:.0}%", pct(b - a)));
            ours += b - a;
        }
        // Anything else running on the machine competes for the same cores.
        parts.push(format!(
            "rest of machine {:.0}%",
            pct((later.machine - self.machine - ours).max(0.0))
        ));
        println!("CPU (% of one core): {}", parts.join(", "));
    }
}
