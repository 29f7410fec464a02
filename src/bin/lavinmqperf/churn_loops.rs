//! `bind-churn`, `channel-churn`, `connection-churn`, `consumer-churn` and
//! `queue-count`: one operation in a tight loop, reported once per second.

use std::time::{Duration, Instant};

use clap::Parser;

use crate::client::{Connection, Error, QueueDeclare, json_to_table};
use crate::exit_signal;
use crate::uri::{self, AmqpUri};
use lavinmq::amqp::codec::{FieldTable, Method, ShortStr};

/// Flags of `bind-churn`, `channel-churn`, `connection-churn` and `consumer-churn`.
#[derive(Parser, Debug, Clone)]
#[command(about = "Repeat one operation as fast as possible and report its rate")]
pub struct ChurnArgs {
    /// URI to connect to (amqp://, or amqps:// for TLS; add ?verify=none for a
    /// self-signed certificate)
    #[arg(long, default_value = "amqp://guest:guest@localhost")]
    pub uri: String,
    /// Seconds to run (0: until Ctrl-C)
    #[arg(short = 'z', long, default_value_t = 0)]
    pub time: u64,
}

/// Flags of `queue-count`.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "lavinmqperf queue-count",
    about = "Declare many queues and keep them until Ctrl-C (or -z seconds). Transient queues are \
             server-named and exclusive; durable ones are named lavinmqperf-queue-count-N and stay"
)]
pub struct QueueCountArgs {
    /// URI to connect to (amqp://, or amqps:// for TLS; add ?verify=none for a
    /// self-signed certificate)
    #[arg(long, default_value = "amqp://guest:guest@localhost")]
    pub uri: String,
    /// Number of queues to declare
    #[arg(short = 'q', long, default_value_t = 100)]
    pub queues: u64,
    /// Declare durable queues
    #[arg(short = 'D', long)]
    pub durable: bool,
    /// Queue arguments as a JSON object
    #[arg(long, default_value = "{}")]
    pub arguments: String,
    /// Don't wait for each queue.declare-ok (only the last one)
    #[arg(short = 'n', long)]
    pub no_wait: bool,
    /// Seconds to keep the queues after declaring them (0: until Ctrl-C)
    #[arg(short = 'z', long, default_value_t = 0)]
    pub time: u64,
}

fn parse_uri(s: &str) -> Result<AmqpUri, i32> {
    uri::parse(s).map_err(|e| {
        eprintln!("{e}");
        2
    })
}

/// Repeats `once` until `time` has passed (if any), `limit` operations are
/// done (if any) or Ctrl-C, printing the rate once per second and a summary.
async fn run_loop(
    things: &str,
    time: Option<Duration>,
    limit: Option<u64>,
    mut once: impl AsyncFnMut(u64) -> Result<(), Error>,
) -> Result<u64, Error> {
    let signal = exit_signal();
    tokio::pin!(signal);
    let start = Instant::now();
    let (mut total, mut window, mut window_start) = (0u64, 0u64, start);
    loop {
        if limit.is_some_and(|l| total >= l) {
            break;
        }
        tokio::select! {
            biased;
            () = &mut signal => break,
            r = once(total) => r?,
        }
        total += 1;
        window += 1;
        let now = Instant::now();
        let since = now - window_start;
        if since >= Duration::from_secs(1) {
            println!("{:.0} {things}/s", window as f64 / since.as_secs_f64());
            (window, window_start) = (0, now);
        }
        if time.is_some_and(|t| now - start >= t) {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "Summary: {total} {things} in {secs:.1}s, average {:.0} {things}/s",
        total as f64 / secs.max(f64::EPSILON)
    );
    Ok(total)
}

/// Runs `run` and turns its result into the exit code.
async fn finish(run: impl Future<Output = Result<(), Error>>) -> i32 {
    match run.await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

fn seconds(time: u64) -> Option<Duration> {
    (time > 0).then(|| Duration::from_secs(time))
}

/// A server-named, exclusive queue on channel 1 (not auto-delete: the
/// consumer churn would delete it with its first cancel).
async fn temp_queue(conn: &mut Connection) -> Result<String, Error> {
    let none = FieldTable::new();
    let declare = QueueDeclare {
        name: "",
        passive: false,
        durable: false,
        exclusive: true,
        auto_delete: false,
        arguments: &none,
    };
    conn.queue_declare(1, declare).await
}

/// Flags of `bind-churn`.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "lavinmqperf bind-churn",
    about = "Bind a queue to amq.direct with a new routing key each time, as fast as possible"
)]
pub struct BindChurnArgs {
    /// The common churn flags.
    #[command(flatten)]
    pub churn: ChurnArgs,
    /// Bind a durable queue, so that every binding is written to disk
    #[arg(long)]
    pub durable: bool,
    /// Unbind each binding after its bind-ok (two round trips per binding)
    /// instead of letting the bindings accumulate
    #[arg(long)]
    pub unbind: bool,
}

/// `lavinmqperf bind-churn`: bind one queue to amq.direct with a new routing
/// key each time, waiting for each bind-ok. As LavinMQ's tool does, the
/// bindings accumulate until the queue goes; `--unbind` removes each one at
/// once instead, so that the binding table stays small and every binding
/// costs two round trips. With `--durable` the queue is durable, so each
/// binding change is stored.
pub async fn bind_churn(args: BindChurnArgs) -> i32 {
    let uri = match parse_uri(&args.churn.uri) {
        Ok(u) => u,
        Err(code) => return code,
    };
    finish(async {
        let mut conn = Connection::connect(&uri, "lavinmqperf bind-churn").await?;
        conn.open_channel(1).await?;
        let salt: u32 = rand::random();
        let queue = if args.durable {
            let none = FieldTable::new();
            let name = format!("lavinmqperf-bind-churn-{salt:08x}");
            let declare = QueueDeclare {
                name: &name,
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments: &none,
            };
            conn.queue_declare(1, declare).await?
        } else {
            temp_queue(&mut conn).await?
        };
        run_loop("bindings", seconds(args.churn.time), None, async |seq| {
            let key = format!("bind-churn-{salt:08x}-{seq}");
            conn.queue_bind(1, &queue, "amq.direct", &key).await?;
            if args.unbind {
                conn.queue_unbind(1, &queue, "amq.direct", &key).await?;
            }
            Ok(())
        })
        .await?;
        if args.durable {
            conn.queue_delete(1, &queue).await?;
        }
        conn.close().await
    })
    .await
}

/// `lavinmqperf channel-churn`: open and close channels on one connection.
pub async fn channel_churn(args: ChurnArgs) -> i32 {
    let uri = match parse_uri(&args.uri) {
        Ok(u) => u,
        Err(code) => return code,
    };
    finish(async {
        let mut conn = Connection::connect(&uri, "lavinmqperf channel-churn").await?;
        run_loop("channels", seconds(args.time), None, async |_| {
            conn.open_channel(1).await?;
            conn.close_channel(1).await
        })
        .await?;
        conn.close().await
    })
    .await
}

/// `lavinmqperf connection-churn`: open and close connections.
pub async fn connection_churn(args: ChurnArgs) -> i32 {
    let uri = match parse_uri(&args.uri) {
        Ok(u) => u,
        Err(code) => return code,
    };
    finish(async {
        run_loop("connections", seconds(args.time), None, async |_| {
            Connection::connect(&uri, "lavinmqperf connection-churn")
                .await?
                .close()
                .await
        })
        .await
        .map(drop)
    })
    .await
}

/// `lavinmqperf consumer-churn`: basic.consume and basic.cancel on one queue.
pub async fn consumer_churn(args: ChurnArgs) -> i32 {
    let uri = match parse_uri(&args.uri) {
        Ok(u) => u,
        Err(code) => return code,
    };
    finish(async {
        let mut conn = Connection::connect(&uri, "lavinmqperf consumer-churn").await?;
        conn.open_channel(1).await?;
        let queue = temp_queue(&mut conn).await?;
        let none = FieldTable::new();
        run_loop("consumers", seconds(args.time), None, async |_| {
            let tag = conn.consume(1, &queue, true, &none).await?;
            conn.cancel(1, &tag).await
        })
        .await?;
        conn.close().await
    })
    .await
}

/// `lavinmqperf queue-count`: declare `--queues` queues, then keep them
/// until Ctrl-C or for `-z` seconds.
pub async fn queue_count(args: QueueCountArgs) -> i32 {
    let uri = match parse_uri(&args.uri) {
        Ok(u) => u,
        Err(code) => return code,
    };
    let arguments = match json_to_table(&args.arguments) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("--arguments: {e}");
            return 2;
        }
    };
    finish(async {
        let mut conn = Connection::connect(&uri, "lavinmqperf queue-count").await?;
        conn.open_channel(1).await?;
        let n = args.queues;
        let declared = run_loop("queues", None, Some(n), async |i| {
            let name = if args.durable {
                format!("lavinmqperf-queue-count-{i}")
            } else {
                String::new()
            };
            // Only the last declare waits, so errors still surface.
            if args.no_wait && i + 1 < n {
                let m = Method::QueueDeclare {
                    queue: ShortStr::from(name.as_str()),
                    passive: false,
                    durable: args.durable,
                    exclusive: !args.durable,
                    auto_delete: false,
                    nowait: true,
                    arguments: arguments.clone(),
                };
                conn.send(1, &m).await
            } else {
                let declare = QueueDeclare {
                    name: &name,
                    passive: false,
                    durable: args.durable,
                    exclusive: !args.durable,
                    auto_delete: false,
                    arguments: &arguments,
                };
                conn.queue_declare(1, declare).await.map(drop)
            }
        })
        .await?;
        if declared < n {
            // Interrupted while declaring.
            return conn.close().await;
        }
        match seconds(args.time) {
            Some(t) => {
                println!("{declared} queues declared, keeping them for {}s", t.as_secs());
                tokio::select! {
                    () = tokio::time::sleep(t) => {}
                    () = exit_signal() => {}
                }
            }
            None => {
                println!("{declared} queues declared, press Ctrl-C to exit");
                exit_signal().await;
            }
        }
        conn.close().await
    })
    .await
}
